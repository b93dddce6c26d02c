-- An attempt's slot use (migration 4, with `preparing` since migration 13) is written once for
-- each statement that ends attempts, not once for each attempt: an outcome's record ends a batch
-- of them in one update, and a row trigger ran its function (a plan, four joins and an insert)
-- for every one. The rows are the same: an attempt that was preparing or running, with a start
-- and a pool, and that has left those states or was replaced by a new attempt. The transition
-- tables are the ones the count trigger (migration 35) already has PostgreSQL keep.
CREATE FUNCTION record_slot_usage_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO slot_usage (account, job_id, pool_id, billing_plan, slots, slots_per_node, started_at, ended_at)
    SELECT coalesce(s.account, j.account), j.id, o.pool_id, coalesce(p.billing_plan, s.billing_plan),
           o.required_slots, coalesce(p.task_slots_per_node, 1),
           o.start_time, greatest(o.start_time, coalesce(n.end_time, now()))
    FROM used_old o
    JOIN used_new n ON n.pk = o.pk
    JOIN jobs j ON j.pk = o.job_pk
    LEFT JOIN pools p ON p.account = j.account AND lower(p.id) = lower(o.pool_id)
    LEFT JOIN bes_jobs b ON b.id = j.id AND b.run_account = j.account
    LEFT JOIN services s ON s.pk = b.service_pk
    WHERE o.state IN ('preparing', 'running') AND o.start_time IS NOT NULL AND o.pool_id IS NOT NULL
      AND (n.state NOT IN ('preparing', 'running') OR n.attempt <> o.attempt);
    RETURN NULL;
END $$;

DROP TRIGGER tasks_slot_usage ON tasks;
DROP FUNCTION record_slot_usage();
CREATE TRIGGER tasks_slot_usage AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS used_old NEW TABLE AS used_new
    FOR EACH STATEMENT EXECUTE FUNCTION record_slot_usage_rows();
