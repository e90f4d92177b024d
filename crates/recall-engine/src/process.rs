//! What the process serving the engine owns and `stats` prints: its
//! connections and listeners, its TLS counters and certificate reload.
//!
//! The engine knows no sockets. The server keeps that state itself and
//! hands the engine a view of it once, before serving ([`Engine::serve_for`]);
//! `stats`, `stats conns` and `refresh_certs` read it there. An engine
//! without one (an embedder, a test) reports no connections and no TLS.
//!
//! [`Engine::serve_for`]: crate::Engine::serve_for

use recall_store::UnixSecs;

/// memcached's connection figures, for the general `stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Connections {
    pub max: u64,
    pub curr: u64,
    pub total: u64,
    pub rejected: u64,
    /// Worker threads (`threads`).
    pub threads: u64,
    /// Whether it accepts connections (`accepting_conns`).
    pub accepting: bool,
}

/// The server's side of `stats` (module note).
pub trait Process: Send + Sync {
    fn connections(&self) -> Connections;

    /// `stats conns`: a `STAT` line per listener and connection field in
    /// memcached's format (no `END`); `false` if it registers none.
    fn write_conns(&self, out: &mut Vec<u8>, now: UnixSecs) -> bool;

    /// The TLS keys of the general `stats`, when it serves TLS.
    fn write_tls(&self, out: &mut Vec<u8>, now: UnixSecs);

    /// `refresh_certs`: reload the certificates (`None`: TLS is off; the
    /// error is the line to answer with).
    fn refresh_certs(&self, now: UnixSecs) -> Option<Result<(), String>>;
}
