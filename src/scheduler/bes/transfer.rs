//! Files between blob storage and a task's directory, never through a link a task left there.

use futures_util::StreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::runtime::safe_fs::Below;
use crate::storage::{self, DataReference, Roots};

/// Streams a blob into a file (made anew), through no link a task left on the way.
pub(super) async fn download(r: &DataReference, roots: &Roots, to: Below) -> anyhow::Result<()> {
    let b = storage::resolve(r, roots)?;
    let mut stream = b.store.get(&b.path).await?.into_stream();
    let name =
        anyhow::Context::context(to.rel.file_name(), "an input names no file")?.to_os_string();
    let parent = Below {
        root: to.root.clone(),
        rel: to
            .rel
            .parent()
            .unwrap_or(std::path::Path::new(""))
            .to_path_buf(),
    };
    // Written aside and renamed into place: the file is there whole or not at all.
    let mut partial = name.clone();
    partial.push(".partial");
    let (dir, file) = parent
        .with({
            let partial = partial.clone();
            move |root, rel| {
                let dir = root.create_dir_all(rel)?;
                let file = dir.create_file(&partial)?;
                Ok((dir, file))
            }
        })
        .await?;
    let mut file = tokio::fs::File::from_std(file);
    while let Some(chunk) = stream.next().await {
        file.write_all(&chunk?).await?;
    }
    file.flush().await?;
    tokio::task::spawn_blocking(move || dir.rename(&partial, &name)).await??;
    Ok(())
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

/// Uploads a file (an absent one as empty): in one request when small, else in 8 MiB parts
/// with at most 4 in flight, so a large output never sits whole in memory.
/// A link (the task's) is refused, never followed.
pub(super) async fn upload(
    http: &reqwest::Client,
    local: Below,
    target: &storage::Blob,
) -> anyhow::Result<()> {
    const PART: usize = 8 * 1024 * 1024;
    target.ensure_container(http).await?;
    let mut file = match local.with(|root, rel| root.open_file(rel)).await {
        Ok(f) => tokio::fs::File::from_std(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            target
                .store
                .put(&target.path, PutPayload::from(Vec::new()))
                .await?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if file.metadata().await?.len() <= PART as u64 {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).await?;
        target
            .store
            .put(&target.path, PutPayload::from(bytes))
            .await?;
        return Ok(());
    }
    let upload = target.store.put_multipart(&target.path).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
    let mut buf = vec![0u8; 1024 * 1024];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        writer.wait_for_capacity(4).await?;
        writer.write(&buf[..n]);
    }
    writer.finish().await?;
    Ok(())
}
