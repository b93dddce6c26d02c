//! What `batchpool fleet-sim` and a server on the `simulated` runtime say to each other: the
//! server's order for a node, a node as the simulator lists it, and what the simulator uses.

use serde::{Deserialize, Serialize};

/// What the server asks for when it makes a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeOrder {
    /// The installation the node belongs to (its labels, on a real runtime).
    pub server: String,
    pub node: String,
    pub secret: String,
    /// Where the node's agent reaches the server.
    pub url: String,
    /// The directories the node starts with, absolute.
    pub dirs: Vec<String>,
}

/// A node as the simulator lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SimNode {
    pub server: String,
    pub node: String,
    pub secret: String,
    pub running: bool,
}

/// What the simulator itself uses, so that figures can leave it out.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimStats {
    pub nodes: usize,
    pub running: usize,
    /// CPU time (user and kernel) of the simulator's process since it started.
    pub cpu_ms: u64,
    pub rss_bytes: u64,
    /// Commands the nodes' agents started, all nodes, since the simulator started: each run
    /// of a task counts once, however often the server asked for it.
    #[serde(default)]
    pub started: u64,
}
