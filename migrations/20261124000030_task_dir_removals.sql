-- Task directories to remove, for the leader: a task deleted through any server (whose data
-- directory may not be the one its files are in) leaves its directory's removal here.
CREATE TABLE task_dir_removals (
    pk bigserial PRIMARY KEY,
    account text NOT NULL,
    job_id text NOT NULL,
    task_id text NOT NULL,
    queued_at timestamptz NOT NULL DEFAULT now()
);
