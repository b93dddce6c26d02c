//! `cargo bench --bench scheduler`: the server as its own process (release build, its own
//! PostgreSQL in a temporary data directory), measured over HTTP with Shared Key signing, each
//! figure next to its physical baseline measured in the same run. Each section starts its own
//! server; BENCH_ONLY=throughput,latency,versions,docker,containers,nodes,hosts,data,files,slurm,scale,
//! autoscale,fleet,failover,eta,fairness,c1m (comma-separated) picks sections.
//!
//! - throughput: BENCH_TASKS (100,000) no-op tasks through addtaskcollection (100 per request,
//!   BENCH_CLIENTS concurrent clients) on a local pool of 2 nodes x BENCH_SLOTS (16) slots,
//!   the server's default tasks ahead (`auto`; BENCH_AHEAD sets `--tasks-ahead-per-slot`), against `xargs -P` the pool's
//!   slots (32) running the same processes;
//! - versions: BENCH_VERSION_ROUNDS (200) rounds of an addtaskcollection of 100 tasks and a list
//!   of 1,000 tasks in 2025-06-01, 2024-02-01.19.0 and 2018-08-01.7.0 (translated), interleaved:
//!   p50 and p99 of each against 2025-06-01's.
//! - latency: BENCH_LATENCY_TRIES (200) single tasks on an idle local pool, submit -> running and
//!   submit -> completed;
//! - docker: BENCH_DOCKER_TASKS (20,000) no-op tasks on a Docker pool of 2 nodes x 16 slots
//!   (each node's agent starts them), against the same tasks on a local pool of the same shape,
//!   and raw `docker exec`s of the same command, 16 at a time;
//! - containers: BENCH_CONTAINER_TASKS (200) no-op tasks with containerSettings, each in a
//!   container of its own, on a one-node Docker pool with BENCH_DOCKER_SLOTS (4) slots, against
//!   `docker run --rm` of the same image and command (engine API and CLI), as many at a time;
//! - nodes: a Docker pool resized 0 -> BENCH_NODES (50) until all idle, against creating and
//!   starting as many containers directly;
//! - hosts: a Docker pool resized 0 -> BENCH_HOST_NODES (200) over the machine's engine and the
//!   two extra engines of scripts/test-env.sh, until all idle, against creating and starting as
//!   many containers directly over the same engines; the server's peak RSS;
//! - data: resource files, BENCH_SMALL_BLOBS (1,000) small blobs and one BENCH_BIG_MIB (1,024)
//!   MiB blob from Azurite, against curl of the same URLs (needs `eval "$(scripts/test-env.sh)"`);
//! - files: a BENCH_FILE_MIB (256) MiB file, BENCH_FILE_READS (500) small reads and recursive
//!   listings of BENCH_FILE_COUNT (1,000) files, through a node's agent and then, once the node is
//!   gone, from the server's disk (local, and Docker where an engine answers);
//! - slurm: BENCH_SLURM_TASKS (2,000) no-op tasks as one Slurm job array on a one-node Slurm
//!   (scripts/slurm.sh, where Debian's slurm-wlm is installed) against the same tasks on the
//!   throughput section's local pool;
//! - scale: BENCH_QUEUED (1,000,000) tasks queued in one job, after BENCH_SCALE_OTHER (100,000)
//!   of another: time to add, BENCH_PAGES (200) list page reads, dispatch pass time while
//!   BENCH_SCALE_RUN (5,000) of them run, peak RSS.
//! - autoscale: BENCH_AUTOSCALE_TRIES (5) single tasks on an autoscaled local pool at zero nodes
//!   (interval PT5S), submit -> running; and the CPU (server and its PostgreSQL) of
//!   BENCH_AUTOSCALE_POOLS (1,000) pools on Azure's documented formula every 5 s, against as
//!   many fixed-size pools.
//! - fleet: a simulated fleet (`batchpool fleet-sim`, `serve --runtime simulated`): a pool
//!   resized 0 -> BENCH_FLEET_STEP (1,000) -> BENCH_FLEET_NODES (10,000) until all are idle; the
//!   idle fleet's CPU over a minute (server and PostgreSQL, the simulator apart); BENCH_FLEET_TASKS
//!   (100,000) tasks of `sleep 1` on 4 slots a node: starts a second sustained, CPU per task; the
//!   server's peak RSS and PostgreSQL's size; a restart (SIGKILL) with every agent connected.
//! - failover: two servers on one database, the first leading BENCH_FLEET_NODES simulated nodes
//!   with nearly every slot running: the leader killed, until the second leads, places, and has
//!   every agent; no task run twice.
//! - eta: BENCH_ETA_TASKS (2,000) tasks of 1-3 s waiting on BENCH_ETA_NODES (8) simulated nodes
//!   x 4 slots: p50 and p90 of |waitReason.estimatedStartTime - startTime|;
//! - fairness: BENCH_FAIR_ACCOUNTS (10) accounts, each a pool of its share of BENCH_FLEET_NODES and
//!   10 jobs of mixed priority of BENCH_FAIR_TASKS (1,000) tasks of `sleep 5`, queued, then every
//!   pool resized at once: each job's first start by priority, inversions, the accounts' spread.
//! - c1m: BENCH_C1M_TASKS (1,000,000) tasks of 1-30 s from BENCH_C1M_CLIENTS (8) clients on
//!   BENCH_FLEET_NODES x 4 slots: the placement curve, starts a second, submit -> running.
//!
//! The Docker sections are skipped when no engine answers. A quick run that checks it works:
//! BENCH_TASKS=2000 BENCH_LATENCY_TRIES=20 BENCH_DOCKER_TASKS=100 BENCH_NODES=5 BENCH_QUEUED=20000
//! BENCH_SCALE_OTHER=2000 BENCH_PAGES=20 BENCH_SCALE_RUN=500 cargo bench --bench scheduler

mod suite;

use suite::{env, selected};

#[tokio::main]
async fn main() {
    let clients = env("BENCH_CLIENTS", 4);
    println!(
        "batchpool benchmark: {} cores, {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC")
    );
    if selected("throughput") {
        let (tasks, slots) = (env("BENCH_TASKS", 100_000), env("BENCH_SLOTS", 16));
        let ahead = std::env::var("BENCH_AHEAD").ok();
        suite::throughput::run(tasks, clients, (slots, ahead)).await;
    }
    if selected("latency") {
        suite::latency::run(env("BENCH_LATENCY_TRIES", 200)).await;
    }
    if selected("versions") {
        suite::versions::run(env("BENCH_VERSION_ROUNDS", 200)).await;
    }
    if selected("docker") || selected("containers") || selected("nodes") {
        if let Some(docker) = suite::docker::engine().await {
            if selected("docker") {
                // The throughput section's shape: 2 nodes x 16 slots.
                suite::docker::dispatch(&docker, env("BENCH_DOCKER_TASKS", 20_000), 2, 16).await;
            }
            if selected("containers") {
                let (tasks, slots) = (
                    env("BENCH_CONTAINER_TASKS", 200),
                    env("BENCH_DOCKER_SLOTS", 4),
                );
                suite::containers::dispatch(&docker, tasks, slots).await;
            }
            if selected("nodes") {
                suite::docker::allocation(&docker, env("BENCH_NODES", 50), 16).await;
            }
        }
    }
    if selected("hosts") {
        suite::hosts::allocation(env("BENCH_HOST_NODES", 200), 16).await;
    }
    if selected("data") {
        suite::data::run(env("BENCH_SMALL_BLOBS", 1_000), env("BENCH_BIG_MIB", 1_024)).await;
    }
    if selected("files") {
        let (mib, count, reads) = (
            env("BENCH_FILE_MIB", 256),
            env("BENCH_FILE_COUNT", 1_000),
            env("BENCH_FILE_READS", 500),
        );
        suite::files::run("local", mib, count, reads).await;
        if suite::docker::engine().await.is_some() {
            suite::files::run("docker", mib, count, reads).await;
        }
    }
    if selected("slurm") {
        suite::slurm::run(env("BENCH_SLURM_TASKS", 2_000), clients).await;
    }
    if selected("autoscale") {
        suite::autoscale::run(
            env("BENCH_AUTOSCALE_TRIES", 5),
            env("BENCH_AUTOSCALE_POOLS", 1_000),
        )
        .await;
    }
    if selected("fleet") {
        suite::fleet::run(
            env("BENCH_FLEET_STEP", 1_000),
            env("BENCH_FLEET_NODES", 10_000),
            env("BENCH_FLEET_TASKS", 100_000),
            clients,
        )
        .await;
    }
    if selected("failover") {
        suite::failover::run(env("BENCH_FLEET_NODES", 10_000), clients).await;
    }
    if selected("eta") {
        suite::eta::run(env("BENCH_ETA_NODES", 8), env("BENCH_ETA_TASKS", 2_000)).await;
    }
    if selected("fairness") {
        suite::fairness::run(
            env("BENCH_FAIR_ACCOUNTS", 10),
            env("BENCH_FLEET_NODES", 10_000) / env("BENCH_FAIR_ACCOUNTS", 10),
            env("BENCH_FAIR_TASKS", 1_000),
        )
        .await;
    }
    if selected("c1m") {
        suite::c1m::run(
            env("BENCH_FLEET_NODES", 10_000),
            env("BENCH_C1M_TASKS", 1_000_000),
            env("BENCH_C1M_CLIENTS", 8),
        )
        .await;
    }
    if selected("scale") {
        suite::scale::run(
            env("BENCH_QUEUED", 1_000_000),
            env("BENCH_SCALE_OTHER", 100_000),
            clients,
            env("BENCH_PAGES", 200),
            env("BENCH_SCALE_RUN", 5_000),
        )
        .await;
    }
}
