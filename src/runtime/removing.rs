//! Directories on nodes held for their removal: an attempt whose task's directory is held
//! starts only once the hold is let go. A task deleted (or deleted while it ran) leaves its
//! directory to be removed after a check that no task of the same id exists again; a task
//! added with that id meanwhile, and started on the same node, has the very same directory.
//! Held from before that check until the removal is over, the directory cannot be the new
//! task's while it goes: either the check sees the new task, or the new task's start waits.
//! The wait is one request to the node's agent, which moves the directory out of its path and
//! removes its files in the background (`agent::trash`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::keyed_locks::KeyedLocks;

/// A node and a directory below its root.
pub type Removing = Arc<KeyedLocks<(String, PathBuf)>>;

fn key(node_id: &str, rel: &Path) -> (String, PathBuf) {
    (node_id.to_string(), rel.to_path_buf())
}

impl super::Runtime {
    /// Removes a deleted task's directory `rel` on the node (as `remove_on_node` does) unless
    /// `taken`, asked once the directory is held, says a task of the same id has it now.
    pub async fn remove_unless_taken<E>(
        &self,
        node_id: &str,
        rel: &Path,
        taken: impl Future<Output = Result<bool, E>>,
    ) -> Result<(), E> {
        let _held = self.removing.lock(key(node_id, rel)).await;
        if !taken.await? {
            self.remove_on_node(node_id, rel).await;
        }
        Ok(())
    }

    /// Waits while `rel` on the node is held for its removal: a new attempt then starts in a
    /// directory of its own. Nothing held (the usual case), it makes no key.
    pub async fn wait_for_removal(&self, node_id: &str, rel: &Path) {
        if !self.removing.any_held() {
            return;
        }
        let key = key(node_id, rel);
        if self.removing.is_held(&key) {
            drop(self.removing.lock(key).await);
        }
    }
}
