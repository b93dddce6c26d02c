-- A page of a job's tasks (`GET /jobs/{job}/tasks`) reads them in pk order after a skiptoken.
-- With only the primary key to go by, a page walks past every other job's tasks that sit between
-- (100,000 of them cost a 1,000-task page 15-40 ms); this index starts at the job's first task
-- after the token. The planner still takes the primary key when one job holds most rows (its
-- estimate cannot see where the other jobs' rows lie); forcing this index with row comparisons
-- was tried and made pages on a table not yet analyzed 50-110 ms (a sort of the whole job).
CREATE INDEX tasks_job_order ON tasks (job_pk, pk);
