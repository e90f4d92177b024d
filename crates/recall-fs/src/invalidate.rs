//! Invalidations off the session thread: deletes in recall for changes
//! made through the mount are sent by a worker thread with its own
//! connection, so a write, a create or a close never waits for recall.
//!
//! The rule that keeps this from serving stale content: the session asks
//! recall for a key only once every delete of that key it has sent has
//! been answered ([`Invalidator::settle`]), so a get can never overtake an
//! invalidation on its way, although the two travel on different
//! connections. [`Pending`] is the bookkeeping, pure; [`Invalidator`] runs
//! it against the worker.
//!
//! A delete recall did not acknowledge (recall away, the link cut) is not
//! forgotten: the key stays unacknowledged, the session does not ask
//! recall for it (its reads fall back to the backing file), and the delete
//! is sent again before any ask of that key and whenever recall answers
//! again, until recall acknowledges it. So a lost delete cannot bring an
//! old copy back even where the identity check alone could not tell (see
//! `crate::clock`, which makes that case not arise for stored values).
//! The unacknowledged keys are held in memory, 32 bytes each, for as long
//! as recall stays away.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::cached::Remote;

/// Deletes queued at most before a change waits for the worker: the queue
/// stays bounded when recall is slower than the changes.
const QUEUE: usize = 256;

/// The deletes sent and not yet answered, per key (a key changed twice in
/// a row has two on their way).
#[derive(Debug, Default)]
pub struct Pending {
    keys: HashMap<String, u32>,
    /// Keys whose last answered delete failed, and no later one succeeded.
    unacked: HashSet<String>,
}

impl Pending {
    pub fn sent(&mut self, key: &str) {
        *self.keys.entry(key.to_owned()).or_default() += 1;
    }

    /// A delete of `key` was answered: `ok` if recall acknowledged it.
    pub fn answered(&mut self, key: &str, ok: bool) {
        if let Some(n) = self.keys.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.keys.remove(key);
            }
        }
        if ok {
            self.unacked.remove(key);
        } else {
            self.unacked.insert(key.to_owned());
        }
    }

    /// No delete of `key` is on its way.
    pub fn settled(&self, key: &str) -> bool {
        !self.keys.contains_key(key)
    }

    /// May the session ask recall for `key`: no delete of it on its way,
    /// and every one sent acknowledged (or overtaken by an acknowledged one)?
    pub fn clear(&self, key: &str) -> bool {
        self.settled(key) && !self.unacked.contains(key)
    }

    /// Nothing on its way (unacknowledged keys may remain).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys to send again, not already on their way.
    pub fn to_retry(&self) -> Vec<String> {
        self.unacked.iter().filter(|k| self.settled(k)).cloned().collect()
    }

    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }
}

/// One delete's outcome, for the session's statistics and log.
pub type Answered = (String, Result<(), String>);

/// The worker and the session's side of it.
pub struct Invalidator {
    tx: Option<SyncSender<String>>,
    done: Receiver<Answered>,
    pending: Pending,
    worker: Option<JoinHandle<()>>,
    retries: u64,
}

impl Invalidator {
    /// Start the worker, deleting through `remote` (a connection of its
    /// own: the session's stays free for gets and sets).
    pub fn start(remote: Box<dyn Remote>) -> Invalidator {
        let (tx, rx) = mpsc::sync_channel::<String>(QUEUE);
        let (done_tx, done) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("recall-fs-invalidate".into())
            .spawn(move || {
                for key in rx {
                    let res = remote.delete(&key);
                    if done_tx.send((key, res)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn the invalidation thread");
        Invalidator { tx: Some(tx), done, pending: Pending::default(), worker: Some(worker), retries: 0 }
    }

    /// Queue a delete of `key`; waits only when the queue is full.
    pub fn send(&mut self, key: String) -> Vec<Answered> {
        self.pending.sent(&key);
        let mut answered = Vec::new();
        let Some(tx) = self.tx.clone() else { return answered };
        let mut key = key;
        // A full queue: collect answers while waiting, so the worker (which
        // sends them on an unbounded channel) is never the one blocked.
        loop {
            match tx.try_send(key) {
                Ok(()) => break,
                Err(mpsc::TrySendError::Full(k)) => {
                    key = k;
                    match self.done.recv() {
                        Ok(a) => answered.push(self.note(a)),
                        Err(_) => break,
                    }
                }
                Err(mpsc::TrySendError::Disconnected(_)) => break,
            }
        }
        answered.extend(self.poll());
        answered
    }

    fn note(&mut self, a: Answered) -> Answered {
        self.pending.answered(&a.0, a.1.is_ok());
        a
    }

    /// Deletes sent again so far.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Keys whose delete recall has not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.pending.unacked()
    }

    /// Send again every delete recall did not acknowledge (when it
    /// answers again); does not wait for the answers.
    pub fn retry_all(&mut self) -> Vec<Answered> {
        let mut out = Vec::new();
        for key in self.pending.to_retry() {
            self.retries += 1;
            out.extend(self.send(key));
        }
        out
    }

    /// The answers that arrived so far, without waiting.
    pub fn poll(&mut self) -> Vec<Answered> {
        let mut out = Vec::new();
        while let Ok(a) = self.done.try_recv() {
            out.push(self.note(a));
        }
        out
    }

    /// Wait until no delete of `key` is on its way, sending it once more
    /// if the last one was not acknowledged (every recall call is bounded
    /// by the client's timeout, so this is too). The flag: may recall be
    /// asked for `key` now?
    pub fn settle(&mut self, key: &str) -> (Vec<Answered>, bool) {
        let mut out = self.settle_until(|p| p.settled(key));
        if !self.pending.clear(key) {
            self.retries += 1;
            out.extend(self.send(key.to_owned()));
            out.extend(self.settle_until(|p| p.settled(key)));
        }
        (out, self.pending.clear(key))
    }

    /// Wait until every delete sent has been answered, sending the
    /// unacknowledged ones once more first.
    pub fn settle_all(&mut self) -> Vec<Answered> {
        let mut out = self.retry_all();
        out.extend(self.settle_until(Pending::is_empty));
        out
    }

    fn settle_until(&mut self, done: impl Fn(&Pending) -> bool) -> Vec<Answered> {
        let mut out = self.poll();
        while !done(&self.pending) {
            match self.done.recv() {
                Ok(a) => out.push(self.note(a)),
                // The worker is gone (it panicked): nothing is on its way,
                // and nothing sent later will be acknowledged.
                Err(_) => {
                    let unacked = std::mem::take(&mut self.pending.keys).into_keys();
                    self.pending.unacked.extend(unacked);
                    break;
                }
            }
        }
        out
    }
}

impl Drop for Invalidator {
    /// The worker sends what is queued, then ends.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_key_is_clear_once_every_delete_of_it_is_answered() {
        let mut p = Pending::default();
        assert!(p.clear("a"));
        p.sent("a");
        p.sent("a");
        p.sent("b");
        assert!(!p.clear("a"));
        p.answered("a", true);
        assert!(!p.clear("a"), "one of two still on its way");
        p.answered("a", true);
        assert!(p.clear("a"));
        assert!(!p.is_empty());
        p.answered("b", true);
        assert!(p.is_empty());
        // An answer for a key not sent (cannot happen) changes nothing.
        p.answered("c", true);
        assert!(p.is_empty());
    }

    #[test]
    fn a_failed_delete_keeps_its_key_unclear_until_one_is_acknowledged() {
        let mut p = Pending::default();
        p.sent("a");
        p.answered("a", false);
        assert!(p.is_empty() && p.settled("a"));
        assert!(!p.clear("a"), "lost: recall may still hold the old copy");
        assert_eq!(p.to_retry(), vec!["a".to_owned()]);
        p.sent("a");
        assert!(p.to_retry().is_empty(), "already on its way again");
        p.answered("a", false);
        assert!(!p.clear("a"));
        p.sent("a");
        p.answered("a", true);
        assert!(p.clear("a"));
        assert_eq!(p.unacked(), 0);
    }

    /// A remote that records the deletes and fails those of keys starting
    /// with `x`.
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Remote for Recorder {
        fn get(&self, _: &str) -> Result<Option<Vec<u8>>, String> {
            Ok(None)
        }
        fn set(&self, _: &str, _: &[u8], _: i32) -> Result<bool, String> {
            Ok(true)
        }
        fn delete(&self, key: &str) -> Result<(), String> {
            self.0.lock().unwrap().push(key.to_owned());
            if key.starts_with('x') {
                Err("refused".into())
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn settle_waits_for_the_deletes_and_reports_each() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut inv = Invalidator::start(Box::new(Recorder(seen.clone())));
        let mut answered = Vec::new();
        for i in 0..(QUEUE * 2) {
            answered.extend(inv.send(format!("k{i}")));
        }
        answered.extend(inv.send("xfail".into()));
        let (a, clear) = inv.settle("xfail");
        answered.extend(a);
        assert!(!clear, "recall never acknowledged it");
        assert!(inv.pending.settled("xfail"));
        assert_eq!(inv.retries(), 1, "sent once more before giving up");
        assert!(seen.lock().unwrap().contains(&"xfail".to_owned()), "sent before settle returned");
        let (a, clear) = inv.settle("k0");
        answered.extend(a);
        assert!(clear);
        answered.extend(inv.settle_all());
        assert!(inv.pending.is_empty());
        assert_eq!(inv.unacked(), 1);
        assert_eq!(answered.len(), QUEUE * 2 + 3, "every delete answered once, xfail three times");
        assert_eq!(answered.iter().filter(|a| a.1.is_err()).count(), 3);
        drop(inv);
        assert_eq!(seen.lock().unwrap().len(), QUEUE * 2 + 3);
    }
}
