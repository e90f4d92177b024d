//! The metrics endpoint's HTTP/1.1 server: one request per connection,
//! answered and closed, which is what a Prometheus scrape is.
//!
//! Memory is bounded: at most [`MAX_CONNS`] connections at once, each
//! reading at most [`MAX_HEAD`] bytes of request head for at most
//! [`READ_TIMEOUT`], then writing its reply for at most [`WRITE_TIMEOUT`].
//! A connection past the bound closes the oldest one rather than being
//! closed itself: clients that stall mid-head or never read their reply
//! would otherwise hold every slot until their timeouts and turn every
//! scrape away meanwhile; this way a scrape, done in milliseconds, is
//! refused only if [`MAX_CONNS`] newer connections arrive while it runs.
//! The head is parsed by httparse.
//! Answers: `GET`/`HEAD /metrics` 200; another path 404; another method
//! 405; a head that does not parse 400; one too large 431.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use super::{Metrics, CONTENT_TYPE};

/// Scrapes served at once; Prometheus scrapes a target one at a time, so
/// this leaves room for a few scrapers and a curl.
const MAX_CONNS: usize = 16;
/// The longest request head read (a scrape's is a few hundred bytes).
const MAX_HEAD: usize = 8 << 10;
/// How long a connection may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the reply may take to go out.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve scrapes on `listener` until the runtime stops.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    // The live connections' tasks, oldest first.
    let mut live: VecDeque<AbortHandle> = VecDeque::with_capacity(MAX_CONNS + 1);
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and the like: the data port's connections matter
                // more; wait and try again.
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        live.retain(|t| !t.is_finished());
        if live.len() >= MAX_CONNS {
            // Too many at once: the oldest goes (see the module docs). The
            // aborted task drops its socket and buffers the next time this
            // runtime gets to it, a moment from now.
            if let Some(oldest) = live.pop_front() {
                oldest.abort();
            }
        }
        let metrics = metrics.clone();
        let task = tokio::spawn(async move {
            let _ = tokio::time::timeout(WRITE_TIMEOUT + READ_TIMEOUT, answer(stream, &metrics)).await;
        });
        live.push_back(task.abort_handle());
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    /// `GET /metrics` (`head`: `HEAD`, no body).
    Metrics {
        head: bool,
    },
    NotFound,
    BadMethod,
    BadRequest,
    TooLarge,
    /// The head is not complete yet.
    Partial,
}

/// Classify the bytes read so far.
fn classify(buf: &[u8]) -> Asked {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Asked::TooLarge,
        Ok(httparse::Status::Partial) => return Asked::Partial,
        Err(httparse::Error::TooManyHeaders) => return Asked::TooLarge,
        Err(_) => return Asked::BadRequest,
    }
    let head = match req.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Asked::BadMethod,
    };
    // The query string (Prometheus may add one) does not change the answer.
    match req.path.map(|p| p.split('?').next().unwrap_or(p)) {
        Some("/metrics") => Asked::Metrics { head },
        _ => Asked::NotFound,
    }
}

async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let asked = tokio::time::timeout(READ_TIMEOUT, async {
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(None);
            }
            let room = MAX_HEAD - buf.len();
            buf.extend_from_slice(&chunk[..n.min(room)]);
            match classify(&buf) {
                Asked::Partial => continue,
                a => return Ok(Some(a)),
            }
        }
    })
    .await;
    let asked = match asked {
        Ok(Ok(Some(a))) => a,
        // Closed before a whole head, or a read error: nothing to answer.
        Ok(Ok(None)) | Ok(Err(_)) => return Ok(()),
        Err(_) => Asked::BadRequest,
    };
    let reply = match asked {
        Asked::Metrics { head } => {
            let body = metrics.render();
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            if !head {
                r.extend_from_slice(body.as_bytes());
            }
            r
        }
        Asked::NotFound => plain("404 Not Found", "recalld serves its metrics at /metrics\n"),
        Asked::BadMethod => plain("405 Method Not Allowed", "only GET and HEAD\n"),
        // (A partial head is read on, never answered: the read loop
        // returns only a complete classification.)
        Asked::BadRequest | Asked::Partial => plain("400 Bad Request", "not an HTTP request\n"),
        Asked::TooLarge => plain("431 Request Header Fields Too Large", "request head too large\n"),
    };
    tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&reply).await?;
        stream.shutdown().await
    })
    .await
    .unwrap_or(Ok(()))
}

fn plain(status: &str, body: &str) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        r.push_str("Allow: GET, HEAD\r\n");
    }
    r.push_str("\r\n");
    r.push_str(body);
    r.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_classified() {
        let get = |p: &str| classify(format!("GET {p} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(get("/metrics"), Asked::Metrics { head: false });
        assert_eq!(get("/metrics?x=1"), Asked::Metrics { head: false });
        assert_eq!(get("/"), Asked::NotFound);
        assert_eq!(classify(b"HEAD /metrics HTTP/1.0\r\n\r\n"), Asked::Metrics { head: true });
        assert_eq!(classify(b"POST /metrics HTTP/1.1\r\n\r\n"), Asked::BadMethod);
        assert_eq!(classify(b"GET /metrics HTTP/1.1\r\nHost"), Asked::Partial);
        assert_eq!(classify(b"\x16\x03\x01\x02\x00"), Asked::BadRequest);
        assert_eq!(classify(b"stats\r\n"), Asked::BadRequest);
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD, b'a');
        assert_eq!(classify(&long), Asked::TooLarge);
    }
}
