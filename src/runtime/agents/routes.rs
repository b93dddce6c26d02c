//! The routes node agents use (`domain::agent`), served on a listener of their own
//! (`--agent-listen`, app::agents), not with the API: an agent asks for its node's work and
//! sends what became of it, and other servers ask about the files of nodes whose agents connect
//! here. Each request names its node and that node's secret (or the installation's peer
//! secret). Refusals are in Azure's error shape, so that an agent reads their code as it reads
//! the API's.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use futures_util::{StreamExt, TryStreamExt};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use super::{Agents, Leading, Link, Peers, ReplyBody};
use crate::domain::agent::{
    parse_authorization, Events, Hello, PeerFile, WorkBatch, BODIES_PATH, EVENTS_PATH,
    PEER_FILES_PATH, REPLIES_PATH, WORK_PATH,
};
use crate::domain::endpoint::NOT_LEADING;
use crate::runtime::safe_fs::Below;
use crate::runtime::Runtime;

/// The agents' routes, on `state`.
pub fn router(state: Arc<AgentState>) -> axum::Router {
    axum::Router::new()
        .route(WORK_PATH, post(work))
        .route(EVENTS_PATH, post(events))
        .route(&format!("{REPLIES_PATH}/{{id}}"), post(reply))
        .route(&format!("{BODIES_PATH}/{{id}}"), get(body))
        .route(PEER_FILES_PATH, post(peer_file))
        .with_state(state)
}

/// Why a request of an agent or a peer was refused.
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "code": self.code,
            "message": {"lang": "en-US", "value": self.message},
        });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, 2.into());
        }
        response
    }
}

/// A request's JSON body; one that is not what the route takes is refused, with why.
fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            "InvalidRequestBody",
            format!("The request body is not what this route takes: {e}"),
        )
    })
}

pub struct AgentState {
    pub agents: Arc<Agents>,
    pub runtime: Arc<Runtime>,
    pub server_id: String,
    pub peers: Arc<Peers>,
    /// Whether this server leads: only the leader gives agents work and takes their events.
    pub leading: Leading,
}

/// Holds the request until there is work for the node; with the work, where the installation's
/// servers are. An agent that has not heard of the servers as they are now is told at once
/// (its boot's first request, and held requests when the list changes): the agent turns to
/// them if this server goes, so it must know them before then, not at its next work.
pub async fn work(
    State(state): State<Arc<AgentState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<WorkBatch>, Refusal> {
    let hello: Hello = json(&body)?;
    let link = leader_s_link(&state, &headers).await?;
    let changed = state.peers.changed();
    tokio::pin!(changed);
    changed.as_mut().enable();
    let mut batch = if link.told_servers(&hello.boot, state.peers.version()) {
        // A request held when this server stops leading is let go at once: the agent's next
        // one learns where to go instead of waiting out the hold.
        tokio::select! {
            batch = link.take_work(&hello) => batch,
            () = state.leading.lost() => return Err(not_leading()),
            () = changed => WorkBatch::default(),
        }
    } else {
        WorkBatch::default()
    };
    batch.servers = state.peers.servers().1;
    batch.term = state.agents.term();
    Ok(Json(batch))
}

/// The link of the node the request names, on the server that leads. Another server answers
/// 409 `NotLeading` before it looks at who asks: the agent tries the next server it knows
/// (nothing of its node runs here, and what it says must reach the server that runs it). So a
/// 401 comes only from the leader once it knows all its nodes' agents, and tells the agent
/// that its node was given up.
async fn leader_s_link(state: &AgentState, headers: &HeaderMap) -> Result<Arc<Link>, Refusal> {
    if !state.leading.get() {
        return Err(not_leading());
    }
    let link = authenticate(state, headers).await?;
    if !state.leading.get() {
        return Err(not_leading());
    }
    Ok(link)
}

fn not_leading() -> Refusal {
    Refusal::new(
        StatusCode::CONFLICT,
        NOT_LEADING,
        "This server does not lead the scheduler; ask the next server.",
    )
}

pub async fn events(
    State(state): State<Arc<AgentState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>, Refusal> {
    let events: Events = json(&body)?;
    let link = leader_s_link(&state, &headers).await?;
    if let Some(load) = events.load {
        link.record_load(load);
    }
    link.deliver(&events.boot, events.events);
    Ok(Json(serde_json::json!({})))
}

/// The answer to a question about the node's files: handed, as it streams in, to whoever asked;
/// the request lasts until they have read it or let it go.
pub async fn reply(
    State(state): State<Arc<AgentState>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    body: Body,
) -> Result<StatusCode, Refusal> {
    let link = authenticate(&state, &headers).await?;
    let waiting = link.take_reply(id).ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            "ReplyNotAwaited",
            format!("No question {id} of this node waits for an answer."),
        )
    })?;
    let (done, read) = oneshot::channel();
    let stream = body
        .into_data_stream()
        .map_err(std::io::Error::other)
        .boxed();
    if waiting.send(ReplyBody { stream, done }).is_ok() {
        // Ends when the asker lets the body go: read to its end, or given up.
        let _ = read.await;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The bytes a write of the node's agent writes (`FileOp::Write`), streamed; each is handed out
/// once, and only to the agent of the node it is for.
pub async fn body(
    State(state): State<Arc<AgentState>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Result<Response, Refusal> {
    let link = authenticate(&state, &headers).await?;
    let bytes = link.take_body(id).ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            "BodyNotAwaited",
            format!("No write {id} of this node waits for its bytes to be taken."),
        )
    })?;
    Ok(Body::from_stream(bytes).into_response())
}

/// Another server's question about this server's nodes' files (it does not lead, and their
/// agents connect here): answered from the node's agent, or for a node gone, from this host's
/// disk, as an agent answers.
pub async fn peer_file(
    State(state): State<Arc<AgentState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let question: PeerFile = json(&body)?;
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !state.peers.admits(authorization) {
        return Err(Refusal::new(
            StatusCode::UNAUTHORIZED,
            "AuthenticationFailed",
            "The request does not carry the installation's peer secret (Authorization: BatchpoolPeer {secret}).",
        ));
    }
    let plain = |name: &str| {
        let mut parts = std::path::Path::new(name).components();
        matches!(
            (parts.next(), parts.next()),
            (Some(std::path::Component::Normal(_)), None)
        )
    };
    if !plain(&question.node) {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "InvalidPropertyValue",
            format!(
                "The value provided for node is invalid: {:?} is not a node's id",
                question.node
            ),
        ));
    }
    let at = Below {
        root: state.runtime.host_root(&question.node),
        rel: question.rel.into(),
    };
    match state
        .runtime
        .file(Some(&question.node), &at, question.op)
        .await
    {
        Ok(answer) => Ok(Body::from_stream(super::encode(answer)).into_response()),
        Err(e) => Err(Refusal::new(StatusCode::CONFLICT, e.code, e.message)),
    }
}

/// The link of the node the request names, if it carries that node's secret. A node this
/// server does not know yet (after a restart) is looked up on the runtime.
async fn authenticate(state: &AgentState, headers: &HeaderMap) -> Result<Arc<Link>, Refusal> {
    let refused = || {
        Refusal::new(
            StatusCode::UNAUTHORIZED,
            "AuthenticationFailed",
            "The request names no node of this server with its secret (Authorization: BatchpoolNode {node}:{secret}).",
        )
    };
    let (node, secret) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_authorization)
        .ok_or_else(refused)?;
    if let Some(link) = state.agents.authenticate(node, secret) {
        return Ok(link);
    }
    if !state.agents.knows(node) {
        if let Some(known) = state.runtime.agent_secret(node).await {
            state.agents.register(node, &known);
        }
    }
    if let Some(link) = state.agents.authenticate(node, secret) {
        return Ok(link);
    }
    if !state.agents.all_learnt() {
        // Not the last word: the leader may have yet to learn the node's agent.
        return Err(Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServerBusy",
            "This server has yet to learn its nodes' agents; ask again.",
        ));
    }
    Err(refused())
}
