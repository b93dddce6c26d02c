//! Plain aligned tables, as `squeue` and `sinfo` print them, and the JSON twin of each answer.

use serde_json::Value;

use super::client::Output;

/// Columns padded to their widest cell; the last column is not padded.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// Prints `json` as JSON or `text` for people, as the output option says.
pub fn print(output: Output, json: &Value, text: impl FnOnce() -> String) {
    match output {
        Output::Json => println!("{json:#}"),
        Output::Table => print!("{}", text()),
    }
}

/// A JSON value as a cell: strings bare, numbers as they are, absent as `-`.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_lines_end_without_spaces() {
        let rows = vec![
            vec!["a-long-pool".to_string(), "1".to_string(), "x".to_string()],
            vec!["p".to_string(), "20".to_string(), "".to_string()],
        ];
        let text = render(&["POOL", "NODES", "NOTE"], &rows);
        assert_eq!(
            text,
            "POOL         NODES  NOTE\na-long-pool  1      x\np            20\n"
        );
    }
}
