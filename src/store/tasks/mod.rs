//! The tasks table: adding, reading, and the transitions of an attempt. Every way a running
//! attempt ends (it finished, was terminated, requeued, or its job went away) goes through
//! `end_attempt`-style updates guarded by the attempt number, and releases the node's slots in
//! the same transaction, so slots and outcomes are counted exactly once.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::files::TaskFiles;
use crate::domain::job::TaskState;

mod add;
mod attempts;
mod running;

pub use add::{existing_ids, first_missing_in_ranges, insert_many, most_slots_needed};
pub use attempts::*;
pub use running::*;
pub mod stats;

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct TaskRow {
    pub pk: i64,
    pub job_pk: i64,
    pub id: String,
    pub display_name: Option<String>,
    pub command_line: String,
    pub environment: Value,
    pub required_slots: i32,
    pub max_wall_clock_ticks: Option<i64>,
    pub retention_ticks: i64,
    pub max_task_retry_count: i32,
    pub depends_on: Option<Value>,
    pub exit_conditions: Option<Value>,
    pub extra: Value,
    pub files: Option<Json<TaskFiles>>,
    pub unmet_deps: i32,
    pub state: TaskState,
    pub state_transition_time: DateTime<Utc>,
    pub previous_state: Option<TaskState>,
    pub previous_state_transition_time: Option<DateTime<Utc>>,
    pub creation_time: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
    pub attempt: i32,
    pub node_pk: Option<i64>,
    pub node_id: Option<String>,
    pub pool_id: Option<String>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    pub exit_code: Option<i32>,
    pub result: Option<String>,
    pub failure_info: Option<Value>,
    pub retry_count: i32,
    pub requeue_count: i32,
    pub last_retry_time: Option<DateTime<Utc>>,
    pub last_requeue_time: Option<DateTime<Utc>>,
    pub satisfies_dependants: bool,
    pub files_expire_at: Option<DateTime<Utc>>,
    /// The container of its latest attempt, if it ran in one of its own.
    pub container_id: Option<String>,
}

/// Reads whole `TaskRow`s: `select_tasks!("WHERE ...", args)` is the checked query over every column.
macro_rules! select_tasks {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            TaskRow,
            r#"SELECT pk, job_pk, id, display_name, command_line, environment, required_slots, max_wall_clock_ticks, retention_ticks, max_task_retry_count, depends_on, exit_conditions, extra, files AS "files: _", unmet_deps, state AS "state: _", state_transition_time, previous_state AS "previous_state: _", previous_state_transition_time, creation_time, last_modified, attempt, node_pk, node_id, pool_id, start_time, end_time, exit_code, result, failure_info, retry_count, requeue_count, last_retry_time, last_requeue_time, satisfies_dependants, files_expire_at, container_id FROM tasks "# + $rest
            $(, $arg)*
        )
    };
}

/// A validated task to add.
#[derive(Clone, Debug)]
pub struct NewTask {
    pub id: String,
    pub display_name: Option<String>,
    pub command_line: String,
    pub environment: Value,
    pub required_slots: i32,
    pub max_wall_clock_ticks: Option<i64>,
    pub retention_ticks: i64,
    pub max_task_retry_count: i32,
    pub depends_on: Option<Value>,
    /// The ids `depends_on` names.
    pub dependency_ids: Vec<String>,
    /// The `taskIdRanges` of `depends_on`, inclusive, disjoint and sorted; resolved in SQL
    /// (`task_number`), never expanded.
    pub dependency_ranges: Vec<(i64, i64)>,
    pub exit_conditions: Option<Value>,
    pub extra: Value,
    /// A `TaskFiles` as JSON, or null when the task moves no files.
    pub files: Option<Value>,
    /// A job manager task with killJobOnCompletion: its completion ends the job.
    pub kills_job: bool,
    /// A job manager task with allowLowPriorityNode false: dedicated nodes only.
    pub dedicated_only: bool,
    /// authenticationTokenSettings with access to the job: each attempt gets a token for it.
    pub job_token: bool,
}

pub async fn get(db: impl PgExecutor<'_>, job_pk: i64, id: &str) -> sqlx::Result<Option<TaskRow>> {
    select_tasks!("WHERE job_pk = $1 AND lower(id) = lower($2)", job_pk, id,)
        .fetch_optional(db)
        .await
}

pub async fn get_by_pk(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<TaskRow>> {
    select_tasks!("WHERE pk = $1", pk,).fetch_optional(db).await
}

/// A page of a job's tasks in task order, after the task with pk `after`.
///
/// The scan must walk the (job_pk, pk) index in order and stop after `limit` rows. Right after a
/// bulk add, before autovacuum has analyzed the table, the planner believes the job is a hundred
/// rows and reads every remaining task of the job through a bitmap and sorts them: 40-60 ms for a
/// 1,000-task page of a 300,000-task job instead of 0.3 ms (measured with EXPLAIN ANALYZE). So the
/// page is read with bitmap scans off for its own transaction.
pub async fn list(
    db: &sqlx::PgPool,
    job_pk: i64,
    after: i64,
    limit: i64,
    state: Option<&str>,
) -> sqlx::Result<Vec<TaskRow>> {
    let mut tx = db.begin().await?;
    sqlx::query!("SET LOCAL enable_bitmapscan = off")
        .execute(&mut *tx)
        .await?;
    let rows = select_tasks!(
        "WHERE job_pk = $1 AND pk > $2 AND ($4::text IS NULL OR state = $4) ORDER BY pk LIMIT $3",
        job_pk,
        after,
        limit,
        state,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows)
}

#[derive(Debug, Default)]
pub struct Counts {
    pub active: i64,
    pub running: i64,
    pub completed: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub active_slots: i64,
    pub running_slots: i64,
    pub completed_slots: i64,
    pub succeeded_slots: i64,
    pub failed_slots: i64,
}

/// A job's task counts: its folded counts by state plus the moves not folded yet (migration
/// 36), so a few rows whatever the job's size.
pub async fn counts(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<Counts> {
    let by_state = sqlx::query!(
        r#"SELECT state AS "state!", result AS "result!", sum(tasks)::bigint AS "tasks!", sum(slots)::bigint AS "slots!"
         FROM (SELECT state, result, tasks, slots FROM task_state_counts WHERE job_pk = $1
               UNION ALL
               SELECT state, result, tasks, slots FROM task_state_moves WHERE job_pk = $1) c
         GROUP BY state, result"#,
        job_pk,
    )
    .fetch_all(db)
    .await?;
    let mut c = Counts::default();
    for row in by_state {
        let (tasks, slots) = (row.tasks, row.slots);
        let add = |count: &mut i64, slot_count: &mut i64| {
            *count += tasks;
            *slot_count += slots;
        };
        match (row.state.as_str(), row.result.as_str()) {
            ("active", _) => add(&mut c.active, &mut c.active_slots),
            ("preparing" | "running", _) => add(&mut c.running, &mut c.running_slots),
            ("completed", result) => {
                add(&mut c.completed, &mut c.completed_slots);
                match result {
                    "success" => add(&mut c.succeeded, &mut c.succeeded_slots),
                    "failure" => add(&mut c.failed, &mut c.failed_slots),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Ok(c)
}

/// Folds the task moves written so far into the jobs' counts by state; the moves of jobs that
/// are gone go with them. Readers see the counts before or after, the same either way.
pub async fn fold_counts(db: impl PgExecutor<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        r#"WITH moved AS (DELETE FROM task_state_moves RETURNING job_pk, state, result, tasks, slots),
              sums AS (SELECT job_pk, state, result, sum(tasks) AS tasks, sum(slots) AS slots
                       FROM moved GROUP BY job_pk, state, result)
         INSERT INTO task_state_counts (job_pk, state, result, tasks, slots)
         SELECT s.job_pk, s.state, s.result, s.tasks, s.slots
         FROM sums s
         -- Locked, so that a job deleted meanwhile is seen gone rather than failing the key.
         WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.pk = s.job_pk FOR KEY SHARE)
         ON CONFLICT (job_pk, state, result) DO UPDATE SET tasks = task_state_counts.tasks + EXCLUDED.tasks,
             slots = task_state_counts.slots + EXCLUDED.slots"#,
    )
    .execute(db)
    .await?;
    Ok(())
}

pub async fn delete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM tasks WHERE pk = $1", pk,)
        .execute(db)
        .await?;
    Ok(())
}

/// Whether the job `job_id` of `account` has a task `task_id`.
pub async fn exists(
    db: impl PgExecutor<'_>,
    account: &str,
    job_id: &str,
    task_id: &str,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM tasks t JOIN jobs j ON j.pk = t.job_pk
                        WHERE j.account = $1 AND j.id = $2 AND t.id = $3) AS "exists!""#,
        account,
        job_id,
        task_id,
    )
    .fetch_one(db)
    .await
}

/// A task directory to remove: on which node, of which job and task.
pub struct TaskDirOnNode {
    pub node_id: String,
    pub job_id: String,
    pub task_id: String,
}

/// Task directories whose retention has run out, on nodes still in their pools (a node that
/// left took its directories with it); marks them all removed, and drops their kept output. Only a completed task's: one
/// made active again runs in its directory.
pub async fn take_expired_files(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> sqlx::Result<Vec<TaskDirOnNode>> {
    let rows = sqlx::query!(
        r#"WITH expired AS (UPDATE tasks t SET files_expire_at = NULL FROM jobs j
             WHERE j.pk = t.job_pk AND t.pk IN (SELECT pk FROM tasks WHERE files_expire_at < now() AND state = 'completed'
                                                ORDER BY files_expire_at LIMIT $1)
             RETURNING t.pk, j.id AS job_id, t.id AS task_id,
                       CASE WHEN t.node_pk IS NULL THEN NULL ELSE t.node_id END AS node_id),
              -- Their kept output goes with them (migration 56).
              kept AS (DELETE FROM task_outputs o USING expired e WHERE o.task_pk = e.pk)
         SELECT job_id AS "job_id!", task_id AS "task_id!", node_id FROM expired"#,
        limit,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            Some(TaskDirOnNode {
                node_id: r.node_id?,
                job_id: r.job_id,
                task_id: r.task_id,
            })
        })
        .collect())
}

/// The nodes, still in their pools, that ran tasks of the job: where its directories are.
pub async fn nodes_of_job(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT DISTINCT n.id FROM tasks t JOIN nodes n ON n.pk = t.node_pk WHERE t.job_pk = $1",
        job_pk
    )
    .fetch_all(db)
    .await
}

/// How a task ended, and on which node (None once the node is gone).
pub struct TaskEnd {
    pub state: TaskState,
    pub exit_code: Option<i32>,
    pub result: Option<String>,
    pub failure_info: Option<Value>,
    pub node_id: Option<String>,
}

/// A task's outcome, found by its job's account and id (any case) and its own id.
pub async fn outcome(
    db: impl PgExecutor<'_>,
    account: &str,
    job_id: &str,
    task_id: &str,
) -> sqlx::Result<Option<TaskEnd>> {
    sqlx::query_as!(
        TaskEnd,
        r#"SELECT t.state AS "state: TaskState", t.exit_code, t.result, t.failure_info,
                  CASE WHEN t.node_pk IS NULL THEN NULL ELSE t.node_id END AS node_id
         FROM jobs j JOIN tasks t ON t.job_pk = j.pk
         WHERE j.account = $1 AND lower(j.id) = lower($2) AND t.id = $3"#,
        account,
        job_id,
        task_id,
    )
    .fetch_optional(db)
    .await
}

/// Replaces a task's constraints.
pub async fn update_constraints(
    db: impl PgExecutor<'_>,
    pk: i64,
    max_wall_clock_ticks: Option<i64>,
    retention_ticks: i64,
    max_task_retry_count: i32,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE tasks SET max_wall_clock_ticks = $2, retention_ticks = $3, max_task_retry_count = $4, last_modified = now() WHERE pk = $1",
        pk,
        max_wall_clock_ticks,
        retention_ticks,
        max_task_retry_count,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Makes a task that completed with a failure active again, its retries counted afresh and its
/// directory no longer due to be removed (its retention counts from its next end). `None`
/// if it is not such a task; else whether its failure satisfied its dependants (which then must
/// count it as unmet again: `unsatisfy_dependants`).
pub async fn reactivate(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar!(
        "UPDATE tasks t SET previous_state = t.state, previous_state_transition_time = t.state_transition_time, state = 'active', \
            state_transition_time = now(), last_modified = now(), retry_count = 0, exit_code = NULL, result = NULL, \
            failure_info = NULL, end_time = NULL, satisfies_dependants = false, files_expire_at = NULL \
         FROM (SELECT pk, satisfies_dependants FROM tasks WHERE pk = $1 FOR UPDATE) old \
         WHERE t.pk = old.pk AND t.state = 'completed' AND t.result = 'failure' \
         RETURNING old.satisfies_dependants",
        pk,
    )
    .fetch_optional(db)
    .await
}

/// The tasks depending on `pk` count it as an unmet dependency again.
pub async fn unsatisfy_dependants(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE tasks SET unmet_deps = unmet_deps + 1 WHERE pk IN (SELECT task_pk FROM task_deps WHERE depends_on_pk = $1)",
        pk,
    )
        .execute(db)
        .await?;
    Ok(())
}
