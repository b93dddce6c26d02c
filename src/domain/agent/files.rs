//! The agent's answers about a node's files: what is asked ([`FileOp`]), and the head line
//! of the reply.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum FileOp {
    /// What it is.
    Stat,
    /// What is in the directory (and below it, if `recursive`), names relative to it.
    List { recursive: bool },
    /// The file's bytes, all of them or `range` (first and last byte; no last: to the end).
    Read { range: Option<(u64, Option<u64>)> },
    /// Delete it: a file, an empty directory, or with `recursive` a directory and all in it
    /// (links in it go as links). Answered with what it was.
    Remove { recursive: bool },
    /// Make the directory, and those above it, as needed (a link in the way is replaced, never
    /// followed). Answered with what it is.
    MakeDir,
    /// Make the file anew from the bytes at [`BODIES_PATH`]`/{id}` (with `mode` if given): its
    /// directories are made (a link in the way is replaced, never followed), it is written aside
    /// and renamed into place, so it is there whole or not at all. Answered with what it is.
    Write {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    /// The file's bytes from `from` on, as they are written, until the attempt whose record is
    /// `record` (below the same root) has ended and all it wrote is sent: answered with
    /// [`ReplyHead::Stream`]. Asked only of an agent that says it follows ([`super::Hello`]).
    Follow { from: u64, record: String },
}

/// A file or directory (never a link) as a node sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileInfo {
    pub name: String,
    pub is_dir: bool,
    pub len: u64,
    /// Milliseconds since 1970.
    pub created_ms: i64,
    pub modified_ms: i64,
    /// The mode bits, as `stat` gives them.
    pub mode: u32,
}

impl FileInfo {
    pub fn of(name: String, meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let ms = |t: std::io::Result<std::time::SystemTime>| {
            t.ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        };
        let modified_ms = ms(meta.modified()).unwrap_or(0);
        Self {
            name,
            is_dir: meta.is_dir(),
            len: meta.len(),
            created_ms: ms(meta.created()).unwrap_or(modified_ms),
            modified_ms,
            mode: meta.mode(),
        }
    }
}

/// The first line of a reply to a [`Work::File`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ReplyHead {
    /// To `Stat`.
    Info { info: FileInfo },
    /// To `List`: `count` lines follow, a [`FileInfo`] (JSON) each.
    Listing { count: usize },
    /// To `Read`: `count` bytes of the file follow, from `start`.
    Data {
        info: FileInfo,
        start: u64,
        count: u64,
    },
    /// To `Follow`: the file's bytes from `start` follow, as they are written, until the
    /// attempt ends (the answer's end).
    Stream { info: FileInfo, start: u64 },
    /// No answer, and why.
    Error { error: FileError, message: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "camelCase")]
pub enum FileError {
    NotFound,
    IsDirectory,
    /// The range asked for lies outside the file of `len` bytes.
    BadRange {
        len: u64,
    },
    /// A listing of more than [`MAX_LISTING`] entries.
    TooMany,
    /// A directory to delete that is not empty (and `recursive` was not asked for).
    NotEmpty,
    /// A removal stopped at its question's `within_ms`, with part of it still there.
    Unfinished,
    Failed,
    /// The agent does not do what was asked (a build from before it could).
    Unsupported,
}

/// The first byte and the count of a read of `range` (see [`FileOp::Read`]) from a file of
/// `len` bytes; None if the range lies outside it. An empty file reads as empty, whatever the
/// range.
pub fn resolve_range(range: Option<(u64, Option<u64>)>, len: u64) -> Option<(u64, u64)> {
    let Some((start, end)) = range else {
        return Some((0, len));
    };
    let end = end.unwrap_or(len.saturating_sub(1));
    if start > end || (len > 0 && start >= len) {
        return None;
    }
    if len == 0 {
        return Some((0, 0));
    }
    let end = end.min(len - 1);
    Some((start, end - start + 1))
}

/// Whether an attempt's record (`{pid} {boot}` on its first line, its exit code on the second)
/// says the attempt is over for an agent of boot `boot`: it has an exit code, or it was
/// started by an agent before this one (its node restarted, and the command with it).
pub fn record_says_over(text: &str, boot: &str) -> bool {
    let mut lines = text.split_inclusive('\n').filter(|l| l.ends_with('\n'));
    let started_by = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_string));
    let exited = lines.next().is_some_and(|l| !l.trim().is_empty());
    exited || started_by.is_some_and(|b| b != boot)
}
