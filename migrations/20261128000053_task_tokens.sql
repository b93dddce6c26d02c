-- A task whose authenticationTokenSettings give it access to its job: each of its attempts gets
-- an authentication token (AZ_BATCH_AUTHENTICATION_TOKEN) that the Batch API takes for
-- operations on that job, while that attempt runs.
ALTER TABLE tasks ADD COLUMN job_token boolean NOT NULL DEFAULT false;
