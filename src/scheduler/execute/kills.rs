//! Killing attempts that were ended elsewhere (terminated, deleted, requeued): their
//! processes go before their slots are used again, and a node whose agent is slow to answer
//! holds up only its own new attempts.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Executor;
use crate::runtime::AttemptPid;
use crate::store;

/// Attempts being killed, by node: what tells when each is over.
pub type Killing = HashMap<String, Vec<CancellationToken>>;

/// Returns once every attempt `over` tells of is over, or after [`KILL_WAIT`].
pub(super) async fn gone(over: &[CancellationToken]) {
    if over.is_empty() {
        return;
    }
    let all_over = futures_util::future::join_all(over.iter().map(|o| o.cancelled()));
    if tokio::time::timeout(KILL_WAIT, all_over).await.is_err() {
        tracing::warn!("killed attempts did not end in time; their slots are handed on");
    }
}

/// How long a killed attempt's process may take to go before its slot is handed on anyway.
const KILL_WAIT: Duration = Duration::from_secs(15);

impl Executor {
    /// Kills the attempts this server runs whose attempt was ended elsewhere (the task or its
    /// job deleted, terminated, requeued), and returns once their processes are gone: the
    /// slots the database already counts free are handed on only after that.
    pub async fn reap(&self) -> sqlx::Result<()> {
        let killing = self.kill_ended(None).await?.into_values().flatten();
        gone(&killing.collect::<Vec<_>>()).await;
        Ok(())
    }

    /// Kills the attempts this server runs on `node` that were ended elsewhere (terminated,
    /// requeued), and returns once they are over, their output kept: before the node goes, so
    /// what they wrote is not lost with it.
    pub async fn reap_on(&self, node: &str) -> sqlx::Result<()> {
        let on = std::collections::HashSet::from([node]);
        let killing = self.kill_ended(Some(&on)).await?.into_values().flatten();
        gone(&killing.collect::<Vec<_>>()).await;
        Ok(())
    }

    /// Kills the attempts this server runs whose attempt was ended elsewhere, on the nodes
    /// `on` names (None: on every node); what tells when each is over, by node.
    pub async fn kill_ended(
        &self,
        on: Option<&std::collections::HashSet<&str>>,
    ) -> sqlx::Result<Killing> {
        let (pks, attempts): (Vec<i64>, Vec<i32>) = self
            .running
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, w)| on.is_none_or(|on| w.node.as_deref().is_some_and(|n| on.contains(n))))
            .map(|(key, _)| *key)
            .unzip();
        let mut killing = Killing::new();
        if pks.is_empty() {
            return Ok(killing);
        }
        for stale in store::tasks::stale_attempts(&self.db, &pks, &attempts).await? {
            if let Some(w) = self.running.lock().expect("lock").get(&stale) {
                w.kill.cancel();
                let node = w.node.clone().unwrap_or_default();
                killing.entry(node).or_default().push(w.over.clone());
            }
        }
        Ok(killing)
    }

    /// Kills the attempt once its pid is known (it may be starting still), then waits for it
    /// to end, so that its slot is free only once its process is gone; what its run gave, if
    /// it ended.
    pub(super) async fn kill<R: Future>(
        &self,
        node_id: &str,
        mut run: Pin<&mut R>,
        pid: impl Future<Output = Option<AttemptPid>>,
    ) -> Option<R::Output> {
        let pid = tokio::select! {
            pid = pid => pid,
            ended = run.as_mut() => return Some(ended),
        };
        let pid = pid?;
        if let Err(e) = self.runtime.kill(node_id, &pid).await {
            tracing::warn!(error = %format!("{e:#}"), node = node_id, "killing a task failed");
        }
        let ended = tokio::time::timeout(KILL_WAIT, run).await;
        if ended.is_err() {
            tracing::warn!(
                node = node_id,
                pid = pid.pid,
                "a killed task's process did not end in time"
            );
        }
        ended.ok()
    }
}
