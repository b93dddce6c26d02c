//! What tasks leave in their directories cannot lead the server outside their node: links a
//! task plants in its node's task directories (workitems) or root are never followed by the server,
//! which runs as root on the host. And reading a large file costs the server no memory.

#[macro_use]
mod common;

use std::path::Path;

use common::{wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// A directory outside the data directory standing for the host's files: `etc/passwd` and
/// `secret` hold a canary.
fn host_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("host").tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    std::fs::write(dir.path().join("etc/passwd"), "canary-passwd").unwrap();
    std::fs::write(dir.path().join("secret"), "canary-secret").unwrap();
    dir
}

/// Everything in `dir`, relative, sorted: what the canary looks like.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() && !path.is_symlink() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

async fn run_task(s: &TestServer, job: &str, id: &str, command: &str) -> Value {
    s.add_tasks(job, vec![json!({"id": id, "commandLine": command})])
        .await;
    let t = s.wait_task(job, id, "completed").await;
    assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
    t
}

/// Links `workitems/jobx/job-1` (through the node's view of the account's workitems) to `target`.
fn plant(target: &Path) -> String {
    format!(
        "W=$AZ_BATCH_NODE_ROOT_DIR/workitems/jobx; mkdir -p $W && rm -rf $W/job-1 && ln -sfn {} $W/job-1",
        target.display()
    )
}

async fn links_in_workitems_are_not_followed(rt: Rt) {
    let s = TestServer::start(rt).await;
    let host = host_dir();
    let before = tree(host.path());
    let body = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 2});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    s.wait_nodes("p", 1, "idle").await;
    assert_eq!(
        s.post(
            "/jobs",
            &json!({"id": "plant", "poolInfo": {"poolId": "p"}})
        )
        .await
        .0,
        201
    );
    run_task(&s, "plant", "ln1", &plant(host.path())).await;

    // The job the link was planted for: its task runs in a directory of its own.
    assert_eq!(
        s.post("/jobs", &json!({"id": "jobx", "poolInfo": {"poolId": "p"}}))
            .await
            .0,
        201
    );
    run_task(&s, "jobx", "etc", "echo mine > passwd").await;
    assert_eq!(
        tree(host.path()),
        before,
        "nothing made in the host directory"
    );

    // The link planted again under a task that ran: nothing is read, listed or deleted through it.
    run_task(&s, "plant", "ln2", &plant(host.path())).await;
    let (status, body) = s.get("/jobs/jobx/tasks/etc/files/passwd").await;
    assert_ne!(status, 200, "{body}");
    assert!(!body.to_string().contains("canary"), "{body}");
    let (_, body) = s.get("/jobs/jobx/tasks/etc/files?recursive=true").await;
    assert!(!body.to_string().contains("passwd"), "{body}");
    let node = s.nodes("p").await[0]["id"].as_str().unwrap().to_string();
    let via_node = format!("/pools/p/nodes/{node}/files/workitems/jobx/job-1/etc/passwd");
    assert!(s.file(&via_node).await.is_none());
    assert_eq!(s.delete("/jobs/jobx/tasks/etc").await.0, 200);
    assert_eq!(
        tree(host.path()),
        before,
        "the task's deletion left the host directory"
    );

    // Another task, then the job's deletion and its files' removal.
    run_task(&s, "jobx", "etc2", "true").await;
    run_task(&s, "plant", "ln3", &plant(host.path())).await;
    assert_eq!(s.delete("/jobs/jobx").await.0, 202);
    wait_for("the job to be deleted", || async {
        (s.get("/jobs/jobx").await.0 == 404).then_some(())
    })
    .await;
    assert_eq!(
        tree(host.path()),
        before,
        "the job's deletion left the host directory"
    );
}
on_both_runtimes!(
    links_planted_in_workitems_are_never_followed,
    links_in_workitems_are_not_followed
);

async fn links_in_node_dirs_are_not_followed(rt: Rt) {
    let s = TestServer::start(rt).await;
    let host = host_dir();
    let before = tree(host.path());
    let body = json!({"id": "n", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
                      "startTask": {"commandLine": "echo boot >> $AZ_BATCH_NODE_SHARED_DIR/boots"}});
    assert_eq!(s.post("/pools", &body).await.0, 201);
    let node = s.wait_nodes("n", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        s.post("/jobs", &json!({"id": "j", "poolInfo": {"poolId": "n"}}))
            .await
            .0,
        201
    );
    // The start task's directory and a file in the shared one become links to the host.
    let command = format!(
        "R=$AZ_BATCH_NODE_ROOT_DIR; rm -rf $R/startup && ln -sfn {h} $R/startup && ln -sfn {h}/secret $R/shared/secret",
        h = host.path().display()
    );
    run_task(&s, "j", "ln", &command).await;
    for path in ["shared/secret", "startup/secret", "startup/etc/passwd"] {
        let (status, body) = s.get(&format!("/pools/n/nodes/{node}/files/{path}")).await;
        assert_ne!(status, 200, "{path}: {body}");
        assert!(!body.to_string().contains("canary"), "{path}: {body}");
    }
    let (_, body) = s
        .get(&format!("/pools/n/nodes/{node}/files?recursive=true"))
        .await;
    assert!(!body.to_string().contains("passwd"), "{body}");

    // A reboot runs the start task again, in a directory of its own.
    let reboot = format!("/pools/n/nodes/{node}/reboot");
    assert_eq!(s.post(&reboot, &json!({})).await.0, 202);
    wait_for("the second boot", || async {
        let boots = s.shared_file("n", &node, "boots").await;
        (boots == "boot\nboot\n").then_some(())
    })
    .await;
    assert_eq!(
        tree(host.path()),
        before,
        "nothing made in the host directory"
    );

    // Removing the node removes its directory, not what its links point at.
    run_task(&s, "j", "ln2", &command).await;
    assert_eq!(s.delete("/pools/n").await.0, 202);
    wait_for("the pool to be deleted", || async {
        (s.get("/pools/n").await.0 == 404).then_some(())
    })
    .await;
    assert_eq!(
        tree(host.path()),
        before,
        "the node's removal left the host directory"
    );
}
on_both_runtimes!(
    links_planted_in_a_node_are_never_followed,
    links_in_node_dirs_are_not_followed
);

async fn deleting_files_follows_no_link(rt: Rt) {
    let s = TestServer::start(rt).await;
    let host = host_dir();
    let before = tree(host.path());
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let command = format!(
        "mkdir -p d/e empty; printf x > d/e/f; printf y > keep; ln -s {h}/secret link; ln -s {h} linkdir",
        h = host.path().display()
    );
    let t = run_task(&s, "j", "t", &command).await;
    let node = t["nodeInfo"]["nodeId"].as_str().unwrap().to_string();
    let file = |path: &str| format!("/jobs/j/tasks/t/files/{path}");

    // A link is not the task's file: deleting it or through it finds nothing, and what it points
    // at stays.
    for link in [
        "wd/link",
        "wd/linkdir",
        "wd/linkdir/secret",
        "wd/linkdir?recursive=true",
    ] {
        let (status, body) = s.delete(&file(link)).await;
        assert_eq!(status, 404, "{link}: {body}");
    }
    assert_eq!(tree(host.path()), before, "nothing deleted on the host");

    // A directory with files in it goes only with recursive=true.
    let (status, body) = s.delete(&file("wd/d")).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "DirectoryNotEmpty", "{body}");
    assert_eq!(s.delete(&file("wd/d?recursive=true")).await.0, 200);
    assert_eq!(s.delete(&file("wd/empty")).await.0, 200);
    let via_node = format!("/pools/p/nodes/{node}/files/workitems/j/job-1/t/wd/keep");
    assert_eq!(s.delete(&via_node).await.0, 200);
    assert_eq!(s.delete(&via_node).await.0, 404, "deleted already");
    let (_, listing) = s.get("/jobs/j/tasks/t/files?recursive=true").await;
    let names = common::names(&listing);
    for gone in ["wd/d", "wd/d/e/f", "wd/empty", "wd/keep"] {
        assert!(!names.iter().any(|n| n == gone), "{gone} in {names:?}");
    }
    assert!(names.iter().any(|n| n == "stdout.txt"), "{names:?}");
    // The attempts' records and paths out of the directory are not the user's to delete.
    assert_eq!(s.delete(&file(".batchpool?recursive=true")).await.0, 404);
    assert_eq!(s.delete(&file("wd/..%2F..%2Fx")).await.0, 400);
    assert_eq!(tree(host.path()), before, "nothing deleted on the host");
}
on_both_runtimes!(
    files_are_deleted_on_their_node_following_no_link,
    deleting_files_follows_no_link
);

/// The server's resident memory (`VmRSS`) or its peak (`VmHWM`), in bytes.
fn memory(s: &TestServer, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_stream_in_constant_memory() {
    const SIZE: u64 = 200_000_000;
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let command = format!("head -c {SIZE} /dev/zero > big; printf end >> big");
    run_task(&s, "j", "big", &command).await;
    let url = format!("{}/jobs/j/tasks/big/files/wd/big", s.base);
    let before = memory(&s, "VmRSS");

    let ranged = s
        .http
        .get(&url)
        .header("ocp-range", &format!("bytes={SIZE}-{}", SIZE + 2))
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 200);
    assert_eq!(ranged.headers()["content-length"], "3");
    assert_eq!(ranged.text().await.unwrap(), "end");

    let mut whole = s.http.get(&url).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(
        whole.headers()["content-length"],
        (SIZE + 3).to_string().as_str()
    );
    let mut read = 0;
    while let Some(chunk) = whole.chunk().await.unwrap() {
        read += chunk.len() as u64;
    }
    assert_eq!(read, SIZE + 3);

    let growth = memory(&s, "VmHWM").saturating_sub(before);
    // RELIABILITY.md quotes this (`-- --nocapture`).
    eprintln!(
        "a ranged and a whole read of {SIZE} bytes: RSS {} MB before, peak {} MB after",
        before >> 20,
        memory(&s, "VmHWM") >> 20
    );
    assert!(
        growth < 64 * 1024 * 1024,
        "serving a {SIZE}-byte file grew the server by {growth} bytes"
    );
}
