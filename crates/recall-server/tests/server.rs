//! Behaviour of the real recalld binary: limits, failures, transports.

mod common;

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{read_until, recalld, roundtrip};

fn stat(s: &mut std::net::TcpStream, name: &str) -> u64 {
    let r = roundtrip(s, b"stats\r\n", b"END\r\n");
    let text = String::from_utf8(r).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no stat {name}"))
}

fn wait_exit(child: &mut std::process::Child, within: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::yield_now();
    }
    None
}

#[test]
fn connection_limit_rejects_with_memcached_error() {
    let s = recalld(&["-c", "2"]);
    let mut a = s.connect();
    let mut b = s.connect();
    assert!(roundtrip(&mut a, b"version\r\n", b"\r\n").starts_with(b"VERSION"));
    assert!(roundtrip(&mut b, b"version\r\n", b"\r\n").starts_with(b"VERSION"));
    let mut c = s.connect();
    let (got, closed) = read_until(&mut c, Duration::from_secs(10), |_| false);
    assert_eq!(got, b"ERROR Too many open connections\r\n");
    assert!(closed);
    // Existing connections are unaffected, and a slot frees up on close.
    drop(b);
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let mut d = s.connect();
        let r = roundtrip(&mut d, b"version\r\n", b"\r\n");
        if r.starts_with(b"VERSION") {
            break;
        }
        assert!(Instant::now() < end, "slot never freed");
    }
    assert!(stat(&mut a, "rejected_connections") >= 1);
}

#[test]
fn idle_connections_are_closed() {
    let s = recalld(&["-o", "idle_timeout=1"]);
    let mut c = s.connect();
    assert!(roundtrip(&mut c, b"version\r\n", b"\r\n").starts_with(b"VERSION"));
    let (_, closed) = read_until(&mut c, Duration::from_secs(10), |_| false);
    assert!(closed, "idle connection should be closed");
    let mut d = s.connect();
    assert!(stat(&mut d, "idle_kicks") >= 1);
}

#[test]
fn sigterm_and_sigint_stop_cleanly() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut s = recalld(&[]);
        let mut c = s.connect();
        assert!(roundtrip(&mut c, b"version\r\n", b"\r\n").starts_with(b"VERSION"));
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(s.pid() as i32, sig) };
        let st = wait_exit(s.child(), Duration::from_secs(10)).expect("recalld did not exit");
        assert!(st.success(), "exit status {st:?}");
    }
}

#[test]
fn shutdown_command_only_with_dash_a() {
    let mut s = recalld(&["-A"]);
    let mut c = s.connect();
    c.write_all(b"shutdown\r\n").unwrap();
    let st = wait_exit(s.child(), Duration::from_secs(10)).expect("recalld did not exit");
    assert!(st.success());
}

#[test]
fn full_memory_with_dash_m_refuses_and_keeps_data() {
    let s = recalld(&["-M", "-m", "2", "-I", "1m"]);
    let mut c = s.connect();
    let value = vec![b'v'; 10_000];
    let mut stored = 0;
    let mut refused = false;
    for i in 0..1000 {
        let mut req = format!("set key{i} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        let r = roundtrip(&mut c, &req, b"\r\n");
        if r == b"SERVER_ERROR out of memory storing object\r\n" {
            refused = true;
            break;
        }
        assert_eq!(r, b"STORED\r\n");
        stored += 1;
    }
    assert!(refused, "memory never filled");
    assert!(stored > 50);
    // Nothing that was acknowledged was evicted.
    for i in 0..stored {
        let r = roundtrip(&mut c, format!("get key{i}\r\n").as_bytes(), b"END\r\n");
        assert!(r.len() > value.len(), "key{i} lost");
    }
    assert_eq!(stat(&mut c, "evictions"), 0);
}

#[test]
fn eviction_keeps_memory_bounded() {
    let s = recalld(&["-m", "2"]);
    let mut c = s.connect();
    let value = vec![b'v'; 1000];
    let mut batch = Vec::new();
    for i in 0..20_000 {
        batch.extend_from_slice(format!("set key{i} 0 0 {} noreply\r\n", value.len()).as_bytes());
        batch.extend_from_slice(&value);
        batch.extend_from_slice(b"\r\n");
    }
    c.write_all(&batch).unwrap();
    assert!(roundtrip(&mut c, b"mn\r\n", b"MN\r\n").ends_with(b"MN\r\n"));
    assert!(stat(&mut c, "bytes") <= 2 << 20);
    assert!(stat(&mut c, "evictions") > 10_000);
    let r = roundtrip(&mut c, b"get key19999\r\n", b"END\r\n");
    assert!(r.starts_with(b"VALUE key19999"), "newest item must be present");
}

/// Each eviction policy (`-o policy=`) serves a workload under memory
/// pressure: memory stays bounded, the newest item and a hot key read
/// between the writes survive, and `stats settings` names the policy.
#[test]
fn every_eviction_policy_runs_a_workload() {
    for policy in ["adaptive", "slru", "sieve", "s3fifo", "prioritized", "prioritized-adaptive"] {
        let s = recalld(&["-m", "2", "-o", &format!("policy={policy}")]);
        let mut c = s.connect();
        let settings = String::from_utf8(roundtrip(&mut c, b"stats settings\r\n", b"END\r\n")).unwrap();
        assert!(settings.contains(&format!("STAT recall_policy {policy}\r\n")), "{settings}");
        roundtrip(&mut c, b"set hot 0 0 3\r\nhot\r\n", b"\r\n");
        let value = vec![b'v'; 1000];
        for chunk in 0..20 {
            let mut batch = Vec::new();
            for i in chunk * 500..(chunk + 1) * 500 {
                batch.extend_from_slice(format!("set key{i} 0 0 {} noreply\r\n", value.len()).as_bytes());
                batch.extend_from_slice(&value);
                batch.extend_from_slice(b"\r\n");
            }
            c.write_all(&batch).unwrap();
            let r = roundtrip(&mut c, b"get hot\r\n", b"END\r\n");
            assert_eq!(r, b"VALUE hot 0 3\r\nhot\r\nEND\r\n", "{policy}: the hot key was evicted after {chunk} rounds");
        }
        assert!(stat(&mut c, "bytes") <= 2 << 20, "{policy}");
        assert!(stat(&mut c, "evictions") > 5_000, "{policy}");
        let r = roundtrip(&mut c, b"get key9999\r\n", b"END\r\n");
        assert!(r.starts_with(b"VALUE key9999"), "{policy}: the newest item must be present");
        let r = roundtrip(&mut c, b"get key0\r\n", b"END\r\n");
        assert_eq!(r, b"END\r\n", "{policy}: the oldest item must be gone");
    }
}

/// The prioritized policies report their classes in `stats` and `stats
/// items`, in memcached's per-segment naming (`number_hot` ->
/// `number_permanent`, the permanent class's protected part
/// `number_permanent_protected`), and a burst of temporary items evicts
/// only temporary-low ones.
#[test]
fn prioritized_policies_report_per_class_stats() {
    for policy in ["prioritized", "prioritized-adaptive"] {
        let s = recalld(&["-m", "2", "-o", &format!("policy={policy},prio_shares=30-40-30,prio_threshold=2")]);
        let mut c = s.connect();
        let settings = String::from_utf8(roundtrip(&mut c, b"stats settings\r\n", b"END\r\n")).unwrap();
        assert!(settings.contains("STAT recall_prio_shares 30-40-30\r\n"), "{settings}");
        for i in 0..100 {
            roundtrip(&mut c, format!("set perm{i} 0 0 3\r\nabc\r\n").as_bytes(), b"\r\n");
            roundtrip(&mut c, format!("get perm{i}\r\n").as_bytes(), b"END\r\n");
            roundtrip(&mut c, format!("set hot{i} 0 3600 3\r\nabc\r\n").as_bytes(), b"\r\n");
            for _ in 0..2 {
                roundtrip(&mut c, format!("get hot{i}\r\n").as_bytes(), b"END\r\n");
            }
        }
        let value = vec![b'b'; 10_000];
        let mut batch = Vec::new();
        for i in 0..1000 {
            batch.extend_from_slice(format!("set burst{i} 0 3600 {} noreply\r\n", value.len()).as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
        }
        c.write_all(&batch).unwrap();
        // Across recalld's 1024 shards a class crossing its share (here
        // permanent and temporary-high fall from half the items each to a
        // sliver as the burst arrives) leaves stale published ranks, and a
        // few of its items may go before they are corrected (see the
        // store's test of the same burst); not more than a few.
        let perm = stat(&mut c, "number_permanent");
        let high = stat(&mut c, "number_temp_high");
        assert!(perm >= 97 && high >= 97, "{policy}: {perm} permanent, {high} temporary-high left");
        assert_eq!(stat(&mut c, "hits_to_temp_low") + stat(&mut c, "hits_to_temp_high"), 200, "{policy}");
        assert_eq!(stat(&mut c, "moves_to_temp_high"), 100, "{policy}");
        assert_eq!(stat(&mut c, "prio_share_permanent"), 300, "{policy}: permille");
        let items = String::from_utf8(roundtrip(&mut c, b"stats items\r\n", b"END\r\n")).unwrap();
        let item = |name: &str| -> u64 {
            let prefix = format!("STAT items:1:{name} ");
            let line = items.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{name}: {items}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(item("evicted_temp_low") > 500, "{policy}: {items}");
        assert_eq!((item("evicted_permanent"), item("evicted_temp_high")), (100 - perm, 100 - high), "{policy}");
        let evicted = item("evicted_permanent") + item("evicted_temp_low") + item("evicted_temp_high");
        assert_eq!(evicted, stat(&mut c, "evictions"), "{policy}");
        assert_eq!(item("number_permanent"), perm, "{policy}");
        // The protected part holds what moved there less what left it (no
        // deletes or rewrites here), and is part of the permanent class.
        let prot = item("number_permanent_protected");
        assert_eq!(prot, item("moves_to_permanent_protected") - item("evicted_permanent_protected"), "{items}");
        assert!(prot <= perm && item("hits_to_permanent_protected") <= item("hits_to_permanent"), "{items}");
        assert_eq!(item("hits_to_permanent"), 100, "{policy}: {items}");
    }
}

#[test]
fn huge_and_malformed_lengths_get_errors_and_the_connection_survives() {
    let s = recalld(&[]);
    let mut c = s.connect();
    assert_eq!(roundtrip(&mut c, b"set k 0 0 4294967296\r\n", b"\r\n"), b"CLIENT_ERROR bad command line format\r\n");
    assert_eq!(roundtrip(&mut c, b"set k 0 0 -5\r\n", b"\r\n"), b"CLIENT_ERROR bad command line format\r\n");
    // Too large: refused, swallowed without buffering, then business as usual.
    let mut req = b"set big 0 0 5000000\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'x', 5_000_000));
    req.extend_from_slice(b"\r\nset ok 0 0 2\r\nhi\r\n");
    let r = roundtrip(&mut c, &req, b"STORED\r\n");
    assert_eq!(r, b"SERVER_ERROR object too large for cache\r\nSTORED\r\n");
    // A line over 2048 bytes without a newline closes the connection.
    let mut d = s.connect();
    d.write_all(&vec![b'a'; 4096]).unwrap();
    let (_, closed) = read_until(&mut d, Duration::from_secs(10), |_| false);
    assert!(closed);
    // ...but a long multi-get line is fine.
    let keys: String = (0..500).map(|i| format!(" key_number_{i}")).collect();
    let r = roundtrip(&mut c, format!("get{keys}\r\n").as_bytes(), b"END\r\n");
    assert_eq!(r, b"END\r\n");
}

#[test]
fn slow_reader_does_not_block_others() {
    let s = recalld(&["-t", "1", "-I", "2m", "-m", "64"]);
    let mut w = s.connect();
    let value = vec![b'z'; 1 << 20];
    let mut req = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut w, &req, b"\r\n"), b"STORED\r\n");
    // The slow client asks for 64 MB of replies and reads nothing.
    let mut slow = s.connect();
    let gets: Vec<u8> = b"get big\r\n".repeat(64);
    slow.write_all(&gets).unwrap();
    // Meanwhile, on the same single worker thread, others are served.
    let mut fast = s.connect();
    for _ in 0..100 {
        assert_eq!(roundtrip(&mut fast, b"mn\r\n", b"MN\r\n"), b"MN\r\n");
    }
    // The slow client finally reads everything, intact.
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let end = Instant::now() + Duration::from_secs(60);
    let want = 64 * (value.len() + "VALUE big 0 1048576\r\n".len() + 2 + 5);
    while got < want && Instant::now() < end {
        match slow.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(_) => {}
        }
    }
    assert_eq!(got, want);
}

#[test]
fn concurrent_clients_never_see_torn_or_foreign_values() {
    let s = recalld(&["-t", "2"]);
    let addr = s.addr;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                for i in 0..300 {
                    let key = format!("t{t}-{}", i % 17);
                    let val = format!("{t}:{i}:{}", "p".repeat(i % 50));
                    let req = format!("set {key} {t} 0 {}\r\n{val}\r\n", val.len());
                    assert_eq!(roundtrip(&mut c, req.as_bytes(), b"\r\n"), b"STORED\r\n");
                    let r = roundtrip(&mut c, format!("get {key}\r\n").as_bytes(), b"END\r\n");
                    let expect = format!("VALUE {key} {t} {}\r\n{val}\r\nEND\r\n", val.len());
                    assert_eq!(String::from_utf8_lossy(&r), expect);
                    // Shared counters from every thread.
                    roundtrip(&mut c, b"incr shared 1\r\n", b"\r\n");
                }
            })
        })
        .collect();
    let mut c = s.connect();
    assert_eq!(roundtrip(&mut c, b"set shared 0 0 1\r\n0\r\n", b"\r\n"), b"STORED\r\n");
    for t in threads {
        t.join().unwrap();
    }
    let r = roundtrip(&mut c, b"get shared\r\n", b"END\r\n");
    let text = String::from_utf8(r).unwrap();
    let n: u64 = text.lines().nth(1).unwrap().trim().parse().unwrap();
    // Some increments may land before the set; none may be lost after it.
    assert!(n <= 2400 && n > 0, "{n}");
}

#[test]
fn pipelined_thousand_commands_in_one_write() {
    let s = recalld(&[]);
    let mut c = s.connect();
    let mut req = Vec::new();
    for i in 0..1000 {
        req.extend_from_slice(format!("set k{i} 0 0 1\r\nx\r\nget k{i}\r\n").as_bytes());
    }
    let expect: Vec<u8> =
        (0..1000).flat_map(|i| format!("STORED\r\nVALUE k{i} 0 1\r\nx\r\nEND\r\n").into_bytes()).collect();
    c.write_all(&req).unwrap();
    let (got, _) = read_until(&mut c, Duration::from_secs(20), |b| b.len() >= expect.len());
    assert_eq!(got, expect);
}

#[test]
fn udp_frames_requests_and_splits_replies() {
    // Find a free UDP port; retry if recalld loses the race for it.
    for _ in 0..10 {
        let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let s = recalld(&["-U", &port.to_string()]);
        let mut c = s.connect();
        let value = "u".repeat(3000);
        let req = format!("set big 0 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(roundtrip(&mut c, req.as_bytes(), b"\r\n"), b"STORED\r\n");
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut dgram = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0];
        dgram.extend_from_slice(b"get big\r\n");
        if u.send_to(&dgram, ("127.0.0.1", port)).is_err() {
            continue;
        }
        let mut parts = Vec::new();
        let mut buf = [0u8; 2000];
        while let Ok(n) = u.recv(&mut buf) {
            assert!(n <= 1400);
            assert_eq!(&buf[..2], &[0x12, 0x34]);
            parts.push(buf[..n].to_vec());
            let total = u16::from_be_bytes([buf[4], buf[5]]) as usize;
            if parts.len() == total {
                break;
            }
        }
        if parts.is_empty() {
            continue; // port race
        }
        parts.sort_by_key(|p| u16::from_be_bytes([p[2], p[3]]));
        let body: Vec<u8> = parts.iter().flat_map(|p| p[8..].to_vec()).collect();
        assert_eq!(body, format!("VALUE big 0 3000\r\n{value}\r\nEND\r\n").into_bytes());
        assert_eq!(parts.len(), 3);
        return;
    }
    panic!("could not get a UDP port");
}

#[test]
fn print_config_and_bad_config() {
    let bin = env!("CARGO_BIN_EXE_recalld");
    let out = Command::new(bin).args(["-p", "1234", "-m", "100", "--print-config"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("port = 1234") && text.contains("memory_limit_mb = 100"), "{text}");
    let out = Command::new(bin).args(["-I", "100"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Item max size cannot be less than 1024 bytes"));
    // Unused memcached flags warn but start.
    let dir = std::env::temp_dir().join(format!("recall-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("c.toml");
    std::fs::write(&f, "port = 4321\nbogus = 1\n").unwrap();
    let out = Command::new(bin).args(["--config", f.to_str().unwrap(), "--print-config"]).output().unwrap();
    assert!(!out.status.success(), "unknown keys in a config file are an error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
    std::fs::write(&f, "port = 4321\n").unwrap();
    let out = Command::new(bin).args(["--config", f.to_str().unwrap(), "--print-config", "-d"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("port = 4321"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn stats_names_dashboards_use() {
    let s = recalld(&[]);
    let mut c = s.connect();
    roundtrip(&mut c, b"set a 0 0 1\r\n1\r\nget a\r\nget b\r\n", b"END\r\nEND\r\n");
    let r = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "get_hits",
        "get_misses",
        "curr_items",
        "total_items",
        "bytes",
        "evictions",
        "limit_maxbytes",
        "threads",
        "bytes_read",
        "bytes_written",
        "rusage_user",
        "rusage_system",
    ] {
        assert!(r.contains(&format!("STAT {name} ")), "missing {name}");
    }
    assert_eq!(stat(&mut c, "get_hits"), 1);
    assert_eq!(stat(&mut c, "get_misses"), 1);
    assert_eq!(stat(&mut c, "curr_items"), 1);
    for group in ["settings", "items", "slabs", "conns"] {
        let r = roundtrip(&mut c, format!("stats {group}\r\n").as_bytes(), b"END\r\n");
        assert!(r.ends_with(b"END\r\n"), "stats {group}");
    }
}

/// `-L` restarts the process (same pid, exec) with jemalloc told to use
/// transparent huge pages, and then serves as usual.
#[cfg(target_os = "linux")]
#[test]
fn large_pages_flag_restarts_with_thp_and_serves() {
    let srv = recalld(&["-L", "-t", "1"]);
    let env = std::fs::read(format!("/proc/{}/environ", srv.pid())).expect("environ");
    assert!(
        env.split(|&b| b == 0).any(|v| v == b"_RJEM_MALLOC_CONF=thp:always"),
        "no jemalloc THP option in the environment"
    );
    let mut c = srv.connect();
    assert_eq!(roundtrip(&mut c, b"set k 0 0 1\r\nv\r\n", b"\r\n"), b"STORED\r\n");
    assert_eq!(roundtrip(&mut c, b"get k\r\n", b"END\r\n"), b"VALUE k 0 1\r\nv\r\nEND\r\n");
}

/// `stats conns` lists the listener and every open connection with its
/// peer address, as memcached does; a closed connection leaves the list.
#[test]
fn stats_conns_lists_the_listener_and_open_connections() {
    let s = recalld(&[]);
    let mut a = s.connect();
    let mut b = s.connect();
    // A round trip each: both are accepted and registered.
    roundtrip(&mut b, b"version\r\n", b"\r\n");
    let conns = |c: &mut std::net::TcpStream| String::from_utf8(roundtrip(c, b"stats conns\r\n", b"END\r\n")).unwrap();
    let text = conns(&mut a);
    assert!(text.contains(":state conn_listening\r\n"), "{text}");
    for peer in [a.local_addr().unwrap(), b.local_addr().unwrap()] {
        assert!(text.contains(&format!(":addr tcp:{peer}\r\n")), "{peer} missing in {text}");
    }
    drop(b);
    // The server notices the close asynchronously: ask until it has (bounded).
    let end = Instant::now() + Duration::from_secs(10);
    while conns(&mut a).matches(":listen_addr ").count() != 1 {
        assert!(Instant::now() < end, "a closed connection stays listed");
        std::thread::yield_now();
    }
}
