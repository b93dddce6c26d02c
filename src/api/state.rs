//! What handlers may use: the database, this server's settings, where node directories live,
//! the readiness probes, and the wake-ups of the scheduler's loops.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::PgPool;

use crate::domain::vm_size::VmSizeTable;
use crate::ops::wake::{notify_leader, Wakeups};
use crate::runtime::agents::Leading;
use crate::runtime::agents::Peers;
use crate::runtime::{Layout, Runtime};

/// What readiness looks at besides the database.
pub struct Probes {
    pub runtime: Arc<Runtime>,
    /// Set by the scheduler while this server leads it.
    pub leading: Leading,
}

impl Probes {
    /// Whether this server leads the scheduler now.
    pub fn leads(&self) -> bool {
        self.leading.get()
    }
}

/// What handlers need to know about this server's setup.
pub struct Settings {
    pub account: String,
    pub default_image: String,
    /// What pools whose `imageReference` the image map does not name run.
    pub marketplace_image: String,
    pub vm_sizes: VmSizeTable,
    /// "publisher/offer/sku" (lower case) or an image id -> Docker image.
    pub image_map: HashMap<String, String>,
    pub max_nodes_per_pool: i32,
    /// Where s3:// and file:// BES references may point.
    pub storage_roots: crate::storage::Roots,
    /// Whether URLs users give may lead to this host's own addresses (`--allow-local-urls`).
    pub allow_local_urls: bool,
    /// Where BES outputs without an override and BES job logs go.
    pub bes_storage: crate::storage::DataReference,
    pub classic_concurrency: i32,
    /// How long a client may take to send a request's body (api::guard).
    pub body_read_timeout: std::time::Duration,
    /// `--public-url`: the base of the links in answers, whatever the request says.
    pub public_url: Option<String>,
    /// `--metrics-token`: what `/metrics` takes (as a bearer token); None: metrics are off.
    pub metrics_token: Option<String>,
}

pub struct AppState {
    pub db: PgPool,
    pub settings: Settings,
    /// Where node and task directories live on this host.
    pub layout: Layout,
    /// The nodes, whose agents the files API asks for their files.
    pub runtime: Arc<Runtime>,
    /// The other servers on the database: the leader answers for its nodes' files.
    pub peers: Arc<Peers>,
    /// What /health/ready checks besides the database.
    pub probes: Probes,
    wake: Wakeups,
    /// What tasks' authentication tokens are signed with (`api::auth`).
    pub task_key: crate::domain::task_token::TokenKey,
}

impl AppState {
    pub fn new(
        db: PgPool,
        settings: Settings,
        (layout, peers, task_key): (Layout, Arc<Peers>, crate::domain::task_token::TokenKey),
        probes: Probes,
        wake: Wakeups,
    ) -> Self {
        Self {
            db,
            settings,
            layout,
            peers,
            runtime: probes.runtime.clone(),
            probes,
            wake,
            task_key,
        }
    }

    /// Tells the allocator that a pool changed.
    pub fn wake_allocator(&self) {
        self.wake.allocate.notify_one();
        self.notify_leader("allocate");
    }

    /// Tells the BES driver that a job was started or cancelled.
    pub fn wake_bes(&self) {
        self.wake.bes.notify_one();
        self.notify_leader("bes");
    }

    /// Tells the dispatcher that tasks changed (added, ended, jobs enabled or deleted).
    pub fn wake_dispatcher(&self) {
        self.wake.jobs_changed();
        self.notify_leader("dispatch");
    }

    /// The leading scheduler may be another process: tell it through PostgreSQL too.
    fn notify_leader(&self, what: &'static str) {
        notify_leader(&self.db, what);
    }
}
