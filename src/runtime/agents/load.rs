//! Nodes' loads as their agents report them (`Events::load`), for the samples autoscale
//! formulas read as `$CPUPercent` and `$MemoryBytes`.

use std::time::{Duration, Instant};

use super::{Agents, Link};
use crate::domain::agent::{Load, NodeLoad, LOAD_PERIOD_SECS};

/// A node's last two load reports, and when each came.
#[derive(Default)]
pub(super) struct LoadWindow {
    last: Option<(Load, Instant)>,
    before: Option<(Load, Instant)>,
}

impl Link {
    pub fn record_load(&self, load: Load) {
        let mut window = self.load.lock().expect("lock");
        window.before = window.last.take();
        window.last = Some((load, Instant::now()));
    }
}

impl Agents {
    /// The loads of the nodes whose agents reported twice, the last time lately. An agent that
    /// restarted counts from 0 again: it has no figure until it reported twice since.
    pub fn loads(&self) -> Vec<NodeLoad> {
        let stale = Duration::from_secs(3 * LOAD_PERIOD_SECS);
        let links = self.links.lock().expect("lock");
        links
            .iter()
            .filter_map(|(node, link)| {
                let window = link.load.lock().expect("lock");
                let ((last, at), (before, then)) = (window.last?, window.before?);
                let busy = last.cpu_ms.checked_sub(before.cpu_ms)?;
                (at.elapsed() <= stale).then(|| NodeLoad {
                    node: node.clone(),
                    busy_ms: busy as f64,
                    window_ms: at.duration_since(then).as_secs_f64() * 1000.0,
                    memory_bytes: last.memory_bytes as f64,
                })
            })
            .collect()
    }
}
