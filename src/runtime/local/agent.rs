//! A local node's agent: `batchpool agent` (this program), started by the server as a process of
//! its own session, so it outlives the server as a container would. It is known by its pid and
//! the time it started, which a pid reused by another process does not share.

use std::path::Path;

use crate::domain::agent::{ENV_NODE, ENV_ROOT, ENV_SECRET, ENV_URL};

/// The agent a local node's labels name.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct AgentProc {
    pub pid: i32,
    /// Its start time, in clock ticks since boot (/proc/{pid}/stat).
    pub start: u64,
    pub secret: String,
}

/// What a local node's commands find on their PATH, as the local runtime always gave them.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The agent's log, in its node's directory: private (never listed or served by the files
/// API), appended to across the agent's restarts.
const LOG: &str = ".batchpool-agent.log";

fn log_file(root: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(root.join(LOG))
}

impl AgentProc {
    /// Starts the agent of the node whose directory is `root`. Only what a node would have goes
    /// into its environment: the server's own (its secrets) stays out.
    pub fn spawn(root: &Path, node: &str, url: &str, secret: &str) -> std::io::Result<Self> {
        // This program; where its file was replaced since it started (an upgrade, a rebuild),
        // the one still running, through /proc.
        let exe = std::env::current_exe()
            .ok()
            .filter(|p| p.is_file())
            .unwrap_or_else(|| "/proc/self/exe".into());
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("agent")
            .env_clear()
            .env("PATH", PATH)
            .env("LANG", "C.UTF-8")
            .env(ENV_URL, url)
            .env(ENV_NODE, node)
            .env(ENV_SECRET, secret)
            .env(ENV_ROOT, root)
            .current_dir(root)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log_file(root)?);
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            })
        };
        let mut child = command.spawn()?;
        let pid = child.id().map(|p| p as i32).unwrap_or_default();
        // Reaped if it ends while this server runs; it outlives the server otherwise.
        tokio::spawn(async move { child.wait().await });
        let start =
            start_time(pid).ok_or_else(|| std::io::Error::other("the agent ended at once"))?;
        Ok(Self {
            pid,
            start,
            secret: secret.to_string(),
        })
    }

    /// The agent's log, as it is now.
    pub fn log(root: &Path) -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek};
        let mut file = crate::sys::safe_fs::Dir::open_root(root)?.open_file(Path::new(LOG))?;
        let len = file.metadata()?.len();
        let keep = super::super::MAX_AGENT_LOG as u64;
        file.seek(std::io::SeekFrom::Start(len.saturating_sub(keep)))?;
        let mut out = Vec::new();
        file.take(keep).read_to_end(&mut out)?;
        Ok(out)
    }

    /// Whether it still runs (and its pid is not another process's by now).
    pub fn alive(&self) -> bool {
        start_time(self.pid) == Some(self.start)
    }

    /// Stops it; it kills what it runs on its way out. One that was stopped (SIGSTOP, a
    /// debugger's detach) is continued to do so.
    pub fn stop(&self) {
        if self.pid > 1 && self.alive() {
            // SAFETY: kill(2) with plain integers.
            unsafe {
                libc::kill(self.pid, libc::SIGTERM);
                libc::kill(self.pid, libc::SIGCONT);
            }
        }
    }
}

/// A process's start time (field 22 of /proc/{pid}/stat, after the name in parentheses, which
/// may hold anything).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    // A zombie has ended: it only waits to be reaped.
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_a_start_time() {
        let me = std::process::id() as i32;
        assert!(super::start_time(me).is_some());
        assert_eq!(super::start_time(-1), None);
    }
}
