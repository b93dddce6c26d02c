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
