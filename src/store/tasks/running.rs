//! Attempts on their nodes: claiming ready tasks and starting their attempts, the attempts that
//! run (for the executor and after a restart), and the ones ended elsewhere.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::PgExecutor;

use crate::domain::files::{PoolPackage, TaskFiles};
use crate::domain::job::TaskFailureMode;
use crate::domain::job_prep::JobPreparationTask;
use crate::domain::pool::EnvironmentSetting;

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
    pub environment: Json<Vec<EnvironmentSetting>>,
    pub common_environment: Json<Vec<EnvironmentSetting>>,
    pub max_wall_clock_ticks: Option<i64>,
    pub start_time: Option<DateTime<Utc>>,
    /// When the task was added.
    pub creation_time: DateTime<Utc>,
    pub retry_count: i32,
    pub max_task_retry_count: i32,
    pub exit_conditions: Option<Value>,
    pub on_task_failure: TaskFailureMode,
    pub files: Option<Json<TaskFiles>>,
    pub preparation_task: Option<Json<JobPreparationTask>>,
    /// The application packages installed on the attempt's node (its pool's, as they were
    /// when the node started).
    pub node_packages: Option<Json<Vec<PoolPackage>>>,
    /// A job manager task whose completion ends its job.
    pub kills_job: bool,
    pub required_slots: i32,
    /// The task slots of a node of the attempt's pool.
    pub pool_slots: Option<i32>,
    /// Its attempts get a token for its job's operations (authenticationTokenSettings).
    pub job_token: bool,
    /// Who it runs as: its `userIdentity`, as `api::batch::identity` checked and kept it.
    pub user_identity: Option<Value>,
}

/// Reads `AttemptRow`s from `tasks t` and `jobs j`: `attempt_rows!("SELECT", "node_alive FROM ...",
/// args)` puts every column but `node_alive` between the two.
macro_rules! attempt_rows {
    ($head:literal, $tail:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            AttemptRow,
            $head + r#" t.pk, t.job_pk, t.attempt, t.id AS task_id, j.id AS job_id, j.account, t.pool_id, t.node_id, t.node_pk, t.command_line, t.environment AS "environment: _", j.common_environment AS "common_environment: _", t.max_wall_clock_ticks, t.start_time, t.creation_time, t.retry_count, t.max_task_retry_count, t.exit_conditions, j.on_task_failure AS "on_task_failure: _", t.files AS "files: _", j.preparation_task AS "preparation_task: _", t.kills_job, t.required_slots, t.job_token, t.extra -> 'userIdentity' AS user_identity, "# + $tail
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
        r#"n.application_packages AS "node_packages: _", p.task_slots_per_node AS "pool_slots?", coalesce(n.state NOT IN ('creating', 'leavingpool', 'unusable'), false) AS "node_alive!"
         FROM tasks t JOIN jobs j ON j.pk = t.job_pk LEFT JOIN nodes n ON n.pk = t.node_pk LEFT JOIN pools p ON p.pk = n.pool_pk
         WHERE t.state IN ('preparing', 'running') AND ($1::bigint[] IS NULL OR t.pk = ANY($1)) ORDER BY t.pk"#,
        pks,
    )
    .fetch_all(db)
    .await
}

/// Of the given (task, attempt) pairs, those no longer running that attempt. Each pair is
/// looked up by its task's key: the partial index of running tasks, which the planner would
/// rather scan, holds an entry for every attempt that ran lately until vacuum clears them, and
/// this question comes with every dispatch pass.
pub async fn stale_attempts(
    db: impl PgExecutor<'_>,
    pks: &[i64],
    attempts: &[i32],
) -> sqlx::Result<Vec<(i64, i32)>> {
    let rows = sqlx::query!(
        r#"SELECT r.pk AS "pk!", r.attempt AS "attempt!" FROM unnest($1::bigint[], $2::int[]) AS r(pk, attempt)
         LEFT JOIN LATERAL (SELECT t.attempt, t.state FROM tasks t WHERE t.pk = r.pk) t ON true
         WHERE t.attempt IS DISTINCT FROM r.attempt OR t.state NOT IN ('preparing', 'running')"#,
        pks,
        attempts,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.pk, r.attempt)).collect())
}

/// Locks up to `limit` of a job's ready tasks (active, no unmet dependencies) after task `after`
/// (0: from the first) in task order, skipping those another pass holds: (pk, required slots).
/// `pk + 0` is the order only the ready queue's index keeps (migration 39), so the planner never
/// walks the job's ended tasks instead.
///
/// The statement is planned at each run, not kept prepared. A connection's prepared statement
/// soon gets a generic plan, made once from the table's size then; made while `tasks` was empty
/// (a new installation, all estimates one row), it read every unfinished task of the job and
/// sorted them (`tasks_unfinished`), on that connection until the next analyze: 6-15 ms a pass
/// at 100,000 queued tasks, in about one benchmark run of three. Planning costs about 0.1 ms.
pub async fn claim_ready(
    db: impl PgExecutor<'_>,
    (job_pk, after): (i64, i64),
    limit: i64,
) -> sqlx::Result<Vec<Claimed>> {
    sqlx::query_as(
        "SELECT pk, required_slots, dedicated_only, extra->'affinityInfo'->>'affinityId' AS affinity, \
                coalesce(files ? 'containerSettings', false) AS own_container \
         FROM tasks WHERE job_pk = $1 AND state = 'active' AND unmet_deps = 0 AND pk + 0 > $3 \
         ORDER BY pk + 0 LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(job_pk)
    .bind(limit)
    .bind(after)
    .persistent(false)
    .fetch_all(db)
    .await
}

/// A task dispatch has claimed: its pk, the slots it needs, and whether only a dedicated node
/// may take it.
#[derive(sqlx::FromRow)]
pub struct Claimed {
    pub pk: i64,
    pub required_slots: i32,
    pub dedicated_only: bool,
    /// The affinityId of the node it prefers (affinityInfo), if any.
    pub affinity: Option<String>,
    /// Whether it runs in a container of its own (containerSettings), which the node's agent
    /// does not start: it never waits on a node for a slot to free.
    pub own_container: bool,
}

/// Starts a new attempt of each task on its node (parallel arrays) and returns the attempts.
/// The same statement adds them to their nodes (`per_node`: each node given tasks, with the
/// slots and the tasks it was given), which are running now.
pub async fn start_attempts(
    db: impl PgExecutor<'_>,
    (task_pks, node_pks): (&[i64], &[i64]),
    per_node: &PerNode,
) -> sqlx::Result<Vec<AttemptRow>> {
    attempt_rows!(
        "WITH placed AS (UPDATE nodes n SET running_task_slots = n.running_task_slots + d.slots, \
            total_tasks_run = n.total_tasks_run + d.tasks, running_tasks = n.running_tasks + d.tasks, \
            state = 'running', state_transition_time = CASE WHEN n.state = 'running' THEN n.state_transition_time ELSE now() END \
         FROM unnest($3::bigint[], $4::int[], $5::int[]) AS d(pk, slots, tasks) WHERE n.pk = d.pk) \
         UPDATE tasks t SET previous_state = t.state, previous_state_transition_time = t.state_transition_time, \
            state = CASE WHEN t.files ?| array['resourceFiles', 'applicationPackageReferences'] THEN 'preparing' ELSE 'running' END, \
            state_transition_time = now(), last_modified = now(), attempt = t.attempt + 1, \
            node_pk = u.node_pk, node_id = n.id, pool_id = p.id, start_time = clock_timestamp(), end_time = NULL, \
            exit_code = NULL, result = NULL, failure_info = NULL, container_id = NULL \
         FROM unnest($1::bigint[], $2::bigint[]) AS u(pk, node_pk) \
         JOIN nodes n ON n.pk = u.node_pk JOIN pools p ON p.pk = n.pool_pk, jobs j \
         WHERE t.pk = u.pk AND j.pk = t.job_pk \
         RETURNING",
        r#"n.application_packages AS "node_packages: _", p.task_slots_per_node AS "pool_slots?", true AS "node_alive!""#,
        task_pks,
        node_pks,
        &per_node.nodes,
        &per_node.slots,
        &per_node.tasks,
    )
    .fetch_all(db)
    .await
}

/// What a batch of placements adds to each node given tasks: parallel columns.
#[derive(Debug, Default)]
pub struct PerNode {
    pub nodes: Vec<i64>,
    pub slots: Vec<i32>,
    pub tasks: Vec<i32>,
}

/// The container an attempt runs in (its task has containerSettings).
pub async fn set_container(
    db: impl PgExecutor<'_>,
    pk: i64,
    attempt: i32,
    container_id: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE tasks SET container_id = $3 WHERE pk = $1 AND attempt = $2",
        pk,
        attempt,
        container_id,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// A preparing attempt's resource files are in place: it is running now.
pub async fn mark_running(db: impl PgExecutor<'_>, pk: i64, attempt: i32) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE tasks SET previous_state = state, previous_state_transition_time = state_transition_time, \
            state = 'running', state_transition_time = now(), last_modified = now() \
         WHERE pk = $1 AND attempt = $2 AND state = 'preparing'",
        pk,
        attempt,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// Whether a task is running on the node.
/// When the retention of the files of the last task that ran on the node runs out (None: no
/// task's files are kept there).
pub async fn files_kept_on_node_until(
    db: impl PgExecutor<'_>,
    node_pk: i64,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar!(
        "SELECT max(files_expire_at) FROM tasks WHERE node_pk = $1",
        node_pk,
    )
    .fetch_one(db)
    .await
}

/// The node's disk is gone (a reimage): no task's files are kept there any more.
pub async fn forget_files_on_node(db: impl PgExecutor<'_>, node_pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE tasks SET files_expire_at = NULL WHERE node_pk = $1 AND files_expire_at IS NOT NULL",
        node_pk,
    )
    .execute(db)
    .await
    .map(drop)
}

/// Of `nodes`, those running (or preparing) a task of a job not among `jobs`.
pub async fn nodes_running_other_jobs(
    db: impl PgExecutor<'_>,
    nodes: &[i64],
    jobs: &[i64],
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT node_pk AS "node_pk!" FROM tasks
         WHERE node_pk = ANY($1) AND state IN ('preparing', 'running') AND job_pk <> ALL($2)"#,
        nodes,
        jobs,
    )
    .fetch_all(db)
    .await
}

/// Of `nodes`, those running (or preparing) a task in a container of its own, which their
/// agents do not count among the tasks they run.
pub async fn nodes_running_own_containers(
    db: impl PgExecutor<'_>,
    nodes: &[i64],
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT node_pk AS "node_pk!" FROM tasks
         WHERE node_pk = ANY($1) AND state IN ('preparing', 'running') AND files ? 'containerSettings'"#,
        nodes,
    )
    .fetch_all(db)
    .await
}

pub async fn any_running_on_node(db: impl PgExecutor<'_>, node_pk: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM tasks WHERE node_pk = $1 AND state IN ('preparing', 'running')) AS "running!""#,
        node_pk,
    )
    .fetch_one(db)
    .await
}

/// The id of the job of a token's task attempt (account, job, task and attempt by their keys),
/// while that attempt is preparing or running; None once it ended or was requeued.
pub async fn token_job(
    db: impl PgExecutor<'_>,
    t: &crate::domain::task_token::TaskToken,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        "SELECT j.id FROM tasks t JOIN jobs j ON j.pk = t.job_pk \
         WHERE t.pk = $1 AND t.job_pk = $2 AND t.attempt = $3 AND j.account = $4 \
           AND t.state IN ('preparing', 'running')",
        t.task_pk,
        t.job_pk,
        t.attempt,
        &t.account,
    )
    .fetch_optional(db)
    .await
}
