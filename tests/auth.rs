//! Shared Key authentication, accounts, and the wire details an SDK checks.

#[macro_use]
mod common;

use common::{account_cmd, key_line, Rt, TestServer};
use serde_json::{json, Value};

async fn raw(s: &TestServer, headers: &[(&str, String)]) -> (u16, Value) {
    let mut req = reqwest::Client::new().get(format!("{}/pools?api-version=2025-06-01", s.base));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_must_be_signed_by_a_known_account_with_a_current_date() {
    let s = TestServer::start(Rt::Local).await;
    assert_eq!(
        s.post("/pools", &json!({"id": "secret", "vmSize": "standard_a1"}))
            .await
            .0,
        201
    );
    let now = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let stale = (chrono::Utc::now() - chrono::Duration::minutes(20))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();

    let (status, body) = raw(&s, &[]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("AuthenticationFailed")),
        "{body}"
    );
    assert!(body.get("value").is_none(), "no data without a key");
    let (status, body) = raw(
        &s,
        &[
            ("ocp-date", now.clone()),
            ("authorization", "SharedKey batchpool:AAAA".into()),
        ],
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("AuthenticationFailed"))
    );
    let (status, _) = raw(
        &s,
        &[
            ("ocp-date", now.clone()),
            ("authorization", "SharedKey nobody:AAAA".into()),
        ],
    )
    .await;
    assert_eq!(status, 403);

    // A correctly signed request with a date 20 minutes old is refused too.
    let mut req = reqwest::Client::new()
        .get(format!("{}/pools?api-version=2025-06-01", s.base))
        .build()
        .unwrap();
    req.headers_mut().insert("ocp-date", stale.parse().unwrap());
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let uri: http::Uri = "/pools?api-version=2025-06-01".parse().unwrap();
    let sig = batchpool::api::auth::signature(
        &key,
        &batchpool::api::auth::string_to_sign(req.method(), &uri, req.headers(), &account),
    )
    .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("SharedKey {account}:{sig}").parse().unwrap(),
    );
    let resp = reqwest::Client::new().execute(req).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert!(resp.text().await.unwrap().contains("15 minutes"));

    // /health is open.
    assert_eq!(
        reqwest::get(format!("{}/health", s.base))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_are_isolated_and_keys_rotate() {
    let s = TestServer::start(Rt::Local).await;
    assert_eq!(
        s.post("/pools", &json!({"id": "mine", "vmSize": "standard_a1"}))
            .await
            .0,
        201
    );
    assert_eq!(
        s.post(
            "/jobs",
            &json!({"id": "myjob", "poolInfo": {"poolId": "mine"}})
        )
        .await
        .0,
        201
    );

    let created = account_cmd(&s, &["create", "other"]);
    let other_primary = key_line(&created, "primary key:").to_string();
    let other_secondary = key_line(&created, "secondary key:").to_string();
    let (own, own_key) = s.http.credentials.lock().unwrap().clone().unwrap();
    *s.http.credentials.lock().unwrap() = Some(("other".into(), other_primary.clone()));
    assert_eq!(
        s.get("/pools/mine").await.0,
        404,
        "another account's pool does not exist for this one"
    );
    assert_eq!(s.get("/jobs/myjob").await.0, 404);
    assert_eq!(s.get("/pools").await.1["value"], json!([]));
    // The same id is free in another account.
    assert_eq!(
        s.post("/pools", &json!({"id": "mine", "vmSize": "standard_a2_v2"}))
            .await
            .0,
        201
    );

    // Rotation: the old primary stops working, the secondary keeps working meanwhile.
    let rotated = account_cmd(&s, &["rotate", "other", "--key", "primary"]);
    let new_primary = rotated.split_whitespace().last().unwrap().to_string();
    assert_ne!(new_primary, other_primary);
    assert_eq!(s.get("/pools").await.0, 403, "the old key is refused");
    *s.http.credentials.lock().unwrap() = Some(("other".into(), other_secondary));
    assert_eq!(s.get("/pools/mine").await.1["vmSize"], "standard_a2_v2");
    *s.http.credentials.lock().unwrap() = Some(("other".into(), new_primary));
    assert_eq!(s.get("/pools").await.0, 200);

    *s.http.credentials.lock().unwrap() = Some((own, own_key));
    assert_eq!(s.get("/pools/mine").await.1["vmSize"], "standard_a1");
    assert!(account_cmd(&s, &["list"]).lines().collect::<Vec<_>>() == vec!["batchpool", "other"]);
    // Keys never reach the server's log.
    assert!(!s.log_tail().contains(&other_primary));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_details_the_sdks_rely_on() {
    let s = TestServer::start(Rt::Local).await;
    assert_eq!(
        s.post("/pools", &json!({"id": "w", "vmSize": "standard_a1"}))
            .await
            .0,
        201
    );

    let (status, body) = s.get("/pools?api-version=2019-01-01").await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (400, Some("InvalidApiVersionParameter"))
    );
    assert_eq!(s.get("/pools?api-version=2024-02-01.19.0").await.0, 200);

    let resp = s
        .http
        .get(format!("{}/pools/w?api-version=2025-06-01", s.base))
        .header("client-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["client-request-id"], "abc-123");
    assert!(resp.headers().contains_key("request-id"));
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    let last_modified = resp.headers()["last-modified"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        chrono::DateTime::parse_from_rfc2822(&last_modified).is_ok(),
        "RFC 1123: {last_modified}"
    );

    // Conditional requests, with the etag quoted as the SDK sends it.
    let quoted = format!("\"{etag}\"");
    let cases = [
        ("if-none-match", quoted.as_str(), 304),
        ("if-match", "\"0x1\"", 412),
        ("if-match", quoted.as_str(), 200),
        ("if-modified-since", last_modified.as_str(), 304),
        ("if-unmodified-since", "Mon, 01 Jan 2024 00:00:00 GMT", 412),
    ];
    for (header, value, status) in cases {
        let resp = s
            .http
            .get(format!("{}/pools/w", s.base))
            .header(header, value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), status, "GET with {header}: {value}");
    }

    // Writes honour them too: a stale If-Match changes nothing.
    let resp = s
        .http
        .request(reqwest::Method::DELETE, format!("{}/pools/w", s.base))
        .header("if-match", "\"0x1\"")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 412);
    assert_eq!(s.get("/pools/w").await.1["state"], "active");
    let resp = s
        .http
        .post(format!("{}/pools/w/resize", s.base))
        .header("if-unmodified-since", "Mon, 01 Jan 2024 00:00:00 GMT")
        .json(&json!({"targetDedicatedNodes": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 412);
    assert_eq!(s.get("/pools/w").await.1["targetDedicatedNodes"], 0);

    // OData: a bad filter is a 400 that names the problem; select and paging carry through.
    let (status, body) = s.get("/pools?$filter=colour%20eq%20'red'").await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (400, Some("InvalidQueryParameterValue"))
    );
    assert!(
        body["message"]["value"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{body}"
    );
    for i in 0..3 {
        assert_eq!(
            s.post(
                "/pools",
                &json!({"id": format!("f{i}"), "vmSize": "standard_a1", "displayName": "filtered"})
            )
            .await
            .0,
            201
        );
    }
    let (_, page) = s.get("/pools?api-version=2025-06-01&$filter=displayName%20eq%20'filtered'&$select=id&maxresults=2").await;
    assert_eq!(page["value"], json!([{"id": "f0"}, {"id": "f1"}]));
    let next = page["odata.nextLink"].as_str().unwrap();
    assert!(
        next.contains("%24filter") || next.contains("$filter"),
        "{next}"
    );
    let (_, page) = s.get(next.trim_start_matches(&s.base)).await;
    assert_eq!(page["value"], json!([{"id": "f2"}]));
    assert!(page.get("odata.nextLink").is_none());

    // HEAD answers whether a resource exists.
    let resp = s
        .http
        .head(format!("{}/pools/w", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = s
        .http
        .head(format!("{}/pools/nope", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

/// Web service names belong to their account: another account's service of the same name is
/// neither revealed (no 409 "exists under another account") nor reachable, and each service's
/// BES routes find it by its own key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_service_names_are_per_account() {
    let s = TestServer::start(Rt::Local).await;
    let path = "/subscriptions/sub1/services/scorer";
    let define =
        |title: &str| json!({"Title": title, "Command": "echo scored", "BillingPlan": "standard"});
    let (status, mine) = s
        .request(reqwest::Method::PUT, path, Some(&define("mine")))
        .await;
    assert_eq!(status, 201, "{mine}");

    let created = account_cmd(&s, &["create", "other"]);
    let own = s.http.credentials.lock().unwrap().clone().unwrap();
    *s.http.credentials.lock().unwrap() =
        Some(("other".into(), key_line(&created, "primary key:").into()));
    assert_eq!(
        s.get(path).await.0,
        404,
        "the other account sees no service"
    );
    let (status, theirs) = s
        .request(reqwest::Method::PUT, path, Some(&define("theirs")))
        .await;
    assert_eq!(status, 201, "the name is free in another account: {theirs}");
    assert_eq!(s.get(path).await.1["Title"], "theirs");
    *s.http.credentials.lock().unwrap() = Some(own);
    assert_eq!(
        s.get(path).await.1["Title"],
        "mine",
        "the first is untouched"
    );

    // Each key reaches its own account's service.
    for (body, title) in [(&mine, "mine"), (&theirs, "theirs")] {
        let swagger = reqwest::Client::new()
            .get(format!("{}{path}/swagger.json", s.base))
            .header(
                "authorization",
                format!("Bearer {}", body["PrimaryKey"].as_str().unwrap()),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(swagger.status(), 200);
        let doc: Value = swagger.json().await.unwrap();
        assert_eq!(doc["info"]["title"], title, "{doc}");
    }
}

/// The `odata.nextLink` of a one-pool page of pools, asked with `headers`.
async fn next_link(s: &TestServer, headers: &[(&str, &str)]) -> String {
    let mut request = s.http.get(format!("{}/pools?maxresults=1", s.base));
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let page: serde_json::Value = request.send().await.unwrap().json().await.unwrap();
    page["odata.nextLink"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn two_pools(s: &TestServer) {
    for id in ["a", "b"] {
        let body = json!({"id": id, "vmSize": "standard_a1"});
        assert_eq!(s.post("/pools", &body).await.0, 201);
    }
}

/// Links in answers (here `odata.nextLink`) lead where clients reach the server: `--public-url`
/// when given, else what a proxy in front says it was reached at, so SDK paging works behind TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_follow_the_public_url_or_the_proxy() {
    let s = TestServer::start(Rt::Local).await;
    two_pools(&s).await;
    let plain = next_link(&s, &[]).await;
    assert!(plain.starts_with(&format!("{}/pools?", s.base)), "{plain}");
    let proxied = [
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "batch.example.com:8443"),
    ];
    let link = next_link(&s, &proxied).await;
    assert!(
        link.starts_with("https://batch.example.com:8443/pools?"),
        "{link}"
    );
    let link = next_link(&s, &[("x-forwarded-host", "evil.example/x?")]).await;
    assert!(link.starts_with(&format!("{}/pools?", s.base)), "{link}");

    let args = ["--public-url", "https://batch.example.com/"];
    let public = TestServer::start_with(Rt::Local, None, &args).await;
    two_pools(&public).await;
    let link = next_link(&public, &[("x-forwarded-host", "other.example")]).await;
    assert!(
        link.starts_with("https://batch.example.com/pools?"),
        "{link}"
    );
}

/// A job manager task with `authenticationTokenSettings` `{"access": ["job"]}` gets a token
/// (AZ_BATCH_AUTHENTICATION_TOKEN) and the API's address (AZ_BATCH_ACCOUNT_URL): with it, it
/// adds a task to its own job, and is refused anything else. The token is good while its
/// attempt runs: the same token fails once the task has ended. Without --public-url, the API's
/// address is where the node's agent reaches the server, which serves tasks' tokens there and
/// nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_token_reaches_its_own_job_while_it_runs() {
    token_flow(Rt::Local).await;
}

/// As above, from a Docker node, which reaches the server only where its agent does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_token_reaches_its_own_job_from_a_docker_node() {
    token_flow(Rt::Docker).await;
}

async fn token_flow(rt: Rt) {
    let s = TestServer::start(rt).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("other", "p").await;
    // A Docker node has busybox's wget; this host, curl. Each prints the status.
    let call = |what: &str| {
        match rt {
        Rt::Local => format!(
            "curl -s -o /dev/null -w '%{{http_code}}\\n' -H \"Authorization: Bearer $AZ_BATCH_AUTHENTICATION_TOKEN\" {what}"
        ),
        _ => format!(
            "wget -S -O /dev/null --header \"Authorization: Bearer $AZ_BATCH_AUTHENTICATION_TOKEN\" {what} 2>&1 | grep -o \"HTTP/1.1 [0-9]*\" | head -n1 | cut -d\" \" -f2"
        ),
    }
    };
    let post = match rt {
        Rt::Local => "-H 'Content-Type: application/json' -d \"$BODY\"",
        _ => "--header 'Content-Type: application/json' --post-data \"$BODY\"",
    };
    let api = |path: &str| format!("\"$AZ_BATCH_ACCOUNT_URL{path}?api-version=2025-06-01\"");
    let script = [
        call(&format!("{post} {}", api("/jobs/$AZ_BATCH_JOB_ID/tasks"))),
        call(&api("/jobs/$AZ_BATCH_JOB_ID")),
        call(&api("/jobs/other")),
        call(&api("/pools")),
        "echo \"$AZ_BATCH_AUTHENTICATION_TOKEN\" > $AZ_BATCH_NODE_SHARED_DIR/token".to_string(),
    ]
    .join("; ");
    let manager = json!({
        "id": "jm", "commandLine": format!("sh -c '{}'", script.replace('\'', "'\\''")),
        "killJobOnCompletion": false, "runExclusive": false,
        "authenticationTokenSettings": {"access": ["job"]},
        "environmentSettings": [{"name": "BODY", "value": r#"{"id": "added", "commandLine": "echo added"}"#}],
    });
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "jobManagerTask": manager});
    let (status, body) = s.post("/jobs", &job).await;
    assert_eq!(status, 201, "{body}");
    let jm = s.wait_task("j", "jm", "completed").await;
    assert_eq!(jm["executionInfo"]["result"], "success", "{jm}");
    assert_eq!(
        jm["authenticationTokenSettings"],
        json!({"access": ["job"]})
    );
    let out = s.file("/jobs/j/tasks/jm/files/stdout.txt").await.unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["201", "200", "403", "403"],
        "its own job, and nothing else: {out}"
    );
    let added = s.wait_task("j", "added", "completed").await;
    assert_eq!(added["executionInfo"]["result"], "success", "{added}");

    let node = s.nodes("p").await[0]["id"].as_str().unwrap().to_string();
    let token = s.shared_file("p", &node, "token").await;
    let bearer = [("Authorization", format!("Bearer {}", token.trim()))];
    let (status, body) = raw(&s, &bearer).await;
    assert_eq!(status, 401, "its attempt has ended: {body}");
    let forged = [("Authorization", "Bearer bpt1.e30.AAAA".to_string())];
    assert_eq!(raw(&s, &forged).await.0, 401);
    // Where tasks reach the API, a Shared Key opens nothing.
    let signed = s.http.get(format!("{}/pools", s.agent_url())).send();
    let refused = signed.await.unwrap();
    assert_eq!(refused.status(), 401);
    let body: Value = refused.json().await.unwrap();
    let detail = body["values"][0]["value"].as_str().unwrap_or_default();
    assert!(detail.contains("to tasks only"), "{body}");
    // A task that asks for an access there is not is refused by name.
    let bad = json!({"id": "bad", "commandLine": "true", "authenticationTokenSettings": {"access": ["pool"]}});
    let (status, body) = s.post("/jobs/j/tasks", &bad).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["values"][0]["value"],
        "authenticationTokenSettings.access"
    );
}
