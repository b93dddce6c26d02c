//! Job preparation and release tasks, as Azure Batch runs them: the preparation task once per
//! node before the job's first task there (again after a reboot), its working directory handed to
//! the job's tasks, a node that failed it kept from the job's tasks; the release task on each node
//! that ran the preparation task once the job ends; the status list route; every kind of task
//! run as an admin auto-user.

mod common;

use common::blobs::{container, put_blob};
use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// A server whose tasks may fetch from this host (Azurite).
async fn server() -> TestServer {
    TestServer::start_allowing_local_urls(Rt::Local, &[]).await
}

/// A pool of `nodes` nodes with 2 slots each, once they are idle; their ids.
async fn pool(s: &TestServer, nodes: usize) -> Vec<String> {
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": nodes, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", nodes, "idle")
        .await
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

async fn status(s: &TestServer, job: &str) -> Vec<Value> {
    let (code, body) = s
        .get(&format!("/jobs/{job}/jobpreparationandreleasetaskstatus"))
        .await;
    assert_eq!(code, 200, "{body}");
    body["value"].as_array().unwrap().clone()
}

fn tasks(n: usize, command: &str) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"id": format!("t{i}"), "commandLine": command}))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_preparation_task_runs_once_per_node_before_its_tasks() {
    let s = server().await;
    let nodes = pool(&s, 2).await;
    let (name, url) = container("rl").await;
    put_blob(&format!("{name}/tool.txt"), "tool v1\n").await;
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "jobPreparationTask": {
        "id": "setup",
        "commandLine": "echo $AZ_BATCH_TASK_ID >> $AZ_BATCH_NODE_SHARED_DIR/prepared.txt; echo $MODE > ready.txt; cat tool.txt >> ready.txt",
        "environmentSettings": [{"name": "MODE", "value": "fast"}],
        "resourceFiles": [{"storageContainerUrl": url}],
        "rerunOnNodeRebootAfterSuccess": true}});
    let (code, body) = s.post("/jobs", &job).await;
    assert_eq!(code, 201, "{body}");
    let (_, got) = s.get("/jobs/j").await;
    assert_eq!(got["jobPreparationTask"]["id"], "setup", "{got}");
    assert_eq!(got["jobPreparationTask"]["waitForSuccess"], true, "{got}");

    s.add_tasks(
        "j",
        tasks(8, "cat $AZ_BATCH_JOB_PREP_WORKING_DIR/ready.txt"),
    )
    .await;
    let done = s.wait_all_completed("j", 8).await;
    for t in &done {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        let out = s
            .file(&format!(
                "/jobs/j/tasks/{}/files/stdout.txt",
                t["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(out.as_deref(), Some("fast\ntool v1\n"), "{t}");
    }
    let entries = status(&s, "j").await;
    for e in &entries {
        let node = e["nodeId"].as_str().unwrap();
        let info = &e["jobPreparationTaskExecutionInfo"];
        assert_eq!(info["state"], "completed", "{e}");
        assert_eq!(info["result"], "success", "{e}");
        assert_eq!(info["exitCode"], 0, "{e}");
        assert!(
            info["taskRootDirectory"]
                .as_str()
                .unwrap()
                .ends_with("/jobprep/j/setup"),
            "{e}"
        );
        // Once on each node, whatever number of tasks it ran.
        assert_eq!(
            s.shared_file("p", node, "prepared.txt").await,
            "setup\n",
            "{e}"
        );
        let url = info["taskRootDirectoryUrl"].as_str().unwrap();
        let path = &url[url.find("/pools/").unwrap()..];
        let out = s.file(&format!("{path}/stdout.txt")).await;
        assert!(
            out.is_some(),
            "the preparation task's files are served: {url}"
        );
    }
    let used: std::collections::BTreeSet<&str> = done
        .iter()
        .map(|t| t["nodeInfo"]["nodeId"].as_str().unwrap())
        .collect();
    assert_eq!(
        entries.len(),
        used.len(),
        "one entry per node that ran the job's tasks"
    );

    // A task may not take the preparation task's id.
    let (code, body) = s
        .post(
            "/jobs/j/tasks",
            &json!({"id": "Setup", "commandLine": "true"}),
        )
        .await;
    assert_eq!(
        (code, body["code"].as_str()),
        (
            reqwest::StatusCode::CONFLICT,
            Some("TaskIdSameAsJobPreparationTask")
        )
    );

    // After a reboot the preparation task runs again before the job's next task on that node.
    let node = &nodes[0];
    let (code, _) = s
        .post(&format!("/pools/p/nodes/{node}/reboot"), &json!({}))
        .await;
    assert_eq!(code, 202);
    s.wait_nodes("p", 2, "idle").await;
    let others: Vec<Value> = (0..8)
        .map(|i| json!({"id": format!("after{i}"), "commandLine": "cat $AZ_BATCH_JOB_PREP_WORKING_DIR/ready.txt"}))
        .collect();
    s.add_tasks("j", others).await;
    let all = s.wait_all_completed("j", 16).await;
    let ran_there = all
        .iter()
        .filter(|t| t["id"].as_str().unwrap().starts_with("after"))
        .any(|t| t["nodeInfo"]["nodeId"] == json!(node));
    assert!(ran_there, "spread placement gives both nodes tasks");
    let before = if used.contains(node.as_str()) {
        "setup\n"
    } else {
        ""
    };
    assert_eq!(
        s.shared_file("p", node, "prepared.txt").await,
        format!("{before}setup\n"),
        "prepared again after the reboot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_preparation_keeps_the_job_s_tasks_off_that_node() {
    let s = server().await;
    let nodes = pool(&s, 2).await;
    let (bad, good) = (&nodes[0], &nodes[1]);
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "jobPreparationTask": {
        "commandLine": format!("test \"$AZ_BATCH_NODE_ID\" != {bad}"),
        "constraints": {"maxTaskRetryCount": 1, "maxWallClockTime": "PT1M"}}});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    s.add_tasks("j", tasks(8, "echo ran")).await;
    let done = s.wait_all_completed("j", 8).await;
    for t in &done {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        assert_eq!(
            t["nodeInfo"]["nodeId"],
            json!(good),
            "only the prepared node: {t}"
        );
    }
    let entries = status(&s, "j").await;
    let on = |node: &str| {
        entries
            .iter()
            .find(|e| e["nodeId"] == node)
            .map(|e| e["jobPreparationTaskExecutionInfo"].clone())
    };
    if let Some(info) = on(bad) {
        assert_eq!(info["result"], "failure", "{info}");
        assert_eq!(info["retryCount"], 1, "{info}");
        assert_eq!(info["exitCode"], 1, "{info}");
        assert_eq!(info["failureInfo"]["code"], "FailureExitCode", "{info}");
    }
    assert_eq!(on(good).unwrap()["result"], "success");

    // waitForSuccess false: the job's tasks run whatever the preparation task does.
    let job = json!({"id": "nowait", "poolInfo": {"poolId": "p"},
        "jobPreparationTask": {"commandLine": "exit 3", "waitForSuccess": false}});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    s.add_tasks("nowait", tasks(4, "echo ran")).await;
    for t in s.wait_all_completed("nowait", 4).await {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_tasks_run_where_preparation_ran_once_the_job_ends() {
    let s = server().await;
    let nodes = pool(&s, 1).await;
    let node = &nodes[0];
    let (name, url) = container("rl").await;
    put_blob(&format!("{name}/bye.txt"), "bye\n").await;
    let job = |id: &str, release: Value| {
        json!({"id": id, "poolInfo": {"poolId": "p"},
            "jobPreparationTask": {"commandLine": "true"}, "jobReleaseTask": release})
    };
    let release = json!({"id": "cleanup",
        "commandLine": "echo $AZ_BATCH_JOB_ID $GREETING $(cat bye.txt) >> $AZ_BATCH_NODE_SHARED_DIR/released.txt",
        "environmentSettings": [{"name": "GREETING", "value": "released"}],
        "resourceFiles": [{"storageContainerUrl": url}],
        "maxWallClockTime": "PT1M"});
    assert_eq!(s.post("/jobs", &job("j", release)).await.0, 201);
    s.add_tasks("j", tasks(2, "true")).await;
    s.wait_all_completed("j", 2).await;
    assert_eq!(s.post("/jobs/j/terminate", &json!({})).await.0, 202);
    // The job completes only once its release tasks have run, as on Azure: until then it is
    // terminating, with no endTime.
    let done = wait_for("the job to complete", || async {
        let (_, j) = s.get("/jobs/j").await;
        (j["state"] == "completed").then_some(j)
    })
    .await;
    assert_eq!(done["previousState"], "terminating", "{done}");
    assert!(done["executionInfo"]["endTime"].is_string(), "{done}");
    let entry = status(&s, "j").await.into_iter().next().unwrap();
    assert_eq!(
        entry["jobReleaseTaskExecutionInfo"]["state"], "completed",
        "{entry}"
    );
    assert_eq!(
        entry["jobReleaseTaskExecutionInfo"]["result"], "success",
        "{entry}"
    );
    assert_eq!(
        s.shared_file("p", node, "released.txt").await,
        "j released bye\n"
    );
    let (_, got) = s.get("/jobs/j").await;
    assert_eq!(got["state"], "completed");
    assert_eq!(got["jobReleaseTask"]["id"], "cleanup", "{got}");

    // Past its maxWallClockTime a release task is killed and fails.
    let slow = json!({"commandLine": "sleep 30", "maxWallClockTime": "PT1S"});
    assert_eq!(s.post("/jobs", &job("slow", slow)).await.0, 201);
    s.add_tasks("slow", tasks(1, "true")).await;
    s.wait_all_completed("slow", 1).await;
    assert_eq!(s.post("/jobs/slow/terminate", &json!({})).await.0, 202);
    let (_, ending) = s.get("/jobs/slow").await;
    assert_eq!(ending["state"], "terminating", "{ending}");
    assert!(ending["executionInfo"].get("endTime").is_none(), "{ending}");
    assert_eq!(ending["executionInfo"]["terminateReason"], "UserTerminate");
    let (code, body) = s.post("/jobs/slow/terminate", &json!({})).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["code"], "JobBeingTerminated", "{body}");
    let entry = wait_for("the slow release task to end", || async {
        let e = status(&s, "slow").await.into_iter().next()?;
        (e["jobReleaseTaskExecutionInfo"]["state"] == "completed").then_some(e)
    })
    .await;
    let info = &entry["jobReleaseTaskExecutionInfo"];
    assert_eq!(info["result"], "failure", "{entry}");
    assert_eq!(
        info["failureInfo"]["code"], "MaxWallClockTimeExceeded",
        "{entry}"
    );
    wait_for("the slow job to complete", || async {
        (s.get("/jobs/slow").await.1["state"] == "completed").then_some(())
    })
    .await;

    // A deleted job runs its release tasks before it goes.
    let noted = json!({"commandLine": "echo deleted >> $AZ_BATCH_NODE_SHARED_DIR/released.txt"});
    assert_eq!(s.post("/jobs", &job("gone", noted)).await.0, 201);
    s.add_tasks("gone", tasks(1, "true")).await;
    s.wait_all_completed("gone", 1).await;
    assert_eq!(s.delete("/jobs/gone").await.0, 202);
    wait_for("the job to be deleted", || async {
        (s.get("/jobs/gone").await.0 == 404).then_some(())
    })
    .await;
    assert_eq!(
        s.shared_file("p", node, "released.txt").await,
        "j released bye\ndeleted\n"
    );

    // A release task needs a preparation task.
    let bad = json!({"id": "bad", "poolInfo": {"poolId": "p"}, "jobReleaseTask": {"commandLine": "true"}});
    let (code, body) = s.post("/jobs", &bad).await;
    assert_eq!(code, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_manager_task_runs_first_alone_and_ends_its_job() {
    let s = server().await;
    let nodes = pool(&s, 1).await;
    let node = &nodes[0];
    let (code, body) = s
        .post(
            "/jobs/nothing/tasks",
            &json!({"id": "x", "commandLine": "true"}),
        )
        .await;
    assert_eq!(code, 404, "{body}");
    // It runs first, alone on its node (runExclusive: both slots), and its completion ends the
    // job (killJobOnCompletion), its other tasks with it.
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "jobManagerTask": {
        "id": "manager", "displayName": "the manager",
        "commandLine": "echo $ROLE > $AZ_BATCH_NODE_SHARED_DIR/manager.txt; while [ ! -e $AZ_BATCH_NODE_SHARED_DIR/go ]; do sleep 0.05; done",
        "environmentSettings": [{"name": "ROLE", "value": "manager"}],
        "constraints": {"maxTaskRetryCount": 0}, "requiredSlots": 1, "allowLowPriorityNode": false}});
    let (code, body) = s.post("/jobs", &job).await;
    assert_eq!(code, 201, "{body}");
    let (_, got) = s.get("/jobs/j").await;
    assert_eq!(got["jobManagerTask"]["killJobOnCompletion"], true, "{got}");
    assert_eq!(got["jobManagerTask"]["runExclusive"], true, "{got}");
    let manager = s.wait_task("j", "manager", "running").await;
    assert_eq!(
        manager["requiredSlots"], 2,
        "runExclusive takes the whole node: {manager}"
    );
    assert_eq!(manager["displayName"], "the manager");
    s.add_tasks("j", tasks(2, "sleep 30")).await;
    let (_, n) = s.get(&format!("/pools/p/nodes/{node}")).await;
    assert_eq!(n["runningTaskSlotsCount"], 2, "{n}");
    assert_eq!(
        s.task("j", "t0").await["state"],
        "active",
        "nothing runs beside it"
    );
    assert_eq!(s.shared_file("p", node, "manager.txt").await, "manager\n");
    std::fs::write(
        s.data_dir
            .path()
            .join("nodes")
            .join(node)
            .join("shared")
            .join("go"),
        "",
    )
    .unwrap();
    let ended = wait_for("the job to end with its manager", || async {
        let (_, j) = s.get("/jobs/j").await;
        (j["state"] == "completed").then_some(j)
    })
    .await;
    assert_eq!(
        ended["executionInfo"]["terminateReason"], "JMComplete",
        "{ended}"
    );
    // Its other tasks never ran: a completed job starts none (their state stays as it was, as
    // for any terminated job).
    for t in ["t0", "t1"] {
        let task = s.task("j", t).await;
        assert!(task.get("nodeInfo").is_none(), "{t} never ran: {task}");
    }

    // Without runExclusive and killJobOnCompletion it is a first task like any other.
    let job = json!({"id": "k", "poolInfo": {"poolId": "p"}, "jobManagerTask": {
        "id": "m", "commandLine": "true", "runExclusive": false, "killJobOnCompletion": false}});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    let m = s.wait_task("k", "m", "completed").await;
    assert_eq!(m["requiredSlots"], 1, "{m}");
    let (_, k) = s.get("/jobs/k").await;
    assert_eq!(k["state"], "active", "{k}");
    let (code, body) = s
        .post("/jobs/k/tasks", &json!({"id": "m", "commandLine": "true"}))
        .await;
    assert_eq!(code, 409, "{body}");
}

/// Azure's admin auto-user, as Microsoft's tutorials give to a start task that installs
/// software: each kind of task that asks for one runs as root and shows the identity it asked
/// for. A server that is not root refuses it on its local nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_that_ask_for_an_admin_auto_user_run_as_root() {
    let s = server().await;
    let admin = |scope: &str| json!({"autoUser": {"scope": scope, "elevationLevel": "admin"}});
    let record = |name: &str| format!("id -u > $AZ_BATCH_NODE_SHARED_DIR/{name}.uid");
    let start = json!({"commandLine": record("start"), "userIdentity": admin("pool")});
    let body =
        json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "startTask": start});
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let (code, answer) = s.post("/pools", &body).await;
        assert_eq!(code, 400, "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("not root"),
            "{answer}"
        );
        return;
    }
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let node = s.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, pool) = s.get("/pools/p").await;
    assert_eq!(pool["startTask"]["userIdentity"], admin("pool"), "{pool}");

    let in_azure_s_case = json!({"autoUser": {"scope": "Task", "elevationLevel": "Admin"}});
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"},
        "jobManagerTask": {"id": "m", "commandLine": record("manager"), "userIdentity": admin("task"),
            "killJobOnCompletion": false},
        "jobPreparationTask": {"commandLine": record("prep"), "userIdentity": admin("pool")},
        "jobReleaseTask": {"commandLine": record("release"), "userIdentity": admin("pool")}});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    let task = json!({"id": "t", "commandLine": record("task"), "userIdentity": in_azure_s_case});
    assert_eq!(s.post("/jobs/j/tasks", &task).await.0, 201);
    s.wait_all_completed("j", 2).await;
    assert_eq!(s.task("j", "t").await["userIdentity"], admin("task"));
    let (_, got) = s.get("/jobs/j").await;
    for (kind, scope) in [
        ("jobManagerTask", "task"),
        ("jobPreparationTask", "pool"),
        ("jobReleaseTask", "pool"),
    ] {
        assert_eq!(got[kind]["userIdentity"], admin(scope), "{kind}: {got}");
    }
    assert_eq!(s.post("/jobs/j/terminate", &json!({})).await.0, 202);
    wait_for("the job to complete", || async {
        (s.get("/jobs/j").await.1["state"] == "completed").then_some(())
    })
    .await;
    for name in ["start", "manager", "prep", "task", "release"] {
        let uid = s.shared_file("p", &node, &format!("{name}.uid")).await;
        assert_eq!(uid, "0\n", "the {name} task ran as uid {uid}");
    }
}

/// A preparation task's directory (constraints.retentionTime) and a release task's
/// (retentionTime) go from each node once their retention time has passed since they completed
/// there; without one, they stay (Azure's default is 7 days).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preparation_and_release_directories_go_after_their_retention_time() {
    let s = server().await;
    let node = pool(&s, 1).await.remove(0);
    let job = |id: &str, retention: Option<&str>| {
        let mut prep = json!({"commandLine": "echo prepared > kept.txt"});
        let mut release = json!({"commandLine": "echo released > kept.txt"});
        if let Some(r) = retention {
            prep["constraints"] = json!({"retentionTime": r});
            release["retentionTime"] = json!(r);
        }
        json!({"id": id, "poolInfo": {"poolId": "p"}, "jobPreparationTask": prep, "jobReleaseTask": release})
    };
    for (id, retention) in [("brief", Some("PT1S")), ("kept", None)] {
        assert_eq!(s.post("/jobs", &job(id, retention)).await.0, 201);
        s.add_tasks(id, tasks(1, "true")).await;
        s.wait_all_completed(id, 1).await;
    }
    let (_, got) = s.get("/jobs/brief").await;
    assert_eq!(
        got["jobPreparationTask"]["constraints"]["retentionTime"], "PT1S",
        "{got}"
    );
    assert_eq!(got["jobReleaseTask"]["retentionTime"], "PT1S", "{got}");
    let dir = |job: &str, task: &str| format!("jobprep/{job}/{task}/wd/kept.txt");
    wait_for("the brief preparation task's directory to go", || async {
        (!s.exists_on_node(&node, &dir("brief", "jobpreparation"))
            .await)
            .then_some(())
    })
    .await;
    assert!(
        s.exists_on_node(&node, &dir("kept", "jobpreparation"))
            .await
    );

    for id in ["brief", "kept"] {
        assert_eq!(
            s.post(&format!("/jobs/{id}/terminate"), &json!({})).await.0,
            202
        );
        wait_for("the job to complete", || async {
            (s.get(&format!("/jobs/{id}")).await.1["state"] == "completed").then_some(())
        })
        .await;
    }
    let released = status(&s, "brief").await.remove(0);
    assert_eq!(
        released["jobReleaseTaskExecutionInfo"]["state"], "completed",
        "{released}"
    );
    wait_for("the brief release task's directory to go", || async {
        (!s.exists_on_node(&node, &dir("brief", "jobrelease")).await).then_some(())
    })
    .await;
    assert_eq!(
        s.on_node(&node, &dir("kept", "jobrelease"))
            .await
            .as_deref(),
        Some("released\n")
    );
    assert!(
        s.exists_on_node(&node, &dir("kept", "jobpreparation"))
            .await
    );
}
