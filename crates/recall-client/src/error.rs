//! Typed errors.
//!
//! A miss is not an error: lookups return `Ok(None)` and conditional writes
//! a status ([`crate::StoreStatus`], `false` from `delete`/`touch`). What is
//! left is sorted by who has to act:
//!
//! | variant | who | retry? |
//! |---|---|---|
//! | [`Error::Server`] | the server said `SERVER_ERROR` (out of memory, too large) | maybe later |
//! | [`Error::Client`] | the server said `CLIENT_ERROR`: this request is wrong | no |
//! | [`Error::UnknownCommand`] | the server said `ERROR`: it doesn't know the command | no |
//! | [`Error::Connection`] | connect failed, or the connection broke | yes, the pool reconnects |
//! | [`Error::Timeout`] | connect or request took too long | yes |
//! | [`Error::ServerDead`] | the server is marked dead and in back-off | after `retry_in` |
//! | [`Error::Protocol`] | the reply made no sense (connection closed) | yes, but report it |
//! | [`Error::InvalidKey`], [`Error::InvalidArgument`] | caught before sending | no |
//! | [`Error::Unsupported`] | the command has no form the server serves (meta on a `-S` server) | no |
//! | [`Error::Internal`] | a bug in this crate | report it |
//!
//! Errors are `Clone` (I/O errors behind an `Arc`) because one broken
//! connection fails every request that was in flight on it, and a multiget
//! reports a dead server's error for each of its keys.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// `host:port` of the server an error came from.
pub type ServerName = Arc<str>;

/// What timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    Connect,
    Request,
}

#[derive(Debug, Clone)]
pub enum Error {
    /// `SERVER_ERROR <message>`.
    Server { server: ServerName, message: String },
    /// `CLIENT_ERROR <message>`.
    Client { server: ServerName, message: String },
    /// `ERROR` (with memcached's optional text, e.g. "Too many open connections").
    UnknownCommand { server: ServerName, message: String },
    /// Could not connect, or the connection failed or closed under a request.
    Connection { server: ServerName, source: Arc<io::Error> },
    /// Connect or request timeout.
    Timeout { server: ServerName, phase: TimeoutPhase, after: Duration },
    /// The server failed recently and is in back-off: the request was not sent.
    ServerDead { server: ServerName, retry_in: Duration },
    /// The server restarted (or may have: a write or a poll failed) and
    /// this client's replay to it did not finish within `after` (0: a new
    /// connection reached an instance not replayed to yet): the write was
    /// not sent, since on the restarted server it would act on the state
    /// reloaded before the replay (durable client only).
    NotReplayed { server: ServerName, after: Duration },
    /// The reply could not be parsed; the connection was closed.
    Protocol { server: ServerName, message: String },
    /// The key cannot be sent (empty, too long, or with spaces or control
    /// characters on a classic command).
    InvalidKey { key: Vec<u8>, reason: &'static str },
    /// Any other argument the protocol cannot carry.
    InvalidArgument(String),
    /// The client has no servers.
    NoServers,
    /// The command has no form in the protocol the server speaks: a `-S`
    /// (SASL) server serves only the binary protocol, which has no meta
    /// commands, streamed values, metadump or cluster commands. Refused
    /// before anything is sent.
    Unsupported(&'static str),
    /// A bug in the client (an internal task panicked).
    Internal(String),
}

impl Error {
    /// The server the error came from, if any.
    pub fn server(&self) -> Option<&str> {
        match self {
            Error::Server { server, .. }
            | Error::Client { server, .. }
            | Error::UnknownCommand { server, .. }
            | Error::Connection { server, .. }
            | Error::Timeout { server, .. }
            | Error::ServerDead { server, .. }
            | Error::NotReplayed { server, .. }
            | Error::Protocol { server, .. } => Some(server),
            _ => None,
        }
    }

    /// Errors that mean the server (or the path to it) is unhealthy, as
    /// opposed to a request the server refused. These count towards marking
    /// the server dead.
    pub fn is_connection_level(&self) -> bool {
        matches!(
            self,
            Error::Connection { .. }
                | Error::Timeout { .. }
                | Error::ServerDead { .. }
                | Error::NotReplayed { .. }
                | Error::Protocol { .. }
        )
    }

    /// `SERVER_ERROR object too large for cache`: the value is over the
    /// server's item size limit (`-I`). A refused `set`/`sset` also removes
    /// the key's old value, as memcached does.
    pub fn is_too_large(&self) -> bool {
        matches!(self, Error::Server { message, .. } if message.starts_with("object too large"))
    }

    /// A connection error of `server` (for crates on [`crate::raw`]).
    pub fn io(server: &ServerName, e: io::Error) -> Error {
        Error::Connection { server: server.clone(), source: Arc::new(e) }
    }

    /// The server closed the connection (for crates on [`crate::raw`]).
    pub fn closed(server: &ServerName) -> Error {
        Error::io(server, io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by server"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Server { server, message } => write!(f, "{server}: SERVER_ERROR {message}"),
            Error::Client { server, message } => write!(f, "{server}: CLIENT_ERROR {message}"),
            Error::UnknownCommand { server, message } if message.is_empty() => {
                write!(f, "{server}: ERROR (unknown command)")
            }
            Error::UnknownCommand { server, message } => write!(f, "{server}: ERROR {message}"),
            Error::Connection { server, source } => write!(f, "{server}: connection error: {source}"),
            Error::Timeout { server, phase: TimeoutPhase::Connect, after } => {
                write!(f, "{server}: connect timed out after {after:?}")
            }
            Error::Timeout { server, phase: TimeoutPhase::Request, after } => {
                write!(f, "{server}: no reply within {after:?}")
            }
            Error::ServerDead { server, retry_in } => {
                write!(f, "{server}: server marked dead after failures; next retry in {retry_in:?}")
            }
            Error::NotReplayed { server, after } => {
                write!(f, "{server}: restart suspected and not replayed to within {after:?}; write not sent")
            }
            Error::Protocol { server, message } => write!(f, "{server}: protocol error: {message}"),
            Error::InvalidKey { key, reason } => write!(f, "invalid key {:?}: {reason}", String::from_utf8_lossy(key)),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::NoServers => write!(f, "no servers configured"),
            Error::Unsupported(what) => write!(f, "not supported: {what}"),
            Error::Internal(m) => write!(f, "internal error (a bug in recall-client): {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connection { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Timeout { .. } | Error::NotReplayed { .. } => io::ErrorKind::TimedOut,
            Error::Connection { source, .. } => source.kind(),
            Error::Unsupported(_) => io::ErrorKind::Unsupported,
            Error::InvalidKey { .. } | Error::InvalidArgument(_) => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
