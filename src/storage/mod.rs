//! Blob storage for BES inputs and outputs, through `object_store`: Azure Blob Storage (a
//! connection string, or a base URL with a SAS token; the Azurite emulator included), and `s3://`
//! and `file://` locations under the roots the server is configured with. Also the Batch File
//! Conventions' container naming and the read-only SAS tokens results carry.

mod azure;
mod container;
mod conventions;
mod file;
mod guard;
mod s3;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

pub use crate::domain::bes::DataReference;
pub use azure::{container_sas, parse_connection_string, read_sas, AzureAccount};
pub use container::{without_query, Container};
pub use conventions::job_container;
pub use guard::check_url;

/// Why a reference cannot be used, with BES's detail code.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobError {
    pub code: &'static str,
    pub message: String,
}

impl BlobError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl std::error::Error for BlobError {}

impl std::fmt::Display for BlobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// Where `s3://` and `file://` references may point: prefixes the operator configured.
#[derive(Clone, Debug, Default)]
pub struct Roots(pub Vec<String>);

impl Roots {
    fn allows(&self, url: &str) -> bool {
        self.0.iter().any(|root| {
            let root = root.trim_end_matches('/');
            url == root || url.starts_with(&format!("{root}/"))
        })
    }
}

/// `container/blob/path` (a leading `/` allowed) -> (container, blob path).
fn split_relative(relative: &str) -> Result<(String, String), BlobError> {
    let trimmed = relative.trim().trim_start_matches('/');
    let (container, blob) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if container.is_empty() {
        return Err(BlobError::new(
            "ContainerSegmentInvalid",
            format!("RelativeLocation {relative:?} names no container (expected container/blob)."),
        ));
    }
    if blob.is_empty() || blob.ends_with('/') {
        return Err(BlobError::new(
            "InputBlobRelativeLocationInvalid",
            format!("RelativeLocation {relative:?} names no blob (expected container/blob)."),
        ));
    }
    Ok((container.to_string(), blob.to_string()))
}

fn object_path(path: &str, whole: &str) -> Result<ObjectPath, BlobError> {
    ObjectPath::parse(path).map_err(|e| {
        BlobError::new(
            "InvalidBlob",
            format!("{whole:?} is not a usable blob path: {e}"),
        )
    })
}

/// A resolved reference: a store and the object in it.
#[derive(Clone, Debug)]
pub struct Blob {
    pub store: Arc<dyn ObjectStore>,
    pub path: ObjectPath,
    pub place: Place,
}

/// Where a blob is, enough to describe it in results.
#[derive(Clone, Debug, PartialEq)]
pub enum Place {
    /// With the account key: results get a read-only SAS.
    AzureKey {
        account: AzureAccount,
        container: String,
        blob: String,
    },
    /// Reached through the caller's SAS: results echo it.
    AzureSas {
        base: String,
        relative: String,
        sas: String,
    },
    /// `s3://` or `file://`: `base` is the root URL, `relative` the rest.
    Url { base: String, relative: String },
}

/// Resolves a reference. Nothing is read or written here: an unreachable store shows on use.
pub fn resolve(r: &DataReference, roots: &Roots) -> Result<Blob, BlobError> {
    crate::install_tls();
    let conn = given(&r.connection_string);
    let base = given(&r.base_location);
    let relative = given(&r.relative_location);
    match (conn, base, relative) {
        (Some(conn), _, Some(relative)) => azure::with_key(conn, relative),
        (None, Some(base), Some(relative)) if base.starts_with("http") => {
            azure::with_sas(base, relative, r.sas_blob_token.as_deref())
        }
        (None, Some(base), Some(relative)) if base.starts_with("s3://") || base.starts_with("file://") => {
            under_root(base, relative, roots)
        }
        (None, Some(base), Some(_)) => Err(BlobError::new(
            "InvalidBlob",
            format!("BaseLocation {base:?} is neither an http(s) blob URL nor an s3:// or file:// location."),
        )),
        _ => Err(BlobError::new(
            "MissingInputBlobInformation",
            "Provide a valid connection string and relative path or URI: ConnectionString and RelativeLocation, or BaseLocation, RelativeLocation and SasBlobToken.",
        )),
    }
}

/// A field of a reference, unless it is absent or blank (clients send both for "none").
fn given(field: &Option<String>) -> Option<&str> {
    field.as_deref().filter(|s| !s.trim().is_empty())
}

/// An `s3://` or `file://` location, which must lie under a root the operator configured.
fn under_root(base: &str, relative: &str, roots: &Roots) -> Result<Blob, BlobError> {
    let base = base.trim_end_matches('/');
    let relative = relative.trim_start_matches('/');
    let whole = format!("{base}/{relative}");
    if !roots.allows(&whole) {
        return Err(BlobError::new(
            "InvalidBlob",
            format!("{whole:?} is not under a storage root this server allows (--storage-root)."),
        ));
    }
    let path = object_path(relative, &whole)?;
    let store = match base.strip_prefix("s3://") {
        Some(location) => s3::store(location)?,
        None => file::store(base)?,
    };
    Ok(Blob {
        store,
        path,
        place: Place::Url {
            base: format!("{base}/"),
            relative: relative.to_string(),
        },
    })
}

impl Blob {
    /// Makes the container of an Azure blob exist (object_store writes blobs, not containers).
    pub async fn ensure_container(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let Place::AzureKey {
            account, container, ..
        } = &self.place
        else {
            return Ok(());
        };
        azure::create_container(http, account, container).await
    }

    /// The reference BES results carry: the caller's own SAS, a new read-only one, or the URL.
    pub fn result_reference(&self, now: DateTime<Utc>) -> DataReference {
        match &self.place {
            Place::AzureKey {
                account,
                container,
                blob,
            } => DataReference {
                connection_string: None,
                base_location: Some(format!("{}/", account.endpoint)),
                relative_location: Some(format!("{container}/{blob}")),
                sas_blob_token: Some(read_sas(
                    account,
                    container,
                    blob,
                    now + chrono::Duration::days(7),
                )),
            },
            Place::AzureSas {
                base,
                relative,
                sas,
            } => DataReference {
                connection_string: None,
                base_location: Some(base.clone()),
                relative_location: Some(relative.clone()),
                sas_blob_token: Some(sas.clone()),
            },
            Place::Url { base, relative } => DataReference {
                connection_string: None,
                base_location: Some(base.clone()),
                relative_location: Some(relative.clone()),
                sas_blob_token: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_need_a_container_and_a_blob() {
        let r = |rel: &str| DataReference {
            connection_string: Some("UseDevelopmentStorage=true".into()),
            relative_location: Some(rel.into()),
            ..Default::default()
        };
        let roots = Roots::default();
        assert!(resolve(&r("/c/in.csv"), &roots).is_ok());
        assert!(resolve(&r("c/dir/in.csv"), &roots).is_ok());
        assert_eq!(
            resolve(&r("c"), &roots).unwrap_err().code,
            "InputBlobRelativeLocationInvalid"
        );
        assert_eq!(
            resolve(&r("/"), &roots).unwrap_err().code,
            "ContainerSegmentInvalid"
        );
        assert_eq!(
            resolve(&DataReference::default(), &roots).unwrap_err().code,
            "MissingInputBlobInformation"
        );
    }

    #[test]
    fn file_locations_must_be_under_a_root() {
        let r = DataReference {
            base_location: Some("file:///srv/data/".into()),
            relative_location: Some("in/a.csv".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(&r, &Roots::default()).unwrap_err().code,
            "InvalidBlob"
        );
        let dir = std::env::temp_dir().join(format!("batchpool-roots-{}", std::process::id()));
        let root = url::Url::from_directory_path(&dir).unwrap().to_string();
        let ok = DataReference {
            base_location: Some(root.clone()),
            relative_location: Some("in/a.csv".into()),
            ..Default::default()
        };
        assert!(resolve(&ok, &Roots(vec![root.clone()])).is_ok());
        let escape = DataReference {
            base_location: Some(root.clone()),
            relative_location: Some("../etc/passwd".into()),
            ..Default::default()
        };
        assert!(resolve(&escape, &Roots(vec![root])).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
