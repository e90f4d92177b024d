//! `-d`: run in the background, as memcached's `-d` does, for init scripts
//! that expect the command to return once the server runs.
//!
//! ```text
//!   recalld -d ──fork──► parent: waits on a pipe ──► exit 0 once the child is ready
//!                 │                                  (or the child's own status if
//!                 │                                   it exits first: a taken port,
//!                 │                                   a bad data directory)
//!                 └────► child: setsid, starts as usual; when it listens it
//!                        writes one byte to the pipe and points its standard
//!                        streams at /dev/null (stderr stays with -v or a log file)
//! ```
//!
//! The parent waits for readiness, unlike memcached's (which returns at the
//! fork), so `recalld -d` failing to start fails the init script with the
//! reason on its stderr. The fork happens before recalld starts any thread.
//! `-P FILE` records the child's pid (written when it listens, removed at a
//! clean stop). The working directory stays, so relative paths in the
//! configuration keep their meaning.

use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

/// The pipe's write end in the child, until it reports ready.
static READY: std::sync::Mutex<Option<(std::fs::File, bool)>> = std::sync::Mutex::new(None);

/// Fork into the background. Returns in the child only; the parent exits
/// with 0 once the child called [`ready`], or with the child's status.
/// `keep_stderr`: leave stderr open after readiness (`-v`, a log file).
pub fn daemonize(keep_stderr: bool) -> io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no other thread exists yet (see the module comment), so the
    // child's copy of the process is consistent.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            drop(read_end);
            // SAFETY: setsid has no memory effects; it fails only if this
            // process leads a group, which a fresh child does not.
            if unsafe { libc::setsid() } == -1 {
                return Err(io::Error::last_os_error());
            }
            *READY.lock().unwrap_or_else(|e| e.into_inner()) = Some((std::fs::File::from(write_end), keep_stderr));
            Ok(())
        }
        child => {
            drop(write_end);
            let mut byte = [0u8; 1];
            let mut pipe = std::fs::File::from(read_end);
            if matches!(pipe.read(&mut byte), Ok(1)) {
                std::process::exit(0);
            }
            // The child exited (or closed the pipe) before it was ready.
            let mut status = 0;
            // SAFETY: waitpid writes the status of our own child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { crate::limits::EX_OSERR };
            std::process::exit(if code == 0 { crate::limits::EX_OSERR } else { code });
        }
    }
}

/// The child listens: release the waiting parent and detach the standard
/// streams. A no-op without `-d`.
pub fn ready() {
    let Some((mut pipe, keep_stderr)) = READY.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
    let _ = std::io::stdout().flush();
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        let targets: &[libc::c_int] = if keep_stderr { &[0, 1] } else { &[0, 1, 2] };
        for &fd in targets {
            // SAFETY: dup2 onto a standard descriptor of this process.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    let _ = pipe.write_all(b"R");
}
