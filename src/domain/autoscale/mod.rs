//! Azure Batch autoscale formulas: parsing them and evaluating them against a pool's samples.
//!
//! The language is Azure's ("Create a formula to automatically scale compute nodes in a Batch
//! pool"): `;`-separated statements that assign service and user variables, with doubles,
//! doubleVecs, strings, timestamps and timeintervals. Parsing is separate from evaluation so a
//! formula can be checked once when a pool is created and then run at every evaluation interval.
//! Nothing here does I/O: the caller hands in the clock, the pool's targets and the metrics'
//! sample histories, which keeps runs repeatable in tests.
//!
//! Bad input must never panic or run without bound, so the parser caps the formula's length, its
//! statements and its nesting, and the evaluator caps vector lengths and rejects inf and NaN.

mod eval;
mod funcs;
mod lex;
mod parse;
mod value;

use std::fmt;

pub use parse::Formula;

/// Azure's codes, which clients branch on.
const SYNTAX: &str = "AutoScalingFormulaSyntaxError";
const TOO_LONG: &str = "AutoScaleFormulaTooLong";
const INSUFFICIENT: &str = "InsufficientSampleData";
const EVALUATION: &str = "AutoScalingFormulaEvaluationError";

/// Azure's limit on a formula's size (8 KB).
const MAX_FORMULA_BYTES: usize = 8192;

/// The service variables a formula may assign; every other `$` name it assigns is its own.
const TARGET_DEDICATED: &str = "$TargetDedicatedNodes";
const TARGET_LOW_PRIORITY: &str = "$TargetLowPriorityNodes";
const DEALLOCATION: &str = "$NodeDeallocationOption";

/// What may be assigned to `$NodeDeallocationOption`; the bare words are string values.
const DEALLOCATION_OPTIONS: &[&str] = &["requeue", "terminate", "taskcompletion", "retaineddata"];

/// The sampled, read-only metrics. Whether one is measured is the caller's to say.
const METRICS: &[&str] = &[
    "$ActiveTasks",
    "$RunningTasks",
    "$PendingTasks",
    "$SucceededTasks",
    "$FailedTasks",
    "$CurrentDedicatedNodes",
    "$CurrentLowPriorityNodes",
    "$UsableNodeCount",
    "$PreemptedNodeCount",
    "$SampleNodeCount",
    "$TaskSlotsPerNode",
    "$CPUPercent",
    "$WallClockSeconds",
    "$MemoryBytes",
    "$DiskBytes",
    "$DiskReadBytes",
    "$DiskWriteBytes",
    "$DiskReadOps",
    "$DiskWriteOps",
    "$NetworkInBytes",
    "$NetworkOutBytes",
];

fn is_metric(name: &str) -> bool {
    METRICS.contains(&name)
}

/// Parses a formula, or says where and why it is malformed.
pub fn parse(text: &str) -> Result<Formula, FormulaError> {
    if text.len() > MAX_FORMULA_BYTES {
        return Err(FormulaError {
            code: TOO_LONG,
            message: format!(
                "The formula is {} bytes long; the limit is {MAX_FORMULA_BYTES}",
                text.len()
            ),
        });
    }
    let tokens = lex::lex(text)?;
    parse::parse_tokens(tokens)
}

#[derive(Clone, Debug, PartialEq)]
pub struct FormulaError {
    /// Azure's code: "AutoScalingFormulaSyntaxError", "AutoScaleFormulaTooLong",
    /// "InsufficientSampleData", or "AutoScalingFormulaEvaluationError" for any other evaluation
    /// failure.
    pub code: &'static str,
    /// Human text, starting with "Line L, Col C: " where a position is known.
    pub message: String,
}

impl FormulaError {
    fn at(code: &'static str, pos: lex::Pos, message: impl fmt::Display) -> Self {
        FormulaError {
            code,
            message: format!("{pos}: {message}"),
        }
    }
}

impl fmt::Display for FormulaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for FormulaError {}

/// What the formula reads: the metrics' sample histories.
pub trait MetricHistory {
    /// The samples of `name` (with its `$`), oldest first, as (time, value); None when this
    /// server does not measure that metric.
    fn samples(&self, name: &str) -> Option<&[(chrono::DateTime<chrono::Utc>, f64)]>;
    /// The time between two samples.
    fn period(&self) -> chrono::Duration;
}

pub struct Inputs<'a> {
    pub now: chrono::DateTime<chrono::Utc>,
    pub target_dedicated: f64,
    pub target_low_priority: f64,
    pub metrics: &'a dyn MetricHistory,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// $TargetDedicatedNodes after evaluation, rounded down to a whole number and never below 0
    /// (the caller caps it).
    pub target_dedicated: i64,
    pub target_low_priority: i64,
    /// "requeue" | "terminate" | "taskcompletion" | "retaineddata"
    pub node_deallocation_option: String,
    /// Azure's autoScaleRun.results: the three service variables, each followed by ';', then
    /// every user variable assigned, sorted by name, as "name=value" joined by ';'.
    pub results: String,
}

/// Runs a parsed formula once. Statements run in order; `stop()` ends the run early, keeping
/// what was assigned before it.
pub fn evaluate(formula: &Formula, inputs: &Inputs) -> Result<Evaluation, FormulaError> {
    eval::run(formula, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Duration, Utc};

    type Samples = Vec<(DateTime<Utc>, f64)>;

    /// Task metrics are measured (all with the same history); resource metrics are not.
    struct Fake {
        samples: Samples,
    }

    impl MetricHistory for Fake {
        fn samples(&self, name: &str) -> Option<&[(DateTime<Utc>, f64)]> {
            name.ends_with("Tasks").then_some(self.samples.as_slice())
        }

        fn period(&self) -> Duration {
            Duration::seconds(5)
        }
    }

    /// The history every task metric holds.
    #[derive(Clone, Copy)]
    enum History {
        /// An hour of samples, every 5 s up to now, all of this value.
        Full(f64),
        /// None yet.
        Empty,
        /// These values, oldest first, 5 s apart, the last one taken now.
        Recent(&'static [f64]),
    }

    use History::{Empty, Full, Recent};

    const TUESDAY_10: &str = "2026-11-24T10:00:00Z";

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    fn history(now: DateTime<Utc>, history: History) -> Samples {
        let values: Vec<f64> = match history {
            Full(x) => vec![x; 721],
            Empty => Vec::new(),
            Recent(values) => values.to_vec(),
        };
        let n = values.len() as i64;
        let time = |i: i64| now - Duration::seconds(5 * (n - 1 - i));
        (0..n).map(time).zip(values).collect()
    }

    fn run(
        formula: &str,
        now: &str,
        h: History,
        dedicated: f64,
    ) -> Result<Evaluation, FormulaError> {
        let now = at(now);
        let fake = Fake {
            samples: history(now, h),
        };
        let inputs = Inputs {
            now,
            target_dedicated: dedicated,
            target_low_priority: 0.0,
            metrics: &fake,
        };
        evaluate(&parse(formula)?, &inputs)
    }

    const PENDING_AVERAGE: &str = "startingNumberOfVMs = 1;
        maxNumberofVMs = 25;
        pendingTaskSamplePercent = $PendingTasks.GetSamplePercent(180 * TimeInterval_Second);
        pendingTaskSamples = pendingTaskSamplePercent < 70 ? startingNumberOfVMs : \
            avg($PendingTasks.GetSample(180 * TimeInterval_Second));
        $TargetDedicatedNodes=min(maxNumberofVMs, pendingTaskSamples);
        $NodeDeallocationOption = taskcompletion;";

    const WORK_HOURS: &str = "$curTime = time();
        $workHours = $curTime.hour >= 8 && $curTime.hour < 18;
        $isWeekday = $curTime.weekday >= 1 && $curTime.weekday <= 5;
        $isWorkingWeekdayHour = $workHours && $isWeekday;
        $TargetDedicatedNodes = $isWorkingWeekdayHour ? 20:10;
        $NodeDeallocationOption = taskcompletion;";

    const SCALE_TO_ZERO: &str = "$samples = $PendingTasks.GetSamplePercent(TimeInterval_Minute);
        $tasks = $samples < 70 ? max(0, $PendingTasks.GetSample(1)) : \
            max( $PendingTasks.GetSample(1), avg($PendingTasks.GetSample(TimeInterval_Minute)));
        $targetVMs = $tasks > 0 ? $tasks : max(0, $TargetDedicatedNodes / 2);
        cappedPoolSize = 8;
        $TargetDedicatedNodes = max(0, min($targetVMs, cappedPoolSize));
        $NodeDeallocationOption = taskcompletion;";

    /// (formula, now, history, starting $TargetDedicatedNodes, expected target, results after
    /// the service variables).
    const RUNS: &[(&str, &str, History, f64, i64, &str)] = &[
        (
            PENDING_AVERAGE,
            TUESDAY_10,
            Full(10.0),
            0.0,
            10,
            "maxNumberofVMs=25;pendingTaskSamplePercent=100;pendingTaskSamples=10;\
             startingNumberOfVMs=1",
        ),
        (
            PENDING_AVERAGE,
            TUESDAY_10,
            Empty,
            0.0,
            1,
            "maxNumberofVMs=25;pendingTaskSamplePercent=0;pendingTaskSamples=1;\
             startingNumberOfVMs=1",
        ),
        // 30 of the 36 samples 3 minutes should hold: 83% is enough.
        (
            PENDING_AVERAGE,
            TUESDAY_10,
            Recent(&[40.0; 30]),
            0.0,
            25,
            "maxNumberofVMs=25;pendingTaskSamplePercent=83.33333333333333;pendingTaskSamples=40;\
             startingNumberOfVMs=1",
        ),
        (
            WORK_HOURS,
            TUESDAY_10,
            Empty,
            0.0,
            20,
            "$curTime=2026-11-24T10:00:00.000Z;$isWeekday=1;$isWorkingWeekdayHour=1;$workHours=1",
        ),
        // A Sunday.
        (
            WORK_HOURS,
            "2026-11-29T10:00:00Z",
            Empty,
            0.0,
            10,
            "$curTime=2026-11-29T10:00:00.000Z;$isWeekday=0;$isWorkingWeekdayHour=0;$workHours=1",
        ),
        (
            WORK_HOURS,
            "2026-11-24T18:00:00.25Z",
            Empty,
            0.0,
            10,
            "$curTime=2026-11-24T18:00:00.250Z;$isWeekday=1;$isWorkingWeekdayHour=0;$workHours=0",
        ),
        (
            SCALE_TO_ZERO,
            TUESDAY_10,
            Full(5.0),
            0.0,
            5,
            "$samples=100;$targetVMs=5;$tasks=5;cappedPoolSize=8",
        ),
        (
            SCALE_TO_ZERO,
            TUESDAY_10,
            Full(20.0),
            0.0,
            8,
            "$samples=100;$targetVMs=20;$tasks=20;cappedPoolSize=8",
        ),
        // No samples: GetSample(1) is empty, max(0, []) is 0, so the pool halves.
        (
            SCALE_TO_ZERO,
            TUESDAY_10,
            Empty,
            6.0,
            3,
            "$samples=0;$targetVMs=3;$tasks=0;cappedPoolSize=8",
        ),
        // 3 of the 12 samples a minute should hold (25%): the latest sample alone decides.
        (
            SCALE_TO_ZERO,
            TUESDAY_10,
            Recent(&[9.0, 9.0, 2.0]),
            4.0,
            2,
            "$samples=25;$targetVMs=2;$tasks=2;cappedPoolSize=8",
        ),
        (
            SCALE_TO_ZERO,
            TUESDAY_10,
            Recent(&[0.0, 0.0, 0.0]),
            5.0,
            2,
            "$samples=25;$targetVMs=2.5;$tasks=0;cappedPoolSize=8",
        ),
    ];

    #[test]
    fn azure_documentation_formulas_give_their_targets_and_results() {
        for (formula, now, h, start, target, users) in RUNS {
            let outcome = run(formula, now, *h, *start).unwrap_or_else(|e| panic!("{e}"));
            let sep = if users.is_empty() { "" } else { ";" };
            let results = format!(
                "$TargetDedicatedNodes={target};$TargetLowPriorityNodes=0;\
                 $NodeDeallocationOption=taskcompletion{sep}{users}"
            );
            let expected = Evaluation {
                target_dedicated: *target,
                target_low_priority: 0,
                node_deallocation_option: "taskcompletion".to_string(),
                results,
            };
            assert_eq!(outcome, expected, "{formula} at {now}");
        }
    }

    /// (formula, history, expected target, user variables in the results); every run is at
    /// TUESDAY_10 and starts from 0 nodes.
    const SEMANTICS: &[(&str, History, i64, &str)] = &[
        (
            "$TargetDedicatedNodes = 3; stop(); $TargetDedicatedNodes = 9; x = 1;",
            Empty,
            3,
            "",
        ),
        (
            "v = $PendingTasks.GetSample(3); w = v * 2 + 1; d = w - v; \
             $TargetDedicatedNodes = sum(d)",
            Recent(&[1.0, 2.0, 3.0]),
            9,
            "d=[2,3,4];v=[1,2,3];w=[3,5,7]",
        ),
        (
            "n = -$PendingTasks.GetSample(2); q = 12 / $PendingTasks.GetSample(2); \
             l = lg($PendingTasks.GetSample(3))",
            Recent(&[1.0, 2.0, 4.0]),
            0,
            "l=[0,1,2];n=[-2,-4];q=[6,3]",
        ),
        (
            "v = $PendingTasks.GetSample(3); a = avg(v, 7); m = max(1, v, 2.5); v0 = val(v, 0)",
            Recent(&[1.0, 2.0, 3.0]),
            0,
            "a=3.25;m=3;v=[1,2,3];v0=1",
        ),
        (
            "v = $PendingTasks.GetSample(4); p = percentile(v, 50); r = range(v); \
             k = norm(3, 4); z = log(1000); e = ln(1)",
            Recent(&[40.0, 10.0, 30.0, 20.0]),
            0,
            "e=0;k=5;p=25;r=30;v=[40,10,30,20];z=3",
        ),
        (
            "s = std(2, 4, 4, 4, 5, 5, 7, 9); one = std(3); \
             n = len($PendingTasks.GetSample(TimeInterval_Minute))",
            Empty,
            0,
            "n=0;one=0;s=2.138089935299395",
        ),
        (
            r#"a = "abc" < "abd"; b = "x" == "x"; c = $NodeDeallocationOption == "requeue";
               d = "b" >= "c""#,
            Empty,
            0,
            "a=1;b=1;c=1;d=0",
        ),
        (
            r#"t = time("2026-11-24T10:00:00Z") + 90 * TimeInterval_Second;
               d = time() - time("2026-11-24T09:57:00Z"); h = TimeInterval_Hour / 2;
               w = time().weekday; y = (time() - TimeInterval_Day).day;
               neg = -TimeInterval_Minute; before = time("Mon, 23 Nov 2026 10:00:00 GMT") < time();
               z = TimeInterval_Zero; ms = 1.5 * TimeInterval_Millisecond"#,
            Empty,
            0,
            "before=1;d=PT3M;h=PT30M;ms=PT0.0015S;neg=-PT1M;t=2026-11-24T10:01:30.000Z;w=2;y=23;\
             z=PT0S",
        ),
        (
            "// a comment\n/* a block\n comment */ $TargetDedicatedNodes = 2; // trailing\n\
             ;; x = 1 /* inline */ + 1;\n",
            Empty,
            2,
            "x=2",
        ),
        (
            r#"n = $PendingTasks.Count(); p = $PendingTasks.GetSamplePeriod();
               b = $PendingTasks.HistoryBeginTime(); last = $PendingTasks;
               older = len($PendingTasks.GetSample(TimeInterval_Minute, 5 * TimeInterval_Second));
               c = $PendingTasks.GetSample(10);
               since = $PendingTasks.GetSample(time("2026-11-24T09:59:55Z"), 50)"#,
            Recent(&[1.0, 2.0, 3.0]),
            0,
            "b=2026-11-24T09:59:50.000Z;c=[1,2,3];last=3;n=3;older=2;p=PT5S;since=[2,3]",
        ),
        (
            "x = 1 + 2 * 3 - -1; y = 0 ? 1 : 0 ? 2 : 3; z = !0 && (1 || 0); q = 7 / 2; \
             big = 1e3; f = 0 && 1 / 0",
            Empty,
            0,
            "big=1000;f=0;q=3.5;x=8;y=3;z=1",
        ),
        (
            "$TargetDedicatedNodes = 4.9; $x = $TargetDedicatedNodes; \
             $TargetDedicatedNodes = $x * 2",
            Empty,
            9,
            "$x=4.9",
        ),
        ("$TargetDedicatedNodes = -3", Empty, 0, ""),
    ];

    #[test]
    fn the_language_computes_as_documented() {
        for (formula, h, target, users) in SEMANTICS {
            let outcome = run(formula, TUESDAY_10, *h, 0.0).unwrap_or_else(|e| panic!("{e}"));
            let sep = if users.is_empty() { "" } else { ";" };
            let expected = format!(
                "$TargetDedicatedNodes={target};$TargetLowPriorityNodes=0;\
                 $NodeDeallocationOption=requeue{sep}{users}"
            );
            assert_eq!(outcome.results, expected, "{formula}");
            assert_eq!(outcome.target_dedicated, *target, "{formula}");
        }
    }

    #[test]
    fn low_priority_and_deallocation_are_reported() {
        let formula = "$TargetLowPriorityNodes = 2.7; $NodeDeallocationOption = retaineddata; \
                       r = rand() < 1";
        let outcome = run(formula, TUESDAY_10, Empty, 5.0).unwrap();
        let results = "$TargetDedicatedNodes=5;$TargetLowPriorityNodes=2;\
                       $NodeDeallocationOption=retaineddata;r=1";
        let expected = Evaluation {
            target_dedicated: 5,
            target_low_priority: 2,
            node_deallocation_option: "retaineddata".to_string(),
            results: results.to_string(),
        };
        assert_eq!(outcome, expected);
    }

    const S: &str = SYNTAX;
    const E: &str = EVALUATION;
    const I: &str = INSUFFICIENT;

    /// (formula, history, code, message).
    const FAILURES: &[(&str, History, &str, &str)] = &[
        (
            "$TargetDedicatedNodes = min(10, avg($DiskBytes.GetSample(TimeInterval_Minute * 5)))",
            Full(1.0),
            E,
            "Line 1, Col 48: $DiskBytes is not measured by this server",
        ),
        (
            "x = $NetworkInBytes",
            Full(1.0),
            E,
            "Line 1, Col 5: $NetworkInBytes is not measured by this server",
        ),
        (
            "$tasks = $RunningTasks.GetSample(10 * TimeInterval_Second, 70)",
            Empty,
            I,
            "Line 1, Col 24: Insufficient data from data set: \
             $RunningTasks wanted 70%, received 0%",
        ),
        (
            "x = $PendingTasks.GetSample(TimeInterval_Minute, TimeInterval_Zero, 50)",
            Recent(&[1.0; 5]),
            I,
            "Line 1, Col 19: Insufficient data from data set: \
             $PendingTasks wanted 50%, received 41%",
        ),
        (
            "x = $ActiveTasks + 1",
            Empty,
            I,
            "Line 1, Col 5: Insufficient data from data set: $ActiveTasks has no samples yet",
        ),
        (
            "x = $ActiveTasks.HistoryBeginTime()",
            Empty,
            I,
            "Line 1, Col 18: $ActiveTasks has no samples yet",
        ),
        (
            "$TargetDedicatedNodes = (1 + ;",
            Empty,
            S,
            "Line 1, Col 30: expected an expression but found ';'",
        ),
        (
            "a = 1;\n$x = (1 + 2 ;",
            Empty,
            S,
            "Line 2, Col 13: expected ')' but found ';'",
        ),
        (
            "a = max(1 2)",
            Empty,
            S,
            "Line 1, Col 11: expected ',' or ')' but found '2'",
        ),
        (
            "a = 1 b = 2",
            Empty,
            S,
            "Line 1, Col 7: expected ';' but found 'b'",
        ),
        (
            "$TargetDedicatedNodes = foo(1)",
            Empty,
            S,
            "Line 1, Col 25: unknown function 'foo'",
        ),
        (
            "x = $PendingTasks.GetSamples(1)",
            Empty,
            S,
            "Line 1, Col 19: unknown method 'GetSamples'",
        ),
        (
            "x = time().hours",
            Empty,
            S,
            "Line 1, Col 12: unknown member 'hours': a timestamp has year, month, day, weekday, \
             hour, minute and second",
        ),
        (
            "x = y.Count()",
            Empty,
            S,
            "Line 1, Col 7: Count is a method of metrics such as $PendingTasks",
        ),
        (
            "x = rand(1)",
            Empty,
            S,
            "Line 1, Col 5: rand takes no arguments but was given 1",
        ),
        (
            "x = avg()",
            Empty,
            S,
            "Line 1, Col 5: avg takes at least 1 argument but was given 0",
        ),
        (
            "\n  $ActiveTasks = 3",
            Empty,
            S,
            "Line 2, Col 3: $ActiveTasks is read-only",
        ),
        (
            "TimeInterval_Hour = 3",
            Empty,
            S,
            "Line 1, Col 1: TimeInterval_Hour is a constant and cannot be assigned",
        ),
        (
            "x = \"open",
            Empty,
            S,
            "Line 1, Col 5: unterminated string: expected '\"'",
        ),
        (
            "x = 1 < 2 < 3",
            Empty,
            S,
            "Line 1, Col 11: comparisons do not chain; join them with '&&'",
        ),
        (
            "x = val($PendingTasks.GetSample(3), 3)",
            Recent(&[1.0, 2.0, 3.0]),
            E,
            "Line 1, Col 5: val index 3 is out of range for 3 elements",
        ),
        (
            "x = avg($PendingTasks.GetSample(TimeInterval_Minute))",
            Empty,
            E,
            "Line 1, Col 5: avg of an empty list",
        ),
        (
            "x = $PendingTasks.GetSample(2) + $PendingTasks.GetSample(3)",
            Recent(&[1.0, 2.0, 3.0]),
            E,
            "Line 1, Col 32: '+' needs doubleVecs of the same length, not 2 and 3",
        ),
        (
            "x = \"a\" + 1",
            Empty,
            E,
            "Line 1, Col 9: '+' does not apply to a string and a double",
        ),
        (
            "x = time() * 2",
            Empty,
            E,
            "Line 1, Col 12: '*' does not apply to a timestamp and a double",
        ),
        (
            "x = \"a\" && 1",
            Empty,
            E,
            "Line 1, Col 5: '&&' needs a double, not a string",
        ),
        (
            "x = 1 / 0",
            Empty,
            E,
            "Line 1, Col 7: '/' gave a number out of range (infinite or not a number)",
        ),
        (
            "x = 1e308 * 10",
            Empty,
            E,
            "Line 1, Col 11: '*' gave a number out of range (infinite or not a number)",
        ),
        (
            "x = ln(0)",
            Empty,
            E,
            "Line 1, Col 5: ln gave a number out of range (infinite or not a number)",
        ),
        ("x = y + 1", Empty, E, "Line 1, Col 5: y is not defined"),
        (
            "$NodeDeallocationOption = \"sometimes\"",
            Empty,
            E,
            "Line 1, Col 27: $NodeDeallocationOption must be one of requeue, terminate, \
             taskcompletion, retaineddata, not sometimes",
        ),
        (
            "$TargetDedicatedNodes = time()",
            Empty,
            E,
            "Line 1, Col 25: $TargetDedicatedNodes takes a double, not a timestamp",
        ),
        (
            "x = $PendingTasks.GetSample(0)",
            Empty,
            E,
            "Line 1, Col 19: GetSample(0): the count must be at least 1",
        ),
        (
            "x = $PendingTasks.GetSample(TimeInterval_Minute, 101)",
            Empty,
            E,
            "Line 1, Col 19: GetSample: percentage 101 is not between 0 and 100",
        ),
        (
            "x = $PendingTasks.GetSamplePercent(\"soon\")",
            Empty,
            E,
            "Line 1, Col 19: GetSamplePercent expects a timeinterval before now or a timestamp, \
             not a string",
        ),
        (
            "x = time(\"next week\")",
            Empty,
            E,
            "Line 1, Col 5: time(\"next week\"): expected a time such as 2026-11-24T10:00:00Z",
        ),
        (
            "x = TimeInterval_Year * 1e12",
            Empty,
            E,
            "Line 1, Col 23: '*' overflowed the range of times",
        ),
    ];

    #[test]
    fn failures_name_their_code_line_and_column() {
        for (formula, h, code, message) in FAILURES {
            let error = run(formula, TUESDAY_10, *h, 0.0).expect_err(formula);
            let found = (error.code, error.message.as_str());
            assert_eq!(found, (*code, *message), "{formula}");
        }
    }

    #[test]
    fn limits_are_enforced_at_their_edge() {
        let padded = |n: usize| format!("{:<n$}", "x = 1;");
        assert!(parse(&padded(8192)).is_ok());
        let error = parse(&padded(8193)).unwrap_err();
        assert_eq!(error.code, TOO_LONG);
        let too_long = "The formula is 8193 bytes long; the limit is 8192";
        assert_eq!(error.message, too_long);

        let nested = |n: usize| format!("x = {}1{}", "(".repeat(n), ")".repeat(n));
        assert!(parse(&nested(64)).is_ok());
        let error = parse(&nested(65)).unwrap_err();
        assert_eq!(error.code, SYNTAX);
        let too_deep = "Line 1, Col 69: expressions may nest at most 64 levels deep";
        assert_eq!(error.message, too_deep);

        let statements = |n: usize| "x = 1;".repeat(n);
        assert!(parse(&statements(100)).is_ok());
        let error = parse(&statements(101)).unwrap_err();
        assert_eq!(error.code, SYNTAX);
        let too_many = "Line 1, Col 601: a formula may hold at most 100 statements";
        assert_eq!(error.message, too_many);

        let chain = |n: usize| format!("x = 1{}", " + 1".repeat(n));
        assert!(parse(&chain(255)).is_ok());
        let error = parse(&chain(256)).unwrap_err();
        let too_tall = "Line 1, Col 1027: the expression is too complex; split it into statements";
        assert_eq!(error.message, too_tall);
    }

    /// The deepest formulas the parser accepts parse and run on half a test thread's stack (they
    /// need about 512 KiB in a debug build, far less in release).
    #[test]
    fn the_deepest_accepted_formulas_fit_a_small_stack() {
        let deepest = [
            format!("x = 1{}", " + 1".repeat(255)),
            format!("x = {}1{}", "(1 + ".repeat(64), ")".repeat(64)),
            format!("x = {}1{}", "max(".repeat(64), ")".repeat(64)),
            format!("x = {}1", "-".repeat(64)),
            format!("x = {}1", "1 ? 0 : ".repeat(64)),
        ];
        let worker = std::thread::Builder::new().stack_size(1024 * 1024);
        let handle = worker.spawn(move || {
            for formula in deepest {
                run(&formula, TUESDAY_10, Empty, 0.0).unwrap();
            }
        });
        handle.unwrap().join().unwrap();
    }

    const SOUP: &[&str] = &[
        "$TargetDedicatedNodes",
        "$NodeDeallocationOption",
        "$PendingTasks",
        "$CPUPercent",
        "x",
        "$y",
        "=",
        "==",
        "(",
        ")",
        "(",
        ")",
        ",",
        ";",
        "?",
        ":",
        "+",
        "-",
        "*",
        "/",
        "!",
        "<",
        ">=",
        "&&",
        "||",
        ".",
        "1",
        "0",
        "2.5",
        "1e308",
        "-1e308",
        "\"s\"",
        "\"",
        "avg(",
        "max(",
        "min(",
        "std(",
        "percentile(",
        "val(",
        "lg(",
        "len(",
        "time(",
        "time()",
        "rand()",
        "stop()",
        "sum(",
        ".GetSample(",
        ".GetSamplePercent(",
        ".Count()",
        ".HistoryBeginTime()",
        ".GetSamplePeriod()",
        ".hour",
        ".weekday",
        "TimeInterval_Minute",
        "TimeInterval_Year",
        "taskcompletion",
        "requeue",
        "//",
        "/*",
        "*/",
        "\n",
        "$",
        "@",
        "1e",
        "é",
    ];

    /// A fixed linear congruential generator: the same "random" inputs on every run.
    fn generator() -> impl FnMut(usize) -> usize {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        move |bound| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % bound
        }
    }

    /// Whatever token soups say, parsing and evaluating them returns rather than panics.
    #[test]
    fn random_token_soups_never_panic() {
        let mut next = generator();
        let mut outcomes = [0usize; 2];
        for _ in 0..2000 {
            let length = 1 + next(40);
            let words: Vec<&str> = (0..length).map(|_| SOUP[next(SOUP.len())]).collect();
            let text = words.join(if next(2) == 0 { " " } else { "" });
            let result = run(&text, TUESDAY_10, Recent(&[1.0, 2.0, 3.0]), 1.0);
            outcomes[usize::from(result.is_ok())] += 1;
        }
        assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
    }

    /// The documented formulas with characters dropped, doubled or swapped for soup words.
    #[test]
    fn mangled_documentation_formulas_never_panic() {
        let mut next = generator();
        for round in 0..1000 {
            let source = [PENDING_AVERAGE, WORK_HOURS, SCALE_TO_ZERO][round % 3];
            let mut chars: Vec<String> = source.chars().map(String::from).collect();
            for _ in 0..1 + next(4) {
                let at = next(chars.len());
                match next(3) {
                    0 => drop(chars.remove(at)),
                    1 => chars.insert(at, chars[at].clone()),
                    _ => chars[at] = SOUP[next(SOUP.len())].to_string(),
                }
            }
            let _ = run(&chars.concat(), TUESDAY_10, Full(3.0), 2.0);
        }
    }
}
