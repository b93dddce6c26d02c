//! Where the server keeps nodes, task directories and application packages on this host.

use std::path::{Path, PathBuf};

use super::safe_fs::Below;

/// Where nodes and task directories live on this host.
#[derive(Clone, Debug)]
pub struct Layout {
    pub nodes: PathBuf,
    pub workitems: PathBuf,
    /// Application packages: `<account>/<application, lower case>/<version>.zip`. Only the
    /// server and `batchpool account package` write here.
    pub applications: PathBuf,
    /// The node agent's program and libraries, mounted read-only into Docker nodes.
    pub agent: PathBuf,
}

impl Layout {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            nodes: data_dir.join("nodes"),
            workitems: data_dir.join("workitems"),
            applications: data_dir.join("applications"),
            agent: data_dir.join("agent"),
        }
    }

    /// An application package version's zip file.
    pub fn package_file(&self, account: &str, application: &str, version: &str) -> PathBuf {
        self.applications
            .join(account)
            .join(application.to_lowercase())
            .join(format!("{version}.zip"))
    }

    pub fn account_workitems(&self, account: &str) -> PathBuf {
        self.workitems.join(account)
    }

    /// A job's directory: Azure's `workitems/{job}` below its account's workitems.
    pub fn job_dir(&self, account: &str, job_id: &str) -> Below {
        Below {
            root: self.account_workitems(account),
            rel: PathBuf::from(job_id),
        }
    }

    /// A job task's directory: Azure's `workitems/{job}/job-1/{task}`.
    pub fn task_dir(&self, account: &str, job_id: &str, task_id: &str) -> Below {
        self.job_dir(account, job_id)
            .join(Path::new("job-1").join(task_id))
    }
}
