//! Authentication: memcached's `-S` (SASL PLAIN on the binary protocol) and
//! `-Y` (the text protocol's auth file).
//!
//! ```text
//!   binary request ──► binary_gate(state, opcode) ──refuse──► 0x20 "Auth failure.", close
//!                              │ run
//!             SASL opcode? ──► AuthState::sasl ──► SaslReply ──► reply (engine)
//!             else         ──► Engine::binary_exec
//!
//!   text bytes, -Y, not yet in ──► recall_proto::text::auth::decode ──► AuthState::login
//! ```
//!
//! The state is the connection's (`Session` holds an [`AuthState`]); the
//! decisions are the pure functions here, tested without sockets; the
//! session asks them once per request, before any command runs, so no
//! command has a check of its own.
//!
//! memcached's rules (proto_bin.c, proto_text.c, memcached.c):
//!
//! * `-S`: every binary command except SASL_LIST_MECHS, SASL_AUTH,
//!   SASL_STEP and VERSION answers 0x20 "Auth failure." and closes the
//!   connection until a SASL exchange succeeded. Every SASL command starts
//!   the connection over as unauthenticated (`init_sasl_conn`). A failed
//!   exchange answers 0x20 and keeps the connection. `-S` makes the
//!   listener binary-only, so a text client is closed at its first byte.
//! * `-Y`: until it authenticates, a text connection is read by
//!   `try_read_command_asciiauth` (see recall-proto's `text::auth`);
//!   `-Y` makes the listener text-only.
//! * `auth_cmds` counts exchanges and tokens checked, `auth_errors` the
//!   failed ones; a refused command counts neither.
//!
//! Passwords are compared in constant time (`subtle`) and never logged or
//! printed: [`Credentials`]'s `Debug` shows the number of users only.

use std::sync::{Arc, RwLock};

use recall_proto::binary::{self, opcode, status, STATUS_AUTH_ERROR};
use recall_proto::reply::{self, Status};
use recall_proto::sasl;
use recall_proto::text::auth::{self as text_auth, AuthDecoded};
use subtle::ConstantTimeEq;

use crate::{Action, Counters, Engine};

/// The users an auth file lets in.
#[derive(Clone, Default)]
pub struct Credentials {
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({} users)", self.users.len())
    }
}

/// A line of an auth file that is not `user:password`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// 1-based.
    pub line: usize,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: malformed entry, should be 'user:password'", self.line)
    }
}

impl Credentials {
    /// Parse an auth file: one `user:password` per line, the user up to the
    /// first `:`, the password the rest of the line (a trailing `\r` is
    /// not part of it). memcached's format for both `-Y` and
    /// `MEMCACHED_SASL_PWDB`. Empty lines are skipped (memcached's `-Y`
    /// loader refuses them); a non-empty line without a `:` is an error.
    pub fn parse(text: &[u8]) -> Result<Credentials, FormatError> {
        let mut users = Vec::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let colon = line.iter().position(|&b| b == b':').ok_or(FormatError { line: i + 1 })?;
            users.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
        }
        Ok(Credentials { users })
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The file's first user and password: what a cluster node logs in
    /// with when it forwards a client's request to another node (every
    /// node of a `-Y` cluster reads the same file).
    pub fn first(&self) -> Option<(&[u8], &[u8])> {
        self.users.first().map(|(u, p)| (u.as_slice(), p.as_slice()))
    }

    /// Whether `user` with `password` is on file. Every entry is compared,
    /// each in constant time for its length, so the time taken does not
    /// say which part of which entry differed.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let mut ok = subtle::Choice::from(0);
        for (u, p) in &self.users {
            ok |= u.as_slice().ct_eq(user) & p.as_slice().ct_eq(password);
        }
        ok.into()
    }
}

/// What the server requires, fixed at start (`EngineConfig::auth`); which
/// users the `-Y` file lists may change while it runs.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// `-S`: binary clients authenticate with SASL PLAIN against these.
    pub sasl: Option<Arc<Credentials>>,
    /// `-Y`: text clients authenticate with a token checked against these.
    /// memcached reads its auth file again on SIGHUP, so the server may
    /// replace them; a login checks the set current at that moment.
    pub ascii: Option<Arc<CredentialCell>>,
}

/// A set of credentials that can be replaced whole while the server runs
/// (`-Y` on SIGHUP). Logins take the current set; a replacement never
/// leaves a half-read file in place: it is parsed first, then swapped.
#[derive(Debug)]
pub struct CredentialCell(RwLock<Arc<Credentials>>);

impl CredentialCell {
    pub fn new(creds: Credentials) -> CredentialCell {
        CredentialCell(RwLock::new(Arc::new(creds)))
    }

    /// The set a login checks against now.
    pub fn current(&self) -> Arc<Credentials> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Put a new set in place; connections already logged in stay in.
    pub fn replace(&self, creds: Credentials) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(creds);
    }
}

/// One connection's authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AuthState {
    sasl_required: bool,
    ascii_required: bool,
    authenticated: bool,
    /// A SASL PLAIN exchange was started without its message: the next
    /// SASL_STEP carries it.
    plain_pending: bool,
}

/// What a SASL command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslReply {
    /// The mechanism list.
    Mechanisms,
    /// status 0, "Authenticated".
    Authenticated,
    /// 0x21: send the next step (PLAIN started with no message).
    Continue,
    /// 0x20 "Auth failure.": unknown mechanism, bad message, wrong user or
    /// password, or a step with no exchange started.
    Failed,
    /// 0x04: a mechanism name over 32 bytes.
    Invalid,
}

impl AuthState {
    pub fn new(config: &AuthConfig) -> AuthState {
        AuthState {
            sasl_required: config.sasl.is_some(),
            ascii_required: config.ascii.is_some(),
            authenticated: false,
            plain_pending: false,
        }
    }

    /// A session whose requests a cluster peer forwarded: the peer checked
    /// its own client's login, and the peer itself is the cluster's
    /// (`recall_engine::forwarded`).
    pub fn trusted() -> AuthState {
        AuthState { sasl_required: false, ascii_required: false, authenticated: true, plain_pending: false }
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether a text connection must still present its token before any
    /// command (`-Y`).
    pub fn text_locked(&self) -> bool {
        self.ascii_required && !self.authenticated
    }

    /// Whether binary requests must pass [`AuthState::binary_admits`]
    /// (`-S`, not yet authenticated); one test on the request path
    /// otherwise.
    pub fn binary_locked(&self) -> bool {
        self.sasl_required && !self.authenticated
    }

    /// Whether a binary request with this opcode may run (memcached's
    /// `authenticated()`): always without `-S`; with it, only the SASL
    /// commands and VERSION until an exchange succeeded.
    pub fn binary_admits(&self, op: u8) -> bool {
        !self.binary_locked()
            || matches!(op, opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION)
    }

    /// Whether SASL commands are answered (else they are unknown commands,
    /// as in a memcached without `-S`).
    pub fn sasl_enabled(&self) -> bool {
        self.sasl_required
    }

    /// A SASL command: `None` for SASL_LIST_MECHS, else the mechanism and
    /// message of SASL_AUTH (`step == false`) or SASL_STEP.
    pub fn sasl(&mut self, creds: &Credentials, cmd: Option<(bool, &[u8], &[u8])>) -> SaslReply {
        let Some((step, mech, data)) = cmd else {
            self.authenticated = false;
            return SaslReply::Mechanisms;
        };
        if mech.len() > sasl::MECH_MAX {
            return SaslReply::Invalid;
        }
        self.authenticated = false;
        let message = match (step, std::mem::take(&mut self.plain_pending)) {
            (false, _) if mech != sasl::PLAIN => return SaslReply::Failed,
            // Cyrus asks for PLAIN's message when the start carried none.
            (false, _) if data.is_empty() => {
                self.plain_pending = true;
                return SaslReply::Continue;
            }
            (false, _) | (true, true) => data,
            (true, false) => return SaslReply::Failed,
        };
        let ok = match sasl::parse_plain(message) {
            // Acting as another user is not something an auth file grants.
            Some(p) if p.authzid.is_empty() || p.authzid == p.authcid => creds.check(p.authcid, p.password),
            _ => false,
        };
        self.authenticated = ok;
        if ok {
            SaslReply::Authenticated
        } else {
            SaslReply::Failed
        }
    }

    /// A text token (`-Y`).
    pub fn login(&mut self, creds: &Credentials, user: &[u8], password: &[u8]) -> bool {
        self.authenticated = creds.check(user, password);
        self.authenticated
    }
}

fn count(counters: &Counters, ok: bool) {
    counters.auth_cmds.incr();
    if !ok {
        counters.auth_errors.incr();
    }
}

impl Engine {
    /// Refuse a binary request that arrived before authentication: what
    /// memcached's `dispatch_bin_command` answers, then close.
    pub(crate) fn binary_unauthenticated(&self, op: u8, opaque: u32, out: &mut Vec<u8>) -> Action {
        binary::write_error(out, op, opaque, STATUS_AUTH_ERROR);
        Action::Close
    }

    /// Run a SASL command and write its reply.
    pub(crate) fn binary_sasl(
        &self,
        state: &mut AuthState,
        op: u8,
        opaque: u32,
        cmd: Option<(bool, &[u8], &[u8])>,
        counters: &Counters,
        out: &mut Vec<u8>,
    ) {
        let Some(creds) = self.config.auth.sasl.as_deref() else {
            binary::write_error(out, op, opaque, status::UNKNOWN_COMMAND);
            return;
        };
        match state.sasl(creds, cmd) {
            SaslReply::Mechanisms => {
                binary::write_response(out, op, status::NO_ERROR, opaque, 0, &[], &[], sasl::MECHANISMS)
            }
            SaslReply::Authenticated => {
                count(counters, true);
                binary::write_response(out, op, status::NO_ERROR, opaque, 0, &[], &[], b"Authenticated");
            }
            SaslReply::Continue => binary::write_response(out, op, status::AUTH_CONTINUE, opaque, 0, &[], &[], &[]),
            SaslReply::Failed => {
                count(counters, false);
                binary::write_error(out, op, opaque, binary::error_status(Status::AuthFailed, op));
            }
            SaslReply::Invalid => binary::write_error(out, op, opaque, status::EINVAL),
        }
    }

    /// One request of a text connection that has not authenticated yet
    /// (`-Y`). Returns the bytes used (0 = need more input).
    pub(crate) fn text_login(
        &self,
        state: &mut AuthState,
        buf: &[u8],
        counters: &Counters,
        out: &mut Vec<u8>,
    ) -> (usize, Action) {
        let Some(cell) = self.config.auth.ascii.as_deref() else {
            // Not locked without -Y; the session never calls this then.
            return (0, Action::Close);
        };
        match text_auth::decode(buf) {
            AuthDecoded::Incomplete => (0, Action::Continue),
            AuthDecoded::Close => (0, Action::Close),
            AuthDecoded::Refused { refusal, consumed } => {
                reply::line(out, refusal.line().as_bytes());
                (consumed, Action::Continue)
            }
            AuthDecoded::Token { user, password, consumed } => {
                let ok = state.login(&cell.current(), user, password);
                count(counters, ok);
                reply::text_status(out, if ok { Status::Stored } else { Status::AuthFailed }, None);
                (consumed, Action::Continue)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials::parse(b"alice:wonder land\nbob:\r\n\n:anon\n").unwrap()
    }

    fn state(sasl: bool, ascii: bool) -> AuthState {
        AuthState::new(&AuthConfig {
            sasl: sasl.then(|| Arc::new(creds())),
            ascii: ascii.then(|| Arc::new(CredentialCell::new(creds()))),
        })
    }

    #[test]
    fn auth_file_lines() {
        let c = creds();
        assert!(c.check(b"alice", b"wonder land"));
        assert!(c.check(b"bob", b""));
        assert!(c.check(b"", b"anon"));
        assert!(!c.check(b"alice", b"wonder"));
        assert!(!c.check(b"alice", b"wonder land\r"));
        assert!(!c.check(b"bob", b"x"));
        assert!(!c.check(b"carol", b""));
        // The password is the rest of the line, colons and all.
        assert!(Credentials::parse(b"u:a:b").unwrap().check(b"u", b"a:b"));
        assert_eq!(Credentials::parse(b"ok:1\nnocolon\n").unwrap_err(), FormatError { line: 2 });
        assert!(Credentials::parse(b"").unwrap().is_empty());
        assert_eq!(format!("{:?}", creds()), "Credentials(3 users)");
    }

    #[test]
    fn binary_gate_lets_only_sasl_and_version_through_before_auth() {
        assert!(state(false, false).binary_admits(opcode::GET));
        let mut s = state(true, false);
        for op in [opcode::GET, opcode::SET, opcode::NOOP, opcode::STAT, opcode::QUIT, 0x50] {
            assert!(!s.binary_admits(op), "{op:#x}");
        }
        for op in [opcode::SASL_LIST_MECHS, opcode::SASL_AUTH, opcode::SASL_STEP, opcode::VERSION] {
            assert!(s.binary_admits(op), "{op:#x}");
        }
        assert_eq!(s.sasl(&creds(), Some((false, b"PLAIN", b"\0alice\0wonder land"))), SaslReply::Authenticated);
        assert!(s.binary_admits(opcode::GET));
        // A -Y server does not lock binary (it serves none) nor does -S lock text.
        assert!(state(false, true).binary_admits(opcode::GET));
        assert!(!state(true, false).text_locked() && state(false, true).text_locked());
    }

    #[test]
    fn sasl_plain_exchanges() {
        let c = creds();
        let mut s = state(true, false);
        let auth = |s: &mut AuthState, m: &'static [u8], d: &'static [u8]| s.sasl(&c, Some((false, m, d)));
        assert_eq!(auth(&mut s, b"PLAIN", b"\0alice\0wrong"), SaslReply::Failed);
        assert!(!s.authenticated());
        assert_eq!(auth(&mut s, b"PLAIN", b"alice\0alice\0wonder land"), SaslReply::Authenticated);
        // Any SASL command starts over, as memcached's init_sasl_conn does.
        assert_eq!(s.sasl(&c, None), SaslReply::Mechanisms);
        assert!(!s.authenticated());
        assert_eq!(auth(&mut s, b"PLAIN", b"bob\0alice\0wonder land"), SaslReply::Failed, "authzid of another user");
        assert_eq!(auth(&mut s, b"CRAM-MD5", b"x"), SaslReply::Failed);
        assert_eq!(auth(&mut s, b"PLAIN", b"alice wonder land"), SaslReply::Failed);
        assert_eq!(auth(&mut s, &[b'P'; 33], b"\0alice\0wonder land"), SaslReply::Invalid);
        // PLAIN without its message: continue, then the step carries it.
        assert_eq!(auth(&mut s, b"PLAIN", b""), SaslReply::Continue);
        assert_eq!(s.sasl(&c, Some((true, b"PLAIN", b"\0bob\0"))), SaslReply::Authenticated);
        // A step with nothing started fails and logs out.
        assert_eq!(s.sasl(&c, Some((true, b"PLAIN", b"\0bob\0"))), SaslReply::Failed);
        assert!(!s.authenticated());
    }

    #[test]
    fn text_login() {
        let c = creds();
        let mut s = state(false, true);
        assert!(!s.login(&c, b"alice", b"nope") && s.text_locked());
        assert!(s.login(&c, b"alice", b"wonder land") && !s.text_locked());
    }
}
