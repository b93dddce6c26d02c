//! A container per task: no-op tasks with `containerSettings` on a one-node Docker pool, each in
//! a container of its own, next to `docker run --rm` of the same image and command, as many at a
//! time, through the engine API the server uses (bollard) and through the `docker` CLI.

use std::collections::HashMap;
use std::time::Instant;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{AttachContainerOptionsBuilder, WaitContainerOptionsBuilder};
use bollard::Docker;
use futures_util::{stream, StreamExt};
use serde_json::json;

use super::{add_tasks_with, timed_shell, Server};

const IMAGE: &str = "batchpool/node:latest";

/// `tasks` container tasks, `slots` at a time, next to as many `docker run --rm`.
pub async fn dispatch(docker: &Docker, tasks: usize, slots: usize) {
    let s = Server::start("docker").await;
    let pool = json!({
        "id": "boxes", "vmSize": "standard_d2s_v3", "targetDedicatedNodes": 1, "taskSlotsPerNode": slots,
        "virtualMachineConfiguration": {"nodeAgentSKUId": "batch.node.ubuntu 20.04",
            "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [IMAGE]}},
    });
    s.create("/pools", pool, 201).await;
    s.wait_idle_nodes("boxes", 1).await;
    s.create(
        "/jobs",
        json!({"id": "cj", "poolInfo": {"poolId": "boxes"}}),
        201,
    )
    .await;
    let started = Instant::now();
    add_tasks_with(&s, "cj", tasks, 1, |i| {
        json!({"id": format!("t{i}"), "commandLine": "true", "containerSettings": {"imageName": IMAGE}})
    })
    .await;
    s.wait_completed("cj", tasks).await;
    let pool = started.elapsed().as_secs_f64();
    s.create(
        "/pools/boxes/resize",
        json!({"targetDedicatedNodes": 0}),
        202,
    )
    .await;
    s.wait_idle_nodes("boxes", 0).await;
    s.stop().await;

    let started = Instant::now();
    stream::iter(0..tasks)
        .for_each_concurrent(slots, |_| run_rm(docker, None))
        .await;
    let api = started.elapsed().as_secs_f64();
    // The same, joined to a node-like container's namespaces and mounts as the server's are.
    let node = format!("bpbench-box-{}", std::process::id());
    super::docker::create_plain(docker, &node).await;
    docker.start_container(&node, None).await.unwrap();
    let started = Instant::now();
    stream::iter(0..tasks)
        .for_each_concurrent(slots, |_| run_rm(docker, Some(&node)))
        .await;
    let joined = started.elapsed().as_secs_f64();
    super::docker::remove(docker, &node).await;
    let cli = timed_shell(&format!(
        "seq {tasks} | xargs -P {slots} -I{{}} docker run --rm {IMAGE} sh -c true"
    ));
    let per = |secs: f64| secs * 1000.0 / tasks as f64;
    println!(
        "container per task: {tasks} tasks, {slots} at a time: pool {:.1} ms/task ({pool:.1} s); \
         `docker run --rm` (API) {:.1} ms/task, ratio {:.2}; the same in a node's namespaces \
         (--network/--pid container:, --volumes-from) {:.1} ms/task, ratio {:.2}; \
         `docker run --rm` CLI {:.1} ms/task, ratio {:.2}",
        per(pool),
        per(api),
        pool / api,
        per(joined),
        pool / joined,
        per(cli),
        pool / cli
    );
}

/// `docker run --rm IMAGE sh -c true` through the engine API, as the CLI does it: create with
/// auto-removal, attach, start, read to the end, wait for the exit. With `node`, in that
/// container's network and pid namespaces, with its volumes.
async fn run_rm(docker: &Docker, node: Option<&str>) {
    let joined = |what: &str| node.map(|n| format!("{what}:{n}"));
    let body = ContainerCreateBody {
        image: Some(IMAGE.into()),
        cmd: Some(vec!["sh".into(), "-c".into(), "true".into()]),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        labels: Some(HashMap::from([(
            "batchpool.bench".to_string(),
            "1".to_string(),
        )])),
        host_config: Some(HostConfig {
            auto_remove: Some(true),
            network_mode: joined("container"),
            pid_mode: joined("container"),
            volumes_from: node.map(|n| vec![n.to_string()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .unwrap()
        .id;
    let options = AttachContainerOptionsBuilder::default()
        .stream(true)
        .stdout(true)
        .stderr(true)
        .build();
    let mut attached = docker.attach_container(&id, Some(options)).await.unwrap();
    docker.start_container(&id, None).await.unwrap();
    while attached.output.next().await.is_some() {}
    let options = WaitContainerOptionsBuilder::default()
        .condition("not-running")
        .build();
    // Removed already (auto-removal) is as good as ended.
    let _ = docker.wait_container(&id, Some(options)).next().await;
}
