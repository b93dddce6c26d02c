//! Builds the server from its config: database (ours or the given one), migrations, runtime,
//! the scheduler, and the HTTP listener. Runs until SIGINT/SIGTERM.

mod account;
mod agents;
mod budget;
mod host;
mod installation;
mod price;
mod servers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::api::state::{AppState, Settings};
use crate::config::{RuntimeChoice, ServeConfig};
use crate::domain::task_token::Issuer;
use crate::domain::vm_size::VmSizeTable;
use crate::embedded_pg::EmbeddedPostgres;
use crate::runtime::agents::Peers;
use crate::runtime::docker::DockerHosts;
use crate::runtime::{docker, DockerRuntime, Layout, LocalRuntime, Runtime, SimulatedRuntime};
use crate::scheduler::{Scheduler, Wakeups};
use crate::{api, scheduler, store};

pub use account::account_command;
pub use host::host_command;

pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    // A socket for each node's agent, and each client.
    crate::sys::process::raise_fd_limit();
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let data_dir = std::path::absolute(&config.data_dir)?;
    let settings = load_settings(&config)?;

    let acquire_timeout = std::time::Duration::from_secs(config.db_acquire_timeout);
    let (db, embedded) =
        open_database(config.database_url.as_ref(), &data_dir, 16, acquire_timeout).await?;
    let embedded = embedded.map(Arc::new);
    let supervising = CancellationToken::new();
    let supervisor = embedded.clone().map(|pg| {
        let cancel = supervising.clone();
        tokio::spawn(async move { pg.supervise(cancel).await })
    });
    let result = run(config, data_dir, settings, db).await;
    supervising.cancel();
    if let Some(supervisor) = supervisor {
        let _ = supervisor.await;
    }
    if let Some(pg) = embedded {
        pg.stop().await;
    }
    result
}

/// Connects to the database a command names: DATABASE_URL, or the server's own PostgreSQL in the
/// data directory (started for the command if the server is not running, and stopped after).
pub async fn open_database(
    url: Option<&crate::config::Secret>,
    data_dir: &std::path::Path,
    max_connections: u32,
    acquire_timeout: std::time::Duration,
) -> anyhow::Result<(PgPool, Option<EmbeddedPostgres>)> {
    let (embedded, options) = match url {
        Some(url) => (
            None,
            url.expose()
                .parse::<PgConnectOptions>()
                .context("DATABASE_URL is not a PostgreSQL URL")?,
        ),
        None => {
            std::fs::create_dir_all(data_dir)?;
            let pg = EmbeddedPostgres::start(&std::path::absolute(data_dir)?).await?;
            let options = pg.connect_options();
            (Some(pg), options)
        }
    };
    let connected = async {
        // A request that cannot get a connection soon is answered 503 (api::error) rather than
        // held for sqlx's default 30 s.
        let db = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(acquire_timeout)
            .connect_with(options)
            .await
            .context("connecting to PostgreSQL")?;
        store::MIGRATOR
            .run(&db)
            .await
            .context("running migrations")?;
        anyhow::Ok(db)
    };
    match connected.await {
        Ok(db) => Ok((db, embedded)),
        Err(e) => {
            // Leave no PostgreSQL running behind a failed start.
            if let Some(pg) = embedded {
                pg.stop_if_started_here().await;
            }
            Err(e)
        }
    }
}

async fn run(
    config: ServeConfig,
    data_dir: PathBuf,
    settings: Settings,
    db: PgPool,
) -> anyhow::Result<()> {
    let (server_id, task_key) =
        installation::installation(&db, &settings.account, &data_dir).await?;
    let layout = Layout::new(&data_dir);
    let (runtime, agent_listener) = choose_runtime(&config, layout.clone(), &server_id).await?;
    crate::api::batch::identity::record_task_user(runtime.name());
    let runtime = Arc::new(runtime);
    tracing::info!(runtime = runtime.name(), server_id = %server_id, "runtime ready");
    runtime.ensure_default_image(&config.default_image).await;
    std::fs::create_dir_all(&layout.nodes)?;

    let cancel = CancellationToken::new();
    let wake = Wakeups::new(std::time::Duration::from_millis(config.backup_tick_ms));
    let probes = api::state::Probes {
        runtime: runtime.clone(),
        leading: Default::default(),
    };
    let limits = limits(&config);
    let secret = store::peer_secret(&db).await?;
    let peers = Arc::new(Peers::new(agent_listener.peer_url(&config), &secret)?);
    let (leading, peer_url) = (probes.leading.clone(), peers.url.clone());
    let bes = bes_config(&config, &settings)?;
    let listener =
        api::serve::bind(config.listen).with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let tokens = Issuer::new(task_key, settings.public_url.clone());
    let state = Arc::new(AppState::new(
        db.clone(),
        settings,
        (layout, peers.clone(), tokens.key.clone()),
        probes,
        wake.clone(),
    ));
    let agents = agent_listener.serve(
        (runtime.clone(), peers, leading.clone(), db.clone()),
        api::tasks_router(state.clone()),
        server_id.clone(),
        agent_limits(&config),
        cancel.clone(),
    );
    let scheduler = tokio::spawn(scheduler::run(
        Scheduler {
            db: db.clone(),
            runtime,
            leading,
            peer_url,
            server_id,
            wake,
            node_concurrency: config.node_concurrency,
            tasks_ahead_per_slot: config.tasks_ahead_per_slot,
            max_nodes_per_pool: config.max_nodes_per_pool,
            bes,
            fetcher: scheduler::task_files::Fetcher::new(config.allow_local_urls)
                .keeping(config.kept_output_mib << 20),
            job_maker: Arc::new(api::batch::schedules::SpecJobs(state.clone())),
            tokens,
        },
        cancel.clone(),
    ));
    // On stdout, for people and for tests that start the server on port 0.
    println!("batchpool listening on http://{addr}");
    tracing::info!(%addr, "listening");
    let shutdown = cancel.clone();
    api::serve::serve(listener, api::router(state), &limits, async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        shutdown.cancel();
    })
    .await;
    cancel.cancel();
    let _ = scheduler.await;
    let _ = agents.await;
    db.close().await;
    Ok(())
}

/// Connections the agents' listener serves at once: what the open-file limit leaves beside the
/// API's connections and a reserve (PostgreSQL, Docker engines, files), and never fewer than the
/// API's own bound.
fn agent_connections(open_files: u64, api_connections: usize) -> usize {
    const RESERVE: u64 = 1024;
    let left = open_files.saturating_sub(api_connections as u64 + RESERVE);
    usize::try_from(left)
        .unwrap_or(usize::MAX)
        .max(api_connections)
}

/// The agents' listener's limits: the API's, with as many connections as the open files allow
/// (every node's agent holds one, its long poll, and opens more).
fn agent_limits(config: &ServeConfig) -> api::serve::Limits {
    api::serve::Limits {
        max_connections: agent_connections(
            crate::sys::process::raise_fd_limit(),
            config.max_connections,
        ),
        ..limits(config)
    }
}

fn limits(config: &ServeConfig) -> api::serve::Limits {
    api::serve::Limits {
        header_read_timeout: std::time::Duration::from_secs(config.header_read_timeout),
        max_connections: config.max_connections,
    }
}

/// `--public-url`, checked: an http(s) URL, kept without its trailing `/`.
fn public_url(given: Option<&str>) -> anyhow::Result<Option<String>> {
    let Some(url) = given else {
        return Ok(None);
    };
    let parsed = reqwest::Url::parse(url).with_context(|| format!("--public-url {url:?}"))?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
        "--public-url {url:?} must be an http:// or https:// URL with a host"
    );
    Ok(Some(url.trim_end_matches('/').to_string()))
}

fn bes_config(config: &ServeConfig, settings: &Settings) -> anyhow::Result<scheduler::bes::Config> {
    let (vm_size, size) = settings
        .vm_sizes
        .get(&config.classic_vm_size)
        .with_context(|| {
            format!(
                "--classic-vm-size {:?} is not a known vm size",
                config.classic_vm_size
            )
        })?;
    Ok(scheduler::bes::Config {
        roots: settings.storage_roots.clone(),
        allow_local_urls: settings.allow_local_urls,
        storage: settings.bes_storage.clone(),
        classic_concurrency: settings.classic_concurrency,
        classic_vm_size: vm_size,
        classic_vcpus: size.vcpus,
        classic_memory_mib: size.memory_mib as i64,
        classic_image: settings.default_image.clone(),
    })
}

fn load_settings(config: &ServeConfig) -> anyhow::Result<Settings> {
    let mut vm_sizes = VmSizeTable::builtin();
    if let Some(path) = &config.vm_sizes {
        let json =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        vm_sizes = vm_sizes
            .with_overrides(&json)
            .with_context(|| format!("in {}", path.display()))?;
    }
    let image_map = match &config.image_map {
        None => HashMap::new(),
        Some(path) => {
            let json = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let map: HashMap<String, String> =
                serde_json::from_str(&json).with_context(|| format!("in {}", path.display()))?;
            map.into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect()
        }
    };
    anyhow::ensure!(
        config.max_nodes_per_pool >= 0,
        "--max-nodes-per-pool must not be negative"
    );
    anyhow::ensure!(
        config.classic_concurrency >= 0,
        "--classic-concurrency must not be negative"
    );
    let data_dir = std::path::absolute(&config.data_dir)?;
    let default_storage = url::Url::from_directory_path(data_dir.join("bes-storage"))
        .map_err(|()| anyhow::anyhow!("the data directory is not an absolute path"))?
        .to_string();
    let mut storage_roots = config.storage_roots.clone();
    let bes_storage = match config.bes_storage.as_ref().map(|s| s.expose().to_string()) {
        Some(s) if s.starts_with("file://") || s.starts_with("s3://") => {
            storage_roots.push(s.clone());
            crate::storage::DataReference {
                base_location: Some(s),
                ..Default::default()
            }
        }
        Some(s) => {
            crate::storage::parse_connection_string(&s)
                .map_err(|e| anyhow::anyhow!("--bes-storage: {}", e.message))?;
            crate::storage::DataReference {
                connection_string: Some(s),
                ..Default::default()
            }
        }
        None => {
            storage_roots.push(default_storage.clone());
            crate::storage::DataReference {
                base_location: Some(default_storage),
                ..Default::default()
            }
        }
    };
    Ok(Settings {
        storage_roots: crate::storage::Roots(storage_roots),
        allow_local_urls: config.allow_local_urls,
        bes_storage,
        classic_concurrency: config.classic_concurrency,
        account: config.account.clone(),
        default_image: config.default_image.clone(),
        marketplace_image: config.marketplace_image.clone(),
        vm_sizes,
        image_map,
        max_nodes_per_pool: config.max_nodes_per_pool,
        body_read_timeout: std::time::Duration::from_secs(config.body_read_timeout),
        public_url: public_url(config.public_url.as_deref())?,
        metrics_token: config
            .metrics_token
            .as_ref()
            .map(|t| t.expose().to_string()),
    })
}

/// The runtime, and for Docker nodes the listener their agents connect to.
async fn choose_runtime(
    config: &ServeConfig,
    layout: Layout,
    server_id: &str,
) -> anyhow::Result<(Runtime, agents::AgentListener)> {
    let hosts = &config.docker_hosts;
    let lost_after = std::time::Duration::from_secs(config.host_timeout);
    if config.runtime != RuntimeChoice::Local && !hosts.is_empty() {
        // Hosts named on purpose: one that does not answer is waited for as long as a lost
        // host is, then its nodes are made elsewhere (`hosts::start`).
        let (listener, setup) = agents::AgentListener::for_docker(config, &layout).await?;
        let runtime = DockerHosts::connect(hosts, layout, lost_after, setup).await?;
        tracing::info!(
            hosts = hosts.len(),
            "nodes are containers on the given Docker hosts"
        );
        let agents = listener.agents.clone();
        return Ok((Runtime::new(runtime, agents, server_id), listener));
    }
    if config.runtime == RuntimeChoice::Simulated {
        let (listener, url) = agents::AgentListener::for_local(config).await?;
        let agents = listener.agents.clone();
        let runtime = SimulatedRuntime::new(layout, agents.clone(), url, &config.fleet_sim);
        tracing::info!(fleet = %config.fleet_sim, "nodes are simulated by the fleet simulator");
        return Ok((Runtime::new(runtime, agents, server_id), listener));
    }
    let docker = match config.runtime {
        RuntimeChoice::Local | RuntimeChoice::Simulated => None,
        RuntimeChoice::Docker => Some(docker::connect(None).await?),
        RuntimeChoice::Auto => match docker::connect(None).await {
            Ok(client) => {
                tracing::info!("a Docker engine answers: nodes are containers");
                Some(client)
            }
            Err(e) => {
                tracing::warn!(reason = %format!("{e:#}"), "no Docker engine answers: using the local runtime (nodes are directories and processes)");
                None
            }
        },
    };
    let Some(client) = docker else {
        let (listener, url) = agents::AgentListener::for_local(config).await?;
        let agents = listener.agents.clone();
        let runtime = LocalRuntime::new(layout, agents.clone(), url);
        return Ok((Runtime::new(runtime, agents, server_id), listener));
    };
    let (listener, setup) = agents::AgentListener::for_docker(config, &layout).await?;
    let runtime = DockerHosts::single(
        DockerRuntime::new(client, layout, setup),
        "the local Docker engine",
        lost_after,
    );
    let agents = listener.agents.clone();
    Ok((Runtime::new(runtime, agents, server_id), listener))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
