//! recall-testkit's servers, and the `recall` binary run against them.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Command, Output};

// Each test file compiles this module on its own; the cluster tests use
// only the two functions below.
#[allow(unused_imports)]
pub use recall_testkit::servers::*;

/// `recall --server NODE cluster ARGS...` (the admin CLI against one
/// cluster node).
pub fn recall_cluster(node: SocketAddr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_recall"))
        .args(["--server", &node.to_string(), "cluster"])
        .args(args)
        .output()
        .expect("run recall")
}

/// The stdout of a `recall` run that must have succeeded.
pub fn ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "recall failed: {}{out}", String::from_utf8_lossy(&o.stderr));
    out
}
