//! Docker: dispatch on a Docker pool next to the same work on a local pool (and to raw execs of
//! the same command in a plain container of the same image), and node allocation (a pool resized 0 -> N
//! until every node is idle) next to creating and starting N containers directly. Both
//! baselines talk to the same engine through the same API client the server uses (bollard).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use bollard::Docker;
use futures_util::{stream, StreamExt};
use serde_json::json;

use super::{add_tasks, Server};

const IMAGE: &str = "batchpool/node:latest";
/// The label on the baseline's own containers, so only they are removed.
const LABEL: &str = "batchpool.bench";

/// The engine, with the node image built if it is missing; None (the section is skipped) when
/// no engine answers.
pub async fn engine() -> Option<Docker> {
    let docker = match batchpool::runtime::docker::connect(None).await {
        Ok(d) => d,
        Err(e) => {
            println!("docker: skipped ({e:#})");
            return None;
        }
    };
    if docker.inspect_image(IMAGE).await.is_err() {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
            .args(["build-node-image", "--tag", IMAGE])
            .status()
            .unwrap();
        assert!(status.success(), "building {IMAGE} failed");
    }
    Some(docker)
}

/// The same no-op tasks on a Docker pool and on a local pool of `nodes` x `slots` (the agent
/// in each Docker node starts them, as the local runtime starts its own), and as many raw
/// execs, `slots` at a time: what one `docker exec` per task would cost.
pub async fn dispatch(docker: &Docker, tasks: usize, nodes: usize, slots: usize) {
    let docker_secs = pool_run("docker", tasks, nodes, slots).await;
    let local_secs = pool_run("local", tasks, nodes, slots).await;

    let name = format!("bpbench-exec-{}", std::process::id());
    // No network: the commands need none.
    create_on(docker, &name, Some("none")).await;
    docker.start_container(&name, None).await.unwrap();
    // Enough execs for a steady rate: at some 40 a second, as many as tasks would take minutes.
    let execs = tasks.min(2_000);
    let started = Instant::now();
    stream::iter(0..execs)
        .for_each_concurrent(slots, |_| raw_exec(docker, &name))
        .await;
    let exec_rate = execs as f64 / started.elapsed().as_secs_f64();
    remove(docker, &name).await;
    let rate = |secs: f64| tasks as f64 / secs;
    println!(
        "docker dispatch: {tasks} tasks on {nodes} x {slots} slots: docker pool {:.0} tasks/s ({docker_secs:.1} s), \
         local pool {:.0} tasks/s ({local_secs:.1} s), docker/local {:.2}; \
         one `docker exec` each (API, {slots} at a time, {execs} of them) {exec_rate:.0} tasks/s",
        rate(docker_secs),
        rate(local_secs),
        local_secs / docker_secs,
    );
}

/// Seconds from adding `tasks` no-op tasks to a pool of `nodes` x `slots` on `runtime` to the
/// last one completed.
async fn pool_run(runtime: &str, tasks: usize, nodes: usize, slots: usize) -> f64 {
    let s = Server::with_pool(runtime, "dock", nodes, slots, "dj").await;
    let started = Instant::now();
    add_tasks(&s, "dj", tasks, 4, "true").await;
    s.wait_completed("dj", tasks).await;
    let secs = started.elapsed().as_secs_f64();
    // Nodes outlive a stopped server (a restart adopts them): remove this one's first.
    s.create(
        "/pools/dock/resize",
        json!({"targetDedicatedNodes": 0}),
        202,
    )
    .await;
    s.wait_idle_nodes("dock", 0).await;
    s.stop().await;
    secs
}

/// A pool resized from 0 to `nodes` Docker nodes until all are idle, next to creating and
/// starting as many containers of the same image directly, `concurrency` at a time (the
/// server's default node concurrency).
pub async fn allocation(docker: &Docker, nodes: usize, concurrency: usize) {
    let s = Server::start("docker").await;
    s.create(
        "/pools",
        json!({"id": "alloc", "vmSize": "standard_a1", "targetDedicatedNodes": 0}),
        201,
    )
    .await;
    let started = Instant::now();
    s.create(
        "/pools/alloc/resize",
        json!({"targetDedicatedNodes": nodes}),
        202,
    )
    .await;
    s.wait_idle_nodes("alloc", nodes).await;
    let up = started.elapsed().as_secs_f64();
    // Azure refuses a resize until the last one is over (steady), as we do: wait as a client would.
    s.wait_steady("alloc").await;
    let started = Instant::now();
    s.create(
        "/pools/alloc/resize",
        json!({"targetDedicatedNodes": 0}),
        202,
    )
    .await;
    s.wait_idle_nodes("alloc", 0).await;
    let down = started.elapsed().as_secs_f64();
    s.stop().await;

    let names: Vec<String> = (0..nodes)
        .map(|i| format!("bpbench-node-{}-{i}", std::process::id()))
        .collect();
    let started = Instant::now();
    stream::iter(&names)
        .for_each_concurrent(concurrency, |name| async move {
            create_plain(docker, name).await;
            docker.start_container(name, None).await.unwrap();
        })
        .await;
    let direct = started.elapsed().as_secs_f64();
    let started = Instant::now();
    stream::iter(&names)
        .for_each_concurrent(concurrency, |name| remove(docker, name))
        .await;
    let direct_down = started.elapsed().as_secs_f64();
    println!(
        "node allocation: {nodes} Docker nodes resize -> all idle {up:.2} s; create + start {nodes} \
         containers directly ({concurrency} at a time) {direct:.2} s; ratio {:.2}",
        up / direct
    );
    println!(
        "node allocation: resize {nodes} -> 0 {down:.2} s; removing {nodes} containers directly {direct_down:.2} s; ratio {:.2}",
        down / direct_down
    );
}

/// A container of the node image that only stays up, as a node's does.
pub(super) async fn create_plain(docker: &Docker, name: &str) {
    create_on(docker, name, None).await
}

/// A container as `create_plain` makes, on `network` (a bridge network, as a node's account
/// network) where given.
pub(super) async fn create_on(docker: &Docker, name: &str, network: Option<&str>) {
    let body = ContainerCreateBody {
        image: Some(IMAGE.into()),
        entrypoint: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done".into(),
        ]),
        cmd: Some(vec![]),
        labels: Some(HashMap::from([(LABEL.to_string(), "1".to_string())])),
        host_config: Some(HostConfig {
            privileged: Some(false),
            network_mode: network.map(String::from),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = CreateContainerOptionsBuilder::default().name(name).build();
    docker.create_container(Some(options), body).await.unwrap();
}

pub(super) async fn remove(docker: &Docker, name: &str) {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    docker.remove_container(name, Some(options)).await.unwrap();
}

/// `sh -c true` in the container through the exec API, waited for as the server waits.
async fn raw_exec(docker: &Docker, name: &str) {
    let exec = docker
        .create_exec(
            name,
            CreateExecOptions {
                cmd: Some(vec!["sh".to_string(), "-c".into(), "true".into()]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.unwrap()
    {
        while output.next().await.is_some() {}
    }
    loop {
        let inspect = docker.inspect_exec(&exec.id).await.unwrap();
        if inspect.running != Some(true) {
            assert_eq!(inspect.exit_code, Some(0));
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
