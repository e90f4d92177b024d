//! `recalld`: the memcached-compatible server.

use clap::Parser;
use recall_server::config::{Cli, Config};

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cli = Cli::parse();
    if let Some(p) = &cli.check_snapshot {
        match recall_server::persist::check_file(p) {
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
    let level = match cfg.verbosity {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()))
        .with_writer(std::io::stderr)
        .init();
    for w in warnings {
        tracing::warn!("{w}");
        eprintln!("recalld: warning: {w}");
    }
    if let Err(e) = recall_server::server::run(cfg) {
        eprintln!("recalld: {e}");
        std::process::exit(71);
    }
}
