//! The answer to a question about a file below a trusted directory (`domain::agent::FileOp`):
//! what it is, what a directory holds, a file opened at the range asked for. Nothing is followed
//! through a link (`safe_fs`). The node agent answers the server's questions with it, from
//! inside its node; the server, for a task whose node is gone, from its own disk.

use std::io::{Seek, SeekFrom};
use std::path::Path;
use std::time::Instant;

use super::listing;
use super::safe_fs::Dir;
use crate::domain::agent::{
    is_private, resolve_range, FileError, FileInfo, FileOp, ReplyHead, MAX_LISTING,
};

/// How much of a file each read takes as it streams: a read goes to the blocking pool, so small
/// ones would cost more in hops than in bytes.
pub const CHUNK: usize = 256 << 10;

/// What follows an answer's head.
#[derive(Debug)]
pub enum Payload {
    None,
    /// A directory's entries, names relative to it.
    Listing(Vec<FileInfo>),
    /// The file, at the start of the range; the head says how many bytes to read.
    File(std::fs::File),
}

type Refusal = (FileError, String);

/// Answers `op` about `rel` below the directory `root`; a refusal is an answer too. Nothing is
/// begun after `until`, and a removal stops there, leaving the rest (`FileError::Unfinished`).
pub fn answer(root: &Path, rel: &Path, op: FileOp, until: Option<Instant>) -> (ReplyHead, Payload) {
    match prepare(root, rel, op, until) {
        Ok(answer) => answer,
        Err((error, message)) => (ReplyHead::Error { error, message }, Payload::None),
    }
}

fn refused(e: std::io::Error) -> Refusal {
    let gone = matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput
    ) || matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR));
    if gone {
        (FileError::NotFound, "no such file".into())
    } else {
        (FileError::Failed, e.to_string())
    }
}

fn prepare(
    root: &Path,
    rel: &Path,
    op: FileOp,
    until: Option<Instant>,
) -> Result<(ReplyHead, Payload), Refusal> {
    if until.is_some_and(|t| Instant::now() >= t) {
        let late = "not begun: the time for an answer had run out";
        return Err((FileError::Failed, late.into()));
    }
    let root = Dir::open_root(root).map_err(refused)?;
    if let FileOp::MakeDir = op {
        // Before the look below: the directory need not be there yet.
        return make_dir(&root, rel);
    }
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let meta = root.metadata(rel).map_err(refused)?;
    // A link is not a file of the node's, wherever it points.
    if meta.file_type().is_symlink() {
        return Err((FileError::NotFound, "a link".into()));
    }
    match op {
        // A write comes with its bytes: `file_write` answers it.
        FileOp::Write { .. } => Err((FileError::Failed, "a write without its bytes".into())),
        FileOp::MakeDir => make_dir(&root, rel),
        FileOp::Stat => Ok((
            ReplyHead::Info {
                info: FileInfo::of(name, &meta),
            },
            Payload::None,
        )),
        FileOp::List { recursive } => list(&root, rel, recursive),
        FileOp::Remove { recursive } => {
            let removed = match (meta.is_dir(), recursive) {
                (true, true) => root.remove_all_until(rel, until),
                (dir, _) => root.remove(rel, dir),
            };
            match removed {
                Ok(()) => Ok((
                    ReplyHead::Info {
                        info: FileInfo::of(name, &meta),
                    },
                    Payload::None,
                )),
                Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                    Err((FileError::NotEmpty, "a directory with files in it".into()))
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    Err((FileError::Unfinished, e.to_string()))
                }
                Err(e) => Err(refused(e)),
            }
        }
        FileOp::Follow { from, .. } => {
            let (file, info) = opened_at(&root, rel, name, meta.is_dir(), |len| {
                (from <= len).then_some((from, len - from))
            })?;
            Ok((ReplyHead::Stream { info, start: from }, Payload::File(file)))
        }
        FileOp::Read { range } => {
            let mut start_count = None;
            let (file, info) = opened_at(&root, rel, name, meta.is_dir(), |len| {
                start_count = resolve_range(range, len);
                start_count
            })?;
            let (start, count) = start_count.unwrap_or_default();
            Ok((ReplyHead::Data { info, start, count }, Payload::File(file)))
        }
    }
}

/// The file opened for reading at the start `at` gives for its length (None: the range lies
/// outside it). The file as opened, not as looked at: it may have grown or been replaced since.
fn opened_at(
    root: &Dir,
    rel: &Path,
    name: String,
    is_dir: bool,
    at: impl FnOnce(u64) -> Option<(u64, u64)>,
) -> Result<(std::fs::File, FileInfo), Refusal> {
    if is_dir {
        return Err((FileError::IsDirectory, "a directory".into()));
    }
    let mut file = root.open_file(rel).map_err(refused)?;
    let meta = file.metadata().map_err(refused)?;
    let len = meta.len();
    let (start, _) = at(len).ok_or((FileError::BadRange { len }, "outside the file".into()))?;
    file.seek(SeekFrom::Start(start)).map_err(refused)?;
    Ok((file, FileInfo::of(name, &meta)))
}

fn make_dir(root: &Dir, rel: &Path) -> Result<(ReplyHead, Payload), Refusal> {
    let made = root.create_dir_all(rel).map_err(refused)?;
    let meta = made.metadata(Path::new("")).map_err(refused)?;
    let name = rel.file_name().unwrap_or_default().to_string_lossy();
    let info = FileInfo::of(name.into_owned(), &meta);
    Ok((ReplyHead::Info { info }, Payload::None))
}

fn list(root: &Dir, rel: &Path, recursive: bool) -> Result<(ReplyHead, Payload), Refusal> {
    let keep = |path: &Path| !is_private(&path.file_name().unwrap_or_default().to_string_lossy());
    let entries = listing::walk(root, rel, recursive, keep, MAX_LISTING).map_err(refused)?;
    if entries.len() > MAX_LISTING {
        return Err((
            FileError::TooMany,
            format!("more than {MAX_LISTING} entries"),
        ));
    }
    let head = ReplyHead::Listing {
        count: entries.len(),
    };
    let infos = entries
        .iter()
        .map(|(path, meta)| FileInfo::of(path.to_string_lossy().into_owned(), meta))
        .collect();
    Ok((head, Payload::Listing(infos)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_removal_stops_at_its_time_and_the_next_goes_on_from_there() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("task");
        for i in 0..200 {
            let sub = dir.join(format!("d{i}"));
            std::fs::create_dir_all(&sub).unwrap();
            for j in 0..50 {
                std::fs::write(sub.join(format!("f{j}")), "x").unwrap();
            }
        }
        let count = || walkdir_count(&dir);
        let remove = FileOp::Remove { recursive: true };
        let rel = Path::new("task");

        // Past its time before it begins: nothing is done.
        let past = Instant::now();
        let (head, _) = answer(tmp.path(), rel, remove.clone(), Some(past));
        assert_eq!(refusal(&head), Some(FileError::Failed), "{head:?}");
        assert_eq!(count(), 10_200);

        // A millisecond for 10,200 entries: it stops part of the way, and says so.
        let soon = Instant::now() + std::time::Duration::from_millis(1);
        let (head, _) = answer(tmp.path(), rel, remove.clone(), Some(soon));
        assert_eq!(refusal(&head), Some(FileError::Unfinished), "{head:?}");
        let left = count();
        assert!(left > 0 && left < 10_200, "{left} left");
        assert!(
            Instant::now() < soon + std::time::Duration::from_millis(500),
            "it stopped"
        );

        let (head, _) = answer(tmp.path(), rel, remove, None);
        assert!(matches!(head, ReplyHead::Info { .. }), "{head:?}");
        assert!(!dir.exists());
    }

    /// The error an answer refuses with, if it is a refusal.
    fn refusal(head: &ReplyHead) -> Option<FileError> {
        match head {
            ReplyHead::Error { error, .. } => Some(error.clone()),
            _ => None,
        }
    }

    /// Entries below `dir`, itself not counted.
    fn walkdir_count(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| {
                        1 + if e.path().is_dir() {
                            walkdir_count(&e.path())
                        } else {
                            0
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }

    #[test]
    fn files_are_answered_without_following_links() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/f"), "hello").unwrap();
        std::fs::write(tmp.path().join("d/.batchpool-x"), "mine").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("d/l")).unwrap();
        let root = tmp.path();
        let read = |rel: &str, range| answer(root, Path::new(rel), FileOp::Read { range }, None);

        let (head, payload) = read("d/f", Some((1, Some(3))));
        let ReplyHead::Data { start, count, info } = head else {
            panic!("{head:?}")
        };
        assert_eq!((start, count, info.len, info.name.as_str()), (1, 3, 5, "f"));
        let Payload::File(file) = payload else {
            panic!()
        };
        let mut text = String::new();
        file.take(count).read_to_string(&mut text).unwrap();
        assert_eq!(text, "ell");

        for (rel, error) in [
            ("d/l", FileError::NotFound),
            ("d/none", FileError::NotFound),
            ("d", FileError::IsDirectory),
        ] {
            let (head, _) = read(rel, None);
            assert!(
                matches!(head, ReplyHead::Error { error: ref e, .. } if *e == error),
                "{rel}: {head:?}"
            );
        }
        let (head, _) = read("d/f", Some((5, None)));
        assert!(matches!(
            head,
            ReplyHead::Error {
                error: FileError::BadRange { len: 5 },
                ..
            }
        ));
    }
}
