//! Monthly budgets (`budgets`, migration 59): of a billing plan's pools, or (billing_plan NULL)
//! of all an account's, with this month's cost so far as the leader last reckoned it.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;
use sqlx::{PgExecutor, PgPool};

pub struct BudgetRow {
    pub account: String,
    pub billing_plan: Option<String>,
    pub monthly_amount: String,
    pub at_limit: String,
    /// The month (its first day) in which 80% was last crossed, and 100%.
    pub warned_month: Option<NaiveDate>,
    pub exceeded_month: Option<NaiveDate>,
    pub used_amount: Option<f64>,
    pub evaluated_at: Option<DateTime<Utc>>,
}

/// Sets the budget of `account`'s `plan` (None: the whole account). A budget set anew warns
/// and acts again when its new amount is crossed.
pub async fn set(
    db: &PgPool,
    account: &str,
    plan: Option<&str>,
    (monthly, at_limit): (&str, &str),
) -> sqlx::Result<BudgetRow> {
    sqlx::query_as!(
        BudgetRow,
        "INSERT INTO budgets (account, billing_plan, monthly_amount, at_limit) VALUES ($1, $2, $3, $4)
         ON CONFLICT (account, billing_plan) DO UPDATE SET monthly_amount = $3, at_limit = $4,
             warned_month = NULL, exceeded_month = NULL
         RETURNING account, billing_plan, monthly_amount, at_limit, warned_month, exceeded_month, used_amount, evaluated_at",
        account,
        plan,
        monthly,
        at_limit,
    )
    .fetch_one(db)
    .await
}

/// Removes a budget; whether there was one.
pub async fn remove(db: &PgPool, account: &str, plan: Option<&str>) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "DELETE FROM budgets WHERE account = $1 AND billing_plan IS NOT DISTINCT FROM $2",
        account,
        plan,
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The budgets of `account` (None: of every account), the account's own before its plans'.
pub async fn list(db: impl PgExecutor<'_>, account: Option<&str>) -> sqlx::Result<Vec<BudgetRow>> {
    sqlx::query_as!(
        BudgetRow,
        "SELECT account, billing_plan, monthly_amount, at_limit, warned_month, exceeded_month, used_amount, evaluated_at
         FROM budgets WHERE $1::text IS NULL OR account = $1
         ORDER BY account, billing_plan NULLS FIRST",
        account,
    )
    .fetch_all(db)
    .await
}

/// The budgets that hold back a pool of `account` billed to `plan` once used up.
pub async fn holding(
    db: &PgPool,
    account: &str,
    plan: Option<&str>,
) -> sqlx::Result<Vec<BudgetRow>> {
    sqlx::query_as!(
        BudgetRow,
        "SELECT account, billing_plan, monthly_amount, at_limit, warned_month, exceeded_month, used_amount, evaluated_at
         FROM budgets WHERE account = $1 AND at_limit <> 'none'
           AND (billing_plan IS NULL OR billing_plan IS NOT DISTINCT FROM $2)
         ORDER BY billing_plan NULLS FIRST",
        account,
        plan,
    )
    .fetch_all(db)
    .await
}

/// Records the month's cost so far; with `warned`/`exceeded`, notes that `month` crossed 80% or
/// 100%. Returns whether each was newly noted this month (by this call and no other).
pub async fn record(
    db: &PgPool,
    (account, plan): (&str, Option<&str>),
    (used, at): (f64, DateTime<Utc>),
    month: NaiveDate,
    (warned, exceeded): (bool, bool),
) -> sqlx::Result<(bool, bool)> {
    let row = sqlx::query!(
        r#"WITH old AS (
               SELECT warned_month, exceeded_month FROM budgets
               WHERE account = $1 AND billing_plan IS NOT DISTINCT FROM $2 FOR UPDATE)
           UPDATE budgets b SET used_amount = $3, evaluated_at = $4,
               warned_month = CASE WHEN $6 THEN $5 ELSE b.warned_month END,
               exceeded_month = CASE WHEN $7 THEN $5 ELSE b.exceeded_month END
           FROM old WHERE b.account = $1 AND b.billing_plan IS NOT DISTINCT FROM $2
           RETURNING $6 AND old.warned_month IS DISTINCT FROM $5 AS "warned!",
                     $7 AND old.exceeded_month IS DISTINCT FROM $5 AS "exceeded!""#,
        account,
        plan,
        used,
        at,
        month,
        warned,
        exceeded,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map_or((false, false), |r| (r.warned, r.exceeded)))
}

/// Resizes `account`'s active pools billed to `plan` (None: all of them) to zero nodes as
/// their running tasks end (taskcompletion), autoscale off, with `error` as their resize
/// error; returns their ids.
pub async fn drain_pools(
    db: &PgPool,
    account: &str,
    plan: Option<&str>,
    error: &Value,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "UPDATE pools SET target_dedicated_nodes = 0, target_low_priority_nodes = 0,
             node_deallocation_option = 'taskcompletion', enable_auto_scale = false, auto_scale_next = NULL,
             allocation_state = 'resizing', allocation_state_transition_time = now(),
             resize_errors = jsonb_build_array($3::jsonb), last_modified = now()
         WHERE account = $1 AND state = 'active' AND ($2::text IS NULL OR billing_plan = $2)
           AND (target_dedicated_nodes > 0 OR target_low_priority_nodes > 0 OR enable_auto_scale)
         RETURNING id",
        account,
        plan,
        error,
    )
    .fetch_all(db)
    .await
}
