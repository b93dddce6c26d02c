//! Money (docs/metering.md, "Prices and cost"): a billing plan's prices per compute hour, by
//! vmSize and apart for low-priority nodes, each in force from when it was set until the next;
//! and costs, summed exactly (microseconds times billionths of the currency per hour, in an
//! integer) and turned into an amount only when shown.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

/// An amount of the currency per compute hour, in billionths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(pub i128);

/// The most decimals a price may have.
const DECIMALS: usize = 9;
/// The highest price of a compute hour: a billion of the currency.
const MOST: i128 = 1_000_000_000 * 1_000_000_000;

impl Rate {
    /// A price as written (`0.12`, `3`, `0.000000001`): not negative, at most 9 decimals.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || {
            format!("{text:?} is not an amount: digits, a point and at most {DECIMALS} decimals, not negative")
        };
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > DECIMALS {
            return Err(bad());
        }
        if text.ends_with('.') || whole.len() > 10 {
            return Err(bad());
        }
        let whole: i128 = whole.parse().map_err(|_| bad())?;
        let fraction: i128 = format!("{fraction:0<DECIMALS$}")
            .parse()
            .map_err(|_| bad())?;
        let rate = whole * 1_000_000_000 + fraction;
        if rate > MOST {
            return Err(format!(
                "{text} is over the highest price, 1000000000 an hour"
            ));
        }
        Ok(Rate(rate))
    }

    /// The price as it was written, without trailing zeros.
    pub fn text(self) -> String {
        let (whole, fraction) = (self.0 / 1_000_000_000, self.0 % 1_000_000_000);
        let fraction = format!("{fraction:09}");
        let fraction = fraction.trim_end_matches('0');
        match fraction {
            "" => whole.to_string(),
            f => format!("{whole}.{f}"),
        }
    }
}

/// Whether `code` is a currency's code as ISO 4217 writes them: three capital letters.
pub fn valid_currency(code: &str) -> bool {
    code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase())
}

/// A cost, exactly: microseconds of compute hours times their [`Rate`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost(pub i128);

impl Cost {
    pub fn of(micros: i64, rate: Rate) -> Cost {
        Cost(i128::from(micros.max(0)) * rate.0)
    }

    /// The amount in the currency.
    pub fn amount(self) -> f64 {
        self.0 as f64 / 3.6e18
    }
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, other: Cost) -> Cost {
        Cost(self.0 + other.0)
    }
}

impl std::iter::Sum for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::default(), |a, b| a + b)
    }
}

/// A plan's prices from `from` on (until the next prices of the plan).
#[derive(Clone, Debug, PartialEq)]
pub struct Prices {
    pub from: DateTime<Utc>,
    pub currency: String,
    /// A dedicated node's compute hour, unless its vmSize has a price of its own.
    pub compute_hour: Rate,
    /// A low-priority node's compute hour, whatever its size; None: as a dedicated one's.
    pub low_priority_hour: Option<Rate>,
    /// By vmSize, lowercase.
    pub vm_sizes: BTreeMap<String, Rate>,
}

impl Prices {
    /// The price of a compute hour of a node of `vm_size`.
    pub fn rate(&self, vm_size: &str, dedicated: bool) -> Rate {
        match (dedicated, self.low_priority_hour) {
            (false, Some(rate)) => rate,
            _ => self
                .vm_sizes
                .get(&vm_size.to_ascii_lowercase())
                .copied()
                .unwrap_or(self.compute_hour),
        }
    }
}

/// The cost of a node's `[start, end)` under `history` (a plan's prices, oldest first): each
/// part at the prices in force then. The microseconds before the plan's first prices have
/// none, and are returned apart.
pub fn cost(
    history: &[Prices],
    (vm_size, dedicated): (&str, bool),
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> (Cost, i64) {
    let micros =
        |a: DateTime<Utc>, b: DateTime<Utc>| (b - a).num_microseconds().unwrap_or(0).max(0);
    if end <= start {
        return (Cost::default(), 0);
    }
    let unpriced = match history.first() {
        Some(first) => micros(start, first.from.min(end)),
        None => micros(start, end),
    };
    let mut total = Cost::default();
    for (i, prices) in history.iter().enumerate() {
        let until = history.get(i + 1).map_or(end, |next| next.from.min(end));
        let from = prices.from.max(start);
        if from < until {
            total = total + Cost::of(micros(from, until), prices.rate(vm_size, dedicated));
        }
    }
    (total, unpriced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn t(hours: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::hours(hours)
    }

    fn prices(from: i64, compute: &str, low: Option<&str>) -> Prices {
        Prices {
            from: t(from),
            currency: "EUR".into(),
            compute_hour: Rate::parse(compute).unwrap(),
            low_priority_hour: low.map(|l| Rate::parse(l).unwrap()),
            vm_sizes: [("standard_d4s_v3".to_string(), Rate::parse("0.48").unwrap())].into(),
        }
    }

    #[test]
    fn amounts_are_read_and_written_exactly() {
        assert_eq!(Rate::parse("0.12"), Ok(Rate(120_000_000)));
        assert_eq!(Rate::parse("3"), Ok(Rate(3_000_000_000)));
        assert_eq!(Rate::parse("0.000000001"), Ok(Rate(1)));
        assert_eq!(Rate::parse("1.500").unwrap().text(), "1.5");
        for bad in [
            "",
            "-1",
            "1.",
            ".5",
            "1.0000000001",
            "1e3",
            "0x10",
            "99999999999",
        ] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_part_costs_what_its_prices_said_then() {
        let history = [prices(2, "0.10", None), prices(4, "0.20", Some("0.02"))];
        // Hours 1-6: 1 unpriced, 2 at 0.10, 2 at 0.20.
        let (total, unpriced) = cost(&history, ("standard_a1", true), t(1), t(6));
        assert_eq!(unpriced, 3_600_000_000);
        assert_eq!(
            total,
            Cost::of(2 * 3_600_000_000, Rate(100_000_000))
                + Cost::of(2 * 3_600_000_000, Rate(200_000_000))
        );
        assert!((total.amount() - 0.6).abs() < 1e-12);
        // A size of its own, and a low-priority node once its price is set.
        let (big, _) = cost(&history, ("Standard_D4s_v3", true), t(2), t(3));
        assert_eq!(big.amount(), 0.48);
        let (low, _) = cost(&history, ("standard_d4s_v3", false), t(3), t(5));
        assert_eq!(
            low.amount(),
            0.5,
            "0.48 at its size, then 0.02 low-priority"
        );
    }
}
