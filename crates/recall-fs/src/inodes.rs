//! The mount's inode table: this mount's own inode numbers for paths
//! relative to the backing directory, assigned on first lookup and moved
//! on rename, so the backing directory may span file systems.
//!
//! The kernel counts the entries it was given (every lookup, create,
//! mkdir, symlink, link, mknod reply) and gives them back with `forget`;
//! an inode whose count drops to zero leaves the table, so the table holds
//! what the kernel holds, not every path ever looked up. readdir hands out
//! no numbers of its own (see `RecallFs::readdir`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const ROOT_INO: u64 = 1;
/// Numbers below this are the control directory's.
pub const FIRST_INO: u64 = 16;

#[derive(Default)]
pub struct Inodes {
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    /// The kernel's lookup count per inode (the root is never forgotten).
    lookups: HashMap<u64, u64>,
    next: u64,
}

impl Inodes {
    pub fn new() -> Inodes {
        let mut t = Inodes { next: FIRST_INO, ..Inodes::default() };
        t.paths.insert(ROOT_INO, PathBuf::new());
        t.inos.insert(PathBuf::new(), ROOT_INO);
        t
    }
    pub fn path(&self, ino: u64) -> Option<&PathBuf> {
        self.paths.get(&ino)
    }
    /// The inode number of `rel` if it has one.
    pub fn known(&self, rel: &Path) -> Option<u64> {
        self.inos.get(rel).copied()
    }
    #[cfg(test)]
    fn len(&self) -> usize {
        self.paths.len()
    }
    /// The inode of `rel`, numbered now if it is new, counted as handed to
    /// the kernel (call once per entry reply).
    pub fn entry(&mut self, rel: &Path) -> u64 {
        let i = self.ino(rel);
        *self.lookups.entry(i).or_default() += 1;
        i
    }
    /// The kernel dropped `n` references to `ino`; returns whether it left
    /// the table (its number is never given out again).
    pub fn forget(&mut self, ino: u64, n: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let Some(count) = self.lookups.get_mut(&ino) else { return false };
        *count = count.saturating_sub(n);
        if *count > 0 {
            return false;
        }
        self.lookups.remove(&ino);
        if let Some(p) = self.paths.remove(&ino) {
            // Only if the path still names this inode (not a newer file
            // created under the same name after an unlink).
            if self.inos.get(&p) == Some(&ino) {
                self.inos.remove(&p);
            }
        }
        true
    }
    fn ino(&mut self, rel: &Path) -> u64 {
        if let Some(i) = self.inos.get(rel) {
            return *i;
        }
        let i = self.next;
        self.next += 1;
        self.paths.insert(i, rel.to_path_buf());
        self.inos.insert(rel.to_path_buf(), i);
        i
    }
    /// `rel` is gone from the backing directory: neither the name nor the
    /// number finds it any more (its lookup count stays until forgotten).
    pub fn remove(&mut self, rel: &Path) {
        if let Some(i) = self.inos.remove(rel) {
            self.paths.remove(&i);
        }
    }
    /// Move `from` and everything under it to `to` (a directory rename
    /// moves its children's paths too).
    pub fn rename(&mut self, from: &Path, to: &Path) {
        self.remove(to);
        let moved: Vec<(PathBuf, u64)> =
            self.inos.iter().filter(|(p, _)| p.starts_with(from)).map(|(p, i)| (p.clone(), *i)).collect();
        for (old, i) in moved {
            self.inos.remove(&old);
            let rest = old.strip_prefix(from).expect("filtered on the prefix");
            // Not `to.join("")`: that appends a separator ("b/"), which
            // lstat refuses for a file.
            let new = if rest.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rest) };
            self.paths.insert(i, new.clone());
            self.inos.insert(new, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renaming_a_directory_moves_its_children() {
        let mut t = Inodes::new();
        let d = t.ino(Path::new("a"));
        let f = t.ino(Path::new("a/f"));
        let other = t.ino(Path::new("ab"));
        t.rename(Path::new("a"), Path::new("b"));
        // Compared as strings: Path equality ignores a trailing separator.
        assert_eq!(t.path(d).map(|p| p.as_os_str().to_owned()), Some("b".into()));
        assert_eq!(t.path(f), Some(&PathBuf::from("b/f")));
        assert_eq!(t.path(other), Some(&PathBuf::from("ab")));
        assert_eq!(t.ino(Path::new("b/f")), f);
    }

    #[test]
    fn forgotten_inodes_leave_the_table() {
        let mut t = Inodes::new();
        let a = t.entry(Path::new("a"));
        assert_eq!(t.entry(Path::new("a")), a);
        assert!(!t.forget(a, 1));
        assert_eq!(t.known(Path::new("a")), Some(a));
        assert!(t.forget(a, 1), "the last reference takes it out");
        assert_eq!((t.known(Path::new("a")), t.path(a)), (None, None));
        assert_eq!(t.len(), 1, "only the root is left");
        assert!(!t.forget(ROOT_INO, 5));
        assert!(t.path(ROOT_INO).is_some());
    }

    #[test]
    fn forgetting_an_unlinked_inode_spares_a_new_file_of_that_name() {
        let mut t = Inodes::new();
        let old = t.entry(Path::new("x"));
        t.remove(Path::new("x"));
        let new = t.entry(Path::new("x"));
        assert_ne!(old, new);
        t.forget(old, 1);
        assert_eq!(t.known(Path::new("x")), Some(new));
        t.forget(new, 1);
        assert_eq!(t.len(), 1);
        assert!(t.lookups.is_empty());
    }
}
