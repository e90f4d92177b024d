//! systemd's readiness notification (sd_notify(3)), for `Type=notify` units.
//!
//! The protocol is one datagram of `KEY=VALUE` lines sent to the unix
//! socket named by `$NOTIFY_SOCKET` (a path, or a Linux abstract address
//! written with a leading `@`). It is small and fixed enough to write here
//! rather than take a crate for: recalld sends `READY=1` once its listeners
//! are bound and its workers run, and `STOPPING=1` when it begins a clean
//! stop. Without `$NOTIFY_SOCKET` (not started by systemd, or a unit of
//! another type) nothing is sent.

use std::io;
use std::os::unix::net::UnixDatagram;

/// The environment variable systemd sets for a `Type=notify` service.
pub const ENV: &str = "NOTIFY_SOCKET";

/// Tell the service manager `state` (e.g. `"READY=1"`). `Ok(false)` when no
/// service manager asked to be told.
pub fn notify(state: &str) -> io::Result<bool> {
    match std::env::var_os(ENV) {
        Some(addr) if !addr.is_empty() => send(&addr, state).map(|()| true),
        _ => Ok(false),
    }
}

/// Send `state` to the notification socket at `addr`.
pub fn send(addr: &std::ffi::OsStr, state: &str) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let sock = UnixDatagram::unbound()?;
    let bytes = addr.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let a = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(state.as_bytes(), &a)?;
            return Ok(());
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = name;
            return Err(io::Error::new(io::ErrorKind::Unsupported, "abstract socket addresses are Linux only"));
        }
    }
    sock.send_to(state.as_bytes(), std::path::Path::new(addr))?;
    Ok(())
}

/// Log a notification that failed: the service manager will time the
/// start out, and the log says why.
pub fn notify_or_log(state: &str) {
    if let Err(e) = notify(state) {
        tracing::error!("could not notify the service manager ({ENV}) of {state}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_the_state_to_a_socket_path() {
        let dir = std::env::temp_dir().join(format!("recall-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sends_the_state_to_an_abstract_address() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("recall-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        send(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn a_missing_socket_is_an_error() {
        let err = send(std::ffi::OsStr::new("/nonexistent/recall/notify.sock"), "READY=1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
