// Long: data, not logic: one table per SDK body, kept in one file to read side by side.
//! What this server does with each property of the Azure Batch add bodies. Each property either works,
//! as Azure documents it, or is refused with a 400 that names it and the feature. Nothing is stored
//! and then ignored. `tests/compat.rs` walks every property the official SDKs send
//! (tests/data/batch_properties.json) against these tables. For a property that works, it checks
//! that the test named here exists. For a refused one, it checks that a request carrying it is
//! refused and creates nothing.

use serde_json::{Map, Value};

use crate::api::error::{ApiError, ApiResult};

/// What happens to one property.
#[derive(Clone, Copy, Debug)]
pub enum Support {
    /// Carried out; the test (`file.rs::function`) shows it working.
    Works(&'static str),
    /// Refused whenever it asks for something: the feature, for the message.
    Refused(&'static str),
    /// Works for the values the test uses; `refuses` (JSON) is a value that is refused.
    Partly {
        works: &'static str,
        refuses: &'static str,
    },
}

use Support::{Partly, Refused, Works};

/// Every node's agent connects out to the server (Azure's simplified mode): `default` and
/// `simplified` work, `classic` is refused (`pools::checks::communication_mode`).
const COMMUNICATION: &str = "pools.rs::pools_take_simplified_node_communication_and_refuse_classic";

/// An auto-user works, administrator or not, of either scope; a named user (a pool's
/// `userAccounts`) is refused (`api::batch::identity`).
const AUTO_USER: &str = "users.rs::each_auto_user_runs_its_tasks_as_its_scope_and_elevation_say";

/// A pool's nodes that talk to each other are kept on one Docker host (`DockerHosts::place`).
const INTER_NODE: &str = "hosts.rs::a_pool_whose_nodes_talk_to_each_other_stays_on_one_host";

/// Nodes are upgraded by hand, by a reimage: an upgradePolicy of mode `manual` works, `automatic`
/// and `rolling` are refused (`pools::checks::upgrade_policy`).
const MANUAL_UPGRADES: &str =
    "pools.rs::a_manual_upgrade_policy_is_taken_and_automatic_ones_refused";

/// A task's attempts get a token for its job's operations (`domain::task_token`): the flow that
/// `auth.rs`'s two token tests run, on a local node and on a Docker node.
const TASK_TOKENS: &str = "auth.rs::token_flow";

/// A body's properties and what happens to each.
pub type Table = &'static [(&'static str, Support)];

pub const POOL_ADD: Table = &[
    (
        "applicationLicenses",
        Refused("application licenses (Azure's licensed renderers)"),
    ),
    (
        "applicationPackageReferences",
        Works("data.rs::application_packages_are_installed_on_the_node_before_the_task"),
    ),
    (
        "autoScaleEvaluationInterval",
        Works("autoscale.rs::a_pool_at_zero_grows_for_its_tasks_and_goes_back_to_zero"),
    ),
    (
        "autoScaleFormula",
        Works("autoscale.rs::a_pool_at_zero_grows_for_its_tasks_and_goes_back_to_zero"),
    ),
    ("certificateReferences", Refused("certificates")),
    (
        "cloudServiceConfiguration",
        Refused("Cloud Services pools (use virtualMachineConfiguration)"),
    ),
    ("displayName", Works("pools.rs::pool_lifecycle")),
    (
        "enableAutoScale",
        Works("autoscale.rs::a_pool_at_zero_grows_for_its_tasks_and_goes_back_to_zero"),
    ),
    ("enableInterNodeCommunication", Works(INTER_NODE)),
    ("id", Works("pools.rs::pool_lifecycle")),
    ("metadata", Works("pools.rs::pool_lifecycle")),
    ("mountConfiguration", Refused("file system mounts on nodes")),
    (
        "networkConfiguration",
        Refused("pool network configuration"),
    ),
    ("resizeTimeout", Works("pools.rs::pool_lifecycle")),
    (
        "resourceTags",
        Works("containers.rs::resource_tags_label_the_node_and_task_containers"),
    ),
    ("startTask", Works("pools.rs::start_task")),
    ("targetDedicatedNodes", Works("pools.rs::pool_lifecycle")),
    (
        "targetLowPriorityNodes",
        Works("preemption.rs::a_job_on_low_priority_nodes_loses_them_mid_run_and_every_task_ends_once"),
    ),
    (
        "targetNodeCommunicationMode",
        Partly {
            works: COMMUNICATION,
            refuses: r#""classic""#,
        },
    ),
    ("taskSchedulingPolicy", Works("pools.rs::pool_lifecycle")),
    ("taskSlotsPerNode", Works("pools.rs::pool_lifecycle")),
    (
        "upgradePolicy",
        Partly {
            works: MANUAL_UPGRADES,
            refuses: r#"{"mode": "automatic"}"#,
        },
    ),
    ("userAccounts", Refused("user accounts on nodes")),
    (
        "virtualMachineConfiguration",
        Works("pools.rs::missing_image_gives_a_clear_error_not_a_hang"),
    ),
    ("vmSize", Works("pools.rs::pool_lifecycle")),
];

/// A pool's `virtualMachineConfiguration`: what chooses the node image works; what shapes a
/// virtual machine that a Docker node does not have is refused.
pub const VM_CONFIGURATION: Table = &[
    (
        "containerConfiguration",
        Works("pools.rs::an_image_reference_chooses_the_node_image_through_the_image_map"),
    ),
    (
        "dataDisks",
        Refused("data disks (a node's disk is its container's)"),
    ),
    (
        "diskEncryptionConfiguration",
        Refused("disk encryption of nodes"),
    ),
    (
        "extensions",
        Refused("VM extensions (use the start task or the image)"),
    ),
    (
        "imageReference",
        Works("pools.rs::an_image_reference_chooses_the_node_image_through_the_image_map"),
    ),
    ("licenseType", Refused("Windows license types")),
    (
        "nodeAgentSKUId",
        Works("pools.rs::an_image_reference_chooses_the_node_image_through_the_image_map"),
    ),
    (
        "nodePlacementConfiguration",
        Refused("node placement policies (nodes are spread over the server's Docker hosts)"),
    ),
    (
        "osDisk",
        Refused("OS disk settings (a node's disk is its container's)"),
    ),
    (
        "securityProfile",
        Refused("security profiles (trusted launch, confidential VMs)"),
    ),
    (
        "serviceArtifactReference",
        Refused("service artifact references (use imageReference through --image-map)"),
    ),
    ("windowsConfiguration", Refused("Windows nodes")),
];

pub const START_TASK: Table = &[
    ("commandLine", Works("pools.rs::start_task")),
    (
        "containerSettings",
        Works("containers.rs::a_start_task_runs_in_a_container_of_its_own"),
    ),
    ("environmentSettings", Works("pools.rs::start_task")),
    ("maxTaskRetryCount", Works("pools.rs::start_task")),
    (
        "resourceFiles",
        Works("data.rs::a_start_task_gets_its_resource_files_before_each_attempt"),
    ),
    (
        "userIdentity",
        Partly {
            works: AUTO_USER,
            refuses: r#"{"userName": "alice"}"#,
        },
    ),
    ("waitForSuccess", Works("pools.rs::start_task")),
];

pub const JOB_ADD: Table = &[
    (
        "allowTaskPreemption",
        Works("jobs.rs::a_higher_priority_job_takes_the_slots_of_a_preemptible_one"),
    ),
    (
        "commonEnvironmentSettings",
        Works("compat.rs::job_and_task_settings_reach_the_task"),
    ),
    (
        "constraints",
        Works("jobs.rs::terminate_disable_and_job_completion"),
    ),
    (
        "displayName",
        Works("compat.rs::job_and_task_settings_reach_the_task"),
    ),
    ("id", Works("jobs.rs::dependencies")),
    (
        "jobManagerTask",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "jobPreparationTask",
        Works("prep.rs::a_job_s_preparation_task_runs_once_per_node_before_its_tasks"),
    ),
    (
        "jobReleaseTask",
        Works("prep.rs::release_tasks_run_where_preparation_ran_once_the_job_ends"),
    ),
    (
        "maxParallelTasks",
        Works("jobs.rs::terminate_disable_and_job_completion"),
    ),
    (
        "metadata",
        Works("compat.rs::job_and_task_settings_reach_the_task"),
    ),
    ("networkConfiguration", Refused("job network configuration")),
    (
        "onAllTasksComplete",
        Works("jobs.rs::terminate_disable_and_job_completion"),
    ),
    (
        "onTaskFailure",
        Works("compat.rs::job_and_task_settings_reach_the_task"),
    ),
    (
        "poolInfo",
        Works("auto_pools.rs::a_job_makes_its_own_pool_which_goes_when_the_job_completes"),
    ),
    ("priority", Works("jobs.rs::run_order")),
    ("usesTaskDependencies", Works("jobs.rs::dependencies")),
];

/// A job's `poolInfo.autoPoolSpecification`. Its `pool` is a pool add body without the id,
/// checked against [`POOL_ADD`] with the prefix `poolInfo.autoPoolSpecification.pool.`.
pub const AUTO_POOL: Table = &[
    (
        "autoPoolIdPrefix",
        Works("auto_pools.rs::a_job_makes_its_own_pool_which_goes_when_the_job_completes"),
    ),
    (
        "keepAlive",
        Works("auto_pools.rs::a_kept_alive_auto_pool_stays_until_keep_alive_is_turned_off"),
    ),
    (
        "pool",
        Works("auto_pools.rs::a_job_makes_its_own_pool_which_goes_when_the_job_completes"),
    ),
    (
        "poolLifetimeOption",
        Works("auto_pools.rs::a_schedules_jobs_share_one_auto_pool_until_the_schedule_ends"),
    ),
];

/// `POST /jobschedules`. Its `jobSpecification` is a job add body without the id (the schedule
/// names its jobs), checked against [`JOB_ADD`] with the prefix `jobSpecification.`.
pub const JOB_SCHEDULE_ADD: Table = &[
    ("displayName", Works(RECURRING)),
    ("id", Works(RECURRING)),
    ("jobSpecification", Works(RECURRING)),
    ("metadata", Works(RECURRING)),
    ("schedule", Works(RECURRING)),
];

/// `PATCH` and `PUT /jobschedules/{id}`.
pub const JOB_SCHEDULE_UPDATE: Table = &[
    ("jobSpecification", Works(SCHEDULE_ROUTES)),
    ("metadata", Works(SCHEDULE_ROUTES)),
    ("schedule", Works(SCHEDULE_ROUTES)),
];

/// A job schedule's `schedule`.
pub const SCHEDULE: Table = &[
    ("doNotRunAfter", Works(RECURRING)),
    ("doNotRunUntil", Works(RECURRING)),
    ("recurrenceInterval", Works(RECURRING)),
    ("startWindow", Works(RECURRING)),
];

const RECURRING: &str =
    "schedules.rs::a_recurring_schedule_makes_a_job_each_interval_until_do_not_run_after";
const SCHEDULE_ROUTES: &str =
    "schedules.rs::schedule_routes_change_disable_terminate_and_delete_it";

pub const TASK_ADD: Table = &[
    (
        "affinityInfo",
        Works("node_scheduling.rs::a_task_runs_on_the_node_its_affinity_names_when_it_has_room"),
    ),
    (
        "applicationPackageReferences",
        Works("data.rs::application_packages_are_installed_on_the_node_before_the_task"),
    ),
    ("authenticationTokenSettings", Works(TASK_TOKENS)),
    ("commandLine", Works("jobs.rs::slots_are_never_exceeded")),
    (
        "constraints",
        Works("jobs.rs::retries_wall_clock_and_live_output"),
    ),
    (
        "containerSettings",
        Works("containers.rs::tasks_run_each_in_a_container_of_their_own"),
    ),
    ("dependsOn", Works("jobs.rs::dependencies")),
    (
        "displayName",
        Works("compat.rs::job_and_task_settings_reach_the_task"),
    ),
    (
        "environmentSettings",
        Works("compat.rs::job_and_task_settings_reach_the_task"),
    ),
    ("exitConditions", Works("jobs.rs::dependencies")),
    ("id", Works("jobs.rs::dependencies")),
    (
        "multiInstanceSettings",
        Refused("multi-instance (MPI) tasks"),
    ),
    (
        "outputFiles",
        Works("data.rs::output_files_are_uploaded_per_their_upload_condition"),
    ),
    ("requiredSlots", Works("jobs.rs::slots_are_never_exceeded")),
    (
        "resourceFiles",
        Works("data.rs::resource_files_are_in_place_before_the_command_runs"),
    ),
    (
        "userIdentity",
        Partly {
            works: AUTO_USER,
            refuses: r#"{"userName": "alice"}"#,
        },
    ),
];

pub const POOL_PATCH: Table = &[
    (
        "applicationPackageReferences",
        Works("data.rs::a_pool_s_new_packages_reach_its_nodes_when_they_restart"),
    ),
    ("certificateReferences", Refused("certificates")),
    (
        "displayName",
        Works("pools.rs::pool_metadata_and_start_task_can_be_updated"),
    ),
    (
        "enableInterNodeCommunication",
        Works("pools.rs::an_empty_pool_changes_its_node_size_slots_and_image"),
    ),
    (
        "metadata",
        Works("pools.rs::pool_metadata_and_start_task_can_be_updated"),
    ),
    ("mountConfiguration", Refused("file system mounts on nodes")),
    (
        "networkConfiguration",
        Refused("pool network configuration"),
    ),
    (
        "startTask",
        Works("pools.rs::pool_metadata_and_start_task_can_be_updated"),
    ),
    (
        "targetNodeCommunicationMode",
        Partly {
            works: COMMUNICATION,
            refuses: r#""classic""#,
        },
    ),
    (
        "taskSchedulingPolicy",
        Works("pools.rs::pool_metadata_and_start_task_can_be_updated"),
    ),
    (
        "taskSlotsPerNode",
        Partly {
            works: RESHAPED,
            refuses: "0",
        },
    ),
    (
        "upgradePolicy",
        Partly {
            works: MANUAL_UPGRADES,
            refuses: r#"{"mode": "automatic"}"#,
        },
    ),
    ("userAccounts", Refused("user accounts on nodes")),
    (
        "virtualMachineConfiguration",
        Partly {
            works: RESHAPED,
            refuses: r#"{"dataDisks": [{"lun": 0}]}"#,
        },
    ),
    (
        "vmSize",
        Partly {
            works: RESHAPED,
            refuses: r#""standard_huge""#,
        },
    ),
];

/// A pool with no nodes changes what shapes its nodes, as on Azure.
const RESHAPED: &str = "pools.rs::an_empty_pool_changes_its_node_size_slots_and_image";

pub const POOL_REPLACE: Table = &[
    (
        "applicationPackageReferences",
        Works("data.rs::a_pool_s_new_packages_reach_its_nodes_when_they_restart"),
    ),
    ("certificateReferences", Refused("certificates")),
    (
        "metadata",
        Works("pools.rs::pool_metadata_and_start_task_can_be_updated"),
    ),
    (
        "startTask",
        Works("pools.rs::pool_metadata_and_start_task_can_be_updated"),
    ),
    (
        "targetNodeCommunicationMode",
        Partly {
            works: COMMUNICATION,
            refuses: r#""classic""#,
        },
    ),
];

pub const POOL_RESIZE: Table = &[
    (
        "nodeDeallocationOption",
        Works("compat.rs::a_shrinking_pool_honours_node_deallocation_option"),
    ),
    ("resizeTimeout", Works("pools.rs::pool_lifecycle")),
    ("targetDedicatedNodes", Works("pools.rs::pool_lifecycle")),
    (
        "targetLowPriorityNodes",
        Works("preemption.rs::a_job_on_low_priority_nodes_loses_them_mid_run_and_every_task_ends_once"),
    ),
];

/// PATCH and PUT of a job.
pub const JOB_UPDATE: Table = &[
    (
        "allowTaskPreemption",
        Works("jobs.rs::a_higher_priority_job_takes_the_slots_of_a_preemptible_one"),
    ),
    (
        "constraints",
        Works("jobs.rs::patch_keeps_what_it_does_not_name_and_put_resets_it"),
    ),
    (
        "maxParallelTasks",
        Works("compat.rs::job_patch_changes_what_it_names"),
    ),
    (
        "metadata",
        Works("compat.rs::job_patch_changes_what_it_names"),
    ),
    ("networkConfiguration", Refused("job network configuration")),
    (
        "onAllTasksComplete",
        Works("compat.rs::job_patch_changes_what_it_names"),
    ),
    (
        "poolInfo",
        Partly {
            works: "jobs.rs::patch_keeps_what_it_does_not_name_and_put_resets_it",
            refuses: r#"{"autoPoolSpecification": {"poolLifetimeOption": "job"}}"#,
        },
    ),
    (
        "priority",
        Works("jobs.rs::patch_keeps_what_it_does_not_name_and_put_resets_it"),
    ),
];

/// A task's `exitConditions`. Pre-processing and file upload errors come from resource and output
/// files, which are refused, so their options could never apply.
pub const EXIT_CONDITIONS: Table = &[
    (
        "default",
        Works("compat.rs::exit_code_ranges_and_default_decide_what_a_failure_does"),
    ),
    (
        "exitCodeRanges",
        Works("compat.rs::exit_code_ranges_and_default_decide_what_a_failure_does"),
    ),
    ("exitCodes", Works("jobs.rs::dependencies")),
    (
        "fileUploadError",
        Works("data.rs::a_failed_upload_fails_the_task_and_says_why"),
    ),
    (
        "preProcessingError",
        Works("data.rs::a_failed_download_fails_the_task_at_once_without_running_it"),
    ),
];

pub const JOB_PREPARATION_TASK: Table = &[
    (
        "commandLine",
        Works("prep.rs::a_job_s_preparation_task_runs_once_per_node_before_its_tasks"),
    ),
    (
        "constraints",
        Works("prep.rs::a_failed_preparation_keeps_the_job_s_tasks_off_that_node"),
    ),
    (
        "containerSettings",
        Works("containers.rs::preparation_and_release_tasks_run_in_containers_of_their_own"),
    ),
    (
        "environmentSettings",
        Works("prep.rs::a_job_s_preparation_task_runs_once_per_node_before_its_tasks"),
    ),
    (
        "id",
        Works("prep.rs::a_job_s_preparation_task_runs_once_per_node_before_its_tasks"),
    ),
    (
        "rerunOnNodeRebootAfterSuccess",
        Works("prep.rs::a_job_s_preparation_task_runs_once_per_node_before_its_tasks"),
    ),
    (
        "resourceFiles",
        Works("prep.rs::a_job_s_preparation_task_runs_once_per_node_before_its_tasks"),
    ),
    (
        "userIdentity",
        Partly {
            works: AUTO_USER,
            refuses: r#"{"userName": "alice"}"#,
        },
    ),
    (
        "waitForSuccess",
        Works("prep.rs::a_failed_preparation_keeps_the_job_s_tasks_off_that_node"),
    ),
];

/// The properties a job manager task has beyond a task's are `killJobOnCompletion`,
/// `runExclusive` and `allowLowPriorityNode`; the rest are checked as a task's (`TASK_ADD`).
pub const JOB_MANAGER_TASK: Table = &[
    (
        "allowLowPriorityNode",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "applicationPackageReferences",
        Works("data.rs::application_packages_are_installed_on_the_node_before_the_task"),
    ),
    ("authenticationTokenSettings", Works(TASK_TOKENS)),
    (
        "commandLine",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "constraints",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "containerSettings",
        Works("containers.rs::tasks_run_each_in_a_container_of_their_own"),
    ),
    (
        "displayName",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "environmentSettings",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "id",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "killJobOnCompletion",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "outputFiles",
        Works("data.rs::output_files_are_uploaded_per_their_upload_condition"),
    ),
    (
        "requiredSlots",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "resourceFiles",
        Works("data.rs::resource_files_are_in_place_before_the_command_runs"),
    ),
    (
        "runExclusive",
        Works("prep.rs::a_job_manager_task_runs_first_alone_and_ends_its_job"),
    ),
    (
        "userIdentity",
        Partly {
            works: AUTO_USER,
            refuses: r#"{"userName": "alice"}"#,
        },
    ),
];

pub const JOB_RELEASE_TASK: Table = &[
    (
        "commandLine",
        Works("prep.rs::release_tasks_run_where_preparation_ran_once_the_job_ends"),
    ),
    (
        "containerSettings",
        Works("containers.rs::preparation_and_release_tasks_run_in_containers_of_their_own"),
    ),
    (
        "environmentSettings",
        Works("prep.rs::release_tasks_run_where_preparation_ran_once_the_job_ends"),
    ),
    (
        "id",
        Works("prep.rs::release_tasks_run_where_preparation_ran_once_the_job_ends"),
    ),
    (
        "maxWallClockTime",
        Works("prep.rs::release_tasks_run_where_preparation_ran_once_the_job_ends"),
    ),
    (
        "resourceFiles",
        Works("prep.rs::release_tasks_run_where_preparation_ran_once_the_job_ends"),
    ),
    (
        "retentionTime",
        Works("prep.rs::preparation_and_release_directories_go_after_their_retention_time"),
    ),
    (
        "userIdentity",
        Partly {
            works: AUTO_USER,
            refuses: r#"{"userName": "alice"}"#,
        },
    ),
];

/// PUT of a task.
pub const TASK_UPDATE: Table = &[(
    "constraints",
    Works("jobs.rs::patch_keeps_what_it_does_not_name_and_put_resets_it"),
)];

/// Whether a value asks for anything: null, false, an empty list or an empty object do not.
pub fn asks(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

/// Refuses the first property of `body` that the table refuses and that asks for something, by
/// its name under `prefix` (e.g. "startTask.").
pub fn refuse_unsupported(table: Table, prefix: &str, body: &Map<String, Value>) -> ApiResult<()> {
    for (name, support) in table {
        let Refused(feature) = support else { continue };
        if let Some(value) = body.get(*name).filter(|v| asks(v)) {
            return Err(ApiError::invalid_property(
                &format!("{prefix}{name}"),
                value.to_string(),
                format!("not supported by this server: {feature}"),
            ));
        }
    }
    Ok(())
}
