//! The agent's events (`POST /agent/v1/events`): what became of the commands and questions
//! callers wait on, and what a new boot of the agent means for them.

use std::time::Instant;

use super::{Link, LinkState};
use crate::domain::agent::{Event, Work};

/// The id of the kill of the abandoned command `run`: ids of work count up from below 2^52
/// ([`super::Agents::new`]), so this one is no other's, and its answer goes to no one.
fn kill_id(run: u64) -> u64 {
    run | 1 << 63
}

impl LinkState {
    /// Gives the command `id` up (its agent silent too long): not yet taken by the agent, it is
    /// never sent, nor sent again; taken, it is killed as soon as the agent says it started.
    pub(super) fn abandon(&mut self, id: u64) {
        self.runs.remove(&id);
        self.queue.retain(|w| w.id() != id);
        self.abandoned.insert(id);
    }
}

impl Link {
    /// Takes the agent's events: tells the callers of `run` what became of their commands.
    /// Events of commands no one here waits for (a previous server's) are let go.
    pub fn deliver(&self, boot: &str, events: Vec<Event>) {
        let mut state = self.state.lock().expect("lock");
        self.seen(&mut state, boot);
        for event in events {
            let id = event.id();
            let abandoned = state.abandoned.remove(&id);
            match event {
                Event::Started { pid, .. } => {
                    if abandoned {
                        // Its task is requeued and its slot given to another: it must not run.
                        let boot = Some(boot.to_string());
                        state.queue.push(Work::Kill {
                            id: kill_id(id),
                            pid,
                            boot,
                        });
                        self.work.notify_one();
                    }
                    if let Some(tx) = state.runs.get_mut(&id).and_then(|r| r.started.take()) {
                        let _ = tx.send(pid);
                    }
                }
                Event::Exited {
                    code,
                    usage,
                    output,
                    ..
                } => {
                    if let Some(run) = state.runs.remove(&id) {
                        if let Some(tx) = run.report {
                            let _ = tx.send(crate::runtime::ExitReport { usage, output });
                        }
                        let _ = run.ended.send(Ok(code));
                    }
                }
                Event::Answered { yes, .. } => {
                    if let Some(run) = state.runs.remove(&id) {
                        let _ = run.ended.send(Ok(i64::from(yes)));
                    }
                }
                Event::Failed { message, .. } => {
                    if let Some(run) = state.runs.remove(&id) {
                        let _ = run.ended.send(Err(message));
                    }
                }
            }
        }
    }

    /// Whether the agent has spoken to this server since `at`.
    pub(super) fn spoke_since(&self, at: chrono::DateTime<chrono::Utc>) -> bool {
        let last_word = self.state.lock().expect("lock").last_word;
        last_word.is_some_and(|word| {
            let ago = chrono::Duration::from_std(word.elapsed()).unwrap_or(chrono::TimeDelta::MAX);
            chrono::Utc::now() - ago > at
        })
    }

    /// Notes that the agent spoke; an agent with a new boot is a node that restarted, and what
    /// it ran before is gone.
    pub(super) fn seen(&self, state: &mut LinkState, boot: &str) {
        state.last_seen = Instant::now();
        state.last_word = Some(state.last_seen);
        if state.boot.as_deref() == Some(boot) {
            return;
        }
        if state.boot.is_some() {
            // What was sent to the old boot is gone; what is still queued, the new boot runs.
            let queued: std::collections::HashSet<u64> = state.queue.iter().map(Work::id).collect();
            let gone: Vec<u64> = state
                .runs
                .keys()
                .filter(|id| !queued.contains(id))
                .copied()
                .collect();
            for id in gone {
                if let Some(run) = state.runs.remove(&id) {
                    let _ = run.ended.send(Err("the node restarted".into()));
                }
            }
            // Their askers learn it as their senders go.
            state.replies.retain(|id, _| queued.contains(id));
            state.inflight = None;
            // What the old boot ran is gone with it.
            state.abandoned.clear();
        }
        state.boot = Some(boot.to_string());
        self.heard.notify_waiters();
    }

    pub(super) fn fail_all(&self, why: &str) {
        let mut state = self.state.lock().expect("lock");
        state.queue.clear();
        state.inflight = None;
        state.replies.clear();
        for (_, run) in state.runs.drain() {
            let _ = run.ended.send(Err(why.to_string()));
        }
    }
}
