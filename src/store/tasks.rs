//! The tasks table: adding, reading, and the transitions of an attempt. Every way a running
//! attempt ends (it finished, was terminated, requeued, or its job went away) goes through
//! `end_attempt`-style updates guarded by the attempt number, and releases the node's slots in
//! the same transaction, so slots and outcomes are counted exactly once.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgExecutor, Postgres, Transaction};

use crate::domain::job::TaskState;

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
    pub unmet_deps: i32,
    pub state: String,
    pub state_transition_time: DateTime<Utc>,
    pub previous_state: Option<String>,
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
}

/// Reads whole `TaskRow`s: `select_tasks!("WHERE ...", args)` is the checked query over every column.
macro_rules! select_tasks {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            TaskRow,
            r#"SELECT pk, job_pk, id, display_name, command_line, environment, required_slots, max_wall_clock_ticks, retention_ticks, max_task_retry_count, depends_on, exit_conditions, extra, unmet_deps, state AS "state: _", state_transition_time, previous_state AS "previous_state: _", previous_state_transition_time, creation_time, last_modified, attempt, node_pk, node_id, pool_id, start_time, end_time, exit_code, result, failure_info, retry_count, requeue_count, last_retry_time, last_requeue_time, satisfies_dependants, files_expire_at FROM tasks "# + $rest
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
}

/// Ids among `ids` that the job has already.
///
/// One lookup per id by the whole (job_pk, lower(id)) key, whatever the job's size. The earlier
/// `lower(id) = ANY(SELECT ...)` form let the cached generic plan of this prepared statement
/// (made while the table was small) read every task of the job for each request: while a job
/// grew to 300,000 tasks it took 95% of the database's time and added tasks at 3,900/s.
pub async fn existing_ids(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    ids: &[String],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT t.id FROM unnest($2::text[]) AS x(id), \
         LATERAL (SELECT id FROM tasks WHERE job_pk = $1 AND lower(id) = lower(x.id) LIMIT 1) t",
        job_pk,
        ids,
    )
    .fetch_all(db)
    .await
}

/// For each inclusive range, the lowest number in it that is neither a task id of the job (see
/// `task_number` in the migrations) nor among `also` (the numbered tasks being added with them);
/// None if the range is complete. Reads only the numbers in the ranges, through the index.
pub async fn first_missing_in_ranges(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    ranges: &[(i64, i64)],
    also: &[i64],
) -> sqlx::Result<Vec<Option<i64>>> {
    let (lo, hi): (Vec<i64>, Vec<i64>) = ranges.iter().copied().unzip();
    // The k-th number present (from 1) is lo + k - 1 until the first gap. `hi - lo` rather than
    // the range's size, which overflows for 0..i64::MAX.
    sqlx::query_scalar!(
        "SELECT (SELECT coalesce(min(r.lo + u.k - 1) FILTER (WHERE u.n <> r.lo + u.k - 1), \
                                 CASE WHEN count(*) <= r.hi - r.lo THEN r.lo + count(*) END) \
                 FROM (SELECT n, row_number() OVER (ORDER BY n) AS k FROM ( \
                     SELECT task_number(id) AS n FROM tasks WHERE job_pk = $1 AND task_number(id) BETWEEN r.lo AND r.hi \
                     UNION SELECT n FROM unnest($4::bigint[]) AS b(n) WHERE n BETWEEN r.lo AND r.hi) s) u) \
         FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS r(lo, hi, i) ORDER BY r.i",
        job_pk,
        lo as _,
        hi as _,
        also,
    )
    .fetch_all(db)
    .await
}

/// Inserts tasks (ids known to be new) with their dependencies, in the caller's transaction.
/// Dependencies must name tasks of the job or of this batch. Returns the ids inserted.
pub async fn insert_many(
    tx: &mut Transaction<'_, Postgres>,
    job_pk: i64,
    tasks: &[NewTask],
) -> sqlx::Result<Vec<String>> {
    macro_rules! column {
        ($f:expr) => {
            tasks.iter().map($f).collect::<Vec<_>>()
        };
    }
    let inserted = sqlx::query_scalar!(
        r#"INSERT INTO tasks (job_pk, id, display_name, command_line, environment, required_slots, max_wall_clock_ticks,
            retention_ticks, max_task_retry_count, depends_on, exit_conditions, extra, state, state_transition_time,
            creation_time, last_modified)
         SELECT $1, * , 'active', now(), now(), now() FROM unnest($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::int[],
            $7::bigint[], $8::bigint[], $9::int[], $10::jsonb[], $11::jsonb[], $12::jsonb[])
         ON CONFLICT (job_pk, lower(id)) DO NOTHING RETURNING id"#,
        job_pk,
        &column!(|t| t.id.clone()) as _,
        &column!(|t| t.display_name.clone()) as _,
        &column!(|t| t.command_line.clone()) as _,
        &column!(|t| t.environment.clone()) as _,
        &column!(|t| t.required_slots) as _,
        &column!(|t| t.max_wall_clock_ticks) as _,
        &column!(|t| t.retention_ticks) as _,
        &column!(|t| t.max_task_retry_count) as _,
        &column!(|t| t.depends_on.clone()) as _,
        &column!(|t| t.exit_conditions.clone()) as _,
        &column!(|t| t.extra.clone()) as _,
    )
    .fetch_all(&mut **tx)
    .await?;

    // One row per (task, id depended on) and per (task, range); ranges stay ranges.
    let (mut from, mut to) = (Vec::new(), Vec::new());
    let (mut range_from, mut lo, mut hi) = (Vec::new(), Vec::new(), Vec::new());
    for task in tasks {
        for dep in &task.dependency_ids {
            from.push(task.id.clone());
            to.push(dep.clone());
        }
        for &(start, end) in &task.dependency_ranges {
            range_from.push(task.id.clone());
            lo.push(start);
            hi.push(end);
        }
    }
    if from.is_empty() && range_from.is_empty() {
        return Ok(inserted);
    }
    // Lock the tasks depended on, so that none completes unseen between counting it as unmet
    // and the dependency row being visible to its completion.
    sqlx::query!(
        "SELECT 1 AS locked FROM tasks WHERE job_pk = $1 AND lower(id) = ANY(ARRAY(SELECT lower(x) FROM unnest($2::text[]) AS x)) FOR SHARE",
        job_pk,
        &to,
    )
    .fetch_all(&mut **tx)
        .await?;
    sqlx::query!(
        "SELECT 1 AS locked FROM tasks d, unnest($2::bigint[], $3::bigint[]) AS r(lo, hi) \
         WHERE d.job_pk = $1 AND task_number(d.id) BETWEEN r.lo AND r.hi FOR SHARE OF d",
        job_pk,
        &lo,
        &hi,
    )
    .fetch_all(&mut **tx)
    .await?;
    sqlx::query!(
        "INSERT INTO task_deps (task_pk, depends_on_pk) \
         SELECT t.pk, d.pk FROM unnest($2::text[], $3::text[]) AS e(task_id, dep_id) \
             JOIN tasks t ON t.job_pk = $1 AND lower(t.id) = lower(e.task_id) \
             JOIN tasks d ON d.job_pk = $1 AND lower(d.id) = lower(e.dep_id) \
         UNION SELECT t.pk, d.pk FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS r(task_id, lo, hi) \
             JOIN tasks t ON t.job_pk = $1 AND lower(t.id) = lower(r.task_id) \
             JOIN tasks d ON d.job_pk = $1 AND task_number(d.id) BETWEEN r.lo AND r.hi \
         ON CONFLICT DO NOTHING",
        job_pk,
        &from as _,
        &to,
        &range_from,
        &lo,
        &hi,
    )
    .execute(&mut **tx)
    .await?;
    from.extend(range_from);
    sqlx::query!(
        "UPDATE tasks t SET unmet_deps = (SELECT count(*) FROM task_deps td JOIN tasks d ON d.pk = td.depends_on_pk \
             WHERE td.task_pk = t.pk AND NOT (d.state = 'completed' AND d.satisfies_dependants)) \
         WHERE t.job_pk = $1 AND lower(t.id) = ANY(ARRAY(SELECT lower(x) FROM unnest($2::text[]) AS x))",
        job_pk,
        &from as _,
    )
    .execute(&mut **tx)
    .await?;
    Ok(inserted)
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

#[derive(Debug, Default, sqlx::FromRow)]
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

pub async fn counts(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<Counts> {
    sqlx::query_as!(
        Counts,
        r#"SELECT count(*) FILTER (WHERE state IN ('active', 'preparing')) AS "active!",
                count(*) FILTER (WHERE state = 'running') AS "running!",
                count(*) FILTER (WHERE state = 'completed') AS "completed!",
                count(*) FILTER (WHERE state = 'completed' AND result = 'success') AS "succeeded!",
                count(*) FILTER (WHERE state = 'completed' AND result = 'failure') AS "failed!",
                coalesce(sum(required_slots) FILTER (WHERE state IN ('active', 'preparing')), 0) AS "active_slots!",
                coalesce(sum(required_slots) FILTER (WHERE state = 'running'), 0) AS "running_slots!",
                coalesce(sum(required_slots) FILTER (WHERE state = 'completed'), 0) AS "completed_slots!",
                coalesce(sum(required_slots) FILTER (WHERE state = 'completed' AND result = 'success'), 0) AS "succeeded_slots!",
                coalesce(sum(required_slots) FILTER (WHERE state = 'completed' AND result = 'failure'), 0) AS "failed_slots!"
         FROM tasks WHERE job_pk = $1"#,
        job_pk,
    )
    .fetch_one(db)
    .await
}

/// The attempt that ended, as the follow-up bookkeeping needs it.
#[derive(Debug, sqlx::FromRow)]
pub struct Ended {
    pub pk: i64,
    pub job_pk: i64,
    pub node_pk: Option<i64>,
    pub required_slots: i32,
    /// Whether the attempt held slots on a node (it was running).
    pub was_running: bool,
    pub state: String,
    pub satisfies_dependants: bool,
    pub result: Option<String>,
}

impl Ended {
    /// The state the task is in now.
    pub fn task_state(&self) -> Option<TaskState> {
        TaskState::parse(&self.state)
    }
}

/// How an attempt ends.
pub enum Ending<'a> {
    /// The task is done: `result` success or failure.
    Completed {
        exit_code: Option<i32>,
        result: &'a str,
        failure_info: Option<&'a Value>,
        satisfies_dependants: bool,
    },
    /// Failed with retries left: back to active, retryCount + 1.
    Retry { exit_code: Option<i32> },
    /// Its outcome is unknown or it was interrupted: back to active, requeueCount + 1.
    Requeue,
}

/// Ends the task's current attempt if it is still `attempt` (None: whatever attempt, for a task
/// that may not be running) and in one of `from` states. Releases its node's slots.
pub async fn end_attempt(
    tx: &mut Transaction<'_, Postgres>,
    pk: i64,
    attempt: Option<i32>,
    from: &[TaskState],
    ending: Ending<'_>,
) -> sqlx::Result<Option<Ended>> {
    Ok(end_attempts(tx, from, &[(pk, attempt, ending)])
        .await?
        .pop())
}

/// `end_attempt` for many tasks in three statements, whatever their number: one update of the
/// tasks, one release of their nodes' slots, one count-down of their dependants. Callers that
/// touch several nodes lock them first (`lock_nodes`), as dispatch does.
pub async fn end_attempts(
    tx: &mut Transaction<'_, Postgres>,
    from: &[TaskState],
    items: &[(i64, Option<i32>, Ending<'_>)],
) -> sqlx::Result<Vec<Ended>> {
    let (mut pks, mut attempts, mut states, mut codes) = (vec![], vec![], vec![], vec![]);
    let (mut results, mut infos, mut satisfies) = (vec![], vec![], vec![]);
    let (mut retries, mut requeues) = (vec![], vec![]);
    for (pk, attempt, ending) in items {
        let (state, code, result, info, satisfied, retry, requeue) = match ending {
            Ending::Completed {
                exit_code,
                result,
                failure_info,
                satisfies_dependants,
            } => (
                TaskState::Completed,
                *exit_code,
                Some(*result),
                failure_info.cloned(),
                *satisfies_dependants,
                0,
                0,
            ),
            Ending::Retry { exit_code } => (TaskState::Active, *exit_code, None, None, false, 1, 0),
            Ending::Requeue => (TaskState::Active, None, None, None, false, 0, 1),
        };
        pks.push(*pk);
        attempts.push(*attempt);
        states.push(state.as_str());
        codes.push(code);
        results.push(result);
        infos.push(info);
        satisfies.push(satisfied);
        retries.push(retry);
        requeues.push(requeue);
    }
    let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    let ended: Vec<Ended> = sqlx::query_as!(
        Ended,
        r#"WITH u AS (SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::int[], $5::text[], $6::jsonb[],
                        $7::bool[], $8::int[], $9::int[])
                      AS u(pk, attempt, state, exit_code, result, failure_info, satisfies, retry, requeue)),
              old AS (SELECT t.pk, t.state, t.node_pk FROM tasks t JOIN u ON u.pk = t.pk
                      WHERE (u.attempt IS NULL OR t.attempt = u.attempt) AND t.state = ANY($10)
                      ORDER BY t.pk FOR UPDATE OF t)
         UPDATE tasks t SET previous_state = t.state, previous_state_transition_time = t.state_transition_time,
            state = u.state, state_transition_time = now(), last_modified = now(),
            exit_code = u.exit_code, result = u.result, failure_info = u.failure_info, satisfies_dependants = u.satisfies,
            end_time = CASE WHEN u.state = 'completed' THEN clock_timestamp() ELSE t.end_time END,
            files_expire_at = CASE WHEN u.state = 'completed' AND t.node_pk IS NOT NULL
                THEN now() + make_interval(secs => least(t.retention_ticks, 31536000000000000) / 1e7) ELSE t.files_expire_at END,
            retry_count = t.retry_count + u.retry, last_retry_time = CASE WHEN u.retry > 0 THEN now() ELSE t.last_retry_time END,
            requeue_count = t.requeue_count + u.requeue, last_requeue_time = CASE WHEN u.requeue > 0 THEN now() ELSE t.last_requeue_time END
         FROM old JOIN u ON u.pk = old.pk WHERE t.pk = old.pk
         RETURNING t.pk, t.job_pk, old.node_pk, t.required_slots, old.state = 'running' AS "was_running!", t.state,
            t.satisfies_dependants, t.result"#,
        &pks,
        &attempts as _,
        &states as _,
        &codes as _,
        &results as _,
        &infos as _,
        &satisfies,
        &retries,
        &requeues,
        &from as _,
    )
    .fetch_all(&mut **tx)
    .await?;
    let (mut nodes, mut slots, mut succeeded) = (Vec::new(), Vec::new(), Vec::new());
    for e in ended.iter().filter(|e| e.was_running) {
        if let Some(node_pk) = e.node_pk {
            nodes.push(node_pk);
            slots.push(e.required_slots);
            succeeded.push(e.result.as_deref() == Some("success"));
        }
    }
    if !nodes.is_empty() {
        release_slots(&mut **tx, &nodes, &slots, &succeeded).await?;
    }
    let satisfied: Vec<i64> = ended
        .iter()
        .filter(|e| e.task_state() == Some(TaskState::Completed) && e.satisfies_dependants)
        .map(|e| e.pk)
        .collect();
    if !satisfied.is_empty() {
        sqlx::query!(
            "UPDATE tasks t SET unmet_deps = t.unmet_deps - d.met \
             FROM (SELECT task_pk, count(*)::int AS met FROM task_deps WHERE depends_on_pk = ANY($1) GROUP BY task_pk) d \
             WHERE t.pk = d.task_pk",
            &satisfied,
        )
        .execute(&mut **tx)
        .await?;
    }
    Ok(ended)
}

/// Locks nodes in pk order, the order dispatch locks them in, so that a transaction touching
/// several nodes cannot deadlock with a dispatch pass.
pub async fn lock_nodes(db: impl PgExecutor<'_>, node_pks: &[i64]) -> sqlx::Result<()> {
    sqlx::query!(
        "SELECT pk FROM nodes WHERE pk = ANY($1) ORDER BY pk FOR UPDATE",
        node_pks,
    )
    .fetch_all(db)
    .await?;
    Ok(())
}

/// Locks, in pk order, the nodes a job's running tasks hold.
pub async fn lock_nodes_of_job(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "SELECT pk FROM nodes WHERE pk IN (SELECT node_pk FROM tasks WHERE job_pk = $1 AND state = 'running') ORDER BY pk FOR UPDATE",
        job_pk,
    )
    .fetch_all(db)
    .await?;
    Ok(())
}

/// Gives slots back to nodes, one entry per task that held them (and whether it succeeded); a
/// node with none in use is idle again.
pub async fn release_slots(
    db: impl PgExecutor<'_>,
    node_pks: &[i64],
    slots: &[i32],
    succeeded: &[bool],
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE nodes n SET running_task_slots = greatest(n.running_task_slots - d.slots, 0), \
            running_tasks = greatest(n.running_tasks - d.tasks, 0), \
            total_tasks_succeeded = n.total_tasks_succeeded + d.succeeded, \
            state = CASE WHEN n.state = 'running' AND n.running_task_slots - d.slots <= 0 THEN 'idle' ELSE n.state END, \
            state_transition_time = CASE WHEN n.state = 'running' AND n.running_task_slots - d.slots <= 0 THEN now() ELSE n.state_transition_time END \
         FROM (SELECT node_pk, sum(s)::int AS slots, count(*)::int AS tasks, count(*) FILTER (WHERE ok)::int AS succeeded \
               FROM unnest($1::bigint[], $2::int[], $3::bool[]) AS u(node_pk, s, ok) GROUP BY node_pk) d \
         WHERE n.pk = d.node_pk",
        node_pks,
        slots,
        succeeded,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The tasks of a job that are running now (to stop them).
pub async fn running_of_job(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<Vec<(i64, i32)>> {
    sqlx::query!(
        r#"SELECT pk, attempt FROM tasks WHERE job_pk = $1 AND state = 'running'"#,
        job_pk,
    )
    .fetch_all(db)
    .await
    .map(|rows| rows.into_iter().map(|r| (r.pk, r.attempt)).collect())
}

/// The tasks running on nodes (to stop or requeue them when the nodes go).
pub async fn running_on_nodes(
    db: impl PgExecutor<'_>,
    node_pks: &[i64],
) -> sqlx::Result<Vec<(i64, i32)>> {
    sqlx::query!(
        r#"SELECT pk, attempt FROM tasks WHERE node_pk = ANY($1) AND state = 'running'"#,
        node_pks,
    )
    .fetch_all(db)
    .await
    .map(|rows| rows.into_iter().map(|r| (r.pk, r.attempt)).collect())
}

pub async fn delete(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM tasks WHERE pk = $1", pk,)
        .execute(db)
        .await?;
    Ok(())
}

/// What running an attempt needs: the task, its job's context and where it was placed.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct AttemptRow {
    pub pk: i64,
    pub job_pk: i64,
    pub attempt: i32,
    pub task_id: String,
    pub job_id: String,
    pub account: String,
    pub pool_id: Option<String>,
    pub node_id: Option<String>,
    pub node_pk: Option<i64>,
    /// Whether the node still exists and is up.
    pub node_alive: bool,
    pub command_line: String,
    pub environment: Value,
    pub common_environment: Value,
    pub max_wall_clock_ticks: Option<i64>,
    pub start_time: Option<DateTime<Utc>>,
    pub retry_count: i32,
    pub max_task_retry_count: i32,
    pub exit_conditions: Option<Value>,
    pub on_task_failure: String,
}

/// Reads `AttemptRow`s from `tasks t` and `jobs j`: `attempt_rows!("SELECT", "node_alive FROM ...",
/// args)` puts every column but `node_alive` between the two.
macro_rules! attempt_rows {
    ($head:literal, $tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            AttemptRow,
            $head + r#" t.pk, t.job_pk, t.attempt, t.id AS task_id, j.id AS job_id, j.account, t.pool_id, t.node_id, t.node_pk, t.command_line, t.environment, j.common_environment, t.max_wall_clock_ticks, t.start_time, t.retry_count, t.max_task_retry_count, t.exit_conditions, j.on_task_failure AS "on_task_failure: _", "# + $tail
            $(, $arg)*
        )
    };
}

/// Running attempts: of the tasks in `pks`, or all of them (after a restart).
pub async fn running_attempts(
    db: impl PgExecutor<'_>,
    pks: Option<&[i64]>,
) -> sqlx::Result<Vec<AttemptRow>> {
    attempt_rows!(
        "SELECT",
        r#"coalesce(n.state NOT IN ('creating', 'leavingpool', 'unusable'), false) AS "node_alive!"
         FROM tasks t JOIN jobs j ON j.pk = t.job_pk LEFT JOIN nodes n ON n.pk = t.node_pk
         WHERE t.state = 'running' AND ($1::bigint[] IS NULL OR t.pk = ANY($1)) ORDER BY t.pk"#,
        pks,
    )
    .fetch_all(db)
    .await
}

/// Of the given (task, attempt) pairs, those no longer running that attempt.
pub async fn stale_attempts(
    db: impl PgExecutor<'_>,
    pks: &[i64],
    attempts: &[i32],
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT r.pk AS "pk!" FROM unnest($1::bigint[], $2::int[]) AS r(pk, attempt)
         WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.pk = r.pk AND t.attempt = r.attempt AND t.state = 'running')"#,
        pks,
        attempts,
    )
    .fetch_all(db)
    .await
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

/// Task directories whose retention has run out: (job pk, task id); marks them removed.
pub async fn take_expired_files(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> sqlx::Result<Vec<(String, String, String)>> {
    sqlx::query!(
        r#"UPDATE tasks t SET files_expire_at = NULL FROM jobs j
         WHERE j.pk = t.job_pk AND t.pk IN (SELECT pk FROM tasks WHERE files_expire_at < now() ORDER BY files_expire_at LIMIT $1)
         RETURNING j.account, j.id AS job_id, t.id AS task_id"#,
        limit,
    )
    .fetch_all(db)
    .await
    .map(|rows| rows.into_iter().map(|r| (r.account, r.job_id, r.task_id)).collect())
}

/// Locks up to `limit` of a job's ready tasks (active, no unmet dependencies) in task order,
/// skipping those another pass holds: (pk, required slots).
pub async fn claim_ready(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    limit: i64,
) -> sqlx::Result<Vec<(i64, i32)>> {
    sqlx::query!(
        r#"SELECT pk, required_slots FROM tasks WHERE job_pk = $1 AND state = 'active' AND unmet_deps = 0
         ORDER BY pk LIMIT $2 FOR UPDATE SKIP LOCKED"#,
        job_pk,
        limit,
    )
    .fetch_all(db)
    .await
    .map(|rows| rows.into_iter().map(|r| (r.pk, r.required_slots)).collect())
}

/// Starts a new attempt of each task on its node (parallel arrays) and returns the attempts.
pub async fn start_attempts(
    db: impl PgExecutor<'_>,
    task_pks: &[i64],
    node_pks: &[i64],
) -> sqlx::Result<Vec<AttemptRow>> {
    attempt_rows!(
        "UPDATE tasks t SET previous_state = t.state, previous_state_transition_time = t.state_transition_time, \
            state = 'running', state_transition_time = now(), last_modified = now(), attempt = t.attempt + 1, \
            node_pk = u.node_pk, node_id = n.id, pool_id = p.id, start_time = clock_timestamp(), end_time = NULL, \
            exit_code = NULL, result = NULL, failure_info = NULL \
         FROM unnest($1::bigint[], $2::bigint[]) AS u(pk, node_pk) \
         JOIN nodes n ON n.pk = u.node_pk JOIN pools p ON p.pk = n.pool_pk, jobs j \
         WHERE t.pk = u.pk AND j.pk = t.job_pk \
         RETURNING",
        r#"true AS "node_alive!""#,
        task_pks,
        node_pks,
    )
    .fetch_all(db)
    .await
}

/// Whether a task is running on the node.
pub async fn any_running_on_node(db: impl PgExecutor<'_>, node_pk: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM tasks WHERE node_pk = $1 AND state = 'running') AS "running!""#,
        node_pk,
    )
    .fetch_one(db)
    .await
}

/// How a task ended: (state, exit code, result, failure info).
pub type Outcome = (String, Option<i32>, Option<String>, Option<Value>);

/// A task's outcome, found by its job's account and id (any case) and its own id.
pub async fn outcome(
    db: impl PgExecutor<'_>,
    account: &str,
    job_id: &str,
    task_id: &str,
) -> sqlx::Result<Option<Outcome>> {
    sqlx::query!(
        r#"SELECT t.state, t.exit_code, t.result, t.failure_info FROM jobs j JOIN tasks t ON t.job_pk = j.pk
         WHERE j.account = $1 AND lower(j.id) = lower($2) AND t.id = $3"#,
        account,
        job_id,
        task_id,
    )
    .fetch_optional(db)
    .await
    .map(|row| row.map(|r| (r.state, r.exit_code, r.result, r.failure_info)))
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

/// Makes a task that completed with a failure active again, its retries counted afresh. `None`
/// if it is not such a task; else whether its failure satisfied its dependants (which then must
/// count it as unmet again: `unsatisfy_dependants`).
pub async fn reactivate(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar!(
        "UPDATE tasks t SET previous_state = t.state, previous_state_transition_time = t.state_transition_time, state = 'active', \
            state_transition_time = now(), last_modified = now(), retry_count = 0, exit_code = NULL, result = NULL, \
            failure_info = NULL, end_time = NULL, satisfies_dependants = false \
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
