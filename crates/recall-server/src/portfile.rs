//! memcached's ports file: with `MEMCACHED_PORT_FILENAME` set, the ports
//! the server listens on are written there (`TCP INET: 11211`, `UDP INET:
//! 11211`, `INET6` for IPv6 addresses), so a test harness that started it
//! with `-p -1` can find them. As memcached does, the lines go to
//! `<name>.lck` first, which is then renamed to `<name>`: a reader that
//! sees the file sees all of it.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;

/// The environment variable memcached reads.
pub const ENV: &str = "MEMCACHED_PORT_FILENAME";

/// The file's lines for the TCP listeners, then the UDP ones (one line
/// each, in order, as memcached writes one per bound socket).
pub fn lines(tcp: &[SocketAddr], udp: &[SocketAddr]) -> String {
    let line = |proto: &str, a: SocketAddr| {
        let family = if a.is_ipv4() { "INET" } else { "INET6" };
        format!("{proto} {family}: {}\n", a.port())
    };
    let tcp = tcp.iter().map(|a| line("TCP", *a));
    tcp.chain(udp.iter().map(|a| line("UDP", *a))).collect()
}

/// Write the ports file at `path` (via `<path>.lck`). Errors name the file.
pub fn write(path: &Path, tcp: &[SocketAddr], udp: &[SocketAddr]) -> std::io::Result<()> {
    let mut lck = path.as_os_str().to_owned();
    lck.push(".lck");
    let named = |e: std::io::Error, p: &std::ffi::OsStr| {
        std::io::Error::new(e.kind(), format!("ports file {}: {e}", p.to_string_lossy()))
    };
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&lck).map_err(|e| named(e, &lck))?;
    f.write_all(lines(tcp, udp).as_bytes()).map_err(|e| named(e, &lck))?;
    drop(f);
    std::fs::rename(&lck, path).map_err(|e| named(e, path.as_os_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_lines() {
        let tcp: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let udp: SocketAddr = "[::1]:40001".parse().unwrap();
        assert_eq!(lines(&[tcp], &[]), "TCP INET: 40000\n");
        assert_eq!(lines(&[tcp], &[udp]), "TCP INET: 40000\nUDP INET6: 40001\n");
        assert_eq!(lines(&[tcp, udp], &[]), "TCP INET: 40000\nTCP INET6: 40001\n");
        assert_eq!(lines(&[tcp], &[tcp, udp]), "TCP INET: 40000\nUDP INET: 40000\nUDP INET6: 40001\n");
    }

    #[test]
    fn written_through_a_lock_file() {
        let dir = std::env::temp_dir().join(format!("recall-portfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ports");
        write(&path, &["127.0.0.1:1234".parse().unwrap()], &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "TCP INET: 1234\n");
        assert!(!dir.join("ports.lck").exists());
        let err = write(&dir.join("missing/ports"), &["127.0.0.1:1".parse().unwrap()], &[]).unwrap_err();
        assert!(err.to_string().contains("missing/ports.lck"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
