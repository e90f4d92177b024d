//! Commands that manage the server rather than items: version, stats,
//! shutdown, cache_memlimit, lru_crawler, and recall's durability
//! registry (`durable`, `snapshot`, `hello`, `replay_done`, `goodbye`).
//! They mutate no item, so they do not pass the write path.

use recall_proto::text::{keys, Command, DebugTime};
use recall_proto::{msg, reply};

use crate::{Action, Engine, MEMCACHED_COMPAT_VERSION};

impl Engine {
    /// Execute an admin command (any command that is not an item operation).
    pub(crate) fn admin(&self, cmd: &Command<'_>, out: &mut Vec<u8>) -> Action {
        match cmd {
            Command::Version => {
                out.extend_from_slice(b"VERSION ");
                reply::line(out, MEMCACHED_COMPAT_VERSION.as_bytes());
            }
            Command::Verbosity | Command::AdminNoop => reply::line(out, b"OK"),
            // Without the test option this is memcached's release build: an
            // unknown command.
            Command::DebugTime(arg) => match (self.debug_clock(), arg) {
                (Some(c), Some(t)) => {
                    match *t {
                        DebugTime::Pause => c.pause(),
                        DebugTime::Resume => c.resume(),
                        DebugTime::Shift(secs) => c.shift(secs),
                    }
                    reply::line(out, b"OK")
                }
                _ => reply::line(out, b"ERROR"),
            },
            Command::Shutdown { bad_mode, .. } => {
                if !self.config.shutdown_enabled {
                    reply::line(out, msg::SHUTDOWN_DISABLED.as_bytes());
                } else if *bad_mode {
                    reply::line(out, msg::SHUTDOWN_MODE.as_bytes());
                } else {
                    return Action::Shutdown;
                }
            }
            Command::Stats { args } => self.stats(args, out),
            Command::CacheMemlimit { mb } => {
                if *mb < 8 {
                    reply::line(out, b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m");
                } else {
                    self.store.set_mem_limit((*mb as usize).saturating_mul(1 << 20), self.now());
                    reply::line(out, b"OK");
                }
            }
            Command::LruCrawler { args } => self.lru_crawler(args, out),
            Command::Watch { args } => {
                if !self.config.watch_enabled {
                    reply::line(out, b"CLIENT_ERROR watch commands not allowed");
                    return Action::Continue;
                }
                let mut streams = 0;
                for t in keys(args) {
                    let Some(s) = crate::watch::stream_named(t) else {
                        reply::line(out, b"ERROR");
                        return Action::Continue;
                    };
                    streams |= s;
                }
                return Action::Watch(if streams == 0 { crate::watch::FETCHERS } else { streams });
            }
            Command::ClusterMap => match self.cluster_map() {
                Some(map) => map.render(out),
                None => reply::line(out, b"SERVER_ERROR not in cluster mode"),
            },
            // The session takes `cluster forwarded`; without it (a caller
            // that skipped the session) there is nothing to do.
            Command::ClusterForwarded => reply::line(out, b"OK"),
            Command::Durable => self.durable_line(out),
            // memcached's replies: OK, or the loader's error line as is.
            Command::RefreshCerts => match self.process.get().and_then(|p| p.refresh_certs(self.now())) {
                None => reply::line(out, b"Error TLS not enabled"),
                Some(Ok(())) => reply::line(out, b"OK"),
                Some(Err(e)) => reply::line(out, e.as_bytes()),
            },
            Command::Snapshot => {
                if self.durability.is_enabled() {
                    self.durability.request_snapshot();
                    reply::line(out, b"OK");
                } else {
                    reply::line(out, b"SERVER_ERROR durability is off (start recalld with --data-dir)");
                }
            }
            Command::Hello { id } => match self.durability.hello(id) {
                Ok(()) => self.durable_line(out),
                Err(_) => reply::line(out, b"SERVER_ERROR cannot save the client registry"),
            },
            // The session keeps the switch (it is per connection).
            Command::Timestamps { .. } => reply::line(out, b"OK"),
            Command::ReplayDone { id } => {
                self.durability.replay_done(id);
                reply::line(out, b"OK");
            }
            Command::Goodbye { id } => match self.durability.goodbye(id) {
                Ok(()) => reply::line(out, b"OK"),
                Err(_) => reply::line(out, b"SERVER_ERROR cannot save the client registry"),
            },
            // Item operations are lowered in `text.rs` and `meta.rs`.
            _ => reply::line(out, b"SERVER_ERROR internal: an item command reached the admin path"),
        }
        Action::Continue
    }

    /// `cluster status | add-node | remove-node | transfer-leader`. They
    /// change the group's membership through its log, not items, so they
    /// do not pass the write path; a node that does not lead marks `cx`
    /// and the session forwards the request to the leader, as it forwards
    /// a write.
    pub(crate) fn cluster_admin(
        &self,
        cmd: &recall_proto::cluster_admin::AdminCmd<'_>,
        cx: &mut crate::Cx<'_>,
        out: &mut Vec<u8>,
    ) {
        use crate::{AdminReply, Parked, Wait};
        let Some(rep) = self.replicator() else {
            return reply::line(out, b"SERVER_ERROR not in cluster mode");
        };
        let idle = if matches!(cx.wait, Wait::Block) { Wait::Block } else { Wait::Await };
        // Parked before: its reply came (a change runs once).
        if let Wait::Resolved(Parked::Admin { reply: Some(r), .. }) = std::mem::replace(&mut cx.wait, idle) {
            return out.extend_from_slice(&r);
        }
        match rep.admin(cmd, out) {
            Ok(AdminReply::Done) => {}
            // The change waits for the group: the request parks on it.
            Ok(AdminReply::Later(ticket)) if matches!(cx.wait, Wait::Await) => {
                cx.wait = Wait::Parked(Parked::Admin { ticket, reply: None });
            }
            Ok(AdminReply::Later(ticket)) => {
                if let Parked::Admin { reply: Some(r), .. } =
                    (Parked::Admin { ticket, reply: None }).block(rep.timeout())
                {
                    out.extend_from_slice(&r);
                }
            }
            Err(r) => {
                // A membership command runs on the leader of the group it
                // names, group 0 without one (`Replicator::admin`).
                if matches!(r, crate::op::Refusal::NotLeader(_)) {
                    cx.not_leader = Some(cmd.group.map_or(0, usize::from));
                }
                reply::line(out, r.line());
            }
        }
    }

    /// The fields memcached's metadump and `me` print after the key:
    /// ` exp=.. la=.. cas=.. fetch=.. cls=1 size=..` and CRLF (`exp` and
    /// `la` differ between the two: absolute in metadump, relative in me).
    pub(crate) fn item_fields(&self, out: &mut Vec<u8>, v: &recall_store::ItemView<'_>, exp: i64, la: u64) {
        use std::io::Write as _;
        let fetched = if v.fetched { "yes" } else { "no" };
        let size = self.store.footprint(v.key.len(), v.value.len());
        let _ = write!(out, " exp={exp} la={la} cas={} fetch={fetched} cls=1 size={size}\r\n", v.cas);
    }

    fn lru_crawler(&self, args: &[u8], out: &mut Vec<u8>) {
        let mut it = keys(args);
        match (it.next(), it.next()) {
            (Some(b"metadump"), Some(_)) if !self.config.dump_enabled => {
                reply::line(out, b"ERROR metadump not allowed")
            }
            (Some(b"metadump"), Some(_)) => {
                let now = self.now();
                self.store.for_each(now, |v| {
                    out.extend_from_slice(b"key=");
                    crate::watch::uri_encode(out, v.key);
                    let exp = if v.exptime == 0 { -1 } else { v.exptime as i64 };
                    self.item_fields(out, v, exp, v.atime as u64);
                });
                out.extend_from_slice(b"END\r\n");
            }
            (Some(b"crawl"), Some(_)) => {
                self.store.reclaim_expired(self.now(), usize::MAX);
                reply::line(out, b"OK");
            }
            (Some(b"enable" | b"disable"), None) | (Some(b"sleep" | b"tocrawl"), Some(_)) => reply::line(out, b"OK"),
            _ => reply::line(out, b"ERROR"),
        }
    }
}
