//! Nodes over several Docker engines: a pool resized 0 -> N over the machine's engine and the
//! extra engines scripts/test-env.sh starts (BATCHPOOL_TEST_DOCKER_HOSTS), until every node is
//! idle, next to creating and starting as many containers directly, spread over the same
//! engines and as many at a time; and the server's peak RSS with the N nodes.

use std::collections::HashMap;
use std::time::Instant;

use futures_util::{stream, StreamExt};
use serde_json::json;

use super::docker::{create_on, remove};
use super::Server;

const IMAGE: &str = "batchpool/node:latest";
/// The baseline's bridge network on each engine, as a node's account network is.
const NETWORK: &str = "bpbench-hosts";

pub async fn allocation(nodes: usize, concurrency: usize) {
    let Ok(extra) = std::env::var("BATCHPOOL_TEST_DOCKER_HOSTS") else {
        println!("hosts: skipped (BATCHPOOL_TEST_DOCKER_HOSTS is not set: eval \"$(scripts/test-env.sh)\")");
        return;
    };
    let mut urls = vec!["unix:///var/run/docker.sock".to_string()];
    urls.extend(extra.split_whitespace().map(String::from));
    let mut engines = Vec::new();
    for url in &urls {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
            .args(["build-node-image", "--tag", IMAGE, "--docker-host", url])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "building {IMAGE} on {url} failed");
        engines.push(
            batchpool::runtime::docker::connect(Some(url))
                .await
                .unwrap(),
        );
    }
    let mut args = vec![
        "--max-nodes-per-pool".to_string(),
        nodes.max(100).to_string(),
    ];
    args.extend(
        urls.iter()
            .flat_map(|u| ["--docker-host".to_string(), u.clone()]),
    );
    let s = Server::start_with("docker", &args).await;
    s.create(
        "/pools",
        json!({"id": "spread", "vmSize": "standard_a1", "targetDedicatedNodes": 0}),
        201,
    )
    .await;
    let started = Instant::now();
    s.create(
        "/pools/spread/resize",
        json!({"targetDedicatedNodes": nodes}),
        202,
    )
    .await;
    s.wait_idle_nodes("spread", nodes).await;
    let up = started.elapsed().as_secs_f64();
    let rss = s.peak_rss_mib();
    s.wait_steady("spread").await;
    s.create(
        "/pools/spread/resize",
        json!({"targetDedicatedNodes": 0}),
        202,
    )
    .await;
    s.wait_idle_nodes("spread", 0).await;
    s.stop().await;

    let names: Vec<(usize, String)> = (0..nodes)
        .map(|i| {
            (
                i % engines.len(),
                format!("bpbench-host-{}-{i}", std::process::id()),
            )
        })
        .collect();
    for docker in &engines {
        // An aborted run's network goes first: engines before API 1.44 make a second one of the
        // same name, and a name two networks share cannot be used.
        let filters = HashMap::from([("name".to_string(), vec![NETWORK.to_string()])]);
        let options = bollard::query_parameters::ListNetworksOptionsBuilder::default()
            .filters(&filters)
            .build();
        for old in docker
            .list_networks(Some(options))
            .await
            .unwrap_or_default()
        {
            if let (Some(NETWORK), Some(id)) = (old.name.as_deref(), old.id.as_deref()) {
                let _ = docker.remove_network(id).await;
            }
        }
        let request = bollard::models::NetworkCreateRequest {
            name: NETWORK.into(),
            driver: Some("bridge".into()),
            ..Default::default()
        };
        let _ = docker.create_network(request).await;
    }
    let started = Instant::now();
    stream::iter(&names)
        .for_each_concurrent(concurrency, |(e, name)| {
            let docker = &engines[*e];
            async move {
                create_on(docker, name, Some(NETWORK)).await;
                docker.start_container(name, None).await.unwrap();
            }
        })
        .await;
    let direct = started.elapsed().as_secs_f64();
    stream::iter(&names)
        .for_each_concurrent(concurrency, |(e, name)| remove(&engines[*e], name))
        .await;
    for docker in &engines {
        let _ = docker.remove_network(NETWORK).await;
    }
    println!(
        "hosts: {nodes} nodes over {} Docker engines, resize -> all idle {up:.2} s; create + start \
         {nodes} containers directly over the same engines ({concurrency} at a time) {direct:.2} s; \
         ratio {:.2}; server peak RSS {rss:.1} MiB",
        engines.len(),
        up / direct
    );
}
