//! The values a formula computes with, the operators on them, and how results print.
//!
//! Timeintervals are whole ticks of 100 ns, as Azure and `IsoDuration` count them, so sums of
//! intervals are exact. Every operator checks its operand types and refuses results that are
//! inf or NaN, since those would otherwise reach a pool's target size.

use std::fmt;

use chrono::{DateTime, Datelike, SecondsFormat, TimeDelta, Timelike, Utc};

use crate::domain::duration::IsoDuration;

const TICKS_PER_SECOND: i64 = 10_000_000;
const TICKS_PER_DAY: i64 = 86_400 * TICKS_PER_SECOND;

/// The most elements a doubleVec may hold, so no formula can make the server allocate without
/// bound.
pub(super) const MAX_VEC: usize = 100_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum BinOp {
    Or,
    And,
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
    Ne,
    Add,
    Sub,
    Mul,
    Div,
}

/// Each binary operator's symbol and precedence (0 binds loosest).
pub(super) const BINARY: &[(&str, BinOp, u8)] = &[
    ("||", BinOp::Or, 0),
    ("&&", BinOp::And, 1),
    ("<", BinOp::Lt, 2),
    ("<=", BinOp::Le, 2),
    ("==", BinOp::Eq, 2),
    (">=", BinOp::Ge, 2),
    (">", BinOp::Gt, 2),
    ("!=", BinOp::Ne, 2),
    ("+", BinOp::Add, 3),
    ("-", BinOp::Sub, 3),
    ("*", BinOp::Mul, 4),
    ("/", BinOp::Div, 4),
];

impl BinOp {
    pub fn symbol(self) -> &'static str {
        BINARY
            .iter()
            .find(|(_, op, _)| *op == self)
            .map_or("?", |b| b.0)
    }

    pub fn is_comparison(self) -> bool {
        use BinOp::*;
        matches!(self, Lt | Le | Eq | Ge | Gt | Ne)
    }
}

/// The parts of a timestamp.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Member {
    Year,
    Month,
    Day,
    Weekday,
    Hour,
    Minute,
    Second,
}

pub(super) const MEMBERS: &[(&str, Member)] = &[
    ("year", Member::Year),
    ("month", Member::Month),
    ("day", Member::Day),
    ("weekday", Member::Weekday),
    ("hour", Member::Hour),
    ("minute", Member::Minute),
    ("second", Member::Second),
];

impl Member {
    pub fn name(self) -> &'static str {
        MEMBERS.iter().find(|m| m.1 == self).map_or("?", |m| m.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Double(f64),
    Vec(Vec<f64>),
    Str(String),
    Time(DateTime<Utc>),
    /// Ticks of 100 ns, possibly negative.
    Interval(i64),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Double(_) => "double",
            Value::Vec(_) => "doubleVec",
            Value::Str(_) => "string",
            Value::Time(_) => "timestamp",
            Value::Interval(_) => "timeinterval",
        }
    }

    /// Refuses inf and NaN anywhere in the value.
    pub fn finite(self, what: &str) -> Result<Value, String> {
        let ok = match &self {
            Value::Double(x) => x.is_finite(),
            Value::Vec(v) => v.iter().all(|x| x.is_finite()),
            _ => true,
        };
        if ok {
            Ok(self)
        } else {
            Err(format!(
                "{what} gave a number out of range (infinite or not a number)"
            ))
        }
    }
}

/// The TimeInterval_* constants, in ticks.
pub(super) fn interval_constant(name: &str) -> Option<i64> {
    Some(match name {
        "TimeInterval_Zero" => 0,
        "TimeInterval_100ns" => 1,
        "TimeInterval_Microsecond" => 10,
        "TimeInterval_Millisecond" => 10_000,
        "TimeInterval_Second" => TICKS_PER_SECOND,
        "TimeInterval_Minute" => 60 * TICKS_PER_SECOND,
        "TimeInterval_Hour" => 3600 * TICKS_PER_SECOND,
        "TimeInterval_Day" => TICKS_PER_DAY,
        "TimeInterval_Week" => 7 * TICKS_PER_DAY,
        "TimeInterval_Year" => 365 * TICKS_PER_DAY,
        _ => return None,
    })
}

/// A chrono duration in ticks, if it fits.
pub(super) fn ticks_of(d: TimeDelta) -> Option<i64> {
    d.num_seconds()
        .checked_mul(TICKS_PER_SECOND)?
        .checked_add(i64::from(d.subsec_nanos() / 100))
}

/// `t` moved by `ticks`, if the result is a time chrono can hold.
pub(super) fn shift(t: DateTime<Utc>, ticks: i64) -> Option<DateTime<Utc>> {
    let nanos = (ticks.rem_euclid(TICKS_PER_SECOND) * 100) as u32;
    let delta = TimeDelta::new(ticks.div_euclid(TICKS_PER_SECOND), nanos)?;
    t.checked_add_signed(delta)
}

/// Ticks times a factor, rounded, if the result is finite and fits.
fn scale(ticks: i64, factor: f64) -> Option<i64> {
    let x = (ticks as f64 * factor).round();
    (x.is_finite() && x.abs() < 9.2e18).then_some(x as i64)
}

fn mismatch(op: &str, l: &Value, r: &Value) -> String {
    format!(
        "'{op}' does not apply to a {} and a {}",
        l.type_name(),
        r.type_name()
    )
}

pub(super) fn unary(op: UnOp, v: Value) -> Result<Value, String> {
    let result = match (op, v) {
        (UnOp::Neg, Value::Double(x)) => Value::Double(-x),
        (UnOp::Neg, Value::Vec(v)) => Value::Vec(v.into_iter().map(|x| -x).collect()),
        (UnOp::Neg, Value::Interval(t)) => Value::Interval(
            t.checked_neg()
                .ok_or("'-' overflowed the range of timeintervals")?,
        ),
        (UnOp::Not, Value::Double(x)) => Value::Double(if x == 0.0 { 1.0 } else { 0.0 }),
        (op, v) => {
            let sym = if op == UnOp::Neg { '-' } else { '!' };
            return Err(format!(
                "unary '{sym}' does not apply to a {}",
                v.type_name()
            ));
        }
    };
    Ok(result)
}

/// Every binary operator but the short-circuiting `&&` and `||`, which the evaluator runs.
pub(super) fn binary(op: BinOp, l: Value, r: Value) -> Result<Value, String> {
    if op.is_comparison() {
        return compare(op, &l, &r);
    }
    let sym = op.symbol();
    let result = match (arith(op), l, r) {
        (Some(f), Value::Double(a), Value::Double(b)) => Value::Double(f(a, b)),
        (Some(f), Value::Vec(a), Value::Double(b)) => {
            Value::Vec(a.iter().map(|x| f(*x, b)).collect())
        }
        (Some(f), Value::Double(a), Value::Vec(b)) => {
            Value::Vec(b.iter().map(|x| f(a, *x)).collect())
        }
        (Some(f), Value::Vec(a), Value::Vec(b)) => {
            if a.len() != b.len() {
                return Err(format!(
                    "'{sym}' needs doubleVecs of the same length, not {} and {}",
                    a.len(),
                    b.len()
                ));
            }
            Value::Vec(a.iter().zip(&b).map(|(x, y)| f(*x, *y)).collect())
        }
        (_, l, r) => temporal(op, l, r)?,
    };
    result.finite(&format!("'{sym}'"))
}

/// `+ - * /` on doubles; None for any other operator.
fn arith(op: BinOp) -> Option<fn(f64, f64) -> f64> {
    match op {
        BinOp::Add => Some(|a, b| a + b),
        BinOp::Sub => Some(|a, b| a - b),
        BinOp::Mul => Some(|a, b| a * b),
        BinOp::Div => Some(|a, b| a / b),
        _ => None,
    }
}

/// The operators on timestamps and timeintervals.
fn temporal(op: BinOp, l: Value, r: Value) -> Result<Value, String> {
    use Value::{Double, Interval, Time};
    let sym = op.symbol();
    let overflow = || format!("'{sym}' overflowed the range of times");
    let result = match (op, &l, &r) {
        (BinOp::Add, Interval(a), Interval(b)) => a.checked_add(*b).map(Interval),
        (BinOp::Sub, Interval(a), Interval(b)) => a.checked_sub(*b).map(Interval),
        (BinOp::Add, Time(t), Interval(d)) | (BinOp::Add, Interval(d), Time(t)) => {
            shift(*t, *d).map(Time)
        }
        (BinOp::Sub, Time(t), Interval(d)) => d.checked_neg().and_then(|d| shift(*t, d)).map(Time),
        (BinOp::Sub, Time(a), Time(b)) => ticks_of(a.signed_duration_since(*b)).map(Interval),
        (BinOp::Mul, Interval(d), Double(x)) | (BinOp::Mul, Double(x), Interval(d)) => {
            scale(*d, *x).map(Interval)
        }
        (BinOp::Div, Interval(_), Double(x)) if *x == 0.0 => {
            return Err("'/' divided a timeinterval by zero".to_string())
        }
        (BinOp::Div, Interval(d), Double(x)) => scale(*d, 1.0 / *x).map(Interval),
        _ => return Err(mismatch(sym, &l, &r)),
    };
    result.ok_or_else(overflow)
}

/// The comparisons, on two values of the same type: 1 when true, else 0.
fn compare(op: BinOp, l: &Value, r: &Value) -> Result<Value, String> {
    let order = match (l, r) {
        (Value::Double(a), Value::Double(b)) => a.partial_cmp(b),
        (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
        (Value::Time(a), Value::Time(b)) => Some(a.cmp(b)),
        (Value::Interval(a), Value::Interval(b)) => Some(a.cmp(b)),
        _ => None,
    };
    let Some(order) = order else {
        return Err(mismatch(op.symbol(), l, r));
    };
    let truth = match op {
        BinOp::Lt => order.is_lt(),
        BinOp::Le => order.is_le(),
        BinOp::Eq => order.is_eq(),
        BinOp::Ge => order.is_ge(),
        BinOp::Gt => order.is_gt(),
        _ => order.is_ne(),
    };
    Ok(Value::Double(if truth { 1.0 } else { 0.0 }))
}

/// `t.year` and the like; weekdays run from 1 (Monday) to 7 (Sunday).
pub(super) fn member(v: Value, m: Member) -> Result<Value, String> {
    let Value::Time(t) = v else {
        return Err(format!(
            "'.{}' applies to a timestamp, not a {}",
            m.name(),
            v.type_name()
        ));
    };
    let part = match m {
        Member::Year => f64::from(t.year()),
        Member::Month => f64::from(t.month()),
        Member::Day => f64::from(t.day()),
        Member::Weekday => f64::from(t.weekday().number_from_monday()),
        Member::Hour => f64::from(t.hour()),
        Member::Minute => f64::from(t.minute()),
        Member::Second => f64::from(t.second()),
    };
    Ok(Value::Double(part))
}

/// Doubles as integers when whole, else in their shortest round-trip form; never "-0".
fn write_double(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    if x == 0.0 {
        f.write_str("0")
    } else {
        write!(f, "{x}")
    }
}

/// The forms of Azure's autoScaleRun.results.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Double(x) => write_double(f, *x),
            Value::Vec(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write_double(f, *x)?;
                }
                f.write_str("]")
            }
            Value::Str(s) => f.write_str(s),
            Value::Time(t) => f.write_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true)),
            Value::Interval(t) if *t < 0 => {
                let magnitude = t.checked_neg().unwrap_or(i64::MAX);
                write!(f, "-{}", IsoDuration::from_ticks(magnitude))
            }
            Value::Interval(t) => write!(f, "{}", IsoDuration::from_ticks(*t)),
        }
    }
}
