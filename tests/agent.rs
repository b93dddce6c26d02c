//! The node agent (docs/nodes.md, "The node agent"): each Docker node's main process is
//! `batchpool agent`, which connects out to the server as its node alone and starts the node's
//! tasks. The restart tests (tests/restart.rs) show that its tasks run on while the server is
//! down and are adopted, once, when it is back.

#[macro_use]
mod common;

use std::collections::HashMap;

use common::{Rt, TestServer};
use serde_json::json;

/// The node's container, by the node id the API gives (the name ends with it).
fn container_of(node: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["ps", "--format", "{{.Names}}"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|name| name.ends_with(&format!("-{node}")))
        .unwrap_or_else(|| panic!("no container for node {node}"))
        .to_string()
}

/// The secret the node's agent was started with, as the engine (root on the host) knows it.
fn secret_of(container: &str) -> String {
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{range .Config.Env}}{{println .}}{{end}}",
            container,
        ])
        .output()
        .expect("docker inspect");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("BATCHPOOL_AGENT_SECRET="))
        .expect("the node's agent has a secret")
        .to_string()
}

async fn post_events(s: &TestServer, authorization: Option<String>) -> (u16, serde_json::Value) {
    let client = reqwest::Client::new();
    let mut request = client
        .post(format!("{}/agent/v1/events", s.agent_url()))
        .header("content-type", "application/json")
        .body(r#"{"boot":"someone-else","events":[{"kind":"exited","id":1,"code":0}]}"#);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_speaks_only_for_its_own_node_with_its_own_secret() {
    let s = TestServer::start(Rt::Docker).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let nodes = s.wait_nodes("p", 2, "idle").await;
    let (a, b) = (
        nodes[0]["id"].as_str().unwrap(),
        nodes[1]["id"].as_str().unwrap(),
    );
    let secret_a = secret_of(&container_of(a));
    assert_ne!(
        secret_a,
        secret_of(&container_of(b)),
        "each node has its own secret"
    );

    let (status, error) = post_events(&s, None).await;
    assert_eq!(status, 401, "{error}");
    assert_eq!(error["code"], "AuthenticationFailed", "{error}");
    let wrong = format!("BatchpoolNode {a}:{}", "0".repeat(64));
    assert_eq!(post_events(&s, Some(wrong)).await.0, 401);
    // Node a's secret is not node b's.
    let borrowed = format!("BatchpoolNode {b}:{secret_a}");
    assert_eq!(post_events(&s, Some(borrowed)).await.0, 401);
    let unknown = format!("BatchpoolNode tvmps_nosuchnode:{secret_a}");
    assert_eq!(post_events(&s, Some(unknown)).await.0, 401);
    // The agent's listener serves the API to tasks' tokens only: no one else gets through it.
    let api = reqwest::get(format!("{}/pools", s.agent_url()))
        .await
        .unwrap();
    assert_eq!(api.status().as_u16(), 401);
    let body: serde_json::Value = api.json().await.unwrap();
    assert_eq!(body["code"], "AuthenticationFailed", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_the_nodes_main_process_and_its_secret_stays_out_of_tasks() {
    let s = TestServer::start(Rt::Docker).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let command = "tr '\\0' ' ' < /proc/1/cmdline > $AZ_BATCH_NODE_SHARED_DIR/init; \
                   env > $AZ_BATCH_NODE_SHARED_DIR/env";
    s.add_tasks("j", vec![json!({"id": "look", "commandLine": command})])
        .await;
    let task = s.wait_task("j", "look", "completed").await;
    assert_eq!(task["executionInfo"]["exitCode"], 0, "{task}");
    let node = task["nodeInfo"]["nodeId"].as_str().unwrap();
    let init = s.shared_file("p", node, "init").await;
    assert!(
        init.contains("/opt/batchpool/batchpool agent"),
        "the node's pid 1 is the agent: {init}"
    );
    let env = s.shared_file("p", node, "env").await;
    assert!(env.contains("AZ_BATCH_TASK_ID=look"), "{env}");
    assert!(
        !env.contains("BATCHPOOL_AGENT_SECRET"),
        "a task's environment has no agent secret: {env}"
    );
}

/// A local node's agent process, as its labels name it.
fn local_agent_pid(s: &TestServer, node: &str) -> i32 {
    let labels: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            s.data_dir
                .path()
                .join("nodes")
                .join(node)
                .join(".batchpool-node.json"),
        )
        .expect("the node's labels"),
    )
    .unwrap();
    labels["agent"]["pid"].as_i64().expect("the node's agent") as i32
}

fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .starts_with('Z')
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_nodes_agent_outlives_the_server_and_ends_with_its_node() {
    let mut s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    let (_, nodes) = s.get("/pools/p/nodes").await;
    let node = nodes["value"][0]["id"].as_str().unwrap().to_string();
    let agent = local_agent_pid(&s, &node);
    assert!(running(agent), "the node's agent runs");

    s.kill().await;
    assert!(running(agent), "the agent outlives the server");
    s.launch().await;
    s.job_on("j", "p").await;
    s.add_tasks("j", vec![json!({"id": "t", "commandLine": "echo $PPID"})])
        .await;
    let task = s.wait_task("j", "t", "completed").await;
    assert_eq!(task["executionInfo"]["exitCode"], 0, "{task}");
    assert_eq!(
        local_agent_pid(&s, &node),
        agent,
        "the same agent was adopted"
    );

    let (status, body) = s.delete("/pools/p").await;
    assert_eq!(status, 202, "{body}");
    common::wait_for("the node's agent to end with its pool", || async {
        (!running(agent)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_no_server_saw_is_kept_by_the_agent_and_recorded_once() {
    an_end_no_server_saw(false).await;
}

/// Builds before 2026-11-26 kept an attempt's record in `.batchpool/<attempt>`: a record an
/// agent of theirs left there is read by the server that replaced them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_where_older_agents_kept_it_is_still_read() {
    an_end_no_server_saw(true).await;
}

async fn an_end_no_server_saw(kept_where_older_agents_did: bool) {
    let mut s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    s.add_tasks("j", vec![json!({"id": "t", "commandLine": "sleep 30"})])
        .await;
    let running = s.wait_task("j", "t", "running").await;
    let node = running["nodeInfo"]["nodeId"].as_str().unwrap().to_string();
    let record = "workitems/j/job-1/t/.batchpool.1";
    // The first line: the pid, and the boot of the agent that started it.
    let first = common::wait_for("the attempt's pid", || async {
        let text = s.on_node(&node, record).await?;
        let line = text.strip_suffix('\n')?.to_string();
        (!line.contains('\n')).then_some(line)
    })
    .await;
    let (pid, boot) = first.split_once(' ').expect("a pid and a boot");
    let pid: i32 = pid.parse().unwrap();
    assert_eq!(boot.len(), 32, "{first}");
    s.kill().await;
    // SAFETY: killing the test's own task's process group.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    // With no server to tell, the agent records how the command ended.
    common::wait_for("the agent to record the end", || async {
        let text = s.on_node(&node, record).await?;
        (text == format!("{first}\n137\n")).then_some(())
    })
    .await;
    if kept_where_older_agents_did {
        let task_dir = s
            .data_dir
            .path()
            .join("nodes")
            .join(&node)
            .join("workitems/j/job-1/t");
        std::fs::create_dir(task_dir.join(".batchpool")).unwrap();
        std::fs::rename(task_dir.join(".batchpool.1"), task_dir.join(".batchpool/1")).unwrap();
    }
    s.launch().await;
    let task = s.wait_task("j", "t", "completed").await;
    assert_eq!(task["executionInfo"]["exitCode"], 137, "{task}");
    assert_eq!(task["executionInfo"]["requeueCount"], 0, "{task}");
    assert_eq!(task["executionInfo"]["result"], "failure", "{task}");
}

/// Stops a node's agent where it is (its container paused, its process stopped), or lets it go on.
fn freeze(rt: Rt, s: &TestServer, node: &str, frozen: bool) {
    let status = match rt {
        Rt::Docker => {
            let verb = if frozen { "pause" } else { "unpause" };
            std::process::Command::new("docker")
                .args([verb, &container_of(node)])
                .status()
        }
        Rt::Local => {
            let signal = if frozen { "-STOP" } else { "-CONT" };
            std::process::Command::new("kill")
                .args([signal, &local_agent_pid(s, node).to_string()])
                .status()
        }
    };
    assert!(status.expect("freezing the agent").success());
}

async fn files_are_read_by_the_nodes_agent(rt: Rt) {
    let s = TestServer::start(rt).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let task =
        json!({"id": "t", "commandLine": "printf hello > out; mkdir -p d/e; printf x > d/e/f"});
    s.add_tasks("j", vec![task]).await;
    let done = s.wait_task("j", "t", "completed").await;
    assert_eq!(done["executionInfo"]["exitCode"], 0, "{done}");
    let node = done["nodeInfo"]["nodeId"].as_str().unwrap().to_string();
    let file = "/jobs/j/tasks/t/files/wd/out";
    let via_node = format!("/pools/p/nodes/{node}/files/workitems/j/job-1/t/wd/d/e/f");
    assert_eq!(s.file(file).await.as_deref(), Some("hello"));
    assert_eq!(s.file(&via_node).await.as_deref(), Some("x"));
    let (status, listing) = s.get("/jobs/j/tasks/t/files?recursive=true").await;
    assert_eq!(status, 200, "{listing}");
    let names = common::names(&listing);
    for name in ["wd/out", "wd/d/e/f", "stdout.txt", "stderr.txt"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(!names.iter().any(|n| n.contains(".batchpool")), "{names:?}");
    let node_files = format!("/pools/p/nodes/{node}/files");
    let (status, listing) = s.get(&format!("{node_files}?recursive=true")).await;
    assert_eq!(status, 200, "{listing}");
    let names = listing["value"].to_string();
    assert!(names.contains(r#""name":"shared""#), "{names}");
    assert!(
        names.contains(r#""name":"workitems/j/job-1/t/wd/out""#),
        "the node's task directories are its own: {names}"
    );

    // With its agent stopped, the node answers nothing: the files are not read behind its back.
    freeze(rt, &s, &node, true);
    let ((status, body), (listed, _)) = tokio::join!(s.get(file), s.get(&node_files));
    freeze(rt, &s, &node, false);
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("NodeAgentUnreachable"), "{body}");
    assert_eq!(listed, 409);
    assert_eq!(s.file(file).await.as_deref(), Some("hello"));
}
on_both_runtimes!(
    a_nodes_files_are_read_by_its_agent,
    files_are_read_by_the_nodes_agent
);

/// A listing longer than a page comes in pages that each keep the request's `recursive`,
/// `$filter` and `$select`, for a task's files and for its node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_file_listing_is_paged_with_its_options() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let make = "mkdir many && for i in $(seq 1 1200); do : > many/f$i; done";
    s.add_tasks("j", vec![json!({"id": "t", "commandLine": make})])
        .await;
    let done = s.wait_task("j", "t", "completed").await;
    assert_eq!(done["executionInfo"]["exitCode"], 0, "{done}");
    let node = done["nodeInfo"]["nodeId"].as_str().unwrap().to_string();
    let made: Vec<String> = (1..=1200).map(|i| format!("f{i}")).collect();

    let task_pages = common::pages(&s, "/jobs/j/tasks/t/files?recursive=true&maxresults=500").await;
    let names = page_names(&task_pages);
    assert_eq!(
        task_pages.len(),
        3,
        "1,204 entries in pages of 500, not {}",
        names.len()
    );
    for file in &made {
        assert!(names.contains(&format!("wd/many/{file}")), "{file} listed");
    }
    assert!(names.contains(&"stdout.txt".to_string()), "{names:?}");

    let prefix = "workitems/j/job-1/t/wd/many/";
    let filter = format!("startswith(name,%27{prefix}%27)");
    let first = format!(
        "/pools/p/nodes/{node}/files?recursive=true&maxresults=400&$filter={filter}&$select=name"
    );
    let node_pages = common::pages(&s, &first).await;
    assert_eq!(node_pages.len(), 3, "1,200 files in pages of 400");
    for item in node_pages.iter().flatten() {
        assert_eq!(item.as_object().unwrap().len(), 1, "only the name: {item}");
    }
    let mut names = page_names(&node_pages);
    names.sort();
    let mut wanted: Vec<String> = made.iter().map(|f| format!("{prefix}{f}")).collect();
    wanted.sort();
    assert_eq!(names, wanted);
}

/// The names of every page's files, each once: a name on two pages fails.
fn page_names(pages: &[Vec<serde_json::Value>]) -> Vec<String> {
    let names: Vec<String> = pages
        .iter()
        .flatten()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    let unique: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "a name on two pages: {names:?}");
    names
}

/// Every file under `dir` named `name`.
fn found(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(found(&path, name));
        } else if entry.file_name() == name {
            out.push(path);
        }
    }
    out
}

/// What the server puts in a node is written by the node's agent: with the agent stopped, a
/// task's resource file is not written behind its back, and once the write has made no
/// progress for 15 s the attempt is the node's loss, not the task's: the task is requeued (a
/// pre-processing error would fail it, not retried). With the agent going again (or its node
/// replaced), the same file arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_files_are_written_by_the_nodes_agent() {
    let s = TestServer::start_allowing_local_urls(Rt::Local, &[]).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let node = s.nodes("p").await[0]["id"].as_str().unwrap().to_string();
    let (name, url) = common::blobs::container("rl").await;
    common::blobs::put_blob(&format!("{name}/agent-input.txt"), "input\n").await;
    let task = |id: &str| {
        json!({"id": id, "commandLine": "cat in/agent-input.txt",
               "resourceFiles": [{"storageContainerUrl": url, "filePath": "in"}]})
    };

    let agent = local_agent_pid(&s, &node).to_string();
    let signal = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &agent])
            .status()
    };
    assert!(signal("-STOP").expect("freezing the agent").success());
    s.add_tasks("j", vec![task("frozen")]).await;
    let t = common::wait_for("the task requeued", || async {
        let t = s.task("j", "frozen").await;
        let requeued = t["executionInfo"]["requeueCount"].as_i64() >= Some(1);
        assert!(
            requeued || t["state"] != "completed",
            "ended, not requeued: {t}"
        );
        requeued.then_some(t)
    })
    .await;
    let written = found(
        &s.data_dir.path().join("nodes").join(&node),
        "agent-input.txt",
    );
    // The node may be gone by now (replaced for its silence), its agent with it.
    let _ = signal("-CONT");
    assert!(t["executionInfo"].get("failureInfo").is_none(), "{t}");
    assert!(
        written.is_empty(),
        "written behind the agent's back: {written:?}"
    );
    let t = s.wait_task("j", "frozen", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(t["executionInfo"]["retryCount"], 0, "{t}");
    let out = s.file("/jobs/j/tasks/frozen/files/stdout.txt").await;
    assert_eq!(out.as_deref(), Some("input\n"));

    s.add_tasks("j", vec![task("thawed")]).await;
    let t = s.wait_task("j", "thawed", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    let out = s.file("/jobs/j/tasks/thawed/files/stdout.txt").await;
    assert_eq!(out.as_deref(), Some("input\n"));
}

/// What a server reads of a task's and its node's files: the task's output, a node file, and
/// the names in the task's listing.
async fn files_seen_by(
    s: &TestServer,
    node: &str,
) -> (Option<String>, Option<String>, Vec<String>) {
    let out = s.file("/jobs/j/tasks/t/files/wd/out").await;
    let shared = s.shared_file("p", node, "mark").await;
    let (_, listing) = s.get("/jobs/j/tasks/t/files?recursive=true").await;
    (out, Some(shared), common::names(&listing))
}

async fn files_are_read_through_any_server(rt: Rt) {
    let first = TestServer::start_with(rt, Some(common::fresh_database().await), &[]).await;
    let second = TestServer::start_with(rt, first.database_url.clone(), &[]).await;
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(second.post("/pools", &pool).await.0, 201);
    second.wait_nodes("p", 1, "idle").await;
    second.job_on("j", "p").await;
    let task = json!({"id": "t", "commandLine": "printf hello > out; printf m > $AZ_BATCH_NODE_SHARED_DIR/mark"});
    second.add_tasks("j", vec![task]).await;
    let done = second.wait_task("j", "t", "completed").await;
    assert_eq!(done["executionInfo"]["exitCode"], 0, "{done}");
    let node = done["nodeInfo"]["nodeId"].as_str().unwrap().to_string();

    // The nodes are the leader's (the first server's): the second, with a data directory of
    // its own, reads their files through it.
    let seen = files_seen_by(&first, &node).await;
    assert_eq!(seen.0.as_deref(), Some("hello"), "{seen:?}");
    assert_eq!(seen.1.as_deref(), Some("m"), "{seen:?}");
    assert!(seen.2.iter().any(|n| n == "wd/out"), "{seen:?}");
    assert_eq!(files_seen_by(&second, &node).await, seen);
    assert!(
        !second.data_dir.path().join("nodes").join(&node).exists(),
        "the second server has no copy of the node"
    );
    // Only the installation's servers may ask.
    let question = json!({"node": node, "rel": "shared/mark", "op": {"op": "read", "range": null}});
    let asked = reqwest::Client::new()
        .post(format!("{}/agent/v1/peer/files", first.agent_url()))
        .header("authorization", "BatchpoolPeer guess")
        .json(&question)
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 401);

    // A running task's output followed through the server that does not lead: streamed
    // through the leader, to the task's end.
    let task = json!({"id": "live", "commandLine": "sh -c 'echo one; sleep 2; echo two'"});
    second.add_tasks("j", vec![task]).await;
    second.wait_task("j", "live", "running").await;
    let followed = second
        .http
        .get(format!(
            "{}/jobs/j/tasks/live/files/stdout.txt?follow=true",
            second.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(followed.headers()["ocp-batchpool-follow"], "true");
    assert_eq!(followed.text().await.unwrap(), "one\ntwo\n");
    assert_eq!(second.task("j", "live").await["state"], "completed");

    // A task deleted through the second server: its directory goes from its node.
    let dir = "workitems/j/job-1/t";
    assert!(first.exists_on_node(&node, &format!("{dir}/wd/out")).await);
    assert_eq!(second.delete("/jobs/j/tasks/t").await.0, 200);
    common::wait_for("the deleted task's directory to go", || async {
        (!first.exists_on_node(&node, dir).await).then_some(())
    })
    .await;

    // Once the node is gone, so are its tasks' files, as on Azure: both servers say so.
    let task = json!({"id": "kept", "commandLine": "printf hello > out"});
    second.add_tasks("j", vec![task]).await;
    second.wait_task("j", "kept", "completed").await;
    let file = "/jobs/j/tasks/kept/files/wd/out";
    assert_eq!(second.file(file).await.as_deref(), Some("hello"));
    let resize = json!({"targetDedicatedNodes": 0});
    assert_eq!(second.post("/pools/p/resize", &resize).await.0, 202);
    common::wait_for("the node to go", || async {
        second.nodes("p").await.is_empty().then_some(())
    })
    .await;
    for s in [&first, &second] {
        let (status, body) = s.get(file).await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["code"], "NodeNotFound", "{body}");
    }
}
on_both_runtimes!(
    a_nodes_files_are_read_through_any_server,
    files_are_read_through_any_server
);

/// The leader killed (kill -9) with a Docker node up, and another server started only then: the
/// new server takes the lead and adopts the node, whose agent calls the dead server and knows of
/// no other. It is lost after the agent timeout, as a node whose agent falls silent is, and the
/// pool is whole again with a node of the new leader: tasks submitted meanwhile all run, none
/// left waiting on the node no server reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_nodes_are_replaced_by_the_next_leader() {
    let args = ["--agent-timeout", "10"];
    let database = Some(common::fresh_database().await);
    let mut first = TestServer::start_with(Rt::Docker, database, &args).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(first.post("/pools", &body).await.0, 201);
    let nodes = first.wait_nodes("p", 1, "idle").await;
    let old = nodes[0]["id"].as_str().unwrap().to_string();
    first.kill().await;
    let second = TestServer::start_with(Rt::Docker, first.database_url.clone(), &args).await;

    second.job_on("j", "p").await;
    let tasks = (0..4)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": "echo $AZ_BATCH_TASK_ID"}))
        .collect();
    second.add_tasks("j", tasks).await;
    for t in second.wait_all_completed("j", 4).await {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        assert_ne!(t["nodeInfo"]["nodeId"], old.as_str(), "{t}");
        let out = second.stdout("j", t["id"].as_str().unwrap()).await;
        assert_eq!(out, format!("{}\n", t["id"].as_str().unwrap()));
    }
    let nodes = second.wait_nodes("p", 1, "idle").await;
    assert_ne!(
        nodes[0]["id"],
        old.as_str(),
        "the old leader's node was replaced"
    );
    common::wait_for("the old leader's node to be removed", || async {
        (!second.runtime_nodes().await.contains(&old)).then_some(())
    })
    .await;
}

/// Two servers of runtime `rt` on one database, the first leading, with a pool of one node of
/// two slots and the task `long` of job `j` running there (`command`), started once the leader
/// knew of both servers: the work that starts it tells the agent of both. Returns the servers
/// and the node.
async fn two_servers_and_a_long_task(rt: Rt, command: &str) -> (TestServer, TestServer, String) {
    let database = Some(common::fresh_database().await);
    let first = TestServer::start_with(rt, database, &[]).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(first.post("/pools", &body).await.0, 201);
    let nodes = first.wait_nodes("p", 1, "idle").await;
    let node = nodes[0]["id"].as_str().unwrap().to_string();
    let second = TestServer::start_with(rt, first.database_url.clone(), &[]).await;
    common::wait_for("the leader to know of both servers", || async {
        let said = "the installation's servers changed count=2";
        first.log_contains(said).then_some(())
    })
    .await;
    first.job_on("j", "p").await;
    let long = json!({"id": "long", "commandLine": command});
    first.add_tasks("j", vec![long]).await;
    first.wait_task("j", "long", "running").await;
    (first, second, node)
}

const LONG: &str = "sleep 15; echo done";

/// The leader killed (kill -9) while a task runs, with a second server up: the node's agent,
/// told of the second by the leader, turns to it once the dead one has not answered for 5 s,
/// and the second, leading now, keeps the node. The running task ends once, never requeued, and
/// the node runs the tasks added meanwhile: nothing is made again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_nodes_turn_to_the_next_leader() {
    let (mut first, second, node) = two_servers_and_a_long_task(Rt::Docker, LONG).await;
    first.kill().await;

    let short =
        (0..3).map(|i| json!({"id": format!("s{i}"), "commandLine": "echo $AZ_BATCH_TASK_ID"}));
    second.add_tasks("j", short.collect()).await;
    for t in second.wait_all_completed("j", 4).await {
        let info = &t["executionInfo"];
        assert_eq!(info["result"], "success", "{t}");
        assert_eq!(info["requeueCount"], 0, "{t}");
        assert_eq!(t["nodeInfo"]["nodeId"], node.as_str(), "{t}");
    }
    assert_eq!(second.stdout("j", "long").await, "done\n");
    let nodes = second.wait_nodes("p", 1, "idle").await;
    assert_eq!(nodes[0]["id"], node.as_str(), "the node was kept");
    let log = std::fs::read_to_string(second.log_path()).unwrap();
    let recovered = log.lines().find(|l| l.contains("recovered the attempts"));
    assert!(
        recovered.is_some_and(|l| l.contains("lost=0") && !l.contains("finished=0 adopted=0")),
        "the second server took the running attempt over: {recovered:?}"
    );
}

/// The leader frozen (its process stopped) for longer than its lease: PostgreSQL ends its lock's
/// session and any transaction it left open, so the second server takes the lead while the
/// first is still stopped. Let go, the first finds that it no longer leads and runs on: its
/// node's agent, answered `NotLeading` by it from then on, turns to the new leader, which keeps
/// the node; the task that ran through it ends once, never requeued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_turns_to_the_new_leader_when_its_server_loses_the_lead() {
    let (first, second, node) = two_servers_and_a_long_task(Rt::Docker, LONG).await;

    let signal = |s: &str| {
        let pid = first.pid().to_string();
        assert!(std::process::Command::new("kill")
            .args([s, &pid])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    common::wait_for("the second server to lead", || async {
        second
            .log_contains("this server leads the scheduler")
            .then_some(())
    })
    .await;
    signal("-CONT");
    common::wait_for("the first server to stop leading", || async {
        first
            .log_contains("stopped leading the scheduler")
            .then_some(())
    })
    .await;

    let t = second.wait_task("j", "long", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(t["executionInfo"]["requeueCount"], 0, "{t}");
    assert_eq!(second.stdout("j", "long").await, "done\n");
    second
        .add_tasks("j", vec![json!({"id": "after", "commandLine": "true"})])
        .await;
    let after = second.wait_task("j", "after", "completed").await;
    assert_eq!(
        after["nodeInfo"]["nodeId"],
        node.as_str(),
        "the node was kept: {after}"
    );
    assert!(first.log_contains("this server leads the scheduler"));
}

/// A local node lives in the data directory of the server that made it. That server killed
/// (kill -9), the next leader, with a directory of its own, makes the node again there and
/// requeues its task; before it starts the node's new agent, it stops the old one, which stops
/// with what it ran, so the task never runs twice at once (the chaos soak found a node running
/// more tasks than its slots while the old agent waited to be refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_local_node_stops_what_it_ran() {
    let traces = tempfile::tempdir().unwrap();
    let pids = traces.path().join("pids");
    let command = format!("echo $$ >> {}; exec sleep 300", pids.display());
    let (mut first, second, node) = two_servers_and_a_long_task(Rt::Local, &command).await;
    let ran = || async {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        text.lines()
            .map(|l| l.parse::<i32>().unwrap())
            .collect::<Vec<_>>()
    };
    let old = common::wait_for("the task to say its pid", || async {
        ran().await.first().copied()
    })
    .await;
    first.kill().await;

    let again = common::wait_for("the task to run again", || async {
        ran().await.get(1).copied()
    })
    .await;
    let alive = |pid: i32| unsafe { libc::kill(pid, 0) == 0 };
    assert!(
        !alive(old),
        "the old attempt ended before the new one began"
    );
    let t = second.wait_task("j", "long", "running").await;
    assert_eq!(t["executionInfo"]["requeueCount"], 1, "{t}");
    assert!(alive(again), "the task's new attempt runs on");
    assert_eq!(
        ran().await.len(),
        2,
        "the task ran twice at most: {:?}",
        ran().await
    );
    let agent_log = first
        .data_dir
        .path()
        .join("nodes")
        .join(&node)
        .join(".batchpool-agent.log");
    let log = std::fs::read_to_string(agent_log).unwrap();
    assert!(
        log.contains("the node agent stops with what it runs"),
        "the old agent said why it stopped: {log}"
    );
    let terminate = second.post("/jobs/j/terminate", &json!({})).await;
    assert_eq!(terminate.0, 202, "{terminate:?}");
}

/// A node whose agent stops answering (hung: its process stopped, its container paused) is
/// lost after `--agent-timeout`: its running tasks are requeued onto the other nodes, and the
/// pool grows back to its target without it, so nothing of it runs on.
async fn a_silent_agent_loses_its_node(rt: Rt) {
    let database = Some(common::fresh_database().await);
    let s = TestServer::start_with(rt, database, &["--agent-timeout", "10"]).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 2, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 2, "idle").await;
    s.job_on("j", "p").await;
    let tasks = (0..8)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": "sleep 2"}))
        .collect();
    s.add_tasks("j", tasks).await;
    let hung = common::wait_for("a node with two tasks running", || async {
        let nodes = s.nodes("p").await;
        nodes
            .iter()
            .find(|n| n["runningTasksCount"] == 2)
            .map(|n| n["id"].as_str().unwrap().to_string())
    })
    .await;
    freeze(rt, &s, &hung, true);

    let done = s.wait_all_completed("j", 8).await;
    let mut requeued = 0;
    for t in &done {
        let info = &t["executionInfo"];
        assert_eq!(info["result"], "success", "{t}");
        assert_eq!(
            info["retryCount"], 0,
            "a lost node is no failure of the task: {t}"
        );
        requeued += info["requeueCount"].as_i64().unwrap();
    }
    assert!(
        (2..=4).contains(&requeued),
        "the hung node's running tasks were requeued ({requeued})"
    );
    let nodes = s.wait_nodes("p", 2, "idle").await;
    let ids: Vec<&str> = nodes.iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert!(
        !ids.contains(&hung.as_str()),
        "{hung} was replaced: {ids:?}"
    );
    common::wait_for("the hung node to be removed", || async {
        (!s.runtime_nodes().await.contains(&hung)).then_some(())
    })
    .await;
}
on_both_runtimes!(
    a_node_whose_agent_falls_silent_is_replaced,
    a_silent_agent_loses_its_node
);

/// A node whose agent has been silent for a while (15 s: three of its load reports missed) is
/// `unknown`, as Azure shows a node it lost contact with: its running task is still running, no
/// task is placed in its free slot, and the pool's node counts say so. When the agent speaks
/// again, before the agent timeout, the node is what it was, and its task ends once, never
/// requeued.
async fn a_quiet_agent_makes_its_node_unknown_until_it_speaks(rt: Rt) {
    let s = TestServer::start(rt).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
    s.job_on("j", "p").await;
    s.add_tasks("j", vec![json!({"id": "long", "commandLine": "sleep 30"})])
        .await;
    let running = s.wait_task("j", "long", "running").await;
    let node = running["nodeInfo"]["nodeId"].as_str().unwrap().to_string();

    freeze(rt, &s, &node, true);
    let started = std::time::Instant::now();
    s.wait_nodes("p", 1, "unknown").await;
    let waited = started.elapsed();
    let (_, counts) = s.get("/nodecounts").await;
    let dedicated = &counts["value"][0]["dedicated"];
    assert_eq!(
        (&dedicated["unknown"], &dedicated["running"]),
        (&json!(1), &json!(0)),
        "{counts}"
    );
    s.add_tasks("j", vec![json!({"id": "next", "commandLine": "true"})])
        .await;
    // A pass runs as soon as a task is added: for two seconds, it finds no node to run it on.
    for _ in 0..20 {
        let (_, next) = s.get("/jobs/j/tasks/next").await;
        assert_eq!(next["state"], "active", "placed on an unknown node: {next}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, long) = s.get("/jobs/j/tasks/long").await;
    assert_eq!(long["state"], "running", "{long}");
    freeze(rt, &s, &node, false);
    assert!(
        waited >= std::time::Duration::from_secs(14),
        "unknown after {waited:?} of silence"
    );

    for t in s.wait_all_completed("j", 2).await {
        let info = &t["executionInfo"];
        assert_eq!(info["exitCode"], 0, "{t}");
        assert_eq!(info["requeueCount"], 0, "{t}");
        assert_eq!(t["nodeInfo"]["nodeId"], node.as_str(), "{t}");
    }
    let nodes = s.wait_nodes("p", 1, "idle").await;
    assert_eq!(nodes[0]["id"], node.as_str(), "the node was kept");
}
on_both_runtimes!(
    a_node_whose_agent_is_quiet_for_a_while_is_unknown,
    a_quiet_agent_makes_its_node_unknown_until_it_speaks
);

/// A node whose agent does not answer holds up only its own new tasks: while an attempt on it
/// is being killed (through an agent that cannot answer: 10 s to ask, up to 15 s for its end),
/// the dispatcher goes on placing tasks, and the other node runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_on_a_silent_node_holds_up_only_that_node() {
    let s = TestServer::start(Rt::Local).await;
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 2, "taskSlotsPerNode": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 2, "idle").await;
    s.job_on("a", "p").await;
    s.add_tasks("a", vec![json!({"id": "long", "commandLine": "sleep 600"})])
        .await;
    let long = s.wait_task("a", "long", "running").await;
    let node = long["nodeInfo"]["nodeId"].as_str().unwrap().to_string();

    freeze(Rt::Local, &s, &node, true);
    let (status, body) = s.post("/jobs/a/tasks/long/terminate", &json!({})).await;
    assert_eq!(status, 204, "{body}");
    s.job_on("b", "p").await;
    let quick = (0..3).map(|i| json!({"id": format!("q{i}"), "commandLine": "true"}));
    s.add_tasks("b", quick.collect()).await;
    // One may be placed on the frozen node, in the slot the terminated task freed; the other
    // two run one after the other on the other node, well before the kill gives up.
    let completed = || async {
        let (_, tasks) = s.get("/jobs/b/tasks").await;
        let on_other: Vec<_> = tasks["value"]
            .as_array()?
            .iter()
            .filter(|t| t["state"] == "completed" && t["nodeInfo"]["nodeId"] != node.as_str())
            .collect();
        (on_other.len() >= 2).then_some(())
    };
    let waited = std::time::Duration::from_secs(9);
    let done = tokio::time::timeout(waited, common::wait_for("two of b's tasks", completed)).await;
    freeze(Rt::Local, &s, &node, false);
    assert!(
        done.is_ok(),
        "the other node's tasks waited for the kill on the frozen one"
    );
    for t in s.wait_all_completed("b", 3).await {
        assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
    }
    let long = s.wait_task("a", "long", "completed").await;
    assert_eq!(
        long["executionInfo"]["failureInfo"]["code"], "TaskEnded",
        "{long}"
    );
}

/// A node whose agent never reaches the server is `starting` until the agent timeout has passed,
/// then unusable,
/// and the pool's resize errors say why. Its wait for the hello takes none of the engine's
/// turns: with one node made at a time, the next is made while the first still waits.
#[tokio::test]
async fn a_node_whose_agent_never_says_hello_is_unusable_and_the_resize_says_why() {
    // Inside a node's container, 127.0.0.1 is the node itself: nothing listens there.
    let args = [
        "--agent-url",
        "http://127.0.0.1:9",
        "--agent-timeout",
        "20",
        "--node-concurrency",
        "1",
    ];
    let s = TestServer::start_with(Rt::Docker, Some(common::fresh_database().await), &args).await;
    let server_id = s.server_id().await;
    let body = json!({"id": "mute", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    // While their agents are awaited, the nodes are `starting`, as Azure's are while their
    // Batch agent starts.
    common::wait_for("both containers, both nodes starting", || async {
        let made = common::docker_containers(&server_id).len();
        let nodes = s.nodes("mute").await;
        let waiting = nodes.len() == 2 && nodes.iter().all(|n| n["state"] == "starting");
        (made == 2 && waiting).then_some(())
    })
    .await;
    let (_, counts) = s.get("/nodecounts").await;
    let dedicated = &counts["value"][0]["dedicated"];
    assert_eq!(
        (&dedicated["starting"], &dedicated["creating"]),
        (&json!(2), &json!(0)),
        "{counts}"
    );
    s.wait_nodes("mute", 2, "unusable").await;
    let (_, pool) = s.get("/pools/mute").await;
    let errors = pool["resizeErrors"].to_string();
    assert!(errors.contains("NodeAgentUnreachable"), "{pool}");
    assert!(errors.contains("--agent-url"), "{pool}");
}

/// The node container of each of this server's nodes that has one: node id -> container id.
fn node_containers(server_id: &str) -> HashMap<String, String> {
    common::docker_containers(server_id)
        .iter()
        .filter(|c| c["Config"]["Labels"].get("batchpool.task").is_none())
        .filter_map(|c| {
            let node = c["Config"]["Labels"]["batchpool.node"].as_str()?;
            Some((node.to_string(), c["Id"].as_str()?.to_string()))
        })
        .collect()
}

/// A node `unusable` because its agent never said hello is made again once its container has
/// stopped (it died with its host, or was killed, before its agent could speak: the Docker
/// soak's pools lost their nodes so); while its container runs, it is not (an agent that
/// cannot reach the server, a wrong `--agent-url`, is no fault that passes).
#[tokio::test]
async fn a_node_unusable_for_silence_is_made_again_once_its_container_stopped() {
    let args = ["--agent-url", "http://127.0.0.1:9", "--agent-timeout", "10"];
    let s = TestServer::start_with(Rt::Docker, Some(common::fresh_database().await), &args).await;
    let server_id = s.server_id().await;
    let body = json!({"id": "mute", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("mute", 2, "unusable").await;
    let before = node_containers(&server_id);
    assert_eq!(before.len(), 2, "{before:?}");
    let (stopped, running) = {
        let mut ids = before.keys().cloned();
        (ids.next().unwrap(), ids.next().unwrap())
    };
    common::run_ok(std::process::Command::new("docker").args(["kill", &before[&stopped]]));
    common::wait_for("the stopped node's container made again", || async {
        let now = node_containers(&server_id);
        now.get(&stopped)
            .is_some_and(|id| *id != before[&stopped])
            .then_some(())
    })
    .await;
    // The other waited as long, its container running: it is as it was.
    assert_eq!(
        node_containers(&server_id).get(&running),
        before.get(&running)
    );
    let nodes = s.nodes("mute").await;
    let other = nodes.iter().find(|n| n["id"] == running.as_str()).unwrap();
    assert_eq!(other["state"], "unusable", "{other}");
}

/// An iptables rule that refuses connections from outside this host to a port, until dropped:
/// a network cut between nodes' agents and their server (the server's own loopback calls pass).
struct Refused(u16);

impl Refused {
    fn rule(port: u16, op: &str) -> std::process::ExitStatus {
        let port = port.to_string();
        std::process::Command::new("iptables")
            .args([op, "INPUT", "!", "-i", "lo", "-p", "tcp", "--dport", &port])
            .args(["-j", "REJECT", "--reject-with", "tcp-reset"])
            .status()
            .expect("iptables (Debian's iptables, which docker.io brings)")
    }

    fn port(port: u16) -> Self {
        assert!(Self::rule(port, "-I").success(), "iptables -I failed");
        Refused(port)
    }
}

impl Drop for Refused {
    fn drop(&mut self) {
        Self::rule(self.0, "-D");
    }
}

/// A new node whose agent cannot reach the server in time (its network cut) is unusable, as
/// above; once the cut heals and its agent speaks after all, the node is made again by itself,
/// and takes tasks: a fault that passed costs the pool no node.
#[tokio::test]
async fn a_node_unusable_for_a_cut_that_healed_is_made_again_when_its_agent_speaks() {
    let database = Some(common::fresh_database().await);
    let s = TestServer::start_with(Rt::Docker, database, &["--agent-timeout", "10"]).await;
    let port: u16 = s.agent_url().rsplit(':').next().unwrap().parse().unwrap();
    let cut = Refused::port(port);
    let body = json!({"id": "healed", "vmSize": "standard_a1", "targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let nodes = s.wait_nodes("healed", 1, "unusable").await;
    let errors = nodes[0]["errors"].to_string();
    assert!(errors.contains("NodeAgentUnreachable"), "{errors}");
    let id = nodes[0]["id"].clone();
    drop(cut);
    let nodes = s.wait_nodes("healed", 1, "idle").await;
    assert_eq!(nodes[0]["id"], id, "the same node, made again");
    assert!(
        nodes[0].get("errors").is_none_or(|e| e == &json!([])),
        "{}",
        nodes[0]
    );
    s.job_on("j", "healed").await;
    s.add_tasks("j", vec![json!({"id": "t", "commandLine": "true"})])
        .await;
    s.wait_all_completed("j", 1).await;
}
