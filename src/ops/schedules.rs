//! Job schedules: making each job when it is due (the leader's once-a-second loop), and what
//! terminating or deleting a schedule does to its jobs.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};

use crate::domain::job::JobState;
use crate::domain::schedule::{JobScheduleState, Step};
use crate::store;
use futures_util::future::BoxFuture;

/// Makes a job from a schedule's `jobSpecification`, as a job add would (the API's checks and
/// inserts, which the scheduler cannot import: `app` hands them over).
pub trait JobMaker: Send + Sync {
    /// Makes job `job_id` of `account` in `tx` for the schedule whose pk is given: its pk, or
    /// why it could not be made.
    fn make<'a, 'c: 'a>(
        &'a self,
        tx: &'a mut Transaction<'c, Postgres>,
        account: &'a str,
        job: (&'a str, i64),
        spec: &'a Value,
    ) -> BoxFuture<'a, Result<i64, String>>;
}

/// The most schedules looked at in one pass; the rest wait for the next second.
const PASS: i64 = 100;

/// Makes the jobs that are due at `now`, loses the occurrences past their start window, and
/// completes the schedules that will make no more. Each schedule moves on in the transaction
/// that makes its job, so no job is made twice. Returns how many jobs were made.
pub async fn run_due(
    db: &PgPool,
    maker: &dyn JobMaker,
    now: DateTime<Utc>,
) -> anyhow::Result<usize> {
    let mut made = 0;
    for pk in store::schedules::due(db, now, PASS).await? {
        let mut tx = db.begin().await?;
        let Some(s) = store::schedules::lock_due(&mut *tx, pk).await? else {
            continue;
        };
        if s.next_run_time.is_some_and(|t| t > now) {
            continue;
        }
        match s.timing().step(s.next_run_time, now) {
            Step::Complete => store::schedules::complete(&mut *tx, pk).await?,
            Step::Lost { next } => store::schedules::set_next_run(&mut *tx, pk, next).await?,
            Step::Make { next } => {
                let job_id = format!("{}:job-{}", s.id, s.jobs_made + 1);
                let mut job = sqlx::Connection::begin(&mut *tx).await?;
                match maker
                    .make(&mut job, &s.account, (&job_id, pk), &s.job_specification)
                    .await
                {
                    Ok(job_pk) => {
                        store::schedules::adopt_job(&mut *job, pk, job_pk).await?;
                        job.commit().await?;
                        store::schedules::made_job(&mut *tx, pk, Some(&job_id), next).await?;
                        made += 1;
                    }
                    Err(why) => {
                        job.rollback().await?;
                        tracing::warn!(
                            schedule = s.id,
                            job = job_id,
                            why,
                            "a job schedule could not make its job; that occurrence is lost"
                        );
                        store::schedules::made_job(&mut *tx, pk, None, next).await?;
                    }
                }
            }
        }
        tx.commit().await?;
    }
    Ok(made)
}

/// Terminates a schedule: it makes no more jobs, and its job that runs is terminated. It is
/// `terminating` while that job is (its release tasks run), and completes with it.
pub async fn terminate(tx: &mut Transaction<'_, Postgres>, pk: i64) -> sqlx::Result<()> {
    for job in store::schedules::open_jobs(&mut **tx, pk).await? {
        super::jobs::terminate_job(tx, job, "UserTerminate").await?;
    }
    let state = if store::schedules::open_jobs(&mut **tx, pk).await?.is_empty() {
        JobScheduleState::Completed
    } else {
        JobScheduleState::Terminating
    };
    store::schedules::set_state(&mut **tx, pk, state).await
}

/// Deletes a schedule with every job it made (their tasks and files go as a deleted job's do).
pub async fn delete(tx: &mut Transaction<'_, Postgres>, pk: i64) -> sqlx::Result<()> {
    for job in store::schedules::jobs(&mut **tx, pk).await? {
        store::jobs::set_state(&mut **tx, job, JobState::Deleting).await?;
    }
    store::schedules::delete(&mut **tx, pk).await
}
