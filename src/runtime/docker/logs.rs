//! A node's agent log, for `uploadbatchservicelogs`.

use anyhow::Context;

use super::{container_name, DockerRuntime};
use crate::runtime::MAX_AGENT_LOG;

impl DockerRuntime {
    /// The agent's log: the node container's output (the agent is its main process), with
    /// the engine's timestamps, its last [`MAX_AGENT_LOG`] bytes.
    pub(super) async fn agent_log(
        &self,
        server_id: &str,
        node_id: &str,
        since: i64,
        until: i64,
    ) -> anyhow::Result<Vec<u8>> {
        use futures_util::StreamExt;
        let clamp = |t: i64| i32::try_from(t.max(0)).unwrap_or(i32::MAX);
        let options = bollard::query_parameters::LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .since(clamp(since))
            .until(clamp(until))
            .build();
        let mut logs = self
            .docker
            .logs(&container_name(server_id, node_id), Some(options));
        let mut out: Vec<u8> = Vec::new();
        while let Some(chunk) = logs.next().await {
            out.extend_from_slice(&chunk.context("reading the node's log")?.into_bytes());
            if out.len() > 2 * MAX_AGENT_LOG {
                out.drain(..out.len() - MAX_AGENT_LOG);
            }
        }
        let keep = out.len().saturating_sub(MAX_AGENT_LOG);
        out.drain(..keep);
        Ok(out)
    }
}
