//! `GET /metrics`: Prometheus' text format, for the operator (it names every account's pools and
//! jobs, so it takes `Authorization: Bearer <--metrics-token>`, and without that token set it
//! is off). What the database holds is read at each scrape (tasks by state, nodes by state,
//! targets, compute hours); what the process counted comes from `crate::metrics` (HTTP
//! requests and their durations, dispatch passes); and the leader and agent gauges.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;
use crate::metrics::{escape, family, write_process};
use crate::store;

/// Counts each request by its route's pattern (never its path: ids stay out of the labels).
pub async fn count(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let route = route.as_ref().map_or("(unmatched)", MatchedPath::as_str);
    crate::metrics::http_request(route, method, status, started.elapsed());
    response
}

/// A request's method as a label: HTTP's own methods by name, any other as `other` (a client
/// may send any token as a method, and each would otherwise be a series of its own).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

pub async fn scrape(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(token) = &state.settings.metrics_token else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "MetricsOff",
            "Metrics are off: start the server with --metrics-token (BATCHPOOL_METRICS_TOKEN) and scrape with Authorization: Bearer <token>.",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if !given.is_some_and(|g| super::auth::constant_time_eq(g.as_bytes(), token.as_bytes())) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "AuthenticationFailed",
            "/metrics takes Authorization: Bearer <the server's --metrics-token>.",
        ));
    }
    let mut out = String::new();
    write_database(&state, &mut out)
        .await
        .map_err(ApiError::internal)?;
    write_server(&state, &mut out);
    let (open, idle) = (state.db.size(), state.db.num_idle());
    let most = state.db.options().get_max_connections();
    family(
        &mut out,
        "batchpool_db_connections",
        "gauge",
        "This server's database connections: busy, idle, and the most it opens.",
    );
    let busy = u64::from(open).saturating_sub(idle as u64);
    let _ = writeln!(out, "batchpool_db_connections{{state=\"busy\"}} {busy}");
    let _ = writeln!(out, "batchpool_db_connections{{state=\"idle\"}} {idle}");
    let _ = writeln!(out, "batchpool_db_connections{{state=\"max\"}} {most}");
    write_process(&mut out);
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    Ok(([(header::CONTENT_TYPE, content_type)], out).into_response())
}

async fn write_database(state: &AppState, out: &mut String) -> sqlx::Result<()> {
    let db = &state.db;
    family(
        out,
        "batchpool_tasks",
        "gauge",
        "Tasks of the jobs not completed yet, by state.",
    );
    for t in store::metrics::task_counts(db).await? {
        let (account, job) = (escape(&t.account), escape(&t.job));
        let _ = writeln!(
            out,
            "batchpool_tasks{{account=\"{account}\",job=\"{job}\",state=\"{}\"}} {}",
            t.state, t.count
        );
    }
    family(
        out,
        "batchpool_nodes",
        "gauge",
        "Nodes by pool, host and state.",
    );
    for n in store::metrics::node_counts(db).await? {
        let (account, pool, host) = (escape(&n.account), escape(&n.pool), escape(&n.host));
        let _ = writeln!(
            out,
            "batchpool_nodes{{account=\"{account}\",pool=\"{pool}\",host=\"{host}\",state=\"{}\"}} {}",
            n.state, n.count
        );
    }
    family(
        out,
        "batchpool_pool_target_nodes",
        "gauge",
        "The dedicated nodes each pool is sized to.",
    );
    for p in store::metrics::pool_targets(db).await? {
        let (account, pool) = (escape(&p.account), escape(&p.pool));
        let _ = writeln!(
            out,
            "batchpool_pool_target_nodes{{account=\"{account}\",pool=\"{pool}\"}} {}",
            p.target
        );
    }
    family(
        out,
        "batchpool_compute_hours_total",
        "counter",
        "Node-hours metered so far, by pool and billing plan.",
    );
    for h in store::metrics::compute_hours(db).await? {
        let (account, pool, plan) = (escape(&h.account), escape(&h.pool), escape(&h.billing_plan));
        let _ = writeln!(
            out,
            "batchpool_compute_hours_total{{account=\"{account}\",pool=\"{pool}\",billing_plan=\"{plan}\"}} {}",
            h.hours
        );
    }
    write_budgets(db, out).await
}

/// Each monthly budget's share used (as the leader last reckoned it, every 5 s), and whether
/// this month crossed 80% and 100%.
async fn write_budgets(db: &sqlx::PgPool, out: &mut String) -> sqlx::Result<()> {
    let budgets = store::budgets::list(db, None).await?;
    family(
        out,
        "batchpool_budget_used_ratio",
        "gauge",
        "The share of each monthly budget this month's cost has used (1 = all of it).",
    );
    let labels = |b: &store::budgets::BudgetRow| {
        let plan = escape(b.billing_plan.as_deref().unwrap_or_default());
        format!("account=\"{}\",billing_plan=\"{plan}\"", escape(&b.account))
    };
    for b in &budgets {
        let monthly = crate::domain::pricing::Rate::parse(&b.monthly_amount).unwrap_or_default();
        let monthly = monthly.0 as f64 / 1e9;
        let used = b.used_amount.unwrap_or(0.0);
        let ratio = if monthly > 0.0 { used / monthly } else { 1.0 };
        let _ = writeln!(out, "batchpool_budget_used_ratio{{{}}} {ratio}", labels(b));
    }
    family(
        out,
        "batchpool_budget_crossed",
        "gauge",
        "Whether this month's cost has crossed 80% (threshold 0.8) and all (1) of each monthly budget.",
    );
    let (month, _) = crate::domain::budget::month_of(chrono::Utc::now());
    for b in &budgets {
        for (threshold, crossed) in [("0.8", b.warned_month), ("1", b.exceeded_month)] {
            let crossed = u8::from(crossed == Some(month));
            let _ = writeln!(
                out,
                "batchpool_budget_crossed{{{},threshold=\"{threshold}\"}} {crossed}",
                labels(b)
            );
        }
    }
    Ok(())
}

/// This server in the installation: whether it leads, its agents, the servers it knows, and
/// (leading) the Docker hosts that answer.
fn write_server(state: &AppState, out: &mut String) {
    let leads = u8::from(state.probes.leads());
    family(
        out,
        "batchpool_leader",
        "gauge",
        "Whether this server leads the scheduler.",
    );
    let _ = writeln!(out, "batchpool_leader {leads}");
    family(
        out,
        "batchpool_agents_connected",
        "gauge",
        "Node agents this server knows.",
    );
    let _ = writeln!(
        out,
        "batchpool_agents_connected {}",
        state.runtime.agents_known()
    );
    family(
        out,
        "batchpool_servers",
        "gauge",
        "The installation's servers, as this server last read them (every 2 s).",
    );
    let _ = writeln!(out, "batchpool_servers {}", state.peers.servers().1.len());
    family(
        out,
        "batchpool_docker_host_up",
        "gauge",
        "Whether each Docker host answered when the leader last pinged it (on the leader only).",
    );
    if leads == 1 {
        for (host, up) in state.runtime.hosts_answering() {
            let host = escape(&host);
            let _ = writeln!(
                out,
                "batchpool_docker_host_up{{host=\"{host}\"}} {}",
                u8::from(up)
            );
        }
    }
}
