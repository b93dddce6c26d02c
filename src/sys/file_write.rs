//! A file made anew from a stream of bytes, below a trusted directory: its directories are made
//! (a link a task left in the way is replaced, never followed), the bytes go to `name.partial`
//! beside it, which is renamed into place once whole. The node agent writes what the server
//! sends it this way, and the server the files of a node that runs no agent.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use super::safe_fs::Dir;
use crate::domain::agent::FileInfo;

/// Writes `rel` below `root` from `bytes`, with `mode` if given; what it is once written. A
/// failure leaves no partial file behind (as far as it can be removed) and the old file, if
/// any, as it was.
pub async fn write(
    root: &Path,
    rel: &Path,
    bytes: impl Stream<Item = std::io::Result<Bytes>>,
    mode: Option<u32>,
) -> std::io::Result<FileInfo> {
    let name = rel
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?
        .to_os_string();
    let mut partial = name.clone();
    partial.push(".partial");
    let (dir, file) = {
        let (root, parent, partial) = (root.to_path_buf(), parent(rel), partial.clone());
        tokio::task::spawn_blocking(move || {
            let dir = Dir::open_root(&root)?.create_dir_all(&parent)?;
            let file = dir.create_file(&partial)?;
            Ok::<_, std::io::Error>((dir, file))
        })
        .await
        .map_err(std::io::Error::other)??
    };
    let written = fill(tokio::fs::File::from_std(file), bytes, mode).await;
    tokio::task::spawn_blocking(move || {
        if let Err(e) = written {
            let _ = dir.remove(Path::new(&partial), false);
            return Err(e);
        }
        dir.rename(&partial, &name)?;
        let meta = dir.metadata(Path::new(&name))?;
        Ok(FileInfo::of(name.to_string_lossy().into_owned(), &meta))
    })
    .await
    .map_err(std::io::Error::other)?
}

fn parent(rel: &Path) -> PathBuf {
    rel.parent().unwrap_or(Path::new("")).to_path_buf()
}

async fn fill(
    mut file: tokio::fs::File,
    bytes: impl Stream<Item = std::io::Result<Bytes>>,
    mode: Option<u32>,
) -> std::io::Result<()> {
    let mut bytes = std::pin::pin!(bytes);
    while let Some(chunk) = bytes.next().await {
        file.write_all(&chunk?).await?;
    }
    file.flush().await?;
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&'static str]) -> impl Stream<Item = std::io::Result<Bytes>> {
        let parts: Vec<_> = parts
            .iter()
            .map(|p| Ok(Bytes::from_static(p.as_bytes())))
            .collect();
        futures_util::stream::iter(parts)
    }

    #[tokio::test]
    async fn a_file_is_written_whole_below_its_root_and_nowhere_else() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("root"), tmp.path().join("outside"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let info = write(
            &root,
            Path::new("a/b/f.txt"),
            chunks(&["one ", "two"]),
            Some(0o750),
        )
        .await
        .unwrap();
        assert_eq!(
            (info.name.as_str(), info.len, info.mode & 0o777),
            ("f.txt", 7, 0o750)
        );
        assert_eq!(
            std::fs::read_to_string(root.join("a/b/f.txt")).unwrap(),
            "one two"
        );

        // A link a task left where a directory goes is replaced, never followed.
        std::os::unix::fs::symlink(&outside, root.join("l")).unwrap();
        write(&root, Path::new("l/f.txt"), chunks(&["x"]), None)
            .await
            .unwrap();
        assert!(!outside.join("f.txt").exists(), "nothing written outside");
        assert_eq!(std::fs::read_to_string(root.join("l/f.txt")).unwrap(), "x");
        // And a link where the file goes is replaced by the file.
        std::os::unix::fs::symlink(outside.join("target"), root.join("a/b/g")).unwrap();
        write(&root, Path::new("a/b/g"), chunks(&["y"]), None)
            .await
            .unwrap();
        assert!(!outside.join("target").exists());
        assert!(!root.join("a/b/g").is_symlink());

        // A stream that fails leaves the old file and no partial one.
        let failing = futures_util::stream::iter(vec![
            Ok(Bytes::from_static(b"half")),
            Err(std::io::Error::other("cut off")),
        ]);
        assert!(write(&root, Path::new("a/b/f.txt"), failing, None)
            .await
            .is_err());
        assert_eq!(
            std::fs::read_to_string(root.join("a/b/f.txt")).unwrap(),
            "one two"
        );
        assert!(!root.join("a/b/f.txt.partial").exists());
        assert!(write(&root, Path::new("../escape"), chunks(&["z"]), None)
            .await
            .is_err());
        assert!(!tmp.path().join("escape").exists());
    }
}
