//! The soak's Docker side: where the tasks of Docker nodes record their runs (an HTTP sink on
//! this host, which they reach at their network's gateway), and the faults only Docker nodes
//! have: a node's container frozen (`docker pause`) and thawed, killed, or cut from its network
//! and joined again, a whole engine stopped and started (a host lost and back), and a node's
//! disk filled and emptied.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Listens on every address for what tasks record: `GET /start/{node}/{job}/{task}` and
/// `/end/..` append a line to `ran`, as a local node's task writes it; `GET /mark/{job}/{task}`
/// answers `first` the first time and `again` after (a task that fails once, wherever it runs).
/// Returns the port.
pub async fn sink(ran: PathBuf) -> u16 {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let marks: Arc<Mutex<HashSet<String>>> = Arc::default();
    // One writer at a time: a line written in pieces by two at once is two lines lost.
    let ran = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ran)
            .unwrap(),
    ));
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                continue;
            };
            let (ran, marks) = (ran.clone(), marks.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                    match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut chunk)).await
                    {
                        Ok(Ok(n)) if n > 0 => head.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                }
                let text = String::from_utf8_lossy(&head);
                let path = text.split_whitespace().nth(1).unwrap_or_default();
                let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
                let answer = match parts.as_slice() {
                    [what @ ("start" | "end"), node, job, task] => {
                        let at = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap()
                            .as_nanos();
                        let line = format!("{what} {node} {job} {task} {at}\n");
                        ran.lock().unwrap().write_all(line.as_bytes()).unwrap();
                        "ok"
                    }
                    ["mark", job, task] => {
                        match marks.lock().unwrap().insert(format!("{job}/{task}")) {
                            true => "first",
                            false => "again",
                        }
                    }
                    _ => "no",
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = conn.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

/// A task's command on a Docker node: records its start, does `work`, fails once with exit
/// code 3 if `fails_once` (the first of its runs, wherever it runs), and records its end. A
/// record that cannot be sent (the node cut from its network) is sent again until it is. It
/// speaks HTTP through busybox's `nc` (the test image's static busybox `wget` crashes).
pub fn command(port: u16, work: &str, fails_once: bool) -> String {
    let ids = "$AZ_BATCH_NODE_ID/$AZ_BATCH_JOB_ID/$AZ_BATCH_TASK_ID";
    let ask = |path: &str| {
        format!("printf \"GET /{path} HTTP/1.0\\r\\n\\r\\n\" | busybox nc -w 3 $gw {port}")
    };
    let mut c = format!(
        "set -- $(busybox ip route | grep ^default); gw=$3; \
         say() {{ until {} | grep -q \"200 OK\"; do sleep 0.5; done; }}; say start; {work}",
        ask(&format!("$1/{ids}"))
    );
    if fails_once {
        c += &format!(
            "; if {} | grep -q first; then say end; exit 3; fi",
            ask("mark/$AZ_BATCH_JOB_ID/$AZ_BATCH_TASK_ID")
        );
    }
    c + "; say end"
}

/// The containers of installation `server`'s nodes on an engine (`docker` is its CLI), tasks'
/// own containers among them: their ids.
pub fn containers(docker: &mut std::process::Command, server: &str) -> Vec<String> {
    words(
        docker
            .args(["ps", "-q", "--filter"])
            .arg(format!("label=batchpool.server={server}"))
            .args(["--filter", "label=batchpool.node"]),
    )
}

/// The running node containers of installation `server` on an engine (`docker` is its CLI),
/// or with `all` those in any state: their ids, and their nodes' ids. A task's own container
/// carries its node's labels too: it is left out (killing it is killing the task, which then
/// fails as it should). The engine lists from a view it updates only once it has written a
/// container's state to its disk: one started while that disk is full runs, listed as stopped.
pub fn nodes(docker: &mut std::process::Command, server: &str, all: bool) -> Vec<(String, String)> {
    let format = "{{.ID}} {{.Label \"batchpool.node\"}} {{.Label \"batchpool.task\"}}";
    docker.arg("ps");
    if all {
        docker.arg("--all");
    }
    let out = docker
        .args(["--format", format, "--filter"])
        .arg(format!("label=batchpool.server={server}"))
        .args(["--filter", "label=batchpool.node"])
        .output();
    let text = out.map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [container, node] => Some((container.to_string(), node.to_string())),
                _ => None,
            },
        )
        .collect()
}

/// The words a docker command writes; none if it fails.
fn words(docker: &mut std::process::Command) -> Vec<String> {
    docker
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The networks a container is on.
pub fn networks(docker: &mut std::process::Command, container: &str) -> Vec<String> {
    let format = "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}";
    words(docker.args(["inspect", "-f", format]).arg(container))
}

/// The pid (as this host sees it) of a container's first process, if it runs.
pub fn pid(docker: &mut std::process::Command, container: &str) -> Option<i32> {
    let out = docker
        .args(["inspect", "-f", "{{.State.Pid}}"])
        .arg(container)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 0)
}

/// Runs a docker command, whose failure (the container gone meanwhile) is no matter.
pub fn quietly(cmd: &mut std::process::Command) {
    let _ = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// A node container's disk (the volume at its root, `/mnt/batch/tasks`) as this machine sees it.
pub fn disk(docker: &mut std::process::Command, container: &str) -> Option<PathBuf> {
    let format =
        "{{range .Mounts}}{{if eq .Destination \"/mnt/batch/tasks\"}}{{.Source}}{{end}}{{end}}";
    words(docker.args(["inspect", "-f", format]).arg(container))
        .pop()
        .map(PathBuf::from)
}
