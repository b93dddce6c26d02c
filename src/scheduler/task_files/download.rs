//! Resource files down into a task's working directory, from http(s) URLs and SAS containers.

use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};

use super::{Failure, Fetcher, PARALLEL};
use crate::domain::files::{self, ResourceFile, Source};
use crate::runtime::TaskFiles;
use crate::scheduler::transfer::{self, HttpFailure};
use crate::storage::{self, Container};

/// One file to fetch.
enum Fetch<'a> {
    Http {
        url: &'a str,
        to: PathBuf,
        mode: u32,
    },
    Blob {
        blob: storage::Blob,
        name: String,
        to: PathBuf,
        mode: u32,
    },
}

/// Downloads the resource files into the working directory, up to [`PARALLEL`] at once; the
/// first failure ends it.
pub async fn download(
    fetcher: &Fetcher,
    on: TaskFiles<'_>,
    files: &[ResourceFile],
    linked_storage: Option<&str>,
) -> Result<(), Failure> {
    let mut fetches = Vec::new();
    for (i, rf) in files.iter().enumerate() {
        let at = format!("resourceFiles[{i}]");
        let invalid = |e: files::Invalid| {
            Failure::new(
                "ResourceFileInvalid",
                format!("{}: {}", e.property, e.reason),
            )
        };
        let rel = rf.check(&at).map_err(invalid)?;
        let mode = rf.mode(&at).map_err(invalid)?;
        match rf.source(&at).map_err(invalid)? {
            Source::Http(url) => {
                refuse_local(fetcher, url).await?;
                fetches.push(Fetch::Http { url, to: rel, mode });
            }
            Source::AutoStorage { container, prefix } => {
                let conn = linked_storage.ok_or_else(|| {
                    Failure::new(
                        "AutoStorageNotConfigured",
                        format!("{at}.autoStorageContainerName: the account has no linked storage account"),
                    )
                })?;
                let container = Container::with_key(conn, container)?;
                listed(&container, prefix, &rel, mode, &mut fetches).await?;
            }
            Source::Container { url, prefix } => {
                refuse_local(fetcher, url).await?;
                let container = Container::open(url)?;
                listed(&container, prefix, &rel, mode, &mut fetches).await?;
            }
        }
    }
    // The futures are made first: a stream holding a closure over borrows is not Send.
    let http = fetcher.http();
    let fetching: Vec<_> = fetches.into_iter().map(|f| fetch(http, on, f)).collect();
    futures_util::stream::iter(fetching)
        .buffer_unordered(PARALLEL)
        .try_collect::<()>()
        .await
}

/// A fetch for each blob of the container under `prefix`, kept below `rel`.
async fn listed(
    container: &Container,
    prefix: Option<&str>,
    rel: &Path,
    mode: u32,
    fetches: &mut Vec<Fetch<'_>>,
) -> Result<(), Failure> {
    for (name, _) in container.list(prefix).await? {
        let below = files::below(&name).ok_or_else(|| {
            Failure::new(
                "BlobDownloadMiscError",
                format!("the blob {name:?} would land outside the task's working directory"),
            )
        })?;
        fetches.push(Fetch::Blob {
            blob: container.blob(&name)?,
            name,
            to: rel.join(below),
            mode,
        });
    }
    Ok(())
}

/// Fetches one file, streamed into the working directory by the task's node's agent.
async fn fetch(http: &reqwest::Client, on: TaskFiles<'_>, f: Fetch<'_>) -> Result<(), Failure> {
    let (bytes, to, mode) = match f {
        Fetch::Http { url, to, mode } => {
            let shown = storage::without_query(url);
            let bytes = transfer::http_stream(http, url)
                .await
                .map_err(|e| match e {
                    HttpFailure::Status(s) if s == reqwest::StatusCode::NOT_FOUND => {
                        Failure::new("BlobNotFound", format!("{shown} answered {s}"))
                    }
                    HttpFailure::Status(s) if matches!(s.as_u16(), 401 | 403) => {
                        Failure::new("BlobAccessDenied", format!("{shown} answered {s}"))
                    }
                    HttpFailure::Status(s) => {
                        Failure::new("BlobDownloadMiscError", format!("{shown} answered {s}"))
                    }
                    HttpFailure::Request(e) => Failure::new(
                        "BlobDownloadMiscError",
                        format!("downloading {shown} failed: {}", e.without_url()),
                    ),
                })?;
            (bytes, to, mode)
        }
        Fetch::Blob {
            blob,
            name,
            to,
            mode,
        } => {
            let bytes = transfer::blob_stream(&blob).await.map_err(|e| match e {
                object_store::Error::NotFound { .. } => {
                    Failure::new("BlobNotFound", format!("the blob {name:?} does not exist"))
                }
                object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. } => Failure::new(
                    "BlobAccessDenied",
                    format!("the blob {name:?} cannot be read with the SAS given"),
                ),
                e => Failure::new(
                    "BlobDownloadMiscError",
                    format!("downloading the blob {name:?} failed: {e}"),
                ),
            })?;
            (bytes, to, mode)
        }
    };
    on.write(&Path::new("wd").join(&to), bytes, Some(mode))
        .await
        .map_err(|e| write_failure(&to, &e.message))
}

async fn refuse_local(fetcher: &Fetcher, url: &str) -> Result<(), Failure> {
    fetcher
        .check(url)
        .await
        .map_err(|why| Failure::new("BlobDownloadMiscError", why))
}

fn write_failure(to: &Path, e: &str) -> Failure {
    Failure::new(
        "BlobDownloadMiscError",
        format!(
            "writing {} in the task's working directory failed: {e}",
            to.display()
        ),
    )
}
