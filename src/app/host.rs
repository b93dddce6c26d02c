//! `batchpool host ...`: Docker hosts added and removed while servers run, kept in the database
//! (the leader's runtime takes them within seconds).

use crate::config::{HostAction, HostConfig};
use crate::store;

/// `batchpool host ...`.
pub async fn host_command(config: HostConfig) -> anyhow::Result<()> {
    let config = &config;
    super::account::with_database(&config.db, |db| async move {
        match &config.action {
            HostAction::List => {
                for h in store::hosts::list(&db).await? {
                    let cap = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                    let tls = h.tls.map(|d| d.display().to_string());
                    println!(
                        "{}  cpus={}  memory={}  tls={}",
                        h.url,
                        cap(h.cpus.map(|c| c.to_string())),
                        cap(h.memory_mib.map(|m| format!("{m}MiB"))),
                        cap(tls)
                    );
                }
                Ok(())
            }
            HostAction::Add { host } => {
                store::hosts::add(&db, host).await?;
                println!("added {}", host.url);
                Ok(())
            }
            HostAction::Remove { url } => {
                anyhow::ensure!(
                    store::hosts::remove(&db, url).await?,
                    "no host {url} was added (hosts given with serve --docker-host are removed by restarting without them)"
                );
                println!("removed {url}: it takes no new nodes");
                Ok(())
            }
        }
    })
    .await
}
