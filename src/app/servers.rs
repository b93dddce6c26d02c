//! This server in the installation's list of servers (`store::servers`), and the list as the
//! leader hands it to its agents (`domain::endpoint`).

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::domain::endpoint::Endpoint;
use crate::runtime::agents::Peers;
use crate::store;

/// How often a server says it runs, and reads the others.
const BEAT: Duration = Duration::from_secs(2);

/// Says every [`BEAT`] that this server runs, reached by agents at `endpoint`, and keeps
/// `peers`' list of servers; takes this server off the list when `cancel` fires.
pub async fn keep(db: PgPool, endpoint: Endpoint, peers: Arc<Peers>, cancel: CancellationToken) {
    let instance = uuid::Uuid::new_v4().simple().to_string();
    loop {
        if let Err(e) = beat(&db, &instance, &endpoint, &peers).await {
            tracing::warn!(error = %e, "saying where this server's agents' listener is failed");
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(BEAT) => {}
        }
    }
    if let Err(e) = store::servers::leave(&db, &instance).await {
        tracing::warn!(error = %e, "taking this server off the list of servers failed");
    }
}

async fn beat(db: &PgPool, instance: &str, endpoint: &Endpoint, peers: &Peers) -> sqlx::Result<()> {
    store::servers::beat(db, instance, endpoint).await?;
    let servers = store::servers::live(db).await?;
    let count = servers.len();
    if peers.set_servers(servers) {
        tracing::info!(count, "the installation's servers changed");
    }
    Ok(())
}
