//! Questions about a node's files (`Work::File`), asked through the agent's work like any work
//! and answered on the replies route: a head line, then a listing or a file's bytes, streamed
//! from the agent's request to whoever asked, so a large file costs no memory here.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, BoxStream, StreamExt};
use tokio::sync::oneshot;

use super::{Agents, Link};
use crate::domain::agent::{FileError, FileInfo, FileOp, ReplyHead, Work, MAX_HEAD, MAX_LISTING};
use crate::runtime::NodeError;

/// Bytes as they arrive.
pub type ByteStream = BoxStream<'static, std::io::Result<Bytes>>;

/// Why an answer will not come: its node's agent is gone.
const GONE: &str = "went away (the node restarted or was removed)";

/// How long a node's agent may take to start answering a question about its files.
pub const FILE_ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// The most bytes of one listing line (a FileInfo whose name is at most a path's 4096 bytes).
const MAX_LINE: usize = 8 * 1024;
/// The most bytes of one listing.
const MAX_LISTING_BYTES: usize = 64 << 20;

/// An answer to a question about a node's files.
pub enum FileAnswer {
    Info(FileInfo),
    Listing(Vec<FileInfo>),
    /// `count` bytes from `start` follow in `bytes`.
    Data {
        info: FileInfo,
        start: u64,
        count: u64,
        bytes: ByteStream,
    },
    /// The file's bytes from `start`, as they are written, until the attempt that writes it
    /// ends (the stream's end).
    Stream {
        info: FileInfo,
        start: u64,
        bytes: ByteStream,
    },
    Refused {
        error: FileError,
        message: String,
    },
}

/// A reply's body, from the replies route to whoever asked. The route's request lasts until
/// `done` goes (the body read, or let go).
pub struct ReplyBody {
    pub stream: ByteStream,
    pub done: oneshot::Sender<()>,
}

/// Forgets a question nobody waits for any more (answered, timed out, or its asker gone).
struct Waiting<'a> {
    link: &'a Link,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.link.state.lock().expect("lock");
        // Not yet taken by the agent, it is never sent: a removal given up on here must not
        // happen later, once the caller has moved on.
        state.queue.retain(|w| w.id() != self.id);
        state.replies.remove(&self.id);
        state.bodies.remove(&self.id);
    }
}

fn unreachable(node: &str, why: impl std::fmt::Display) -> NodeError {
    NodeError {
        code: crate::runtime::AGENT_UNREACHABLE,
        message: format!("node {node}'s agent {why}"),
    }
}

impl Agents {
    /// Asks the node's agent `op` about `rel` below `root` (as the node sees them).
    pub async fn file(
        &self,
        node: &str,
        root: String,
        rel: String,
        op: FileOp,
    ) -> Result<FileAnswer, NodeError> {
        let (link, id) = self.connected(node)?;
        let (tx, rx) = oneshot::channel();
        let deadline = tokio::time::Instant::now() + FILE_ANSWER_TIMEOUT;
        {
            let mut state = link.state.lock().expect("lock");
            state.replies.insert(id, tx);
            let give_up = Some(deadline.into_std());
            state.queue.push(Work::file(id, (root, rel), op, give_up));
        }
        link.work.notify_one();
        let waiting = Waiting { link: &link, id };
        let body = tokio::time::timeout_at(deadline, rx)
            .await
            .map_err(|_| {
                let secs = FILE_ANSWER_TIMEOUT.as_secs();
                unreachable(node, format!("did not answer within {secs} s"))
            })?
            .map_err(|_| unreachable(node, GONE))?;
        drop(waiting);
        body.answer(deadline, node).await
    }
}

impl Agents {
    /// The node's link, and an id for a question to its agent.
    fn connected(&self, node: &str) -> Result<(Arc<Link>, u64), NodeError> {
        let link = self
            .link(node)
            .ok_or_else(|| unreachable(node, "is not connected to this server"))?;
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok((link, id))
    }
}

impl ReplyBody {
    /// The answer as it streams in; the route's request ends as the rest is let go.
    async fn answer(
        self,
        deadline: tokio::time::Instant,
        node: &str,
    ) -> Result<FileAnswer, NodeError> {
        let ReplyBody { stream, done } = self;
        let stream = stream
            .map(move |chunk| {
                let _ = &done;
                chunk
            })
            .boxed();
        decode(stream, deadline, node).await
    }
}

impl Agents {
    /// Has the node's agent write `rel` below `root` (as the node sees them) anew from `bytes`,
    /// with `mode` if given; what the file is once written. The agent fetches the bytes from
    /// the bodies route, for as long as they keep coming: it is given up on after
    /// [`FILE_ANSWER_TIMEOUT`] without progress (not taken, stalled, or no answer once sent).
    pub async fn write(
        &self,
        node: &str,
        (root, rel): (String, String),
        bytes: ByteStream,
        mode: Option<u32>,
    ) -> Result<FileInfo, NodeError> {
        let (link, id) = self.connected(node)?;
        let flow = Arc::new(Mutex::new(Flow {
            moved: tokio::time::Instant::now(),
            awaits_source: false,
        }));
        let body = watched(bytes, Arc::clone(&flow));
        let (tx, mut rx) = oneshot::channel();
        {
            let mut state = link.state.lock().expect("lock");
            state.replies.insert(id, tx);
            state.bodies.insert(id, body);
            // No time limit as a whole: it is given up on once no bytes move for a while.
            let op = FileOp::Write { mode };
            state.queue.push(Work::file(id, (root, rel), op, None));
        }
        link.work.notify_one();
        let waiting = Waiting { link: &link, id };
        let body = loop {
            let Flow {
                moved,
                awaits_source,
            } = *flow.lock().expect("lock");
            let left = FILE_ANSWER_TIMEOUT.checked_sub(moved.elapsed());
            let Some(left) = left.filter(|left| !left.is_zero()) else {
                let secs = FILE_ANSWER_TIMEOUT.as_secs();
                // The agent waits for bytes that do not come: the source's fault, not the node's.
                if awaits_source {
                    return Err(NodeError {
                        code: "FileWriteFailed",
                        message: format!(
                            "node {node}: the file's source sent nothing for {secs} s"
                        ),
                    });
                }
                return Err(unreachable(
                    node,
                    format!("made no progress writing a file for {secs} s"),
                ));
            };
            match tokio::time::timeout(left, &mut rx).await {
                Ok(Ok(body)) => break body,
                Ok(Err(_)) => return Err(unreachable(node, GONE)),
                Err(_) => continue,
            }
        };
        drop(waiting);
        let deadline = tokio::time::Instant::now() + FILE_ANSWER_TIMEOUT;
        match body.answer(deadline, node).await? {
            FileAnswer::Info(info) => Ok(info),
            FileAnswer::Refused { message, .. } => Err(NodeError {
                code: "FileWriteFailed",
                message: format!("node {node}: {message}"),
            }),
            _ => Err(unreachable(node, "answered a write with something else")),
        }
    }
}

/// How the bytes of a write move to the agent: when they last moved, and whether the agent is
/// waiting on their source (else the source waits on the agent, or nothing was asked yet).
#[derive(Clone, Copy)]
struct Flow {
    moved: tokio::time::Instant,
    awaits_source: bool,
}

/// `bytes`, keeping `flow` as they are asked for and come.
fn watched(mut bytes: ByteStream, flow: Arc<Mutex<Flow>>) -> ByteStream {
    stream::poll_fn(move |cx| {
        flow.lock().expect("lock").awaits_source = true;
        let polled = bytes.poll_next_unpin(cx);
        if polled.is_ready() {
            *flow.lock().expect("lock") = Flow {
                moved: tokio::time::Instant::now(),
                awaits_source: false,
            };
        }
        polled
    })
    .boxed()
}

/// An answer as it streams in (from an agent, or from another server): its head line, then what
/// the head announces; the head must come by `deadline`.
pub async fn decode(
    mut stream: ByteStream,
    deadline: tokio::time::Instant,
    node: &str,
) -> Result<FileAnswer, NodeError> {
    let late = || {
        let secs = FILE_ANSWER_TIMEOUT.as_secs();
        unreachable(node, format!("did not answer within {secs} s"))
    };
    let (head, first) = tokio::time::timeout_at(deadline, read_head(&mut stream))
        .await
        .map_err(|_| late())?
        .map_err(|e| unreachable(node, format!("answered badly: {e}")))?;
    let rest = stream::iter((!first.is_empty()).then_some(Ok(first)))
        .chain(stream)
        .boxed();
    Ok(match head {
        ReplyHead::Info { info } => FileAnswer::Info(info),
        ReplyHead::Error { error, message } => FileAnswer::Refused { error, message },
        ReplyHead::Data { info, start, count } => FileAnswer::Data {
            info,
            start,
            count,
            bytes: rest,
        },
        ReplyHead::Stream { info, start } => FileAnswer::Stream {
            info,
            start,
            bytes: rest,
        },
        ReplyHead::Listing { count } => {
            let read = tokio::time::timeout(FILE_ANSWER_TIMEOUT, read_listing(rest, count));
            let listing = read.await.map_err(|_| late())?;
            FileAnswer::Listing(
                listing.map_err(|e| unreachable(node, format!("answered badly: {e}")))?,
            )
        }
    })
}

/// An answer as a stream, as an agent sends it: its head line, then a listing's lines or a
/// file's bytes.
pub fn encode(answer: FileAnswer) -> ByteStream {
    let (head, rest): (ReplyHead, ByteStream) = match answer {
        FileAnswer::Info(info) => (ReplyHead::Info { info }, stream::empty().boxed()),
        FileAnswer::Refused { error, message } => {
            (ReplyHead::Error { error, message }, stream::empty().boxed())
        }
        FileAnswer::Listing(infos) => {
            let mut lines = Vec::new();
            for info in &infos {
                serde_json::to_writer(&mut lines, info).unwrap_or_default();
                lines.push(b'\n');
            }
            let count = infos.len();
            let lines = stream::once(async move { Ok(Bytes::from(lines)) }).boxed();
            (ReplyHead::Listing { count }, lines)
        }
        FileAnswer::Data {
            info,
            start,
            count,
            bytes,
        } => (ReplyHead::Data { info, start, count }, bytes),
        FileAnswer::Stream { info, start, bytes } => (ReplyHead::Stream { info, start }, bytes),
    };
    let mut line = serde_json::to_vec(&head).unwrap_or_default();
    line.push(b'\n');
    stream::once(async move { Ok(Bytes::from(line)) })
        .chain(rest)
        .boxed()
}

impl Link {
    /// Who waits for the answer `id`, if anyone still does.
    pub fn take_reply(&self, id: u64) -> Option<oneshot::Sender<ReplyBody>> {
        self.state.lock().expect("lock").replies.remove(&id)
    }

    /// The bytes a write (`FileOp::Write`) of this node's agent writes: handed out once.
    pub fn take_body(&self, id: u64) -> Option<ByteStream> {
        self.state.lock().expect("lock").bodies.remove(&id)
    }
}

/// The head line, and what came after it in the same chunk.
async fn read_head(stream: &mut ByteStream) -> anyhow::Result<(ReplyHead, Bytes)> {
    let mut buf = BytesMut::new();
    loop {
        if let Some(at) = buf.iter().position(|b| *b == b'\n') {
            let line = buf.split_to(at + 1);
            let head = serde_json::from_slice(&line[..at])?;
            return Ok((head, buf.freeze()));
        }
        anyhow::ensure!(buf.len() <= MAX_HEAD, "a head line over {MAX_HEAD} bytes");
        match stream.next().await {
            Some(chunk) => buf.extend_from_slice(&chunk?),
            None => anyhow::bail!("the answer ended before its head did"),
        }
    }
}

/// `count` lines of a listing, each a FileInfo; no more bytes than that many lines may take.
async fn read_listing(mut stream: ByteStream, count: usize) -> anyhow::Result<Vec<FileInfo>> {
    anyhow::ensure!(count <= MAX_LISTING, "a listing of {count} entries");
    let most = count.saturating_mul(MAX_LINE).min(MAX_LISTING_BYTES);
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk?);
        anyhow::ensure!(buf.len() <= most, "a listing longer than its {count} lines");
    }
    let infos = buf
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(serde_json::from_slice)
        .collect::<Result<Vec<FileInfo>, _>>()?;
    anyhow::ensure!(infos.len() == count, "{} lines, not {count}", infos.len());
    Ok(infos)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::StreamExt;

    use super::{Agents, ByteStream};
    use crate::domain::agent::{Hello, Work};
    use crate::runtime::AGENT_UNREACHABLE;

    fn hello() -> Hello {
        Hello {
            boot: "b".into(),
            got: None,
            users: true,
            follows: true,
        }
    }

    /// Node `n`'s agents, with a write to it from `bytes` begun in the background.
    fn writing(bytes: ByteStream) -> (Arc<Agents>, tokio::task::JoinHandle<super::NodeError>) {
        let agents = Arc::new(Agents::new(None, 0, std::time::Duration::from_secs(60)));
        agents.register("n", "s");
        let asking = agents.clone();
        let write = tokio::spawn(async move {
            let to = ("/root".to_string(), "f".to_string());
            asking.write("n", to, bytes, None).await.unwrap_err()
        });
        (agents, write)
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_whose_source_sends_nothing_fails_as_the_file_s_not_the_node_s() {
        let (agents, write) = writing(futures_util::stream::pending().boxed());
        let link = agents.authenticate("n", "s").unwrap();
        let taken = link.take_work(&hello()).await;
        let [Work::File { id, .. }] = taken.work.as_slice() else {
            panic!("{:?}", taken.work)
        };
        // The agent reads the body, which never comes; all the while it is heard from.
        let mut body = link.take_body(*id).expect("the write's bytes");
        let read = tokio::spawn(async move { body.next().await.is_none() });
        let failed = write.await.unwrap();
        assert_eq!(failed.code, "FileWriteFailed", "{failed:?}");
        assert!(failed.message.contains("source sent nothing"), "{failed:?}");
        read.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_agent_never_takes_fails_as_the_node_s() {
        let bytes = futures_util::stream::iter([Ok(bytes::Bytes::from_static(b"x"))]).boxed();
        let (_agents, write) = writing(bytes);
        let failed = write.await.unwrap();
        assert_eq!(failed.code, AGENT_UNREACHABLE, "{failed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_whose_bytes_the_agent_stops_reading_fails_as_the_node_s() {
        let chunks = (0..3).map(|_| Ok(bytes::Bytes::from_static(b"chunk")));
        let (agents, write) = writing(futures_util::stream::iter(chunks).boxed());
        let link = agents.authenticate("n", "s").unwrap();
        let taken = link.take_work(&hello()).await;
        let [Work::File { id, .. }] = taken.work.as_slice() else {
            panic!("{:?}", taken.work)
        };
        // One chunk read, then the agent freezes: the source waits on it.
        let mut body = link.take_body(*id).expect("the write's bytes");
        assert!(body.next().await.is_some());
        let failed = write.await.unwrap();
        assert_eq!(failed.code, AGENT_UNREACHABLE, "{failed:?}");
        drop(body);
    }
}
