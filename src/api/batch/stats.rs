//! Statistics: a task's, a job's and a pool's `stats` (with `$expand=stats`), and the account's
//! lifetime statistics (`/lifetimejobstats`, `/lifetimepoolstats`; API 2024-02-01 and before).
//! Times are what the database knows; CPU time and storage bytes are what each node's agent
//! measured of the commands it started (getrusage(2)); IOps are not measured and left out.

use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::api::error::ApiResult;
use crate::api::{rfc3339, BaseUrl, Ctx};
use crate::domain::IsoDuration;
use crate::store::{self, pools::PoolRow, tasks::stats::UsageTotals};

fn duration(ms: i64) -> String {
    IsoDuration::from_ticks(ms.max(0).saturating_mul(10_000)).to_string()
}

fn gib(bytes: i64) -> f64 {
    bytes.max(0) as f64 / (1u64 << 30) as f64
}

/// A task's `BatchTaskStatistics` (and the part a job's shares).
pub fn task_stats(url: &str, start: DateTime<Utc>, t: &UsageTotals) -> Value {
    json!({
        "url": url,
        "startTime": rfc3339(start),
        "lastUpdateTime": rfc3339(Utc::now()),
        "userCPUTime": duration(t.user_ms),
        "kernelCPUTime": duration(t.kernel_ms),
        "wallClockTime": duration(t.wall_ms),
        "readIOGiB": gib(t.read_bytes),
        "writeIOGiB": gib(t.write_bytes),
        "waitTime": duration(t.wait_ms),
    })
}

/// A job's `BatchJobStatistics`: its tasks' totals, and how many succeeded, failed and retried.
pub fn job_stats(url: &str, start: DateTime<Utc>, t: &UsageTotals) -> Value {
    let mut v = task_stats(url, start, t);
    v["numSucceededTasks"] = json!(t.succeeded);
    v["numFailedTasks"] = json!(t.failed);
    v["numTaskRetries"] = json!(t.retries);
    v
}

/// Adds to a job's (or with `task`, a task's) statistics `v` what its attempts cost
/// (docs/metering.md, "Prices and cost"): `cost`, in `currency`, once the account has prices;
/// for a job, `estimatedCost` too: its ended attempts' cost, and for each task not completed
/// the mean cost of its latest ended attempts (null before one ended).
pub async fn add_cost(
    app: &Ctx,
    v: &mut Value,
    job: &store::jobs::JobRow,
    task: Option<&str>,
) -> ApiResult<()> {
    let of = (job.id.as_str(), task);
    let Some(cost) = crate::api::billing::attempts_cost(app, of, job.creation_time).await? else {
        return Ok(());
    };
    v["cost"] = json!(cost.total);
    v["currency"] = json!(cost.currency);
    if task.is_none() {
        let counts = store::tasks::counts(&app.db, job.pk).await?;
        let left = (counts.active + counts.running) as f64;
        let estimate = cost.recent_mean.map(|mean| cost.ended + left * mean);
        v["estimatedCost"] = json!(estimate);
    }
    Ok(())
}

/// Dedicated core time of the usage records that overlap `[from, now]`: each dedicated node's
/// vCPUs times the time it existed in the window, as metering counts it.
async fn core_time(
    app: &Ctx,
    pool_id: Option<&str>,
    from: DateTime<Utc>,
) -> ApiResult<(i64, DateTime<Utc>)> {
    let now = Utc::now();
    let records = store::usage::in_range(&app.db, &app.account, pool_id, from, now).await?;
    let mut ms = 0.0;
    let mut first = now;
    for r in records.iter().filter(|r| r.is_dedicated) {
        let start = r.started_at.max(from);
        let end = r.ended_at.unwrap_or(now).min(now);
        first = first.min(start);
        ms += r.vcpus * (end - start).num_milliseconds().max(0) as f64;
    }
    Ok((ms.round() as i64, first))
}

/// A pool's `BatchPoolStatistics`: its dedicated core time since it was made. Resource
/// statistics (CPU, memory, disk, network of the nodes) are not measured and left out.
pub async fn pool_stats(app: &Ctx, base: &str, pool: &PoolRow) -> ApiResult<Value> {
    let (ms, _) = core_time(app, Some(&pool.id), pool.creation_time).await?;
    Ok(pool_usage(
        &format!("{base}/pools/{}/stats", pool.id),
        pool.creation_time,
        ms,
    ))
}

fn pool_usage(url: &str, start: DateTime<Utc>, core_ms: i64) -> Value {
    let now = rfc3339(Utc::now());
    json!({
        "url": url,
        "startTime": rfc3339(start),
        "lastUpdateTime": now,
        "usageStats": {"startTime": rfc3339(start), "lastUpdateTime": now,
                       "dedicatedCoreTime": duration(core_ms)},
    })
}

/// `GET /lifetimejobstats`: the totals of every task the account has run, deleted ones included.
pub async fn lifetime_jobs(app: Ctx, BaseUrl(base): BaseUrl) -> ApiResult<Json<Value>> {
    let totals = store::tasks::stats::of_account(&app.db, &app.account).await?;
    let start = store::tasks::stats::first_job(&app.db, &app.account)
        .await?
        .unwrap_or_else(Utc::now);
    Ok(Json(job_stats(
        &format!("{base}/lifetimejobstats"),
        start,
        &totals,
    )))
}

/// `GET /lifetimepoolstats`: the dedicated core time of every node the account has had (the
/// usage records metering keeps).
pub async fn lifetime_pools(app: Ctx, BaseUrl(base): BaseUrl) -> ApiResult<Json<Value>> {
    let (ms, first) = core_time(&app, None, DateTime::<Utc>::UNIX_EPOCH).await?;
    Ok(Json(pool_usage(
        &format!("{base}/lifetimepoolstats"),
        first,
        ms,
    )))
}
