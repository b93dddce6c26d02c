//! Budgets at work (docs/metering.md, "Budgets"): a month's cost so far of what a budget
//! covers; whether a pool may grow; and the leader's look every few seconds, which notes and
//! logs 80% and 100% once a month each, and drains the pools of a `drain` budget used up.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::domain::budget::{self, AtLimit, Used};
use crate::domain::pricing::{self, Cost, Rate};
use crate::store::{self, budgets::BudgetRow};

/// How often the leader reckons every budget.
pub const PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// The cost of `account`'s pools billed to `plan` (None: all of them) from the start of `now`'s
/// month until `now`, at the prices in force as each hour passed; and the installation's
/// currency, as those prices have it ('' before the account has any).
pub async fn month_cost(
    db: &PgPool,
    account: &str,
    plan: Option<&str>,
    now: DateTime<Utc>,
) -> sqlx::Result<(Cost, String)> {
    let (_, start) = budget::month_of(now);
    let prices = store::prices::effective(db, account, (start, now)).await?;
    let currency = prices
        .values()
        .flatten()
        .next()
        .map_or_else(String::new, |p| p.currency.clone());
    let rows = store::usage::in_range(db, account, None, start, now).await?;
    let mut total = Cost::default();
    for r in rows
        .iter()
        .filter(|r| budget::covers(plan, r.billing_plan.as_deref()))
    {
        let history = prices.get(r.billing_plan.as_deref().unwrap_or_default());
        let end = r.ended_at.unwrap_or(now).min(now);
        let (cost, _) = pricing::cost(
            history.map_or(&[][..], Vec::as_slice),
            (&r.vm_size, r.is_dedicated),
            r.started_at.max(start),
            end,
        );
        total = total + cost;
    }
    Ok((total, currency))
}

/// How a budget stands this month: its cost so far, how much of the budget that is, and the
/// currency.
pub struct Standing {
    /// The month's first day.
    pub month: chrono::NaiveDate,
    pub cost: Cost,
    pub used: Used,
    pub currency: String,
}

/// How `b` stands as of `now`.
pub async fn standing(db: &PgPool, b: &BudgetRow, now: DateTime<Utc>) -> sqlx::Result<Standing> {
    let (cost, currency) = month_cost(db, &b.account, b.billing_plan.as_deref(), now).await?;
    Ok(Standing {
        month: budget::month_of(now).0,
        cost,
        used: budget::used(cost, amount(b)),
        currency,
    })
}

impl Standing {
    /// `under`, `warned` (80% or more) or `exceeded`, as the API says it.
    pub fn state(&self) -> &'static str {
        match self.used {
            Used::Under => "under",
            Used::Warned => "warned",
            Used::Exceeded => "exceeded",
        }
    }

    /// The budget as the API shows it.
    pub fn json(&self, b: &BudgetRow) -> Value {
        json!({
            "account": b.account, "billingPlan": b.billing_plan, "monthlyAmount": b.monthly_amount,
            "currency": self.currency, "atLimit": b.at_limit,
            "month": self.month.format("%Y-%m").to_string(), "monthCost": self.cost.amount(),
            "state": self.state(),
        })
    }
}

/// What a budget is called in messages.
fn named(b: &BudgetRow) -> String {
    match &b.billing_plan {
        Some(plan) => format!("billing plan {plan:?}"),
        None => format!("account {:?}", b.account),
    }
}

/// The resize error of a pool held back by `b`.
fn exceeded_error(b: &BudgetRow, currency: &str) -> Value {
    json!({
        "code": "BudgetExceeded",
        "message": format!(
            "The monthly budget of {} ({} {currency}) is used up: its pools do not grow until the month ends or the budget is raised.",
            named(b), b.monthly_amount),
        "values": [{"name": "Budget", "value": named(b)}, {"name": "AtLimit", "value": b.at_limit}],
    })
}

/// Whether a pool of `account` billed to `plan` may not grow now: the resize error of the
/// first budget used up that holds it back.
pub async fn growth_refused(
    db: &PgPool,
    account: &str,
    plan: Option<&str>,
) -> sqlx::Result<Option<Value>> {
    let budgets = store::budgets::holding(db, account, plan).await?;
    if budgets.is_empty() {
        return Ok(None);
    }
    let now = Utc::now();
    for b in budgets {
        let (cost, currency) = month_cost(db, account, b.billing_plan.as_deref(), now).await?;
        if budget::used(cost, amount(&b)) == Used::Exceeded {
            return Ok(Some(exceeded_error(&b, &currency)));
        }
    }
    Ok(None)
}

fn amount(b: &BudgetRow) -> Rate {
    // Only the operator's routes write the amount, after reading it.
    Rate::parse(&b.monthly_amount).unwrap_or_default()
}

/// Reckons every budget's month so far: records it, logs 80% and 100% the first time each is
/// crossed in the month, and drains the pools of a `drain` budget as it is used up. Returns
/// whether any pool was drained (the allocator has work).
pub async fn evaluate(db: &PgPool, now: DateTime<Utc>) -> sqlx::Result<bool> {
    let (month, _) = budget::month_of(now);
    let mut drained = false;
    for b in store::budgets::list(db, None).await? {
        let plan = b.billing_plan.as_deref();
        let (cost, currency) = month_cost(db, &b.account, plan, now).await?;
        let used = budget::used(cost, amount(&b));
        let (warned, exceeded) = store::budgets::record(
            db,
            (&b.account, plan),
            (cost.amount(), now),
            month,
            (used >= Used::Warned, used == Used::Exceeded),
        )
        .await?;
        let what = named(&b);
        if warned && !exceeded {
            tracing::warn!(budget = %what, used = cost.amount(), monthly = %b.monthly_amount, %currency,
                "a monthly budget is 80% used");
        }
        if exceeded {
            tracing::warn!(budget = %what, used = cost.amount(), monthly = %b.monthly_amount, %currency,
                at_limit = %b.at_limit, "a monthly budget is used up");
        }
        if exceeded && AtLimit::parse(&b.at_limit) == Some(AtLimit::Drain) {
            let error = exceeded_error(&b, &currency);
            let pools = store::budgets::drain_pools(db, &b.account, plan, &error).await?;
            if !pools.is_empty() {
                tracing::warn!(budget = %what, pools = ?pools, "draining the pools of a used-up budget as their running tasks end");
                drained = true;
            }
        }
    }
    Ok(drained)
}
