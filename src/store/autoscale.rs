//! Autoscale: a pool's formula and last run, the samples formulas read, and applying a run's
//! target.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use crate::domain::agent::NodeLoad;
use crate::domain::pool::{NodeDeallocationOption, Targets};

/// One sample of a pool: its tasks by state and its nodes.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Sample {
    pub pool_pk: i64,
    pub at: DateTime<Utc>,
    pub active: i32,
    pub running: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub dedicated: i32,
    pub usable: i32,
    /// Low-priority nodes, preempted ones included, and the preempted ones.
    pub low_priority: i32,
    pub preempted: i32,
    /// The average over the usable nodes whose agents reported: CPU use (percent of the
    /// node's vCPUs) and memory (bytes) of their commands. None when none reported.
    pub cpu_percent: Option<f64>,
    pub memory_bytes: Option<f64>,
}

/// Takes a sample of every autoscaled, active pool, in one statement: the tasks of its
/// unfinished jobs by state, its nodes, those of them that take tasks, and their `loads`.
pub async fn take_samples(
    db: impl PgExecutor<'_>,
    at: DateTime<Utc>,
    loads: &[NodeLoad],
) -> sqlx::Result<u64> {
    let column = |f: fn(&NodeLoad) -> f64| loads.iter().map(f).collect::<Vec<f64>>();
    let nodes: Vec<&str> = loads.iter().map(|l| l.node.as_str()).collect();
    let done = sqlx::query!(
        "WITH scaled AS (SELECT pk, account, id FROM pools WHERE enable_auto_scale AND state = 'active'),
         counts AS (
            SELECT s.pk,
                count(*) FILTER (WHERE t.state = 'active' AND j.state = 'active') AS active,
                count(*) FILTER (WHERE t.state IN ('preparing', 'running')) AS running,
                count(*) FILTER (WHERE t.state = 'completed' AND t.result = 'success') AS succeeded,
                count(*) FILTER (WHERE t.state = 'completed' AND t.result = 'failure') AS failed
            FROM scaled s
            JOIN jobs j ON j.account = s.account AND lower(j.pool_id) = lower(s.id)
                AND j.state NOT IN ('completed', 'deleting')
            JOIN tasks t ON t.job_pk = j.pk
            GROUP BY s.pk),
         loads AS (
            SELECT n.pool_pk,
                avg(least(100.0, 100.0 * l.busy / nullif(l.win * p.vcpus, 0))) AS cpu,
                avg(l.memory) AS memory
            FROM unnest($2::text[], $3::float8[], $4::float8[], $5::float8[]) AS l(node, busy, win, memory)
            JOIN nodes n ON n.id = l.node JOIN pools p ON p.pk = n.pool_pk
            WHERE n.state IN ('idle', 'running')
            GROUP BY n.pool_pk)
         INSERT INTO pool_samples (pool_pk, at, active, running, succeeded, failed, dedicated, usable,
            low_priority, preempted, cpu_percent, memory_bytes)
         SELECT s.pk, $1, coalesce(c.active, 0), coalesce(c.running, 0), coalesce(c.succeeded, 0),
            coalesce(c.failed, 0), coalesce(n.dedicated, 0), coalesce(n.usable, 0),
            coalesce(n.low_priority, 0), coalesce(n.preempted, 0), lo.cpu, lo.memory
         FROM scaled s LEFT JOIN counts c ON c.pk = s.pk LEFT JOIN loads lo ON lo.pool_pk = s.pk
         LEFT JOIN LATERAL (
            SELECT count(*) FILTER (WHERE n.is_dedicated) AS dedicated,
                count(*) FILTER (WHERE n.state IN ('idle', 'running')) AS usable,
                count(*) FILTER (WHERE NOT n.is_dedicated) AS low_priority,
                count(*) FILTER (WHERE n.state = 'preempted') AS preempted
            FROM nodes n WHERE n.pool_pk = s.pk AND n.state <> 'leavingpool') n ON true
         ON CONFLICT DO NOTHING",
        at,
        &nodes as &[&str],
        &column(|l| l.busy_ms),
        &column(|l| l.window_ms),
        &column(|l| l.memory_bytes),
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Forgets samples older than `before`.
pub async fn drop_samples(db: impl PgExecutor<'_>, before: DateTime<Utc>) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM pool_samples WHERE at < $1", before)
        .execute(db)
        .await?;
    Ok(())
}

/// The samples since `since` of each of `pool_pks`, by pool and oldest first, in one query.
pub async fn samples_of(
    db: impl PgExecutor<'_>,
    pool_pks: &[i64],
    since: DateTime<Utc>,
) -> sqlx::Result<Vec<Sample>> {
    sqlx::query_as!(
        Sample,
        "SELECT pool_pk, at, active, running, succeeded, failed, dedicated, usable, low_priority,
            preempted, cpu_percent, memory_bytes
         FROM pool_samples
         WHERE pool_pk = ANY($1) AND at >= $2 ORDER BY pool_pk, at",
        pool_pks,
        since,
    )
    .fetch_all(db)
    .await
}

/// The autoscaled pools whose evaluation is due.
pub async fn due(db: impl PgExecutor<'_>, now: DateTime<Utc>) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT pk FROM pools WHERE enable_auto_scale AND state = 'active' AND auto_scale_next <= $1
         ORDER BY auto_scale_next LIMIT 1000",
        now,
    )
    .fetch_all(db)
    .await
}

/// Turns autoscale on with `formula` every `interval_ticks`, and records the first run; the
/// target it gives is applied by [`apply`]. None: no such pool, or it is being deleted.
pub async fn enable(
    db: impl PgExecutor<'_>,
    pk: i64,
    formula: &str,
    interval_ticks: i64,
    next: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE pools SET enable_auto_scale = true, auto_scale_formula = $2,
            auto_scale_interval_ticks = $3, auto_scale_next = $4, last_modified = now()
         WHERE pk = $1 AND state = 'active'",
        pk,
        formula,
        interval_ticks,
        next,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Turns autoscale off; the target stays where the last run put it.
pub async fn disable(db: impl PgExecutor<'_>, pk: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE pools SET enable_auto_scale = false, auto_scale_next = NULL, last_modified = now()
         WHERE pk = $1",
        pk,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Records a run (Azure's AutoScaleRun) and when the next is due; with a target (the run
/// succeeded), sets it, resizing the pool if it changed. A pool stopping a resize keeps
/// stopping; the next run after that applies.
pub async fn apply(
    db: impl PgExecutor<'_>,
    pk: i64,
    run: &Value,
    next: Option<DateTime<Utc>>,
    target: Option<(Targets, NodeDeallocationOption)>,
) -> sqlx::Result<()> {
    let (target, option) = target.map_or((None, None), |(t, o)| (Some(t), Some(o.as_str())));
    sqlx::query!(
        "UPDATE pools SET auto_scale_run = $2, auto_scale_next = coalesce($3, auto_scale_next),
            allocation_state = CASE WHEN ($4::int IS NOT NULL AND ($4 <> target_dedicated_nodes OR $6 <> target_low_priority_nodes)) AND allocation_state = 'steady'
                THEN 'resizing' ELSE allocation_state END,
            allocation_state_transition_time = CASE WHEN ($4::int IS NOT NULL AND ($4 <> target_dedicated_nodes OR $6 <> target_low_priority_nodes)) AND allocation_state = 'steady'
                THEN now() ELSE allocation_state_transition_time END,
            resize_errors = CASE WHEN ($4::int IS NOT NULL AND ($4 <> target_dedicated_nodes OR $6 <> target_low_priority_nodes)) THEN '[]' ELSE resize_errors END,
            target_dedicated_nodes = CASE WHEN allocation_state = 'stopping' THEN target_dedicated_nodes
                ELSE coalesce($4, target_dedicated_nodes) END,
            target_low_priority_nodes = CASE WHEN allocation_state = 'stopping' THEN target_low_priority_nodes
                ELSE coalesce($6, target_low_priority_nodes) END,
            node_deallocation_option = coalesce($5, node_deallocation_option),
            last_modified = CASE WHEN ($4::int IS NOT NULL AND ($4 <> target_dedicated_nodes OR $6 <> target_low_priority_nodes)) THEN now() ELSE last_modified END
         WHERE pk = $1 AND state = 'active'",
        pk,
        run,
        next,
        target.map(|t| t.dedicated),
        option,
        target.map(|t| t.low_priority),
    )
    .execute(db)
    .await?;
    Ok(())
}
