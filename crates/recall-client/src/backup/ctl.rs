//! The control connection to one server: `durable`, `snapshot`, `replay`,
//! `replay_delete`, `replay_batch`, and the fence write.
//!
//! Separate from the client's pooled connections because these replies
//! (`DURABLE ...`, `APPLIED`, `STALE`, `REPLAYED ...`) are recall extensions that the
//! general reply decoder does not know, and because the poller must be able
//! to talk to a server that the data path currently has in back-off. The
//! traffic is a few lines per poll, plus pipelined bursts per replay, so
//! a plain line reader is enough.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::error::{Error, Result, ServerName, TimeoutPhase};

/// The server's durability state (`durable` → `DURABLE <instance>
/// <watermark> <ok|recovering|off>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    pub instance: u64,
    pub watermark: u64,
    pub state: DurableState,
}

/// The third field of `DURABLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableState {
    /// Snapshots are running.
    Ok,
    /// Restarted recently: accepting replays within its grace period.
    Recovering,
    /// No `--data-dir`: nothing is durable, nothing to back up against.
    Off,
}

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
    rd: BufReader<OwnedReadHalf>,
    wr: Option<OwnedWriteHalf>,
    timeout: Duration,
    line: Vec<u8>,
}

impl Ctl {
    pub(crate) async fn connect(addr: &str, server: &ServerName, connect: Duration, timeout: Duration) -> Result<Ctl> {
        let s = match tokio::time::timeout(connect, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Error::io(server, e)),
            Err(_) => {
                return Err(Error::Timeout { server: server.clone(), phase: TimeoutPhase::Connect, after: connect })
            }
        };
        s.set_nodelay(true).map_err(|e| Error::io(server, e))?;
        let (rd, wr) = s.into_split();
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
        wr.write_all(bytes).await.map_err(|e| Error::io(&self.server, e))
    }

    /// One reply line, without its CRLF.
    async fn read_line(&mut self) -> Result<String> {
        self.line.clear();
        let n = self.rd.read_until(b'\n', &mut self.line).await.map_err(|e| Error::io(&self.server, e))?;
        if n == 0 {
            return Err(Error::closed(&self.server));
        }
        let l = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        Ok(String::from_utf8_lossy(l).into_owned())
    }

    async fn roundtrip(&mut self, req: &[u8]) -> Result<String> {
        let t = self.timeout;
        match tokio::time::timeout(t, async {
            self.send(req).await?;
            self.read_line().await
        })
        .await
        {
            Ok(r) => r,
            Err(_) => Err(self.timed_out(t)),
        }
    }

    fn refused(&self, line: &str) -> Error {
        if let Some(m) = line.strip_prefix("SERVER_ERROR ") {
            Error::Server { server: self.server.clone(), message: m.to_string() }
        } else if let Some(m) = line.strip_prefix("CLIENT_ERROR ") {
            Error::Client { server: self.server.clone(), message: m.to_string() }
        } else if line == "ERROR" || line.starts_with("ERROR ") {
            Error::UnknownCommand {
                server: self.server.clone(),
                message: line.trim_start_matches("ERROR").trim().into(),
            }
        } else {
            self.proto(format!("unexpected reply {line:?}"))
        }
    }

    pub(crate) async fn durable(&mut self) -> Result<Durable> {
        let line = self.roundtrip(b"durable\r\n").await?;
        self.parse_durable(&line)
    }

    /// `hello <client-id>`: register with the server's client registry (it
    /// persists the id and, after a crash, stays `recovering` until every
    /// registered client has sent `replay_done`). Answers like `durable`.
    /// An older server answers `ERROR`: [`Error::UnknownCommand`].
    pub(crate) async fn hello(&mut self, id: &str) -> Result<Durable> {
        let line = self.roundtrip(format!("hello {id}\r\n").as_bytes()).await?;
        self.parse_durable(&line)
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
        let line = self.roundtrip(req).await?;
        if line == "OK" {
            Ok(())
        } else {
            Err(self.refused(&line))
        }
    }

    fn parse_durable(&self, line: &str) -> Result<Durable> {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 4 || f[0] != "DURABLE" {
            return Err(self.refused(line));
        }
        let state = match f[3] {
            "ok" => DurableState::Ok,
            "recovering" => DurableState::Recovering,
            "off" => DurableState::Off,
            _ => return Err(self.proto(format!("bad durable state in {line:?}"))),
        };
        match (f[1].parse(), f[2].parse()) {
            (Ok(instance), Ok(watermark)) => Ok(Durable { instance, watermark, state }),
            _ => Err(self.proto(format!("bad DURABLE line {line:?}"))),
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
        let line = self.roundtrip(&req).await?;
        line.strip_prefix("HD c")
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| self.refused(&line))
    }

    /// Whether the server takes `replay_batch`. A server that does answers
    /// an empty batch with `REPLAYED 0 0 0`; an older one answers `ERROR`
    /// to the command line and again to the empty line after it.
    pub(crate) async fn knows_batches(&mut self) -> Result<bool> {
        let line = self.roundtrip(b"replay_batch 0 0\r\n\r\n").await?;
        if line.starts_with("REPLAYED ") {
            return Ok(true);
        }
        if line == "ERROR" {
            let t = self.timeout;
            let second = tokio::time::timeout(t, self.read_line()).await.unwrap_or_else(|_| Err(self.timed_out(t)))?;
            if second == "ERROR" {
                return Ok(false);
            }
            return Err(self.refused(&second));
        }
        Err(self.refused(&line))
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
                let _ = back.try_send(b);
            }
            wr.write_all(b"mn\r\n").await
        });
        let mut out = ReplayReplies::default();
        let read = tokio::time::timeout(budget, async {
            loop {
                let line = self.read_line().await?;
                if line == "MN" {
                    return Ok(());
                }
                let mut it =
                    line.strip_prefix("REPLAYED ").into_iter().flat_map(|l| l.split(' ')).map(str::parse::<u64>);
                match (it.next(), it.next(), it.next(), it.next()) {
                    (Some(Ok(a)), Some(Ok(s)), Some(Ok(e)), None) => {
                        out.applied += a;
                        out.stale += s;
                        out.errors += e;
                    }
                    _ => return Err(self.refused(&line)),
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
            let r = wr.write_all(&burst).await;
            (wr, r)
        });
        let mut out = ReplayReplies::default();
        let read = tokio::time::timeout(t, async {
            for _ in 0..n {
                let line = self.read_line().await?;
                match line.as_str() {
                    "APPLIED" => out.applied += 1,
                    "STALE" => out.stale += 1,
                    l if l.starts_with("SERVER_ERROR") => out.errors += 1,
                    _ => return Err(self.refused(&line)),
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
