-- Auto pools (a job's poolInfo.autoPoolSpecification): the job keeps the specification as given,
-- to show it; the pool it made knows what owns it (a job, or a job schedule whose jobs share it)
-- and whether it outlives its owner (keepAlive). Housekeeping deletes a pool whose owner has
-- completed or gone once no job being deleted still has directories on its nodes.
ALTER TABLE jobs ADD COLUMN auto_pool jsonb;

ALTER TABLE pools
    ADD COLUMN auto_lifetime text
        CONSTRAINT pools_auto_lifetime_word CHECK (auto_lifetime IN ('job', 'jobschedule')),
    ADD COLUMN auto_owner bigint,
    ADD COLUMN keep_alive boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT pools_auto_owned CHECK ((auto_lifetime IS NULL) = (auto_owner IS NULL));

CREATE INDEX pools_auto_owner ON pools (auto_lifetime, auto_owner) WHERE auto_lifetime IS NOT NULL;
CREATE INDEX jobs_deleting_on_pool ON jobs (account, lower(pool_id)) WHERE state = 'deleting';
