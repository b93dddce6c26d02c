//! Giving a directory tree to a user, following no link: a non-administrator's task directory,
//! made by its node's agent (root), becomes that user's before its command starts.

use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use super::{check, cstr, Dir, MAX_DEPTH};

impl Dir {
    /// Makes this directory `uid`'s (and the group `uid`'s), with `mode`.
    pub fn give(&self, uid: u32, mode: u32) -> io::Result<()> {
        let fd = self.0.as_raw_fd();
        // SAFETY: plain calls on a directory fd this value owns.
        check(unsafe { libc::fchown(fd, uid, uid) })?;
        self.set_mode(mode)
    }

    /// Sets this directory's mode.
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        // SAFETY: a plain call on a directory fd this value owns.
        check(unsafe { libc::fchmod(self.0.as_raw_fd(), mode) }).map(|_| ())
    }

    /// Makes this directory and everything below it `uid`'s, modes unchanged. A link is given
    /// as the link it is, never followed; a tree deeper than [`MAX_DEPTH`] is refused.
    pub fn give_all(&self, uid: u32) -> io::Result<()> {
        self.give_below(uid, 0)
    }

    fn give_below(&self, uid: u32, depth: usize) -> io::Result<()> {
        if depth > MAX_DEPTH {
            return Err(io::Error::other(
                "a directory tree too deep to give to its user",
            ));
        }
        // SAFETY: a directory fd this value owns.
        check(unsafe { libc::fchown(self.0.as_raw_fd(), uid, uid) })?;
        for (name, meta) in self.entries()? {
            if meta.is_dir() {
                // Replaced by a link since it was listed, it fails to open, as it must.
                self.open_dir(Path::new(&name))?
                    .give_below(uid, depth + 1)?;
            } else {
                let name = cstr(&name)?;
                let (fd, flags) = (self.0.as_raw_fd(), libc::AT_SYMLINK_NOFOLLOW);
                // SAFETY: a directory fd and a NUL-terminated name.
                check(unsafe { libc::fchownat(fd, name.as_ptr(), uid, uid, flags) })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Dir;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_tree_is_given_whole_and_nothing_a_link_points_to() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root gives files away");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (tree, outside) = (tmp.path().join("tree"), tmp.path().join("outside"));
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/file"), "x").unwrap();
        std::fs::write(&outside, "not theirs").unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/link")).unwrap();
        let dir = Dir::open_root(&tree).unwrap();
        dir.give_all(1_000_321).unwrap();
        for path in ["", "a", "a/b", "a/b/file", "a/link"] {
            let meta = std::fs::symlink_metadata(tree.join(path)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (1_000_321, 1_000_321), "{path}");
        }
        assert_eq!(std::fs::metadata(&outside).unwrap().uid(), 0);
        dir.give(1_000_322, 0o700).unwrap();
        let meta = std::fs::metadata(&tree).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (1_000_322, 0o700));
    }
}
