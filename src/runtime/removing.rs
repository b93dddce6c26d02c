//! Directories on nodes held for their removal: an attempt whose task's directory is held
//! starts only once the hold is let go. A task deleted (or deleted while it ran) leaves its
//! directory to be removed after a check that no task of the same id exists again; a task
//! added with that id meanwhile, and started on the same node, has the very same directory.
//! Held from before that check until the removal is over, the directory cannot be the new
//! task's while it goes: either the check sees the new task, or the new task's start waits.
//! The wait is one request to the node's agent, which moves the directory out of its path and
//! removes its files in the background (`agent::trash`).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

impl super::Runtime {
    /// Removes a deleted task's directory `rel` on the node (as `remove_on_node` does) unless
    /// `taken`, asked once the directory is held, says a task of the same id has it now.
    pub async fn remove_unless_taken<E>(
        &self,
        node_id: &str,
        rel: &Path,
        taken: impl Future<Output = Result<bool, E>>,
    ) -> Result<(), E> {
        let _held = self.removing.hold(node_id, rel).await;
        if !taken.await? {
            self.remove_on_node(node_id, rel).await;
        }
        Ok(())
    }

    /// Waits while `rel` on the node is held for its removal: a new attempt then starts in a
    /// directory of its own.
    pub async fn wait_for_removal(&self, node_id: &str, rel: &Path) {
        if let Some(over) = self.removing.of(node_id, rel) {
            over.cancelled().await;
        }
    }
}

/// A node and a directory below its root.
type Key = (String, PathBuf);

#[derive(Default)]
pub struct Removing {
    held: Arc<Mutex<HashMap<Key, CancellationToken>>>,
}

impl Removing {
    /// Holds `rel` on the node, once any other hold on it is let go.
    pub async fn hold(&self, node_id: &str, rel: &Path) -> DirHold {
        let key = (node_id.to_string(), rel.to_path_buf());
        loop {
            let other = {
                let mut held = self.held.lock().expect("lock");
                match held.get(&key) {
                    Some(other) => other.clone(),
                    None => {
                        let over = CancellationToken::new();
                        held.insert(key.clone(), over.clone());
                        let held = Arc::clone(&self.held);
                        return DirHold { held, key, over };
                    }
                }
            };
            other.cancelled().await;
        }
    }

    /// What tells when the hold on `rel` on the node is let go, if it is held.
    pub fn of(&self, node_id: &str, rel: &Path) -> Option<CancellationToken> {
        let held = self.held.lock().expect("lock");
        if held.is_empty() {
            return None;
        }
        held.get(&(node_id.to_string(), rel.to_path_buf())).cloned()
    }
}

/// A directory held for its removal; let go when dropped.
pub struct DirHold {
    held: Arc<Mutex<HashMap<Key, CancellationToken>>>,
    key: Key,
    over: CancellationToken,
}

impl Drop for DirHold {
    fn drop(&mut self) {
        self.held.lock().expect("lock").remove(&self.key);
        self.over.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_held_directory_is_let_go_once_and_a_second_hold_waits_for_it() {
        let removing = Removing::default();
        let dir = Path::new("workitems/job/job-1/task");
        assert!(removing.of("node", dir).is_none(), "nothing held");
        let first = removing.hold("node", dir).await;
        let over = removing.of("node", dir).expect("held");
        assert!(removing.of("other", dir).is_none(), "held on its node only");
        assert!(removing.of("node", Path::new("workitems/job")).is_none());
        let second = tokio::spawn({
            let removing = Arc::new(removing);
            async move {
                let hold = removing
                    .hold("node", Path::new("workitems/job/job-1/task"))
                    .await;
                (removing, hold)
            }
        });
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "a second hold waits for the first");
        assert!(!over.is_cancelled());
        drop(first);
        assert!(over.is_cancelled(), "letting go tells whoever waits");
        let (removing, hold) = second.await.unwrap();
        assert!(removing.of("node", dir).is_some(), "held again");
        drop(hold);
        assert!(removing.of("node", dir).is_none());
    }
}
