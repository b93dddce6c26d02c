//! Which hosts a URL a user gave may lead the server to. The server itself fetches and writes
//! what tasks' resource and output files and BES jobs' inputs and outputs name, so unless the
//! operator allows it (`--allow-local-urls`) no such URL may lead to an address of the server's
//! own host: loopback, or link-local where cloud metadata services answer. Storage the operator
//! configured (`--storage-root`, `--bes-storage`, an account's linked storage) is not checked.

use std::net::IpAddr;

use super::{without_query, Blob, BlobError, Place};
use crate::domain::files::is_host_local;

/// Refuses a URL whose host is, or resolves to, an address of the server's own host, unless
/// `allow_local`; the error says why, with the URL's query (a SAS) left out.
pub async fn check_url(url: &str, allow_local: bool) -> Result<(), String> {
    if allow_local {
        return Ok(());
    }
    let shown = without_query(url);
    let parsed = url::Url::parse(url).map_err(|e| format!("{shown} is not a URL: {e}"))?;
    let port = parsed.port_or_known_default().unwrap_or(443);
    let addresses: Vec<IpAddr> = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => vec![ip.into()],
        Some(url::Host::Ipv6(ip)) => vec![ip.into()],
        Some(url::Host::Domain(name)) => tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| format!("{shown}: cannot resolve {name}: {e}"))?
            .map(|a| a.ip())
            .collect(),
        None => return Err(format!("{shown} names no host")),
    };
    match addresses.into_iter().find(|ip| is_host_local(*ip)) {
        Some(ip) => Err(format!(
            "{shown} leads to {ip}, an address of the server's own host (loopback or link-local); the server's operator can allow such URLs with --allow-local-urls"
        )),
        None => Ok(()),
    }
}

impl Blob {
    /// Refuses a blob a user named (by connection string or SAS URL) whose service lies on the
    /// server's own host, unless `allow_local`. `s3://` and `file://` references lie under the
    /// operator's roots and are not checked.
    pub async fn check_host(&self, allow_local: bool) -> Result<(), BlobError> {
        let endpoint = match &self.place {
            Place::AzureKey { account, .. } => account.endpoint.as_str(),
            Place::AzureSas { base, .. } => base.as_str(),
            Place::Url { .. } => return Ok(()),
        };
        check_url(endpoint, allow_local)
            .await
            .map_err(|why| BlobError::new("InvalidBlob", why))
    }
}
