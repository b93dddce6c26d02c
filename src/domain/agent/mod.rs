//! What a node's agent and the server say to each other (`batchpool agent`, docs/nodes.md "The
//! node agent"). The agent connects out to the server over HTTP and authenticates as its node
//! with a secret of that node alone: `Authorization: BatchpoolNode {node}:{secret}`. Two loops,
//! each on a keep-alive connection of its own:
//!
//! - `POST /agent/v1/work`, body [`Hello`]: the server answers with every piece of [`Work`] it
//!   holds for the node, or holds the request until it has some (at most [`POLL_HOLD_SECS`]), so
//!   work reaches the node as soon as there is any, in batches. Each request says which batch
//!   came last, so a batch lost on the way is sent again; a newer request supersedes a held one.
//! - `POST /agent/v1/events`, body [`Events`]: what happened since the last batch (a command
//!   started, ended, or could not start). Events that fail to arrive are sent again.
//! - `POST /agent/v1/replies/{id}`: the answer to a [`Work::File`], streamed: one line of
//!   [`ReplyHead`] (JSON), then what it announces (a listing's lines, a file's bytes).
//! - `GET /agent/v1/bodies/{id}`: the bytes a [`FileOp::Write`] writes, streamed; each body is
//!   handed out once, to the agent of the node it is for.

use serde::{Deserialize, Serialize};

mod files;

pub use files::{record_says_over, resolve_range, FileError, FileInfo, FileOp, ReplyHead};

pub const WORK_PATH: &str = "/agent/v1/work";
pub const EVENTS_PATH: &str = "/agent/v1/events";
/// Followed by `/{id}` of the [`Work::File`] answered.
pub const REPLIES_PATH: &str = "/agent/v1/replies";
/// Followed by `/{id}` of a [`FileOp::Write`]: the bytes to write, fetched by the agent.
pub const BODIES_PATH: &str = "/agent/v1/bodies";
/// The scheme of the agent's `Authorization` header.
pub const AUTH_SCHEME: &str = "BatchpoolNode";
/// How long the server holds a work request that finds nothing to do.
pub const POLL_HOLD_SECS: u64 = 20;
/// The most events or pieces of work in one message.
pub const MAX_BATCH: usize = 1024;
/// The most entries one listing holds; a longer one is refused, not cut short.
pub const MAX_LISTING: usize = 100_000;
/// The most bytes of a reply's head line.
pub const MAX_HEAD: usize = 64 * 1024;

/// Names beside a node's or task's files that are the server's own (an attempt's records):
/// never listed or served.
pub const PRIVATE_PREFIX: &str = ".batchpool";

pub fn is_private(name: &str) -> bool {
    name.starts_with(PRIVATE_PREFIX)
}

/// The agent's environment: where the server is, which node it is, and its secret.
pub const ENV_URL: &str = "BATCHPOOL_AGENT_URL";
pub const ENV_NODE: &str = "BATCHPOOL_AGENT_NODE";
pub const ENV_SECRET: &str = "BATCHPOOL_AGENT_SECRET";
/// Set for agents outside a container (local nodes): the node's directory, whose removal ends
/// the agent and what it runs, as removing a container would.
pub const ENV_ROOT: &str = "BATCHPOOL_AGENT_ROOT";
/// Directories the agent makes as it starts, before it asks for work: a base directory, then
/// directories below it, `:` between them (a Docker node's root, and its first directories).
pub const ENV_DIRS: &str = "BATCHPOOL_AGENT_DIRS";

/// Who asks for work: `boot` is new each time the agent starts, so the server knows when an
/// agent restarted (with its node) and what it ran is gone. `got` is the last batch it received:
/// a batch the server sent that is not `got` never arrived, and its work is sent again.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Hello {
    pub boot: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub got: Option<u64>,
    /// It starts a task as its launch's user ([`TaskLaunch::user`]); older agents say nothing.
    #[serde(default)]
    pub users: bool,
    /// It answers [`FileOp::Follow`]; older agents say nothing.
    #[serde(default)]
    pub follows: bool,
}

/// Work for the agent; `batch` names it (none if no work), for the next `Hello`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkBatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    pub work: Vec<Work>,
    /// The installation's servers, as the leader knows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<super::endpoint::Endpoint>,
    /// The leader's term (its epoch) that hands the work out. Commands an agent holds for a
    /// slot to free ([`Slots`]) were placed in the term that sent them: an agent that hears of
    /// another drops them before it does any of its work, so the new leader, finding no record
    /// of them, requeues them, and they never run twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<i64>,
}

/// Something for the agent to do; `id` names it in the events that answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Work {
    /// Start `argv` (in a process group of its own, with the agent's environment and `env`),
    /// and say when it started and how it ended.
    Run {
        id: u64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        /// A task's launch: where it runs, where its output goes, where its record is kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<TaskLaunch>,
    },
    /// Kill the process group `pid` (SIGKILL); answered with whether there was one. With a `boot`,
    /// only if the agent's is that one: a pid from before its node restarted is another's now.
    Kill {
        id: u64,
        pid: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boot: Option<String>,
    },
    /// Drop the command `run` if it has not started (it waits for a slot, [`Slots`]): it is
    /// answered with [`Event::Failed`], under its own id. One that started is left to a `Kill`.
    Drop { id: u64, run: u64 },
    /// Answer whether the process `pid` is alive (with a `boot`, as for `Kill`).
    Alive {
        id: u64,
        pid: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boot: Option<String>,
    },
    /// Answer `op` about `rel` below the directory `root` (a node's root, its workitems), on
    /// the replies route. No link is followed on the way or at the end: what a task linked can
    /// only ever be its node's.
    File {
        id: u64,
        root: String,
        rel: String,
        op: FileOp,
        /// Begun only within this many ms of the agent taking it, a removal stopped there: the
        /// server gives up soon after, and that must not happen later. None: no limit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        within_ms: Option<u64>,
        /// When the server gives up on the answer (it sets `within_ms` as it goes); never sent.
        #[serde(skip)]
        give_up: Option<std::time::Instant>,
    },
}

impl Work {
    pub fn id(&self) -> u64 {
        match self {
            Work::Run { id, .. }
            | Work::Kill { id, .. }
            | Work::Alive { id, .. }
            | Work::Drop { id, .. }
            | Work::File { id, .. } => *id,
        }
    }

    /// A question about files, which the server gives up on at `give_up` (None: never as a
    /// whole); its `within_ms` is set as it goes out.
    pub fn file(
        id: u64,
        (root, rel): (String, String),
        op: FileOp,
        give_up: Option<std::time::Instant>,
    ) -> Self {
        Work::File {
            id,
            root,
            rel,
            op,
            within_ms: None,
            give_up,
        }
    }
}

/// How the agent launches a task's command, as Azure Batch does: `/bin/sh -c` in the task's
/// working directory, stdout and stderr into `stdout.txt` and `stderr.txt`, stdin empty. It keeps
/// the attempt's record (its pid and boot, once it runs; its exit code, once it ended).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskLaunch {
    pub dir: String,
    pub stdout: String,
    pub stderr: String,
    pub record: String,
    /// The directories the agent makes first, so that the server, on the hot path, makes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub make: Option<MakeDirs>,
    /// The non-administrator it runs as (its directory made its own first); root if None.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::domain::run_as::TaskUser>,
    /// The task's slots on its node: the agent starts it once they are free, in the order its
    /// tasks came. None: at once (a start task, a job preparation task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<Slots>,
}

/// A task's slots, of its node's: the server may place single-slot tasks on a node beyond its
/// slots (`--tasks-ahead-per-slot`), and the node's agent holds them until slots free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    pub needs: u32,
    pub of: u32,
}

/// Directories to make below `base` (a directory the server made: a node's root, an account's
/// workitems), following no link: what `remove` names goes, if it is there (not behind a
/// link), then each of `dirs` is made with its parents (a link in the way is replaced). Every
/// path is relative and plain (no `..`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MakeDirs {
    pub base: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    pub dirs: Vec<String>,
}

/// What happened on the node since the last batch; with `load`, what its commands use now
/// (sent every [`LOAD_PERIOD_SECS`], alone or with events).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Events {
    pub boot: String,
    pub events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
}

/// A node's load between its last two reports: the CPU time its commands used in the
/// `window_ms` between them, and their memory at the last.
#[derive(Clone, Debug)]
pub struct NodeLoad {
    pub node: String,
    pub busy_ms: f64,
    pub window_ms: f64,
    pub memory_bytes: f64,
}

/// How often an agent reports its node's load.
pub const LOAD_PERIOD_SECS: u64 = 5;

/// What the commands the agent started use: `cpu_ms`, the CPU time (user and kernel) they
/// have used since the agent started, ended ones included (the server takes the difference
/// between two reports); `memory_bytes`, the memory (resident set) of those running now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Load {
    pub cpu_ms: u64,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Event {
    /// The command runs, as process (group) `pid` on the node.
    Started { id: u64, pid: i32 },
    /// The command ended with `code` (128 + the signal, if a signal ended it).
    Exited {
        id: u64,
        code: i64,
        /// What the command used, where the agent measured it (it started the command).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// A task's stdout.txt and stderr.txt as it left them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<ExitOutput>,
    },
    /// The command could not start.
    Failed { id: u64, message: String },
    /// The answer to a `kill` or `alive`.
    Answered { id: u64, yes: bool },
}

/// A task's `stdout.txt` and `stderr.txt` as its command left them, sent with its `Exited`, so
/// that the server keeps a copy without asking the node again (docs/data.md, "Output that
/// outlives its node").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitOutput {
    pub stdout: Captured,
    pub stderr: Captured,
}

/// A file's length, and its bytes (base64) if it is at most [`INLINE_OUTPUT`] long.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Captured {
    pub len: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

/// The longest output an agent sends with `Exited`; the server reads a longer one's first and
/// last parts from the node.
pub const INLINE_OUTPUT: u64 = 16 * 1024;

impl Captured {
    pub fn of(bytes: &[u8]) -> Self {
        use base64::Engine;
        Self {
            len: bytes.len() as u64,
            base64: (bytes.len() as u64 <= INLINE_OUTPUT)
                .then(|| base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }

    /// Its bytes, if they came with it (and are what they claim to be).
    pub fn bytes(&self) -> Option<Vec<u8>> {
        use base64::Engine;
        let text = self.base64.as_deref()?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()?;
        (bytes.len() as u64 == self.len).then_some(bytes)
    }
}

/// What a command and the children it waited for used, as `getrusage(2)` counts it: CPU time
/// in user and kernel mode, and the bytes it read from and wrote to storage (not the page cache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub user_ms: u64,
    pub kernel_ms: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl Event {
    pub fn id(&self) -> u64 {
        match self {
            Event::Started { id, .. }
            | Event::Exited { id, .. }
            | Event::Failed { id, .. }
            | Event::Answered { id, .. } => *id,
        }
    }
}

/// Where servers that do not lead ask the leader about its nodes' files, with
/// `Authorization: BatchpoolPeer {the installation's peer secret}`; answered as an agent answers
/// a [`Work::File`] (a [`ReplyHead`] line, then what it announces).
pub const PEER_FILES_PATH: &str = "/agent/v1/peer/files";
pub const PEER_AUTH_SCHEME: &str = "BatchpoolPeer";

/// A question about files, from one server to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerFile {
    /// The node the files are on.
    pub node: String,
    /// The path below the node's root.
    pub rel: String,
    pub op: FileOp,
}

/// The `Authorization` header's value for `node`.
pub fn authorization(node: &str, secret: &str) -> String {
    format!("{AUTH_SCHEME} {node}:{secret}")
}

/// The node and secret an `Authorization` header names, if it is the agent's scheme.
pub fn parse_authorization(value: &str) -> Option<(&str, &str)> {
    let rest = value.strip_prefix(AUTH_SCHEME)?.strip_prefix(' ')?;
    let (node, secret) = rest.split_once(':')?;
    (!node.is_empty() && !secret.is_empty()).then_some((node, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authorization_header_names_node_and_secret() {
        let value = authorization("tvmps_1", "s3cret");
        assert_eq!(parse_authorization(&value), Some(("tvmps_1", "s3cret")));
        assert_eq!(parse_authorization("SharedKey a:b"), None);
        assert_eq!(parse_authorization("BatchpoolNode :b"), None);
        assert_eq!(parse_authorization("BatchpoolNode a:"), None);
        assert_eq!(parse_authorization("BatchpoolNode ab"), None);
    }

    #[test]
    fn work_and_events_read_as_they_are_written() {
        let work = Work::Run {
            id: 7,
            argv: vec!["/bin/sh".into(), "-c".into(), "true".into()],
            env: vec![("A".into(), "b".into())],
            task: None,
        };
        let text = serde_json::to_string(&work).unwrap();
        assert!(text.contains(r#""kind":"run""#), "{text}");
        assert_eq!(serde_json::from_str::<Work>(&text).unwrap(), work);
        // From a server that knew no boots: the question is about any process `pid`.
        let alive: Work = serde_json::from_str(r#"{"kind":"alive","id":1,"pid":5}"#).unwrap();
        let boot = None;
        assert_eq!(
            alive,
            Work::Alive {
                id: 1,
                pid: 5,
                boot
            }
        );
        let event: Event = serde_json::from_str(r#"{"kind":"exited","id":7,"code":137}"#).unwrap();
        // An agent from before usage was measured, or output sent, is still understood.
        let (usage, output) = (None, None);
        assert_eq!(
            event,
            Event::Exited {
                id: 7,
                code: 137,
                usage,
                output
            }
        );
        assert_eq!(event.id(), 7);
    }

    #[test]
    fn ranges_resolve_within_the_file() {
        assert_eq!(resolve_range(None, 10), Some((0, 10)));
        assert_eq!(resolve_range(Some((2, Some(4))), 10), Some((2, 3)));
        assert_eq!(resolve_range(Some((2, None)), 10), Some((2, 8)));
        assert_eq!(resolve_range(Some((8, Some(100))), 10), Some((8, 2)));
        assert_eq!(resolve_range(Some((10, None)), 10), None);
        assert_eq!(resolve_range(Some((5, Some(4))), 10), None);
        assert_eq!(resolve_range(Some((0, None)), 0), Some((0, 0)));
        assert_eq!(resolve_range(Some((5, None)), 0), None);
    }

    #[test]
    fn a_file_question_and_its_answer_read_as_written() {
        let work = Work::File {
            id: 3,
            root: "/mnt/batch/tasks".into(),
            rel: "shared/x".into(),
            op: FileOp::Read {
                range: Some((1, None)),
            },
            within_ms: Some(9000),
            give_up: None,
        };
        let text = serde_json::to_string(&work).unwrap();
        assert_eq!(serde_json::from_str::<Work>(&text).unwrap(), work);
        let head = ReplyHead::Error {
            error: FileError::BadRange { len: 4 },
            message: "no".into(),
        };
        let text = serde_json::to_string(&head).unwrap();
        assert!(!text.contains('\n'));
        assert_eq!(serde_json::from_str::<ReplyHead>(&text).unwrap(), head);
    }
}
