//! Builds statements from tokens by recursive descent, with precedence climbing for the binary
//! operators.
//!
//! Everything that can be known without running the formula is checked here (unknown functions,
//! methods and members, argument counts, read-only assignments), so a pool is refused a bad
//! formula when it is set rather than at its first evaluation. Nesting and tree height are
//! capped so neither this parser nor the evaluator can recurse deep enough to overflow a stack.

use super::funcs::{Func, Method, METHODS};
use super::lex::{Pos, Tok, Token};
use super::value::{interval_constant, BinOp, Member, UnOp, BINARY, MEMBERS};
use super::{is_metric, FormulaError, DEALLOCATION_OPTIONS, SYNTAX};

/// Azure's limit on statements.
const MAX_STATEMENTS: usize = 100;
/// How deep parentheses, arguments, unary operators and ternary branches may nest.
const MAX_DEPTH: usize = 64;
/// How tall an expression tree may grow (long `a + b + c ...` chains grow it without nesting).
const MAX_HEIGHT: u32 = 256;

/// A parsed formula, ready to evaluate as often as needed.
#[derive(Clone, Debug)]
pub struct Formula {
    pub(super) statements: Vec<Statement>,
}

#[derive(Clone, Debug)]
pub(super) enum Statement {
    Assign { name: String, value: Expr },
    Bare(Expr),
}

/// An expression and where it starts (for operators, where the operator is), for error messages.
#[derive(Clone, Debug)]
pub(super) struct Expr {
    pub kind: Kind,
    pub pos: Pos,
    height: u32,
}

#[derive(Clone, Debug)]
pub(super) enum Kind {
    Num(f64),
    Str(String),
    /// A timeinterval in ticks of 100 ns.
    Interval(i64),
    Var(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
    /// `$Metric.Method(args)`: methods exist on metrics only.
    Method(String, Method, Vec<Expr>),
    /// `timestamp.hour` and the like.
    Member(Box<Expr>, Member),
}

/// The statements of a token list that ends with `Tok::End`.
pub(super) fn parse_tokens(tokens: Vec<Token>) -> Result<Formula, FormulaError> {
    let mut p = Parser {
        tokens,
        i: 0,
        depth: 0,
    };
    let mut statements = Vec::new();
    loop {
        while p.eat(";") {}
        if p.peek().tok == Tok::End {
            return Ok(Formula { statements });
        }
        if statements.len() == MAX_STATEMENTS {
            return Err(p.error(format!(
                "a formula may hold at most {MAX_STATEMENTS} statements"
            )));
        }
        statements.push(p.statement()?);
        if p.peek().tok != Tok::End {
            p.expect(";")?;
        }
    }
}

fn syntax(pos: Pos, message: impl std::fmt::Display) -> FormulaError {
    FormulaError::at(SYNTAX, pos, message)
}

/// The value of a reserved word, if `name` is one.
fn constant(name: &str) -> Option<Kind> {
    if let Some(ticks) = interval_constant(name) {
        return Some(Kind::Interval(ticks));
    }
    DEALLOCATION_OPTIONS
        .contains(&name)
        .then(|| Kind::Str(name.to_string()))
}

/// Why `name` may not be assigned, if it may not.
fn unassignable(name: &str) -> Option<String> {
    if is_metric(name) {
        Some(format!("{name} is read-only"))
    } else if constant(name).is_some() {
        Some(format!("{name} is a constant and cannot be assigned"))
    } else {
        None
    }
}

fn unknown_member(pos: Pos, name: &str) -> FormulaError {
    let known = "a timestamp has year, month, day, weekday, hour, minute and second";
    syntax(pos, format!("unknown member '{name}': {known}"))
}

fn check_arity(
    pos: Pos,
    name: &str,
    (min, max): (usize, usize),
    got: usize,
) -> Result<(), FormulaError> {
    if (min..=max).contains(&got) {
        return Ok(());
    }
    let wanted = match (min, max) {
        (0, 0) => "no arguments".to_string(),
        (a, b) if a == b => format!("{a} argument{}", if a == 1 { "" } else { "s" }),
        (a, usize::MAX) => format!("at least {a} argument{}", if a == 1 { "" } else { "s" }),
        (a, b) => format!("{a} to {b} arguments"),
    };
    Err(syntax(
        pos,
        format!("{name} takes {wanted} but was given {got}"),
    ))
}

struct Parser {
    tokens: Vec<Token>,
    i: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.i.min(self.tokens.len() - 1)]
    }

    fn peek_sym(&self, sym: &str) -> bool {
        matches!(self.peek().tok, Tok::Sym(s) if s == sym)
    }

    fn advance(&mut self) -> Token {
        let token = self.peek().clone();
        if self.i < self.tokens.len() - 1 {
            self.i += 1;
        }
        token
    }

    fn eat(&mut self, sym: &str) -> bool {
        let found = self.peek_sym(sym);
        if found {
            self.advance();
        }
        found
    }

    fn error(&self, message: impl std::fmt::Display) -> FormulaError {
        syntax(self.peek().pos, message)
    }

    fn expected(&self, what: &str) -> FormulaError {
        self.error(format!(
            "expected {what} but found {}",
            self.peek().tok.describe()
        ))
    }

    fn expect(&mut self, sym: &str) -> Result<(), FormulaError> {
        if self.eat(sym) {
            Ok(())
        } else {
            Err(self.expected(&format!("'{sym}'")))
        }
    }

    /// Runs `inner` one nesting level deeper, refusing to go past the limit.
    fn nested<T>(
        &mut self,
        inner: impl FnOnce(&mut Self) -> Result<T, FormulaError>,
    ) -> Result<T, FormulaError> {
        if self.depth == MAX_DEPTH {
            return Err(self.error(format!(
                "expressions may nest at most {MAX_DEPTH} levels deep"
            )));
        }
        self.depth += 1;
        let result = inner(self);
        self.depth -= 1;
        result
    }

    fn node(&self, kind: Kind, pos: Pos) -> Result<Expr, FormulaError> {
        let children: Vec<&Expr> = match &kind {
            Kind::Unary(_, x) | Kind::Member(x, _) => vec![x],
            Kind::Binary(_, a, b) => vec![a, b],
            Kind::Cond(a, b, c) => vec![a, b, c],
            Kind::Call(_, args) | Kind::Method(_, _, args) => args.iter().collect(),
            _ => Vec::new(),
        };
        let height = 1 + children.iter().map(|c| c.height).max().unwrap_or(0);
        if height > MAX_HEIGHT {
            return Err(syntax(
                pos,
                "the expression is too complex; split it into statements",
            ));
        }
        Ok(Expr { kind, pos, height })
    }

    fn statement(&mut self) -> Result<Statement, FormulaError> {
        let first = self.peek().clone();
        let next_is_assign = self.tokens.get(self.i + 1).map(|t| &t.tok) == Some(&Tok::Sym("="));
        match first.tok {
            Tok::Name(name) if next_is_assign => {
                if let Some(why) = unassignable(&name) {
                    return Err(syntax(first.pos, why));
                }
                self.advance();
                self.advance();
                let value = self.ternary()?;
                Ok(Statement::Assign { name, value })
            }
            _ => Ok(Statement::Bare(self.ternary()?)),
        }
    }

    /// `c ? a : b`, right-associative.
    fn ternary(&mut self) -> Result<Expr, FormulaError> {
        let cond = self.binary(0)?;
        let pos = self.peek().pos;
        if !self.eat("?") {
            return Ok(cond);
        }
        let (yes, no) = self.nested(|p| {
            let yes = p.ternary()?;
            p.expect(":")?;
            Ok((yes, p.ternary()?))
        })?;
        self.node(Kind::Cond(cond.into(), yes.into(), no.into()), pos)
    }

    /// The binary operators binding at least as tightly as `min_level`, by precedence climbing:
    /// one loop per level reached rather than one call per level, which keeps the stack shallow.
    fn binary(&mut self, min_level: u8) -> Result<Expr, FormulaError> {
        let mut left = self.unary()?;
        let mut compared = false;
        while let Some((op, level)) = self.peek_binary().filter(|(_, l)| *l >= min_level) {
            if compared && op.is_comparison() {
                return Err(self.error("comparisons do not chain; join them with '&&'"));
            }
            let pos = self.advance().pos;
            let right = self.binary(level + 1)?;
            left = self.node(Kind::Binary(op, left.into(), right.into()), pos)?;
            compared = op.is_comparison();
        }
        Ok(left)
    }

    /// The binary operator ahead, if any, and its precedence.
    fn peek_binary(&self) -> Option<(BinOp, u8)> {
        let Tok::Sym(sym) = self.peek().tok else {
            return None;
        };
        BINARY.iter().find(|b| b.0 == sym).map(|b| (b.1, b.2))
    }

    fn unary(&mut self) -> Result<Expr, FormulaError> {
        let pos = self.peek().pos;
        let op = if self.peek_sym("-") {
            UnOp::Neg
        } else if self.peek_sym("!") {
            UnOp::Not
        } else {
            return self.postfix();
        };
        let operand = self.nested(|p| {
            p.advance();
            p.unary()
        })?;
        self.node(Kind::Unary(op, operand.into()), pos)
    }

    /// A primary followed by `.member` and `.Method(args)`. Small on purpose: it stays on the
    /// stack while a parenthesized expression inside it is parsed.
    fn postfix(&mut self) -> Result<Expr, FormulaError> {
        let expr = self.primary()?;
        self.suffixes(expr)
    }

    fn suffixes(&mut self, mut expr: Expr) -> Result<Expr, FormulaError> {
        while self.eat(".") {
            let Tok::Name(name) = self.peek().tok.clone() else {
                return Err(self.expected("a method or member name after '.'"));
            };
            let pos = self.advance().pos;
            expr = if self.peek_sym("(") {
                self.method(expr, &name, pos)?
            } else if let Some(m) = MEMBERS.iter().find(|m| m.0 == name) {
                self.node(Kind::Member(expr.into(), m.1), pos)?
            } else {
                return Err(unknown_member(pos, &name));
            };
        }
        Ok(expr)
    }

    fn method(&mut self, target: Expr, name: &str, pos: Pos) -> Result<Expr, FormulaError> {
        let Some(&(_, method, min, max)) = METHODS.iter().find(|m| m.0 == name) else {
            return Err(syntax(pos, format!("unknown method '{name}'")));
        };
        let metric = match target.kind {
            Kind::Var(metric) if is_metric(&metric) => metric,
            _ => {
                return Err(syntax(
                    pos,
                    format!("{name} is a method of metrics such as $PendingTasks"),
                ))
            }
        };
        let args = self.arguments()?;
        check_arity(pos, name, (min, max), args.len())?;
        self.node(Kind::Method(metric, method, args), pos)
    }

    fn primary(&mut self) -> Result<Expr, FormulaError> {
        let token = self.peek().clone();
        let kind = match token.tok {
            Tok::Num(n) => Kind::Num(n),
            Tok::Str(s) => Kind::Str(s),
            Tok::Sym("(") => {
                return self.nested(|p| {
                    p.advance();
                    let inner = p.ternary()?;
                    p.expect(")")?;
                    Ok(inner)
                });
            }
            Tok::Name(name) => {
                self.advance();
                if self.peek_sym("(") {
                    return self.call(&name, token.pos);
                }
                return self.node(constant(&name).unwrap_or(Kind::Var(name)), token.pos);
            }
            _ => return Err(self.expected("an expression")),
        };
        self.advance();
        self.node(kind, token.pos)
    }

    fn call(&mut self, name: &str, pos: Pos) -> Result<Expr, FormulaError> {
        let Some(func) = Func::lookup(name) else {
            return Err(syntax(pos, format!("unknown function '{name}'")));
        };
        let args = self.arguments()?;
        check_arity(pos, name, func.arity(), args.len())?;
        self.node(Kind::Call(func, args), pos)
    }

    /// `( a, b, ... )`, possibly empty.
    fn arguments(&mut self) -> Result<Vec<Expr>, FormulaError> {
        self.expect("(")?;
        let mut args = Vec::new();
        if self.eat(")") {
            return Ok(args);
        }
        loop {
            args.push(self.nested(|p| p.ternary())?);
            if self.eat(")") {
                return Ok(args);
            }
            if !self.eat(",") {
                return Err(self.expected("',' or ')'"));
            }
        }
    }
}
