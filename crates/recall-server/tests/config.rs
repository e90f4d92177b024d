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

/// A bad value stops the start with an error naming the flag or key and
/// the value, from the command line and from a file alike.
#[test]
fn bad_values_name_the_setting_and_the_value() {
    let refused = |args: &[&str]| {
        let cli = Cli::try_parse_from(std::iter::once("recalld").chain(args.iter().copied())).expect("flags parse");
        Config::from_cli(&cli).map(|_| ()).expect_err("refused").0
    };
    let flags: [(&[&str], &[&str]); 10] = [
        (&["--durability", "fsync"], &["invalid durability: fsync", "client-backup"]),
        (&["-B", "udp"], &["binding protocol: udp", "ascii"]),
        (&["-I", "lots"], &["invalid max item size: lots"]),
        (&["-o", "reply_budget=2t"], &["invalid reply_budget: \"2t\""]),
        (&["-o", "reply_budget=100"], &["invalid reply_budget: \"100\"", "1k to 1g"]),
        (&["-o", "policy=lfu"], &["unknown eviction policy \"lfu\""]),
        (&["-s", "/tmp/r.sock", "-a", "0800"], &["(-a)", "\"0800\""]),
        (&["--cluster-read", "eventually"], &["--cluster-read", "\"eventually\""]),
        (&["--cluster-node-id", "1", "--cluster-peer", "1=nowhere"], &["cluster peer \"1=nowhere\""]),
        (
            &["--cluster-node-id", "1", "--cluster-peer", "1=127.0.0.1:7001/127.0.0.1:1234", "--cluster-replicas", "2"],
            &["replicas is 2, more than the 1 peers", "--cluster-replicas"],
        ),
    ];
    for (args, says) in flags {
        let e = refused(args);
        assert!(says.iter().all(|s| e.contains(s)), "{args:?}: {e}");
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("recall-config-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("recalld.toml");
    let lines: [(&str, &[&str]); 8] = [
        ("durability = \"fsync\"", &["invalid durability: fsync", "`durability`"]),
        ("max_item_size = \"lots\"", &["invalid size \"lots\"", "`max_item_size`"]),
        ("unix_mask = \"rw\"", &["\"rw\"", "`unix_mask`"]),
        ("ssl_min_version = \"tlsv1.0\"", &["not offered", "`ssl_min_version`"]),
        ("snapshot_interval = -5", &["`snapshot_interval`"]),
        ("pid_file = 5", &["`pid_file`"]),
        ("[cluster]\nread = \"eventually\"", &["\"eventually\"", "`cluster.read`"]),
        ("[front_tier]\nreplacement = \"random\"", &["\"random\"", "`front_tier.replacement`"]),
    ];
    for (text, says) in lines {
        std::fs::write(&file, text).expect("write config");
        let e = refused(&["--config", file.to_str().expect("utf-8 path")]);
        assert!(e.contains("recalld.toml") && says.iter().all(|s| e.contains(s)), "{text}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
