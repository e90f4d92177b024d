//! The layer under [`Client`](crate::Client), for crates that send
//! commands of their own over the client's connections: recall-durable's
//! write backup sends its meta writes, `replay` bursts and control commands
//! here, so that they share the client's transports (TLS, unix sockets,
//! logins), its failure accounting and its key checks instead of keeping a
//! second copy of them. Ordinary use needs none of it.
//!
//! * [`Connector`] opens a server's connections the way the client does
//!   ([`Client::connectors`](crate::Client::connectors) gives the client's
//!   own); [`Conn`] is one pipelined connection on it, answering a request
//!   with the [`Reply`] frames its [`Expect`] asks for.
//!   [`Connector::connect`] gives a bare [`Stream`] instead, split into a
//!   [`ReadHalf`] and a [`WriteHalf`], for a caller that decodes its own
//!   replies.
//! * [`Health`] counts a server's failures and keeps its back-off
//!   ([`HealthConfig`]).
//! * [`ConnectCheck`] runs on each new pooled connection before its first
//!   request ([`ClientBuilder::connect_check`](crate::ClientBuilder::connect_check)).
//! * [`check_key`]: whether a key can be sent as a classic token.

pub use crate::client::ConnectCheck;
pub use crate::conn::{Conn, Expect, Health, HealthConfig, Reply};
pub use crate::request::check_key;
pub use crate::transport::{Connector, ReadHalf, Stream, WriteHalf};
