//! The Debian node image: what a pool runs when it names a marketplace `imageReference` that the
//! image map does not (Ubuntu, Debian, Alma, ... on Azure), so that the commands of Azure's
//! tutorials find `/bin/bash`, coreutils and `python3`. It is built from Debian's packages with
//! `debootstrap`, with no registry, through the engine's build API, as the busybox image is.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use bollard::Docker;
use bytes::Bytes;

pub use crate::domain::pool::DEBIAN_IMAGE;

const SUITE: &str = "bookworm";
const PACKAGES: &str = "bash,coreutils,python3,ca-certificates,procps";
const DOCKERFILE: &str = "FROM scratch\nCOPY rootfs/ /\n\
    ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8\n\
    CMD [\"/bin/bash\"]\n";

/// What the image leaves out of Debian's root filesystem: downloaded packages and package lists
/// (`apt-get update` fetches them again), documentation, manual pages and translations.
const TRIMMED: &[&str] = &[
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
];

/// Directories the image has empty: the engine mounts its own there.
const MOUNTED: &[&str] = &["dev", "proc", "sys"];

/// Bytes of the build context sent at a time.
const CHUNK: usize = 256 * 1024;

/// After a failed build, how long nodes that need the image are told why instead of trying again.
const RETRY_AFTER: Duration = Duration::from_secs(600);

/// Builds the Debian node image as `tag` from the root filesystem in `rootfs`, made there first
/// with debootstrap (from `mirror`, else Debian's default) when it has no `/usr/bin/bash`: a
/// second build reuses it. The build context is streamed, never held whole in memory.
pub async fn build_debian_image(
    docker: &Docker,
    tag: &str,
    rootfs: &Path,
    mirror: Option<&str>,
) -> anyhow::Result<()> {
    if !rootfs.join("usr/bin/bash").is_file() {
        debootstrap(rootfs, mirror).await?;
    }
    let rootfs = rootfs.to_owned();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(4);
    let writer = tokio::task::spawn_blocking(move || {
        let chunks = Chunks {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        if let Err(e) = write_context(&rootfs, chunks) {
            let _ = tx.blocking_send(Err(e));
        }
    });
    let context = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let built = super::image::build(docker, tag, context).await;
    writer.await.context("writing the build context")?;
    built
}

/// Runs debootstrap into `<rootfs>.partial`, trims it, and renames it to `rootfs`: an
/// interrupted run leaves no root filesystem that looks whole.
async fn debootstrap(rootfs: &Path, mirror: Option<&str>) -> anyhow::Result<()> {
    let partial = rootfs.with_extension("partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .with_context(|| format!("removing {}", partial.display()))?;
    }
    if let Some(parent) = partial.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
    }
    tracing::info!(dir = %rootfs.display(), "debootstrap {SUITE} (about a minute)");
    let mut command = tokio::process::Command::new("debootstrap");
    command
        .args(["--variant=minbase", &format!("--include={PACKAGES}"), SUITE])
        .arg(&partial)
        .args(mirror);
    let out = command.output().await.map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => {
            anyhow::anyhow!("debootstrap is not installed (apt-get install debootstrap)")
        }
        _ => anyhow::Error::new(e).context("running debootstrap"),
    })?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(if out.stderr.is_empty() {
            &out.stdout
        } else {
            &out.stderr
        });
        let tail: Vec<&str> = said.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        anyhow::bail!("debootstrap failed ({}): {}", out.status, tail.join(" / "));
    }
    for dir in TRIMMED {
        let dir = partial.join(dir);
        if dir.is_dir() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    std::fs::create_dir_all(partial.join("mnt/batch/tasks"))?;
    std::fs::rename(&partial, rootfs)
        .with_context(|| format!("renaming {} to {}", partial.display(), rootfs.display()))?;
    Ok(())
}

/// The build context: the Dockerfile, then `rootfs/` with the root filesystem.
fn write_context(rootfs: &Path, out: Chunks) -> io::Result<()> {
    let mut tar = tar::Builder::new(out);
    tar.follow_symlinks(false);
    let mut header = tar::Header::new_gnu();
    header.set_size(DOCKERFILE.len() as u64);
    header.set_mode(0o644);
    header.set_path("Dockerfile")?;
    header.set_cksum();
    tar.append(&header, DOCKERFILE.as_bytes())?;
    tar.append_dir("rootfs", rootfs)?;
    walk(&mut tar, rootfs, Path::new(""))?;
    tar.into_inner()?.flush()
}

/// Appends `root/rel`'s directories, files and symbolic links, in name order, under `rootfs/`.
/// Sockets, pipes and device files are left out: the engine makes the container's `/dev`.
fn walk(tar: &mut tar::Builder<Chunks>, root: &Path, rel: &Path) -> io::Result<()> {
    let mut entries = std::fs::read_dir(root.join(rel))?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let rel = rel.join(entry.file_name());
        let name = Path::new("rootfs").join(&rel);
        let kind = entry.file_type()?;
        if kind.is_dir() {
            tar.append_dir(&name, entry.path())?;
            if !MOUNTED.iter().any(|m| rel == Path::new(m)) {
                walk(tar, root, &rel)?;
            }
        } else if kind.is_file() || kind.is_symlink() {
            tar.append_path_with_name(entry.path(), &name)?;
        }
    }
    Ok(())
}

/// A writer that sends what is written in chunks down a channel: the build request's body.
struct Chunks {
    tx: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl Chunks {
    fn send(&mut self) -> io::Result<()> {
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(chunk.into()))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the build ended"))
    }
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.send()?;
        }
        Ok(())
    }
}

/// The Debian image as the server builds it when a node needs it: one build at a time for
/// every host, from a root filesystem kept in the data directory.
pub struct DebianImage {
    rootfs: PathBuf,
    /// Held while a build runs; the last failure, with when it happened.
    last_failure: tokio::sync::Mutex<Option<(Instant, String)>>,
}

impl DebianImage {
    pub fn new(rootfs: PathBuf) -> Self {
        Self {
            rootfs,
            last_failure: tokio::sync::Mutex::new(None),
        }
    }

    /// Builds the image on `docker` unless it is there. After a failure, says why without trying
    /// again for ten minutes.
    pub async fn ensure(&self, docker: &Docker) -> Result<(), String> {
        let mut last_failure = self.last_failure.lock().await;
        if docker.inspect_image(DEBIAN_IMAGE).await.is_ok() {
            return Ok(());
        }
        if let Some((at, why)) = &*last_failure {
            if at.elapsed() < RETRY_AFTER {
                return Err(why.clone());
            }
        }
        tracing::info!(
            image = DEBIAN_IMAGE,
            "building the Debian node image for a pool that names a marketplace image"
        );
        match build_debian_image(docker, DEBIAN_IMAGE, &self.rootfs, None).await {
            Ok(()) => {
                tracing::info!(image = DEBIAN_IMAGE, "built the Debian node image");
                *last_failure = None;
                Ok(())
            }
            Err(e) => {
                let why = format!("{e:#}");
                tracing::warn!(image = DEBIAN_IMAGE, error = %why, "building the Debian node image failed");
                *last_failure = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }
}
