-- Job schedules (Azure's /jobschedules): a job specification and when to make jobs from it.
-- `next_run_time` is when the next job is due (NULL: no more jobs); the leader makes each job,
-- named `{id}:job-{N}`, in the transaction that moves `next_run_time` on, so no job is made twice.
CREATE TABLE job_schedules (
    pk bigserial PRIMARY KEY,
    account text NOT NULL REFERENCES accounts(name) ON DELETE CASCADE,
    id text NOT NULL,
    display_name text,
    state text NOT NULL DEFAULT 'active',
    state_transition_time timestamptz NOT NULL DEFAULT now(),
    previous_state text,
    previous_state_transition_time timestamptz,
    do_not_run_until timestamptz,
    do_not_run_after timestamptz,
    start_window_ms bigint,
    recurrence_ms bigint,
    job_specification jsonb NOT NULL,
    metadata jsonb NOT NULL DEFAULT '[]',
    next_run_time timestamptz,
    jobs_made integer NOT NULL DEFAULT 0,
    recent_job text,
    end_time timestamptz,
    creation_time timestamptz NOT NULL DEFAULT now(),
    last_modified timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX job_schedules_account_id ON job_schedules (account, lower(id));
CREATE INDEX job_schedules_due ON job_schedules (next_run_time) WHERE state = 'active';

-- The schedule a job was made by, for /jobschedules/{id}/jobs and the one-job-at-a-time rule.
ALTER TABLE jobs ADD COLUMN job_schedule_pk bigint REFERENCES job_schedules(pk) ON DELETE SET NULL;
CREATE INDEX jobs_job_schedule ON jobs (job_schedule_pk, lower(id)) WHERE job_schedule_pk IS NOT NULL;
