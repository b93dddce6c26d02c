//! `batchpool agent`: the node agent. It runs inside each node (a Docker node's main process),
//! connects out to the server that made the node, and starts the node's commands directly: no
//! `docker exec` per task. The protocol is `domain::agent`'s. It keeps running while the server
//! is away: commands go on, and their events wait until the server answers again, or until the
//! agent finds the server that leads now (`link`).

pub(crate) mod files;
mod follow;
pub(crate) mod gate;
pub(crate) mod link;
mod load;
mod output;
mod procs;
mod spawn;
mod tasks;
mod trash;
pub mod unzip;

use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;

use link::{Backoff, Failover, Link, NotLeading};

use crate::domain::agent::{
    self, Event, Events, FileOp, Hello, Work, WorkBatch, ENV_DIRS, ENV_NODE, ENV_ROOT, ENV_SECRET,
    ENV_URL, EVENTS_PATH, MAX_BATCH, POLL_HOLD_SECS, WORK_PATH,
};

/// How long a command's start may wait to be told with other events. Only a kill waits on it
/// (the server needs the pid), for at most this long.
const START_HOLD: Duration = Duration::from_millis(20);

pub async fn run() -> anyhow::Result<()> {
    let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
    let (url, node, secret) = (var(ENV_URL)?, var(ENV_NODE)?, var(ENV_SECRET)?);
    let client = || {
        let http = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
        if url.starts_with("http://") {
            // No TLS, so no certificates to load: node images need not have any.
            return http.tls_certs_only([]);
        }
        http
    };
    let http = client()
        .timeout(Duration::from_secs(POLL_HOLD_SECS + 15))
        .build()
        .context("making the HTTP client")?;
    let streams = client().build().context("making the HTTP client")?;
    let link = Link::new(&url, agent::authorization(&node, &secret), (http, streams));
    make_node_dirs();
    if let Some(root) = node_root() {
        // What the node's last agent had not removed yet.
        trash::empty(&root);
    }
    let procs = procs::Procs::start().context("starting the reaper")?;
    tracing::info!(node, server = %link.url(), "the node agent runs");
    let link = std::sync::Arc::new(link);
    let (events, outbox) = mpsc::unbounded_channel();
    tokio::spawn(send_events(link.clone(), outbox));
    tokio::spawn(load::report(link.clone(), procs.clone()));
    let node = tasks::Node {
        link,
        procs: procs.clone(),
        events,
        gate: Default::default(),
    };
    let work = take_work(node);
    let root = std::env::var_os(ENV_ROOT).map(std::path::PathBuf::from);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        () = work => {}
        () = node_removed(root) => tracing::info!("the node's directory is gone: the node agent stops"),
        _ = term.recv() => tracing::info!("stopped (SIGTERM): the node agent stops with what it runs"),
        _ = tokio::signal::ctrl_c() => {}
    }
    // The node is going away: what runs on it goes too.
    procs.kill_all();
    Ok(())
}

/// Makes the node's first directories ([`ENV_DIRS`]: the node's root, then the directories
/// below it), before the server can ask for anything in them. A link a task left in the way
/// (before a reboot) is replaced, never followed.
fn make_node_dirs() {
    let Ok(dirs) = std::env::var(ENV_DIRS) else {
        return;
    };
    let mut parts = dirs.split(':');
    let base = parts.next().unwrap_or_default().to_string();
    let make = agent::MakeDirs {
        base,
        remove: Vec::new(),
        dirs: parts.map(String::from).collect(),
    };
    if let Err(e) = files::make_dirs(&make) {
        tracing::warn!(error = %e, base = %make.base, "making the node's directories failed");
    }
    // Every task of the node reads and writes its shared directory, whoever it runs as.
    if make.dirs.iter().any(|d| d == SHARED_DIR) {
        let base = crate::sys::safe_fs::Dir::open_root_in_node(std::path::Path::new(&make.base));
        let shared = base.and_then(|b| b.open_dir(std::path::Path::new(SHARED_DIR)));
        if let Err(e) = shared.and_then(|d| d.set_mode(0o777)) {
            tracing::warn!(error = %e, "opening the node's shared directory to all failed");
        }
    }
}

/// The node's shared directory, below its root (`AZ_BATCH_NODE_SHARED_DIR`).
const SHARED_DIR: &str = "shared";

/// The node's root, as its first directories name it (a container), or as a local node's.
fn node_root() -> Option<std::path::PathBuf> {
    let dirs = std::env::var(ENV_DIRS).ok();
    let base = dirs.as_deref().and_then(|d| d.split(':').next());
    match base.filter(|b| !b.is_empty()) {
        Some(base) => Some(base.into()),
        None => std::env::var_os(ENV_ROOT).map(std::path::PathBuf::from),
    }
}

/// Ends once the node's directory is gone (local nodes only; never, for a container).
async fn node_removed(root: Option<std::path::PathBuf>) {
    let Some(root) = root else {
        return std::future::pending().await;
    };
    while root.is_dir() {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Asks the server for work, and starts what comes, until the leader has given the node up.
async fn take_work(node: tasks::Node) {
    let link = node.link.clone();
    // Before any of a new leader's work: it may ask for their records.
    let new_term = || node.forget_waiting();
    poll_work(&link, new_term, |work| start(&node, work)).await;
}

/// The agent's loop: asks the server at `link` for work (naming the batch it got last), hands
/// each piece to `take`, after `new_term` when a new leader's term begins; fails over to the next
/// server as [`Failover`] says, and returns once the leader has given the node up.
pub(crate) async fn poll_work(link: &Link, new_term: impl Fn(), mut take: impl FnMut(Work)) {
    let (mut backoff, mut failover) = (Backoff::default(), Failover::default());
    let mut hello = Hello {
        boot: link.boot.clone(),
        got: None,
        users: true,
        follows: true,
    };
    let mut term = None;
    loop {
        let batch: WorkBatch = match link.post(WORK_PATH, &hello).await {
            Ok(batch) => batch,
            Err(e) => {
                failover.failed(link, &e);
                if failover.given_up() {
                    tracing::warn!(
                        server = %link.url(),
                        "the leading server has known no node by this name and secret for {}s: \
                         the node was given up, and the node agent stops with what it runs",
                        link::GIVEN_UP_AFTER.as_secs()
                    );
                    return;
                }
                backoff.wait("asking for work", &e).await;
                continue;
            }
        };
        if let (Some(got), Some(seen)) = (batch.term, term) {
            if got < seen {
                // A server that led before the leader this agent has heard from, and does not
                // know yet that it leads no more: its commands were given up by the newer
                // term (requeued, placed again), and run now they would run twice.
                let e = anyhow::Error::new(NotLeading)
                    .context(format!("work of term {got}, after term {seen}"));
                failover.failed(link, &e);
                backoff.wait("asking for work", &e).await;
                continue;
            }
        }
        backoff.reset();
        failover.answered();
        link.learn_servers(batch.servers);
        if batch.batch.is_some() {
            hello.got = batch.batch;
        }
        if batch.term.is_some() && batch.term != term {
            new_term();
            term = batch.term;
        }
        for work in batch.work {
            take(work);
        }
    }
}

fn start(node: &tasks::Node, work: Work) {
    let (link, events) = (&node.link, &node.events);
    match work {
        Work::Run {
            id,
            argv,
            env,
            task,
        } => node.run(tasks::Command {
            id,
            argv,
            env,
            task,
        }),
        Work::Drop { run, .. } => node.cancel(run),
        Work::Kill { id, pid, boot } => {
            let ours = boot.is_none_or(|b| b == link.boot);
            let _ = events.send(Event::Answered {
                id,
                yes: ours && procs::signal(-pid, libc::SIGKILL),
            });
        }
        Work::Alive { id, pid, boot } => {
            let ours = boot.is_none_or(|b| b == link.boot);
            let _ = events.send(Event::Answered {
                id,
                yes: ours && procs::signal(pid, 0),
            });
        }
        Work::File {
            id,
            root,
            rel,
            op: FileOp::Write { mode },
            ..
        } => files::write(link.clone(), id, root, rel, mode),
        Work::File {
            id,
            root,
            rel,
            op,
            within_ms,
            ..
        } => {
            let until = within_ms.map(|ms| std::time::Instant::now() + Duration::from_millis(ms));
            files::answer(link.clone(), id, (root, rel), op, until)
        }
    }
}

/// Sends events in batches, as they come: what came while a batch was on its way goes in the
/// next. A command's start waits up to [`START_HOLD`] for company (most often its own end), so a
/// short command costs one request, not two. A batch the server did not take is sent again.
pub(crate) async fn send_events(
    link: std::sync::Arc<Link>,
    mut outbox: mpsc::UnboundedReceiver<Event>,
) {
    let mut backoff = Backoff::default();
    let mut held: Vec<Event> = Vec::new();
    let mut due = tokio::time::Instant::now();
    loop {
        let next = if held.is_empty() {
            match outbox.recv().await {
                Some(event) => Some(event),
                None => return,
            }
        } else {
            tokio::select! {
                event = outbox.recv() => event,
                () = tokio::time::sleep_until(due) => None,
            }
        };
        if let Some(event @ Event::Started { .. }) = next {
            if held.is_empty() {
                due = tokio::time::Instant::now() + START_HOLD;
            }
            held.push(event);
            continue;
        }
        // Events that are ready with it (commands started together) go in the same request.
        tokio::task::yield_now().await;
        let mut batch = Events {
            boot: link.boot.clone(),
            events: std::mem::take(&mut held),
            load: None,
        };
        batch.events.extend(next);
        while batch.events.len() < MAX_BATCH {
            match outbox.try_recv() {
                Ok(event) => batch.events.push(event),
                Err(_) => break,
            }
        }
        while let Err(e) = link
            .post::<_, serde::de::IgnoredAny>(EVENTS_PATH, &batch)
            .await
        {
            backoff.wait("sending events", &e).await;
        }
        backoff.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn run(id: u64) -> Work {
        Work::Run {
            id,
            argv: vec!["true".into()],
            env: Vec::new(),
            task: None,
        }
    }

    fn batch(id: u64, term: i64, work: Vec<Work>) -> WorkBatch {
        WorkBatch {
            batch: Some(id),
            work,
            servers: Vec::new(),
            term: Some(term),
        }
    }

    /// A server that answers each ask for work with the next of `batches`, then never again.
    async fn server(batches: Vec<WorkBatch>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for answer in batches {
                let (mut conn, _) = listener.accept().await.unwrap();
                read_request(&mut conn).await;
                let body = serde_json::to_vec(&answer).unwrap();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                conn.write_all(head.as_bytes()).await.unwrap();
                conn.write_all(&body).await.unwrap();
            }
            std::future::pending::<()>().await;
        });
        url
    }

    /// Reads a request's head and body, whatever they say.
    async fn read_request(conn: &mut tokio::net::TcpStream) {
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        let (head_end, length) = loop {
            let n = conn.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the request ended early");
            seen.extend_from_slice(&chunk[..n]);
            if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&seen[..at]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                break (at + 4, length);
            }
        };
        while seen.len() < head_end + length {
            let n = conn.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the request's body ended early");
            seen.extend_from_slice(&chunk[..n]);
        }
    }

    /// The minute-52 case of the hour on Docker: a leader of term 5 hands a command out; a new
    /// leader (term 6) takes over and requeues it; then the server of term 5, not yet aware it
    /// leads no more, hands out more. The agent runs none of term 5's after term 6's.
    #[tokio::test]
    async fn work_of_a_term_older_than_one_heard_from_is_never_taken() {
        crate::install_tls();
        let url = server(vec![
            batch(1, 5, vec![run(1)]),
            batch(1, 6, vec![run(2)]),
            batch(2, 5, vec![run(3)]),
            batch(2, 6, vec![run(4)]),
        ])
        .await;
        let client = || reqwest::Client::new();
        let link = Link::new(&url, "BatchpoolNode n:s".into(), (client(), client()));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let terms = std::sync::atomic::AtomicUsize::new(0);
        let new_term = || {
            terms.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        let polling = poll_work(&link, new_term, |work| {
            let Work::Run { id, .. } = work else {
                panic!("{work:?}")
            };
            tx.send(id).unwrap();
        });
        let mut taken = Vec::new();
        tokio::select! {
            () = polling => unreachable!("the node is never given up"),
            () = async { while taken.last() != Some(&4) { taken.push(rx.recv().await.unwrap()) } } => {}
            () = tokio::time::sleep(Duration::from_secs(10)) => {}
        }
        assert_eq!(taken, [1, 2, 4]);
        assert_eq!(
            terms.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "5, then 6"
        );
    }
}
