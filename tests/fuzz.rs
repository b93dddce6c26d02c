//! Schema-driven fuzzing: schemathesis (from PyPI, installed by scripts/test-env.sh) generates
//! requests from openapi/openapi.yaml, valid and invalid, signed as a real client signs them
//! (tests/fuzz/hooks.py), and sends them to a running server whose pools, jobs, tasks, files,
//! services and BES jobs exist, so paths reach real objects. Whatever it sends, the server
//! answers every request, never with a 5xx, stays up, and does not grow.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Rt, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

/// Fixed, so a failure found in CI is found again by the same command. A longer hunt gives
/// another with `BATCHPOOL_FUZZ_SEED` (docs/development.md).
const SEED: &str = "20261201";
/// Test cases per operation and phase, over every operation of the document: under a minute
/// on 2 cores (47 s with 117 operations). `BATCHPOOL_FUZZ_EXAMPLES` gives more.
const MAX_EXAMPLES: u64 = 30;
/// The whole run of [`MAX_EXAMPLES`] may not take longer than this; more examples, longer in
/// proportion.
const BUDGET: Duration = Duration::from_secs(300);

/// The seed and the examples an operation, and the time they may take.
fn campaign() -> (String, u64, Duration) {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let seed = var("BATCHPOOL_FUZZ_SEED").unwrap_or_else(|| SEED.to_string());
    let examples = var("BATCHPOOL_FUZZ_EXAMPLES").map_or(MAX_EXAMPLES, |n| {
        n.parse()
            .expect("BATCHPOOL_FUZZ_EXAMPLES is a number of examples")
    });
    let budget = BUDGET * u32::try_from(examples.div_ceil(MAX_EXAMPLES)).unwrap_or(u32::MAX);
    (seed, examples, budget)
}
/// How much the server's resident memory may grow over the run.
const RSS_GROWTH_LIMIT_KB: u64 = 100 * 1024;

const NS: &str = "fuzzsubscription";

/// A memory figure of a process, in kB: `VmRSS` (resident now) or `VmHWM` (its peak).
fn memory_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("server status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a memory figure")
}

/// Alive, not a zombie waiting to be reaped.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

async fn bearer(s: &TestServer, method: Method, path: &str, key: &str, body: Value) -> Value {
    let resp = reqwest::Client::new()
        .request(method, format!("{}{path}", s.base))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON");
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

/// Objects for the fuzzer's requests to hit, and copies of them for its DELETEs; returns the
/// ids by path parameter (the shape tests/fuzz/hooks.py reads), the services' keys and the pool
/// service key.
async fn seed(s: &TestServer) -> (Value, Value, String) {
    for pool in ["p", "gone"] {
        let (status, body) = s
            .post(
                "/pools",
                &json!({"id": pool, "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let node = s.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for job in ["j", "gone"] {
        let (status, body) = s
            .post("/jobs", &json!({"id": job, "poolInfo": {"poolId": "p"}}))
            .await;
        assert_eq!(status, 201, "{body}");
        s.add_tasks(
            job,
            ["t", "gone"]
                .iter()
                .map(|id| json!({"id": id, "commandLine": "echo seeded > $AZ_BATCH_NODE_SHARED_DIR/seed"}))
                .collect(),
        )
        .await;
        s.wait_all_completed(job, 2).await;
    }

    for schedule in ["s", "gone"] {
        let body = json!({"id": schedule, "schedule": {"doNotRunUntil": "2099-01-01T00:00:00Z"},
            "jobSpecification": {"poolInfo": {"poolId": "p"}}});
        let (status, answer) = s.post("/jobschedules", &body).await;
        assert_eq!(status, 201, "{answer}");
    }

    let mut service_keys = serde_json::Map::new();
    for svc in ["svc", "gonesvc"] {
        let (status, body) = s
            .request(
                Method::PUT,
                &format!("/subscriptions/{NS}/services/{svc}"),
                Some(&json!({"Title": "echo", "Command": "echo {param:Word}",
                             "GlobalParameters": [{"Name": "Word", "Default": "hi"}],
                             "BillingPlan": "fuzz"})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        service_keys.insert(svc.into(), body["PrimaryKey"].clone());
    }
    let service_key = service_keys["svc"].as_str().unwrap().to_string();
    let jobs = format!("/subscriptions/{NS}/services/svc/jobs?api-version=2.0");
    let bes_job = bearer(s, Method::POST, &jobs, &service_key, json!({})).await;
    let bes_gone = bearer(s, Method::POST, &jobs, &service_key, json!({})).await;

    let pool_service_key: String =
        sqlx::query_scalar("SELECT pool_service_key FROM accounts WHERE name = 'batchpool'")
            .fetch_one(&s.db().await)
            .await
            .unwrap();
    let swagger = format!("{}/subscriptions/{NS}/services/svc/swagger.json", s.base);
    let mut ps_pools = Vec::new();
    for _ in 0..2 {
        let pool = bearer(
            s,
            Method::POST,
            "/poolservice/pools",
            &pool_service_key,
            json!({"NumberOfVMs": 0, "VmSize": "standard_a1", "SwaggerLocation": swagger}),
        )
        .await;
        ps_pools.push(pool["Id"].as_str().unwrap().to_string());
    }

    let ids = json!({
        "batch": {"poolId": "p", "nodeId": node, "jobId": "j", "taskId": "t", "jobScheduleId": "s"},
        "batch_delete": {"poolId": "gone", "jobId": "gone", "taskId": "gone", "jobScheduleId": "gone"},
        "ml": {"subscriptionId": NS, "workspaceId": NS, "serviceId": "svc", "jobId": bes_job},
        // A DELETE of a service takes "gonesvc"; one of a BES job "svc"'s second job.
        "ml_delete": {"subscriptionId": NS, "workspaceId": NS, "serviceId": "gonesvc", "jobId": bes_gone},
        "poolservice": {"poolId": ps_pools[0]},
        "poolservice_delete": {"poolId": ps_pools[1]},
        "task_file": "stdout.txt",
        "node_file": "shared/seed",
    });
    (ids, Value::Object(service_keys), pool_service_key)
}

/// Whatever the fuzzer left behind, a new task on a new pool still runs: nothing it stored
/// stalls the scheduler.
async fn still_runs_tasks(s: &TestServer) {
    let (status, body) = s
        .post(
            "/pools",
            &json!({"id": "after-fuzz", "vmSize": "standard_a1", "targetDedicatedNodes": 1}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = s
        .post(
            "/jobs",
            &json!({"id": "after-fuzz", "poolInfo": {"poolId": "after-fuzz"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    s.add_tasks(
        "after-fuzz",
        vec![json!({"id": "t", "commandLine": "true"})],
    )
    .await;
    let t = s.wait_task("after-fuzz", "t", "completed").await;
    assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_over_the_openapi_document_finds_no_server_error() {
    let st = std::env::var("BATCHPOOL_SCHEMATHESIS")
        .expect("BATCHPOOL_SCHEMATHESIS is not set: run the tests through scripts/test.sh");
    // One node per pool at most: every pool the fuzzer creates starts a real node process.
    let s = TestServer::start_with(
        Rt::Local,
        Some(common::fresh_database().await),
        &["--max-nodes-per-pool", "1"],
    )
    .await;
    let (ids, service_keys, pool_service_key) = seed(&s).await;
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let operator_token = std::fs::read_to_string(s.data_dir.path().join("operator.token")).unwrap();
    let pid = s.pid();
    let rss_before = memory_kb(pid, "VmRSS");

    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("responses.ndjson");
    let manifest = env!("CARGO_MANIFEST_DIR");
    let (seed, examples, budget) = campaign();
    let started = Instant::now();
    let run = tokio::process::Command::new(&st)
        .args(["run", &format!("{manifest}/openapi/openapi.yaml")])
        .args(["--url", &s.base])
        .args(["--checks", "not_a_server_error"])
        .args(["--seed", &seed, "--max-examples", &examples.to_string()])
        .args([
            "--workers",
            "1",
            "--no-shrink",
            "--suppress-health-check",
            "all",
        ])
        .args(["--request-timeout", "30", "--max-failures", "10000"])
        .args(["--warnings", "off"])
        .arg("--report-dir")
        .arg(work.path())
        .current_dir(work.path())
        .env(
            "SCHEMATHESIS_HOOKS",
            format!("{manifest}/tests/fuzz/hooks.py"),
        )
        .env("BATCHPOOL_FUZZ_ACCOUNT", &account)
        .env("BATCHPOOL_FUZZ_KEY", &key)
        .env("BATCHPOOL_FUZZ_SERVICE_KEYS", service_keys.to_string())
        .env("BATCHPOOL_FUZZ_POOL_SERVICE_KEY", &pool_service_key)
        .env("BATCHPOOL_FUZZ_OPERATOR_TOKEN", operator_token)
        .env("BATCHPOOL_FUZZ_IDS", ids.to_string())
        .env("BATCHPOOL_FUZZ_LOG", &log)
        .env("BATCHPOOL_FUZZ_SERVER_PID", pid.to_string())
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(budget, run)
        .await
        .unwrap_or_else(|_| panic!("schemathesis ran over its {budget:?} budget"))
        .expect("running schemathesis");
    let elapsed = started.elapsed();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = report.lines().collect();
    let summary = lines[lines.len().saturating_sub(30)..].join("\n");

    let entries: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a log line"))
        .collect();
    let dropped: Vec<&Value> = entries.iter().filter(|e| e["status"].is_null()).collect();
    let errors: Vec<&Value> = entries
        .iter()
        .filter(|e| e["status"].as_u64().is_some_and(|s| s >= 500))
        .collect();
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for e in &entries {
        *by_status.entry(e["status"].to_string()).or_default() += 1;
    }
    let server_alive = alive(pid);
    let (rss_after, rss_peak) = if server_alive {
        (memory_kb(pid, "VmRSS"), memory_kb(pid, "VmHWM"))
    } else {
        (0, 0)
    };
    eprintln!(
        "fuzz: {} requests in {:.0} s, by status {by_status:?}; RSS {rss_before} kB -> \
         {rss_after} kB (peak {rss_peak} kB)",
        entries.len(),
        elapsed.as_secs_f64(),
    );
    for e in errors.iter().chain(&dropped) {
        eprintln!("  {e}");
    }
    // What the server said about them: panics and errors, with their request ids.
    let server_log =
        std::fs::read_to_string(s.data_dir.path().join("server.log")).unwrap_or_default();
    for line in server_log
        .lines()
        .filter(|l| l.contains("panicked") || l.contains(" ERROR "))
        .take(40)
    {
        eprintln!("  server: {}", &line[..line.len().min(600)]);
    }

    assert!(
        entries.len() > 1000,
        "schemathesis sent only {} requests:\n{report}",
        entries.len(),
    );
    assert!(
        server_alive,
        "the server died during the run; its log:\n{}",
        s.log_tail()
    );
    assert_eq!(s.get("/health").await.0, 200, "the server still answers");
    still_runs_tasks(&s).await;
    assert!(
        dropped.is_empty() && errors.is_empty(),
        "{} requests answered 5xx and {} got no answer (listed above); schemathesis:\n{summary}",
        errors.len(),
        dropped.len()
    );
    assert!(out.status.success(), "schemathesis failed:\n{summary}");
    assert!(
        rss_after <= rss_before + RSS_GROWTH_LIMIT_KB,
        "the server grew from {rss_before} kB to {rss_after} kB"
    );
}
