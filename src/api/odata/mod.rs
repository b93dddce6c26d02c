//! OData query options as Azure Batch lists take them: `$filter` (eq, ne, gt, ge, lt, le, and,
//! or, not, startswith, parentheses) over the properties each list allows, and `$select`.
//! Filters are evaluated on the wire JSON of each item, so they mean exactly what the client
//! reads back.
//!
//! A filter comes from the query string, so its shape is bounded before anything recurses on it:
//! `and`/`or` chains are kept flat (a list, not a left-leaning tree) and parentheses and `not`
//! may nest at most [`MAX_NESTING`] deep. Parsing, matching and dropping then recurse at most
//! that deep, however long the filter is.

mod parse;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Str(String),
    Num(f64),
    Bool(bool),
    Time(chrono::DateTime<chrono::Utc>),
    Null,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

/// How deep parentheses and `not` may nest in one `$filter`.
pub const MAX_NESTING: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    Compare(String, Op, Literal),
    StartsWith(String, String),
    /// Two or more terms, all of which must hold.
    And(Vec<Filter>),
    /// Two or more terms, one of which must hold.
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

impl Filter {
    pub fn matches(&self, item: &Value) -> bool {
        match self {
            Filter::And(terms) => terms.iter().all(|t| t.matches(item)),
            Filter::Or(terms) => terms.iter().any(|t| t.matches(item)),
            Filter::Not(a) => !a.matches(item),
            Filter::StartsWith(prop, prefix) => lookup(item, prop)
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with(prefix.as_str())),
            Filter::Compare(prop, op, lit) => {
                let value = lookup(item, prop);
                let ordering = match (value, lit) {
                    (None | Some(Value::Null), Literal::Null) => Some(std::cmp::Ordering::Equal),
                    (None | Some(Value::Null), _) | (_, Literal::Null) => None,
                    (Some(Value::String(s)), Literal::Time(t)) => {
                        chrono::DateTime::parse_from_rfc3339(s)
                            .ok()
                            .map(|v| v.with_timezone(&chrono::Utc).cmp(t))
                    }
                    (Some(Value::String(s)), Literal::Str(l)) => Some(s.as_str().cmp(l.as_str())),
                    // contentLength and other int64s travel as strings.
                    (Some(Value::String(s)), Literal::Num(n)) => {
                        s.parse::<f64>().ok().and_then(|v| v.partial_cmp(n))
                    }
                    (Some(Value::Number(v)), Literal::Num(n)) => {
                        v.as_f64().and_then(|v| v.partial_cmp(n))
                    }
                    (Some(Value::Bool(b)), Literal::Bool(l)) => Some(b.cmp(l)),
                    _ => None,
                };
                match (op, ordering) {
                    (Op::Ne, None) => true,
                    (_, None) => false,
                    (Op::Eq, Some(o)) => o.is_eq(),
                    (Op::Ne, Some(o)) => o.is_ne(),
                    (Op::Gt, Some(o)) => o.is_gt(),
                    (Op::Ge, Some(o)) => o.is_ge(),
                    (Op::Lt, Some(o)) => o.is_lt(),
                    (Op::Le, Some(o)) => o.is_le(),
                }
            }
        }
    }

    /// `state eq 'x'` at the top level (alone or and-ed), for lists that can narrow their query.
    pub fn required_eq(&self, prop: &str) -> Option<&str> {
        match self {
            Filter::Compare(p, Op::Eq, Literal::Str(v)) if p == prop => Some(v),
            Filter::And(terms) => terms.iter().find_map(|t| t.required_eq(prop)),
            _ => None,
        }
    }
}

/// `executionInfo/exitCode` -> item["executionInfo"]["exitCode"].
fn lookup<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('/').try_fold(item, |v, key| v.get(key))
}

/// `$select=id,state`: the item with only those top-level properties.
pub fn select(item: Value, select: Option<&[String]>) -> Value {
    match (select, item) {
        (Some(fields), Value::Object(map)) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| fields.iter().any(|f| f.eq_ignore_ascii_case(k)))
                .collect(),
        ),
        (_, item) => item,
    }
}

pub fn parse_select(text: Option<&str>) -> Option<Vec<String>> {
    let fields: Vec<String> = text?
        .split(',')
        .map(|f| f.trim().to_string())
        .filter(|f| !f.is_empty())
        .collect();
    (!fields.is_empty()).then_some(fields)
}

/// The properties each list may filter on (Azure's, as far as this server reports them).
pub const POOL_PROPERTIES: &[&str] = &[
    "id",
    "displayName",
    "state",
    "allocationState",
    "vmSize",
    "creationTime",
    "lastModified",
    "stateTransitionTime",
    "allocationStateTransitionTime",
    "currentDedicatedNodes",
    "targetDedicatedNodes",
    "taskSlotsPerNode",
];
pub const NODE_PROPERTIES: &[&str] = &[
    "id",
    "state",
    "schedulingState",
    "vmSize",
    "ipAddress",
    "isDedicated",
    "stateTransitionTime",
    "allocationTime",
    "lastBootTime",
    "totalTasksRun",
    "runningTasksCount",
];
pub const JOB_PROPERTIES: &[&str] = &[
    "id",
    "displayName",
    "state",
    "priority",
    "creationTime",
    "lastModified",
    "stateTransitionTime",
    "previousState",
    "executionInfo/startTime",
    "executionInfo/endTime",
    "executionInfo/poolId",
    "executionInfo/terminateReason",
    "poolInfo/poolId",
    "waitReason/code",
];
pub const JOB_SCHEDULE_PROPERTIES: &[&str] = &[
    "id",
    "displayName",
    "state",
    "creationTime",
    "lastModified",
    "stateTransitionTime",
    "previousState",
    "executionInfo/nextRunTime",
    "executionInfo/endTime",
    "executionInfo/recentJob/id",
];
pub const TASK_PROPERTIES: &[&str] = &[
    "id",
    "displayName",
    "state",
    "previousState",
    "commandLine",
    "requiredSlots",
    "creationTime",
    "lastModified",
    "stateTransitionTime",
    "executionInfo/startTime",
    "executionInfo/endTime",
    "executionInfo/exitCode",
    "executionInfo/result",
    "executionInfo/retryCount",
    "executionInfo/requeueCount",
    "nodeInfo/nodeId",
    "nodeInfo/poolId",
    "waitReason/code",
];
pub const FILE_PROPERTIES: &[&str] = &[
    "name",
    "isDirectory",
    "properties/contentLength",
    "properties/lastModified",
    "properties/creationTime",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(text: &str) -> Filter {
        Filter::parse(text, TASK_PROPERTIES).unwrap()
    }

    #[test]
    fn filters_as_the_sdk_sends_them() {
        let t = json!({"id": "task-7", "state": "completed", "executionInfo": {"exitCode": 3, "result": "failure", "endTime": "2025-01-02T03:04:05.000000Z"}});
        assert!(f("state eq 'completed'").matches(&t));
        assert!(!f("state eq 'active'").matches(&t));
        assert!(f("state eq 'completed' and executionInfo/exitCode gt 2").matches(&t));
        assert!(f("(state eq 'active') or startswith(id, 'task-')").matches(&t));
        assert!(f("not (executionInfo/result eq 'success')").matches(&t));
        assert!(f("executionInfo/exitCode ne 0 and executionInfo/exitCode le 3").matches(&t));
        assert!(f("executionInfo/endTime ge datetime'2025-01-01T00:00:00Z'").matches(&t));
        assert!(f("executionInfo/endTime lt '2025-01-03T00:00:00Z'").matches(&t));
        assert!(
            f("displayName eq 'a''b'")
                == Filter::Compare("displayName".into(), Op::Eq, Literal::Str("a'b".into()))
        );
        assert!(
            !f("displayName eq 'x'").matches(&t),
            "a missing property equals nothing"
        );
        assert!(f("displayName ne 'x'").matches(&t));
        assert_eq!(
            f("state eq 'active' and id eq 'x'").required_eq("state"),
            Some("active")
        );
    }

    #[test]
    fn bad_filters_say_what_is_wrong() {
        for (bad, says) in [
            ("colour eq 'red'", "cannot be filtered"),
            ("state eq", "value must follow"),
            ("state like 'x'", "unknown operator"),
            ("state eq 'x", "not closed"),
            ("(state eq 'x'", "not closed"),
            ("state eq 'x' id", "unexpected"),
            ("state eq red", "quote strings"),
        ] {
            let err = Filter::parse(bad, TASK_PROPERTIES).unwrap_err();
            assert_eq!(err.code, "InvalidQueryParameterValue");
            assert!(
                err.values.iter().any(|(_, v)| v.contains(says)),
                "{bad}: {:?}",
                err.values
            );
        }
    }

    #[test]
    fn nesting_is_capped_and_long_chains_stay_flat() {
        let nested = |n: usize| format!("{}state eq 'x'{}", "(".repeat(n), ")".repeat(n));
        assert!(Filter::parse(&nested(MAX_NESTING), TASK_PROPERTIES).is_ok());
        for deep in [
            nested(MAX_NESTING + 1),
            nested(2_400),
            format!("{}state eq 'x'", "not ".repeat(100_000)),
            "(".repeat(100_000),
        ] {
            let err = Filter::parse(&deep, TASK_PROPERTIES).unwrap_err();
            assert_eq!(err.code, "InvalidQueryParameterValue");
            assert!(err.message.contains("at most 64 deep"), "{}", err.message);
        }
        let long = vec!["id eq 'a'"; 50_000].join(" or ");
        let filter = Filter::parse(&long, TASK_PROPERTIES).unwrap();
        assert!(filter.matches(&json!({"id": "a"})));
        assert!(!filter.matches(&json!({"id": "b"})));
    }

    /// Random filters, mostly malformed, some very deep: the parser answers Ok or Err and never
    /// panics, and what it accepts can be matched and dropped. It runs on a thread with a small
    /// stack, so recursion that grows with the input would overflow here first.
    #[test]
    fn random_filters_never_panic_or_overflow() {
        const PIECES: &[&str] = &[
            "(",
            "(",
            "(",
            ")",
            ")",
            "not ",
            "not ",
            " and ",
            " or ",
            "state eq 'x'",
            "id ne 'a''b'",
            "startswith(id, 'p')",
            "startswith(",
            "executionInfo/exitCode gt -3",
            "eq",
            "'",
            ",",
            " ",
            "null",
            "true",
            "2025-01-01T00:00:00Z",
            "datetime'",
            "%",
            "é",
        ];
        let check = || {
            // xorshift64*, fixed seed: the same inputs on every run.
            let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
            let mut next = move |bound: usize| {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % bound
            };
            let item = json!({"id": "pa", "state": "x", "executionInfo": {"exitCode": 1}});
            for _ in 0..3_000 {
                let mut text = String::new();
                for _ in 0..next(60) {
                    let piece = PIECES[next(PIECES.len())];
                    // Now and then a long run of one piece: deep nesting, long not-chains.
                    let times = if next(10) == 0 { next(5_000) } else { 1 };
                    text.push_str(&piece.repeat(times));
                }
                if let Ok(filter) = Filter::parse(&text, TASK_PROPERTIES) {
                    filter.matches(&item);
                    filter.required_eq("state");
                }
            }
        };
        std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(check)
            .unwrap()
            .join()
            .expect("the parser panicked");
    }

    #[test]
    fn select_keeps_only_the_named_properties() {
        let item = json!({"id": "a", "state": "active", "url": "u"});
        assert_eq!(
            select(item, parse_select(Some("id,state")).as_deref()),
            json!({"id": "a", "state": "active"})
        );
    }
}
