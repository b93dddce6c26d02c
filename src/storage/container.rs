//! A blob container reached through a URL with the caller's SAS, as Azure Batch's resource files
//! (`storageContainerUrl`) and output files (`containerUrl`) name one.

use std::sync::Arc;

use futures_util::StreamExt;
use object_store::ObjectStore;

use super::{azure, object_path, Blob, BlobError, Place};

/// The most blobs one resource file may bring: a listing is held in memory while it downloads.
pub const MAX_LISTED: usize = 100_000;

#[derive(Clone, Debug)]
pub struct Container {
    url: String,
    store: Arc<dyn ObjectStore>,
}

impl Container {
    pub fn open(url: &str) -> Result<Container, BlobError> {
        crate::install_tls();
        Ok(Container {
            url: url.to_string(),
            store: azure::container_with_sas(url)?,
        })
    }

    /// A container of the storage account a connection string names (an account's linked
    /// storage): the account key signs.
    pub fn with_key(connection_string: &str, container: &str) -> Result<Container, BlobError> {
        crate::install_tls();
        let (url, store) = azure::container_with_key(connection_string, container)?;
        Ok(Container { url, store })
    }

    /// The names (and sizes) of the blobs whose names begin with `prefix` (a plain string
    /// prefix, as Azure's blobPrefix; not only whole directories).
    pub async fn list(&self, prefix: Option<&str>) -> Result<Vec<(String, u64)>, BlobError> {
        let prefix = prefix.unwrap_or_default();
        // object_store lists whole path segments: list the directory the prefix lies in, then
        // keep the names that begin with all of it.
        let dir = prefix
            .rfind('/')
            .map(|at| &prefix[..at])
            .unwrap_or_default();
        let dir = (!dir.is_empty())
            .then(|| object_path(dir, prefix))
            .transpose()?;
        let mut listing = self.store.list(dir.as_ref());
        let mut out = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| listing_error(&self.url, e))?;
            let name = meta.location.to_string();
            if name.starts_with(prefix) {
                if out.len() == MAX_LISTED {
                    return Err(BlobError::new(
                        "ResourceContainerListMiscError",
                        format!("the container holds more than {MAX_LISTED} blobs under {prefix:?}; name a narrower blobPrefix"),
                    ));
                }
                out.push((name, meta.size));
            }
        }
        Ok(out)
    }

    /// A blob of this container.
    pub fn blob(&self, name: &str) -> Result<Blob, BlobError> {
        Ok(Blob {
            store: Arc::clone(&self.store),
            path: object_path(name, name)?,
            place: Place::Url {
                base: self.url.clone(),
                relative: name.to_string(),
            },
        })
    }
}

fn listing_error(url: &str, e: object_store::Error) -> BlobError {
    let url = without_query(url);
    match e {
        object_store::Error::NotFound { .. } => BlobError::new(
            "ResourceContainerNotFound",
            format!("the container {url} does not exist"),
        ),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            BlobError::new(
                "ResourceContainerAccessDenied",
                format!("the container {url} cannot be listed with the SAS given (it needs read and list permissions)"),
            )
        }
        e => BlobError::new(
            "ResourceContainerListMiscError",
            format!("listing the container {url} failed: {e}"),
        ),
    }
}

/// A URL without its query: a SAS is a secret and never goes into a message.
pub fn without_query(url: &str) -> &str {
    url.split_once('?').map(|(u, _)| u).unwrap_or(url)
}
