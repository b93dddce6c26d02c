//! The waits pass (docs/scheduling.md, "Why a task waits"): every [`PERIOD`] the leader gives
//! each job with active tasks the reason they wait ([`crate::domain::waits::explain`]), from
//! the pools, nodes, slots and queues its dispatch passes read, and keeps it for every server's
//! reads. It reads the kept task counts, not the tasks, so its cost follows the jobs and
//! nodes, not the queue's length.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::PgPool;

use super::complete::{Finished, Outcome};
use crate::domain::waits;
use crate::store;

/// How often the leader looks again.
pub const PERIOD: Duration = Duration::from_secs(2);

/// How much a task's duration moves its job's average: the last few dozen count.
const WEIGHT: f64 = 0.1;

/// The most jobs remembered; past it the memory starts over.
const MAX_JOBS: usize = 100_000;

/// How long each job's tasks ran lately (from their placement to their end, in seconds, a
/// moving average): the leader's memory only, learnt from the outcomes its dispatch passes
/// record (a new leader learns again).
#[derive(Default)]
pub struct Durations(Mutex<HashMap<i64, f64>>);

impl Durations {
    pub fn observe(&self, ended: &[Finished]) {
        let now = chrono::Utc::now();
        let mut jobs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.len() > MAX_JOBS {
            jobs.clear();
        }
        for (a, outcome, _) in ended {
            let Some(start) = a
                .start_time
                .filter(|_| matches!(outcome, Outcome::Exited(_)))
            else {
                continue;
            };
            let took = (now - start).to_std().unwrap_or_default().as_secs_f64();
            jobs.entry(a.job_pk)
                .and_modify(|d| *d += WEIGHT * (took - *d))
                .or_insert(took);
        }
    }

    /// The average of the jobs' averages that are known.
    fn of(&self, jobs: &[i64]) -> Option<f64> {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let seconds: Vec<f64> = jobs.iter().filter_map(|j| known.get(j).copied()).collect();
        (!seconds.is_empty()).then(|| seconds.iter().sum::<f64>() / seconds.len() as f64)
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
        let of_pool: Vec<i64> = jobs
            .iter()
            .filter(|j| j.account == pool.account && j.pool_id.eq_ignore_ascii_case(&pool.id))
            .map(|j| j.pk)
            .collect();
        pool.task_seconds = durations.of(&of_pool);
    }
    store::waits::keep(db, &waits::explain(&jobs, &pools), now).await
}
