//! One client connection's protocol state, without I/O.
//!
//! The server reads bytes into a buffer and calls [`Session::process`]; the
//! session decodes as many complete requests as the buffer holds, executes
//! them in order (so pipelined replies come back in order), and appends the
//! replies to `out`. It returns how many input bytes it used. Tests drive the
//! exact same code with byte strings.
//!
//! ```text
//!   bytes ──► [swallowing?] ──► decode ──► Engine::text / binary ──► out
//!                  ▲                 │
//!                  └── TooLarge ─────┘  (drop the refused value as it arrives)
//! ```

use std::sync::Arc;

use recall_proto::text::{self, Decoded};
use recall_proto::Limits;

use crate::{Action, Counters, Engine};

/// The first byte of every binary-protocol request.
const BINARY_MAGIC: u8 = recall_proto::binary::MAGIC_REQUEST;

/// Which protocols a listener accepts (memcached `-B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtocolChoice {
    #[default]
    Auto,
    Ascii,
    Binary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Text,
    Binary,
}

/// Per-connection state.
pub struct Session {
    proto: Option<Proto>,
    choice: ProtocolChoice,
    /// Bytes of a refused value still to drop.
    swallow: usize,
    limits: Limits,
    counters: Arc<Counters>,
}

impl Session {
    pub fn new(engine: &Engine, counters: Arc<Counters>, choice: ProtocolChoice) -> Session {
        Session {
            proto: None,
            choice,
            swallow: 0,
            limits: Limits { item_size_max: engine.config.item_size_max },
            counters,
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether the session is in the middle of dropping a refused value.
    pub fn swallowing(&self) -> bool {
        self.swallow > 0
    }

    /// Execute every complete request at the front of `input`.
    pub fn process(&mut self, engine: &Engine, input: &[u8], out: &mut Vec<u8>) -> (usize, Action) {
        let mut pos = 0;
        loop {
            if self.swallow > 0 {
                let n = self.swallow.min(input.len() - pos);
                self.swallow -= n;
                pos += n;
                if self.swallow > 0 {
                    return (pos, Action::Continue);
                }
            }
            let buf = &input[pos..];
            if buf.is_empty() {
                return (pos, Action::Continue);
            }
            let proto = match self.proto {
                Some(p) => p,
                None => {
                    let p = if buf[0] == BINARY_MAGIC { Proto::Binary } else { Proto::Text };
                    let allowed = matches!(
                        (self.choice, p),
                        (ProtocolChoice::Auto, _)
                            | (ProtocolChoice::Ascii, Proto::Text)
                            | (ProtocolChoice::Binary, Proto::Binary)
                    );
                    if !allowed {
                        return (pos, Action::Close);
                    }
                    self.proto = Some(p);
                    p
                }
            };
            let (used, action) = match proto {
                Proto::Text => self.step_text(engine, buf, out),
                Proto::Binary => self.step_binary(engine, buf, out),
            };
            pos += used;
            match action {
                Action::Continue if used > 0 => continue,
                Action::Continue => return (pos, Action::Continue),
                other => return (pos, other),
            }
        }
    }

    /// One text request. Returns bytes used (0 = need more input).
    fn step_text(&mut self, engine: &Engine, buf: &[u8], out: &mut Vec<u8>) -> (usize, Action) {
        match text::decode(buf, &self.limits) {
            Ok(Decoded::Request(req, n)) => (n, engine.text(&req, &self.counters, out)),
            Ok(Decoded::Incomplete) => (0, Action::Continue),
            Err(e) => {
                self.swallow = e.swallow;
                let action = engine.text_error(&e, &self.counters, out);
                (e.consumed, action)
            }
        }
    }

    fn step_binary(&mut self, engine: &Engine, buf: &[u8], out: &mut Vec<u8>) -> (usize, Action) {
        engine.binary_step(buf, &self.limits, &self.counters, out, &mut self.swallow)
    }
}
