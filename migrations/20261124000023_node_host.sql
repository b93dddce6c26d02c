-- The Docker engine (its URL) a node's container is on, or `local` for a local node, recorded
-- when the node starts: /metrics counts nodes per host from it, on any server of the database.
ALTER TABLE nodes ADD COLUMN host text;
