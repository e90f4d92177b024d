//! What an operator and a service manager rely on: readiness notification,
//! the descriptor limit checked at start, `-d`, and the command log.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use recall_testkit::Recalld;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_recalld")
}

fn tmp_dir(tag: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("operator-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn roundtrip(addr: std::net::SocketAddr, req: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `Type=notify`: READY=1 once it listens, STOPPING=1 on SIGTERM.
#[test]
fn notifies_the_service_manager() {
    let dir = tmp_dir("notify");
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = Recalld::builder().bin(bin()).env("NOTIFY_SOCKET", &path).args(["-U", "0"]).start().unwrap();
    let mut buf = [0u8; 64];
    let n = sock.recv(&mut buf).expect("READY=1 within 10 s");
    assert_eq!(&buf[..n], b"READY=1");
    assert!(roundtrip(r.addr(), b"version\r\n", b"\r\n").starts_with(b"VERSION"));
    // SAFETY: kill sends a signal to our own child.
    unsafe { libc::kill(r.pid().unwrap() as i32, libc::SIGTERM) };
    let n = sock.recv(&mut buf).expect("STOPPING=1 within 10 s");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(r.wait_exit(Duration::from_secs(10)));
    std::fs::remove_dir_all(&dir).ok();
}

/// Run recalld with RLIMIT_NOFILE set to `soft:hard`, unprivileged (a root
/// test runner's CAP_SYS_RESOURCE could raise any limit).
fn under_limit(soft: u64, hard: u64, args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(["-p", "-1", "-l", "127.0.0.1", "-U", "0"]).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: between fork and exec only async-signal-safe calls
    // (setrlimit, setgroups, setgid, setuid) on values owned here.
    unsafe {
        c.pre_exec(move || {
            let rl = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::geteuid() == 0
                && (libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// `-c` above what the hard limit allows: refused with memcached's message
/// and its exit status, before listening.
#[test]
fn an_fd_limit_below_max_connections_is_refused() {
    let out = under_limit(128, 128, &["-c", "4096"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(71), "{err}");
    assert!(
        err.contains("failed to set rlimit for open files. Try starting as root or requesting smaller maxconns value."),
        "{err}"
    );
    assert!(err.contains("-c 4096"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"));
}

/// Under a soft limit below `-c` with room below the hard limit, the soft
/// limit is raised and the server starts.
#[test]
fn a_low_soft_fd_limit_is_raised() {
    let mut child = under_limit(128, 8192, &["-c", "4096", "-t", "2"]).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let listening = BufReader::new(stdout).lines().map_while(Result::ok).find(|l| l.starts_with("listening on "));
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening.is_some(), "did not start");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let soft: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!((4096..=8192).contains(&soft), "{line}");
}

/// `-d -P FILE`: the command returns once the server listens, the pid file
/// names the server, which keeps serving; a clean stop removes the file.
#[test]
fn dash_d_runs_in_the_background_with_a_pid_file() {
    let dir = tmp_dir("daemon");
    let pid_file = dir.join("recalld.pid");
    let mut parent = Command::new(bin())
        .args(["-d", "-P", pid_file.to_str().unwrap(), "-p", "-1", "-l", "127.0.0.1", "-U", "0", "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(parent.stdout.take().unwrap()).lines();
    let addr: std::net::SocketAddr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening on ").map(|a| a.parse().unwrap()))
        .expect("listening line");
    let status = parent.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert_ne!(pid as u32, parent.id(), "the pid file names the server, not the command that started it");
    assert!(roundtrip(addr, b"version\r\n", b"\r\n").starts_with(b"VERSION"));
    // SAFETY: kill sends a signal to the server this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_for("the pid file's removal", || !pid_file.exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// `-d` when the server cannot start: the command fails with the server's
/// reason and status, rather than returning 0 with nothing running.
#[test]
fn dash_d_reports_a_failed_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = Command::new(bin()).args(["-d", "-p", &port, "-l", "127.0.0.1", "-U", "0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&port), "{err}");
}

/// `-vv`: each command and reply line, memcached's way (`<id`, `>id`),
/// without value bytes; `--log-file` takes the log, `--log-format json`
/// makes each line a JSON object.
#[test]
fn dash_vv_logs_commands_and_replies() {
    let dir = tmp_dir("vv");
    let log = dir.join("recalld.log");
    let r =
        Recalld::builder().bin(bin()).args(["-U", "0", "-vv", "--log-file", log.to_str().unwrap()]).start().unwrap();
    let got = roundtrip(r.addr(), b"set a 0 0 6\r\nsecret\r\nget a\r\n", b"END\r\n");
    assert_eq!(got, b"STORED\r\nVALUE a 0 6\r\nsecret\r\nEND\r\n");
    let mut text = String::new();
    wait_for("the log lines", || {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains(" sending key a") && text.contains(" END")
    });
    let id = text.lines().find_map(|l| l.split("<").nth(1)?.strip_suffix(" set a 0 0 6")).expect(&text).to_string();
    for want in
        [format!("<{id} set a 0 0 6"), format!(">{id} STORED"), format!(">{id} sending key a"), format!(">{id} END")]
    {
        assert!(text.contains(&want), "{want:?} not in:\n{text}");
    }
    assert!(!text.contains("secret"), "value bytes are not logged:\n{text}");
    drop(r);
    let log = dir.join("json.log");
    let r = Recalld::builder()
        .bin(bin())
        .args(["-U", "0", "-vv", "--log-format", "json", "--log-file", log.to_str().unwrap()])
        .start()
        .unwrap();
    roundtrip(r.addr(), b"get k\r\n", b"END\r\n");
    wait_for("a json log line", || std::fs::read_to_string(&log).unwrap_or_default().contains("get k"));
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        assert!(line.starts_with('{') && line.ends_with('}') && line.contains("\"level\""), "{line}");
    }
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
