//! Tasks -> slots. One pass reads the free slots of every usable node, walks each pool's active
//! jobs in priority order (then age), claims at most as many ready tasks as there are free slots
//! (in task order, `FOR UPDATE SKIP LOCKED`), places them (`spread` or `pack`) and records every
//! placement in one transaction. Its cost follows the free slots, not the queue's length.
//!
//! The attempts that ended since the last pass are recorded first, in the same transaction:
//! their slots are filled by the commit that frees them, and a busy pool pays one transaction
//! (and one wait for the disk) for each round of ends and starts, not two.

use std::collections::{BTreeMap, HashMap};

use sqlx::PgPool;

use super::complete::{self, Finished};
use crate::domain::placement::{place, FreeNode, Needs};
use crate::domain::pool::NodeFillType;
use crate::store::{
    self,
    tasks::{AttemptRow, PerNode},
};

/// Records the outcomes `ended`, then claims and records placements; returns the attempts now
/// running, as the executor starts them. Each pass logs its time at debug level
/// (`batchpool::scheduler::dispatch=debug`), which the benchmark reads.
pub async fn pass(db: &PgPool, ended: &[Finished]) -> sqlx::Result<Vec<AttemptRow>> {
    let started = std::time::Instant::now();
    let placed = claim(db, ended).await?;
    crate::metrics::DISPATCH_PASS.observe(started.elapsed());
    for attempt in placed.iter().filter(|a| a.attempt == 1) {
        if let Some(start) = attempt.start_time {
            let waited = (start - attempt.creation_time).to_std().unwrap_or_default();
            crate::metrics::SUBMIT_TO_RUNNING.observe(waited);
        }
    }
    tracing::debug!(
        placed = placed.len(),
        micros = started.elapsed().as_micros() as u64,
        "dispatch pass"
    );
    Ok(placed)
}

/// A dispatch pass that records `ended` first, and tells `recorded` which are in the
/// database. If that pass fails, the outcomes are recorded apart ([`complete::record_many`]:
/// one bad record holds back neither the others nor the pass), then the pass runs without
/// them; outcomes that could not be recorded at all stay in `ended` for the next pass, as the
/// database may be back by then.
pub async fn record_and_pass(
    db: &PgPool,
    recorded: impl Fn(&[Finished]),
    ended: &mut Vec<Finished>,
) -> sqlx::Result<Vec<AttemptRow>> {
    match pass(db, ended).await {
        Ok(placed) => {
            recorded(ended);
            ended.clear();
            return Ok(placed);
        }
        Err(e) if ended.is_empty() => return Err(e),
        Err(e) => {
            tracing::warn!(error = %e, count = ended.len(), "a pass with outcomes failed; recording them apart")
        }
    }
    let (done, left) = complete::record_many(db, std::mem::take(ended)).await;
    recorded(&done);
    if !left.is_empty() {
        tracing::error!(count = left.len(), "recording outcomes failed; retrying");
    }
    *ended = left;
    pass(db, &[]).await
}

/// Nodes that failed a job's preparation task take none of its tasks: their free slots are set
/// aside while its tasks are placed.
fn hide(nodes: &mut [FreeNode], excluded: &[i64]) -> Vec<(usize, i32)> {
    nodes
        .iter_mut()
        .enumerate()
        .filter(|(_, n)| excluded.contains(&n.node_pk))
        .map(|(i, n)| (i, std::mem::take(&mut n.free)))
        .collect()
}

fn restore(nodes: &mut [FreeNode], hidden: Vec<(usize, i32)>) {
    for (i, free) in hidden {
        nodes[i].free = free;
    }
}

async fn claim(db: &PgPool, ended: &[Finished]) -> sqlx::Result<Vec<AttemptRow>> {
    let mut tx = db.begin().await?;
    if !ended.is_empty() {
        store::nodes::lock_for_pass(&mut *tx, &complete::nodes_of(ended)).await?;
        complete::record_in(&mut tx, ended).await?;
    }
    let chosen = choose(&mut tx).await?;
    if chosen.task_pks.is_empty() {
        if ended.is_empty() {
            // Nothing written but the nodes' row locks: a rollback ends it without waiting for
            // a commit to reach the disk.
            tx.rollback().await?;
        } else {
            tx.commit().await?;
        }
        return Ok(Vec::new());
    }
    let placed = store::tasks::start_attempts(
        &mut *tx,
        (&chosen.task_pks, &chosen.node_pks),
        &chosen.per_node(),
    )
    .await?;
    tx.commit().await?;
    Ok(placed)
}

/// The ready tasks a pass places, each with its node.
#[derive(Default)]
struct Chosen {
    task_pks: Vec<i64>,
    node_pks: Vec<i64>,
    slots: Vec<i32>,
}

impl Chosen {
    /// For each node given tasks: the slots and the tasks it was given.
    fn per_node(&self) -> PerNode {
        let mut per_node: HashMap<i64, (i32, i32)> = HashMap::new();
        for (node, s) in self.node_pks.iter().zip(&self.slots) {
            let e = per_node.entry(*node).or_default();
            e.0 += s;
            e.1 += 1;
        }
        let mut columns = PerNode::default();
        for (n, (s, c)) in per_node {
            columns.nodes.push(n);
            columns.slots.push(s);
            columns.tasks.push(c);
        }
        columns
    }
}

/// Locks the nodes with free slots and claims ready tasks for them, pool by pool, jobs in
/// priority order.
async fn choose(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>) -> sqlx::Result<Chosen> {
    let free = store::nodes::lock_free_slots(&mut **tx).await?;
    let mut pools: BTreeMap<i64, (String, String, NodeFillType, Vec<FreeNode>)> = BTreeMap::new();
    for row in free {
        let entry = pools.entry(row.pool_pk).or_insert_with(|| {
            (
                row.pool_id.clone(),
                row.account.clone(),
                row.fill,
                Vec::new(),
            )
        });
        entry.3.push(FreeNode {
            node_pk: row.node_pk,
            free: row.free,
            dedicated: row.dedicated,
        });
    }
    let mut chosen = Chosen::default();
    for (pool_id, account, fill, mut nodes) in pools.into_values() {
        let mut total_free: i64 = nodes.iter().map(|n| i64::from(n.free)).sum();
        let jobs = store::jobs::active_in_pool(&mut **tx, &account, &pool_id).await?;
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
            let hidden = hide(&mut nodes, &job.excluded);
            let ready = store::tasks::claim_ready(&mut **tx, job.pk, room).await?;
            for task in ready {
                let needs = Needs {
                    slots: task.required_slots,
                    dedicated_only: task.dedicated_only,
                };
                if let Some(node_pk) = place(&mut nodes, needs, fill) {
                    chosen.task_pks.push(task.pk);
                    chosen.node_pks.push(node_pk);
                    chosen.slots.push(task.required_slots);
                    total_free -= i64::from(task.required_slots);
                }
            }
            restore(&mut nodes, hidden);
        }
    }
    Ok(chosen)
}
