//! `GET /metrics`: OpenMetrics text (through `prometheus-client`), for the operator (it names
//! every account's pools and jobs, so it takes `Authorization: Bearer <--metrics-token>`, and
//! without that token set it is off). What the database holds is read at each scrape (tasks
//! and nodes by state, targets, compute hours, budgets); what the process counted comes from
//! `crate::metrics` (HTTP requests and their durations, dispatch passes); and the leader,
//! agent, server and connection gauges.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sqlx::PgPool;

use super::error::ApiError;
use super::state::AppState;
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
    let mut registry = Registry::with_prefix("batchpool");
    register_database(&state.db, &mut registry)
        .await
        .map_err(ApiError::internal)?;
    register_server(&state, &mut registry);
    crate::metrics::register_process(&mut registry);
    let mut out = String::new();
    encode(&mut out, &registry).map_err(ApiError::internal)?;
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    Ok(([(header::CONTENT_TYPE, content_type)], out).into_response())
}

/// A gauge of counts, by labels `L`.
type Counts<L> = Family<L, Gauge>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    account: String,
    job: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    account: String,
    pool: String,
    host: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    account: String,
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanLabels {
    account: String,
    pool: String,
    billing_plan: String,
}

/// A family of gauges, one for each row, by its labels and value.
fn counts<R, L>(rows: Vec<R>, each: impl Fn(R) -> (L, i64)) -> Counts<L>
where
    L: Clone + std::hash::Hash + Eq,
{
    let family = Counts::default();
    for (labels, n) in rows.into_iter().map(each) {
        family.get_or_create(&labels).set(n);
    }
    family
}

/// What the database holds, read at each scrape.
async fn register_database(db: &PgPool, registry: &mut Registry) -> sqlx::Result<()> {
    let tasks = counts(store::metrics::task_counts(db).await?, |t| {
        let (account, job, state) = (t.account, t.job, t.state);
        (
            TaskLabels {
                account,
                job,
                state,
            },
            t.count,
        )
    });
    let help = "Tasks of the jobs not completed yet, by state";
    registry.register("tasks", help, tasks);
    let nodes = counts(store::metrics::node_counts(db).await?, |n| {
        let (account, pool, host, state) = (n.account, n.pool, n.host, n.state);
        (
            NodeLabels {
                account,
                pool,
                host,
                state,
            },
            n.count,
        )
    });
    registry.register("nodes", "Nodes by pool, host and state", nodes);
    let targets = counts(store::metrics::pool_targets(db).await?, |p| {
        let (account, pool) = (p.account, p.pool);
        (PoolLabels { account, pool }, p.target.into())
    });
    let help = "The dedicated nodes each pool is sized to";
    registry.register("pool_target_nodes", help, targets);
    let hours = Family::<PlanLabels, Counter<f64, AtomicU64>>::default();
    for h in store::metrics::compute_hours(db).await? {
        let (account, pool, billing_plan) = (h.account, h.pool, h.billing_plan);
        let labels = PlanLabels {
            account,
            pool,
            billing_plan,
        };
        hours.get_or_create(&labels).inc_by(h.hours);
    }
    let help = "Node-hours metered so far, by pool and billing plan";
    registry.register("compute_hours", help, hours);
    register_budgets(db, registry).await
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    account: String,
    billing_plan: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CrossedLabels {
    account: String,
    billing_plan: String,
    threshold: &'static str,
}

/// Each monthly budget's share used (as the leader last reckoned it, every 5 s), and whether
/// this month crossed 80% and 100%.
async fn register_budgets(db: &PgPool, registry: &mut Registry) -> sqlx::Result<()> {
    let used = Family::<BudgetLabels, Gauge<f64, AtomicU64>>::default();
    let crossed = Counts::<CrossedLabels>::default();
    let (month, _) = crate::domain::budget::month_of(chrono::Utc::now());
    for b in store::budgets::list(db, None).await? {
        let monthly = crate::domain::pricing::Rate::parse(&b.monthly_amount).unwrap_or_default();
        let monthly = monthly.0 as f64 / 1e9;
        let spent = b.used_amount.unwrap_or(0.0);
        let ratio = if monthly > 0.0 { spent / monthly } else { 1.0 };
        let billing_plan = b.billing_plan.unwrap_or_default();
        let account = b.account;
        for (threshold, month_crossed) in [("0.8", b.warned_month), ("1", b.exceeded_month)] {
            let labels = CrossedLabels {
                account: account.clone(),
                billing_plan: billing_plan.clone(),
                threshold,
            };
            let yes = month_crossed == Some(month);
            crossed.get_or_create(&labels).set(i64::from(yes));
        }
        let labels = BudgetLabels {
            account,
            billing_plan,
        };
        used.get_or_create(&labels).set(ratio);
    }
    let help = "The share of each monthly budget this month's cost has used (1 = all of it)";
    registry.register("budget_used_ratio", help, used);
    let help = "Whether this month's cost has crossed 80% (threshold 0.8) and all (1) of each monthly budget";
    registry.register("budget_crossed", help, crossed);
    Ok(())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabels {
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    state: &'static str,
}

/// A gauge set to `value`.
fn gauge(value: i64) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(value);
    gauge
}

/// This server in the installation: whether it leads, its agents, the servers it knows, its
/// database connections, and (leading) the Docker hosts that answer.
fn register_server(state: &AppState, registry: &mut Registry) {
    let leads = state.probes.leads();
    let help = "Whether this server leads the scheduler";
    registry.register("leader", help, gauge(leads.into()));
    let agents = i64::try_from(state.runtime.agents_known()).unwrap_or(i64::MAX);
    registry.register(
        "agents_connected",
        "Node agents this server knows",
        gauge(agents),
    );
    let servers = i64::try_from(state.peers.servers().1.len()).unwrap_or(i64::MAX);
    let help = "The installation's servers, as this server last read them (every 2 s)";
    registry.register("servers", help, gauge(servers));
    let up = Counts::<HostLabels>::default();
    if leads {
        for (host, answers) in state.runtime.hosts_answering() {
            up.get_or_create(&HostLabels { host }).set(answers.into());
        }
    }
    let help =
        "Whether each Docker host answered when the leader last pinged it (on the leader only)";
    registry.register("docker_host_up", help, up);
    let (open, idle) = (state.db.size(), state.db.num_idle());
    let most = state.db.options().get_max_connections();
    let busy = i64::from(open).saturating_sub(i64::try_from(idle).unwrap_or(i64::MAX));
    let connections = Counts::<ConnectionLabels>::default();
    let states = [("busy", busy), ("idle", idle as i64), ("max", most.into())];
    for (state, n) in states {
        connections
            .get_or_create(&ConnectionLabels { state })
            .set(n);
    }
    let help = "This server's database connections: busy, idle, and the most it opens";
    registry.register("db_connections", help, connections);
}
