//! Resource files (needs Azurite: run `eval "$(scripts/test-env.sh)"` first, which sets
//! BATCHPOOL_TEST_AZURITE; skipped otherwise). On a local pool of one node, against plain `curl`
//! of the same URLs into a directory on the same disk:
//! - BENCH_SMALL_BLOBS (1,000) blobs of 1 KiB through one `storageContainerUrl` resource file,
//!   against `xargs -P 8 curl` of each blob's URL (8 at a time, as the server fetches);
//! - one blob of BENCH_BIG_MIB (1,024) MiB through an `httpUrl` resource file, against one `curl`.
//!
//! The server's figure is the task's `preparing` time: from its executionInfo.startTime (claimed,
//! downloads begin) to the moment it became `running` (previousStateTransitionTime once it has
//! completed). Each is measured twice, alternating with its baseline, and the best of each is
//! reported.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use serde_json::json;

use super::{blobs, timed_shell, Server};
use batchpool::storage;

pub async fn run(small: usize, big_mib: usize) {
    if std::env::var_os("BATCHPOOL_TEST_AZURITE").is_none() {
        println!(
            "data: skipped (no BATCHPOOL_TEST_AZURITE: eval \"$(scripts/test-env.sh)\" first)"
        );
        return;
    }
    let azurite = blobs::azurite();
    let container = format!("bench{}", Utc::now().timestamp());
    let any = blobs::blob(&format!("{container}/x"));
    any.ensure_container(&reqwest::Client::new()).await.unwrap();
    let objects = Arc::clone(&any.store);
    let body = vec![b'x'; 1024];
    let uploads: Vec<_> = (0..small)
        .map(|i| {
            let objects = Arc::clone(&objects);
            let body = body.clone();
            async move {
                let path = object_store::path::Path::from(format!("small/f{i:05}.txt"));
                objects.put(&path, PutPayload::from(body)).await.unwrap();
            }
        })
        .collect();
    futures_util::stream::iter(uploads)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let big = object_store::path::Path::from("big/blob.bin");
    let mut writer =
        WriteMultipart::new_with_chunk_size(objects.put_multipart(&big).await.unwrap(), 8 << 20);
    let chunk = vec![7u8; 1 << 20];
    for _ in 0..big_mib {
        writer.wait_for_capacity(4).await.unwrap();
        writer.write(&chunk);
    }
    writer.finish().await.unwrap();

    let account = storage::parse_connection_string(&blobs::connection_string()).unwrap();
    let expiry = Utc::now() + chrono::Duration::hours(2);
    let sas = storage::container_sas(&account, &container, "rl", expiry);
    let container_url = format!("{azurite}/{container}{sas}");
    let big_url = format!("{azurite}/{container}/big/blob.bin{sas}");
    let scratch = tempfile::tempdir().unwrap();
    let urls = scratch.path().join("urls.txt");
    let lines: String = (0..small)
        .map(|i| format!("{azurite}/{container}/small/f{i:05}.txt{sas}\n"))
        .collect();
    std::fs::write(&urls, lines).unwrap();
    let out = scratch.path().join("out");

    let s = Server::with_pool("local", "data", 1, 1, "data").await;
    let (mut ours_small, mut curl_small, mut ours_big, mut curl_big) =
        (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    for round in 0..2 {
        let files = json!([{"storageContainerUrl": container_url, "blobPrefix": "small/", "filePath": "in"}]);
        ours_small = ours_small.min(preparing(&s, &format!("small{round}"), files).await);
        curl_small = curl_small.min(timed_shell(&format!(
            "rm -rf {o} && mkdir -p {o} && cd {o} && xargs -P 8 -n 1 curl -sfO < {u}",
            o = out.display(),
            u = urls.display()
        )));
        let files = json!([{"httpUrl": big_url, "filePath": "big.bin"}]);
        ours_big = ours_big.min(preparing(&s, &format!("big{round}"), files).await);
        curl_big = curl_big.min(timed_shell(&format!(
            "rm -rf {o} && mkdir -p {o} && curl -sf -o {o}/big.bin '{big_url}'",
            o = out.display()
        )));
    }
    s.stop().await;
    println!(
        "data: {small} blobs of 1 KiB: {ours_small:.2} s ({:.0} files/s) vs xargs -P 8 curl {curl_small:.2} s: {:.2}x",
        small as f64 / ours_small,
        curl_small / ours_small
    );
    println!(
        "data: one {big_mib} MiB blob: {ours_big:.2} s ({:.0} MiB/s) vs curl {curl_big:.2} s: {:.2}x",
        big_mib as f64 / ours_big,
        curl_big / ours_big
    );
}

/// Runs a task with `files` (its command does nothing) and returns its preparing time in seconds.
async fn preparing(s: &Server, id: &str, files: serde_json::Value) -> f64 {
    s.create(
        "/jobs/data/tasks",
        json!({"id": id, "commandLine": "true", "resourceFiles": files}),
        201,
    )
    .await;
    let task = loop {
        let t = s.get(&format!("/jobs/data/tasks/{id}")).await;
        if t["state"] == "completed" {
            break t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(task["executionInfo"]["result"], "success", "{task}");
    let time = |v: &serde_json::Value| v.as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
    let started = time(&task["executionInfo"]["startTime"]);
    let running = time(&task["previousStateTransitionTime"]);
    (running - started).num_microseconds().unwrap() as f64 / 1e6
}
