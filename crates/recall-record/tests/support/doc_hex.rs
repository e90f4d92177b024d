// The worked `replay_batch` example of docs/durability-protocol.md, read
// from the file: the first fenced block after the marker comment that
// names this test. Shared with recall-engine's durability tests (by path),
// which send the same bytes to an engine.

use std::path::Path;

/// The hex of a block: on each line, everything after `#` is a comment and
/// the rest is whitespace-separated hex bytes.
pub fn parse(block: &str) -> Vec<u8> {
    block
        .lines()
        .flat_map(|l| l.split('#').next().unwrap_or("").split_whitespace())
        .map(|t| u8::from_str_radix(t, 16).unwrap_or_else(|_| panic!("not a hex byte in the example: {t:?}")))
        .collect()
}

/// The example's bytes, as the document has them.
pub fn example_bytes() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/durability-protocol.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let marker = text
        .find("crates/recall-record/tests/protocol_doc.rs")
        .unwrap_or_else(|| panic!("{}: no marker naming protocol_doc.rs before the example", path.display()));
    let rest = &text[marker..];
    let open =
        rest.find("```text\n").unwrap_or_else(|| panic!("{}: no ```text block after the marker", path.display()));
    let body = &rest[open + "```text\n".len()..];
    let close = body.find("\n```").unwrap_or_else(|| panic!("{}: the example block is not closed", path.display()));
    parse(&body[..close])
}
