//! Paths below a trusted root, reached through [`Dir`] on the blocking pool.

use std::path::{Path, PathBuf};

use super::Dir;

/// A path below a trusted root (a node's root, an account's workitems), never reached through
/// a link.
#[derive(Clone, Debug)]
pub struct Below {
    pub root: PathBuf,
    pub rel: PathBuf,
}

impl Below {
    /// Runs `f` on the blocking pool with the root opened.
    pub async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(Dir, &Path) -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        let (root, rel) = (self.root.clone(), self.rel.clone());
        tokio::task::spawn_blocking(move || f(Dir::open_root(&root)?, &rel))
            .await
            .map_err(std::io::Error::other)?
    }

    /// Makes the directory, and the root too if it is not there yet (the root is the server's),
    /// then runs `f` on it, in one trip to the blocking pool.
    pub async fn create_then<T: Send + 'static>(
        &self,
        f: impl FnOnce(Dir) -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        let (root, rel) = (self.root.clone(), self.rel.clone());
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&root)?;
            f(Dir::open_root(&root)?.create_dir_all(&rel)?)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Makes the directory, and the root too if it is not there yet.
    pub async fn create_dir_all(&self) -> std::io::Result<()> {
        self.create_then(|_| Ok(())).await
    }

    /// Removes the directory with everything in it, following no link; what is not there (the
    /// root included) is not an error, and a failure is logged, not returned.
    pub async fn remove(&self) {
        let result = match self.with(|root, rel| root.remove_all(rel)).await {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        };
        if let Err(e) = result {
            tracing::warn!(path = %self.root.join(&self.rel).display(), error = %e, "removing a directory failed");
        }
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> Below {
        Below {
            root: self.root.clone(),
            rel: self.rel.join(rel),
        }
    }
}
