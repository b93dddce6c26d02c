//! `batchpool agent`: the node agent. It runs inside each node (a Docker node's main process),
//! connects out to the server that made the node, and starts the node's commands directly: no
//! `docker exec` per task. The protocol is `domain::agent`'s. It keeps running while the server
//! is away: commands go on, and their events wait until the server answers again, or until the
//! agent finds the server that leads now (`link`).

mod files;
mod link;
mod load;
mod procs;
mod spawn;
mod trash;

use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;

use link::{Backoff, Failover, Link};

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
    let work = take_work(link, procs.clone(), events);
    let root = std::env::var_os(ENV_ROOT).map(std::path::PathBuf::from);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        () = work => {}
        () = node_removed(root) => tracing::info!("the node's directory is gone: the node agent stops"),
        _ = term.recv() => {}
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
async fn take_work(
    link: std::sync::Arc<Link>,
    procs: procs::Procs,
    events: mpsc::UnboundedSender<Event>,
) {
    let (mut backoff, mut failover) = (Backoff::default(), Failover::default());
    let mut hello = Hello {
        boot: link.boot.clone(),
        got: None,
        users: true,
    };
    loop {
        let batch: WorkBatch = match link.post(WORK_PATH, &hello).await {
            Ok(batch) => batch,
            Err(e) => {
                failover.failed(&link, &e);
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
        backoff.reset();
        failover.answered();
        link.learn_servers(batch.servers);
        if batch.batch.is_some() {
            hello.got = batch.batch;
        }
        for work in batch.work {
            start(&link, &procs, work, &events);
        }
    }
}

fn start(
    link: &std::sync::Arc<Link>,
    procs: &procs::Procs,
    work: Work,
    events: &mpsc::UnboundedSender<Event>,
) {
    match work {
        Work::Run {
            id,
            argv,
            env,
            task,
        } => run_command(link, procs, (id, argv, env, task), events),
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

/// A command in its process group: `Started` once it runs, `Exited` (with what it used) once
/// it ends, both written to a task's record first.
#[allow(clippy::type_complexity)]
fn run_command(
    link: &std::sync::Arc<Link>,
    procs: &procs::Procs,
    (id, argv, env, task): (
        u64,
        Vec<String>,
        Vec<(String, String)>,
        Option<crate::domain::agent::TaskLaunch>,
    ),
    events: &mpsc::UnboundedSender<Event>,
) {
    if let Some(make) = task.as_ref().and_then(|t| t.make.as_ref()) {
        // What a task did to its node can break this (it replaced `workitems`, say): then the
        // command cannot run where it must, and ends as below, as the task's own failure, not
        // the node's (which would requeue it for ever).
        if let Err(e) = files::make_dirs(make) {
            tracing::warn!(base = %make.base, error = %e, "making a task's directories failed");
        }
    }
    if let Some((t, user)) = task.as_ref().and_then(|t| Some((t, t.user?))) {
        // Never as root instead: if its directories cannot be its user's (a task of that user
        // made them too deep, say), it fails as its own.
        if let Err(e) = files::give_to_user(t, user) {
            tracing::warn!(error = %e, "giving a task's directories to its user failed");
            let _ = events.send(Event::Exited {
                id,
                code: 127,
                usage: None,
            });
            return;
        }
    }
    match procs.spawn(&argv, &env, task.as_ref()) {
        Ok((pid, ended)) => {
            // Its record first, so a server that restarts meanwhile finds the attempt running;
            // with this agent's boot: after a restart of the node, the pid is another's.
            let mut record = task.and_then(|t| {
                let written = procs::Record::open(&t.record)
                    .and_then(|mut r| r.add(format_args!("{pid} {}", link.boot)).map(|()| r));
                written
                    .inspect_err(|e| tracing::warn!(error = %e, "writing a task's record failed"))
                    .ok()
            });
            let _ = events.send(Event::Started { id, pid });
            let events = events.clone();
            tokio::spawn(async move {
                let (code, usage) = match ended.await {
                    Ok((code, usage)) => (code, Some(usage)),
                    Err(_) => (-1, None),
                };
                // Recorded before it is told: a server that missed the event reads it.
                if let Some(record) = &mut record {
                    if let Err(e) = record.add(code) {
                        tracing::warn!(error = %e, "writing a task's record failed");
                    }
                }
                let _ = events.send(Event::Exited { id, code, usage });
            });
        }
        Err(spawn::NotStarted::Dir(e)) => {
            // As the shell's `cd` would: the command cannot run where it must.
            tracing::warn!(error = %e, "a task's working directory cannot be entered");
            let usage = None;
            let _ = events.send(Event::Exited {
                id,
                code: 127,
                usage,
            });
        }
        Err(spawn::NotStarted::Other(e)) => {
            let _ = events.send(Event::Failed {
                id,
                message: format!("starting {:?}: {e}", argv.first()),
            });
        }
    }
}

/// Sends events in batches, as they come: what came while a batch was on its way goes in the
/// next. A command's start waits up to [`START_HOLD`] for company (most often its own end), so a
/// short command costs one request, not two. A batch the server did not take is sent again.
async fn send_events(link: std::sync::Arc<Link>, mut outbox: mpsc::UnboundedReceiver<Event>) {
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
