//! Included compute hours (docs/metering.md, "Prices and cost"): as Azure ML's plans had, a
//! plan's prices may include a quantity of compute hours each calendar month (UTC). The plan's
//! first that many compute hours of the month, all its nodes together in the order they ran,
//! cost nothing; the hours after them cost the prices set, which are then the overage prices.
//!
//! A month's allowance is that of the prices in force as it begins (or, if the plan had none
//! then, of its first prices in the month, counted from when they were set): a change during the
//! month applies from the next. The allowance is spent at one instant, to the microsecond, so
//! this is said as prices: free prices from the month's start until that instant, inserted into
//! the plan's history, and everything that prices hours ([`super::pricing::cost`], a job's share
//! of its nodes) reads them as it reads any other.

use chrono::{DateTime, Duration, Months, Utc};

use super::budget::month_of;
use super::pricing::{Prices, Rate};

/// Microseconds in an hour.
const HOUR_MICROS: i128 = 3_600_000_000;

/// `history` (a plan's prices, oldest first) with the included hours of each month from
/// `since`'s to `until`'s free, given the plan's nodes' lives in those months (`used`: start,
/// and end or None while they run). A month's allowance depends on that month alone, so the
/// months before `since`'s need not be read.
pub fn with_included(
    history: &[Prices],
    used: &[(DateTime<Utc>, Option<DateTime<Utc>>)],
    (since, until): (DateTime<Utc>, DateTime<Utc>),
) -> Vec<Prices> {
    let Some(first) = history.first() else {
        return Vec::new();
    };
    if history.iter().all(|p| p.included_hours.is_none()) {
        return history.to_vec();
    }
    let mut free = Vec::new();
    let (_, mut month) = month_of(first.from.max(since));
    while month < until {
        let next = month + Months::new(1);
        let allowance = history
            .iter()
            .rev()
            .find(|p| p.from <= month)
            .map(|p| (month, p))
            .or_else(|| history.iter().find(|p| p.from < next).map(|p| (p.from, p)));
        if let Some((start, p)) = allowance.filter(|(start, _)| *start < next) {
            let micros = p
                .included_hours
                .map_or(0, |h| h.0 * HOUR_MICROS / 1_000_000_000);
            if micros > 0 {
                let spent = spent_at(used, (start, next.min(until)), micros).unwrap_or(next);
                free.push((start, spent));
            }
        }
        month = next;
    }
    priced_around(history, &free)
}

/// When the nodes' lives within `[start, end)` add up to `micros`: None if they do not.
fn spent_at(
    used: &[(DateTime<Utc>, Option<DateTime<Utc>>)],
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    micros: i128,
) -> Option<DateTime<Utc>> {
    // +1 as a node starts, -1 as it ends, within the month.
    let mut events: Vec<(DateTime<Utc>, i128)> = Vec::new();
    for &(from, to) in used {
        let (from, to) = (from.max(start), to.unwrap_or(end).min(end));
        if from < to {
            events.push((from, 1));
            events.push((to, -1));
        }
    }
    events.sort();
    let (mut spent, mut running, mut at) = (0i128, 0i128, start);
    for (time, change) in events {
        let span = i128::from((time - at).num_microseconds().unwrap_or(i64::MAX));
        if running > 0 && spent + span * running >= micros {
            let rest = (micros - spent + running - 1) / running;
            return Some(at + Duration::microseconds(rest as i64));
        }
        spent += span * running;
        running += change;
        at = time;
    }
    None
}

/// The prices of `history`, free within each of the `free` intervals.
fn priced_around(history: &[Prices], free: &[(DateTime<Utc>, DateTime<Utc>)]) -> Vec<Prices> {
    let mut breaks: Vec<DateTime<Utc>> = history.iter().map(|p| p.from).collect();
    breaks.extend(free.iter().flat_map(|&(a, b)| [a, b]));
    breaks.sort();
    breaks.dedup();
    breaks
        .into_iter()
        .filter_map(|at| {
            let base = history.iter().rev().find(|p| p.from <= at)?;
            let mut prices = Prices {
                from: at,
                ..base.clone()
            };
            if free.iter().any(|&(a, b)| a <= at && at < b) {
                prices.compute_hour = Rate(0);
                prices.low_priority_hour = Some(Rate(0));
                prices.vm_sizes.clear();
            }
            Some(prices)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::pricing::cost;
    use chrono::TimeZone;

    fn t(day: u32, hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, day, hour, 0, 0).unwrap()
    }

    fn prices(from: DateTime<Utc>, compute: &str, included: Option<&str>) -> Prices {
        Prices {
            from,
            currency: "EUR".into(),
            compute_hour: Rate::parse(compute).unwrap(),
            low_priority_hour: None,
            vm_sizes: Default::default(),
            included_hours: included.map(|h| Rate::parse(h).unwrap()),
        }
    }

    fn cost_of(history: &[Prices], start: DateTime<Utc>, end: DateTime<Utc>) -> f64 {
        cost(history, ("standard_a1", true), start, end).0.amount()
    }

    #[test]
    fn the_first_included_hours_of_the_month_cost_nothing() {
        // 10 hours included, then 0.50 an hour. Two nodes from 02:00: 5 hours each by 07:00.
        let history = [prices(t(1, 0), "0.5", Some("10"))];
        let used = [(t(2, 2), None), (t(2, 2), Some(t(2, 12)))];
        let priced = with_included(&history, &used, (DateTime::<Utc>::MIN_UTC, t(3, 0)));
        assert_eq!(cost_of(&priced, t(2, 2), t(2, 7)), 0.0);
        // From 07:00 each hour costs: 5 hours of the node that ends at 12:00 is 2.50.
        assert_eq!(cost_of(&priced, t(2, 2), t(2, 12)), 2.5);
        assert_eq!(cost_of(&priced, t(2, 7), t(2, 8)), 0.5);
    }

    #[test]
    fn a_new_month_includes_its_hours_anew_and_unspent_hours_do_not_carry_over() {
        let history = [prices(t(1, 0), "1", Some("2"))];
        let december = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        // One node from the 30th at 23:00 into December: 1 hour in November (free), and in
        // December 2 free hours again, then paid.
        let used = [(t(30, 23), Some(december + Duration::hours(5)))];
        let priced = with_included(
            &history,
            &used,
            (DateTime::<Utc>::MIN_UTC, december + Duration::days(1)),
        );
        assert_eq!(cost_of(&priced, t(30, 23), december), 0.0);
        assert_eq!(
            cost_of(&priced, december, december + Duration::hours(5)),
            3.0
        );
    }

    #[test]
    fn a_change_of_allowance_applies_from_the_next_month() {
        let mid = t(15, 0);
        let history = [prices(t(1, 0), "1", None), prices(mid, "1", Some("100"))];
        let used = [(t(14, 0), Some(t(16, 0)))];
        let priced = with_included(&history, &used, (DateTime::<Utc>::MIN_UTC, t(20, 0)));
        assert_eq!(cost_of(&priced, t(14, 0), t(16, 0)), 48.0);
    }

    #[test]
    fn prices_first_set_during_a_month_count_their_hours_from_then() {
        let history = [prices(t(10, 0), "1", Some("1"))];
        let used = [(t(9, 0), Some(t(10, 3)))];
        let priced = with_included(&history, &used, (DateTime::<Utc>::MIN_UTC, t(20, 0)));
        // Before the 10th no price; from then 1 free hour, 2 paid.
        assert_eq!(cost_of(&priced, t(9, 0), t(10, 3)), 2.0);
    }

    #[test]
    fn the_allowance_is_spent_to_the_microsecond_among_concurrent_nodes() {
        // 1 hour included: three nodes from 00:00 spend it at 00:20.
        let history = [prices(t(1, 0), "3.6", Some("1"))];
        let used = [(t(1, 0), None), (t(1, 0), None), (t(1, 0), None)];
        let priced = with_included(&history, &used, (DateTime::<Utc>::MIN_UTC, t(2, 0)));
        let twenty = t(1, 0) + Duration::minutes(20);
        assert_eq!(cost_of(&priced, t(1, 0), twenty), 0.0);
        assert_eq!(
            cost_of(&priced, twenty, twenty + Duration::seconds(1)),
            0.001
        );
    }
}
