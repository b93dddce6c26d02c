//! The control loops. One server leads per database (a Postgres advisory lock); the leader runs
//! the allocator (pools -> nodes) and the dispatcher (tasks -> slots, with the executor that runs
//! them). API writes wake the loops; a slow timer only backs them up.

pub mod ahead;
pub mod allocate;
pub mod bes;
pub mod complete;
pub mod dispatch;
mod each_second;
pub mod environment;
pub mod execute;
mod housekeeping;
pub(crate) mod packages;
mod prep;
mod ready_cursor;
pub mod special_task;
pub mod start_task;
pub mod task_files;
mod transfer;
mod waits;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;

use crate::ops;
pub use crate::ops::wake::{Wakeups, WAKE_CHANNEL};
use crate::runtime::agents::Leading;
use crate::runtime::Runtime;
use crate::store;

#[derive(Clone)]
pub struct Scheduler {
    pub db: PgPool,
    pub runtime: Arc<Runtime>,
    pub server_id: String,
    pub wake: Wakeups,
    pub node_concurrency: usize,
    /// Single-slot tasks a node may hold per slot beyond those it runs (`--tasks-ahead-per-slot`).
    pub tasks_ahead_per_slot: ahead::AheadSetting,
    /// The most nodes an autoscale formula may give a pool (`--max-nodes-per-pool`).
    pub max_nodes_per_pool: i32,
    pub bes: bes::Config,
    /// Moves tasks' resource and output files.
    pub fetcher: task_files::Fetcher,
    /// True while this server leads (for /health/ready).
    pub leading: Leading,
    /// Where other servers ask this one about its nodes' files, told to them while it leads.
    pub peer_url: String,
    /// Makes the jobs of job schedules (the API's job add).
    pub job_maker: Arc<dyn ops::schedules::JobMaker>,
    /// Tokens for the attempts of tasks with authenticationTokenSettings.
    pub tokens: crate::domain::task_token::Issuer,
}

/// How often a leader makes sure that its lock connection still answers, and how long it waits
/// for the answer before it gives the lead up.
const LOCK_CHECK: Duration = Duration::from_millis(250);
const LOCK_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a leader may say nothing to PostgreSQL before it loses the lead. The database ends
/// the lock's session once it has been idle this long (a leader checks its lock four times a
/// second), and a transaction of the term once it has waited this long for its next statement:
/// a leader that is frozen (its process stopped, its machine paused) or cut off keeps the lead
/// no longer than this, and none of its open transactions holds up the next leader's start
/// (`store::leader::take` waits for them).
const LEASE: &str = "10s";

/// Contends for the lead, leads while this server holds the lock, and contends again when it
/// loses it (its connection dropped: PostgreSQL restarted or the network failed); until `cancel`.
pub async fn run(s: Scheduler, cancel: CancellationToken) {
    let holder = format!(
        "{} pid {}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
        std::process::id()
    );
    while !cancel.is_cancelled() {
        let Some((lock, epoch)) = contend(&s, &holder, &cancel).await else {
            return;
        };
        lead(&s, lock, epoch, &cancel).await;
    }
}

/// Waits to lead; returns the connection that holds the lock (it lives as long as that
/// connection, which is kept out of the pool for that reason) and this term's epoch.
async fn contend(
    s: &Scheduler,
    holder: &str,
    cancel: &CancellationToken,
) -> Option<(sqlx::PgConnection, i64)> {
    let mut said = false;
    loop {
        match try_lead(&s.db, holder, &s.peer_url).await {
            Ok(Some(lead)) => return Some(lead),
            Ok(None) if !said => {
                tracing::info!("another server leads the scheduler; waiting");
                said = true;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot take the scheduler lock"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(s.wake.tick) => {}
        }
    }
}

async fn try_lead(
    db: &PgPool,
    holder: &str,
    peer_url: &str,
) -> sqlx::Result<Option<(sqlx::PgConnection, i64)>> {
    let options = (*db.connect_options())
        .clone()
        .options([("idle_session_timeout", LEASE)]);
    let mut conn = sqlx::PgConnection::connect_with(&options).await?;
    let locked = store::leader::try_lock(&mut conn).await?;
    if !locked {
        return Ok(None);
    }
    let epoch = store::leader::take(&mut conn, holder, peer_url).await?;
    Ok(Some((conn, epoch)))
}

/// Runs the loops for one term. They write through a pool of their own whose connections carry
/// the term's epoch, so the database refuses their writes once the term is over (the fence in
/// the leader_epoch migration); the term ends when `cancel` fires or the lock connection fails.
async fn lead(s: &Scheduler, mut lock: sqlx::PgConnection, epoch: i64, cancel: &CancellationToken) {
    tracing::info!(epoch, "this server leads the scheduler");
    // Until the allocator has adopted the nodes, an agent this server does not know may be one
    // it has yet to learn.
    s.runtime.agents.set_all_learnt(false);
    s.runtime.agents.set_term(epoch);
    s.leading.set(true);
    let options = (*s.db.connect_options()).clone().options([
        (store::leader::EPOCH_SETTING, epoch.to_string()),
        ("idle_in_transaction_session_timeout", LEASE.to_string()),
    ]);
    let term = Scheduler {
        db: PgPoolOptions::new()
            .max_connections(s.db.options().get_max_connections())
            // Not pinged before each use: the loops take connections many times a second, a
            // ping is a round trip each time, and a statement on a connection that broke fails
            // as the ping would have, for the loop to try again.
            .test_before_acquire(false)
            .connect_lazy_with(options),
        ..s.clone()
    };
    let stop = cancel.child_token();
    let watch = async {
        let lost = watch_lock(&mut lock, epoch, &stop).await;
        // Agents and health checks hear of it at once, not once the loops have wound down.
        s.leading.set(false);
        if lost {
            tracing::warn!(epoch, "stopped leading the scheduler");
        }
        stop.cancel();
        lost
    };
    let ((), lost) = tokio::join!(run_loops(&term, &stop), watch);
    if !lost {
        let _ = store::leader::unlock(&mut lock).await;
    }
    let _ = tokio::time::timeout(LOCK_CHECK_TIMEOUT, term.db.close()).await;
}

/// Asks the lock connection, often, whether this term is still the current one; returns true
/// when it is not (or the connection failed or hung), false when `stop` fired first.
async fn watch_lock(lock: &mut sqlx::PgConnection, epoch: i64, stop: &CancellationToken) -> bool {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(LOCK_CHECK) => {}
        }
        match tokio::time::timeout(LOCK_CHECK_TIMEOUT, store::leader::epoch(&mut *lock)).await {
            Ok(Ok(current)) if current == epoch => {}
            Ok(Ok(current)) => {
                tracing::warn!(epoch, current, "another server took the lead");
                return true;
            }
            Ok(Err(e)) => {
                tracing::warn!(epoch, error = %e, "the scheduler lock's connection failed");
                return true;
            }
            Err(_) => {
                tracing::warn!(epoch, "the scheduler lock's connection does not answer");
                return true;
            }
        }
    }
}

/// The allocator, the dispatcher (with the executor) and the BES driver, until `cancel`.
async fn run_loops(s: &Scheduler, cancel: &CancellationToken) {
    let executor = execute::Executor::new(
        s.db.clone(),
        s.runtime.clone(),
        s.wake.clone(),
        s.fetcher.clone(),
        (s.bes.clone(), s.tokens.clone()),
        cancel.clone(),
    );
    let allocator = allocate::Allocator::new(
        s.db.clone(),
        s.runtime.clone(),
        s.server_id.clone(),
        s.wake.clone(),
        s.node_concurrency,
        s.fetcher.clone(),
        Arc::clone(&executor),
        cancel.clone(),
    );
    let driver = bes::BesJobDriver::new(
        s.db.clone(),
        s.runtime.clone(),
        s.bes.clone(),
        s.wake.clone(),
        cancel.clone(),
    );
    let listener = tokio::spawn(ops::wake::listen(
        s.db.clone(),
        s.wake.clone(),
        cancel.clone(),
    ));
    let adopted = allocator.adopted();
    // What the dispatch passes learn of tasks' durations, for the waits pass's estimates.
    let durations = waits::Durations::default();
    tokio::join!(
        allocator.run(),
        dispatch_and_keep_house(s, executor, adopted, (&durations, cancel)),
        driver.run(),
        each_second::run(
            s.db.clone(),
            (s.wake.clone(), s.runtime.clone()),
            &durations,
            s.max_nodes_per_pool,
            &*s.job_maker,
            cancel.clone()
        ),
    );
    listener.abort();
}

/// How long a busy dispatcher lets ends gather before a pass records them (as PostgreSQL's
/// `commit_delay` groups commits). At 30,000 no-op tasks on 32 slots it cut the CPU the
/// server, its agents and PostgreSQL spend a task by about a seventh (BENCHMARKS.md); a pass
/// waits for nothing while nothing runs, so a first task starts as soon as it is added.
const GATHER: Duration = Duration::from_millis(2);

/// How often the dispatch loop looks at every attempt it runs for one ended elsewhere (the task
/// terminated, deleted or requeued through the API) to kill its process; after each pass it
/// looks at those on the nodes the pass placed on.
const STALE_SWEEP: Duration = Duration::from_millis(500);

/// Once the allocator has adopted the nodes, reads the attempts a previous leader started, then
/// dispatches, recovers those and keeps house side by side. Housekeeping waits for kills and for
/// agents (a deleted job's directories, expired task files); in its own loop it never holds up a
/// pass, nor the outcomes passes record.
async fn dispatch_and_keep_house(
    s: &Scheduler,
    executor: Arc<execute::Executor>,
    mut adopted: tokio::sync::watch::Receiver<bool>,
    (durations, cancel): (&waits::Durations, &CancellationToken),
) {
    // A task placed before then could go to a node whose container is gone, and be requeued
    // for it once more.
    tokio::select! {
        _ = cancel.cancelled() => return,
        done = adopted.wait_for(|done| *done) => if done.is_err() { return },
    }
    // Before the first pass: what runs once it starts is this server's own.
    let unrecovered = loop {
        match executor.unrecovered().await {
            Ok(unrecovered) => break unrecovered,
            Err(e) => tracing::error!(error = %e, "reading running attempts failed; retrying"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(s.wake.tick) => {}
        }
    };
    // Housekeeping after the recovery: a job deleted now has its attempts killed only once
    // they are watched again.
    let recover_and_keep_house = async {
        tokio::select! {
            _ = cancel.cancelled() => return,
            () = executor.recover(unrecovered) => {}
        }
        housekeeping::run(s, &executor, cancel).await;
    };
    tokio::join!(
        dispatch_loop(s, &executor, durations, cancel),
        recover_and_keep_house
    );
}

async fn dispatch_loop(
    s: &Scheduler,
    executor: &Arc<execute::Executor>,
    durations: &waits::Durations,
    cancel: &CancellationToken,
) {
    // Outcomes taken from the executor and not recorded yet.
    let mut ended = Vec::new();
    // Which jobs ran short lately, for tasks ahead (this term's memory).
    let recent = ahead::Recent::default();
    // When every running attempt was last looked at for having been ended elsewhere.
    let mut swept = Instant::now();
    loop {
        // One pass fills every free slot it can; slots freed or tasks added meanwhile wake the
        // loop again (a `Notify` keeps the wake-up that comes while a pass runs).
        let known = ended.len();
        let more = executor.take_ended(&mut ended);
        durations.observe(&ended[known..]);
        let recorded = |done: &[_]| executor.recorded(done);
        let placed = dispatch::record_and_pass(
            &s.db,
            recorded,
            &mut ended,
            (s.tasks_ahead_per_slot, &recent),
        )
        .await;
        // A slot the pass handed on may have been freed by ending an attempt that still runs:
        // its process goes before the new attempts on its node start. So the attempts on the
        // nodes the pass placed on are looked at after every pass, and all of them (those a
        // terminate or a delete ended) at most every [`STALE_SWEEP`]: with 40,000 attempts
        // running, looking at all after every pass took most of PostgreSQL's time.
        let on: Option<HashSet<&str>> = match (&placed, swept.elapsed() >= STALE_SWEEP) {
            (_, true) => None,
            (Ok(placed), false) => {
                Some(placed.iter().filter_map(|a| a.node_id.as_deref()).collect())
            }
            (Err(_), false) => Some(HashSet::new()),
        };
        if on.is_none() {
            swept = Instant::now();
        }
        let killing = match on.as_ref().filter(|on| on.is_empty()) {
            Some(_) => Default::default(),
            None => executor.kill_ended(on.as_ref()).await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "killing ended attempts failed");
                Default::default()
            }),
        };
        // More ends than one pass records are waiting (many tasks ended at once): the next pass
        // takes them now, not at the next wake-up, which may be a tick away. (Not after a
        // failed pass: the database may be down.)
        let again = more && placed.is_ok() && !cancel.is_cancelled();
        match placed {
            Ok(placed) => executor.start_placed(placed, &killing),
            Err(e) => tracing::error!(error = %e, "dispatch pass failed"),
        }
        if again {
            continue;
        }
        // While attempts run, the sweep is never much later than due.
        let tick = match executor.running_count() {
            0 => s.wake.tick,
            _ => s.wake.tick.min(STALE_SWEEP),
        };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = s.wake.dispatch.notified() => {}
            _ = tokio::time::sleep(tick) => {}
        }
        if executor.running_count() > 0 {
            // Busy: more ends are on their way. Passes that wait a moment for them record and
            // refill more slots each, for much less work a task (fewer, larger statements).
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(GATHER) => {}
            }
        }
    }
}
