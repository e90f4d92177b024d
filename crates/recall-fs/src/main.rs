//! `recall-fs`: mount a directory through a read cache in recall.
//!
//! ```text
//! recall-fs --backing /srv/data --mount /mnt/data --servers 127.0.0.1:11211,10.0.0.2:11211
//! recall-fs --stats --mount /mnt/data
//! ```
//! Prints `mounted at MNT` on stdout once the mount is up; unmounts on
//! SIGINT, SIGTERM and SIGHUP.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use clap::Parser;
use fuser::MountOption;
use recall_fs::cache::Classes;
use recall_fs::fs::{Config, Delay, RecallFs, Remote, Remotes, CTL_DIR};

#[derive(Parser, Debug)]
#[command(name = "recall-fs", about = "Mount a directory through a small-file read cache in recall")]
struct Args {
    /// The directory to pass through.
    #[arg(long, required_unless_present = "stats")]
    backing: Option<PathBuf>,
    /// Where to mount it (with --stats: the mount to report on).
    #[arg(long)]
    mount: PathBuf,
    /// recall servers, HOST:PORT or a unix socket as /path or unix:/path,
    /// comma-separated (keys spread by ketama); `--servers ''` mounts
    /// without a cache (a plain pass-through).
    #[arg(long, value_delimiter = ',', required_unless_present = "stats")]
    servers: Vec<String>,
    #[command(flatten)]
    transport: recall_cli::TransportArgs,
    /// Regular files up to this many bytes are cached whole.
    #[arg(long, default_value_t = 1 << 20)]
    max_file_size: u64,
    /// Bound on each recall call (connect and request), in milliseconds;
    /// past it the backing directory answers.
    #[arg(long, default_value_t = 200)]
    timeout_ms: u64,
    /// Expiry of cached files in seconds (0: none), except those matching
    /// a --permanent glob. Non-zero by default so that, under the
    /// prioritized cache, files an operator marks permanent are kept apart
    /// from the rest (and orphaned chunks leave within the hour).
    #[arg(long, default_value_t = 3600)]
    exptime: i32,
    /// Files whose path (relative to --backing) matches this glob are
    /// cached without expiry, the prioritized cache's permanent class;
    /// repeatable. `*` stays within a path component, `**` crosses them.
    #[arg(long, value_name = "GLOB")]
    permanent: Vec<String>,
    /// Cache files over --max-file-size as chunks of this many bytes, so
    /// partial reads of big files are served from recall too (0: off).
    #[arg(long, default_value_t = 0)]
    chunk_size: u64,
    /// Bytes of writes each open file collects before they reach the
    /// backing file (the paper's 512 KB; 0: write through at once).
    #[arg(long, default_value_t = recall_fs::wbuf::DEFAULT_CAPACITY)]
    write_buffer: usize,
    /// Benchmarks only: sleep this many microseconds before each backing
    /// read or write call, emulating a slow backing store.
    #[arg(long, default_value_t = 0, hide = true)]
    backing_delay_us: u64,
    /// Benchmarks only: sleep this many microseconds before each backing
    /// lookup, getattr, setattr, open and create.
    #[arg(long, default_value_t = 0, hide = true)]
    backing_meta_delay_us: u64,
    /// How long the kernel may cache an entry or a file's attributes, in
    /// milliseconds. Changes made through the mount are seen at once; one
    /// made behind its back shows in `stat` (and in the size a read stops
    /// at) within this time. File contents are checked at every read
    /// whatever it is. 0: every stat reaches the backing directory, and no
    /// open keeps the kernel's pages.
    #[arg(long, default_value_t = 1000)]
    attr_timeout_ms: u64,
    /// Let other users than the mounting one use the mount.
    #[arg(long)]
    allow_other: bool,
    /// Print the statistics of the mount at --mount and exit.
    #[arg(long)]
    stats: bool,
}

/// Block the termination signals in this thread (and so in every thread
/// spawned after), and turn them into a message from a waiting thread.
fn signals(tx: mpsc::Sender<()>) -> Result<(), String> {
    // SAFETY: plain signal-set manipulation on a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(format!("pthread_sigmask failed: {rc}"));
        }
        let set = set;
        std::thread::spawn(move || loop {
            let mut sig = 0;
            libc::sigwait(&set, &mut sig);
            if tx.send(()).is_err() {
                break;
            }
        });
    }
    Ok(())
}

fn run(args: Args) -> Result<(), String> {
    if args.stats {
        let p = args.mount.join(CTL_DIR).join("stats");
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        print!("{text}");
        return Ok(());
    }
    let backing = args.backing.expect("clap requires --backing");
    let backing = backing.canonicalize().map_err(|e| format!("{}: {e}", backing.display()))?;
    if !backing.is_dir() {
        return Err(format!("{}: not a directory", backing.display()));
    }
    let timeout = Duration::from_millis(args.timeout_ms);
    let servers: Vec<String> =
        args.servers.iter().filter(|s| !s.is_empty()).cloned().chain(args.transport.unix_servers()).collect();
    let remote = if servers.is_empty() {
        None
    } else {
        let builder =
            args.transport.apply(recall_client::Client::builder()).map_err(|e| format!("recall client: {e}"))?;
        let builder =
            servers.iter().fold(builder, |b, s| b.server(s.as_str())).connect_timeout(timeout).request_timeout(timeout);
        let client = |b| -> Result<Box<dyn Remote>, String> {
            let c = recall_client::blocking::Client::from_builder(b).map_err(|e| format!("recall client: {e}"))?;
            Ok(Box::new(c))
        };
        Some(Remotes { cache: client(builder.clone())?, invalidations: client(builder)? })
    };
    let (tx, rx) = mpsc::channel();
    signals(tx.clone())?;
    let ended = tx.clone();
    let cfg = Config {
        backing: backing.clone(),
        max_file_size: args.max_file_size,
        classes: Classes::new(&args.permanent, args.exptime)?,
        write_buffer: args.write_buffer,
        chunk_size: args.chunk_size,
        delay: Delay {
            data: Duration::from_micros(args.backing_delay_us),
            meta: Duration::from_micros(args.backing_meta_delay_us),
        },
        attr_ttl: Duration::from_millis(args.attr_timeout_ms),
    };
    let mut fs = RecallFs::new(cfg, remote, Some(tx));
    let (notices, notice_rx) = mpsc::channel::<u64>();
    fs.set_notices(notices);
    let mut opts = vec![
        MountOption::FSName(format!("recall-fs:{}", backing.display())),
        MountOption::Subtype("recall-fs".into()),
        MountOption::DefaultPermissions,
    ];
    if args.allow_other {
        opts.push(MountOption::AllowOther);
    }
    let session =
        fuser::spawn_mount2(fs, &args.mount, &opts).map_err(|e| format!("mount at {}: {e}", args.mount.display()))?;
    // Attribute invalidations, off the session thread (see recall_fs::pages).
    let notifier = session.notifier();
    std::thread::spawn(move || {
        for ino in notice_rx {
            // ENOENT: the kernel no longer holds the inode; nothing to drop.
            let _ = notifier.inval_inode(ino, -1, 0);
        }
    });
    println!("mounted at {}", args.mount.display());
    let _ = std::io::stdout().flush();
    // A signal, or the session ending (unmounted from outside).
    let _ = rx.recv();
    // Unmount lazily (fuser's own unmount is refused while a file is open,
    // and exiting anyway would drop the open files'
    // buffered writes): the mount point is free at once, files still open
    // go on working, and the session ends once the last of them is closed,
    // its buffered writes then in the backing directory. A second signal
    // stops at once. (Already unmounted from outside: fusermount3 finds
    // nothing to do.)
    let _ = std::process::Command::new("fusermount3")
        .args(["-u", "-z", "-q", "--"])
        .arg(&args.mount)
        .stderr(std::process::Stdio::null())
        .status();
    std::thread::spawn(move || {
        let _ended = Ended(ended);
        session.join();
    });
    let _ = rx.recv();
    eprintln!("recall-fs: unmounted {}", args.mount.display());
    Ok(())
}

/// Tells `run` that the session thread is done, even if it panicked.
struct Ended(mpsc::Sender<()>);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recall-fs: {e}");
            ExitCode::FAILURE
        }
    }
}
