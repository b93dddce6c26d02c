//! `batchpool job submit` and `batchpool queue`: work sent as a job of tasks (one command, an
//! array of it, or a file of commands), and the jobs still going with their tasks by state, as
//! `squeue` shows them.

use std::path::PathBuf;

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};

use super::client::{fail, segment, server_error, CliError, CliResult, Client};
use super::table::{cell, print, render};

/// How many tasks one `addtaskcollection` request carries (Azure's limit).
const CHUNK: usize = 100;
/// How many of those requests are in flight at once.
const IN_FLIGHT: usize = 4;
/// The most tasks one submit makes.
const MAX_TASKS: u64 = 1_000_000;

#[derive(clap::Args, Debug, Clone)]
pub struct Submit {
    /// The pool the job runs on.
    #[arg(long)]
    pub pool: String,
    /// The job's id; made if it does not exist, added to if it does. Default: a new one.
    #[arg(long)]
    pub job: Option<String>,
    /// One task per number of a range (`1-1000`, or `N` for 1 to N); `{}` in the command is the
    /// task's number, which is also its id (`$AZ_BATCH_TASK_ID`) and `$BATCHPOOL_ARRAY_INDEX`.
    #[arg(long, value_parser = parse_range)]
    pub array: Option<(u64, u64)>,
    /// A file of commands, one task per line (blank lines and `#` comments skipped); the task
    /// ids are 1, 2, ... in order.
    #[arg(long, conflicts_with = "array")]
    pub file: Option<PathBuf>,
    /// Task slots each task takes on its node.
    #[arg(long)]
    pub slots: Option<u32>,
    /// Times a failed task is retried.
    #[arg(long)]
    pub retries: Option<u32>,
    /// The job's priority, -1000 to 1000 (default 0): a pool runs the tasks of a job of higher
    /// priority first. Given for a job that exists, it changes the job's.
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// The most tasks of the job that run at once (Azure's maxParallelTasks), as Slurm's
    /// `--array=...%N`. Given for a job that exists, it changes the job's.
    #[arg(long, value_name = "N")]
    pub max_parallel: Option<u32>,
    /// Then watch the job, as `batchpool job watch` does.
    #[arg(long)]
    pub watch: bool,
    /// The command (run by `/bin/sh -c` on the node). One word is taken as a shell command
    /// line as it is; several are quoted for the shell and joined.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// `A-B` or `N` (1 to N).
fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("{s:?} is not a whole number"))
    };
    let (first, last) = match text.split_once('-') {
        Some((a, b)) => (number(a)?, number(b)?),
        None => (1, number(text)?),
    };
    if first > last {
        return Err(format!("the range {text} is empty"));
    }
    if last - first >= MAX_TASKS {
        return Err(format!("the range {text} is over {MAX_TASKS} tasks"));
    }
    Ok((first, last))
}

/// The words of a command as one shell command line.
pub fn command_line(words: &[String]) -> String {
    if let [one] = words {
        return one.clone();
    }
    let plain = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./{}-".contains(c))
    };
    words
        .iter()
        .map(|w| {
            if plain(w) {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The tasks to add: (id, command line, array index).
fn tasks_of(submit: &Submit) -> CliResult<Vec<(String, String, Option<u64>)>> {
    if let Some(file) = &submit.file {
        if !submit.command.is_empty() {
            return fail("give either --file or a command, not both");
        }
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError(format!("cannot read {}: {e}", file.display())))?;
        let lines = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        let tasks: Vec<_> = lines
            .enumerate()
            .map(|(i, l)| ((i + 1).to_string(), l.to_string(), None))
            .collect();
        if tasks.is_empty() {
            return fail(format!("{} holds no commands", file.display()));
        }
        return Ok(tasks);
    }
    if submit.command.is_empty() {
        return fail("no command: give it after `--` (batchpool job submit --pool P -- echo hello), or --file");
    }
    let line = command_line(&submit.command);
    Ok(match submit.array {
        Some((first, last)) => (first..=last)
            .map(|i| (i.to_string(), line.replace("{}", &i.to_string()), Some(i)))
            .collect(),
        None => vec![("1".to_string(), line, None)],
    })
}

/// The job settings `submit` gives: its priority and maxParallelTasks, where given.
fn job_settings(submit: &Submit) -> Value {
    let mut settings = json!({});
    if let Some(priority) = submit.priority {
        settings["priority"] = json!(priority);
    }
    if let Some(most) = submit.max_parallel {
        settings["maxParallelTasks"] = json!(most);
    }
    settings
}

/// Makes the job with `settings`, or finds it on the same pool and gives it `settings`.
async fn ensure_job(client: &Client, job: &str, pool: &str, settings: Value) -> CliResult<()> {
    let mut body = json!({"id": job, "poolInfo": {"poolId": pool}});
    for (name, value) in settings.as_object().into_iter().flatten() {
        body[name] = value.clone();
    }
    let response = client.send(Method::POST, "/jobs", Some(&body), &[]).await?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = response.text().await.unwrap_or_default();
    let exists = serde_json::from_str::<Value>(&text).is_ok_and(|v| v["code"] == "JobExists");
    if !exists {
        return Err(server_error(status, &text));
    }
    let found = client
        .get(&format!(
            "/jobs/{}?$select=executionInfo,state",
            segment(job)
        ))
        .await?;
    // executionInfo names the pool of a job that made its own (an auto pool) too.
    if found["executionInfo"]["poolId"].as_str() != Some(pool) {
        return fail(format!(
            "job {job} exists on pool {}, not {pool}",
            cell(&found["executionInfo"]["poolId"])
        ));
    }
    if settings.as_object().is_some_and(|s| !s.is_empty()) {
        let path = format!("/jobs/{}", segment(job));
        client.call(Method::PATCH, &path, Some(&settings)).await?;
    }
    Ok(())
}

/// Adds one request's worth of tasks; the refused ones as `id: code: message`.
async fn add_chunk(client: &Client, path: &str, chunk: Vec<Value>) -> CliResult<Vec<String>> {
    let answer = client
        .call(Method::POST, path, Some(&json!({"value": chunk})))
        .await?;
    let results = answer["value"].as_array().cloned().unwrap_or_default();
    Ok(results
        .iter()
        .filter(|r| r["status"] != "success")
        .map(|r| {
            format!(
                "{}: {}: {}",
                cell(&r["taskId"]),
                cell(&r["error"]["code"]),
                cell(&r["error"]["message"]["value"])
            )
        })
        .collect())
}

pub async fn submit(client: &Client, submit: &Submit) -> CliResult<String> {
    let tasks = tasks_of(submit)?;
    let job = submit.job.clone().unwrap_or_else(|| {
        format!(
            "job-{}-{}",
            chrono::Utc::now().format("%Y%m%d-%H%M%S"),
            &uuid::Uuid::new_v4().simple().to_string()[..4]
        )
    });
    ensure_job(client, &job, &submit.pool, job_settings(submit)).await?;
    let bodies: Vec<Value> = tasks
        .into_iter()
        .map(|(id, line, index)| {
            let mut task = json!({"id": id, "commandLine": line});
            if let Some(slots) = submit.slots {
                task["requiredSlots"] = json!(slots);
            }
            if let Some(retries) = submit.retries {
                task["constraints"] = json!({"maxTaskRetryCount": retries});
            }
            if let Some(i) = index {
                task["environmentSettings"] =
                    json!([{"name": "BATCHPOOL_ARRAY_INDEX", "value": i.to_string()}]);
            }
            task
        })
        .collect();
    let count = bodies.len();
    let path = format!("/jobs/{}/addtaskcollection", segment(&job));
    let chunks: Vec<Vec<Value>> = bodies.chunks(CHUNK).map(<[Value]>::to_vec).collect();
    let mut answers = futures_util::stream::iter(chunks)
        .map(|chunk| add_chunk(client, &path, chunk))
        .buffer_unordered(IN_FLIGHT);
    let mut refused = Vec::new();
    while let Some(answer) = answers.next().await {
        refused.extend(answer?);
    }
    if !refused.is_empty() {
        let shown = refused
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        return fail(format!(
            "job {job}: {} of {count} tasks not added: {shown}",
            refused.len()
        ));
    }
    let json = json!({"jobId": job, "poolId": submit.pool, "tasks": count});
    print(client.output, &json, || {
        let tasks = if count == 1 { "task" } else { "tasks" };
        format!(
            "job {job}: {count} {tasks} submitted to pool {}\n",
            submit.pool
        )
    });
    Ok(job)
}

/// `batchpool queue`: jobs not completed (all with `all`), with their tasks by state.
pub async fn queue(client: &Client, all: bool) -> CliResult<()> {
    let jobs = client
        .list("/jobs?$select=id,state,executionInfo,waitReason")
        .await?;
    let mut out = Vec::new();
    for job in jobs.iter().filter(|j| all || j["state"] != "completed") {
        let id = job["id"].as_str().unwrap_or_default();
        let counts = client
            .get(&format!("/jobs/{}/taskcounts", segment(id)))
            .await?;
        let mut line = json!({"id": id, "state": job["state"], "poolId": job["executionInfo"]["poolId"], "taskCounts": counts["taskCounts"]});
        if !job["waitReason"].is_null() {
            line["waitReason"] = job["waitReason"].clone();
        }
        // What it cost so far and its forecast, where the account has prices.
        let stats = client
            .get(&format!("/jobs/{}?$expand=stats", segment(id)))
            .await?;
        for name in ["cost", "estimatedCost", "currency"] {
            if !stats["stats"][name].is_null() {
                line[name] = stats["stats"][name].clone();
            }
        }
        out.push(line);
    }
    let priced = out.iter().any(|j| j["currency"].is_string());
    print(client.output, &json!(out), || {
        let rows: Vec<Vec<String>> = out
            .iter()
            .map(|j| {
                let c = &j["taskCounts"];
                let mut row = vec![cell(&j["id"]), cell(&j["poolId"]), cell(&j["state"])];
                row.extend(
                    ["active", "running", "succeeded", "failed"]
                        .iter()
                        .map(|s| cell(&c[*s])),
                );
                row.push(waits(&j["waitReason"]));
                if priced {
                    row.push(money(&j["cost"], &j["currency"]));
                    row.push(money(&j["estimatedCost"], &j["currency"]));
                }
                row
            })
            .collect();
        let mut head = vec![
            "JOB",
            "POOL",
            "STATE",
            "ACTIVE",
            "RUNNING",
            "SUCCEEDED",
            "FAILED",
            "WAITS",
        ];
        if priced {
            head.extend(["COST", "FORECAST"]);
        }
        render(&head, &rows)
    });
    Ok(())
}

/// An amount in a table's cell, to four decimals, with its currency; `-` without one.
fn money(amount: &Value, currency: &Value) -> String {
    match (amount.as_f64(), currency.as_str()) {
        (Some(amount), Some(currency)) => format!("{amount:.4} {currency}"),
        _ => "-".into(),
    }
}

/// Why a job's active tasks wait, in a table's cell: the reason's code (and, for busy slots,
/// how many tasks come first); `batchpool task show` gives a task's whole message.
fn waits(reason: &Value) -> String {
    match (reason["code"].as_str(), reason["tasksAhead"].as_i64()) {
        (None, _) => "-".into(),
        (Some(code), Some(ahead)) => format!("{code} ({ahead} ahead)"),
        (Some(code), None) => code.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_a_to_b_or_one_to_n() {
        assert_eq!(parse_range("1-1000"), Ok((1, 1000)));
        assert_eq!(parse_range("7"), Ok((1, 7)));
        assert!(parse_range("5-2").is_err());
        assert!(parse_range("a-2").is_err());
        assert!(parse_range("1-99999999999").is_err());
    }

    #[test]
    fn words_are_quoted_for_the_shell_and_one_word_is_a_command_line() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            command_line(&words(&["echo hi && true"])),
            "echo hi && true"
        );
        assert_eq!(
            command_line(&words(&["echo", "task", "{}"])),
            "echo task {}"
        );
        assert_eq!(
            command_line(&words(&["sh", "-c", "echo $X", "it's"])),
            r#"sh -c 'echo $X' 'it'\''s'"#
        );
    }
}
