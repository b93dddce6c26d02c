//! The node's commands: started once their slots are free ([`Gate`]), each in its process
//! group, with `Started` once it runs and `Exited` (with what it used) once it ends, both
//! written to a task's record first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::gate::Gate;
use super::link::Link;
use super::{files, procs, spawn};
use crate::domain::agent::{Event, Slots, TaskLaunch};

/// A command to run: its id, argv, environment and, for a task's, its launch.
pub(super) struct Command {
    pub(super) id: u64,
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) task: Option<TaskLaunch>,
}

impl Command {
    fn slots(&self) -> Option<Slots> {
        self.task.as_ref().and_then(|t| t.slots)
    }
}

/// What starting and watching commands needs; cheap to clone.
#[derive(Clone)]
pub(super) struct Node {
    pub(super) link: Arc<Link>,
    pub(super) procs: procs::Procs,
    pub(super) events: mpsc::UnboundedSender<Event>,
    pub(super) gate: Arc<Mutex<Gate<Command>>>,
}

impl Node {
    /// Starts the command once its slots are free: now, or as another ends.
    pub(super) fn run(&self, command: Command) {
        let admitted = self.gate().admit(command.id, command.slots(), command);
        if let Some(command) = admitted {
            self.launch(command);
        }
    }

    /// Drops the command `run` if it waits for its slots still: it fails, never to start.
    pub(super) fn cancel(&self, run: u64) {
        if self.gate().cancel(run).is_some() {
            let _ = self.events.send(Event::Failed {
                id: run,
                message: "it was no longer wanted before a slot freed for it".into(),
            });
        }
    }

    /// Drops every command that waits for its slots, unsaid: they came in a term of the
    /// leader that is over, and the new leader requeues them ([`WorkBatch::term`]).
    ///
    /// [`WorkBatch::term`]: crate::domain::agent::WorkBatch::term
    pub(super) fn forget_waiting(&self) {
        let dropped = self.gate().clear();
        if dropped > 0 {
            tracing::info!(
                dropped,
                "a new leader: the tasks waiting for a slot are its to place again"
            );
        }
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate<Command>> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `first`, and those whose slots free as commands end at once (they could not
    /// start), in turn.
    fn launch(&self, first: Command) {
        let mut next = VecDeque::from([first]);
        while let Some(command) = next.pop_front() {
            let slots = command.slots();
            if !self.start(command) {
                next.extend(self.gate().release(slots));
            }
        }
    }

    /// Starts the command; false if it ended at once (it could not start).
    fn start(&self, command: Command) -> bool {
        let Command {
            id,
            argv,
            env,
            task,
        } = command;
        let slots = task.as_ref().and_then(|t| t.slots);
        if let Some(make) = task.as_ref().and_then(|t| t.make.as_ref()) {
            // What a task did to its node can break this (it replaced `workitems`, say): then
            // the command cannot run where it must, and ends as below, as the task's own
            // failure, not the node's (which would requeue it for ever).
            if let Err(e) = files::make_dirs(make) {
                tracing::warn!(base = %make.base, error = %e, "making a task's directories failed");
            }
        }
        if let Some((t, user)) = task.as_ref().and_then(|t| Some((t, t.user?))) {
            // Never as root instead: if its directories cannot be its user's (a task of that
            // user made them too deep, say), it fails as its own.
            if let Err(e) = files::give_to_user(t, user) {
                tracing::warn!(error = %e, "giving a task's directories to its user failed");
                self.exited(id, 127);
                return false;
            }
        }
        let capture = task.as_ref().and_then(super::output::Capture::of);
        match self.procs.spawn(&argv, &env, task.as_ref()) {
            Ok((pid, ended)) => {
                // Its record first, so a server that restarts meanwhile finds the attempt
                // running; with this agent's boot: after a restart of the node, the pid is
                // another's.
                let record = task.and_then(|t| {
                    let written = procs::Record::open(&t.record).and_then(|mut r| {
                        r.add(format_args!("{pid} {}", self.link.boot)).map(|()| r)
                    });
                    written
                        .inspect_err(
                            |e| tracing::warn!(error = %e, "writing a task's record failed"),
                        )
                        .ok()
                });
                let _ = self.events.send(Event::Started { id, pid });
                self.clone().on_exit(id, ended, (record, capture), slots);
                true
            }
            Err(spawn::NotStarted::Dir(e)) => {
                // As the shell's `cd` would: the command cannot run where it must.
                tracing::warn!(error = %e, "a task's working directory cannot be entered");
                self.exited(id, 127);
                false
            }
            Err(spawn::NotStarted::Other(e)) => {
                let _ = self.events.send(Event::Failed {
                    id,
                    message: format!("starting {:?}: {e}", argv.first()),
                });
                false
            }
        }
    }

    /// Once the command `id` has ended: its exit code in its record, then `Exited` with what
    /// it used and the output it left, then the commands its slots let start.
    fn on_exit(
        self,
        id: u64,
        ended: tokio::sync::oneshot::Receiver<(i64, crate::domain::agent::Usage)>,
        (mut record, capture): (Option<procs::Record>, Option<super::output::Capture>),
        slots: Option<crate::domain::agent::Slots>,
    ) {
        tokio::spawn(async move {
            let (code, usage) = match ended.await {
                Ok((code, usage)) => (code, Some(usage)),
                Err(_) => (-1, None),
            };
            // Recorded before it is told: a server that missed the event reads it.
            if let Some(record) = &mut record {
                if let Err(e) = record.add(code) {
                    tracing::warn!(error = %e, "writing a task's record failed");
                }
            }
            let output = match capture {
                Some(c) => tokio::task::spawn_blocking(move || c.read())
                    .await
                    .ok()
                    .flatten(),
                None => None,
            };
            let _ = self.events.send(Event::Exited {
                id,
                code,
                usage,
                output,
            });
            let freed = self.gate().release(slots);
            for command in freed {
                self.launch(command);
            }
        });
    }

    fn exited(&self, id: u64, code: i64) {
        let (usage, output) = (None, None);
        let _ = self.events.send(Event::Exited {
            id,
            code,
            usage,
            output,
        });
    }
}
