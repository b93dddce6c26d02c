//! A task's resource files down into its working directory before its command runs, and its
//! output files up after it ends, as Azure Batch moves them. Every file is written and read
//! below the task's directory through `safe_fs`, never through a link a task left there.

use std::time::Duration;

use super::complete::Outcome;
use crate::runtime::TaskDirs;
use crate::storage::BlobError;
use crate::store::tasks::AttemptRow;

mod download;
mod upload;

pub use download::download;
pub use upload::upload;

/// How many files of one task move at once.
const PARALLEL: usize = 8;

/// Why files could not be moved, as a task's failureInfo says it.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub code: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<BlobError> for Failure {
    fn from(e: BlobError) -> Self {
        Failure {
            code: e.code,
            message: e.message,
        }
    }
}

/// The client resource files are fetched with: it gives up on a server that does not answer,
/// never on a large file that keeps coming.
pub fn http_client() -> reqwest::Client {
    crate::install_tls();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(300))
        .build()
        .unwrap_or_default()
}

/// Downloads an attempt's resource files into its working directory; the failure, if one could
/// not be.
pub async fn download_for(
    http: &reqwest::Client,
    a: &AttemptRow,
    dirs: &TaskDirs,
) -> Option<Failure> {
    let files = a.files.as_ref().filter(|f| !f.resource_files.is_empty())?;
    download(http, dirs, &files.resource_files).await.err()
}

/// An attempt's command exited with `code`: its output files go up, then its outcome is known.
pub async fn after_exit(
    http: &reqwest::Client,
    a: &AttemptRow,
    dirs: &TaskDirs,
    code: i64,
) -> Outcome {
    let Some(files) = a.files.as_ref().filter(|f| !f.output_files.is_empty()) else {
        return Outcome::Exited(code);
    };
    match upload(http, dirs, &files.output_files, code).await {
        Ok(()) => Outcome::Exited(code),
        Err(failure) => Outcome::UploadFailed {
            exit_code: code,
            failure,
        },
    }
}
