//! One async lock per key (a job and a node, a node and a package version, a directory on a
//! node): made on first use, and dropped once nobody holds it or waits for it, so the map holds
//! only the work in flight.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

pub struct KeyedLocks<K> {
    map: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K: Eq + Hash + Clone> KeyedLocks<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            map: Mutex::default(),
        })
    }

    /// Whether any lock is held (or waited for) now: the map is empty whenever nothing is in
    /// flight, so a caller can skip making a key it would only look up.
    pub fn any_held(&self) -> bool {
        !self.map.lock().expect("lock").is_empty()
    }

    /// Whether the key's lock is held (or waited for) now.
    pub fn is_held(&self, key: &K) -> bool {
        self.map.lock().expect("lock").contains_key(key)
    }

    /// Waits for the key's lock; it is held until the returned guard is dropped.
    pub async fn lock(self: &Arc<Self>, key: K) -> Held<K> {
        let lock = {
            let mut map = self.map.lock().expect("lock");
            Arc::clone(map.entry(key.clone()).or_default())
        };
        Held {
            guard: Some(lock.lock_owned().await),
            owner: Arc::clone(self),
            key,
        }
    }
}

/// A key's lock, held.
pub struct Held<K: Eq + Hash> {
    guard: Option<OwnedMutexGuard<()>>,
    owner: Arc<KeyedLocks<K>>,
    key: K,
}

impl<K: Eq + Hash> Drop for Held<K> {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.owner.map.lock().expect("lock");
        // Only the map's own reference left: nobody holds the lock or waits for it.
        if map
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_s_lock_goes_once_nobody_holds_it() {
        let locks = KeyedLocks::new();
        assert!(!locks.is_held(&1) && !locks.any_held());
        let held = locks.lock(1).await;
        assert!(locks.is_held(&1) && !locks.is_held(&2) && locks.any_held());
        let waiting = tokio::spawn({
            let locks = Arc::clone(&locks);
            async move { locks.lock(1).await }
        });
        tokio::task::yield_now().await;
        drop(held);
        let second = waiting.await.unwrap();
        assert_eq!(locks.map.lock().unwrap().len(), 1, "kept while it is held");
        drop(second);
        assert!(locks.map.lock().unwrap().is_empty());
        assert!(!locks.is_held(&1) && !locks.any_held());
    }
}
