//! Cluster mode's proxy hop: a node that does not lead a request's group
//! sends the request to the leader's client port and passes the leader's
//! reply back (docs/design/replication.md, "Forwarding").
//!
//! Each worker has its own [`Forwarder`]: a few idle connections per
//! leader and protocol, each opened with `cluster forwarded` (so the
//! leader never forwards again: one hop at most). A request goes out
//! unchanged, followed by a no-op whose reply marks the end of the
//! leader's (`recall_proto::forward`). The reply is copied to the client
//! in pieces as it arrives, so a forwarded multi-key get holds one piece,
//! not the whole reply. The whole hop has a deadline.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use recall_proto::forward::{binary_marker, ReplyFramer, TEXT_MARKER};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Idle connections kept per leader and protocol.
const IDLE_MAX: usize = 8;
/// Bytes read from the leader at a time.
const PIECE: usize = 16 * 1024;

/// One worker's connections to leaders.
pub struct Forwarder {
    timeout: Duration,
    idle: Mutex<HashMap<(String, bool), Vec<TcpStream>>>,
}

/// How a hop failed.
#[derive(Debug)]
pub enum Failed {
    /// Nothing reached the client: it gets this error line instead (the
    /// text of a `SERVER_ERROR`, or of a binary error's body).
    Reply(String),
    /// Part of the leader's reply reached the client, or the client's own
    /// socket failed: the connection must close (a half reply cannot be
    /// finished with an error).
    Close,
}

/// Where a hop broke, for its error line.
enum Broke {
    /// Connecting or the `cluster forwarded` handshake: the request was
    /// never sent.
    Unreachable(String),
    /// After the request was sent: it may have been applied.
    Lost(String),
    /// Writing to the client.
    Client,
}

impl Forwarder {
    /// `timeout` bounds a whole hop (connect, request, reply).
    pub fn new(timeout: Duration) -> Forwarder {
        Forwarder { timeout, idle: Mutex::new(HashMap::new()) }
    }

    /// Send `req` (one whole request: a text or meta line with its data,
    /// or a binary packet) to `leader`, and write its reply to `client`.
    pub async fn forward<C: AsyncWrite + Unpin>(
        &self,
        leader: &str,
        binary: bool,
        req: &[u8],
        client: &mut C,
    ) -> Result<(), Failed> {
        let mut wrote = false;
        let hop = tokio::time::timeout(self.timeout, self.hop(leader, binary, req, client, &mut wrote)).await;
        let broke = match hop {
            Ok(Ok(conn)) => {
                self.put_back(leader, binary, conn);
                return Ok(());
            }
            Ok(Err(b)) => b,
            Err(_) => Broke::Lost(format!("no reply in {} ms", self.timeout.as_millis())),
        };
        if wrote {
            return Err(Failed::Close);
        }
        Err(match broke {
            Broke::Client => Failed::Close,
            Broke::Unreachable(e) => {
                Failed::Reply(format!("SERVER_ERROR cluster leader {leader} unreachable ({e}); not applied"))
            }
            Broke::Lost(e) => Failed::Reply(format!(
                "SERVER_ERROR cluster forward to {leader} failed ({e}); the request may or may not have been applied"
            )),
        })
    }

    async fn hop<C: AsyncWrite + Unpin>(
        &self,
        leader: &str,
        binary: bool,
        req: &[u8],
        client: &mut C,
        wrote: &mut bool,
    ) -> Result<TcpStream, Broke> {
        let mut conn = match self.take(leader, binary) {
            Some(c) => c,
            None => connect(leader).await.map_err(|e| Broke::Unreachable(e.to_string()))?,
        };
        let lost = |e: std::io::Error| Broke::Lost(e.to_string());
        let (marker, mut framer) =
            if binary { (binary_marker(), ReplyFramer::binary()) } else { (TEXT_MARKER.to_vec(), ReplyFramer::text()) };
        conn.write_all(req).await.map_err(lost)?;
        conn.write_all(&marker).await.map_err(lost)?;
        let mut piece = vec![0u8; PIECE];
        let mut reply = Vec::with_capacity(PIECE);
        loop {
            let n = conn.read(&mut piece).await.map_err(lost)?;
            if n == 0 {
                return Err(Broke::Lost("the leader closed the connection".into()));
            }
            let done = framer.feed(&piece[..n], &mut reply).map_err(|e| Broke::Lost(e.to_string()))?;
            if !reply.is_empty() {
                *wrote = true;
                client.write_all(&reply).await.map_err(|_| Broke::Client)?;
                reply.clear();
            }
            if done {
                return Ok(conn);
            }
        }
    }

    fn take(&self, leader: &str, binary: bool) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.get_mut(&(leader.to_string(), binary)).and_then(Vec::pop)
    }

    fn put_back(&self, leader: &str, binary: bool, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let v = idle.entry((leader.to_string(), binary)).or_default();
        if v.len() < IDLE_MAX {
            v.push(conn);
        }
    }
}

/// A new connection to `leader`, marked as carrying forwarded requests.
async fn connect(leader: &str) -> std::io::Result<TcpStream> {
    let mut conn = TcpStream::connect(leader).await?;
    conn.set_nodelay(true)?;
    conn.write_all(b"cluster forwarded\r\n").await?;
    let mut ok = [0u8; 4];
    conn.read_exact(&mut ok).await?;
    if &ok != b"OK\r\n" {
        return Err(std::io::Error::other("the leader refused `cluster forwarded`"));
    }
    Ok(conn)
}
