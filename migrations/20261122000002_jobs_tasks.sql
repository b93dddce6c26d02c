CREATE TABLE jobs (
    pk bigserial PRIMARY KEY,
    account text NOT NULL,
    id text NOT NULL,
    display_name text,
    priority integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    -- -1: no limit.
    max_parallel_tasks integer NOT NULL DEFAULT -1,
    max_wall_clock_ticks bigint,
    max_task_retry_count integer NOT NULL DEFAULT 0,
    -- poolInfo.poolId; a job may name a pool that does not exist yet (its tasks wait).
    pool_id text NOT NULL,
    on_all_tasks_complete text NOT NULL DEFAULT 'noaction',
    on_task_failure text NOT NULL DEFAULT 'noaction',
    uses_task_dependencies boolean NOT NULL DEFAULT false,
    common_environment jsonb NOT NULL DEFAULT '[]',
    metadata jsonb NOT NULL DEFAULT '[]',
    state text NOT NULL,
    state_transition_time timestamptz NOT NULL,
    previous_state text,
    previous_state_transition_time timestamptz,
    terminate_reason text,
    start_time timestamptz NOT NULL,
    end_time timestamptz,
    creation_time timestamptz NOT NULL,
    last_modified timestamptz NOT NULL
);
CREATE UNIQUE INDEX jobs_account_id ON jobs (account, lower(id));
-- Dispatch walks the active jobs of a pool in priority order.
CREATE INDEX jobs_dispatch ON jobs (account, lower(pool_id), priority DESC, creation_time, pk) WHERE state = 'active';

CREATE TABLE tasks (
    -- pk is also the task order within its job (the order tasks were added in).
    pk bigserial PRIMARY KEY,
    job_pk bigint NOT NULL REFERENCES jobs (pk) ON DELETE CASCADE,
    id text NOT NULL,
    display_name text,
    command_line text NOT NULL,
    environment jsonb NOT NULL DEFAULT '[]',
    required_slots integer NOT NULL DEFAULT 1 CHECK (required_slots >= 1),
    max_wall_clock_ticks bigint,
    retention_ticks bigint NOT NULL,
    -- -1: retry without limit.
    max_task_retry_count integer NOT NULL,
    depends_on jsonb,
    exit_conditions jsonb,
    -- Fields accepted and echoed back but not acted on (resourceFiles, outputFiles, ...).
    extra jsonb NOT NULL DEFAULT '{}',
    -- Dependencies that have not yet been satisfied; a task runs only at zero.
    unmet_deps integer NOT NULL DEFAULT 0,
    state text NOT NULL,
    state_transition_time timestamptz NOT NULL,
    previous_state text,
    previous_state_transition_time timestamptz,
    creation_time timestamptz NOT NULL,
    last_modified timestamptz NOT NULL,
    -- Each placement is a new attempt; only the holder of the current attempt may complete it,
    -- so a task ends exactly once whatever restarts or races happen.
    attempt integer NOT NULL DEFAULT 0,
    node_pk bigint REFERENCES nodes (pk) ON DELETE SET NULL,
    node_id text,
    pool_id text,
    start_time timestamptz,
    end_time timestamptz,
    exit_code integer,
    result text,
    failure_info jsonb,
    retry_count integer NOT NULL DEFAULT 0,
    requeue_count integer NOT NULL DEFAULT 0,
    last_retry_time timestamptz,
    last_requeue_time timestamptz,
    -- Set when the task completes: whether its dependants may run (exit options' dependencyAction).
    satisfies_dependants boolean NOT NULL DEFAULT false,
    -- When the task's directory is removed (end_time + retentionTime); null once removed.
    files_expire_at timestamptz
);
-- Task ids are case-preserving but unique regardless of case within a job, as on Azure.
-- Every task is updated twice or more (placed, ended): vacuum often, or the partial indexes the
-- scheduler reads (ready queue, running, unfinished) fill with dead entries it has to walk past.
ALTER TABLE tasks SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
                       autovacuum_analyze_scale_factor = 0.02);
CREATE UNIQUE INDEX tasks_job_id ON tasks (job_pk, lower(id));
-- The ready queue: dispatch reads it in task order, per job, a few rows at a time.
CREATE INDEX tasks_ready ON tasks (job_pk, pk) WHERE state = 'active' AND unmet_deps = 0;
-- Running tasks: for maxParallelTasks, recovery after a restart, and a node's slots.
CREATE INDEX tasks_running ON tasks (job_pk) WHERE state = 'running';
CREATE INDEX tasks_node ON tasks (node_pk) WHERE state = 'running';
-- Whether a job still has unfinished tasks (onAllTasksComplete).
CREATE INDEX tasks_unfinished ON tasks (job_pk) WHERE state <> 'completed';
CREATE INDEX tasks_files_expire ON tasks (files_expire_at) WHERE files_expire_at IS NOT NULL;

-- task -> the tasks it depends on.
CREATE TABLE task_deps (
    task_pk bigint NOT NULL REFERENCES tasks (pk) ON DELETE CASCADE,
    depends_on_pk bigint NOT NULL REFERENCES tasks (pk) ON DELETE CASCADE,
    PRIMARY KEY (depends_on_pk, task_pk)
);
