-- A job that ends (terminate, onAllTasksComplete, maxWallClockTime, its schedule's end) stays
-- `terminating` while the release tasks of its nodes are due or running, and completes after
-- them, as Azure's does. Whether a job still has release tasks to run is one function, used
-- by the statements that end a job, the housekeeping that completes it, and a job's deletion.
CREATE FUNCTION job_releases_pending(job bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM job_node_tasks x JOIN jobs j ON j.pk = x.job_pk
            JOIN nodes n ON n.pk = x.node_pk
        WHERE x.job_pk = job AND j.release_task IS NOT NULL AND n.state IN ('idle', 'running', 'offline')
          AND x.preparation->>'state' = 'completed'
          AND (x.release IS NULL OR x.release->>'state' = 'running'))
$$;

CREATE INDEX jobs_terminating ON jobs (pk) WHERE state = 'terminating';
CREATE INDEX job_schedules_terminating ON job_schedules (pk) WHERE state = 'terminating';
