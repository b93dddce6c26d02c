//! Nodes the server lost contact with: `unknown` (Azure's state for them) while their agents
//! are silent, and what they were again once they speak.

use sqlx::PgExecutor;

/// Makes the named nodes `unknown` where they are ready (idle, running or offline), locking
/// them in pk order as a dispatch pass does; returns the ids of those it changed. Their
/// running tasks stay running, and no pass places a task on them.
pub async fn lose(db: impl PgExecutor<'_>, ids: &[String]) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "WITH ready AS (SELECT pk FROM nodes WHERE id = ANY($1) AND state IN ('idle', 'running', 'offline') \
            ORDER BY pk FOR UPDATE) \
         UPDATE nodes n SET state = 'unknown', state_transition_time = now() FROM ready \
         WHERE n.pk = ready.pk RETURNING n.id",
        ids,
    )
    .fetch_all(db)
    .await
}

/// Gives the named `unknown` nodes (every one with None) back what they are: `running` with
/// tasks in their slots, else `idle` (`offline` with scheduling disabled, migration 48).
pub async fn regain(db: impl PgExecutor<'_>, ids: Option<&[String]>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "WITH lost AS (SELECT pk FROM nodes WHERE state = 'unknown' AND ($1::text[] IS NULL OR id = ANY($1)) \
            ORDER BY pk FOR UPDATE) \
         UPDATE nodes n SET state = CASE WHEN n.running_task_slots > 0 THEN 'running' ELSE 'idle' END, \
            state_transition_time = now() FROM lost WHERE n.pk = lost.pk",
        ids as Option<&[String]>,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
