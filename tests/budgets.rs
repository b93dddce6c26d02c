//! Monthly budgets (docs/metering.md, "Budgets"): set by the operator, reckoned by the leader
//! every few seconds; crossing one shows in /metrics; at its limit it does nothing more, holds
//! its pools at their size, or drains them as their running tasks end, killing nothing.

#[macro_use]
mod common;

use common::{wait_for, Rt, TestServer};
use reqwest::Method;
use serde_json::{json, Value};

const TOKEN: &str = "scrape-me";

async fn operator(s: &TestServer, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    s.operator(method, path, body.as_ref(), None).await
}

/// A compute hour at 3600 EUR: each node costs a euro a second.
async fn priced(s: &TestServer) {
    let body = json!({"account": "batchpool", "currency": "EUR", "computeHour": 3600});
    assert_eq!(operator(s, Method::PUT, "prices", Some(body)).await.0, 200);
}

async fn budget(s: &TestServer, monthly: &str, at_limit: &str) -> Value {
    let body = json!({"account": "batchpool", "monthlyAmount": monthly, "atLimit": at_limit});
    let (status, set) = operator(s, Method::PUT, "budgets", Some(body)).await;
    assert_eq!(status, 200, "{set}");
    set
}

/// The line of `series` (labels included) in /metrics.
async fn metric(s: &TestServer, series: &str) -> Option<f64> {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", s.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn pool(s: &TestServer, id: &str) -> Value {
    s.get(&format!("/pools/{id}")).await.1
}

/// What the routes refuse, by name; a budget of an account with no prices is refused, as it
/// would count nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_set_listed_and_removed_and_bad_ones_refused() {
    let s = TestServer::start(Rt::Local).await;
    let body = json!({"account": "batchpool", "monthlyAmount": "10"});
    let (status, answer) = operator(&s, Method::PUT, "budgets", Some(body)).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("AccountNotPriced")),
        "{answer}"
    );
    priced(&s).await;
    for (body, name) in [
        (
            json!({"account": "batchpool", "monthlyAmount": "-1"}),
            "monthlyAmount",
        ),
        (
            json!({"account": "batchpool", "monthlyAmount": "1.0000000001"}),
            "monthlyAmount",
        ),
        (json!({"account": "batchpool"}), "monthlyAmount"),
        (json!({"monthlyAmount": 1}), "account"),
        (
            json!({"account": "batchpool", "monthlyAmount": 1, "atLimit": "stop"}),
            "atLimit",
        ),
        (
            json!({"account": "batchpool", "monthlyAmount": 1, "limit": "none"}),
            "limit",
        ),
    ] {
        let (status, answer) = operator(&s, Method::PUT, "budgets", Some(body.clone())).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.to_string().contains(name), "{body}: {answer}");
    }
    let body = json!({"account": "nobody", "monthlyAmount": 1});
    let (status, answer) = operator(&s, Method::PUT, "budgets", Some(body)).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (404, Some("AccountNotFound"))
    );
    let (status, _) = s
        .operator(Method::GET, "budgets", None, Some("guess"))
        .await;
    assert_eq!(status, 401);

    let set = budget(&s, "250.50", "stopGrowth").await;
    assert_eq!(set["monthlyAmount"], "250.5");
    assert_eq!(set["currency"], "EUR");
    assert_eq!(set["state"], "under");
    let body = json!({"account": "batchpool", "billingPlan": "gold", "monthlyAmount": 5, "atLimit": "drain"});
    assert_eq!(
        operator(&s, Method::PUT, "budgets", Some(body)).await.0,
        200
    );
    let (_, listed) = operator(&s, Method::GET, "budgets?account=batchpool", None).await;
    let plans: Vec<&Value> = listed["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["billingPlan"])
        .collect();
    assert_eq!(plans, [&Value::Null, &json!("gold")], "{listed}");
    let (status, _) = operator(
        &s,
        Method::DELETE,
        "budgets?account=batchpool&billingPlan=gold",
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (status, answer) = operator(
        &s,
        Method::DELETE,
        "budgets?account=batchpool&billingPlan=gold",
        None,
    )
    .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (404, Some("BudgetNotFound"))
    );
}

/// A budget that only warns: crossed, it shows in /metrics and the list, and the pool still
/// grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_none_warns_and_lets_pools_grow() {
    let s = TestServer::start_with(Rt::Local, None, &["--metrics-token", TOKEN]).await;
    priced(&s).await;
    budget(&s, "1", "none").await;
    s.pool_of_one_idle_node("p").await;
    let crossed = r#"batchpool_budget_crossed{account="batchpool",billing_plan="",threshold="1"}"#;
    wait_for("the budget to be used up", || async {
        (metric(&s, crossed).await == Some(1.0)).then_some(())
    })
    .await;
    let warned = r#"batchpool_budget_crossed{account="batchpool",billing_plan="",threshold="0.8"}"#;
    assert_eq!(metric(&s, warned).await, Some(1.0));
    let ratio = r#"batchpool_budget_used_ratio{account="batchpool",billing_plan=""}"#;
    assert!(metric(&s, ratio).await.is_some_and(|r| r >= 1.0));
    let (_, listed) = operator(&s, Method::GET, "budgets?account=batchpool", None).await;
    assert_eq!(listed["value"][0]["state"], "exceeded", "{listed}");
    assert!(
        listed["value"][0]["monthCost"].as_f64().unwrap() >= 1.0,
        "{listed}"
    );
    // The account reads its own budgets, signed as any request.
    let (status, own) = s.get("/billing/budgets").await;
    assert_eq!(status, 200, "{own}");
    let own = &own["value"][0];
    let seen = (&own["state"], &own["currency"], &own["atLimit"]);
    assert_eq!(
        seen,
        (&json!("exceeded"), &json!("EUR"), &json!("none")),
        "{own}"
    );
    assert_eq!(own.get("account"), None, "{own}");
    assert_eq!(
        s.post("/pools/p/resize", &json!({"targetDedicatedNodes": 2}))
            .await
            .0,
        202
    );
    s.wait_nodes("p", 2, "idle").await;
    assert_eq!(pool(&s, "p").await.get("resizeErrors"), None);
}

/// A `drain` budget used up while a task runs: the pool resizes to zero, the idle node goes at
/// once, the running task ends as it would have (exit 0), and then its node goes too.
async fn a_drained_pool_lets_its_running_task_end(rt: Rt) {
    let s = TestServer::start(rt).await;
    priced(&s).await;
    let body = json!({"id": "d", "vmSize": "standard_a1", "targetDedicatedNodes": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("d", 2, "idle").await;
    s.job_on("j", "d").await;
    s.add_tasks("j", vec![json!({"id": "long", "commandLine": "sleep 12"})])
        .await;
    s.wait_task("j", "long", "running").await;
    budget(&s, "0.5", "drain").await;
    let drained = wait_for("the pool to be drained", || async {
        let p = pool(&s, "d").await;
        (p["targetDedicatedNodes"] == 0).then_some(p)
    })
    .await;
    assert_eq!(
        drained["resizeErrors"][0]["code"], "BudgetExceeded",
        "{drained}"
    );
    assert_eq!(drained["enableAutoScale"], false);
    let (_, task) = s.get("/jobs/j/tasks/long").await;
    assert_eq!(
        task["state"], "running",
        "drained before the task ended: {task}"
    );
    let done = s.wait_task("j", "long", "completed").await;
    assert_eq!(done["executionInfo"]["exitCode"], 0, "{done}");
    assert_eq!(done["executionInfo"]["retryCount"], 0, "{done}");
    s.wait_nodes("d", 0, "idle").await;
    // Held: growing again is refused, as a resize error.
    assert_eq!(
        s.post("/pools/d/resize", &json!({"targetDedicatedNodes": 1}))
            .await
            .0,
        202
    );
    let held = wait_for("the refused resize", || async {
        let p = pool(&s, "d").await;
        (p["allocationState"] == "steady").then_some(p)
    })
    .await;
    assert_eq!(held["currentDedicatedNodes"], 0, "{held}");
    assert_eq!(held["resizeErrors"][0]["code"], "BudgetExceeded", "{held}");
}
on_both_runtimes!(drain, a_drained_pool_lets_its_running_task_end);
