//! Auto-users (`userIdentity.autoUser`) on Docker nodes: an administrator is the node's root; a
//! non-administrator of `pool` scope is the node's one unprivileged user, and one of `task`
//! scope a user of the task's own, whose task directory the node's other users cannot enter.

mod common;

use common::blobs::{container, put_blob};
use common::{Rt, TestServer};
use serde_json::{json, Value};

fn auto(scope: &str, level: &str) -> Value {
    json!({"autoUser": {"scope": scope, "elevationLevel": level}})
}

/// What a task prints: its uid and gid, whether the root directory and its own directories can be
/// written, and whether its home is its task directory.
const PROBE: &str = r#"echo "uid $(id -u) gid $(id -g)"
touch "/probe.$AZ_BATCH_TASK_ID" 2>/dev/null && echo "root writable" || echo "root closed"
echo mine > "$AZ_BATCH_TASK_WORKING_DIR/mine.txt" && echo "wd writable"
echo "$AZ_BATCH_TASK_ID" > "$AZ_BATCH_NODE_SHARED_DIR/$AZ_BATCH_TASK_ID" && echo "shared writable"
if test "$HOME" = "$AZ_BATCH_TASK_DIR"; then echo "home is the task directory"; fi"#;

/// The uid a probe printed.
fn uid(out: &str) -> u32 {
    let line = out.lines().next().unwrap_or_default();
    let uid = line.split_whitespace().nth(1).unwrap_or_default();
    uid.parse().unwrap_or_else(|_| panic!("no uid in {out:?}"))
}

#[tokio::test]
async fn each_auto_user_runs_its_tasks_as_its_scope_and_elevation_say() {
    // Azurite, on this host, holds a task's resource files.
    let s = TestServer::start_allowing_local_urls(Rt::Docker, &[]).await;
    let start = json!({"commandLine": "id -u > $AZ_BATCH_NODE_SHARED_DIR/start.uid && echo ok > $AZ_BATCH_TASK_WORKING_DIR/ok",
        "userIdentity": auto("pool", "nonadmin"), "waitForSuccess": true});
    let pool = json!({"id": "p", "vmSize": "standard_a1", "targetDedicatedNodes": 1,
        "taskSlotsPerNode": 4, "startTask": start});
    let (status, answer) = s.post("/pools", &pool).await;
    assert_eq!(status, 201, "{answer}");
    let node = s.wait_nodes("p", 1, "idle").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, got) = s.get("/pools/p").await;
    assert_eq!(got["startTask"]["userIdentity"], auto("pool", "nonadmin"));
    let start_uid = s.shared_file("p", &node, "start.uid").await;
    assert_eq!(start_uid, "1000000\n", "the start task's user");

    let prep = json!({"commandLine": "id -u > $AZ_BATCH_NODE_SHARED_DIR/prep.uid", "userIdentity": auto("task", "nonadmin")});
    let job = json!({"id": "j", "poolInfo": {"poolId": "p"}, "jobPreparationTask": prep});
    assert_eq!(s.post("/jobs", &job).await.0, 201);
    let probe = |id: &str, identity: Option<Value>| {
        let mut task = json!({"id": id, "commandLine": PROBE});
        if let Some(identity) = identity {
            task["userIdentity"] = identity;
        }
        task
    };
    s.add_tasks(
        "j",
        vec![
            probe("admin", None),
            probe("pool-1", Some(auto("pool", "nonadmin"))),
            probe("pool-2", Some(json!({"autoUser": {}}))),
            probe("own-1", Some(auto("task", "nonadmin"))),
            probe("own-2", Some(auto("task", "nonadmin"))),
        ],
    )
    .await;
    let tasks = s.wait_all_completed("j", 5).await;
    for t in &tasks {
        assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
    }
    let shown = s.task("j", "pool-2").await;
    assert_eq!(
        shown["userIdentity"],
        auto("pool", "nonadmin"),
        "Azure's defaults"
    );

    let admin = s.stdout("j", "admin").await;
    assert!(admin.starts_with("uid 0 gid 0\nroot writable\n"), "{admin}");
    let mut own = Vec::new();
    for id in ["pool-1", "pool-2", "own-1", "own-2"] {
        let out = s.stdout("j", id).await;
        let expected = "root closed\nwd writable\nshared writable\nhome is the task directory\n";
        assert!(out.ends_with(expected), "{id}: {out}");
        let uid = uid(&out);
        assert!(
            out.starts_with(&format!("uid {uid} gid {uid}\n")),
            "{id}: {out}"
        );
        if id.starts_with("pool") {
            assert_eq!(uid, 1_000_000, "{id}: {out}");
        } else {
            assert!(uid > 1_000_000, "{id}: {out}");
            own.push(uid);
        }
    }
    assert_ne!(own[0], own[1], "each task-scope task has a user of its own");
    let prep_uid = s.shared_file("p", &node, "prep.uid").await;
    let prep_uid: u32 = prep_uid.trim().parse().expect("the preparation task's uid");
    assert!(
        prep_uid > 1_000_000 && !own.contains(&prep_uid),
        "{prep_uid}"
    );

    // Another task-scope user cannot enter a task-scope task's directory; the pool's user
    // cannot either, and root can.
    let peek = r#"cat "$AZ_BATCH_TASK_DIR/../own-1/wd/mine.txt" 2>/dev/null || echo closed"#;
    s.add_tasks(
        "j",
        vec![
            json!({"id": "peek-own", "commandLine": peek, "userIdentity": auto("task", "nonadmin")}),
            json!({"id": "peek-pool", "commandLine": peek, "userIdentity": auto("pool", "nonadmin")}),
            json!({"id": "peek-admin", "commandLine": peek}),
        ],
    )
    .await;
    s.wait_all_completed("j", 8).await;
    assert_eq!(s.stdout("j", "peek-own").await, "closed\n");
    assert_eq!(s.stdout("j", "peek-pool").await, "closed\n");
    assert_eq!(s.stdout("j", "peek-admin").await, "mine\n");
    // The pool's user shares its tasks' directories: one pool-scope task reads another's.
    let pool_peek = r#"cat "$AZ_BATCH_TASK_DIR/../pool-1/wd/mine.txt""#;
    let task = json!({"id": "pool-peek", "commandLine": pool_peek, "userIdentity": auto("pool", "nonadmin")});
    s.add_tasks("j", vec![task]).await;
    let t = s.wait_task("j", "pool-peek", "completed").await;
    assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
    assert_eq!(s.stdout("j", "pool-peek").await, "mine\n");

    // Its resource files are its user's: it changes them, and writes in their directories.
    let (name, url) = container("rl").await;
    put_blob(&format!("{name}/in/a.txt"), "from storage\n").await;
    let edit = "echo edited >> in/a.txt && echo new > in/new.txt && cat in/a.txt in/new.txt";
    let task = json!({"id": "edit", "commandLine": edit, "userIdentity": auto("task", "nonadmin"),
        "resourceFiles": [{"storageContainerUrl": url, "blobPrefix": "in/"}]});
    s.add_tasks("j", vec![task]).await;
    let t = s.wait_task("j", "edit", "completed").await;
    assert_eq!(t["executionInfo"]["exitCode"], 0, "{t}");
    assert_eq!(s.stdout("j", "edit").await, "from storage\nedited\nnew\n");

    // A named user is refused by name, and nothing is added.
    let named_user =
        json!({"id": "alice", "commandLine": "true", "userIdentity": {"userName": "alice"}});
    let (status, answer) = s.post("/jobs/j/tasks", &named_user).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        answer["values"][0]["value"], "userIdentity.userName",
        "{answer}"
    );
    assert_eq!(
        s.get("/jobs/j/tasks/alice").await.0,
        404,
        "a refused task is not added"
    );
}
