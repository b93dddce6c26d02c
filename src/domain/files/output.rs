//! A task's output files: where they go, when, and with which blob headers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{check_url, invalid, Invalid, Pattern};

/// Azure's `OutputFile`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutputFile {
    pub file_pattern: String,
    pub destination: OutputDestination,
    pub upload_options: UploadOptions,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutputDestination {
    pub container: Option<ContainerDestination>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerDestination {
    pub container_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upload_headers: Vec<UploadHeader>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_reference: Option<Value>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UploadHeader {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UploadOptions {
    pub upload_condition: UploadCondition,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UploadCondition {
    TaskSuccess,
    TaskFailure,
    TaskCompletion,
}

impl UploadCondition {
    /// Whether files are uploaded after a command that exited with `exit_code` (Azure: success
    /// is exit code 0).
    pub fn applies(self, exit_code: i64) -> bool {
        match self {
            UploadCondition::TaskSuccess => exit_code == 0,
            UploadCondition::TaskFailure => exit_code != 0,
            UploadCondition::TaskCompletion => true,
        }
    }
}

/// The blob headers an upload may set, as Azure's `uploadHeaders` names them.
pub const UPLOAD_HEADERS: &[&str] = &[
    "Content-Type",
    "Content-Encoding",
    "Content-Language",
    "Content-Disposition",
    "Cache-Control",
];

impl OutputFile {
    /// Checks everything; `at` names it in errors (`outputFiles[0]`).
    pub fn check(&self, at: &str) -> Result<(), Invalid> {
        Pattern::parse(&self.file_pattern)
            .map_err(|why| invalid(format!("{at}.filePattern"), &self.file_pattern, why))?;
        let Some(c) = &self.destination.container else {
            return Err(invalid(
                format!("{at}.destination.container"),
                "",
                "an output file needs a container destination",
            ));
        };
        check_url(
            &format!("{at}.destination.container.containerUrl"),
            &c.container_url,
        )?;
        if c.identity_reference.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(invalid(
                format!("{at}.destination.container.identityReference"),
                "",
                "not supported by this server: managed identities (give a SAS in containerUrl instead)",
            ));
        }
        if let Some(path) = c.path.as_deref().filter(|p| !p.is_empty()) {
            if path.starts_with('/') || path.split('/').any(|p| p == "..") {
                return Err(invalid(
                    format!("{at}.destination.container.path"),
                    path,
                    "must be a blob name or virtual directory inside the container (no leading '/', no '..')",
                ));
            }
        }
        for h in &c.upload_headers {
            if !UPLOAD_HEADERS
                .iter()
                .any(|k| k.eq_ignore_ascii_case(&h.name))
            {
                return Err(invalid(
                    format!("{at}.destination.container.uploadHeaders"),
                    &h.name,
                    format!(
                        "not supported by this server: the header {:?} (supported: {})",
                        h.name,
                        UPLOAD_HEADERS.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}
