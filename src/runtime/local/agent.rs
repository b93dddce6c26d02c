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

/// Ends every process of `node_id` on this machine: its agents (this server's, or another's of
/// the installation, whose data directory held the node when it led) are stopped and given 10 s
/// to end what they run; then whatever still runs with the node's id in its environment (a
/// command whose agent was killed outright) is killed. Nothing of a node's old life runs on
/// once it is removed or made again.
pub(super) async fn end_node_processes(node_id: &str) {
    let find = |agents: bool| {
        let node_id = node_id.to_string();
        tokio::task::spawn_blocking(move || processes_of(&node_id, agents))
    };
    let agents = find(true).await.unwrap_or_default();
    for agent in &agents {
        tracing::info!(node = node_id, pid = agent.pid, "stopping the node's agent");
        agent.stop();
    }
    for _ in 0..100 {
        if agents.iter().all(|a| !a.alive()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for left in find(false).await.unwrap_or_default() {
        tracing::warn!(
            node = node_id,
            pid = left.pid,
            "killing a process the node's agent left"
        );
        // SAFETY: kill(2) with plain integers; the process is this user's, of this node.
        unsafe { libc::kill(left.pid, libc::SIGKILL) };
    }
}

/// The processes of `node_id` this user may see: its agents (this program's `agent`, the node
/// in its environment), or (`agents` false) any with the node's id in its environment.
fn processes_of(node_id: &str, agents: bool) -> Vec<AgentProc> {
    let wanted = [
        format!("{ENV_NODE}={node_id}"),
        format!("AZ_BATCH_NODE_ID={node_id}"),
    ];
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if agents {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if cmdline.split(|b| *b == 0).nth(1) != Some(b"agent".as_slice()) {
                continue;
            }
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let names = |v: &[u8]| wanted.iter().any(|w| v == w.as_bytes());
        if !environ.split(|b| *b == 0).any(names) {
            continue;
        }
        if let Some(start) = start_time(pid) {
            let secret = String::new();
            found.push(AgentProc { pid, start, secret });
        }
    }
    found
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
