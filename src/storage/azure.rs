//! Azure Blob Storage: an account's connection string (the Azurite emulator included), or a
//! base URL with the caller's SAS token; the read-only SAS tokens results carry; and the one
//! container request object_store does not make.

use std::sync::Arc;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use object_store::ObjectStore;

use super::{object_path, split_relative, Blob, BlobError, Place};

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

impl AzureAccount {
    /// The account key's signature of `to_sign`.
    fn sign(&self, to_sign: &str) -> String {
        // The key was checked as base64 when the connection string was parsed.
        crate::domain::signing::signature(&self.key, to_sign).unwrap_or_default()
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

/// ConnectionString and RelativeLocation: the account key signs, so results get a new SAS.
pub(super) fn with_key(connection_string: &str, relative: &str) -> Result<Blob, BlobError> {
    let account = parse_connection_string(connection_string)?;
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

/// BaseLocation, RelativeLocation and SasBlobToken: the caller's SAS signs, and results echo it.
pub(super) fn with_sas(
    base: &str,
    relative: &str,
    sas_token: Option<&str>,
) -> Result<Blob, BlobError> {
    let whole = format!(
        "{}/{}",
        base.trim_end_matches('/'),
        relative.trim_start_matches('/')
    );
    let url = url::Url::parse(&whole)
        .map_err(|e| BlobError::new("InvalidBlob", format!("{whole:?} is not a URL: {e}")))?;
    let (account_url, account, rest) = split_service_url(&url)?;
    let (container, blob) = split_relative(&rest)?;
    let sas = sas_token.unwrap_or_default().to_string();
    let pairs = signed_sas_pairs(&sas)?;
    let store = azure_store(
        &account_url,
        &account,
        &container,
        AzureCredential::Sas(pairs),
    )?;
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

/// A container URL with the caller's SAS as its query (`https://acct.blob.../c?sv=...&sig=...`,
/// as Azure Batch's storageContainerUrl and containerUrl give it): the container's store.
pub(super) fn container_with_sas(container_url: &str) -> Result<Arc<dyn ObjectStore>, BlobError> {
    let url = url::Url::parse(container_url).map_err(|e| {
        BlobError::new(
            "InvalidBlob",
            format!("{container_url:?} is not a URL: {e}"),
        )
    })?;
    let (account_url, account, rest) = split_service_url(&url)?;
    let container = rest.trim_matches('/');
    if container.is_empty() || container.contains('/') {
        return Err(BlobError::new(
            "ContainerSegmentInvalid",
            format!(
                "{} names no container (expected <account URL>/<container>?<SAS>).",
                url.path()
            ),
        ));
    }
    let pairs = signed_sas_pairs(url.query().unwrap_or_default())?;
    azure_store(
        &account_url,
        &account,
        container,
        AzureCredential::Sas(pairs),
    )
}

/// A container of the account a connection string names, signed with its account key.
pub(super) fn container_with_key(
    connection_string: &str,
    container: &str,
) -> Result<(String, Arc<dyn ObjectStore>), BlobError> {
    let account = parse_connection_string(connection_string)?;
    let store = azure_store(
        &account.endpoint,
        &account.name,
        container,
        AzureCredential::Key(&account.key),
    )?;
    Ok((format!("{}/{container}", account.endpoint), store))
}

/// A SAS token's query pairs. One with no signature is refused here, where the error can say why.
fn signed_sas_pairs(sas: &str) -> Result<Vec<(String, String)>, BlobError> {
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
    Ok(pairs)
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

const STORAGE_VERSION: &str = "2021-06-08";

/// A service SAS granting read of one blob until `expiry` (`?sv=...&sig=...`).
pub fn read_sas(
    account: &AzureAccount,
    container: &str,
    blob: &str,
    expiry: DateTime<Utc>,
) -> String {
    service_sas(account, &format!("{container}/{blob}"), "b", "r", expiry)
}

/// A service SAS granting `permissions` (Azure's letters, in its order: `racwdl`) on a whole
/// container until `expiry`: what a storageContainerUrl or an output containerUrl carries.
pub fn container_sas(
    account: &AzureAccount,
    container: &str,
    permissions: &str,
    expiry: DateTime<Utc>,
) -> String {
    service_sas(account, container, "c", permissions, expiry)
}

fn service_sas(
    account: &AzureAccount,
    path: &str,
    resource: &str,
    permissions: &str,
    expiry: DateTime<Utc>,
) -> String {
    let se = expiry.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let canonical = format!("/blob/{}/{path}", account.name);
    // sv 2020-12-06 and later: permissions, start, expiry, resource, identifier, IP, protocol,
    // version, resource type, snapshot time, encryption scope, then five response headers.
    let to_sign = format!(
        "{permissions}\n\n{se}\n{canonical}\n\n\n\n{STORAGE_VERSION}\n{resource}\n\n\n\n\n\n\n"
    );
    let sig = account.sign(&to_sign);
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("sv", STORAGE_VERSION)
        .append_pair("sr", resource)
        .append_pair("sp", permissions)
        .append_pair("se", &se)
        .append_pair("sig", &sig)
        .finish();
    format!("?{query}")
}

/// `PUT {endpoint}/{container}?restype=container` signed with Shared Key; an existing container
/// is fine.
pub(super) async fn create_container(
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
            format!("SharedKey {}:{}", account.name, account.sign(&to_sign)),
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

#[cfg(test)]
mod tests {
    use super::*;

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
