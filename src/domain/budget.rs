//! Monthly budgets (docs/metering.md, "Budgets"): an amount a billing plan's pools, or all of an
//! account's, may cost in a calendar month (UTC), and what happens once it is used up. Nothing
//! already running is stopped by a budget: at most, pools stop growing, or shrink to zero as
//! their running tasks end.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};

use super::pricing::{Cost, Rate};

/// What a budget does once the month's cost reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtLimit {
    /// A metric and a log line, as at 80%; nothing more.
    Nothing,
    /// Pools billed to it do not grow: a resize or autoscale above the current size ends with a
    /// `BudgetExceeded` resize error.
    StopGrowth,
    /// As StopGrowth, and its pools resize to zero (autoscale off) as their running tasks end.
    Drain,
}

impl AtLimit {
    pub const NAMES: &'static str = "none, stopGrowth or drain";

    pub fn parse(text: &str) -> Option<AtLimit> {
        match text {
            "none" => Some(AtLimit::Nothing),
            "stopGrowth" => Some(AtLimit::StopGrowth),
            "drain" => Some(AtLimit::Drain),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AtLimit::Nothing => "none",
            AtLimit::StopGrowth => "stopGrowth",
            AtLimit::Drain => "drain",
        }
    }
}

/// How much of a budget a month's cost has used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Used {
    Under,
    /// 80% or more.
    Warned,
    /// All of it.
    Exceeded,
}

/// The share of a budget at which it warns, in percent.
pub const WARN_PERCENT: i128 = 80;

/// How much of `monthly` (an amount, exact as prices are) `cost` uses. A budget of 0 is used up
/// at once.
pub fn used(cost: Cost, monthly: Rate) -> Used {
    // A Cost is microseconds times billionths per hour: an amount of `m` billionths is m × 3.6e9.
    let budget = monthly.0 * 3_600_000_000;
    if cost.0 >= budget {
        Used::Exceeded
    } else if cost.0 * 100 >= budget * WARN_PERCENT {
        Used::Warned
    } else {
        Used::Under
    }
}

/// The first day of `now`'s month, and when it began.
pub fn month_of(now: DateTime<Utc>) -> (NaiveDate, DateTime<Utc>) {
    let day = NaiveDate::from_ymd_opt(now.year(), now.month(), 1).expect("the 1st is a day");
    let start = Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).expect("midnight"));
    (day, start)
}

/// Whether a budget of `budget_plan` (None: the whole account) counts a pool billed to
/// `pool_plan`.
pub fn covers(budget_plan: Option<&str>, pool_plan: Option<&str>) -> bool {
    budget_plan.is_none() || budget_plan == pool_plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_warns_at_80_percent_and_is_used_up_at_100() {
        let monthly = Rate::parse("10").unwrap();
        let hours = |h: i64| Cost::of(h * 3_600_000_000, Rate::parse("1").unwrap());
        assert_eq!(used(hours(7), monthly), Used::Under);
        assert_eq!(used(hours(8), monthly), Used::Warned);
        assert_eq!(used(Cost(hours(10).0 - 1), monthly), Used::Warned);
        assert_eq!(used(hours(10), monthly), Used::Exceeded);
        assert_eq!(used(Cost::default(), Rate(0)), Used::Exceeded);
    }

    #[test]
    fn months_begin_on_the_first_at_midnight_utc() {
        let now = Utc.with_ymd_and_hms(2026, 11, 29, 19, 5, 3).unwrap();
        let (day, start) = month_of(now);
        assert_eq!(day.to_string(), "2026-11-01");
        assert_eq!(start, Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap());
    }

    #[test]
    fn an_account_budget_covers_every_plan() {
        assert!(covers(None, Some("gold")));
        assert!(covers(None, None));
        assert!(covers(Some("gold"), Some("gold")));
        assert!(!covers(Some("gold"), None));
        assert!(!covers(Some("gold"), Some("silver")));
    }

    #[test]
    fn at_limit_reads_what_it_writes() {
        for a in [AtLimit::Nothing, AtLimit::StopGrowth, AtLimit::Drain] {
            assert_eq!(AtLimit::parse(a.as_str()), Some(a));
        }
        assert_eq!(AtLimit::parse("stop"), None);
    }
}
