//! The control connection to one server: `durable`, `snapshot`, `replay`,
//! `replay_delete`, `replay_batch`, and the fence write.
//!
//! Separate from the client's pooled connections because these replies
//! (`DURABLE ...`, `APPLIED`, `STALE`, `REPLAYED ...`) are recall extensions that the
//! general reply decoder does not know, and because the poller must be able
//! to talk to a server that the data path currently has in back-off. The
//! traffic is a few lines per poll, plus pipelined bursts per replay, so
//! a plain line reader is enough; the lines are decoded by `ctl_reply.rs`,
//! which does no I/O.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::ctl_reply::Durable;
use crate::ctl_reply::{decode, CtlReply, Decoded, Refusal, MAX_LINE};
use recall_client::raw::{Connector, ReadHalf, WriteHalf};
use recall_client::{Error, Result, ServerName, TimeoutPhase};

/// What a replay burst got back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayReplies {
    pub applied: u64,
    pub stale: u64,
    /// `SERVER_ERROR` (out of memory) and the like: the entry is not on the
    /// server.
    pub errors: u64,
}

pub(crate) struct Ctl {
    server: ServerName,
    rd: BufReader<ReadHalf>,
    wr: Option<WriteHalf>,
    timeout: Duration,
    line: Vec<u8>,
}

impl Ctl {
    pub(crate) async fn connect(
        connector: &Connector,
        server: &ServerName,
        connect: Duration,
        timeout: Duration,
    ) -> Result<Ctl> {
        let (rd, wr) = connector.connect(server, connect).await?.into_split();
        Ok(Ctl { server: server.clone(), rd: BufReader::new(rd), wr: Some(wr), timeout, line: Vec::new() })
    }

    fn proto(&self, what: String) -> Error {
        Error::Protocol { server: self.server.clone(), message: what }
    }

    fn timed_out(&self, after: Duration) -> Error {
        Error::Timeout { server: self.server.clone(), phase: TimeoutPhase::Request, after }
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(wr) = self.wr.as_mut() else { return Err(Error::closed(&self.server)) };
        // Flushed for TLS, which holds written records until then.
        let sent = match wr.write_all(bytes).await {
            Ok(()) => wr.flush().await,
            Err(e) => Err(e),
        };
        sent.map_err(|e| Error::io(&self.server, e))
    }

    /// One reply. A line longer than the decoder accepts is not read to
    /// its end: the decoder refuses it from its first `MAX_LINE + 1` bytes.
    async fn read_reply(&mut self) -> Result<CtlReply> {
        self.line.clear();
        let limit = MAX_LINE as u64 + 1;
        let n = (&mut self.rd)
            .take(limit)
            .read_until(b'\n', &mut self.line)
            .await
            .map_err(|e| Error::io(&self.server, e))?;
        if n == 0 {
            return Err(Error::closed(&self.server));
        }
        match decode(&self.line) {
            Ok(Decoded::Reply(r, _)) => Ok(r),
            // The connection ended in the middle of a line.
            Ok(Decoded::Incomplete) => Err(Error::closed(&self.server)),
            Err(e) => Err(self.proto(e.to_string())),
        }
    }

    async fn roundtrip(&mut self, req: &[u8]) -> Result<CtlReply> {
        let t = self.timeout;
        match tokio::time::timeout(t, async {
            self.send(req).await?;
            self.read_reply().await
        })
        .await
        {
            Ok(r) => r,
            Err(_) => Err(self.timed_out(t)),
        }
    }

    /// A reply the command does not expect: the server's refusal, or a
    /// protocol error naming the line.
    fn refused(&self, reply: CtlReply) -> Error {
        let server = self.server.clone();
        match reply {
            CtlReply::Refused(Refusal::Server(message)) => Error::Server { server, message },
            CtlReply::Refused(Refusal::Client(message)) => Error::Client { server, message },
            CtlReply::Refused(Refusal::Unknown(message)) => Error::UnknownCommand { server, message },
            _ => {
                let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                self.proto(format!("unexpected reply {:?}", String::from_utf8_lossy(line)))
            }
        }
    }

    fn durable_reply(&self, reply: CtlReply) -> Result<Durable> {
        match reply {
            CtlReply::Durable(d) => Ok(d),
            other => Err(self.refused(other)),
        }
    }

    pub(crate) async fn durable(&mut self) -> Result<Durable> {
        let reply = self.roundtrip(b"durable\r\n").await?;
        self.durable_reply(reply)
    }

    /// `hello <client-id>`: register with the server's client registry (it
    /// persists the id and, after a crash, stays `recovering` until every
    /// registered client has sent `replay_done`). Answers like `durable`.
    /// An older server answers `ERROR`: [`Error::UnknownCommand`].
    pub(crate) async fn hello(&mut self, id: &str) -> Result<Durable> {
        let reply = self.roundtrip(format!("hello {id}\r\n").as_bytes()).await?;
        self.durable_reply(reply)
    }

    /// `replay_done <client-id>`: this client has nothing (more) to replay
    /// to the server's current instance.
    pub(crate) async fn replay_done(&mut self, id: &str) -> Result<()> {
        self.ok(format!("replay_done {id}\r\n").as_bytes()).await
    }

    /// `goodbye <client-id>`: a clean shutdown; the server stops waiting
    /// for this client after its next crash.
    pub(crate) async fn goodbye(&mut self, id: &str) -> Result<()> {
        self.ok(format!("goodbye {id}\r\n").as_bytes()).await
    }

    async fn ok(&mut self, req: &[u8]) -> Result<()> {
        match self.roundtrip(req).await? {
            CtlReply::Ok => Ok(()),
            other => Err(self.refused(other)),
        }
    }

    /// Ask for a snapshot now (it runs in the background; poll `durable`).
    pub(crate) async fn snapshot(&mut self) -> Result<()> {
        self.ok(b"snapshot\r\n").await
    }

    /// A write whose timestamp orders "after every reply read so far": `ms`
    /// of an empty, already expired value under a reserved key (it stores
    /// nothing visible, but draws a timestamp from the server's counter).
    pub(crate) async fn fence(&mut self, key: &[u8]) -> Result<u64> {
        let mut req = Vec::with_capacity(key.len() + 24);
        req.extend_from_slice(b"ms ");
        req.extend_from_slice(key);
        req.extend_from_slice(b" 0 c T-1\r\n\r\n");
        match self.roundtrip(&req).await? {
            CtlReply::Fence(ts) => Ok(ts),
            other => Err(self.refused(other)),
        }
    }

    /// Whether the server takes `replay_batch`. A server that does answers
    /// an empty batch with `REPLAYED 0 0 0`; an older one answers `ERROR`
    /// to the command line and again to the empty line after it.
    pub(crate) async fn knows_batches(&mut self) -> Result<bool> {
        match self.roundtrip(b"replay_batch 0 0\r\n\r\n").await? {
            CtlReply::Replayed { .. } => Ok(true),
            CtlReply::Refused(Refusal::Unknown(_)) => {
                let t = self.timeout;
                let second =
                    tokio::time::timeout(t, self.read_reply()).await.unwrap_or_else(|_| Err(self.timed_out(t)))?;
                // The empty line after the unknown command: memcached
                // 1.6.18 answers `ERROR`, current memcached `CLIENT_ERROR
                // bad command line format`. Either way, no batches.
                match second {
                    CtlReply::Refused(Refusal::Unknown(_) | Refusal::Client(_)) => Ok(false),
                    other => Err(self.refused(other)),
                }
            }
            other => Err(self.refused(other)),
        }
    }

    /// Be one lane of a replay: write every `replay_batch` command that
    /// arrives on `batches` (handing each buffer back on `back` for reuse),
    /// then `mn`, while adding up the `REPLAYED <applied> <stale> <errors>`
    /// replies until `MN`, all within `budget` (the whole replay's: a lane
    /// may wait for batches while another lane's server thread is slow). A
    /// batch refused whole (`CLIENT_ERROR`) fails the lane. Consumes the
    /// connection.
    pub(crate) async fn replay_lane(
        mut self,
        mut batches: tokio::sync::mpsc::Receiver<Vec<u8>>,
        back: tokio::sync::mpsc::Sender<Vec<u8>>,
        budget: Duration,
    ) -> Result<ReplayReplies> {
        let Some(mut wr) = self.wr.take() else { return Err(Error::closed(&self.server)) };
        let writer = tokio::spawn(async move {
            while let Some(b) = batches.recv().await {
                wr.write_all(&b).await?;
                wr.flush().await?;
                let _ = back.try_send(b);
            }
            wr.write_all(b"mn\r\n").await?;
            wr.flush().await
        });
        let mut out = ReplayReplies::default();
        let read = tokio::time::timeout(budget, async {
            loop {
                match self.read_reply().await? {
                    CtlReply::NoOp => return Ok(()),
                    CtlReply::Replayed { applied, stale, errors } => {
                        out.applied += applied;
                        out.stale += stale;
                        out.errors += errors;
                    }
                    other => return Err(self.refused(other)),
                }
            }
        })
        .await
        .unwrap_or_else(|_| Err(self.timed_out(budget)));
        if read.is_err() {
            // Stop the writer too (its receiver may never close otherwise).
            writer.abort();
        }
        read?;
        match writer.await {
            Ok(Ok(())) => Ok(out),
            Ok(Err(e)) => Err(Error::io(&self.server, e)),
            Err(e) => Err(Error::Internal(format!("replay writer task: {e}"))),
        }
    }

    /// Send a burst of `n` replay commands and count the replies. The burst
    /// is written by a separate task while this one reads: a server that
    /// stops reading when its output buffer is full would otherwise
    /// deadlock with a client that stops reading until it has written
    /// everything.
    pub(crate) async fn replay(&mut self, burst: Vec<u8>, n: usize) -> Result<ReplayReplies> {
        let Some(mut wr) = self.wr.take() else { return Err(Error::closed(&self.server)) };
        // Generous: a large replay is many round trips' worth of work.
        let t = self.timeout + Duration::from_micros(50 * n as u64);
        let writer = tokio::spawn(async move {
            let r = match wr.write_all(&burst).await {
                Ok(()) => wr.flush().await,
                Err(e) => Err(e),
            };
            (wr, r)
        });
        let mut out = ReplayReplies::default();
        let read = tokio::time::timeout(t, async {
            for _ in 0..n {
                match self.read_reply().await? {
                    CtlReply::Applied => out.applied += 1,
                    CtlReply::Stale(_) => out.stale += 1,
                    CtlReply::Refused(Refusal::Server(_)) => out.errors += 1,
                    other => return Err(self.refused(other)),
                }
            }
            Ok(())
        })
        .await;
        let read = read.unwrap_or_else(|_| Err(self.timed_out(t)));
        match writer.await {
            Ok((wr, Ok(()))) => self.wr = Some(wr),
            Ok((_, Err(e))) => return Err(Error::io(&self.server, e)),
            Err(e) => return Err(Error::Internal(format!("replay writer task: {e}"))),
        }
        read.map(|_| out)
    }
}
