//! Where the nodes' agents reach the servers of an installation. Each server says where in the
//! database (`servers`), the leader tells its agents of them all in their work, and an agent
//! whose server is gone, or answers [`NOT_LEADING`], tries the next, until it finds the one that
//! leads: the nodes, and what runs on them, outlive the server that made them.

use serde::{Deserialize, Serialize};

/// The code of the 409 that a server that does not lead answers an agent's work request or
/// events with.
pub const NOT_LEADING: &str = "NotLeading";

/// A server's agents' listener, as nodes reach it: `url` (its `--agent-url`), or where it has
/// none, its `port` on the host the agent reaches its server at now (the gateway of the node's
/// network, or a local node's loopback).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub port: u16,
}
