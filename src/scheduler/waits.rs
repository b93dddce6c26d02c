//! The waits pass (docs/scheduling.md, "Why a task waits"): every [`PERIOD`] the leader gives
//! each job with active tasks the reason they wait ([`crate::domain::waits::explain`]), from
//! the pools, nodes, slots and queues its dispatch passes read, and keeps it for every server's
//! reads. It reads the kept task counts, not the tasks, so its cost follows the jobs and
//! nodes, not the queue's length.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use sqlx::PgPool;

use super::complete::{Finished, Outcome};
use crate::domain::waits;
use crate::store;

/// How often the leader looks again.
pub const PERIOD: Duration = Duration::from_secs(2);

/// How many of a pool's last tasks its average is over: enough that the order tasks end in
/// (the shortest of a batch first, its longest last) does not sway it.
const LAST: usize = 256;

/// The most pools remembered; past it the memory starts over.
const MAX_POOLS: usize = 100_000;

/// How long each pool's last [`LAST`] tasks ran (from their placement to their end, in
/// seconds) and when they ended, by account and pool id in lower case: the leader's memory only, learnt
/// from the outcomes its dispatch passes record (a new leader learns again). By pool, not by
/// job: a new job's first tasks to end are its shortest, and its waiting tasks wait for the
/// tasks of the jobs before it.
#[derive(Default)]
pub struct Durations(Mutex<HashMap<(String, String), VecDeque<(std::time::Instant, f64)>>>);

impl Durations {
    pub fn observe(&self, ended: &[Finished]) {
        let (now, instant) = (chrono::Utc::now(), std::time::Instant::now());
        let mut pools = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if pools.len() > MAX_POOLS {
            pools.clear();
        }
        for (a, outcome, _) in ended {
            let Some(start) = a
                .start_time
                .filter(|_| matches!(outcome, Outcome::Exited(_)))
            else {
                continue;
            };
            let Some(pool) = &a.pool_id else {
                continue;
            };
            let took = (now - start).to_std().unwrap_or_default().as_secs_f64();
            let last = pools
                .entry((a.account.clone(), pool.to_lowercase()))
                .or_default();
            if last.len() == LAST {
                last.pop_front();
            }
            last.push_back((instant, took));
        }
    }

    /// The pool's last tasks' mean duration, and the mean time between their ends (None
    /// until two ended apart), if any ended.
    fn of(&self, account: &str, pool: &str) -> Option<(f64, Option<f64>)> {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let last = known.get(&(account.to_string(), pool.to_lowercase()))?;
        let (first, end) = (last.front()?.0, last.back()?.0);
        let mean = last.iter().map(|(_, d)| d).sum::<f64>() / last.len() as f64;
        let span = end.duration_since(first).as_secs_f64();
        let gap = (last.len() > 1 && span > 0.0).then(|| span / (last.len() - 1) as f64);
        Some((mean, gap))
    }
}

/// One pass: reads, explains, keeps.
pub async fn pass(db: &PgPool, durations: &Durations) -> sqlx::Result<()> {
    let now = chrono::Utc::now();
    let jobs = store::waits::jobs(db).await?;
    let (accounts, ids): (Vec<String>, Vec<String>) = jobs
        .iter()
        .map(|j| (j.account.clone(), j.pool_id.clone()))
        .unzip();
    let mut pools = store::waits::pools(db, (&accounts, &ids)).await?;
    for pool in &mut pools {
        if let Some((mean, gap)) = durations.of(&pool.account, &pool.id) {
            (pool.task_seconds, pool.end_gap) = (Some(mean), gap);
        }
    }
    store::waits::keep(db, &waits::explain(&jobs, &pools), now).await
}
