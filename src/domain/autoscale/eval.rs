//! Runs a parsed formula: statements in order over the pool's targets, its user variables and
//! its metrics' samples, and reports Azure's autoScaleRun results.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::funcs::{self, Func, Method};
use super::lex::Pos;
use super::parse::{Expr, Formula, Kind, Statement};
use super::value::{self, ticks_of, BinOp, Member, UnOp, Value, MAX_VEC};
use super::{
    is_metric, Evaluation, FormulaError, Inputs, DEALLOCATION, DEALLOCATION_OPTIONS, EVALUATION,
    INSUFFICIENT, TARGET_DEDICATED, TARGET_LOW_PRIORITY,
};

/// Why a run left off early: `stop()` (a success) or an error.
enum Halt {
    Stop,
    Fail(FormulaError),
}

type Run<T> = Result<T, Halt>;

fn fail(pos: Pos, message: impl std::fmt::Display) -> Halt {
    Halt::Fail(FormulaError::at(EVALUATION, pos, message))
}

fn insufficient(pos: Pos, message: impl std::fmt::Display) -> Halt {
    Halt::Fail(FormulaError::at(INSUFFICIENT, pos, message))
}

pub(super) fn run(formula: &Formula, inputs: &Inputs) -> Result<Evaluation, FormulaError> {
    let mut run = Evaluator {
        inputs,
        dedicated: inputs.target_dedicated,
        low_priority: inputs.target_low_priority,
        deallocation: DEALLOCATION_OPTIONS[0].to_string(),
        vars: BTreeMap::new(),
    };
    for statement in &formula.statements {
        match run.statement(statement) {
            Ok(()) => {}
            Err(Halt::Stop) => break,
            Err(Halt::Fail(error)) => return Err(error),
        }
    }
    run.outcome()
}

struct Evaluator<'a> {
    inputs: &'a Inputs<'a>,
    dedicated: f64,
    low_priority: f64,
    deallocation: String,
    /// User variables; sorted, since results list them by name.
    vars: BTreeMap<String, Value>,
}

/// A target as a node count: rounded down, never below zero.
fn node_count(name: &str, x: f64) -> Result<i64, FormulaError> {
    if !x.is_finite() {
        return Err(FormulaError {
            code: EVALUATION,
            message: format!("{name} is not a finite number"),
        });
    }
    Ok(x.floor().max(0.0) as i64)
}

impl<'a> Evaluator<'a> {
    fn outcome(self) -> Result<Evaluation, FormulaError> {
        let dedicated = node_count(TARGET_DEDICATED, self.dedicated)?;
        let low_priority = node_count(TARGET_LOW_PRIORITY, self.low_priority)?;
        let option = &self.deallocation;
        // Azure's form: `name=value` joined by `;`, with no `;` after the last.
        let mut parts = vec![
            format!("{TARGET_DEDICATED}={dedicated}"),
            format!("{TARGET_LOW_PRIORITY}={low_priority}"),
            format!("{DEALLOCATION}={option}"),
        ];
        parts.extend(self.vars.iter().map(|(k, v)| format!("{k}={v}")));
        let results = parts.join(";");
        Ok(Evaluation {
            target_dedicated: dedicated,
            target_low_priority: low_priority,
            node_deallocation_option: self.deallocation,
            results,
        })
    }

    fn statement(&mut self, statement: &Statement) -> Run<()> {
        let (name, expr) = match statement {
            Statement::Bare(expr) => return self.expr(expr).map(drop),
            Statement::Assign { name, value } => (name, value),
        };
        let value = self.expr(expr)?;
        let target = match name.as_str() {
            TARGET_DEDICATED => &mut self.dedicated,
            TARGET_LOW_PRIORITY => &mut self.low_priority,
            DEALLOCATION => {
                return match value {
                    Value::Str(s) if DEALLOCATION_OPTIONS.contains(&s.as_str()) => {
                        self.deallocation = s;
                        Ok(())
                    }
                    other => Err(fail(
                        expr.pos,
                        format!(
                            "{DEALLOCATION} must be one of {}, not {other}",
                            DEALLOCATION_OPTIONS.join(", ")
                        ),
                    )),
                };
            }
            _ => {
                self.vars.insert(name.clone(), value);
                return Ok(());
            }
        };
        match value {
            Value::Double(x) => *target = x,
            other => {
                let kind = other.type_name();
                return Err(fail(
                    expr.pos,
                    format!("{name} takes a double, not a {kind}"),
                ));
            }
        }
        Ok(())
    }

    /// Kept to a dispatch so the frame that recurses once per tree level stays small.
    fn expr(&mut self, e: &Expr) -> Run<Value> {
        match &e.kind {
            Kind::Num(n) => Ok(Value::Double(*n)),
            Kind::Str(s) => Ok(Value::Str(s.clone())),
            Kind::Interval(t) => Ok(Value::Interval(*t)),
            Kind::Var(name) => self.variable(name, e.pos),
            Kind::Unary(op, x) => self.unary(*op, x, e.pos),
            Kind::Member(x, m) => self.member(x, *m, e.pos),
            Kind::Cond(c, yes, no) => self.cond(c, yes, no),
            Kind::Binary(op, l, r) => self.binary(*op, l, r, e.pos),
            Kind::Call(func, args) => self.call(*func, args, e.pos),
            Kind::Method(metric, method, args) => self.method(metric, *method, args, e.pos),
        }
    }

    fn unary(&mut self, op: UnOp, x: &Expr, pos: Pos) -> Run<Value> {
        let v = self.expr(x)?;
        value::unary(op, v).map_err(|m| fail(pos, m))
    }

    fn member(&mut self, x: &Expr, m: Member, pos: Pos) -> Run<Value> {
        let v = self.expr(x)?;
        value::member(v, m).map_err(|m| fail(pos, m))
    }

    /// `c ? yes : no` runs only the branch it picks.
    fn cond(&mut self, c: &Expr, yes: &Expr, no: &Expr) -> Run<Value> {
        let chosen = if self.truth(c, "?")? { yes } else { no };
        self.expr(chosen)
    }

    /// `&&` and `||` skip their right side when the left decides, so a guard such as
    /// `$PendingTasks.Count() > 0 && avg(...)` works.
    fn binary(&mut self, op: BinOp, l: &Expr, r: &Expr, pos: Pos) -> Run<Value> {
        let truth = match op {
            BinOp::And => self.truth(l, "&&")? && self.truth(r, "&&")?,
            BinOp::Or => self.truth(l, "||")? || self.truth(r, "||")?,
            _ => {
                let (l, r) = (self.expr(l)?, self.expr(r)?);
                return value::binary(op, l, r).map_err(|m| fail(pos, m));
            }
        };
        Ok(Value::Double(if truth { 1.0 } else { 0.0 }))
    }

    fn call(&mut self, func: Func, args: &[Expr], pos: Pos) -> Run<Value> {
        if func == Func::Stop {
            return Err(Halt::Stop);
        }
        let args = self.exprs(args)?;
        funcs::call(func, args, self.inputs.now).map_err(|m| fail(pos, m))
    }

    fn exprs(&mut self, exprs: &[Expr]) -> Run<Vec<Value>> {
        exprs.iter().map(|e| self.expr(e)).collect()
    }

    /// A condition: a double, true when nonzero.
    fn truth(&mut self, e: &Expr, op: &str) -> Run<bool> {
        match self.expr(e)? {
            Value::Double(x) => Ok(x != 0.0),
            other => Err(fail(
                e.pos,
                format!("'{op}' needs a double, not a {}", other.type_name()),
            )),
        }
    }

    fn variable(&self, name: &str, pos: Pos) -> Run<Value> {
        match name {
            TARGET_DEDICATED => return Ok(Value::Double(self.dedicated)),
            TARGET_LOW_PRIORITY => return Ok(Value::Double(self.low_priority)),
            DEALLOCATION => return Ok(Value::Str(self.deallocation.clone())),
            _ => {}
        }
        if let Some(value) = self.vars.get(name) {
            return Ok(value.clone());
        }
        if !is_metric(name) {
            return Err(fail(pos, format!("{name} is not defined")));
        }
        match self.samples(name, pos)?.last() {
            Some((_, x)) => Ok(Value::Double(*x)),
            None => Err(insufficient(
                pos,
                format!("Insufficient data from data set: {name} has no samples yet"),
            )),
        }
    }

    fn samples(&self, metric: &str, pos: Pos) -> Run<&'a [(DateTime<Utc>, f64)]> {
        self.inputs
            .metrics
            .samples(metric)
            .ok_or_else(|| fail(pos, format!("{metric} is not measured by this server")))
    }

    /// The sample period in ticks, at least one so window arithmetic never divides by zero.
    fn period(&self) -> i64 {
        ticks_of(self.inputs.metrics.period())
            .unwrap_or(i64::MAX)
            .max(1)
    }

    fn method(&mut self, metric: &str, method: Method, args: &[Expr], pos: Pos) -> Run<Value> {
        let args = self.exprs(args)?;
        let samples = self.samples(metric, pos)?;
        match method {
            Method::Count => Ok(Value::Double(samples.len() as f64)),
            Method::GetSamplePeriod => Ok(Value::Interval(self.period())),
            Method::HistoryBeginTime => match samples.first() {
                Some((t, _)) => Ok(Value::Time(*t)),
                None => Err(insufficient(pos, format!("{metric} has no samples yet"))),
            },
            Method::GetSamplePercent => {
                let window = self.window(method, &args, pos)?;
                Ok(Value::Double(window.percent(samples, self.period())))
            }
            Method::GetSample => self.get_sample(metric, samples, args, pos),
        }
    }

    /// `GetSample(count)` gives the newest `count` samples, or all there are when fewer, so that
    /// `max(0, $PendingTasks.GetSample(1))` works on a pool with no history yet.
    /// `GetSample(start [, end] [, percent])` gives the samples in the window, and fails with
    /// InsufficientSampleData when they are fewer than `percent` of what it should hold.
    fn get_sample(
        &self,
        metric: &str,
        samples: &[(DateTime<Utc>, f64)],
        args: Vec<Value>,
        pos: Pos,
    ) -> Run<Value> {
        let picked: Vec<f64> = if let [Value::Double(count)] = args.as_slice() {
            if *count < 1.0 {
                return Err(fail(
                    pos,
                    format!("GetSample({count}): the count must be at least 1"),
                ));
            }
            let keep = (count.min(samples.len() as f64)) as usize;
            samples[samples.len() - keep..]
                .iter()
                .map(|s| s.1)
                .collect()
        } else {
            let window = self.window(Method::GetSample, &args, pos)?;
            if let Some(wanted) = window.percent {
                let received = window.percent(samples, self.period());
                if received < wanted {
                    let received = received.floor();
                    let message = format!("{metric} wanted {wanted}%, received {received}%");
                    let message = format!("Insufficient data from data set: {message}");
                    return Err(insufficient(pos, message));
                }
            }
            window.pick(samples).map(|s| s.1).collect()
        };
        if picked.len() > MAX_VEC {
            return Err(fail(
                pos,
                format!("{metric} returned more than {MAX_VEC} samples"),
            ));
        }
        Ok(Value::Vec(picked))
    }

    /// The window of `GetSample(start [, end] [, percent])` or `GetSamplePercent(start [, end])`.
    fn window(&self, method: Method, args: &[Value], pos: Pos) -> Run<Window> {
        let name = method.name();
        let instant = |v: &Value| match v {
            Value::Interval(t) => value::shift(self.inputs.now, t.checked_neg()?),
            Value::Time(t) => Some(*t),
            _ => None,
        };
        let bad = |v: &Value| {
            let kind = v.type_name();
            fail(
                pos,
                format!("{name} expects a timeinterval before now or a timestamp, not a {kind}"),
            )
        };
        let Some((first, rest)) = args.split_first() else {
            return Err(fail(pos, format!("{name} needs a start")));
        };
        let start = instant(first).ok_or_else(|| bad(first))?;
        let (end, percent) = match (method, rest) {
            (_, []) => (self.inputs.now, None),
            (Method::GetSample, [Value::Double(p)]) => (self.inputs.now, Some(*p)),
            (Method::GetSample, [end, Value::Double(p)]) => {
                (instant(end).ok_or_else(|| bad(end))?, Some(*p))
            }
            (Method::GetSample, [_, p]) => {
                let kind = p.type_name();
                return Err(fail(
                    pos,
                    format!("{name}: the percentage must be a double, not a {kind}"),
                ));
            }
            (_, [end]) => (instant(end).ok_or_else(|| bad(end))?, None),
            _ => return Err(fail(pos, format!("{name} was given too many arguments"))),
        };
        if let Some(p) = percent.filter(|p| !(0.0..=100.0).contains(p)) {
            return Err(fail(
                pos,
                format!("{name}: percentage {p} is not between 0 and 100"),
            ));
        }
        if start > end {
            return Err(fail(
                pos,
                format!("{name}: the window starts after it ends"),
            ));
        }
        Ok(Window {
            start,
            end,
            percent,
        })
    }
}

/// A span of sample times, both ends included.
struct Window {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    /// The least share of the expected samples the caller accepts, 0-100.
    percent: Option<f64>,
}

impl Window {
    fn pick<'s>(
        &self,
        samples: &'s [(DateTime<Utc>, f64)],
    ) -> impl Iterator<Item = &'s (DateTime<Utc>, f64)> + use<'s, '_> {
        samples
            .iter()
            .filter(|(t, _)| self.start <= *t && *t <= self.end)
    }

    /// The samples present as a percentage of those the window should hold (its length over the
    /// sample period, rounded down, at least one), capped at 100.
    fn percent(&self, samples: &[(DateTime<Utc>, f64)], period: i64) -> f64 {
        let length = ticks_of(self.end - self.start).unwrap_or(i64::MAX);
        let expected = (length / period).max(1);
        let present = self.pick(samples).count();
        (present as f64 * 100.0 / expected as f64).min(100.0)
    }
}
