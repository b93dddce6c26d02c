//! The servers of one installation asking each other about their nodes' files: a server whose
//! nodes' agents do not connect to it (it does not lead) asks the leader, which answers as an
//! agent does (`replies::encode`), from its node's agent or its own disk.

use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use super::replies::{decode, FileAnswer, FILE_ANSWER_TIMEOUT};
use crate::domain::agent::{PeerFile, PEER_AUTH_SCHEME, PEER_FILES_PATH};
use crate::domain::endpoint::Endpoint;
use crate::runtime::NodeError;

/// This server among its peers: where they reach it, the installation's secret, and where
/// the nodes' agents reach them all.
pub struct Peers {
    /// Where other servers reach this one (its agents' listener).
    pub url: String,
    /// The installation's servers as agents reach them, as the database said last, with the
    /// number of times the list changed.
    servers: std::sync::Mutex<(u64, Vec<Endpoint>)>,
    /// Wakes the agents' held work requests when the list changes, to hand them the new one.
    changed: tokio::sync::Notify,
    /// SHA-256 of the installation's peer secret.
    digest: [u8; 32],
    authorization: String,
    http: reqwest::Client,
}

impl Peers {
    pub fn new(url: String, secret: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        Ok(Self {
            url: url.trim_end_matches('/').to_string(),
            servers: std::sync::Mutex::default(),
            changed: tokio::sync::Notify::new(),
            digest: Sha256::digest(secret.as_bytes()).into(),
            authorization: format!("{PEER_AUTH_SCHEME} {secret}"),
            http,
        })
    }

    /// Takes the installation's servers as the database says them now; whether they changed.
    /// A change wakes the agents' held work requests ([`Peers::changed`]).
    pub fn set_servers(&self, servers: Vec<Endpoint>) -> bool {
        let mut known = self.servers.lock().expect("lock");
        if known.1 == servers {
            return false;
        }
        *known = (known.0 + 1, servers);
        drop(known);
        self.changed.notify_waiters();
        true
    }

    /// The installation's servers, for the agents to find the leader by, and which version of
    /// the list they are (it counts the changes).
    pub fn servers(&self) -> (u64, Vec<Endpoint>) {
        self.servers.lock().expect("lock").clone()
    }

    /// Which version of the list this server has (it counts the changes).
    pub fn version(&self) -> u64 {
        self.servers.lock().expect("lock").0
    }

    /// Completes at the list's next change: enable it before reading the list not to miss one.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Whether an `Authorization` header carries the installation's peer secret.
    pub fn admits(&self, authorization: &str) -> bool {
        authorization
            .strip_prefix(PEER_AUTH_SCHEME)
            .and_then(|rest| rest.strip_prefix(' '))
            // Digests compared: how long it takes says nothing of the secret.
            .is_some_and(|secret| {
                <[u8; 32]>::from(Sha256::digest(secret.as_bytes())) == self.digest
            })
    }

    /// Asks the server at `url` (the leader) `question`.
    pub async fn file(&self, url: &str, question: &PeerFile) -> Result<FileAnswer, NodeError> {
        let node = &question.node;
        let failed = |why: String| NodeError {
            code: crate::runtime::AGENT_UNREACHABLE,
            message: format!("the server that runs node {node} ({url}) did not answer: {why}"),
        };
        let deadline = tokio::time::Instant::now() + FILE_ANSWER_TIMEOUT + Duration::from_secs(5);
        let sent = self
            .http
            .post(format!("{}{PEER_FILES_PATH}", url.trim_end_matches('/')))
            .header("authorization", &self.authorization)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(question).unwrap_or_default())
            .send();
        let response = tokio::time::timeout_at(deadline, sent)
            .await
            .map_err(|_| failed("in time".into()))?
            .map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            let status = response.status();
            let body = response.bytes().await.unwrap_or_default();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let message = body["message"]["value"]
                .as_str()
                .map_or_else(|| format!("{status}"), str::to_string);
            // The leader's own error (its node's agent did not answer), as it gave it.
            return Err(NodeError {
                code: crate::runtime::AGENT_UNREACHABLE,
                message,
            });
        }
        let stream = response
            .bytes_stream()
            .map_err(std::io::Error::other)
            .boxed();
        decode(stream, deadline, node).await
    }
}
