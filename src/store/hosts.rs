//! Docker hosts added at run time (`batchpool host add`).

use sqlx::PgExecutor;

use crate::domain::host::HostSpec;

/// The added hosts, oldest first.
pub async fn list(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<HostSpec>> {
    let rows = sqlx::query!(
        "SELECT url, cpus, memory_mib, tls_dir FROM docker_hosts ORDER BY added_at, url"
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| HostSpec {
            url: r.url,
            tls: r.tls_dir.map(Into::into),
            cpus: r.cpus,
            memory_mib: r.memory_mib,
        })
        .collect())
}

/// Adds a host, or changes the caps and certificates of one added before.
pub async fn add(db: impl PgExecutor<'_>, host: &HostSpec) -> sqlx::Result<()> {
    let tls = host.tls.as_ref().map(|d| d.to_string_lossy().into_owned());
    sqlx::query!(
        "INSERT INTO docker_hosts (url, cpus, memory_mib, tls_dir) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (url) DO UPDATE SET cpus = $2, memory_mib = $3, tls_dir = $4",
        host.url,
        host.cpus,
        host.memory_mib,
        tls,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// Removes an added host; whether there was one.
pub async fn remove(db: impl PgExecutor<'_>, url: &str) -> sqlx::Result<bool> {
    sqlx::query!("DELETE FROM docker_hosts WHERE url = $1", url)
        .execute(db)
        .await
        .map(|r| r.rows_affected() > 0)
}
