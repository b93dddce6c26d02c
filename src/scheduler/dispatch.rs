//! Tasks -> slots. One pass reads the free slots of every usable node, walks each pool's active
//! jobs in priority order (then age), claims at most as many ready tasks as there are free slots
//! (in task order, `FOR UPDATE SKIP LOCKED`), places them (`spread` or `pack`) and records every
//! placement in one transaction. Its cost follows the free slots, not the queue's length.

use std::collections::{BTreeMap, HashMap};

use sqlx::PgPool;

use crate::domain::placement::{place, FreeNode};
use crate::domain::pool::NodeFillType;
use crate::store::{self, tasks::AttemptRow};

#[derive(sqlx::FromRow)]
struct FreeRow {
    node_pk: i64,
    pool_pk: i64,
    pool_id: String,
    account: String,
    free: i32,
    fill: String,
}

#[derive(sqlx::FromRow)]
struct JobRoom {
    pk: i64,
    max_parallel_tasks: i32,
    running: i64,
}

/// Claims and records placements; returns the attempts now running, as the executor starts them. Each pass logs its
/// time at debug level (`batchpool::scheduler::dispatch=debug`), which the benchmark reads.
pub async fn pass(db: &PgPool) -> sqlx::Result<Vec<AttemptRow>> {
    let started = std::time::Instant::now();
    let placed = claim(db).await?;
    tracing::debug!(
        placed = placed.len(),
        micros = started.elapsed().as_micros() as u64,
        "dispatch pass"
    );
    Ok(placed)
}

async fn claim(db: &PgPool) -> sqlx::Result<Vec<AttemptRow>> {
    let mut tx = db.begin().await?;
    let free: Vec<FreeRow> = sqlx::query_as(
        "SELECT n.pk AS node_pk, p.pk AS pool_pk, p.id AS pool_id, p.account, \
                p.task_slots_per_node - n.running_task_slots AS free, p.node_fill_type AS fill \
         FROM nodes n JOIN pools p ON p.pk = n.pool_pk \
         WHERE n.state IN ('idle', 'running') AND p.state = 'active' AND n.running_task_slots < p.task_slots_per_node \
         ORDER BY n.pk FOR UPDATE OF n",
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut pools: BTreeMap<i64, (String, String, NodeFillType, Vec<FreeNode>)> = BTreeMap::new();
    for row in free {
        let entry = pools.entry(row.pool_pk).or_insert_with(|| {
            (
                row.pool_id.clone(),
                row.account.clone(),
                NodeFillType::parse(&row.fill).unwrap_or(NodeFillType::Spread),
                Vec::new(),
            )
        });
        entry.3.push(FreeNode {
            node_pk: row.node_pk,
            free: row.free,
        });
    }

    let (mut task_pks, mut node_pks, mut slots) = (Vec::new(), Vec::new(), Vec::new());
    for (pool_id, account, fill, mut nodes) in pools.into_values() {
        let mut total_free: i64 = nodes.iter().map(|n| i64::from(n.free)).sum();
        let jobs: Vec<JobRoom> = sqlx::query_as(
            "SELECT j.pk, j.max_parallel_tasks, \
                    (SELECT count(*) FROM tasks t WHERE t.job_pk = j.pk AND t.state = 'running') AS running \
             FROM jobs j WHERE j.account = $1 AND lower(j.pool_id) = lower($2) AND j.state = 'active' \
             ORDER BY j.priority DESC, j.creation_time, j.pk",
        )
        .bind(&account)
        .bind(&pool_id)
        .fetch_all(&mut *tx)
        .await?;
        for job in jobs {
            if total_free <= 0 {
                break;
            }
            let room = if job.max_parallel_tasks < 0 {
                total_free
            } else {
                total_free.min(i64::from(job.max_parallel_tasks) - job.running)
            };
            if room <= 0 {
                continue;
            }
            let ready: Vec<(i64, i32)> = sqlx::query_as(
                "SELECT pk, required_slots FROM tasks WHERE job_pk = $1 AND state = 'active' AND unmet_deps = 0 \
                 ORDER BY pk LIMIT $2 FOR UPDATE SKIP LOCKED",
            )
            .bind(job.pk)
            .bind(room)
            .fetch_all(&mut *tx)
            .await?;
            for (task_pk, required) in ready {
                if let Some(node_pk) = place(&mut nodes, required, fill) {
                    task_pks.push(task_pk);
                    node_pks.push(node_pk);
                    slots.push(required);
                    total_free -= i64::from(required);
                }
            }
        }
    }
    if task_pks.is_empty() {
        // Nothing written but the nodes' row locks: a rollback ends it without waiting for a
        // commit to reach the disk.
        tx.rollback().await?;
        return Ok(Vec::new());
    }
    let placed: Vec<AttemptRow> = sqlx::query_as(&format!(
        "UPDATE tasks t SET previous_state = t.state, previous_state_transition_time = t.state_transition_time, \
            state = 'running', state_transition_time = now(), last_modified = now(), attempt = t.attempt + 1, \
            node_pk = u.node_pk, node_id = n.id, pool_id = p.id, start_time = clock_timestamp(), end_time = NULL, \
            exit_code = NULL, result = NULL, failure_info = NULL \
         FROM unnest($1::bigint[], $2::bigint[]) AS u(pk, node_pk) \
         JOIN nodes n ON n.pk = u.node_pk JOIN pools p ON p.pk = n.pool_pk, jobs j \
         WHERE t.pk = u.pk AND j.pk = t.job_pk \
         RETURNING {}, true AS node_alive",
        store::tasks::ATTEMPT_COLUMNS
    ))
    .bind(&task_pks)
    .bind(&node_pks)
    .fetch_all(&mut *tx)
    .await?;
    let mut per_node: HashMap<i64, (i32, i32)> = HashMap::new();
    for (node, s) in node_pks.iter().zip(&slots) {
        let e = per_node.entry(*node).or_default();
        e.0 += s;
        e.1 += 1;
    }
    let (nodes, node_slots, node_tasks): (Vec<i64>, Vec<i32>, Vec<i32>) = per_node
        .into_iter()
        .map(|(n, (s, c))| (n, s, c))
        .fold((vec![], vec![], vec![]), |mut acc, (n, s, c)| {
            acc.0.push(n);
            acc.1.push(s);
            acc.2.push(c);
            acc
        });
    sqlx::query(
        "UPDATE nodes n SET running_task_slots = n.running_task_slots + d.slots, total_tasks_run = n.total_tasks_run + d.tasks, running_tasks = n.running_tasks + d.tasks, \
            state = 'running', state_transition_time = CASE WHEN n.state = 'running' THEN n.state_transition_time ELSE now() END \
         FROM unnest($1::bigint[], $2::int[], $3::int[]) AS d(pk, slots, tasks) WHERE n.pk = d.pk",
    )
    .bind(&nodes)
    .bind(&node_slots)
    .bind(&node_tasks)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(placed)
}
