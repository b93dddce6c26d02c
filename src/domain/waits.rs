//! Why a task waits (docs/scheduling.md, "Why a task waits"), in the spirit of Slurm's reason
//! codes: the leader's waits pass gives each job with active tasks a reason from the state its
//! dispatch passes read ([`explain`]); a task read adds what is the task's own ([`for_task`]).

use chrono::{DateTime, Utc};

use super::job::JobState;
use super::pool::JobDefaultOrder;

wire_enum!(
    /// A reason's code, as the API's `waitReason.code` gives it.
    WaitCode {
        PoolNotFound = "PoolNotFound",
        PoolDeleting = "PoolDeleting",
        JobDisabled = "JobDisabled",
        JobAtMaxParallelTasks = "JobAtMaxParallelTasks",
        WaitingForDependencies = "WaitingForDependencies",
        RequiredSlotsExceedNode = "RequiredSlotsExceedNode",
        NoNodes = "NoNodes",
        NodesStarting = "NodesStarting",
        StartTaskFailed = "StartTaskFailed",
        NoUsableNodes = "NoUsableNodes",
        SlotsBusy = "SlotsBusy",
        Placing = "Placing",
        NotYetConsidered = "NotYetConsidered",
    }
);

/// A job with active tasks, as the waits pass reads it.
#[derive(Clone, Debug)]
pub struct JobInput {
    pub pk: i64,
    pub account: String,
    pub pool_id: String,
    pub state: JobState,
    pub priority: i32,
    pub max_parallel_tasks: i32,
    pub creation_time: DateTime<Utc>,
    /// Its active tasks.
    pub active: i64,
    /// Its active tasks whose dependencies are met: dispatch may take them.
    pub ready: i64,
    /// Its tasks preparing or running.
    pub running: i64,
}

impl JobInput {
    /// How many of its ready tasks dispatch may start now: none while it is disabled, at most
    /// what its maxParallelTasks leaves room for.
    fn may_take(&self) -> i64 {
        if !matches!(self.state, JobState::Active | JobState::Enabling) {
            return 0;
        }
        match self.max_parallel_tasks {
            max if max >= 0 => self.ready.min((i64::from(max) - self.running).max(0)),
            _ => self.ready,
        }
    }
}

/// A pool and its nodes, as the waits pass reads them.
#[derive(Clone, Debug)]
pub struct PoolInput {
    pub account: String,
    pub id: String,
    pub deleting: bool,
    pub slots_per_node: i32,
    pub order: JobDefaultOrder,
    /// Its dedicated and low-priority targets together.
    pub target: i32,
    /// When its autoscale formula runs next, if it is autoscaled.
    pub autoscale_next: Option<DateTime<Utc>>,
    pub nodes: i64,
    /// Nodes that take tasks: idle or running, with scheduling enabled.
    pub usable: i64,
    /// Nodes on their way to taking tasks: creating, starting, waiting for their start task,
    /// rebooting or reimaging.
    pub starting: i64,
    pub start_task_failed: i64,
    /// Free task slots on the usable nodes.
    pub free_slots: i64,
    /// How long its tasks ran lately, in seconds (None while none is known).
    pub task_seconds: Option<f64>,
    /// The seconds between two of its tasks' ends lately, on average.
    pub end_gap: Option<f64>,
}

impl PoolInput {
    /// The seconds between two of its slots freeing: its tasks' recent duration over its
    /// slots, or the time between their recent ends, whichever is shorter. Each overstates
    /// in its way: a duration counts from placement, so a task held ahead of its slot counts
    /// its wait; ends come further apart while the pool is not full.
    fn turn_seconds(&self) -> Option<f64> {
        let slots = self.usable * i64::from(self.slots_per_node);
        let by_duration = self
            .task_seconds
            .filter(|_| slots > 0)
            .map(|d| d / slots as f64);
        match (by_duration, self.end_gap) {
            (Some(d), Some(g)) => Some(d.min(g)),
            (d, g) => d.or(g).filter(|_| slots > 0),
        }
    }
}

impl PoolInput {
    fn is(&self, job: &JobInput) -> bool {
        self.account == job.account && self.id.eq_ignore_ascii_case(&job.pool_id)
    }
}

/// A job's reason, as the pass keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobWait {
    pub job_pk: i64,
    pub code: WaitCode,
    pub message: String,
    /// Ready tasks of the pool's other jobs that dispatch takes before this job's next one.
    pub ahead: i64,
    /// Ready tasks of each job that shares the slots evenly with this one.
    pub sharing: Vec<i64>,
    /// The pool's taskSlotsPerNode (0 if there is no pool).
    pub pool_slots: i32,
    /// The pool's free slots.
    pub free_slots: i64,
    /// The seconds between two of the pool's slots freeing, if its tasks' durations are known.
    pub turn_seconds: Option<f64>,
}

impl JobWait {
    /// In how many seconds a task with `ahead` ready tasks before it may start, if the pool's
    /// pace is known: each of the tasks before it that finds no free slot waits one turn.
    pub fn start_in(&self, ahead: i64) -> Option<f64> {
        let turns = (ahead + 1 - self.free_slots).max(0);
        self.turn_seconds.map(|t| turns as f64 * t)
    }
}

/// Each job's reason, from the jobs with active tasks and their pools (`now` for autoscale's
/// next run). Jobs of a pool are taken in dispatch's order: priority, then (jobDefaultOrder
/// `creationtime`) age; jobs of one priority in a pool that shares (`none`) take turns.
pub fn explain(jobs: &[JobInput], pools: &[PoolInput]) -> Vec<JobWait> {
    let mut order: Vec<&JobInput> = jobs.iter().collect();
    order.sort_by(|a, b| {
        (
            &a.account,
            a.pool_id.to_lowercase(),
            -a.priority,
            a.creation_time,
            a.pk,
        )
            .cmp(&(
                &b.account,
                b.pool_id.to_lowercase(),
                -b.priority,
                b.creation_time,
                b.pk,
            ))
    });
    let mut out = Vec::with_capacity(jobs.len());
    for same_pool in
        order.chunk_by(|a, b| a.account == b.account && a.pool_id.eq_ignore_ascii_case(&b.pool_id))
    {
        let pool = pools.iter().find(|p| p.is(same_pool[0]));
        let mut ahead = 0;
        for same_priority in same_pool.chunk_by(|a, b| a.priority == b.priority) {
            let shares = pool.is_some_and(|p| p.order == JobDefaultOrder::None);
            let mut before_in_group = 0;
            for job in same_priority {
                let sharing = if shares {
                    same_priority
                        .iter()
                        .filter(|o| o.pk != job.pk && o.may_take() > 0)
                        .map(|o| o.may_take())
                        .collect()
                } else {
                    Vec::new()
                };
                let strictly_ahead = if shares {
                    ahead
                } else {
                    ahead + before_in_group
                };
                out.push(JobWait {
                    sharing,
                    ..job_wait(job, pool, strictly_ahead)
                });
                before_in_group += job.may_take();
            }
            ahead += before_in_group;
        }
    }
    out
}

fn job_wait(job: &JobInput, pool: Option<&PoolInput>, ahead: i64) -> JobWait {
    let (code, message) = job_reason(job, pool, ahead);
    JobWait {
        job_pk: job.pk,
        code,
        message,
        ahead,
        sharing: Vec::new(),
        pool_slots: pool.map_or(0, |p| p.slots_per_node),
        free_slots: pool.map_or(0, |p| p.free_slots),
        turn_seconds: pool.and_then(PoolInput::turn_seconds),
    }
}

fn job_reason(job: &JobInput, pool: Option<&PoolInput>, ahead: i64) -> (WaitCode, String) {
    use WaitCode::*;
    let Some(pool) = pool else {
        let m = format!("The job's pool {:?} does not exist: create it, or move the job to a pool that does (update the job's poolInfo).", job.pool_id);
        return (PoolNotFound, m);
    };
    let id = &pool.id;
    if matches!(job.state, JobState::Disabled | JobState::Disabling) {
        return (
            JobDisabled,
            "The job is disabled: enable it to run its tasks.".into(),
        );
    }
    if job.ready == 0 {
        let m = format!(
            "All {} of its active tasks wait for tasks they depend on.",
            job.active
        );
        return (WaitingForDependencies, m);
    }
    if job.max_parallel_tasks >= 0 && job.running >= i64::from(job.max_parallel_tasks) {
        let m = format!(
            "The job runs {} tasks, its maxParallelTasks: the next starts when one ends.",
            job.running
        );
        return (JobAtMaxParallelTasks, m);
    }
    if pool.deleting {
        return (
            PoolDeleting,
            format!("Pool {id:?} is being deleted: its tasks will not run there."),
        );
    }
    if pool.usable == 0 {
        return no_usable_nodes(pool);
    }
    if pool.free_slots > ahead {
        let m =
            format!("Pool {id:?} has a free slot: the next dispatch pass places its next task.");
        return (Placing, m);
    }
    let m = if pool.free_slots == 0 {
        format!("All task slots of pool {id:?}'s {} usable nodes are busy; {ahead} ready tasks of other jobs come first.", pool.usable)
    } else {
        format!("Pool {id:?}'s {} free task slots go to the {ahead} ready tasks of other jobs that come first.", pool.free_slots)
    };
    (SlotsBusy, m)
}

fn no_usable_nodes(pool: &PoolInput) -> (WaitCode, String) {
    use WaitCode::*;
    let id = &pool.id;
    if pool.starting > 0 {
        let m = format!(
            "{} of pool {id:?}'s nodes are starting: its tasks run once one is idle.",
            pool.starting
        );
        return (NodesStarting, m);
    }
    if pool.start_task_failed > 0 && pool.start_task_failed == pool.nodes {
        let m = format!("All {} nodes of pool {id:?} failed their start task (see each node's startTaskInfo): fix the start task, then reboot or reimage the nodes.", pool.nodes);
        return (StartTaskFailed, m);
    }
    if pool.nodes > 0 {
        let m = format!("None of pool {id:?}'s {} nodes takes tasks (each is unusable, offline, failed its start task, or has scheduling disabled).", pool.nodes);
        return (NoUsableNodes, m);
    }
    let m = match (pool.autoscale_next, pool.target) {
        (Some(next), _) => format!(
            "Pool {id:?} has no nodes; its autoscale formula runs next at {}.",
            next.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        (None, 0) => format!("Pool {id:?} has no nodes and a target of 0: resize it to run tasks."),
        (None, target) => format!("Pool {id:?} has no nodes yet: it is resizing to {target}."),
    };
    (NoNodes, m)
}

/// What a task read knows of the task itself.
#[derive(Clone, Debug)]
pub struct TaskFacts<'a> {
    pub pool_id: &'a str,
    pub required_slots: i32,
    /// Its dependencies that have not completed well, the first few by id (empty if none).
    pub unfinished_deps: &'a [String],
    pub unmet_deps: i32,
    /// Ready tasks of its job before it in the queue (for [`WaitCode::SlotsBusy`]).
    pub before_in_job: i64,
}

/// A task's reason: what is its own (its dependencies, its requiredSlots, its place in the
/// queue) over its job's (`job`: None if the pass has not seen the job yet).
pub fn for_task(job: Option<&JobWait>, t: &TaskFacts<'_>) -> (WaitCode, String, Option<i64>) {
    use WaitCode::*;
    if t.unmet_deps > 0 {
        let mut names = t
            .unfinished_deps
            .iter()
            .map(|d| format!("{d:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let more = i64::from(t.unmet_deps) - t.unfinished_deps.len() as i64;
        if more > 0 {
            names.push_str(&format!(" and {more} more"));
        }
        return (
            WaitingForDependencies,
            format!("It waits for tasks it depends on to complete: {names}."),
            None,
        );
    }
    let Some(job) = job else {
        return (
            NotYetConsidered,
            "The scheduler has not looked at this task's job yet: it does within seconds.".into(),
            None,
        );
    };
    if job.pool_slots > 0 && t.required_slots > job.pool_slots {
        let m = format!(
            "IT WILL NEVER RUN: its requiredSlots {} is more than pool {:?}'s taskSlotsPerNode {}. Delete it, or move the job to a pool with more slots a node.",
            t.required_slots, t.pool_id, job.pool_slots
        );
        return (RequiredSlotsExceedNode, m, None);
    }
    match job.code {
        SlotsBusy => {
            let turns: i64 = job
                .sharing
                .iter()
                .map(|r| (*r).min(t.before_in_job + 1))
                .sum();
            let ahead = job.ahead + t.before_in_job + turns;
            let m = format!("All task slots of pool {:?} are busy; {ahead} tasks come before it in the pool's order.", t.pool_id);
            (SlotsBusy, m, Some(ahead))
        }
        // Ready tasks added after a pass that found none.
        WaitingForDependencies => (
            NotYetConsidered,
            "The scheduler has not looked at this task yet: it does within seconds.".into(),
            None,
        ),
        code => (code, job.message.clone(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(pk: i64, priority: i32, ready: i64) -> JobInput {
        JobInput {
            pk,
            account: "a".into(),
            pool_id: "P".into(),
            state: JobState::Active,
            priority,
            max_parallel_tasks: -1,
            creation_time: DateTime::from_timestamp(pk, 0).unwrap(),
            active: ready,
            ready,
            running: 0,
        }
    }

    fn pool(order: JobDefaultOrder, usable: i64, free_slots: i64) -> PoolInput {
        PoolInput {
            account: "a".into(),
            id: "p".into(),
            deleting: false,
            slots_per_node: 2,
            order,
            target: usable as i32,
            autoscale_next: None,
            nodes: usable,
            usable,
            starting: 0,
            start_task_failed: 0,
            free_slots,
            task_seconds: Some(4.0),
            end_gap: None,
        }
    }

    #[test]
    fn jobs_wait_behind_the_ready_tasks_dispatch_takes_first() {
        let jobs = [job(3, 0, 5), job(1, 10, 4), job(2, 0, 7)];
        let waits = explain(&jobs, &[pool(JobDefaultOrder::CreationTime, 2, 3)]);
        let of = |pk| waits.iter().find(|w| w.job_pk == pk).unwrap();
        assert_eq!((of(1).code, of(1).ahead), (WaitCode::Placing, 0));
        assert_eq!((of(2).code, of(2).ahead), (WaitCode::SlotsBusy, 4));
        assert_eq!((of(3).code, of(3).ahead), (WaitCode::SlotsBusy, 11));
        let t = TaskFacts {
            pool_id: "p",
            required_slots: 1,
            unfinished_deps: &[],
            unmet_deps: 0,
            before_in_job: 2,
        };
        assert_eq!(for_task(Some(of(3)), &t).2, Some(13));
        let shared = explain(&jobs, &[pool(JobDefaultOrder::None, 2, 0)]);
        let third = shared.iter().find(|w| w.job_pk == 3).unwrap();
        assert_eq!((third.ahead, third.sharing.clone()), (4, vec![7]));
        // 4 slots, tasks of 4 s: a slot frees every second; none is free.
        assert_eq!(third.start_in(9), Some(10.0));
        // Its third task waits for the higher priority's 4, and 3 turns of job 2.
        assert_eq!(for_task(Some(third), &t).2, Some(4 + 2 + 3));
    }

    #[test]
    fn a_pool_without_usable_nodes_says_what_its_nodes_do() {
        let jobs = [job(1, 0, 1)];
        let reason = |p: PoolInput| explain(&jobs, &[p])[0].code;
        assert_eq!(reason(pool(JobDefaultOrder::None, 0, 0)), WaitCode::NoNodes);
        let starting = PoolInput {
            nodes: 2,
            starting: 1,
            start_task_failed: 1,
            ..pool(JobDefaultOrder::None, 0, 0)
        };
        assert_eq!(reason(starting.clone()), WaitCode::NodesStarting);
        assert_eq!(
            reason(PoolInput {
                starting: 0,
                start_task_failed: 2,
                ..starting.clone()
            }),
            WaitCode::StartTaskFailed
        );
        assert_eq!(
            reason(PoolInput {
                starting: 0,
                ..starting
            }),
            WaitCode::NoUsableNodes
        );
        assert_eq!(explain(&jobs, &[])[0].code, WaitCode::PoolNotFound);
    }

    #[test]
    fn a_task_too_big_for_any_node_says_it_will_never_run() {
        let waits = explain(&[job(1, 0, 1)], &[pool(JobDefaultOrder::None, 1, 2)]);
        let t = TaskFacts {
            pool_id: "p",
            required_slots: 3,
            unfinished_deps: &[],
            unmet_deps: 0,
            before_in_job: 0,
        };
        let (code, message, _) = for_task(Some(&waits[0]), &t);
        assert_eq!(code, WaitCode::RequiredSlotsExceedNode);
        assert!(message.starts_with("IT WILL NEVER RUN"), "{message}");
        let deps = ["a".to_string()];
        let t = TaskFacts {
            unfinished_deps: &deps,
            unmet_deps: 3,
            ..t
        };
        let (code, message, _) = for_task(None, &t);
        assert_eq!(code, WaitCode::WaitingForDependencies);
        assert!(message.ends_with("\"a\" and 2 more."), "{message}");
    }
}
