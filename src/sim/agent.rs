//! One simulated node's agent: the protocol of `batchpool agent` (`domain::agent`), spoken to the
//! same server routes, with the link, the event batching and the slot gate of the real agent,
//! and with commands that only pretend to run. A command "runs" for the seconds its command
//! line's first `sleep N` says (or `SIM_SECONDS` in its environment), then exits with `exit N`'s
//! code (or `SIM_EXIT_CODE`, else 0), leaving a one-line `stdout.txt`. Every decision stays the
//! server's: this answers what it is asked, as a node would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::fs::{self, Fs, MAX_FILE};
use crate::agent::gate::Gate;
use crate::agent::link::Link;
use crate::domain::agent::{
    Event, FileError, FileOp, Load, ReplyHead, Slots, TaskLaunch, Work, EVENTS_PATH,
    LOAD_PERIOD_SECS,
};

/// A command waiting for its slots, or running.
struct Command {
    id: u64,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    task: Option<TaskLaunch>,
}

/// What one boot of a simulated node's agent holds: its link, its files (kept across boots by
/// the node), what runs and what waits.
pub struct Agent {
    link: Arc<Link>,
    fs: Arc<Mutex<Fs>>,
    events: mpsc::UnboundedSender<Event>,
    gate: Mutex<Gate<Command>>,
    /// Until when the node answers questions (files, kills, liveness) late: set through the
    /// simulator's API, kept by the node across boots.
    slow: Slow,
    /// The running commands by pid: a kill ends them.
    running: Mutex<HashMap<i32, oneshot::Sender<()>>>,
    next_pid: std::sync::atomic::AtomicI32,
    /// CPU time the simulated commands "used": their run time, as if each kept a core busy.
    cpu_ms: std::sync::atomic::AtomicU64,
    /// Commands started, by every node of the simulator.
    started: StartCount,
}

/// How many commands the simulator's nodes have started.
pub type StartCount = Arc<std::sync::atomic::AtomicU64>;

/// Starts an agent for the node over `link`, with `fs` its files; its loops end when the
/// returned handles are aborted (the node stops) or the server gives the node up.
/// Until when a node answers its server's questions late (None: it answers at once).
pub type Slow = Arc<Mutex<Option<std::time::Instant>>>;

pub fn start(
    link: Link,
    fs: Arc<Mutex<Fs>>,
    (slow, started): (Slow, StartCount),
) -> Vec<tokio::task::JoinHandle<()>> {
    let (events, outbox) = mpsc::unbounded_channel();
    let agent = Arc::new(Agent {
        link: Arc::new(link),
        fs,
        slow,
        events,
        gate: Mutex::default(),
        running: Mutex::default(),
        next_pid: std::sync::atomic::AtomicI32::new(100),
        cpu_ms: Default::default(),
        started,
    });
    vec![
        tokio::spawn(crate::agent::send_events(agent.link.clone(), outbox)),
        tokio::spawn(report_load(agent.clone())),
        tokio::spawn(take_work(agent)),
    ]
}

/// Asks the server for work and answers it, until the leader has given the node up.
async fn take_work(agent: Arc<Agent>) {
    let link = agent.link.clone();
    let new_term = || {
        agent.gate().clear();
    };
    crate::agent::poll_work(&link, new_term, |work| agent.clone().take(work)).await;
}

impl Agent {
    fn gate(&self) -> std::sync::MutexGuard<'_, Gate<Command>> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fs(&self) -> std::sync::MutexGuard<'_, Fs> {
        self.fs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(self: Arc<Self>, work: Work) {
        let question = matches!(
            work,
            Work::Kill { .. } | Work::Alive { .. } | Work::File { .. }
        );
        let late = *self.slow.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(wait) = late
            .and_then(|until| until.checked_duration_since(std::time::Instant::now()))
            .filter(|_| question)
        {
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                self.take(work);
            });
            return;
        }
        let ours = |boot: &Option<String>| boot.as_ref().is_none_or(|b| *b == self.link.boot);
        match work {
            Work::Run {
                id,
                argv,
                env,
                task,
            } => {
                let slots = task.as_ref().and_then(|t| t.slots);
                let command = Command {
                    id,
                    argv,
                    env,
                    task,
                };
                let admitted = self.gate().admit(id, slots, command);
                if let Some(command) = admitted {
                    self.start(command);
                }
            }
            Work::Drop { run, .. } => {
                if self.gate().cancel(run).is_some() {
                    let message = "it was no longer wanted before a slot freed for it".into();
                    let _ = self.events.send(Event::Failed { id: run, message });
                }
            }
            Work::Kill { id, pid, boot } => {
                let stop = ours(&boot)
                    .then(|| self.running.lock().expect("lock").remove(&pid))
                    .flatten();
                let yes = stop.is_some_and(|stop| stop.send(()).is_ok());
                let _ = self.events.send(Event::Answered { id, yes });
            }
            Work::Alive { id, pid, boot } => {
                let yes = ours(&boot) && self.running.lock().expect("lock").contains_key(&pid);
                let _ = self.events.send(Event::Answered { id, yes });
            }
            Work::File {
                id, root, rel, op, ..
            } => {
                tokio::spawn(async move { self.answer_file(id, root, rel, op).await });
            }
        }
    }

    /// Starts the command: its directories and record, `Started`, then its "run" and `Exited`,
    /// and the commands its slots let start.
    fn start(self: Arc<Self>, command: Command) {
        let pid = self
            .next_pid
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (seconds, code) = pretend(&command.argv, &command.env);
        let slots = command.task.as_ref().and_then(|t| t.slots);
        if let Some(task) = &command.task {
            let mut fs = self.fs();
            if let Some(make) = &task.make {
                for gone in make.remove.iter().filter_map(|r| fs::join(&make.base, r)) {
                    fs.remove_all(&gone);
                }
                for dir in make.dirs.iter().filter_map(|d| fs::join(&make.base, d)) {
                    fs.make_dir(&dir);
                }
            }
            fs.make_dir(&task.dir);
            fs.write(&task.stdout, Bytes::new(), None);
            fs.write(&task.stderr, Bytes::new(), None);
            fs.append(&task.record, &format!("{pid} {}", self.link.boot));
        }
        let (stop, stopped) = oneshot::channel();
        self.running.lock().expect("lock").insert(pid, stop);
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = self.events.send(Event::Started {
            id: command.id,
            pid,
        });
        tokio::spawn(async move {
            let began = std::time::Instant::now();
            let code = tokio::select! {
                () = tokio::time::sleep(Duration::from_secs_f64(seconds)) => code,
                _ = stopped => 128 + 9,
            };
            self.running.lock().expect("lock").remove(&pid);
            let ran = began.elapsed().as_millis() as u64;
            self.cpu_ms
                .fetch_add(ran, std::sync::atomic::Ordering::Relaxed);
            let mut output = None;
            if let Some(task) = &command.task {
                let line = command.argv.last().map(String::as_str).unwrap_or_default();
                let stdout = format!("simulated: {line}\n");
                output = Some(crate::domain::agent::ExitOutput {
                    stdout: crate::domain::agent::Captured::of(stdout.as_bytes()),
                    stderr: crate::domain::agent::Captured::of(b""),
                });
                let mut fs = self.fs();
                fs.write(&task.stdout, Bytes::from(stdout), None);
                fs.append(&task.record, &code.to_string());
            }
            let usage = Some(crate::domain::agent::Usage {
                user_ms: ran,
                ..Default::default()
            });
            let _ = self.events.send(Event::Exited {
                id: command.id,
                code,
                usage,
                output,
            });
            self.released(slots);
        });
    }

    fn released(self: &Arc<Self>, slots: Option<Slots>) {
        let freed = self.gate().release(slots);
        for command in freed {
            self.clone().start(command);
        }
    }

    /// Answers a question about files on the replies route; a write fetches its bytes first.
    async fn answer_file(&self, id: u64, root: String, rel: String, op: FileOp) {
        if let FileOp::Write { mode } = op {
            let head = match self.fetch_body(id).await {
                Ok(data) => match fs::join(&root, &rel) {
                    Some(path) => {
                        self.fs().write(&path, data, mode);
                        self.fs().answer(&root, &rel, &FileOp::Stat).head
                    }
                    None => failed(format!("{rel:?} is not a plain relative path")),
                },
                Err(e) => failed(format!("{e:#}")),
            };
            return self.reply(id, head, Bytes::new()).await;
        }
        let answer = self.fs().answer(&root, &rel, &op);
        self.reply(id, answer.head, answer.body).await
    }

    async fn fetch_body(&self, id: u64) -> anyhow::Result<Bytes> {
        let response = crate::agent::files::body(&self.link, id).await?;
        anyhow::ensure!(
            response
                .content_length()
                .is_none_or(|n| n <= MAX_FILE as u64),
            "a simulated node keeps files of at most {MAX_FILE} bytes"
        );
        let data = response.bytes().await?;
        anyhow::ensure!(
            data.len() <= MAX_FILE,
            "a simulated node keeps files of at most {MAX_FILE} bytes"
        );
        Ok(data)
    }

    async fn reply(&self, id: u64, head: ReplyHead, body: Bytes) {
        let rest = stream::once(async move { Ok(body) }).boxed();
        if let Err(e) = crate::agent::files::post(&self.link, id, head, rest).await {
            tracing::debug!(error = %e, id, "a file answer did not reach the server");
        }
    }
}

fn failed(message: String) -> ReplyHead {
    ReplyHead::Error {
        error: FileError::Failed,
        message,
    }
}

/// Reports what the node's commands "used" every [`LOAD_PERIOD_SECS`], as a real agent does.
async fn report_load(agent: Arc<Agent>) {
    let mut every = tokio::time::interval(Duration::from_secs(LOAD_PERIOD_SECS));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let cpu_ms = agent.cpu_ms.load(std::sync::atomic::Ordering::Relaxed);
        let batch = crate::domain::agent::Events {
            boot: agent.link.boot.clone(),
            events: Vec::new(),
            load: Some(Load {
                cpu_ms,
                memory_bytes: 0,
            }),
        };
        let _ = agent
            .link
            .post::<_, serde::de::IgnoredAny>(EVENTS_PATH, &batch)
            .await;
    }
}

/// How long a simulated command runs and the code it exits with: `SIM_SECONDS` and
/// `SIM_EXIT_CODE` from its environment, else its command line's first `sleep N` and last
/// `exit N`, else at once and 0.
pub fn pretend(argv: &[String], env: &[(String, String)]) -> (f64, i64) {
    let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let line = argv.last().map(String::as_str).unwrap_or_default();
    let after = |word: &str| -> Vec<&str> {
        let words: Vec<&str> = line
            .split(|c: char| {
                c.is_whitespace() || matches!(c, ';' | '&' | '|' | '\'' | '"' | '(' | ')')
            })
            .filter(|w| !w.is_empty())
            .collect();
        words
            .windows(2)
            .filter(|w| w[0] == word)
            .map(|w| w[1])
            .collect()
    };
    let seconds = var("SIM_SECONDS")
        .and_then(|v| v.parse::<f64>().ok())
        .or_else(|| after("sleep").first().and_then(|v| v.parse::<f64>().ok()))
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(0.0)
        .min(7.0 * 24.0 * 3600.0);
    let code = var("SIM_EXIT_CODE")
        .and_then(|v| v.parse::<i64>().ok())
        .or_else(|| after("exit").last().and_then(|v| v.parse::<i64>().ok()))
        .unwrap_or(0);
    (seconds, code)
}

#[cfg(test)]
mod tests {
    use super::pretend;

    fn argv(line: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), line.into()]
    }

    #[test]
    fn a_command_runs_for_its_sleep_and_exits_with_its_exit() {
        assert_eq!(pretend(&argv("sleep 2.5"), &[]), (2.5, 0));
        assert_eq!(
            pretend(&argv("/bin/bash -c 'echo hi; sleep 3; exit 4'"), &[]),
            (3.0, 4)
        );
        assert_eq!(pretend(&argv("true"), &[]), (0.0, 0));
        let env = [
            ("SIM_SECONDS".to_string(), "0.5".to_string()),
            ("SIM_EXIT_CODE".into(), "1".into()),
        ];
        assert_eq!(pretend(&argv("sleep 9"), &env), (0.5, 1));
        assert_eq!(pretend(&argv("sleep -1"), &[]), (0.0, 0));
    }
}
