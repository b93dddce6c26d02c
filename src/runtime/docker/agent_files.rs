//! The node agent's files: this very program and the shared libraries it loads, put in a
//! directory of the server's that nodes mount read-only, so any node image (a `FROM scratch`
//! busybox too) runs the agent without a registry and without a copy per node.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Where nodes see the agent's directory.
pub const AGENT_DIR: &str = "/opt/batchpool";

/// Fills `dir` (made anew) with this program and its libraries; returns the command that
/// starts the agent from [`AGENT_DIR`] in a node.
pub fn prepare(dir: &Path) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe().context("finding this program")?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("making {}", lib.display()))?;
    link_or_copy(&exe, &dir.join("batchpool"))?;
    let (loader, libraries) = shared_libraries(&exe)?;
    for library in &libraries {
        let name = library.file_name().context("a library without a name")?;
        link_or_copy(library, &lib.join(name))?;
    }
    let program = format!("{AGENT_DIR}/batchpool");
    Ok(match loader {
        // The node's own loader and libraries may differ or be missing: ours run the agent.
        Some(loader) => {
            let name = loader.file_name().context("a loader without a name")?;
            link_or_copy(&loader, &lib.join(name))?;
            vec![
                format!("{AGENT_DIR}/lib/{}", name.to_string_lossy()),
                "--library-path".into(),
                format!("{AGENT_DIR}/lib"),
                program,
                "agent".into(),
            ]
        }
        None => vec![program, "agent".into()],
    })
}

/// A hard link where the file system allows one (no copy of a large program), else a copy.
fn link_or_copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    // The file itself, not a link to it (a link would point into the node's own files).
    let from =
        &std::fs::canonicalize(from).with_context(|| format!("finding {}", from.display()))?;
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    Ok(())
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
