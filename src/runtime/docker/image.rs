//! The built-in node image, built from the machine's static busybox through the engine's build
//! API, so a fresh machine runs pools without a registry.

use std::path::Path;

use anyhow::Context;
use bollard::query_parameters::BuildImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;

const DOCKERFILE: &str = "FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nCMD [\"/bin/sh\"]\n";

/// The directories of the image's root filesystem; `/mnt/batch/tasks` is where nodes mount
/// their root directory.
const ROOT_DIRS: &[&str] = &[
    "rootfs",
    "rootfs/bin",
    "rootfs/tmp",
    "rootfs/mnt",
    "rootfs/mnt/batch",
    "rootfs/mnt/batch/tasks",
];

/// The commands the image has, each a link to busybox.
const APPLETS: &[&str] = &[
    "sh",
    "ash",
    "cat",
    "echo",
    "env",
    "sleep",
    "ls",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "touch",
    "true",
    "false",
    "test",
    "[",
    "printf",
    "pwd",
    "grep",
    "sed",
    "awk",
    "head",
    "tail",
    "wc",
    "sort",
    "date",
    "id",
    "kill",
    "ps",
    "seq",
    "tr",
    "cut",
    "expr",
    "stat",
    "nproc",
    "chmod",
    "ln",
    "uname",
    "find",
    "xargs",
    "tee",
    "dd",
    "md5sum",
    "sha256sum",
    "basename",
    "dirname",
    "hostname",
    "yes",
    "timeout",
    "du",
    "df",
    "gzip",
    "tar",
];

/// The built-in default image is built from the machine's static busybox when it is missing, so
/// a fresh machine runs pools without a registry. Other images are the user's to provide.
pub(super) async fn ensure_default_image(docker: &Docker, image: &str) {
    const BUILT_IN: &str = "batchpool/node:latest";
    const BUSYBOX: &str = "/bin/busybox";
    if image != BUILT_IN || docker.inspect_image(image).await.is_ok() {
        return;
    }
    if !std::path::Path::new(BUSYBOX).exists() {
        tracing::warn!(image, "the default node image is missing and {BUSYBOX} is not there to build it (apt-get install busybox-static)");
        return;
    }
    match build_busybox_image(docker, image, std::path::Path::new(BUSYBOX)).await {
        Ok(()) => tracing::info!(image, "built the default node image from {BUSYBOX}"),
        Err(e) => {
            tracing::warn!(image, error = %format!("{e:#}"), "building the default node image failed")
        }
    }
}

/// Builds a node image from a static busybox with no registry: `FROM scratch`, busybox and its
/// applet links (`/bin/sh`, `/bin/sleep`, ...) copied in, through the engine's build API.
pub async fn build_busybox_image(docker: &Docker, tag: &str, busybox: &Path) -> anyhow::Result<()> {
    let binary =
        std::fs::read(busybox).with_context(|| format!("reading {}", busybox.display()))?;
    let context = busybox_build_context(&binary)?;
    let context = futures_util::stream::once(async { Ok(bytes::Bytes::from(context)) });
    build(docker, tag, context).await
}

/// Builds `tag` from a tar build context (a Dockerfile and what it copies) through the engine's
/// build API, and checks that the image is there.
pub(super) async fn build(
    docker: &Docker,
    tag: &str,
    context: impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static,
) -> anyhow::Result<()> {
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .build();
    let mut progress = docker.build_image(options, None, Some(bollard::body_try_stream(context)));
    while let Some(step) = progress.next().await {
        let step = step.context("building the node image")?;
        if let Some(err) = step.error_detail.and_then(|d| d.message) {
            anyhow::bail!("building the node image: {err}");
        }
    }
    docker
        .inspect_image(tag)
        .await
        .context("the built image is not there")?;
    Ok(())
}

/// A tar build context: a Dockerfile and a root filesystem with busybox and its applet links.
fn busybox_build_context(busybox: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    append(
        &mut tar,
        "Dockerfile",
        Entry::File(0o644, DOCKERFILE.as_bytes()),
    )?;
    for dir in ROOT_DIRS {
        let mode = if *dir == "rootfs/tmp" { 0o1777 } else { 0o755 };
        append(&mut tar, dir, Entry::Dir(mode))?;
    }
    append(&mut tar, "rootfs/bin/busybox", Entry::File(0o755, busybox))?;
    for applet in APPLETS {
        append(
            &mut tar,
            &format!("rootfs/bin/{applet}"),
            Entry::Link("busybox"),
        )?;
    }
    Ok(tar.into_inner()?)
}

/// One entry of the build context: a file (mode, contents), a directory (mode), or a symbolic
/// link (target).
enum Entry<'a> {
    File(u32, &'a [u8]),
    Dir(u32),
    Link(&'a str),
}

fn append(tar: &mut tar::Builder<Vec<u8>>, path: &str, entry: Entry<'_>) -> std::io::Result<()> {
    let (kind, mode, data, link) = match entry {
        Entry::File(mode, data) => (tar::EntryType::Regular, mode, data, None),
        Entry::Dir(mode) => (tar::EntryType::Directory, mode, &[][..], None),
        Entry::Link(target) => (tar::EntryType::Symlink, 0o777, &[][..], Some(target)),
    };
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(data.len() as u64);
    header.set_mtime(0);
    if let Some(link) = link {
        header.set_link_name(link)?;
    }
    header.set_path(path)?;
    header.set_cksum();
    tar.append(&header, data)
}
