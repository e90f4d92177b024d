//! Admin lines memcached checks although recall has nothing behind them:
//! `lru` and `slabs`. A line memcached accepts answers `OK`; the others get
//! memcached's error, so scripts that tune memcached see the same replies.

use super::{Command, Decoded, Request, Tokens};
use crate::num::{parse_i32, parse_u32};
use crate::{msg, ErrorKind, ProtoError};

/// `lru tune <hot pct> <warm pct> <hot factor> <warm factor>`, `lru mode
/// flat|segmented`, `lru temp_ttl <ttl>`, checked as memcached checks them.
/// recall's policy has no such knobs at run time: a valid line answers
/// `OK` and changes nothing.
pub(super) fn decode_lru<'a>(t: &Tokens<'a>, ntok: usize, consumed: usize) -> Result<Decoded<'a>, ProtoError<'a>> {
    let num = |i: usize| std::str::from_utf8(t.toks[i]).ok().and_then(|s| s.parse::<f64>().ok());
    let line = |l: &'static str| Err(ProtoError::new(ErrorKind::Client(l), consumed));
    let ok = || Ok(Decoded::Request(Request { cmd: Command::AdminNoop, noreply: false }, consumed));
    match (ntok, t.toks.get(1).copied().unwrap_or_default()) {
        (6.., b"tune") => match (parse_u32(t.toks[2]), parse_u32(t.toks[3]), num(4), num(5)) {
            (Some(hot), Some(warm), Some(_), Some(_)) if u64::from(hot) + u64::from(warm) > 80 => line(msg::LRU_PCTS),
            (Some(_), Some(_), Some(hf), Some(f)) if hf <= 0.0 || f <= 0.0 => line(msg::LRU_FACTORS),
            (Some(_), Some(_), Some(_), Some(_)) => ok(),
            _ => Err(ProtoError::new(ErrorKind::UnknownCommand, consumed)),
        },
        (3.., b"mode") if matches!(t.toks[2], b"flat" | b"segmented") => ok(),
        (3.., b"temp_ttl") if parse_i32(t.toks[2]).is_some() => ok(),
        _ => Err(ProtoError::new(ErrorKind::UnknownCommand, consumed)),
    }
}

/// `slabs automove <0|1|2|ratio r|freeratio r|window n>` and `slabs
/// reassign <src> <dst>`, checked as memcached checks them. recall has no
/// slab classes, so a valid line changes nothing and answers `OK`.
pub(super) fn decode_slabs<'a>(t: &Tokens<'a>, ntok: usize, consumed: usize) -> Result<Decoded<'a>, ProtoError<'a>> {
    let err = |kind| Err(ProtoError::new(kind, consumed));
    let ok = || Ok(Decoded::Request(Request { cmd: Command::AdminNoop, noreply: false }, consumed));
    let num = |i: usize| ntok > i && std::str::from_utf8(t.toks[i]).is_ok_and(|s| s.parse::<f64>().is_ok());
    match (ntok, t.toks.get(1).copied().unwrap_or_default()) {
        (4, b"reassign") => match (parse_i32(t.toks[2]), parse_i32(t.toks[3])) {
            (Some(_), Some(_)) => ok(),
            _ => err(ErrorKind::Client(msg::BAD_FORMAT)),
        },
        (3.., b"automove") => match t.toks[2] {
            b"ratio" | b"freeratio" if num(3) => ok(),
            b"ratio" | b"freeratio" => err(ErrorKind::UnknownCommand),
            b"window" => match (ntok > 3).then(|| parse_u32(t.toks[3])).flatten() {
                Some(3..=1800) => ok(),
                Some(_) => err(ErrorKind::Client(msg::AUTOMOVE_WINDOW)),
                None => err(ErrorKind::Client(msg::BAD_FORMAT)),
            },
            level => match parse_u32(level) {
                Some(0..=2) => ok(),
                Some(_) => err(ErrorKind::UnknownCommand),
                None => err(ErrorKind::Client(msg::BAD_FORMAT)),
            },
        },
        _ => err(ErrorKind::UnknownCommand),
    }
}
