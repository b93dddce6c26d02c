//! Prices of compute hours (`plan_prices`, migration 57), per account and billing plan ('' for
//! pools billed to no plan), each in force from its `effective_from` until the next.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::PgPool;

use crate::domain::pricing::{Prices, Rate};

/// Prices as set, with the account and plan they are of.
pub struct PriceRow {
    pub account: String,
    pub plan: String,
    pub effective_from: DateTime<Utc>,
    pub currency: String,
    pub compute_hour: String,
    pub low_priority_hour: Option<String>,
    pub vm_sizes: Json<BTreeMap<String, String>>,
    pub included_hours: Option<String>,
}

impl PriceRow {
    /// The prices, as the domain reckons with them (amounts that do not read are taken as 0:
    /// only [`set`] writes them, after reading them).
    pub fn prices(&self) -> Prices {
        let rate = |text: &str| Rate::parse(text).unwrap_or_default();
        Prices {
            from: self.effective_from,
            currency: self.currency.clone(),
            compute_hour: rate(&self.compute_hour),
            low_priority_hour: self.low_priority_hour.as_deref().map(rate),
            vm_sizes: self
                .vm_sizes
                .0
                .iter()
                .map(|(k, v)| (k.clone(), rate(v)))
                .collect(),
            included_hours: self.included_hours.as_deref().map(rate),
        }
    }
}

/// Why prices were not set.
pub enum Refused {
    /// Another account or plan is priced in another currency: the installation has one.
    Currency(String),
    Database(sqlx::Error),
}

impl From<sqlx::Error> for Refused {
    fn from(e: sqlx::Error) -> Self {
        Refused::Database(e)
    }
}

/// Sets `account`'s prices of `plan` from now on; as set. Every price of the installation is in
/// one currency: prices in another are refused (and the lock makes two at once wait in turn).
pub async fn set(
    db: &PgPool,
    account: &str,
    plan: &str,
    prices: &Prices,
) -> Result<PriceRow, Refused> {
    let mut tx = db.begin().await?;
    sqlx::query!("LOCK TABLE plan_prices IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let other = sqlx::query_scalar!(
        "SELECT currency FROM plan_prices WHERE currency <> $1 LIMIT 1",
        prices.currency
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(other) = other {
        return Err(Refused::Currency(other));
    }
    let sizes: BTreeMap<String, String> = prices
        .vm_sizes
        .iter()
        .map(|(k, v)| (k.clone(), v.text()))
        .collect();
    let row = sqlx::query_as!(
        PriceRow,
        r#"INSERT INTO plan_prices (account, plan, effective_from, currency, compute_hour, low_priority_hour, vm_sizes, included_hours)
           VALUES ($1, $2, clock_timestamp(), $3, $4, $5, $6, $7)
           RETURNING account, plan, effective_from, currency, compute_hour, low_priority_hour, vm_sizes AS "vm_sizes: _", included_hours"#,
        account,
        plan,
        prices.currency,
        prices.compute_hour.text(),
        prices.low_priority_hour.map(Rate::text),
        Json(sizes) as _,
        prices.included_hours.map(Rate::text),
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row)
}

/// The account's prices (every plan's, or `account` None: every account's), by account, plan
/// and time.
pub async fn history(db: &PgPool, account: Option<&str>) -> sqlx::Result<Vec<PriceRow>> {
    sqlx::query_as!(
        PriceRow,
        r#"SELECT account, plan, effective_from, currency, compute_hour, low_priority_hour, vm_sizes AS "vm_sizes: _", included_hours
           FROM plan_prices WHERE $1::text IS NULL OR account = $1
           ORDER BY account, plan, effective_from"#,
        account,
    )
    .fetch_all(db)
    .await
}

/// The account's prices by plan ('' for no plan), oldest first.
pub async fn by_plan(db: &PgPool, account: &str) -> sqlx::Result<BTreeMap<String, Vec<Prices>>> {
    let mut plans: BTreeMap<String, Vec<Prices>> = BTreeMap::new();
    for row in history(db, Some(account)).await? {
        plans
            .entry(row.plan.clone())
            .or_default()
            .push(row.prices());
    }
    Ok(plans)
}

/// The account's prices by plan, as [`by_plan`] has them, with the included hours of each month
/// from `since`'s on free ([`crate::domain::allowance`]), as spent by the plan's nodes until
/// `now`: what costs from `since` on are reckoned with.
pub async fn effective(
    db: &PgPool,
    account: &str,
    (since, now): (DateTime<Utc>, DateTime<Utc>),
) -> sqlx::Result<BTreeMap<String, Vec<Prices>>> {
    let mut plans = by_plan(db, account).await?;
    let including = |h: &Vec<Prices>| h.iter().any(|p| p.included_hours.is_some());
    let Some(first) = plans
        .values()
        .filter(|h| including(h))
        .filter_map(|h| h.first())
        .map(|p| p.from)
        .min()
    else {
        return Ok(plans);
    };
    let (_, since) = crate::domain::budget::month_of(first.max(since));
    let rows = super::usage::in_range(db, account, None, since, now).await?;
    for (plan, history) in plans.iter_mut().filter(|(_, h)| including(h)) {
        let used: Vec<_> = rows
            .iter()
            .filter(|r| r.billing_plan.as_deref().unwrap_or_default() == plan)
            .map(|r| (r.started_at, r.ended_at))
            .collect();
        *history = crate::domain::allowance::with_included(history, &used, (since, now));
    }
    Ok(plans)
}
