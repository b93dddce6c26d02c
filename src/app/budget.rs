//! `batchpool account budget`: an account's monthly budgets (docs/metering.md, "Budgets"), set,
//! listed and removed in the database directly, as `account price` sets prices. The leader
//! reads them within seconds.

use sqlx::PgPool;

use crate::config::AccountAction;

use crate::domain::budget::{AtLimit, Used};
use crate::domain::pricing::Rate;
use crate::{ops, store};

/// `batchpool account budget`: sets the budget (with `--monthly`), removes it, or lists them.
pub(super) async fn command(db: &PgPool, action: &AccountAction) -> anyhow::Result<()> {
    let AccountAction::Budget {
        name,
        plan,
        monthly,
        at_limit,
        remove: remove_it,
    } = action
    else {
        unreachable!("account_command calls this for `account budget` only")
    };
    let plan = plan.as_deref();
    match (monthly, remove_it) {
        (_, true) => remove(db, name, plan).await,
        (Some(monthly), false) => set(db, (name, plan), monthly, at_limit).await,
        (None, false) => list(db, name).await,
    }
}

/// Sets the budget of `account`'s `plan` (None: of all its pools).
async fn set(
    db: &PgPool,
    (account, plan): (&str, Option<&str>),
    monthly: &str,
    at_limit: &str,
) -> anyhow::Result<()> {
    let monthly = Rate::parse(monthly).map_err(|e| anyhow::anyhow!("--monthly: {e}"))?;
    let at_limit = match at_limit {
        "stop-growth" => AtLimit::StopGrowth,
        "drain" => AtLimit::Drain,
        _ => AtLimit::Nothing,
    };
    anyhow::ensure!(
        store::accounts::get(db, account).await?.is_some(),
        "no account {account:?}"
    );
    anyhow::ensure!(
        !store::prices::by_plan(db, account).await?.is_empty(),
        "account {account:?} has no prices: a budget is an amount of their currency, so set them first (batchpool account price)"
    );
    let row = store::budgets::set(db, account, plan, (&monthly.text(), at_limit.as_str())).await?;
    print(db, &row).await
}

async fn remove(db: &PgPool, account: &str, plan: Option<&str>) -> anyhow::Result<()> {
    anyhow::ensure!(
        store::budgets::remove(db, account, plan).await?,
        "account {account:?} has no such budget"
    );
    println!("removed");
    Ok(())
}

async fn list(db: &PgPool, account: &str) -> anyhow::Result<()> {
    for row in store::budgets::list(db, Some(account)).await? {
        print(db, &row).await?;
    }
    Ok(())
}

/// One line: whose budget, the amount, what it does at its limit, and the month so far.
async fn print(db: &PgPool, row: &store::budgets::BudgetRow) -> anyhow::Result<()> {
    let standing = ops::budgets::standing(db, row, chrono::Utc::now()).await?;
    let used = match standing.used {
        Used::Under => "",
        Used::Warned => " (over 80%)",
        Used::Exceeded => " (used up)",
    };
    let whose = row.billing_plan.as_deref().unwrap_or("(all pools)");
    println!(
        "{} {whose}: {} {} a month, at the limit {}; {:.2} so far this month{used}",
        row.account,
        row.monthly_amount,
        standing.currency,
        row.at_limit,
        standing.cost.amount(),
    );
    Ok(())
}
