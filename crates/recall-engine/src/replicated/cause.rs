//! What the client asked for, beside each effect in the log ([`Cause`]).

use crate::op::{Op, WriteOp};

/// What the client asked for, carried in the log beside each effect: an
/// effect says what a mutation did (an `append` is logged as the whole
/// value), and every replica's `watch mutations` still names the command
/// as memcached does (`cmd=append`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
    Incr,
    Decr,
    Delete,
    Flush,
    /// touch, gat, mg `T`: the item with its new expiry.
    Touch,
}

impl Cause {
    const ALL: [Cause; 11] = [
        Cause::Set,
        Cause::Add,
        Cause::Replace,
        Cause::Append,
        Cause::Prepend,
        Cause::Cas,
        Cause::Incr,
        Cause::Decr,
        Cause::Delete,
        Cause::Flush,
        Cause::Touch,
    ];

    /// The cause of a storage command (a binary APPEND with a CAS is an
    /// append, as memcached logs it).
    pub fn of_write(w: &WriteOp<'_>) -> Cause {
        use recall_store::Mode;
        match (w.cas_command, w.mode) {
            (true, _) => Cause::Cas,
            (_, Mode::Set) => Cause::Set,
            (_, Mode::Add) => Cause::Add,
            (_, Mode::Replace) => Cause::Replace,
            (_, Mode::Append) => Cause::Append,
            (_, Mode::Prepend) => Cause::Prepend,
        }
    }

    /// The cause of a mutation; `None` for operations that propose nothing.
    pub fn of(op: &Op<'_>) -> Option<Cause> {
        match op {
            Op::Write(w) => Some(Cause::of_write(w)),
            Op::Delete(_) => Some(Cause::Delete),
            Op::Arith(a) if a.incr => Some(Cause::Incr),
            Op::Arith(_) => Some(Cause::Decr),
            Op::Flush { .. } => Some(Cause::Flush),
            Op::Read(r) if r.touch.is_some() => Some(Cause::Touch),
            Op::Read(_) | Op::Replay(_) => None,
        }
    }

    /// Its byte in a log entry.
    pub fn code(self) -> u8 {
        Cause::ALL.iter().position(|c| *c == self).map_or(0, |i| i as u8 + 1)
    }

    /// The inverse of [`Cause::code`]; `None` for a byte no version wrote.
    pub fn from_code(code: u8) -> Option<Cause> {
        Cause::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    /// memcached's name for the command (`cmd=` in `watch`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cause::Set => "set",
            Cause::Add => "add",
            Cause::Replace => "replace",
            Cause::Append => "append",
            Cause::Prepend => "prepend",
            Cause::Cas => "cas",
            Cause::Incr => "incr",
            Cause::Decr => "decr",
            Cause::Delete => "delete",
            Cause::Flush => "flush_all",
            Cause::Touch => "touch",
        }
    }

    /// Whether `watch mutations` logs it: storage commands only, as on a
    /// single node (incr, decr, delete and flush_all are not logged).
    pub(crate) fn is_store(self) -> bool {
        !matches!(self, Cause::Incr | Cause::Decr | Cause::Delete | Cause::Flush | Cause::Touch)
    }
}
