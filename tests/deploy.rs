//! The deployment files: `docker-compose.yml` is valid for `docker-compose`, and the server image
//! (Dockerfile, built by scripts/image.sh without pulling anything) runs the server, which
//! answers `/health` and `/health/ready`, and its own `batchpool health` healthcheck; behind a
//! slow link, answers are gzipped for clients that accept it.

mod common;

use std::path::Path;
use std::process::Command;

fn run(command: &mut Command) -> String {
    let out = command.output().expect("running a command");
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_compose_file_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let services = run(Command::new("docker-compose")
        .args(["-f", "docker-compose.yml", "config", "--services"])
        .current_dir(root));
    let mut services: Vec<&str> = services.lines().collect();
    services.sort();
    assert_eq!(services, ["batchpool", "postgres"]);
}

/// Removes the test's container and image, however the test ends.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.container])
            .output();
        let _ = Command::new("docker").args(["rmi", &self.image]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_image_runs_the_server() {
    batchpool::install_tls();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let stage = tempfile::tempdir().unwrap();
    let tag = format!("batchpool-test-image:{}", std::process::id());
    run(Command::new("bash")
        .arg("scripts/image.sh")
        .arg(&tag)
        .env("BATCHPOOL_BIN", env!("CARGO_BIN_EXE_batchpool"))
        .env("BATCHPOOL_IMAGE_DIR", stage.path())
        .current_dir(root));
    let database = common::fresh_database().await;
    let url = reqwest::Url::parse(&database).unwrap();
    let socket_dir = url
        .query_pairs()
        .find(|(k, _)| k == "host")
        .map(|(_, v)| v.to_string())
        .expect("the test database is reached through a socket directory");
    let (api, agents) = (common::free_port(), common::free_port());
    let name = format!("batchpool-test-image-{}", std::process::id());
    let _cleanup = Cleanup {
        container: name.clone(),
        image: tag.clone(),
    };
    let mount = format!("{socket_dir}:{socket_dir}");
    run(Command::new("docker").args([
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "host",
        "-v",
        &mount,
        "-e",
        &format!("DATABASE_URL={database}"),
        "-e",
        &format!("BATCHPOOL_LISTEN=127.0.0.1:{api}"),
        "-e",
        &format!("BATCHPOOL_AGENT_LISTEN=127.0.0.1:{agents}"),
        "-e",
        "BATCHPOOL_RUNTIME=local",
        &tag,
    ]));
    let base = format!("http://127.0.0.1:{api}");
    let ready = common::wait_for("the server in its image to be ready", || async {
        let r = reqwest::get(format!("{base}/health/ready")).await.ok()?;
        (r.status() == 200).then_some(())
    });
    ready.await;
    let live = reqwest::get(format!("{base}/health")).await.unwrap();
    assert_eq!(live.status(), 200);
    // The image's own healthcheck: its binary, run inside it.
    run(Command::new("docker").args([
        "exec",
        &name,
        "/usr/local/bin/batchpool",
        "health",
        "--url",
        &base,
    ]));
}

/// gzip's output, decoded by the machine's own `gzip`.
fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "not gzip");
    out.stdout
}

/// Over a slow link, a client that accepts gzip gets lists compressed; file contents never are,
/// so a ranged read's bytes are the file's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_gzipped_for_clients_that_accept_it_and_files_never() {
    use common::{Rt, TestServer};
    use serde_json::{json, Value};
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("p").await;
    s.job_on("j", "p").await;
    let tasks = (0..100)
        .map(|i| json!({"id": format!("t{i:03}"), "commandLine": "seq 1 2000"}))
        .collect();
    s.add_tasks("j", tasks).await;
    s.wait_all_completed("j", 100).await;
    let get = |path: &str, gzip: bool| {
        let mut r = s.http.get(format!("{}{path}", s.base));
        if gzip {
            r = r.header("accept-encoding", "gzip");
        }
        r.send()
    };
    let plain = get("/jobs/j/tasks", false).await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    let plain: Value = plain.json().await.unwrap();
    let zipped = get("/jobs/j/tasks", true).await.unwrap();
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    let bytes = zipped.bytes().await.unwrap();
    let unzipped: Value = serde_json::from_slice(&gunzip(&bytes)).unwrap();
    assert_eq!(unzipped["value"], plain["value"]);
    let json_len = serde_json::to_vec(&plain).unwrap().len();
    assert!(
        bytes.len() * 5 < json_len,
        "{} bytes of {json_len}",
        bytes.len()
    );

    let file = get("/jobs/j/tasks/t000/files/stdout.txt", true)
        .await
        .unwrap();
    assert!(file.headers().get("content-encoding").is_none());
    let text = file.text().await.unwrap();
    assert!(
        text.starts_with("1\n2\n") && text.ends_with("2000\n"),
        "{text}"
    );
}
