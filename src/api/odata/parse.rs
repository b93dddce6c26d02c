//! `$filter` text to a [`Filter`]: tokens, then a recursive descent bounded by [`MAX_NESTING`].

use super::{Filter, Literal, Op, MAX_NESTING};
use crate::api::error::ApiError;

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
                i += 1;
                tokens.push(Token::Str(quoted(&chars, &mut i)?));
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

/// A string literal from just after its opening quote to just after its closing one; `''`
/// inside stands for one quote.
fn quoted(chars: &[char], i: &mut usize) -> Result<String, String> {
    let mut s = String::new();
    loop {
        match chars.get(*i) {
            None => return Err("a string literal is not closed with '".into()),
            Some('\'') if chars.get(*i + 1) == Some(&'\'') => {
                s.push('\'');
                *i += 2;
            }
            Some('\'') => {
                *i += 1;
                return Ok(s);
            }
            Some(&ch) => {
                s.push(ch);
                *i += 1;
            }
        }
    }
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
            Some(Token::Ident(f)) if f.eq_ignore_ascii_case("startswith") => self.starts_with(),
            Some(Token::Ident(name)) => self.comparison(&name),
            Some(t) => Err(format!("unexpected {t:?}")),
            None => Err("the filter ends too early".into()),
        }
    }

    /// `(property, 'prefix')`, after `startswith`.
    fn starts_with(&mut self) -> Result<Filter, String> {
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

    /// `operator value`, after the property `name`.
    fn comparison(&mut self, name: &str) -> Result<Filter, String> {
        let prop = self.property(name)?;
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
            Some(Token::Ident(w)) if w == "true" || w == "false" => Literal::Bool(w == "true"),
            Some(Token::Ident(w)) if w == "null" => Literal::Null,
            Some(Token::Ident(w)) => match chrono::DateTime::parse_from_rfc3339(&w) {
                Ok(t) => Literal::Time(t.with_timezone(&chrono::Utc)),
                Err(_) => return Err(format!("{w:?} is not a value; quote strings as 'text'")),
            },
            _ => return Err(format!("a value must follow the operator after {name:?}")),
        };
        Ok(Filter::Compare(prop, op, literal))
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
}
