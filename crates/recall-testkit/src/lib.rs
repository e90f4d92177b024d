//! Start recalld for tests, benchmarks and the crash harness.
//!
//! recalld is started with `-p -1 -l 127.0.0.1` (or a given port) and prints
//! `listening on ADDR` once its socket is bound, so there is no port race
//! and no waiting by the clock: [`Spawn::start`] reads the server's stdout
//! until that line (or until the process exits, and then returns its
//! stderr). The handle kills the process on drop, can kill it with SIGKILL
//! at any moment ([`Recalld::kill9`]) and start it again with the same
//! arguments on the same port ([`Recalld::restart`]), so a data directory
//! given in the arguments is reused. With `-s PATH` it listens on that
//! unix socket instead and says `listening on unix:PATH`
//! ([`Recalld::unix_path`]). With `--metrics-addr IP:0` it also reads
//! the `metrics listening on` line printed before that one
//! ([`Recalld::metrics_addr`]).
//!
//! ```no_run
//! let mut srv = recall_testkit::Recalld::start(["--data-dir", "/tmp/d"]).expect("recalld");
//! println!("listening on {}", srv.addr());
//! srv.kill9();
//! srv.restart().expect("same port, same data directory");
//! ```

pub mod alloc;
pub mod cluster;
pub mod mount;
pub mod servers;

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::Duration;

/// The directory holding this executable's profile outputs
/// (`<target>/<profile>`), from `<target>/<profile>/deps/<test>` or
/// `<target>/<profile>/examples/<example>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(|d| d.parent()).expect("target/<profile>/<kind>/<exe> layout").to_path_buf()
}

/// The recalld binary: `$RECALLD_BIN`, or built by cargo (once per process)
/// into the caller's target directory and profile. Tests of recall-server
/// have `CARGO_BIN_EXE_recalld` instead; other packages cannot depend on a
/// binary on stable cargo, hence the build (a no-op when it is fresh).
pub fn recalld_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("RECALLD_BIN") {
            return PathBuf::from(p);
        }
        let dir = profile_dir();
        let target = dir.parent().expect("target dir").to_path_buf();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "recall-server", "--bin", "recalld"]).env("CARGO_TARGET_DIR", &target);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo to build recalld");
        assert!(status.success(), "building recalld failed");
        dir.join("recalld")
    })
    .clone()
}

/// Where a started recalld listens.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// How to start recalld: binary, port, arguments, environment.
#[derive(Debug, Clone)]
pub struct Spawn {
    bin: Option<PathBuf>,
    port: u16,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Spawn {
    /// The binary (default: [`recalld_bin`]).
    pub fn bin(mut self, bin: impl Into<PathBuf>) -> Self {
        self.bin = Some(bin.into());
        self
    }

    /// The TCP port (default 0: ephemeral).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Arguments after `-p <port> -l 127.0.0.1`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// An environment variable for every start (also restarts).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Start it and wait until it listens; `Err` carries its stderr if it
    /// exits instead (a taken port, a refused data directory).
    pub fn start(self) -> Result<Recalld, String> {
        let l = self.launch(self.port, &[])?;
        Ok(Recalld { child: Some(l.child), listen: l.listen, metrics: l.metrics, exited: l.exited, spawn: self })
    }

    fn launch(&self, port: u16, extra_env: &[(&str, &str)]) -> Result<Launched, String> {
        let bin = self.bin.clone().unwrap_or_else(recalld_bin);
        // memcached's port rule: -1 asks for a free port (0 is no TCP).
        let port = if port == 0 { "-1".to_string() } else { port.to_string() };
        let mut child = Command::new(&bin)
            .args(["-p", &port, "-l", "127.0.0.1"])
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(extra_env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut stderr = child.stderr.take().ok_or("no stderr")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut metrics = None;
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(a) = line.strip_prefix("metrics listening on http://") {
                        metrics = a.strip_suffix("/metrics").and_then(|a| a.parse().ok());
                    } else if let Some(a) = line.strip_prefix("listening on ") {
                        if let Some(path) = a.strip_prefix("unix:") {
                            break Listen::Unix(path.into());
                        }
                        match a.parse() {
                            Ok(addr) => break Listen::Tcp(addr),
                            Err(e) => {
                                let _ = child.kill();
                                let _ = child.wait();
                                return Err(format!("bad address {a:?}: {e}"));
                            }
                        }
                    }
                }
                _ => {
                    let mut err = String::new();
                    let _ = stderr.read_to_string(&mut err);
                    let _ = child.wait();
                    return Err(err);
                }
            }
        };
        // Keep draining both pipes so the server never blocks on them. The
        // end of stdout is the process's exit (see `wait_exit`).
        let (tx, exited) = mpsc::channel();
        std::thread::spawn(move || {
            for _ in lines {}
            let _ = tx.send(());
        });
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Ok(Launched { child, listen: addr, metrics, exited })
    }
}

/// A process [`Spawn::launch`] started, and what it printed.
struct Launched {
    child: Child,
    listen: Listen,
    metrics: Option<SocketAddr>,
    exited: Receiver<()>,
}

/// A running recalld (or one killed and not yet restarted). Killed on drop.
#[derive(Debug)]
pub struct Recalld {
    child: Option<Child>,
    listen: Listen,
    /// The metrics endpoint's address, if it printed one.
    metrics: Option<SocketAddr>,
    /// Disconnected (or sent to) when the server's stdout closes.
    exited: Receiver<()>,
    spawn: Spawn,
}

impl Recalld {
    /// A [`Spawn`] with the defaults: [`recalld_bin`], port 0, no arguments.
    pub fn builder() -> Spawn {
        Spawn { bin: None, port: 0, args: Vec::new(), env: Vec::new() }
    }

    /// [`recalld_bin`] on an ephemeral port with `args`.
    pub fn start<I, S>(args: I) -> Result<Recalld, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Recalld::builder().args(args).start()
    }

    /// The address it printed (the same after a restart). Panics if it
    /// listens on a unix socket ([`Recalld::unix_path`]).
    pub fn addr(&self) -> SocketAddr {
        match &self.listen {
            Listen::Tcp(a) => *a,
            Listen::Unix(p) => panic!("recalld listens on the unix socket {}, not TCP", p.display()),
        }
    }

    /// The address of its metrics endpoint (`--metrics-addr`), as the
    /// running process printed it (with port 0, a new one each restart).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// The unix socket it listens on (`-s`), if it does.
    pub fn unix_path(&self) -> Option<&Path> {
        match &self.listen {
            Listen::Tcp(_) => None,
            Listen::Unix(p) => Some(p),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr().port()
    }

    /// The process id, unless it was killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The process, unless it was killed (to send it signals and wait).
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// SIGKILL (what `Child::kill` sends on Unix), and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait up to `limit` for the process to exit by itself (a failpoint
    /// fired); true if it did. Woken by the end of its stdout, not by
    /// polling.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        if self.child.is_none() {
            return false;
        }
        match self.exited.recv_timeout(limit) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(mut c) = self.child.take() {
                    let _ = c.wait();
                }
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
        }
    }

    /// Kill it (if running) and start it again with the same arguments on
    /// the same port.
    pub fn restart(&mut self) -> Result<(), String> {
        self.restart_env(&[])
    }

    /// [`Recalld::restart`] with extra environment variables for this start
    /// only (e.g. `RECALL_FAILPOINT`). The port was released by the kill,
    /// but something else may take it meanwhile: a few attempts, each a
    /// new process that either listens or exits. A start refused for any
    /// other reason (a damaged log, an old cluster id) is not tried again.
    pub fn restart_env(&mut self, env: &[(&str, &str)]) -> Result<(), String> {
        self.kill9();
        let mut last = String::new();
        let port = match &self.listen {
            Listen::Tcp(a) => a.port(),
            Listen::Unix(_) => 0,
        };
        for _ in 0..40 {
            match self.spawn.launch(port, env) {
                Ok(l) => {
                    debug_assert_eq!(l.listen, self.listen);
                    self.child = Some(l.child);
                    self.metrics = l.metrics;
                    self.exited = l.exited;
                    return Ok(());
                }
                Err(e) if e.contains("in use") => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(format!("could not restart recalld on {:?}: {last}", self.listen))
    }
}

impl Drop for Recalld {
    fn drop(&mut self) {
        self.kill9();
    }
}
