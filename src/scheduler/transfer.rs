//! Bytes between storage (blobs, http URLs) and a node's files, streamed: what goes into a node
//! is written by its agent (`runtime::TaskFiles`), what comes out is read by it.

use futures_util::StreamExt;
use object_store::{
    Attributes, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, WriteMultipart,
};

use crate::runtime::agents::ByteStream;
use crate::runtime::FileData;
use crate::storage;

/// A blob's bytes, as they come.
pub(super) async fn blob_stream(b: &storage::Blob) -> Result<ByteStream, object_store::Error> {
    let stream = b.store.get(&b.path).await?.into_stream();
    Ok(stream.map(|c| c.map_err(std::io::Error::other)).boxed())
}

/// An http(s) URL's body, as it comes; a status other than success is an error naming it.
pub(super) async fn http_stream(
    http: &reqwest::Client,
    url: &str,
) -> Result<ByteStream, HttpFailure> {
    let response = http.get(url).send().await.map_err(HttpFailure::Request)?;
    let status = response.status();
    if !status.is_success() {
        return Err(HttpFailure::Status(status));
    }
    let bytes = response.bytes_stream();
    Ok(bytes.map(|c| c.map_err(std::io::Error::other)).boxed())
}

/// Why an http download failed.
#[derive(Debug)]
pub(super) enum HttpFailure {
    Status(reqwest::StatusCode),
    Request(reqwest::Error),
}

/// Uploads a file's bytes, with blob headers (Content-Type and the like); None, an absent file,
/// as an empty blob. In one request when small, else in 8 MiB parts with at most 4 in flight,
/// so a large output never sits whole in memory.
pub(super) async fn upload_with(
    http: &reqwest::Client,
    data: Option<FileData>,
    target: &storage::Blob,
    attributes: Attributes,
) -> anyhow::Result<()> {
    const PART: usize = 8 * 1024 * 1024;
    target.ensure_container(http).await?;
    let Some(FileData { len, mut bytes }) = data else {
        let options = PutOptions::from(attributes);
        target
            .store
            .put_opts(&target.path, PutPayload::from(Vec::new()), options)
            .await?;
        return Ok(());
    };
    if len <= PART as u64 {
        let mut all = Vec::with_capacity(len as usize);
        while let Some(chunk) = bytes.next().await {
            all.extend_from_slice(&chunk?);
        }
        let options = PutOptions::from(attributes);
        target
            .store
            .put_opts(&target.path, PutPayload::from(all), options)
            .await?;
        return Ok(());
    }
    let options = PutMultipartOptions::from(attributes);
    let upload = target
        .store
        .put_multipart_opts(&target.path, options)
        .await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
    while let Some(chunk) = bytes.next().await {
        let chunk = chunk?;
        writer.wait_for_capacity(4).await?;
        writer.write(&chunk);
    }
    writer.finish().await?;
    Ok(())
}
