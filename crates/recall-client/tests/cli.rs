//! The `recall` binary, spawned as a user would run it.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{holder, recalld, Server};
use recall_client::ketama::{Continuum, Node};

fn recall(servers: &[&Server], args: &[&str]) -> Output {
    recall_stdin(servers, args, None)
}

fn recall_stdin(servers: &[&Server], args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_recall"));
    for s in servers {
        cmd.args(["--server", &s.spec()]);
    }
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn recall");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(data) = stdin {
        pipe.write_all(data).expect("write stdin");
    }
    drop(pipe);
    child.wait_with_output().expect("wait")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

#[test]
fn help_for_everything() {
    let o = recall(&[], &["--help"]);
    assert_eq!(code(&o), 0);
    for sub in ["get", "set", "delete", "incr", "decr", "touch", "flush", "stats", "version", "top", "dump", "bench"] {
        assert!(out(&o).contains(sub), "--help lists {sub}");
        let o = recall(&[], &[sub, "--help"]);
        assert_eq!(code(&o), 0, "{sub} --help");
        assert!(out(&o).contains("Usage"), "{sub} --help");
    }
    assert!(out(&o).contains("Exit status"));
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(code(&recall(&[], &[])), 2);
    assert_eq!(code(&recall(&[], &["frobnicate"])), 2);
    assert_eq!(code(&recall(&[], &["get"])), 2, "get needs a key");
    assert_eq!(code(&recall(&[], &["incr", "k", "notanumber"])), 2);
    let o = recall(&[], &["--server", "host:notaport", "get", "k"]);
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("host:notaport"), "{}", err(&o));
}

#[test]
fn key_commands_and_exit_codes() {
    let srv = recalld(&[]);
    let s = [&srv];
    let o = recall(&s, &["set", "greeting", "hello", "--ttl", "60", "--flags", "5"]);
    assert_eq!((code(&o), out(&o).as_str()), (0, "STORED\n"), "{}", err(&o));
    let o = recall(&s, &["get", "greeting"]);
    assert_eq!((code(&o), out(&o).as_str()), (0, "hello"), "raw value on a pipe");

    let o = recall(&s, &["get", "missing"]);
    assert_eq!(code(&o), 1);
    assert!(err(&o).contains("missing: not found"), "{}", err(&o));

    // Value from stdin, binary-safe.
    let bytes: Vec<u8> = (0..=255u8).collect();
    let o = recall_stdin(&s, &["set", "bin"], Some(&bytes));
    assert_eq!(code(&o), 0, "{}", err(&o));
    let o = recall(&s, &["get", "bin"]);
    assert_eq!(o.stdout, bytes);

    let o = recall(&s, &["set", "greeting", "x", "--mode", "add"]);
    assert_eq!(code(&o), 1);
    assert!(err(&o).contains("NOT_STORED"), "{}", err(&o));
    let o = recall(&s, &["set", "greeting", " world", "--mode", "append"]);
    assert_eq!(code(&o), 0);

    let o = recall(&s, &["get", "greeting", "nope", "bin"]);
    assert_eq!(code(&o), 1, "one miss among several keys");
    assert!(out(&o).starts_with("greeting\thello world\n"), "{}", out(&o));

    assert_eq!(code(&recall(&s, &["incr", "n"])), 1, "missing counter");
    recall(&s, &["set", "n", "10"]);
    let o = recall(&s, &["incr", "n", "5"]);
    assert_eq!((code(&o), out(&o).as_str()), (0, "15\n"));
    let o = recall(&s, &["decr", "n"]);
    assert_eq!(out(&o), "14\n");
    let o = recall(&s, &["incr", "greeting"]);
    assert_eq!(code(&o), 3, "CLIENT_ERROR is a server-reported error");
    assert!(err(&o).contains("CLIENT_ERROR"), "{}", err(&o));

    let o = recall(&s, &["touch", "n", "100"]);
    assert_eq!((code(&o), out(&o).as_str()), (0, "TOUCHED\n"));
    assert_eq!(code(&recall(&s, &["touch", "nope", "100"])), 1);

    let o = recall(&s, &["delete", "n"]);
    assert_eq!((code(&o), out(&o).as_str()), (0, "DELETED\n"));
    assert_eq!(code(&recall(&s, &["delete", "n"])), 1);

    let o = recall(&s, &["get", "bad key"]);
    assert_eq!(code(&o), 2, "invalid key is a usage error");

    let o = recall(&s, &["flush"]);
    assert_eq!((code(&o), out(&o).as_str()), (0, "OK\n"));
    assert_eq!(code(&recall(&s, &["get", "greeting"])), 1);
}

#[test]
fn server_commands() {
    let srv = recalld(&[]);
    let s = [&srv];
    let o = recall(&s, &["version"]);
    assert_eq!(code(&o), 0);
    assert!(!out(&o).trim().is_empty());

    let o = recall(&s, &["stats"]);
    assert_eq!(code(&o), 0);
    assert!(out(&o).lines().any(|l| l.starts_with("curr_connections ")), "{}", out(&o));

    recall(&s, &["set", "a", "1"]);
    recall(&s, &["set", "b", "2"]);
    recall(&s, &["get", "a"]);
    let o = recall(&s, &["top", "--once"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let text = out(&o);
    assert!(text.contains("GET/s") && text.contains("HIT%") && text.contains("EVICTIONS"), "{text}");
    assert!(text.contains(&srv.spec()), "{text}");
    assert!(!text.contains('\x1b'), "--once prints a plain frame");

    let o = recall(&s, &["dump"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.starts_with("key=") && l.contains(" cas=")), "{lines:?}");
    let o = recall(&s, &["dump", "--keys-only"]);
    let text = out(&o);
    let mut keys: Vec<&str> = text.lines().collect();
    keys.sort();
    assert_eq!(keys, vec!["a", "b"]);
}

#[test]
fn dump_and_top_against_memcached() {
    let Some(srv) = common::memcached() else {
        eprintln!("memcached not installed: skipped");
        return;
    };
    let s = [&srv];
    recall(&s, &["set", "x", "1"]);
    let o = recall(&s, &["dump", "--keys-only"]);
    assert_eq!((code(&o), out(&o).as_str()), (0, "x\n"), "{}", err(&o));
    let o = recall(&s, &["top", "--once"]);
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert!(out(&o).contains(&srv.spec()));
}

#[test]
fn connection_errors_exit_3() {
    let port = common::free_port();
    let o = Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(["--server", &format!("127.0.0.1:{port}"), "get", "k"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 3);
    assert!(err(&o).contains("connection error"), "{}", err(&o));
    let silent = common::silent();
    let o = Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(["--server", &silent.addr.to_string(), "--timeout", "200", "get", "k"])
        .output()
        .expect("run");
    assert_eq!(code(&o), 3);
    assert!(err(&o).contains("no reply within"), "{}", err(&o));
}

#[test]
fn several_servers_use_ketama() {
    let servers = [recalld(&[]), recalld(&[]), recalld(&[])];
    let refs: Vec<&Server> = servers.iter().collect();
    let nodes: Vec<Node> = servers.iter().map(|s| Node::new("127.0.0.1", s.port(), 1)).collect();
    let cont = Continuum::build(&nodes, |_| true);
    for i in 0..12 {
        let key = format!("cli{i}");
        let o = recall(&refs, &["set", &key, "v"]);
        assert_eq!(code(&o), 0, "{}", err(&o));
        assert_eq!(holder(&refs, &key), vec![cont.locate(key.as_bytes()).unwrap()], "{key}");
        assert_eq!(out(&recall(&refs, &["get", &key])), "v");
    }
    let o = recall(&refs, &["version"]);
    assert_eq!(out(&o).lines().count(), 3, "one line per server");
}

#[test]
fn bench_points_to_recall_bench_when_missing() {
    // A copy of `recall` alone in a directory, with an empty PATH, cannot
    // find recall-bench.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("recall-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let bin = dir.join("recall");
    // A hard link, not a copy: a copy's write descriptor can leak into a
    // child another test thread forks at that moment, and exec then fails
    // with "text file busy". (The target dir is one filesystem.)
    let _ = std::fs::remove_file(&bin);
    std::fs::hard_link(env!("CARGO_BIN_EXE_recall"), &bin).expect("link");
    let o = Command::new(&bin).args(["bench", "--requests", "10"]).env("PATH", "").output().expect("run");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("recall-bench"), "{}", err(&o));
    assert!(err(&o).contains("cargo build --release -p recall-bench"), "{}", err(&o));
}
