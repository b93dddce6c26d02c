//! A task's resource files (downloaded before its command runs) and output files (uploaded
//! after it ends), as Azure Batch's bodies carry them, with the rules that keep every path they
//! name inside the task's own directory.

mod output;
mod pattern;

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use output::{
    ContainerDestination, OutputDestination, OutputFile, UploadCondition, UploadHeader,
    UploadOptions, UPLOAD_HEADERS,
};
pub use pattern::Pattern;

/// The files a task moves and what its command runs in, kept with the task (one column, null
/// for most tasks).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskFiles {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_files: Vec<ResourceFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<OutputFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub application_package_references: Vec<PackageReference>,
    /// The container the task's command runs in, if not in its node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_settings: Option<crate::domain::container::ContainerSettings>,
}

impl TaskFiles {
    pub fn is_empty(&self) -> bool {
        self.resource_files.is_empty()
            && self.output_files.is_empty()
            && self.application_package_references.is_empty()
            && self.container_settings.is_none()
    }

    /// Whether the task has anything to put in place before its command (it is `preparing`
    /// meanwhile).
    pub fn prepares(&self) -> bool {
        !self.resource_files.is_empty() || !self.application_package_references.is_empty()
    }
}

/// Azure's `ApplicationPackageReference`: an application, and a version of it (else its
/// default version).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PackageReference {
    pub application_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A pool's package reference, as given and with the version it resolved to when the pool was
/// made (its default version then, for one that named none).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolPackage {
    pub application_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub resolved: String,
}

impl PoolPackage {
    /// The reference as the pool was given it.
    pub fn reference(&self) -> PackageReference {
        PackageReference {
            application_id: self.application_id.clone(),
            version: self.version.clone(),
        }
    }
}

/// The variable that tells a task where a package is, as Azure names it on Linux:
/// `AZ_BATCH_APP_PACKAGE_<ID>_<VERSION>` (the id in capitals), or without the version for a
/// reference that named none; characters other than letters and digits become `_`.
pub fn package_variable(application_id: &str, version: Option<&str>) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    let mut name = format!(
        "AZ_BATCH_APP_PACKAGE_{}",
        clean(&application_id.to_uppercase())
    );
    if let Some(v) = version {
        name.push('_');
        name.push_str(&clean(v));
    }
    name
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_variables_are_named_as_on_azure_linux_nodes() {
        assert_eq!(
            package_variable("blender", Some("2.7")),
            "AZ_BATCH_APP_PACKAGE_BLENDER_2_7"
        );
        assert_eq!(
            package_variable("my-app", None),
            "AZ_BATCH_APP_PACKAGE_MY_APP"
        );
    }

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
