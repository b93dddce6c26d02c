//! The classic BES environment: a pool per image, sized to the classic jobs in flight.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::BesJobDriver;
use crate::domain::bes::{CLASSIC_ACCOUNT, CLASSIC_POOL};
use crate::domain::duration::IsoDuration;
use crate::domain::pool::{JobDefaultOrder, NodeFillType, Targets};
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
        let new = store::pools::NewPool {
            account: CLASSIC_ACCOUNT.into(),
            id: id.into(),
            display_name: Some(format!(
                "The classic BES environment ({})",
                image.as_deref().unwrap_or("the default image")
            )),
            vm_size: self.config.classic_vm_size.clone(),
            vcpus: self.config.classic_vcpus,
            memory_mib: self.config.classic_memory_mib,
            image: image.unwrap_or_else(|| self.config.classic_image.clone()),
            vm_config: None,
            start_task: None,
            task_slots_per_node: 1,
            node_fill_type: NodeFillType::Spread,
            job_default_order: JobDefaultOrder::CreationTime,
            node_communication_mode: crate::domain::pool::NodeCommunicationMode::Default,
            inter_node_communication: false,
            resource_tags: None,
            manual_upgrades: false,
            target_dedicated_nodes: nodes,
            target_low_priority_nodes: 0,
            resize_timeout_ticks: IsoDuration::from_secs(15 * 60).ticks(),
            metadata: json!([]),
            billing_plan: None,
            service_pk: None,
            pool_service: false,
            application_packages: None,
            auto_scale: None,
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
