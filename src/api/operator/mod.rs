//! The operator's routes, under `/batchpool/operator`: what whoever runs the installation does,
//! across every account (so no account's key opens them). They take `Authorization: Bearer
//! <operator token>`; each server writes the token to `operator.token` in its data directory.
//!
//! `POST /batchpool/operator/reclaim` takes capacity back from low-priority nodes, as a cloud
//! takes back spot capacity: to test jobs against preemption, or to free a host by hand.
//! `/batchpool/operator/hosts` lists, adds and removes Docker hosts while servers run.
//! `/batchpool/operator/prices` sets and lists what compute hours cost, and
//! `/batchpool/operator/budgets` what a plan or an account may spend in a month.

mod budgets;
mod hosts;
mod prices;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{Duration, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::state::AppState;
use crate::domain::{rfc3339, IsoDuration};
use crate::store::{self, nodes::HostedNode};

/// The most nodes one reclaim names or counts.
const MAX_NODES: usize = 1000;
/// How long reclaimed capacity is held when the request does not say, and the longest hold.
const DEFAULT_HOLD_SECS: i64 = 60;
const MAX_HOLD_SECS: i64 = 24 * 3600;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/batchpool/operator/reclaim", post(reclaim))
        .route(
            "/batchpool/operator/hosts",
            get(hosts::list).post(hosts::add).delete(hosts::remove),
        )
        .route(
            "/batchpool/operator/prices",
            get(prices::list).put(prices::set),
        )
        .route(
            "/batchpool/operator/budgets",
            get(budgets::list).put(budgets::set).delete(budgets::remove),
        )
}

/// Refuses a request without the operator's token.
async fn check_operator(app: &AppState, headers: &HeaderMap) -> ApiResult<()> {
    let token = store::operator_token(&app.db).await?;
    let given = super::bes::bearer(headers);
    if !given.is_some_and(|g| super::bes::same_key(g, &token)) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "AuthenticationFailed",
            "The operator's routes take Authorization: Bearer <operator token>; the token is in operator.token in the server's data directory.",
        ));
    }
    Ok(())
}

/// Refuses a body with a property besides those `what` names, by the first such property.
fn only_known(rest: &Map<String, Value>, what: &str) -> ApiResult<()> {
    match rest.keys().next() {
        Some(name) => Err(ApiError::invalid_property(
            name,
            "",
            format!("is not a property of {what}"),
        )),
        None => Ok(()),
    }
}

/// The account a body names: a missing one, or one that does not exist, is refused by name.
async fn known_account(app: &AppState, account: Option<String>) -> ApiResult<String> {
    let account = account.ok_or_else(|| ApiError::missing_property("account"))?;
    if store::accounts::get(&app.db, &account).await?.is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "AccountNotFound",
            format!("There is no account {account:?}."),
        ));
    }
    Ok(account)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimBody {
    node_ids: Option<Vec<String>>,
    count: Option<i64>,
    host: Option<String>,
    hold_for: Option<IsoDuration>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// Preempts low-priority nodes: those named (`nodeIds`), or the newest `count` of them (on
/// `host`, if given). Their capacity is held for `holdFor` (default PT1M): no node preempted
/// here is made again before that.
pub async fn reclaim(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    // Who asks is checked before what is asked is read.
    check_operator(&app, &headers).await?;
    let body: ReclaimBody = super::json::parse(&body)?;
    only_known(&body.rest, "a reclaim (nodeIds, count, host, holdFor)")?;
    let hold = hold(body.hold_for.as_ref())?;
    let nodes = chosen(&app, body.node_ids, body.count, body.host.as_deref()).await?;
    let pks: Vec<i64> = nodes.iter().map(|n| n.pk).collect();
    let until = Utc::now() + hold;
    let preempted = crate::ops::preempt::preempt(&app.db, &pks, until).await?;
    app.wake_allocator();
    app.wake_dispatcher();
    let listed: Vec<Value> = nodes
        .iter()
        .filter(|n| preempted.iter().any(|(pk, _)| *pk == n.pk))
        .map(|n| json!({"nodeId": n.id, "poolId": n.pool_id, "account": n.account, "host": n.host}))
        .collect();
    Ok(Json(
        json!({"preempted": listed, "heldUntil": rfc3339(until)}),
    ))
}

fn hold(given: Option<&IsoDuration>) -> ApiResult<Duration> {
    let Some(d) = given else {
        return Ok(Duration::seconds(DEFAULT_HOLD_SECS));
    };
    let micros = d.ticks() / 10;
    if micros > MAX_HOLD_SECS * 1_000_000 {
        return Err(ApiError::invalid_property(
            "holdFor",
            d.to_string(),
            "must be at most P1D",
        ));
    }
    Ok(Duration::microseconds(micros))
}

/// The nodes a reclaim names, or picks by count; a named node that does not exist, or is
/// dedicated, is refused by name.
async fn chosen(
    app: &AppState,
    ids: Option<Vec<String>>,
    count: Option<i64>,
    host: Option<&str>,
) -> ApiResult<Vec<HostedNode>> {
    match (ids, count) {
        (Some(ids), None) if host.is_none() => {
            if ids.is_empty() || ids.len() > MAX_NODES {
                return Err(ApiError::invalid_property(
                    "nodeIds",
                    ids.len().to_string(),
                    format!("name 1 to {MAX_NODES} nodes"),
                ));
            }
            let found = store::nodes::hosted_by_ids(&app.db, &ids).await?;
            for id in &ids {
                match found.iter().find(|n| n.id == *id) {
                    None => {
                        return Err(ApiError::new(
                            StatusCode::NOT_FOUND,
                            "NodeNotFound",
                            format!("No node {id:?} exists."),
                        )
                        .with("NodeId", id))
                    }
                    Some(n) if n.is_dedicated => {
                        return Err(ApiError::new(
                            StatusCode::CONFLICT,
                            "NodeIsDedicated",
                            format!("The node {id:?} is dedicated: only low-priority nodes are preempted."),
                        )
                        .with("NodeId", id))
                    }
                    Some(_) => {}
                }
            }
            Ok(found)
        }
        (None, Some(count)) if (1..=MAX_NODES as i64).contains(&count) => {
            Ok(store::nodes::preemptible(&app.db, host, count).await?)
        }
        (None, Some(count)) => Err(ApiError::invalid_property(
            "count",
            count.to_string(),
            format!("must be from 1 to {MAX_NODES}"),
        )),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "InvalidRequestBody",
            "Give either nodeIds, or count (and optionally host), to say which low-priority nodes to preempt.",
        )),
    }
}
