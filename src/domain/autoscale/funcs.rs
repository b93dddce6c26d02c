//! The built-in functions and the names of the metrics' methods. Most functions take Azure's doubleVecList: any mix of doubles and doubleVecs,
//! flattened into one list, so `avg(v, 7)` averages v's elements and 7.

use chrono::{DateTime, NaiveDate, Utc};

use super::value::{Value, MAX_VEC};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Func {
    Avg,
    Len,
    Lg,
    Ln,
    Log,
    Max,
    Min,
    Norm,
    Percentile,
    Rand,
    Range,
    Std,
    Stop,
    Sum,
    Time,
    Val,
}

const MANY: usize = usize::MAX;

/// Each function's name and its least and most arguments.
const FUNCS: &[(&str, Func, usize, usize)] = &[
    ("avg", Func::Avg, 1, MANY),
    ("len", Func::Len, 1, MANY),
    ("lg", Func::Lg, 1, 1),
    ("ln", Func::Ln, 1, 1),
    ("log", Func::Log, 1, 1),
    ("max", Func::Max, 1, MANY),
    ("min", Func::Min, 1, MANY),
    ("norm", Func::Norm, 1, MANY),
    ("percentile", Func::Percentile, 2, 2),
    ("rand", Func::Rand, 0, 0),
    ("range", Func::Range, 1, MANY),
    ("std", Func::Std, 1, MANY),
    ("stop", Func::Stop, 0, 0),
    ("sum", Func::Sum, 1, MANY),
    ("time", Func::Time, 0, 1),
    ("val", Func::Val, 2, 2),
];

impl Func {
    pub fn lookup(name: &str) -> Option<Func> {
        FUNCS.iter().find(|f| f.0 == name).map(|f| f.1)
    }

    fn entry(self) -> &'static (&'static str, Func, usize, usize) {
        FUNCS.iter().find(|f| f.1 == self).unwrap_or(&FUNCS[0])
    }

    pub fn name(self) -> &'static str {
        self.entry().0
    }

    pub fn arity(self) -> (usize, usize) {
        (self.entry().2, self.entry().3)
    }
}

/// The methods of a metric, with their least and most arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Method {
    GetSample,
    GetSamplePercent,
    GetSamplePeriod,
    Count,
    HistoryBeginTime,
}

pub(super) const METHODS: &[(&str, Method, usize, usize)] = &[
    ("GetSample", Method::GetSample, 1, 3),
    ("GetSamplePercent", Method::GetSamplePercent, 1, 2),
    ("GetSamplePeriod", Method::GetSamplePeriod, 0, 0),
    ("Count", Method::Count, 0, 0),
    ("HistoryBeginTime", Method::HistoryBeginTime, 0, 0),
];

impl Method {
    pub fn name(self) -> &'static str {
        METHODS.iter().find(|m| m.1 == self).map_or("?", |m| m.0)
    }
}

/// Runs every function but `stop()`, which the evaluator handles since it ends the run.
pub(super) fn call(func: Func, args: Vec<Value>, now: DateTime<Utc>) -> Result<Value, String> {
    let name = func.name();
    let result = match func {
        Func::Lg => logarithm(name, args, f64::log2)?,
        Func::Ln => logarithm(name, args, f64::ln)?,
        Func::Log => logarithm(name, args, f64::log10)?,
        Func::Percentile => percentile(args)?,
        Func::Rand => Value::Double(random()),
        Func::Time => time(args, now)?,
        Func::Val => val(args)?,
        Func::Len => Value::Double(flatten(name, args)?.len() as f64),
        _ => Value::Double(statistic(func, &non_empty(name, args)?)),
    };
    result.finite(name)
}

/// The doubleVecList of a call as one list.
fn flatten(name: &str, args: Vec<Value>) -> Result<Vec<f64>, String> {
    let mut list = Vec::new();
    for arg in args {
        match arg {
            Value::Double(x) => list.push(x),
            Value::Vec(v) => list.extend(v),
            other => {
                return Err(format!(
                    "{name} takes doubles and doubleVecs, not a {}",
                    other.type_name()
                ))
            }
        }
        if list.len() > MAX_VEC {
            return Err(format!("{name} was given more than {MAX_VEC} values"));
        }
    }
    Ok(list)
}

fn non_empty(name: &str, args: Vec<Value>) -> Result<Vec<f64>, String> {
    let list = flatten(name, args)?;
    if list.is_empty() {
        return Err(format!("{name} of an empty list"));
    }
    Ok(list)
}

/// The functions of a non-empty list that give one double.
fn statistic(func: Func, list: &[f64]) -> f64 {
    let n = list.len() as f64;
    let sum: f64 = list.iter().sum();
    let max = list.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = list.iter().copied().fold(f64::INFINITY, f64::min);
    match func {
        Func::Avg => sum / n,
        Func::Max => max,
        Func::Min => min,
        Func::Range => max - min,
        Func::Norm => list.iter().map(|x| x * x).sum::<f64>().sqrt(),
        // The sample standard deviation (n - 1), as Azure's docs define it; one value has none.
        Func::Std if list.len() < 2 => 0.0,
        Func::Std => {
            let mean = sum / n;
            let squares: f64 = list.iter().map(|x| (x - mean) * (x - mean)).sum();
            (squares / (n - 1.0)).sqrt()
        }
        _ => sum,
    }
}

/// lg, ln and log keep the shape of their argument: a double gives a double, a vector a vector.
fn logarithm(name: &str, mut args: Vec<Value>, f: fn(f64) -> f64) -> Result<Value, String> {
    match args.pop() {
        Some(Value::Double(x)) => Ok(Value::Double(f(x))),
        Some(Value::Vec(v)) => Ok(Value::Vec(v.into_iter().map(f).collect())),
        other => Err(format!(
            "{name} takes a double or a doubleVec, not a {}",
            other.map_or("nothing", |v| v.type_name())
        )),
    }
}

/// `percentile(v, p)` by linear interpolation between the two nearest ranks (as Excel's
/// PERCENTILE.INC and numpy's default do), so percentile(v, 50) is the median.
fn percentile(mut args: Vec<Value>) -> Result<Value, String> {
    let p = match args.pop() {
        Some(Value::Double(p)) if (0.0..=100.0).contains(&p) => p,
        Some(Value::Double(p)) => return Err(format!("percentile {p} is not between 0 and 100")),
        other => {
            return Err(format!(
                "percentile takes a double percentage, not a {}",
                other.map_or("nothing", |v| v.type_name())
            ))
        }
    };
    let mut list = non_empty("percentile", args)?;
    list.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (list.len() - 1) as f64;
    let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
    let fraction = rank - rank.floor();
    Ok(Value::Double(
        list[low] + (list[high] - list[low]) * fraction,
    ))
}

/// A uniform double in [0, 1) from the random bits of a v4 UUID (not its version and variant
/// bits), which spares a dependency on a random-number crate.
fn random() -> f64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut bits = [0u8; 8];
    bits[..6].copy_from_slice(&bytes[..6]);
    bits[6..].copy_from_slice(&bytes[9..11]);
    (u64::from_le_bytes(bits) >> 11) as f64 / (1u64 << 53) as f64
}

/// `val(v, i)`: element i of v, counting from zero.
fn val(mut args: Vec<Value>) -> Result<Value, String> {
    let index = match args.pop() {
        Some(Value::Double(i)) if i.fract() == 0.0 => i,
        Some(Value::Double(i)) => return Err(format!("val index {i} is not a whole number")),
        other => {
            return Err(format!(
                "val takes a double index, not a {}",
                other.map_or("nothing", |v| v.type_name())
            ))
        }
    };
    let list = flatten("val", args)?;
    if index < 0.0 || index >= list.len() as f64 {
        return Err(format!(
            "val index {index} is out of range for {} element{}",
            list.len(),
            if list.len() == 1 { "" } else { "s" }
        ));
    }
    Ok(Value::Double(list[index as usize]))
}

/// `time()` is now; `time(s)` reads RFC 3339, the shorter W3C-DTF forms or RFC 1123.
fn time(mut args: Vec<Value>, now: DateTime<Utc>) -> Result<Value, String> {
    match args.pop() {
        None => Ok(Value::Time(now)),
        Some(Value::Str(text)) => parse_time(&text).map(Value::Time).ok_or_else(|| {
            format!("time(\"{text}\"): expected a time such as 2026-11-24T10:00:00Z")
        }),
        Some(other) => Err(format!("time takes a string, not a {}", other.type_name())),
    }
}

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.to_utc());
    }
    // RFC 1123 ("Tue, 24 Nov 2026 10:00:00 GMT") is a profile of RFC 2822.
    if let Ok(t) = DateTime::parse_from_rfc2822(text) {
        return Some(t.to_utc());
    }
    // W3C-DTF without seconds: 2026-11-24T10:00Z or 2026-11-24T10:00+01:00.
    let zoned = match text.strip_suffix('Z') {
        Some(rest) => format!("{rest}+00:00"),
        None => text.to_string(),
    };
    if let Ok(t) = DateTime::parse_from_str(&zoned, "%Y-%m-%dT%H:%M%:z") {
        return Some(t.to_utc());
    }
    // W3C-DTF dates: 2026-11-24, 2026-11 and 2026, at midnight UTC.
    let date = match text.len() {
        4 => format!("{text}-01-01"),
        7 => format!("{text}-01"),
        _ => text.to_string(),
    };
    let day = NaiveDate::parse_from_str(&date, "%Y-%m-%d").ok()?;
    Some(day.and_hms_opt(0, 0, 0)?.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn time_reads_the_documented_forms() {
        let ten = at("2026-11-24T10:00:00Z");
        for text in [
            "2026-11-24T10:00:00Z",
            "2026-11-24T11:00:00+01:00",
            "2026-11-24T10:00Z",
            "Tue, 24 Nov 2026 10:00:00 GMT",
        ] {
            assert_eq!(parse_time(text), Some(ten), "{text}");
        }
        assert_eq!(parse_time("2026-11"), Some(at("2026-11-01T00:00:00Z")));
        assert_eq!(parse_time("2026"), Some(at("2026-01-01T00:00:00Z")));
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2026-13"), None);
    }

    #[test]
    fn percentile_interpolates_between_ranks() {
        let v = || Value::Vec(vec![40.0, 10.0, 30.0, 20.0]);
        let p = |x: f64| percentile(vec![v(), Value::Double(x)]).unwrap();
        assert_eq!(p(0.0), Value::Double(10.0));
        assert_eq!(p(50.0), Value::Double(25.0));
        assert_eq!(p(100.0), Value::Double(40.0));
        assert!(percentile(vec![v(), Value::Double(101.0)]).is_err());
    }

    #[test]
    fn rand_stays_in_the_unit_interval() {
        assert!((0..1000).map(|_| random()).all(|x| (0.0..1.0).contains(&x)));
    }
}
