//! `batchpool job watch`: a job's progress until its tasks are done, as a bar on a terminal and
//! as a line per change elsewhere (a CI log). The exit status says whether every task succeeded,
//! so a pipeline can stop on a failed one.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{segment, CliResult, Client, Output};
use super::table::cell;

/// How often the counts are asked for.
const EVERY: Duration = Duration::from_millis(500);
/// How many failed tasks the summary names.
const NAMED: usize = 20;
/// The `$filter` (URL-encoded) of the tasks that failed.
pub(super) const FAILED: &str = "executionInfo/result%20eq%20'failure'";
/// The exit status when `--timeout` passes first, as `timeout(1)` gives.
pub const TIMED_OUT: u8 = 124;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    active: u64,
    running: u64,
    completed: u64,
    succeeded: u64,
    failed: u64,
}

impl Counts {
    fn of(answer: &Value) -> Counts {
        let c = &answer["taskCounts"];
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        Counts {
            active: n("active"),
            running: n("running"),
            completed: n("completed"),
            succeeded: n("succeeded"),
            failed: n("failed"),
        }
    }

    fn total(&self) -> u64 {
        self.active + self.running + self.completed
    }

    fn json(&self) -> Value {
        json!({"active": self.active, "running": self.running, "completed": self.completed, "succeeded": self.succeeded, "failed": self.failed})
    }

    fn words(&self) -> String {
        format!(
            "{}/{} done  active {}  running {}  succeeded {}  failed {}",
            self.completed,
            self.total(),
            self.active,
            self.running,
            self.succeeded,
            self.failed
        )
    }

    /// `[#######.............]` and the words.
    fn bar(&self) -> String {
        const WIDTH: u64 = 30;
        let filled = (self.completed * WIDTH)
            .checked_div(self.total())
            .unwrap_or(0);
        let bar = "#".repeat(filled as usize) + &".".repeat((WIDTH - filled) as usize);
        format!("[{bar}] {}", self.words())
    }
}

/// Watches `job` until no task of it is active or running, or the job has ended (terminated: its
/// active tasks never run); 0 when every task succeeded, 1 when one failed or never ran,
/// [`TIMED_OUT`] when `timeout` passed first.
pub async fn watch(client: &Client, job: &str, timeout: Option<Duration>) -> CliResult<u8> {
    let started = Instant::now();
    let terminal = client.output == Output::Table && std::io::stdout().is_terminal();
    let mut last: Option<Counts> = None;
    let counts = loop {
        let counts = Counts::of(
            &client
                .get(&format!("/jobs/{}/taskcounts", segment(job)))
                .await?,
        );
        // A job that ended (terminated, say) runs nothing more: its active tasks never will.
        let finished = counts.running == 0
            && ((counts.active == 0 && counts.total() > 0) || job_ended(client, job).await?);
        if client.output == Output::Table && (terminal || last != Some(counts)) {
            show(terminal, &counts);
        }
        last = Some(counts);
        if finished {
            break counts;
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            if terminal {
                println!();
            }
            let waited = timeout.unwrap_or_default().as_secs();
            let json = json!({"jobId": job, "taskCounts": counts.json(), "timedOut": true});
            say(
                client.output,
                &json,
                &format!("job {job}: not done after {waited} s: {}", counts.words()),
            );
            return Ok(TIMED_OUT);
        }
        tokio::time::sleep(EVERY).await;
    };
    if terminal {
        println!();
    }
    let failed = if counts.failed > 0 {
        failed_tasks(client, job).await?
    } else {
        Vec::new()
    };
    let mut json = json!({"jobId": job, "taskCounts": counts.json(), "failedTasks": failed});
    if counts.failed == 0 && counts.active == 0 {
        say(
            client.output,
            &json,
            &format!("job {job}: all {} tasks succeeded", counts.total()),
        );
        return Ok(0);
    }
    if counts.active > 0 {
        json["notRun"] = json!(counts.active);
    }
    let mut text = format!("job {job}: {}", verdict(&counts));
    for task in failed.iter().take(NAMED) {
        text.push_str(&format!(
            "\n  {}  {}",
            cell(&task["id"]),
            cell(&task["reason"])
        ));
    }
    if failed.len() > NAMED {
        text.push_str(&format!("\n  ... and {} more", failed.len() - NAMED));
    }
    say(client.output, &json, &text);
    Ok(1)
}

/// What went wrong, for a job that did not succeed: its failed tasks, and those that never ran
/// because the job ended first.
fn verdict(c: &Counts) -> String {
    let total = c.total();
    let never = "never ran (the job ended first)";
    match (c.failed, c.active) {
        (failed, 0) => format!("{failed} of {total} tasks failed"),
        (0, active) => format!("{active} of {total} tasks {never}"),
        (failed, active) => format!("{failed} of {total} tasks failed, {active} {never}"),
    }
}

fn show(terminal: bool, counts: &Counts) {
    let mut out = std::io::stdout().lock();
    let _ = if terminal {
        write!(out, "\r\x1b[2K{}", counts.bar())
    } else {
        writeln!(
            out,
            "{} {}",
            chrono::Utc::now().format("%H:%M:%S"),
            counts.words()
        )
    };
    let _ = out.flush();
}

fn say(output: Output, json: &Value, text: &str) {
    match output {
        Output::Json => println!("{json:#}"),
        Output::Table => println!("{text}"),
    }
}

/// Whether the job has ended (completed): a job with no tasks, or one terminated with tasks
/// that never ran, is not waited on forever.
pub(super) async fn job_ended(client: &Client, job: &str) -> CliResult<bool> {
    let found = client
        .get(&format!("/jobs/{}?$select=state", segment(job)))
        .await?;
    Ok(found["state"] == "completed")
}

/// The failed tasks, each with why: its exit code or its failure's message.
async fn failed_tasks(client: &Client, job: &str) -> CliResult<Vec<Value>> {
    let path = format!(
        "/jobs/{}/tasks?$filter={FAILED}&$select=id,executionInfo",
        segment(job)
    );
    let tasks = client.list(&path).await?;
    Ok(tasks
        .iter()
        .map(|t| {
            let info = &t["executionInfo"];
            let reason = match (&info["exitCode"], &info["failureInfo"]["message"]) {
                (Value::Number(code), _) => format!("exit code {code}"),
                (_, Value::String(message)) => message.clone(),
                _ => "failed".to_string(),
            };
            json!({"id": t["id"], "exitCode": info["exitCode"], "reason": reason})
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_names_failed_tasks_and_those_the_ended_job_never_ran() {
        let c = |active, failed, succeeded| Counts {
            active,
            running: 0,
            completed: failed + succeeded,
            succeeded,
            failed,
        };
        assert_eq!(verdict(&c(0, 1, 99)), "1 of 100 tasks failed");
        assert_eq!(
            verdict(&c(2, 0, 4)),
            "2 of 6 tasks never ran (the job ended first)"
        );
        assert_eq!(
            verdict(&c(2, 4, 0)),
            "4 of 6 tasks failed, 2 never ran (the job ended first)"
        );
    }
}
