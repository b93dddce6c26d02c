//! The waits pass (docs/scheduling.md, "Why a task waits"): every [`PERIOD`] the leader gives
//! each job with active tasks the reason they wait ([`crate::domain::waits::explain`]), from
//! the pools, nodes, slots and queues its dispatch passes read, and keeps it for every server's
//! reads. It reads the kept task counts, not the tasks, so its cost follows the jobs and
//! nodes, not the queue's length.

use std::time::Duration;

use sqlx::PgPool;

use crate::domain::waits;
use crate::store;

/// How often the leader looks again.
pub const PERIOD: Duration = Duration::from_secs(2);

/// One pass: reads, explains, keeps.
pub async fn pass(db: &PgPool) -> sqlx::Result<()> {
    let now = chrono::Utc::now();
    let jobs = store::waits::jobs(db).await?;
    let (accounts, ids): (Vec<String>, Vec<String>) = jobs
        .iter()
        .map(|j| (j.account.clone(), j.pool_id.clone()))
        .unzip();
    let pools = store::waits::pools(db, (&accounts, &ids)).await?;
    store::waits::keep(db, &waits::explain(&jobs, &pools), now).await
}
