//! Agents that stopped speaking: for a while, their nodes are `unknown` (Azure's state for a
//! node the service lost contact with); past the agent timeout, their nodes are lost.

use std::time::Duration;

use super::Agents;

/// The nodes whose agents fell silent.
pub struct Silent {
    /// Silent for longer than the agent timeout: hung, cut off, or gone with their machine.
    pub lost: Vec<String>,
    /// Silent for long enough that their nodes are `unknown` ([`UNKNOWN_AFTER`]), the lost
    /// ones included.
    pub unknown: Vec<String>,
}

/// How long an agent may be silent before its node is `unknown`: three of its load reports
/// (one every [`crate::domain::agent::LOAD_PERIOD_SECS`]) missed. With an agent timeout of
/// less than twice this, half the timeout, but never less than two reports missed.
pub const UNKNOWN_AFTER: Duration = Duration::from_secs(15);

impl Agents {
    /// The nodes whose agents fell silent: since they last spoke to this server, or, for one
    /// that never did, since this server learnt of it. That is a node another server made,
    /// adopted when this one took the lead, whose agent still calls a server that is gone. (A
    /// new node's first word is [`Agents::await_hello`]'s to judge: it is `starting` until
    /// then, and neither `unknown` nor lost.)
    pub fn silent(&self) -> Silent {
        let unknown_after = (self.silence / 2).clamp(Duration::from_secs(10), UNKNOWN_AFTER);
        Silent {
            lost: self.silent_for(self.silence),
            // None with an agent timeout so short that nodes are lost first.
            unknown: if unknown_after < self.silence {
                self.silent_for(unknown_after)
            } else {
                Vec::new()
            },
        }
    }

    /// Whether every running node's agent is known here: this server leads, and has adopted
    /// the nodes. Then an agent it does not know is of a node it has given up, not one it has
    /// yet to learn, and its refusal is the last word (the agent stops: `agent::link`).
    pub fn all_learnt(&self) -> bool {
        self.all_learnt.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Says whether every running node's agent is known here ([`Agents::all_learnt`]).
    pub fn set_all_learnt(&self, learnt: bool) {
        self.all_learnt
            .store(learnt, std::sync::atomic::Ordering::Relaxed);
    }

    /// The leader's term this server leads in, as agents learn it with their work. What an
    /// earlier term of this server's left queued for an agent is dropped, never handed out:
    /// its callers are gone, and the attempts it would start are the new term's to recover
    /// (with no record, they are requeued) and place again.
    pub fn set_term(&self, epoch: i64) {
        self.term.store(epoch, std::sync::atomic::Ordering::Relaxed);
        for link in self.links.lock().expect("lock").values() {
            link.fail_all("this server's term as leader ended");
        }
    }

    /// The term this server leads in, if it has led ([`WorkBatch::term`]).
    ///
    /// [`WorkBatch::term`]: crate::domain::agent::WorkBatch::term
    pub fn term(&self) -> Option<i64> {
        Some(self.term.load(std::sync::atomic::Ordering::Relaxed)).filter(|t| *t > 0)
    }

    /// Counts every agent's silence from now: a server that takes the lead holds links of
    /// agents that were refused while it did not lead, or that left when it lost the lead
    /// before; they have had no chance to find it yet.
    pub fn restart_clocks(&self) {
        for link in self.links.lock().expect("lock").values() {
            link.state.lock().expect("lock").last_seen = std::time::Instant::now();
        }
    }

    fn silent_for(&self, after: Duration) -> Vec<String> {
        let links = self.links.lock().expect("lock");
        links
            .iter()
            .filter(|(_, link)| {
                let state = link.state.lock().expect("lock");
                state.last_seen.elapsed() > after
            })
            .map(|(node, _)| node.clone())
            .collect()
    }
}
