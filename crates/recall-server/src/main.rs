//! `recalld`: the memcached-compatible server.

use std::io::{IsTerminal, Write};

use clap::FromArgMatches;
use recall_server::config::{Cli, Config, LogFormat};

/// `recalld -i` prints it, as `memcached -i` prints memcached's.
const LICENSE: &str = include_str!("../../../LICENSE");

#[cfg(not(any(target_env = "msvc", feature = "system-allocator")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options built into recalld (an operator's `_RJEM_MALLOC_CONF`
/// is read after them, so it can override any):
///
/// * `background_thread:true`: without it, jemalloc returns freed pages to
///   the system only from inside later allocations, so a server that goes
///   quiet after a burst (400 clients that each sent most of a 1 MB get
///   line and hung up) keeps the burst's pages resident for good: 155–169
///   MB of them, measured, 40 s after the clients had gone.
/// * `dirty_decay_ms:1000` (jemalloc's default is 10 s): the background
///   thread gives those pages back within about a second. The cost is more
///   `madvise` under a steady load that frees large buffers and takes them
///   again; small buffers come from the thread caches and are untouched.
///   memcached (glibc's malloc, large buffers `mmap`ed) gives them back at
///   once.
/// * `muzzy_decay_ms:0` (the default, stated): purged pages are released
///   straight away rather than parked as lazily-freed memory, which still
///   counts in RSS until the kernel needs it.
#[cfg(not(any(target_env = "msvc", feature = "system-allocator")))]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: Option<&'static libc::c_char> = Some(
    // SAFETY: the pointer is to the first byte of a C string literal,
    // which lives for the whole program.
    unsafe { &*c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr() },
);

/// jemalloc reads this environment variable once, at its first allocation.
const JEMALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

/// `-L` (memcached's "try to use large memory pages"): back the heap with
/// transparent huge pages. A lookup is a chain of dependent loads into a
/// heap of tens of megabytes or more, and with 4 KiB pages most of them also
/// miss the TLB (docs/benchmarks/memory-and-profile.md has the measurement).
/// jemalloc fixes its options before `main` runs, so the only way to switch
/// them from a flag is to start again with them in the environment; the
/// re-exec happens before any thread or socket exists. An operator who set
/// the variable already keeps their own setting.
#[cfg(target_os = "linux")]
fn reexec_with_large_pages() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(JEMALLOC_CONF_ENV).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let err =
        std::process::Command::new(exe).args(std::env::args_os().skip(1)).env(JEMALLOC_CONF_ENV, "thp:always").exec();
    eprintln!("recalld: -L: could not restart with large pages ({err}); continuing without");
}

fn main() {
    let cli = Cli::from_arg_matches(&Cli::command_with_defaults().get_matches()).unwrap_or_else(|e| e.exit());
    if cli.license {
        // Not print!: `recalld -i | head` must not panic on the closed pipe.
        let _ = std::io::stdout().write_all(LICENSE.as_bytes());
        return;
    }
    #[cfg(target_os = "linux")]
    if cli.large_pages {
        reexec_with_large_pages();
    }
    // The offline tools: run one, print its report, exit (65 on a finding).
    type Tool = fn(&std::path::Path) -> Result<String, String>;
    let tools: [(&Option<std::path::PathBuf>, Tool); 3] = [
        (&cli.check_snapshot, recall_server::persist::check_file),
        (&cli.check_wal, recall_server::walcheck::check),
        (&cli.repair_wal, recall_server::walcheck::repair),
    ];
    for (arg, tool) in tools {
        if let Some(dir) = arg {
            match tool(dir) {
                Ok(s) => {
                    println!("{s}");
                    return;
                }
                Err(e) => {
                    eprintln!("recalld: {e}");
                    std::process::exit(65);
                }
            }
        }
    }
    let (cfg, warnings) = match Config::from_cli(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("recalld: {e}");
            std::process::exit(64);
        }
    };
    if cli.print_config {
        print!("{}", toml::to_string(&cfg).expect("config serializes"));
        return;
    }
    if let Err(e) = init_logging(&cli, cfg.verbosity) {
        eprintln!("recalld: {e}");
        std::process::exit(64);
    }
    for w in warnings {
        tracing::warn!("{w}");
    }
    // -d: fork now, while this is the only thread (daemon.rs).
    if cli.daemon {
        if let Err(e) = recall_server::daemon::daemonize(cfg.verbosity > 0 || cli.log_file.is_some()) {
            eprintln!("recalld: -d: could not run in the background: {e}");
            std::process::exit(71);
        }
    }
    if let Err(e) = recall_server::server::run(cfg) {
        eprintln!("recalld: {e}");
        // A settings problem found at start (a certificate file) is a
        // usage error, as in memcached; anything else an OS error.
        let usage = e.kind() == std::io::ErrorKind::InvalidInput;
        std::process::exit(if usage { 64 } else { 71 });
    }
}

/// The log: `RUST_LOG` if set (tracing's EnvFilter syntax, e.g.
/// `RUST_LOG=recall_server=debug,openraft=warn`), else the level `-v`s
/// give: warnings by default, `-v` info, `-vv` debug (each command and
/// reply line, verbose.rs), `-vvv` trace. To stderr, or appended to
/// `--log-file`; text or `--log-format json`.
fn init_logging(cli: &Cli, verbosity: u8) -> Result<(), String> {
    let level = match verbosity {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into());
    let (writer, ansi) = match &cli.log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("--log-file {}: {e}", path.display()))?;
            (tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::sync::Mutex::new(file)), false)
        }
        // Colour only for a person at a terminal, not in journald or a pipe.
        None => (tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr), std::io::stderr().is_terminal()),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    match cli.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

#[cfg(all(test, not(any(target_env = "msvc", feature = "system-allocator"))))]
mod tests {
    /// The store counts an item's allocation against `-m` at the size its
    /// rule says jemalloc hands out; here jemalloc, this binary's
    /// allocator, answers for itself.
    #[test]
    fn the_stores_allocation_sizes_are_what_jemalloc_hands_out() {
        let sizes = (1..=4096).chain((4097..=2 << 20).step_by(509)).chain([60 * 1024 + 16, 1 << 20, (1 << 20) + 1]);
        for n in sizes {
            let b = vec![0u8; n].into_boxed_slice();
            // SAFETY: a live allocation of the global allocator (jemalloc).
            let usable = unsafe { tikv_jemallocator::usable_size(b.as_ptr()) };
            assert_eq!(recall_store::item::alloc_size(n), usable, "a request of {n} bytes");
        }
    }
}
