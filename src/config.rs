// Long: every command and every flag with its environment variable, one table to read as a whole.
//! Command line and environment. Everything the server reads from outside is read here, once.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "batchpool",
    version,
    about = "Self-hosted batch pools: the Azure Batch API over Docker nodes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// How log lines are written to stderr: `text` for people, `json` (one object a line) for a
    /// log collector.
    #[arg(long, global = true, env = "BATCHPOOL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the server.
    Serve(Box<ServeConfig>),
    /// Build a node image with no registry: the default one from a static busybox, or with
    /// --debian the Debian one from Debian's packages.
    BuildNodeImage(BuildImageConfig),
    /// Batch accounts and their Shared Key keys.
    Account(AccountConfig),
    /// Docker hosts nodes run on, added and removed while servers run.
    Host(HostConfig),
    /// Whether a server is ready (`/health/ready` answers 200): exit status 0 if so, 1 if not.
    /// For container healthchecks, where the image has no curl.
    Health(HealthConfig),
    /// Simulated nodes for `serve --runtime simulated`: thousands of node agents in one process,
    /// whose commands only pretend to run (docs/fleet-sim.md).
    FleetSim(FleetSimConfig),
    /// The client commands: pool, job, task, queue, status (docs/cli.md).
    #[command(flatten)]
    Client(crate::cli::ClientCommand),
    /// The node agent, which runs inside each Docker node (the server starts it; see
    /// docs/nodes.md, "The node agent"). It reads BATCHPOOL_AGENT_URL, BATCHPOOL_AGENT_NODE and
    /// BATCHPOOL_AGENT_SECRET.
    #[command(hide = true)]
    Agent,
    /// Unpacks a zip file into a directory that exists: what installs an application package
    /// on a node, run there by the node's copy of this program, so node images need no unzip.
    #[command(hide = true)]
    Unzip {
        zip: std::path::PathBuf,
        dir: std::path::PathBuf,
    },
}

#[derive(clap::Args, Debug, Clone)]
pub struct HealthConfig {
    /// The server's API.
    #[arg(
        long,
        env = "BATCHPOOL_HEALTH_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// Ask only whether the process answers (`/health`), not whether it is ready.
    #[arg(long)]
    pub live: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct AccountConfig {
    #[command(subcommand)]
    pub action: AccountAction,
    #[command(flatten)]
    pub db: DatabaseArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct HostConfig {
    #[command(subcommand)]
    pub action: HostAction,
    #[command(flatten)]
    pub db: DatabaseArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum HostAction {
    /// The hosts added here (not those given with `serve --docker-host`).
    List,
    /// Adds a host, as `serve --docker-host` names one (`URL[,cpus=N][,memory=MiB][,tls=DIR]`),
    /// or changes the caps of one added before. The leader takes it within seconds.
    Add { host: crate::domain::host::HostSpec },
    /// Removes an added host: it takes no new nodes; its nodes stay until their pools let them
    /// go.
    Remove { url: String },
}

/// Which database a command works on, as `serve` finds it.
#[derive(clap::Args, Debug, Clone)]
pub struct DatabaseArgs {
    /// PostgreSQL to use; without it, the server's own in the data directory.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub database_url: Option<Secret>,
    #[arg(
        long,
        env = "BATCHPOOL_DATA_DIR",
        default_value = "batchpool-data",
        global = true
    )]
    pub data_dir: PathBuf,
}

#[derive(Subcommand, Debug, Clone)]
pub enum AccountAction {
    /// The accounts' names.
    List,
    /// An account's two keys.
    Show { name: String },
    /// A new account with new keys (printed).
    Create {
        name: String,
        /// Link a storage account (an Azure Storage connection string): resource files name its
        /// containers with autoStorageContainerName.
        #[arg(long)]
        storage: Option<String>,
    },
    /// Links a storage account to the account (an Azure Storage connection string, whose key
    /// signs the downloads of autoStorageContainerName resource files), or with `--unlink`
    /// removes the link.
    Storage {
        name: String,
        #[arg(required_unless_present = "unlink")]
        connection_string: Option<String>,
        #[arg(long, conflicts_with = "connection_string")]
        unlink: bool,
    },
    /// A new primary or secondary key (printed); the other keeps working meanwhile. `pool-service`
    /// replaces the Pool Service authorization key.
    Rotate {
        name: String,
        #[arg(long, value_parser = ["primary", "secondary", "pool-service"], default_value = "primary")]
        key: String,
    },
    /// Adds a version of an application package (a zip file) to the account, for pools' and
    /// tasks' applicationPackageReferences. The application's first version is its default
    /// (what a reference without a version gets) until `--default` names another.
    Package {
        name: String,
        application: String,
        version: String,
        file: PathBuf,
        /// Make this version the application's default.
        #[arg(long)]
        default: bool,
        #[arg(long)]
        display_name: Option<String>,
    },
    /// What the account's compute hours cost from now on (of pools billed to `--plan`, or to no
    /// plan), in the installation's one currency; without `--compute-hour`, every price set.
    Price {
        name: String,
        #[arg(long)]
        plan: Option<String>,
        /// ISO 4217, e.g. EUR.
        #[arg(long, requires = "compute_hour")]
        currency: Option<String>,
        /// A dedicated node's compute hour, e.g. 0.12.
        #[arg(long, requires = "currency")]
        compute_hour: Option<String>,
        /// A low-priority node's compute hour (default: as a dedicated one's).
        #[arg(long, requires = "compute_hour")]
        low_priority_compute_hour: Option<String>,
        /// A vmSize's own price of a dedicated node's hour, SIZE=PRICE (repeatable).
        #[arg(long, requires = "compute_hour")]
        vm_size: Vec<String>,
        /// Compute hours each calendar month includes: the plan's first that many cost nothing,
        /// and the prices above are those of the hours after them.
        #[arg(long, requires = "compute_hour")]
        included_hours: Option<String>,
    },
    /// The monthly budget of the account's pools billed to `--plan` (without it: of all its
    /// pools), in its prices' currency, and what happens when it is used up; with `--remove`,
    /// removes it; without `--monthly`, lists the account's budgets and the month's cost.
    Budget {
        name: String,
        #[arg(long)]
        plan: Option<String>,
        /// The amount a calendar month (UTC) may cost, e.g. 500.
        #[arg(long, conflicts_with = "remove")]
        monthly: Option<String>,
        /// When the month's cost reaches it: log only (none), refuse growth (stop-growth), or
        /// also resize the pools to zero as their running tasks end (drain).
        #[arg(long, value_parser = ["none", "stop-growth", "drain"], default_value = "none", requires = "monthly")]
        at_limit: String,
        #[arg(long)]
        remove: bool,
    },
    /// The Pool Service quotas of an account: how many pools it may make, and how many VMs each.
    Quota {
        name: String,
        #[arg(long)]
        max_pools: Option<i32>,
        #[arg(long)]
        max_vms_per_pool: Option<i32>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RuntimeChoice {
    /// Docker where an engine answers, else local.
    Auto,
    Docker,
    Local,
    /// Nodes simulated by a `batchpool fleet-sim` process (`--fleet-sim`), for measuring the
    /// server with thousands of nodes.
    Simulated,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on; port 0 picks a free one (the address is printed).
    #[arg(long, env = "BATCHPOOL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// PostgreSQL to use. Without it, the server runs its own in the data directory.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<Secret>,

    /// Where the server keeps its own PostgreSQL and the nodes' directories.
    #[arg(long, env = "BATCHPOOL_DATA_DIR", default_value = "batchpool-data")]
    pub data_dir: PathBuf,

    #[arg(long, env = "BATCHPOOL_RUNTIME", value_enum, default_value = "auto")]
    pub runtime: RuntimeChoice,

    /// With `--runtime simulated`: the URL of the `batchpool fleet-sim` that simulates the nodes.
    #[arg(
        long,
        env = "BATCHPOOL_FLEET_SIM",
        default_value = "http://127.0.0.1:8090"
    )]
    pub fleet_sim: String,

    /// A Docker engine nodes run on: `unix:///var/run/docker.sock` or `tcp://HOST:PORT`, with
    /// optional caps on what its nodes may take together: `URL,cpus=N,memory=MiB`. Repeat it
    /// for several hosts (docs/nodes.md, "Docker hosts"). Default: the local engine, no cap.
    #[arg(long = "docker-host", env = "DOCKER_HOST")]
    pub docker_hosts: Vec<crate::domain::host::HostSpec>,

    /// Seconds a Docker host may go without answering before its nodes are lost: their tasks
    /// are requeued and the nodes replaced on the other hosts (docs/nodes.md, "Docker hosts").
    #[arg(long, env = "BATCHPOOL_HOST_TIMEOUT", default_value_t = 30)]
    pub host_timeout: u64,

    /// Seconds a node's agent may go without reaching this server (at least 10: a running
    /// agent reports every 5 s): a new node whose agent never does is unusable, and a node whose
    /// agent falls silent is lost, its tasks requeued and the node replaced (docs/nodes.md, "The
    /// node agent").
    #[arg(long, env = "BATCHPOOL_AGENT_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(10..))]
    pub agent_timeout: u64,

    /// Where nodes' agents connect to this server (docs/nodes.md, "The node agent"): agent
    /// routes only, each request authenticated as its node. Keep the port across restarts:
    /// running agents come back to it. Default: 0.0.0.0:8081 for Docker nodes, 127.0.0.1:8081
    /// for local ones.
    #[arg(long, env = "BATCHPOOL_AGENT_LISTEN")]
    pub agent_listen: Option<SocketAddr>,

    /// The URL Docker nodes' agents are given to reach this server. Without it: this host's
    /// address on each node's network, at --agent-listen's port (right for engines on this
    /// host). Local nodes' agents always use this host's own address.
    #[arg(long, env = "BATCHPOOL_AGENT_URL")]
    pub agent_url: Option<String>,

    /// The URL other servers on the same database use to ask this one for its nodes' files (its
    /// --agent-listen port). Default: --agent-url if given, else http://127.0.0.1 at
    /// --agent-listen's port (servers on one machine).
    #[arg(long, env = "BATCHPOOL_PEER_URL")]
    pub peer_url: Option<String>,

    /// The account pools belong to until Shared Key accounts arrive.
    #[arg(long, env = "BATCHPOOL_ACCOUNT", default_value = "batchpool")]
    pub account: String,

    /// The image a node runs when the pool names none (see README: image mapping).
    #[arg(
        long,
        env = "BATCHPOOL_DEFAULT_IMAGE",
        default_value = "batchpool/node:latest"
    )]
    pub default_image: String,

    /// The image a node runs when its pool names a marketplace `imageReference` that the image
    /// map does not: by default the Debian image (bash, coreutils, python3), which the server
    /// builds with debootstrap on an engine that lacks it.
    #[arg(
        long,
        env = "BATCHPOOL_MARKETPLACE_IMAGE",
        default_value = crate::domain::pool::DEBIAN_IMAGE
    )]
    pub marketplace_image: String,

    /// JSON file of extra vm sizes: {"name": {"vcpus": 1, "memoryMiB": 1024}}.
    #[arg(long, env = "BATCHPOOL_VM_SIZES")]
    pub vm_sizes: Option<PathBuf>,

    /// JSON file mapping "publisher/offer/sku" (lower case) of an imageReference to a Docker image.
    #[arg(long, env = "BATCHPOOL_IMAGE_MAP")]
    pub image_map: Option<PathBuf>,

    /// Quota: the most nodes one pool may have.
    #[arg(long, env = "BATCHPOOL_MAX_NODES_PER_POOL", default_value_t = 100)]
    pub max_nodes_per_pool: i32,

    /// How often the scheduler looks for work nobody told it about (milliseconds).
    #[arg(
        long,
        env = "BATCHPOOL_BACKUP_TICK_MS",
        default_value_t = 2000,
        hide = true
    )]
    pub backup_tick_ms: u64,

    /// The URL clients reach the API at (a TLS proxy in front, say), for the links in answers
    /// (`odata.nextLink`, `url`, file URLs). Without it: the request's `X-Forwarded-Proto` and
    /// `X-Forwarded-Host` where a proxy sets them, else `http://` and its `Host`.
    #[arg(long, env = "BATCHPOOL_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Turns `/metrics` (Prometheus' text format) on, for scrapers that send
    /// `Authorization: Bearer <this token>`. It names every account's pools and jobs: it is the
    /// operator's, not an account's.
    #[arg(long, env = "BATCHPOOL_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<Secret>,

    /// Let tasks' resource-file and output-file URLs, and BES jobs' inputs and outputs, lead to
    /// this host's own addresses (loopback, and link-local ones such as a cloud metadata
    /// service). Off by default: the server, not the node, makes those requests. Turn it on to
    /// use storage on this host (Azurite, say).
    #[arg(long, env = "BATCHPOOL_ALLOW_LOCAL_URLS")]
    pub allow_local_urls: bool,

    /// How much of each task's stdout.txt and stderr.txt the server keeps when its attempt ends,
    /// to read after its node is gone (docs/data.md, "Output that outlives its node"): the
    /// first and the last this many MiB of each (0 to 64; 0 keeps none).
    #[arg(long, env = "BATCHPOOL_KEPT_OUTPUT_MIB", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(0..=64))]
    pub kept_output_mib: u64,

    /// Where `s3://` and `file://` BES inputs and outputs may point (prefixes; repeat the flag or
    /// separate with commas). Azure Blob references need no root: their credentials say it all.
    #[arg(
        long = "storage-root",
        env = "BATCHPOOL_STORAGE_ROOTS",
        value_delimiter = ','
    )]
    pub storage_roots: Vec<String>,

    /// Where BES outputs without an override, and the logs of every BES job (Batch File
    /// Conventions), are stored: a file:// or s3:// URL, or an Azure Storage connection string.
    /// Default: file://<data-dir>/bes-storage/.
    #[arg(long, env = "BATCHPOOL_BES_STORAGE", hide_env_values = true)]
    pub bes_storage: Option<Secret>,

    /// How many BES jobs without AzureBatchPoolId run at once in the shared classic environment
    /// (first in, first out across all accounts): its built-in pool has this many nodes.
    #[arg(long, env = "BATCHPOOL_CLASSIC_CONCURRENCY", default_value_t = 2)]
    pub classic_concurrency: i32,

    /// The vm size of the classic environment's nodes.
    #[arg(
        long,
        env = "BATCHPOOL_CLASSIC_VM_SIZE",
        default_value = "standard_d2_v3"
    )]
    pub classic_vm_size: String,

    /// How many nodes the allocator creates or removes at once (a new node's wait for its
    /// agent's hello is not counted).
    #[arg(long, env = "BATCHPOOL_NODE_CONCURRENCY", default_value_t = 16)]
    pub node_concurrency: usize,

    /// Single-slot tasks each node may hold per task slot beyond the tasks it runs: each starts
    /// the moment a slot frees, with no round trip to this server (docs/scheduling.md, "Tasks
    /// ahead"). `auto`: 2, for tasks of jobs whose recent tasks ran short, on nodes running only
    /// such tasks. A number (0 to 16): that many for every single-slot task, even behind long
    /// ones. 0: a task is placed only on a free slot.
    #[arg(long, env = "BATCHPOOL_TASKS_AHEAD_PER_SLOT", default_value = "auto")]
    pub tasks_ahead_per_slot: crate::domain::placement::AheadSetting,

    /// Seconds a client may take to send a request's headers; also how long an idle keep-alive
    /// connection stays open.
    #[arg(long, env = "BATCHPOOL_HEADER_READ_TIMEOUT", default_value_t = 30)]
    pub header_read_timeout: u64,

    /// Seconds a client may take to send a request's body.
    #[arg(long, env = "BATCHPOOL_BODY_READ_TIMEOUT", default_value_t = 60)]
    pub body_read_timeout: u64,

    /// How many connections are served at once; more wait until one closes.
    #[arg(long, env = "BATCHPOOL_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,

    /// Seconds a request waits for a database connection before it is answered 503.
    #[arg(long, env = "BATCHPOOL_DB_ACQUIRE_TIMEOUT", default_value_t = 5)]
    pub db_acquire_timeout: u64,

    /// Threads that run the server's work (its API and its scheduler). Unset: one per CPU of
    /// the host.
    #[arg(long, env = "BATCHPOOL_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct FleetSimConfig {
    /// Where the simulator takes the server's orders (make, stop, restart, remove a node).
    #[arg(
        long,
        env = "BATCHPOOL_FLEET_SIM_LISTEN",
        default_value = "127.0.0.1:8090"
    )]
    pub listen: std::net::SocketAddr,
}

#[derive(clap::Args, Debug, Clone)]
pub struct BuildImageConfig {
    /// The image's name: `batchpool/node:latest`, or `batchpool/debian:bookworm` with --debian.
    #[arg(long)]
    pub tag: Option<String>,
    /// A statically linked busybox (Debian: busybox-static).
    #[arg(long, default_value = "/bin/busybox", conflicts_with = "debian")]
    pub busybox: PathBuf,
    /// Build the Debian image (bash, coreutils, python3) that pools naming a marketplace
    /// imageReference run, from Debian's packages with debootstrap (as root).
    #[arg(long)]
    pub debian: bool,
    /// With --debian: the root filesystem to build from, made there by debootstrap when it has
    /// no /usr/bin/bash yet (a second build reuses it). Unset: a temporary directory.
    #[arg(long, requires = "debian")]
    pub rootfs: Option<PathBuf>,
    /// With --debian: the Debian mirror debootstrap downloads from.
    #[arg(long, requires = "debian")]
    pub mirror: Option<String>,
    /// The engine to build on, as `serve --docker-host` names one (`tls=DIR` included).
    #[arg(long, env = "DOCKER_HOST")]
    pub docker_host: Option<crate::domain::host::HostSpec>,
}

/// A value that must not reach logs: Debug and Display print a placeholder.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}
