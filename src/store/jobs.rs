//! The jobs table.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::job::{AllTasksComplete, JobState, TaskFailureMode};
use crate::domain::job_prep::{JobPreparationTask, JobReleaseTask};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct JobRow {
    pub pk: i64,
    pub account: String,
    pub id: String,
    pub display_name: Option<String>,
    pub priority: i32,
    pub max_parallel_tasks: i32,
    pub max_wall_clock_ticks: Option<i64>,
    pub max_task_retry_count: i32,
    /// Whether its running tasks give way to a higher-priority job's (allowTaskPreemption).
    pub allow_task_preemption: bool,
    pub pool_id: String,
    /// The `poolInfo.autoPoolSpecification` the job made `pool_id` from, as given.
    pub auto_pool: Option<Value>,
    pub on_all_tasks_complete: AllTasksComplete,
    pub on_task_failure: TaskFailureMode,
    pub uses_task_dependencies: bool,
    pub common_environment: Value,
    pub metadata: Value,
    pub state: JobState,
    pub state_transition_time: DateTime<Utc>,
    pub previous_state: Option<JobState>,
    pub previous_state_transition_time: Option<DateTime<Utc>>,
    pub terminate_reason: Option<String>,
    pub start_time: DateTime<Utc>,
    pub end_time: Option<DateTime<Utc>>,
    pub creation_time: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
    pub preparation_task: Option<Json<JobPreparationTask>>,
    pub release_task: Option<Json<JobReleaseTask>>,
    /// The jobManagerTask as given, with its defaults.
    pub manager_task: Option<Value>,
}

/// Reads whole `JobRow`s: `select_jobs!("WHERE ...", args)` is the checked query over every column.
macro_rules! select_jobs {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            JobRow,
            r#"SELECT pk, account, id, display_name, priority, max_parallel_tasks, max_wall_clock_ticks, max_task_retry_count, allow_task_preemption, pool_id, auto_pool, on_all_tasks_complete AS "on_all_tasks_complete: _", on_task_failure AS "on_task_failure: _", uses_task_dependencies, common_environment, metadata, state AS "state: _", state_transition_time, previous_state AS "previous_state: _", previous_state_transition_time, terminate_reason, start_time, end_time, creation_time, last_modified, preparation_task AS "preparation_task: _", release_task AS "release_task: _", manager_task FROM jobs "# + $rest
            $(, $arg)*
        )
    };
}

/// The settable properties of a job (create, PATCH and PUT share them).
#[derive(Clone, Debug)]
pub struct JobProps {
    pub priority: i32,
    pub max_parallel_tasks: i32,
    pub max_wall_clock_ticks: Option<i64>,
    pub max_task_retry_count: i32,
    pub allow_task_preemption: bool,
    pub pool_id: String,
    /// The auto pool specification `pool_id` was made from, if it was.
    pub auto_pool: Option<Value>,
    pub on_all_tasks_complete: AllTasksComplete,
    pub on_task_failure: TaskFailureMode,
    pub metadata: Value,
}

pub struct NewJob {
    pub account: String,
    pub id: String,
    pub display_name: Option<String>,
    pub uses_task_dependencies: bool,
    pub common_environment: Value,
    pub props: JobProps,
    pub preparation_task: Option<JobPreparationTask>,
    pub release_task: Option<JobReleaseTask>,
    pub manager_task: Option<Value>,
}

pub async fn insert(db: impl PgExecutor<'_>, j: &NewJob) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO jobs (account, id, display_name, priority, max_parallel_tasks, max_wall_clock_ticks, \
            max_task_retry_count, pool_id, on_all_tasks_complete, on_task_failure, uses_task_dependencies, \
            common_environment, metadata, preparation_task, release_task, manager_task, auto_pool, \
            allow_task_preemption, state, state_transition_time, start_time, creation_time, last_modified) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, 'active', \
            now(), now(), now(), now())",
        &j.account,
        &j.id,
        &j.display_name as _,
        j.props.priority,
        j.props.max_parallel_tasks,
        j.props.max_wall_clock_ticks,
        j.props.max_task_retry_count,
        &j.props.pool_id,
        j.props.on_all_tasks_complete.as_str(),
        j.props.on_task_failure.as_str(),
        j.uses_task_dependencies,
        &j.common_environment,
        &j.props.metadata,
        j.preparation_task.as_ref().map(Json) as _,
        j.release_task.as_ref().map(Json) as _,
        j.manager_task.as_ref(),
        j.props.auto_pool.as_ref(),
        j.props.allow_task_preemption,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// How a read of a job locks its row until the transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    None,
    /// For adding tasks: many requests at once, while no one completes or deletes the job.
    Share,
    /// For changing the job.
    Update,
}

pub async fn get(
    db: impl PgExecutor<'_>,
    account: &str,
    id: &str,
    lock: Lock,
) -> sqlx::Result<Option<JobRow>> {
    // One statement per lock: the checked macros take a literal.
    match lock {
        Lock::None => {
            select_jobs!("WHERE account = $1 AND lower(id) = lower($2)", account, id,)
                .fetch_optional(db)
                .await
        }
        Lock::Share => {
            select_jobs!(
                "WHERE account = $1 AND lower(id) = lower($2) FOR SHARE",
                account,
                id,
            )
            .fetch_optional(db)
            .await
        }
        Lock::Update => {
            select_jobs!(
                "WHERE account = $1 AND lower(id) = lower($2) FOR UPDATE",
                account,
                id,
            )
            .fetch_optional(db)
            .await
        }
    }
}

pub async fn get_by_pk(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<JobRow>> {
    select_jobs!("WHERE pk = $1", pk,).fetch_optional(db).await
}

/// A page of jobs in id order after `after` (exclusive).
pub async fn list(
    db: impl PgExecutor<'_>,
    account: &str,
    after: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<JobRow>> {
    select_jobs!(
        "WHERE account = $1 AND ($2::text IS NULL OR lower(id) > lower($2)) ORDER BY lower(id) LIMIT $3",
        account,
        after,
        limit,
    )
    .fetch_all(db)
    .await
}

/// A page of the jobs a schedule made, in id order, after `after`.
pub async fn list_of_schedule(
    db: impl PgExecutor<'_>,
    schedule_pk: i64,
    after: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<JobRow>> {
    select_jobs!(
        "WHERE job_schedule_pk = $1 AND ($2::text IS NULL OR lower(id) > lower($2)) ORDER BY lower(id) LIMIT $3",
        schedule_pk,
        after,
        limit,
    )
    .fetch_all(db)
    .await
}

pub async fn set_props(db: impl PgExecutor<'_>, pk: i64, p: &JobProps) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE jobs SET priority = $2, max_parallel_tasks = $3, max_wall_clock_ticks = $4, max_task_retry_count = $5, \
            pool_id = $6, on_all_tasks_complete = $7, on_task_failure = $8, metadata = $9, auto_pool = $10, \
            allow_task_preemption = $11, last_modified = now() \
         WHERE pk = $1",
        pk,
        p.priority,
        p.max_parallel_tasks,
        p.max_wall_clock_ticks,
        p.max_task_retry_count,
        &p.pool_id,
        p.on_all_tasks_complete.as_str(),
        p.on_task_failure.as_str(),
        &p.metadata,
        p.auto_pool.as_ref(),
        p.allow_task_preemption,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Moves a job to `state`, keeping the previous one as Azure reports it.
pub async fn set_state(db: impl PgExecutor<'_>, pk: i64, state: JobState) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE jobs SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = $2, state_transition_time = now(), last_modified = now() \
         WHERE pk = $1 AND state <> $2",
        pk,
        state.as_str(),
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Ends a job that is not ending or being deleted yet; returns whether it did. A job with
/// release tasks to run on its nodes is `terminating` until they have run
/// ([`complete_terminated`]); any other completes at once.
pub async fn complete(db: impl PgExecutor<'_>, pk: i64, reason: &str) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE jobs SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = CASE WHEN job_releases_pending(pk) THEN 'terminating' ELSE 'completed' END, \
            state_transition_time = now(), last_modified = now(), terminate_reason = $2, \
            end_time = CASE WHEN job_releases_pending(pk) THEN NULL ELSE now() END \
         WHERE pk = $1 AND state NOT IN ('terminating', 'completed', 'deleting')",
        pk,
        reason,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// onAllTasksComplete=terminatejob: ends the job when it has no unfinished task (as
/// [`complete`] does, `terminating` while release tasks are due).
pub async fn complete_if_all_tasks_done(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE jobs SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = CASE WHEN job_releases_pending(pk) THEN 'terminating' ELSE 'completed' END, \
            state_transition_time = now(), last_modified = now(), terminate_reason = $2, \
            end_time = CASE WHEN job_releases_pending(pk) THEN NULL ELSE now() END \
         WHERE pk = $1 AND on_all_tasks_complete = 'terminatejob' AND state IN ('active', 'disabled') \
         AND NOT EXISTS (SELECT 1 FROM tasks WHERE job_pk = $1 AND state <> 'completed')",
        pk,
        "AllTasksComplete",
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Ends the jobs set to end with their tasks in the last minute whose tasks are all done:
/// a PATCH that sets onAllTasksComplete while the last task completes leaves such a job, as
/// neither transaction saw the other's change. Returns how many it completed.
pub async fn complete_recently_set(db: impl PgExecutor<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE jobs j SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = CASE WHEN job_releases_pending(pk) THEN 'terminating' ELSE 'completed' END, \
            state_transition_time = now(), last_modified = now(), terminate_reason = 'AllTasksComplete', \
            end_time = CASE WHEN job_releases_pending(pk) THEN NULL ELSE now() END \
         WHERE on_all_tasks_complete = 'terminatejob' AND state IN ('active', 'disabled') \
           AND last_modified > now() - interval '1 minute' \
           AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.job_pk = j.pk AND t.state <> 'completed')",
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Completes the `terminating` jobs whose release tasks have all run (or whose nodes are gone);
/// returns how many it completed.
pub async fn complete_terminated(db: impl PgExecutor<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE jobs SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = 'completed', state_transition_time = now(), last_modified = now(), end_time = now() \
         WHERE state = 'terminating' AND NOT job_releases_pending(pk)"
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Jobs whose maxWallClockTime has run out.
pub async fn past_wall_clock(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT pk FROM jobs WHERE state IN ('active', 'disabled', 'disabling', 'enabling') \
           AND max_wall_clock_ticks IS NOT NULL AND max_wall_clock_ticks < 31536000000000000 \
           AND start_time + make_interval(secs => max_wall_clock_ticks / 1e7) < now()"
    )
    .fetch_all(db)
    .await
}

pub async fn deleting(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<JobRow>> {
    select_jobs!("WHERE state = 'deleting'",)
        .fetch_all(db)
        .await
}

pub async fn delete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM jobs WHERE pk = $1", pk,)
        .execute(db)
        .await?;
    Ok(())
}

/// An active job and how many of its tasks are running.
#[derive(sqlx::FromRow)]
pub struct JobRoom {
    pub pk: i64,
    pub priority: i32,
    pub max_parallel_tasks: i32,
    /// Its running tasks, if it has a maxParallelTasks (0 if not).
    pub running: i64,
    /// Nodes where the job's preparation task failed: its tasks do not go there.
    pub excluded: Vec<i64>,
}

/// A pool's active jobs, in dispatch order (priority, then age), with their running tasks where
/// they have a maxParallelTasks (counted only there: a job without one, most, needs no count).
pub async fn active_in_pool(
    db: impl PgExecutor<'_>,
    account: &str,
    pool_id: &str,
) -> sqlx::Result<Vec<JobRoom>> {
    sqlx::query_as!(
        JobRoom,
        r#"SELECT j.pk, j.priority, j.max_parallel_tasks,
                CASE WHEN j.max_parallel_tasks < 0 THEN 0 ELSE
                    (SELECT count(*) FROM tasks t WHERE t.job_pk = j.pk AND t.state IN ('preparing', 'running')) END AS "running!",
                CASE WHEN j.preparation_task IS NULL THEN '{}'::bigint[] ELSE
                    coalesce((SELECT array_agg(x.node_pk) FROM job_node_tasks x
                              WHERE x.job_pk = j.pk AND x.preparation->>'result' = 'failure'), '{}') END AS "excluded!"
         FROM jobs j WHERE j.account = $1 AND lower(j.pool_id) = lower($2) AND j.state = 'active'
         ORDER BY j.priority DESC, j.creation_time, j.pk"#,
        account,
        pool_id,
    )
    .fetch_all(db)
    .await
}
