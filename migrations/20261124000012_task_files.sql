-- A task's resourceFiles and outputFiles (domain::files::TaskFiles): downloaded before its
-- command runs and uploaded after it ends. Null for tasks that move no files.
ALTER TABLE tasks ADD COLUMN files jsonb;
