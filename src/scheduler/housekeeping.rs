//! Housekeeping, beside the dispatcher in a loop of its own: task counts folded into their jobs,
//! jobs past their maxWallClockTime ended, deleted jobs removed with their tasks and files, auto
//! pools deleted when their lifetime is over, running tasks of preemptible jobs requeued for a
//! job of higher priority, and task directories past their retentionTime removed. It waits for kills and for agents, and
//! never holds up a pass.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{execute, Scheduler};
use crate::domain::job::TaskState;
use crate::store::tasks::Ending;
use crate::{ops, store};

/// The least time between two runs of [`housekeeping`].
const HOUSEKEEPING_EVERY: Duration = Duration::from_millis(200);

/// Runs [`housekeeping`] when woken (an API write: a job deleted, say) or at the tick, and
/// never more often than [`HOUSEKEEPING_EVERY`]: under load the API wakes it many times a
/// second, and its questions need no answer that often.
pub(super) async fn run(s: &Scheduler, executor: &execute::Executor, cancel: &CancellationToken) {
    loop {
        if let Err(e) = housekeeping(s, executor).await {
            tracing::error!(error = %e, "job housekeeping failed");
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(HOUSEKEEPING_EVERY) => {}
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = s.wake.housekeep.notified() => {}
            _ = tokio::time::sleep(s.wake.tick.saturating_sub(HOUSEKEEPING_EVERY)) => {}
        }
    }
}

/// Task count changes are folded into the jobs' counts; jobs past their maxWallClockTime end;
/// ended jobs complete once their release tasks have run;
/// deleted jobs go with their tasks and files (once their processes are killed); auto pools
/// whose owner has completed go; task directories past their retentionTime are removed.
async fn housekeeping(s: &Scheduler, executor: &execute::Executor) -> anyhow::Result<()> {
    store::tasks::fold_counts(&s.db).await?;
    for pk in store::jobs::past_wall_clock(&s.db).await? {
        let mut tx = s.db.begin().await?;
        ops::jobs::terminate_job(&mut tx, pk, "MaxWallClockTimeExpiry").await?;
        tx.commit().await?;
        s.wake.dispatch.notify_one();
    }
    let prep = executor.preparations();
    prep.start_due_releases_now_and_then().await?;
    // Ended jobs whose release tasks have run complete, and so do schedules that were ending
    // with them.
    store::jobs::complete_terminated(&s.db).await?;
    store::schedules::complete_terminated(&s.db).await?;
    for job in store::jobs::deleting(&s.db).await? {
        // One job that cannot go holds up neither the others nor the rest of housekeeping.
        if let Err(e) = remove_deleted_job(s, executor, prep, &job).await {
            tracing::error!(job = %job.id, error = %e, "removing a deleted job failed");
        }
    }
    // Auto pools whose job or job schedule has completed, or gone, go too.
    if store::auto_pools::expire(&s.db).await? > 0 {
        s.wake.allocate.notify_one();
    }
    preempt_for_higher_priority(s).await?;
    remove_expired_files(s).await
}

/// Removes a deleted job: its running tasks end, its release tasks run, its directories go from
/// the nodes, and then its row, what its tasks used kept in its account's lifetime statistics.
async fn remove_deleted_job(
    s: &Scheduler,
    executor: &execute::Executor,
    prep: &std::sync::Arc<super::prep::Preparations>,
    job: &store::jobs::JobRow,
) -> anyhow::Result<()> {
    let mut tx = s.db.begin().await?;
    ops::jobs::end_running_tasks(&mut tx, job.pk, "its job was deleted").await?;
    tx.commit().await?;
    executor.reap().await?;
    // Its release tasks run (they are due now that its tasks ended) before it goes.
    if store::preparations::releases_pending(&s.db, job.pk).await? {
        prep.start_due_releases().await?;
        return Ok(());
    }
    // Its directories are on the nodes that ran its tasks and its preparation.
    let mut nodes = store::tasks::nodes_of_job(&s.db, job.pk).await?;
    let prepared = store::preparations::list(&s.db, job.pk, i64::MAX).await?;
    nodes.extend(prepared.into_iter().map(|n| n.node_id));
    nodes.sort();
    nodes.dedup();
    // Its directories go while it is still `deleting`: once its row goes, a new job may
    // take its id (and so its directories' names), and dispatch runs beside this loop.
    for node in &nodes {
        let job_dirs = [
            crate::runtime::job_dir(&job.id),
            crate::runtime::job_prep_dir(&job.id),
        ];
        for dir in job_dirs {
            s.runtime.remove_on_node(node, &dir).await;
        }
    }
    let mut tx = s.db.begin().await?;
    // What its tasks used stays in the account's lifetime statistics.
    store::tasks::stats::keep(&mut tx, &job.account, job.pk, None).await?;
    store::jobs::delete(&mut *tx, job.pk).await?;
    tx.commit().await?;
    tracing::info!(job = %job.id, "job deleted");
    s.wake.dispatch.notify_one();
    Ok(())
}

/// Requeues running tasks of jobs that allow preemption (allowTaskPreemption), to give their
/// slots to a job of higher priority on the same pool that has tasks waiting and no free slot
/// (`store::preemption::victims`). Requeued (requeueCount + 1, no retry counted), they run
/// again when a slot is free; the dispatcher, which goes by priority, gives the freed slots to
/// the waiting job, and kills the attempts before it does.
async fn preempt_for_higher_priority(s: &Scheduler) -> anyhow::Result<()> {
    if !store::preemption::any_preemptible(&s.db).await? {
        return Ok(());
    }
    let mut tx = s.db.begin().await?;
    let victims = store::preemption::victims(&mut *tx).await?;
    if victims.is_empty() {
        return Ok(());
    }
    let mut nodes: Vec<i64> = victims.iter().map(|v| v.node_pk).collect();
    nodes.sort_unstable();
    nodes.dedup();
    store::tasks::lock_nodes(&mut *tx, &nodes).await?;
    let on_node = TaskState::ON_NODE;
    for v in &victims {
        store::tasks::end_attempt(
            &mut tx,
            v.task_pk,
            Some(v.attempt),
            on_node,
            Ending::Requeue,
        )
        .await?;
    }
    tx.commit().await?;
    tracing::info!(
        tasks = victims.len(),
        "requeued preemptible tasks for a job of higher priority"
    );
    s.wake.dispatch.notify_one();
    Ok(())
}

/// Task directories past their retentionTime go, and job preparation and release tasks' ones,
/// up to 500 of each a run, 16 at a time. Their rows stay locked until the directories are gone:
/// a task reactivated (or a preparation task run again) meanwhile waits, so it never starts in a
/// directory that is being removed.
async fn remove_expired_files(s: &Scheduler) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    let mut tx = s.db.begin().await?;
    let expired = store::tasks::take_expired_files(&mut *tx, 500).await?;
    let tasks = expired.into_iter().map(|t| {
        let dir = crate::runtime::task_dir(&t.job_id, &t.task_id);
        (t.node_id, dir)
    });
    // Job preparation and release tasks' directories, past their retentionTime.
    let job_tasks = store::preparations::take_expired_dirs(&mut tx, 500).await?;
    let job_tasks = job_tasks.into_iter().map(|t| {
        let dir = crate::runtime::job_prep_dir(&t.job_id).join(&t.task_id);
        (t.node_id, dir)
    });
    futures_util::stream::iter(tasks.chain(job_tasks))
        .for_each_concurrent(16, |(node, dir)| async move {
            s.runtime.remove_on_node(&node, &dir).await;
        })
        .await;
    tx.commit().await?;
    Ok(())
}
