-- A node being made again from its image (Azure's reimage), and the states a job schedule may be in.
ALTER TABLE nodes DROP CONSTRAINT nodes_state_word;
ALTER TABLE nodes
    ADD CONSTRAINT nodes_state_word CHECK (state IN ('creating', 'starting', 'waitingforstarttask', 'starttaskfailed',
        'idle', 'running', 'leavingpool', 'unusable', 'offline', 'rebooting', 'reimaging', 'unknown'));
ALTER TABLE job_schedules
    ADD CONSTRAINT job_schedules_state_word CHECK (state IN ('active', 'completed', 'disabled', 'terminating', 'deleting'));
