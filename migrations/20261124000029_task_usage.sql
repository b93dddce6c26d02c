-- What each task used over all its attempts, for the `stats` of tasks, jobs and pools: wall
-- clock time from each attempt's start to its end, and, where the node's agent started the
-- command, CPU time and storage bytes as getrusage(2) counts them.
ALTER TABLE tasks
    ADD COLUMN wall_clock_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN user_cpu_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN kernel_cpu_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN read_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN write_bytes bigint NOT NULL DEFAULT 0;
