//! memcached's operational knobs with the real binary:
//! `MEMCACHED_PORT_FILENAME` (recalld writes the port it listens on there,
//! in memcached's format, as test harnesses that start memcached with
//! `-p 0` expect) and `-R` (requests per event before yielding).

mod common;

use common::{recalld, roundtrip};

#[test]
fn the_ports_file_names_the_listening_port() {
    let dir = std::env::temp_dir().join(format!("recall-ports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ports");
    let s = common::try_recalld_env(&[], &[("MEMCACHED_PORT_FILENAME", path.to_str().unwrap())]).unwrap();
    // recalld prints its address after it wrote the file.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("TCP INET: {}\n", s.addr.port()));
    assert!(!dir.join("ports.lck").exists());
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `-R 2`: a pipelined batch of five requests is answered in full and in
/// order, and the connection yielded twice on the way (`conn_yields`).
#[test]
fn dash_r_yields_within_a_pipelined_batch() {
    let s = recalld(&["-t", "1", "-R", "2"]);
    let mut c = s.connect();
    let got = roundtrip(&mut c, b"mn\r\nmn\r\nmn\r\nmn\r\nmn\r\n", b"MN\r\nMN\r\nMN\r\nMN\r\nMN\r\n");
    assert_eq!(got, b"MN\r\nMN\r\nMN\r\nMN\r\nMN\r\n");
    let stats = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
    assert!(stats.contains("STAT conn_yields 2\r\n"), "{stats}");
}
