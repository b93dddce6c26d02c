//! A task's directory as the server reaches it after (or while) its command runs: through its
//! node's agent, which looks from inside the node, so a link the task made can only ever lead
//! inside it. Only a task whose node is gone (or runs no agent) is read from this host's disk,
//! by the same rules ([`Runtime::file`]).

use std::path::Path;

use super::agents::{ByteStream, FileAnswer};
use super::{NodeError, Runtime, TaskDirs};
use crate::domain::agent::{FileError, FileInfo, FileOp};

/// The files below one task's directory, on the node that ran it.
#[derive(Clone, Copy)]
pub struct TaskFiles<'a> {
    pub runtime: &'a Runtime,
    /// The node the task ran on; None if it is gone.
    pub node: Option<&'a str>,
    pub dirs: &'a TaskDirs,
}

/// A file's bytes as they stream in: `len` in all.
pub struct FileData {
    pub len: u64,
    pub bytes: ByteStream,
}

impl TaskFiles<'_> {
    /// What is at `rel` below the task directory; None if nothing (or a link) is.
    pub async fn stat(&self, rel: &Path) -> Result<Option<FileInfo>, NodeError> {
        match self.ask(rel, FileOp::Stat).await? {
            Some(FileAnswer::Info(info)) => Ok(Some(info)),
            Some(_) => Err(self.failed(rel, "an answer that is not a file's")),
            None => Ok(None),
        }
    }

    /// What the directory `rel` holds (and, if `recursive`, what every directory below it
    /// does), named relative to it; None if there is no such directory.
    pub async fn list(
        &self,
        rel: &Path,
        recursive: bool,
    ) -> Result<Option<Vec<FileInfo>>, NodeError> {
        let op = FileOp::List { recursive };
        match self.ask(rel, op).await? {
            Some(FileAnswer::Listing(infos)) => Ok(Some(infos)),
            Some(_) => Err(self.failed(rel, "an answer that is not a listing")),
            None => Ok(None),
        }
    }

    /// Makes the directory `rel`, and those above it, as needed.
    pub async fn make_dir(&self, rel: &Path) -> Result<(), NodeError> {
        match self.ask(rel, FileOp::MakeDir).await? {
            Some(FileAnswer::Info(info)) if info.is_dir => Ok(()),
            _ => Err(self.failed(rel, "not made a directory")),
        }
    }

    /// Removes `rel` and everything below it (links in it go as links, never followed); what
    /// is not there is not an error.
    pub async fn remove(&self, rel: &Path) -> Result<(), NodeError> {
        self.ask(rel, FileOp::Remove { recursive: true })
            .await
            .map(|_| ())
    }

    /// The bytes of the file `rel`; None if there is no such file.
    pub async fn read(&self, rel: &Path) -> Result<Option<FileData>, NodeError> {
        match self.ask(rel, FileOp::Read { range: None }).await? {
            Some(FileAnswer::Data { count, bytes, .. }) => Ok(Some(FileData { len: count, bytes })),
            Some(_) => Err(self.failed(rel, "an answer that is not a file's bytes")),
            None => Ok(None),
        }
    }

    /// Writes the file `rel` anew from `bytes`, with `mode` if given (its directories made).
    pub async fn write(
        &self,
        rel: &Path,
        bytes: ByteStream,
        mode: Option<u32>,
    ) -> Result<(), NodeError> {
        let at = self.dirs.host.join(rel);
        self.runtime.write_file(self.node, &at, bytes, mode).await
    }

    /// The first `max` bytes of the file `rel` (none if there is no such file).
    pub async fn head(&self, rel: &Path, max: u64) -> Result<Vec<u8>, NodeError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.collect(rel, Some((0, Some(max - 1))), max).await
    }

    /// The last `max` bytes of the file `rel` (none if there is no such file): a task's log
    /// may be any size.
    pub async fn tail(&self, rel: &Path, max: u64) -> Result<Vec<u8>, NodeError> {
        let Some(info) = self.stat(rel).await? else {
            return Ok(Vec::new());
        };
        let range = Some((info.len.saturating_sub(max), None));
        self.collect(rel, range, max).await
    }

    /// At most `max` bytes of the `range` of the file `rel`.
    async fn collect(
        &self,
        rel: &Path,
        range: Option<(u64, Option<u64>)>,
        max: u64,
    ) -> Result<Vec<u8>, NodeError> {
        use futures_util::StreamExt;
        let mut out = Vec::new();
        if let Some(FileAnswer::Data { mut bytes, .. }) =
            self.ask(rel, FileOp::Read { range }).await?
        {
            while let Some(chunk) = bytes.next().await {
                out.extend_from_slice(&chunk.map_err(|e| self.failed(rel, e))?);
                if out.len() as u64 >= max {
                    break;
                }
            }
        }
        out.truncate(max as usize);
        Ok(out)
    }

    /// The answer to `op` about `rel`; None if nothing is there.
    async fn ask(&self, rel: &Path, op: FileOp) -> Result<Option<FileAnswer>, NodeError> {
        let at = self.dirs.host.join(rel);
        let answer = self.runtime.file(self.node, &at, op).await?;
        match answer {
            FileAnswer::Refused {
                error: FileError::NotFound,
                ..
            } => Ok(None),
            FileAnswer::Refused { message, .. } => Err(self.failed(rel, message)),
            answer => Ok(Some(answer)),
        }
    }

    fn failed(&self, rel: &Path, why: impl std::fmt::Display) -> NodeError {
        NodeError {
            code: "FileReadFailed",
            message: format!("{}/{}: {why}", self.dirs.node, rel.display()),
        }
    }
}
