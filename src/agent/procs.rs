//! The agent's processes: each command starts in a process group of its own, and one thread
//! reaps every child, including orphans a task left behind (the agent is their subreaper, or the
//! node's init), and hands each command's exit code to whoever waits for it.

use std::collections::HashMap;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::domain::agent::{self, TaskLaunch, Usage};

#[derive(Clone, Default)]
pub struct Procs {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Exit codes wanted, by pid. Held while a command starts, so the reaper never sees a child
    /// of ours before its pid is here.
    waiting: Mutex<HashMap<i32, oneshot::Sender<(i64, Usage)>>>,
    /// Wakes the reaper when a child starts while it has none.
    started: Condvar,
    /// CPU time (ms, user and kernel) of every child reaped so far, with the children they
    /// waited for.
    reaped_cpu_ms: std::sync::atomic::AtomicU64,
}

impl Procs {
    /// Starts the reaper; orphans of the node's processes are reparented to this process.
    pub fn start() -> Self {
        // SAFETY: prctl with an integer argument; it only marks this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        let procs = Self::default();
        let inner = procs.inner.clone();
        std::thread::Builder::new()
            .name("reaper".into())
            .spawn(move || reap(&inner))
            .expect("starting the reaper thread");
        procs
    }

    /// Starts `argv` with this process's environment and `env`: a task's as `task` says (its
    /// directory and output files), anything else with its output dropped. Returns its pid and
    /// its exit code to come, with what it used.
    pub fn spawn(
        &self,
        argv: &[String],
        env: &[(String, String)],
        task: Option<&TaskLaunch>,
    ) -> std::io::Result<(i32, oneshot::Receiver<(i64, Usage)>)> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("an empty command"))?;
        if !std::path::Path::new(program).exists() {
            return Err(std::io::Error::other(format!(
                "{program} is not on the node"
            )));
        }
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            // The agent's own settings are not the node's.
            .env_remove(agent::ENV_SECRET)
            .env_remove(agent::ENV_URL)
            .env_remove(agent::ENV_NODE)
            .env_remove(agent::ENV_ROOT)
            .env_remove(agent::ENV_DIRS)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(task) = task {
            command
                .current_dir(&task.dir)
                .stdout(output(&task.stdout)?)
                .stderr(output(&task.stderr)?);
        }
        let mut waiting = self.inner.waiting.lock().expect("lock");
        let child = command.spawn()?;
        let pid = child.id() as i32;
        // The reaper, not `child`, waits for it.
        drop(child);
        let (tx, rx) = oneshot::channel();
        waiting.insert(pid, tx);
        drop(waiting);
        self.inner.started.notify_one();
        Ok((pid, rx))
    }
}

/// A task's output file, made anew; never through a link.
fn output(path: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// An attempt's record, open from its command's start to its end: one open for both lines.
pub struct Record(std::fs::File);

impl Record {
    /// Opens (makes, if need be) the record at `path`; never through a link.
    pub fn open(path: &str) -> std::io::Result<Self> {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map(Self)
    }

    /// Adds a line, in one write.
    pub fn add(&mut self, line: impl std::fmt::Display) -> std::io::Result<()> {
        use std::io::Write;
        self.0.write_all(format!("{line}\n").as_bytes())
    }
}

/// Sends `signal` to `pid` (a process group, if negative; 0 only asks whether it exists);
/// whether there was one. The node's init and this agent are never signalled.
pub fn signal(pid: i32, signal: i32) -> bool {
    if pid.unsigned_abs() <= 1 || pid.unsigned_abs() == std::process::id() {
        return false;
    }
    // kill(2) takes a thread's id too, and this agent's threads share the node's pid numbers:
    // a task's pid from before a node restart can be one of them now. Only a process counts.
    if pid > 0 && !is_process(pid) {
        return false;
    }
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid, signal) == 0 }
}

impl Procs {
    /// The process groups of the commands that run now (each command leads its own).
    pub fn groups(&self) -> Vec<i32> {
        self.inner
            .waiting
            .lock()
            .expect("lock")
            .keys()
            .copied()
            .collect()
    }

    /// CPU time (ms) of the children reaped so far.
    pub fn reaped_cpu_ms(&self) -> u64 {
        self.inner
            .reaped_cpu_ms
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Kills every command this agent started that still runs (their process groups): the
    /// node is going away.
    pub fn kill_all(&self) {
        for pid in self.inner.waiting.lock().expect("lock").keys() {
            signal(-pid, libc::SIGKILL);
        }
    }
}

/// Whether `pid` is a process (its thread group's leader), not one of a process's threads.
fn is_process(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .is_some_and(|tgid| tgid.trim() == pid.to_string())
    })
}

/// Reaps children for ever: hands ours their exit codes and usage, and lets orphans go.
fn reap(inner: &Inner) {
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of the plain C struct.
        let mut used: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 with valid pointers to an int and a rusage.
        let pid = unsafe { libc::wait4(-1, &mut status, 0, &mut used) };
        if pid > 0 {
            let used = usage(&used);
            inner.reaped_cpu_ms.fetch_add(
                used.user_ms + used.kernel_ms,
                std::sync::atomic::Ordering::Relaxed,
            );
            if let Some(tx) = inner.waiting.lock().expect("lock").remove(&pid) {
                let _ = tx.send((exit_code(status), used));
            }
            continue;
        }
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            // No children: sleep until one starts (or a while, for orphans adopted meanwhile).
            let waiting = inner.waiting.lock().expect("lock");
            if waiting.is_empty() {
                let _ = inner.started.wait_timeout(waiting, Duration::from_secs(1));
            }
        }
    }
}

/// What a reaped child used. Linux counts `ru_inblock` and `ru_oublock` in 512-byte units of
/// storage I/O.
fn usage(used: &libc::rusage) -> Usage {
    let ms = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1000 + u64::try_from(t.tv_usec).unwrap_or(0) / 1000
    };
    let bytes = |blocks: libc::c_long| u64::try_from(blocks).unwrap_or(0) * 512;
    Usage {
        user_ms: ms(used.ru_utime),
        kernel_ms: ms(used.ru_stime),
        read_bytes: bytes(used.ru_inblock),
        write_bytes: bytes(used.ru_oublock),
    }
}

/// The exit code as a shell reports it: 128 + the signal, if a signal ended the process.
fn exit_code(status: i32) -> i64 {
    if libc::WIFEXITED(status) {
        i64::from(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        128 + i64::from(libc::WTERMSIG(status))
    } else {
        -1
    }
}
