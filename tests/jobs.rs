//! Jobs, tasks and the scheduler end to end, on both runtimes.

#[macro_use]
mod common;

use std::collections::HashMap;

use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// A pool of `nodes` x `slots`, ready.
async fn pool(s: &TestServer, id: &str, nodes: usize, slots: u32, fill: &str) -> Vec<String> {
    let body = json!({"id": id, "vmSize": "standard_a1", "targetDedicatedNodes": nodes, "taskSlotsPerNode": slots,
                      "taskSchedulingPolicy": {"nodeFillType": fill}});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes(id, nodes, "idle")
        .await
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

async fn job(s: &TestServer, id: &str, pool: &str, extra: Value) {
    let mut body = json!({"id": id, "poolInfo": {"poolId": pool}});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, resp) = s.post("/jobs", &body).await;
    assert_eq!(status, 201, "{resp}");
}

fn task(id: &str, command: &str) -> Value {
    json!({"id": id, "commandLine": command})
}

/// Appends "job:task" to the node's shared `order` file.
const RECORD: &str = "echo $AZ_BATCH_JOB_ID:$AZ_BATCH_TASK_ID >> $AZ_BATCH_NODE_SHARED_DIR/order";

/// The order four jobs' tasks ran in, one at a time on a pool of one slot with
/// `jobDefaultOrder` `order`: "low" (priority -5), "older" and "newer" (10, made in that
/// order, their tasks added the other way round) and "high" (500), three tasks each, all queued
/// before the pool has a node.
async fn run_order(rt: Rt, order: &str) -> Vec<String> {
    let s = TestServer::start(rt).await;
    let pool = json!({"id": "prio", "vmSize": "standard_a1", "targetDedicatedNodes": 0,
        "taskSchedulingPolicy": {"jobDefaultOrder": order}});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let (_, got) = s.get("/pools/prio").await;
    assert_eq!(
        got["taskSchedulingPolicy"]["jobDefaultOrder"], order,
        "{got}"
    );
    job(&s, "low", "prio", json!({"priority": -5})).await;
    job(&s, "older", "prio", json!({"priority": 10})).await;
    job(&s, "newer", "prio", json!({"priority": 10})).await;
    job(&s, "high", "prio", json!({"priority": 500})).await;
    for j in ["low", "newer", "older", "high"] {
        s.add_tasks(j, (1..=3).map(|i| task(&format!("t{i}"), RECORD)).collect())
            .await;
    }
    assert_eq!(
        s.get("/jobs/high/taskcounts").await.1["taskCounts"]["active"],
        3,
        "queued while the pool is empty"
    );
    assert_eq!(
        s.post("/pools/prio/resize", &json!({"targetDedicatedNodes": 1}))
            .await
            .0,
        202
    );
    let node = s.wait_nodes("prio", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for j in ["low", "newer", "older", "high"] {
        s.wait_all_completed(j, 3).await;
    }
    s.shared_file("prio", &node, "order")
        .await
        .lines()
        .map(String::from)
        .collect()
}

/// Each job's tasks, in task order, job after job.
fn job_after_job(jobs: &[&str]) -> Vec<String> {
    jobs.iter()
        .flat_map(|j| (1..=3).map(move |i| format!("{j}:t{i}")))
        .collect()
}

async fn priority_then_age_then_task_order(rt: Rt) {
    assert_eq!(
        run_order(rt, "creationtime").await,
        job_after_job(&["high", "older", "newer", "low"]),
        "job priority, then job age, then task order"
    );
}
on_both_runtimes!(
    tasks_run_by_priority_then_age_then_order,
    priority_then_age_then_task_order
);

/// Azure's default jobDefaultOrder, `none`: jobs of equal priority take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_equal_priority_take_turns() {
    let mut expected = job_after_job(&["high"]);
    expected.extend((1..=3).flat_map(|i| [format!("older:t{i}"), format!("newer:t{i}")]));
    expected.extend(job_after_job(&["low"]));
    assert_eq!(run_order(Rt::Local, "none").await, expected);
}

/// Free slots are shared out in rounds: a job with fewer ready tasks than its share leaves the
/// rest to the others, which claim it after the tasks they already hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_left_by_one_job_goes_to_the_others() {
    let s = TestServer::start(Rt::Local).await;
    let pool = json!({"id": "share", "vmSize": "standard_a1", "targetDedicatedNodes": 0,
        "taskSlotsPerNode": 4, "taskSchedulingPolicy": {"jobDefaultOrder": "none"}});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    for (j, count) in [("few", 1), ("many", 6)] {
        job(&s, j, "share", json!({})).await;
        let tasks = (1..=count).map(|i| task(&format!("t{i}"), "sleep 600"));
        s.add_tasks(j, tasks.collect()).await;
    }
    let resize = json!({"targetDedicatedNodes": 1});
    assert_eq!(s.post("/pools/share/resize", &resize).await.0, 202);
    let running = |j: &'static str| {
        let s = &s;
        async move {
            s.get(&format!("/jobs/{j}/taskcounts")).await.1["taskCounts"]["running"]
                .as_i64()
                .unwrap()
        }
    };
    let counts = wait_for("four running tasks", || async {
        let counts = (running("few").await, running("many").await);
        (counts.0 + counts.1 == 4).then_some(counts)
    })
    .await;
    assert_eq!(counts, (1, 3), "(few, many) running");
    let started: Vec<String> = common::all_tasks(&s, "many")
        .await
        .into_iter()
        .filter(|t| t["state"] == "running")
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(started, ["t1", "t2", "t3"], "in task order, each once");
    for j in ["few", "many"] {
        assert_eq!(
            s.post(&format!("/jobs/{j}/terminate"), &json!({})).await.0,
            202
        );
    }
}

/// A job that allows preemption gives its running tasks' slots to a waiting job of higher
/// priority: they are requeued (requeueCount + 1) and run again once the slots are free. A job
/// that does not allow it keeps its slots, whatever the priority waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_job_takes_the_slots_of_a_preemptible_one() {
    let s = TestServer::start(Rt::Local).await;
    pool(&s, "busy", 1, 2, "spread").await;
    job(&s, "yielding", "busy", json!({})).await;
    job(&s, "guarded", "busy", json!({"allowTaskPreemption": false})).await;
    let patch = json!({"allowTaskPreemption": true});
    let (status, answer) = s
        .request(reqwest::Method::PATCH, "/jobs/yielding", Some(&patch))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (_, shown) = s.get("/jobs/yielding").await;
    assert_eq!(shown["allowTaskPreemption"], true);
    s.add_tasks("yielding", vec![task("long", "sleep 600")])
        .await;
    s.add_tasks("guarded", vec![task("long", "sleep 600")])
        .await;
    s.wait_task("yielding", "long", "running").await;
    s.wait_task("guarded", "long", "running").await;
    // The pool is full; a job of higher priority comes with two quick tasks.
    job(&s, "urgent", "busy", json!({"priority": 100})).await;
    s.add_tasks("urgent", vec![task("a", "true"), task("b", "true")])
        .await;
    for t in s.wait_all_completed("urgent", 2).await {
        assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
    }
    // The preempted task runs again, on its second try; the guarded one never stopped.
    let yielded = wait_for("the preempted task to run again", || async {
        let t = s.task("yielding", "long").await;
        (t["state"] == "running" && t["executionInfo"]["requeueCount"] == 1).then_some(t)
    })
    .await;
    assert_eq!(yielded["executionInfo"]["retryCount"], 0, "{yielded}");
    let guarded = s.task("guarded", "long").await;
    assert_eq!(guarded["state"], "running", "{guarded}");
    assert_eq!(guarded["executionInfo"]["requeueCount"], 0, "{guarded}");
    for j in ["yielding", "guarded"] {
        assert_eq!(
            s.post(&format!("/jobs/{j}/terminate"), &json!({})).await.0,
            202
        );
    }
}

/// Each task records how many tasks run on its node at its start; none may exceed the slots.
const CONCURRENCY: &str =
    "d=$AZ_BATCH_NODE_SHARED_DIR; mkdir -p $d/running; touch $d/running/$AZ_BATCH_TASK_ID; \
    ls $d/running | wc -l >> $d/concurrency; sleep 0.3; rm $d/running/$AZ_BATCH_TASK_ID";

async fn slots_are_never_exceeded(rt: Rt) {
    let s = TestServer::start(rt).await;
    let nodes = pool(&s, "slots", 2, 3, "spread").await;
    job(&s, "busy", "slots", json!({})).await;
    s.add_tasks(
        "busy",
        (0..18)
            .map(|i| json!({"id": format!("t{i}"), "commandLine": CONCURRENCY}))
            .collect(),
    )
    .await;
    let tasks = s.wait_all_completed("busy", 18).await;
    assert!(
        tasks
            .iter()
            .all(|t| t["executionInfo"]["result"] == "success"),
        "{tasks:?}"
    );
    let mut peak = 0;
    for node in &nodes {
        for line in s.shared_file("slots", node, "concurrency").await.lines() {
            let n: u32 = line.trim().parse().unwrap();
            assert!(n <= 3, "a node ran {n} tasks at once with 3 slots");
            peak = peak.max(n);
        }
    }
    assert!(peak >= 2, "the slots were used in parallel (peak {peak})");

    // A task needing 2 of 3 slots never shares a node with another such task.
    job(&s, "wide", "slots", json!({})).await;
    s.add_tasks(
        "wide",
        (0..6)
            .map(|i| json!({"id": format!("w{i}"), "commandLine": CONCURRENCY, "requiredSlots": 2}))
            .collect(),
    )
    .await;
    s.wait_all_completed("wide", 6).await;
    let (_, counts) = s.get("/jobs/wide/taskcounts").await;
    assert_eq!(counts["taskSlotCounts"]["completed"], 12);
}
on_both_runtimes!(
    a_node_never_runs_more_than_its_slots,
    slots_are_never_exceeded
);

async fn placement(rt: Rt) {
    let s = TestServer::start(rt).await;
    for fill in ["spread", "pack"] {
        pool(&s, fill, 2, 4, fill).await;
        job(&s, fill, fill, json!({})).await;
        s.add_tasks(
            fill,
            (0..4).map(|i| task(&format!("t{i}"), "sleep 1")).collect(),
        )
        .await;
        let tasks = s.wait_all_completed(fill, 4).await;
        let mut per_node: HashMap<String, usize> = HashMap::new();
        for t in &tasks {
            *per_node
                .entry(t["nodeInfo"]["nodeId"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        let mut counts: Vec<usize> = per_node.into_values().collect();
        counts.sort();
        match fill {
            "spread" => assert_eq!(counts, vec![2, 2], "spread: emptiest node first"),
            _ => assert_eq!(counts, vec![4], "pack: fill one node before the next"),
        }
    }
}
on_both_runtimes!(spread_and_pack_place_as_azure_documents, placement);

async fn retries_wall_clock_and_live_output(rt: Rt) {
    let s = TestServer::start(rt).await;
    let node = pool(&s, "r", 1, 4, "spread").await.remove(0);
    job(
        &s,
        "r",
        "r",
        json!({"constraints": {"maxTaskRetryCount": 1}}),
    )
    .await;
    s.add_tasks(
        "r",
        vec![
            // Fails twice, then succeeds: within 2 retries.
            json!({"id": "third-time", "commandLine": "n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; test $n -ge 3",
                   "constraints": {"maxTaskRetryCount": 2}}),
            // Always fails: the job's maxTaskRetryCount (1) applies.
            task("always", "echo failing >&2; exit 7"),
            // Ticks every 0.25 s for 5 s unless killed at 1.5 s.
            json!({"id": "slow", "commandLine": "for i in $(seq 20); do echo $i >> $AZ_BATCH_NODE_SHARED_DIR/ticks; sleep 0.25; done",
                   "constraints": {"maxWallClockTime": "PT01.5S"}}),
            task("chatty", "echo first; sleep 2; echo second"),
        ],
    )
    .await;

    // Live output: the first line is readable while the task still runs.
    wait_for("chatty's first line while it runs", || async {
        let out = s.file("/jobs/r/tasks/chatty/files/stdout.txt").await?;
        (out == "first\n").then_some(())
    })
    .await;
    assert_eq!(s.task("r", "chatty").await["state"], "running");

    let t = s.wait_task("r", "third-time", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success");
    assert_eq!(t["executionInfo"]["retryCount"], 2);
    assert_eq!(t["executionInfo"]["exitCode"], 0);

    let t = s.wait_task("r", "always", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "failure");
    assert_eq!(t["executionInfo"]["retryCount"], 1);
    assert_eq!(t["executionInfo"]["exitCode"], 7);
    assert_eq!(t["executionInfo"]["failureInfo"]["code"], "FailureExitCode");
    assert_eq!(
        s.file("/jobs/r/tasks/always/files/stderr.txt")
            .await
            .unwrap(),
        "failing\n"
    );

    let t = s.wait_task("r", "slow", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "failure");
    assert_eq!(
        t["executionInfo"]["failureInfo"]["code"],
        "MaxWallClockTimeExceeded"
    );
    let ran = chrono::DateTime::parse_from_rfc3339(t["executionInfo"]["endTime"].as_str().unwrap())
        .unwrap()
        - chrono::DateTime::parse_from_rfc3339(t["executionInfo"]["startTime"].as_str().unwrap())
            .unwrap();
    assert!(
        ran.num_milliseconds() >= 1500 && ran.num_seconds() < 10,
        "killed at its limit, not later: {ran}"
    );
    // The whole process tree died with it: the ticks stop, though the loop had 5 s to go.
    let ticks_at_kill = s.shared_file("r", &node, "ticks").await.lines().count();
    assert!(
        (4..=12).contains(&ticks_at_kill),
        "ticked until the kill: {ticks_at_kill}"
    );
    let later = chrono::Utc::now() + chrono::Duration::seconds(1);
    wait_for("a second to pass", || async {
        (chrono::Utc::now() > later).then_some(())
    })
    .await;
    assert_eq!(
        s.shared_file("r", &node, "ticks").await.lines().count(),
        ticks_at_kill,
        "no tick after the kill"
    );

    let t = s.wait_task("r", "chatty", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success");
    assert_eq!(
        s.file("/jobs/r/tasks/chatty/files/stdout.txt")
            .await
            .unwrap(),
        "first\nsecond\n"
    );
    let (_, listing) = s.get("/jobs/r/tasks/chatty/files?recursive=true").await;
    assert_eq!(common::names(&listing), ["stderr.txt", "stdout.txt", "wd"]);

    let head = s
        .http
        .head(format!("{}/jobs/r/tasks/chatty/files/stdout.txt", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["content-length"], "13");
    assert_eq!(head.headers()["ocp-batch-file-isdirectory"], "false");
    let ranged = s
        .http
        .get(format!("{}/jobs/r/tasks/chatty/files/stdout.txt", s.base))
        .header("ocp-range", "bytes=6-11")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 200, "the SDK needs 200, not 206");
    assert_eq!(ranged.text().await.unwrap(), "second");
    let empty = s
        .http
        .get(format!("{}/jobs/r/tasks/chatty/files/stderr.txt", s.base))
        .header("ocp-range", "bytes=0-")
        .send()
        .await
        .unwrap();
    assert_eq!(
        empty.status(),
        200,
        "a range of an empty file is an empty answer"
    );
    assert_eq!(empty.text().await.unwrap(), "");

    // A task's files live on its node, and go with it, as on Azure, but for its stdout.txt and
    // stderr.txt: their kept copies are read then.
    assert_eq!(
        s.post("/pools/r/resize", &json!({"targetDedicatedNodes": 0}))
            .await
            .0,
        202
    );
    s.wait_nodes("r", 0, "idle").await;
    let (status, body) = s.get("/jobs/r/tasks/chatty/files/wd/anything").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "NodeNotFound", "{body}");
    let kept = s
        .http
        .get(format!("{}/jobs/r/tasks/chatty/files/stdout.txt", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.headers()["ocp-batchpool-kept-copy"], "true");
    assert_eq!(kept.text().await.unwrap(), "first\nsecond\n");
}
on_both_runtimes!(
    retries_wall_clock_kill_and_live_stdout,
    retries_wall_clock_and_live_output
);

/// A task that becomes ready again behind tasks that started after it does not wait for the
/// job's queue to drain. A retry goes back to its place at once; a task whose dependency ends
/// after later tasks have started runs within about a second. (The dispatcher claims a job's
/// tasks after the last one it placed, before a task it puts back itself, and from the queue's
/// head at least every second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_ready_again_run_before_their_jobs_long_queue_drains() {
    let s = TestServer::start(Rt::Local).await;
    let node = pool(&s, "q", 1, 1, "spread").await.remove(0);
    let body = json!({"maxTaskRetryCount": 1});
    job(
        &s,
        "q",
        "q",
        json!({"constraints": body, "usesTaskDependencies": true}),
    )
    .await;
    let once = format!(
        "test -f $AZ_BATCH_NODE_SHARED_DIR/failed || {{ touch $AZ_BATCH_NODE_SHARED_DIR/failed; exit 1; }}; {RECORD}"
    );
    let slow = format!("sleep 0.4; {RECORD}");
    let mut tasks = vec![task("retried", &once), task("t01", &slow)];
    // Added before t02, so it comes before t02 in the queue; ready once t03 has run.
    tasks.push(json!({"id": "late", "commandLine": RECORD, "dependsOn": {"taskIds": ["t03"]}}));
    tasks.extend((2..=12).map(|i| task(&format!("t{i:02}"), &slow)));
    s.add_tasks("q", tasks).await;
    s.wait_all_completed("q", 14).await;
    let order: Vec<String> = s
        .shared_file("q", &node, "order")
        .await
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(order.len(), 14, "{order:?}");
    assert_eq!(
        order[0], "q:retried",
        "the retry runs before t01: {order:?}"
    );
    let at = order.iter().position(|t| t == "q:late").unwrap();
    // 0.4 s a task: t03 ends at about 1.6 s, and a claim from the head is due by 2.4 s.
    assert!(at < 10, "late ran {}th of 14: {order:?}", at + 1);
    assert_eq!(
        s.task("q", "retried").await["executionInfo"]["retryCount"],
        1
    );
}

async fn dependencies(rt: Rt) {
    let s = TestServer::start(rt).await;
    pool(&s, "d", 1, 4, "spread").await;
    job(&s, "d", "d", json!({"usesTaskDependencies": true})).await;
    s.add_tasks(
        "d",
        vec![
            task("1", "sleep 0.5"),
            task("2", "sleep 0.2"),
            json!({"id": "after-range", "commandLine": "true", "dependsOn": {"taskIdRanges": [{"start": 1, "end": 2}]}}),
            task("fails", "exit 1"),
            json!({"id": "blocked", "commandLine": "true", "dependsOn": {"taskIds": ["fails"]}}),
            json!({"id": "fails-ok", "commandLine": "exit 4", "exitConditions": {"exitCodes": [{"code": 4, "exitOptions": {"dependencyAction": "satisfy"}}]}}),
            json!({"id": "satisfied", "commandLine": "true", "dependsOn": {"taskIds": ["fails-ok"]}}),
        ],
    )
    .await;
    let after = s.wait_task("d", "after-range", "completed").await;
    let one = s.task("d", "1").await;
    assert!(
        after["executionInfo"]["startTime"].as_str().unwrap()
            >= one["executionInfo"]["endTime"].as_str().unwrap(),
        "a dependant starts after what it depends on ends"
    );
    let sat = s.wait_task("d", "satisfied", "completed").await;
    assert_eq!(
        sat["executionInfo"]["result"], "success",
        "dependencyAction satisfy lets dependants run after a failure"
    );
    s.wait_task("d", "fails", "completed").await;
    assert_eq!(
        s.task("d", "blocked").await["state"],
        "active",
        "a failed dependency blocks"
    );
    let (_, counts) = s.get("/jobs/d/taskcounts").await;
    assert_eq!(
        counts["taskCounts"],
        json!({"active": 1, "running": 0, "completed": 6, "succeeded": 4, "failed": 2})
    );

    // Reactivation runs a failed task again; a task that did not fail cannot be reactivated.
    let before = s.task("d", "fails").await["executionInfo"]["startTime"].clone();
    assert_eq!(
        s.post("/jobs/d/tasks/fails/reactivate", &json!({})).await.0,
        204
    );
    wait_for("the reactivated task to run again", || async {
        let t = s.task("d", "fails").await;
        (t["state"] == "completed" && t["executionInfo"]["startTime"] != before).then_some(())
    })
    .await;
    let (status, body) = s.post("/jobs/d/tasks/1/reactivate", &json!({})).await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (409, Some("TaskNotFailed"))
    );
    assert_eq!(s.task("d", "blocked").await["state"], "active");

    // The counts follow a task through its reactivation (failed, active, running, failed
    // again) and a task's deletion, in tasks and in slots alike.
    let counts = |completed: u64, succeeded: u64| json!({"active": 1, "running": 0, "completed": completed, "succeeded": succeeded, "failed": 2});
    let (_, c) = s.get("/jobs/d/taskcounts").await;
    assert_eq!(
        (&c["taskCounts"], &c["taskSlotCounts"]),
        (&counts(6, 4), &counts(6, 4))
    );
    assert_eq!(s.delete("/jobs/d/tasks/satisfied").await.0, 200);
    let (_, c) = s.get("/jobs/d/taskcounts").await;
    assert_eq!(
        (&c["taskCounts"], &c["taskSlotCounts"]),
        (&counts(5, 3), &counts(5, 3))
    );
}
on_both_runtimes!(dependencies_wait_block_and_satisfy, dependencies);

async fn terminate_disable_and_job_completion(rt: Rt) {
    let s = TestServer::start(rt).await;
    pool(&s, "c", 1, 2, "spread").await;

    // Terminating a running task kills it and completes it as failed.
    job(&s, "t", "c", json!({})).await;
    s.add_tasks("t", vec![task("long", "sleep 60")]).await;
    s.wait_task("t", "long", "running").await;
    let busy: i64 = s
        .nodes("c")
        .await
        .iter()
        .map(|n| n["runningTasksCount"].as_i64().unwrap())
        .sum();
    assert_eq!(busy, 1, "the node says it runs the task");
    assert_eq!(
        s.post("/jobs/t/tasks/long/terminate", &json!({})).await.0,
        204
    );
    let t = s.wait_task("t", "long", "completed").await;
    assert_eq!(t["executionInfo"]["failureInfo"]["code"], "TaskEnded");
    assert_eq!(
        s.post("/jobs/t/tasks/long/terminate", &json!({})).await.1["code"],
        "TaskCompleted"
    );
    // Its slots are free again: a new task runs.
    s.add_tasks("t", vec![task("next", "true")]).await;
    s.wait_task("t", "next", "completed").await;

    // Disable with requeue: the running task goes back to the queue and waits for enable.
    job(&s, "dis", "c", json!({})).await;
    s.add_tasks("dis", vec![task("work", "sleep 60")]).await;
    s.wait_task("dis", "work", "running").await;
    assert_eq!(
        s.post("/jobs/dis/disable", &json!({"disableTasks": "requeue"}))
            .await
            .0,
        202
    );
    let job_now = s.get("/jobs/dis").await.1;
    assert_eq!(job_now["state"], "disabled");
    let t = s.wait_task("dis", "work", "active").await;
    assert_eq!(t["executionInfo"]["requeueCount"], 1);
    assert_eq!(
        s.task("dis", "work").await["state"],
        "active",
        "a disabled job gets no placements"
    );
    assert_eq!(s.post("/jobs/dis/enable", &json!({})).await.0, 202);
    s.wait_task("dis", "work", "running").await;

    // Terminating the job ends its running tasks and completes it with the reason.
    let (status, _) = s
        .post("/jobs/dis/terminate", &json!({"terminateReason": "enough"}))
        .await;
    assert_eq!(status, 202);
    let j = s.get("/jobs/dis").await.1;
    assert_eq!(j["state"], "completed");
    assert_eq!(j["executionInfo"]["terminateReason"], "enough");
    s.wait_task("dis", "work", "completed").await;
    let (status, body) = s.post("/jobs/dis/tasks", &task("late", "true")).await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (409, Some("JobCompleted"))
    );

    // onAllTasksComplete=terminatejob completes the job when its tasks are done.
    job(&s, "auto", "c", json!({})).await;
    s.add_tasks("auto", vec![task("a", "true"), task("b", "true")])
        .await;
    let resp = s
        .http
        .patch(format!("{}/jobs/auto", s.base))
        .json(&json!({"onAllTasksComplete": "terminatejob"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    wait_for("the job to complete by itself", || async {
        let j = s.get("/jobs/auto").await.1;
        (j["state"] == "completed").then_some(())
    })
    .await;
    assert_eq!(
        s.get("/jobs/auto").await.1["executionInfo"]["terminateReason"],
        "AllTasksComplete"
    );

    // maxParallelTasks: never more than one at a time, though slots are free.
    job(&s, "serial", "c", json!({"maxParallelTasks": 1})).await;
    s.add_tasks(
        "serial",
        (0..3)
            .map(|i| task(&format!("s{i}"), "sleep 0.3"))
            .collect(),
    )
    .await;
    let tasks = s.wait_all_completed("serial", 3).await;
    for pair in tasks.windows(2) {
        assert!(
            pair[1]["executionInfo"]["startTime"].as_str()
                >= pair[0]["executionInfo"]["endTime"].as_str()
        );
    }

    // A job's maxWallClockTime terminates it.
    job(
        &s,
        "bounded",
        "c",
        json!({"constraints": {"maxWallClockTime": "PT1S"}}),
    )
    .await;
    s.add_tasks("bounded", vec![task("forever", "sleep 60")])
        .await;
    wait_for("the job's wall clock to end it", || async {
        let j = s.get("/jobs/bounded").await.1;
        (j["state"] == "completed").then_some(())
    })
    .await;
    assert_eq!(
        s.get("/jobs/bounded").await.1["executionInfo"]["terminateReason"],
        "MaxWallClockTimeExpiry"
    );

    // Deleting a job kills its tasks and removes it with its files.
    job(&s, "gone", "c", json!({})).await;
    let sleeper = format!("sleep {}", if rt == Rt::Docker { 43101 } else { 43102 });
    s.add_tasks("gone", vec![task("x", &sleeper)]).await;
    s.wait_task("gone", "x", "running").await;
    assert_eq!(s.delete("/jobs/gone").await.0, 202);
    wait_for("the job to be deleted", || async {
        (s.get("/jobs/gone").await.0 == 404).then_some(())
    })
    .await;
    wait_for("the deleted job's process to be killed", || async {
        (!s.process_running(&sleeper).await).then_some(())
    })
    .await;
    assert_eq!(s.get("/jobs/gone/tasks/x").await.1["code"], "JobNotFound");
    // Its slot is free: the pool takes new work.
    job(&s, "after", "c", json!({})).await;
    s.add_tasks("after", vec![task("y", "true"), task("z", "true")])
        .await;
    s.wait_all_completed("after", 2).await;
}
on_both_runtimes!(
    terminate_disable_enable_delete_and_job_completion,
    terminate_disable_and_job_completion
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_job_and_task_requests_change_nothing() {
    let s = TestServer::start(Rt::Local).await;
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "p", "vmSize": "standard_a1", "taskSlotsPerNode": 2})
        )
        .await
        .0,
        201
    );
    job(&s, "j", "p", json!({})).await;
    s.add_tasks("j", vec![task("t", "true")]).await;

    let check = |status: reqwest::StatusCode, body: &Value, code: u16, error: &str| {
        assert_eq!(status.as_u16(), code, "{body}");
        assert_eq!(body["code"], error, "{body}");
    };
    let (st, b) = s.post("/jobs/nope/tasks", &task("x", "true")).await;
    check(st, &b, 404, "JobNotFound");
    let (st, b) = s.get("/jobs/j/tasks/nope").await;
    check(st, &b, 404, "TaskNotFound");
    let (st, b) = s.post("/jobs/j/tasks", &task("t", "true")).await;
    check(st, &b, 409, "TaskExists");
    let (st, b) = s.post("/jobs/j/tasks", &task("T", "true")).await;
    check(st, &b, 409, "TaskExists");
    assert_eq!(
        s.get("/jobs/j/tasks/T").await.1["id"],
        "t",
        "task ids are case-insensitive, case-preserving"
    );
    let (st, b) = s
        .post("/jobs", &json!({"id": "J", "poolInfo": {"poolId": "p"}}))
        .await;
    check(st, &b, 409, "JobExists");
    let (st, b) = s.post("/jobs", &json!({"id": "k"})).await;
    check(st, &b, 400, "MissingRequiredProperty");
    let (st, b) = s
        .post(
            "/jobs",
            &json!({"id": "k", "poolInfo": {"poolId": "p"}, "priority": 5000}),
        )
        .await;
    check(st, &b, 400, "InvalidPropertyValue");
    let (st, b) = s.post("/jobs", &json!({"id": "k", "poolInfo": {"poolId": "p"}, "constraints": {"maxWallClockTime": "1 hour"}})).await;
    check(st, &b, 400, "InvalidPropertyValue");
    assert!(
        b["values"]
            .to_string()
            .contains("constraints.maxWallClockTime"),
        "{b}"
    );
    let (st, b) = s
        .post(
            "/jobs/j/tasks",
            &json!({"id": "wide", "commandLine": "true", "requiredSlots": 3}),
        )
        .await;
    check(st, &b, 400, "InvalidPropertyValue");
    let (st, b) = s
        .post(
            "/jobs/j/tasks",
            &json!({"id": "dep", "commandLine": "true", "dependsOn": {"taskIds": ["t"]}}),
        )
        .await;
    check(st, &b, 400, "TaskDependenciesNotSpecifiedOnJob");
    job(&s, "deps", "p", json!({"usesTaskDependencies": true})).await;
    s.add_tasks("deps", vec![task("1", "true")]).await;
    let (st, b) = s.post("/jobs/deps/tasks", &json!({"id": "r", "commandLine": "true", "dependsOn": {"taskIdRanges": [{"start": 1, "end": 3}]}})).await;
    check(st, &b, 400, "InvalidPropertyValue");
    assert!(
        b["message"]["value"].as_str().unwrap().contains("\"2\""),
        "names the unknown task: {b}"
    );
    let (st, b) = s
        .post(
            "/jobs/j/tasks",
            &json!({"id": "d", "commandLine": "true", "constraints": {"retentionTime": "PT5X"}}),
        )
        .await;
    check(st, &b, 400, "InvalidPropertyValue");
    let (st, b) = s
        .post("/jobs/j/tasks", &json!({"id": "d", "commandLine": ""}))
        .await;
    check(st, &b, 400, "InvalidPropertyValue");
    let (st, b) = s
        .post_raw("/jobs/j/addtaskcollection", "{\"value\": [")
        .await;
    check(st, &b, 400, "InvalidRequestBody");
    let many: Vec<Value> = (0..101).map(|i| task(&format!("m{i}"), "true")).collect();
    let (st, b) = s
        .post("/jobs/j/addtaskcollection", &json!({"value": many}))
        .await;
    check(st, &b, 400, "TooManyTasksInCollection");
    let (st, b) = s
        .get("/jobs/j/tasks/t/files/..%2F..%2F..%2Fetc%2Fpasswd")
        .await;
    check(st, &b, 400, "InvalidPropertyValue");

    // Nothing was added.
    let (_, tasks) = s.get("/jobs/j/tasks").await;
    assert_eq!(tasks["value"].as_array().unwrap().len(), 1);
    let (_, jobs) = s.get("/jobs").await;
    assert_eq!(jobs["value"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_lists_page_with_next_links() {
    let s = TestServer::start(Rt::Local).await;
    assert_eq!(
        s.post("/pools", &json!({"id": "p", "vmSize": "standard_a1"}))
            .await
            .0,
        201
    );
    job(&s, "j", "p", json!({})).await;
    s.add_tasks(
        "j",
        (0..25).map(|i| task(&format!("t{i:02}"), "true")).collect(),
    )
    .await;
    let mut url = "/jobs/j/tasks?api-version=2025-06-01&maxresults=10".to_string();
    let mut seen = Vec::new();
    loop {
        let (status, page) = s.get(&url).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["value"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_string()),
        );
        match page["odata.nextLink"].as_str() {
            Some(link) => {
                assert!(
                    link.starts_with(&s.base) && link.contains("api-version=2025-06-01"),
                    "{link}"
                );
                url = link.trim_start_matches(&s.base).to_string();
            }
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_keeps_what_it_does_not_name_and_put_resets_it() {
    let s = TestServer::start(Rt::Local).await;
    assert_eq!(
        s.post("/pools", &json!({"id": "p", "vmSize": "standard_a1"}))
            .await
            .0,
        201
    );
    job(
        &s,
        "j",
        "p",
        json!({"priority": 7, "constraints": {"maxWallClockTime": "PT1H", "maxTaskRetryCount": 2}}),
    )
    .await;
    let resp = s
        .http
        .patch(format!("{}/jobs/j", s.base))
        .json(&json!({"constraints": {"maxTaskRetryCount": 3}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let j = s.get("/jobs/j").await.1;
    assert_eq!(
        j["constraints"],
        json!({"maxWallClockTime": "PT1H", "maxTaskRetryCount": 3})
    );
    assert_eq!(j["priority"], 7);
    let resp = s
        .http
        .request(reqwest::Method::PUT, format!("{}/jobs/j", s.base))
        .json(&json!({"poolInfo": {"poolId": "p"}, "priority": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let j = s.get("/jobs/j").await.1;
    assert_eq!(
        j["constraints"],
        json!({"maxWallClockTime": "P10675199DT2H48M5.4775807S", "maxTaskRetryCount": 0})
    );
    assert_eq!(j["priority"], 1);
}

/// Reactivates task `j/t`, which ended as `failed` says, and waits for its next attempt to
/// succeed.
async fn reactivate_and_wait(s: &TestServer, failed: &Value) {
    let (status, body) = s.post("/jobs/j/tasks/t/reactivate", &json!({})).await;
    assert_eq!(status, 204, "{body}");
    wait_for("the reactivated task to end", || async {
        let t = s.task("j", "t").await;
        (t["state"] == "completed"
            && t["executionInfo"]["startTime"] != failed["executionInfo"]["startTime"])
            .then_some(())
    })
    .await;
    let t = s.task("j", "t").await;
    assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
}

/// A failed task's directory is due to go at the end of its retentionTime; reactivated, it runs
/// in that directory again, which stays until the retention counted from its next end runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reactivated_task_keeps_its_directory_while_it_runs() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    // Fails the first time; the second time it outlives the first end's retention (2 s), then
    // writes a file in its working directory.
    let command = "test -f first || { touch first; exit 1; }; sleep 6; echo done > out";
    let task = json!({"id": "t", "commandLine": command, "constraints": {"retentionTime": "PT2S"}});
    s.add_tasks("j", vec![task]).await;
    let failed = s.wait_task("j", "t", "completed").await;
    assert_eq!(failed["executionInfo"]["exitCode"], 1, "{failed}");
    reactivate_and_wait(&s, &failed).await;
    assert_eq!(
        s.file("/jobs/j/tasks/t/files/wd/out").await.as_deref(),
        Some("done\n")
    );
}

/// A task reactivated while its expired directory is being removed starts its next attempt
/// only once the removal is over, in a directory of its own: nothing of the new attempt goes
/// with the old one's files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_reactivated_during_its_directorys_removal_waits_for_it() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    // The first attempt leaves 20,000 directories behind (their removal takes a while) and
    // fails; the next one prints and writes into its working directory.
    let command = r#"test -e "$AZ_BATCH_NODE_SHARED_DIR/first" && { echo second; echo done > out; exit 0; }
touch "$AZ_BATCH_NODE_SHARED_DIR/first"; mkdir many && cd many && seq 20000 | xargs mkdir; exit 1"#;
    let task = json!({"id": "t", "commandLine": format!("sh -c '{command}'"),
                      "constraints": {"retentionTime": "PT1S"}});
    s.add_tasks("j", vec![task]).await;
    let failed = s.wait_task("j", "t", "completed").await;
    assert_eq!(failed["executionInfo"]["exitCode"], 1, "{failed}");
    let node = failed["nodeInfo"]["nodeId"].as_str().unwrap();
    let many = s.data_dir.path().join("nodes").join(node);
    let many = many.join("workitems/j/job-1/t/wd/many");
    let links = |p: &std::path::Path| -> Option<u64> {
        Some(std::os::unix::fs::MetadataExt::nlink(&p.metadata().ok()?))
    };
    assert_eq!(
        links(&many),
        Some(20_002),
        "the first attempt's directories"
    );
    // Once the removal has begun (the retention ran out), the task is reactivated.
    wait_for("the expired directory's removal to begin", || async {
        links(&many).is_none_or(|n| n < 20_002).then_some(())
    })
    .await;
    reactivate_and_wait(&s, &failed).await;
    let stdout = s.file("/jobs/j/tasks/t/files/stdout.txt").await;
    assert_eq!(stdout.as_deref(), Some("second\n"));
    let out = s.file("/jobs/j/tasks/t/files/wd/out").await;
    assert_eq!(out.as_deref(), Some("done\n"));
    assert!(!many.exists(), "the first attempt's files are gone");
}
