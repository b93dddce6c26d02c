//! Ending a task's attempts (with the node's slots and the dependants' counts in the same
//! transaction), and the running attempts a stop looks for. Starting them is `running.rs`.

use serde_json::Value;
use sqlx::{PgExecutor, Postgres, Transaction};

use crate::domain::agent::Usage;
use crate::domain::job::TaskState;

/// The attempt that ended, as the follow-up bookkeeping needs it.
#[derive(Debug, sqlx::FromRow)]
pub struct Ended {
    pub pk: i64,
    pub job_pk: i64,
    pub node_pk: Option<i64>,
    pub required_slots: i32,
    /// Whether the attempt held slots on a node (it was running).
    pub was_running: bool,
    pub state: TaskState,
    pub satisfies_dependants: bool,
    pub result: Option<String>,
    /// Whether its job lets tasks depend on others (set when the job is made, never changed):
    /// if not, no task depends on it.
    pub job_uses_dependencies: bool,
    /// Whether its job ends once all its tasks have (onAllTasksComplete terminatejob).
    pub job_ends_with_tasks: bool,
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

impl<'a> Ending<'a> {
    /// Stopped from outside (terminated, deleted, its node removed): a failure without an exit
    /// code, described by `info`, that its dependants do not count as met.
    pub fn stopped(info: &'a Value) -> Self {
        Ending::Completed {
            exit_code: None,
            result: "failure",
            failure_info: Some(info),
            satisfies_dependants: false,
        }
    }
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
    Ok(end_attempts(tx, from, &[(pk, attempt, ending)], &[])
        .await?
        .pop())
}

/// `end_attempt` for many tasks in two statements, whatever their number: one that updates the
/// tasks and gives their nodes' slots back (a node with none in use is idle again), and one
/// count-down of their dependants, only where some are. Callers that
/// touch several nodes lock them first (`lock_nodes`), as dispatch does. An attempt that was on
/// its node adds its wall clock time, and `usage[i]` (what item `i`'s command used, as its
/// node's agent measured it; none past the slice's end), to its task's totals.
pub async fn end_attempts(
    tx: &mut Transaction<'_, Postgres>,
    from: &[TaskState],
    items: &[(i64, Option<i32>, Ending<'_>)],
    usage: &[Usage],
) -> sqlx::Result<Vec<Ended>> {
    let c = EndingColumns::of(items, usage);
    let ended: Vec<Ended> = sqlx::query_as!(
        Ended,
        r#"WITH u AS (SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::int[], $5::text[], $6::jsonb[],
                        $7::bool[], $8::int[], $9::int[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[])
                      AS u(pk, attempt, state, exit_code, result, failure_info, satisfies, retry, requeue,
                           user_ms, kernel_ms, read_bytes, write_bytes)),
              old AS (SELECT t.pk, t.state, t.node_pk FROM tasks t JOIN u ON u.pk = t.pk
                      WHERE (u.attempt IS NULL OR t.attempt = u.attempt) AND t.state = ANY($10)
                      ORDER BY t.pk FOR UPDATE OF t),
              ended AS (UPDATE tasks t SET previous_state = t.state, previous_state_transition_time = t.state_transition_time,
            state = u.state, state_transition_time = now(), last_modified = now(),
            exit_code = u.exit_code, result = u.result, failure_info = u.failure_info, satisfies_dependants = u.satisfies,
            end_time = CASE WHEN u.state = 'completed' THEN clock_timestamp() ELSE t.end_time END,
            files_expire_at = CASE WHEN u.state = 'completed' AND t.node_pk IS NOT NULL
                THEN clock_timestamp() + make_interval(secs => least(t.retention_ticks, 31536000000000000) / 1e7) ELSE t.files_expire_at END,
            retry_count = t.retry_count + u.retry, last_retry_time = CASE WHEN u.retry > 0 THEN now() ELSE t.last_retry_time END,
            requeue_count = t.requeue_count + u.requeue, last_requeue_time = CASE WHEN u.requeue > 0 THEN now() ELSE t.last_requeue_time END,
            wall_clock_ms = t.wall_clock_ms + CASE WHEN old.state IN ('preparing', 'running') AND t.start_time IS NOT NULL
                THEN GREATEST(0, (extract(epoch FROM clock_timestamp() - t.start_time) * 1000)::bigint) ELSE 0 END,
            user_cpu_ms = t.user_cpu_ms + u.user_ms, kernel_cpu_ms = t.kernel_cpu_ms + u.kernel_ms,
            read_bytes = t.read_bytes + u.read_bytes, write_bytes = t.write_bytes + u.write_bytes
         FROM old JOIN u ON u.pk = old.pk WHERE t.pk = old.pk
         RETURNING t.pk, t.job_pk, old.node_pk, t.required_slots, old.state IN ('preparing', 'running') AS was_running, t.state,
            t.satisfies_dependants, t.result),
              freed AS (UPDATE nodes n SET running_task_slots = greatest(n.running_task_slots - d.slots, 0),
                    running_tasks = greatest(n.running_tasks - d.tasks, 0), total_tasks_succeeded = n.total_tasks_succeeded + d.succeeded,
                    state = CASE WHEN n.state = 'running' AND n.running_task_slots - d.slots <= 0 THEN 'idle' ELSE n.state END,
                    state_transition_time = CASE WHEN n.state = 'running' AND n.running_task_slots - d.slots <= 0 THEN now() ELSE n.state_transition_time END
                 FROM (SELECT node_pk, sum(required_slots)::int AS slots, count(*)::int AS tasks,
                              count(*) FILTER (WHERE result = 'success')::int AS succeeded
                       FROM ended WHERE was_running AND node_pk IS NOT NULL GROUP BY node_pk) d
                 WHERE n.pk = d.node_pk)
         SELECT e.pk AS "pk!", e.job_pk AS "job_pk!", e.node_pk, e.required_slots AS "required_slots!", e.was_running AS "was_running!",
            e.state AS "state!: _", e.satisfies_dependants AS "satisfies_dependants!", e.result,
            coalesce(j.uses_task_dependencies, false) AS "job_uses_dependencies!",
            coalesce(j.on_all_tasks_complete = 'terminatejob', false) AS "job_ends_with_tasks!"
         FROM ended e LEFT JOIN jobs j ON j.pk = e.job_pk"#,
        &c.pks,
        &c.attempts as _,
        &c.states as _,
        &c.codes as _,
        &c.results as _,
        &c.infos as _,
        &c.satisfies,
        &c.retries,
        &c.requeues,
        from as _,
        &c.user_ms,
        &c.kernel_ms,
        &c.read_bytes,
        &c.write_bytes,
    )
    .fetch_all(&mut **tx)
    .await?;
    count_down_dependants(&mut **tx, &ended).await?;
    Ok(ended)
}

/// The columns of an `end_attempts` update, one entry per attempt.
#[derive(Default)]
struct EndingColumns<'a> {
    pks: Vec<i64>,
    attempts: Vec<Option<i32>>,
    states: Vec<TaskState>,
    codes: Vec<Option<i32>>,
    results: Vec<Option<&'a str>>,
    infos: Vec<Option<Value>>,
    satisfies: Vec<bool>,
    retries: Vec<i32>,
    requeues: Vec<i32>,
    user_ms: Vec<i64>,
    kernel_ms: Vec<i64>,
    read_bytes: Vec<i64>,
    write_bytes: Vec<i64>,
}

impl<'a> EndingColumns<'a> {
    fn of(items: &[(i64, Option<i32>, Ending<'a>)], usage: &[Usage]) -> Self {
        let mut c = EndingColumns::default();
        let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (i, (pk, attempt, ending)) in items.iter().enumerate() {
            let used = usage.get(i).copied().unwrap_or_default();
            c.user_ms.push(big(used.user_ms));
            c.kernel_ms.push(big(used.kernel_ms));
            c.read_bytes.push(big(used.read_bytes));
            c.write_bytes.push(big(used.write_bytes));
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
                Ending::Retry { exit_code } => {
                    (TaskState::Active, *exit_code, None, None, false, 1, 0)
                }
                Ending::Requeue => (TaskState::Active, None, None, None, false, 0, 1),
            };
            c.pks.push(*pk);
            c.attempts.push(*attempt);
            c.states.push(state);
            c.codes.push(code);
            c.results.push(result);
            c.infos.push(info);
            c.satisfies.push(satisfied);
            c.retries.push(retry);
            c.requeues.push(requeue);
        }
        c
    }
}

/// The dependants of tasks that completed and satisfy them have one unmet dependency fewer.
/// In jobs that use no dependencies (most), no statement: even one that changes nothing costs
/// its triggers.
async fn count_down_dependants(db: impl PgExecutor<'_>, ended: &[Ended]) -> sqlx::Result<()> {
    let satisfied: Vec<i64> = ended
        .iter()
        .filter(|e| {
            e.state == TaskState::Completed && e.satisfies_dependants && e.job_uses_dependencies
        })
        .map(|e| e.pk)
        .collect();
    if satisfied.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "UPDATE tasks t SET unmet_deps = t.unmet_deps - d.met \
         FROM (SELECT task_pk, count(*)::int AS met FROM task_deps WHERE depends_on_pk = ANY($1) GROUP BY task_pk) d \
         WHERE t.pk = d.task_pk",
        &satisfied,
    )
    .execute(db)
    .await?;
    Ok(())
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
        "SELECT pk FROM nodes WHERE pk IN (SELECT node_pk FROM tasks WHERE job_pk = $1 AND state IN ('preparing', 'running')) ORDER BY pk FOR UPDATE",
        job_pk,
    )
    .fetch_all(db)
    .await?;
    Ok(())
}

/// The tasks of a job that are running now (to stop them).
pub async fn running_of_job(db: impl PgExecutor<'_>, job_pk: i64) -> sqlx::Result<Vec<(i64, i32)>> {
    sqlx::query!(
        r#"SELECT pk, attempt FROM tasks WHERE job_pk = $1 AND state IN ('preparing', 'running')"#,
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
        r#"SELECT pk, attempt FROM tasks WHERE node_pk = ANY($1) AND state IN ('preparing', 'running')"#,
        node_pks,
    )
    .fetch_all(db)
    .await
    .map(|rows| rows.into_iter().map(|r| (r.pk, r.attempt)).collect())
}
