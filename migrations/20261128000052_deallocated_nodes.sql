-- A node can be deallocated and started again (Azure's node deallocate and start): while
-- 'deallocating' its tasks end as the request's option says and its container stops; while
-- 'deallocated' its container is stopped with its disk kept, it runs nothing and is not billed.
ALTER TABLE nodes DROP CONSTRAINT nodes_state_word;
ALTER TABLE nodes
    ADD CONSTRAINT nodes_state_word CHECK (state IN ('creating', 'starting', 'waitingforstarttask', 'starttaskfailed',
        'idle', 'running', 'leavingpool', 'unusable', 'offline', 'rebooting', 'reimaging', 'preempted', 'unknown',
        'deallocating', 'deallocated'));
