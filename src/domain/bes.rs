//! BES web services: the command template and its placeholders, with no I/O.
//!
//! A service's command is a shell command with placeholders: `{in:NAME}` and `{out:NAME}` become
//! the local paths of an input or output (relative to the task's working directory, where the
//! command runs), `{param:NAME}` the value of a global parameter, shell-quoted.

/// The shared classic BES environment lives in an account no client can sign as ('.' is not
/// allowed in account names), in one pool.
pub const CLASSIC_ACCOUNT: &str = ".classic";
pub const CLASSIC_POOL: &str = "classic";

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// BES's AzureBlobDataReference, as clients send it (all four may be null or absent).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct DataReference {
    #[serde(default)]
    pub connection_string: Option<String>,
    #[serde(default)]
    pub relative_location: Option<String>,
    #[serde(default)]
    pub base_location: Option<String>,
    #[serde(default)]
    pub sas_blob_token: Option<String>,
}

/// A BES job as the API checked it: the command with its placeholders filled, the image of its
/// service, and where each input and output is (the reference as the client gave it, and its
/// file in the task's working directory). Stored as the job's `request` and read back whole by
/// the driver.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct JobRequest {
    pub command: String,
    pub image: Option<String>,
    pub inputs: BTreeMap<String, Placed>,
    pub outputs: BTreeMap<String, Placed>,
    pub params: BTreeMap<String, String>,
}

/// An input or output of a job: its reference (None: an output with no place of its own, which
/// goes under the Batch File Conventions only) and its file in the working directory.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Placed {
    #[serde(rename = "ref")]
    pub reference: Option<DataReference>,
    pub file: String,
}

wire_enum!(
    /// A BES job's phase, as the bes_jobs table stores it.
    Phase {
        NotStarted = "notstarted",
        Staging = "staging",
        Running = "running",
        Uploading = "uploading",
        Finished = "finished",
        Failed = "failed",
        Cancelled = "cancelled",
    }
);

impl Phase {
    /// BES's StatusCode for a phase.
    pub fn status_code(self) -> &'static str {
        match self {
            Phase::NotStarted => "NotStarted",
            Phase::Finished => "Finished",
            Phase::Failed => "Failed",
            Phase::Cancelled => "Cancelled",
            Phase::Staging | Phase::Running | Phase::Uploading => "Running",
        }
    }
}

/// One placeholder of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placeholder {
    Input(String),
    Output(String),
    Param(String),
}

/// A placeholder's opening text and how to make it from its name.
type Kind = (&'static str, fn(String) -> Placeholder);

const KINDS: [Kind; 3] = [
    ("{in:", Placeholder::Input),
    ("{out:", Placeholder::Output),
    ("{param:", Placeholder::Param),
];

/// Splits a template into literal text and placeholders. Braces that do not open a placeholder
/// (`${HOME}`, `{a,b}`) are text.
pub fn parse(template: &str) -> Result<Vec<Result<String, Placeholder>>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    let mut text = String::new();
    while !rest.is_empty() {
        let found = KINDS
            .iter()
            .find_map(|(prefix, make)| rest.strip_prefix(prefix).map(|after| (after, make)));
        match found {
            Some((after, make)) => {
                let end = after
                    .find('}')
                    .ok_or_else(|| format!("a placeholder is not closed: {:?}", truncate(rest)))?;
                let name = &after[..end];
                if name.is_empty() {
                    return Err(format!("a placeholder names nothing: {:?}", truncate(rest)));
                }
                if !text.is_empty() {
                    parts.push(Ok(std::mem::take(&mut text)));
                }
                parts.push(Err(make(name.to_string())));
                rest = &after[end + 1..];
            }
            None => {
                let c = rest.chars().next().expect("not empty");
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !text.is_empty() {
        parts.push(Ok(text));
    }
    Ok(parts)
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Input and output names become file names: letters, digits, `_`, `-` and `.`.
pub fn check_port_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("must be 1 to 64 characters".into());
    }
    if name.starts_with('.') {
        return Err("must not start with '.'".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "contains {bad:?}; only letters, digits, '_', '-' and '.' are allowed"
        ));
    }
    Ok(())
}

/// `.csv`, `.ilearner`: a dot and letters or digits.
pub fn check_extension(ext: &str) -> Result<(), String> {
    match ext.strip_prefix('.') {
        Some(rest)
            if !rest.is_empty()
                && rest.len() <= 16
                && rest.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            Ok(())
        }
        _ => Err("must be a dot followed by letters or digits, like .csv".into()),
    }
}

/// The file an input or output has in the task's working directory.
pub fn input_path(name: &str, ext: &str) -> String {
    format!("inputs/{name}{ext}")
}

pub fn output_path(name: &str, ext: &str) -> String {
    format!("outputs/{name}{ext}")
}

/// Single-quotes a value for `sh`.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// The command line of one job: placeholders replaced by paths and quoted parameter values.
/// Every name has been checked against the service, so a missing one is a bug upstream.
pub fn render(
    template: &str,
    inputs: &BTreeMap<String, String>,
    outputs: &BTreeMap<String, String>,
    params: &BTreeMap<String, String>,
) -> Result<String, String> {
    let mut out = String::new();
    for part in parse(template)? {
        match part {
            Ok(text) => out.push_str(&text),
            Err(Placeholder::Input(n)) => {
                out.push_str(inputs.get(&n).ok_or(format!("no input {n}"))?)
            }
            Err(Placeholder::Output(n)) => {
                out.push_str(outputs.get(&n).ok_or(format!("no output {n}"))?)
            }
            Err(Placeholder::Param(n)) => out.push_str(&shell_quote(
                params.get(&n).ok_or(format!("no parameter {n}"))?,
            )),
        }
    }
    Ok(out)
}

/// A new BES job or Pool Service pool id: 32 lower-case hex digits, as Azure ML makes them.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows written before the request was typed (a hand-built JSON object) read back as the
    /// type, and the type writes that same shape.
    #[test]
    fn a_stored_request_reads_back_in_the_shape_it_was_written() {
        let stored = serde_json::json!({
            "command": "cp inputs/a.csv outputs/o",
            "image": null,
            "inputs": {"a": {"ref": {"ConnectionString": "UseDevelopmentStorage=true",
                                      "RelativeLocation": "c/a.csv", "BaseLocation": null,
                                      "SasBlobToken": null}, "file": "inputs/a.csv"}},
            "outputs": {"o": {"ref": null, "file": "outputs/o"}},
            "params": {"n": "1"},
        });
        let request: JobRequest = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(request.inputs["a"].file, "inputs/a.csv");
        assert_eq!(
            request.inputs["a"]
                .reference
                .as_ref()
                .unwrap()
                .relative_location
                .as_deref(),
            Some("c/a.csv")
        );
        assert_eq!(request.outputs["o"].reference, None);
        assert_eq!(serde_json::to_value(&request).unwrap(), stored);
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_are_found_and_other_braces_left_alone() {
        let parts =
            parse("sort {in:input1} > {out:output1} # ${HOME} {a,b} {param:Random seed}").unwrap();
        let holders: Vec<_> = parts.iter().filter_map(|p| p.clone().err()).collect();
        assert_eq!(
            holders,
            vec![
                Placeholder::Input("input1".into()),
                Placeholder::Output("output1".into()),
                Placeholder::Param("Random seed".into()),
            ]
        );
        assert!(parse("cat {in:x").unwrap_err().contains("not closed"));
        assert!(parse("cat {in:}").unwrap_err().contains("names nothing"));
    }

    #[test]
    fn rendering_quotes_parameters_so_they_cannot_inject() {
        let cmd = render(
            "tool {in:a} {out:b} --seed {param:s}",
            &map(&[("a", "inputs/a.csv")]),
            &map(&[("b", "outputs/b.csv")]),
            &map(&[("s", "1'; rm -rf / #")]),
        )
        .unwrap();
        assert_eq!(
            cmd,
            r"tool inputs/a.csv outputs/b.csv --seed '1'\''; rm -rf / #'"
        );
    }

    #[test]
    fn names_and_extensions_are_checked() {
        assert!(check_port_name("input1").is_ok());
        assert!(check_port_name("in put").is_err());
        assert!(check_port_name("../x").is_err());
        assert!(check_port_name(".hidden").is_err());
        assert!(check_extension(".csv").is_ok());
        assert!(check_extension("csv").is_err());
        assert!(check_extension(".c/v").is_err());
        assert_eq!(new_id().len(), 32);
    }
}
