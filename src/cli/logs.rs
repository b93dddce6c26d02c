//! `batchpool task logs`: a task's stdout (or stderr), and with `-f` what it writes next, read
//! with ranged reads until the task completes, as `tail -f` follows a file.

use std::io::Write;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::client::{fail, segment, server_error, CliError, CliResult, Client, Output};

/// How often a followed file is read again.
const EVERY: Duration = Duration::from_millis(300);

#[derive(clap::Args, Debug, Clone)]
pub struct Logs {
    pub job: String,
    pub task: String,
    /// Follow the file as the task writes it, until the task completes.
    #[arg(short, long)]
    pub follow: bool,
    /// stderr.txt instead of stdout.txt.
    #[arg(long)]
    pub stderr: bool,
}

/// The bytes of the file from `offset` on; None while it does not exist.
async fn read_from(client: &Client, path: &str, offset: u64) -> CliResult<Option<Vec<u8>>> {
    let range = [("ocp-range", format!("bytes={offset}-"))];
    let headers: &[(&str, String)] = if offset > 0 { &range } else { &[] };
    let response = client.send(Method::GET, path, None, headers).await?;
    let status = response.status();
    if status == StatusCode::RANGE_NOT_SATISFIABLE {
        return Ok(Some(Vec::new())); // nothing past `offset` yet
    }
    if status == StatusCode::NOT_FOUND && offset == 0 {
        let text = response.text().await.unwrap_or_default();
        if text.contains("\"FileNotFound\"") || text.contains("\"TaskFileNotFound\"") {
            return Ok(None);
        }
        return Err(server_error(status, &text));
    }
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(server_error(status, &text));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| CliError(format!("reading {path}: {e}")))?;
    Ok(Some(bytes.to_vec()))
}

/// Whether the task will write no more: it completed, or it never started and its job ended
/// (a terminated job's active tasks stay active, and never run).
async fn task_over(client: &Client, job: &str, task: &str) -> CliResult<bool> {
    let path = format!(
        "/jobs/{}/tasks/{}?$select=state",
        segment(job),
        segment(task)
    );
    match client.get(&path).await?["state"].as_str() {
        Some("completed") => Ok(true),
        Some("active") => super::watch::job_ended(client, job).await,
        _ => Ok(false),
    }
}

pub async fn logs(client: &Client, logs: &Logs) -> CliResult<()> {
    let name = if logs.stderr {
        "stderr.txt"
    } else {
        "stdout.txt"
    };
    let (job, task) = (&logs.job, &logs.task);
    let path = format!(
        "/jobs/{}/tasks/{}/files/{name}",
        segment(job),
        segment(task)
    );
    if client.output == Output::Json {
        if logs.follow {
            return fail("--follow writes the file as it grows: leave out --output json");
        }
        let Some(bytes) = read_from(client, &path, 0).await? else {
            return fail(format!("task {task} of job {job} has no {name} yet"));
        };
        let content = String::from_utf8_lossy(&bytes);
        println!(
            "{:#}",
            json!({"jobId": job, "taskId": task, "file": name, "content": content})
        );
        return Ok(());
    }
    let mut offset = 0u64;
    let mut out = std::io::stdout();
    loop {
        // Whether the task was over before this read: then the read has all it wrote.
        let over = logs.follow && task_over(client, job, task).await?;
        match read_from(client, &path, offset).await? {
            Some(bytes) => {
                offset += bytes.len() as u64;
                out.write_all(&bytes)
                    .and_then(|()| out.flush())
                    .map_err(|e| CliError(format!("writing the log: {e}")))?;
            }
            None if !logs.follow => {
                return fail(format!("task {task} of job {job} has no {name} yet"));
            }
            None => {}
        }
        if !logs.follow || over {
            return Ok(());
        }
        tokio::time::sleep(EVERY).await;
    }
}
