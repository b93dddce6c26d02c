//! Whether this server leads the scheduler, which the agents' routes follow: only the leader
//! gives agents work and takes their events, and a request it holds goes the moment the lead
//! is lost.

use std::sync::Arc;

/// Whether this server leads the scheduler: set by the scheduler, read by readiness, and waited
/// on by the agents' held requests, which go the moment the lead is lost.
#[derive(Clone)]
pub struct Leading(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Leading {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(false)))
    }
}

impl Leading {
    /// Whether this server leads now.
    pub fn get(&self) -> bool {
        *self.0.borrow()
    }

    pub fn set(&self, leading: bool) {
        self.0.send_replace(leading);
    }

    /// Ends as soon as this server does not lead (at once, if it does not now).
    pub async fn lost(&self) {
        let mut leading = self.0.subscribe();
        // The sender lives in `self`, so the wait ends only on a change.
        let _ = leading.wait_for(|leads| !leads).await;
    }
}

#[cfg(test)]
mod tests {
    use super::Leading;
    use std::time::Duration;

    #[tokio::test]
    async fn a_wait_for_the_lead_lost_ends_when_it_is_lost_and_only_then() {
        let leading = Leading::default();
        // Not leading: at once.
        tokio::time::timeout(Duration::from_secs(5), leading.lost())
            .await
            .expect("lost at once");
        leading.set(true);
        assert!(leading.get());
        let waiting = tokio::spawn({
            let leading = leading.clone();
            async move { leading.lost().await }
        });
        // Still leading (set again to the same): the wait goes on.
        leading.set(true);
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished());
        leading.set(false);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the wait ends once the lead is lost")
            .unwrap();
        assert!(!leading.get());
    }
}
