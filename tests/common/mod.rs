//! Test harness: the real server as its own process, on a random port, with a fresh database
//! and data directory, talked to over HTTP. Docker state is checked through the docker CLI.
#![allow(dead_code)]

pub mod blobs;
pub mod pg;
mod shared_key;
mod watchdog;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const TEST_IMAGE: &str = "batchpool-test-node:latest";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rt {
    Docker,
    Local,
}

impl Rt {
    fn name(self) -> &'static str {
        match self {
            Rt::Docker => "docker",
            Rt::Local => "local",
        }
    }
}

/// An HTTP client that signs every request with Shared Key, as the Azure SDKs do.
#[derive(Clone)]
pub struct Signed {
    client: reqwest::Client,
    /// (account, base64 key), known once the server has started.
    pub credentials: std::sync::Arc<std::sync::Mutex<Option<(String, String)>>>,
}

pub struct SignedRequest {
    builder: reqwest::RequestBuilder,
    signer: Signed,
}

impl Default for Signed {
    /// A request unanswered for 5 minutes fails its test, naming the request, rather than
    /// hanging it.
    fn default() -> Self {
        Signed {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(300))
                .build()
                .expect("an HTTP client"),
            credentials: Default::default(),
        }
    }
}

impl Signed {
    pub fn request(&self, method: reqwest::Method, url: impl reqwest::IntoUrl) -> SignedRequest {
        SignedRequest {
            builder: self.client.request(method, url),
            signer: self.clone(),
        }
    }
    pub fn get(&self, url: impl reqwest::IntoUrl) -> SignedRequest {
        self.request(reqwest::Method::GET, url)
    }
    pub fn head(&self, url: impl reqwest::IntoUrl) -> SignedRequest {
        self.request(reqwest::Method::HEAD, url)
    }
    pub fn post(&self, url: impl reqwest::IntoUrl) -> SignedRequest {
        self.request(reqwest::Method::POST, url)
    }
    pub fn patch(&self, url: impl reqwest::IntoUrl) -> SignedRequest {
        self.request(reqwest::Method::PATCH, url)
    }

    /// Adds ocp-date, Content-Length and the Authorization header to a built request.
    pub fn sign(&self, req: &mut reqwest::Request) {
        let Some((account, key)) = self.credentials.lock().unwrap().clone() else {
            return;
        };
        shared_key::sign(req, &account, &key);
    }
}

impl SignedRequest {
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.builder = self.builder.header(name, value);
        self
    }
    pub fn json(mut self, body: &Value) -> Self {
        self.builder = self.builder.json(body);
        self
    }
    pub fn bytes(mut self, body: Vec<u8>) -> Self {
        self.builder = self.builder.body(body);
        self
    }
    pub fn body(mut self, body: &'static str) -> Self {
        self.builder = self.builder.body(body);
        self
    }
    pub async fn send(self) -> reqwest::Result<reqwest::Response> {
        let mut req = self.builder.build()?;
        self.signer.sign(&mut req);
        self.signer.client.execute(req).await
    }
}

pub struct TestServer {
    pub runtime: Rt,
    pub base: String,
    pub http: Signed,
    pub data_dir: tempfile::TempDir,
    /// None: the server runs its own PostgreSQL.
    pub database_url: Option<String>,
    child: Option<Child>,
    extra_args: Vec<String>,
    /// Where Docker nodes' agents reach the server.
    agent_port: u16,
    /// Ends the test binary should this server outlive its bound (a hang).
    _watchdog: watchdog::Watchdog,
}

/// A command line no other test's process has: `sleep` of a number unique to the runtime and
/// case, from the test file's bases (Docker's, local's).
pub fn marker(rt: Rt, (docker, local): (u32, u32), case: u32) -> String {
    let base = match rt {
        Rt::Docker => docker,
        Rt::Local => local,
    };
    format!("sleep {}", base + case)
}

/// A TCP port no one listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Stops the whole test binary with one line when it runs without scripts/test.sh (a bare `cargo
/// test`), and cargo with it: a panic in every test, each with its backtrace, would bury what to
/// do. Written past the test harness's output capture, and checked once. Unit tests
/// (`cargo test --lib`) need no environment and still run first.
pub fn require_test_env() {
    static CHECKED: OnceLock<()> = OnceLock::new();
    CHECKED.get_or_init(|| {
        if std::env::var_os("BATCHPOOL_TEST_DATABASE_URL").is_none() {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "integration tests need the test environment: run scripts/test.sh \
                 (it starts Docker, PostgreSQL and the emulators)"
            );
            std::process::exit(2);
        }
    });
}

/// The throwaway PostgreSQL the test script started (scripts/test-env.sh).
fn admin_url() -> String {
    require_test_env();
    std::env::var("BATCHPOOL_TEST_DATABASE_URL").expect("checked by require_test_env")
}

/// Makes a fresh database on the test server and returns its URL.
pub async fn fresh_database() -> String {
    let admin = admin_url();
    let name = format!("bp_{}", uuid::Uuid::new_v4().simple());
    let pool = sqlx::PgPool::connect(&admin)
        .await
        .expect("connecting to the test PostgreSQL");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&pool)
        .await
        .expect("create database");
    pool.close().await;
    let mut url = reqwest::Url::parse(&admin).expect("admin URL");
    url.set_path(&name);
    url.to_string()
}

/// Builds the node image through the Docker API (our own `build-node-image`), once per process,
/// and tags it also as the default node image, which tests name as a task's container image: a
/// fresh machine has neither.
fn ensure_test_image() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        run_ok(
            std::process::Command::new(env!("CARGO_BIN_EXE_batchpool")).args([
                "build-node-image",
                "--tag",
                TEST_IMAGE,
            ]),
        );
        run_ok(std::process::Command::new("docker").args([
            "tag",
            TEST_IMAGE,
            "batchpool/node:latest",
        ]));
        ensure_debian_image("unix:///var/run/docker.sock");
    });
}

/// The Debian node image (what pools naming a marketplace image run) on the engine at `host`,
/// built with our own `build-node-image --debian` from the root filesystem the tests keep in
/// BATCHPOOL_DEBIAN_ROOTFS (made there by debootstrap the first time, under a lock).
pub fn ensure_debian_image(host: &str) {
    let present = std::process::Command::new("docker")
        .args([
            "-H",
            host,
            "image",
            "inspect",
            batchpool::runtime::docker::DEBIAN_IMAGE,
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return;
    }
    run_ok(
        std::process::Command::new("flock")
            .arg(format!("{}.lock", debian_rootfs()))
            .arg(env!("CARGO_BIN_EXE_batchpool"))
            .args(["build-node-image", "--debian", "--rootfs", &debian_rootfs()])
            .args(["--docker-host", host]),
    );
}

/// Where the tests keep the Debian root filesystem (scripts/test-env.sh says).
pub fn debian_rootfs() -> String {
    std::env::var("BATCHPOOL_DEBIAN_ROOTFS")
        .expect("BATCHPOOL_DEBIAN_ROOTFS (run the tests through scripts/test.sh)")
}

impl TestServer {
    pub async fn start(runtime: Rt) -> Self {
        Self::start_with(runtime, Some(fresh_database().await), &[]).await
    }

    /// A server (with a fresh database) whose tasks and BES jobs may name storage on this host:
    /// Azurite, s3rver, a test's own HTTP server. `extra` and `--allow-local-urls`.
    pub async fn start_allowing_local_urls(runtime: Rt, extra: &[&str]) -> Self {
        let mut args = extra.to_vec();
        args.push("--allow-local-urls");
        Self::start_with(runtime, Some(fresh_database().await), &args).await
    }

    pub async fn start_with(runtime: Rt, database_url: Option<String>, extra: &[&str]) -> Self {
        require_test_env();
        batchpool::install_tls();
        if runtime == Rt::Docker {
            ensure_test_image();
        }
        let data_dir = tempfile::Builder::new()
            .prefix("bp")
            .tempdir()
            .expect("tempdir");
        let _watchdog = watchdog::Watchdog::arm(data_dir.path().join("server.log"));
        let mut server = TestServer {
            runtime,
            base: String::new(),
            http: Signed::default(),
            data_dir,
            database_url,
            child: None,
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            agent_port: free_port(),
            _watchdog,
        };
        server.launch().await;
        server
    }

    pub fn log_path(&self) -> PathBuf {
        self.data_dir.path().join("server.log")
    }

    /// Starts the server process (again) with the same configuration and waits for its address.
    pub async fn launch(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchpool"));
        cmd.args(["serve", "--listen", "127.0.0.1:0"]);
        // The test's runtime, unless it names another (`--runtime simulated`).
        if !self.extra_args.iter().any(|a| a == "--runtime") {
            cmd.args(["--runtime", self.runtime.name()]);
        }
        // The test image, unless the test names another.
        if !self.extra_args.iter().any(|a| a == "--default-image") {
            cmd.args(["--default-image", TEST_IMAGE]);
        }
        cmd.arg("--data-dir")
            .arg(self.data_dir.path())
            // The same port each launch: running agents come back to it after a restart.
            .arg("--agent-listen")
            .arg(format!("0.0.0.0:{}", self.agent_port))
            .args(&self.extra_args)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info,sqlx=warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        if let Some(url) = &self.database_url {
            cmd.arg("--database-url").arg(url);
        }
        let mut child = cmd.spawn().expect("spawning batchpool");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("reading stdout") {
                if let Some(addr) = line.strip_prefix("batchpool listening on ") {
                    return addr.to_string();
                }
            }
            panic!(
                "the server exited before listening; log:\n{}",
                self.log_tail()
            );
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the server did not start listening in 60 s; log:\n{}",
                self.log_tail()
            )
        });
        self.base = line;
        self.child = Some(child);
        let key = match &self.database_url {
            Some(_) => {
                sqlx::query_scalar("SELECT primary_key FROM accounts WHERE name = 'batchpool'")
                    .fetch_one(&self.db().await)
                    .await
                    .expect("account key")
            }
            None => std::fs::read_to_string(self.data_dir.path().join("batchpool.key"))
                .expect("key file"),
        };
        *self.http.credentials.lock().unwrap() = Some(("batchpool".into(), key));
    }

    /// Where this server takes its Docker nodes' agents, as this host reaches it.
    pub fn agent_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.agent_port)
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .and_then(|c| c.id())
            .expect("server running")
    }

    /// SIGKILL: no chance to clean up.
    pub async fn kill(&mut self) {
        let mut child = self.child.take().expect("server running");
        child.kill().await.expect("kill");
    }

    /// SIGTERM, and the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("server running");
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(child.id().expect("pid") as i32, libc::SIGTERM) };
        tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("graceful shutdown within 30 s")
            .expect("wait")
    }

    /// How many times the server's log (across its launches) says `text`.
    pub fn log_count(&self, text: &str) -> usize {
        std::fs::read_to_string(self.log_path()).map_or(0, |log| log.matches(text).count())
    }

    /// Whether the server's log says `text` anywhere.
    pub fn log_contains(&self, text: &str) -> bool {
        std::fs::read_to_string(self.log_path()).is_ok_and(|log| log.contains(text))
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        // The request log would hide everything else.
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("batchpool::api::request_id: served"))
            .collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    pub async fn db(&self) -> sqlx::PgPool {
        let url = self
            .database_url
            .as_ref()
            .expect("this server runs its own database");
        sqlx::PgPool::connect(url)
            .await
            .expect("connecting to the test database")
    }

    pub async fn server_id(&self) -> String {
        sqlx::query_scalar("SELECT server_id FROM installation")
            .fetch_one(&self.db().await)
            .await
            .expect("server id")
    }

    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, json)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.request(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.request(reqwest::Method::POST, path, Some(body)).await
    }

    /// A request to an operator's route (`/batchpool/operator/...`), with the operator's token
    /// from the data directory, or with `token` if given.
    pub async fn operator(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let own = std::fs::read_to_string(self.data_dir.path().join("operator.token")).unwrap();
        // The operator's token, not an account's signature.
        let mut request = reqwest::Client::new()
            .request(method, format!("{}/batchpool/operator/{path}", self.base))
            .bearer_auth(token.unwrap_or(&own));
        if let Some(body) = body {
            request = request.json(body);
        }
        let answer = request.send().await.expect("request");
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_raw(&self, path: &str, body: &'static str) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.request(reqwest::Method::DELETE, path, None).await
    }

    pub async fn nodes(&self, pool: &str) -> Vec<Value> {
        let (status, body) = self.get(&format!("/pools/{pool}/nodes")).await;
        assert_eq!(status, 200, "{body}");
        body["value"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the pool is steady with `count` nodes, all in `state`; returns the nodes.
    pub async fn wait_nodes(&self, pool: &str, count: usize, state: &str) -> Vec<Value> {
        wait_for(&format!("pool {pool}: {count} nodes {state}"), || async {
            let (_, p) = self.get(&format!("/pools/{pool}")).await;
            let nodes = self.nodes(pool).await;
            (p["allocationState"] == "steady"
                && nodes.len() == count
                && nodes.iter().all(|n| n["state"] == state))
            .then_some(nodes)
        })
        .await
    }

    /// Node ids that exist on the runtime itself (containers, or local node directories).
    pub async fn runtime_nodes(&self) -> Vec<String> {
        let server_id = self.server_id().await;
        match self.runtime {
            Rt::Docker => docker_containers(&server_id)
                .into_iter()
                .map(|c| {
                    c["Config"]["Labels"]["batchpool.node"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect(),
            Rt::Local => local_nodes(&self.data_dir.path().join("nodes"), &server_id),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- server log ----\n{}", self.log_tail());
        }
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        if self.runtime == Rt::Docker && self.database_url.is_some() {
            // Containers outlive the server by design; a finished test removes its own, on
            // this machine's engine and on the extra engines some tests use as more hosts (a
            // node left there would keep its agent calling a server that is gone).
            let server_id = self.server_id_blocking();
            let extra = std::env::var("BATCHPOOL_TEST_DOCKER_HOSTS").unwrap_or_default();
            let engines = std::iter::once(None).chain(extra.split_whitespace().map(Some));
            for engine in engines {
                remove_labelled(engine, &server_id);
            }
        }
    }
}

/// Removes the containers and networks labelled with `server_id` on an engine (None: the default).
fn remove_labelled(engine: Option<&str>, server_id: &str) {
    let docker = |args: &[&str]| {
        let mut command = std::process::Command::new("docker");
        if let Some(host) = engine {
            command.args(["-H", host]);
        }
        command.args(args).output().ok().map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
    };
    let label = format!("label=batchpool.server={server_id}");
    if let Some(ids) = docker(&["ps", "-aq", "--filter", &label]).filter(|ids| !ids.is_empty()) {
        // With their volumes: a node's root is an anonymous volume of its own.
        let mut args = vec!["rm", "-f", "-v"];
        args.extend(ids.iter().map(String::as_str));
        docker(&args);
    }
    // And the accounts' node networks, which the engine's address pool runs out of.
    for id in docker(&["network", "ls", "-q", "--filter", &label]).unwrap_or_default() {
        docker(&["network", "rm", &id]);
    }
}

impl TestServer {
    fn server_id_blocking(&self) -> String {
        let url = self.database_url.clone().expect("db");
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let db = sqlx::PgPool::connect(&url).await.ok()?;
                    sqlx::query_scalar::<_, String>("SELECT server_id FROM installation")
                        .fetch_one(&db)
                        .await
                        .ok()
                })
        })
        .join()
        .ok()
        .flatten()
        .unwrap_or_else(|| "unknown".into())
    }
}

/// `docker inspect` of every container labelled with this server id.
pub fn docker_containers(server_id: &str) -> Vec<Value> {
    let listed = run_ok(std::process::Command::new("docker").args([
        "ps",
        "-aq",
        "--filter",
        &format!("label=batchpool.server={server_id}"),
    ]));
    let ids: Vec<String> = listed.split_whitespace().map(String::from).collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let out = std::process::Command::new("docker")
        .arg("inspect")
        .args(&ids)
        .output()
        .expect("docker inspect");
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap_or_default()
}

fn local_nodes(dir: &Path, server_id: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let labels: Value = serde_json::from_slice(
                &std::fs::read(e.ok()?.path().join(".batchpool-node.json")).ok()?,
            )
            .ok()?;
            (labels["server"] == server_id).then(|| labels["node"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Runs a command that must succeed; its standard output. A failure names the command and
/// shows what it wrote to standard error.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `batchpool account ...` against the server's database.
pub fn account_cmd(s: &TestServer, args: &[&str]) -> String {
    run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_batchpool"))
            .arg("account")
            .args(args)
            .arg("--database-url")
            .arg(s.database_url.as_ref().unwrap()),
    )
}

pub fn key_line<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(label))
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
}

/// Polls `check` until it returns Some, for at most 90 s.
pub async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for_long(what, 90, check).await
}

/// Polls `check` until it returns Some, for at most `seconds`.
pub async fn wait_for_long<T, F, Fut>(what: &str, seconds: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ids in a list answer's `value`.
pub fn ids(list: &Value) -> Vec<String> {
    list["value"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// The names in a list answer's `value` (files, in the files API).
pub fn names(list: &Value) -> Vec<String> {
    list["value"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// Declares one async test per runtime: `name::docker` and `name::local`.
#[macro_export]
macro_rules! on_both_runtimes {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn docker() {
                $body(Rt::Docker).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn local() {
                $body(Rt::Local).await
            }
        }
    };
}

impl TestServer {
    pub async fn add_tasks(&self, job: &str, tasks: Vec<Value>) {
        let (status, body) = self
            .post(
                &format!("/jobs/{job}/addtaskcollection"),
                &serde_json::json!({ "value": tasks }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        for r in body["value"].as_array().unwrap() {
            assert_eq!(r["status"], "success", "{r}");
        }
    }

    pub async fn task(&self, job: &str, task: &str) -> Value {
        let (status, body) = self.get(&format!("/jobs/{job}/tasks/{task}")).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// A pool of one node, once that node is idle.
    pub async fn pool_of_one_idle_node(&self, pool: &str) {
        let body =
            serde_json::json!({"id": pool, "vmSize": "standard_a1", "targetDedicatedNodes": 1});
        let (status, answer) = self.post("/pools", &body).await;
        assert_eq!(status, 201, "{answer}");
        self.wait_nodes(pool, 1, "idle").await;
    }
    /// A pool of one node with one slot, once that node is idle; the node's id.
    pub async fn one_slot_node(&self, pool: &str) -> String {
        let body = serde_json::json!({"id": pool, "vmSize": "standard_a1", "targetDedicatedNodes": 1, "taskSlotsPerNode": 1});
        let (status, answer) = self.post("/pools", &body).await;
        assert_eq!(status, 201, "{answer}");
        let nodes = self.wait_nodes(pool, 1, "idle").await;
        nodes[0]["id"].as_str().expect("node id").to_string()
    }
    /// A job on `pool`, with Azure's defaults.
    pub async fn job_on(&self, job: &str, pool: &str) {
        let body = serde_json::json!({"id": job, "poolInfo": {"poolId": pool}});
        let (status, answer) = self.post("/jobs", &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    /// Waits until the task is in `state`; returns it.
    pub async fn wait_task(&self, job: &str, task: &str, state: &str) -> Value {
        wait_for(&format!("task {job}/{task} to be {state}"), || async {
            let t = self.task(job, task).await;
            (t["state"] == state).then_some(t)
        })
        .await
    }

    /// Waits until every task of the job has completed; returns them in task order.
    pub async fn wait_all_completed(&self, job: &str, count: usize) -> Vec<Value> {
        wait_for(&format!("{count} tasks of {job} to complete"), || async {
            let (_, counts) = self.get(&format!("/jobs/{job}/taskcounts")).await;
            (counts["taskCounts"]["completed"] == count as u64).then_some(())
        })
        .await;
        let (_, body) = self.get(&format!("/jobs/{job}/tasks")).await;
        body["value"].as_array().unwrap().clone()
    }

    /// A task's stdout.txt, empty if it is not there (yet).
    pub async fn stdout(&self, job: &str, task: &str) -> String {
        let path = format!("/jobs/{job}/tasks/{task}/files/stdout.txt");
        self.file(&path).await.unwrap_or_default()
    }

    /// The text of a file, or None if it is not there (yet), or its reading was cut off (its
    /// node rebooted meanwhile, say: the agent that read it went with it).
    pub async fn file(&self, path: &str) -> Option<String> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            resp.text().await.ok()
        } else {
            None
        }
    }

    /// A file in a node's shared directory (where tests make tasks leave traces).
    pub async fn shared_file(&self, pool: &str, node: &str, name: &str) -> String {
        self.file(&format!("/pools/{pool}/nodes/{node}/files/shared/{name}"))
            .await
            .unwrap_or_default()
    }

    /// The text of `rel` below a node's root as the node itself holds it, behind the server's
    /// back: a local node's directory on this host, or inside a Docker node's container. None
    /// if it is not there (or is not a file). For what the server left on a node, not what its
    /// API says.
    pub async fn on_node(&self, node: &str, rel: &str) -> Option<String> {
        match self.runtime {
            Rt::Local => {
                let path = self.data_dir.path().join("nodes").join(node).join(rel);
                std::fs::read_to_string(path).ok()
            }
            Rt::Docker => {
                let container = format!("batchpool-{}-{node}", self.server_id().await);
                let out = std::process::Command::new("docker")
                    .args([
                        "exec",
                        &container,
                        "cat",
                        &format!("/mnt/batch/tasks/{rel}"),
                    ])
                    .output()
                    .expect("docker exec");
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            }
        }
    }

    /// Whether anything is at `rel` below a node's root, as the node itself holds it (see
    /// [`on_node`](Self::on_node)).
    pub async fn exists_on_node(&self, node: &str, rel: &str) -> bool {
        match self.runtime {
            Rt::Local => {
                let path = self.data_dir.path().join("nodes").join(node).join(rel);
                path.symlink_metadata().is_ok()
            }
            Rt::Docker => {
                let container = format!("batchpool-{}-{node}", self.server_id().await);
                let path = format!("/mnt/batch/tasks/{rel}");
                std::process::Command::new("docker")
                    .args(["exec", &container, "test", "-e", &path])
                    .status()
                    .expect("docker exec")
                    .success()
            }
        }
    }
}

/// Every task of the job, following `odata.nextLink`.
pub async fn all_tasks(s: &TestServer, job: &str) -> Vec<Value> {
    let first = format!("/jobs/{job}/tasks?$select=id,state,executionInfo");
    pages(s, &first).await.into_iter().flatten().collect()
}

/// The items of each page of a list, from `first` on through each page's `odata.nextLink`
/// (which must lead back to this server).
pub async fn pages(s: &TestServer, first: &str) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    let mut path = first.to_string();
    loop {
        let (status, page) = s.get(&path).await;
        assert_eq!(status, 200, "{path}: {page}");
        out.push(page["value"].as_array().unwrap().clone());
        match page["odata.nextLink"].as_str() {
            Some(next) => path = next.strip_prefix(&s.base).unwrap().to_string(),
            None => return out,
        }
    }
}

/// How often the tasks of a job ran, against what the API reports of them.
#[derive(Debug, Default)]
pub struct Tally {
    /// Tasks the API calls requeued.
    pub requeued: u64,
    /// Requeued tasks that had run before their requeue (as the API allows).
    pub reran: u64,
    /// Completed tasks whose command never ran.
    pub lost: Vec<String>,
    /// Tasks that ran more often than 1 + their requeueCount.
    pub twice: Vec<String>,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requeued ({} of them had run before); {} lost; {} ran more often than the API reports",
            self.requeued,
            self.reran,
            self.lost.len(),
            self.twice.len()
        )
    }
}

impl Tally {
    pub fn assert_once_each(&self) {
        assert!(
            self.lost.is_empty(),
            "tasks completed that never ran: {:?}",
            self.lost
        );
        assert!(
            self.twice.is_empty(),
            "tasks ran again without a requeue: {:?}",
            self.twice
        );
    }
}

/// Counts the runs of `job`'s tasks, each of which appended its id to `ran` in its node's shared
/// directory (`echo $AZ_BATCH_TASK_ID >> $AZ_BATCH_NODE_SHARED_DIR/ran`), after checking that all
/// `count` tasks completed successfully without a retry.
pub async fn tally_runs(
    s: &TestServer,
    pool: &str,
    nodes: &[String],
    job: &str,
    count: usize,
) -> Tally {
    let mut runs: std::collections::HashMap<String, u64> = Default::default();
    for node in nodes {
        for id in s.shared_file(pool, node, "ran").await.lines() {
            *runs.entry(id.to_string()).or_default() += 1;
        }
    }
    let tasks = all_tasks(s, job).await;
    assert_eq!(tasks.len(), count);
    let mut tally = Tally::default();
    for t in &tasks {
        let id = t["id"].as_str().unwrap();
        let info = &t["executionInfo"];
        assert_eq!(t["state"], "completed", "{t}");
        assert_eq!(info["result"], "success", "{t}");
        assert_eq!(
            info["retryCount"], 0,
            "nothing failed, so nothing retried: {t}"
        );
        let requeues = info["requeueCount"].as_u64().unwrap();
        tally.requeued += u64::from(requeues > 0);
        match runs.get(id).copied().unwrap_or(0) {
            0 => tally.lost.push(id.to_string()),
            n if n > 1 && n <= 1 + requeues => tally.reran += 1,
            n if n > 1 + requeues => tally
                .twice
                .push(format!("{id}: ran {n} times, requeued {requeues}")),
            _ => {}
        }
    }
    tally
}

impl TestServer {
    /// Whether a process whose command line contains `marker` runs: on local, anywhere on this
    /// host (`ps`); on docker, in one of this server's node containers (`docker top`).
    pub async fn process_running(&self, marker: &str) -> bool {
        let tables: Vec<Vec<u8>> = match self.runtime {
            Rt::Local => vec![
                std::process::Command::new("ps")
                    .args(["-eo", "args"])
                    .output()
                    .expect("ps")
                    .stdout,
            ],
            Rt::Docker => docker_containers(&self.server_id().await)
                .iter()
                .filter_map(|c| {
                    // A container that is gone or stopped runs nothing.
                    let out = std::process::Command::new("docker")
                        .args(["top", c["Id"].as_str()?, "-eo", "pid,args"])
                        .output()
                        .ok()?;
                    Some(out.stdout)
                })
                .collect(),
        };
        tables.iter().any(|t| {
            String::from_utf8_lossy(t)
                .lines()
                .any(|l| l.contains(marker))
        })
    }
}
