-- A task's stdout.txt and stderr.txt, kept as its attempt ends (docs/data.md, "Output that
-- outlives its node"), so they can be read after the node is gone, reimaged or preempted: the
-- first and last --kept-output-mib MiB of each (with a line saying how much was cut between
-- them), gzip-compressed when that saves anything. In the database, so every server of the
-- installation reads them; the latest attempt's replaces an earlier one's. They go with the
-- task, or when its retentionTime ends.
CREATE TABLE task_outputs (
    task_pk bigint NOT NULL REFERENCES tasks (pk) ON DELETE CASCADE,
    name text NOT NULL CHECK (name IN ('stdout.txt', 'stderr.txt')),
    attempt integer NOT NULL,
    -- The file's length on the node when its attempt ended.
    len bigint NOT NULL CHECK (len >= 0),
    -- Whether its middle was cut.
    cut boolean NOT NULL,
    gzip boolean NOT NULL,
    data bytea NOT NULL,
    kept_at timestamptz NOT NULL,
    PRIMARY KEY (task_pk, name)
);
