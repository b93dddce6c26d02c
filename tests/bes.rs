//! BES jobs, web services, the Pool Service and billing plans, against a real Azure Storage
//! emulator (Azurite, started by scripts/test-env.sh): inputs are read from it and outputs
//! written to it with the connection strings and SAS tokens BES clients use.

#[macro_use]
mod common;

use batchpool::storage::{self, DataReference, Roots};
use chrono::{Duration, TimeZone, Utc};
use common::blobs::{azurite, put_blob, AZURITE_KEY};
use common::{account_cmd, run_ok, wait_for, Rt, TestServer};
use object_store::{ObjectStoreExt, PutPayload};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A server whose BES jobs may name storage on this host (Azurite, s3rver).
async fn bes_server(rt: Rt, extra: &[&str]) -> TestServer {
    TestServer::start_allowing_local_urls(rt, extra).await
}

/// A connection string in the shape of the seed's example, pointing at the emulator.
fn connection_string() -> String {
    format!(
        "DefaultEndpointsProtocol=http;BlobEndpoint={}/;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;\
         QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};",
        azurite()
    )
}

fn reference(relative: &str) -> DataReference {
    DataReference {
        connection_string: Some(connection_string()),
        relative_location: Some(relative.into()),
        ..Default::default()
    }
}

async fn get_blob(relative: &str) -> Option<String> {
    common::blobs::get_blob(relative)
        .await
        .map(|(text, _)| text)
}

/// A request with `Authorization: Bearer <key>`, as BES and Pool Service clients send it.
async fn bearer(
    s: &TestServer,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", s.base))
        .header("authorization", format!("Bearer {key}"));
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn put(s: &TestServer, path: &str, body: &Value) -> (StatusCode, Value) {
    s.request(Method::PUT, path, Some(body)).await
}

const SERVICE: &str = "/subscriptions/80c77c7674ba4c8c82294c3b2957990c/services/sorter";

/// Registers the sorting service and returns its primary key.
async fn register_sorter(s: &TestServer, plan: &str) -> String {
    let (status, body) = put(
        s,
        SERVICE,
        &json!({
            "Title": "Sorts a CSV",
            "Command": "sort {in:input1} > {out:output1} && echo sorted {param:Label}",
            "Inputs": [{"Name": "input1", "Extension": ".csv"}],
            "Outputs": [{"Name": "output1", "Extension": ".csv"}],
            "GlobalParameters": [{"Name": "Label", "Default": "rows"}],
            "BillingPlan": plan,
        }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert!(body["SwaggerLocation"]
        .as_str()
        .unwrap()
        .ends_with("/services/sorter/swagger.json"));
    body["PrimaryKey"].as_str().unwrap().to_string()
}

async fn pool_service_key(s: &TestServer) -> String {
    sqlx::query_scalar("SELECT pool_service_key FROM accounts WHERE name = 'batchpool'")
        .fetch_one(&s.db().await)
        .await
        .unwrap()
}

/// Submits a job; returns its id (the JSON string BES answers with).
async fn submit(s: &TestServer, key: &str, body: Value) -> String {
    let (status, id) = bearer(
        s,
        Method::POST,
        &format!("{SERVICE}/jobs?api-version=2.0"),
        key,
        Some(body),
    )
    .await;
    assert_eq!(status, 200, "{id}");
    let id = id
        .as_str()
        .expect("the job id is a JSON string")
        .to_string();
    assert_eq!(id.len(), 32);
    id
}

async fn start(s: &TestServer, key: &str, id: &str, body: Option<Value>) {
    let (status, answer) = bearer(
        s,
        Method::POST,
        &format!("{SERVICE}/jobs/{id}/start?api-version=2.0"),
        key,
        body,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
}

async fn job_status(s: &TestServer, key: &str, id: &str) -> Value {
    let (status, job) = bearer(
        s,
        Method::GET,
        &format!("{SERVICE}/jobs/{id}?api-version=2.0"),
        key,
        None,
    )
    .await;
    assert_eq!(status, 200, "{job}");
    job
}

async fn running_tasks(s: &TestServer) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks WHERE state = 'running'")
        .fetch_one(&s.db().await)
        .await
        .unwrap()
}

/// Submits `body`, starts the job and waits for it to end; returns (id, final status).
async fn run_job(s: &TestServer, key: &str, body: Value) -> (String, Value) {
    let id = submit(s, key, body).await;
    let job = job_status(s, key, &id).await;
    assert_eq!(job["StatusCode"], "NotStarted", "{job}");
    // Clients start with no body at all (C#), `{}` (Python) or `""`.
    start(s, key, &id, None).await;
    let done = wait_for("the BES job to end", || async {
        let job = job_status(s, key, &id).await;
        matches!(
            job["StatusCode"].as_str(),
            Some("Finished" | "Failed" | "Cancelled")
        )
        .then_some(job)
    })
    .await;
    (id, done)
}

/// The seed's request shape, with the emulator's connection strings.
fn seed_request(input: &str, output: &str, pool: Option<&str>) -> Value {
    let mut body = json!({
        "Input": {"ConnectionString": connection_string(), "BaseLocation": null, "RelativeLocation": input, "SasBlobToken": null},
        "GlobalParameters": {},
        "Outputs": {"output1": {"ConnectionString": connection_string(), "BaseLocation": null, "RelativeLocation": output, "SasBlobToken": null}},
    });
    if let Some(pool) = pool {
        body["AzureBatchPoolId"] = json!(pool);
    }
    body
}

/// Downloads a result the way the generated BES samples do: BaseLocation + RelativeLocation +
/// SasBlobToken, a plain GET with no credentials but the SAS.
async fn download_result(result: &Value) -> String {
    let url = format!(
        "{}{}{}",
        result["BaseLocation"].as_str().unwrap(),
        result["RelativeLocation"].as_str().unwrap(),
        result["SasBlobToken"].as_str().unwrap()
    );
    let resp = reqwest::get(&url).await.unwrap();
    assert_eq!(resp.status(), 200, "GET {url}");
    resp.text().await.unwrap()
}

async fn check_sorted_job(s: &TestServer, key: &str, pool: Option<&str>) {
    let run = uuid::Uuid::new_v4().simple().to_string();
    put_blob(&format!("testint/{run}.csv"), "c,3\na,1\nb,2\n").await;
    let output = format!("testintoutput/{run}/testint_results.csv");
    let (id, job) = run_job(
        s,
        key,
        seed_request(&format!("testint/{run}.csv"), &output, pool),
    )
    .await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    assert_eq!(get_blob(&output).await.as_deref(), Some("a,1\nb,2\nc,3\n"));
    let result = &job["Results"]["output1"];
    assert_eq!(result["RelativeLocation"], json!(output), "{job}");
    assert!(
        result["ConnectionString"].is_null(),
        "results never echo the account key"
    );
    assert_eq!(download_result(result).await, "a,1\nb,2\nc,3\n");
    // The Batch File Conventions: logs and outputs in the job's container.
    let container = storage::job_container(&id);
    assert_eq!(container, format!("job-{id}"));
    assert_eq!(
        get_blob(&format!("{container}/score/$TaskLog/stdout.txt"))
            .await
            .as_deref(),
        Some("sorted rows\n")
    );
    assert_eq!(
        get_blob(&format!("{container}/score/$TaskOutput/output1.csv"))
            .await
            .as_deref(),
        Some("a,1\nb,2\nc,3\n")
    );
}

/// A Pool Service pool tied to the service's plan runs the job; resized to 0 it stops metering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bes_job_runs_on_a_pool_service_pool_and_the_pool_bills_to_the_plan() {
    let s = bes_server(Rt::Docker, &[]).await;
    let key = register_sorter(&s, "plan-dedicated").await;
    let ps = pool_service_key(&s).await;
    let swagger = format!("{}{SERVICE}/swagger.json", s.base);
    let (status, pool) = bearer(
        &s,
        Method::POST,
        "/poolservice/pools",
        &ps,
        Some(json!({"NumberOfVMs": 1, "VmSize": "standard_a1", "SwaggerLocation": swagger})),
    )
    .await;
    assert_eq!(status, 201, "{pool}");
    let pool_id = pool["Id"].as_str().unwrap().to_string();
    assert_eq!(pool_id.len(), 32, "a made-up id is 32 hex digits: {pool}");
    assert_eq!(pool["BillingPlan"], "plan-dedicated");
    // An ordinary pool underneath: the Batch API shows it.
    let (status, batch_pool) = s.get(&format!("/pools/{pool_id}")).await;
    assert_eq!(status, 200, "{batch_pool}");

    check_sorted_job(&s, &key, Some(&pool_id)).await;
    let (_, jobs) = s.get("/jobs").await;
    assert_eq!(
        jobs["value"].as_array().unwrap().len(),
        1,
        "the BES job ran as a Batch job of the pool's account: {jobs}"
    );

    let (status, _) = bearer(
        &s,
        Method::POST,
        &format!("/poolservice/pools/{pool_id}/resize"),
        &ps,
        Some(json!({"NumberOfVMs": 0})),
    )
    .await;
    assert_eq!(status, 202);
    wait_for("the pool to have no VMs", || async {
        let (_, p) = bearer(
            &s,
            Method::GET,
            &format!("/poolservice/pools/{pool_id}"),
            &ps,
            None,
        )
        .await;
        (p["CurrentVMs"] == 0 && p["AllocationState"] == "Steady").then_some(())
    })
    .await;
    let range = "startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z";
    let plan_hours = |report: &Value| {
        report["value"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["billingPlan"] == "plan-dedicated")
            .map(|p| p["computeHours"].as_f64().unwrap())
    };
    let (_, first) = s.get(&format!("/billing/plans?{range}")).await;
    let hours = plan_hours(&first).unwrap_or_else(|| panic!("{first}"));
    assert!(hours > 0.0, "{first}");
    let later = Utc::now() + Duration::milliseconds(20);
    wait_for("the clock to move on", || async {
        (Utc::now() > later).then_some(())
    })
    .await;
    let (_, second) = s.get(&format!("/billing/plans?{range}")).await;
    assert_eq!(
        plan_hours(&second),
        Some(hours),
        "a pool of 0 VMs costs nothing more"
    );

    // The job's share: the slot-seconds of its task, on the plan.
    let (_, jobs) = s.get(&format!("/billing/jobs?{range}")).await;
    let job = &jobs["value"][0];
    assert_eq!(job["billingPlan"], "plan-dedicated", "{jobs}");
    assert!(
        job["computeHours"].as_f64().unwrap() > 0.0
            && job["computeHours"].as_f64().unwrap() <= hours,
        "{jobs}"
    );
    // And as CSV.
    let resp = s
        .http
        .get(format!("{}/billing/jobs?{range}&format=csv", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = resp.text().await.unwrap();
    assert!(
        csv.starts_with("jobId,poolId,billingPlan,slotHours,computeHours,taskAttempts,cost\n"),
        "{csv}"
    );
    assert!(
        csv.contains(&format!(",{pool_id},plan-dedicated,")),
        "{csv}"
    );

    let (status, _) = bearer(
        &s,
        Method::DELETE,
        &format!("/poolservice/pools/{pool_id}"),
        &ps,
        None,
    )
    .await;
    assert_eq!(status, 202);
}

/// Without AzureBatchPoolId the job runs in the shared classic environment, first in first out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_pool_bes_jobs_run_in_the_classic_environment_in_order() {
    let s = bes_server(Rt::Local, &["--classic-concurrency", "1"]).await;
    let key = register_sorter(&s, "plan-classic").await;
    check_sorted_job(&s, &key, None).await;

    // Three more at once, one at a time: they end in the order they were started.
    let mut ids = Vec::new();
    for n in 0..3 {
        put_blob(&format!("testint/fifo-{n}.csv"), &format!("{n}\n")).await;
        let body = seed_request(
            &format!("testint/fifo-{n}.csv"),
            &format!("out/fifo-{n}.csv"),
            None,
        );
        ids.push(submit(&s, &key, body).await);
    }
    for id in &ids {
        start(&s, &key, id, Some(json!({}))).await;
    }
    let ends = wait_for("the three jobs to finish", || async {
        let mut ends = Vec::new();
        for id in &ids {
            let job = job_status(&s, &key, id).await;
            if job["StatusCode"] != "Finished" {
                return None;
            }
            ends.push(job["EndTime"].as_str().unwrap().to_string());
        }
        Some(ends)
    })
    .await;
    let mut sorted = ends.clone();
    sorted.sort();
    assert_eq!(ends, sorted, "first in, first out");
    for n in 0..3 {
        assert_eq!(
            get_blob(&format!("out/fifo-{n}.csv")).await,
            Some(format!("{n}\n"))
        );
    }
    let (_, list) = bearer(
        &s,
        Method::GET,
        &format!("{SERVICE}/jobs?api-version=2.0"),
        &key,
        None,
    )
    .await;
    assert_eq!(list.as_array().unwrap().len(), 4, "{list}");
    // The classic environment's Batch jobs are not the account's, but their hours are, on the
    // service's plan.
    let (_, jobs) = s.get("/jobs").await;
    assert_eq!(jobs["value"], json!([]));
    let (_, billed) = s
        .get("/billing/jobs?startTime=2026-01-01T00:00:00Z&endTime=2099-01-01T00:00:00Z")
        .await;
    let billed: Vec<Value> = billed["value"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["idle"] != true)
        .cloned()
        .collect();
    assert_eq!(billed.len(), 4, "{billed:?}");
    for id in &ids {
        let row = billed
            .iter()
            .find(|r| r["jobId"] == json!(id))
            .unwrap_or_else(|| panic!("{id} in {billed:?}"));
        assert_eq!(row["billingPlan"], "plan-classic");
        assert!(row["computeHours"].as_f64().unwrap() > 0.0);
    }
    // Finished, their Batch jobs go (the internal account keeps no lifetime statistics), and
    // the account's own jobs are deleted after them as ever.
    let db = s.db().await;
    wait_for("the classic environment's Batch jobs to go", || async {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE account = '.classic'")
            .fetch_one(&db)
            .await
            .unwrap();
        (left == 0).then_some(())
    })
    .await;
    s.job_on("own", "nowhere").await;
    assert_eq!(s.delete("/jobs/own").await.0, 202);
    wait_for("the account's job to be deleted", || async {
        (s.get("/jobs/own").await.0 == 404).then_some(())
    })
    .await;
}

/// A failing command fails the job with its exit code; DELETE cancels a running one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_and_running_jobs_can_be_cancelled() {
    let s = bes_server(Rt::Local, &[]).await;
    let (status, body) = put(
        &s,
        SERVICE,
        &json!({
            "Command": "if [ {param:Mode} = fail ]; then echo broken >&2; exit 3; fi; sleep 43030",
            "GlobalParameters": [{"Name": "Mode", "Required": true}],
            "BillingPlan": "p",
        }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let key = body["PrimaryKey"].as_str().unwrap().to_string();
    let (_, failed) = run_job(&s, &key, json!({"GlobalParameters": {"Mode": "fail"}})).await;
    assert_eq!(failed["StatusCode"], "Failed", "{failed}");
    let details = failed["Details"].as_str().unwrap();
    assert!(
        details.contains("code 3") && details.contains("broken"),
        "{details}"
    );

    let id = submit(&s, &key, json!({"GlobalParameters": {"Mode": "slow"}})).await;
    start(&s, &key, &id, None).await;
    wait_for("the task to run", || async {
        let running = running_tasks(&s).await;
        (running == 1).then_some(())
    })
    .await;
    let (status, _) = bearer(
        &s,
        Method::DELETE,
        &format!("{SERVICE}/jobs/{id}?api-version=2.0"),
        &key,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let job = job_status(&s, &key, &id).await;
    assert_eq!(job["StatusCode"], "Cancelled", "{job}");
    wait_for("the cancelled job's task to be gone", || async {
        let left = running_tasks(&s).await;
        (left == 0).then_some(())
    })
    .await;
    wait_for("the cancelled job's process to be killed", || async {
        (!s.process_running("sleep 43030").await).then_some(())
    })
    .await;
    // DELETE of an ended job is fine and changes nothing.
    let (status, _) = bearer(
        &s,
        Method::DELETE,
        &format!("{SERVICE}/jobs/{id}?api-version=2.0"),
        &key,
        None,
    )
    .await;
    assert_eq!(status, 200);
}

fn detail(body: &Value) -> &str {
    body["error"]["details"][0]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not BES's error body: {body}"))
}

/// Bad input gets BES's error body with the documented detail code, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bes_and_pool_service_requests_are_refused_with_bes_error_codes() {
    let s = bes_server(Rt::Local, &[]).await;
    let key = register_sorter(&s, "plan-x").await;
    put_blob("testint/bad-input.csv", "x\n").await;
    let jobs = format!("{SERVICE}/jobs?api-version=2.0");
    let good = seed_request("testint/bad-input.csv", "out/x.csv", None);

    let (status, body) = bearer(&s, Method::POST, &jobs, "wrong", Some(good.clone())).await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::UNAUTHORIZED, "ScoreRequestUnauthorized")
    );
    assert_eq!(body["error"]["code"], "Unauthorized");

    let mut both = good.clone();
    both["Inputs"] = json!({"input1": good["Input"].clone()});
    let cases = [
        (both, "DuplicateInputInBatchCall"),
        (
            json!({"Inputs": {"input2": good["Input"].clone()}}),
            "InvalidInputNames",
        ),
        (json!({}), "BatchJobInputsNotSpecified"),
        (
            {
                let mut b = good.clone();
                b["GlobalParameters"] = json!({"Nope": "1"});
                b
            },
            "UnexpectedParameter",
        ),
        (
            {
                let mut b = good.clone();
                b["Input"]["ConnectionString"] = json!("AccountName=devstoreaccount1");
                b
            },
            "InvalidBlobConnectionString",
        ),
        (
            {
                let mut b = good.clone();
                b["Input"]["RelativeLocation"] = json!("testint/missing.csv");
                b
            },
            "InvalidBlob",
        ),
        (
            {
                let mut b = good.clone();
                b["Input"]["ConnectionString"] =
                    json!(connection_string().replace(AZURITE_KEY, "d3Jvbmcga2V5"));
                b
            },
            "InvalidBlobConnectionString",
        ),
        (
            {
                let mut b = good.clone();
                b["Outputs"] = json!({"Output1": good["Outputs"]["output1"].clone()});
                b
            },
            "InvalidOutputOverrideName",
        ),
        (
            {
                let mut b = good.clone();
                b["Outputs"]["output1"]["RelativeLocation"] = json!("out/x.txt");
                b
            },
            "InvalidBlobExtension",
        ),
        (
            {
                let mut b = good.clone();
                b["AzureBatchPoolId"] = json!("8dfc151b0d3e446497b845f3b29ef53b");
                b
            },
            "PoolNotFound",
        ),
        (json!("not an object"), "RequestBodyInvalid"),
    ];
    for (body, code) in cases {
        let (status, answer) = bearer(&s, Method::POST, &jobs, &key, Some(body.clone())).await;
        assert_eq!(
            (status, detail(&answer)),
            (StatusCode::BAD_REQUEST, code),
            "{body} -> {answer}"
        );
    }
    let (status, body) = bearer(
        &s,
        Method::POST,
        &format!("{SERVICE}/jobs?api-version=1.0"),
        &key,
        Some(good.clone()),
    )
    .await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "BadVersionCall")
    );

    // A required parameter without a default.
    let (status, _) = put(&s, "/subscriptions/s/services/needs", &json!({
        "Command": "echo {param:Seed}", "GlobalParameters": [{"Name": "Seed", "Required": true}], "BillingPlan": "p"})).await;
    assert_eq!(status, 201);
    let needs_key: String =
        sqlx::query_scalar("SELECT primary_key FROM services WHERE id = 'needs'")
            .fetch_one(&s.db().await)
            .await
            .unwrap();
    let (status, body) = bearer(
        &s,
        Method::POST,
        "/subscriptions/s/services/needs/jobs",
        &needs_key,
        Some(json!({"GlobalParameters": {}})),
    )
    .await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "MissingRequiredGlobalParameters")
    );
    // The same service through the classic workspace path, and a number as a parameter value.
    let (status, _) = bearer(
        &s,
        Method::POST,
        "/workspaces/s/services/needs/jobs?api-version=2.0",
        &needs_key,
        Some(json!({"GlobalParameters": {"Seed": 12345}})),
    )
    .await;
    assert_eq!(status, 200);

    // Nothing was made by the refused requests.
    let (_, list) = bearer(&s, Method::GET, &jobs, &key, None).await;
    assert_eq!(list, json!([]));

    // Starting twice.
    let (_, id) = bearer(&s, Method::POST, &jobs, &key, Some(good.clone())).await;
    let id = id.as_str().unwrap();
    let start = format!("{SERVICE}/jobs/{id}/start?api-version=2.0");
    assert_eq!(bearer(&s, Method::POST, &start, &key, None).await.0, 200);
    let (status, body) = bearer(&s, Method::POST, &start, &key, None).await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "CannotStartJob"),
        "{body}"
    );
    assert_eq!(body["error"]["code"], "InvalidOperation");

    // Services: a bad definition names what was wrong.
    let (status, body) = put(
        &s,
        "/subscriptions/s/services/bad",
        &json!({"Command": "cat {in:nope}", "BillingPlan": "p"}),
    )
    .await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "InvalidServiceDefinition"),
        "{body}"
    );
    assert_eq!(body["error"]["details"][0]["target"], "Command");

    // The Pool Service: its own key, a known swagger.json, quotas.
    let ps = pool_service_key(&s).await;
    let swagger = format!("{}{SERVICE}/swagger.json", s.base);
    let (status, body) = bearer(
        &s,
        Method::POST,
        "/poolservice/pools",
        &key,
        Some(json!({"NumberOfVMs": 0, "SwaggerLocation": swagger})),
    )
    .await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::UNAUTHORIZED, "ScoreRequestUnauthorized"),
        "a service key is not the pool service key"
    );
    let (status, body) = bearer(&s, Method::POST, "/poolservice/pools", &ps, Some(json!({"NumberOfVMs": 0, "SwaggerLocation": format!("{}/subscriptions/s/services/none/swagger.json", s.base)}))).await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "InvalidSwaggerLocation")
    );
    account_cmd(
        &s,
        &[
            "quota",
            "batchpool",
            "--max-pools",
            "1",
            "--max-vms-per-pool",
            "3",
        ],
    );
    // In order: each request sees the pools the ones before it made.
    let steps = [
        (
            "/poolservice/pools",
            json!({"NumberOfVMs": 4, "SwaggerLocation": swagger}),
            StatusCode::CONFLICT,
            "MaxVMsPerPoolExceeded",
        ),
        (
            "/poolservice/pools",
            json!({"Id": "first", "NumberOfVMs": 0, "SwaggerLocation": swagger}),
            StatusCode::CREATED,
            "",
        ),
        (
            "/poolservice/pools",
            json!({"NumberOfVMs": 0, "SwaggerLocation": swagger}),
            StatusCode::CONFLICT,
            "MaxPoolsExceeded",
        ),
        (
            "/poolservice/pools/first/resize",
            json!({"NumberOfVMs": 9}),
            StatusCode::CONFLICT,
            "MaxVMsPerPoolExceeded",
        ),
    ];
    for (path, request, status, code) in steps {
        let (got, body) = bearer(&s, Method::POST, path, &ps, Some(request.clone())).await;
        let got_code = if got.is_success() { "" } else { detail(&body) };
        assert_eq!(
            (got, got_code),
            (status, code),
            "POST {path} {request}: {body}"
        );
    }
    let (_, list) = bearer(&s, Method::GET, "/poolservice/pools", &ps, None).await;
    assert_eq!(list["value"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["value"][0]["NumberOfVMs"], 0);
}

/// The seed's billing examples, per plan: a plan is debited 48 compute hours for 2 VMs over 24
/// hours and for 4 VMs over 12, whatever ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_plans_are_debited_per_vm_hour_as_in_the_seed() {
    let s = bes_server(Rt::Local, &[]).await;
    let db = s.db().await;
    let day = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
    for (pool, plan, count, hours) in [
        ("two", "plan-a", 2, 24),
        ("four", "plan-b", 4, 12),
        ("also-a", "plan-a", 1, 1),
    ] {
        for i in 0..count {
            sqlx::query(
                "INSERT INTO usage_records (account, pool_pk, pool_id, node_id, vm_size, vcpus, billing_plan, started_at, ended_at) \
                 VALUES ('batchpool', 0, $1, $2, 'standard_d2_v3', 2, $3, $4, $5)",
            )
            .bind(pool)
            .bind(format!("{pool}-{i}"))
            .bind(plan)
            .bind(day)
            .bind(day + Duration::hours(hours))
            .execute(&db)
            .await
            .unwrap();
        }
    }
    let (status, report) = s
        .get("/billing/plans?startTime=2026-03-01T00:00:00Z&endTime=2026-03-03T00:00:00Z")
        .await;
    assert_eq!(status, 200, "{report}");
    let plan = |name: &str| {
        report["value"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["billingPlan"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(plan("plan-a")["computeHours"], json!(49.0));
    assert_eq!(plan("plan-a")["pools"].as_array().unwrap().len(), 2);
    assert_eq!(plan("plan-b")["computeHours"], json!(48.0));
    let csv = s
        .http
        .get(format!(
            "{}/billing/plans?startTime=2026-03-01T00:00:00Z&endTime=2026-03-03T00:00:00Z",
            s.base
        ))
        .header("accept", "text/csv")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Every hour here is a dedicated node's, and none is priced.
    assert_eq!(
        csv,
        "billingPlan,computeHours,dedicatedComputeHours,lowPriorityComputeHours,cost,unpricedComputeHours\nplan-a,49.0,49.0,0.0,0.0,49.0\nplan-b,48.0,48.0,0.0,0.0,48.0\n"
    );
}

/// file:// locations work under a configured storage root and nowhere else; with no output
/// override the output lands in the server's own storage, where the results point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_locations_are_read_and_written_under_storage_roots_only() {
    let root = tempfile::tempdir().unwrap();
    let root_url = url::Url::from_directory_path(root.path())
        .unwrap()
        .to_string();
    let s = bes_server(Rt::Local, &["--storage-root", &root_url]).await;
    let key = register_sorter(&s, "plan-files").await;
    std::fs::create_dir_all(root.path().join("in")).unwrap();
    std::fs::write(root.path().join("in/data.csv"), "2\n1\n").unwrap();
    let input = json!({"BaseLocation": root_url, "RelativeLocation": "in/data.csv"});
    let (_, job) = run_job(&s, &key, json!({
        "Inputs": {"input1": input},
        "Outputs": {"output1": {"BaseLocation": root_url, "RelativeLocation": "out/sorted.csv"}},
    }))
    .await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    assert_eq!(
        std::fs::read_to_string(root.path().join("out/sorted.csv")).unwrap(),
        "1\n2\n"
    );
    assert_eq!(
        job["Results"]["output1"]["RelativeLocation"],
        "out/sorted.csv"
    );

    // No override: the server's storage, under the conventions' container.
    let (id, job) = run_job(&s, &key, json!({"Inputs": {"input1": input}})).await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    let result = &job["Results"]["output1"];
    assert_eq!(
        result["RelativeLocation"],
        format!("job-{id}/score/$TaskOutput/output1.csv"),
        "{job}"
    );
    let path = url::Url::parse(result["BaseLocation"].as_str().unwrap())
        .unwrap()
        .to_file_path()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(path.join(result["RelativeLocation"].as_str().unwrap())).unwrap(),
        "1\n2\n"
    );

    for (base, rel) in [
        ("file:///etc/", "passwd"),
        (root_url.as_str(), "../escape.csv"),
    ] {
        let (status, body) = bearer(
            &s,
            Method::POST,
            &format!("{SERVICE}/jobs?api-version=2.0"),
            &key,
            Some(json!({"Inputs": {"input1": {"BaseLocation": base, "RelativeLocation": rel}}})),
        )
        .await;
        assert_eq!(
            (status, detail(&body)),
            (StatusCode::BAD_REQUEST, "InvalidBlob"),
            "{base}{rel}: {body}"
        );
    }
}

/// A started job survives the server being killed mid-run: the restarted server finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_bes_job_survives_a_server_restart() {
    let mut s = bes_server(Rt::Local, &[]).await;
    let (status, body) = put(
        &s,
        SERVICE,
        &json!({
            "Command": "sleep 1; sort {in:input1} > {out:output1}",
            "Inputs": [{"Name": "input1"}], "Outputs": [{"Name": "output1"}], "BillingPlan": "p",
        }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let key = body["PrimaryKey"].as_str().unwrap().to_string();
    put_blob("testint/restart.csv", "b\na\n").await;
    let id = submit(
        &s,
        &key,
        seed_request("testint/restart.csv", "out/restart.csv", None),
    )
    .await;
    start(&s, &key, &id, None).await;
    wait_for("the task to run", || async {
        let running = running_tasks(&s).await;
        (running == 1).then_some(())
    })
    .await;
    s.kill().await;
    s.launch().await;
    let job = wait_for("the BES job to finish after the restart", || async {
        let job = job_status(&s, &key, &id).await;
        matches!(job["StatusCode"].as_str(), Some("Finished" | "Failed")).then_some(job)
    })
    .await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    assert_eq!(get_blob("out/restart.csv").await.as_deref(), Some("a\nb\n"));
}

/// s3:// locations, under a storage root, with the server's AWS_* settings (an S3 emulator here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_locations_are_read_and_written() {
    let endpoint = std::env::var("BATCHPOOL_TEST_S3")
        .expect("BATCHPOOL_TEST_S3: run the tests through scripts/test.sh (it starts s3rver)");
    for (k, v) in [
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "S3RVER"),
        ("AWS_SECRET_ACCESS_KEY", "S3RVER"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ALLOW_HTTP", "true"),
    ] {
        // The server process inherits them; no other test reads them.
        std::env::set_var(k, v);
    }
    let run = uuid::Uuid::new_v4().simple().to_string();
    let root = format!("s3://batchpool-test/{run}/");
    let s = bes_server(Rt::Local, &["--storage-root", &root]).await;
    let key = register_sorter(&s, "plan-s3").await;
    let at = |rel: &str| DataReference {
        base_location: Some(root.clone()),
        relative_location: Some(rel.into()),
        ..Default::default()
    };
    let roots = Roots(vec![root.clone()]);
    let input = storage::resolve(&at("in/data.csv"), &roots).unwrap();
    input
        .store
        .put(&input.path, PutPayload::from(b"z\ny\n".to_vec()))
        .await
        .unwrap();

    let (_, job) = run_job(
        &s,
        &key,
        json!({
            "Inputs": {"input1": at("in/data.csv")},
            "Outputs": {"output1": at("out/sorted.csv")},
        }),
    )
    .await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    let output = storage::resolve(&at("out/sorted.csv"), &roots).unwrap();
    let bytes = output
        .store
        .get(&output.path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"y\nz\n");
    assert_eq!(job["Results"]["output1"]["BaseLocation"], json!(root));

    let (status, body) = bearer(&s, Method::POST, &format!("{SERVICE}/jobs?api-version=2.0"), &key,
        Some(json!({"Inputs": {"input1": {"BaseLocation": "s3://batchpool-test/elsewhere/", "RelativeLocation": "x.csv"}}}))).await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "InvalidBlob"),
        "outside the root: {body}"
    );
    let (status, body) = bearer(
        &s,
        Method::POST,
        &format!("{SERVICE}/jobs?api-version=2.0"),
        &key,
        Some(json!({"Inputs": {"input1": at("in/missing.csv")}})),
    )
    .await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "InvalidBlob"),
        "a missing object: {body}"
    );
}

/// A large output goes up in parts; a job whose pool is deleted under it fails and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_outputs_are_uploaded_and_a_deleted_pool_fails_its_jobs() {
    let s = bes_server(Rt::Local, &[]).await;
    let (status, body) = put(
        &s,
        SERVICE,
        &json!({
            "Command": "head -c 20000000 /dev/zero > {out:output1}",
            "Outputs": [{"Name": "output1", "Extension": ".bin"}], "BillingPlan": "p",
        }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let key = body["PrimaryKey"].as_str().unwrap().to_string();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let output = format!("out/{run}/big.bin");
    let (_, job) = run_job(
        &s,
        &key,
        json!({"Outputs": {"output1": reference(&output)}}),
    )
    .await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    let b = storage::resolve(&reference(&output), &Roots::default()).unwrap();
    assert_eq!(b.store.head(&b.path).await.unwrap().size, 20_000_000);

    // A pool with no nodes keeps the job queued; deleting the pool ends it.
    assert_eq!(
        s.post(
            "/pools",
            &json!({"id": "empty", "vmSize": "standard_a1", "targetDedicatedNodes": 0})
        )
        .await
        .0,
        201
    );
    let id = submit(&s, &key, json!({"AzureBatchPoolId": "empty"})).await;
    start(&s, &key, &id, None).await;
    wait_for("the job's task to be queued in the pool", || async {
        let (status, _) = s.get(&format!("/jobs/{id}/tasks/score")).await;
        (status == 200).then_some(())
    })
    .await;
    let queued = job_status(&s, &key, &id).await;
    assert_eq!(
        queued["StatusCode"], "Running",
        "queued in its pool: {queued}"
    );
    assert_eq!(s.delete("/pools/empty").await.0, 202);
    let failed = wait_for("the job to fail", || async {
        let job = job_status(&s, &key, &id).await;
        (job["StatusCode"] == "Failed").then_some(job)
    })
    .await;
    assert!(
        failed["Details"]
            .as_str()
            .unwrap()
            .contains("\"empty\" was deleted"),
        "{failed}"
    );
}

/// An input named by BaseLocation + RelativeLocation + SasBlobToken is read with the SAS alone; a
/// SAS the storage refuses is InvalidBlob at submit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sas_inputs_are_read_with_their_token() {
    let s = bes_server(Rt::Local, &[]).await;
    let key = register_sorter(&s, "plan-sas").await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let relative = format!("testint/{run}-sas.csv");
    put_blob(&relative, "2\n1\n").await;
    let account = storage::parse_connection_string(&connection_string()).unwrap();
    let (container, name) = relative.split_once('/').unwrap();
    let sas = storage::read_sas(&account, container, name, Utc::now() + Duration::hours(1));
    let input = |token: &str| json!({"BaseLocation": format!("{}/", azurite()), "RelativeLocation": relative, "SasBlobToken": token});
    let output = format!("out/{run}-sas.csv");
    let (_, job) = run_job(
        &s,
        &key,
        json!({"Inputs": {"input1": input(&sas)}, "Outputs": {"output1": reference(&output)}}),
    )
    .await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    assert_eq!(get_blob(&output).await.as_deref(), Some("1\n2\n"));

    let forged = sas.replace("sig=", "sig=AAAA");
    let (status, body) = bearer(
        &s,
        Method::POST,
        &format!("{SERVICE}/jobs?api-version=2.0"),
        &key,
        Some(json!({"Inputs": {"input1": input(&forged)}})),
    )
    .await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "InvalidBlob"),
        "{body}"
    );
}

/// On Docker, a classic job runs in a node of its service's image (a classic pool per image).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_jobs_run_in_their_services_image() {
    let s = bes_server(Rt::Docker, &[]).await;
    let image = "batchpool-test-node:bes";
    run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_batchpool")).args([
            "build-node-image",
            "--tag",
            image,
        ]),
    );
    let (status, body) = put(
        &s,
        SERVICE,
        &json!({
            "Command": "echo done > {out:output1}", "Image": image,
            "Outputs": [{"Name": "output1", "Extension": ".txt"}], "BillingPlan": "p",
        }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let key = body["PrimaryKey"].as_str().unwrap().to_string();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let output = format!("out/{run}/image.txt");
    let (_, job) = run_job(
        &s,
        &key,
        json!({"Outputs": {"output1": reference(&output)}}),
    )
    .await;
    assert_eq!(job["StatusCode"], "Finished", "{job}");
    assert_eq!(get_blob(&output).await.as_deref(), Some("done\n"));
    let classic: Vec<Value> = common::docker_containers(&s.server_id().await)
        .into_iter()
        .filter(|c| c["Config"]["Labels"]["batchpool.account"] == ".classic")
        .collect();
    assert!(!classic.is_empty(), "a classic node container");
    for c in &classic {
        assert_eq!(c["Config"]["Image"], image, "{}", c["Name"]);
    }
}

/// A command cannot make the server (root on the host) upload a host file: an output that is a
/// link is refused, never followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_that_links_out_of_the_task_is_not_uploaded() {
    let s = bes_server(Rt::Local, &[]).await;
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret"), "canary-secret").unwrap();
    let command = format!("ln -s {}/secret {{out:output1}}", host.path().display());
    let (status, body) = put(
        &s,
        SERVICE,
        &json!({
            "Command": command,
            "Outputs": [{"Name": "output1", "Extension": ".txt"}], "BillingPlan": "p",
        }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let key = body["PrimaryKey"].as_str().unwrap().to_string();
    let output = format!("out/{}/leak.txt", uuid::Uuid::new_v4().simple());
    let (_, job) = run_job(
        &s,
        &key,
        json!({"Outputs": {"output1": reference(&output)}}),
    )
    .await;
    assert_eq!(job["StatusCode"], "Failed", "{job}");
    assert_eq!(get_blob(&output).await, None, "the host file was uploaded");
}

/// Without --allow-local-urls, a BES job may not make the server reach its own host: inputs and
/// outputs on a loopback storage endpoint are refused when the job is submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_on_the_server_s_own_host_is_refused_by_default() {
    let s = TestServer::start(Rt::Local).await;
    let key = register_sorter(&s, "plan-local").await;
    put_blob("testint/local-input.csv", "2\n1\n").await;
    let jobs = format!("{SERVICE}/jobs?api-version=2.0");
    let request = seed_request("testint/local-input.csv", "out/local.csv", None);
    let (status, body) = bearer(&s, Method::POST, &jobs, &key, Some(request)).await;
    assert_eq!(
        (status, detail(&body)),
        (StatusCode::BAD_REQUEST, "InvalidBlob"),
        "{body}"
    );
    assert!(body.to_string().contains("--allow-local-urls"), "{body}");
}
