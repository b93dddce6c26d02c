// Long: the one directory type whose every operation refuses links; its parts are one concept.
//! Paths below node and task directories, which tasks can write. Tasks run as root in their
//! node and can put a symlink anywhere below `<data>/nodes/<node>` or `<data>/workitems/<account>`;
//! the server (root on the host) must never follow one, or a task could make it read, create or
//! delete files anywhere. So every path below those trusted roots is resolved here, from a
//! directory fd, one component at a time, refusing links: `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`, or on kernels without it (ENOSYS) an `openat(O_NOFOLLOW)` walk.
//! Directories are made with `mkdirat` under an fd, and trees are removed with `unlinkat`,
//! unlinking a link found on the way, never following it.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

mod below;
mod owner;
pub use below::Below;

/// How deep `remove_all` goes below the directory it removes.
const MAX_DEPTH: usize = 256;

/// An open directory; paths given to its methods never leave it and never pass a symlink.
#[derive(Debug)]
pub struct Dir(OwnedFd);

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `rel` as its names: plain names only, no `..`, `.` or root.
fn names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", rel.display()),
            )),
        })
        .collect()
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `openat` of one name in `dir`, never following a link there.
fn open_name(
    dir: RawFd,
    name: &OsStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let name = cstr(name)?;
    let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd and a NUL-terminated name; the fd returned is ours.
    let fd = check(unsafe { libc::openat(dir, name.as_ptr(), flags, libc::c_uint::from(mode)) })?;
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Dir {
    /// Opens a directory the server made and tasks cannot replace (a data directory, a node's
    /// root, an account's workitems): the trusted start of every walk.
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        let path = cstr(path.as_os_str())?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path; the fd returned is ours.
        let fd = check(unsafe { libc::open(path.as_ptr(), flags) })?;
        // SAFETY: just opened, owned by nobody else.
        Ok(Dir(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// As [`open_root`](Self::open_root), following links in `path`, the last name included.
    /// For a node's agent, inside its node: a root there may be a link the server made (a
    /// local node's `workitems`), and whatever a link in it points to is the node's own.
    pub fn open_root_in_node(path: &Path) -> io::Result<Dir> {
        let path = cstr(path.as_os_str())?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path; the fd returned is ours.
        let fd = check(unsafe { libc::open(path.as_ptr(), flags) })?;
        // SAFETY: just opened, owned by nobody else.
        Ok(Dir(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Opens `rel` below this directory with `flags`; a symlink anywhere on the way, the last
    /// name included, fails (ELOOP), except that `O_PATH` opens a final link itself.
    fn open(&self, rel: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
        let parts = names(rel)?;
        if parts.is_empty() {
            return open_name(self.0.as_raw_fd(), OsStr::new("."), flags, 0);
        }
        match self.openat2(rel, flags) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => self.open_walk(&parts, flags),
            other => other,
        }
    }

    /// `open` on kernels before 5.6: one `openat(O_NOFOLLOW)` per name.
    fn open_walk(&self, parts: &[&OsStr], flags: libc::c_int) -> io::Result<OwnedFd> {
        let (last, dirs) = parts.split_last().expect("not empty");
        let mut at: Option<OwnedFd> = None;
        for name in dirs {
            let dir = at.as_ref().map_or(self.0.as_raw_fd(), |d| d.as_raw_fd());
            at = Some(open_name(dir, name, libc::O_PATH | libc::O_DIRECTORY, 0)?);
        }
        let dir = at.as_ref().map_or(self.0.as_raw_fd(), |d| d.as_raw_fd());
        open_name(dir, last, flags, 0)
    }

    fn openat2(&self, rel: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
        let path = cstr(rel.as_os_str())?;
        // SAFETY: open_how is plain data; zeroed is its documented default.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
        how.resolve =
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: the syscall reads `how` (of the size given) and the NUL-terminated path.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.0.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just opened, owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// The directory `rel` below this one.
    pub fn open_dir(&self, rel: &Path) -> io::Result<Dir> {
        self.open(rel, libc::O_RDONLY | libc::O_DIRECTORY).map(Dir)
    }

    /// Makes `rel` and its parents below this directory (as `mkdir -p`) and opens it. These are
    /// the server's directories: a link or file a task put in the place of one is removed (never
    /// followed), so a planted link can neither redirect the server nor block the job for good.
    pub fn create_dir_all(&self, rel: &Path) -> io::Result<Dir> {
        let parts = names(rel)?;
        // Most of the way is there already (a task's job directory, say): the deepest
        // directory that exists is opened in one lookup that follows no link, and only what is
        // missing below it is made. Anything else on the way (a link, a file) takes the walk
        // below, which replaces it.
        let mut have = parts.len();
        let mut dir = loop {
            if have == 0 {
                break Dir(self.0.try_clone()?);
            }
            match self.open_dir(&parts[..have].iter().collect::<PathBuf>()) {
                Ok(dir) => break dir,
                Err(e) if e.kind() == io::ErrorKind::NotFound => have -= 1,
                Err(_) => have = 0,
            }
        };
        for name in &parts[have..] {
            dir = dir.make_dir(name)?;
        }
        Ok(dir)
    }

    fn make_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let c = cstr(name)?;
        for _ in 0..3 {
            // SAFETY: a valid directory fd and a NUL-terminated name.
            if let Err(e) = check(unsafe { libc::mkdirat(self.0.as_raw_fd(), c.as_ptr(), 0o755) }) {
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
            let flags = libc::O_RDONLY | libc::O_DIRECTORY;
            match open_name(self.0.as_raw_fd(), name, flags, 0) {
                Ok(fd) => return Ok(Dir(fd)),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                    self.unlink(name, 0)?;
                }
                Err(e) => return Err(e),
            }
        }
        // A task racing to put its link back each time: give up rather than loop.
        Err(io::Error::other(
            "a link keeps taking the directory's place",
        ))
    }

    /// A regular file below this directory, for reading; links and anything else that is not a
    /// regular file are refused.
    pub fn open_file(&self, rel: &Path) -> io::Result<File> {
        // Looked at before it is opened: opening a device or a FIFO a task made could block
        // or act. (Non-blocking as well, for one swapped in between.)
        if !self.metadata(rel)?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        let file = File::from(self.open(rel, libc::O_RDONLY | libc::O_NONBLOCK)?);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(file)
    }

    /// Creates (or truncates) the file `name` in this directory for writing; a link there fails.
    pub fn create_file(&self, name: &OsStr) -> io::Result<File> {
        names(Path::new(name))?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
        open_name(self.0.as_raw_fd(), name, flags, 0o644).map(File::from)
    }

    /// Makes the link `name` in this directory, to `target` (which is not looked at).
    pub fn symlink(&self, target: &OsStr, name: &OsStr) -> io::Result<()> {
        names(Path::new(name))?;
        let (target, name) = (cstr(target)?, cstr(name)?);
        // SAFETY: NUL-terminated strings and a directory fd this value owns.
        check(unsafe { libc::symlinkat(target.as_ptr(), self.0.as_raw_fd(), name.as_ptr()) })
            .map(drop)
    }

    /// What `rel` is, without following it: a link reads as a link.
    pub fn metadata(&self, rel: &Path) -> io::Result<Metadata> {
        File::from(self.open(rel, libc::O_PATH)?).metadata()
    }

    /// Renames `from` to `to`, both names in this directory.
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (from, to) = (cstr(from)?, cstr(to)?);
        let fd = self.0.as_raw_fd();
        // SAFETY: valid directory fds and NUL-terminated names.
        check(unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) }).map(|_| ())
    }

    /// Moves `rel` below this directory (a link there as the link it is) to `name` in `into`,
    /// which must be on the same file system (EXDEV otherwise).
    pub fn move_into(&self, rel: &Path, into: &Dir, name: &OsStr) -> io::Result<()> {
        let parts = names(rel)?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        let parent = self.open_dir(&dirs.iter().collect::<PathBuf>())?;
        let (from, to) = (cstr(last)?, cstr(name)?);
        let (at, to_at) = (parent.0.as_raw_fd(), into.0.as_raw_fd());
        // SAFETY: valid directory fds and NUL-terminated names.
        check(unsafe { libc::renameat(at, from.as_ptr(), to_at, to.as_ptr()) }).map(|_| ())
    }

    /// The names in this directory with what each is (links not followed), `.` and `..` left out.
    pub fn entries(&self) -> io::Result<Vec<(OsString, Metadata)>> {
        let mut out = Vec::new();
        for name in self.names()? {
            // An entry removed since it was listed is simply not there.
            match self.metadata(Path::new(&name)) {
                Ok(meta) => out.push((name, meta)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The names in this directory, `.` and `..` left out.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // readdir works on its own fd (closedir closes it), from the start of the directory.
        let fd = open_name(
            self.0.as_raw_fd(),
            OsStr::new("."),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        )?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: raw is an open directory fd whose ownership passes to the DIR stream.
        let stream = unsafe { libc::fdopendir(raw) };
        if stream.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so raw is still ours to close.
            unsafe { libc::close(raw) };
            return Err(e);
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: a valid stream; the entry is read before the next readdir call.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated within the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let name = OsStr::from_bytes(name.to_bytes());
            if name != "." && name != ".." {
                out.push(name.to_os_string());
            }
        }
        // SAFETY: the stream is valid and closed once.
        unsafe { libc::closedir(stream) };
        Ok(out)
    }

    /// Removes `rel` below this directory with everything in it; a link is removed, never
    /// followed. Removing what is not there is not an error.
    pub fn remove_all(&self, rel: &Path) -> io::Result<()> {
        self.remove_all_until(rel, None)
    }

    /// [`remove_all`](Self::remove_all), which stops at `until` (an error of kind `TimedOut`)
    /// with what it has not reached yet left in place.
    pub fn remove_all_until(&self, rel: &Path, until: Option<Instant>) -> io::Result<()> {
        let parts = names(rel)?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "nothing to remove",
            ));
        };
        let parent = match self.open_dir(&dirs.iter().collect::<std::path::PathBuf>()) {
            Ok(parent) => parent,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        match parent.remove_entry(last, 0, until) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Removes `rel` as [`remove_all`](Self::remove_all) does, where it can be reached: behind
    /// a link or a file on the way it is not there, which is no error (nor is its absence).
    /// For what must not outlive a directory about to be made, which replaces what is in its way.
    pub fn discard(&self, rel: &Path) -> io::Result<()> {
        match self.remove_all(rel) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => Ok(()),
            other => other,
        }
    }

    /// Removes the file (or, with `dir`, the empty directory) `rel` below this directory; a link
    /// there goes as the link it is.
    pub fn remove(&self, rel: &Path, dir: bool) -> io::Result<()> {
        let parts = names(rel)?;
        let Some((last, dirs)) = parts.split_last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "nothing to remove",
            ));
        };
        let parent = self.open_dir(&dirs.iter().collect::<std::path::PathBuf>())?;
        parent.unlink(last, if dir { libc::AT_REMOVEDIR } else { 0 })
    }

    fn unlink(&self, name: &OsStr, flags: libc::c_int) -> io::Result<()> {
        let c = cstr(name)?;
        // SAFETY: a valid directory fd and a NUL-terminated name.
        check(unsafe { libc::unlinkat(self.0.as_raw_fd(), c.as_ptr(), flags) }).map(|_| ())
    }

    fn remove_entry(&self, name: &OsStr, depth: usize, until: Option<Instant>) -> io::Result<()> {
        if until.is_some_and(|t| Instant::now() >= t) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "stopped before the end: the time for an answer ran out (the rest is still there)",
            ));
        }
        // Opened without following: a link (even one swapped in since a look) fails to open as
        // a directory and is unlinked as the link it is.
        match open_name(
            self.0.as_raw_fd(),
            name,
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        ) {
            Ok(fd) => {
                // Each level holds an fd and a stack frame: a task's directories nested without
                // end must not exhaust either.
                if depth >= MAX_DEPTH {
                    return Err(io::Error::other("directories nested too deep to remove"));
                }
                let dir = Dir(fd);
                for child in dir.names()? {
                    dir.remove_entry(&child, depth + 1, until)?;
                }
                self.unlink(name, libc::AT_REMOVEDIR)
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                self.unlink(name, 0)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A trusted root with `a/b/file`, and an "outside" directory with a canary in it.
    fn setup() -> (tempfile::TempDir, Dir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/file"), "inside").unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("b")).unwrap();
        std::fs::write(outside.join("b/file"), "canary").unwrap();
        std::fs::write(outside.join("canary"), "canary").unwrap();
        let dir = Dir::open_root(&root).unwrap();
        (tmp, dir, outside)
    }

    fn read(dir: &Dir, rel: &str) -> io::Result<String> {
        io::read_to_string(dir.open_file(Path::new(rel))?)
    }

    #[test]
    fn plain_paths_open_and_list() {
        let (_tmp, root, _) = setup();
        assert_eq!(read(&root, "a/b/file").unwrap(), "inside");
        let entries = root.open_dir(Path::new("a/b")).unwrap().entries().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, "file");
        assert!(entries[0].1.is_file());
        assert!(
            root.open_file(Path::new("a")).is_err(),
            "a directory is not a file"
        );
    }

    #[test]
    fn dot_dot_and_absolute_paths_are_refused() {
        let (_tmp, root, _) = setup();
        for bad in ["../outside/canary", "a/../../outside/canary", "/etc/passwd"] {
            let e = read(&root, bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn a_link_in_the_middle_is_not_followed() {
        let (tmp, root, outside) = setup();
        symlink(&outside, tmp.path().join("root/abs")).unwrap();
        symlink("../outside", tmp.path().join("root/rel")).unwrap();
        for path in ["abs/canary", "rel/canary", "abs/b/file"] {
            assert!(read(&root, path).is_err(), "{path}");
            assert!(
                root.open_dir(Path::new(path).parent().unwrap()).is_err(),
                "{path}"
            );
        }
        // Making directories replaces the link and leaves its target alone.
        root.create_dir_all(Path::new("abs/made")).unwrap();
        assert!(!outside.join("made").exists());
        assert!(tmp.path().join("root/abs/made").is_dir());
    }

    #[test]
    fn a_link_as_the_last_name_is_seen_as_a_link() {
        let (tmp, root, outside) = setup();
        symlink(outside.join("canary"), tmp.path().join("root/a/link")).unwrap();
        assert!(read(&root, "a/link").is_err());
        assert!(root
            .metadata(Path::new("a/link"))
            .unwrap()
            .file_type()
            .is_symlink());
        let names: Vec<_> = root.open_dir(Path::new("a")).unwrap().entries().unwrap();
        assert!(names
            .iter()
            .any(|(n, m)| n == "link" && m.file_type().is_symlink()));
        assert!(root
            .open_dir(Path::new("a"))
            .unwrap()
            .create_file(OsStr::new("link"))
            .is_err());
        assert_eq!(
            std::fs::read_to_string(outside.join("canary")).unwrap(),
            "canary"
        );
    }

    #[test]
    fn the_walk_for_old_kernels_refuses_links_too() {
        let (tmp, root, outside) = setup();
        symlink(&outside, tmp.path().join("root/abs")).unwrap();
        symlink(outside.join("canary"), tmp.path().join("root/a/link")).unwrap();
        let walk = |path: &str| {
            let parts: Vec<&OsStr> = Path::new(path).iter().collect();
            root.open_walk(&parts, libc::O_RDONLY)
        };
        assert!(walk("a/b/file").is_ok());
        assert!(walk("abs/canary").is_err());
        assert!(walk("a/link").is_err());
    }

    #[test]
    fn directories_are_made_below_the_root() {
        let (tmp, root, _) = setup();
        root.create_dir_all(Path::new("x/y/z")).unwrap();
        assert!(tmp.path().join("root/x/y/z").is_dir());
        root.create_dir_all(Path::new("x/y/z")).unwrap();
    }

    #[test]
    fn what_is_in_the_way_below_a_made_directory_is_replaced() {
        let (tmp, root, outside) = setup();
        // Below directories that are there (the way the first lookup takes): a link, then a
        // file where a directory goes.
        symlink(&outside, tmp.path().join("root/a/b/out")).unwrap();
        root.create_dir_all(Path::new("a/b/out/wd")).unwrap();
        assert!(!outside.join("wd").exists(), "nothing made outside");
        assert!(!tmp.path().join("root/a/b/out").is_symlink());
        assert!(tmp.path().join("root/a/b/out/wd").is_dir());
        std::fs::write(tmp.path().join("root/a/b/file-here"), "x").unwrap();
        root.create_dir_all(Path::new("a/b/file-here/wd")).unwrap();
        assert!(tmp.path().join("root/a/b/file-here/wd").is_dir());
    }

    #[test]
    fn removing_a_tree_removes_links_and_leaves_their_targets() {
        let (tmp, root, outside) = setup();
        symlink(&outside, tmp.path().join("root/a/b/out")).unwrap();
        symlink(outside.join("canary"), tmp.path().join("root/a/file-link")).unwrap();
        root.remove_all(Path::new("a")).unwrap();
        assert!(!tmp.path().join("root/a").exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("canary")).unwrap(),
            "canary"
        );
        assert!(outside.join("b/file").exists());
        root.remove_all(Path::new("a")).unwrap();
        // A link as the tree itself goes as a link; one on the way stops the removal.
        symlink(&outside, tmp.path().join("root/top")).unwrap();
        root.remove_all(Path::new("top")).unwrap();
        assert!(outside.join("canary").exists());
        symlink(&outside, tmp.path().join("root/mid")).unwrap();
        assert!(root.remove_all(Path::new("mid/b")).is_err());
        assert!(outside.join("b/file").exists());
        // Nesting past the bound is refused, not followed down without end.
        let deep: std::path::PathBuf = std::iter::repeat_n("d", MAX_DEPTH + 2).collect();
        root.create_dir_all(&deep).unwrap();
        assert!(root.remove_all(Path::new("d")).is_err());
    }
}
