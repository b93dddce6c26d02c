//! `batchpool fleet-sim`: thousands of simulated nodes in one process, for measuring the server
//! alone (docs/fleet-sim.md). A server started with `--runtime simulated` makes, stops, restarts
//! and removes its nodes here, over a small HTTP API, as it does containers on a Docker engine;
//! each node's agent then speaks the agent protocol to that server like `batchpool agent` does
//! (`agent`), with commands that only pretend to run. The simulator decides nothing: placement,
//! retries, timeouts and files are the server's. Nodes outlive the server that made them, so a
//! restart or a failover adopts them as it adopts containers.

mod agent;
mod fs;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::agent::link::Link;
use crate::domain::agent::{authorization, POLL_HOLD_SECS};

pub use crate::domain::fleet::{NodeOrder, SimNode, SimStats};

struct Node {
    order: NodeOrder,
    fs: Arc<Mutex<fs::Fs>>,
    /// The agent's loops while the node runs.
    loops: Option<Vec<tokio::task::JoinHandle<()>>>,
    /// Until when it answers questions late (`POST /nodes/{node}/slow`).
    slow: agent::Slow,
}

impl Node {
    /// The node as the simulator lists it.
    fn listed(&self) -> SimNode {
        SimNode {
            server: self.order.server.clone(),
            node: self.order.node.clone(),
            secret: self.order.secret.clone(),
            running: self.loops.is_some(),
        }
    }

    fn stop(&mut self) {
        for handle in self.loops.take().into_iter().flatten() {
            handle.abort();
        }
    }
}

/// Every simulated node, and the HTTP clients their agents share.
struct Fleet {
    nodes: Mutex<HashMap<String, Node>>,
    http: reqwest::Client,
    streams: reqwest::Client,
    /// Commands started by every node (`GET /stats`).
    started: agent::StartCount,
}

impl Fleet {
    fn nodes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Boots the node's agent (again): a new boot, what ran before it gone.
    fn boot(&self, node: &mut Node) {
        node.stop();
        let order = &node.order;
        let auth = authorization(&order.node, &order.secret);
        let link = Link::new(&order.url, auth, (self.http.clone(), self.streams.clone()));
        let counts = (node.slow.clone(), self.started.clone());
        node.loops = Some(agent::start(link, node.fs.clone(), counts));
    }
}

/// Serves the simulator's API on `listen` until SIGINT or SIGTERM.
pub async fn run(listen: SocketAddr) -> anyhow::Result<()> {
    crate::sys::process::raise_fd_limit();
    let client = || {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .tls_certs_only([])
    };
    let fleet = Arc::new(Fleet {
        nodes: Mutex::default(),
        http: client()
            .timeout(Duration::from_secs(POLL_HOLD_SECS + 15))
            .build()
            .context("making the HTTP client")?,
        streams: client().build().context("making the HTTP client")?,
        started: Default::default(),
    });
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/stats", get(stats))
        .route("/nodes", get(list).post(make))
        .route("/nodes/{node}", get(one).delete(remove))
        .route("/nodes/{node}/restart", post(restart))
        .route("/nodes/{node}/stop", post(stop))
        .route("/nodes/{node}/slow", post(slow))
        .with_state(fleet);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    println!("fleet-sim listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

type Fl = State<Arc<Fleet>>;

async fn stats(State(fleet): Fl) -> Json<SimStats> {
    let nodes = fleet.nodes();
    let (cpu_ms, rss_bytes) = crate::sys::process::own_usage();
    Json(SimStats {
        nodes: nodes.len(),
        running: nodes.values().filter(|n| n.loops.is_some()).count(),
        cpu_ms,
        rss_bytes,
        started: fleet.started.load(std::sync::atomic::Ordering::Relaxed),
    })
}

#[derive(Deserialize)]
struct ListQuery {
    server: Option<String>,
}

async fn list(State(fleet): Fl, Query(q): Query<ListQuery>) -> Json<Vec<SimNode>> {
    let nodes = fleet.nodes();
    let listed = nodes
        .values()
        .filter(|n| q.server.as_ref().is_none_or(|s| *s == n.order.server))
        .map(Node::listed)
        .collect();
    Json(listed)
}

async fn one(State(fleet): Fl, Path(node): Path<String>) -> Result<Json<SimNode>, StatusCode> {
    let nodes = fleet.nodes();
    let n = nodes.get(&node).ok_or(StatusCode::NOT_FOUND)?;
    Ok(Json(n.listed()))
}

/// Makes the node and boots its agent; a node that exists keeps its files and secret, and is
/// booted only if it was stopped. Answers the node's secret.
async fn make(State(fleet): Fl, Json(order): Json<NodeOrder>) -> Json<SimNode> {
    let mut nodes = fleet.nodes();
    let node = nodes.entry(order.node.clone()).or_insert_with(|| {
        let mut files = fs::Fs::default();
        for dir in &order.dirs {
            files.make_dir(dir);
        }
        Node {
            order: order.clone(),
            fs: Arc::new(Mutex::new(files)),
            loops: None,
            slow: Arc::default(),
        }
    });
    if node.loops.is_none() {
        fleet.boot(node);
    }
    Json(node.listed())
}

async fn remove(State(fleet): Fl, Path(node): Path<String>) -> StatusCode {
    if let Some(mut node) = fleet.nodes().remove(&node) {
        node.stop();
    }
    StatusCode::NO_CONTENT
}

async fn restart(State(fleet): Fl, Path(node): Path<String>) -> StatusCode {
    let mut nodes = fleet.nodes();
    let Some(node) = nodes.get_mut(&node) else {
        return StatusCode::NOT_FOUND;
    };
    fleet.boot(node);
    StatusCode::NO_CONTENT
}

async fn stop(State(fleet): Fl, Path(node): Path<String>) -> StatusCode {
    match fleet.nodes().get_mut(&node) {
        Some(node) => {
            node.stop();
            StatusCode::NO_CONTENT
        }
        None => StatusCode::NOT_FOUND,
    }
}

#[derive(Deserialize)]
struct SlowQuery {
    seconds: f64,
}

/// For the next `seconds`, the node's agent asks for work and runs it as before, but answers
/// its server's questions (files, kills, liveness) only once they are over: a node that lives
/// but answers slowly.
async fn slow(
    State(fleet): Fl,
    Path(node): Path<String>,
    Query(q): Query<SlowQuery>,
) -> StatusCode {
    let nodes = fleet.nodes();
    let Some(node) = nodes.get(&node) else {
        return StatusCode::NOT_FOUND;
    };
    let Ok(wait) = Duration::try_from_secs_f64(q.seconds) else {
        return StatusCode::BAD_REQUEST;
    };
    *node.slow.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now() + wait);
    StatusCode::NO_CONTENT
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
