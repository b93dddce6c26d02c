//! The failover section: two servers on one database (the second on the first's PostgreSQL), the
//! first leading a pool of `nodes` simulated nodes x 4 slots, nearly every slot running a task
//! of `sleep 30`. The leader is killed (SIGKILL). From the kill: when the second leads, when a
//! new task has run (placement resumed), when every node's agent has come to the second server;
//! and that every task that was running completed once (no retry, no requeue).

use std::time::Instant;

use serde_json::json;

use super::c1m::task_times;
use super::fleet::{empty_pool, fleet_sim, gauge, resize, serve_args, sim_stats, wait_gauge};
use super::{add_tasks, Server};

pub async fn run(nodes: usize, clients: usize) {
    let (_sim, url) = fleet_sim().await;
    let mut first = Server::start_with("simulated", &serve_args(&url, nodes)).await;
    let second = Server::join(&first, &serve_args(&url, nodes)).await;
    assert_eq!(gauge(&first, "batchpool_leader").await, Some(1.0));
    // The leader reads the installation's servers every 2 s, and tells its agents at once.
    wait_gauge(&first, "batchpool_servers", 2.0, Instant::now()).await;
    empty_pool(&first, "fleet").await;
    resize(&first, "fleet", nodes).await;
    // A slot free on about one node in four, for the task that shows placement resumed.
    let busy = nodes * 4 - nodes / 4;
    first
        .create(
            "/jobs",
            json!({"id": "long", "poolInfo": {"poolId": "fleet"}}),
            201,
        )
        .await;
    add_tasks(&first, "long", busy, clients, "sleep 30").await;
    while first.get("/jobs/long/taskcounts").await["taskCounts"]["running"].as_u64()
        != Some(busy as u64)
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let killed = Instant::now();
    first.kill().await;
    let leads = wait_gauge(&second, "batchpool_leader", 1.0, killed).await;
    second
        .create(
            "/jobs",
            json!({"id": "next", "poolInfo": {"poolId": "fleet"}}),
            201,
        )
        .await;
    add_tasks(&second, "next", 1, 1, "true").await;
    second.wait_completed("next", 1).await;
    let placing = killed.elapsed().as_secs_f64();
    let adopted = wait_gauge(&second, "batchpool_agents_connected", nodes as f64, killed).await;
    second.wait_completed("long", busy).await;
    let done = killed.elapsed().as_secs_f64();
    let times = task_times(&second, "long").await;
    let requeued = times.iter().filter(|t| t.attempts > 1).count();
    // What the nodes ran: each of the `busy` tasks and the new one once, and a requeued task
    // whose first attempt never reached its node (placed just before the kill) once too.
    let started = sim_stats(&url).await["started"].as_u64().unwrap_or(0) as usize;
    let twice = started.saturating_sub(busy + 1);
    println!(
        "failover: the leader killed (SIGKILL) with {nodes} agents connected and {busy} tasks running: the second server leads {leads:.1} s after the kill; a new task run {placing:.1} s after it; every agent with the second server {adopted:.1} s after it; the {busy} running tasks all completed {done:.1} s after it; {requeued} requeued (their attempts had not reached their nodes, or were taken for lost), the nodes started {started} commands: {twice} tasks run twice"
    );
    second.stop().await;
    first.stop_with_postgres().await;
}
