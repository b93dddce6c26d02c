//! `/metrics`: the operator's view in OpenMetrics text, behind its own token. The families move
//! as the server works: tasks and nodes by state, targets, compute hours, HTTP requests by route,
//! dispatch passes, the leader and the agents; and Prometheus' own parser reads every scrape.

mod common;

use common::{Rt, TestServer};
use serde_json::json;

const TOKEN: &str = "scrape-me";

async fn scrape(s: &TestServer, token: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new().get(format!("{}/metrics", s.base));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    if status == 200 {
        let kind = response.headers()["content-type"].to_str().unwrap();
        assert!(
            kind.starts_with("application/openmetrics-text; version=1.0.0"),
            "{kind}"
        );
    }
    (status, response.text().await.unwrap())
}

/// The families Prometheus' own OpenMetrics parser (its Python client's, in the SDK's
/// virtualenv) reads from `text`, each as `name type samples`; it fails on what it rejects.
fn parsed_by_prometheus(text: &str) -> String {
    use std::io::Write;
    let python = std::env::var("BATCHPOOL_SDK15_PYTHON")
        .expect("BATCHPOOL_SDK15_PYTHON: run the tests through scripts/test.sh");
    let read = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
        for f in parse(sys.stdin.read()): print(f.name, f.type, len(f.samples))";
    let mut child = std::process::Command::new(python)
        .args(["-c", read])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{text}");
    String::from_utf8(out.stdout).unwrap()
}

/// The value of the line that starts with `series` (labels included).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_as_the_server_works_and_only_for_the_token() {
    batchpool::install_tls();
    let s = TestServer::start_with(Rt::Local, None, &["--metrics-token", TOKEN]).await;
    assert_eq!(scrape(&s, None).await.0, 401);
    assert_eq!(scrape(&s, Some("guess")).await.0, 401);

    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let tasks = |from: usize| {
        (from..from + 5)
            .map(|i| json!({"id": format!("t{i}"), "commandLine": "true"}))
            .collect::<Vec<_>>()
    };
    s.add_tasks("j", tasks(0)).await;
    s.wait_all_completed("j", 5).await;
    let (status, first) = scrape(&s, Some(TOKEN)).await;
    assert_eq!(status, 200, "{first}");
    let node = r#"batchpool_nodes{account="batchpool",pool="p",host="local",state="idle"}"#;
    assert_eq!(value(&first, node), Some(1.0), "{first}");
    let target = r#"batchpool_pool_target_nodes{account="batchpool",pool="p"}"#;
    assert_eq!(value(&first, target), Some(1.0), "{first}");
    let done = r#"batchpool_tasks{account="batchpool",job="j",state="completed"}"#;
    assert_eq!(value(&first, done), Some(5.0), "{first}");
    let hours = r#"batchpool_compute_hours_total{account="batchpool",pool="p",billing_plan=""}"#;
    assert!(value(&first, hours).is_some_and(|h| h > 0.0), "{first}");
    let added = r#"batchpool_http_requests_total{route="/jobs/{job_id}/addtaskcollection",method="POST",status="200"}"#;
    assert_eq!(value(&first, added), Some(1.0), "{first}");
    let passes = value(&first, "batchpool_dispatch_pass_seconds_count").unwrap_or_default();
    assert!(passes > 0.0, "{first}");
    assert_eq!(value(&first, "batchpool_leader"), Some(1.0), "{first}");
    assert_eq!(
        value(&first, "batchpool_agents_connected"),
        Some(1.0),
        "{first}"
    );
    assert_eq!(value(&first, "batchpool_servers"), Some(1.0), "{first}");
    let waited = "batchpool_task_submit_to_running_seconds_count";
    assert_eq!(value(&first, waited), Some(5.0), "{first}");
    let started = "batchpool_node_start_seconds_count";
    assert_eq!(value(&first, started), Some(1.0), "{first}");
    let most = r#"batchpool_db_connections{state="max"}"#;
    assert!(value(&first, most).is_some_and(|m| m >= 1.0), "{first}");
    assert!(!first.contains("t3"), "no task ids in labels");

    // More work, and the families move.
    s.add_tasks("j", tasks(5)).await;
    s.wait_all_completed("j", 10).await;
    // A made-up method counts as `other`, not as a series of its own.
    let odd = reqwest::Method::from_bytes(b"FROBNICATE").unwrap();
    let sent = reqwest::Client::new()
        .request(odd, format!("{}/pools", s.base))
        .send()
        .await;
    assert!(sent.unwrap().status().is_client_error());
    let (_, second) = scrape(&s, Some(TOKEN)).await;
    assert!(!second.contains("FROBNICATE"), "{second}");
    assert!(
        second.contains(r#"route="/pools",method="other""#),
        "{second}"
    );
    assert_eq!(value(&second, done), Some(10.0), "{second}");
    assert_eq!(value(&second, added), Some(2.0), "{second}");
    assert_eq!(value(&second, waited), Some(10.0), "{second}");
    assert!(value(&second, "batchpool_dispatch_pass_seconds_count").unwrap_or_default() > passes);
    assert!(value(&second, hours) > value(&first, hours), "{second}");
    let families = parsed_by_prometheus(&second);
    for family in [
        "batchpool_compute_hours counter 1",
        "batchpool_nodes gauge 1",
        "batchpool_http_request_duration_seconds histogram",
        "batchpool_db_connections gauge 3",
    ] {
        assert!(families.contains(family), "{family}:\n{families}");
    }

    // Without a token, metrics are off. (This server logs JSON lines, for a log collector.)
    let off = TestServer::start_with(Rt::Local, None, &["--log-format", "json"]).await;
    let (status, body) = scrape(&off, Some(TOKEN)).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--metrics-token"), "{body}");
    let log = std::fs::read_to_string(off.log_path()).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.starts_with("batchpool listening on")) // stdout, for scripts
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let listening = lines.iter().find(|l| l["fields"]["message"] == "listening");
    assert!(
        listening.is_some_and(|l| l["level"] == "INFO" && l["target"] == "batchpool::app"),
        "{log}"
    );
}
