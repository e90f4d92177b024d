//! Compiles bpf/front.c with clang's BPF target when clang is there.
//! Without it the crate builds without the program and
//! `FrontTier::attach` says so (recalld then serves without the tier).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(recall_xdp_bpf)");
    println!("cargo::rerun-if-changed=bpf/front.c");
    println!("cargo::rerun-if-changed=bpf/front.h");
    println!("cargo::rerun-if-env-changed=RECALL_XDP_CLANG");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let clang = std::env::var("RECALL_XDP_CLANG").unwrap_or_else(|_| "clang".into());
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("front.o");
    // The kernel's UAPI headers include <asm/types.h>, which Debian keeps
    // under the host's multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-target", "bpf", &multiarch, "-c", "bpf/front.c", "-o"])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => println!("cargo::rustc-cfg=recall_xdp_bpf"),
        Ok(s) => {
            println!("cargo::warning=recall-xdp: {clang} failed on bpf/front.c ({s}); the front tier is not built")
        }
        Err(e) => println!("cargo::warning=recall-xdp: no {clang} ({e}); the front tier is not built"),
    }
}
