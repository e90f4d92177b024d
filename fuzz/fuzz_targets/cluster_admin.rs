//! `recall_proto::cluster_admin`: the `cluster ...` admin commands (the
//! words after `cluster`) and the `cluster status` reply the CLI reads.
//!
//! Input: byte 0 picks the reader (even: a command line, split at
//! spaces; odd: a status reply, split at `\n`), the rest is its input.
//! Invariants:
//! * never panics;
//! * a command it reads renders to a line that reads as the same command;
//! * a status it reads renders back to lines it reads as the same status.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::cluster_admin::{Admin, Status};

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else { return };
    if which % 2 == 0 {
        let words: Vec<&[u8]> = data.split(|&b| b == b' ').collect();
        let Some(Ok(cmd)) = Admin::parse(&words) else { return };
        let mut line = Vec::new();
        cmd.render(&mut line);
        let line = line.strip_suffix(b"\r\n").expect("rendered with CRLF");
        let words: Vec<&[u8]> = line.split(|&b| b == b' ').skip(1).collect();
        assert_eq!(Admin::parse(&words).expect("an admin command").expect("a rendered command reads"), cmd);
    } else {
        let Ok(st) = Status::parse(data.split(|&b| b == b'\n')) else { return };
        let mut out = Vec::new();
        st.render(&mut out);
        let text = out.strip_suffix(b"END\r\n").expect("rendered with END");
        let lines: Vec<&[u8]> = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .collect();
        assert_eq!(Status::parse(lines).expect("a rendered status reads"), st);
    }
});
