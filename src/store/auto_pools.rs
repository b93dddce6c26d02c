//! Auto pools: the pools that jobs make for themselves (`poolInfo.autoPoolSpecification`), what
//! owns each, and when each goes.

use sqlx::PgExecutor;

/// What an auto pool lives for (Azure's poolLifetimeOption).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The job (its pk) that made it: the pool goes when the job completes or is deleted.
    Job(i64),
    /// The job schedule (its pk) whose jobs share it: it goes when the schedule completes or
    /// is deleted.
    Schedule(i64),
}

impl Owner {
    fn parts(self) -> (&'static str, i64) {
        match self {
            Owner::Job(pk) => ("job", pk),
            Owner::Schedule(pk) => ("jobschedule", pk),
        }
    }
}

/// Marks pool `id` of `account` as the auto pool of `owner`.
pub async fn set_owner(
    db: impl PgExecutor<'_>,
    (account, id): (&str, &str),
    owner: Owner,
    keep_alive: bool,
) -> sqlx::Result<()> {
    let (lifetime, owner) = owner.parts();
    sqlx::query!(
        "UPDATE pools SET auto_lifetime = $3, auto_owner = $4, keep_alive = $5 \
         WHERE account = $1 AND lower(id) = lower($2)",
        account,
        id,
        lifetime,
        owner,
        keep_alive,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The id of the pool `owner` made that is still active, if there is one.
pub async fn of(db: impl PgExecutor<'_>, owner: Owner) -> sqlx::Result<Option<String>> {
    let (lifetime, owner) = owner.parts();
    sqlx::query_scalar!(
        "SELECT id FROM pools WHERE auto_lifetime = $1 AND auto_owner = $2 AND state = 'active' \
         ORDER BY pk LIMIT 1",
        lifetime,
        owner,
    )
    .fetch_optional(db)
    .await
}

/// Changes whether `owner`'s auto pool outlives it.
pub async fn set_keep_alive(
    db: impl PgExecutor<'_>,
    owner: Owner,
    keep_alive: bool,
) -> sqlx::Result<()> {
    let (lifetime, owner) = owner.parts();
    sqlx::query!(
        "UPDATE pools SET keep_alive = $3 WHERE auto_lifetime = $1 AND auto_owner = $2",
        lifetime,
        owner,
        keep_alive,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Starts deleting the auto pools whose lifetime is over: their owner has completed or is gone,
/// and they are not kept alive. A pool waits while a job on it is being deleted (its directories
/// are on the pool's nodes) or a release task is due on its nodes. Returns how many it marked.
pub async fn expire(db: impl PgExecutor<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE pools p SET state = 'deleting', state_transition_time = now(), last_modified = now(), \
            target_dedicated_nodes = 0, target_low_priority_nodes = 0 \
         WHERE p.auto_lifetime IS NOT NULL AND NOT p.keep_alive AND p.state = 'active' \
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE p.auto_lifetime = 'job' \
                AND j.pk = p.auto_owner AND j.state <> 'completed') \
           AND NOT EXISTS (SELECT 1 FROM job_schedules s WHERE p.auto_lifetime = 'jobschedule' \
                AND s.pk = p.auto_owner AND s.state <> 'completed') \
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.account = p.account \
                AND lower(j.pool_id) = lower(p.id) AND j.state = 'deleting') \
           AND NOT EXISTS (SELECT 1 FROM job_node_tasks x JOIN jobs j ON j.pk = x.job_pk \
                JOIN nodes n ON n.pk = x.node_pk \
                WHERE n.pool_pk = p.pk AND j.release_task IS NOT NULL AND n.state IN ('idle', 'running', 'offline') \
                  AND x.preparation->>'state' = 'completed' \
                  AND (x.release IS NULL OR x.release->>'state' = 'running'))",
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
