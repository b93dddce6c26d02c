//! `/batchpool/operator/prices`: what a compute hour costs, per account and billing plan, in the
//! installation's currency (docs/metering.md, "Prices and cost"). `PUT` sets a plan's prices
//! from now on (earlier hours keep the prices they were metered at); `GET ?account=` lists
//! every price set, oldest first.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::error::{ApiError, ApiResult};
use super::super::state::AppState;
use super::check_operator;
use crate::domain::pricing::{valid_currency, Prices, Rate};
use crate::domain::rfc3339;
use crate::store::{self, prices::PriceRow};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PricesBody {
    account: Option<String>,
    billing_plan: Option<String>,
    currency: Option<String>,
    compute_hour: Option<Value>,
    low_priority_compute_hour: Option<Value>,
    vm_sizes: Option<BTreeMap<String, Value>>,
    included_compute_hours: Option<Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// An amount, given as a JSON number or a string of digits.
pub(super) fn rate(name: &str, value: &Value) -> ApiResult<Rate> {
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Rate::parse(&text).map_err(|why| ApiError::invalid_property(name, text.as_str(), why))
}

fn row_json(row: &PriceRow) -> Value {
    let plan = (!row.plan.is_empty()).then_some(row.plan.as_str());
    json!({
        "account": row.account, "billingPlan": plan, "effectiveFrom": rfc3339(row.effective_from),
        "currency": row.currency, "computeHour": row.compute_hour,
        "lowPriorityComputeHour": row.low_priority_hour, "vmSizes": row.vm_sizes.0,
        "includedComputeHours": row.included_hours,
    })
}

/// Sets a plan's prices (`billingPlan` null or left out: pools billed to no plan) from now on.
pub async fn set(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    check_operator(&app, &headers).await?;
    let body: PricesBody = super::super::json::parse(&body)?;
    super::only_known(&body.rest, "prices (account, billingPlan, currency, computeHour, lowPriorityComputeHour, vmSizes, includedComputeHours)")?;
    let account = super::known_account(&app, body.account).await?;
    let currency = body
        .currency
        .ok_or_else(|| ApiError::missing_property("currency"))?;
    if !valid_currency(&currency) {
        let why = "must be a currency's three capital letters (ISO 4217), e.g. EUR";
        return Err(ApiError::invalid_property(
            "currency",
            currency.as_str(),
            why,
        ));
    }
    let compute = body
        .compute_hour
        .ok_or_else(|| ApiError::missing_property("computeHour"))?;
    let mut vm_sizes = BTreeMap::new();
    for (size, price) in body.vm_sizes.unwrap_or_default() {
        vm_sizes.insert(
            size.to_ascii_lowercase(),
            rate(&format!("vmSizes/{size}"), &price)?,
        );
    }
    let prices = Prices {
        from: chrono::Utc::now(),
        currency,
        compute_hour: rate("computeHour", &compute)?,
        low_priority_hour: body
            .low_priority_compute_hour
            .as_ref()
            .map(|v| rate("lowPriorityComputeHour", v))
            .transpose()?,
        vm_sizes,
        included_hours: body
            .included_compute_hours
            .as_ref()
            .map(|v| rate("includedComputeHours", v))
            .transpose()?,
    };
    let plan = body.billing_plan.unwrap_or_default();
    match store::prices::set(&app.db, &account, &plan, &prices).await {
        Ok(row) => Ok(Json(row_json(&row))),
        Err(store::prices::Refused::Currency(other)) => Err(ApiError::invalid_property(
            "currency",
            prices.currency.as_str(),
            format!("the installation's prices are in {other}: every price is in one currency"),
        )),
        Err(store::prices::Refused::Database(e)) => Err(e.into()),
    }
}

/// Every price set (of `?account=`, or of every account), oldest first.
pub async fn list(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    check_operator(&app, &headers).await?;
    let rows = store::prices::history(&app.db, query.get("account").map(String::as_str)).await?;
    Ok(Json(
        json!({"value": rows.iter().map(row_json).collect::<Vec<_>>()}),
    ))
}
