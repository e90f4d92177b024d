//! "The limit": a server that does no cache work at all.
//!
//! It accepts connections, reads whatever arrives, and answers each complete
//! request line with a fixed, correctly shaped reply — `VALUE <key> 0 <N>`
//! plus N bytes and `END` for each `get` (one block per key, echoing the key
//! so the reply has the same size as a real hit), `STORED` for set-like
//! commands (after skipping their data block), `HD`/`VA` for meta commands.
//! Its syscall pattern is a real server's: an acceptor thread hands
//! connections round-robin to `threads` workers (as memcached does), each an
//! epoll loop (mio) that per batch does one `read`, parses every complete
//! request in it, and does one `write` of all the replies.
//!
//! Comparing recalld and memcached with this shows how much of a request's
//! cost is the kernel's (syscalls, TCP, wakeups) and how much is the
//! server's own work.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

const WAKER: Token = Token(usize::MAX);
const READ_BUF: usize = 64 * 1024;

/// Trivial server settings.
#[derive(Clone, Debug)]
pub struct TrivialConfig {
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Worker threads.
    pub threads: usize,
    /// Length of the value returned for every key.
    pub value_size: usize,
}

/// What a worker writes for each kind of request.
struct Replies {
    /// ` 0 <N>\r\n<N bytes>\r\n` (follows `VALUE <key>`).
    value_tail: Vec<u8>,
    /// `VA <N>\r\n<N bytes>\r\n`.
    meta_value: Vec<u8>,
}

impl Replies {
    fn new(n: usize) -> Self {
        let data = super::proto::value_pattern(n);
        let mut value_tail = format!(" 0 {n}\r\n").into_bytes();
        value_tail.extend_from_slice(&data);
        value_tail.extend_from_slice(b"\r\n");
        let mut meta_value = format!("VA {n}\r\n").into_bytes();
        meta_value.extend_from_slice(&data);
        meta_value.extend_from_slice(b"\r\n");
        Replies { value_tail, meta_value }
    }
}

/// Per-connection state.
struct Conn {
    stream: TcpStream,
    inbuf: Box<[u8]>,
    in_end: usize,
    out: Vec<u8>,
    out_pos: usize,
    /// Data-block bytes (including `\r\n`) still to skip.
    skip: usize,
    /// Reply owed once the data block has been skipped.
    owed: Option<&'static [u8]>,
    closing: bool,
}

/// Result of handling one request line.
enum Line {
    Ok,
    Quit,
}

/// Appends the reply for `line` (without `\r\n`) to `out`; for commands
/// with a data block sets `skip` and the reply owed after it.
fn handle_line(
    line: &[u8],
    replies: &Replies,
    out: &mut Vec<u8>,
    skip: &mut usize,
    owed: &mut Option<&'static [u8]>,
) -> Line {
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let Some(cmd) = tokens.next() else {
        out.extend_from_slice(b"ERROR\r\n");
        return Line::Ok;
    };
    let data_len = |tok: Option<&[u8]>| -> Option<usize> { std::str::from_utf8(tok?).ok()?.parse().ok() };
    match cmd {
        b"get" | b"gets" => {
            for key in tokens {
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                out.extend_from_slice(&replies.value_tail);
            }
            out.extend_from_slice(b"END\r\n");
        }
        b"mg" => out.extend_from_slice(&replies.meta_value),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            // <cmd> <key> <flags> <exptime> <bytes> ...
            match data_len(tokens.nth(3)) {
                Some(n) => {
                    *skip = n + 2;
                    *owed = Some(b"STORED\r\n");
                }
                None => out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n"),
            }
        }
        b"ms" => match data_len(tokens.nth(1)) {
            Some(n) => {
                *skip = n + 2;
                *owed = Some(b"HD\r\n");
            }
            None => out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n"),
        },
        b"delete" => out.extend_from_slice(b"DELETED\r\n"),
        b"md" | b"mn" => out.extend_from_slice(if cmd == b"md" { b"HD\r\n" } else { b"MN\r\n" }),
        b"version" => out.extend_from_slice(b"VERSION recall-bench-trivial\r\n"),
        b"quit" => return Line::Quit,
        _ => out.extend_from_slice(b"ERROR\r\n"),
    }
    Line::Ok
}

/// Consumes complete requests from `buf`, appending replies to `out`.
/// Returns the bytes consumed (a partial trailing line is left).
fn process(
    buf: &[u8],
    replies: &Replies,
    out: &mut Vec<u8>,
    skip: &mut usize,
    owed: &mut Option<&'static [u8]>,
    closing: &mut bool,
) -> usize {
    let mut at = 0;
    while at < buf.len() && !*closing {
        if *skip > 0 {
            let n = (*skip).min(buf.len() - at);
            *skip -= n;
            at += n;
            if *skip == 0 {
                if let Some(r) = owed.take() {
                    out.extend_from_slice(r);
                }
            }
            continue;
        }
        let Some(nl) = buf[at..].iter().position(|&b| b == b'\n') else {
            break;
        };
        let mut line = &buf[at..at + nl];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        at += nl + 1;
        if let Line::Quit = handle_line(line, replies, out, skip, owed) {
            *closing = true;
        }
    }
    at
}

impl Conn {
    /// Writes pending output once. Returns false if the socket is full.
    fn write_once(&mut self) -> io::Result<bool> {
        if self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Read → process → write cycles. Like memcached (`try_read_network`)
    /// and tokio, a read that does not fill the buffer is taken to have
    /// drained the socket, so a batch costs one `read` and one `write`.
    /// Returns false when the connection should be closed.
    fn on_ready(&mut self, replies: &Replies) -> io::Result<bool> {
        // Output left from a full socket goes first (backpressure: no
        // reading while replies are stuck).
        if !self.write_once()? {
            return Ok(true);
        }
        loop {
            let space = self.inbuf.len() - self.in_end;
            if space == 0 {
                // A single line longer than the buffer: not memcached.
                return Ok(false);
            }
            let n = match self.stream.read(&mut self.inbuf[self.in_end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.in_end += n;
            let used = process(
                &self.inbuf[..self.in_end],
                replies,
                &mut self.out,
                &mut self.skip,
                &mut self.owed,
                &mut self.closing,
            );
            self.inbuf.copy_within(used..self.in_end, 0);
            self.in_end -= used;
            if !self.write_once()? {
                return Ok(true); // wait for WRITABLE
            }
            if self.closing {
                return Ok(false);
            }
            if n < space {
                return Ok(true);
            }
        }
    }
}

fn worker(mut poll: Poll, rx: mpsc::Receiver<std::net::TcpStream>, replies: Replies) -> io::Result<()> {
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(1024);
    loop {
        match poll.poll(&mut events, None) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            if ev.token() == WAKER {
                while let Ok(s) = rx.try_recv() {
                    let mut stream = TcpStream::from_std(s);
                    let i = free.pop().unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    poll.registry().register(&mut stream, Token(i), Interest::READABLE | Interest::WRITABLE)?;
                    conns[i] = Some(Conn {
                        stream,
                        inbuf: vec![0u8; READ_BUF].into_boxed_slice(),
                        in_end: 0,
                        out: Vec::with_capacity(READ_BUF),
                        out_pos: 0,
                        skip: 0,
                        owed: None,
                        closing: false,
                    });
                }
                continue;
            }
            let i = ev.token().0;
            let Some(conn) = conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            let keep = conn.on_ready(&replies).unwrap_or(false);
            if !keep {
                if let Some(mut c) = conns[i].take() {
                    let _ = poll.registry().deregister(&mut c.stream);
                }
                free.push(i);
            }
        }
    }
}

/// Binds, prints `listening on ADDR` to stdout, and serves forever.
pub fn serve(cfg: &TrivialConfig) -> io::Result<()> {
    let listener = TcpListener::bind(cfg.listen)?;
    let local = listener.local_addr()?;
    let mut workers = Vec::new();
    for i in 0..cfg.threads.max(1) {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = mpsc::channel();
        let replies = Replies::new(cfg.value_size);
        std::thread::Builder::new().name(format!("trivial-{i}")).spawn(move || {
            if let Err(e) = worker(poll, rx, replies) {
                eprintln!("trivial-server worker {i}: {e}");
                std::process::exit(1);
            }
        })?;
        workers.push((tx, waker));
    }
    {
        let mut out = io::stdout().lock();
        writeln!(out, "listening on {local}")?;
        out.flush()?;
    }
    let mut next = 0;
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                eprintln!("trivial-server: accept: {e}");
                continue;
            }
        };
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        let (tx, waker) = &workers[next];
        next = (next + 1) % workers.len();
        if tx.send(stream).is_ok() {
            waker.wake()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (Vec<u8>, usize) {
        let replies = Replies::new(4);
        let mut out = Vec::new();
        let (mut skip, mut owed, mut closing) = (0, None, false);
        let used = process(input, &replies, &mut out, &mut skip, &mut owed, &mut closing);
        (out, used)
    }

    #[test]
    fn replies_are_memcached_shaped() {
        let (out, used) = run(b"get a bb\r\nset k 0 0 3\r\nxyz\r\nmg k v\r\nms k 2\r\nhi\r\ndelete k\r\nget par");
        assert_eq!(
            out,
            b"VALUE a 0 4\r\nabcd\r\nVALUE bb 0 4\r\nabcd\r\nEND\r\nSTORED\r\nVA 4\r\nabcd\r\nHD\r\nDELETED\r\n"
        );
        // The partial `get par` is left for the next read.
        assert_eq!(used, 58);
    }

    #[test]
    fn the_reply_waits_for_a_split_data_block() {
        let replies = Replies::new(4);
        let mut out = Vec::new();
        let (mut skip, mut owed, mut closing) = (0, None, false);
        let used = process(b"set k 0 0 5\r\nab", &replies, &mut out, &mut skip, &mut owed, &mut closing);
        assert_eq!((used, out.len(), skip), (15, 0, 5));
        process(b"cde\r\n", &replies, &mut out, &mut skip, &mut owed, &mut closing);
        assert_eq!(out, b"STORED\r\n");
    }
}
