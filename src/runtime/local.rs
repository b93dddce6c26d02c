//! The `local` runtime: a node is a directory under the data directory, and commands are plain
//! processes. It keeps the docker runtime's contract (layout, environment, output files) on a
//! machine without Docker; it does not enforce CPU or memory limits.

use std::path::Path;

use super::{FoundNode, Layout, NodeError, NodeHandle, NodeSpec, WRAPPER};

pub struct LocalRuntime {
    pub(super) layout: Layout,
}

/// The labels of a local node, kept beside its directories.
#[derive(serde::Serialize, serde::Deserialize)]
struct NodeLabels {
    server: String,
    account: String,
    pool: String,
    node: String,
}

const LABELS_FILE: &str = ".batchpool-node.json";

impl LocalRuntime {
    pub fn new(layout: Layout) -> Self {
        Self { layout }
    }

    pub(super) async fn create_node(
        &self,
        spec: &NodeSpec,
        root: &Path,
    ) -> Result<NodeHandle, NodeError> {
        let labels = NodeLabels {
            server: spec.server_id.clone(),
            account: spec.account.clone(),
            pool: spec.pool_id.clone(),
            node: spec.node_id.clone(),
        };
        let json = serde_json::to_vec(&labels).expect("labels serialize");
        tokio::fs::write(root.join(LABELS_FILE), json)
            .await
            .map_err(|e| NodeError {
                code: "NodeDirectoryFailed",
                message: format!("cannot write the node's labels in {}: {e}", root.display()),
            })?;
        Ok(NodeHandle {
            container_id: root.display().to_string(),
            ip_address: "127.0.0.1".into(),
        })
    }

    pub(super) async fn remove_node(&self, _node_id: &str) -> anyhow::Result<()> {
        // The directory is the node; the caller removes it.
        Ok(())
    }

    pub(super) async fn list_nodes(&self, server_id: &str) -> anyhow::Result<Vec<FoundNode>> {
        let mut found = Vec::new();
        let mut entries = match tokio::fs::read_dir(&self.layout.nodes).await {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e.into()),
        };
        while let Some(entry) = entries.next_entry().await? {
            let Ok(bytes) = tokio::fs::read(entry.path().join(LABELS_FILE)).await else {
                continue;
            };
            let Ok(labels) = serde_json::from_slice::<NodeLabels>(&bytes) else {
                continue;
            };
            if labels.server == server_id {
                found.push(FoundNode {
                    node_id: labels.node,
                    running: true,
                });
            }
        }
        Ok(found)
    }

    pub(super) async fn exec(&self, env: Vec<(String, String)>) -> anyhow::Result<i64> {
        let status = tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(WRAPPER)
            // Only what a node would have: the server's own environment (its secrets) stays out.
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("LANG", "C.UTF-8")
            .envs(env)
            .stdin(std::process::Stdio::null())
            // Its own process group: a kill reaches the whole task tree, and signals meant for
            // the server (Ctrl-C) do not reach tasks.
            .process_group(0)
            .status()
            .await?;
        // A process killed by a signal reports 128 + the signal, as a shell would.
        use std::os::unix::process::ExitStatusExt;
        Ok(status
            .code()
            .map(i64::from)
            .unwrap_or_else(|| 128 + i64::from(status.signal().unwrap_or(0))))
    }
}
