//! Replay planning, without I/O: which entries a replay to an instance
//! must send (`needs_replay`, `replay_entries`), how they are encoded (one
//! `replay`/`replay_delete` command each for an older server, or cut into
//! `replay_batch` bodies of about a given size, from a cursor), and the
//! bookkeeping after a replay (`mark_replayed`, `mark_key_replayed`,
//! `drop_unreplayed`). The poller's `replay.rs` sends what these encode.

use recall_proto::replay::Record;

use super::{instance_of, Entry, WriteBackup, NIL, REPLAYED};

impl<'a> Entry<'a> {
    /// This entry as a `replay_batch` record. As with
    /// [`Entry::encode_replay`], an entry expired by `now` goes as a delete.
    pub fn replay_record(&self, now: u32) -> Record<'a> {
        match *self {
            Entry::Value { key, value, flags, exptime, ts } if exptime == 0 || exptime > now => {
                Record { tombstone: false, key, value, flags, exptime, ts }
            }
            Entry::Value { key, ts, .. } | Entry::Deleted { key, ts } => {
                Record { tombstone: true, key, value: b"", flags: 0, exptime: 0, ts }
            }
        }
    }

    /// Append this entry as a recall `replay`/`replay_delete` command (with
    /// a reply: the caller counts `APPLIED`/`STALE`). An entry whose
    /// absolute expiry is at or before `now` (client clock) is replayed as a
    /// delete with the same timestamp: it must still beat any older value
    /// of the key that the server kept, or that older value would reappear.
    pub fn encode_replay(&self, now: u32, out: &mut Vec<u8>) {
        use std::io::Write as _;
        match *self {
            Entry::Value { key, value, flags, exptime, ts } if exptime == 0 || exptime > now => {
                out.extend_from_slice(b"replay ");
                out.extend_from_slice(key);
                let _ = write!(out, " {flags} {exptime} {ts} {}\r\n", value.len());
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            Entry::Value { key, ts, .. } | Entry::Deleted { key, ts } => {
                out.extend_from_slice(b"replay_delete ");
                out.extend_from_slice(key);
                let _ = write!(out, " {ts}\r\n");
            }
        }
    }
}

/// A position in a replay; see [`WriteBackup::replay_cursor`].
#[derive(Debug, Clone, Copy)]
pub struct ReplayCursor {
    instance: u64,
    slot: u32,
    /// Still in the main list (then the replayed list).
    main: bool,
}

impl WriteBackup {
    /// Replayed entries that `instance` does not hold: replayed to another
    /// instance, or to none yet (no fence).
    fn replayed_to_other(&self, instance: u64) -> bool {
        self.rlen > 0 && (self.fence == 0 || instance_of(self.fence) != instance)
    }

    /// Whether some entry is not held by `instance`: acknowledged by another
    /// instance, or replayed to another one (or to none yet).
    pub fn needs_replay(&self, instance: u64) -> bool {
        let head_other = self.head != NIL && instance_of(self.slots[self.head as usize].ts()) != instance;
        let tail_other = self.tail != NIL && instance_of(self.slots[self.tail as usize].ts()) != instance;
        let replayed_other = self.replayed_to_other(instance);
        head_other || tail_other || replayed_other
    }

    /// The entries a replay to `instance` must send (see
    /// [`WriteBackup::needs_replay`]).
    pub fn replay_entries(&self, instance: u64) -> impl Iterator<Item = Entry<'_>> + '_ {
        let replayed_other = self.replayed_to_other(instance);
        let main = self.walk(self.head).filter(move |&s| instance_of(self.slots[s as usize].ts()) != instance);
        let rep = self.walk(if replayed_other { self.rhead } else { NIL });
        main.chain(rep).map(|s| self.entry(s))
    }

    /// Encode the replay of [`WriteBackup::replay_entries`] into `out`;
    /// returns the number of commands (one reply line each).
    pub fn encode_replay(&self, instance: u64, now: u32, out: &mut Vec<u8>) -> usize {
        let mut n = 0;
        for e in self.replay_entries(instance) {
            e.encode_replay(now, out);
            n += 1;
        }
        n
    }

    /// Where a replay to `instance` starts: a cursor over the same entries
    /// as [`WriteBackup::replay_entries`], for
    /// [`WriteBackup::encode_replay_batch`]. Valid while the log does not
    /// change (the caller keeps writers and trims out for the replay).
    pub fn replay_cursor(&self, instance: u64) -> ReplayCursor {
        ReplayCursor { instance, slot: self.head, main: true }
    }

    /// Append one `replay_batch` command to `out` holding the entries from
    /// `cur` on, about `batch_bytes` of records (a larger record goes
    /// alone), and move `cur` past them. Returns how many entries it holds;
    /// 0 when the cursor is at the end (nothing is appended). `body` is
    /// scratch space.
    pub fn encode_replay_batch(
        &self,
        cur: &mut ReplayCursor,
        now: u32,
        batch_bytes: usize,
        body: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> usize {
        use std::io::Write as _;
        body.clear();
        let mut count = 0;
        loop {
            if cur.slot == NIL {
                if !cur.main {
                    break;
                }
                // The main list is done; then the entries replayed to an
                // instance that is not this one.
                cur.main = false;
                let replayed_other = self.replayed_to_other(cur.instance);
                cur.slot = if replayed_other { self.rhead } else { NIL };
                continue;
            }
            let s = cur.slot;
            if cur.main && instance_of(self.slots[s as usize].ts()) == cur.instance {
                cur.slot = self.slots[s as usize].next;
                continue;
            }
            let r = self.entry(s).replay_record(now);
            if count > 0 && body.len() + r.encoded_len() > batch_bytes {
                break;
            }
            r.encode(body);
            count += 1;
            cur.slot = self.slots[s as usize].next;
        }
        if count > 0 {
            let _ = write!(out, "replay_batch {count} {}\r\n", body.len());
            out.extend_from_slice(body);
            out.extend_from_slice(b"\r\n");
        }
        count
    }

    /// After a complete replay to `instance`, followed by a write that
    /// returned `fence` (a timestamp of `instance`, drawn after every replay
    /// was answered): the replayed entries are held by `instance` and
    /// durable once its watermark reaches `fence`. Must see the log as it
    /// was encoded (the caller keeps writers out in between).
    pub fn mark_replayed(&mut self, instance: u64, fence: u64) {
        debug_assert_eq!(instance_of(fence), instance);
        let mut s = self.head;
        while s != NIL {
            let slot = self.slots[s as usize];
            if instance_of(slot.ts()) != instance {
                self.unlink(s);
                self.push_replayed(s);
            }
            s = slot.next;
        }
        if self.rlen > 0 {
            self.fence = fence;
        }
    }

    /// Put slot `s`, just unlinked from the main list, at the head of the
    /// replayed list.
    fn push_replayed(&mut self, s: u32) {
        let rhead = self.rhead;
        let sl = &mut self.slots[s as usize];
        sl.meta |= REPLAYED;
        sl.prev = NIL;
        sl.next = rhead;
        let at_ms = sl.at_ms;
        if rhead != NIL {
            self.slots[rhead as usize].prev = s;
        }
        self.rhead = s;
        self.rlen += 1;
        self.r_oldest_ms = self.r_oldest_ms.min(at_ms);
    }

    /// After one entry alone was replayed (a read found the server's copy
    /// older, `OL`) and a write returned `fence`: the entry is held by
    /// `fence`'s instance, like those of [`WriteBackup::mark_replayed`].
    /// Only if the key's entry still has timestamp `ts`, and the replayed
    /// list is empty or waits for a fence of the same instance (the shared
    /// fence is raised to the later one, which keeps the others a little
    /// longer; replayed entries waiting for another instance mean a full
    /// replay is due, which will send this entry too). Returns whether it
    /// moved.
    pub fn mark_key_replayed(&mut self, key: &[u8], ts: u64, fence: u64) -> bool {
        let instance = instance_of(fence);
        let (Some(_), s) = self.find(key) else { return false };
        let slot = self.slots[s as usize];
        if slot.ts() != ts || self.replayed_to_other(instance) {
            return false;
        }
        if !slot.is(REPLAYED) {
            self.unlink(s);
            self.push_replayed(s);
        }
        self.fence = self.fence.max(fence);
        true
    }

    /// Drop every entry that a replay to `instance` would send, without
    /// replaying: what a client without a backup would have. Used when
    /// replay is turned off (the negative control of the crash tests).
    pub fn drop_unreplayed(&mut self, instance: u64) -> usize {
        let victims: Vec<u32> = {
            let replayed_other = self.replayed_to_other(instance);
            let main = self.walk(self.head).filter(|&s| instance_of(self.slots[s as usize].ts()) != instance);
            main.chain(self.walk(if replayed_other { self.rhead } else { NIL })).collect()
        };
        for &s in &victims {
            self.index_remove_slot(s);
            self.unlink(s);
            self.release(s);
        }
        victims.len()
    }
}
