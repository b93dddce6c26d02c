//! The agent's processes: each command starts in a process group of its own, and one thread
//! reaps every child, including orphans a task left behind (the agent is their subreaper, or the
//! node's init), and hands each command's exit code to whoever waits for it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::spawn::{self, NotStarted};
use crate::domain::agent::{self, TaskLaunch, Usage};
use crate::domain::task_token;

#[derive(Clone)]
pub struct Procs {
    inner: Arc<Inner>,
}

struct Inner {
    /// Exit codes wanted, by pid. Held while a command starts, so the reaper never sees a child
    /// of ours before its pid is here.
    waiting: Mutex<HashMap<i32, oneshot::Sender<(i64, Usage)>>>,
    /// Wakes the reaper when a child starts while it has none.
    started: Condvar,
    /// CPU time (ms, user and kernel) of every child reaped so far, with the children they
    /// waited for.
    reaped_cpu_ms: std::sync::atomic::AtomicU64,
    /// The environment every command starts from (each variable's name, and its `name=value`
    /// entry): this process's, less the agent's settings. Made once.
    env: Vec<(OsString, std::ffi::CString)>,
    /// `AZ_BATCH_ACCOUNT_URL=` where this agent reaches the server, which serves tasks the
    /// Batch API there: for a task given a token and not where the API is.
    account_url: Option<std::ffi::CString>,
    /// Every command's input, and the output of those that are not tasks.
    null: std::fs::File,
    /// The stack of a child until its program runs (one starts at a time, under `waiting`).
    stack: Mutex<Box<[u8]>>,
}

/// The agent's own settings, which are not the node's.
const AGENT_ENV: [&str; 5] = [
    agent::ENV_SECRET,
    agent::ENV_URL,
    agent::ENV_NODE,
    agent::ENV_ROOT,
    agent::ENV_DIRS,
];

impl Procs {
    /// Starts the reaper; orphans of the node's processes are reparented to this process.
    pub fn start() -> std::io::Result<Self> {
        // SAFETY: prctl with an integer argument; it only marks this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        let env = std::env::vars_os()
            .filter(|(k, _)| !AGENT_ENV.iter().any(|a| k == a))
            .map(|(k, v)| Ok((k.clone(), spawn::env_entry(&k, &v)?)))
            .collect::<std::io::Result<_>>()?;
        let account_url = std::env::var_os(agent::ENV_URL)
            .map(|url| spawn::env_entry(task_token::URL_VAR.as_ref(), &url))
            .transpose()?;
        let procs = Self {
            inner: Arc::new(Inner {
                waiting: Mutex::default(),
                started: Condvar::new(),
                reaped_cpu_ms: Default::default(),
                env,
                account_url,
                null: std::fs::File::options()
                    .read(true)
                    .write(true)
                    .open("/dev/null")?,
                stack: Mutex::new(vec![0; spawn::STACK].into_boxed_slice()),
            }),
        };
        let inner = procs.inner.clone();
        std::thread::Builder::new()
            .name("reaper".into())
            .spawn(move || reap(&inner))?;
        Ok(procs)
    }

    /// Starts `argv` with this process's environment and `env`: a task's as `task` says (its
    /// directory and output files), anything else with its output dropped. Returns its pid and
    /// its exit code to come, with what it used.
    pub fn spawn(
        &self,
        argv: &[String],
        env: &[(String, String)],
        task: Option<&TaskLaunch>,
    ) -> Result<(i32, oneshot::Receiver<(i64, Usage)>), NotStarted> {
        let other = NotStarted::Other;
        let program = argv
            .first()
            .ok_or_else(|| other(std::io::Error::other("an empty command")))?;
        let cstring = |s: &str| {
            std::ffi::CString::new(s)
                .map_err(|_| other(std::io::Error::other("a NUL in an argument")))
        };
        // Their directory missing, the task cannot run where it must (its directory made, as
        // the agent had made it, must have been replaced since).
        let files = task
            .map(|t| std::io::Result::Ok((output(&t.stdout)?, output(&t.stderr)?)))
            .transpose()
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => NotStarted::Dir(e),
                _ => other(e),
            })?;
        let null = self.inner.null.as_fd();
        let (stdout, stderr) = files
            .as_ref()
            .map_or((null, null), |(out, err)| (out.as_fd(), err.as_fd()));
        let given = env
            .iter()
            .filter(|(k, _)| !AGENT_ENV.contains(&k.as_str()))
            .map(|(k, v)| Ok((k.as_str(), spawn::env_entry(k.as_ref(), v.as_ref())?)))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(other)?;
        let launch = spawn::Launch {
            program: cstring(program)?,
            argv: argv.iter().map(|a| cstring(a)).collect::<Result<_, _>>()?,
            env: self.environment(&given),
            dir: task.map(|t| cstring(&t.dir)).transpose()?,
            stdio: [null, stdout, stderr],
            user: task.and_then(|t| t.user).map(|u| u.uid),
        };
        let mut waiting = self.inner.waiting.lock().expect("lock");
        let pid = match spawn::spawn(&launch, &mut self.inner.stack.lock().expect("lock")) {
            Ok(pid) => pid,
            Err(NotStarted::Other(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                let missing = format!("{program} is not on the node");
                return Err(other(std::io::Error::other(missing)));
            }
            Err(e) => return Err(e),
        };
        let (tx, rx) = oneshot::channel();
        waiting.insert(pid, tx);
        drop(waiting);
        self.inner.started.notify_one();
        Ok((pid, rx))
    }

    /// This process's environment with `given` (names and entries) over it.
    fn environment<'a>(
        &'a self,
        given: &'a [(&str, std::ffi::CString)],
    ) -> Vec<&'a std::ffi::CStr> {
        let named = |k: &std::ffi::OsStr| given.iter().any(|(g, _)| k == *g);
        let base = self.inner.env.iter().filter(|(k, _)| !named(k));
        let has = |name: &str| given.iter().any(|(g, _)| *g == name);
        let url = (has(task_token::TOKEN_VAR) && !has(task_token::URL_VAR))
            .then_some(self.inner.account_url.as_deref())
            .flatten();
        base.map(|(_, entry)| entry.as_c_str())
            .chain(given.iter().map(|(_, entry)| entry.as_c_str()))
            .chain(url)
            .collect()
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
