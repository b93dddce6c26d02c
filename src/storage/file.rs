//! `file://` locations: a directory on this host, made when first used.

use std::sync::Arc;

use object_store::ObjectStore;

use super::BlobError;

/// The store of the directory `base` (a `file://` URL) names.
pub(super) fn store(base: &str) -> Result<Arc<dyn ObjectStore>, BlobError> {
    let unusable = |e: &dyn std::fmt::Display| {
        BlobError::new("InvalidBlob", format!("{base:?} cannot be used: {e}"))
    };
    let dir = url::Url::parse(base)
        .ok()
        .and_then(|u| u.to_file_path().ok())
        .ok_or_else(|| BlobError::new("InvalidBlob", format!("{base:?} is not a file URL")))?;
    std::fs::create_dir_all(&dir).map_err(|e| unusable(&e))?;
    let store =
        object_store::local::LocalFileSystem::new_with_prefix(&dir).map_err(|e| unusable(&e))?;
    Ok(Arc::new(store))
}
