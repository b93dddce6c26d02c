//! Splits a formula into tokens, each with the line and column it starts at, so every later
//! error can point at the text the user wrote.

use std::fmt;

use super::{FormulaError, SYNTAX};

/// A 1-based line and column (in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pos {
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Line {}, Col {}", self.line, self.col)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Num(f64),
    Str(String),
    /// An identifier, with its `$` if it has one.
    Name(String),
    Sym(&'static str),
    End,
}

impl Tok {
    /// How an error message names the token it found.
    pub fn describe(&self) -> String {
        match self {
            Tok::Num(n) => format!("'{n}'"),
            Tok::Str(s) => format!("\"{s}\""),
            Tok::Name(n) => format!("'{n}'"),
            Tok::Sym(s) => format!("'{s}'"),
            Tok::End => "the end of the formula".to_string(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    pub pos: Pos,
}

/// Two-character symbols come first so `<=` is never read as `<` then `=`.
const SYMBOLS: &[&str] = &[
    "==", "!=", "<=", ">=", "&&", "||", "(", ")", ",", ";", ".", "?", ":", "=", "<", ">", "+", "-",
    "*", "/", "!",
];

/// The tokens of `text`, ending with `Tok::End`.
pub(super) fn lex(text: &str) -> Result<Vec<Token>, FormulaError> {
    let mut lexer = Lexer {
        chars: text.chars().collect(),
        i: 0,
        pos: Pos { line: 1, col: 1 },
    };
    let mut tokens = Vec::new();
    loop {
        lexer.skip_blanks_and_comments()?;
        let pos = lexer.pos;
        let Some(c) = lexer.peek(0) else {
            tokens.push(Token { tok: Tok::End, pos });
            return Ok(tokens);
        };
        let tok = if c.is_ascii_digit() {
            lexer.number()?
        } else if c == '"' {
            lexer.string()?
        } else if c == '$' || c == '_' || c.is_ascii_alphabetic() {
            lexer.name()?
        } else {
            lexer.symbol()?
        };
        tokens.push(Token { tok, pos });
    }
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
    pos: Pos,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.i += 1;
        if c == '\n' {
            self.pos.line += 1;
            self.pos.col = 1;
        } else {
            self.pos.col += 1;
        }
        Some(c)
    }

    fn error(&self, pos: Pos, message: impl fmt::Display) -> FormulaError {
        FormulaError::at(SYNTAX, pos, message)
    }

    fn skip_blanks_and_comments(&mut self) -> Result<(), FormulaError> {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(c), _) if c.is_whitespace() => {
                    self.bump();
                }
                (Some('/'), Some('/')) => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                (Some('/'), Some('*')) => {
                    let start = self.pos;
                    self.bump();
                    self.bump();
                    while !(self.peek(0) == Some('*') && self.peek(1) == Some('/')) {
                        if self.bump().is_none() {
                            return Err(self.error(start, "unterminated comment: expected '*/'"));
                        }
                    }
                    self.bump();
                    self.bump();
                }
                _ => return Ok(()),
            }
        }
    }

    fn take_digits(&mut self, into: &mut String) -> usize {
        let mut n = 0;
        while let Some(c) = self.peek(0).filter(char::is_ascii_digit) {
            into.push(c);
            self.bump();
            n += 1;
        }
        n
    }

    /// `12`, `2.5`, `1e3`, `1.5E-2`. A `.` not followed by a digit is left for member access.
    fn number(&mut self) -> Result<Tok, FormulaError> {
        let start = self.pos;
        let mut text = String::new();
        self.take_digits(&mut text);
        if self.peek(0) == Some('.') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            text.push('.');
            self.bump();
            self.take_digits(&mut text);
        }
        if matches!(self.peek(0), Some('e' | 'E')) {
            text.push('e');
            self.bump();
            if let Some(sign) = self.peek(0).filter(|c| *c == '+' || *c == '-') {
                text.push(sign);
                self.bump();
            }
            if self.take_digits(&mut text) == 0 {
                return Err(self.error(start, "malformed number: expected digits after 'e'"));
            }
        }
        if self
            .peek(0)
            .is_some_and(|c| c == '_' || c.is_ascii_alphanumeric())
        {
            return Err(self.error(start, "malformed number: a name may not start with a digit"));
        }
        match text.parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Tok::Num(n)),
            _ => Err(self.error(start, format!("the number {text} is out of range"))),
        }
    }

    /// A double-quoted string on one line; the language has no escapes.
    fn string(&mut self) -> Result<Tok, FormulaError> {
        let start = self.pos;
        self.bump();
        let mut text = String::new();
        loop {
            match self.bump() {
                Some('"') => return Ok(Tok::Str(text)),
                Some('\n') | None => {
                    return Err(self.error(start, "unterminated string: expected '\"'"));
                }
                Some(c) => text.push(c),
            }
        }
    }

    fn name(&mut self) -> Result<Tok, FormulaError> {
        let start = self.pos;
        let mut text = String::new();
        if self.peek(0) == Some('$') {
            text.push('$');
            self.bump();
            if !self
                .peek(0)
                .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            {
                return Err(self.error(start, "expected a name after '$'"));
            }
        }
        while let Some(c) = self
            .peek(0)
            .filter(|c| *c == '_' || c.is_ascii_alphanumeric())
        {
            text.push(c);
            self.bump();
        }
        Ok(Tok::Name(text))
    }

    fn symbol(&mut self) -> Result<Tok, FormulaError> {
        let start = self.pos;
        for sym in SYMBOLS {
            let matches = sym
                .chars()
                .enumerate()
                .all(|(k, c)| self.peek(k) == Some(c));
            if matches {
                for _ in 0..sym.len() {
                    self.bump();
                }
                return Ok(Tok::Sym(sym));
            }
        }
        let c = self.peek(0).unwrap_or(' ');
        let hint = match c {
            '&' => " (did you mean '&&'?)",
            '|' => " (did you mean '||'?)",
            _ => "",
        };
        Err(self.error(start, format!("unexpected character {c:?}{hint}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(text: &str) -> Vec<Tok> {
        lex(text).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn reads_numbers_names_symbols_and_skips_comments() {
        assert_eq!(
            toks("$a = 1e3 // x\n/* y\n */ <= 2.5;b.c"),
            vec![
                Tok::Name("$a".into()),
                Tok::Sym("="),
                Tok::Num(1000.0),
                Tok::Sym("<="),
                Tok::Num(2.5),
                Tok::Sym(";"),
                Tok::Name("b".into()),
                Tok::Sym("."),
                Tok::Name("c".into()),
                Tok::End,
            ]
        );
    }

    #[test]
    fn positions_are_one_based_lines_and_columns() {
        let tokens = lex("a\n  \"x\"").unwrap();
        assert_eq!(tokens[1].pos, Pos { line: 2, col: 3 });
        assert_eq!(tokens[2].pos, Pos { line: 2, col: 6 });
    }

    #[test]
    fn malformed_input_is_a_syntax_error_with_a_position() {
        for (text, message) in [
            (
                "a = \"open",
                "Line 1, Col 5: unterminated string: expected '\"'",
            ),
            (
                "/* never closed",
                "Line 1, Col 1: unterminated comment: expected '*/'",
            ),
            (
                "a & b",
                "Line 1, Col 3: unexpected character '&' (did you mean '&&'?)",
            ),
            (
                "1e",
                "Line 1, Col 1: malformed number: expected digits after 'e'",
            ),
            ("1e999", "Line 1, Col 1: the number 1e999 is out of range"),
            (" $9", "Line 1, Col 2: expected a name after '$'"),
        ] {
            let err = lex(text).unwrap_err();
            assert_eq!(err.code, SYNTAX);
            assert_eq!(err.message, message, "{text}");
        }
    }
}
