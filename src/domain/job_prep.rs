//! A job's preparation task (run on a node before the job's first task there) and release task
//! (run on each node that ran the preparation task, once the job ends), as Azure Batch runs them.

use serde::{Deserialize, Serialize};

use super::container::ContainerSettings;
use super::files::ResourceFile;
use super::pool::EnvironmentSetting;
use super::IsoDuration;

fn yes() -> bool {
    true
}

/// Azure's `jobPreparationTask`, as the server keeps it (defaults filled in).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobPreparationTask {
    #[serde(default = "JobPreparationTask::default_id")]
    pub id: String,
    pub command_line: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment_settings: Vec<EnvironmentSetting>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_files: Vec<ResourceFile>,
    #[serde(default)]
    pub constraints: PreparationConstraints,
    #[serde(default = "yes")]
    pub wait_for_success: bool,
    #[serde(default = "yes")]
    pub rerun_on_node_reboot_after_success: bool,
    /// The container it runs in, if not in its node's (see docs/nodes.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_settings: Option<ContainerSettings>,
    /// Who it runs as, as `api::batch::identity` checked it ([`crate::domain::run_as`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_identity: Option<serde_json::Value>,
}

impl JobPreparationTask {
    pub fn default_id() -> String {
        "jobpreparation".into()
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PreparationConstraints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_clock_time: Option<IsoDuration>,
    #[serde(
        default,
        deserialize_with = "crate::domain::lenient::opt_i32",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_task_retry_count: Option<i32>,
    /// How long its directory on a node stays after it completed there ([`retention_ticks`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_time: Option<IsoDuration>,
}

/// Azure's default retentionTime of a task's directory: 7 days, in ticks.
const DEFAULT_RETENTION_TICKS: i64 = 7 * 24 * 3600 * 10_000_000;

/// A retentionTime in ticks, Azure's default of 7 days when none is given.
pub fn retention_ticks(given: Option<IsoDuration>) -> i64 {
    given.map_or(DEFAULT_RETENTION_TICKS, |d| d.ticks())
}

/// Azure's `jobReleaseTask`, as the server keeps it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobReleaseTask {
    #[serde(default = "JobReleaseTask::default_id")]
    pub id: String,
    pub command_line: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment_settings: Vec<EnvironmentSetting>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_files: Vec<ResourceFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_clock_time: Option<IsoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_settings: Option<ContainerSettings>,
    /// Who it runs as, as `api::batch::identity` checked it ([`crate::domain::run_as`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_identity: Option<serde_json::Value>,
    /// How long its directory on a node stays after it completed there ([`retention_ticks`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_time: Option<IsoDuration>,
}

impl JobReleaseTask {
    pub fn default_id() -> String {
        "jobrelease".into()
    }

    /// Azure's default and greatest maxWallClockTime for a release task: 15 minutes.
    pub fn limit(&self) -> std::time::Duration {
        let max = std::time::Duration::from_secs(15 * 60);
        self.max_wall_clock_time
            .map_or(max, |d| d.to_std().min(max))
    }
}
