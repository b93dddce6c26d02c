-- A job's preparation and release tasks (domain::job_prep), as the server keeps them.
ALTER TABLE jobs ADD COLUMN preparation_task jsonb, ADD COLUMN release_task jsonb;

-- Where a job's preparation task ran, and its release task after it: Azure's
-- JobPreparationAndReleaseTaskExecutionInformation, one row per job and node. The node may be
-- gone since (its pk is kept, not referenced).
CREATE TABLE job_node_tasks (
    job_pk bigint NOT NULL REFERENCES jobs (pk) ON DELETE CASCADE,
    node_pk bigint NOT NULL,
    pool_id text NOT NULL,
    node_id text NOT NULL,
    -- JobPreparationTaskExecutionInformation as Azure shows it.
    preparation jsonb NOT NULL,
    -- JobReleaseTaskExecutionInformation, once the release task started.
    release jsonb,
    PRIMARY KEY (job_pk, node_pk)
);
CREATE INDEX job_node_tasks_node ON job_node_tasks (node_pk);
