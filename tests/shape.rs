//! The size rule of src/ (../shared/STYLE.md): no function over 80 lines and no file over 400 lines
//! (counted up to its `#[cfg(test)]` module) unless a `// Long: <reason>` line says why, in the
//! file's first three lines for a file, or among the comments and attributes right above a function.
//! Code is rustfmt-formatted, so a function ends at the first `}` at its own indentation.

#[path = "common/source.rs"]
mod source;

use std::path::Path;

const MAX_FILE_LINES: usize = 400;
const MAX_FN_LINES: usize = 80;
const REASON: &str = "// Long: ";

/// The indentation of a line that starts a function, if it does.
fn fn_start(line: &str) -> Option<&str> {
    let body = line.trim_start();
    let indent = &line[..line.len() - body.len()];
    let mut rest = body;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    rest.starts_with("fn ").then_some(indent)
}

/// Whether the lines above `start` (doc comments, comments and attributes) give a reason.
fn reason_above(lines: &[&str], start: usize) -> bool {
    lines[..start]
        .iter()
        .rev()
        .map(|l| l.trim_start())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| l.starts_with(REASON))
}

/// The functions over the limit without a reason, as "file:line name (N lines)".
fn long_functions(file: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(indent) = fn_start(line) else {
            continue;
        };
        let close = format!("{indent}}}");
        let Some(len) = lines[i + 1..].iter().position(|l| *l == close) else {
            continue;
        };
        let len = len + 2;
        if len > MAX_FN_LINES && !reason_above(&lines, i) {
            found.push(format!("{file}:{} {} ({len} lines)", i + 1, line.trim()));
        }
    }
    found
}

fn file_too_long(text: &str) -> Option<usize> {
    let lines = text
        .lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count();
    let reason = text.lines().take(3).any(|l| l.starts_with(REASON));
    (lines > MAX_FILE_LINES && !reason).then_some(lines)
}

#[test]
fn functions_and_files_stay_short_or_say_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = source::rust_files(&root.join("src"));
    let mut found = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(root).unwrap().display().to_string();
        if let Some(lines) = file_too_long(&text) {
            found.push(format!("{name}: {lines} lines"));
        }
        found.extend(long_functions(&name, &text));
    }
    assert!(
        found.is_empty(),
        "over the size rule (split them, or add a `{REASON}<reason>` line):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_measures_functions_and_sees_reasons() {
    let body = "    x();\n".repeat(MAX_FN_LINES);
    let long = format!("pub async fn big() {{\n{body}}}\n");
    assert_eq!(long_functions("f.rs", &long).len(), 1);
    let excused = format!("/// Docs.\n{REASON}one match arm per operation\n#[allow(x)]\n{long}");
    assert!(long_functions("f.rs", &excused).is_empty());
    let short = format!("    fn small() {{\n{}    }}\n", "        x();\n".repeat(10));
    assert!(long_functions("f.rs", &short).is_empty());
    let file = "x\n".repeat(MAX_FILE_LINES + 1);
    assert_eq!(file_too_long(&file), Some(MAX_FILE_LINES + 1));
    assert_eq!(file_too_long(&format!("{REASON}generated\n{file}")), None);
    assert_eq!(
        file_too_long(&format!("{}#[cfg(test)]\n{file}", "x\n".repeat(5))),
        None
    );
}
