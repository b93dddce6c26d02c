-- The leader fence (migration 8) checks once a transaction, not once a statement. Its row lock
-- on `leader` (FOR SHARE) holds the epoch until the transaction ends: a new leader's bump waits
-- for it, so what the first check found stays true for the rest of the transaction. The first
-- check leaves the epoch it passed in a transaction-local setting, which a later statement of
-- the same transaction finds (and which goes with a savepoint rolled back, as that savepoint's
-- row lock does). A dispatch pass writes two statements, an outcome's record three or more.
CREATE OR REPLACE FUNCTION leader_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine text := current_setting('batchpool.leader_epoch', true);
BEGIN
    IF mine IS NULL OR mine = '' THEN
        RETURN NULL;
    END IF;
    IF current_setting('batchpool.fenced_epoch', true) = mine THEN
        RETURN NULL;
    END IF;
    -- The shared lock, if taken, goes with the transaction, which the exception aborts.
    IF pg_try_advisory_xact_lock_shared(7089075258760654700) THEN
        RAISE EXCEPTION 'leader epoch % is stale: no server holds the scheduler lock', mine
            USING ERRCODE = 'BP001';
    END IF;
    PERFORM 1 FROM leader WHERE epoch = mine::bigint FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leader epoch % is stale: another server leads the scheduler', mine
            USING ERRCODE = 'BP001';
    END IF;
    PERFORM set_config('batchpool.fenced_epoch', mine, true);
    RETURN NULL;
END $$;

-- Only the row trigger on `tasks` writes `slot_usage` (one statement for each attempt that
-- ends), and the statement on `tasks` that fires it has passed that table's fence.
DROP TRIGGER slot_usage_leader_fence ON slot_usage;
