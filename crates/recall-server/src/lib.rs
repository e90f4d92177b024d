//! # recall-server
//!
//! `recalld`: configuration, sockets, threads. Everything protocol- or
//! cache-shaped lives in the crates below (recall-engine, recall-proto,
//! recall-store); this crate only moves bytes and runs the loops.

pub mod auth;
pub mod backlog;
mod buffers;
pub mod config;
pub mod conn;
pub mod daemon;
mod deadline;
pub mod forward;
pub mod front_tier;
pub mod limits;
pub mod listeners;
pub mod metrics;
pub mod notify;
pub mod persist;
mod portfile;
pub mod process;
pub mod schedule;
pub mod server;
pub mod tls;
pub mod udp;
pub mod verbose;
pub mod walcheck;
mod watch;
