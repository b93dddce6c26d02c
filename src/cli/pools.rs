//! `batchpool pool ...` and `batchpool status`: pools made, sized, shown and deleted, and the
//! nodes of every pool by state, as `sinfo` shows partitions.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use super::client::{fail, segment, CliResult, Client};
use super::table::{cell, print, render};

#[derive(clap::Subcommand, Debug, Clone)]
pub enum PoolCommand {
    /// Makes a pool (Azure's `POST /pools`).
    Create {
        id: String,
        /// The nodes' size: their CPUs and memory (see docs/nodes.md, "VM sizes").
        #[arg(long, default_value = "standard_a1")]
        vm_size: String,
        /// How many nodes.
        #[arg(long, default_value_t = 0)]
        nodes: u32,
        /// Task slots per node: how many tasks of one slot a node runs at once.
        #[arg(long, default_value_t = 1)]
        slots: u32,
        /// The Docker image of the nodes (Azure's containerConfiguration.containerImageNames);
        /// the server's default image without it.
        #[arg(long)]
        image: Option<String>,
        /// A command each node runs when it joins the pool, before it takes tasks (`sh -c`, as
        /// Azure's start task; a node whose start task fails takes none).
        #[arg(long, value_name = "COMMAND")]
        start_task: Option<String>,
        /// How jobs of equal priority share the pool's slots (Azure's jobDefaultOrder): the
        /// oldest first (the default), or in turns (`none`: for a pool several users share).
        #[arg(long, value_enum)]
        job_order: Option<JobOrder>,
        /// Wait until the pool has its nodes, all ready for tasks.
        #[arg(long)]
        wait: bool,
    },
    /// The pools, one line each.
    List,
    /// A pool and its nodes.
    Show { id: String },
    /// Changes a pool's number of nodes (0 lets every node go once its tasks end).
    Resize {
        id: String,
        nodes: u32,
        /// Wait until the pool has its new size.
        #[arg(long)]
        wait: bool,
    },
    /// Deletes a pool and its nodes.
    Delete { id: String },
}

/// Azure's jobDefaultOrder, by its wire names.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum JobOrder {
    Creationtime,
    None,
}

pub async fn run(client: &Client, command: PoolCommand) -> CliResult<()> {
    match command {
        PoolCommand::Create {
            id,
            vm_size,
            nodes,
            slots,
            image,
            start_task,
            job_order,
            wait,
        } => {
            let mut body = json!({"id": id, "vmSize": vm_size, "targetDedicatedNodes": nodes, "taskSlotsPerNode": slots});
            if let Some(image) = image {
                body["virtualMachineConfiguration"] = json!({
                    "nodeAgentSKUId": "batch.node.batchpool",
                    "containerConfiguration": {"type": "dockerCompatible", "containerImageNames": [image]},
                });
            }
            if let Some(command) = start_task {
                body["startTask"] = json!({"commandLine": command, "waitForSuccess": true});
            }
            if let Some(order) = job_order {
                let order = match order {
                    JobOrder::Creationtime => "creationtime",
                    JobOrder::None => "none",
                };
                body["taskSchedulingPolicy"] = json!({"jobDefaultOrder": order});
            }
            client.call(Method::POST, "/pools", Some(&body)).await?;
            done(client, &id, wait, &format!("pool {id} created ({vm_size})")).await
        }
        PoolCommand::List => list(client).await,
        PoolCommand::Show { id } => show(client, &id).await,
        PoolCommand::Resize { id, nodes, wait } => {
            let body = json!({"targetDedicatedNodes": nodes});
            let path = format!("/pools/{}/resize", segment(&id));
            client.call(Method::POST, &path, Some(&body)).await?;
            let said = if wait { "resized" } else { "resizing" };
            done(
                client,
                &id,
                wait,
                &format!("pool {id} {said} to {nodes} nodes"),
            )
            .await
        }
        PoolCommand::Delete { id } => {
            client
                .call(Method::DELETE, &format!("/pools/{}", segment(&id)), None)
                .await?;
            print(client.output, &json!({"id": id, "deleted": true}), || {
                format!("pool {id} deleting\n")
            });
            Ok(())
        }
    }
}

/// Says what was done, after waiting for the pool if asked to; with `--output json`, the pool.
async fn done(client: &Client, id: &str, wait: bool, said: &str) -> CliResult<()> {
    if wait {
        wait_steady(client, id, Duration::from_secs(600)).await?;
    }
    let pool = client.get(&format!("/pools/{}", segment(id))).await?;
    let now = format!(
        "{said}; {} of {} nodes\n",
        cell(&pool["currentDedicatedNodes"]),
        cell(&pool["targetDedicatedNodes"])
    );
    print(client.output, &pool, || now);
    Ok(())
}

/// Until the pool is steady with every node ready for tasks (idle or running).
async fn wait_steady(client: &Client, id: &str, limit: Duration) -> CliResult<()> {
    let started = Instant::now();
    loop {
        let pool = client
            .get(&format!(
                "/pools/{}?$select=allocationState,resizeErrors",
                segment(id)
            ))
            .await?;
        if pool["allocationState"] == "steady" {
            if let Some(error) = pool["resizeErrors"].as_array().and_then(|e| e.first()) {
                return fail(format!(
                    "pool {id} did not reach its size: {}: {}",
                    cell(&error["code"]),
                    cell(&error["message"])
                ));
            }
            let nodes = client
                .list(&format!("/pools/{}/nodes?$select=state", segment(id)))
                .await?;
            if nodes
                .iter()
                .all(|n| n["state"] == "idle" || n["state"] == "running")
            {
                return Ok(());
            }
        }
        if started.elapsed() > limit {
            return fail(format!(
                "pool {id} is still resizing after {} s",
                limit.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn list(client: &Client) -> CliResult<()> {
    let select = "id,state,allocationState,vmSize,currentDedicatedNodes,targetDedicatedNodes,taskSlotsPerNode";
    let pools = client.list(&format!("/pools?$select={select}")).await?;
    print(client.output, &json!(pools), || {
        let rows: Vec<Vec<String>> = pools
            .iter()
            .map(|p| {
                vec![
                    cell(&p["id"]),
                    cell(&p["state"]),
                    cell(&p["allocationState"]),
                    cell(&p["vmSize"]),
                    format!(
                        "{}/{}",
                        cell(&p["currentDedicatedNodes"]),
                        cell(&p["targetDedicatedNodes"])
                    ),
                    cell(&p["taskSlotsPerNode"]),
                ]
            })
            .collect();
        render(
            &[
                "POOL",
                "STATE",
                "ALLOCATION",
                "VM SIZE",
                "NODES",
                "SLOTS/NODE",
            ],
            &rows,
        )
    });
    Ok(())
}

async fn show(client: &Client, id: &str) -> CliResult<()> {
    let mut pool = client.get(&format!("/pools/{}", segment(id))).await?;
    let select = "id,state,runningTasksCount,totalTasksRun";
    let nodes = client
        .list(&format!("/pools/{}/nodes?$select={select}", segment(id)))
        .await?;
    let text = {
        let mut out = String::new();
        for (label, at) in [
            ("pool", "/id"),
            ("state", "/state"),
            ("allocation", "/allocationState"),
            ("vm size", "/vmSize"),
            ("slots per node", "/taskSlotsPerNode"),
            ("node fill", "/taskSchedulingPolicy/nodeFillType"),
            ("job order", "/taskSchedulingPolicy/jobDefaultOrder"),
            ("nodes", "/currentDedicatedNodes"),
            ("target", "/targetDedicatedNodes"),
        ] {
            let value = pool.pointer(at).unwrap_or(&Value::Null);
            out.push_str(&format!("{label:<15} {}\n", cell(value)));
        }
        if let Some(errors) = pool["resizeErrors"].as_array() {
            for e in errors {
                out.push_str(&format!(
                    "{:<15} {}: {}\n",
                    "resize error",
                    cell(&e["code"]),
                    cell(&e["message"])
                ));
            }
        }
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| {
                vec![
                    cell(&n["id"]),
                    cell(&n["state"]),
                    cell(&n["runningTasksCount"]),
                    cell(&n["totalTasksRun"]),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push('\n');
            out.push_str(&render(&["NODE", "STATE", "RUNNING", "RUN SO FAR"], &rows));
        }
        out
    };
    pool["nodes"] = json!(nodes);
    print(client.output, &pool, || text);
    Ok(())
}

/// The node states `status` gives a column of their own; the rest count as OTHER.
const STATE_COLUMNS: [&str; 5] = ["idle", "running", "starting", "creating", "unusable"];

/// `batchpool status`: every pool's nodes by state.
pub async fn status(client: &Client) -> CliResult<()> {
    let select = "id,allocationState,vmSize,targetDedicatedNodes";
    let pools = client.list(&format!("/pools?$select={select}")).await?;
    let counts = client.list("/nodecounts").await?;
    let mut out = Vec::new();
    for pool in &pools {
        let dedicated = counts
            .iter()
            .find(|c| c["poolId"] == pool["id"])
            .map(|c| c["dedicated"].clone())
            .unwrap_or(Value::Null);
        out.push(json!({
            "id": pool["id"], "allocationState": pool["allocationState"], "vmSize": pool["vmSize"],
            "targetDedicatedNodes": pool["targetDedicatedNodes"], "nodes": dedicated,
        }));
    }
    print(client.output, &json!(out), || {
        let rows: Vec<Vec<String>> = out
            .iter()
            .map(|p| {
                let n = &p["nodes"];
                let count = |s: &str| n[s].as_u64().unwrap_or(0);
                let shown: u64 = STATE_COLUMNS.iter().map(|s| count(s)).sum();
                let mut row = vec![
                    cell(&p["id"]),
                    cell(&p["vmSize"]),
                    cell(&p["allocationState"]),
                ];
                row.push(format!(
                    "{}/{}",
                    count("total"),
                    cell(&p["targetDedicatedNodes"])
                ));
                row.extend(STATE_COLUMNS.iter().map(|s| count(s).to_string()));
                row.push(count("total").saturating_sub(shown).to_string());
                row
            })
            .collect();
        let header = [
            "POOL",
            "VM SIZE",
            "ALLOCATION",
            "NODES",
            "IDLE",
            "RUNNING",
            "STARTING",
            "CREATING",
            "UNUSABLE",
            "OTHER",
        ];
        render(&header, &rows)
    });
    Ok(())
}
