-- Fencing the leading scheduler. The advisory lock says who leads, but a leader learns that it
-- lost the lock (its connection dropped, PostgreSQL restarted) only some time later, and in the
-- meantime another server may already lead. Each new leader bumps `epoch` on taking the lock, and
-- every statement a scheduler writes checks, in its own transaction, that its epoch is still the
-- current one: a stale leader's writes fail instead of racing the new leader's.
CREATE TABLE leader (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch bigint NOT NULL,
    -- Which server process leads (host and pid), and since when: for people and tests.
    holder text,
    since timestamptz
);
INSERT INTO leader (epoch) VALUES (0);

-- The scheduler's connections carry their leader epoch as the setting batchpool.leader_epoch
-- (API connections carry none and are not checked). A write passes while someone holds the
-- leader's advisory lock (key 7089075258760654700 = 0x6261746368706f6c; a leader holds it
-- exclusively, so taking it shared succeeds only when nobody does) and its epoch is the current
-- one. So a leader whose lock went with its connection (a PostgreSQL restart) cannot write even
-- before another server takes over. FOR SHARE holds the leader row until the writing transaction
-- ends, so a new leader's `UPDATE leader SET epoch = epoch + 1` waits for the old leader's
-- transactions in flight, and every later one of them finds its epoch stale and aborts.
CREATE FUNCTION leader_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine text := current_setting('batchpool.leader_epoch', true);
BEGIN
    IF mine IS NULL OR mine = '' THEN
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
    RETURN NULL;
END $$;

-- Once per statement, before it writes, on every table the scheduler writes.
CREATE TRIGGER pools_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON pools
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER nodes_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON nodes
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER usage_records_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON usage_records
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER jobs_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER tasks_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER task_deps_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON task_deps
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER services_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON services
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER bes_jobs_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON bes_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
CREATE TRIGGER slot_usage_leader_fence BEFORE INSERT OR UPDATE OR DELETE ON slot_usage
    FOR EACH STATEMENT EXECUTE FUNCTION leader_fence();
