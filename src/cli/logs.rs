//! `batchpool task logs`: a task's stdout (or stderr), and with `-f` what it writes next, as
//! the server streams it (`?follow=true`, docs/data.md "Following a task's output") until the
//! task completes, from one attempt to the next.

use std::io::Write;

use futures_util::StreamExt;

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::client::{fail, segment, server_error, CliError, CliResult, Client, Output};

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

/// The file's bytes; None while it does not exist.
async fn read(client: &Client, path: &str) -> CliResult<Option<Vec<u8>>> {
    let response = client.send(Method::GET, path, None, &[]).await?;
    let status = response.status();
    if status == StatusCode::NOT_FOUND {
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
        let Some(bytes) = read(client, &path).await? else {
            return fail(format!("task {task} of job {job} has no {name} yet"));
        };
        let content = String::from_utf8_lossy(&bytes);
        println!(
            "{:#}",
            json!({"jobId": job, "taskId": task, "file": name, "content": content})
        );
        return Ok(());
    }
    if logs.follow {
        return follow(client, &path).await;
    }
    let Some(bytes) = read(client, &path).await? else {
        return fail(format!("task {task} of job {job} has no {name} yet"));
    };
    write_out(&bytes)
}

fn write_out(bytes: &[u8]) -> CliResult<()> {
    let mut out = std::io::stdout();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| CliError(format!("writing the log: {e}")))
}

/// Writes the file as the server streams it, until the task completes.
async fn follow(client: &Client, path: &str) -> CliResult<()> {
    let response = client.get_stream(&format!("{path}?follow=true")).await?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(server_error(status, &text));
    }
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        let chunk =
            chunk.map_err(|e| CliError(format!("the server stopped following {path}: {e}")))?;
        write_out(&chunk)?;
    }
    Ok(())
}
