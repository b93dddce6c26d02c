//! The installation's servers and where the nodes' agents reach them (the servers migration).

use sqlx::PgExecutor;

use crate::domain::endpoint::Endpoint;

/// How long a server that said nothing still counts as one agents may reach.
const LIVE_SECS: f64 = 15.0;

/// Says that the server `instance` runs, reached at `endpoint`; forgets servers silent for an
/// hour.
pub async fn beat(
    db: impl PgExecutor<'_>,
    instance: &str,
    endpoint: &Endpoint,
) -> sqlx::Result<()> {
    sqlx::query!(
        "WITH gone AS (DELETE FROM servers WHERE seen < now() - interval '1 hour') \
         INSERT INTO servers (instance, agent_url, agent_port, seen) VALUES ($1, $2, $3, now()) \
         ON CONFLICT (instance) DO UPDATE SET agent_url = $2, agent_port = $3, seen = now()",
        instance,
        endpoint.url,
        i32::from(endpoint.port),
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Where the servers that said they run lately are, each once, in one order for every caller.
pub async fn live(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<Endpoint>> {
    let rows = sqlx::query!(
        r#"SELECT DISTINCT agent_url, agent_port FROM servers
           WHERE seen > now() - make_interval(secs => $1)
           ORDER BY agent_url NULLS FIRST, agent_port"#,
        LIVE_SECS,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let port = u16::try_from(r.agent_port).ok()?;
            Some(Endpoint {
                url: r.agent_url,
                port,
            })
        })
        .collect())
}

/// Forgets the server `instance` (it stops).
pub async fn leave(db: impl PgExecutor<'_>, instance: &str) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM servers WHERE instance = $1", instance)
        .execute(db)
        .await?;
    Ok(())
}
