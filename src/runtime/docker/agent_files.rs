//! The node agent's files: this very program and the shared libraries it loads, packed once
//! into a tar archive in the server's data directory. Each Docker host unpacks it once into a
//! volume of its own, which its nodes mount read-only, so any node image (a `FROM scratch`
//! busybox too) runs the agent without a registry, without a copy per node, and without a
//! file system shared with the server.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::Digest;

/// Where nodes see the agent's directory.
pub const AGENT_DIR: &str = "/opt/batchpool";

/// The last entry of the archive: a volume that holds it was filled to the end.
pub const COMPLETE: &str = ".complete";

/// The agent's files, packed for Docker hosts.
#[derive(Debug)]
pub struct AgentFiles {
    /// The command that starts the agent from [`AGENT_DIR`] in a node.
    pub command: Vec<String>,
    /// The archive, to unpack at [`AGENT_DIR`].
    pub archive: PathBuf,
    /// Names what the archive holds (each file's name, size and time), so a host keeps one
    /// volume per build of the agent.
    pub digest: String,
}

/// Packs this program and its libraries into `archive` (made anew).
pub fn prepare(archive: &Path) -> anyhow::Result<AgentFiles> {
    let exe = std::env::current_exe().context("finding this program")?;
    let (loader, libraries) = shared_libraries(&exe)?;
    let mut files = vec![(exe, "batchpool".to_string())];
    for library in libraries.iter().chain(loader.as_ref()) {
        let name = library.file_name().context("a library without a name")?;
        files.push((library.clone(), format!("lib/{}", name.to_string_lossy())));
    }
    let digest = pack(&files, archive)?;
    let program = format!("{AGENT_DIR}/batchpool");
    let command = match loader {
        // The node's own loader and libraries may differ or be missing: ours run the agent.
        Some(loader) => {
            let name = loader.file_name().context("a loader without a name")?;
            vec![
                format!("{AGENT_DIR}/lib/{}", name.to_string_lossy()),
                "--library-path".into(),
                format!("{AGENT_DIR}/lib"),
                program,
                "agent".into(),
            ]
        }
        None => vec![program, "agent".into()],
    };
    Ok(AgentFiles {
        command,
        archive: archive.to_path_buf(),
        digest,
    })
}

/// Writes `files` (each the file itself, not a link to it, under its name in the archive) and
/// then [`COMPLETE`] into a tar archive at `archive`; returns the digest of what it holds.
fn pack(files: &[(PathBuf, String)], archive: &Path) -> anyhow::Result<String> {
    let mut digest = sha2::Sha256::new();
    let out =
        std::fs::File::create(archive).with_context(|| format!("making {}", archive.display()))?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(out));
    tar.mode(tar::HeaderMode::Deterministic);
    let mut lib = tar::Header::new_gnu();
    lib.set_entry_type(tar::EntryType::Directory);
    lib.set_size(0);
    lib.set_mode(0o755);
    tar.append_data(&mut lib, "lib/", std::io::empty())?;
    for (path, name) in files {
        let path =
            std::fs::canonicalize(path).with_context(|| format!("finding {}", path.display()))?;
        let meta = std::fs::metadata(&path)?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .unwrap_or_default();
        digest.update(format!("{name}\0{}\0{}\0", meta.len(), modified.as_nanos()));
        let mut file =
            std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(&meta, tar::HeaderMode::Deterministic);
        // What runs the agent must stay runnable in the node, whoever it runs as.
        header.set_mode(0o755);
        tar.append_data(&mut header, name, &mut file)
            .with_context(|| format!("packing {}", path.display()))?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(0o644);
    tar.append_data(&mut header, COMPLETE, std::io::empty())?;
    tar.into_inner()?.flush()?;
    let hex: String = digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(hex)
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
