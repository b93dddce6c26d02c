//! Pool and node states as Azure Batch spells them on the wire, and the rules between them; the
//! start task as the scheduler runs it.

use serde::Deserialize;

/// The image pools with an unmapped `imageReference` run unless `--marketplace-image` names
/// another (docs/nodes.md, "The Debian image"); the server builds it on an engine that lacks it.
pub const DEBIAN_IMAGE: &str = "batchpool/debian:bookworm";

/// A pool's resizeTimeout when its creation names none: Azure's 15 minutes.
pub const DEFAULT_RESIZE_TIMEOUT_SECS: i64 = 15 * 60;

wire_enum!(PoolState { Active = "active", Deleting = "deleting" });

wire_enum!(AllocationState { Steady = "steady", Resizing = "resizing", Stopping = "stopping" });

wire_enum!(NodeFillType { Spread = "spread", Pack = "pack" });

wire_enum!(
    /// How a pool's jobs of equal priority share its free slots: evenly, in turns (`none`), or
    /// the oldest job first (`creationtime`, the default here; Azure's is `none`).
    JobDefaultOrder {
        None = "none",
        CreationTime = "creationtime",
    }
);

wire_enum!(
    /// A pool's targetNodeCommunicationMode. A node's agent always connects out to the server
    /// (Azure's `simplified`); `classic`, the server reaching into its nodes, is refused.
    NodeCommunicationMode {
        Default = "default",
        Classic = "classic",
        Simplified = "simplified",
    }
);

wire_enum!(
    /// What happens to a node's running tasks when a resize removes it.
    NodeDeallocationOption {
        Requeue = "requeue",
        Terminate = "terminate",
        TaskCompletion = "taskcompletion",
        RetainedData = "retaineddata",
    }
);

// `preempted`: a low-priority node whose capacity was taken back. Its container is gone, its
// tasks were requeued, and it is made again when capacity allows.
wire_enum!(NodeState {
    Creating = "creating",
    Starting = "starting",
    WaitingForStartTask = "waitingforstarttask",
    StartTaskFailed = "starttaskfailed",
    Idle = "idle",
    Running = "running",
    LeavingPool = "leavingpool",
    Unusable = "unusable",
    Offline = "offline",
    Rebooting = "rebooting",
    Reimaging = "reimaging",
    Preempted = "preempted",
    Unknown = "unknown",
    // deallocating: its tasks end as the deallocate asked, then its container stops;
    // deallocated: stopped with its disk kept until it is started again, and not billed.
    Deallocating = "deallocating",
    Deallocated = "deallocated",
});

impl NodeState {
    /// The order in which a shrinking pool gives up nodes: those doing nothing useful first.
    pub fn removal_rank(self) -> u8 {
        match self {
            NodeState::Unusable
            | NodeState::StartTaskFailed
            | NodeState::Offline
            | NodeState::Preempted
            | NodeState::Deallocated
            | NodeState::Unknown => 0,
            NodeState::Creating
            | NodeState::Starting
            | NodeState::WaitingForStartTask
            | NodeState::Rebooting
            | NodeState::Reimaging
            | NodeState::Deallocating => 1,
            NodeState::Idle => 2,
            NodeState::Running => 3,
            NodeState::LeavingPool => 4,
        }
    }

    /// Whether the node's container exists and has been started: from then it is billed.
    pub fn is_provisioned(self) -> bool {
        !matches!(
            self,
            NodeState::Creating
                | NodeState::LeavingPool
                | NodeState::Preempted
                | NodeState::Deallocated
        )
    }
}

/// A pool's two targets: dedicated and low-priority (spot) nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Targets {
    pub dedicated: i32,
    pub low_priority: i32,
}

impl Targets {
    pub fn new(dedicated: i32, low_priority: i32) -> Self {
        Targets {
            dedicated,
            low_priority,
        }
    }

    /// Dedicated nodes alone.
    pub fn dedicated(nodes: i32) -> Self {
        Targets {
            dedicated: nodes,
            low_priority: 0,
        }
    }
}

/// The start task fields this server acts on; the rest is kept and echoed as sent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartTask {
    pub command_line: Option<String>,
    #[serde(default)]
    pub environment_settings: Vec<EnvironmentSetting>,
    pub wait_for_success: Option<bool>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    pub max_task_retry_count: Option<i32>,
    /// Downloaded into the start task's working directory before each attempt.
    #[serde(default)]
    pub resource_files: Vec<crate::domain::files::ResourceFile>,
    /// The container it runs in, if not in its node's (see docs/nodes.md).
    #[serde(default)]
    pub container_settings: Option<crate::domain::container::ContainerSettings>,
    /// Who it runs as, as `api::batch::identity` checked it ([`crate::domain::run_as`]).
    #[serde(default)]
    pub user_identity: Option<serde_json::Value>,
}

/// A name and value of `environmentSettings` (pools' start tasks, jobs, tasks).
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
pub struct EnvironmentSetting {
    pub name: String,
    pub value: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip() {
        for s in NodeState::ALL {
            assert_eq!(NodeState::parse(s.as_str()), Some(*s));
        }
        assert_eq!(
            NodeState::parse("Idle"),
            None,
            "wire strings are exact and lower case"
        );
        assert_eq!(AllocationState::Steady.to_string(), "steady");
    }

    #[test]
    fn idle_nodes_leave_before_running_ones() {
        assert!(NodeState::Idle.removal_rank() < NodeState::Running.removal_rank());
        assert!(NodeState::Unusable.removal_rank() < NodeState::Idle.removal_rank());
    }
}
