-- A node's schedulingState (Azure's disablescheduling / enablescheduling): a node with
-- scheduling disabled takes no new tasks; what runs on it when it is disabled is requeued,
-- ended or left to finish, as the request says.
ALTER TABLE nodes ADD COLUMN scheduling_disabled boolean NOT NULL DEFAULT false;
