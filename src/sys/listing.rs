//! A directory's tree, listed from a trusted directory without following a link: for the files
//! API, whether the server or a node's agent lists it.

use std::fs::Metadata;
use std::io;
use std::path::{Path, PathBuf};

use super::safe_fs::Dir;

/// What is in `top` below `root` (and, if `recursive`, in every directory below it), named
/// relative to `top`. Links are neither listed nor followed, and what `keep` refuses (given its
/// path relative to `top`) is neither listed nor entered. Stops at `limit` + 1 entries, so a caller can tell a tree too large to
/// list. A directory that went (or became a link) while it was listed has nothing in it.
pub fn walk(
    root: &Dir,
    top: &Path,
    recursive: bool,
    keep: impl Fn(&Path) -> bool,
    limit: usize,
) -> io::Result<Vec<(PathBuf, Metadata)>> {
    let mut out = Vec::new();
    let mut pending = vec![(root.open_dir(top)?, PathBuf::new())];
    while let Some((dir, rel)) = pending.pop() {
        let Ok(entries) = dir.entries() else {
            continue;
        };
        for (name, meta) in entries {
            let rel_path = rel.join(&name);
            if meta.file_type().is_symlink() || !keep(&rel_path) {
                continue;
            }
            if meta.is_dir() && recursive {
                if let Ok(sub) = dir.open_dir(Path::new(&name)) {
                    pending.push((sub, rel_path.clone()));
                }
            }
            out.push((rel_path, meta));
            if out.len() > limit {
                return Ok(out);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_listed_without_its_links_or_what_is_kept_out() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::fs::create_dir_all(top.join(".hidden")).unwrap();
        std::fs::write(top.join("a/b/f"), "x").unwrap();
        std::fs::write(top.join(".hidden/g"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", top.join("a/etc")).unwrap();
        let root = Dir::open_root(tmp.path()).unwrap();
        let keep = |p: &Path| !p.file_name().unwrap().to_string_lossy().starts_with('.');
        let mut names: Vec<String> = walk(&root, Path::new("top"), true, keep, 100)
            .unwrap()
            .into_iter()
            .map(|(p, _)| p.display().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "a/b", "a/b/f"]);
        let flat = walk(&root, Path::new("top"), false, keep, 100).unwrap();
        assert_eq!(flat.len(), 1);
        assert_eq!(
            walk(&root, Path::new("top"), true, keep, 1).unwrap().len(),
            2
        );
        assert!(walk(&root, Path::new("top/a/etc"), true, keep, 100).is_err());
    }
}
