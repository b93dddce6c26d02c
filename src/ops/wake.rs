//! Wake-ups of the scheduler's loops: in this process through `Notify`s, across processes
//! through PostgreSQL NOTIFY on `WAKE_CHANNEL`, which the leading scheduler listens to.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;

/// The PostgreSQL channel API servers notify the leading scheduler on ("allocate", "dispatch").
pub const WAKE_CHANNEL: &str = "batchpool_wake";

/// What the API pokes when it changes something a loop acts on. In this process through the
/// `Notify`s; across processes through NOTIFY on `WAKE_CHANNEL`, which the leader listens to.
#[derive(Clone)]
pub struct Wakeups {
    /// Pools changed: nodes to add or remove.
    pub allocate: Arc<Notify>,
    /// Tasks or slots changed: placements to make, attempts to kill.
    pub dispatch: Arc<Notify>,
    /// Jobs changed (a job deleted, say): housekeeping, which runs beside the dispatcher in a
    /// loop of its own, may have work.
    pub housekeep: Arc<Notify>,
    /// BES jobs started or cancelled.
    pub bes: Arc<Notify>,
    /// How often the loops look even when nobody woke them.
    pub tick: Duration,
}

impl Wakeups {
    /// Jobs or tasks changed (added, ended, deleted): wakes the dispatcher and housekeeping.
    pub fn jobs_changed(&self) {
        self.dispatch.notify_one();
        self.housekeep.notify_one();
    }

    pub fn new(tick: Duration) -> Self {
        Self {
            allocate: Arc::default(),
            dispatch: Arc::default(),
            housekeep: Arc::default(),
            bes: Arc::default(),
            tick,
        }
    }
}

/// Tells the leading scheduler, which may be another process, through PostgreSQL; off the
/// caller's path.
pub fn notify_leader(db: &PgPool, what: &'static str) {
    let db = db.clone();
    tokio::spawn(async move {
        if let Err(e) = crate::store::notify(&db, WAKE_CHANNEL, what).await {
            tracing::debug!(error = %e, "notifying the leader failed; its backup tick covers");
        }
    });
}

/// Turns notifications from other servers into wake-ups of this one's loops.
pub async fn listen(db: PgPool, wake: Wakeups, cancel: tokio_util::sync::CancellationToken) {
    loop {
        match crate::store::leader::listen(&db, WAKE_CHANNEL).await {
            Ok(mut listener) => loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    n = listener.recv() => match n {
                        Ok(n) if n.payload() == "allocate" => wake.allocate.notify_one(),
                        Ok(n) if n.payload() == "dispatch" => wake.jobs_changed(),
                        Ok(n) if n.payload() == "bes" => wake.bes.notify_one(),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "listening for wake-ups failed; reconnecting");
                            break;
                        }
                    },
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for wake-ups; the backup tick covers")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wake.tick) => {}
        }
    }
}
