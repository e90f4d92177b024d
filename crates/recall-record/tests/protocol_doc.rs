//! The worked `replay_batch` example of docs/durability-protocol.md is
//! the bytes recall-record encodes: the hex block is parsed out of the
//! markdown file and compared with the same two records built here, so the
//! document and the format cannot drift apart.

#[path = "support/doc_hex.rs"]
mod doc_hex;

use recall_record::{ts, Record, HEADER};

#[test]
fn the_documented_replay_batch_is_what_recall_record_encodes() {
    let doc = doc_hex::example_bytes();
    let (t1, t2) = (ts::epoch_base(3) | 5, ts::epoch_base(3) | 6);
    assert_eq!((t1, t2), (3_298_534_883_333, 3_298_534_883_334), "the timestamps the text quotes");
    assert_eq!(ts::epoch_of(t1), 3);
    let records = [
        Record { tombstone: false, key: b"user:42", value: b"hello", flags: 42, exptime: 1_893_456_000, ts: t1 },
        Record { tombstone: true, key: b"old", value: b"", flags: 0, exptime: 0, ts: t2 },
    ];
    let mut body = Vec::new();
    for r in &records {
        r.encode(&mut body);
    }
    assert_eq!(body.len(), 59, "the text says 34 + 25 = 59 body bytes");
    assert_eq!(records[0].encoded_len(), HEADER + 12);
    let mut wire = format!("replay_batch {} {}\r\n", records.len(), body.len()).into_bytes();
    wire.extend_from_slice(&body);
    wire.extend_from_slice(b"\r\n");
    assert_eq!(doc, wire, "docs/durability-protocol.md's hex block and recall-record disagree");
    // And it decodes back to the same records.
    let head = doc.iter().position(|&b| b == b'\n').unwrap() + 1;
    let (r1, n1) = Record::decode(&doc[head..]).unwrap();
    let (r2, n2) = Record::decode(&doc[head + n1..]).unwrap();
    assert_eq!((r1, r2), (records[0], records[1]));
    assert_eq!(&doc[head + n1 + n2..], b"\r\n");
}

#[test]
fn the_parser_reads_what_it_is_given() {
    // A check on the checker: comments go, every other token is one byte.
    assert_eq!(doc_hex::parse("01 0a # x 99\n  ff#y\n"), vec![1, 10, 255]);
}
