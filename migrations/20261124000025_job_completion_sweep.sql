-- A job set to end with its tasks (onAllTasksComplete=terminatejob) by a PATCH while its last
-- task completes can miss both checks (each transaction sees the other's change only after it
-- commits). The leader looks again at such jobs changed in the last minute; this index keeps
-- that look to the few it concerns.
CREATE INDEX jobs_ending_with_tasks ON jobs (last_modified)
    WHERE on_all_tasks_complete = 'terminatejob' AND state IN ('active', 'disabled');
