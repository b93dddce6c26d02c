-- The node and the task of an attempt's slot use (docs/metering.md, "Prices and cost"): a job's
-- share of a pool's cost is priced as the node it ran on was (its size, dedicated or
-- low-priority, its plan), so the jobs' costs and the pool's idle line add up to the pool's
-- cost; a task's cost (its statistics' `cost`) is its attempts' shares. Rows from before have
-- neither: their share counts as idle.
ALTER TABLE slot_usage ADD COLUMN node_id text, ADD COLUMN task_id text;
CREATE INDEX slot_usage_job ON slot_usage (account, job_id);
-- A job's cost prices its attempts as their nodes were: their records, by node.
CREATE INDEX usage_records_node ON usage_records (node_id, started_at);

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
