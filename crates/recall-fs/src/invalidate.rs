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

use std::collections::HashMap;
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
}

impl Pending {
    pub fn sent(&mut self, key: &str) {
        *self.keys.entry(key.to_owned()).or_default() += 1;
    }

    pub fn answered(&mut self, key: &str) {
        if let Some(n) = self.keys.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.keys.remove(key);
            }
        }
    }

    /// May the session ask recall for `key` (no delete of it on its way)?
    pub fn clear(&self, key: &str) -> bool {
        !self.keys.contains_key(key)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
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
        Invalidator { tx: Some(tx), done, pending: Pending::default(), worker: Some(worker) }
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
        self.pending.answered(&a.0);
        a
    }

    /// The answers that arrived so far, without waiting.
    pub fn poll(&mut self) -> Vec<Answered> {
        let mut out = Vec::new();
        while let Ok(a) = self.done.try_recv() {
            out.push(self.note(a));
        }
        out
    }

    /// Wait until no delete of `key` is on its way (every recall call is
    /// bounded by the client's timeout, so this is too).
    pub fn settle(&mut self, key: &str) -> Vec<Answered> {
        let mut out = self.poll();
        while !self.pending.clear(key) {
            match self.done.recv() {
                Ok(a) => out.push(self.note(a)),
                // The worker is gone (it panicked): nothing is on its way.
                Err(_) => {
                    self.pending = Pending::default();
                    break;
                }
            }
        }
        out
    }

    /// Wait until every delete sent has been answered.
    pub fn settle_all(&mut self) -> Vec<Answered> {
        let mut out = self.poll();
        while !self.pending.is_empty() {
            match self.done.recv() {
                Ok(a) => out.push(self.note(a)),
                Err(_) => {
                    self.pending = Pending::default();
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
        p.answered("a");
        assert!(!p.clear("a"), "one of two still on its way");
        p.answered("a");
        assert!(p.clear("a"));
        assert!(!p.is_empty());
        p.answered("b");
        assert!(p.is_empty());
        // An answer for a key not sent (cannot happen) changes nothing.
        p.answered("c");
        assert!(p.is_empty());
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
        answered.extend(inv.settle("xfail"));
        assert!(inv.pending.clear("xfail"));
        assert!(seen.lock().unwrap().contains(&"xfail".to_owned()), "sent before settle returned");
        answered.extend(inv.settle_all());
        assert!(inv.pending.is_empty());
        assert_eq!(answered.len(), QUEUE * 2 + 1, "every delete answered once");
        assert_eq!(answered.iter().filter(|a| a.1.is_err()).count(), 1);
        drop(inv);
        assert_eq!(seen.lock().unwrap().len(), QUEUE * 2 + 1);
    }
}
