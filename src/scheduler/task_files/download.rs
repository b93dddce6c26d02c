//! Resource files down into a task's working directory, from http(s) URLs and SAS containers.

use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};

use super::{Fetcher, PARALLEL};
use crate::domain::files::{self, ResourceFile, Source};
use crate::runtime::{NodeError, TaskFiles, AGENT_UNREACHABLE};
use crate::scheduler::complete::Failure;
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

impl Fetch<'_> {
    /// Where it lands, below the working directory.
    fn to(&self) -> &Path {
        match self {
            Fetch::Http { to, .. } | Fetch::Blob { to, .. } => to,
        }
    }
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
                fetches.push((i, Fetch::Http { url, to: rel, mode }));
            }
            Source::AutoStorage { container, prefix } => {
                let conn = linked_storage.ok_or_else(|| {
                    Failure::new(
                        "AutoStorageNotConfigured",
                        format!("{at}.autoStorageContainerName: the account has no linked storage account"),
                    )
                })?;
                let container = Container::with_key(conn, container)?;
                listed(&container, prefix, (i, &rel), mode, &mut fetches).await?;
            }
            Source::Container { url, prefix } => {
                refuse_local(fetcher, url).await?;
                let container = Container::open(url)?;
                listed(&container, prefix, (i, &rel), mode, &mut fetches).await?;
            }
        }
    }
    // The futures are made first: a stream holding a closure over borrows is not Send.
    let http = fetcher.http();
    let fetching: Vec<_> = one_per_path(fetches)?
        .into_iter()
        .map(|f| fetch(http, on, f))
        .collect();
    futures_util::stream::iter(fetching)
        .buffer_unordered(PARALLEL)
        .try_collect::<()>()
        .await
}

/// Where two resource files land on one path, the later in the list is the one written, as if
/// they were downloaded in order, each over the one before (parallel writes of one path would
/// race). A file where another needs a directory is refused, whatever the order.
fn one_per_path(fetches: Vec<(usize, Fetch<'_>)>) -> Result<Vec<Fetch<'_>>, Failure> {
    let mut by_path = std::collections::BTreeMap::new();
    for (i, f) in fetches {
        by_path.insert(f.to().to_path_buf(), (i, f));
    }
    // Sorted by components, a path's descendants follow it at once.
    let paths: Vec<_> = by_path.iter().collect();
    if let Some(pair) = paths.windows(2).find(|w| w[1].0.starts_with(w[0].0)) {
        let ((file, (i, _)), (below, (j, _))) = (pair[0], pair[1]);
        return Err(Failure::new(
            "ResourceFileInvalid",
            format!(
                "resourceFiles[{i}] writes the file {} where resourceFiles[{j}] needs a directory for {}",
                file.display(),
                below.display()
            ),
        ));
    }
    Ok(by_path.into_values().map(|(_, f)| f).collect())
}

/// A fetch for each blob of the container under `prefix`, kept below `rel` (of resource file
/// `i`).
async fn listed<'a>(
    container: &Container,
    prefix: Option<&str>,
    (i, rel): (usize, &Path),
    mode: u32,
    fetches: &mut Vec<(usize, Fetch<'a>)>,
) -> Result<(), Failure> {
    for (name, _) in container.list(prefix).await? {
        let below = files::below(&name).ok_or_else(|| {
            Failure::new(
                "BlobDownloadMiscError",
                format!("the blob {name:?} would land outside the task's working directory"),
            )
        })?;
        let fetch = Fetch::Blob {
            blob: container.blob(&name)?,
            name,
            to: rel.join(below),
            mode,
        };
        fetches.push((i, fetch));
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
        .map_err(|e| write_failure(&to, &e))
}

async fn refuse_local(fetcher: &Fetcher, url: &str) -> Result<(), Failure> {
    fetcher
        .check(url)
        .await
        .map_err(|why| Failure::new("BlobDownloadMiscError", why))
}

/// A file not written: the task's failure, unless its node's agent did not answer (then the
/// code says so, and the attempt is the node's loss, not the task's).
fn write_failure(to: &Path, e: &NodeError) -> Failure {
    let code = match e.code {
        AGENT_UNREACHABLE => AGENT_UNREACHABLE,
        _ => "BlobDownloadMiscError",
    };
    let (to, why) = (to.display(), &e.message);
    Failure::new(
        code,
        format!("writing {to} in the task's working directory failed: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(url: &'static str, to: &str) -> Fetch<'static> {
        Fetch::Http {
            url,
            to: PathBuf::from(to),
            mode: 0o770,
        }
    }

    fn urls(fetches: &[Fetch<'_>]) -> Vec<String> {
        fetches
            .iter()
            .map(|f| match f {
                Fetch::Http { url, to, .. } => format!("{url} {}", to.display()),
                Fetch::Blob { name, .. } => name.clone(),
            })
            .collect()
    }

    #[test]
    fn of_two_files_on_one_path_the_later_is_fetched_in_either_order() {
        let kept = one_per_path(vec![(0, http("a", "x/f")), (1, http("b", "x/./f"))]).unwrap();
        assert_eq!(urls(&kept), ["b x/./f"]);
        let kept = one_per_path(vec![(0, http("b", "x/f")), (1, http("a", "x/f"))]).unwrap();
        assert_eq!(urls(&kept), ["a x/f"]);
        let apart = one_per_path(vec![(0, http("a", "f")), (1, http("b", "f-2"))]).unwrap();
        assert_eq!(urls(&apart), ["a f", "b f-2"]);
    }

    #[test]
    fn a_file_where_another_needs_a_directory_is_refused_by_name() {
        for fetches in [
            vec![
                (0, http("a", "d")),
                (1, http("b", "e")),
                (2, http("c", "d/g")),
            ],
            vec![(0, http("c", "d/g/h")), (1, http("a", "d"))],
        ] {
            let failure = one_per_path(fetches).err().expect("refused");
            assert_eq!(failure.code, "ResourceFileInvalid");
            assert!(
                failure.message.contains("the file d where"),
                "{}",
                failure.message
            );
        }
    }
}
