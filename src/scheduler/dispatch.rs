//! Tasks -> slots. One pass reads the free slots of every usable node, walks each pool's active
//! jobs in priority order (jobs of equal priority sharing the slots evenly, or the oldest first,
//! by the pool's jobDefaultOrder), claims at most as many ready tasks as there are free slots
//! (in task order, `FOR UPDATE SKIP LOCKED`), places them (`spread` or `pack`) and records every
//! placement in one transaction. Its cost follows the free slots, not the queue's length.
//!
//! The attempts that ended since the last pass are recorded first, in the same transaction:
//! their slots are filled by the commit that frees them, and a busy pool pays one transaction
//! (and one wait for the disk) for each round of ends and starts, not two.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use sqlx::PgPool;

use super::ahead::{Ahead, AheadSetting, Recent};
use super::complete::{self, Finished};
use super::ready_cursor;
use crate::domain::placement::{hide, place_ahead, place_near, restore, FreeNode, Needs};
use crate::domain::pool::{JobDefaultOrder, NodeFillType};
use crate::store::{
    self,
    jobs::JobRoom,
    tasks::{AttemptRow, PerNode},
};

type Tx<'t> = sqlx::Transaction<'t, sqlx::Postgres>;

/// Records the outcomes `ended`, then claims and records placements; returns the attempts now
/// running, as the executor starts them. Each pass logs its time at debug level
/// (`batchpool::scheduler::dispatch=debug`), which the benchmark reads.
pub async fn pass(db: &PgPool, ended: &[Finished], ahead: &Ahead) -> sqlx::Result<Vec<AttemptRow>> {
    let started = std::time::Instant::now();
    let placed = claim(db, ended, ahead).await?;
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

/// A dispatch pass that records `ended` first (and learns from them which jobs run short, for
/// `setting`'s tasks ahead), and tells `recorded` which are in the database. If that pass
/// fails, the outcomes are recorded apart ([`complete::record_many`]: one bad record holds
/// back neither the others nor the pass), then the pass runs without them; outcomes that could not be recorded at all stay in `ended` for the next pass, as the
/// database may be back by then.
pub async fn record_and_pass(
    db: &PgPool,
    recorded: impl Fn(&[Finished]),
    ended: &mut Vec<Finished>,
    (setting, recent): (AheadSetting, &Recent),
) -> sqlx::Result<Vec<AttemptRow>> {
    recent.observe(ended);
    let ahead = &Ahead::for_pass(setting, recent);
    match pass(db, ended, ahead).await {
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
    pass(db, &[], ahead).await
}

async fn claim(db: &PgPool, ended: &[Finished], ahead: &Ahead) -> sqlx::Result<Vec<AttemptRow>> {
    let mut tx = db.begin().await?;
    if !ended.is_empty() {
        let freeing = complete::nodes_of(ended);
        store::nodes::lock_for_pass(&mut *tx, &freeing, ahead.per_slot).await?;
        complete::record_in(&mut tx, ended).await?;
    }
    let chosen = choose(&mut tx, ahead).await?;
    if chosen.task_pks.is_empty() {
        if ended.is_empty() {
            // Nothing written but the nodes' row locks: a rollback ends it without waiting for
            // a commit to reach the disk.
            tx.rollback().await?;
        } else {
            tx.commit().await?;
        }
        ready_cursor::commit(&chosen.moved);
        return Ok(Vec::new());
    }
    let placed = store::tasks::start_attempts(
        &mut *tx,
        (&chosen.task_pks, &chosen.node_pks),
        &chosen.per_node(),
    )
    .await?;
    tx.commit().await?;
    ready_cursor::commit(&chosen.moved);
    Ok(placed)
}

/// The ready tasks a pass places, each with its node.
#[derive(Default)]
struct Chosen {
    task_pks: Vec<i64>,
    node_pks: Vec<i64>,
    slots: Vec<i32>,
    /// Where the claims leave the jobs' ready cursors, once the pass is over.
    moved: Vec<ready_cursor::Moved>,
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

/// A pool's free slots as a pass fills them.
struct Filling<'c> {
    nodes: Vec<FreeNode>,
    /// Each node's index in `nodes`, by its key.
    at: HashMap<i64, usize>,
    fill: NodeFillType,
    ahead: &'c Ahead,
    /// Free slots left in the pool.
    free: i64,
    chosen: &'c mut Chosen,
}

/// What one claim of a job's ready tasks gave: how many it claimed and placed, and the last
/// task it claimed (the next claim of the job starts after it).
struct Took {
    claimed: i64,
    placed: i64,
    last: i64,
}

/// For each pool and priority shared out by [`Filling::share`], the job that was given the first
/// task the last time: the next share starts with the job after it. The leader's memory only (a
/// new leader starts over), cleared if it ever holds more than [`MAX_TURNS`] entries.
static TURNS: Mutex<BTreeMap<(i64, i32), i64>> = Mutex::new(BTreeMap::new());
const MAX_TURNS: usize = 10_000;

/// Locks the nodes with free slots and claims ready tasks for them, pool by pool: jobs in
/// priority order, and jobs of equal priority by the pool's jobDefaultOrder.
async fn choose(tx: &mut Tx<'_>, ahead: &Ahead) -> sqlx::Result<Chosen> {
    let free = store::nodes::lock_free_slots(&mut **tx, ahead.per_slot).await?;
    // A set (of up to every node). A node holds no tasks ahead while it runs a task of a job
    // not known to be short, or one in a container of its own: its agent, which starts a held
    // task as soon as its own count allows, does not count that container's slots.
    let mut hold_none: HashSet<i64> = HashSet::new();
    if ahead.per_slot > 0 {
        let nodes: Vec<i64> = free.iter().map(|n| n.node_pk).collect();
        if let Some(short) = &ahead.jobs {
            let others = store::tasks::nodes_running_other_jobs(&mut **tx, &nodes, short).await?;
            hold_none.extend(others);
        }
        let boxed = store::tasks::nodes_running_own_containers(&mut **tx, &nodes).await?;
        hold_none.extend(boxed);
    }
    let mut pools: BTreeMap<i64, (String, String, NodeFillType, JobDefaultOrder, Vec<FreeNode>)> =
        BTreeMap::new();
    for row in free {
        let entry = pools.entry(row.pool_pk).or_insert_with(|| {
            let (id, account) = (row.pool_id.clone(), row.account.clone());
            (id, account, row.fill, row.order, Vec::new())
        });
        let per_slot = if hold_none.contains(&row.node_pk) {
            0
        } else {
            ahead.per_slot
        };
        entry.4.push(FreeNode {
            dedicated: row.dedicated,
            ..FreeNode::new(row.node_pk, row.node_id, (row.free, row.slots, per_slot))
        });
    }
    let mut chosen = Chosen::default();
    for (pool_pk, (pool_id, account, fill, order, nodes)) in pools {
        let free = nodes.iter().map(|n| i64::from(n.free + n.ahead)).sum();
        let at = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node_pk, i))
            .collect();
        let mut filling = Filling {
            nodes,
            at,
            fill,
            ahead,
            free,
            chosen: &mut chosen,
        };
        let jobs = store::jobs::active_in_pool(&mut **tx, &account, &pool_id).await?;
        for equals in jobs.chunk_by(|a, b| a.priority == b.priority) {
            if filling.free <= 0 {
                break;
            }
            if order == JobDefaultOrder::None && equals.len() > 1 {
                filling.share(tx, pool_pk, equals).await?;
            } else {
                for job in equals {
                    filling.take(tx, job, filling.room(job, 0), 0).await?;
                }
            }
        }
    }
    Ok(chosen)
}

impl Filling<'_> {
    /// Takes the room to hold tasks from `node_pk`, where a task of a job not known to be short,
    /// or one in a container of its own, was just placed.
    fn hold_none_on(&mut self, node_pk: i64) {
        let Some(&i) = self.at.get(&node_pk) else {
            return;
        };
        let node = &mut self.nodes[i];
        self.free -= i64::from(std::mem::take(&mut node.ahead));
    }

    /// How many more tasks `job` may start now, having been given `placed` in this pass: the
    /// free slots, within its maxParallelTasks.
    fn room(&self, job: &JobRoom, placed: i64) -> i64 {
        if job.max_parallel_tasks < 0 {
            self.free
        } else {
            self.free
                .min(i64::from(job.max_parallel_tasks) - job.running - placed)
        }
    }

    /// Claims up to `want` of `job`'s ready tasks after task `after`, and places those that fit.
    async fn take(
        &mut self,
        tx: &mut Tx<'_>,
        job: &JobRoom,
        want: i64,
        after: i64,
    ) -> sqlx::Result<Took> {
        let mut took = Took {
            claimed: 0,
            placed: 0,
            last: after,
        };
        if want <= 0 {
            return Ok(took);
        }
        let hidden = hide(&mut self.nodes, &job.excluded);
        let (ready, from_head) = claim_ready(tx, job.pk, want, after).await?;
        took.claimed = ready.len() as i64;
        let mut outcomes = Vec::with_capacity(ready.len());
        for task in ready {
            took.last = task.pk;
            let needs = Needs {
                slots: task.required_slots,
                dedicated_only: task.dedicated_only,
                own_container: task.own_container,
            };
            let near = task.affinity.as_deref();
            let node = match place_near(&mut self.nodes, needs, self.fill, near) {
                Some(node) => {
                    if self.ahead.per_slot > 0
                        && (!self.ahead.may_hold(job.pk) || task.own_container)
                    {
                        // Nothing is held behind a task of a job not known to be short, or
                        // beside one in a container of its own.
                        self.hold_none_on(node);
                    }
                    Some(node)
                }
                None if self.ahead.may_hold(job.pk) => place_ahead(&mut self.nodes, needs),
                None => None,
            };
            outcomes.push((task.pk, node.is_some()));
            if let Some(node_pk) = node {
                self.chosen.task_pks.push(task.pk);
                self.chosen.node_pks.push(node_pk);
                self.chosen.slots.push(task.required_slots);
                self.free -= i64::from(task.required_slots);
                took.placed += 1;
            }
        }
        restore(&mut self.nodes, hidden);
        if let Some(to) = ready_cursor::after_claim(outcomes) {
            self.chosen.moved.push(ready_cursor::Moved {
                job_pk: job.pk,
                after: to,
                from_head,
            });
        }
        Ok(took)
    }

    /// Shares the free slots evenly among `jobs`, of equal priority in pool `pool_pk`
    /// (jobDefaultOrder `none`): in rounds, each job that may still take tasks claims its share
    /// of what is free, until the slots or the jobs' ready tasks run out. The job that claims
    /// first turns from one share to the next ([`TURNS`]), so slots that do not divide evenly,
    /// or come free one at a time, go to each job in turn.
    async fn share(&mut self, tx: &mut Tx<'_>, pool_pk: i64, jobs: &[JobRoom]) -> sqlx::Result<()> {
        let key = (pool_pk, jobs[0].priority);
        let start = first_turn(key, jobs);
        // Each job that may take more: its index, the tasks it was given, its last claimed task.
        let mut open: Vec<(usize, i64, i64)> = (0..jobs.len())
            .map(|i| ((i + start) % jobs.len(), 0, 0))
            .collect();
        let mut first_given = None;
        while self.free > 0 && !open.is_empty() {
            let share = (self.free + open.len() as i64 - 1) / open.len() as i64;
            let mut next = Vec::with_capacity(open.len());
            for (i, placed, after) in open {
                let want = share.min(self.room(&jobs[i], placed));
                let took = self.take(tx, &jobs[i], want, after).await?;
                if took.placed > 0 && first_given.is_none() {
                    first_given = Some(jobs[i].pk);
                }
                if want > 0 && took.claimed == want && took.placed == want {
                    next.push((i, placed + took.placed, took.last));
                }
            }
            open = next;
        }
        if let Some(job_pk) = first_given {
            let mut turns = TURNS.lock().unwrap_or_else(|e| e.into_inner());
            if turns.len() >= MAX_TURNS {
                turns.clear();
            }
            turns.insert(key, job_pk);
        }
        Ok(())
    }
}

/// Claims up to `want` of job `job_pk`'s ready tasks after task `after`, in pk order. The first
/// claim of a job in a pass (`after` 0) starts after the job's [`ready_cursor`]; if that finds
/// fewer than `want`, the tasks before the cursor are claimed too. Also says whether the claim
/// covered every ready task from the head of the queue up to the last it returned.
async fn claim_ready(
    tx: &mut Tx<'_>,
    job_pk: i64,
    want: i64,
    after: i64,
) -> sqlx::Result<(Vec<store::tasks::Claimed>, bool)> {
    let from = if after == 0 {
        ready_cursor::start(job_pk)
    } else {
        after
    };
    let mut ready = store::tasks::claim_ready(&mut **tx, (job_pk, from), want).await?;
    let left = want - ready.len() as i64;
    if after != 0 || from == 0 || left == 0 {
        return Ok((ready, from == 0));
    }
    // Our own claims are not skipped: a claim from the head returns the tasks before the
    // cursor first, then those just claimed after it.
    let mut before = store::tasks::claim_ready(&mut **tx, (job_pk, 0), left).await?;
    let covered = (before.len() as i64) < left || before.last().is_some_and(|t| t.pk > from);
    before.retain(|t| t.pk <= from);
    before.append(&mut ready);
    Ok((before, covered))
}

/// Where a share of `jobs` starts: after the job given the first task last time, or, if that
/// job has left the group, at the first job made after it.
fn first_turn(key: (i64, i32), jobs: &[JobRoom]) -> usize {
    let last = TURNS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .copied();
    let Some(last) = last else { return 0 };
    match jobs.iter().position(|j| j.pk == last) {
        Some(at) => (at + 1) % jobs.len(),
        None => jobs.iter().position(|j| j.pk > last).unwrap_or(0),
    }
}
