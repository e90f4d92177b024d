//! A small file system a test mounts for itself, to run a disk out of
//! space (ENOSPC) on purpose: a tmpfs, or an ext4 image on a loop device.
//! Mounting needs root; without it [`Mount::new`] says the test is
//! skipped and returns `None`, as root CI runs it.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted file system (unmounted on drop).
pub struct Mount {
    pub dir: PathBuf,
    image: Option<PathBuf>,
}

impl Mount {
    /// A 512 KiB tmpfs (`ext4`: a 4 MiB ext4 image on a loop device, where
    /// fsync is real) at a fresh directory named after `tag`.
    pub fn new(tag: &str, ext4: bool) -> Option<Mount> {
        let dir = std::env::temp_dir().join(format!("recall-mnt-{tag}-{}", std::process::id()));
        let _ = Command::new("umount").arg(&dir).output();
        std::fs::create_dir_all(&dir).unwrap();
        let image = ext4.then(|| dir.with_extension("img"));
        let mounted = match &image {
            None => Command::new("mount").args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"]).arg(&dir).output(),
            Some(img) => {
                std::fs::File::create(img).unwrap().set_len(4 << 20).unwrap();
                Command::new("mkfs.ext4")
                    .args(["-q", "-F"])
                    .arg(img)
                    .output()
                    .and_then(|_| Command::new("mount").args(["-o", "loop"]).arg(img).arg(&dir).output())
            }
        };
        let m = Mount { dir, image };
        match mounted {
            Ok(o) if o.status.success() => Some(m),
            // /proc/self belongs to the process's effective user.
            _ if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) => {
                eprintln!("SKIPPED: mounting a small file system needs root (run as root to check ENOSPC handling)");
                None
            }
            o => panic!("mounting a {} as root failed: {o:?}", if ext4 { "loop ext4" } else { "tmpfs" }),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).output();
        let _ = std::fs::remove_dir(&self.dir);
        if let Some(img) = &self.image {
            let _ = std::fs::remove_file(img);
        }
    }
}

/// Fill `dir`'s file system, then free `leave` bytes; returns the filler
/// file (remove it to give the space back).
pub fn fill(dir: &Path, leave: u64) -> PathBuf {
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(leave)).unwrap();
    p
}
