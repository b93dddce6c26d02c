//! Preempting low-priority (spot) nodes, as Azure does when it takes their capacity back: the
//! node goes `preempted` and stops billing, its running tasks are requeued without counting
//! against their retries (requeueCount + 1), and the leader's allocator removes its container
//! and makes it again once capacity allows. Both the operator's reclaim route and the allocator
//! (a dedicated node that needs the room) start it.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::pool::NodeDeallocationOption;
use crate::store;

/// Preempts those of `node_pks` that are low-priority and neither leaving nor preempted
/// already; none is made again before `until`. Returns the pks and ids of those preempted.
pub async fn preempt(
    db: &PgPool,
    node_pks: &[i64],
    until: DateTime<Utc>,
) -> sqlx::Result<Vec<(i64, String)>> {
    let mut tx = db.begin().await?;
    // Nodes are locked in pk order, as dispatch locks them, before any task of theirs.
    store::tasks::lock_nodes(&mut *tx, node_pks).await?;
    let preempted = store::nodes::preempt(&mut *tx, node_pks, until).await?;
    let pks: Vec<i64> = preempted.iter().map(|(pk, _)| *pk).collect();
    super::jobs::stop_tasks_on_nodes_for(
        &mut tx,
        &pks,
        NodeDeallocationOption::Requeue,
        "its low-priority node was preempted",
    )
    .await?;
    let now = Utc::now();
    for (pk, id) in &preempted {
        // Its container goes: billing stops now, and the node comes back with a new disk, on
        // which job preparation tasks run again.
        store::usage::close(&mut *tx, id, now).await?;
        store::preparations::forget_for_reboot(&mut *tx, *pk).await?;
    }
    tx.commit().await?;
    if !preempted.is_empty() {
        tracing::info!(
            count = preempted.len(),
            until = %until,
            "low-priority nodes preempted"
        );
    }
    Ok(preempted)
}
