use proptest::prelude::*;

use super::*;

fn dec(b: &[u8]) -> Result<Decoded<'_>, ProtoError<'_>> {
    decode(b, &Limits::default())
}

fn req(b: &[u8]) -> (Command<'_>, bool, usize) {
    match dec(b) {
        Ok(Decoded::Request(r, n)) => (r.cmd, r.noreply, n),
        other => panic!("{:?} for {:?}", other, String::from_utf8_lossy(b)),
    }
}

fn kind(b: &[u8]) -> ErrorKind {
    match dec(b) {
        Err(e) => e.kind,
        other => panic!("{other:?}"),
    }
}

#[test]
fn get_and_gets() {
    let (c, _, n) = req(b"get a b  c\r\nrest");
    assert_eq!(n, 12);
    let Command::Get { kind, keys: k, .. } = c else { panic!() };
    assert_eq!(kind, GetKind::Get);
    assert_eq!(keys(k).collect::<Vec<_>>(), vec![&b"a"[..], b"b", b"c"]);
    assert_eq!(kind_of(b"get\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    let long = format!("get {}\r\n", "k".repeat(251));
    assert_eq!(kind_of(long.as_bytes()), ErrorKind::Client(msg::BAD_FORMAT));
}

fn kind_of(b: &[u8]) -> ErrorKind {
    kind(b)
}

#[test]
fn set_needs_whole_block() {
    assert_eq!(dec(b"set k 1 0 5\r\nhel"), Ok(Decoded::Incomplete));
    let (c, noreply, n) = req(b"set k 1 0 5 noreply\r\nhello\r\n");
    assert!(noreply);
    assert_eq!(n, 28);
    assert_eq!(c, Command::Store { cmd: StoreCmd::Set, key: b"k", flags: 1, exptime: 0, cas: 0, data: b"hello" });
}

#[test]
fn store_errors() {
    assert_eq!(kind(b"set k 0 0 -1\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    assert_eq!(kind(b"set k x 0 1\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    assert_eq!(kind(b"set k 0 0\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    let e = dec(b"set k 0 0 1\r\nab\r\n").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Client(msg::BAD_CHUNK));
    assert_eq!(e.consumed, 16);
    let e = dec(b"set k 0 0 2000000\r\nabc").unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge);
    assert_eq!(e.consumed, 22);
    assert_eq!(e.swallow, 2_000_002 - 3);
    assert_eq!(e.drop_key, Some(&b"k"[..]));
}

#[test]
fn item_size_boundary_matches_memcached_arithmetic() {
    let l = Limits { item_size_max: 1024, ..Limits::default() };
    assert!(l.item_fits(1, 1024 - 60, 0));
    assert!(!l.item_fits(1, 1024 - 59, 0));
    assert!(!l.item_fits(1, 1024 - 60, 7), "non-zero flags cost 4 bytes, as in memcached");
}

#[test]
fn delete_forms() {
    assert!(matches!(req(b"delete k\r\n").0, Command::Delete { .. }));
    assert!(req(b"delete k noreply\r\n").1);
    assert!(matches!(req(b"delete k 0\r\n").0, Command::Delete { .. }));
    // Current memcached reads the key and ignores the rest.
    assert!(matches!(req(b"delete k 5\r\n").0, Command::Delete { .. }));
    assert!(req(b"delete k 0 x noreply\r\n").1);
    assert_eq!(kind(b"delete\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
}

/// Current memcached's rules for a bad storage line: no length, the line
/// alone; with a length, the data block goes with it.
#[test]
fn bad_storage_lines() {
    let e = dec(b"set k 0 0\r\nab\r\n").unwrap_err();
    assert_eq!((e.kind, e.consumed, e.swallow), (ErrorKind::Client(msg::BAD_FORMAT), 11, 0));
    let e = dec(b"cas k 0 0 2\r\nab\r\n").unwrap_err();
    assert_eq!((e.kind, e.consumed, e.swallow), (ErrorKind::Client(msg::BAD_FORMAT), 17, 0));
    let e = dec(b"set k x 0 5\r\nab").unwrap_err();
    assert_eq!((e.kind, e.consumed, e.swallow), (ErrorKind::Client(msg::BAD_FORMAT), 15, 5));
    let e = dec(b"cas k 0 0 2 noreply\r\nab\r\n").unwrap_err();
    assert!(e.noreply, "noreply as the last token hides the error");
    assert_eq!(e.consumed, 25);
    // Tokens after the length are ignored.
    let (c, noreply, _) = req(b"set k 0 0 2 3 4\r\nab\r\n");
    assert!(matches!(c, Command::Store { data: b"ab", .. }) && !noreply);
    assert_eq!(kind(b"get\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    assert_eq!(kind(b"mg\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    assert_eq!(kind(b"GET / HTTP/1.0\r\n"), ErrorKind::Close);
}

#[test]
fn arith_touch_flush() {
    assert_eq!(req(b"incr k 5\r\n").0, Command::Arith { incr: true, key: b"k", delta: 5 });
    assert_eq!(kind(b"incr k x\r\n"), ErrorKind::Client(msg::BAD_DELTA));
    assert_eq!(req(b"touch k 10\r\n").0, Command::Touch { key: b"k", exptime: 10 });
    assert_eq!(kind(b"touch k x\r\n"), ErrorKind::Client(msg::BAD_EXPTIME));
    assert_eq!(req(b"flush_all\r\n").0, Command::FlushAll { delay: 0 });
    assert_eq!(req(b"flush_all 10\r\n").0, Command::FlushAll { delay: 10 });
    assert!(req(b"flush_all noreply\r\n").1);
    assert_eq!(kind(b"flush_all x\r\n"), ErrorKind::Client(msg::BAD_EXPTIME));
}

#[test]
fn lines() {
    assert_eq!(kind(b"bogus\r\n"), ErrorKind::UnknownCommand);
    assert_eq!(kind(b"\r\n"), ErrorKind::Client(msg::BAD_FORMAT), "under four bytes");
    assert_eq!(kind(b"mn\n"), ErrorKind::Client(msg::BAD_FORMAT));
    assert_eq!(kind(b"      \r\n"), ErrorKind::UnknownCommand);
    assert_eq!(req(b"version\n").2, 8, "bare LF ends a line");
    let long = vec![b'x'; 3000];
    assert_eq!(kind(&long), ErrorKind::Close);
    let mut get = b"get ".to_vec();
    get.extend(vec![b'k'; 3000]);
    assert_eq!(dec(&get), Ok(Decoded::Incomplete), "a long get line is allowed to grow");
}

#[test]
fn meta() {
    let (c, _, _) = req(b"mg foo v k c\r\n");
    let Command::MetaGet { key, flags } = c else { panic!() };
    assert_eq!(&*key, b"foo");
    assert!(flags.ret_value && flags.ret_key && flags.ret_cas);
    let (c, _, n) = req(b"ms foo 2 T0 F5\r\nhi\r\n");
    assert_eq!(n, 20);
    let Command::MetaSet { data, flags, .. } = c else { panic!() };
    assert_eq!(data, b"hi");
    assert_eq!(flags.client_flags, Some(5));
    let (c, _, _) = req(b"mg Zm9v b v\r\n");
    let Command::MetaGet { key, .. } = c else { panic!() };
    assert_eq!(&*key, b"foo");
    assert_eq!(kind(b"ms foo x\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    // An unknown letter is refused with the value; a flag that is not a
    // letter at all is the tokenizer's refusal, of the line alone.
    let e = dec(b"ms foo 2 Z\r\nhi\r\n").unwrap_err();
    assert_eq!((e.kind, e.consumed), (ErrorKind::Client(msg::INVALID_FLAG), 16));
    let e = dec(b"ms foo 2 !\r\nhi\r\n").unwrap_err();
    assert_eq!((e.kind, e.consumed), (ErrorKind::Client(msg::BAD_FORMAT), 12));
    assert_eq!(kind(b"mg\r\n"), ErrorKind::Client(msg::BAD_FORMAT));
    assert_eq!(kind(b"ma k MX\r\n"), ErrorKind::Client(msg::BAD_MA_MODE));
    assert_eq!(req(b"mn\r\n").0, Command::MetaNoop);
}

proptest! {
    /// The decoder never panics, never claims more bytes than it was given
    /// (unless it says to swallow the rest), and is prefix-stable: if a
    /// buffer decodes to a request, appending bytes doesn't change it.
    #[test]
    fn decode_is_total(input in proptest::collection::vec(any::<u8>(), 0..300), extra in proptest::collection::vec(any::<u8>(), 0..20)) {
        match dec(&input) {
            Ok(Decoded::Request(r, n)) => {
                prop_assert!(n <= input.len());
                let mut longer = input.clone();
                longer.extend_from_slice(&extra);
                match dec(&longer) {
                    Ok(Decoded::Request(r2, n2)) => { prop_assert_eq!(r, r2); prop_assert_eq!(n, n2); }
                    other => prop_assert!(false, "not prefix-stable: {:?}", other),
                }
            }
            Ok(Decoded::Incomplete) => {}
            Err(e) => prop_assert!(e.consumed <= input.len()),
        }
    }

    /// Structured fuzz: command-shaped lines.
    #[test]
    fn decode_command_shaped(cmd in prop::sample::select(vec!["get", "gets", "gat", "set", "cas", "add", "incr", "delete", "touch", "mg", "ms", "md", "ma", "me", "flush_all", "verbosity"]),
                             args in proptest::collection::vec("[a-zA-Z0-9 ]{0,12}", 0..6)) {
        let line = format!("{} {}\r\n", cmd, args.join(" "));
        let b = line.as_bytes();
        match dec(b) {
            Ok(Decoded::Request(_, n)) => prop_assert!(n <= b.len()),
            Ok(Decoded::Incomplete) => {}
            Err(e) => prop_assert!(e.consumed <= b.len()),
        }
    }
}

#[test]
fn client_registry_commands() {
    assert_eq!(req(b"hello app-1\r\n"), (Command::Hello { id: b"app-1" }, false, 13));
    assert_eq!(req(b"replay_done app-1\r\n").0, Command::ReplayDone { id: b"app-1" });
    assert_eq!(req(b"goodbye app-1\r\n").0, Command::Goodbye { id: b"app-1" });
    let id250 = format!("hello {}\r\n", "i".repeat(250));
    assert!(matches!(req(id250.as_bytes()).0, Command::Hello { id } if id.len() == 250));
    let bad = ErrorKind::Client(msg::BAD_CLIENT_ID);
    for line in [
        &b"hello\r\n"[..],
        b"hello a b\r\n",
        b"replay_done\r\n",
        b"goodbye a noreply\r\n",
        b"hello a\tb\r\n",
        b"hello a\x7fb\r\n",
        b"hello a\x01\r\n",
    ] {
        assert_eq!(kind(line), bad, "{:?}", String::from_utf8_lossy(line));
    }
    let id251 = format!("hello {}\r\n", "i".repeat(251));
    assert_eq!(kind(id251.as_bytes()), bad);
    assert!(matches!(dec(b"hello app"), Ok(Decoded::Incomplete)));
    assert!(client_id_ok("é".as_bytes()));
}

#[test]
fn meta_get_with_written_timestamp() {
    let (c, _, n) = req(b"mg k v w42 c\r\n");
    assert_eq!(n, 14);
    let Command::MetaGet { key, flags } = c else { panic!() };
    assert_eq!((&key[..], flags.written, flags.ret_cas), (&b"k"[..], 42, true));
    assert_eq!(kind(b"mg k w\r\n"), ErrorKind::Client(msg::BAD_TOKEN));
    assert_eq!(kind(b"mg k w1 w2\r\n"), ErrorKind::Client(msg::DUP_FLAG));
}

#[test]
fn timestamps_switch() {
    assert_eq!(req(b"timestamps on\r\n"), (Command::Timestamps { on: true }, false, 15));
    assert_eq!(req(b"timestamps  off\r\n").0, Command::Timestamps { on: false });
    for bad in [&b"timestamps\r\n"[..], b"timestamps yes\r\n", b"timestamps on noreply\r\n"] {
        assert_eq!(kind(bad), ErrorKind::Client(msg::BAD_FORMAT), "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn pending_value_of_a_partial_meta_set() {
    let lim = Limits::default();
    let p = pending_value(b"ms key 1000 T0 F5\r\nvvv", &lim).unwrap();
    assert_eq!((p.key.as_ref(), p.value_len, p.total), (&b"key"[..], 1000, 19 + 1002));
    assert!(p.drop_on_refusal);
    assert_eq!(p.reply, crate::PendingReply::Text);
    // A base64 key is decoded.
    let p = pending_value(b"ms a2V5 5 b\r\n", &lim).unwrap();
    assert_eq!(p.key.as_ref(), b"key");
    // The line not in yet, the request complete, another command, a bad line.
    assert_eq!(pending_value(b"ms key 1000", &lim), None);
    assert_eq!(pending_value(b"ms key 1 T0\r\nv\r\n", &lim), None);
    assert_eq!(pending_value(b"set key 0 0 1000\r\nvv", &lim), None);
    assert_eq!(pending_value(b"ms key -1\r\n", &lim), None);
    assert_eq!(pending_value(b"ms key 2000000\r\nvv", &lim), None);
}
