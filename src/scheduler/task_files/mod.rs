//! A task's resource files down into its working directory before its command runs, and its
//! output files up after it ends, as Azure Batch moves them. Every file is written and read
//! below the task's directory through `safe_fs`, never through a link a task left there.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::complete::{Failure, Outcome};
use crate::domain::files::is_host_local;
use crate::runtime::TaskFiles;
use crate::storage;
use crate::store::tasks::AttemptRow;

mod download;
pub mod kept;
mod upload;

pub use download::download;
pub use upload::upload;

/// How many files of one task move at once.
const PARALLEL: usize = 8;

/// What fetches resource files and uploads output files. It is the server, not the node, that
/// makes these requests, so unless the operator allows it (`--allow-local-urls`) no URL may lead to
/// an address of the server's own host: loopback, or link-local where cloud metadata answers.
#[derive(Clone)]
pub struct Fetcher {
    http: reqwest::Client,
    allow_local: bool,
    /// How much of each end of a task's stdout.txt and stderr.txt is kept ([`kept`]).
    pub kept_each_end: u64,
}

impl Fetcher {
    pub fn new(allow_local: bool) -> Fetcher {
        crate::install_tls();
        // Gives up on a server that does not answer, never on a large file that keeps coming.
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(300));
        if !allow_local {
            // Names are checked as they resolve (so a name cannot change between check and use);
            // address literals, which are not resolved, in `check` and in every redirect.
            builder =
                builder
                    .dns_resolver(GuardedResolver)
                    .redirect(reqwest::redirect::Policy::custom(|attempt| {
                        let local = match attempt.url().host() {
                            Some(url::Host::Ipv4(ip)) => is_host_local(ip.into()),
                            Some(url::Host::Ipv6(ip)) => is_host_local(ip.into()),
                            _ => false,
                        };
                        if local {
                            attempt.error("a redirect to an address of the server's own host")
                        } else if attempt.previous().len() >= 10 {
                            attempt.error("more than 10 redirects")
                        } else {
                            attempt.follow()
                        }
                    }));
        }
        Fetcher {
            http: builder.build().unwrap_or_default(),
            allow_local,
            kept_each_end: 1 << 20,
        }
    }

    /// Keeps the first and last `each_end` bytes of tasks' stdout.txt and stderr.txt (none if
    /// 0).
    pub fn keeping(self, each_end: u64) -> Fetcher {
        Fetcher {
            kept_each_end: each_end,
            ..self
        }
    }

    pub(super) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Refuses a URL whose host is, or resolves to, an address of the server's own host.
    pub(super) async fn check(&self, url: &str) -> Result<(), String> {
        storage::check_url(url, self.allow_local).await
    }
}

/// Resolves names for the fetcher's http client, leaving out the server host's own addresses.
struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> =
                all.into_iter().filter(|a| !is_host_local(a.ip())).collect();
            if allowed.is_empty() {
                return Err(format!(
                    "{host} resolves only to addresses of the server's own host (loopback or link-local)"
                )
                .into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Downloads an attempt's resource files into its working directory; the failure, if one could
/// not be.
pub async fn download_for(
    fetcher: &Fetcher,
    db: &sqlx::PgPool,
    a: &AttemptRow,
    on: TaskFiles<'_>,
) -> Option<Failure> {
    let files = a.files.as_ref().filter(|f| !f.resource_files.is_empty())?;
    let linked = match linked_storage(db, &a.account, &files.resource_files).await {
        Ok(linked) => linked,
        Err(failure) => return Some(failure),
    };
    download(fetcher, on, &files.resource_files, linked.as_deref())
        .await
        .err()
}

/// The account's linked storage (a connection string), looked up only when a resource file
/// names it with autoStorageContainerName.
pub async fn linked_storage(
    db: &sqlx::PgPool,
    account: &str,
    files: &[crate::domain::files::ResourceFile],
) -> Result<Option<String>, Failure> {
    let wanted = files.iter().any(|f| {
        f.auto_storage_container_name
            .as_deref()
            .is_some_and(|c| !c.trim().is_empty())
    });
    if !wanted {
        return Ok(None);
    }
    crate::store::accounts::storage(db, account)
        .await
        .map_err(|e| {
            Failure::new(
                "BlobDownloadMiscError",
                format!("reading the account's linked storage failed: {e}"),
            )
        })
}

/// A task that was `preparing` (its resource files downloading) is `running` now. Should the
/// database not answer, it runs anyway, shown as preparing until it ends.
pub async fn prepared(db: &sqlx::PgPool, a: &AttemptRow) {
    if a.files.as_ref().is_some_and(|f| f.prepares()) {
        if let Err(e) = crate::store::tasks::mark_running(db, a.pk, a.attempt).await {
            tracing::warn!(task = %a.task_id, error = %e, "recording that a task runs failed");
        }
    }
}

/// An attempt's command exited with `code`: its output files go up (found and read by the node's
/// agent, in `on`), then its outcome is known.
pub async fn after_exit(
    fetcher: &Fetcher,
    on: TaskFiles<'_>,
    a: &AttemptRow,
    code: i64,
) -> Outcome {
    let Some(files) = a.files.as_ref().filter(|f| !f.output_files.is_empty()) else {
        return Outcome::Exited(code);
    };
    match upload(fetcher, on, &files.output_files, code).await {
        Ok(()) => Outcome::Exited(code),
        Err(failure) => Outcome::UploadFailed {
            exit_code: code,
            failure,
        },
    }
}
