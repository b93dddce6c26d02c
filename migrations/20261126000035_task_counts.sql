-- Get Task Counts (and the dashboard's job pages) read a job's counts from a few rows instead of
-- counting every task of the job: a 100,000-task job cost about 60 ms of PostgreSQL's time a call,
-- and scripts that wait for a job poll it.
--
-- Every statement that adds, changes or removes tasks adds one row per job it touched to
-- task_count_changes (what it moved between the counts), from the statement's transition tables.
-- Writers share no row, so none waits for another, as they would on one counts row per job.
-- The scheduler folds the changes into task_counts now and then; a reader adds the changes not
-- folded yet. Deleted jobs' changes are dropped when folded.
CREATE TABLE task_counts (
    job_pk bigint PRIMARY KEY REFERENCES jobs (pk) ON DELETE CASCADE,
    active bigint NOT NULL,
    running bigint NOT NULL,
    completed bigint NOT NULL,
    succeeded bigint NOT NULL,
    failed bigint NOT NULL,
    active_slots bigint NOT NULL,
    running_slots bigint NOT NULL,
    completed_slots bigint NOT NULL,
    succeeded_slots bigint NOT NULL,
    failed_slots bigint NOT NULL
);

-- The same columns, without task_counts' keys (LIKE copies none): no foreign key, since a job's
-- deletion removes its tasks, whose changes come after the job is gone.
CREATE TABLE task_count_changes (
    id bigserial PRIMARY KEY,
    LIKE task_counts
);
CREATE INDEX task_count_changes_job ON task_count_changes (job_pk);

-- What each task row counts for: one in its state's count (and its slots in the slot counts).
CREATE FUNCTION task_count_row(sign int, state text, result text, slots int,
    OUT active bigint, OUT running bigint, OUT completed bigint, OUT succeeded bigint, OUT failed bigint,
    OUT active_slots bigint, OUT running_slots bigint, OUT completed_slots bigint,
    OUT succeeded_slots bigint, OUT failed_slots bigint)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sign * (state = 'active')::int, sign * (state IN ('preparing', 'running'))::int,
           sign * (state = 'completed')::int, sign * (state = 'completed' AND result = 'success')::int,
           sign * (state = 'completed' AND result = 'failure')::int,
           sign * (state = 'active')::int * slots, sign * (state IN ('preparing', 'running'))::int * slots,
           sign * (state = 'completed')::int * slots,
           sign * (state = 'completed' AND result = 'success')::int * slots,
           sign * (state = 'completed' AND result = 'failure')::int * slots
$$;

CREATE FUNCTION count_task_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_count_changes (job_pk, active, running, completed, succeeded, failed,
            active_slots, running_slots, completed_slots, succeeded_slots, failed_slots)
        SELECT n.job_pk, sum(c.active), sum(c.running), sum(c.completed), sum(c.succeeded), sum(c.failed),
               sum(c.active_slots), sum(c.running_slots), sum(c.completed_slots), sum(c.succeeded_slots), sum(c.failed_slots)
        FROM counted_new n, task_count_row(1, n.state, n.result, n.required_slots) c
        GROUP BY n.job_pk;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO task_count_changes (job_pk, active, running, completed, succeeded, failed,
            active_slots, running_slots, completed_slots, succeeded_slots, failed_slots)
        SELECT o.job_pk, sum(c.active), sum(c.running), sum(c.completed), sum(c.succeeded), sum(c.failed),
               sum(c.active_slots), sum(c.running_slots), sum(c.completed_slots), sum(c.succeeded_slots), sum(c.failed_slots)
        FROM counted_old o, task_count_row(-1, o.state, o.result, o.required_slots) c
        GROUP BY o.job_pk;
    ELSE
        -- Only rows whose count moved, each counted out as it was and in as it is; an update that
        -- moves none (most do not) writes nothing.
        INSERT INTO task_count_changes (job_pk, active, running, completed, succeeded, failed,
            active_slots, running_slots, completed_slots, succeeded_slots, failed_slots)
        SELECT x.job_pk, sum(c.active), sum(c.running), sum(c.completed), sum(c.succeeded), sum(c.failed),
               sum(c.active_slots), sum(c.running_slots), sum(c.completed_slots), sum(c.succeeded_slots), sum(c.failed_slots)
        FROM counted_new n JOIN counted_old o ON o.pk = n.pk,
             LATERAL (VALUES (n.job_pk, 1, n.state, n.result, n.required_slots),
                             (o.job_pk, -1, o.state, o.result, o.required_slots)) x(job_pk, sign, state, result, slots),
             task_count_row(x.sign, x.state, x.result, x.slots) c
        WHERE (n.state, n.result, n.required_slots, n.job_pk) IS DISTINCT FROM (o.state, o.result, o.required_slots, o.job_pk)
        GROUP BY x.job_pk
        HAVING sum(c.active) <> 0 OR sum(c.running) <> 0 OR sum(c.completed) <> 0 OR sum(c.succeeded) <> 0
            OR sum(c.failed) <> 0 OR sum(c.active_slots) <> 0 OR sum(c.running_slots) <> 0
            OR sum(c.completed_slots) <> 0 OR sum(c.succeeded_slots) <> 0 OR sum(c.failed_slots) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS counted_new
    FOR EACH STATEMENT EXECUTE FUNCTION count_task_changes();
CREATE TRIGGER tasks_count_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS counted_old NEW TABLE AS counted_new
    FOR EACH STATEMENT EXECUTE FUNCTION count_task_changes();
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS counted_old
    FOR EACH STATEMENT EXECUTE FUNCTION count_task_changes();

-- The counts of the tasks there are now.
INSERT INTO task_counts (job_pk, active, running, completed, succeeded, failed,
    active_slots, running_slots, completed_slots, succeeded_slots, failed_slots)
SELECT t.job_pk, sum(c.active), sum(c.running), sum(c.completed), sum(c.succeeded), sum(c.failed),
       sum(c.active_slots), sum(c.running_slots), sum(c.completed_slots), sum(c.succeeded_slots), sum(c.failed_slots)
FROM tasks t, task_count_row(1, t.state, t.result, t.required_slots) c
GROUP BY t.job_pk;
