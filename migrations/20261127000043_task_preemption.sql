-- A job's allowTaskPreemption (Azure's, API 2023-05-01): its running tasks may be requeued to
-- give their slots to a job of higher priority on the same pool that has tasks waiting and no
-- free slot. The partial index keeps the question "is there anything to preempt?" cheap when,
-- as usual, no job allows it.
ALTER TABLE jobs ADD COLUMN allow_task_preemption boolean NOT NULL DEFAULT false;
CREATE INDEX jobs_preemptible ON jobs (account, lower(pool_id))
    WHERE allow_task_preemption AND state = 'active';
