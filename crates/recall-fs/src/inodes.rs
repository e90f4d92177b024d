//! The mount's inode table: which backing paths each inode number the
//! kernel holds stands for, and how many references it holds.
//!
//! A file's number in the mount is its backing inode number (so `stat`,
//! `ls -i` and readdir show what the backing directory shows, and every
//! hard link of a file has one number, which `tar`, `cp -a`, `rsync -H`
//! and `du` rely on). A file on another device below the backing
//! directory (a file system mounted inside it), or one whose number
//! collides with the root's or the control files', gets a number of its
//! own from [`FOREIGN_BASE`] up, kept per backing (device, inode) while
//! the kernel holds it.
//!
//! One number may have several paths (hard links); the first is the one
//! operations use, and the one confirmed last by a lookup goes first. The
//! kernel counts the entries it was given (every lookup, create, mkdir,
//! symlink, link, mknod, readdirplus entry) and gives them back with
//! `forget`; a number whose count drops to zero leaves the table, so the
//! table holds what the kernel holds.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub const ROOT_INO: u64 = 1;
/// Numbers from here up are not backing inode numbers: other devices'
/// files and the control directory's ([`crate::fs::CTL_DIR`]).
pub const FOREIGN_BASE: u64 = 1 << 62;

#[derive(Default)]
struct Node {
    paths: Vec<PathBuf>,
    /// The kernel's lookup count.
    lookups: u64,
    /// For a number from the foreign range: the backing (device, inode).
    foreign: Option<(u64, u64)>,
}

pub struct Inodes {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    foreign: HashMap<(u64, u64), u64>,
    /// The backing directory's device: its files keep their numbers.
    root_dev: u64,
    next_foreign: u64,
}

impl Inodes {
    pub fn new(root_dev: u64) -> Inodes {
        let mut t = Inodes {
            nodes: HashMap::new(),
            by_path: HashMap::new(),
            foreign: HashMap::new(),
            root_dev,
            // The control directory's numbers sit just below.
            next_foreign: FOREIGN_BASE + 16,
        };
        t.nodes.insert(ROOT_INO, Node { paths: vec![PathBuf::new()], lookups: 1, foreign: None });
        t.by_path.insert(PathBuf::new(), ROOT_INO);
        t
    }

    pub fn path(&self, ino: u64) -> Option<&PathBuf> {
        self.nodes.get(&ino).and_then(|n| n.paths.first())
    }

    /// The inode number of `rel` if the kernel holds it.
    pub fn known(&self, rel: &Path) -> Option<u64> {
        self.by_path.get(rel).copied()
    }

    /// The number a backing file has in the mount without handing it to
    /// the kernel (readdir's `d_ino`): its own, or the one it was given.
    pub fn number_of(&self, dev: u64, ino: u64) -> u64 {
        if self.own_number(dev, ino) {
            ino
        } else {
            self.foreign.get(&(dev, ino)).copied().unwrap_or(ino)
        }
    }

    fn own_number(&self, dev: u64, ino: u64) -> bool {
        dev == self.root_dev && ino > ROOT_INO && ino < FOREIGN_BASE
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The inode of `rel` (whose metadata is `meta`), counted as handed to
    /// the kernel (call once per entry reply).
    pub fn entry(&mut self, rel: &Path, meta: &Metadata) -> u64 {
        self.entry_of(rel, meta.dev(), meta.ino())
    }

    pub(crate) fn entry_of(&mut self, rel: &Path, dev: u64, ino: u64) -> u64 {
        if rel.as_os_str().is_empty() {
            return ROOT_INO;
        }
        let i = if self.own_number(dev, ino) {
            ino
        } else if let Some(i) = self.foreign.get(&(dev, ino)) {
            *i
        } else {
            let i = self.next_foreign;
            self.next_foreign += 1;
            self.foreign.insert((dev, ino), i);
            self.nodes.insert(i, Node { foreign: Some((dev, ino)), ..Node::default() });
            i
        };
        // The path named another file before (replaced behind the
        // mount's back): it no longer leads there.
        if let Some(old) = self.by_path.get(rel).copied() {
            if old != i {
                self.detach(rel, old);
            }
        }
        let node = self.nodes.entry(i).or_default();
        node.paths.retain(|p| p != rel);
        node.paths.insert(0, rel.to_path_buf());
        node.lookups += 1;
        self.by_path.insert(rel.to_path_buf(), i);
        i
    }

    fn detach(&mut self, rel: &Path, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.paths.retain(|p| p != rel);
        }
    }

    /// The kernel dropped `n` references to `ino`; returns whether it left
    /// the table.
    pub fn forget(&mut self, ino: u64, n: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let Some(node) = self.nodes.get_mut(&ino) else { return false };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 {
            return false;
        }
        let node = self.nodes.remove(&ino).expect("looked up above");
        for p in node.paths {
            if self.by_path.get(&p) == Some(&ino) {
                self.by_path.remove(&p);
            }
        }
        if let Some(k) = node.foreign {
            self.foreign.remove(&k);
        }
        true
    }

    /// `rel` is gone from the backing directory: the name no longer finds
    /// its inode (which keeps its other names, and its lookup count until
    /// forgotten).
    pub fn remove(&mut self, rel: &Path) {
        if let Some(i) = self.by_path.remove(rel) {
            self.detach(rel, i);
        }
    }

    /// Move `from` and everything under it to `to` (a directory rename
    /// moves its children's paths too).
    pub fn rename(&mut self, from: &Path, to: &Path) {
        self.remove(to);
        let moved: Vec<(PathBuf, u64)> =
            self.by_path.iter().filter(|(p, _)| p.starts_with(from)).map(|(p, i)| (p.clone(), *i)).collect();
        for (old, i) in moved {
            self.by_path.remove(&old);
            let rest = old.strip_prefix(from).expect("filtered on the prefix");
            // Not `to.join("")`: that appends a separator ("b/"), which
            // lstat refuses for a file.
            let new = if rest.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rest) };
            if let Some(n) = self.nodes.get_mut(&i) {
                for p in n.paths.iter_mut().filter(|p| **p == old) {
                    *p = new.clone();
                }
            }
            self.by_path.insert(new, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: u64 = 8;

    #[test]
    fn renaming_a_directory_moves_its_children() {
        let mut t = Inodes::new(DEV);
        let d = t.entry_of(Path::new("a"), DEV, 100);
        let f = t.entry_of(Path::new("a/f"), DEV, 101);
        let other = t.entry_of(Path::new("ab"), DEV, 102);
        t.rename(Path::new("a"), Path::new("b"));
        // Compared as strings: Path equality ignores a trailing separator.
        assert_eq!(t.path(d).map(|p| p.as_os_str().to_owned()), Some("b".into()));
        assert_eq!(t.path(f), Some(&PathBuf::from("b/f")));
        assert_eq!(t.path(other), Some(&PathBuf::from("ab")));
        assert_eq!(t.known(Path::new("b/f")), Some(f));
        assert_eq!(t.known(Path::new("a/f")), None);
    }

    #[test]
    fn hard_links_share_the_backing_number_and_keep_a_usable_path() {
        let mut t = Inodes::new(DEV);
        let a = t.entry_of(Path::new("a"), DEV, 500);
        let b = t.entry_of(Path::new("d/b"), DEV, 500);
        assert_eq!((a, b), (500, 500));
        assert_eq!(t.path(a), Some(&PathBuf::from("d/b")), "the last confirmed name first");
        t.remove(Path::new("d/b"));
        assert_eq!(t.path(a), Some(&PathBuf::from("a")), "the other name still leads there");
        assert_eq!(t.known(Path::new("d/b")), None);
        assert!(!t.forget(a, 1));
        assert!(t.forget(a, 1));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn other_devices_and_colliding_numbers_get_numbers_of_their_own() {
        let mut t = Inodes::new(DEV);
        let x = t.entry_of(Path::new("mnt/x"), 9, 500);
        let y = t.entry_of(Path::new("y"), DEV, 500);
        assert!(x >= FOREIGN_BASE);
        assert_eq!(y, 500);
        assert_eq!(t.entry_of(Path::new("mnt/x2"), 9, 500), x, "a hard link on that device");
        assert_eq!(t.number_of(9, 500), x);
        assert_eq!(t.number_of(9, 501), 501, "not handed out: no number made up");
        let one = t.entry_of(Path::new("one"), DEV, ROOT_INO);
        assert!(one >= FOREIGN_BASE, "the root's number is taken");
        assert!(t.forget(x, 2));
        assert_eq!(t.number_of(9, 500), 500, "forgotten with its node");
    }

    #[test]
    fn forgotten_inodes_leave_the_table() {
        let mut t = Inodes::new(DEV);
        let a = t.entry_of(Path::new("a"), DEV, 20);
        assert_eq!(t.entry_of(Path::new("a"), DEV, 20), a);
        assert!(!t.forget(a, 1));
        assert_eq!(t.known(Path::new("a")), Some(a));
        assert!(t.forget(a, 1), "the last reference takes it out");
        assert_eq!((t.known(Path::new("a")), t.path(a)), (None, None));
        assert_eq!(t.len(), 1, "only the root is left");
        assert!(!t.forget(ROOT_INO, 5));
        assert!(t.path(ROOT_INO).is_some());
    }

    #[test]
    fn a_name_replaced_behind_the_mounts_back_moves_to_the_new_file() {
        let mut t = Inodes::new(DEV);
        let old = t.entry_of(Path::new("x"), DEV, 30);
        let new = t.entry_of(Path::new("x"), DEV, 31);
        assert_ne!(old, new);
        assert_eq!(t.path(old), None, "the old file has no name left");
        t.forget(old, 1);
        assert_eq!(t.known(Path::new("x")), Some(new));
        t.forget(new, 1);
        assert_eq!(t.len(), 1);
    }
}
