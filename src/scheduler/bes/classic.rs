//! The classic BES environment: a pool per image, sized to the classic jobs in flight.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::BesJobDriver;
use crate::domain::bes::{CLASSIC_ACCOUNT, CLASSIC_POOL};
use crate::domain::pool::Targets;
use crate::store;
use crate::store::services::BesJobRow;

/// How long a classic pool keeps its nodes after its last job.
const CLASSIC_IDLE: Duration = Duration::from_secs(60);

impl BesJobDriver {
    /// Each classic pool (one per image) has a node per classic job of its image in flight, up
    /// to the configured number; it keeps them until it has been idle a while, then goes to zero.
    pub(super) async fn size_classic_pools(&self, jobs: &[&BesJobRow]) -> anyhow::Result<()> {
        let limit = self.config.classic_concurrency;
        if limit == 0 {
            return Ok(());
        }
        let wanted = demand(jobs);
        let existing = store::pools::list(&self.db, CLASSIC_ACCOUNT).await?;
        let mut ids: Vec<String> = wanted.keys().cloned().collect();
        ids.extend(
            existing
                .iter()
                .map(|p| p.id.clone())
                .filter(|id| !wanted.contains_key(id)),
        );
        for id in ids {
            let (image, count) = wanted.get(&id).cloned().unwrap_or((None, 0));
            let want = count.min(limit);
            let idle = self.idle_long(&id, want);
            let Some(pool) = existing.iter().find(|p| p.id == id) else {
                if want > 0 {
                    self.make_classic_pool(&id, image, want).await?;
                }
                continue;
            };
            let target = if want > pool.target_dedicated_nodes {
                want
            } else if want == 0 && idle {
                0
            } else {
                continue;
            };
            if target != pool.target_dedicated_nodes
                && store::pools::resize(
                    &self.db,
                    CLASSIC_ACCOUNT,
                    &id,
                    Targets::dedicated(target),
                    None,
                    None,
                )
                .await?
                .is_ok()
            {
                self.wake.allocate.notify_one();
            }
        }
        Ok(())
    }

    /// Notes a classic pool as busy while it is wanted; whether it has been idle long enough to
    /// go to zero.
    fn idle_long(&self, id: &str, want: i32) -> bool {
        let mut busy = self.classic_last_busy.lock().unwrap();
        let last = busy.entry(id.to_string()).or_insert_with(Instant::now);
        if want > 0 {
            *last = Instant::now();
        }
        last.elapsed() >= CLASSIC_IDLE
    }

    async fn make_classic_pool(
        &self,
        id: &str,
        image: Option<String>,
        nodes: i32,
    ) -> anyhow::Result<()> {
        let size = (
            self.config.classic_vm_size.as_str(),
            self.config.classic_vcpus,
            self.config.classic_memory_mib,
        );
        let display_name = format!(
            "The classic BES environment ({})",
            image.as_deref().unwrap_or("the default image")
        );
        let image = image.unwrap_or_else(|| self.config.classic_image.clone());
        let new = store::pools::NewPool {
            display_name: Some(display_name),
            ..store::pools::NewPool::internal((CLASSIC_ACCOUNT, id), size, image, nodes)
        };
        match store::pools::insert(&self.db, &new).await {
            Err(e) if !store::is_unique_violation(&e) => return Err(e.into()),
            _ => {}
        }
        self.wake.allocate.notify_one();
        Ok(())
    }
}

/// The classic pools the jobs in flight want: by pool id, the image and the number of jobs.
fn demand(jobs: &[&BesJobRow]) -> BTreeMap<String, (Option<String>, i32)> {
    let mut wanted: BTreeMap<String, (Option<String>, i32)> = BTreeMap::new();
    for job in jobs {
        let image = job.request.image.clone();
        wanted
            .entry(classic_pool_id(image.as_deref()))
            .or_insert((image, 0))
            .1 += 1;
    }
    wanted
}

/// The classic pool that runs the jobs of services with `image` (None: the default image).
pub fn classic_pool_id(image: Option<&str>) -> String {
    use sha2::{Digest, Sha256};
    match image {
        None => CLASSIC_POOL.to_string(),
        Some(image) => {
            let digest = Sha256::digest(image.as_bytes());
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("{CLASSIC_POOL}-{hex}")
        }
    }
}
