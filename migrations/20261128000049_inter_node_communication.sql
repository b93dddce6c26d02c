-- A pool's enableInterNodeCommunication: its nodes may talk to each other directly. The server
-- keeps such a pool's nodes on one Docker host, on its account's network there (Azure likewise
-- limits where such a pool's nodes go, which may keep it from its target size).
ALTER TABLE pools ADD COLUMN inter_node_communication boolean NOT NULL DEFAULT false;
