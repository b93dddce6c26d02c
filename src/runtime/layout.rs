//! Where the server keeps nodes and application packages on this host.

use std::path::{Path, PathBuf};

/// Where nodes live on this host, and what the server keeps for them.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Local nodes' root directories, one per node, its tasks' directories (`workitems`) in
    /// it. A Docker node's directories are a volume on its own engine: the path here only
    /// names them.
    pub nodes: PathBuf,
    /// Application packages: `<account>/<application, lower case>/<version>.zip`. Only the
    /// server and `batchpool account package` write here.
    pub applications: PathBuf,
    /// The Debian root filesystem the Debian node image is built from, made by debootstrap the
    /// first time a node needs that image.
    pub debian_rootfs: PathBuf,
}

impl Layout {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            nodes: data_dir.join("nodes"),
            applications: data_dir.join("applications"),
            debian_rootfs: data_dir.join("node-images").join("debian-bookworm"),
        }
    }

    /// An application package version's zip file.
    pub fn package_file(&self, account: &str, application: &str, version: &str) -> PathBuf {
        self.applications
            .join(account)
            .join(application.to_lowercase())
            .join(format!("{version}.zip"))
    }
}
