//! How a command runs on a node, whatever the runtime: the wrapper around it, the task
//! directories it runs in, and the record each attempt leaves there.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::safe_fs::Below;
use crate::domain::agent::{MakeDirs, Slots, TaskLaunch, Usage, Work};
use crate::domain::container::ContainerSettings;
use crate::domain::run_as::TaskUser;

/// A command to run on a node, as Azure Batch runs task command lines: through `/bin/sh -c` in
/// the task's `wd`, with stdout.txt and stderr.txt written into the task directory as it runs.
#[derive(Clone, Debug)]
pub struct ExecSpec {
    pub command_line: String,
    pub dirs: TaskDirs,
    /// Each attempt keeps its pid and exit code apart, so a late write of an old attempt never
    /// passes for the new one's.
    pub attempt: i32,
    pub env: Vec<(String, String)>,
    /// The task's own container, if it runs in one rather than in its node's.
    pub container: Option<TaskContainer>,
    /// The non-administrator it runs as; the node's administrator if None.
    pub user: Option<TaskUser>,
    /// The task's slots of its node's, for its node's agent to start it once they are free;
    /// None for a command that starts at once (a start task, a job preparation task).
    pub slots: Option<Slots>,
}

/// What a node's agent said of a command as it ended, besides its exit code.
#[derive(Debug, Default)]
pub struct ExitReport {
    pub usage: Option<Usage>,
    pub output: Option<crate::domain::agent::ExitOutput>,
}

/// Who learns what of a command as it starts.
#[derive(Default)]
pub struct Started {
    /// The pid of its process group, as the node sees it.
    pub pid: Option<tokio::sync::oneshot::Sender<i32>>,
    /// The id of its own container, if it runs in one.
    pub container: Option<tokio::sync::oneshot::Sender<String>>,
    /// What it used and the output it left, once it ended, where its node's agent started
    /// it and measured it.
    pub report: Option<tokio::sync::oneshot::Sender<ExitReport>>,
    /// Cancelled when the command is no longer wanted: one its node's agent holds for a slot
    /// is dropped there, never started (one that runs is killed by its pid, as before).
    pub stop: Option<tokio_util::sync::CancellationToken>,
}

impl Started {
    pub fn pid(pid: tokio::sync::oneshot::Sender<i32>) -> Self {
        Self {
            pid: Some(pid),
            ..Self::default()
        }
    }
}

/// The label of an attempt's own container.
pub fn container_label(job_id: &str, task_id: &str, attempt: i32) -> String {
    format!("{job_id}/{task_id}/{attempt}")
}

/// A task's own container: its settings, and its share of the node (its required slots over
/// the node's), which bounds it where the engine cannot nest it inside the node's limits.
#[derive(Clone, Debug)]
pub struct TaskContainer {
    pub settings: ContainerSettings,
    pub share: f64,
    /// `job/task/attempt`, to label the container with.
    pub label: String,
}

/// A task directory, on this host and as the node sees it. On this host it lies below a
/// directory the server made (an account's workitems, a node's root): everything below that is
/// the tasks' to write, so it is only ever reached through `safe_fs`.
#[derive(Clone, Debug)]
pub struct TaskDirs {
    pub host: Below,
    pub node: String,
    /// `host.root` as the node sees it: `node` is `host.rel` below it.
    pub node_base: String,
}

impl TaskDirs {
    /// Where the wrapper leaves an attempt's record, in the task directory: its pid on the
    /// first line, and once the command has ended, its exit code on the second. One file beside
    /// `wd`, not a directory of two, nor a file in a directory of records: every file or
    /// directory a task makes costs an inode on the hot path, a directory a block as well.
    fn state_file(attempt: i32) -> PathBuf {
        PathBuf::from(format!("{STATE_DIR}.{attempt}"))
    }

    /// Where builds before 2026-11-26 kept the record, in a directory of records: a node's
    /// agent started before an upgrade still writes there.
    fn legacy_state_file(attempt: i32) -> PathBuf {
        Path::new(STATE_DIR).join(attempt.to_string())
    }

    /// Where the attempt's record is on this host, below the task directory's root.
    pub fn record(&self, attempt: i32) -> Below {
        self.below(&Self::state_file(attempt))
    }

    /// Where a build before 2026-11-26 kept the attempt's record.
    pub(super) fn legacy_record(&self, attempt: i32) -> Below {
        self.below(&Self::legacy_state_file(attempt))
    }

    fn below(&self, rel: &Path) -> Below {
        Below {
            root: self.host.root.clone(),
            rel: self.host.rel.join(rel),
        }
    }

    /// What [`prepare`](Self::prepare) does, for a node's agent to do on the node: the same
    /// directories, below the same root as the node sees it.
    fn make_dirs(&self, attempt: i32) -> MakeDirs {
        let below = |p: &Path| self.host.rel.join(p).to_string_lossy().into_owned();
        MakeDirs {
            base: self.node_base.clone(),
            remove: Self::left_before(attempt)
                .iter()
                .map(|p| below(p))
                .collect(),
            dirs: vec![below(Path::new("wd"))],
        }
    }

    /// What an earlier attempt left that goes before this one starts: a record of this attempt
    /// number (it must not pass for this one's), and after a first attempt, its output. The
    /// output is made anew, not emptied: a follow of the earlier attempt
    /// (`FileOp::Follow`) still holds all it wrote.
    fn left_before(attempt: i32) -> Vec<PathBuf> {
        let mut gone = vec![Self::state_file(attempt), Self::legacy_state_file(attempt)];
        if attempt > 1 {
            gone.extend(["stdout.txt", "stderr.txt"].map(PathBuf::from));
        }
        gone
    }

    /// What [`prepare`](Self::prepare) does, through the node's agent: for a task in a
    /// container of its own, which the agent does not start.
    pub(super) async fn prepare_through(
        &self,
        files: super::TaskFiles<'_>,
        attempt: i32,
    ) -> Result<(), super::NodeError> {
        for gone in Self::left_before(attempt) {
            files.remove(&gone).await?;
        }
        files.make_dir(Path::new("wd")).await
    }

    /// Makes the directories the wrapper needs, on this host, for a node that runs no agent.
    /// One trip to the blocking pool for all of it, not one each. The root is the server's
    /// (made with the node, unless removed since).
    pub(super) async fn prepare(&self, attempt: i32) -> anyhow::Result<()> {
        self.host
            .create_then(move |task| {
                task.create_dir_all(Path::new("wd"))?;
                // One behind a link a task left is not there.
                for gone in Self::left_before(attempt) {
                    task.discard(&gone)?;
                }
                Ok(())
            })
            .await
            .with_context(|| format!("preparing the task directory {}", self.node))
    }
}

/// A task's command as a node runs it (not in a container of its own): everything the
/// [`WRAPPER`] reads from its environment, given apart.
#[derive(Clone, Debug)]
pub struct NodeCommand {
    pub command_line: String,
    /// The task's directory; the node's agent makes what the command needs in it.
    pub dirs: TaskDirs,
    pub attempt: i32,
    /// The task's own environment and where its directories are.
    pub env: Vec<(String, String)>,
    /// The non-administrator it runs as; the node's administrator if None.
    pub user: Option<TaskUser>,
    /// Its slots of its node's ([`ExecSpec::slots`]).
    pub slots: Option<Slots>,
}

impl NodeCommand {
    /// The attempt's record, as the node sees it.
    pub fn record(&self) -> String {
        format!("{}/{STATE_DIR}.{}", self.dirs.node, self.attempt)
    }

    /// Makes the directories the command needs from this server, for a node without an agent.
    pub async fn prepare(&self) -> anyhow::Result<()> {
        self.dirs.prepare(self.attempt).await
    }

    /// The work that has a node's agent run it (`id` names it), doing what the wrapper does.
    /// It takes the command: a running attempt holds none of it while it waits.
    pub fn work(self, id: u64) -> Work {
        let record = self.record();
        Work::Run {
            id,
            argv: vec!["/bin/sh".into(), "-c".into(), self.command_line],
            env: self.env,
            task: Some(TaskLaunch {
                dir: format!("{}/wd", self.dirs.node),
                stdout: format!("{}/stdout.txt", self.dirs.node),
                stderr: format!("{}/stderr.txt", self.dirs.node),
                record,
                make: Some(self.dirs.make_dirs(self.attempt)),
                user: self.user,
                slots: self.slots,
            }),
        }
    }

    /// The wrapper's environment, where the command runs through [`WRAPPER`] instead.
    pub fn wrapper_env(&self) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        env.push(("BATCHPOOL_STATE".into(), self.record()));
        env.push(("BATCHPOOL_COMMAND_LINE".into(), self.command_line.clone()));
        env
    }
}

impl super::Runtime {
    /// The user a node starts a command as, to run it as `run_as`. A local node runs every
    /// command as its agent's user (the server's), which the API lets tasks ask for only as
    /// what it is (`api::batch::identity`); a Docker node's agent is root, and starts a
    /// non-administrator's command as a user of its own.
    pub fn task_user(&self, run_as: crate::domain::run_as::RunAs) -> Option<TaskUser> {
        match self.name() {
            "local" => None,
            _ => run_as.user(),
        }
    }
}

impl ExecSpec {
    /// The command, as a node runs it.
    pub(super) fn node_command(self) -> NodeCommand {
        let mut env = self.env;
        env.push(("AZ_BATCH_TASK_DIR".into(), self.dirs.node.clone()));
        env.push((
            "AZ_BATCH_TASK_WORKING_DIR".into(),
            format!("{}/wd", self.dirs.node),
        ));
        if self.user.is_some() {
            // A non-administrator's home is its task directory, which is its own.
            env.push(("HOME".into(), self.dirs.node.clone()));
        }
        NodeCommand {
            command_line: self.command_line,
            dirs: self.dirs,
            attempt: self.attempt,
            env,
            user: self.user,
            slots: self.slots,
        }
    }

    /// The wrapper's environment: the task's own, where the task's directories are on the node,
    /// where to record the attempt, and the command line.
    pub(super) fn wrapper_env(&self) -> Vec<(String, String)> {
        self.clone().node_command().wrapper_env()
    }
}

/// An attempt's process group on its node: its pid, and the boot of the agent that started it
/// (None where the wrapper did), so that after the node restarted the pid, now another
/// process's or none, is not taken for it.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptPid {
    pub pid: i32,
    pub boot: Option<String>,
}

impl AttemptPid {
    /// A pid as this server learnt it from the start it asked for.
    pub fn started(pid: i32) -> Self {
        Self { pid, boot: None }
    }

    /// The work that kills its group.
    pub fn kill(&self, id: u64) -> Work {
        let (pid, boot) = (self.pid, self.boot.clone());
        Work::Kill { id, pid, boot }
    }

    /// The work that asks whether it is alive.
    pub fn alive(&self, id: u64) -> Work {
        let (pid, boot) = (self.pid, self.boot.clone());
        Work::Alive { id, pid, boot }
    }
}

/// An attempt's record: (its process, exit code once written). The first line is the pid, with
/// the agent's boot after a space where an agent started it. A line counts once its newline is
/// there, so a half-written record reads as "not yet".
pub(super) fn parse_record(text: &str) -> Record {
    let mut lines = text.split_inclusive('\n').filter(|l| l.ends_with('\n'));
    let pid = lines.next().and_then(|l| {
        let mut words = l.split_whitespace();
        let pid = words.next()?.parse().ok()?;
        let boot = words.next().map(str::to_string);
        Some(AttemptPid { pid, boot })
    });
    let exit = lines.next().and_then(|l| l.trim().parse().ok());
    (pid, exit)
}

/// What an attempt's record says: its process, and its exit code once written.
pub type Record = (Option<AttemptPid>, Option<i64>);

/// The most bytes of a record read: two short lines.
pub(super) const RECORD_MAX: usize = 128;

/// Hidden in file listings: the wrapper's bookkeeping inside a task directory.
pub const STATE_DIR: &str = ".batchpool";

/// The wrapper a command runs in where no node agent starts it (a task in a container of its
/// own; a Docker node made before nodes had agents). It does what the agent does: it records its
/// pid (the process group to kill) and, when the command ends, its exit code, both in the
/// attempt's record, so a restarted server reads the outcome of an attempt it did not see
/// finish. It also prints its pid first on its own output, which is the server's, so the server
/// knows whom to kill without reading a file in a directory that may be gone. The command line
/// travels in an environment variable, so no quoting breaks it. It starts in BATCHPOOL_WORKDIR
/// where a container task starts in its image's directory. It starts no program but itself: the
/// command runs in a subshell (a fork, no exec of a second shell), where its `exit`, `exec`,
/// options and syntax errors end the subshell only, as they would end a `/bin/sh -c` of their own.
pub(super) const WRAPPER: &str = r#"cd "${BATCHPOOL_WORKDIR:-$AZ_BATCH_TASK_WORKING_DIR}" || exit 127
echo $$ > "$BATCHPOOL_STATE"
echo $$
(eval "$BATCHPOOL_COMMAND_LINE") >"$AZ_BATCH_TASK_DIR/stdout.txt" 2>"$AZ_BATCH_TASK_DIR/stderr.txt" </dev/null
code=$?
echo $code >> "$BATCHPOOL_STATE"
exit $code"#;

#[cfg(test)]
mod tests {
    use super::{parse_record, AttemptPid};

    #[test]
    fn a_record_counts_its_lines_once_they_end() {
        let pid = |pid, boot: Option<&str>| {
            Some(AttemptPid {
                pid,
                boot: boot.map(str::to_string),
            })
        };
        assert_eq!(parse_record(""), (None, None));
        assert_eq!(parse_record("12"), (None, None));
        assert_eq!(parse_record("12\n"), (pid(12, None), None));
        assert_eq!(parse_record("12\n13"), (pid(12, None), None));
        assert_eq!(parse_record("12\n137\n"), (pid(12, None), Some(137)));
        assert_eq!(
            parse_record("12 b00t\n0\n"),
            (pid(12, Some("b00t")), Some(0))
        );
        assert_eq!(parse_record("x\n0\n"), (None, Some(0)));
    }
}
