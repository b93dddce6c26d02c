//! The leader's once-a-second loop. Deleted tasks' directories, removed here (their files are
//! in this server's data directory, whichever server the delete came through). Job schedules: each job made when it is due
//! (`ops::schedules::run_due`). Autoscale: samples every autoscaled pool every few seconds,
//! evaluates each pool's formula when its interval comes round, and wakes the allocator when a
//! target changed; samples older than the history formulas can read are dropped. And jobs set
//! to end with their tasks just as their last task completed (`complete_recently_set`), looked
//! at here rather than in every dispatch pass, off the hot path. And every few seconds, why
//! each job's tasks wait (`waits`), and how much of each monthly budget is used (`ops::budgets`).

use chrono::Utc;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::ops::autoscale::{run_due, HISTORY, SAMPLE_PERIOD};
use crate::ops::schedules::JobMaker;
use crate::ops::wake::Wakeups;
use crate::store;

/// How often the loop looks for evaluations that are due.
const TICK: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn run(
    db: PgPool,
    (wake, runtime): (Wakeups, std::sync::Arc<crate::runtime::Runtime>),
    durations: &super::waits::Durations,
    max_nodes: i32,
    jobs: &dyn JobMaker,
    cancel: CancellationToken,
) {
    let mut last_sample = Utc::now() - SAMPLE_PERIOD;
    let mut last_prune = Utc::now();
    let mut last_waits = std::time::Instant::now() - super::waits::PERIOD;
    let mut last_budgets = std::time::Instant::now() - crate::ops::budgets::PERIOD;
    loop {
        let now = Utc::now();
        if let Err(e) = remove_task_dirs(&db, &runtime).await {
            tracing::warn!(error = %e, "removing deleted tasks' directories failed");
        }
        match crate::ops::schedules::run_due(&db, jobs, now).await {
            Ok(0) => {}
            Ok(_) => {
                wake.jobs_changed();
                // A job may have made an auto pool.
                wake.allocate.notify_one();
            }
            Err(e) => tracing::warn!(error = %e, "making the jobs of job schedules failed"),
        }
        if now - last_sample >= SAMPLE_PERIOD {
            last_sample = now;
            let loads = runtime.node_loads();
            if let Err(e) = store::autoscale::take_samples(&db, now, &loads).await {
                tracing::warn!(error = %e, "sampling autoscaled pools failed");
            }
        }
        match run_due(&db, max_nodes, now).await {
            Ok(0) => {}
            Ok(_) => wake.allocate.notify_one(),
            Err(e) => tracing::warn!(error = %e, "evaluating autoscale formulas failed"),
        }
        match store::jobs::complete_recently_set(&db).await {
            Ok(0) => {}
            Ok(_) => wake.jobs_changed(),
            Err(e) => {
                tracing::warn!(error = %e, "completing jobs that ended with their tasks failed")
            }
        }
        if last_waits.elapsed() >= super::waits::PERIOD {
            last_waits = std::time::Instant::now();
            if let Err(e) = super::waits::pass(&db, durations).await {
                tracing::warn!(error = %e, "explaining why tasks wait failed");
            }
        }
        if last_budgets.elapsed() >= crate::ops::budgets::PERIOD {
            last_budgets = std::time::Instant::now();
            match crate::ops::budgets::evaluate(&db, now).await {
                Ok(false) => {}
                Ok(true) => wake.allocate.notify_one(),
                Err(e) => tracing::warn!(error = %e, "reckoning the monthly budgets failed"),
            }
        }
        if now - last_prune >= chrono::Duration::minutes(1) {
            last_prune = now;
            if let Err(e) = store::autoscale::drop_samples(&db, now - HISTORY).await {
                tracing::warn!(error = %e, "dropping old autoscale samples failed");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// Removes the directories of tasks deleted (through any server) since the last look, each
/// through the agent of its node.
async fn remove_task_dirs(db: &PgPool, runtime: &crate::runtime::Runtime) -> sqlx::Result<()> {
    let queued = store::removals::take(db, 100).await?;
    if queued.is_empty() {
        return Ok(());
    }
    for r in &queued {
        let dir = crate::runtime::task_dir(&r.job_id, &r.task_id);
        // A task added with its id since `take` looked has it now, or starts once it is gone.
        let taken = store::tasks::exists(db, &r.account, &r.job_id, &r.task_id);
        runtime.remove_unless_taken(&r.node_id, &dir, taken).await?;
    }
    let pks: Vec<i64> = queued.iter().map(|r| r.pk).collect();
    store::removals::done(db, &pks).await
}
