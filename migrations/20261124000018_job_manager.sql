-- A job's jobManagerTask as given (echoed), and on the task it became, whether its completion
-- ends the job (killJobOnCompletion).
ALTER TABLE jobs ADD COLUMN manager_task jsonb;
ALTER TABLE tasks ADD COLUMN kills_job boolean NOT NULL DEFAULT false;
