-- A task with resource files is `preparing` on its node while they download, then `running`
-- (Azure's states). Both mean "on a node": the indexes and the slot metering cover both.
DROP INDEX tasks_running;
DROP INDEX tasks_node;
CREATE INDEX tasks_running ON tasks (job_pk) WHERE state IN ('preparing', 'running');
CREATE INDEX tasks_node ON tasks (node_pk) WHERE state IN ('preparing', 'running');

DROP TRIGGER tasks_slot_usage ON tasks;
CREATE TRIGGER tasks_slot_usage AFTER UPDATE OF state, attempt ON tasks
    FOR EACH ROW
    WHEN (OLD.state IN ('preparing', 'running') AND OLD.start_time IS NOT NULL AND OLD.pool_id IS NOT NULL
          AND (NEW.state NOT IN ('preparing', 'running') OR NEW.attempt <> OLD.attempt))
    EXECUTE FUNCTION record_slot_usage();
