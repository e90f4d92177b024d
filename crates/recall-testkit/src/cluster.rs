//! A replicated recalld cluster for tests: N processes on loopback, one
//! Raft group or several (docs/design/replication.md).
//!
//! A node's client and Raft ports must be known to its peers before it
//! starts, so they are probed free (bound on port 0, then released); a
//! start that loses the race is retried on new ports. Every wait is a
//! bounded probe loop, never a fixed sleep.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::Recalld;

/// How long [`Cluster::leader`] probes before it gives up.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct Cluster {
    /// `None` once killed.
    pub nodes: Vec<Option<Recalld>>,
    /// Each node's client address (node id = index + 1).
    pub clients: Vec<SocketAddr>,
    /// Each node's Raft address.
    pub rafts: Vec<SocketAddr>,
}

fn free_ports(n: usize) -> Vec<u16> {
    // Held together so the n ports differ, then released for the nodes.
    let ls: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind port 0")).collect();
    ls.iter().map(|l| l.local_addr().expect("local addr").port()).collect()
}

impl Cluster {
    /// Start `n` nodes (node 1 bootstraps) with a 3 s request timeout.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, &[])
    }

    /// [`Cluster::start`], node `i` keeping its Raft log in `log_dirs[i]`
    /// (in memory when `log_dirs` is empty).
    pub fn start_with(n: usize, log_dirs: &[std::path::PathBuf]) -> Cluster {
        Cluster::start_with_args(n, log_dirs, &[])
    }

    /// [`Cluster::start_with`], every node also given `extra` flags (which
    /// may set `--cluster-timeout-ms` instead of the 3 s).
    pub fn start_with_args(n: usize, log_dirs: &[std::path::PathBuf], extra: &[&str]) -> Cluster {
        let mut last_err = String::new();
        for _attempt in 0..3 {
            let ports = free_ports(2 * n);
            let (client, raft) = ports.split_at(n);
            let peers: Vec<String> =
                (0..n).map(|i| format!("{}=127.0.0.1:{}/127.0.0.1:{}", i + 1, raft[i], client[i])).collect();
            let mut nodes = Vec::new();
            for (i, &port) in client.iter().enumerate() {
                let mut args = vec!["--cluster-node-id".to_string(), (i + 1).to_string()];
                for p in &peers {
                    args.push("--cluster-peer".into());
                    args.push(p.clone());
                }
                if !extra.contains(&"--cluster-timeout-ms") {
                    args.extend(["--cluster-timeout-ms".into(), "3000".into()]);
                }
                if let Some(d) = log_dirs.get(i) {
                    args.extend(["--cluster-log-dir".into(), d.display().to_string()]);
                }
                args.extend(extra.iter().map(|a| a.to_string()));
                if i == 0 {
                    args.push("--cluster-bootstrap".into());
                }
                match Recalld::builder().port(port).args(&args).start() {
                    Ok(r) => nodes.push(Some(r)),
                    Err(e) => {
                        last_err = e;
                        break;
                    }
                }
            }
            if nodes.len() == n {
                let at = |p: &u16| SocketAddr::from(([127, 0, 0, 1], *p));
                return Cluster {
                    nodes,
                    clients: client.iter().map(at).collect(),
                    rafts: raft.iter().map(at).collect(),
                };
            }
        }
        panic!("could not start the cluster: {last_err}");
    }

    /// The live node that says it leads and answers a read itself, probed
    /// until one does.
    pub fn leader(&self) -> usize {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            for (i, n) in self.nodes.iter().enumerate() {
                if n.is_some()
                    && stats(self.clients[i]).get("cluster_role").is_some_and(|r| r == "leader")
                    && one_line(self.clients[i], "get cluster-probe\r\n") == "END\r\n"
                {
                    return i;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no leader within {DEADLINE:?}");
    }

    /// Start one more node, empty, knowing only itself (id: its index + 1),
    /// to be added to the group with `cluster add-node`; its Raft log in
    /// `log_dir`, or in memory. Returns its index.
    pub fn start_empty_node(&mut self, log_dir: Option<&std::path::Path>) -> usize {
        self.start_empty_node_with_args(log_dir, &[])
    }

    /// [`Cluster::start_empty_node`], also given `extra` flags (the
    /// cluster's `--cluster-groups`; they may set `--cluster-timeout-ms`
    /// instead of the 3 s).
    pub fn start_empty_node_with_args(&mut self, log_dir: Option<&std::path::Path>, extra: &[&str]) -> usize {
        let i = self.nodes.len();
        let mut last_err = String::new();
        for _attempt in 0..3 {
            let ports = free_ports(2);
            let (client, raft) = (ports[0], ports[1]);
            let mut args = vec![
                "--cluster-node-id".to_string(),
                (i + 1).to_string(),
                "--cluster-peer".into(),
                format!("{}=127.0.0.1:{raft}/127.0.0.1:{client}", i + 1),
            ];
            if !extra.contains(&"--cluster-timeout-ms") {
                args.extend(["--cluster-timeout-ms".into(), "3000".into()]);
            }
            if let Some(d) = log_dir {
                args.extend(["--cluster-log-dir".into(), d.display().to_string()]);
            }
            args.extend(extra.iter().map(|a| a.to_string()));
            match Recalld::builder().port(client).args(&args).start() {
                Ok(r) => {
                    self.nodes.push(Some(r));
                    self.clients.push(SocketAddr::from(([127, 0, 0, 1], client)));
                    self.rafts.push(SocketAddr::from(([127, 0, 0, 1], raft)));
                    return i;
                }
                Err(e) => last_err = e,
            }
        }
        panic!("could not start node {}: {last_err}", i + 1);
    }

    /// Node `i`'s `RAFT_ADDR/CLIENT_ADDR` (as `cluster add-node` takes it).
    pub fn member(&self, i: usize) -> String {
        format!("{}/{}", self.rafts[i], self.clients[i])
    }

    /// kill -9 node `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut n) = self.nodes[i].take() {
            n.kill9();
        }
    }
}

/// The first line of the reply to `req` on a new connection ("" if none).
fn one_line(addr: SocketAddr, req: &str) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    if s.write_all(req.as_bytes()).is_err() {
        return String::new();
    }
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line
}

/// `stats` of one node, as name → value (empty if it does not answer).
pub fn stats(addr: SocketAddr) -> std::collections::HashMap<String, String> {
    let mut m = std::collections::HashMap::new();
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return m };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    if s.write_all(b"stats\r\n").is_err() {
        return m;
    }
    for line in BufReader::new(s).lines() {
        let Ok(line) = line else { break };
        if line == "END" {
            break;
        }
        let mut f = line.splitn(3, ' ');
        if let (Some("STAT"), Some(k), Some(v)) = (f.next(), f.next(), f.next()) {
            m.insert(k.to_string(), v.to_string());
        }
    }
    m
}

/// One request and its whole reply (a line, or a get's values and the
/// line after them) on a new connection ("" if none).
pub fn ask(addr: SocketAddr, req: &str) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    if s.write_all(req.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    read_reply(&mut BufReader::new(s), &mut out);
    out
}

/// The lines of a node's `cluster map` reply, without `END` and line
/// endings (`None` if it does not answer one).
pub fn map_lines(addr: SocketAddr) -> Option<Vec<String>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"cluster map\r\n").ok()?;
    let mut r = BufReader::new(s);
    let mut lines = Vec::new();
    // A line per node and group: bounded.
    for _ in 0..1000 {
        let mut line = String::new();
        if !matches!(r.read_line(&mut line), Ok(n) if n > 0) {
            return None;
        }
        match line.trim_end() {
            "END" => return Some(lines),
            l => lines.push(l.to_string()),
        }
    }
    None
}

/// Read one text reply into `out`: a line, or a get's `VALUE` blocks (data
/// included) up to the line after them. Whether the whole reply came.
pub fn read_reply(r: &mut BufReader<TcpStream>, out: &mut String) -> bool {
    loop {
        let mut line = String::new();
        if !matches!(r.read_line(&mut line), Ok(n) if n > 0) {
            return false;
        }
        out.push_str(&line);
        let Some(rest) = line.strip_prefix("VALUE ") else { return true };
        let len: usize = rest.split_whitespace().nth(2).and_then(|l| l.parse().ok()).expect("VALUE length");
        let mut data = vec![0u8; len + 2];
        if r.read_exact(&mut data).is_err() {
            return false;
        }
        out.push_str(&String::from_utf8_lossy(&data));
    }
}
