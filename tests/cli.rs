//! The command line client (`batchpool pool|job|task|queue|status`) against a real server: each
//! command run as a user runs it, its output and exit status checked, and what it did checked
//! through the API.

mod common;

use common::{wait_for, Rt, TestServer};
use serde_json::Value;

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Runs `batchpool ARGS` with the account settings in the environment, as a user exports them.
async fn cli(s: &TestServer, args: &[&str]) -> Run {
    let (account, key) = s.http.credentials.lock().unwrap().clone().expect("started");
    cli_with(
        args,
        &[
            ("BATCH_URL", &s.base),
            ("BATCH_ACCOUNT", &account),
            ("BATCH_KEY", &key),
        ],
    )
    .await
}

async fn cli_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_batchpool"));
    command
        .args(args)
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME");
    for var in [
        "BATCH_URL",
        "BATCH_ACCOUNT",
        "BATCH_KEY",
        "BATCHPOOL_PROFILE",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let out = command.output().await.expect("running batchpool");
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

impl Run {
    fn ok(self) -> Run {
        assert_eq!(
            self.status, 0,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
    /// The error line: exit status 1 and exactly one line on stderr.
    fn error(&self) -> &str {
        assert_eq!(
            self.status, 1,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        assert_eq!(self.stderr.lines().count(), 1, "one line: {}", self.stderr);
        self.stderr.trim_end()
    }
}

/// The row of a table whose first cell is `first`, split into cells.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first} in:\n{table}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_are_made_sized_shown_and_deleted_from_the_command_line() {
    let s = TestServer::start(Rt::Local).await;
    let made = cli(
        &s,
        &[
            "pool", "create", "cli-pool", "--nodes", "2", "--slots", "4", "--wait",
        ],
    )
    .await
    .ok();
    assert!(
        made.stdout
            .contains("pool cli-pool created (standard_a1); 2 of 2 nodes"),
        "{}",
        made.stdout
    );

    // A pool with its own image and a start task: each node runs it before it takes tasks.
    let start = "echo ready > $AZ_BATCH_NODE_SHARED_DIR/ready";
    let image = common::TEST_IMAGE;
    let args = [
        "pool",
        "create",
        "st-pool",
        "--nodes",
        "1",
        "--image",
        image,
        "--start-task",
        start,
        "--wait",
    ];
    cli(&s, &args).await.ok();
    let shown: serde_json::Value = serde_json::from_str(
        &cli(&s, &["pool", "show", "st-pool", "-o", "json"])
            .await
            .ok()
            .stdout,
    )
    .unwrap();
    let config = &shown["virtualMachineConfiguration"]["containerConfiguration"];
    assert_eq!(config["containerImageNames"][0], image, "{shown}");
    let node = s.nodes("st-pool").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.shared_file("st-pool", &node, "ready").await, "ready\n");
    assert_eq!(s.nodes("st-pool").await[0]["startTaskInfo"]["exitCode"], 0);

    let list = cli(&s, &["pool", "list"]).await.ok().stdout;
    assert_eq!(
        row(&list, "POOL"),
        [
            "POOL",
            "STATE",
            "ALLOCATION",
            "VM",
            "SIZE",
            "NODES",
            "SLOTS/NODE"
        ]
    );
    assert_eq!(
        row(&list, "cli-pool"),
        ["cli-pool", "active", "steady", "standard_a1", "2/2", "4"]
    );
    let json = cli(&s, &["pool", "list", "--output", "json"])
        .await
        .ok()
        .json();
    assert_eq!(json[0]["id"], "cli-pool");
    assert_eq!(json[0]["taskSlotsPerNode"], 4);

    let shown = cli(&s, &["pool", "show", "cli-pool"]).await.ok().stdout;
    assert_eq!(
        shown.lines().filter(|l| l.contains(" idle ")).count(),
        2,
        "{shown}"
    );
    let status = cli(&s, &["status"]).await.ok().stdout;
    assert_eq!(
        row(&status, "cli-pool")[3..6],
        ["2/2", "2", "0"],
        "NODES IDLE RUNNING: {status}"
    );

    let resized = cli(
        &s,
        &["pool", "resize", "cli-pool", "0", "--wait", "-o", "json"],
    )
    .await
    .ok()
    .json();
    assert_eq!(resized["currentDedicatedNodes"], 0);
    assert_eq!(s.get("/pools/cli-pool").await.1["targetDedicatedNodes"], 0);

    cli(&s, &["pool", "delete", "cli-pool"]).await.ok();
    wait_for("the pool to go", || async {
        (s.get("/pools/cli-pool").await.0 == 404).then_some(())
    })
    .await;

    let missing = cli(&s, &["pool", "show", "cli-pool"]).await;
    let line = missing.error();
    assert!(
        line.starts_with("batchpool: PoolNotFound: ") && line.ends_with("(HTTP 404)"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_come_from_a_profile_and_a_wrong_key_is_one_clear_line() {
    let s = TestServer::start(Rt::Local).await;
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    let profile = dir.path().join("profile");
    let text = format!(
        "# mine\nurl = {}\naccount = {account}\nkey-file = {}\n",
        s.base,
        key_file.display()
    );
    std::fs::write(&profile, text).unwrap();
    let profile = profile.to_str().unwrap();
    let listed = cli_with(&["pool", "list", "-o", "json", "--profile", profile], &[])
        .await
        .ok();
    assert_eq!(listed.json(), serde_json::json!([]));

    let wrong = "AAAA".repeat(16);
    let refused = cli_with(&["status", "--profile", profile, "--key", &wrong], &[]).await;
    assert!(
        refused
            .error()
            .starts_with("batchpool: AuthenticationFailed: "),
        "{}",
        refused.stderr
    );
    let none = cli_with(&["queue"], &[("BATCH_URL", &s.base)]).await;
    assert!(none.error().contains("BATCH_KEY"), "{}", none.stderr);
    let unreachable = cli_with(
        &["queue", "--url", "http://127.0.0.1:1", "--key", &wrong],
        &[],
    )
    .await;
    assert!(
        unreachable
            .error()
            .contains("cannot reach http://127.0.0.1:1"),
        "{}",
        unreachable.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_job_runs_and_watch_exits_by_whether_every_task_succeeded() {
    let s = TestServer::start(Rt::Local).await;
    cli(
        &s,
        &[
            "pool", "create", "p", "--nodes", "1", "--slots", "8", "--wait",
        ],
    )
    .await
    .ok();
    let word = "echo item {} $BATCHPOOL_ARRAY_INDEX";
    let submit = [
        "job", "submit", "--pool", "p", "--job", "arr", "--array", "1-250", "--", "sh", "-c", word,
    ];
    let submitted = cli(&s, &submit).await.ok();
    assert!(
        submitted
            .stdout
            .contains("job arr: 250 tasks submitted to pool p"),
        "{}",
        submitted.stdout
    );
    let watched = cli(&s, &["job", "watch", "arr", "--timeout", "300"])
        .await
        .ok();
    // Not a terminal: a line per change, then the verdict.
    assert!(
        watched.stdout.lines().any(|l| l.contains("/250 done")),
        "{}",
        watched.stdout
    );
    assert_eq!(
        watched.stdout.lines().last(),
        Some("job arr: all 250 tasks succeeded")
    );
    // On a terminal (`script` gives it one): a bar, drawn again in place.
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let watch = format!("{} job watch arr", env!("CARGO_BIN_EXE_batchpool"));
    let tty = tokio::process::Command::new("script")
        .args(["-qec", &watch, "/dev/null"])
        .envs([
            ("BATCH_URL", s.base.as_str()),
            ("BATCH_ACCOUNT", &account),
            ("BATCH_KEY", &key),
        ])
        .output()
        .await
        .expect("running script(1)");
    let screen = String::from_utf8_lossy(&tty.stdout);
    let bar = format!(
        "\r\x1b[2K[{}] 250/250 done  active 0  running 0  succeeded 250",
        "#".repeat(30)
    );
    assert!(tty.status.success() && screen.contains(&bar), "{screen:?}");
    let out = s.file("/jobs/arr/tasks/137/files/stdout.txt").await;
    assert_eq!(out.as_deref(), Some("item 137 137\n"));
    let queue = cli(&s, &["queue"]).await.ok().stdout;
    assert_eq!(
        row(&queue, "arr"),
        ["arr", "p", "active", "0", "0", "250", "0", "-"]
    );
    // Work sent to a pool that is not there says why it waits.
    let lost = [
        "job", "submit", "--pool", "nowhere", "--job", "lost", "--", "true",
    ];
    cli(&s, &lost).await.ok();
    let waiting = wait_for("the queue to say why job lost waits", || async {
        let queue = cli(&s, &["queue"]).await.ok().stdout;
        row(&queue, "lost")
            .ends_with(&["PoolNotFound"])
            .then_some(queue)
    })
    .await;
    assert_eq!(
        row(&waiting, "lost")[..3],
        ["lost", "nowhere", "active"],
        "{waiting}"
    );
    let shown = cli(&s, &["task", "show", "lost", "1"]).await.ok().stdout;
    let line = "waits          PoolNotFound: The job's pool \"nowhere\" does not exist";
    assert!(
        shown.lines().any(|l| l.starts_with(line)),
        "{line:?} in:\n{shown}"
    );
    assert!(
        shown.lines().any(|l| l.starts_with("waiting since  20")),
        "{shown}"
    );
    assert_eq!(cli(&s, &["job", "delete", "lost"]).await.status, 0);

    let dir = tempfile::tempdir().unwrap();
    let commands = dir.path().join("commands.txt");
    std::fs::write(&commands, "true\n# not a task\n\nexit 3\necho fine\n").unwrap();
    let file = commands.to_str().unwrap();
    let failed = cli(
        &s,
        &[
            "job", "submit", "--pool", "p", "--job", "mixed", "--file", file, "--watch",
        ],
    )
    .await;
    assert_eq!(failed.status, 1, "{}{}", failed.stdout, failed.stderr);
    assert!(
        failed
            .stdout
            .contains("job mixed: 1 of 3 tasks failed\n  2  exit code 3"),
        "{}",
        failed.stdout
    );
    let json = cli(&s, &["job", "watch", "mixed", "-o", "json"]).await;
    assert_eq!(json.status, 1);
    let json = json.json();
    assert_eq!(json["taskCounts"]["succeeded"], 2);
    assert_eq!(json["failedTasks"][0]["id"], "2");
    assert_eq!(json["failedTasks"][0]["exitCode"], 3);

    cli(
        &s,
        &[
            "job", "submit", "--pool", "p", "--job", "slow", "--", "sleep 30",
        ],
    )
    .await
    .ok();
    let timed_out = cli(&s, &["job", "watch", "slow", "--timeout", "1"]).await;
    assert_eq!(timed_out.status, 124, "{}", timed_out.stdout);
    assert!(
        timed_out.stdout.contains("job slow: not done after 1 s"),
        "{}",
        timed_out.stdout
    );
    let elsewhere = cli(
        &s,
        &[
            "job", "submit", "--pool", "other", "--job", "slow", "--", "true",
        ],
    )
    .await;
    assert!(
        elsewhere
            .error()
            .contains("job slow exists on pool p, not other"),
        "{}",
        elsewhere.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_a_running_task_until_it_completes() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    let script = "for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done; echo oops >&2";
    cli(
        &s,
        &["job", "submit", "--pool", "p", "--job", "j", "--", script],
    )
    .await
    .ok();
    // Followed from before the task starts (no stdout yet) to after it ends.
    let followed = cli(&s, &["task", "logs", "j", "1", "-f"]).await.ok();
    assert_eq!(followed.stdout, "line 1\nline 2\nline 3\nline 4\nline 5\n");
    let stderr = cli(&s, &["task", "logs", "j", "1", "--stderr"]).await.ok();
    assert_eq!(stderr.stdout, "oops\n");
    let json = cli(&s, &["task", "logs", "j", "1", "-o", "json"])
        .await
        .ok()
        .json();
    assert_eq!(json["content"], "line 1\nline 2\nline 3\nline 4\nline 5\n");
    let missing = cli(&s, &["task", "logs", "j", "2"]).await;
    assert!(
        missing.error().starts_with("batchpool: TaskNotFound: "),
        "{}",
        missing.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_terminated_and_deleted_and_a_task_says_how_it_ended() {
    let s = TestServer::start(Rt::Local).await;
    let pool = [
        "pool", "create", "p", "--nodes", "1", "--slots", "4", "--wait",
    ];
    cli(&s, &pool).await.ok();
    let mixed = [
        "job", "submit", "--pool", "p", "--job", "mixed", "--", "exit 3",
    ];
    cli(&s, &mixed).await.ok();
    assert_eq!(cli(&s, &["job", "watch", "mixed"]).await.status, 1);
    let shown = cli(&s, &["task", "show", "mixed", "1"]).await.ok().stdout;
    for line in [
        "job        mixed",
        "task       1",
        "state      completed",
        "command    exit 3",
        "result     failure",
        "exit code  3",
        "failure    FailureExitCode: The task exited with exit code 3, representing a failure",
    ] {
        assert!(shown.lines().any(|l| l == line), "{line:?} in:\n{shown}");
    }
    let job = cli(&s, &["job", "show", "mixed"]).await.ok().stdout;
    for line in [
        "job       mixed",
        "pool      p",
        "tasks     0 active, 0 running, 1 completed, 0 succeeded, 1 failed",
    ] {
        assert!(job.lines().any(|l| l == line), "{line:?} in:\n{job}");
    }
    assert!(!job.contains("cost"), "no prices, no cost:\n{job}");
    let json = cli(&s, &["task", "show", "mixed", "1", "-o", "json"]).await;
    assert_eq!(json.ok().json()["executionInfo"]["exitCode"], 3);
    let listed = cli(&s, &["task", "list", "mixed", "--failed"])
        .await
        .ok()
        .stdout;
    let cells = row(&listed, "1");
    assert_eq!(cells[..4], ["1", "completed", "failure", "3"], "{listed}");
    assert!(cells[4].starts_with("tvmps_"), "{listed}");

    // Six tasks on four slots: four run, two wait, and the job ends under them.
    let slow = [
        "job",
        "submit",
        "--pool",
        "p",
        "--job",
        "slow",
        "--array",
        "6",
        "--",
        "sleep 600",
    ];
    cli(&s, &slow).await.ok();
    wait_for("four running tasks", || async {
        let (_, counts) = s.get("/jobs/slow/taskcounts").await;
        (counts["taskCounts"]["running"] == 4).then_some(())
    })
    .await;
    let terminate = ["job", "terminate", "slow", "--reason", "not needed"];
    let said = cli(&s, &terminate).await.ok().stdout;
    assert_eq!(said, "job slow terminating\n");
    // Not waited on for ever: the job ended, and its active tasks never run.
    let watched = cli(&s, &["job", "watch", "slow", "--timeout", "60"]).await;
    assert_eq!(watched.status, 1, "{}", watched.stdout);
    assert!(
        watched
            .stdout
            .contains("job slow: 4 of 6 tasks failed, 2 never ran (the job ended first)\n"),
        "{}",
        watched.stdout
    );
    let json = cli(&s, &["job", "watch", "slow", "-o", "json"])
        .await
        .json();
    assert_eq!(json["notRun"], 2);
    let state = ["task", "list", "slow", "--state", "active", "-o", "json"];
    let active = cli(&s, &state).await.ok().json();
    assert_eq!(active.as_array().map(Vec::len), Some(2), "{active}");
    let all = cli(&s, &["task", "list", "slow"]).await.ok().stdout;
    assert_eq!(all.lines().count(), 7, "a header and six tasks:\n{all}");
    let failed = ["task", "list", "slow", "--state", "completed", "--failed"];
    let ended = cli(&s, &failed).await.ok().stdout;
    assert_eq!(
        ended.lines().count(),
        5,
        "a header and four tasks:\n{ended}"
    );
    let (_, job) = s.get("/jobs/slow").await;
    assert_eq!(job["executionInfo"]["terminateReason"], "not needed");
    let running = wait_for("a terminated task", || async {
        let (_, tasks) = s
            .get("/jobs/slow/tasks?$filter=state%20eq%20'completed'")
            .await;
        tasks["value"][0]["id"].as_str().map(String::from)
    })
    .await;
    let shown = cli(&s, &["task", "show", "slow", &running])
        .await
        .ok()
        .stdout;
    let why = "failure   TaskEnded: The task was terminated: its job was terminated (not needed)";
    assert!(shown.lines().any(|l| l == why), "{shown}");
    let waiting = wait_for("a task that never ran", || async {
        let (_, tasks) = s
            .get("/jobs/slow/tasks?$filter=state%20eq%20'active'")
            .await;
        tasks["value"][0]["id"].as_str().map(String::from)
    })
    .await;
    // Following the output of a task that will never run ends too.
    let follow = ["task", "logs", "slow", &waiting, "-f"];
    let followed = tokio::time::timeout(std::time::Duration::from_secs(60), cli(&s, &follow));
    followed
        .await
        .expect("logs -f of a task that never runs ends")
        .ok();

    let deleted = cli(&s, &["job", "delete", "slow"]).await.ok().stdout;
    assert_eq!(deleted, "job slow deleting\n");
    wait_for("the job gone", || async {
        let (status, _) = s.get("/jobs/slow").await;
        (status == 404).then_some(())
    })
    .await;
    let gone = cli(&s, &["job", "terminate", "slow"]).await;
    assert!(
        gone.error().starts_with("batchpool: JobNotFound"),
        "{}",
        gone.stderr
    );
    let missing = cli(&s, &["task", "show", "mixed", "9"]).await;
    assert!(
        missing.error().starts_with("batchpool: TaskNotFound"),
        "{}",
        missing.stderr
    );
}

/// `pool create --job-order` and `job submit --priority --max-parallel` reach the pool and the
/// job; given again for a job that exists, they change it. Two jobs of equal priority on a
/// pool whose jobs take turns both run, the limited one never more than its limit at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_limits_and_turns_are_set_from_the_command_line() {
    let s = TestServer::start(Rt::Local).await;
    let args = ["pool", "create", "shared", "--nodes", "1", "--slots", "4"];
    cli(
        &s,
        &[&args[..], &["--job-order", "none", "--wait"]].concat(),
    )
    .await
    .ok();
    let (_, pool) = s.get("/pools/shared").await;
    assert_eq!(pool["taskSchedulingPolicy"]["jobDefaultOrder"], "none");
    let shown = cli(&s, &["pool", "show", "shared"]).await.ok().stdout;
    assert!(
        shown
            .lines()
            .any(|l| l.split_whitespace().eq(["job", "order", "none"])),
        "{shown}"
    );

    // Each task notes how many of its job's tasks run beside it, itself included.
    let note =
        "d=$AZ_BATCH_NODE_SHARED_DIR/$AZ_BATCH_JOB_ID; mkdir -p $d; touch $d/$AZ_BATCH_TASK_ID; \
        ls $d | wc -l >> $d.most; sleep 0.5; rm $d/$AZ_BATCH_TASK_ID";
    let submit = ["job", "submit", "--pool", "shared", "--array", "1-6"];
    let limited = [
        &submit[..],
        &["--job", "slow", "--priority", "-5", "--max-parallel", "1"],
    ];
    cli(&s, &[&limited.concat()[..], &["--", note]].concat())
        .await
        .ok();
    let (_, job) = s.get("/jobs/slow").await;
    assert_eq!(
        (job["priority"].as_i64(), job["maxParallelTasks"].as_i64()),
        (Some(-5), Some(1))
    );
    let more = [
        "job", "submit", "--pool", "shared", "--job", "slow", "--array", "7-8",
    ];
    cli(
        &s,
        &[
            &more[..],
            &["--priority", "0", "--max-parallel", "2", "--", note],
        ]
        .concat(),
    )
    .await
    .ok();
    let (_, job) = s.get("/jobs/slow").await;
    assert_eq!(
        (job["priority"].as_i64(), job["maxParallelTasks"].as_i64()),
        (Some(0), Some(2))
    );
    let other = [&submit[..], &["--job", "fast", "--", note]];
    cli(&s, &other.concat()).await.ok();
    for job in ["slow", "fast"] {
        cli(&s, &["job", "watch", job, "--timeout", "120"])
            .await
            .ok();
    }
    let node = s.nodes("shared").await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let most = |text: String| {
        text.lines()
            .filter_map(|l| l.trim().parse::<u32>().ok())
            .max()
    };
    let slow = most(s.shared_file("shared", &node, "slow.most").await);
    assert!(
        slow.is_some_and(|n| n <= 2),
        "at most 2 of slow at once: {slow:?}"
    );
}
