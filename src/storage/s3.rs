//! `s3://bucket/prefix` locations; credentials and region come from the environment (AWS_*).

use std::sync::Arc;

use object_store::ObjectStore;

use super::BlobError;

/// The store of `bucket/prefix` (the location after `s3://`), scoped to the prefix.
pub(super) fn store(location: &str) -> Result<Arc<dyn ObjectStore>, BlobError> {
    let (bucket, prefix) = location.split_once('/').unwrap_or((location, ""));
    let store = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|e| BlobError::new("InvalidBlob", format!("S3 cannot be used: {e}")))?;
    if prefix.is_empty() {
        Ok(Arc::new(store))
    } else {
        Ok(Arc::new(object_store::prefix::PrefixStore::new(
            store, prefix,
        )))
    }
}
