-- The identity of this installation. Every container and node directory is labelled with it, so a
-- restarted server finds its own nodes (and only its own) even when several installations share
-- one Docker engine.
CREATE TABLE installation (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    server_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO installation (server_id)
VALUES (substr(md5(random()::text || clock_timestamp()::text), 1, 12));

CREATE TABLE pools (
    -- A surrogate key: a pool id can be reused after deletion, and usage records of the old
    -- pool must not be confused with the new one's nodes.
    pk bigserial PRIMARY KEY,
    account text NOT NULL,
    id text NOT NULL,
    display_name text,
    vm_size text NOT NULL,
    -- The limits are copied from the size table at creation so that editing the table later
    -- does not change running pools.
    vcpus double precision NOT NULL,
    memory_mib bigint NOT NULL,
    image text NOT NULL,
    -- virtualMachineConfiguration as the client sent it, echoed back on GET.
    vm_config jsonb,
    start_task jsonb,
    task_slots_per_node integer NOT NULL,
    node_fill_type text NOT NULL,
    target_dedicated_nodes integer NOT NULL CHECK (target_dedicated_nodes >= 0),
    resize_timeout_ticks bigint NOT NULL,
    node_deallocation_option text NOT NULL DEFAULT 'requeue',
    state text NOT NULL,
    state_transition_time timestamptz NOT NULL,
    allocation_state text NOT NULL,
    allocation_state_transition_time timestamptz NOT NULL,
    resize_errors jsonb NOT NULL DEFAULT '[]',
    metadata jsonb NOT NULL DEFAULT '[]',
    creation_time timestamptz NOT NULL,
    last_modified timestamptz NOT NULL
);
-- Azure pool ids are case-preserving but unique regardless of case within an account.
CREATE UNIQUE INDEX pools_account_id ON pools (account, lower(id));

CREATE TABLE nodes (
    pk bigserial PRIMARY KEY,
    pool_pk bigint NOT NULL REFERENCES pools (pk) ON DELETE CASCADE,
    id text NOT NULL UNIQUE,
    state text NOT NULL,
    state_transition_time timestamptz NOT NULL,
    allocation_time timestamptz NOT NULL,
    last_boot_time timestamptz,
    ip_address text,
    container_id text,
    errors jsonb NOT NULL DEFAULT '[]',
    start_task_info jsonb,
    -- Kept by the same updates that place and end tasks, so a node says what it runs.
    running_task_slots integer NOT NULL DEFAULT 0,
    running_tasks integer NOT NULL DEFAULT 0,
    total_tasks_run integer NOT NULL DEFAULT 0,
    total_tasks_succeeded integer NOT NULL DEFAULT 0
);
CREATE INDEX nodes_pool ON nodes (pool_pk);

-- A node's life from provisioned (container started) to removed. Compute hours are summed from these rows, so they outlive
-- the pool and the node (no foreign keys).
CREATE TABLE usage_records (
    id bigserial PRIMARY KEY,
    account text NOT NULL,
    pool_pk bigint NOT NULL,
    pool_id text NOT NULL,
    node_id text NOT NULL,
    vm_size text NOT NULL,
    vcpus double precision NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz,
    CHECK (ended_at IS NULL OR ended_at >= started_at)
);
-- At most one open record per node: a restart that adopts a node keeps its record, never adds one.
CREATE UNIQUE INDEX usage_records_one_open ON usage_records (node_id) WHERE ended_at IS NULL;
CREATE INDEX usage_records_pool_time ON usage_records (account, pool_id, started_at);
