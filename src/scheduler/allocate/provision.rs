//! Provisioning a node: its container (a reboot restarts it first), its row and usage record,
//! then its start task.

use crate::domain::container::PoolContainers;
use chrono::Utc;
use serde_json::json;

use super::{being_provisioned, Allocator};
use crate::domain::pool::{NodeState, StartTask};
use crate::runtime::{NodeHandle, NodeSpec, ALLOCATION_FAILED};
use crate::scheduler::environment::Placement;
use crate::scheduler::start_task;
use crate::scheduler::task_files;
use crate::store::{self, nodes::NodeRow, pools::PoolRow};

impl Allocator {
    pub(super) async fn provision(&self, pool: &PoolRow, node: &NodeRow) -> anyhow::Result<()> {
        // The pass that asked for this read its rows before an earlier provisioning of the same
        // node may have finished: go by the node as it is now, or a start task would run twice.
        let Some(node) = store::nodes::get_by_pk(&self.db, node.pk).await? else {
            return Ok(());
        };
        if !being_provisioned(node.state) {
            return Ok(());
        }
        // A reboot or reimage with taskcompletion or retaineddata waits for the node's tasks
        // (no new ones are placed on it meanwhile); the node's removal ends the wait. A reimage
        // with retaineddata, which takes the node's disk, also waits for its tasks' files'
        // retention to run out.
        if matches!(node.state, NodeState::Rebooting | NodeState::Reimaging) {
            self.tasks_done_on(node.pk).await?;
        }
        if node.state == NodeState::Reimaging {
            if node.retain_data {
                while self.retains_files(node.pk).await? {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                store::nodes::set_retain_data(&self.db, node.pk, false).await?;
                self.retained.lock().expect("lock").remove(&node.pk);
            }
            // The files of what ran there go with the old disk: nothing is retained for them.
            store::tasks::forget_files_on_node(&self.db, node.pk).await?;
        }
        let Some(handle) = self.make_container(pool, &node).await? else {
            return Ok(());
        };
        // Boxed, as the start task is: their futures are large, and every node being made
        // (10,000 at once on a large resize, most waiting their turn at the runtime) would
        // hold their room until then.
        let Some(package_env) = Box::pin(self.install_packages(pool, &node)).await? else {
            return Ok(());
        };
        let start_task: Option<StartTask> = pool
            .start_task
            .clone()
            .map(serde_json::from_value)
            .transpose()?;
        // Azure's default: the node waits for the start task unless told otherwise.
        let wait = start_task
            .as_ref()
            .is_some_and(|t| t.wait_for_success.unwrap_or(true));
        if !self.record_started(pool, &node, &handle, wait).await? {
            return Ok(());
        }
        let Some(task) = start_task else {
            return Ok(());
        };
        Box::pin(self.run_start_task(pool, &node, &task, package_env, wait)).await
    }

    /// Installs the pool's application packages on the node; the variables that tell its
    /// commands where they are, or None when one could not be installed and the node is unusable.
    async fn install_packages(
        &self,
        pool: &PoolRow,
        node: &NodeRow,
    ) -> anyhow::Result<Option<Vec<(String, String)>>> {
        let Some(packages) = pool.application_packages.as_ref().filter(|p| !p.is_empty()) else {
            return Ok(Some(Vec::new()));
        };
        let at = Placement {
            account: &pool.account,
            pool_id: &pool.id,
            node_id: &node.id,
        };
        match self.packages.install_pool(&at, packages).await {
            Ok(env) => Ok(Some(env)),
            Err(f) => {
                tracing::warn!(node = %node.id, code = f.code, message = %f.message, "application packages could not be installed");
                let error = json!({"code": f.code, "message": f.message});
                store::nodes::set_unusable(&self.db, node.pk, &json!([error])).await?;
                Ok(None)
            }
        }
    }

    /// What the runtime makes for the pool's node.
    pub(super) fn node_spec(&self, pool: &PoolRow, node: &NodeRow) -> NodeSpec {
        NodeSpec {
            server_id: self.server_id.clone(),
            account: pool.account.clone(),
            pool_id: pool.id.clone(),
            node_id: node.id.clone(),
            image: pool.image.clone(),
            vcpus: pool.vcpus,
            memory_mib: pool.memory_mib,
            containers: PoolContainers::of(pool.vm_config.as_ref()),
            together: pool.inter_node_communication,
            tags: pool
                .resource_tags
                .as_ref()
                .map(|t| t.0.clone().into_iter().collect())
                .unwrap_or_default(),
        }
    }

    /// Creates and starts the node's container; None when it could not be made, and the node is
    /// unusable (the pool's resize errors say why).
    async fn make_container(
        &self,
        pool: &PoolRow,
        node: &NodeRow,
    ) -> anyhow::Result<Option<NodeHandle>> {
        let spec = self.node_spec(pool, node);
        let created = {
            let _permit = self.limit.acquire().await?;
            if node.state == NodeState::Rebooting {
                // A reboot restarts the node (its disk, the node directory, stays) and reruns the
                // start task, and the preparation tasks of jobs that ask for it.
                store::preparations::forget_for_reboot(&self.db, node.pk).await?;
                if let Err(e) = self.runtime.restart_node(&node.id).await {
                    tracing::warn!(node = %node.id, error = %format!("{e:#}"), "restarting the node failed; making it again");
                }
            }
            if node.state == NodeState::Reimaging {
                // A reimage makes the node again from its image, with a new disk: every
                // preparation task runs again, as after a reboot.
                store::preparations::forget_for_reboot(&self.db, node.pk).await?;
                self.runtime.remove_node(&node.id).await?;
            }
            let created = self.runtime.start_node(&spec).await;
            match created {
                // A dedicated node takes the room of low-priority ones if it must.
                Err(e) if e.code == ALLOCATION_FAILED && node.is_dedicated => {
                    if self.make_room(&spec).await? {
                        self.runtime.start_node(&spec).await
                    } else {
                        Err(e)
                    }
                }
                other => other,
            }
        };
        // Its agent's start loads the node, not its host's engine: other nodes are made
        // meanwhile. A new node is `starting` until its agent says hello, as Azure's is while
        // its Batch agent starts.
        let created = match created {
            Ok(handle) => {
                let up = (NodeState::Creating, NodeState::Starting);
                store::nodes::set_state_from(&self.db, node.pk, up).await?;
                self.runtime
                    .node_ready(&spec.node_id)
                    .await
                    .map(|()| handle)
            }
            failed => failed,
        };
        match created {
            Ok(handle) => Ok(Some(handle)),
            // A low-priority node with no room waits for capacity, preempted, as on Azure.
            Err(e) if e.code == ALLOCATION_FAILED && !node.is_dedicated => {
                tracing::info!(node = %node.id, message = %e.message, "no room for a low-priority node yet");
                self.recovery_failed(node).await?;
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(node = %node.id, code = e.code, message = %e.message, "node could not be created");
                let error = json!({"code": e.code, "message": e.message});
                store::nodes::set_unusable(&self.db, node.pk, &json!([error])).await?;
                store::pools::add_resize_error(&self.db, pool.pk, &error).await?;
                Ok(None)
            }
        }
    }

    /// Records the node as started, waiting for its start task or idle, and opens its usage
    /// record; false when the node is no longer wanted (it left the pool meanwhile).
    async fn record_started(
        &self,
        pool: &PoolRow,
        node: &NodeRow,
        handle: &NodeHandle,
        wait: bool,
    ) -> anyhow::Result<bool> {
        let state = if wait {
            NodeState::WaitingForStartTask
        } else {
            NodeState::Idle
        };
        let mut tx = self.db.begin().await?;
        let still_wanted = store::nodes::set_started(
            &mut *tx,
            node.pk,
            state,
            (&handle.container_id, &handle.ip_address, &handle.host),
            pool.application_packages.as_ref(),
        )
        .await?;
        if still_wanted {
            store::usage::open(&mut *tx, node.pk, Utc::now()).await?;
        }
        tx.commit().await?;
        if still_wanted {
            let took = (Utc::now() - node.allocation_time)
                .to_std()
                .unwrap_or_default();
            crate::metrics::NODE_START.observe(took);
            tracing::info!(node = %node.id, pool = %pool.id, %state, "node started");
        }
        Ok(still_wanted)
    }

    /// Runs the start task, recording its progress as it goes; a node that waits for it becomes
    /// idle, or startTaskFailed.
    async fn run_start_task(
        &self,
        pool: &PoolRow,
        node: &NodeRow,
        task: &StartTask,
        package_env: Vec<(String, String)>,
        wait: bool,
    ) -> anyhow::Result<()> {
        let at = Placement {
            account: &pool.account,
            pool_id: &pool.id,
            node_id: &node.id,
        };
        let db = &self.db;
        let linked = task_files::linked_storage(db, &pool.account, &task.resource_files)
            .await
            .unwrap_or_else(|f| {
                tracing::warn!(error = %f.message, "the start task's linked storage is unknown");
                None
            });
        let fetcher = &self.fetcher;
        let outcome = start_task::run(
            &self.runtime,
            fetcher,
            linked.as_deref(),
            &at,
            task,
            package_env,
            |info| async move {
                if let Err(e) = store::nodes::set_start_task_info(db, node.pk, &info).await {
                    tracing::warn!(error = %e, "recording the start task's progress");
                }
            },
        )
        .await;
        store::nodes::set_start_task_info(&self.db, node.pk, &outcome.info).await?;
        if wait {
            let next = if outcome.succeeded {
                NodeState::Idle
            } else {
                NodeState::StartTaskFailed
            };
            store::nodes::set_state(&self.db, node.pk, next).await?;
        }
        Ok(())
    }
}
