-- A page of a job's tasks (`GET /jobs/{job}/tasks`) reads them in pk order after a skiptoken.
-- With only the primary key to go by, a page walks past every other job's tasks that sit between
-- (100,000 of them cost a 1,000-task page 15-40 ms); this index starts at the job's first task
-- after the token. The list query compares (job_pk, pk) as a row, which only this index serves,
-- so the planner cannot fall back to the primary key when one job holds most rows.
CREATE INDEX tasks_job_order ON tasks (job_pk, pk);
