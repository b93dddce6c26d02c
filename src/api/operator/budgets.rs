//! `/batchpool/operator/budgets`: monthly budgets of a billing plan's pools, or of all of an
//! account's (docs/metering.md, "Budgets"), in the installation's currency. `PUT` sets one,
//! `GET ?account=` lists them with the month's cost so far, `DELETE ?account=&billingPlan=`
//! removes one.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::error::{ApiError, ApiResult};
use super::super::state::AppState;
use super::check_operator;
use crate::domain::budget::AtLimit;
use crate::ops;
use crate::store::{self, budgets::BudgetRow};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetBody {
    account: Option<String>,
    billing_plan: Option<String>,
    monthly_amount: Option<Value>,
    at_limit: Option<String>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// The budget as listed, with the month's cost so far reckoned now.
async fn budget_json(app: &AppState, row: &BudgetRow) -> ApiResult<Value> {
    let standing = ops::budgets::standing(&app.db, row, Utc::now()).await?;
    Ok(standing.json(row))
}

/// Sets a budget (`billingPlan` null or left out: of all the account's pools).
pub async fn set(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    check_operator(&app, &headers).await?;
    let body: BudgetBody = super::super::json::parse(&body)?;
    super::only_known(
        &body.rest,
        "a budget (account, billingPlan, monthlyAmount, atLimit)",
    )?;
    let amount = body
        .monthly_amount
        .ok_or_else(|| ApiError::missing_property("monthlyAmount"))?;
    let monthly = super::prices::rate("monthlyAmount", &amount)?;
    let at_limit = body.at_limit.unwrap_or_else(|| "none".into());
    if AtLimit::parse(&at_limit).is_none() {
        let why = format!("must be {}", AtLimit::NAMES);
        return Err(ApiError::invalid_property(
            "atLimit",
            at_limit.as_str(),
            why,
        ));
    }
    let account = super::known_account(&app, body.account).await?;
    if store::prices::by_plan(&app.db, &account).await?.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "AccountNotPriced",
            format!("The account {account:?} has no prices: a budget is an amount of their currency, so set them first (PUT /batchpool/operator/prices)."),
        ));
    }
    let plan = body.billing_plan.as_deref();
    let row = store::budgets::set(&app.db, &account, plan, (&monthly.text(), &at_limit)).await?;
    Ok(Json(budget_json(&app, &row).await?))
}

/// Every budget (of `?account=`, or of every account).
pub async fn list(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    check_operator(&app, &headers).await?;
    let rows = store::budgets::list(&app.db, query.get("account").map(String::as_str)).await?;
    let mut value = Vec::with_capacity(rows.len());
    for row in &rows {
        value.push(budget_json(&app, row).await?);
    }
    Ok(Json(json!({ "value": value })))
}

/// Removes the budget of `?account=` and `?billingPlan=` (left out: the account's own).
pub async fn remove(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<StatusCode> {
    check_operator(&app, &headers).await?;
    let account = query
        .get("account")
        .ok_or_else(|| ApiError::missing_property("account"))?;
    let plan = query.get("billingPlan").map(String::as_str);
    if store::budgets::remove(&app.db, account, plan).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "BudgetNotFound",
            format!("The account {account:?} has no such budget."),
        ))
    }
}
