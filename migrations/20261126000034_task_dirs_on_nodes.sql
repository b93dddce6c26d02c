-- A task's directory now lives on the node that ran it (below the node's root, as on Azure),
-- not in a directory of the server's that an account's nodes shared: a queued removal names that
-- node, whose agent removes the directory. Removals queued before this version named a
-- directory in the server's data directory, which this version no longer uses: they go.
DELETE FROM task_dir_removals;
ALTER TABLE task_dir_removals ADD COLUMN node_id text NOT NULL;

-- Task directories going with their node give nodeDeallocationOption `retaineddata` its meaning:
-- a node that leaves (or is reimaged) with it keeps its disk until the retention of every task
-- that ran on it has run out, as Azure's does.
ALTER TABLE nodes ADD COLUMN retain_data boolean NOT NULL DEFAULT false;
