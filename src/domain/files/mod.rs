//! A task's resource files (downloaded before its command runs) and output files (uploaded
//! after it ends), as Azure Batch's bodies carry them, with the rules that keep every path they
//! name inside the task's own directory.

mod pattern;

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use pattern::Pattern;

/// The files a task moves, kept with the task (one column, null for most tasks).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskFiles {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_files: Vec<ResourceFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<OutputFile>,
}

impl TaskFiles {
    pub fn is_empty(&self) -> bool {
        self.resource_files.is_empty() && self.output_files.is_empty()
    }
}

/// Azure's `ResourceFile`: one `httpUrl` file, or the blobs of a container (`storageContainerUrl`
/// with a SAS, optionally only those under `blobPrefix`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_storage_container_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_container_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_reference: Option<Value>,
}

/// Where a resource file comes from, once checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Source<'a> {
    Http(&'a str),
    Container {
        url: &'a str,
        prefix: Option<&'a str>,
    },
    /// A container of the account's linked storage account.
    AutoStorage {
        container: &'a str,
        prefix: Option<&'a str>,
    },
}

/// A property at fault: its name (as the request spells it), its value, and why.
#[derive(Debug, PartialEq)]
pub struct Invalid {
    pub property: String,
    pub value: String,
    pub reason: String,
}

fn invalid(property: String, value: &str, reason: impl Into<String>) -> Invalid {
    Invalid {
        property,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Azure's default mode for a downloaded file on Linux.
pub const DEFAULT_FILE_MODE: u32 = 0o770;

impl ResourceFile {
    /// Where the file comes from; `at` names it in errors (`resourceFiles[2]`).
    pub fn source(&self, at: &str) -> Result<Source<'_>, Invalid> {
        if self
            .identity_reference
            .as_ref()
            .is_some_and(|v| !v.is_null())
        {
            return Err(invalid(
                format!("{at}.identityReference"),
                "",
                "not supported by this server: managed identities (give a SAS in the URL instead)",
            ));
        }
        let sources = [
            &self.auto_storage_container_name,
            &self.storage_container_url,
            &self.http_url,
        ];
        let chosen = match (
            given(&self.auto_storage_container_name),
            given(&self.http_url),
            given(&self.storage_container_url),
        ) {
            _ if sources.iter().filter(|s| given(s).is_some()).count() > 1 => {
                return Err(invalid(
                    at.to_string(),
                    "",
                    "give exactly one of autoStorageContainerName, storageContainerUrl and httpUrl, not several",
                ))
            }
            (Some(container), None, None) => Source::AutoStorage {
                container,
                prefix: given(&self.blob_prefix),
            },
            (None, Some(url), None) => {
                check_url(&format!("{at}.httpUrl"), url)?;
                Source::Http(url)
            }
            (None, None, Some(url)) => {
                check_url(&format!("{at}.storageContainerUrl"), url)?;
                Source::Container {
                    url,
                    prefix: given(&self.blob_prefix),
                }
            }
            _ => {
                return Err(invalid(
                    at.to_string(),
                    "",
                    "give one of autoStorageContainerName, storageContainerUrl and httpUrl",
                ))
            }
        };
        if matches!(chosen, Source::Http(_)) && given(&self.blob_prefix).is_some() {
            return Err(invalid(
                format!("{at}.blobPrefix"),
                self.blob_prefix.as_deref().unwrap_or_default(),
                "blobPrefix applies only to storageContainerUrl",
            ));
        }
        Ok(chosen)
    }

    /// Checks everything; the path below the working directory it writes to.
    pub fn check(&self, at: &str) -> Result<PathBuf, Invalid> {
        let source = self.source(at)?;
        self.mode(at)?;
        let path = self.file_path.as_deref().unwrap_or_default();
        if path.trim().is_empty() {
            if matches!(source, Source::Http(_)) {
                return Err(invalid(
                    format!("{at}.filePath"),
                    path,
                    "an httpUrl resource file needs a filePath",
                ));
            }
            return Ok(PathBuf::new());
        }
        below(path).ok_or_else(|| {
            invalid(
                format!("{at}.filePath"),
                path,
                "must be a relative path that stays inside the task's working directory (no '..', no leading '/')",
            )
        })
    }

    /// The file's mode: `fileMode` in octal, else Azure's default.
    pub fn mode(&self, at: &str) -> Result<u32, Invalid> {
        match given(&self.file_mode) {
            None => Ok(DEFAULT_FILE_MODE),
            Some(m) => u32::from_str_radix(m.trim(), 8)
                .ok()
                .filter(|mode| *mode <= 0o7777)
                .ok_or_else(|| {
                    invalid(
                        format!("{at}.fileMode"),
                        m,
                        "must be an octal file mode such as 0644 or 0755",
                    )
                }),
        }
    }
}

/// A field unless it is absent or blank.
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.trim().is_empty())
}

fn check_url(property: &str, url: &str) -> Result<(), Invalid> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(()),
        _ => Err(invalid(
            property.to_string(),
            url,
            "must be an http or https URL",
        )),
    }
}

/// An application package version: 1 to 64 letters, digits, `.`, `-` and `_` (it names a file).
pub fn check_version(version: &str) -> Result<(), &'static str> {
    let ok = !version.is_empty()
        && version.len() <= 64
        && version != "."
        && version != ".."
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if ok {
        Ok(())
    } else {
        Err("must be 1 to 64 letters, digits, '.', '-' and '_'")
    }
}

/// `rel` as plain names below a directory, if it stays there: no root, no `..`, `.` dropped.
pub fn below(rel: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Whether an address is the server host's own (loopback, unspecified), link-local (where cloud
/// metadata services answer), multicast or broadcast: places a URL a task's owner gives must not
/// make the server reach, since it is the server, not the node, that fetches and uploads.
pub fn is_host_local(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_host_local(IpAddr::V4(v4));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_local_addresses_are_told_apart() {
        for local in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "169.254.169.254",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(is_host_local(local.parse().unwrap()), "{local}");
        }
        for remote in [
            "10.0.0.5",
            "192.168.1.2",
            "172.17.0.2",
            "8.8.8.8",
            "2001:db8::1",
            "fd00::1",
        ] {
            assert!(!is_host_local(remote.parse().unwrap()), "{remote}");
        }
    }

    #[test]
    fn resource_files_name_one_source_and_a_path_inside() {
        let http = |path: &str| ResourceFile {
            http_url: Some("https://example.com/a".into()),
            file_path: Some(path.into()),
            ..Default::default()
        };
        assert_eq!(
            http("in/a.txt").check("r").unwrap(),
            PathBuf::from("in/a.txt")
        );
        assert_eq!(http("../x").check("r").unwrap_err().property, "r.filePath");
        assert_eq!(
            http("/etc/x").check("r").unwrap_err().property,
            "r.filePath"
        );
        assert_eq!(http("").check("r").unwrap_err().property, "r.filePath");
        let both = ResourceFile {
            storage_container_url: Some("https://a.blob.core.windows.net/c?sig=x".into()),
            ..http("a")
        };
        assert!(both.check("r").is_err());
        let mode = ResourceFile {
            file_mode: Some("0755".into()),
            ..http("a")
        };
        assert_eq!(mode.mode("r").unwrap(), 0o755);
        let bad_mode = ResourceFile {
            file_mode: Some("rwx".into()),
            ..http("a")
        };
        assert_eq!(bad_mode.check("r").unwrap_err().property, "r.fileMode");
        let ftp = ResourceFile {
            http_url: Some("ftp://example.com/a".into()),
            ..http("a")
        };
        assert_eq!(ftp.check("r").unwrap_err().property, "r.httpUrl");
    }
}
