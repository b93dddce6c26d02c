-- What autoscale formulas read as $CPUPercent and $MemoryBytes: the average over the pool's
-- usable nodes whose agents reported, null when none did.
ALTER TABLE pool_samples
    ADD COLUMN cpu_percent double precision,
    ADD COLUMN memory_bytes double precision;
