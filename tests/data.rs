//! Data in and out of tasks, as Azure Batch moves it: resource files downloaded into the working
//! directory before the command runs (from any http(s) URL, or the blobs of a container with a
//! SAS), and output files uploaded to a container after it ends, per uploadCondition. Blob
//! storage is Azurite, started by scripts/test.sh.

mod common;

use common::blobs::{connection_string, container, get_blob, put_blob, AZURITE_KEY};
use common::{Rt, TestServer};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// A plain HTTP server for httpUrl resource files.
struct HttpServer {
    url: String,
    /// `/slow.txt` answers once this is notified.
    release: Arc<Notify>,
    /// How many `/slow.txt` requests the client gave up before their answer.
    abandoned: Arc<AtomicUsize>,
}

/// `/data.txt` has a body, `/slow.txt` answers when released, anything else is 404.
async fn http_server() -> HttpServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, abandoned) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
    let (slow, gave_up) = (Arc::clone(&release), Arc::clone(&abandoned));
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let (slow, gave_up) = (Arc::clone(&slow), Arc::clone(&gave_up));
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let (status, body) = if request.starts_with(b"GET /data.txt ") {
                    ("200 OK", "from http\n")
                } else if request.starts_with(b"GET /slow.txt ") {
                    tokio::select! {
                        _ = slow.notified() => {}
                        // The client closed the connection: it gave the download up.
                        _ = conn.read(&mut buf) => {
                            gave_up.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                    ("200 OK", "slow\n")
                } else {
                    ("404 Not Found", "no such file\n")
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(response.as_bytes()).await;
            });
        }
    });
    HttpServer {
        url: format!("http://{addr}"),
        release,
        abandoned,
    }
}

/// A server that may fetch from this host: Azurite and the tests' HTTP server listen on it.
async fn server(rt: Rt) -> TestServer {
    TestServer::start_allowing_local_urls(rt, &[]).await
}

async fn pool_and_job(s: &TestServer) {
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
}

async fn resource_files_are_in_place_before_the_command_runs(rt: Rt) {
    let s = server(rt).await;
    pool_and_job(&s).await;
    let (name, url) = container("rl").await;
    put_blob(&format!("{name}/in/a.txt"), "blob a\n").await;
    put_blob(&format!("{name}/in/sub/b.txt"), "blob b\n").await;
    put_blob(&format!("{name}/other.txt"), "not wanted\n").await;
    // 10 MB, streamed from the storage service through the server to the node's agent.
    put_blob(
        &format!("{name}/in/big.txt"),
        &"0123456789".repeat(1_000_000),
    )
    .await;
    let http = http_server().await.url;
    let task = json!({
        "id": "t1",
        "commandLine": "cat http/data.txt blobs/in/a.txt blobs/in/sub/b.txt all/other.txt && test ! -e blobs/other.txt && stat -c %a http/data.txt && wc -c < blobs/in/big.txt && tail -c 3 blobs/in/big.txt",
        "resourceFiles": [
            {"httpUrl": format!("{http}/data.txt"), "filePath": "http/data.txt", "fileMode": "0700"},
            {"storageContainerUrl": url, "blobPrefix": "in/", "filePath": "blobs"},
            {"storageContainerUrl": url, "blobPrefix": "oth", "filePath": "all"},
        ],
    });
    s.add_tasks("j", vec![task.clone()]).await;
    let t = s.wait_task("j", "t1", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(
        s.stdout("j", "t1").await,
        "from http\nblob a\nblob b\nnot wanted\n700\n10000000\n789"
    );
    // The task reads back with the resource files it was given.
    assert_eq!(t["resourceFiles"], task["resourceFiles"], "{t}");
}
on_both_runtimes!(
    resource_files_arrive,
    resource_files_are_in_place_before_the_command_runs
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_download_fails_the_task_at_once_without_running_it() {
    let s = server(Rt::Local).await;
    pool_and_job(&s).await;
    let http = http_server().await.url;
    let (_, read_only) = container("r").await;
    let tasks = vec![
        json!({
            "id": "missing",
            "commandLine": "echo ran > ../ran.txt",
            "resourceFiles": [{"httpUrl": format!("{http}/missing.txt"), "filePath": "m.txt"}],
            "constraints": {"maxTaskRetryCount": 1},
        }),
        // A SAS without the list permission cannot list the container.
        json!({
            "id": "unlisted",
            "commandLine": "echo ran > ../ran.txt",
            "resourceFiles": [{"storageContainerUrl": read_only}],
        }),
    ];
    s.add_tasks("j", tasks).await;
    // preProcessingError decides what the failure does to the job.
    let job = json!({"id": "j2", "poolInfo": {"poolId": "p"}, "onTaskFailure": "performexitoptionsjobaction"});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    let ends_job = json!({"id": "t", "commandLine": "true",
        "resourceFiles": [{"httpUrl": format!("{http}/missing.txt"), "filePath": "m.txt"}],
        "exitConditions": {"preProcessingError": {"jobAction": "terminate"}, "default": {"jobAction": "none"}}});
    s.add_tasks("j2", vec![ends_job]).await;
    let j2 = common::wait_for("j2 to be terminated", || async {
        let (_, j2) = s.get("/jobs/j2").await;
        (j2["state"] == "completed").then_some(j2)
    })
    .await;
    assert_eq!(j2["executionInfo"]["terminateReason"], "TaskFailed", "{j2}");
    let t = s.wait_task("j", "missing", "completed").await;
    let info = &t["executionInfo"];
    assert_eq!(info["result"], "failure", "{t}");
    assert_eq!(info["failureInfo"]["code"], "BlobNotFound", "{t}");
    assert_eq!(info["failureInfo"]["category"], "usererror", "{t}");
    // Azure retries a task for its exit code only: a pre-processing error is not retried,
    // whatever maxTaskRetryCount allows.
    assert_eq!(
        info["retryCount"], 0,
        "a pre-processing error is not retried: {t}"
    );
    assert!(info.get("exitCode").is_none(), "no command ran: {t}");
    assert!(!info["failureInfo"]["message"]
        .as_str()
        .unwrap()
        .contains("sig="));
    let t = s.wait_task("j", "unlisted", "completed").await;
    let code = t["executionInfo"]["failureInfo"]["code"].as_str().unwrap();
    assert!(code.starts_with("ResourceContainer"), "{t}");
    for task in ["missing", "unlisted"] {
        let ran = s.file(&format!("/jobs/j/tasks/{task}/files/ran.txt")).await;
        assert_eq!(ran, None, "the command of {task} must not run");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_files_are_uploaded_per_their_upload_condition() {
    let s = server(Rt::Local).await;
    pool_and_job(&s).await;
    let (name, url) = container("rwl").await;
    let outputs = |task: &str| {
        json!([
            {"filePattern": "out/**/*", "destination": {"container": {"containerUrl": url, "path": format!("{task}/results"),
                "uploadHeaders": [{"name": "Content-Type", "value": "text/csv"}]}},
             "uploadOptions": {"uploadCondition": "tasksuccess"}},
            {"filePattern": "../std*.txt", "destination": {"container": {"containerUrl": url, "path": format!("{task}/logs")}},
             "uploadOptions": {"uploadCondition": "taskcompletion"}},
            {"filePattern": "out/r1.txt", "destination": {"container": {"containerUrl": url, "path": format!("{task}/failed.txt")}},
             "uploadOptions": {"uploadCondition": "taskfailure"}},
        ])
    };
    let tasks = vec![
        // big.txt (about 10 MB) goes up in parts; the link to a host file does not go up at all.
        json!({"id": "ok", "commandLine": "mkdir -p out/sub && echo one > out/r1.txt && echo two > out/sub/r2.csv && seq 1 1500000 > out/big.txt && ln -s /etc/passwd out/pw && echo said",
               "outputFiles": outputs("ok")}),
        json!({"id": "bad", "commandLine": "mkdir -p out && echo one > out/r1.txt && exit 3",
               "outputFiles": outputs("bad")}),
    ];
    s.add_tasks("j", tasks).await;
    let ok = s.wait_task("j", "ok", "completed").await;
    assert_eq!(ok["executionInfo"]["result"], "success", "{ok}");
    let get = |path: String| {
        let whole = format!("{name}/{path}");
        async move { get_blob(&whole).await }
    };
    assert_eq!(
        get("ok/results/r1.txt".into()).await,
        Some(("one\n".into(), Some("text/csv".into())))
    );
    assert_eq!(
        get("ok/results/sub/r2.csv".into()).await.map(|b| b.0),
        Some("two\n".into())
    );
    assert_eq!(
        get("ok/logs/stdout.txt".into()).await.map(|b| b.0),
        Some("said\n".into())
    );
    assert_eq!(get("ok/failed.txt".into()).await, None);
    let big = get("ok/results/big.txt".into()).await.unwrap().0;
    assert!(big.len() > 8 << 20, "{} bytes", big.len());
    assert!(big.starts_with("1\n2\n") && big.ends_with("\n1499999\n1500000\n"));
    assert_eq!(
        get("ok/results/pw".into()).await,
        None,
        "a link is not followed"
    );
    let log = s
        .file("/jobs/j/tasks/ok/files/fileuploadout.txt")
        .await
        .unwrap();
    assert!(log.contains("ok/results/sub/r2.csv"), "{log}");

    let bad = s.wait_task("j", "bad", "completed").await;
    assert_eq!(bad["executionInfo"]["exitCode"], 3, "{bad}");
    assert_eq!(
        get("bad/failed.txt".into()).await.map(|b| b.0),
        Some("one\n".into())
    );
    assert_eq!(get("bad/results/r1.txt".into()).await, None);
    assert!(get("bad/logs/stderr.txt".into()).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_fails_the_task_and_says_why() {
    let s = server(Rt::Local).await;
    pool_and_job(&s).await;
    let (_, url) = container("rl").await;
    // Read and list only: the upload is refused by the storage service.
    let task = json!({"id": "t", "commandLine": "echo result > r.txt",
        "outputFiles": [{"filePattern": "r.txt", "destination": {"container": {"containerUrl": url}},
                         "uploadOptions": {"uploadCondition": "taskcompletion"}}],
        "exitConditions": {"fileUploadError": {"dependencyAction": "satisfy"}}});
    s.add_tasks("j", vec![task]).await;
    let t = s.wait_task("j", "t", "completed").await;
    let info = &t["executionInfo"];
    assert_eq!(info["result"], "failure", "{t}");
    assert_eq!(info["exitCode"], 0, "the command itself succeeded: {t}");
    assert_eq!(info["failureInfo"]["code"], "FileUploadMiscError", "{t}");
    let errors = s
        .file("/jobs/j/tasks/t/files/fileuploaderr.txt")
        .await
        .unwrap();
    assert!(errors.contains("r.txt"), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_paths_that_leave_the_task_are_refused_by_name() {
    let s = server(Rt::Local).await;
    pool_and_job(&s).await;
    let out = |pattern: &str, extra: Value| {
        let mut container = json!({"containerUrl": "https://a.blob.core.windows.net/c?sig=x"});
        container
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"id": "t", "commandLine": "true", "outputFiles": [{"filePattern": pattern,
            "destination": {"container": container}, "uploadOptions": {"uploadCondition": "tasksuccess"}}]})
    };
    let cases = [
        (
            json!({"id": "t", "commandLine": "true", "resourceFiles": [{"httpUrl": "http://x/a", "filePath": "../../escape"}]}),
            "resourceFiles[0].filePath",
        ),
        (
            json!({"id": "t", "commandLine": "true", "resourceFiles": [{"httpUrl": "http://x/a", "filePath": "/etc/passwd"}]}),
            "resourceFiles[0].filePath",
        ),
        (out("/etc/*", json!({})), "outputFiles[0].filePattern"),
        (out("../../x", json!({})), "outputFiles[0].filePattern"),
        (
            out("x", json!({"path": "../up"})),
            "outputFiles[0].destination.container.path",
        ),
        (
            out(
                "x",
                json!({"uploadHeaders": [{"name": "x-ms-meta-a", "value": "1"}]}),
            ),
            "outputFiles[0].destination.container.uploadHeaders",
        ),
    ];
    for (body, property) in cases {
        let (status, answer) = s.post("/jobs/j/tasks", &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["code"], "InvalidPropertyValue", "{answer}");
        let named = answer["values"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["key"] == "PropertyName" && v["value"] == property);
        assert!(named, "{property} not named in {answer}");
    }
    let (_, tasks) = s.get("/jobs/j/tasks").await;
    assert_eq!(tasks["value"], json!([]), "nothing was added");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_task_gets_its_resource_files_before_each_attempt() {
    let s = server(Rt::Local).await;
    let http = http_server().await.url;
    let pool = |id: &str, file: &str| {
        json!({"id": id, "vmSize": "standard_a1", "targetDedicatedNodes": 1,
            "startTask": {"commandLine": "cp in/data.txt $AZ_BATCH_NODE_SHARED_DIR/started.txt",
                "waitForSuccess": true, "maxTaskRetryCount": 1,
                "resourceFiles": [{"httpUrl": format!("{http}/{file}"), "filePath": "in/data.txt"}]}})
    };
    assert_eq!(s.post("/pools", &pool("ok", "data.txt")).await.0, 201);
    assert_eq!(s.post("/pools", &pool("bad", "missing.txt")).await.0, 201);
    let node = s.wait_nodes("ok", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.shared_file("ok", &node, "started.txt").await,
        "from http\n"
    );
    let bad = s.wait_nodes("bad", 1, "starttaskfailed").await;
    let info = &bad[0]["startTaskInfo"];
    assert_eq!(info["failureInfo"]["code"], "BlobNotFound", "{info}");
    assert_eq!(
        info["retryCount"], 0,
        "a pre-processing error is not retried: {info}"
    );
    assert!(info.get("exitCode").is_none(), "{info}");
}

/// Seed 004's start task: `install.sh` by `httpUrl` and the container that also holds it. Both
/// orders, on every node of a pool: the later entry's file is the one the command finds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resource_files_on_one_path_give_the_later_one_on_every_node() {
    let s = server(Rt::Docker).await;
    let http = http_server().await.url;
    let (name, url) = container("rl").await;
    put_blob(&format!("{name}/data.txt"), "from blob\n").await;
    let by_http = json!({"httpUrl": format!("{http}/data.txt"), "filePath": "data.txt"});
    let by_container = json!({"storageContainerUrl": url});
    let orders = [
        ("http-last", json!([by_container, by_http]), "from http\n"),
        ("blob-last", json!([by_http, by_container]), "from blob\n"),
    ];
    for (pool, files, _) in &orders {
        let body = json!({"id": pool, "vmSize": "standard_a1", "targetDedicatedNodes": 2,
            "startTask": {"commandLine": "cp data.txt $AZ_BATCH_NODE_SHARED_DIR/got.txt",
                "waitForSuccess": true, "resourceFiles": files}});
        assert_eq!(s.post("/pools", &body).await.0, 201);
    }
    for (pool, _, expected) in orders {
        for node in s.wait_nodes(pool, 2, "idle").await {
            let node = node["id"].as_str().unwrap();
            assert_eq!(
                s.shared_file(pool, node, "got.txt").await,
                expected,
                "{pool} {node}"
            );
        }
    }
    // A file where another entry needs a directory fails the attempt, named, in either order.
    let clash = json!({"id": "clash", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "startTask": {"commandLine": "true", "waitForSuccess": true, "resourceFiles": [
            {"httpUrl": format!("{http}/data.txt"), "filePath": "data.txt/inner"},
            {"storageContainerUrl": url}]}});
    assert_eq!(s.post("/pools", &clash).await.0, 201);
    let info = s.wait_nodes("clash", 1, "starttaskfailed").await[0]["startTaskInfo"].clone();
    assert_eq!(info["failureInfo"]["code"], "ResourceFileInvalid", "{info}");
    let message = info["failureInfo"]["message"].as_str().unwrap();
    assert!(
        message.contains("resourceFiles[1]") && message.contains("resourceFiles[0]"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_that_lead_to_the_server_s_own_host_are_refused_by_default() {
    let s = TestServer::start(Rt::Local).await;
    pool_and_job(&s).await;
    let http = http_server().await.url;
    let (_, url) = container("rwl").await;
    let port = http.rsplit(':').next().unwrap();
    let tasks = vec![
        json!({"id": "loopback", "commandLine": "echo ran > ../ran.txt",
               "resourceFiles": [{"httpUrl": format!("{http}/data.txt"), "filePath": "d.txt"}]}),
        // A name that resolves to loopback is refused as its address would be.
        json!({"id": "named", "commandLine": "echo ran > ../ran.txt",
               "resourceFiles": [{"httpUrl": format!("http://localhost:{port}/data.txt"), "filePath": "d.txt"}]}),
        json!({"id": "metadata", "commandLine": "echo ran > ../ran.txt",
               "resourceFiles": [{"httpUrl": "http://169.254.169.254/metadata/instance", "filePath": "d.txt"}]}),
        json!({"id": "container", "commandLine": "echo ran > ../ran.txt",
               "resourceFiles": [{"storageContainerUrl": url}]}),
        json!({"id": "upload", "commandLine": "echo out > r.txt",
               "outputFiles": [{"filePattern": "r.txt", "destination": {"container": {"containerUrl": url}},
                                "uploadOptions": {"uploadCondition": "taskcompletion"}}]}),
    ];
    s.add_tasks("j", tasks).await;
    for task in ["loopback", "named", "metadata", "container", "upload"] {
        let t = s.wait_task("j", task, "completed").await;
        let info = &t["executionInfo"];
        assert_eq!(info["result"], "failure", "{t}");
        let message = info["failureInfo"]["message"].as_str().unwrap();
        assert!(message.contains("--allow-local-urls"), "{task}: {message}");
        if task != "upload" {
            let ran = s.file(&format!("/jobs/j/tasks/{task}/files/ran.txt")).await;
            assert_eq!(ran, None, "the command of {task} must not run");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_preparing_while_its_resource_files_download() {
    let s = server(Rt::Local).await;
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
    s.job_on("j", "p").await;
    let http = http_server().await;
    let slow = |id: &str| {
        json!({"id": id, "commandLine": "echo ran > ../ran.txt; cat slow.txt",
            "resourceFiles": [{"httpUrl": format!("{}/slow.txt", http.url), "filePath": "slow.txt"}]})
    };
    s.add_tasks("j", vec![slow("t"), slow("stopped")]).await;
    let t = s.wait_task("j", "t", "preparing").await;
    assert!(t["nodeInfo"]["nodeId"].is_string(), "on its node: {t}");
    s.wait_task("j", "stopped", "preparing").await;
    let (_, counts) = s.get("/jobs/j/taskcounts").await;
    assert_eq!(
        counts["taskCounts"]["running"], 2,
        "Azure counts preparing as running: {counts}"
    );
    assert_eq!(counts["taskCounts"]["active"], 0, "{counts}");

    // Terminated while preparing: its download stops and its command never starts.
    let (status, body) = s.post("/jobs/j/tasks/stopped/terminate", &json!({})).await;
    assert_eq!(status, 204, "{body}");
    s.wait_task("j", "stopped", "completed").await;
    common::wait_for("the stopped task's download to be given up", || async {
        (http.abandoned.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;

    let t = common::wait_for("t to complete", || async {
        http.release.notify_waiters();
        let t = s.task("j", "t").await;
        (t["state"] == "completed").then_some(t)
    })
    .await;
    assert_eq!(t["previousState"], "running", "{t}");
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(s.stdout("j", "t").await, "slow\n");
    let ran = s.file("/jobs/j/tasks/stopped/files/ran.txt").await;
    assert_eq!(
        ran, None,
        "a task stopped while preparing never runs its command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_storage_containers_come_from_the_account_s_linked_storage() {
    // The linked storage is the operator's, not a URL a task names: no --allow-local-urls.
    let s = TestServer::start(Rt::Local).await;
    pool_and_job(&s).await;
    let (name, _) = container("r").await;
    put_blob(&format!("{name}/in/a.txt"), "linked a\n").await;
    put_blob(&format!("{name}/in/b.txt"), "linked b\n").await;
    let task = |id: &str| {
        json!({"id": id, "commandLine": "cat auto/in/a.txt auto/in/b.txt",
            "resourceFiles": [{"autoStorageContainerName": name, "blobPrefix": "in/", "filePath": "auto"}]})
    };
    // Without a linked storage account the task is refused, naming the property.
    let (status, answer) = s.post("/jobs/j/tasks", &task("early")).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("resourceFiles[0].autoStorageContainerName"),
        "{answer}"
    );
    let pool = json!({"id": "linked", "vmSize": "standard_a1", "startTask": {"commandLine": "true",
        "resourceFiles": [{"autoStorageContainerName": name}]}});
    let (status, answer) = s.post("/pools", &pool).await;
    assert_eq!(status, 400, "{answer}");
    let named = answer.to_string();
    assert!(
        named.contains("startTask.resourceFiles[0].autoStorageContainerName"),
        "{named}"
    );

    let linked = common::account_cmd(&s, &["storage", "batchpool", &connection_string()]);
    assert!(linked.contains("devstoreaccount1"), "{linked}");
    assert!(
        !linked.contains(AZURITE_KEY),
        "the key is never printed: {linked}"
    );
    s.add_tasks("j", vec![task("t")]).await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(s.stdout("j", "t").await, "linked a\nlinked b\n");

    let unlinked = common::account_cmd(&s, &["storage", "batchpool", "--unlink"]);
    assert!(unlinked.contains("none"), "{unlinked}");
    let (status, _) = s.post("/jobs/j/tasks", &task("late")).await;
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_uploads_what_finished_meanwhile_and_downloads_again_what_was_cut_off() {
    let mut s = server(Rt::Local).await;
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
    s.job_on("j", "p").await;
    let (name, url) = container("rwl").await;
    let http = http_server().await;
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let tasks = vec![
        // Ends while the server is down: its output must still go up.
        json!({"id": "ends", "commandLine": format!("while [ ! -e {} ]; do sleep 0.05; done; echo done > r.txt", go.display()),
            "outputFiles": [{"filePattern": "r.txt", "destination": {"container": {"containerUrl": url, "path": "ends/r.txt"}},
                             "uploadOptions": {"uploadCondition": "taskcompletion"}}]}),
        // Preparing when the server dies: its download is cut off and must be done again.
        json!({"id": "cut", "commandLine": "cat slow.txt",
            "resourceFiles": [{"httpUrl": format!("{}/slow.txt", http.url), "filePath": "slow.txt"}]}),
    ];
    s.add_tasks("j", tasks).await;
    s.wait_task("j", "ends", "running").await;
    s.wait_task("j", "cut", "preparing").await;
    s.kill().await;
    std::fs::write(&go, "").unwrap();
    s.launch().await;

    let ends = s.wait_task("j", "ends", "completed").await;
    assert_eq!(ends["executionInfo"]["result"], "success", "{ends}");
    assert_eq!(
        ends["executionInfo"]["requeueCount"], 0,
        "recovered, not rerun: {ends}"
    );
    let uploaded = get_blob(&format!("{name}/ends/r.txt")).await.map(|b| b.0);
    assert_eq!(uploaded.as_deref(), Some("done\n"));

    let cut = common::wait_for("the cut-off task to complete", || async {
        http.release.notify_waiters();
        let t = s.task("j", "cut").await;
        (t["state"] == "completed").then_some(t)
    })
    .await;
    assert_eq!(cut["executionInfo"]["result"], "success", "{cut}");
    assert_eq!(cut["executionInfo"]["requeueCount"], 1, "{cut}");
    assert_eq!(s.stdout("j", "cut").await, "slow\n");
}

/// A zip holding `bin/hello.txt` with `text` (made with Python's zipfile).
fn zip_with(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    let made = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z: z.writestr('bin/hello.txt', sys.argv[2])",
        ])
        .arg(&path)
        .arg(text)
        .status()
        .unwrap();
    assert!(made.success());
    path.display().to_string()
}

async fn application_packages_are_installed_on_the_node_before_the_task(rt: Rt) {
    let s = server(rt).await;
    pool_and_job(&s).await;
    let zips = tempfile::tempdir().unwrap();
    let data_dir = s.data_dir.path().display().to_string();
    let package = |args: &[&str]| {
        let mut all = vec!["package", "batchpool"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--data-dir", &data_dir]);
        common::account_cmd(&s, &all)
    };
    package(&[
        "tools",
        "1.0",
        &zip_with(zips.path(), "v1.zip", "one\n"),
        "--display-name",
        "Tools",
    ]);
    package(&[
        "tools",
        "2.0",
        &zip_with(zips.path(), "v2.zip", "two\n"),
        "--default",
    ]);
    // Or over HTTP, signed with the account's key (this server's own route).
    let upload = |version: &str, body: Vec<u8>| {
        let url = format!(
            "{}/batchpool/applications/web/versions/{version}?displayName=Web",
            s.base
        );
        s.http.request(reqwest::Method::PUT, url).bytes(body).send()
    };
    let web = std::fs::read(zip_with(zips.path(), "web.zip", "web\n")).unwrap();
    let resp = upload("1.0", web).await.unwrap();
    assert_eq!(resp.status(), 201);
    let made: Value = resp.json().await.unwrap();
    assert_eq!(
        made,
        json!({"id": "web", "displayName": "Web", "versions": ["1.0"]})
    );
    let resp = upload("2.0", b"not a zip".to_vec()).await.unwrap();
    assert_eq!(resp.status(), 400, "a body that is not a zip is refused");
    let (_, web) = s.get("/applications/web").await;
    assert_eq!(
        web["versions"],
        json!(["1.0"]),
        "and nothing was recorded: {web}"
    );
    let (_, apps) = s.get("/applications").await;
    assert_eq!(
        apps["value"],
        json!([{"id": "tools", "displayName": "Tools", "versions": ["1.0", "2.0"]},
            {"id": "web", "displayName": "Web", "versions": ["1.0"]}])
    );
    let (code, _) = s.get("/applications/nothing").await;
    assert_eq!(code, 404);

    let task = json!({"id": "t", "commandLine": "cat $AZ_BATCH_APP_PACKAGE_TOOLS_1_0/bin/hello.txt $AZ_BATCH_APP_PACKAGE_TOOLS/bin/hello.txt $AZ_BATCH_APP_PACKAGE_WEB/bin/hello.txt",
        "applicationPackageReferences": [{"applicationId": "tools", "version": "1.0"}, {"applicationId": "TOOLS"}, {"applicationId": "web"}]});
    s.add_tasks("j", vec![task.clone()]).await;
    let t = s.wait_task("j", "t", "completed").await;
    assert_eq!(t["executionInfo"]["result"], "success", "{t}");
    assert_eq!(s.stdout("j", "t").await, "one\ntwo\nweb\n");
    assert_eq!(
        t["applicationPackageReferences"], task["applicationPackageReferences"],
        "{t}"
    );

    // A second task on the node finds them installed.
    let again = json!({"id": "again", "commandLine": "cat $AZ_BATCH_APP_PACKAGE_TOOLS_2_0/bin/hello.txt",
        "applicationPackageReferences": [{"applicationId": "tools", "version": "2.0"}]});
    s.add_tasks("j", vec![again]).await;
    s.wait_task("j", "again", "completed").await;
    assert_eq!(s.stdout("j", "again").await, "two\n");

    // A pool's packages are on each of its nodes before the start task, for every command there.
    let pool = json!({"id": "pk", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "applicationPackageReferences": [{"applicationId": "tools"}],
        "startTask": {"commandLine": "cat $AZ_BATCH_APP_PACKAGE_TOOLS/bin/hello.txt > $AZ_BATCH_NODE_SHARED_DIR/pkg.txt"}});
    let (code, answer) = s.post("/pools", &pool).await;
    assert_eq!(code, 201, "{answer}");
    let node = s.wait_nodes("pk", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.shared_file("pk", &node, "pkg.txt").await, "two\n");
    let (_, got) = s.get("/pools/pk").await;
    assert_eq!(
        got["applicationPackageReferences"],
        json!([{"applicationId": "tools"}]),
        "{got}"
    );
    let job = json!({"id": "jk", "poolInfo": {"poolId": "pk"}, "jobPreparationTask": {
        "commandLine": "cat $AZ_BATCH_APP_PACKAGE_TOOLS/bin/hello.txt > prepared.txt"}});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    let on_pool = json!({"id": "p1",
        "commandLine": "cat $AZ_BATCH_APP_PACKAGE_TOOLS_2_0/bin/hello.txt $AZ_BATCH_JOB_PREP_WORKING_DIR/prepared.txt"});
    s.add_tasks("jk", vec![on_pool]).await;
    s.wait_task("jk", "p1", "completed").await;
    let out = s.file("/jobs/jk/tasks/p1/files/stdout.txt").await;
    assert_eq!(
        out.as_deref(),
        Some("two\ntwo\n"),
        "the task and the preparation task see it"
    );
    let bad_pool = json!({"id": "bad", "vmSize": "standard_a1", "applicationPackageReferences": [{"applicationId": "nothing"}]});
    let (code, answer) = s.post("/pools", &bad_pool).await;
    assert_eq!(
        (code.as_u16(), answer["code"].as_str()),
        (400, Some("InvalidApplicationPackageReferences"))
    );

    for (refs, what) in [
        (json!([{"applicationId": "nothing"}]), "no application"),
        (
            json!([{"applicationId": "tools", "version": "9.9"}]),
            "no version",
        ),
    ] {
        let bad = json!({"id": "bad", "commandLine": "true", "applicationPackageReferences": refs});
        let (code, answer) = s.post("/jobs/j/tasks", &bad).await;
        assert_eq!(code, 400, "{answer}");
        assert_eq!(
            answer["code"], "InvalidApplicationPackageReferences",
            "{answer}"
        );
        assert!(answer.to_string().contains(what), "{answer}");
    }
}
on_both_runtimes!(
    application_packages_arrive,
    application_packages_are_installed_on_the_node_before_the_task
);

/// A pool's packages change (PATCH, updateproperties) as on Azure: its nodes keep what they have,
/// and their tasks see it, until they start again (here a reboot), when they get the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_s_new_packages_reach_its_nodes_when_they_restart() {
    let s = server(Rt::Local).await;
    let zips = tempfile::tempdir().unwrap();
    let data_dir = s.data_dir.path().display().to_string();
    for (version, text) in [("1.0", "one\n"), ("2.0", "two\n")] {
        let zip = zip_with(zips.path(), &format!("{version}.zip"), text);
        let args = [
            "package",
            "batchpool",
            "tools",
            version,
            &zip,
            "--data-dir",
            &data_dir,
        ];
        common::account_cmd(&s, &args);
    }
    // A version named is AZ_BATCH_APP_PACKAGE_TOOLS_<version>: what the node has, then "end".
    let versions = "for d in $AZ_BATCH_APP_PACKAGE_TOOLS_1_0 $AZ_BATCH_APP_PACKAGE_TOOLS_2_0; do cat $d/bin/hello.txt; done; echo end";
    let seen = format!("({versions}) > $AZ_BATCH_NODE_SHARED_DIR/seen.txt");
    let pool = json!({"id": "pk", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "applicationPackageReferences": [{"applicationId": "tools", "version": "1.0"}],
        "startTask": {"commandLine": seen}});
    assert_eq!(s.post("/pools", &pool).await.0, 201);
    let node = s.wait_nodes("pk", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.shared_file("pk", &node, "seen.txt").await, "one\nend\n");

    let v2 = json!([{"applicationId": "tools", "version": "2.0"}]);
    let patch = json!({ "applicationPackageReferences": v2 });
    let (code, answer) = s
        .request(reqwest::Method::PATCH, "/pools/pk", Some(&patch))
        .await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        s.get("/pools/pk").await.1["applicationPackageReferences"],
        v2
    );
    let bad = json!({"applicationPackageReferences": [{"applicationId": "nothing"}]});
    let (code, answer) = s
        .request(reqwest::Method::PATCH, "/pools/pk", Some(&bad))
        .await;
    assert_eq!(
        answer["code"], "InvalidApplicationPackageReferences",
        "{code} {answer}"
    );
    assert_eq!(
        s.get("/pools/pk").await.1["applicationPackageReferences"],
        v2
    );
    // The node has 1.0 until it starts again, and so its tasks see 1.0.
    s.job_on("jk", "pk").await;
    let task = |id: &str| json!({"id": id, "commandLine": versions});
    s.add_tasks("jk", vec![task("before")]).await;
    s.wait_task("jk", "before", "completed").await;
    let before = s.file("/jobs/jk/tasks/before/files/stdout.txt").await;
    assert_eq!(before.as_deref(), Some("one\nend\n"));
    let reboot = format!("/pools/pk/nodes/{node}/reboot");
    assert_eq!(s.post(&reboot, &json!({})).await.0, 202);
    s.wait_nodes("pk", 1, "idle").await;
    assert_eq!(s.shared_file("pk", &node, "seen.txt").await, "two\nend\n");
    s.add_tasks("jk", vec![task("after")]).await;
    s.wait_task("jk", "after", "completed").await;
    let after = s.file("/jobs/jk/tasks/after/files/stdout.txt").await;
    assert_eq!(after.as_deref(), Some("two\nend\n"));

    // updateproperties replaces them (and the start task): an empty list removes them.
    let replace = json!({"metadata": [], "applicationPackageReferences": [], "certificateReferences": [],
        "startTask": {"commandLine": seen}});
    assert_eq!(s.post("/pools/pk/updateproperties", &replace).await.0, 204);
    let (_, got) = s.get("/pools/pk").await;
    assert!(got.get("applicationPackageReferences").is_none(), "{got}");
    assert_eq!(s.post(&reboot, &json!({})).await.0, 202);
    s.wait_nodes("pk", 1, "idle").await;
    assert_eq!(s.shared_file("pk", &node, "seen.txt").await, "end\n");
}
