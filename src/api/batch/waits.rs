//! `waitReason`: why an active task waits, and why a job's active tasks do (docs/scheduling.md,
//! "Why a task waits"), from the leader's last waits pass with what is the task's own added:
//! its dependencies, its requiredSlots, its place in the queue. Our extension to Azure's JSON:
//! the SDKs ignore properties they do not know.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::api::rfc3339;
use crate::domain::job::TaskState;
use crate::domain::waits::{self, TaskFacts, WaitCode};
use crate::store::{self, jobs::JobRow, tasks::TaskRow};

/// The dependencies a task's reason names.
const DEPS_NAMED: i64 = 3;

/// Adds `waitReason` to each of `values` (the JSON of `tasks`, of `job`) whose task is active.
pub async fn add_to_tasks(
    db: &PgPool,
    job: &JobRow,
    tasks: &[TaskRow],
    values: &mut [Value],
) -> sqlx::Result<()> {
    let active: Vec<&TaskRow> = tasks
        .iter()
        .filter(|t| t.state == TaskState::Active)
        .collect();
    if active.is_empty() {
        return Ok(());
    }
    let kept = store::waits::kept(db, &[job.pk]).await?;
    let job_wait = kept.of(job.pk);
    let waiting: Vec<i64> = active
        .iter()
        .filter(|t| t.unmet_deps > 0)
        .map(|t| t.pk)
        .collect();
    let deps = match waiting.is_empty() {
        true => Vec::new(),
        false => store::waits::unfinished_deps(db, &waiting, DEPS_NAMED).await?,
    };
    let ready: Vec<i64> = match job_wait {
        Some((w, _)) if w.code == WaitCode::SlotsBusy => active
            .iter()
            .filter(|t| t.unmet_deps == 0)
            .map(|t| t.pk)
            .collect(),
        _ => Vec::new(),
    };
    let before = match ready.is_empty() {
        true => Vec::new(),
        false => store::waits::before_in_job(db, job.pk, &ready).await?,
    };
    for (t, v) in tasks.iter().zip(values) {
        if t.state != TaskState::Active {
            continue;
        }
        let no_deps = Vec::new();
        let facts = TaskFacts {
            pool_id: &job.pool_id,
            required_slots: t.required_slots,
            unfinished_deps: deps
                .iter()
                .find(|(pk, _)| *pk == t.pk)
                .map_or(&no_deps, |(_, ids)| ids),
            unmet_deps: t.unmet_deps,
            before_in_job: before
                .iter()
                .find(|(pk, _)| *pk == t.pk)
                .map_or(0, |(_, n)| *n),
        };
        let (code, message, ahead) = waits::for_task(job_wait.map(|(w, _)| w), &facts);
        // Since the task became active, or since its job had this reason, whichever is later.
        let since = match job_wait {
            Some((w, since)) if w.code == code => (*since).max(t.state_transition_time),
            _ => t.state_transition_time,
        };
        let mut reason = json!({"code": code, "message": message, "since": rfc3339(since)});
        if let Some(at) = kept.computed_at {
            reason["computedAt"] = json!(rfc3339(at));
        }
        if let Some(n) = ahead {
            reason["tasksAhead"] = json!(n);
        }
        if let Some((w, _)) =
            job_wait.filter(|_| matches!(code, WaitCode::SlotsBusy | WaitCode::Placing))
        {
            estimate(&mut reason, w, ahead.unwrap_or(0), kept.computed_at);
        }
        v["waitReason"] = reason;
    }
    Ok(())
}

/// Adds `waitReason` to each of `values` (the JSON of `jobs`) whose job had active tasks at
/// the last pass.
pub async fn add_to_jobs(db: &PgPool, jobs: &[JobRow], values: &mut [Value]) -> sqlx::Result<()> {
    let pks: Vec<i64> = jobs.iter().map(|j| j.pk).collect();
    let kept = store::waits::kept(db, &pks).await?;
    for (j, v) in jobs.iter().zip(values) {
        let Some((w, since)) = kept.of(j.pk) else {
            continue;
        };
        let mut reason = json!({"code": w.code, "message": w.message, "since": rfc3339(*since)});
        if let Some(at) = kept.computed_at {
            reason["computedAt"] = json!(rfc3339(at));
        }
        if w.code == WaitCode::SlotsBusy {
            reason["tasksAhead"] = json!(w.ahead);
        }
        if matches!(w.code, WaitCode::SlotsBusy | WaitCode::Placing) {
            estimate(&mut reason, w, w.ahead, kept.computed_at);
        }
        v["waitReason"] = reason;
    }
    Ok(())
}

/// `estimatedStartTime`: when a task with `ahead` tasks before it may start, at the pool's pace
/// as the last pass (at `computed_at`) knew it; left out while the pace is not known.
fn estimate(
    reason: &mut Value,
    w: &waits::JobWait,
    ahead: i64,
    computed_at: Option<DateTime<Utc>>,
) {
    let (Some(at), Some(seconds)) = (computed_at, w.start_in(ahead)) else {
        return;
    };
    let wait = chrono::Duration::milliseconds((seconds * 1000.0).min(1e15) as i64);
    reason["estimatedStartTime"] = json!(rfc3339(at + wait));
}
