//! Binary protocol execution (see the binary-protocol work).

use recall_proto::Limits;

use crate::{Action, Counters, Engine};

impl Engine {
    /// Decode and execute one binary request. Returns bytes used.
    pub(crate) fn binary_step(
        &self,
        _buf: &[u8],
        _limits: &Limits,
        _c: &Counters,
        _out: &mut Vec<u8>,
        _swallow: &mut usize,
    ) -> (usize, Action) {
        // Not implemented yet: close rather than misbehave.
        (0, Action::Close)
    }
}
