-- Why a job's tasks wait (docs/scheduling.md, "Why a task waits"): the leader's waits pass
-- gives every job with active tasks a reason every few seconds, from the same pools, nodes,
-- slots and queues its dispatch passes read. A row changes only when its reason does; `since`
-- is when the job first had this reason's code. A task read adds what is its own (its
-- dependencies, its requiredSlots, its place in the queue). Rows of jobs with no active task go.
CREATE TABLE job_waits (
    job_pk bigint PRIMARY KEY REFERENCES jobs (pk) ON DELETE CASCADE,
    code text NOT NULL,
    message text NOT NULL,
    -- Ready tasks of the pool's other jobs that dispatch takes before this job's next one.
    ahead bigint NOT NULL,
    -- The ready tasks of each job of the same priority that shares the slots evenly with this
    -- one (the pool's jobDefaultOrder 'none'): they take turns with its tasks.
    sharing bigint[] NOT NULL,
    -- The pool's taskSlotsPerNode (0 if there is no pool): a task needing more never runs.
    pool_slots integer NOT NULL,
    -- The pool's free slots, and the seconds between two slots freeing (its tasks' recent
    -- duration over its slots; NULL while none is known): when a waiting task may start.
    free_slots bigint NOT NULL,
    turn_seconds double precision,
    since timestamptz NOT NULL
);

-- When the last waits pass ran: one row.
CREATE TABLE wait_pass (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    at timestamptz NOT NULL
);

-- A task's dependencies, from the task: its reason names the first unfinished ones.
CREATE INDEX task_deps_task ON task_deps (task_pk);
