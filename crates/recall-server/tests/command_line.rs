//! recalld's own command line: `--help`, `-i`, and how warnings are printed.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

fn recalld(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_recalld")).args(args).output().expect("run recalld")
}

/// The line of `--help` that documents `flag` (clap puts the text on the
/// line after the flag's own).
fn help_for(help: &str, flag: &str) -> String {
    let lines: Vec<&str> = help.lines().collect();
    let i = lines.iter().position(|l| l.trim_start().starts_with(flag)).unwrap_or_else(|| panic!("{flag} in {help}"));
    format!("{} {}", lines[i], lines.get(i + 1).unwrap_or(&""))
}

#[test]
fn help_shows_the_embedded_defaults() {
    let o = recalld(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for (flag, default) in [
        ("-p,", "[default: 11211]"),
        ("-l,", "[default: 127.0.0.1]"),
        ("-m,", "[default: 64]"),
        ("-c,", "[default: 1024]"),
        ("-I,", "[default: 1m]"),
        ("-U,", "[default: 0]"),
        ("--durability", "[default: client-backup]"),
    ] {
        assert!(help_for(&help, flag).contains(default), "{flag}: {}", help_for(&help, flag));
    }
    assert!(help_for(&help, "-i,").contains("Print the licence"), "{help}");
}

#[test]
fn shown_defaults_do_not_override_the_config_file() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("recalld-cmdline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("recalld.toml");
    std::fs::write(&file, "port = 12345\nmax_item_size = \"4m\"\n").expect("write config");
    let o = recalld(&["--config", file.to_str().expect("utf-8 path"), "--print-config"]);
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("port = 12345") && text.contains("max_item_size = \"4m\""), "{text}");
}

#[test]
fn dash_i_prints_the_licence() {
    let o = recalld(&["-i"]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Apache License") && text.contains("Version 2.0"), "{text}");
    assert!(o.stderr.is_empty(), "no warning: -i is not ignored");
}

#[test]
fn a_warning_is_printed_once_without_colour_codes_into_a_pipe() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_recalld"))
        .args(["-p", "-1", "-l", "127.0.0.1", "-U", "0", "-t", "1", "-k"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recalld");
    // Warnings come before the listener; once it listens they are written.
    let stdout = child.stdout.take().expect("stdout");
    let listening = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.starts_with("listening on "));
    let _ = child.kill();
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read stderr");
    let _ = child.wait();
    assert!(listening, "{err}");
    assert_eq!(err.matches("-k: accepted, no effect").count(), 1, "{err}");
    assert!(!err.contains('\x1b'), "{err:?}");
}

/// docs/operating.md names only flags `recalld --help` has (the flags of
/// the other programs it shows are listed here by name).
#[test]
fn the_operator_s_guide_names_only_flags_recalld_has() {
    const OTHER_PROGRAMS: [&str; 5] = [
        "--deb",            // scripts/release
        "--group",          // recall cluster ...
        "--locked",         // cargo install
        "--path",           // cargo install
        "--sasl-auth-file", // recall (the client's SASL login)
    ];
    let o = recalld(&["--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    let has: std::collections::HashSet<String> = flags(&help).into_iter().collect();
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operating.md")).unwrap();
    let named = flags(&guide);
    assert!(named.len() > 30, "{named:?}");
    let unknown: Vec<&String> =
        named.iter().filter(|f| !has.contains(*f) && !OTHER_PROGRAMS.contains(&f.as_str())).collect();
    assert!(unknown.is_empty(), "docs/operating.md names flags recalld does not have: {unknown:?}");
}

/// `-x` and `--long-name` words (not inside another word, as in `a-b`).
fn flags(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for i in 0..b.len() {
        let starts = b[i] == b'-' && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-'));
        if !starts {
            continue;
        }
        let long = b.get(i + 1) == Some(&b'-');
        let from = if long { i + 2 } else { i + 1 };
        let mut end = from;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || (long && b[end] == b'-')) {
            end += 1;
        }
        let word = &text[from..end];
        let first_is_letter = word.bytes().next().is_some_and(|c| c.is_ascii_alphabetic());
        match (long, word.len()) {
            (true, n) if n > 1 && first_is_letter => out.push(format!("--{word}")),
            // A short flag is one letter (`-vv` is `-v` counted).
            (false, _) if first_is_letter && word.bytes().all(|c| c == word.as_bytes()[0]) => {
                out.push(format!("-{}", &word[..1]))
            }
            _ => {}
        }
    }
    out.sort();
    out.dedup();
    out
}
