//! The server's side of the node agents (`domain::agent`): each node's link, with the work
//! waiting for its agent and the commands it runs for this server. Commands are started by
//! [`Agents::run`], which waits for their end as `docker exec` did; the API's agent routes hand
//! work out and events in.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::{oneshot, Notify};

mod events;
mod lead;
mod load;
mod peers;
mod polls;
mod replies;
pub mod routes;
mod silence;

use super::NodeError;
use crate::domain::agent::Work;

pub use lead::Leading;
pub use peers::Peers;
pub use replies::{encode, ByteStream, FileAnswer, ReplyBody, FILE_ANSWER_TIMEOUT};
pub use silence::Silent;

/// How long a node's agent may take to answer a kill or a liveness question before the
/// runtime answers it another way (the engine, this host's processes) or takes it for no (an
/// agent reconnecting after a server restart takes up to 2 s).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The agents of this server's nodes, and how they reach it.
pub struct Agents {
    links: Mutex<HashMap<String, Arc<Link>>>,
    next_id: AtomicU64,
    /// How long a node's agent may go without reaching this server (`--agent-timeout`): a new
    /// node's first word waits this long, commands on a silent agent fail after it, and an
    /// agent silent for longer has lost its node ([`Agents::silent`]).
    silence: Duration,
    /// What agents connect to; None: the address of the node's network's gateway on this host.
    pub url: Option<String>,
    /// The port this server takes agents on (the URL's, unless `url` says otherwise).
    pub port: u16,
    /// Whether this server, leading, has learnt every running node's agent (see
    /// [`Agents::all_learnt`]).
    all_learnt: std::sync::atomic::AtomicBool,
    /// The leader's term this server leads in (0 before it first leads).
    term: std::sync::atomic::AtomicI64,
}

/// One node's agent, as this server knows it.
pub struct Link {
    /// SHA-256 of the node's secret.
    secret: [u8; 32],
    state: Mutex<LinkState>,
    /// Wakes the agent's waiting work request.
    work: Notify,
    /// Wakes those waiting for the agent's first word.
    heard: Notify,
    /// What the node's commands use, as its agent last said.
    load: Mutex<load::LoadWindow>,
}

struct LinkState {
    queue: Vec<Work>,
    /// The last batch of work handed out, until the agent says it got it.
    inflight: Option<(u64, Vec<Work>)>,
    /// The next batch's number: from a random start, so an agent's `got` from another server
    /// (or an earlier run of this one) never matches by chance.
    next_batch: u64,
    /// Work requests so far: only the latest may take work.
    polls: u64,
    runs: HashMap<u64, Run>,
    /// Those waiting for answers to file questions.
    replies: HashMap<u64, oneshot::Sender<ReplyBody>>,
    /// The bytes of writes, until the agent fetches them.
    bodies: HashMap<u64, ByteStream>,
    /// The agent's boot, once heard from: a new one means the node restarted.
    boot: Option<String>,
    last_seen: Instant,
    /// Whether the agent starts tasks as their users ([`Hello::users`]).
    users: bool,
    /// Whether the agent follows files ([`Hello::follows`]).
    follows: bool,
    /// The boot last handed the installation's servers, and the list's version it was handed.
    told: Option<(String, u64)>,
    /// When the agent last spoke (`last_seen` also restarts with a new leader's clocks).
    last_word: Option<Instant>,
    /// Commands given up on for the agent's silence that it may have taken: one that starts
    /// all the same is killed (events.rs).
    abandoned: HashSet<u64>,
}

/// What became of a piece of work: an exit code (or an answer), or why there is none.
type Reply = Result<i64, String>;

/// A command the agent runs for a caller of [`Agents::run`] (or a question for [`Agents::ask`]).
struct Run {
    started: Option<oneshot::Sender<i32>>,
    report: Option<oneshot::Sender<crate::runtime::ExitReport>>,
    ended: oneshot::Sender<Reply>,
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A new node secret: 256 random bits, hex.
pub fn new_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl Agents {
    pub fn new(url: Option<String>, port: u16, silence: Duration) -> Self {
        Self {
            links: Mutex::default(),
            // From a random start, as batches: an event a previous server's command sends
            // late (its id that server's) never passes for an answer to one of this one's.
            next_id: AtomicU64::new(uuid::Uuid::new_v4().as_u64_pair().0 >> 12 | 1),
            silence,
            url,
            port,
            all_learnt: std::sync::atomic::AtomicBool::new(false),
            term: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// Knows `node`'s agent by its secret (from now, or again after a restart). A node known
    /// already keeps its link, unless the secret changed.
    pub fn register(&self, node: &str, secret: &str) {
        let digest = digest(secret);
        let mut links = self.links.lock().expect("lock");
        if links.get(node).is_some_and(|l| l.secret == digest) {
            return;
        }
        let link = Link {
            secret: digest,
            state: Mutex::new(LinkState {
                queue: Vec::new(),
                inflight: None,
                next_batch: uuid::Uuid::new_v4().as_u64_pair().0 | 1,
                polls: 0,
                runs: HashMap::new(),
                replies: HashMap::new(),
                bodies: HashMap::new(),
                boot: None,
                last_seen: Instant::now(),
                users: false,
                follows: false,
                told: None,
                last_word: None,
                abandoned: HashSet::new(),
            }),
            work: Notify::new(),
            heard: Notify::new(),
            load: Mutex::default(),
        };
        if let Some(old) = links.insert(node.to_string(), Arc::new(link)) {
            old.fail_all("the node was made again");
        }
    }

    /// How long an agent may be silent before its node is lost (`--agent-timeout`).
    pub fn timeout(&self) -> Duration {
        self.silence
    }

    /// How many nodes' agents are known.
    pub fn count(&self) -> usize {
        self.links.lock().expect("lock").len()
    }

    pub fn knows(&self, node: &str) -> bool {
        self.links.lock().expect("lock").contains_key(node)
    }

    /// Whether `node`'s agent, asked a question since `asked` and not answering yet, may still
    /// answer: this server knows it, it has not been silent for longer than `--agent-timeout`
    /// (counted from its last word, or from when this server learnt of it or took the lead;
    /// past that its node is lost, [`Agents::silent`]), and it has not been asked for longer.
    pub fn may_answer(&self, node: &str, asked: Instant) -> bool {
        let link = self.links.lock().expect("lock").get(node).cloned();
        let waited = |since: Instant| since.elapsed() < self.silence;
        waited(asked) && link.is_some_and(|l| waited(l.state.lock().expect("lock").last_seen))
    }

    /// Whether `node` runs an agent this server knows: from now, or (after a restart) by the
    /// secret `secret` finds on the node itself, asked only if the agent is not known yet.
    pub async fn learn(
        &self,
        node: &str,
        secret: impl std::future::Future<Output = Option<String>>,
    ) -> bool {
        if self.knows(node) {
            return true;
        }
        match secret.await {
            Some(secret) => {
                self.register(node, &secret);
                true
            }
            None => false,
        }
    }

    /// Forgets the node: what waits on its agent fails.
    pub fn forget(&self, node: &str) {
        if let Some(link) = self.links.lock().expect("lock").remove(node) {
            link.fail_all("the node was removed");
        }
    }

    fn link(&self, node: &str) -> Option<Arc<Link>> {
        self.links.lock().expect("lock").get(node).cloned()
    }

    /// The node's link, if `secret` is its agent's.
    pub fn authenticate(&self, node: &str, secret: &str) -> Option<Arc<Link>> {
        let link = self.link(node)?;
        // Digests compared: how long it takes says nothing of the secret.
        (link.secret == digest(secret)).then_some(link)
    }

    /// Waits for a new node's agent to say hello, up to the agent timeout: a node whose agent
    /// cannot reach this server can run nothing. `advice` ends the error.
    pub async fn await_hello(&self, node: &str, advice: &str) -> Result<(), NodeError> {
        if self.wait_heard(node, self.silence).await {
            return Ok(());
        }
        Err(NodeError {
            code: crate::runtime::AGENT_UNREACHABLE,
            message: format!(
                "node {node}'s agent did not reach this server within {} s; {advice}",
                self.silence.as_secs()
            ),
        })
    }

    /// Whether the node's agent has spoken to this server since `at`.
    pub fn spoke_since(&self, node: &str, at: chrono::DateTime<chrono::Utc>) -> bool {
        self.link(node).is_some_and(|link| link.spoke_since(at))
    }

    /// Whether the node's agent starts a task as the user its launch names, once it is heard
    /// from (up to the agent timeout; None if it is not); an agent of an older build would
    /// start it as root.
    pub async fn starts_users(&self, node: &str) -> Option<bool> {
        if !self.wait_heard(node, self.silence).await {
            return None;
        }
        let link = self.link(node)?;
        let users = link.state.lock().expect("lock").users;
        Some(users)
    }

    /// Whether the node's agent follows files as they grow ([`FileOp::Follow`]), as it last
    /// said.
    ///
    /// [`FileOp::Follow`]: crate::domain::agent::FileOp::Follow
    pub fn follows(&self, node: &str) -> bool {
        self.link(node)
            .is_some_and(|link| link.state.lock().expect("lock").follows)
    }

    /// Waits until the node's agent has asked for work once, up to `timeout`.
    async fn wait_heard(&self, node: &str, timeout: Duration) -> bool {
        let Some(link) = self.link(node) else {
            return false;
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let heard = link.heard.notified();
            if link.state.lock().expect("lock").boot.is_some() {
                return true;
            }
            if tokio::time::timeout_at(deadline, heard).await.is_err() {
                return false;
            }
        }
    }

    /// Runs a command on the node through its agent (`make` it from its id) and waits for its
    /// exit code; `started` learns its pid as soon as it runs, and what it used before the exit
    /// code is returned.
    pub async fn run(
        &self,
        node: &str,
        make: impl FnOnce(u64) -> Work,
        started: crate::runtime::Started,
    ) -> anyhow::Result<i64> {
        // Without a stop, one that never fires.
        let stop = started.stop.clone().unwrap_or_default();
        let mut dropped = false;
        let (link, id, mut ended) = self.submit(node, make, started)?;
        loop {
            tokio::select! {
                () = stop.cancelled(), if !dropped => {
                    dropped = true;
                    self.drop_unstarted(&link, id);
                }
                result = &mut ended => {
                    let result = result.map_err(|_| "the node was forgotten".to_string());
                    return result.and_then(|r| r).map_err(|e| anyhow::anyhow!("node {node}: {e}"));
                }
                () = tokio::time::sleep(Duration::from_secs(5)) => {
                    let mut state = link.state.lock().expect("lock");
                    if state.last_seen.elapsed() > self.silence {
                        state.abandon(id);
                        anyhow::bail!(
                            "node {node}: its agent has not been heard from for {} s",
                            self.silence.as_secs()
                        );
                    }
                }
            }
        }
    }

    /// Has the node's agent drop the command `run` if it holds it still, waiting for a slot:
    /// its caller then learns that it failed. One that started is killed by its pid instead.
    fn drop_unstarted(&self, link: &Link, run: u64) {
        {
            let mut state = link.state.lock().expect("lock");
            let waiting = state.runs.get(&run).is_some_and(|r| r.started.is_some());
            if !waiting {
                return;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            state.queue.push(Work::Drop { id, run });
        }
        link.work.notify_one();
    }

    /// Queues work for the node's agent (`make` it from its id) and wakes the agent's request;
    /// the receiver learns how it ended.
    fn submit(
        &self,
        node: &str,
        make: impl FnOnce(u64) -> Work,
        started: crate::runtime::Started,
    ) -> anyhow::Result<(Arc<Link>, u64, oneshot::Receiver<Reply>)> {
        let link = self
            .link(node)
            .ok_or_else(|| anyhow::anyhow!("node {node} has no agent this server knows"))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, ended) = oneshot::channel();
        {
            let mut state = link.state.lock().expect("lock");
            let run = Run {
                started: started.pid,
                report: started.report,
                ended: tx,
            };
            state.runs.insert(id, run);
            state.queue.push(make(id));
        }
        link.work.notify_one();
        Ok((link, id, ended))
    }

    /// Asks the node's agent a question (`make` it from the question's id) and waits for the
    /// answer, up to `timeout`.
    pub async fn ask(
        &self,
        node: &str,
        make: impl FnOnce(u64) -> Work,
        timeout: Duration,
    ) -> anyhow::Result<bool> {
        let (link, id, ended) = self.submit(node, make, Default::default())?;
        let answer = tokio::time::timeout(timeout, ended).await;
        link.state.lock().expect("lock").runs.remove(&id);
        match answer {
            Ok(Ok(Ok(yes))) => Ok(yes != 0),
            Ok(Ok(Err(e))) => anyhow::bail!("node {node}: {e}"),
            Ok(Err(_)) => anyhow::bail!("node {node}: the node was forgotten"),
            Err(_) => anyhow::bail!("node {node}: its agent did not answer in {timeout:?}"),
        }
    }
}
