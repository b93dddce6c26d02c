//! Files between blob storage and a task's directory, never through a link a task left there.

use futures_util::StreamExt;
use object_store::{
    Attributes, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, WriteMultipart,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use std::ffi::OsString;

use crate::runtime::safe_fs::{Below, Dir};
use crate::runtime::FileData;
use crate::storage::{self, DataReference, Roots};

/// Streams a BES input into a file (made anew), through no link a task left on the way; an
/// input on the server's own host only if `allow_local`.
pub(super) async fn download(
    r: &DataReference,
    roots: &Roots,
    allow_local: bool,
    to: Below,
) -> anyhow::Result<()> {
    let b = storage::resolve(r, roots)?;
    b.check_host(allow_local).await?;
    download_blob(&b, to, None).await
}

/// Streams a blob into a file (made anew, with `mode` if given).
pub(super) async fn download_blob(
    b: &storage::Blob,
    to: Below,
    mode: Option<u32>,
) -> anyhow::Result<()> {
    let mut stream = b.store.get(&b.path).await?.into_stream();
    let mut sink = Sink::open(to).await?;
    while let Some(chunk) = stream.next().await {
        sink.write(&chunk?).await?;
    }
    sink.finish(mode).await
}

/// Copies a file of the server's own (not a task's: it is opened by path) into a file made
/// anew, through no link a task left on the way.
pub(super) async fn copy_file(from: &std::path::Path, to: Below) -> anyhow::Result<()> {
    let mut source = tokio::fs::File::open(from).await?;
    let mut sink = Sink::open(to).await?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = source.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        sink.write(&buf[..n]).await?;
    }
    sink.finish(None).await
}

/// Streams an http(s) URL's body into a file (made anew, with `mode` if given); a status other
/// than success is an error naming it.
pub(super) async fn download_http(
    http: &reqwest::Client,
    url: &str,
    to: Below,
    mode: Option<u32>,
) -> Result<(), HttpFailure> {
    let mut response = http.get(url).send().await.map_err(HttpFailure::Request)?;
    let status = response.status();
    if !status.is_success() {
        return Err(HttpFailure::Status(status));
    }
    let mut sink = Sink::open(to).await.map_err(HttpFailure::Write)?;
    while let Some(chunk) = response.chunk().await.map_err(HttpFailure::Request)? {
        sink.write(&chunk).await.map_err(HttpFailure::Write)?;
    }
    sink.finish(mode).await.map_err(HttpFailure::Write)
}

/// Why an http download failed.
#[derive(Debug)]
pub(super) enum HttpFailure {
    Status(reqwest::StatusCode),
    Request(reqwest::Error),
    Write(anyhow::Error),
}

/// A file being written aside (`name.partial`) and renamed into place when whole, so it is
/// there whole or not at all; its directories are made below a trusted root, never through a
/// link.
struct Sink {
    dir: Dir,
    name: OsString,
    partial: OsString,
    file: tokio::fs::File,
}

impl Sink {
    async fn open(to: Below) -> anyhow::Result<Sink> {
        let name =
            anyhow::Context::context(to.rel.file_name(), "the path names no file")?.to_os_string();
        let parent = to
            .rel
            .parent()
            .unwrap_or(std::path::Path::new(""))
            .to_path_buf();
        let mut partial = name.clone();
        partial.push(".partial");
        let (dir, file) = Below {
            root: to.root.clone(),
            rel: parent,
        }
        .with({
            let partial = partial.clone();
            move |root, rel| {
                let dir = root.create_dir_all(rel)?;
                let file = dir.create_file(&partial)?;
                Ok((dir, file))
            }
        })
        .await?;
        Ok(Sink {
            dir,
            name,
            partial,
            file: tokio::fs::File::from_std(file),
        })
    }

    async fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        Ok(self.file.write_all(bytes).await?)
    }

    async fn finish(mut self, mode: Option<u32>) -> anyhow::Result<()> {
        self.file.flush().await?;
        if let Some(mode) = mode {
            use std::os::unix::fs::PermissionsExt;
            self.file
                .set_permissions(std::fs::Permissions::from_mode(mode))
                .await?;
        }
        let Sink {
            dir, name, partial, ..
        } = self;
        tokio::task::spawn_blocking(move || dir.rename(&partial, &name)).await??;
        Ok(())
    }
}

/// The last `max` bytes of a file, read from a seek: a task's log may be any size.
pub(super) async fn tail(file: Below, max: u64) -> std::io::Result<Vec<u8>> {
    let file = file.with(|root, rel| root.open_file(rel)).await?;
    let len = file.metadata()?.len();
    let mut file = tokio::fs::File::from_std(file);
    tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(len.saturating_sub(max)))
        .await?;
    let mut out = Vec::new();
    file.take(max).read_to_end(&mut out).await?;
    Ok(out)
}

/// Uploads a file on this host's disk (an absent one as empty); a link (a task's) is refused,
/// never followed.
pub(super) async fn upload(
    http: &reqwest::Client,
    local: Below,
    target: &storage::Blob,
) -> anyhow::Result<()> {
    let data = FileData::from_disk(local).await?;
    upload_with(http, data, target, Attributes::new()).await
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
