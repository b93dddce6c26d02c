//! Blob storage for BES inputs and outputs, through `object_store`: Azure Blob Storage (a
//! connection string, or a base URL with a SAS token; the Azurite emulator included), and `s3://`
//! and `file://` locations under the roots the server is configured with. Also the Batch File
//! Conventions' container naming and the read-only SAS tokens results carry.

use std::sync::Arc;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
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

/// An Azure storage account's credentials, from a connection string.
#[derive(Clone, PartialEq)]
pub struct AzureAccount {
    pub name: String,
    pub key: String,
    /// The blob service URL, without a trailing slash (path style for the emulator).
    pub endpoint: String,
}

impl std::fmt::Debug for AzureAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureAccount")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Azurite's well-known account (UseDevelopmentStorage=true).
const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Parses `Key=Value;...` (keys case-insensitive, values may hold `=`).
pub fn parse_connection_string(s: &str) -> Result<AzureAccount, BlobError> {
    let bad = |why: &str| {
        BlobError::new(
            "InvalidBlobConnectionString",
            format!("The connection string is invalid: {why}."),
        )
    };
    let mut pairs = std::collections::HashMap::new();
    for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(&format!("{part:?} is not Key=Value")))?;
        pairs.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    if pairs
        .get("usedevelopmentstorage")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        return Ok(AzureAccount {
            name: EMULATOR_ACCOUNT.into(),
            key: EMULATOR_KEY.into(),
            endpoint: format!("http://127.0.0.1:10000/{EMULATOR_ACCOUNT}"),
        });
    }
    let name = pairs
        .get("accountname")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| bad("AccountName is missing"))?
        .clone();
    let key = pairs
        .get("accountkey")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| bad("AccountKey is missing"))?
        .clone();
    if base64::engine::general_purpose::STANDARD
        .decode(&key)
        .is_err()
    {
        return Err(bad("AccountKey is not base64"));
    }
    let endpoint = match pairs.get("blobendpoint").filter(|v| !v.is_empty()) {
        Some(e) => {
            let url = url::Url::parse(e).map_err(|_| bad("BlobEndpoint is not a URL"))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(bad("BlobEndpoint must be http or https"));
            }
            e.trim_end_matches('/').to_string()
        }
        None => {
            let protocol = pairs
                .get("defaultendpointsprotocol")
                .map(String::as_str)
                .unwrap_or("https");
            if !matches!(protocol, "http" | "https") {
                return Err(bad("DefaultEndpointsProtocol must be http or https"));
            }
            let suffix = pairs
                .get("endpointsuffix")
                .map(String::as_str)
                .unwrap_or("core.windows.net");
            format!("{protocol}://{name}.blob.{suffix}")
        }
    };
    Ok(AzureAccount {
        name,
        key,
        endpoint,
    })
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

fn azure_store(
    endpoint: &str,
    account: &str,
    container: &str,
    credential: AzureCredential<'_>,
) -> Result<Arc<dyn ObjectStore>, BlobError> {
    use object_store::azure::MicrosoftAzureBuilder;
    crate::install_tls();
    let mut builder = MicrosoftAzureBuilder::new()
        .with_account(account)
        .with_container_name(container)
        .with_endpoint(endpoint.to_string())
        .with_allow_http(endpoint.starts_with("http://"))
        .with_retry(object_store::RetryConfig {
            max_retries: 2,
            ..Default::default()
        });
    builder = match credential {
        AzureCredential::Key(key) => builder.with_access_key(key),
        AzureCredential::Sas(pairs) => builder.with_sas_authorization(pairs),
    };
    builder.build().map(|s| Arc::new(s) as _).map_err(|e| {
        BlobError::new(
            "InvalidBlobConnectionString",
            format!("The storage account cannot be used: {e}"),
        )
    })
}

enum AzureCredential<'a> {
    Key(&'a str),
    Sas(Vec<(String, String)>),
}

/// The account URL of a blob service URL and the path after it: `https://acct.blob.../c/b` has
/// the account in the host; the emulator's `http://127.0.0.1:10000/acct/c/b` in the first segment.
fn split_service_url(url: &url::Url) -> Result<(String, String, String), BlobError> {
    let host = url.host_str().unwrap_or_default();
    let path = url.path().trim_start_matches('/');
    let path_style =
        host.parse::<std::net::IpAddr>().is_ok() || host == "localhost" || !host.contains(".blob.");
    let origin = url.origin().ascii_serialization();
    if path_style {
        let (account, rest) = path.split_once('/').unwrap_or((path, ""));
        if account.is_empty() {
            return Err(BlobError::new(
                "InvalidBlob",
                format!("{url} names no storage account."),
            ));
        }
        Ok((
            format!("{origin}/{account}"),
            account.to_string(),
            rest.to_string(),
        ))
    } else {
        let account = host.split('.').next().unwrap_or_default().to_string();
        Ok((origin, account, path.to_string()))
    }
}

/// Resolves a reference. Nothing is read or written here: an unreachable store shows on use.
pub fn resolve(r: &DataReference, roots: &Roots) -> Result<Blob, BlobError> {
    crate::install_tls();
    let conn = r
        .connection_string
        .as_deref()
        .filter(|s| !s.trim().is_empty());
    let base = r.base_location.as_deref().filter(|s| !s.trim().is_empty());
    let relative = r
        .relative_location
        .as_deref()
        .filter(|s| !s.trim().is_empty());
    match (conn, base, relative) {
        (Some(conn), _, Some(relative)) => {
            let account = parse_connection_string(conn)?;
            let (container, blob) = split_relative(relative)?;
            let store = azure_store(
                &account.endpoint,
                &account.name,
                &container,
                AzureCredential::Key(&account.key),
            )?;
            Ok(Blob {
                store,
                path: object_path(&blob, relative)?,
                place: Place::AzureKey {
                    account,
                    container,
                    blob,
                },
            })
        }
        (None, Some(base), Some(relative)) if base.starts_with("http") => {
            let whole = format!(
                "{}/{}",
                base.trim_end_matches('/'),
                relative.trim_start_matches('/')
            );
            let url = url::Url::parse(&whole).map_err(|e| {
                BlobError::new("InvalidBlob", format!("{whole:?} is not a URL: {e}"))
            })?;
            let (account_url, account, rest) = split_service_url(&url)?;
            let (container, blob) = split_relative(&rest)?;
            let sas = r.sas_blob_token.clone().unwrap_or_default();
            let pairs: Vec<(String, String)> =
                form_urlencoded::parse(sas.trim_start_matches('?').as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect();
            if pairs.iter().all(|(k, _)| k != "sig") {
                return Err(BlobError::new(
                    "InvalidBlob",
                    "SasBlobToken is missing or has no signature (sig=...).",
                ));
            }
            let store = azure_store(&account_url, &account, &container, AzureCredential::Sas(pairs))?;
            Ok(Blob {
                store,
                path: object_path(&blob, relative)?,
                place: Place::AzureSas {
                    base: base.to_string(),
                    relative: relative.to_string(),
                    sas,
                },
            })
        }
        (None, Some(base), Some(relative)) if base.starts_with("s3://") || base.starts_with("file://") => {
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
            let store: Arc<dyn ObjectStore> = if let Some(rest) = base.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let store = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| BlobError::new("InvalidBlob", format!("S3 cannot be used: {e}")))?;
                if prefix.is_empty() {
                    Arc::new(store)
                } else {
                    Arc::new(object_store::prefix::PrefixStore::new(store, prefix))
                }
            } else {
                let dir = url::Url::parse(base)
                    .ok()
                    .and_then(|u| u.to_file_path().ok())
                    .ok_or_else(|| BlobError::new("InvalidBlob", format!("{base:?} is not a file URL")))?;
                std::fs::create_dir_all(&dir).map_err(|e| {
                    BlobError::new("InvalidBlob", format!("{base:?} cannot be used: {e}"))
                })?;
                Arc::new(
                    object_store::local::LocalFileSystem::new_with_prefix(&dir).map_err(|e| {
                        BlobError::new("InvalidBlob", format!("{base:?} cannot be used: {e}"))
                    })?,
                )
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

impl Blob {
    /// Makes the container of an Azure blob exist (object_store writes blobs, not containers).
    pub async fn ensure_container(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let Place::AzureKey {
            account, container, ..
        } = &self.place
        else {
            return Ok(());
        };
        create_container(http, account, container).await
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

const STORAGE_VERSION: &str = "2021-06-08";

/// A service SAS granting read of one blob until `expiry` (`?sv=...&sig=...`).
pub fn read_sas(
    account: &AzureAccount,
    container: &str,
    blob: &str,
    expiry: DateTime<Utc>,
) -> String {
    let se = expiry.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let resource = format!("/blob/{}/{container}/{blob}", account.name);
    // sv 2020-12-06 and later: permissions, start, expiry, resource, identifier, IP, protocol,
    // version, resource type, snapshot time, encryption scope, then five response headers.
    let to_sign = format!("r\n\n{se}\n{resource}\n\n\n\n{STORAGE_VERSION}\nb\n\n\n\n\n\n\n");
    // The key was checked as base64 when the connection string was parsed.
    let sig = crate::domain::signing::signature(&account.key, &to_sign).unwrap_or_default();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("sv", STORAGE_VERSION)
        .append_pair("sr", "b")
        .append_pair("sp", "r")
        .append_pair("se", &se)
        .append_pair("sig", &sig)
        .finish();
    format!("?{query}")
}

/// `PUT {endpoint}/{container}?restype=container` signed with Shared Key; an existing container
/// is fine.
async fn create_container(
    http: &reqwest::Client,
    account: &AzureAccount,
    container: &str,
) -> anyhow::Result<()> {
    let url = url::Url::parse(&format!(
        "{}/{container}?restype=container",
        account.endpoint
    ))?;
    let date = Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{STORAGE_VERSION}\n/{}{}\nrestype:container",
        account.name,
        url.path()
    );
    let response = http
        .put(url)
        .header("x-ms-date", &date)
        .header("x-ms-version", STORAGE_VERSION)
        .header("content-length", "0")
        .header(
            "authorization",
            format!(
                "SharedKey {}:{}",
                account.name,
                crate::domain::signing::signature(&account.key, &to_sign).unwrap_or_default()
            ),
        )
        .send()
        .await?;
    let status = response.status();
    if status.is_success() || status == reqwest::StatusCode::CONFLICT {
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    anyhow::bail!("creating container {container}: HTTP {status}: {body}")
}

/// The Batch File Conventions' container of a job's outputs: `job-{id}` when that is a valid
/// container name, else a readable prefix and the SHA-1 of the id.
pub fn job_container(job_id: &str) -> String {
    let id = job_id.to_lowercase();
    let valid = id.len() <= 59
        && id
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.ends_with('-')
        && !id.contains("--");
    if valid {
        return format!("job-{id}");
    }
    let hash: String = sha1_hex(id.as_bytes());
    let mut safe = String::new();
    for c in id.chars() {
        if matches!(c, ':' | '_' | '-') {
            if !safe.ends_with('-') {
                safe.push('-');
            }
        } else {
            safe.push(c);
        }
    }
    let mut safe = safe.trim_matches('-').to_string();
    if safe.len() > 15 {
        safe.truncate(15);
        safe = safe.trim_matches('-').to_string();
    } else if safe.is_empty() {
        safe = "job".into();
    }
    format!("job-{safe}-{hash}")
}

/// SHA-1, which the conventions' container names fix, as 40 lower-case hex digits.
fn sha1_hex(data: &[u8]) -> String {
    use sha1::{Digest, Sha1};
    Sha1::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conventions_container_names_match_the_standard() {
        // The examples of the conventions' README, and cases worked out from its code.
        assert_eq!(job_container("MyTerrificJob"), "job-myterrificjob");
        assert_eq!(
            job_container("my-_EVEN_MORE_-terrific-job"),
            "job-my-even-more-te-68b05a7d8aa6aa65b9a6892c667a6c406a16ad65"
        );
        assert_eq!(
            job_container("__"),
            "job-job-9cccc847b29090d252ba07a00934a0946c6a9d07"
        );
        assert!(job_container(&"a".repeat(60)).starts_with("job-aaaaaaaaaaaaaaa-13d9560"));
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }

    #[test]
    fn connection_strings_parse_like_azure_s() {
        let a = parse_connection_string(
            "DefaultEndpointsProtocol=https;BlobEndpoint=https://sampleaccount.blob.core.windows.net/;TableEndpoint=https://x/;AccountName=sampleaccount;AccountKey=a2V5;",
        )
        .unwrap();
        assert_eq!(a.name, "sampleaccount");
        assert_eq!(a.endpoint, "https://sampleaccount.blob.core.windows.net");
        let b = parse_connection_string("AccountName=acct;AccountKey=a2V5").unwrap();
        assert_eq!(b.endpoint, "https://acct.blob.core.windows.net");
        let dev = parse_connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
        for bad in [
            "AccountName=x",
            "AccountKey=a2V5",
            "garbage",
            "AccountName=x;AccountKey=!!not base64!!",
        ] {
            let e = parse_connection_string(bad).unwrap_err();
            assert_eq!(e.code, "InvalidBlobConnectionString", "{bad}");
        }
    }

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

    #[test]
    fn sas_urls_split_into_account_and_container() {
        let u = url::Url::parse("http://127.0.0.1:10000/devstoreaccount1/c/b.csv").unwrap();
        assert_eq!(
            split_service_url(&u).unwrap(),
            (
                "http://127.0.0.1:10000/devstoreaccount1".into(),
                "devstoreaccount1".into(),
                "c/b.csv".into()
            )
        );
        let u = url::Url::parse("https://acct.blob.core.windows.net/c/b.csv").unwrap();
        assert_eq!(
            split_service_url(&u).unwrap(),
            (
                "https://acct.blob.core.windows.net".into(),
                "acct".into(),
                "c/b.csv".into()
            )
        );
    }
}
