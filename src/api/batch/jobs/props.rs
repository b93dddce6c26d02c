//! The properties a job is created or updated with, checked as Azure checks them.

use serde::Deserialize;
use serde_json::Value;

use super::auto_pool::{keep_alive_change, AutoPool};
use crate::api::batch::pools::MetadataItem;
use crate::api::error::{ApiError, ApiResult};
use crate::api::state::Settings;
use crate::domain::ids::check_id;
use crate::domain::job::{AllTasksComplete, TaskFailureMode};
use crate::domain::IsoDuration;
use crate::store::jobs::JobRow;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Constraints {
    pub(super) max_wall_clock_time: Option<IsoDuration>,
    #[serde(default, deserialize_with = "crate::domain::lenient::opt_i32")]
    pub(super) max_task_retry_count: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolInfo {
    pool_id: Option<String>,
    auto_pool_specification: Option<Value>,
}

impl PoolInfo {
    /// A poolInfo gives a pool or the specification of one, not both, as on Azure.
    fn one_of(self) -> ApiResult<Self> {
        match (&self.pool_id, &self.auto_pool_specification) {
            (Some(id), Some(_)) => Err(ApiError::invalid_property(
                "poolInfo",
                id,
                "give either poolId or autoPoolSpecification, not both",
            )),
            _ => Ok(self),
        }
    }
}

pub(super) fn check_priority(p: i32) -> ApiResult<i32> {
    if (-1000..=1000).contains(&p) {
        Ok(p)
    } else {
        Err(ApiError::invalid_property(
            "priority",
            p.to_string(),
            "must be between -1000 and 1000",
        ))
    }
}

pub(super) fn check_max_parallel(n: i32) -> ApiResult<i32> {
    if n == -1 || n >= 1 {
        Ok(n)
    } else {
        Err(ApiError::invalid_property(
            "maxParallelTasks",
            n.to_string(),
            "must be -1 (no limit) or at least 1",
        ))
    }
}

/// Where a job runs, as its poolInfo says.
pub(super) enum JobPool {
    /// A pool that exists, by its id.
    Named(String),
    /// A pool the job makes for itself.
    Auto(Box<AutoPool>),
}

/// A job add's poolInfo, checked; `in_schedule`: whether a job schedule makes the job.
pub(super) fn check_pool_info(
    info: Option<PoolInfo>,
    settings: &Settings,
    in_schedule: bool,
) -> ApiResult<JobPool> {
    let info = info
        .ok_or_else(|| ApiError::missing_property("poolInfo"))?
        .one_of()?;
    if let Some(spec) = info.auto_pool_specification {
        return AutoPool::check(spec, settings, in_schedule).map(|a| JobPool::Auto(Box::new(a)));
    }
    Ok(JobPool::Named(check_pool_id(info.pool_id)?))
}

/// The poolId a PATCH or PUT moves a job to; or, for one that sends the job's own auto pool
/// specification, the job's pool as it is and the keepAlive it changes to, if it does.
pub(super) fn updated_pool_info(
    info: PoolInfo,
    job: &JobRow,
) -> ApiResult<(String, Option<Value>, Option<bool>)> {
    let info = info.one_of()?;
    match info.auto_pool_specification {
        Some(spec) => {
            let change = keep_alive_change(job.auto_pool.as_ref(), &spec)?;
            Ok((job.pool_id.clone(), Some(spec), change))
        }
        None => Ok((check_pool_id(info.pool_id)?, None, None)),
    }
}

fn check_pool_id(pool_id: Option<String>) -> ApiResult<String> {
    let pool_id = pool_id.ok_or_else(|| ApiError::missing_property("poolInfo.poolId"))?;
    check_id(&pool_id)
        .map_err(|why| ApiError::invalid_property("poolInfo.poolId", &pool_id, why))?;
    Ok(pool_id)
}

/// onAllTasksComplete as sent, or its default.
pub(super) fn on_all_tasks_complete(value: Option<String>) -> ApiResult<AllTasksComplete> {
    enum_value(
        "onAllTasksComplete",
        value,
        AllTasksComplete::parse,
        AllTasksComplete::NoAction,
        "noaction, terminatejob",
    )
}

/// onTaskFailure as sent, or its default.
pub(super) fn on_task_failure(value: Option<String>) -> ApiResult<TaskFailureMode> {
    enum_value(
        "onTaskFailure",
        value,
        TaskFailureMode::parse,
        TaskFailureMode::NoAction,
        "noaction, performexitoptionsjobaction",
    )
}

fn enum_value<T>(
    name: &str,
    value: Option<String>,
    parse: fn(&str) -> Option<T>,
    default: T,
    allowed: &str,
) -> ApiResult<T> {
    let Some(v) = value else { return Ok(default) };
    parse(&v)
        .ok_or_else(|| ApiError::invalid_property(name, &v, format!("must be one of: {allowed}")))
}

pub(super) fn metadata_json(m: Option<Vec<MetadataItem>>) -> Value {
    serde_json::to_value(m.unwrap_or_default()).expect("metadata serializes")
}
