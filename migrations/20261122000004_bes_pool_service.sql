-- BES web services and jobs, the Pool Service, billing plans.

-- The Pool Service: each account has its own authorization key (Bearer) and the quotas Azure's
-- support would configure. gen_random_uuid() draws from a strong source (64 hex digits here).
ALTER TABLE accounts
    ADD COLUMN pool_service_key text NOT NULL
        DEFAULT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
    ADD COLUMN max_pools integer NOT NULL DEFAULT 10 CHECK (max_pools >= 0),
    ADD COLUMN max_vms_per_pool integer NOT NULL DEFAULT 20 CHECK (max_vms_per_pool >= 0);

-- A pool made by the Pool Service for a service's swagger.json bills to that service's plan.
-- Usage records copy the plan when they open, so a later change never rewrites history.
ALTER TABLE pools
    ADD COLUMN billing_plan text,
    ADD COLUMN service_pk bigint,
    ADD COLUMN pool_service boolean NOT NULL DEFAULT false;
ALTER TABLE usage_records ADD COLUMN billing_plan text;
CREATE INDEX usage_records_plan_time ON usage_records (account, billing_plan, started_at);

-- A web service: what a BES job runs. Addressed by (namespace, id), the namespace being the
-- subscription of /subscriptions/{sub}/services/{svc} or the workspace of the classic paths.
CREATE TABLE services (
    pk bigserial PRIMARY KEY,
    account text NOT NULL REFERENCES accounts (name),
    namespace text NOT NULL,
    id text NOT NULL,
    title text,
    description text,
    image text,
    command text NOT NULL,
    -- [{"Name", "Extension"}], [{"Name", "Extension"}], [{"Name", "Default", "Required"}]
    inputs jsonb NOT NULL DEFAULT '[]',
    outputs jsonb NOT NULL DEFAULT '[]',
    global_parameters jsonb NOT NULL DEFAULT '[]',
    billing_plan text NOT NULL,
    primary_key text NOT NULL DEFAULT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
    secondary_key text NOT NULL DEFAULT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
    creation_time timestamptz NOT NULL DEFAULT now(),
    last_modified timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX services_namespace_id ON services (lower(namespace), lower(id));

-- A BES job. Its phase is finer than the StatusCode it shows: notstarted -> staging (inputs being
-- downloaded, or waiting for the classic environment) -> running (its Batch task exists) ->
-- uploading -> finished | failed; cancelled from any phase before the end.
CREATE TABLE bes_jobs (
    pk bigserial PRIMARY KEY,
    id text NOT NULL UNIQUE,
    service_pk bigint NOT NULL REFERENCES services (pk) ON DELETE CASCADE,
    -- The account its Batch job runs in: the pool's, or '.classic' for the shared environment.
    run_account text NOT NULL,
    pool_id text,
    -- Inputs, outputs and global parameters as resolved at submit (with their credentials: never
    -- returned by the API).
    request jsonb NOT NULL,
    phase text NOT NULL,
    results jsonb,
    details text,
    creation_time timestamptz NOT NULL DEFAULT now(),
    start_time timestamptz,
    end_time timestamptz,
    last_modified timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bes_jobs_service ON bes_jobs (service_pk, creation_time);
CREATE INDEX bes_jobs_in_flight ON bes_jobs (start_time, pk) WHERE phase IN ('staging', 'running', 'uploading');

-- Slot-seconds of every task attempt that ran, for the hours attributed to each job. Written by
-- a row trigger on the tasks table, so every way an attempt ends (completed, retried, requeued,
-- terminated, its node removed) is counted once, whatever code path ended it.
CREATE TABLE slot_usage (
    id bigserial PRIMARY KEY,
    account text NOT NULL,
    job_id text NOT NULL,
    pool_id text NOT NULL,
    billing_plan text,
    slots integer NOT NULL,
    slots_per_node integer NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz NOT NULL
);
CREATE INDEX slot_usage_time ON slot_usage (account, started_at);

-- A BES job's attempts count for the service's account and plan: in the classic environment (the
-- internal account '.classic') the service's owner is who ran it; on a pool, the pool's plan wins.
CREATE FUNCTION record_slot_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO slot_usage (account, job_id, pool_id, billing_plan, slots, slots_per_node, started_at, ended_at)
    SELECT coalesce(s.account, j.account), j.id, OLD.pool_id, coalesce(p.billing_plan, s.billing_plan),
           OLD.required_slots, coalesce(p.task_slots_per_node, 1),
           OLD.start_time, greatest(OLD.start_time, coalesce(NEW.end_time, now()))
    FROM jobs j
    LEFT JOIN pools p ON p.account = j.account AND lower(p.id) = lower(OLD.pool_id)
    LEFT JOIN bes_jobs b ON b.id = j.id AND b.run_account = j.account
    LEFT JOIN services s ON s.pk = b.service_pk
    WHERE j.pk = OLD.job_pk;
    RETURN NULL;
END $$;

-- A row trigger whose WHEN is checked before any function runs: placements and other updates
-- cost nothing; only an attempt that ends writes a row.
CREATE TRIGGER tasks_slot_usage AFTER UPDATE OF state, attempt ON tasks
    FOR EACH ROW
    WHEN (OLD.state = 'running' AND OLD.start_time IS NOT NULL AND OLD.pool_id IS NOT NULL
          AND (NEW.state <> 'running' OR NEW.attempt <> OLD.attempt))
    EXECUTE FUNCTION record_slot_usage();
