//! The agent's way to the server: where it reaches it now, the installation's other servers (as
//! the leader names them in its work), and the move to the next of them when the server it
//! reaches is gone or does not lead (`domain::endpoint`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::endpoint::{Endpoint, NOT_LEADING};

/// How long the agent's server may fail to answer before the agent tries the next server.
const MOVE_AFTER: Duration = Duration::from_secs(5);

/// Where the server is and who this node is, from the environment the server gave the node.
pub(crate) struct Link {
    url: Mutex<String>,
    servers: Mutex<Vec<Endpoint>>,
    pub authorization: String,
    pub boot: String,
    pub http: reqwest::Client,
    /// For answers that stream (a file's bytes): no limit on how long one may take.
    pub streams: reqwest::Client,
}

/// How long the leader may refuse the node (401: it knows no node by this name and secret)
/// before the agent takes it that the node was given up, and stops with what it runs. The
/// leader answers so once it has made the node again elsewhere or removed it (its agent fell
/// silent, its host was lost, the node lived in the data directory of a server that is gone):
/// the node's tasks are requeued, so what still runs here would run twice.
pub(super) const GIVEN_UP_AFTER: Duration = Duration::from_secs(30);

/// The server answered that it does not lead.
#[derive(Debug)]
pub(crate) struct NotLeading;

impl std::fmt::Display for NotLeading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the server does not lead the scheduler")
    }
}

impl std::error::Error for NotLeading {}

/// The leading server knows no node by this agent's name and secret (only the leader looks at
/// who asks: another server answers [`NotLeading`] first).
#[derive(Debug)]
pub(crate) struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the server knows no node by this name and secret")
    }
}

impl std::error::Error for Refused {}

impl Link {
    pub fn new(
        url: &str,
        authorization: String,
        clients: (reqwest::Client, reqwest::Client),
    ) -> Self {
        Self {
            url: Mutex::new(url.trim_end_matches('/').to_string()),
            servers: Mutex::default(),
            authorization,
            boot: uuid::Uuid::new_v4().simple().to_string(),
            http: clients.0,
            streams: clients.1,
        }
    }

    /// Where the agent reaches its server now.
    pub fn url(&self) -> String {
        self.url.lock().expect("lock").clone()
    }

    /// Takes the installation's servers, as the leader named them.
    pub fn learn_servers(&self, servers: Vec<Endpoint>) {
        if !servers.is_empty() {
            *self.servers.lock().expect("lock") = servers;
        }
    }

    /// Turns to the server after this one among those the leader named, if there is another.
    pub fn move_on(&self, why: &str) {
        let mut url = self.url.lock().expect("lock");
        let mut known: Vec<String> = Vec::new();
        for server in self.servers.lock().expect("lock").iter() {
            if let Some(at) = resolve(server, &url).filter(|at| !known.contains(at)) {
                known.push(at);
            }
        }
        let next = match known.iter().position(|at| *at == *url) {
            Some(i) => known.get((i + 1) % known.len()),
            None => known.first(),
        };
        if let Some(next) = next.filter(|next| **next != *url) {
            tracing::info!(from = %url, to = %next, "{why}: the node agent turns to the next server");
            *url = next.clone();
        }
    }

    pub async fn post<T: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &T,
    ) -> anyhow::Result<R> {
        let response = self
            .http
            .post(format!("{}{path}", self.url()))
            .header("authorization", &self.authorization)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(body)?)
            .send()
            .await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(Refused.into());
        }
        if status == reqwest::StatusCode::CONFLICT {
            let said: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            if said["code"] == NOT_LEADING {
                return Err(NotLeading.into());
            }
        }
        anyhow::ensure!(
            status.is_success(),
            "the server answered {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
        );
        Ok(serde_json::from_slice(&bytes)?)
    }
}

/// The URL of `server` for an agent that reaches a server at `current` now: its own, or its
/// port on the same host.
fn resolve(server: &Endpoint, current: &str) -> Option<String> {
    if let Some(url) = &server.url {
        return Some(url.trim_end_matches('/').to_string());
    }
    let mut url = reqwest::Url::parse(current).ok()?;
    url.set_port(Some(server.port)).ok()?;
    Some(url.as_str().trim_end_matches('/').to_string())
}

/// Waits longer after each failure in a row, up to 2 s, and says so in the log now and then.
#[derive(Default)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    pub async fn wait(&mut self, what: &str, e: &anyhow::Error) {
        if self.failures.is_multiple_of(30) {
            tracing::warn!(error = %format!("{e:#}"), "{what} failed; trying again");
        }
        self.failures += 1;
        let ms = 50u64.saturating_mul(1 << self.failures.min(6)).min(2000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// When the server the agent asks for work has failed it for [`MOVE_AFTER`], cannot be
/// connected to, or says it does not lead, the agent turns to the next server. It keeps count too of how long the leader has
/// refused it, with no server's work in between.
#[derive(Default)]
pub(crate) struct Failover {
    failing_since: Option<Instant>,
    refused_since: Option<Instant>,
}

impl Failover {
    pub fn failed(&mut self, link: &Link, e: &anyhow::Error) {
        if e.is::<Refused>() {
            self.refused_since.get_or_insert_with(Instant::now);
        }
        if e.is::<NotLeading>() {
            self.failing_since = None;
            return link.move_on("the server does not lead");
        }
        // Nothing listens where the server was (or its host is gone): no use waiting for it.
        let unreachable = e
            .downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_connect);
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if unreachable || since.elapsed() >= MOVE_AFTER {
            self.failing_since = None;
            link.move_on("the server does not answer");
        }
    }

    pub fn answered(&mut self) {
        self.failing_since = None;
        self.refused_since = None;
    }

    /// Whether the leader has refused the node for [`GIVEN_UP_AFTER`]: it gave the node up.
    pub fn given_up(&self) -> bool {
        self.given_up_at(Instant::now())
    }

    fn given_up_at(&self, now: Instant) -> bool {
        self.refused_since
            .is_some_and(|since| now.duration_since(since) >= GIVEN_UP_AFTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Link {
        crate::install_tls();
        let client = || reqwest::Client::new();
        Link::new(
            "http://127.0.0.1:1",
            "BatchpoolNode n:s".into(),
            (client(), client()),
        )
    }

    #[test]
    fn only_a_refusal_that_lasts_with_no_work_between_gives_the_node_up() {
        let link = link();
        let mut failover = Failover::default();
        let start = Instant::now();
        let late = start + GIVEN_UP_AFTER + Duration::from_secs(1);
        // Failures of other kinds, however long, are no refusal.
        failover.failed(&link, &anyhow::anyhow!("connection refused"));
        failover.failed(&link, &NotLeading.into());
        assert!(!failover.given_up_at(late));
        // Refused, then turned away by servers that do not lead: the clock runs on.
        failover.failed(&link, &Refused.into());
        failover.failed(&link, &NotLeading.into());
        failover.failed(&link, &Refused.into());
        assert!(!failover.given_up_at(Instant::now()));
        assert!(failover.given_up_at(late));
        // Work from any server starts it again.
        failover.answered();
        assert!(!failover.given_up_at(late));
    }
}
