//! The agent's requests for work (`POST /agent/v1/work`): each is held until there is work for
//! the node, and answers with a numbered batch. The agent's next request says which batch it got
//! last; a batch it does not name never arrived (the connection broke on the way), so its work
//! goes out again, ahead of the rest. Only the latest request may take work: an older one still
//! held (the agent gave up on it) would hand work to a connection no one reads.

use std::time::Duration;

use super::{Link, LinkState};
use crate::domain::agent::{Hello, Work, WorkBatch, MAX_BATCH, POLL_HOLD_SECS};

/// How long before this server gives up on a file question its agent stops working on it: the
/// agent's clock starts when the question reaches it, a little after it left.
const ANSWER_MARGIN: Duration = Duration::from_secs(2);

impl Link {
    /// Whether the agent's boot `boot` has been handed version `version` of the installation's
    /// servers ([`super::Peers::servers`]); from now on it has.
    pub fn told_servers(&self, boot: &str, version: u64) -> bool {
        let mut state = self.state.lock().expect("lock");
        let told = state
            .told
            .as_ref()
            .is_some_and(|(b, v)| b == boot && *v == version);
        if !told {
            state.told = Some((boot.to_string(), version));
        }
        told
    }

    /// Takes the work waiting for the agent, waiting for some up to the poll's hold.
    pub async fn take_work(&self, hello: &Hello) -> WorkBatch {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(POLL_HOLD_SECS);
        let poll = {
            let mut state = self.state.lock().expect("lock");
            self.seen(&mut state, &hello.boot);
            state.users = hello.users;
            state.follows = hello.follows;
            state.polls += 1;
            resend_lost(&mut state, hello.got);
            state.polls
        };
        // An older request still held learns it is superseded.
        self.work.notify_waiters();
        loop {
            {
                let mut state = self.state.lock().expect("lock");
                if state.polls != poll {
                    drop(state);
                    // Whatever woke this request is the newer one's to see.
                    self.work.notify_one();
                    return WorkBatch::default();
                }
                self.seen(&mut state, &hello.boot);
                if !state.queue.is_empty() {
                    return hand_out(&mut state);
                }
            }
            if tokio::time::timeout_at(deadline, self.work.notified())
                .await
                .is_err()
            {
                return WorkBatch::default();
            }
            // Work comes in passes: what the pass queues meanwhile goes in the same answer.
            tokio::task::yield_now().await;
        }
    }
}

/// Numbers the next batch of queued work and keeps it until the agent says it got it.
fn hand_out(state: &mut LinkState) -> WorkBatch {
    let n = state.queue.len().min(MAX_BATCH);
    let mut work: Vec<Work> = state.queue.drain(..n).collect();
    let now = std::time::Instant::now();
    for w in &mut work {
        if let Work::File {
            within_ms,
            give_up: Some(give_up),
            ..
        } = w
        {
            // The agent stops [`ANSWER_MARGIN`] before this server gives up, whatever the
            // answer's way back takes.
            let left = give_up.saturating_duration_since(now + ANSWER_MARGIN);
            *within_ms = Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
        }
    }
    let batch = state.next_batch;
    state.next_batch = state.next_batch.wrapping_add(1);
    state.inflight = Some((batch, work.clone()));
    WorkBatch {
        batch: Some(batch),
        work,
        servers: Vec::new(),
        term: None,
    }
}

/// Queues again, first, the work of the batch handed out last if the agent did not get it
/// (what no one waits for any more stays out).
fn resend_lost(state: &mut LinkState, got: Option<u64>) {
    let Some((batch, work)) = state.inflight.take() else {
        return;
    };
    if got == Some(batch) {
        return;
    }
    let wanted: Vec<Work> = work
        .into_iter()
        .filter(|w| state.runs.contains_key(&w.id()) || state.replies.contains_key(&w.id()))
        .collect();
    if !wanted.is_empty() {
        tracing::info!(
            work = wanted.len(),
            "a batch of work never reached its node's agent: sending it again"
        );
    }
    state.queue.splice(0..0, wanted);
}

#[cfg(test)]
mod tests {
    use super::super::Agents;
    use crate::domain::agent::{Hello, Work};

    fn hello(got: Option<u64>) -> Hello {
        Hello {
            boot: "b".into(),
            got,
            users: true,
            follows: true,
        }
    }

    /// Asks node `n` whether pid 7 is alive, in the background: one piece of work for its agent.
    fn ask_alive(agents: &std::sync::Arc<Agents>) -> tokio::task::JoinHandle<()> {
        let asking = agents.clone();
        tokio::spawn(async move {
            let alive = |id| Work::Alive {
                id,
                pid: 7,
                boot: None,
            };
            let _ = asking
                .ask("n", alive, std::time::Duration::from_secs(600))
                .await;
        })
    }

    #[tokio::test]
    async fn a_batch_that_never_arrived_is_sent_again_and_one_that_did_is_not() {
        let agents = std::sync::Arc::new(Agents::new(None, 0, std::time::Duration::from_secs(60)));
        agents.register("n", "s");
        let link = agents.authenticate("n", "s").unwrap();
        let run = ask_alive(&agents);
        let first = link.take_work(&hello(None)).await;
        assert_eq!(first.work.len(), 1);
        // The answer was lost: the next request names no batch, and gets the same work.
        let again = link.take_work(&hello(None)).await;
        assert_eq!(again.work, first.work);
        assert_ne!(again.batch, first.batch);
        // This one arrived: nothing more to send, and the request is held.
        let short = std::time::Duration::from_millis(200);
        let after = tokio::time::timeout(short, link.take_work(&hello(again.batch))).await;
        assert!(after.is_err(), "{after:?}");
        run.abort();
    }

    #[tokio::test]
    async fn a_question_given_up_on_before_the_agent_took_it_is_never_sent() {
        let agents = Agents::new(None, 0, std::time::Duration::from_secs(60));
        agents.register("n", "s");
        let link = agents.authenticate("n", "s").unwrap();
        let remove = crate::domain::agent::FileOp::Remove { recursive: true };
        let asked = agents.file("n", "/root".into(), "dir".into(), remove);
        let short = std::time::Duration::from_millis(200);
        assert!(tokio::time::timeout(short, asked).await.is_err());
        let after = tokio::time::timeout(short, link.take_work(&hello(None))).await;
        assert!(after.is_err(), "{after:?}");
    }

    #[tokio::test]
    async fn a_file_question_goes_out_with_less_time_than_the_server_waits() {
        let agents = std::sync::Arc::new(Agents::new(None, 0, std::time::Duration::from_secs(60)));
        agents.register("n", "s");
        let link = agents.authenticate("n", "s").unwrap();
        let asking = agents.clone();
        let asked = tokio::spawn(async move {
            let remove = crate::domain::agent::FileOp::Remove { recursive: true };
            asking.file("n", "/root".into(), "dir".into(), remove).await
        });
        let first = link.take_work(&hello(None)).await;
        let [Work::File { within_ms, .. }] = first.work.as_slice() else {
            panic!("{:?}", first.work)
        };
        // The server waits FILE_ANSWER_TIMEOUT from the question's start; the agent stops
        // ANSWER_MARGIN sooner, counted from when the question leaves.
        let most = (super::super::FILE_ANSWER_TIMEOUT - super::ANSWER_MARGIN).as_millis() as u64;
        let within = within_ms.expect("a time limit");
        assert!(within <= most && within > most - 1000, "{within} ms");
        // Sent again later (the batch was lost), it has less time.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let again = link.take_work(&hello(None)).await;
        let [Work::File { within_ms, .. }] = again.work.as_slice() else {
            panic!("{:?}", again.work)
        };
        assert!(
            within_ms.expect("a time limit") <= within - 300,
            "{within_ms:?}"
        );
        asked.abort();
    }

    #[tokio::test]
    async fn an_agent_says_whether_it_starts_tasks_as_their_users() {
        let agents = Agents::new(None, 0, std::time::Duration::from_millis(100));
        assert_eq!(agents.starts_users("n").await, None, "an unknown node");
        agents.register("n", "s");
        assert_eq!(
            agents.starts_users("n").await,
            None,
            "an agent not heard from"
        );
        let link = agents.authenticate("n", "s").unwrap();
        let short = std::time::Duration::from_millis(50);
        let old = Hello {
            users: false,
            follows: false,
            ..hello(None)
        };
        let _ = tokio::time::timeout(short, link.take_work(&old)).await;
        let older = agents.starts_users("n").await;
        assert_eq!(older, Some(false), "an agent of an older build");
        assert!(!agents.follows("n"), "nor does it follow files");
        let _ = tokio::time::timeout(short, link.take_work(&hello(None))).await;
        assert_eq!(agents.starts_users("n").await, Some(true));
        assert!(agents.follows("n"));
    }

    /// Runs `true` on node `n` in the background, as a task's command goes out.
    fn run_true(agents: &std::sync::Arc<Agents>) -> tokio::task::JoinHandle<anyhow::Result<i64>> {
        let running = agents.clone();
        tokio::spawn(async move {
            let run = |id| Work::Run {
                id,
                argv: vec!["true".into()],
                env: Vec::new(),
                task: None,
            };
            running.run("n", run, Default::default()).await
        })
    }

    /// A command given up on for its agent's silence has had its task requeued, and its slot
    /// given to another: the agent, back, must not run it. Not yet taken, it is never sent;
    /// taken, it is killed as soon as the agent says it started.
    #[tokio::test]
    async fn a_command_given_up_for_silence_never_runs_on() {
        let agents =
            std::sync::Arc::new(Agents::new(None, 0, std::time::Duration::from_millis(100)));
        agents.register("n", "s");
        let link = agents.authenticate("n", "s").unwrap();
        let never_taken = run_true(&agents);
        assert!(never_taken.await.unwrap().is_err(), "given up");
        let short = std::time::Duration::from_millis(200);
        let after = tokio::time::timeout(short, link.take_work(&hello(None))).await;
        assert!(after.is_err(), "nothing is handed out: {after:?}");

        let taken = run_true(&agents);
        let batch = link.take_work(&hello(None)).await;
        let [Work::Run { id, .. }] = batch.work.as_slice() else {
            panic!("{:?}", batch.work)
        };
        assert!(taken.await.unwrap().is_err(), "given up");
        let started = crate::domain::agent::Event::Started { id: *id, pid: 42 };
        link.deliver("b", vec![started]);
        let kill = link.take_work(&hello(batch.batch)).await;
        let [Work::Kill { pid: 42, boot, .. }] = kill.work.as_slice() else {
            panic!("{:?}", kill.work)
        };
        assert_eq!(boot.as_deref(), Some("b"));
    }

    /// A server that led before and leads again hands out nothing its earlier term queued:
    /// the attempt it would start has been recovered (with no record, requeued) meanwhile.
    #[tokio::test]
    async fn work_of_an_earlier_term_is_never_handed_out() {
        let agents = std::sync::Arc::new(Agents::new(None, 0, std::time::Duration::from_secs(60)));
        agents.register("n", "s");
        let link = agents.authenticate("n", "s").unwrap();
        agents.set_term(1);
        // The term ends before the agent asks: its loops, and the command's caller, go.
        let caller = run_true(&agents);
        tokio::task::yield_now().await;
        caller.abort();
        agents.set_term(3);
        let short = std::time::Duration::from_millis(200);
        let after = tokio::time::timeout(short, link.take_work(&hello(None))).await;
        assert!(after.is_err(), "nothing is handed out: {after:?}");
        // Nor is a batch the earlier term handed out and the agent did not say it got: it
        // may have run it.
        let caller = run_true(&agents);
        let taken = link.take_work(&hello(None)).await;
        assert_eq!(taken.work.len(), 1);
        caller.abort();
        agents.set_term(5);
        let after = tokio::time::timeout(short, link.take_work(&hello(None))).await;
        assert!(after.is_err(), "nothing is sent again: {after:?}");
    }

    #[tokio::test]
    async fn only_the_latest_request_takes_work() {
        let agents = std::sync::Arc::new(Agents::new(None, 0, std::time::Duration::from_secs(60)));
        agents.register("n", "s");
        let link = agents.authenticate("n", "s").unwrap();
        let (old, new) = (link.clone(), link.clone());
        let stale = tokio::spawn(async move { old.take_work(&hello(None)).await });
        tokio::task::yield_now().await;
        let live = tokio::spawn(async move { new.take_work(&hello(None)).await });
        tokio::task::yield_now().await;
        let _run = ask_alive(&agents);
        assert!(stale.await.unwrap().work.is_empty());
        assert_eq!(live.await.unwrap().work.len(), 1);
    }
}
