//! Usage records: the intervals compute hours are summed from.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::metering::UsageInterval;

/// Opens the node's record unless one is open already (an adopted node keeps its record).
pub async fn open(db: impl PgExecutor<'_>, node_pk: i64, at: DateTime<Utc>) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO usage_records (account, pool_pk, pool_id, node_id, vm_size, vcpus, started_at) \
         SELECT p.account, p.pk, p.id, n.id, p.vm_size, p.vcpus, $2 \
         FROM nodes n JOIN pools p ON p.pk = n.pool_pk WHERE n.pk = $1 \
         ON CONFLICT (node_id) WHERE ended_at IS NULL DO NOTHING",
    )
    .bind(node_pk)
    .bind(at)
    .execute(db)
    .await?;
    Ok(())
}

/// Closes the node's open record, if any.
pub async fn close(db: impl PgExecutor<'_>, node_id: &str, at: DateTime<Utc>) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE usage_records SET ended_at = greatest($2, started_at) WHERE node_id = $1 AND ended_at IS NULL",
    )
    .bind(node_id)
    .bind(at)
    .execute(db)
    .await?;
    Ok(())
}

/// A pool's usage rows that touch `[from, to)`.
#[derive(Debug, sqlx::FromRow)]
pub struct PoolUsageRow {
    pub pool_id: String,
    pub vm_size: String,
    pub vcpus: f64,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

impl PoolUsageRow {
    pub fn interval(&self) -> UsageInterval {
        UsageInterval {
            started: self.started_at,
            ended: self.ended_at,
        }
    }
}

pub async fn in_range(
    db: impl PgExecutor<'_>,
    account: &str,
    pool_id: Option<&str>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<PoolUsageRow>> {
    sqlx::query_as(
        "SELECT pool_id, vm_size, vcpus, started_at, ended_at FROM usage_records \
         WHERE account = $1 AND ($2::text IS NULL OR lower(pool_id) = lower($2)) \
           AND started_at < $4 AND (ended_at IS NULL OR ended_at > $3) \
         ORDER BY pool_id, started_at",
    )
    .bind(account)
    .bind(pool_id)
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await
}
