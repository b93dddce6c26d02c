-- The id of the container an attempt runs in, for a task with containerSettings (Azure's
-- executionInfo.containerInfo.containerId). Null for tasks that run in their node; cleared when a
-- new attempt starts.
ALTER TABLE tasks ADD COLUMN container_id text;
