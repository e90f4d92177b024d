//! What the configuration shows users, pinned byte for byte: the
//! `--print-config` TOML and the `stats settings` lines, for the defaults,
//! for many flags at once, for cluster mode and for a file that spells
//! values in ways recalld would not write them itself
//! (tests/config_pins/NAME.args, one argument per line; `$PINS` is that
//! directory). The files were recorded from recalld before its settings
//! became typed values, so a change in how a setting is parsed or held
//! cannot change what an operator or a script reads.

use std::path::Path;
use std::process::Command;

use clap::Parser;
use recall_server::config::{Cli, Config};

const PINNED: [&str; 4] = ["default", "flags", "cluster", "file"];

fn pins() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/config_pins"))
}

fn pinned(name: &str, what: &str) -> String {
    let path = pins().join(format!("{name}.{what}"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn args(name: &str) -> Vec<String> {
    let dir = pins().to_str().expect("utf-8 path");
    pinned(name, "args").lines().map(|l| l.replace("$PINS", dir)).collect()
}

#[test]
fn print_config_is_what_it_was() {
    for name in PINNED {
        let o = Command::new(env!("CARGO_BIN_EXE_recalld"))
            .args(args(name))
            .arg("--print-config")
            .output()
            .expect("run recalld");
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout), pinned(name, "print-config.toml"), "{name}");
    }
}

#[test]
fn stats_settings_are_what_they_were() {
    for name in PINNED {
        let cli = Cli::try_parse_from(std::iter::once("recalld".to_string()).chain(args(name))).expect(name);
        let (c, _) = Config::from_cli(&cli).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text: String = c.stats_settings().iter().map(|(k, v)| format!("STAT {k} {v}\n")).collect();
        assert_eq!(text, pinned(name, "stats-settings.txt"), "{name}");
    }
}
