//! `MEMCACHED_PORT_FILENAME`: recalld writes the port it listens on there,
//! in memcached's format, as test harnesses that start memcached with
//! `-p 0` expect.

mod common;

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
