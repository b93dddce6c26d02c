-- What the tasks of an account's deleted jobs (and deleted tasks) used, kept when they go, so
-- that the lifetime job statistics count every task the account ever ran.
CREATE TABLE account_task_totals (
    account text PRIMARY KEY REFERENCES accounts(name) ON DELETE CASCADE,
    wall_ms bigint NOT NULL DEFAULT 0,
    user_ms bigint NOT NULL DEFAULT 0,
    kernel_ms bigint NOT NULL DEFAULT 0,
    read_bytes bigint NOT NULL DEFAULT 0,
    write_bytes bigint NOT NULL DEFAULT 0,
    wait_ms bigint NOT NULL DEFAULT 0,
    succeeded bigint NOT NULL DEFAULT 0,
    failed bigint NOT NULL DEFAULT 0,
    retries bigint NOT NULL DEFAULT 0,
    first_job timestamptz
);
