//! # recall-proto
//!
//! The memcached wire model and its codecs, without I/O and without a clock.
//!
//! A decoder takes the bytes received so far and returns one of:
//! * `Ok(Decoded::Request(req, consumed))`: a complete request, borrowing
//!   from the input, and how many bytes it used;
//! * `Ok(Decoded::Incomplete)`: not enough bytes yet;
//! * `Err(ProtoError)`: a typed error that maps onto memcached's exact reply
//!   line and says how many bytes to drop (and whether to close).
//!
//! Text and meta commands share one decoder ([`text::decode`]) because they
//! share one connection; the binary protocol has its own ([`binary`]).
//! The engine executes requests; the reply writers in [`reply`] turn results
//! into bytes.

pub mod binary;
pub mod cluster;
pub mod cluster_admin;
pub mod forward;
pub mod meta;
pub mod num;
pub mod replay;
pub mod reply;
pub mod sasl;
pub mod stream;
pub mod text;

pub use meta::MetaFlags;
pub use text::{Command, Decoded, Request, StoreCmd};

/// memcached's key length limit.
pub const KEY_MAX: usize = 250;

/// A command line longer than this without a newline closes the connection,
/// unless it is a `get`/`gets` (memcached's rule, from its 2048-byte buffer).
pub const LINE_MAX: usize = 2048;

/// Upper bound for a multi-get line, so a client cannot make us buffer
/// forever while waiting for a newline.
pub const GET_LINE_MAX: usize = 1 << 20;

/// Codec settings that change what is accepted.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// memcached `-I`: largest item, counted as memcached counts it
    /// (header + key + value + CRLF).
    pub item_size_max: usize,
    /// Classic storage commands with a value at least this long are
    /// returned as a header ([`text::Command::StoreStream`]) as soon as the
    /// line is complete, so the server can stream the value into chunks
    /// instead of buffering all of it first.
    pub stream_threshold: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { item_size_max: 1 << 20, stream_threshold: usize::MAX }
    }
}

impl Limits {
    /// Whether a value of `vlen` bytes under a key of `klen` bytes fits,
    /// using memcached's item arithmetic (48-byte header, 8-byte CAS, key +
    /// NUL, 4 bytes for non-zero client flags, value + CRLF) so the boundary
    /// is exactly where memcached puts it.
    pub fn item_fits(&self, klen: usize, vlen: usize, flags: u32) -> bool {
        let flags_len = if flags != 0 { 4 } else { 0 };
        vlen <= self.item_size_max && 48 + 8 + klen + 1 + flags_len + vlen + 2 <= self.item_size_max
    }
}

/// A storage request at the front of the input whose value has not all
/// arrived, and that its decoder waits for whole (a binary SET-family
/// request, a meta `ms`): enough is known, from the binary header or the
/// `ms` line, for the server to hold memory for the value before it is
/// buffered, or to refuse it and drop the value as it comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingValue<'a> {
    /// The key (decoded, for a base64 meta key).
    pub key: std::borrow::Cow<'a, [u8]>,
    pub value_len: usize,
    /// The whole request's length, from the front of the input.
    pub total: usize,
    /// A refusal removes the key's old value, as memcached unlinks it when
    /// it cannot allocate the item (binary SET/SETQ, meta `ms`).
    pub drop_on_refusal: bool,
    /// How a refusal is answered.
    pub reply: PendingReply,
}

/// The protocol a [`PendingValue`] is refused in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingReply {
    /// A binary error reply to this opcode and opaque.
    Binary { opcode: u8, opaque: u32 },
    /// A text line (meta `ms`).
    Text,
}

/// What went wrong, in the terms of the reply memcached sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `ERROR`: unknown command or wrong number of tokens.
    UnknownCommand,
    /// `CLIENT_ERROR <msg>`.
    Client(&'static str),
    /// `SERVER_ERROR object too large for cache`; the value is swallowed and,
    /// for a plain set, the old value is removed.
    TooLarge,
    /// The line is too long or otherwise hopeless: close the connection.
    Close,
}

/// A decoding error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError<'a> {
    pub kind: ErrorKind,
    /// Bytes of input to drop now (the bad line, or line plus data block).
    pub consumed: usize,
    /// Further bytes to drop as they arrive (a value that was refused before
    /// it was fully received).
    pub swallow: usize,
    /// The request asked for no reply; memcached still reports some errors.
    pub noreply: bool,
    /// For `TooLarge` on a plain set: the key whose old value must go.
    pub drop_key: Option<&'a [u8]>,
    /// Meta requests echo the opaque token on errors in some versions; kept
    /// for the encoder.
    pub meta: bool,
}

impl<'a> ProtoError<'a> {
    pub fn new(kind: ErrorKind, consumed: usize) -> Self {
        ProtoError { kind, consumed, swallow: 0, noreply: false, drop_key: None, meta: false }
    }

    /// The reply line for this error, without CRLF.
    pub fn line(&self) -> &'static [u8] {
        match self.kind {
            ErrorKind::UnknownCommand => b"ERROR",
            ErrorKind::Client(m) => m.as_bytes(),
            ErrorKind::TooLarge => b"SERVER_ERROR object too large for cache",
            ErrorKind::Close => b"",
        }
    }
}

/// Common CLIENT_ERROR texts, spelled as memcached spells them.
pub mod msg {
    pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
    pub const BAD_CHUNK: &str = "CLIENT_ERROR bad data chunk";
    pub const BAD_DELTA: &str = "CLIENT_ERROR invalid numeric delta argument";
    pub const BAD_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";
    pub const NON_NUMERIC: &str = "CLIENT_ERROR cannot increment or decrement non-numeric value";
    pub const AUTOMOVE_WINDOW: &str = "CLIENT_ERROR automove window too low or too high";
    pub const LRU_PCTS: &str = "ERROR hot and warm pcts must not exceed 80";
    pub const LRU_FACTORS: &str = "ERROR hot/warm age factors must be greater than 0";
    pub const SHUTDOWN_MODE: &str = "CLIENT_ERROR invalid shutdown mode";
    pub const SHUTDOWN_DISABLED: &str = "SERVER_ERROR: shutdown not enabled";
    pub const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";
    pub const DUP_FLAG: &str = "CLIENT_ERROR duplicate flag";
    pub const INVALID_FLAG: &str = "CLIENT_ERROR invalid flag";
    pub const BAD_MODE: &str = "CLIENT_ERROR invalid mode for ms M token";
    pub const BAD_FLAG_GENERIC: &str = "CLIENT_ERROR invalid or duplicate flag";
    pub const BAD_MA_MODE: &str = "CLIENT_ERROR invalid mode for ma M token";
    pub const BAD_INITIAL: &str = "CLIENT_ERROR invalid numeric initial value";
    pub const BAD_DELTA_VALUE: &str = "CLIENT_ERROR invalid numeric delta value";
    pub const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";
    pub const KEY_B64: &str = "CLIENT_ERROR error decoding key";
    pub const BAD_CLIENT_ID: &str = "CLIENT_ERROR bad client id";
    pub const BATCH_TOO_LARGE: &str = "CLIENT_ERROR replay batch too large";
}
