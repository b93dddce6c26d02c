//! What speaking an older api-version costs on the hot routes: BENCH_VERSION_ROUNDS (200)
//! rounds, each one request of each kind in each version, interleaved so that the machine's
//! noise falls on all alike. The kinds: an addtaskcollection of 100 tasks (each with a
//! resource file, so the older shape has a property to translate) and a list of 1,000 tasks.
//! The versions: 2025-06-01 (the handlers' own shape: nothing is translated),
//! 2024-02-01.19.0 (no delta) and 2018-08-01.7.0 (every delta: its bodies and answers are
//! translated). p50 and p99 of each, and their ratio to 2025-06-01's. The pool has no node,
//! so nothing runs: the figures are the routes' alone.

use std::time::Instant;

use serde_json::{json, Value};

use super::{percentile, signed, sorted, Server};

const VERSIONS: [&str; 3] = ["2025-06-01", "2024-02-01.19.0", "2018-08-01.7.0"];

/// A resource file as `version` names it.
fn resource_file(version: &str) -> Value {
    let key = if version == "2018-08-01.7.0" {
        "blobSource"
    } else {
        "httpUrl"
    };
    json!([{key: "http://input.invalid/input.txt", "filePath": "input.txt"}])
}

pub async fn run(rounds: usize) {
    let s = Server::start("local").await;
    s.create("/pools", json!({"id": "vp", "vmSize": "standard_a1"}), 201)
        .await;
    for (v, version) in VERSIONS.iter().enumerate() {
        for job in [format!("add{v}"), format!("list{v}")] {
            s.create(
                "/jobs",
                json!({"id": job, "poolInfo": {"poolId": "vp"}}),
                201,
            )
            .await;
        }
        for batch in 0..10 {
            let tasks: Vec<Value> = (0..100)
                .map(|i| {
                    json!({"id": format!("t{batch}-{i}"), "commandLine": "true",
                    "resourceFiles": resource_file(version)})
                })
                .collect();
            let path = format!(
                "/jobs/list{v}/addtaskcollection?api-version={}",
                VERSIONS[v]
            );
            let (status, answer) = s.post(&path, &json!({"value": tasks})).await;
            let added = answer["value"]
                .as_array()
                .map(|r| r.iter().all(|t| t["status"] == "success"));
            assert_eq!((status, added), (200, Some(true)), "{answer}");
        }
    }
    let mut add = vec![Vec::new(); VERSIONS.len()];
    let mut list = vec![Vec::new(); VERSIONS.len()];
    for round in 0..rounds {
        for (v, version) in VERSIONS.iter().enumerate() {
            let q = format!("api-version={version}");
            let tasks: Vec<Value> = (0..100)
                .map(|i| {
                    json!({"id": format!("r{round}-{i}"), "commandLine": "true",
                    "resourceFiles": resource_file(version)})
                })
                .collect();
            let url = format!("{}/jobs/add{v}/addtaskcollection?{q}", s.base);
            let req = signed(&s.key, s.http.post(url).json(&json!({"value": tasks})));
            let started = Instant::now();
            let answer = s.http.execute(req).await.unwrap();
            assert_eq!(answer.status(), 200);
            answer.bytes().await.unwrap();
            add[v].push(started.elapsed().as_secs_f64() * 1000.0);

            let url = format!("{}/jobs/list{v}/tasks?{q}&maxresults=1000", s.base);
            let req = signed(&s.key, s.http.get(url));
            let started = Instant::now();
            let answer = s.http.execute(req).await.unwrap();
            assert_eq!(answer.status(), 200);
            let body: Value = answer.json().await.unwrap();
            list[v].push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(body["value"].as_array().map(Vec::len), Some(1000));
            let file = &body["value"][0]["resourceFiles"][0];
            assert!(
                file.get(if v == 2 { "blobSource" } else { "httpUrl" })
                    .is_some(),
                "{file}"
            );
        }
    }
    s.stop().await;
    for (what, figures) in [
        ("addtaskcollection (100 tasks)", add),
        ("list 1,000 tasks", list),
    ] {
        let newest = sorted(figures[0].clone());
        let (p50, p99) = (percentile(&newest, 0.5), percentile(&newest, 0.99));
        for (v, version) in VERSIONS.iter().enumerate() {
            let f = sorted(figures[v].clone());
            let (q50, q99) = (percentile(&f, 0.5), percentile(&f, 0.99));
            println!(
                "versions: {what} in {version}: p50 {q50:.2} ms ({:.3}x), p99 {q99:.2} ms ({:.3}x) ({rounds} rounds)",
                q50 / p50,
                q99 / p99
            );
        }
    }
}
