-- The task an attempt was of: a task's cost (its statistics' `cost`) is its attempts' shares of
-- their nodes' costs. Rows from before have none.
ALTER TABLE slot_usage ADD COLUMN task_id text;
CREATE INDEX slot_usage_job ON slot_usage (account, job_id);

CREATE OR REPLACE FUNCTION record_slot_usage_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO slot_usage (account, job_id, pool_id, billing_plan, slots, slots_per_node, started_at, ended_at, node_id, task_id)
    SELECT coalesce(s.account, j.account), j.id, o.pool_id, coalesce(p.billing_plan, s.billing_plan),
           o.required_slots, coalesce(p.task_slots_per_node, 1),
           o.start_time, greatest(o.start_time, coalesce(n.end_time, now())), o.node_id, o.id
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

-- A job's cost prices its attempts as their nodes were: their records, by node.
CREATE INDEX usage_records_node ON usage_records (node_id, started_at);
