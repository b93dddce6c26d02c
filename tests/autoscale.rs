//! Autoscale formulas, end to end: a pool at zero nodes grows for the tasks of a job, runs them
//! and shrinks back to zero on the formula from Azure's documentation; what evaluateautoscale,
//! enableautoscale and disableautoscale answer; formulas that are wrong; `$CPUPercent` and
//! `$MemoryBytes` as the nodes' agents measure them, on both runtimes.

#[macro_use]
mod common;

use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// Azure's documented formula for a pool that follows its pending tasks and halves itself when
/// there are none (down to 0), capped here at 4 nodes.
const FOLLOW_PENDING: &str = "$samples = $PendingTasks.GetSamplePercent(TimeInterval_Minute * 15);
$tasks = $samples < 70 ? max(0, $PendingTasks.GetSample(1)) : max($PendingTasks.GetSample(1), avg($PendingTasks.GetSample(TimeInterval_Minute * 15)));
$targetVMs = $tasks > 0 ? $tasks : max(0, $TargetDedicatedNodes / 2);
$TargetDedicatedNodes = max(0, min($targetVMs, 4));
$NodeDeallocationOption = taskcompletion;";

async fn pool(s: &TestServer, id: &str) -> Value {
    let (status, pool) = s.get(&format!("/pools/{id}")).await;
    assert_eq!(status, 200, "{pool}");
    pool
}

async fn hours(s: &TestServer, id: &str) -> f64 {
    let (_, billing) = s.get("/billing/pools").await;
    billing["value"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["poolId"] == id)
        .map_or(0.0, |p| p["computeHours"].as_f64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_at_zero_grows_for_its_tasks_and_goes_back_to_zero() {
    let s = TestServer::start(Rt::Local).await;
    let started = std::time::Instant::now();
    let body = json!({"id": "auto", "vmSize": "standard_a1", "taskSlotsPerNode": 2,
        "enableAutoScale": true, "autoScaleFormula": FOLLOW_PENDING, "autoScaleEvaluationInterval": "PT5S"});
    let (status, answer) = s.post("/pools", &body).await;
    assert_eq!(status, 201, "{answer}");
    let p = pool(&s, "auto").await;
    assert_eq!(p["enableAutoScale"], true);
    assert_eq!(p["autoScaleFormula"], FOLLOW_PENDING);
    assert_eq!(p["autoScaleEvaluationInterval"], "PT5S");
    assert_eq!(p["targetDedicatedNodes"], 0, "{p}");
    let results = p["autoScaleRun"]["results"].as_str().unwrap();
    assert!(results.starts_with("$TargetDedicatedNodes=0;$TargetLowPriorityNodes=0;$NodeDeallocationOption=taskcompletion;"), "{results}");

    // Sized by its formula, the pool cannot be resized by hand.
    let (status, refused) = s
        .post("/pools/auto/resize", &json!({"targetDedicatedNodes": 2}))
        .await;
    assert_eq!(
        (status.as_u16(), refused["code"].as_str()),
        (409, Some("OperationInvalidForCurrentState"))
    );

    s.job_on("work", "auto").await;
    for chunk in 0..2 {
        let tasks = (0..25)
            .map(|i| json!({"id": format!("t{chunk}-{i:02}"), "commandLine": "sleep 1"}))
            .collect();
        s.add_tasks("work", tasks).await;
    }
    wait_for("the formula to grow the pool to 4", || async {
        (pool(&s, "auto").await["targetDedicatedNodes"] == 4).then_some(())
    })
    .await;
    let mut nodes_ran = std::collections::BTreeSet::new();
    for t in s.wait_all_completed("work", 50).await {
        assert_eq!(t["executionInfo"]["result"], "success", "{t}");
        nodes_ran.insert(t["nodeInfo"]["nodeId"].to_string());
    }
    assert!(
        nodes_ran.len() > 1,
        "the tasks ran on the nodes it grew: {nodes_ran:?}"
    );

    // Idle, it halves itself each evaluation, down to no nodes.
    wait_for("the pool to go back to 0 nodes", || async {
        let p = pool(&s, "auto").await;
        (p["targetDedicatedNodes"] == 0
            && p["currentDedicatedNodes"] == 0
            && s.nodes("auto").await.is_empty())
        .then_some(())
    })
    .await;
    // Billing counts the nodes' lives and nothing since: no more than 4 nodes for the whole run.
    let billed = hours(&s, "auto").await;
    let most = 4.0 * started.elapsed().as_secs_f64() / 3600.0;
    assert!(
        billed > 0.0 && billed < most,
        "{billed} node-hours, at most {most}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        hours(&s, "auto").await,
        billed,
        "no node-hours after the last node went"
    );
}

async fn evaluate(s: &TestServer, formula: &str) -> (u16, Value) {
    let (status, body) = s
        .post(
            "/pools/p/evaluateautoscale",
            &json!({"autoScaleFormula": formula}),
        )
        .await;
    (status.as_u16(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formulas_are_evaluated_enabled_and_disabled_as_azure_does() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    // Evaluating needs autoscale on.
    let (status, body) = evaluate(&s, "$TargetDedicatedNodes = 2;").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("OperationInvalidForCurrentState")),
        "{body}"
    );

    // Enabling evaluates at once: the pool takes the formula's target.
    let enable = json!({"autoScaleFormula": "$TargetDedicatedNodes = 2;", "autoScaleEvaluationInterval": "PT5S"});
    let (status, body) = s.post("/pools/p/enableautoscale", &enable).await;
    assert_eq!(status, 200, "{body}");
    let p = pool(&s, "p").await;
    assert_eq!(p["targetDedicatedNodes"], 2, "{p}");
    s.wait_nodes("p", 2, "idle").await;

    // evaluateautoscale answers what a formula gives, and changes nothing. The pool is sampled
    // every 5 s: the answer is this once a sample has seen both nodes idle.
    let formula = "usable = $UsableNodeCount.GetSample(1); $TargetDedicatedNodes = val(usable, 0) + 1; note = \"hello\";";
    let want = "$TargetDedicatedNodes=3;$TargetLowPriorityNodes=0;$NodeDeallocationOption=requeue;note=hello;usable=[2]";
    let run = wait_for("a sample with both nodes usable", || async {
        let (status, run) = evaluate(&s, formula).await;
        assert_eq!(status, 200, "{run}");
        (run["results"] == want).then_some(run)
    })
    .await;
    assert!(
        run["timestamp"].is_string() && run.get("error").is_none(),
        "{run}"
    );
    assert_eq!(pool(&s, "p").await["targetDedicatedNodes"], 2);

    // A syntax error is refused with where it is; an evaluation error is the run's error.
    let (status, body) = evaluate(&s, "$TargetDedicatedNodes = (1 + ;").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("AutoScalingFormulaSyntaxError")),
        "{body}"
    );
    assert!(
        body["message"]["value"]
            .as_str()
            .unwrap()
            .contains("Line 1, Col"),
        "{body}"
    );
    let (status, run) = evaluate(
        &s,
        "$TargetDedicatedNodes = avg($DiskBytes.GetSample(TimeInterval_Minute));",
    )
    .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(
        run["error"]["code"], "AutoScalingFormulaEvaluationError",
        "{run}"
    );
    assert!(
        run["error"]["values"][0]["value"]
            .as_str()
            .unwrap()
            .contains("$DiskBytes is not measured"),
        "{run}"
    );
    let (_, run) = evaluate(
        &s,
        "$TargetDedicatedNodes = 1; $TargetLowPriorityNodes = 1;",
    )
    .await;
    assert_eq!(
        run["results"],
        "$TargetDedicatedNodes=1;$TargetLowPriorityNodes=1;$NodeDeallocationOption=requeue",
        "low-priority nodes are sized like dedicated ones: {run}"
    );
    let (_, run) = evaluate(&s, "$TargetDedicatedNodes = 1;").await;
    assert_eq!(
        run["results"],
        "$TargetDedicatedNodes=1;$TargetLowPriorityNodes=0;$NodeDeallocationOption=requeue"
    );
    let too_long = "x = 1;".repeat(1400);
    assert_eq!(
        evaluate(&s, &too_long).await.1["code"],
        "AutoScaleFormulaTooLong"
    );
    let (status, body) = s.post("/pools/p/enableautoscale", &json!({"autoScaleFormula": "$TargetDedicatedNodes = 1;", "autoScaleEvaluationInterval": "PT1S"})).await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (400, Some("InvalidPropertyValue")),
        "{body}"
    );

    // Disabled, the pool keeps its size and takes resizes again.
    let (status, _) = s.post("/pools/p/disableautoscale", &json!({})).await;
    assert_eq!(status, 200);
    let p = pool(&s, "p").await;
    assert_eq!(
        (
            p["enableAutoScale"].as_bool(),
            p["targetDedicatedNodes"].as_i64()
        ),
        (Some(false), Some(2))
    );
    assert!(p.get("autoScaleFormula").is_none(), "{p}");
    let (status, _) = s
        .post("/pools/p/resize", &json!({"targetDedicatedNodes": 0}))
        .await;
    assert_eq!(status, 202);

    // A pool made with autoscale takes no target of its own, and needs a formula.
    let both = json!({"id": "q", "vmSize": "standard_a1", "enableAutoScale": true, "targetDedicatedNodes": 1, "autoScaleFormula": "$TargetDedicatedNodes = 1;"});
    assert_eq!(s.post("/pools", &both).await.0, 400);
    let none = json!({"id": "q", "vmSize": "standard_a1", "enableAutoScale": true});
    assert_eq!(
        s.post("/pools", &none).await.1["code"],
        "MissingRequiredProperty"
    );
    let bad = json!({"id": "q", "vmSize": "standard_a1", "enableAutoScale": true, "autoScaleFormula": "$TargetDedicatedNodes = ;"});
    assert_eq!(
        s.post("/pools", &bad).await.1["code"],
        "AutoScalingFormulaSyntaxError"
    );
    assert_eq!(
        s.get("/pools/q").await.0,
        404,
        "nothing made by refused requests"
    );
}

/// The number in `name=[x]` of an AutoScaleRun's results.
fn sampled(results: &str, name: &str) -> Option<f64> {
    let value = results
        .split(';')
        .find_map(|r| r.strip_prefix(&format!("{name}=")))?;
    value.trim_matches(|c| c == '[' || c == ']').parse().ok()
}

/// A task that keeps its node's one vCPU busy: the samples formulas read see it working, and
/// see the node idle before and after.
async fn cpu_and_memory(rt: Rt) {
    let s = TestServer::start(rt).await;
    let body = json!({"id": "busy", "vmSize": "standard_a1", "enableAutoScale": true,
        "autoScaleFormula": "$TargetDedicatedNodes = 1;", "autoScaleEvaluationInterval": "PT5S"});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("busy", 1, "idle").await;
    let probe = json!({"autoScaleFormula":
        "cpu = $CPUPercent.GetSample(1); memory = $MemoryBytes.GetSample(1);"});
    let sample = || async {
        let (_, run) = s.post("/pools/busy/evaluateautoscale", &probe).await;
        let results = run["results"].as_str().unwrap_or_default().to_string();
        sampled(&results, "cpu").zip(sampled(&results, "memory"))
    };
    let (idle, _) = wait_for("a sample of the idle node", sample).await;
    assert!(idle < 20.0, "an idle node: {idle}% CPU");

    s.job_on("j", "busy").await;
    let spin = "end=$(($(date +%s) + 25)); while [ $(date +%s) -lt $end ]; do :; done";
    s.add_tasks(
        "j",
        vec![json!({"id": "spin", "commandLine": format!("/bin/sh -c '{spin}'")})],
    )
    .await;
    let (cpu, memory) = wait_for("a sample of the busy node", || async {
        sample().await.filter(|(cpu, _)| *cpu > 30.0)
    })
    .await;
    assert!(cpu <= 100.0, "{cpu}% of the node's one vCPU");
    assert!(
        memory > 0.0,
        "the busy command's memory is counted: {memory} bytes"
    );
}

on_both_runtimes!(
    formulas_read_the_cpu_and_memory_the_nodes_use,
    cpu_and_memory
);
