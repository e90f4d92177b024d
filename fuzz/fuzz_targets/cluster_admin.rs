//! `recall_proto::cluster_admin`: the `cluster ...` admin commands (the
//! words after `cluster`) and the `cluster status` reply the CLI reads.
//!
//! Input: byte 0 picks the reader (even: a command line, split at
//! spaces; odd: a status reply, split at `\n`), the rest is its input.
//! Invariants:
//! * never panics;
//! * a command it reads renders to a line that reads as the same command;
//! * a status it reads renders back to lines it reads as the same status;
//! * so does a status of several groups, whose group 0 is what the
//!   one-group reader reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use recall_proto::cluster_admin::{AdminCmd, Status};

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else { return };
    if which % 2 == 0 {
        let words: Vec<&[u8]> = data.split(|&b| b == b' ').collect();
        let Some(Ok(cmd)) = AdminCmd::parse(&words) else { return };
        let mut line = Vec::new();
        cmd.render(&mut line);
        let line = line.strip_suffix(b"\r\n").expect("rendered with CRLF");
        let words: Vec<&[u8]> = line.split(|&b| b == b' ').skip(1).collect();
        assert_eq!(AdminCmd::parse(&words).expect("an admin command").expect("a rendered command reads"), cmd);
    } else {
        if let Ok(groups) = Status::parse_groups(data.split(|&b| b == b'\n')) {
            assert_eq!(Status::parse(data.split(|&b| b == b'\n')).as_ref(), Ok(&groups[0]));
            let mut out = Vec::new();
            Status::render_groups(&groups, &mut out);
            let text = out.strip_suffix(b"END\r\n").expect("rendered with END");
            let lines = text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| l.strip_suffix(b"\r").unwrap_or(l));
            assert_eq!(Status::parse_groups(lines).expect("rendered groups read"), groups);
        }
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
