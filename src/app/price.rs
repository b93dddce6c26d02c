//! `batchpool account price`: what an account's compute hours cost (docs/metering.md, "Prices
//! and cost"), set and listed in the database directly.

use anyhow::Context;
use sqlx::PgPool;

use crate::config::AccountAction;
use crate::domain::pricing::{valid_currency, Prices, Rate};
use crate::store;

/// `batchpool account price`: with `--currency` and `--compute-hour`, sets prices; else lists
/// every price the account was given.
pub(super) async fn command(db: &PgPool, action: &AccountAction) -> anyhow::Result<()> {
    let AccountAction::Price {
        name,
        plan,
        currency,
        compute_hour,
        low_priority_compute_hour,
        vm_size,
        included_hours,
    } = action
    else {
        unreachable!("account_command calls this for `account price` only")
    };
    match (currency, compute_hour) {
        (Some(currency), Some(compute)) => {
            let rates = (
                compute.as_str(),
                low_priority_compute_hour.as_deref(),
                vm_size.as_slice(),
                included_hours.as_deref(),
            );
            let plan = plan.as_deref().unwrap_or_default();
            set_prices(db, (name, plan), currency, rates).await
        }
        _ => list_prices(db, name).await,
    }
}

/// Sets the prices of `account`'s `plan` from now on: a compute hour, a low-priority one, and
/// vmSizes' own (`SIZE=PRICE`).
async fn set_prices(
    db: &PgPool,
    (account, plan): (&str, &str),
    currency: &str,
    (compute, low, sizes, included): (&str, Option<&str>, &[String], Option<&str>),
) -> anyhow::Result<()> {
    let rate =
        |what: &str, text: &str| Rate::parse(text).map_err(|e| anyhow::anyhow!("{what}: {e}"));
    anyhow::ensure!(
        store::accounts::get(db, account).await?.is_some(),
        "no account {account:?}"
    );
    anyhow::ensure!(
        valid_currency(currency),
        "--currency {currency:?}: a currency's three capital letters (ISO 4217), e.g. EUR"
    );
    let mut vm_sizes = std::collections::BTreeMap::new();
    for size in sizes {
        let (name, price) = size
            .split_once('=')
            .with_context(|| format!("--vm-size {size:?}: SIZE=PRICE"))?;
        vm_sizes.insert(name.to_ascii_lowercase(), rate("--vm-size", price)?);
    }
    let prices = Prices {
        from: chrono::Utc::now(),
        currency: currency.to_string(),
        compute_hour: rate("--compute-hour", compute)?,
        low_priority_hour: low
            .map(|l| rate("--low-priority-compute-hour", l))
            .transpose()?,
        vm_sizes,
        included_hours: included.map(|h| rate("--included-hours", h)).transpose()?,
    };
    match store::prices::set(db, account, plan, &prices).await {
        Ok(row) => {
            print_price(&row);
            Ok(())
        }
        Err(store::prices::Refused::Currency(other)) => {
            anyhow::bail!(
                "the installation's prices are in {other}: every price is in one currency"
            )
        }
        Err(store::prices::Refused::Database(e)) => Err(e.into()),
    }
}

async fn list_prices(db: &PgPool, account: &str) -> anyhow::Result<()> {
    for row in store::prices::history(db, Some(account)).await? {
        print_price(&row);
    }
    Ok(())
}

fn print_price(row: &store::prices::PriceRow) {
    let plan = if row.plan.is_empty() {
        "(no plan)"
    } else {
        &row.plan
    };
    let mut line = format!(
        "{} {plan}: from {} a compute hour costs {} {}",
        row.account,
        crate::domain::rfc3339(row.effective_from),
        row.compute_hour,
        row.currency
    );
    if let Some(low) = &row.low_priority_hour {
        line += &format!(", low-priority {low}");
    }
    for (size, price) in &row.vm_sizes.0 {
        line += &format!(", {size} {price}");
    }
    if let Some(hours) = &row.included_hours {
        line += &format!("; {hours} compute hours a month included");
    }
    println!("{line}");
}
