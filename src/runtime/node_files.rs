//! A node's and its tasks' files, for the files API: asked of the node's agent, which reads them
//! from inside the node (so a link a task made can only ever lead inside it). Only a node with
//! no agent connected to this server has its files read from this host's disk, through the same
//! rules; a node that is gone has none.

use futures_util::stream::StreamExt;

use super::agents::{ByteStream, FileAnswer};
use super::safe_fs::Below;
use super::task::{parse_record, Record, TaskDirs, RECORD_MAX};
use super::{NodeError, Runtime};
use crate::domain::agent::{FileError, FileOp, ReplyHead};
use crate::sys::file_answer::{self, Payload};

impl Runtime {
    /// Answers `op` about `at` (a path on this host below a node's root) from the agent of
    /// `node`, the node the files are on; from this host's disk if the node is gone (None) or
    /// its agent is not connected to this server.
    pub async fn file(
        &self,
        node: Option<&str>,
        at: &Below,
        op: FileOp,
    ) -> Result<FileAnswer, NodeError> {
        if let Some(node) = node {
            // After a restart, a node's agent is known again by the secret the node was made
            // with, whether or not it has come back yet.
            self.learn_agent(node).await;
        }
        if let Some(node) = node.filter(|n| self.agents.knows(n)) {
            if let Some(root) = self.in_node(node, at) {
                if matches!(op, FileOp::Follow { .. }) && !self.agents.follows(node) {
                    return Ok(FileAnswer::Refused {
                        error: FileError::Unsupported,
                        message: format!(
                            "node {node}'s agent is of a build that does not follow files"
                        ),
                    });
                }
                let rel = at.rel.to_string_lossy().into_owned();
                return self.agents.file(node, root, rel, op).await;
            }
        }
        Ok(from_disk(at, op).await)
    }

    /// The attempt's record (its process, its exit code once written), as the node's agent reads
    /// it from inside the node; None if there is none. Read from this host's disk only for a node
    /// that runs no agent (a Docker node made before nodes had agents). After a restart the
    /// question waits for the agent to come back, up to [`FILE_ANSWER_TIMEOUT`]; an agent that
    /// does not is an error.
    ///
    /// [`FILE_ANSWER_TIMEOUT`]: super::agents::FILE_ANSWER_TIMEOUT
    pub async fn attempt_record(
        &self,
        node: &str,
        dirs: &TaskDirs,
        attempt: i32,
    ) -> Result<Option<Record>, NodeError> {
        match self.read_record(node, &dirs.record(attempt)).await? {
            None => self.read_record(node, &dirs.legacy_record(attempt)).await,
            found => Ok(found),
        }
    }

    /// The record at `at`, if there is one.
    async fn read_record(&self, node: &str, at: &Below) -> Result<Option<Record>, NodeError> {
        let read = FileOp::Read {
            range: Some((0, Some(RECORD_MAX as u64 - 1))),
        };
        match self.file(Some(node), at, read).await? {
            FileAnswer::Data { mut bytes, .. } => {
                let mut text = Vec::with_capacity(RECORD_MAX);
                while let Some(chunk) = bytes.next().await {
                    text.extend_from_slice(&chunk.map_err(|e| read_failed(node, e))?);
                    if text.len() >= RECORD_MAX {
                        break;
                    }
                }
                text.truncate(RECORD_MAX);
                Ok(Some(parse_record(&String::from_utf8_lossy(&text))))
            }
            FileAnswer::Refused {
                error: FileError::NotFound,
                ..
            } => Ok(None),
            FileAnswer::Refused { message, .. } => Err(read_failed(node, message)),
            FileAnswer::Info(_) | FileAnswer::Listing(_) | FileAnswer::Stream { .. } => {
                Err(read_failed(node, "not a file"))
            }
        }
    }

    /// Writes `at` (as for [`file`](Self::file)) anew from `bytes`, with `mode` if given: by
    /// the agent of `node`, inside the node; on this host's disk if the node is gone (None) or
    /// its agent is not connected to this server. Whole or not at all, and no link followed.
    pub async fn write_file(
        &self,
        node: Option<&str>,
        at: &Below,
        bytes: ByteStream,
        mode: Option<u32>,
    ) -> Result<(), NodeError> {
        if let Some(node) = node {
            // As for `file`: a node made before a restart has its agent known by its secret.
            self.learn_agent(node).await;
        }
        if let Some(node) = node.filter(|n| self.agents.knows(n)) {
            if let Some(root) = self.in_node(node, at) {
                let rel = at.rel.to_string_lossy().into_owned();
                return self
                    .agents
                    .write(node, (root, rel), bytes, mode)
                    .await
                    .map(|_| ());
            }
        }
        match crate::sys::file_write::write(&at.root, &at.rel, bytes, mode).await {
            Ok(_) => Ok(()),
            Err(e) => Err(NodeError {
                code: "FileWriteFailed",
                message: format!("writing {}: {e}", at.rel.display()),
            }),
        }
    }

    /// Learns the node's agent by the secret it was made with, unless known already (a node
    /// that runs none, or is gone, has none to learn). From then, its silence counts.
    pub async fn learn_agent(&self, node: &str) {
        let secret = self.node.agent_secret(&self.server_id, node);
        self.agents.learn(node, secret).await;
    }

    /// Each Docker host by its URL, and whether it answered when last pinged.
    pub fn hosts_answering(&self) -> Vec<(String, bool)> {
        self.node.hosts_answering()
    }

    /// How many nodes' agents this server knows.
    pub fn agents_known(&self) -> usize {
        self.agents.count()
    }

    /// Whether `node`'s agent is connected to this server, which then serves its files.
    pub fn serves(&self, node: &str) -> bool {
        self.agents.knows(node)
    }

    /// Whether `node`'s agent, asked since `asked`, may still answer: known, and neither silent
    /// nor asked for longer than `--agent-timeout`.
    pub fn agent_may_answer(&self, node: &str, asked: std::time::Instant) -> bool {
        self.agents.may_answer(node, asked)
    }

    /// The directory `at` lies below, as `node` sees it; None if it is not the node's root.
    fn in_node(&self, node: &str, at: &Below) -> Option<String> {
        (at.root == self.host_root(node)).then(|| self.node_root(node))
    }
}

async fn from_disk(at: &Below, op: FileOp) -> FileAnswer {
    let (root, rel) = (at.root.clone(), at.rel.clone());
    let answered =
        tokio::task::spawn_blocking(move || file_answer::answer(&root, &rel, op, None)).await;
    let (head, payload) = match answered {
        Ok(answer) => answer,
        Err(e) => {
            return FileAnswer::Refused {
                error: crate::domain::agent::FileError::Failed,
                message: e.to_string(),
            }
        }
    };
    match (head, payload) {
        (ReplyHead::Listing { .. }, Payload::Listing(infos)) => FileAnswer::Listing(infos),
        (ReplyHead::Data { info, start, count }, Payload::File(file)) => {
            use tokio::io::AsyncReadExt;
            let file = tokio::fs::File::from_std(file).take(count);
            let bytes: ByteStream =
                tokio_util::io::ReaderStream::with_capacity(file, file_answer::CHUNK).boxed();
            FileAnswer::Data {
                info,
                start,
                count,
                bytes,
            }
        }
        // No agent to say when the attempt ends: what is there now.
        (ReplyHead::Stream { info, start }, Payload::File(file)) => FileAnswer::Stream {
            info,
            start,
            bytes: tokio_util::io::ReaderStream::with_capacity(
                tokio::fs::File::from_std(file),
                file_answer::CHUNK,
            )
            .boxed(),
        },
        (ReplyHead::Info { info }, _) => FileAnswer::Info(info),
        (ReplyHead::Error { error, message }, _) => FileAnswer::Refused { error, message },
        (head, _) => FileAnswer::Refused {
            error: crate::domain::agent::FileError::Failed,
            message: format!("an answer without its payload: {head:?}"),
        },
    }
}

fn read_failed(node: &str, why: impl std::fmt::Display) -> NodeError {
    NodeError {
        code: "NodeAgentUnreachable",
        message: format!("node {node}'s agent could not read an attempt's record: {why}"),
    }
}
