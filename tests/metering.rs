//! Compute hours: a node counts from ready to removed, whatever it ran.

#[macro_use]
mod common;

use chrono::{DateTime, Duration, TimeZone, Utc};
use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// Records `count` nodes of `pool` alive for `hours` from `start`, as the allocator would have.
async fn record_nodes(
    db: &sqlx::PgPool,
    pool: &str,
    count: usize,
    start: DateTime<Utc>,
    hours: i64,
) {
    for i in 0..count {
        sqlx::query(
            "INSERT INTO usage_records (account, pool_pk, pool_id, node_id, vm_size, vcpus, started_at, ended_at) \
             VALUES ('batchpool', 0, $1, $2, 'standard_d2s_v3', 2, $3, $4)",
        )
        .bind(pool)
        .bind(format!("{pool}-node-{i}"))
        .bind(start)
        .bind(start + Duration::hours(hours))
        .execute(db)
        .await
        .unwrap();
    }
}

fn hours_of<'a>(report: &'a Value, pool: &str) -> &'a Value {
    &report["value"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["poolId"] == pool)
        .unwrap_or_else(|| panic!("{pool} in {report}"))["computeHours"]
}

/// The seed's rule, with a clock the test sets: 2 nodes for 24 hours = 48 compute hours =
/// 4 nodes for 12 hours, regardless of tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_for_a_day_cost_what_four_cost_for_half_a_day() {
    let s = TestServer::start(Rt::Local).await;
    let db = s.db().await;
    let day = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
    record_nodes(&db, "two", 2, day, 24).await;
    record_nodes(&db, "four", 4, day, 12).await;

    let (status, report) = s
        .get("/billing/pools?startTime=2026-03-01T00:00:00Z&endTime=2026-03-03T00:00:00Z")
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(hours_of(&report, "two"), &json!(48.0));
    assert_eq!(hours_of(&report, "four"), &json!(48.0));
    assert_eq!(report["totalComputeHours"], json!(96.0));
    assert_eq!(
        report["value"][1]["coreHours"],
        json!(96.0),
        "standard_d2s_v3 has 2 cores"
    );

    // Only the part of a node's life inside the range counts.
    let (_, report) = s
        .get(
            "/billing/pools?startTime=2026-03-01T06:00:00Z&endTime=2026-03-01T18:00:00Z&poolId=two",
        )
        .await;
    assert_eq!(hours_of(&report, "two"), &json!(24.0));
    assert_eq!(report["value"].as_array().unwrap().len(), 1);

    let (status, body) = s.get("/billing/pools?startTime=yesterday").await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "InvalidQueryParameterValue");
}

/// Real nodes open a record when they are ready and close it when they go: after a resize to
/// zero the hours stop growing.
async fn metering_follows_nodes(rt: Rt) {
    let s = TestServer::start(rt).await;
    let db = s.db().await;
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "m", "vmSize": "standard_a1", "targetDedicatedNodes": 2})
        )
        .await
        .0,
        201
    );
    let nodes = s.wait_nodes("m", 2, "idle").await;
    let open: Vec<(String,)> =
        sqlx::query_as("SELECT node_id FROM usage_records WHERE ended_at IS NULL ORDER BY node_id")
            .fetch_all(&db)
            .await
            .unwrap();
    let mut node_ids: Vec<String> = nodes
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    node_ids.sort();
    assert_eq!(open.into_iter().map(|r| r.0).collect::<Vec<_>>(), node_ids);

    assert_eq!(
        s.post("/pools/m/resize", &json!({"targetDedicatedNodes": 0}))
            .await
            .0,
        202
    );
    s.wait_nodes("m", 0, "idle").await;
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_records WHERE ended_at IS NULL")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(open, 0, "a removed node is no longer metered");
    let closed: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_records")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(closed, 2);

    let range = "/billing/pools?startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z";
    let (_, first) = s.get(range).await;
    let hours = hours_of(&first, "m").as_f64().unwrap();
    assert!(hours > 0.0);
    // Time passes (observed, not slept for): the total must not move.
    let later = Utc::now() + Duration::milliseconds(20);
    wait_for("the clock to move on", || async {
        (Utc::now() > later).then_some(())
    })
    .await;
    let (_, second) = s.get(range).await;
    assert_eq!(hours_of(&second, "m").as_f64().unwrap(), hours);
}
on_both_runtimes!(
    metering_starts_at_ready_and_stops_at_removal,
    metering_follows_nodes
);

/// A job's hours count every attempt of its tasks once: one for a task that succeeds, one for
/// each try of a task that fails and is retried, one for a task terminated while it runs, and
/// nothing for a task that never started (it waits on the task that failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_of_a_job_s_tasks_counts_once() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "usesTaskDependencies": true});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    s.add_tasks(
        "j",
        vec![
            json!({"id": "ok", "commandLine": "true"}),
            json!({"id": "retried", "commandLine": "exit 3", "constraints": {"maxTaskRetryCount": 2}}),
            json!({"id": "long", "commandLine": "sleep 300"}),
            json!({"id": "waits", "commandLine": "true", "dependsOn": {"taskIds": ["retried"]}}),
        ],
    )
    .await;
    s.wait_task("j", "ok", "completed").await;
    let retried = s.wait_task("j", "retried", "completed").await;
    assert_eq!(retried["executionInfo"]["retryCount"], 2, "{retried}");
    s.wait_task("j", "long", "running").await;
    let (status, body) = s.post("/jobs/j/tasks/long/terminate", &json!({})).await;
    assert_eq!(status, 204, "{body}");
    s.wait_task("j", "long", "completed").await;

    let range = "/billing/jobs?startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z";
    let (status, report) = s.get(range).await;
    assert_eq!(status, 200, "{report}");
    let jobs: Vec<&Value> = report["value"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["idle"] != true)
        .collect();
    assert_eq!(jobs.len(), 1, "{report}");
    assert_eq!(jobs[0]["jobId"], "j");
    assert_eq!(jobs[0]["poolId"], "p");
    assert_eq!(jobs[0]["taskAttempts"], 5, "1 + 3 + 1: {report}");
    assert!(jobs[0]["slotHours"].as_f64().unwrap() > 0.0, "{report}");
}

/// Sets prices through the operator's route; the prices as set.
async fn set_prices(s: &TestServer, body: Value) -> Value {
    let (status, set) = s
        .operator(reqwest::Method::PUT, "prices", Some(&body), None)
        .await;
    assert_eq!(status, 200, "{set}");
    set
}

/// Prices a plan had from `from` on (the past: the route sets prices from now on).
async fn priced_since(db: &sqlx::PgPool, from: &str, compute: &str, low: &str, sizes: Value) {
    sqlx::query(
        "INSERT INTO plan_prices (account, plan, effective_from, currency, compute_hour, low_priority_hour, vm_sizes) \
         VALUES ('batchpool', '', $1::timestamptz, 'EUR', $2, $3, $4)",
    )
    .bind(from)
    .bind(compute)
    .bind(low)
    .bind(sizes)
    .execute(db)
    .await
    .unwrap();
}

fn pool<'a>(report: &'a Value, pool: &str) -> &'a Value {
    report["value"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["poolId"] == pool)
        .unwrap_or_else(|| panic!("{pool} in {report}"))
}

/// Hours cost the prices in force when they were metered, by vmSize and apart for
/// low-priority nodes; hours before any price are counted apart. Sums are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hours_cost_the_prices_in_force_when_they_were_metered() {
    let s = TestServer::start(Rt::Local).await;
    let db = s.db().await;
    let day = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
    record_nodes(&db, "two", 2, day, 24).await;
    record_nodes(&db, "early", 1, day - Duration::hours(24), 48).await;
    record_nodes(&db, "spot", 1, day, 24).await;
    sqlx::query("UPDATE usage_records SET is_dedicated = false WHERE pool_id = 'spot'")
        .execute(&db)
        .await
        .unwrap();
    priced_since(&db, "2026-03-01T00:00:00Z", "0.10", "0.03", json!({})).await;
    let sizes = json!({"standard_d2s_v3": "0.40"});
    priced_since(&db, "2026-03-01T12:00:00Z", "0.25", "0.05", sizes).await;

    let (status, report) = s
        .get("/billing/pools?startTime=2026-02-01T00:00:00Z&endTime=2026-04-01T00:00:00Z")
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["currency"], "EUR");
    // 2 nodes: 12 h each at 0.10, then 12 h each at their size's 0.40.
    assert_eq!(pool(&report, "two")["cost"], json!(12.0));
    // Low-priority: 12 h at 0.03, 12 h at 0.05.
    assert_eq!(pool(&report, "spot")["cost"], json!(0.96));
    // A day before any price, then a day at 0.10 and 0.40.
    assert_eq!(pool(&report, "early")["unpricedComputeHours"], json!(24.0));
    assert_eq!(pool(&report, "early")["cost"], json!(6.0));
    assert_eq!(report["totalCost"], json!(18.96));
    let (_, plans) = s
        .get("/billing/plans?startTime=2026-02-01T00:00:00Z&endTime=2026-04-01T00:00:00Z")
        .await;
    assert_eq!(plans["value"][0]["cost"], json!(18.96), "{plans}");
    let resp = s
        .http
        .get(format!("{}/billing/pools?startTime=2026-02-01T00:00:00Z&endTime=2026-04-01T00:00:00Z&format=csv", s.base))
        .send()
        .await
        .unwrap();
    let csv = resp.text().await.unwrap();
    assert!(csv.starts_with("poolId,billingPlan,vmSize,computeHours,dedicatedComputeHours,lowPriorityComputeHours,coreHours,usageRecords,cost,unpricedComputeHours\n"), "{csv}");
    assert!(
        csv.contains("\ntwo,,standard_d2s_v3,48.0,48.0,0.0,96.0,2,12.0,0.0\n"),
        "{csv}"
    );

    // The operator's route: bad input is named, and one currency holds for the installation.
    let refused = [
        (
            json!({"account": "batchpool", "currency": "EUR", "computeHour": -1}),
            "computeHour",
        ),
        (
            json!({"account": "batchpool", "currency": "EUR", "computeHour": "0.1234567891"}),
            "computeHour",
        ),
        (
            json!({"account": "batchpool", "currency": "euro", "computeHour": 1}),
            "currency",
        ),
        (
            json!({"account": "batchpool", "currency": "USD", "computeHour": 1}),
            "currency",
        ),
        (
            json!({"account": "batchpool", "currency": "EUR", "computeHour": 1, "vmSizes": {"big": "x"}}),
            "vmSizes/big",
        ),
        (
            json!({"account": "batchpool", "currency": "EUR", "computeHour": 1, "fee": 3}),
            "fee",
        ),
        (
            json!({"account": "batchpool", "currency": "EUR"}),
            "computeHour",
        ),
    ];
    for (body, name) in refused {
        let (status, answer) = s
            .operator(reqwest::Method::PUT, "prices", Some(&body), None)
            .await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.to_string().contains(name), "{body}: {answer}");
    }
    let body = json!({"account": "nobody", "currency": "EUR", "computeHour": 1});
    let (status, answer) = s
        .operator(reqwest::Method::PUT, "prices", Some(&body), None)
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (404, Some("AccountNotFound"))
    );
    let (status, _) = s
        .operator(reqwest::Method::GET, "prices", None, Some("guess"))
        .await;
    assert_eq!(status, 401);
    let (_, listed) = s
        .operator(reqwest::Method::GET, "prices?account=batchpool", None, None)
        .await;
    assert_eq!(listed["value"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(
        listed["value"][1]["vmSizes"],
        json!({"standard_d2s_v3": "0.40"})
    );
}

/// The exact cost of `pool`'s usage records under `prices` (effective_from, compute hour in
/// billionths), as the test reckons it: microseconds times billionths over 3.6e18.
async fn reckoned(db: &sqlx::PgPool, pool: &str, prices: &[(DateTime<Utc>, i128)]) -> f64 {
    let rows: Vec<(DateTime<Utc>, DateTime<Utc>)> =
        sqlx::query_as("SELECT started_at, ended_at FROM usage_records WHERE pool_id = $1")
            .bind(pool)
            .fetch_all(db)
            .await
            .unwrap();
    let mut total: i128 = 0;
    for (start, end) in rows {
        for (i, (from, rate)) in prices.iter().enumerate() {
            let until = prices.get(i + 1).map_or(end, |next| next.0.min(end));
            let from = (*from).max(start);
            if from < until {
                total += i128::from((until - from).num_microseconds().unwrap()) * rate;
            }
        }
    }
    total as f64 / 3.6e18
}

/// A real pool priced, repriced while its nodes run, then resized to zero: its cost is each
/// part of its nodes' lives at the price of the time, exactly.
async fn a_price_change_mid_run(rt: Rt) {
    let s = TestServer::start(rt).await;
    let db = s.db().await;
    let first = set_prices(
        &s,
        json!({"account": "batchpool", "currency": "EUR", "computeHour": 0.12}),
    )
    .await;
    let body = json!({"id": "m", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("m", 2, "idle").await;
    let second = set_prices(
        &s,
        json!({"account": "batchpool", "currency": "EUR", "computeHour": "2.5"}),
    )
    .await;
    assert_eq!(
        s.post("/pools/m/resize", &json!({"targetDedicatedNodes": 0}))
            .await
            .0,
        202
    );
    s.wait_nodes("m", 0, "idle").await;
    let at = |set: &Value| {
        DateTime::parse_from_rfc3339(set["effectiveFrom"].as_str().unwrap())
            .unwrap()
            .with_timezone(&Utc)
    };
    let prices = [(at(&first), 120_000_000), (at(&second), 2_500_000_000)];
    let (_, report) = s
        .get("/billing/pools?startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z")
        .await;
    let m = pool(&report, "m");
    assert_eq!(
        m["cost"].as_f64().unwrap(),
        reckoned(&db, "m", &prices).await,
        "{report}"
    );
    assert_eq!(m["unpricedComputeHours"], json!(0.0));
    assert!(m["cost"].as_f64().unwrap() > 0.0);
}
on_both_runtimes!(price_change_mid_run, a_price_change_mid_run);

/// Two jobs share a priced pool: their costs and the pool's idle line add up to the pool's
/// cost, and each job's cost is its share of the node-hours.
async fn two_jobs_share_a_pool_s_cost(rt: Rt) {
    let s = TestServer::start(rt).await;
    set_prices(
        &s,
        json!({"account": "batchpool", "currency": "EUR", "computeHour": 0.36}),
    )
    .await;
    let body = json!({"id": "shared", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 3});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("shared", 1, "idle").await;
    s.job_on("a", "shared").await;
    s.job_on("b", "shared").await;
    let task =
        |id: &str, slots: i64| json!({"id": id, "commandLine": "sleep 1", "requiredSlots": slots});
    s.add_tasks("a", vec![task("1", 1), task("2", 1)]).await;
    s.add_tasks("b", vec![task("1", 2)]).await;
    s.wait_all_completed("a", 2).await;
    s.wait_all_completed("b", 1).await;
    // A job under way: its forecast is what ended cost, and for each task left the mean of them.
    s.job_on("c", "shared").await;
    let whole = |id: &str| json!({"id": id, "commandLine": "sleep 2", "requiredSlots": 3});
    s.add_tasks("c", vec![whole("1"), whole("2"), whole("3")])
        .await;
    let under_way = wait_for("one of job c's tasks ended", || async {
        let (_, c) = s.get("/jobs/c?$expand=stats").await;
        let done = c["stats"]["numSucceededTasks"].as_i64() == Some(1);
        done.then_some(c["stats"].clone())
    })
    .await;
    let (cost, estimate) = (
        under_way["cost"].as_f64().unwrap(),
        under_way["estimatedCost"].as_f64().unwrap(),
    );
    assert!(estimate > cost && estimate < 4.0 * cost, "{under_way}");
    s.wait_all_completed("c", 3).await;
    let (_, c) = s.get("/jobs/c?$expand=stats").await;
    let (cost, estimate) = (
        c["stats"]["cost"].as_f64().unwrap(),
        c["stats"]["estimatedCost"].as_f64().unwrap(),
    );
    assert!(
        (estimate - cost).abs() < 1e-12,
        "once it is done, the forecast is its cost: {c}"
    );
    assert_eq!(
        s.post("/pools/shared/resize", &json!({"targetDedicatedNodes": 0}))
            .await
            .0,
        202
    );
    s.wait_nodes("shared", 0, "idle").await;

    let range = "startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z";
    let (_, pools) = s.get(&format!("/billing/pools?{range}")).await;
    let pool_cost = pool(&pools, "shared")["cost"].as_f64().unwrap();
    let pool_hours = pool(&pools, "shared")["computeHours"].as_f64().unwrap();
    let (_, jobs) = s.get(&format!("/billing/jobs?{range}")).await;
    assert_eq!(jobs["currency"], "EUR");
    let rows = jobs["value"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "three jobs and the idle line: {jobs}");
    let cost = |job: Value| {
        let row = rows.iter().find(|r| r["jobId"] == job).unwrap();
        (
            row["cost"].as_f64().unwrap(),
            row["computeHours"].as_f64().unwrap(),
        )
    };
    let ((a, a_hours), (b, b_hours), (idle, idle_hours)) =
        (cost(json!("a")), cost(json!("b")), cost(Value::Null));
    let (c, c_hours) = cost(json!("c"));
    assert!(a > 0.0 && b > 0.0 && c > 0.0 && idle > 0.0, "{jobs}");
    // To the cent, and far closer: the parts are summed exactly before they are shown.
    assert!(
        (a + b + c + idle - pool_cost).abs() < 1e-12,
        "{a} + {b} + {c} + {idle} != {pool_cost}"
    );
    assert!((a_hours + b_hours + c_hours + idle_hours - pool_hours).abs() < 1e-9);
    // One price: each part's cost is its hours at it.
    for (cost, hours) in [(a, a_hours), (b, b_hours), (c, c_hours), (idle, idle_hours)] {
        assert!((cost - hours * 0.36).abs() < 1e-9, "{cost} for {hours} h");
    }
    // The job's statistics say what it cost, and its tasks' say their parts of it.
    let stats = |path: String| {
        let s = &s;
        async move {
            let (status, v) = s.get(&format!("{path}?$expand=stats")).await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["stats"]["currency"], "EUR", "{v}");
            v["stats"]["cost"].as_f64().unwrap()
        }
    };
    assert_eq!(stats("/jobs/a".into()).await, a);
    assert_eq!(stats("/jobs/b".into()).await, b);
    let tasks = stats("/jobs/a/tasks/1".into()).await + stats("/jobs/a/tasks/2".into()).await;
    assert!((tasks - a).abs() < 1e-12, "{tasks} != {a}");
    // And `batchpool task show` prints it.
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let shown = common::run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
            .args(["task", "show", "b", "1"])
            .envs([
                ("BATCH_URL", s.base.as_str()),
                ("BATCH_ACCOUNT", &account),
                ("BATCH_KEY", &key),
            ]),
    );
    let line = format!("{b} EUR");
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("cost ") && l.ends_with(&line)),
        "{shown}"
    );
    // `batchpool queue` has each job's cost so far and forecast.
    let queue = common::run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
            .args(["queue"])
            .envs([
                ("BATCH_URL", s.base.as_str()),
                ("BATCH_ACCOUNT", &account),
                ("BATCH_KEY", &key),
            ]),
    );
    let head = queue.lines().next().unwrap_or_default();
    assert!(
        head.contains(" COST ") && head.trim_end().ends_with("FORECAST"),
        "{queue}"
    );
    let row = queue
        .lines()
        .find(|l| l.starts_with("a "))
        .unwrap_or_default();
    assert!(row.contains(&format!("{a:.4} EUR")), "{queue}");
}
on_both_runtimes!(shared_pool_cost, two_jobs_share_a_pool_s_cost);

/// Included hours on a real pool: with 0.0005 compute hours (1.8 s) a month included, its
/// node's first 1.8 s cost nothing and the rest the price, exactly.
async fn included_hours_cost_nothing(rt: Rt) {
    let s = TestServer::start(rt).await;
    let db = s.db().await;
    let body = json!({"account": "batchpool", "currency": "EUR", "computeHour": 3600, "includedComputeHours": "0.0005"});
    assert_eq!(set_prices(&s, body).await["includedComputeHours"], "0.0005");
    let range = "startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z";
    s.pool_of_one_idle_node("i").await;
    // Free until the node has lived 1.8 s: then a euro a second.
    let (_, early) = s.get(&format!("/billing/pools?{range}")).await;
    if pool(&early, "i")["computeHours"].as_f64().unwrap() < 0.0005 {
        assert_eq!(pool(&early, "i")["cost"], json!(0.0), "{early}");
    }
    common::wait_for("the node to outlive its included hours", || async {
        let (_, report) = s.get(&format!("/billing/pools?{range}")).await;
        (pool(&report, "i")["computeHours"].as_f64().unwrap() > 0.001).then_some(())
    })
    .await;
    assert_eq!(
        s.post("/pools/i/resize", &json!({"targetDedicatedNodes": 0}))
            .await
            .0,
        202
    );
    s.wait_nodes("i", 0, "idle").await;
    let lives: Vec<(DateTime<Utc>, DateTime<Utc>)> =
        sqlx::query_as("SELECT started_at, ended_at FROM usage_records WHERE pool_id = 'i'")
            .fetch_all(&db)
            .await
            .unwrap();
    let lived: i128 = lives
        .iter()
        .map(|(a, b)| i128::from((*b - *a).num_microseconds().unwrap()))
        .sum();
    // Microseconds past the included 1.8 s, at 3600 a compute hour (in billionths).
    let expected = (lived - 1_800_000) * 3_600_000_000_000;
    let (_, report) = s.get(&format!("/billing/pools?{range}")).await;
    assert_eq!(
        pool(&report, "i")["cost"].as_f64().unwrap(),
        expected as f64 / 3.6e18,
        "{report}"
    );
}
on_both_runtimes!(included_hours, included_hours_cost_nothing);
