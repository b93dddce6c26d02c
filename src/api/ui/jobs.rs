//! Jobs with their progress, a job's tasks filtered by state, and a task with its output
//! followed live (the script reads `/ui/api/.../files/stdout.txt?follow=true` as it streams).

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::{Path, Query};
use axum::http::StatusCode;

use super::html::{bar, page, when, Esc, Section, Seg};
use super::{problem, unavailable, Page, Problem, Ui};
use crate::domain::job::TaskState;
use crate::store;
use crate::store::jobs::{JobRow, Lock};
use crate::store::tasks::{Counts, TaskRow};

/// Jobs a page lists, and tasks a page of a job lists.
const JOBS: i64 = 200;
const TASKS: i64 = 100;

pub(super) fn progress(c: &Counts) -> String {
    bar(
        &[
            (c.succeeded, "succeeded"),
            (c.failed, "failed"),
            (c.running, "running"),
            (c.active, "active"),
        ],
        240,
    )
}

pub(super) fn counts_text(c: &Counts) -> String {
    format!(
        "{} active · {} running · {} succeeded · {} failed",
        c.active, c.running, c.succeeded, c.failed
    )
}

pub async fn list(ui: Ui) -> Page {
    let db = &ui.app.db;
    let jobs = store::jobs::list(db, &ui.s.account, None, JOBS)
        .await
        .map_err(unavailable)?;
    let mut rows = String::new();
    for job in &jobs {
        let c = store::tasks::counts(db, job.pk)
            .await
            .map_err(unavailable)?;
        let _ = write!(
            rows,
            "<tr><td><a href=\"/ui/jobs/{seg}\">{id}</a></td><td>{pool}</td><td class=\"state\">{state}</td>\
             <td>{prio}</td><td>{bar}</td><td class=\"counts\">{counts}</td></tr>",
            seg = Seg(&job.id),
            id = Esc(&job.id),
            pool = Esc(&job.pool_id),
            state = job.state.as_str(),
            prio = job.priority,
            bar = progress(&c),
            counts = counts_text(&c),
        );
    }
    let main = if jobs.is_empty() {
        "<h1>Jobs</h1><p class=\"empty\">No jobs yet. Submit one with <code>batchpool job submit</code>.</p>".to_string()
    } else {
        format!(
            "<h1>Jobs</h1><table><thead><tr><th>Job</th><th>Pool</th><th>State</th><th>Priority</th>\
             <th>Progress</th><th>Tasks</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    };
    Ok(page(&ui.s, Section::Jobs, "Jobs", 3, &main))
}

async fn job(ui: &Ui, id: &str) -> Result<JobRow, Problem> {
    store::jobs::get(&ui.app.db, &ui.s.account, id, Lock::None)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| {
            problem(
                StatusCode::NOT_FOUND,
                "No such job",
                format!("This account has no job {id:?}."),
            )
        })
}

/// The filters of a job's task list: every task, or those in one state.
const FILTERS: [(&str, &str); 4] = [
    ("", "all"),
    ("active", "active"),
    ("running", "running"),
    ("completed", "completed"),
];

pub async fn tasks(
    ui: Ui,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Page {
    let job = job(&ui, &id).await?;
    let state = q.get("state").map(String::as_str).unwrap_or("");
    let state = match TaskState::parse(state) {
        Some(s) => Some(s.as_str()),
        None if state.is_empty() => None,
        None => {
            return Err(problem(
                StatusCode::BAD_REQUEST,
                "Bad filter",
                "state is one of active, running, completed.",
            ))
        }
    };
    let after = q.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    let db = &ui.app.db;
    let c = store::tasks::counts(db, job.pk)
        .await
        .map_err(unavailable)?;
    let list = store::tasks::list(db, job.pk, after, TASKS, state)
        .await
        .map_err(unavailable)?;
    let mut waits = vec![serde_json::json!({}); list.len() + 1];
    let (of_job, of_tasks) = waits.split_at_mut(1);
    crate::api::batch::waits::add_to_jobs(db, std::slice::from_ref(&job), of_job)
        .await
        .map_err(unavailable)?;
    crate::api::batch::waits::add_to_tasks(db, &job, &list, of_tasks)
        .await
        .map_err(unavailable)?;
    let cost = cost_text(&ui, &job).await?;
    let seg = Seg(&job.id).to_string();
    let mut filters = String::new();
    for (value, label) in FILTERS {
        let current = if state.unwrap_or("") == value {
            " aria-current=\"true\""
        } else {
            ""
        };
        let href = if value.is_empty() {
            format!("/ui/jobs/{seg}")
        } else {
            format!("/ui/jobs/{seg}?state={value}")
        };
        let _ = write!(filters, "<a href=\"{href}\"{current}>{label}</a>");
    }
    let mut main = format!(
        "<h1>Job {id}</h1><p class=\"facts\"><span>pool {pool}</span><span class=\"state\">{st}</span>\
         <span>priority {prio}</span>{cost}</p><p>{bar} {counts}</p>{why}<nav class=\"filters\">{filters}</nav>",
        id = Esc(&job.id),
        pool = Esc(&job.pool_id),
        st = job.state.as_str(),
        prio = job.priority,
        bar = progress(&c),
        counts = counts_text(&c),
        why = wait_text(&waits[0]),
    );
    main += &task_table(&seg, &list, &waits[1..]);
    if list.len() as i64 == TASKS {
        let last = list.last().map_or(0, |t| t.pk);
        let filter = state.map(|s| format!("&state={s}")).unwrap_or_default();
        let _ = write!(
            main,
            "<p><a href=\"/ui/jobs/{seg}?after={last}{filter}\">Next {TASKS} tasks</a></p>"
        );
    }
    Ok(page(
        &ui.s,
        Section::Jobs,
        &format!("Job {}", job.id),
        3,
        &main,
    ))
}

/// What the job cost so far and its forecast, once the account has prices (the figures of its
/// statistics, docs/metering.md); nothing before.
async fn cost_text(ui: &Ui, job: &store::jobs::JobRow) -> Result<String, Problem> {
    let ctx = ui.ctx();
    let mut stats = serde_json::json!({});
    crate::api::batch::stats::add_cost(&ctx, &mut stats, job, None)
        .await
        .map_err(|e| problem(e.status, "Unavailable", e.message))?;
    let (Some(cost), Some(currency)) = (stats["cost"].as_f64(), stats["currency"].as_str()) else {
        return Ok(String::new());
    };
    let mut text = format!("<span class=\"cost\">cost {cost:.4} {}", Esc(currency));
    if let Some(estimate) = stats["estimatedCost"].as_f64() {
        let _ = write!(text, ", about {estimate:.4} at its end");
    }
    Ok(text + "</span>")
}

fn outcome(t: &TaskRow) -> String {
    match (t.result.as_deref(), t.exit_code) {
        (Some("failure"), Some(code)) => {
            format!("<span class=\"failed\">failed, exit {code}</span>")
        }
        (Some("failure"), None) => "<span class=\"failed\">failed</span>".into(),
        (Some(_), Some(code)) => format!("exit {code}"),
        _ => String::new(),
    }
}

/// Why a job's (or a task's) active tasks wait, as a paragraph; nothing if they do not.
fn wait_text(v: &serde_json::Value) -> String {
    let reason = &v["waitReason"];
    match (reason["code"].as_str(), reason["message"].as_str()) {
        (Some(code), Some(message)) => format!(
            "<p class=\"waits\">Waiting: <strong>{}</strong> {}</p>",
            Esc(code),
            Esc(message)
        ),
        _ => String::new(),
    }
}

/// The table of a page of a job's tasks; `waits` holds each one's `waitReason`, if it waits.
fn task_table(job_seg: &str, list: &[TaskRow], waits: &[serde_json::Value]) -> String {
    if list.is_empty() {
        return "<p class=\"empty\">No tasks here.</p>".into();
    }
    let mut rows = String::new();
    for (t, wait) in list.iter().zip(waits) {
        let outcome = match wait["waitReason"]["code"].as_str() {
            Some(code) => format!("<span class=\"waits\">{}</span>", Esc(code)),
            None => outcome(t),
        };
        let _ = write!(
            rows,
            "<tr><td><a href=\"/ui/jobs/{job_seg}/tasks/{seg}\">{id}</a></td><td class=\"state\">{state}</td>\
             <td>{outcome}</td><td>{node}</td><td><code>{cmd}</code></td></tr>",
            seg = Seg(&t.id),
            id = Esc(&t.id),
            state = t.state.as_str(),
            node = Esc(t.node_id.as_deref().unwrap_or("")),
            cmd = Esc(&t.command_line),
        );
    }
    format!(
        "<table class=\"tasks\"><thead><tr><th>Task</th><th>State</th><th>Outcome</th><th>Node</th>\
         <th>Command line</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

pub async fn task(ui: Ui, Path((job_id, task_id)): Path<(String, String)>) -> Page {
    let job = job(&ui, &job_id).await?;
    let t = store::tasks::get(&ui.app.db, job.pk, &task_id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| {
            problem(
                StatusCode::NOT_FOUND,
                "No such task",
                format!("Job {job_id:?} has no task {task_id:?}."),
            )
        })?;
    let mut wait = serde_json::json!({});
    let one = std::slice::from_mut(&mut wait);
    crate::api::batch::waits::add_to_tasks(&ui.app.db, &job, std::slice::from_ref(&t), one)
        .await
        .map_err(unavailable)?;
    let (js, ts) = (Seg(&job.id), Seg(&t.id));
    let mut facts = format!(
        "<span class=\"state\">{}</span><span>{} slot(s)</span><span>retries {}</span><span>requeues {}</span>",
        t.state.as_str(),
        t.required_slots,
        t.retry_count,
        t.requeue_count
    );
    if let Some(node) = &t.node_id {
        let _ = write!(facts, "<span>node {}</span>", Esc(node));
    }
    for (label, time) in [("started", t.start_time), ("ended", t.end_time)] {
        if let Some(time) = time {
            let _ = write!(facts, "<span>{label} {}</span>", when(time));
        }
    }
    let failure = t
        .failure_info
        .as_ref()
        .and_then(|f| f["message"].as_str())
        .map(|m| format!("<p class=\"error\">{}</p>", Esc(m)));
    let logs: String = ["stdout.txt", "stderr.txt"]
        .iter()
        .map(|f| {
            format!(
                "<h2>{f}</h2><pre class=\"log\" data-log=\"/ui/api/jobs/{js}/tasks/{ts}/files/{f}\"></pre>"
            )
        })
        .collect();
    let main = format!(
        "<p><a href=\"/ui/jobs/{js}\">Job {jid}</a></p><h1>Task {tid}</h1><p class=\"facts\">{facts}</p>{why}{outcome}{failure}\
         <p>Command line: <code>{cmd}</code></p>{logs}",
        jid = Esc(&job.id),
        tid = Esc(&t.id),
        outcome = outcome(&t),
        failure = failure.unwrap_or_default(),
        why = wait_text(&wait),
        cmd = Esc(&t.command_line),
    );
    // The page itself is not reloaded: the logs grow in place.
    Ok(page(
        &ui.s,
        Section::Jobs,
        &format!("Task {}", t.id),
        0,
        &main,
    ))
}
