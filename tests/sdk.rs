//! The official Azure Batch SDKs, from PyPI, drive the running server along a whole script's
//! flow (tests/sdk/conformance.py): 15.1.0 on the Docker runtime, 14.2.0 on the local one.

#[macro_use]
mod common;

use common::{Rt, TestServer};

/// A client program running `tests/sdk/<script>` against `s`, signing as its account.
fn client(s: &TestServer, program: &str, script: &str) -> tokio::process::Command {
    let (account, key) = s
        .http
        .credentials
        .lock()
        .unwrap()
        .clone()
        .expect("credentials");
    let mut command = tokio::process::Command::new(program);
    command
        .arg(format!("{}/tests/sdk/{script}", env!("CARGO_MANIFEST_DIR")))
        .env("BATCHPOOL_URL", &s.base)
        .env("BATCHPOOL_ACCOUNT", account)
        .env("BATCHPOOL_KEY", key);
    command
}

/// The client `who` exited 0 and said `passed`; else what it printed, and the server's log.
fn assert_passed(who: &str, out: &std::process::Output, passed: &str, s: &TestServer) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(passed),
        "{who}:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log_tail()
    );
}

/// Runs `tests/sdk/<script>` with the SDK of `sdk_env` against a fresh server; its stdout must
/// say `passed`.
async fn sdk_script(
    s: TestServer,
    sdk_env: &str,
    script: &str,
    env: &[(&str, String)],
    passed: &str,
) {
    let python = std::env::var(sdk_env)
        .unwrap_or_else(|_| panic!("{sdk_env} is not set: run the tests through scripts/test.sh"));
    let out = client(&s, &python, script)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .await
        .expect("running the SDK script");
    assert_passed(&format!("the SDK flow of {sdk_env}"), &out, passed, &s);
}

async fn conformance(sdk_env: &str, rt: Rt) {
    // A container in Azurite, for a node's service logs.
    let (logs, url) = common::blobs::container("rwl").await;
    let env = [
        ("BATCHPOOL_BULK", "1000".to_string()),
        ("BATCHPOOL_LOGS_URL", url),
    ];
    let s = TestServer::start_allowing_local_urls(rt, &[]).await;
    sdk_script(
        s,
        sdk_env,
        "conformance.py",
        &env,
        "conformance flow passed",
    )
    .await;
    let uploaded = storage_names(&logs).await;
    assert!(
        uploaded.iter().any(|n| n.ends_with("/batchpool-agent.log")),
        "{uploaded:?}"
    );
}

/// The blobs in a container of Azurite.
async fn storage_names(container: &str) -> Vec<String> {
    let c = batchpool::storage::Container::with_key(&common::blobs::connection_string(), container)
        .unwrap();
    c.list(None)
        .await
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// Seed 004's workflow: inputs and app in blob storage, resource files in, output files out,
/// through azure-batch 15.1.0 and azure-storage-blob against Azurite, on Docker nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_moves_its_data_through_the_sdk_and_blob_storage() {
    let azurite = std::env::var("BATCHPOOL_TEST_AZURITE")
        .expect("BATCHPOOL_TEST_AZURITE: run the tests through scripts/test.sh");
    let env = [("AZURITE_BLOB", azurite)];
    // Azurite listens on this host.
    let s = TestServer::start_allowing_local_urls(Rt::Docker, &[]).await;
    sdk_script(
        s,
        "BATCHPOOL_SDK15_PYTHON",
        "seed004.py",
        &env,
        "seed 004 flow passed",
    )
    .await;
}

/// A budget used up with `stopGrowth` (docs/metering.md, "Budgets"): the SDK's resize ends
/// steady at the pool's size with a `BudgetExceeded` resize error (tests/sdk/budget.py).
async fn a_used_up_budget(sdk_env: &str, rt: Rt) {
    let s = TestServer::start(rt).await;
    let prices =
        serde_json::json!({"account": "batchpool", "currency": "EUR", "computeHour": 3600});
    let budget =
        serde_json::json!({"account": "batchpool", "monthlyAmount": 1, "atLimit": "stopGrowth"});
    for (route, body) in [("prices", prices), ("budgets", budget)] {
        let (status, answer) = s
            .operator(reqwest::Method::PUT, route, Some(&body), None)
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    s.pool_of_one_idle_node("held").await;
    common::wait_for("the budget to be used up", || async {
        let (_, listed) = s
            .operator(reqwest::Method::GET, "budgets", None, None)
            .await;
        (listed["value"][0]["state"] == "exceeded").then_some(())
    })
    .await;
    let env = [("BATCHPOOL_POOL", "held".to_string())];
    sdk_script(s, sdk_env, "budget.py", &env, "budget flow passed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_budget_stops_growth_as_sdk_15_sees_it() {
    a_used_up_budget("BATCHPOOL_SDK15_PYTHON", Rt::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_budget_stops_growth_as_sdk_14_sees_it() {
    a_used_up_budget("BATCHPOOL_SDK14_PYTHON", Rt::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_batch_15_runs_unchanged() {
    conformance("BATCHPOOL_SDK15_PYTHON", Rt::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_batch_14_runs_unchanged() {
    conformance("BATCHPOOL_SDK14_PYTHON", Rt::Local).await;
}

/// `az batch` (azure-cli from PyPI) with --account-name/--account-key/--account-endpoint, on Docker
/// nodes (its Ubuntu image runs the Debian image).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn az_batch_core_commands_work() {
    let az = std::env::var("BATCHPOOL_AZ")
        .expect("BATCHPOOL_AZ is not set: run the tests through scripts/test.sh");
    let s = TestServer::start(Rt::Docker).await;
    let (account, key) = s
        .http
        .credentials
        .lock()
        .unwrap()
        .clone()
        .expect("credentials");
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&az)
            .args(["batch"])
            .args(args)
            .args([
                "--account-name",
                &account,
                "--account-key",
                &key,
                "--account-endpoint",
                &s.base,
            ])
            .env("AZURE_CONFIG_DIR", home.path())
            .env("AZURE_CORE_COLLECT_TELEMETRY", "false")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "az batch {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    run(&[
        "pool",
        "create",
        "--id",
        "azpool",
        "--vm-size",
        "standard_a1",
        "--target-dedicated-nodes",
        "1",
        "--image",
        "canonical:ubuntuserver:18.04-lts",
        "--node-agent-sku-id",
        "batch.node.ubuntu 18.04",
    ]);
    s.wait_nodes("azpool", 1, "idle").await;
    assert_eq!(
        run(&[
            "pool",
            "show",
            "--pool-id",
            "azpool",
            "--query",
            "allocationState",
            "-o",
            "tsv"
        ]),
        "steady"
    );
    assert_eq!(
        run(&[
            "node",
            "list",
            "--pool-id",
            "azpool",
            "--query",
            "[].state",
            "-o",
            "tsv"
        ]),
        "idle"
    );
    // An operator drains the node and lets it take tasks again.
    let node = run(&[
        "node",
        "list",
        "--pool-id",
        "azpool",
        "--query",
        "[0].id",
        "-o",
        "tsv",
    ]);
    let drain = [
        "node",
        "scheduling",
        "disable",
        "--pool-id",
        "azpool",
        "--node-id",
        &node,
    ];
    run(&drain);
    let state = [
        "node",
        "show",
        "--pool-id",
        "azpool",
        "--node-id",
        &node,
        "--query",
        "schedulingState",
        "-o",
        "tsv",
    ];
    assert_eq!(run(&state), "disabled");
    run(&[
        "node",
        "scheduling",
        "enable",
        "--pool-id",
        "azpool",
        "--node-id",
        &node,
    ]);
    assert_eq!(run(&state), "enabled");
    // az has no reimage (the SDK tests reimage); it reboots.
    run(&["node", "reboot", "--pool-id", "azpool", "--node-id", &node]);
    s.wait_nodes("azpool", 1, "idle").await;
    run(&["job", "create", "--id", "azjob", "--pool-id", "azpool"]);
    run(&[
        "task",
        "create",
        "--job-id",
        "azjob",
        "--task-id",
        "t1",
        "--command-line",
        "/bin/sh -c 'echo hi from az'",
    ]);
    s.wait_task("azjob", "t1", "completed").await;
    assert_eq!(
        run(&[
            "task",
            "show",
            "--job-id",
            "azjob",
            "--task-id",
            "t1",
            "--query",
            "executionInfo.exitCode",
            "-o",
            "tsv"
        ]),
        "0"
    );
    let file = home.path().join("out.txt");
    run(&[
        "task",
        "file",
        "download",
        "--job-id",
        "azjob",
        "--task-id",
        "t1",
        "--file-path",
        "stdout.txt",
        "--destination",
        file.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi from az\n");
    assert_eq!(
        run(&[
            "task",
            "list",
            "--job-id",
            "azjob",
            "--filter",
            "state eq 'completed'",
            "--query",
            "[].id",
            "-o",
            "tsv"
        ]),
        "t1"
    );
    let metrics = [
        "pool",
        "usage-metrics",
        "list",
        "--query",
        "[?poolId=='azpool'].poolId",
        "-o",
        "tsv",
    ];
    assert_eq!(run(&metrics), "azpool");
    assert_eq!(
        run(&[
            "job",
            "task-counts",
            "show",
            "--job-id",
            "azjob",
            "--query",
            "taskCounts.succeeded",
            "-o",
            "tsv"
        ]),
        "1"
    );
    // A job schedule that recurs every 2 s makes its jobs, each with its job manager task.
    let after = chrono::Utc::now() + chrono::Duration::seconds(3);
    run(&[
        "job-schedule",
        "create",
        "--id",
        "azsched",
        "--pool-id",
        "azpool",
        "--recurrence-interval",
        "PT2S",
        "--do-not-run-after",
        &after.to_rfc3339(),
        "--job-manager-task-id",
        "jm",
        "--job-manager-task-command-line",
        "/bin/sh -c 'echo scheduled'",
    ]);
    let list = ["job-schedule", "list", "--query", "[].id", "-o", "tsv"];
    assert_eq!(run(&list), "azsched");
    common::wait_for("the schedule's first job", || async {
        (s.get("/jobs/azsched:job-1").await.0 == 200).then_some(())
    })
    .await;
    s.wait_task("azsched:job-1", "jm", "completed").await;
    let show = ["job-schedule", "show", "--job-schedule-id", "azsched"];
    let state = common::wait_for("the schedule to complete", || async {
        let v: serde_json::Value = serde_json::from_str(&run(&show)).unwrap();
        (v["state"] == "completed").then_some(v)
    })
    .await;
    assert!(
        state["executionInfo"]["recentJob"]["id"].is_string(),
        "{state}"
    );
    run(&[
        "job-schedule",
        "delete",
        "--job-schedule-id",
        "azsched",
        "--yes",
    ]);
    assert_eq!(run(&list), "");
    run(&[
        "pool",
        "resize",
        "--pool-id",
        "azpool",
        "--target-dedicated-nodes",
        "0",
    ]);
    s.wait_nodes("azpool", 0, "idle").await;
    run(&["job", "delete", "--job-id", "azjob", "--yes"]);
    run(&["pool", "delete", "--pool-id", "azpool", "--yes"]);
    common::wait_for("the pool to go", || async {
        (s.get("/pools/azpool").await.0 == 404).then_some(())
    })
    .await;
    assert_eq!(run(&["pool", "list", "--query", "[].id", "-o", "tsv"]), "");
}

/// Microsoft's Python quickstart (tests/sdk/quickstart.py) through every older SDK release of
/// the matrix (BATCHPOOL_SDK_MATRIX, each in a virtualenv of its own under BATCHPOOL_SDK_DIR),
/// each in its own api-version, all at once against one server, on Docker: the quickstart's
/// Ubuntu image reference gets the Debian node image, where its commands find `/bin/bash`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_sdks_run_microsoft_s_python_quickstart() {
    let matrix = std::env::var("BATCHPOOL_SDK_MATRIX")
        .expect("BATCHPOOL_SDK_MATRIX is not set: run the tests through scripts/test.sh");
    let dir = std::env::var("BATCHPOOL_SDK_DIR").expect("BATCHPOOL_SDK_DIR");
    let (name, url) = common::blobs::container("r").await;
    let (base, sas) = url.split_once('?').unwrap();
    let mut inputs = Vec::new();
    for i in 0..3 {
        let file = format!("taskdata{i}.txt");
        common::blobs::put_blob(&format!("{name}/{file}"), &format!("contents of {file}\n")).await;
        inputs.push(format!("{base}/{file}?{sas}"));
    }
    let (outputs, output_url) = common::blobs::container("rwl").await;
    let s = TestServer::start_allowing_local_urls(Rt::Docker, &[]).await;
    let runs = matrix.split_whitespace().map(|version| {
        let python = format!("{dir}/azure-batch-{version}/bin/python");
        let run = client(&s, &python, "quickstart.py")
            .env("BATCHPOOL_INPUTS", inputs.join("\n"))
            .env("BATCHPOOL_OUTPUT", &output_url)
            .output();
        async move { (version, run.await.expect("running the quickstart")) }
    });
    for (version, out) in futures_util::future::join_all(runs).await {
        assert_passed(
            &format!("azure-batch {version}"),
            &out,
            "quickstart passed",
            &s,
        );
        // The core flow's output files, uploaded as each task succeeded.
        let major = version.split('.').next().unwrap();
        for i in 0..12 {
            let blob = format!("{outputs}/{major}/t{i}.txt");
            let got = common::blobs::get_blob(&blob).await.map(|(text, _)| text);
            assert_eq!(got.as_deref(), Some(format!("{i}\n").as_str()), "{blob}");
        }
    }
}

/// The official JavaScript SDK, @azure/batch 10.2.0 from npm (installed by scripts/test-env.sh
/// into BATCHPOOL_JS_DIR), along tests/sdk/flow.js.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_sdk_runs_unchanged() {
    let modules = std::env::var("BATCHPOOL_JS_DIR")
        .expect("BATCHPOOL_JS_DIR is not set: run the tests through scripts/test.sh");
    let (name, url) = common::blobs::container("r").await;
    common::blobs::put_blob(&format!("{name}/in.txt"), "resource\n").await;
    let (base, sas) = url.split_once('?').unwrap();
    let s = TestServer::start_allowing_local_urls(Rt::Docker, &[]).await;
    let out = client(&s, "node", "flow.js")
        .env("NODE_PATH", format!("{modules}/node_modules"))
        .env("BATCHPOOL_INPUT", format!("{base}/in.txt?{sas}"))
        .output()
        .await
        .expect("running node");
    assert_passed("@azure/batch 10.2.0", &out, "javascript flow passed", &s);
}
