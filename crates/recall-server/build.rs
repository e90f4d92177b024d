//! Link options for the `recalld` binary.
//!
//! On Linux with glibc, `recalld` is linked with packed relative
//! relocations (`-z pack-relative-relocs`, DT_RELR): a position-independent
//! Rust binary carries one 24-byte `R_X86_64_RELATIVE` entry per pointer in
//! its read-only data (vtables, string tables), about 320 KiB for recalld,
//! and the dynamic loader reads all of it at every start, so it stays
//! resident. Packed, the same relocations take a few KiB. The executable
//! is still position-independent (ASLR unchanged). It needs glibc 2.36 or
//! later at run time; a GNU ld without the option (binutils before 2.38)
//! ignores it with a warning. docs/design/connection-memory.md has the
//! start-up footprint this is part of.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bin=recalld=-Wl,-z,pack-relative-relocs");
    }
}
