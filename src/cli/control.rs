//! `batchpool job terminate|delete` and `batchpool task show|list`: work stopped before it is
//! done (as `scancel` does), and how tasks ended and why (as `scontrol show job` and `sacct`
//! tell).

use reqwest::Method;
use serde_json::{json, Value};

use super::client::{segment, CliResult, Client};
use super::table::{cell, print, render};

/// A task's state, to list the tasks in it.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum TaskState {
    Active,
    Preparing,
    Running,
    Completed,
}

/// Ends a job: its tasks that have not run never will, those running are killed, and the job
/// completes (Azure's terminate). With `reason`, the job's `terminateReason`.
pub async fn terminate(client: &Client, job: &str, reason: Option<&str>) -> CliResult<()> {
    let body = reason.map(|r| json!({"terminateReason": r}));
    let path = format!("/jobs/{}/terminate", segment(job));
    client.call(Method::POST, &path, body.as_ref()).await?;
    print(
        client.output,
        &json!({"id": job, "terminated": true}),
        || format!("job {job} terminating\n"),
    );
    Ok(())
}

/// Deletes a job with its tasks and their files; running tasks are killed.
pub async fn delete(client: &Client, job: &str) -> CliResult<()> {
    let path = format!("/jobs/{}", segment(job));
    client.call(Method::DELETE, &path, None).await?;
    print(client.output, &json!({"id": job, "deleted": true}), || {
        format!("job {job} deleting\n")
    });
    Ok(())
}

/// A task: its state, how it ended and why, where and when it ran; with `--output json`, the
/// task as the API answers it.
pub async fn show(client: &Client, job: &str, task: &str) -> CliResult<()> {
    // With its statistics: what it cost, where the account has prices.
    let path = format!(
        "/jobs/{}/tasks/{}?$expand=stats",
        segment(job),
        segment(task)
    );
    let t = client.get(&path).await?;
    print(client.output, &t, || describe(job, &t));
    Ok(())
}

/// A job, with its statistics and task counts; with `--output json`, the job as the API
/// answers it (with `stats`), and its `taskCounts`.
pub async fn show_job(client: &Client, job: &str) -> CliResult<()> {
    let mut j = client
        .get(&format!("/jobs/{}?$expand=stats", segment(job)))
        .await?;
    let counts = client
        .get(&format!("/jobs/{}/taskcounts", segment(job)))
        .await?;
    j["taskCounts"] = counts["taskCounts"].clone();
    print(client.output, &j, || describe_job(&j));
    Ok(())
}

fn describe_job(j: &Value) -> String {
    let counts = &j["taskCounts"];
    let tasks = ["active", "running", "completed", "succeeded", "failed"]
        .iter()
        .map(|state| format!("{} {state}", cell(&counts[*state])))
        .collect::<Vec<_>>()
        .join(", ");
    let mut lines: Vec<(&str, String)> = vec![
        ("job", cell(&j["id"])),
        ("state", cell(&j["state"])),
        ("pool", cell(&j["poolInfo"]["poolId"])),
        ("priority", cell(&j["priority"])),
        ("tasks", tasks),
        ("created", cell(&j["creationTime"])),
    ];
    if !j["executionInfo"]["endTime"].is_null() {
        lines.push(("ended", cell(&j["executionInfo"]["endTime"])));
    }
    let wait = &j["waitReason"];
    if let Some(code) = wait["code"].as_str() {
        lines.push(("waits", format!("{code}: {}", cell(&wait["message"]))));
    }
    let stats = &j["stats"];
    if let Some(currency) = stats["currency"].as_str() {
        let amount = |v: &Value| v.as_f64().map_or("-".into(), |a| format!("{a} {currency}"));
        lines.push(("cost", amount(&stats["cost"])));
        if !stats["estimatedCost"].is_null() {
            lines.push(("forecast", amount(&stats["estimatedCost"])));
        }
    }
    aligned(&lines)
}

/// One `name  value` line each, the names aligned.
fn aligned(lines: &[(&str, String)]) -> String {
    let width = lines.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    lines
        .iter()
        .map(|(name, value)| format!("{name:width$}  {value}\n"))
        .collect()
}

/// A job's tasks, one line each, in the server's order; those in `state` only, and with
/// `failed` those that failed only.
pub async fn list(
    client: &Client,
    job: &str,
    state: Option<TaskState>,
    failed: bool,
) -> CliResult<()> {
    let mut filters = Vec::new();
    if let Some(state) = state {
        let name = clap::ValueEnum::to_possible_value(&state).expect("every state is listed");
        filters.push(format!("state%20eq%20'{}'", name.get_name()));
    }
    if failed {
        filters.push(super::watch::FAILED.to_string());
    }
    let mut path = format!(
        "/jobs/{}/tasks?$select=id,state,executionInfo,nodeInfo",
        segment(job)
    );
    if !filters.is_empty() {
        path.push_str(&format!("&$filter={}", filters.join("%20and%20")));
    }
    let tasks = client.list(&path).await?;
    print(client.output, &json!(tasks), || {
        let rows: Vec<Vec<String>> = tasks
            .iter()
            .map(|t| {
                let run = &t["executionInfo"];
                let cells = [&t["id"], &t["state"], &run["result"], &run["exitCode"]];
                let mut row: Vec<String> = cells.into_iter().map(cell).collect();
                row.push(cell(&t["nodeInfo"]["nodeId"]));
                row
            })
            .collect();
        render(&["TASK", "STATE", "RESULT", "EXIT", "NODE"], &rows)
    });
    Ok(())
}

/// One `name  value` line each, the names aligned; the lines of what the task lacks left out.
fn describe(job: &str, t: &Value) -> String {
    let run = &t["executionInfo"];
    let failure = &run["failureInfo"];
    let why = failure["code"]
        .as_str()
        .map(|code| format!("{code}: {}", cell(&failure["message"])));
    let mut lines: Vec<(&str, String)> = vec![
        ("job", job.to_string()),
        ("task", cell(&t["id"])),
        ("state", cell(&t["state"])),
        ("command", cell(&t["commandLine"])),
    ];
    let optional = [
        ("result", &run["result"]),
        ("exit code", &run["exitCode"]),
        ("node", &t["nodeInfo"]["nodeId"]),
        ("started", &run["startTime"]),
        ("ended", &run["endTime"]),
        ("retries", &run["retryCount"]),
        ("requeues", &run["requeueCount"]),
    ];
    lines.extend(
        optional
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(name, v)| (*name, cell(v))),
    );
    lines.extend(why.map(|w| ("failure", w)));
    let stats = &t["stats"];
    if let (Some(cost), Some(currency)) = (stats["cost"].as_f64(), stats["currency"].as_str()) {
        lines.push(("cost", format!("{cost} {currency}")));
    }
    let wait = &t["waitReason"];
    if let Some(code) = wait["code"].as_str() {
        lines.push(("waits", format!("{code}: {}", cell(&wait["message"]))));
        lines.push(("waiting since", cell(&wait["since"])));
    }
    aligned(&lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_task_says_how_it_ended_and_why_and_leaves_out_what_it_lacks() {
        let t = json!({
            "id": "2", "state": "completed",
            "commandLine": "exit 3",
            "executionInfo": {"result": "failure", "exitCode": 3, "retryCount": 0,
                "requeueCount": 0, "failureInfo": {"category": "UserError",
                "code": "TaskFailedNonZeroExitCode", "message": "exit code 3"}},
        });
        assert_eq!(
            describe("mixed", &t),
            "job        mixed\ntask       2\nstate      completed\ncommand    exit 3\n\
             result     failure\nexit code  3\nretries    0\nrequeues   0\n\
             failure    TaskFailedNonZeroExitCode: exit code 3\n"
        );
    }

    #[test]
    fn a_priced_job_says_what_it_cost_and_will() {
        let j = json!({
            "id": "render", "state": "active", "poolInfo": {"poolId": "gpu"}, "priority": 100,
            "creationTime": "2026-11-29T10:00:00Z",
            "taskCounts": {"active": 2, "running": 1, "completed": 3, "succeeded": 3, "failed": 0},
            "stats": {"cost": 0.25, "estimatedCost": 0.5, "currency": "EUR"},
        });
        assert_eq!(
            describe_job(&j),
            "job       render\nstate     active\npool      gpu\npriority  100\n\
             tasks     2 active, 1 running, 3 completed, 3 succeeded, 0 failed\n\
             created   2026-11-29T10:00:00Z\ncost      0.25 EUR\nforecast  0.5 EUR\n"
        );
    }
}
