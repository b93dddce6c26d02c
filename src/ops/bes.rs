//! Cancelling a BES job, from its own DELETE and with its service's deletion.

use sqlx::{Postgres, Transaction};

use crate::domain::bes::Phase;
use crate::domain::job::JobState;
use crate::store;
use crate::store::services::BesJobRow;

/// Cancels the BES job if it has not finished: its Batch job, if it has one, goes with its
/// running task.
pub async fn cancel(tx: &mut Transaction<'_, Postgres>, job: &BesJobRow) -> sqlx::Result<()> {
    // The guarded update waits for a driver that is turning the job into a Batch job, so the
    // Batch job is seen here if it was made at all.
    if store::services::finish(
        &mut **tx,
        job.pk,
        Phase::Cancelled,
        None,
        Some("The job was cancelled."),
    )
    .await?
    {
        if let Some(batch_job) = store::jobs::get(
            &mut **tx,
            &job.run_account,
            &job.id,
            store::jobs::Lock::Update,
        )
        .await?
        {
            store::jobs::set_state(&mut **tx, batch_job.pk, JobState::Deleting).await?;
        }
        tracing::info!(job = %job.id, "BES job cancelled");
    }
    Ok(())
}
