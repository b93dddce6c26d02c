//! `/billing/budgets`: the account's monthly budgets, as the operator set them (docs/metering.md,
//! "Budgets"), each with the month's cost so far and how much of it is used: what an ops team
//! watches before its pools stop growing.

use axum::Json;
use chrono::Utc;
use serde_json::{json, Value};

use crate::api::error::ApiResult;
use crate::api::Ctx;
use crate::{ops, store};

pub async fn budgets(app: Ctx) -> ApiResult<Json<Value>> {
    let rows = store::budgets::list(&app.db, Some(&app.account)).await?;
    let now = Utc::now();
    let mut value = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut budget = ops::budgets::standing(&app.db, row, now).await?.json(row);
        // The account is the caller's own.
        if let Some(fields) = budget.as_object_mut() {
            fields.remove("account");
        }
        value.push(budget);
    }
    Ok(Json(json!({ "value": value })))
}
