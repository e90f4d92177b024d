//! # recall-fs
//!
//! A FUSE file system that mounts a backing directory and passes every
//! operation through to it, with a read cache in recall: regular files up
//! to a size limit are stored whole under MD5(full backing path), with the
//! file's identity (size, mtime, ctime, inode) in front of the bytes, and
//! a cached copy is served only when that identity equals a fresh `fstat`
//! of the backing file. See docs/design/recall-fs.md.
//!
//! * [`value`]: the stored value's format (one definition, fuzzed).
//! * [`cache`]: the hit/miss/stale/fallback and invalidation decisions, pure.
//! * [`clock`]: when a version may be stored, by the backing file
//!   system's own clock (coarse timestamps), and its per-device probes.
//! * [`stats`]: the counters behind `.recall-fs/stats`.
//! * [`wbuf`]: the per-handle write buffer, pure.
//! * [`inodes`]: the mount's inode table (paths, lookup counts).
//! * [`invalidate`]: the thread that sends invalidations, and when a key may
//!   be asked for again.
//! * [`cached`]: the read cache carried out against recall and the files.
//! * [`dir`]: directory listings, readdir and readdirplus.
//! * [`xattr`]: extended attributes and `statfs`, passed through.
//! * [`attr`]: FUSE attributes from the backing files' metadata; setting times.
//! * [`pages`]: when an open keeps the kernel's pages; telling the kernel
//!   of changes.
//! * [`handles`]: the open handles and their write buffers' draining.
//! * [`fs`]: the `fuser::Filesystem`: the pass-through's FUSE handlers.

pub mod attr;
pub mod cache;
pub mod cached;
pub mod clock;
pub mod dir;
pub mod fs;
pub mod handles;
pub mod inodes;
pub mod invalidate;
pub mod pages;
pub mod stats;
pub mod value;
pub mod wbuf;
pub mod xattr;
