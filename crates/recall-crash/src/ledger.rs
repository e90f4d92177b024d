//! The ledger of the crash harness, without I/O: for each key, the set of
//! states the server may legitimately show, updated as each operation
//! completes (acknowledged, refused, or in doubt), and the contradictions
//! an outcome reveals. See the harness's module docs for the rules.
//!
//! Each key's operations must be totally ordered for this to hold: the
//! harness runs every operation on a key, and its entry here, under the
//! key's lock, whichever client makes it (the key's durable task, or the
//! plain writer of the `--plain-writer` mode), so two writers of one key
//! are serialised exactly as the server applied them.

use std::collections::BTreeSet;

pub(crate) type State = Option<Vec<u8>>;

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Set(Vec<u8>),
    Add(Vec<u8>),
    Replace(Vec<u8>),
    Append(Vec<u8>),
    Prepend(Vec<u8>),
    Delete,
    Incr(u64),
    Decr(u64),
    /// `ms <key> ... E<cas>` with durability on: the server must refuse it
    /// (a client cannot choose a write's timestamp), so in the model it
    /// never applies, and an acknowledgement of it is a violation.
    SetWithE(Vec<u8>),
}

#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The server acknowledged the write (it changed the key).
    Acked { ts: u64, counter: Option<u64> },
    /// The server answered that nothing was changed.
    Refused,
    /// Failed in a way that leaves it in doubt.
    Unknown,
    /// Acknowledged to a plain memcached client, which keeps no backup: a
    /// later crash before a snapshot covers it may undo it, so from now on
    /// the states with and without it are both allowed (as for a write in
    /// doubt). Unlike an unknown outcome, it must apply to some state.
    Unprotected,
}

pub(crate) fn numeric(s: &[u8]) -> Option<u64> {
    std::str::from_utf8(s).ok()?.trim_end_matches(' ').parse().ok()
}

pub(crate) fn trim_padding(mut v: Vec<u8>) -> Vec<u8> {
    while v.last() == Some(&b' ') {
        v.pop();
    }
    v
}

impl Op {
    /// The state after this operation applies to `s`, or `None` if it
    /// would not apply (the condition fails).
    fn apply(&self, s: &State) -> Option<State> {
        match (self, s) {
            (Op::Set(v), _) => Some(Some(v.clone())),
            (Op::Add(v), None) => Some(Some(v.clone())),
            (Op::Replace(v), Some(_)) => Some(Some(v.clone())),
            (Op::Append(x), Some(cur)) => Some(Some([&cur[..], x].concat())),
            (Op::Prepend(x), Some(cur)) => Some(Some([&x[..], cur].concat())),
            (Op::Delete, Some(_)) => Some(None),
            (Op::Incr(d), Some(cur)) => numeric(cur).map(|n| Some(n.wrapping_add(*d).to_string().into_bytes())),
            (Op::Decr(d), Some(cur)) => numeric(cur).map(|n| Some(n.saturating_sub(*d).to_string().into_bytes())),
            _ => None,
        }
    }
}

/// One key's possible states, updated as its operations complete.
#[derive(Debug)]
pub(crate) struct KeyLedger {
    pub(crate) possible: BTreeSet<State>,
    /// The last few operations, for failure reports.
    pub(crate) recent: Vec<String>,
    pub(crate) acked: u64,
    pub(crate) unknown: u64,
    /// Writes acknowledged to the plain client (see [`Outcome::Unprotected`]).
    pub(crate) unprotected: u64,
    /// Timestamp of the newest acknowledged write: the next one must be
    /// higher (timestamps never go backwards, crashes included).
    pub(crate) last_ts: u64,
}

/// Past this many possible states a key stops being checked precisely
/// (a long run of in-doubt operations on one key); counted in the report.
pub(crate) const MAX_STATES: usize = 64;

impl KeyLedger {
    pub(crate) fn new() -> KeyLedger {
        // A fresh key: absent on the server.
        KeyLedger {
            possible: [None].into_iter().collect(),
            recent: Vec::new(),
            acked: 0,
            unknown: 0,
            unprotected: 0,
            last_ts: 0,
        }
    }

    /// Returns a violation message if the outcome contradicts the ledger.
    pub(crate) fn complete(&mut self, op: &Op, out: &Outcome) -> Option<String> {
        let desc = format!("{op:?} -> {out:?}");
        self.recent.push(desc.clone());
        if self.recent.len() > 8 {
            self.recent.remove(0);
        }
        match out {
            Outcome::Acked { counter, ts } => {
                self.acked += 1;
                if *ts <= self.last_ts {
                    return Some(format!("{desc}: timestamp {ts} not above the previous {}", self.last_ts));
                }
                self.last_ts = *ts;
                let mut next: BTreeSet<State> = self.possible.iter().filter_map(|s| op.apply(s)).collect();
                if let Some(n) = counter {
                    let want = Some(n.to_string().into_bytes());
                    let ok = next.contains(&want);
                    next = [want].into_iter().collect();
                    if !ok {
                        self.possible = next;
                        return Some(format!("{desc}: no possible state gives {n}"));
                    }
                }
                if next.is_empty() {
                    let msg = format!("{desc}: impossible in every possible state {:?}", show_set(&self.possible));
                    // Resynchronise on what the acknowledgement implies.
                    self.possible = match op {
                        Op::Set(v) | Op::Add(v) | Op::Replace(v) => [Some(v.clone())].into_iter().collect(),
                        Op::Delete => [None].into_iter().collect(),
                        _ => self.possible.clone(),
                    };
                    return Some(msg);
                }
                self.possible = next;
                None
            }
            Outcome::Refused => {
                let keep: BTreeSet<State> = self.possible.iter().filter(|s| op.apply(s).is_none()).cloned().collect();
                if keep.is_empty() {
                    return Some(format!(
                        "{desc}: refused, but it applies to every state {:?}",
                        show_set(&self.possible)
                    ));
                }
                self.possible = keep;
                None
            }
            Outcome::Unprotected => {
                self.unprotected += 1;
                let more: Vec<State> = self.possible.iter().filter_map(|s| op.apply(s)).collect();
                if more.is_empty() {
                    return Some(format!(
                        "{desc}: acknowledged, but impossible in every possible state {:?}",
                        show_set(&self.possible)
                    ));
                }
                self.possible.extend(more);
                None
            }
            Outcome::Unknown => {
                self.unknown += 1;
                let more: Vec<State> = self.possible.iter().filter_map(|s| op.apply(s)).collect();
                self.possible.extend(more);
                None
            }
        }
    }
}

pub(crate) fn show(s: &State) -> String {
    match s {
        None => "<absent>".into(),
        Some(v) => String::from_utf8_lossy(v).into_owned(),
    }
}

pub(crate) fn show_set(s: &BTreeSet<State>) -> Vec<String> {
    s.iter().map(show).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn acknowledged_writes_narrow_the_states() {
        let mut k = KeyLedger::new();
        assert_eq!(k.complete(&Op::Set(v("1")), &Outcome::Acked { ts: 5, counter: None }), None);
        assert_eq!(k.possible, [Some(v("1"))].into_iter().collect());
        assert_eq!(k.complete(&Op::Incr(2), &Outcome::Acked { ts: 6, counter: Some(3) }), None);
        assert_eq!(k.possible, [Some(v("3"))].into_iter().collect());
        assert!(k.complete(&Op::Add(v("x")), &Outcome::Refused).is_none(), "the key exists: add refused");
    }

    #[test]
    fn a_lost_write_is_a_violation() {
        let mut k = KeyLedger::new();
        k.complete(&Op::Set(v("a")), &Outcome::Acked { ts: 5, counter: None });
        // An add that succeeds means the server no longer had the key.
        let e = k.complete(&Op::Add(v("b")), &Outcome::Acked { ts: 6, counter: None });
        assert!(e.is_some_and(|m| m.contains("impossible")));
        let e = k.complete(&Op::Set(v("c")), &Outcome::Acked { ts: 6, counter: None });
        assert!(e.is_some_and(|m| m.contains("not above")), "timestamps never go backwards");
    }

    #[test]
    fn a_plain_clients_write_is_allowed_undone_but_must_apply() {
        let mut k = KeyLedger::new();
        k.complete(&Op::Set(v("a")), &Outcome::Acked { ts: 5, counter: None });
        assert_eq!(k.complete(&Op::Append(v("+p")), &Outcome::Unprotected), None);
        assert_eq!(k.possible, [Some(v("a")), Some(v("a+p"))].into_iter().collect());
        // A durable write on top of it narrows the states again.
        assert_eq!(k.complete(&Op::Set(v("b")), &Outcome::Acked { ts: 6, counter: None }), None);
        assert_eq!(k.possible, [Some(v("b"))].into_iter().collect());
        k.complete(&Op::Delete, &Outcome::Acked { ts: 7, counter: None });
        let e = k.complete(&Op::Append(v("+q")), &Outcome::Unprotected);
        assert!(e.is_some_and(|m| m.contains("impossible")), "an append acknowledged on a deleted key");
    }

    #[test]
    fn a_write_with_e_must_be_refused() {
        let mut k = KeyLedger::new();
        k.complete(&Op::Set(v("a")), &Outcome::Acked { ts: 5, counter: None });
        assert_eq!(k.complete(&Op::SetWithE(v("e")), &Outcome::Refused), None);
        assert_eq!(k.possible, [Some(v("a"))].into_iter().collect(), "a refusal changes nothing");
        let e = k.complete(&Op::SetWithE(v("e")), &Outcome::Acked { ts: 6, counter: None });
        assert!(e.is_some_and(|m| m.contains("impossible")), "an accepted E write is a violation");
    }

    #[test]
    fn writes_in_doubt_widen_the_states() {
        let mut k = KeyLedger::new();
        k.complete(&Op::Set(v("a")), &Outcome::Unknown);
        assert_eq!(k.possible, [None, Some(v("a"))].into_iter().collect());
        assert!(k.complete(&Op::Replace(v("b")), &Outcome::Refused).is_none(), "absent is possible");
        assert_eq!(k.possible, [None].into_iter().collect());
        assert!(k.complete(&Op::Delete, &Outcome::Refused).is_none());
        assert!(k.complete(&Op::Set(v("z")), &Outcome::Refused).is_some(), "a set always applies");
    }
}
