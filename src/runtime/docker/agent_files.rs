//! The node agent's files: this very program and the shared libraries it loads. Each Docker
//! host unpacks them once into a volume of its own, which its nodes mount read-only, so any
//! node image (a `FROM scratch` busybox too) runs the agent without a registry, without a copy
//! per node, and without a file system shared with the server. The tar archive a host unpacks
//! is made as the host reads it: the server keeps no copy of itself on disk (a debug build's
//! copy is hundreds of MB per server).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bytes::Bytes;
use futures_util::Stream;
use sha2::Digest;

/// Where nodes see the agent's directory.
pub const AGENT_DIR: &str = "/opt/batchpool";

/// The last entry of the archive: a volume that holds it was filled to the end.
pub const COMPLETE: &str = ".complete";

/// How much of the archive is made ahead of what the host has read.
const CHUNK: usize = 256 * 1024;

/// The agent's files, as they were when the server started.
#[derive(Debug)]
pub struct AgentFiles {
    /// This program as a node runs it from [`AGENT_DIR`]: with our loader and libraries where
    /// it has any (the node's own may differ or be missing).
    pub program: Vec<String>,
    /// Each file (not a link to it), under its name in the archive.
    files: Vec<AgentFile>,
    /// Names what the archive holds (each file's name, size and time), so a host keeps one
    /// volume per build of the agent.
    pub digest: String,
}

#[derive(Clone, Debug)]
struct AgentFile {
    path: PathBuf,
    /// Where it is read: the program through /proc/self/exe, which is the running program
    /// even where a rebuild replaced the file; a library at its path.
    read_from: PathBuf,
    name: String,
    len: u64,
    modified: std::time::Duration,
}

/// Finds this program and its libraries, and names them by a digest.
pub fn prepare() -> anyhow::Result<AgentFiles> {
    let exe = std::env::current_exe().context("finding this program")?;
    let (loader, libraries) = shared_libraries(&exe)?;
    let running = Path::new("/proc/self/exe");
    let mut named = vec![(exe, "batchpool".to_string(), running.exists())];
    for library in libraries.iter().chain(loader.as_ref()) {
        let name = library.file_name().context("a library without a name")?;
        let name = format!("lib/{}", name.to_string_lossy());
        named.push((library.clone(), name, false));
    }
    let mut digest = sha2::Sha256::new();
    let mut files = Vec::with_capacity(named.len());
    for (path, name, is_running) in named {
        let path =
            std::fs::canonicalize(&path).with_context(|| format!("finding {}", path.display()))?;
        let meta =
            std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        let modified = modified(&meta);
        digest.update(format!("{name}\0{}\0{}\0", meta.len(), modified.as_nanos()));
        files.push(AgentFile {
            read_from: if is_running {
                running.to_path_buf()
            } else {
                path.clone()
            },
            path,
            name,
            len: meta.len(),
            modified,
        });
    }
    let digest: String = digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let exe = format!("{AGENT_DIR}/batchpool");
    let program = match loader {
        Some(loader) => {
            let name = loader.file_name().context("a loader without a name")?;
            vec![
                format!("{AGENT_DIR}/lib/{}", name.to_string_lossy()),
                "--library-path".into(),
                format!("{AGENT_DIR}/lib"),
                exe,
            ]
        }
        None => vec![exe],
    };
    Ok(AgentFiles {
        program,
        files,
        digest,
    })
}

fn modified(meta: &std::fs::Metadata) -> std::time::Duration {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default()
}

impl AgentFiles {
    /// The command that starts the agent in a node.
    pub fn command(&self) -> Vec<String> {
        let mut command = self.program.clone();
        command.push("agent".into());
        command
    }

    /// The tar archive of the files and then [`COMPLETE`], made by a blocking thread a chunk
    /// ahead of its reader; it stops when the reader goes. A file that changed since the
    /// server started (a rebuild) ends it with an error: the digest would not name it.
    pub fn archive(&self) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let files = self.files.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Chunks {
                tx: tx.clone(),
                buf: Vec::with_capacity(CHUNK),
            };
            if let Err(e) = pack(&files, &mut out).and_then(|()| out.flush()) {
                let _ = tx.blocking_send(Err(e));
            }
        });
        futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
    }
}

/// A writer that sends what it is given in chunks of [`CHUNK`] bytes.
struct Chunks {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx.blocking_send(Ok(Bytes::from(chunk))).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the host stopped reading")
        })
    }
}

/// Writes `files` and then [`COMPLETE`] as a tar archive into `out`.
fn pack(files: &[AgentFile], out: &mut impl Write) -> std::io::Result<()> {
    let mut tar = tar::Builder::new(out);
    tar.mode(tar::HeaderMode::Deterministic);
    let mut lib = tar::Header::new_gnu();
    lib.set_entry_type(tar::EntryType::Directory);
    lib.set_size(0);
    lib.set_mode(0o755);
    tar.append_data(&mut lib, "lib/", std::io::empty())?;
    for file in files {
        let (mut source, meta) = open(file)?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(&meta, tar::HeaderMode::Deterministic);
        // What runs the agent must stay runnable in the node, whoever it runs as.
        header.set_mode(0o755);
        tar.append_data(&mut header, &file.name, &mut source)?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(0o644);
    tar.append_data(&mut header, COMPLETE, std::io::empty())?;
    tar.finish()
}

/// Opens one of the agent's files as it was when the server started.
fn open(file: &AgentFile) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    let source = std::fs::File::open(&file.read_from)?;
    let meta = source.metadata()?;
    if meta.len() != file.len || modified(&meta) != file.modified {
        return Err(std::io::Error::other(format!(
            "{} changed since the server started: restart the server so that nodes run the agent it is",
            file.path.display()
        )));
    }
    Ok((source, meta))
}

/// The program's loader and shared libraries, as `ldd` lists them; none for a static program.
fn shared_libraries(exe: &Path) -> anyhow::Result<(Option<PathBuf>, Vec<PathBuf>)> {
    let output = std::process::Command::new("ldd").arg(exe).output();
    let Ok(output) = output else {
        // No ldd (a static build's machine, or a minimal one): the program must run as it is.
        return Ok((None, Vec::new()));
    };
    Ok(parse_ldd(&String::from_utf8_lossy(&output.stdout)))
}

/// `ldd`'s lines: `name => /path (0x...)` for libraries, `/path/ld-linux... (0x...)` for the
/// loader, `linux-vdso.so.1 (0x...)` for what the kernel gives.
fn parse_ldd(text: &str) -> (Option<PathBuf>, Vec<PathBuf>) {
    let (mut loader, mut libraries) = (None, Vec::new());
    for line in text.lines().map(str::trim) {
        if let Some((_, rest)) = line.split_once("=> ") {
            if let Some(path) = rest
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/'))
            {
                libraries.push(PathBuf::from(path));
            }
        } else if line.starts_with('/') {
            loader = line.split_whitespace().next().map(PathBuf::from);
        }
    }
    (loader, libraries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent_files(dir: &Path, contents: &[(&str, &str)]) -> AgentFiles {
        let files = contents
            .iter()
            .map(|(name, text)| {
                let path = dir.join(name.replace('/', "-"));
                std::fs::write(&path, text).unwrap();
                let meta = std::fs::metadata(&path).unwrap();
                AgentFile {
                    read_from: path.clone(),
                    path,
                    name: name.to_string(),
                    len: meta.len(),
                    modified: modified(&meta),
                }
            })
            .collect();
        AgentFiles {
            program: Vec::new(),
            files,
            digest: String::new(),
        }
    }

    async fn read(files: &AgentFiles) -> std::io::Result<Vec<u8>> {
        use futures_util::TryStreamExt;
        let chunks: Vec<Bytes> = files.archive().try_collect().await?;
        Ok(chunks.concat())
    }

    #[tokio::test]
    async fn the_archive_holds_each_file_and_ends_with_complete() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(3 * CHUNK + 17);
        let files = agent_files(dir.path(), &[("agent", &big), ("lib/libc.so.6", "libc")]);
        let bytes = read(&files).await.unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let entries: Vec<(String, u64, u32)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                (path, e.size(), e.header().mode().unwrap())
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                ("lib/".to_string(), 0, 0o755),
                ("agent".to_string(), big.len() as u64, 0o755),
                ("lib/libc.so.6".to_string(), 4, 0o755),
                (COMPLETE.to_string(), 0, 0o644),
            ]
        );
    }

    #[tokio::test]
    async fn a_file_changed_since_the_start_ends_the_archive_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let files = agent_files(dir.path(), &[("lib/libz.so", "zlib")]);
        std::fs::write(dir.path().join("lib-libz.so"), "a longer zlib").unwrap();
        let error = read(&files).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("changed since the server started"),
            "{error}"
        );
    }

    #[test]
    fn ldd_names_the_loader_and_the_libraries() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f5d)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f5e)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f5f)\n";
        let (loader, libraries) = parse_ldd(text);
        assert_eq!(loader, Some(PathBuf::from("/lib64/ld-linux-x86-64.so.2")));
        assert_eq!(
            libraries,
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
            ]
        );
        assert_eq!(parse_ldd("\tstatically linked\n"), (None, Vec::new()));
    }
}
