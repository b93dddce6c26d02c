//! A directory the server asks to remove is first moved aside, into a private directory of the
//! node's root, and removed from there in the background: its path is free at once (a task
//! added again with the same id starts in a new directory without waiting), and a removal that
//! takes long (a task that left many files) goes on whatever happens to the server meanwhile.
//! What an agent left there when it stopped is removed by the next agent of the node.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::OnceLock;

use crate::domain::agent::FileInfo;
use crate::sys::safe_fs::Dir;

/// Below a node's root; private (`domain::agent::is_private`), so never listed or served.
pub const TRASH: &str = ".batchpool-trash";

/// Moves the directory `rel` below `root` into the root's trash (which [`empty`] then empties);
/// what it was, as it was. None where it cannot be moved (not a directory, on another file
/// system, a link in the way): the caller removes it where it is.
pub fn move_aside(root: &Path, rel: &Path) -> Option<FileInfo> {
    let moved = || -> std::io::Result<Option<FileInfo>> {
        let base = Dir::open_root(root)?;
        let meta = base.metadata(rel)?;
        if !meta.is_dir() {
            return Ok(None);
        }
        // A link or file a task left in the trash's place is replaced, never followed.
        let trash = base.create_dir_all(Path::new(TRASH))?;
        let name = OsString::from(uuid::Uuid::new_v4().simple().to_string());
        base.move_into(rel, &trash, &name)?;
        let name = rel.file_name().unwrap_or_default().to_string_lossy();
        Ok(Some(FileInfo::of(name.into_owned(), &meta)))
    };
    match moved() {
        Ok(moved) => moved,
        Err(e) => {
            tracing::debug!(error = %e, rel = %rel.display(), "not moved aside; removed in place");
            None
        }
    }
}

/// Has the trash of the node's root `root` emptied, by the one thread that empties trash.
pub fn empty(root: &Path) {
    static QUEUE: OnceLock<mpsc::Sender<PathBuf>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (to, from) = mpsc::channel();
        std::thread::Builder::new()
            .name("trash".into())
            .spawn(move || emptier(from))
            .expect("starting the trash thread");
        to
    });
    // The thread runs as long as the agent.
    let _ = queue.send(root.to_path_buf());
}

fn emptier(roots: mpsc::Receiver<PathBuf>) {
    while let Ok(first) = roots.recv() {
        // Removals asked for while the last went on need one pass each root, not one each.
        let mut due = BTreeSet::from([first]);
        due.extend(roots.try_iter());
        for root in due {
            if let Err(e) = empty_now(&root) {
                tracing::warn!(error = %e, root = %root.display(), "emptying the node's trash failed");
            }
        }
    }
}

/// Removes what is in the trash of `root`, never following a link.
pub fn empty_now(root: &Path) -> std::io::Result<()> {
    let trash = match Dir::open_root(root)?.open_dir(Path::new(TRASH)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    for name in trash.names()? {
        trash.remove_all(Path::new(&name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_moved_aside_leaves_its_path_free_and_its_files_go() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let dir = root.join("workitems/j/job-1/t");
        std::fs::create_dir_all(dir.join("wd/deep")).unwrap();
        for i in 0..100 {
            std::fs::write(dir.join(format!("wd/deep/{i}")), "x").unwrap();
        }
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("canary"), "canary").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("wd/link")).unwrap();

        let info = move_aside(&root, Path::new("workitems/j/job-1/t")).expect("moved");
        assert_eq!(info.name, "t");
        assert!(!dir.exists(), "the path is free at once");
        assert!(root.join("workitems/j/job-1").is_dir(), "its parent stays");
        empty_now(&root).unwrap();
        assert_eq!(std::fs::read_dir(root.join(TRASH)).unwrap().count(), 0);
        assert!(
            outside.join("canary").exists(),
            "a link is removed, not followed"
        );

        // A file is not moved: it is removed where it is by the caller.
        std::fs::write(root.join("file"), "x").unwrap();
        assert!(move_aside(&root, Path::new("file")).is_none());
        assert!(move_aside(&root, Path::new("nothing/there")).is_none());
    }

    #[test]
    fn a_link_in_the_trash_place_is_replaced_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("d/sub")).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("canary"), "canary").unwrap();
        std::os::unix::fs::symlink(&outside, root.join(TRASH)).unwrap();

        // Emptying a trash that is a link touches nothing behind it.
        assert!(empty_now(&root).is_err());
        assert!(outside.join("canary").exists());
        move_aside(&root, Path::new("d")).expect("moved");
        assert!(!root.join(TRASH).is_symlink(), "the link was replaced");
        assert!(outside.join("canary").exists());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        empty_now(&root).unwrap();
        assert!(!root.join("d").exists());
    }
}
