//! The binary protocol (magic 0x80). Filled in by the binary-protocol work.
