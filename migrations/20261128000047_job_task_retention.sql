-- retentionTime of a job's preparation task (constraints.retentionTime) and release task: when
-- each one's directory on a node (jobprep/{job}/{task}) may go, counted from when it completed
-- there (Azure's default: 7 days). Rows recorded before this column keep their directories until
-- the job is deleted, as before.
ALTER TABLE job_node_tasks
    ADD COLUMN preparation_expires timestamptz,
    ADD COLUMN release_expires timestamptz;
CREATE INDEX job_node_tasks_preparation_expires ON job_node_tasks (preparation_expires)
    WHERE preparation_expires IS NOT NULL;
CREATE INDEX job_node_tasks_release_expires ON job_node_tasks (release_expires)
    WHERE release_expires IS NOT NULL;
