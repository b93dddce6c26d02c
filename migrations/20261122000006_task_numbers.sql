-- dependsOn.taskIdRanges name tasks by number: the range 9..12 is the tasks "9", "10", "11" and
-- "12" (decimal, no sign, no leading zeros). Ranges are resolved in SQL against this index rather
-- than expanded into ids: a request of a few kilobytes can name billions of ids.
-- At most 18 digits, so the cast never overflows a bigint.
CREATE FUNCTION task_number(id text) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT CASE WHEN id ~ '^(0|[1-9][0-9]{0,17})$' THEN id::bigint END $$;

-- Only numbered tasks have an entry.
CREATE INDEX tasks_number ON tasks (job_pk, task_number(id)) WHERE task_number(id) IS NOT NULL;
