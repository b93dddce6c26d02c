-- Autoscale formulas (Azure's enableAutoScale). While enabled, the leader evaluates the formula
-- at auto_scale_next and sets the pool's target from it; auto_scale_run is the last
-- evaluation as Azure's AutoScaleRun. The formula and interval stay after autoscale is
-- disabled, as Azure keeps them, but only an enabled pool is evaluated.
ALTER TABLE pools
    ADD COLUMN enable_auto_scale boolean NOT NULL DEFAULT false,
    ADD COLUMN auto_scale_formula text,
    ADD COLUMN auto_scale_interval_ticks bigint,
    ADD COLUMN auto_scale_run jsonb,
    ADD COLUMN auto_scale_next timestamptz;
CREATE INDEX pools_auto_scale_next ON pools (auto_scale_next) WHERE enable_auto_scale;

-- The samples formulas read ($PendingTasks.GetSample(...)): taken by the leader every few
-- seconds for each autoscaled pool, kept for an hour. In the database, so any server can
-- evaluate a formula (evaluateautoscale) and a new leader keeps the history.
CREATE TABLE pool_samples (
    pool_pk bigint NOT NULL REFERENCES pools(pk) ON DELETE CASCADE,
    at timestamptz NOT NULL,
    active integer NOT NULL,
    running integer NOT NULL,
    succeeded integer NOT NULL,
    failed integer NOT NULL,
    dedicated integer NOT NULL,
    usable integer NOT NULL,
    PRIMARY KEY (pool_pk, at)
);
CREATE INDEX pool_samples_at ON pool_samples (at);
