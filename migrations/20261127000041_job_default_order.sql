-- A pool's taskSchedulingPolicy.jobDefaultOrder (Azure's BatchJobDefaultOrder): how its jobs of
-- equal priority share its free slots. `none` shares them evenly, in turns; `creationtime` gives
-- them to the oldest job first, which is what every pool did before this column, and stays the
-- default here (the design's dispatch order; Azure's default is `none`).
ALTER TABLE pools
    ADD COLUMN job_default_order text NOT NULL DEFAULT 'creationtime'
        CONSTRAINT pools_job_default_order_word CHECK (job_default_order IN ('none', 'creationtime'));
