//! OData query options as Azure Batch lists take them: `$filter` (eq, ne, gt, ge, lt, le, and,
//! or, not, startswith, parentheses) over the properties each list allows, and `$select`.
//! Filters are evaluated on the wire JSON of each item, so they mean exactly what the client
//! reads back.
//!
//! A filter comes from the query string, so its shape is bounded before anything recurses on it:
//! `and`/`or` chains are kept flat (a list, not a left-leaning tree) and parentheses and `not`
//! may nest at most [`MAX_NESTING`] deep. Parsing, matching and dropping then recurse at most
//! that deep, however long the filter is.

use serde_json::Value;

use super::error::ApiError;

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

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Num(f64),
    Open,
    Close,
    Comma,
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut tokens = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => i += 1,
            '(' => {
                tokens.push(Token::Open);
                i += 1;
            }
            ')' => {
                tokens.push(Token::Close);
                i += 1;
            }
            ',' => {
                tokens.push(Token::Comma);
                i += 1;
            }
            '\'' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("a string literal is not closed with '".into()),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            s.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                tokens.push(Token::Str(s));
            }
            c if c.is_ascii_digit() || c == '-' => {
                let start = i;
                i += 1;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric()
                        || matches!(chars[i], '.' | ':' | '-' | '+'))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                match word.parse::<f64>() {
                    Ok(n) => tokens.push(Token::Num(n)),
                    // A bare datetime (2025-01-01T00:00:00Z).
                    Err(_) => tokens.push(Token::Ident(word)),
                }
            }
            c if c.is_alphabetic() || c == '_' || c == '$' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '/' | '$' | '.'))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                // datetime'...' literal
                if word == "datetime" && chars.get(i) == Some(&'\'') {
                    continue;
                }
                tokens.push(Token::Ident(word));
            }
            other => return Err(format!("unexpected character {other:?}")),
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    tokens: Vec<Token>,
    pos: usize,
    allowed: &'a [&'a str],
    /// How many `(` and `not` enclose the current position.
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Ident(w)) if w.eq_ignore_ascii_case(word))
    }

    fn or(&mut self) -> Result<Filter, String> {
        self.chain("or", Self::and, Filter::Or)
    }

    fn and(&mut self) -> Result<Filter, String> {
        self.chain("and", Self::unary, Filter::And)
    }

    /// `term (keyword term)*`, flat: a long chain is a long list, not a deep tree.
    fn chain(
        &mut self,
        keyword: &str,
        term: fn(&mut Self) -> Result<Filter, String>,
        join: fn(Vec<Filter>) -> Filter,
    ) -> Result<Filter, String> {
        let mut terms = vec![term(self)?];
        while self.keyword(keyword) {
            self.pos += 1;
            terms.push(term(self)?);
        }
        Ok(if terms.len() == 1 {
            terms.pop().expect("one term")
        } else {
            join(terms)
        })
    }

    /// Runs `inner` one level deeper, refusing to go past [`MAX_NESTING`].
    fn nested(&mut self, inner: fn(&mut Self) -> Result<Filter, String>) -> Result<Filter, String> {
        if self.depth == MAX_NESTING {
            return Err(format!(
                "parentheses and 'not' may nest at most {MAX_NESTING} deep"
            ));
        }
        self.depth += 1;
        let result = inner(self);
        self.depth -= 1;
        result
    }

    fn unary(&mut self) -> Result<Filter, String> {
        if self.keyword("not") {
            self.pos += 1;
            return Ok(Filter::Not(Box::new(self.nested(Self::unary)?)));
        }
        self.primary()
    }

    fn property(&self, name: &str) -> Result<String, String> {
        if self.allowed.iter().any(|a| a.eq_ignore_ascii_case(name)) {
            Ok(self
                .allowed
                .iter()
                .find(|a| a.eq_ignore_ascii_case(name))
                .expect("found")
                .to_string())
        } else {
            Err(format!(
                "the property {name:?} cannot be filtered on here; allowed: {}",
                self.allowed.join(", ")
            ))
        }
    }

    fn primary(&mut self) -> Result<Filter, String> {
        match self.next() {
            Some(Token::Open) => {
                let inner = self.nested(Self::or)?;
                match self.next() {
                    Some(Token::Close) => Ok(inner),
                    _ => Err("a '(' is not closed".into()),
                }
            }
            Some(Token::Ident(f)) if f.eq_ignore_ascii_case("startswith") => {
                if self.next() != Some(Token::Open) {
                    return Err("startswith needs (property, 'prefix')".into());
                }
                let prop = match self.next() {
                    Some(Token::Ident(p)) => self.property(&p)?,
                    _ => return Err("startswith needs a property first".into()),
                };
                if self.next() != Some(Token::Comma) {
                    return Err("startswith needs (property, 'prefix')".into());
                }
                let prefix = match self.next() {
                    Some(Token::Str(s)) => s,
                    _ => return Err("startswith needs a string prefix".into()),
                };
                if self.next() != Some(Token::Close) {
                    return Err("startswith(...) is not closed".into());
                }
                Ok(Filter::StartsWith(prop, prefix))
            }
            Some(Token::Ident(name)) => {
                let prop = self.property(&name)?;
                let op = match self.next() {
                    Some(Token::Ident(op)) => match op.to_ascii_lowercase().as_str() {
                        "eq" => Op::Eq,
                        "ne" => Op::Ne,
                        "gt" => Op::Gt,
                        "ge" => Op::Ge,
                        "lt" => Op::Lt,
                        "le" => Op::Le,
                        other => {
                            return Err(format!(
                                "unknown operator {other:?}; use eq, ne, gt, ge, lt or le"
                            ))
                        }
                    },
                    _ => return Err(format!("an operator must follow {name:?}")),
                };
                let literal = match self.next() {
                    Some(Token::Str(s)) => match chrono::DateTime::parse_from_rfc3339(&s) {
                        Ok(t) if s.contains('T') => Literal::Time(t.with_timezone(&chrono::Utc)),
                        _ => Literal::Str(s),
                    },
                    Some(Token::Num(n)) => Literal::Num(n),
                    Some(Token::Ident(w)) if w == "true" || w == "false" => {
                        Literal::Bool(w == "true")
                    }
                    Some(Token::Ident(w)) if w == "null" => Literal::Null,
                    Some(Token::Ident(w)) => match chrono::DateTime::parse_from_rfc3339(&w) {
                        Ok(t) => Literal::Time(t.with_timezone(&chrono::Utc)),
                        Err(_) => {
                            return Err(format!("{w:?} is not a value; quote strings as 'text'"))
                        }
                    },
                    _ => return Err(format!("a value must follow the operator after {name:?}")),
                };
                Ok(Filter::Compare(prop, op, literal))
            }
            Some(t) => Err(format!("unexpected {t:?}")),
            None => Err("the filter ends too early".into()),
        }
    }
}

impl Filter {
    pub fn parse(text: &str, allowed: &[&str]) -> Result<Filter, ApiError> {
        let fail = |why: String| ApiError::invalid_query("$filter", text, why);
        let tokens = tokenize(text).map_err(fail)?;
        let mut p = Parser {
            tokens,
            pos: 0,
            allowed,
            depth: 0,
        };
        let filter = p.or().map_err(fail)?;
        if p.pos != p.tokens.len() {
            return Err(fail(format!(
                "unexpected {:?} after a complete filter",
                p.tokens[p.pos]
            )));
        }
        Ok(filter)
    }

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
