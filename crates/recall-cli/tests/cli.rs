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
        // A command that fails early (a usage error) exits without reading
        // its input: that is a broken pipe here, not a test failure.
        if let Err(e) = pipe.write_all(data) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
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
    // ketama-place is a tool for the cross-check tests: hidden from the
    // list, documented in its own help.
    assert!(!out(&o).contains("ketama-place"), "hidden from --help");
    let o = recall(&[], &["ketama-place", "--help"]);
    assert_eq!(code(&o), 0);
    assert!(out(&o).contains("--remove-failed") && out(&o).contains("11211"), "{}", out(&o));
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

/// `recall ketama-place` with `--server` for each of `specs`, keys on stdin.
fn ketama_place(specs: &[String], extra: &[&str], keys: &[u8]) -> Output {
    let mut args = vec!["ketama-place"];
    for s in specs {
        args.extend(["--server", s.as_str()]);
    }
    args.extend_from_slice(extra);
    recall_stdin(&[], &args, Some(keys))
}

#[test]
fn ketama_place_matches_the_pylibmc_vectors() {
    // The recorded pylibmc placements (recall-client's tests/data/ketama_vectors.json): the
    // plain weighted set, and its remove_failed variant with the second
    // server dead. The set on port 11211 checks the naming rule.
    let v: serde_json::Value = serde_json::from_str(include_str!("../../recall-client/tests/data/ketama_vectors.json"))
        .expect("vector file is JSON");
    let sets = v["sets"].as_array().expect("sets");
    let mut checked = 0;
    for set in sets {
        let servers = set["servers"].as_array().expect("servers");
        let spec = |s: &serde_json::Value| format!("{}:{}", s["host"].as_str().expect("host"), s["port"]);
        let specs: Vec<String> = servers.iter().map(|s| format!("{}:{}", spec(s), s["weight"])).collect();
        let mut extra = Vec::new();
        for d in set["dead"].as_array().into_iter().flatten() {
            extra.push("--remove-failed".to_string());
            extra.push(spec(&servers[d.as_u64().expect("index") as usize]));
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let placement = set["placement"].as_object().expect("placement");
        let keys: String = placement.keys().map(|k| format!("{k}\n")).collect();
        let o = ketama_place(&specs, &extra, keys.as_bytes());
        assert_eq!(code(&o), 0, "{}: {}", set["name"], err(&o));
        let text = out(&o);
        let got: Vec<(&str, &str)> = text.lines().map(|l| l.split_once('\t').expect("KEY<TAB>SERVER")).collect();
        assert_eq!(got.len(), placement.len(), "{}: one line per key", set["name"]);
        let mut wrong = Vec::new();
        for ((key, server), (want_key, want)) in got.iter().zip(placement) {
            assert_eq!(key, want_key, "input order");
            let want = &servers[want.as_u64().expect("index") as usize];
            if *server != spec(want) {
                wrong.push(*key);
            }
        }
        assert!(
            wrong.is_empty(),
            "{}: {} keys misplaced, e.g. {:?}",
            set["name"],
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
        checked += 1;
    }
    assert!(checked >= 4);
}

#[test]
fn ketama_place_edge_cases() {
    let specs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // One server takes every key; CRLF and blank lines are tolerated; the
    // default port is named in the output even though it is not hashed.
    let o = ketama_place(&specs(&["cache-a"]), &[], b"a\r\n\nb\n");
    assert_eq!((code(&o), out(&o).as_str()), (0, "a\tcache-a:11211\nb\tcache-a:11211\n"), "{}", err(&o));
    // Agrees with the library, and a removed server gets no keys.
    let three = specs(&["10.0.0.1:11211:1", "10.0.0.2:11211:2", "10.0.0.3:11311:3"]);
    let nodes = [Node::new("10.0.0.1", 11211, 1), Node::new("10.0.0.2", 11211, 2), Node::new("10.0.0.3", 11311, 3)];
    let keys: String = (0..300).map(|i| format!("key{i}\n")).collect();
    for (dead, extra) in [(None, vec![]), (Some(1), vec!["--remove-failed", "10.0.0.2:11211"])] {
        let cont = Continuum::build(&nodes, |i| Some(i) != dead);
        let o = ketama_place(&three, &extra, keys.as_bytes());
        assert_eq!(code(&o), 0, "{}", err(&o));
        for line in out(&o).lines() {
            let (key, server) = line.split_once('\t').expect("KEY<TAB>SERVER");
            let want = cont.locate(key.as_bytes()).expect("points");
            assert_eq!(server, format!("{}:{}", nodes[want].host, nodes[want].port), "{key}");
            assert_ne!(Some(want), dead);
        }
    }
    // Usage errors: no servers, a removed server not in the list, nothing left.
    assert_eq!(code(&ketama_place(&[], &[], b"k\n")), 2);
    let o = ketama_place(&three, &["--remove-failed", "10.0.0.9:11211"], b"k\n");
    assert_eq!(code(&o), 2);
    assert!(err(&o).contains("10.0.0.9:11211"), "{}", err(&o));
    let o = ketama_place(&specs(&["a:1", "b:2"]), &["--remove-failed", "a:1", "--remove-failed", "b:2"], b"k\n");
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert_eq!(code(&ketama_place(&specs(&["a:1:0", "b:2:0"]), &[], b"k\n")), 2);
}

/// `recall stats | head -2`: the reader goes away. The read end is closed
/// before `recall` writes anything, so every write meets a closed pipe.
#[test]
fn a_closed_stdout_ends_quietly() {
    let srv = recalld(&[]);
    recall(&[&srv], &["set", "k", "value"]);
    for args in [&["stats"][..], &["get", "k"], &["get-file", "k", "-"], &["dump"], &["top", "--once"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_recall"))
            .args(["--server", &srv.spec()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn recall");
        drop(child.stdout.take());
        let o = child.wait_with_output().expect("wait");
        assert_eq!(code(&o), 0, "{args:?}: {}", err(&o));
        assert_eq!(err(&o), "", "{args:?}: nothing on stderr");
    }
}

#[test]
fn top_into_a_pipe_appends_plain_frames() {
    use std::io::Read;
    let srv = recalld(&[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(["--server", &srv.spec(), "top", "--interval", "0.05"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn recall");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    // Until the second frame has started (or recall exits: EOF).
    while text.windows(10).filter(|w| w == b"recall top").count() < 2 {
        match stdout.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = String::from_utf8_lossy(&text);
    assert_eq!(text.matches("recall top").count(), 2, "{text}");
    assert!(!text.contains('\x1b'), "no terminal codes in a pipe: {text:?}");
}

#[test]
fn too_large_values_name_the_servers_item_size_limit() {
    let srv = recalld(&["-I", "1m", "-m", "64"]);
    let big = vec![b'x'; 2 << 20];
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("recall-cli-big-{}", std::process::id()));
    std::fs::write(&path, &big).expect("write the file");
    let put = recall(&[&srv], &["put-file", "f", path.to_str().expect("utf-8 path")]);
    let _ = std::fs::remove_file(&path);
    let set = recall_stdin(&[&srv], &["set", "f"], Some(&big));
    for o in [put, set] {
        assert_eq!(code(&o), 3, "{}", err(&o));
        let e = err(&o);
        assert!(e.contains("SERVER_ERROR object too large for cache"), "{e}");
        assert!(e.contains("(2.0 MiB) is larger than the server's item size limit of 1.0 MiB"), "{e}");
        assert!(e.contains("recalld -I 16m"), "{e}");
    }
}
