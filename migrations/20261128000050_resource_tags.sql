-- A pool's resourceTags (name to value), as given; NULL for none. Each node's container carries
-- them as Docker labels (`batchpool.tag.<name>`), as Azure puts them on a pool's resources.
ALTER TABLE pools ADD COLUMN resource_tags jsonb;
