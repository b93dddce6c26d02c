-- Low-priority (spot) nodes: a pool's second target, which nodes are which, and preemption.
-- A preempted node keeps its row (state 'preempted', counted in the pool's low-priority nodes, as
-- Azure counts them) while its container is gone; it is made again once capacity allows and not
-- before preempted_until (an operator's reclaim may hold the capacity for a while).
ALTER TABLE pools ADD COLUMN target_low_priority_nodes integer NOT NULL DEFAULT 0
    CHECK (target_low_priority_nodes >= 0);
ALTER TABLE nodes
    ADD COLUMN is_dedicated boolean NOT NULL DEFAULT true,
    ADD COLUMN preempted_until timestamptz;
ALTER TABLE nodes DROP CONSTRAINT nodes_state_word;
ALTER TABLE nodes
    ADD CONSTRAINT nodes_state_word CHECK (state IN ('creating', 'starting', 'waitingforstarttask', 'starttaskfailed',
        'idle', 'running', 'leavingpool', 'unusable', 'offline', 'rebooting', 'reimaging', 'preempted', 'unknown'));
-- Compute hours of low-priority nodes are billed apart from dedicated ones.
ALTER TABLE usage_records ADD COLUMN is_dedicated boolean NOT NULL DEFAULT true;
-- What formulas read as $CurrentLowPriorityNodes and $PreemptedNodeCount.
ALTER TABLE pool_samples
    ADD COLUMN low_priority integer NOT NULL DEFAULT 0,
    ADD COLUMN preempted integer NOT NULL DEFAULT 0;
-- The operator's credential for the routes under /batchpool/operator (reclaiming capacity):
-- 256 random bits, hex, shared by the installation's servers; each writes it to operator.token
-- in its data directory, readable only by the server's user.
ALTER TABLE installation ADD COLUMN operator_token text NOT NULL
    DEFAULT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
-- A job manager task with allowLowPriorityNode false runs on dedicated nodes only.
ALTER TABLE tasks ADD COLUMN dedicated_only boolean NOT NULL DEFAULT false;
