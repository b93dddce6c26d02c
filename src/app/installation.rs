//! What a server makes and reads of its installation as it starts: the server id, the first
//! account with its key file, the operator token's file, and what tasks' authentication tokens
//! are signed with.

use std::path::Path;

use sqlx::PgPool;

use crate::domain::task_token::TokenKey;
use crate::{api, store};

/// On a first start, the configured account is made with new keys; its primary key is written
/// to a file only the server's user can read (never to the log).
async fn ensure_account(db: &PgPool, name: &str, data_dir: &std::path::Path) -> anyhow::Result<()> {
    if store::accounts::get(db, name).await?.is_some() {
        return Ok(());
    }
    let primary = api::auth::new_key();
    if !store::accounts::create(db, name, &primary, &api::auth::new_key()).await? {
        return Ok(());
    }
    let file = data_dir.join(format!("{name}.key"));
    write_private(&file, &primary)?;
    tracing::info!(account = name, key_file = %file.display(), "created the account; its primary key is in the key file (`batchpool account show {name}` prints both keys)");
    Ok(())
}

/// Writes a secret to a file only the server's user can read.
fn write_private(file: &std::path::Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(file)?
        .write_all(secret.as_bytes())
}

/// The installation's server id, with its account made, the operator's token written out and
/// what earlier builds left in the data directory removed; and the key that tasks'
/// authentication tokens are signed with (derived from that token).
pub(super) async fn installation(
    db: &PgPool,
    account: &str,
    data_dir: &Path,
) -> anyhow::Result<(String, TokenKey)> {
    let server_id = store::server_id(db).await?;
    ensure_account(db, account, data_dir).await?;
    let token = store::operator_token(db).await?;
    write_private(&data_dir.join("operator.token"), &token)?;
    // Earlier builds kept a copy of themselves here for Docker hosts (hundreds of MB for a
    // debug build); the agent's archive is now made as a host reads it.
    let _ = std::fs::remove_file(data_dir.join("agent.tar"));
    Ok((server_id, TokenKey::derive(&token)))
}
