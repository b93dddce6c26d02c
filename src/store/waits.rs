//! Why jobs' tasks wait: what the leader's waits pass reads (every job with active tasks, and
//! their pools' nodes) and keeps (`job_waits`, migration 55), and what a task read adds.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{PgExecutor, PgPool};

use crate::domain::waits::{JobInput, JobWait, PoolInput};

/// Every job with active tasks that may run (active, disabling, disabled or enabling), with its
/// counts: active and running from the kept counts (a few rows a job), ready counted from the
/// ready queue only for a job that uses dependencies (in any other, every active task is
/// ready).
pub async fn jobs(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<JobInput>> {
    let rows = sqlx::query!(
        r#"WITH c AS (SELECT job_pk, state, sum(tasks)::bigint AS tasks
                     FROM (SELECT job_pk, state, tasks FROM task_state_counts
                           UNION ALL SELECT job_pk, state, tasks FROM task_state_moves) x
                     WHERE state <> 'completed' GROUP BY job_pk, state)
         SELECT j.pk, j.account, j.pool_id, j.state AS "state: crate::domain::job::JobState",
                j.priority, j.max_parallel_tasks, j.creation_time, a.tasks AS "active!",
                coalesce((SELECT sum(r.tasks) FROM c r WHERE r.job_pk = j.pk AND r.state <> 'active'), 0)::bigint AS "running!",
                CASE WHEN j.uses_task_dependencies
                     THEN (SELECT count(*) FROM tasks t WHERE t.job_pk = j.pk AND t.state = 'active' AND t.unmet_deps = 0)
                     ELSE a.tasks END AS "ready!"
         FROM c a JOIN jobs j ON j.pk = a.job_pk
         WHERE a.state = 'active' AND a.tasks > 0
           AND j.state IN ('active', 'disabling', 'disabled', 'enabling')"#
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| JobInput {
            pk: r.pk,
            account: r.account,
            pool_id: r.pool_id,
            state: r.state,
            priority: r.priority,
            max_parallel_tasks: r.max_parallel_tasks,
            creation_time: r.creation_time,
            active: r.active,
            ready: r.ready,
            running: r.running,
        })
        .collect())
}

/// The pools of `accounts` and `ids` (pairs; ids in any case), with their nodes counted by
/// what they can do.
pub async fn pools(
    db: impl PgExecutor<'_>,
    (accounts, ids): (&[String], &[String]),
) -> sqlx::Result<Vec<PoolInput>> {
    let rows = sqlx::query!(
        r#"SELECT p.account, p.id, p.state = 'deleting' AS "deleting!", p.task_slots_per_node,
                p.job_default_order AS "order: crate::domain::pool::JobDefaultOrder",
                p.target_dedicated_nodes + p.target_low_priority_nodes AS "target!",
                CASE WHEN p.enable_auto_scale THEN p.auto_scale_next END AS autoscale_next,
                count(n.pk) AS "nodes!",
                count(n.pk) FILTER (WHERE n.state IN ('idle', 'running') AND NOT n.scheduling_disabled) AS "usable!",
                count(n.pk) FILTER (WHERE n.state IN ('creating', 'starting', 'waitingforstarttask', 'rebooting', 'reimaging')) AS "starting!",
                count(n.pk) FILTER (WHERE n.state = 'starttaskfailed') AS "start_task_failed!",
                coalesce(sum(greatest(p.task_slots_per_node - n.running_task_slots, 0))
                    FILTER (WHERE n.state IN ('idle', 'running') AND NOT n.scheduling_disabled), 0)::bigint AS "free_slots!"
         FROM pools p LEFT JOIN nodes n ON n.pool_pk = p.pk
         WHERE (p.account, lower(p.id)) IN (SELECT a, lower(i) FROM unnest($1::text[], $2::text[]) AS w(a, i))
         GROUP BY p.pk"#,
        accounts,
        ids,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| PoolInput {
            account: r.account,
            id: r.id,
            deleting: r.deleting,
            slots_per_node: r.task_slots_per_node,
            order: r.order,
            target: r.target,
            autoscale_next: r.autoscale_next,
            nodes: r.nodes,
            usable: r.usable,
            starting: r.starting,
            start_task_failed: r.start_task_failed,
            free_slots: r.free_slots,
            task_seconds: None,
            end_gap: None,
        })
        .collect())
}

/// Keeps the pass's reasons (at `now`): a job's row changes only if its reason did, `since`
/// only if its code did; rows of jobs not given one go.
pub async fn keep(db: &PgPool, waits: &[JobWait], now: DateTime<Utc>) -> sqlx::Result<()> {
    let rows: Vec<_> = waits
        .iter()
        .map(|w| {
            json!({"job_pk": w.job_pk, "code": w.code, "message": w.message, "ahead": w.ahead,
                   "sharing": w.sharing, "pool_slots": w.pool_slots, "free_slots": w.free_slots,
                   "turn_seconds": w.turn_seconds})
        })
        .collect();
    let pks: Vec<i64> = waits.iter().map(|w| w.job_pk).collect();
    let mut tx = db.begin().await?;
    sqlx::query!("DELETE FROM job_waits WHERE job_pk <> ALL($1)", &pks)
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        r#"INSERT INTO job_waits (job_pk, code, message, ahead, sharing, pool_slots, free_slots, turn_seconds, since)
         SELECT w.job_pk, w.code, w.message, w.ahead, w.sharing, w.pool_slots, w.free_slots, w.turn_seconds, $2
         FROM jsonb_to_recordset($1) AS w(job_pk bigint, code text, message text, ahead bigint, sharing bigint[],
                                          pool_slots integer, free_slots bigint, turn_seconds double precision)
         -- Locked, so that a job deleted meanwhile is seen gone rather than failing the key.
         WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.pk = w.job_pk FOR KEY SHARE)
         ON CONFLICT (job_pk) DO UPDATE SET code = EXCLUDED.code, message = EXCLUDED.message,
             ahead = EXCLUDED.ahead, sharing = EXCLUDED.sharing, pool_slots = EXCLUDED.pool_slots,
             free_slots = EXCLUDED.free_slots, turn_seconds = EXCLUDED.turn_seconds,
             since = CASE WHEN job_waits.code = EXCLUDED.code THEN job_waits.since ELSE EXCLUDED.since END
         WHERE (job_waits.code, job_waits.message, job_waits.ahead, job_waits.sharing, job_waits.pool_slots,
                job_waits.free_slots, job_waits.turn_seconds)
             IS DISTINCT FROM (EXCLUDED.code, EXCLUDED.message, EXCLUDED.ahead, EXCLUDED.sharing, EXCLUDED.pool_slots,
                               EXCLUDED.free_slots, EXCLUDED.turn_seconds)"#,
        serde_json::Value::Array(rows),
        now,
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO wait_pass (at) VALUES ($1) ON CONFLICT (one) DO UPDATE SET at = EXCLUDED.at",
        now
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Jobs' reasons as the last pass gave them: each with since when, and when that pass ran.
pub struct Kept {
    pub waits: Vec<(JobWait, DateTime<Utc>)>,
    pub computed_at: Option<DateTime<Utc>>,
}

impl Kept {
    pub fn of(&self, job_pk: i64) -> Option<&(JobWait, DateTime<Utc>)> {
        self.waits.iter().find(|(w, _)| w.job_pk == job_pk)
    }
}

/// The last pass's reasons for the jobs `pks` (those it gave one, and that still have active
/// tasks).
pub async fn kept(db: impl PgExecutor<'_>, pks: &[i64]) -> sqlx::Result<Kept> {
    let rows = sqlx::query!(
        r#"SELECT (SELECT at FROM wait_pass) AS computed_at, w.job_pk AS "job_pk?",
                w.code AS "code?: crate::domain::waits::WaitCode", w.message AS "message?", w.ahead AS "ahead?",
                w.sharing AS "sharing?", w.pool_slots AS "pool_slots?", w.free_slots AS "free_slots?",
                w.turn_seconds, w.since AS "since?"
         FROM (SELECT 1) one LEFT JOIN job_waits w ON w.job_pk = ANY($1)
             -- A job whose last active task ended since the pass has no reason any more.
             AND (SELECT sum(a.tasks) FROM (SELECT c.tasks FROM task_state_counts c WHERE c.job_pk = w.job_pk AND c.state = 'active'
                                            UNION ALL
                                            SELECT m.tasks FROM task_state_moves m WHERE m.job_pk = w.job_pk AND m.state = 'active') a) > 0"#,
        pks
    )
    .fetch_all(db)
    .await?;
    let computed_at = rows.first().and_then(|r| r.computed_at);
    let waits = rows
        .into_iter()
        .filter_map(|r| {
            let wait = JobWait {
                job_pk: r.job_pk?,
                code: r.code?,
                message: r.message?,
                ahead: r.ahead?,
                sharing: r.sharing?,
                pool_slots: r.pool_slots?,
                free_slots: r.free_slots?,
                turn_seconds: r.turn_seconds,
            };
            Some((wait, r.since?))
        })
        .collect();
    Ok(Kept { waits, computed_at })
}

/// For the active tasks `pks` of job `job_pk`: the ready tasks of the job before each in the
/// queue (the order dispatch claims them in), counted once up to the last of them.
pub async fn before_in_job(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    pks: &[i64],
) -> sqlx::Result<Vec<(i64, i64)>> {
    let rows = sqlx::query!(
        r#"SELECT pk AS "pk!", before AS "before!" FROM (
             SELECT pk, row_number() OVER (ORDER BY pk + 0) - 1 AS before FROM tasks
             WHERE job_pk = $1 AND state = 'active' AND unmet_deps = 0 AND pk + 0 <= (SELECT max(x) FROM unnest($2::bigint[]) x)) r
         WHERE pk = ANY($2)"#,
        job_pk,
        pks
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.pk, r.before)).collect())
}

/// For the tasks `pks`: the ids of the first few (`each`, by id) of each one's dependencies
/// that have not completed so as to satisfy it.
pub async fn unfinished_deps(
    db: impl PgExecutor<'_>,
    pks: &[i64],
    each: i64,
) -> sqlx::Result<Vec<(i64, Vec<String>)>> {
    let rows = sqlx::query!(
        r#"SELECT w.pk AS "pk!", ARRAY(SELECT d.id FROM task_deps td JOIN tasks d ON d.pk = td.depends_on_pk
                  WHERE td.task_pk = w.pk AND NOT (d.state = 'completed' AND d.satisfies_dependants)
                  ORDER BY d.id LIMIT $2) AS "ids!"
         FROM unnest($1::bigint[]) AS w(pk)"#,
        pks,
        each
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.pk, r.ids)).collect())
}
