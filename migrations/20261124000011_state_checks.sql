-- States, phases and options are stored as the wire words of the domain's enums
-- (src/domain, decoded by src/store/text_enum.rs). The checks make the database refuse any other
-- word, so a row always decodes; a new variant adds its word here in a new migration.
-- NOT VALID then VALIDATE: the check holds for new rows at once and old rows are read once
-- without blocking writers for the whole scan.

ALTER TABLE pools
    ADD CONSTRAINT pools_state_word CHECK (state IN ('active', 'deleting')) NOT VALID,
    ADD CONSTRAINT pools_allocation_state_word CHECK (allocation_state IN ('steady', 'resizing', 'stopping')) NOT VALID,
    ADD CONSTRAINT pools_node_fill_type_word CHECK (node_fill_type IN ('spread', 'pack')) NOT VALID,
    ADD CONSTRAINT pools_node_deallocation_option_word
        CHECK (node_deallocation_option IN ('requeue', 'terminate', 'taskcompletion', 'retaineddata')) NOT VALID;
ALTER TABLE pools VALIDATE CONSTRAINT pools_state_word;
ALTER TABLE pools VALIDATE CONSTRAINT pools_allocation_state_word;
ALTER TABLE pools VALIDATE CONSTRAINT pools_node_fill_type_word;
ALTER TABLE pools VALIDATE CONSTRAINT pools_node_deallocation_option_word;

ALTER TABLE nodes
    ADD CONSTRAINT nodes_state_word CHECK (state IN ('creating', 'starting', 'waitingforstarttask', 'starttaskfailed',
        'idle', 'running', 'leavingpool', 'unusable', 'offline', 'rebooting', 'unknown')) NOT VALID;
ALTER TABLE nodes VALIDATE CONSTRAINT nodes_state_word;

ALTER TABLE jobs
    ADD CONSTRAINT jobs_state_word CHECK (state IN ('active', 'disabling', 'disabled', 'enabling', 'terminating',
        'completed', 'deleting')) NOT VALID,
    ADD CONSTRAINT jobs_previous_state_word CHECK (previous_state IN ('active', 'disabling', 'disabled', 'enabling',
        'terminating', 'completed', 'deleting')) NOT VALID,
    ADD CONSTRAINT jobs_on_all_tasks_complete_word CHECK (on_all_tasks_complete IN ('noaction', 'terminatejob')) NOT VALID,
    ADD CONSTRAINT jobs_on_task_failure_word
        CHECK (on_task_failure IN ('noaction', 'performexitoptionsjobaction')) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_state_word;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_previous_state_word;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_on_all_tasks_complete_word;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_on_task_failure_word;

ALTER TABLE tasks
    ADD CONSTRAINT tasks_state_word CHECK (state IN ('active', 'preparing', 'running', 'completed')) NOT VALID,
    ADD CONSTRAINT tasks_previous_state_word
        CHECK (previous_state IN ('active', 'preparing', 'running', 'completed')) NOT VALID,
    ADD CONSTRAINT tasks_result_word CHECK (result IN ('success', 'failure')) NOT VALID;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_state_word;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_previous_state_word;
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_result_word;

ALTER TABLE bes_jobs
    ADD CONSTRAINT bes_jobs_phase_word CHECK (phase IN ('notstarted', 'staging', 'running', 'uploading', 'finished',
        'failed', 'cancelled')) NOT VALID;
ALTER TABLE bes_jobs VALIDATE CONSTRAINT bes_jobs_phase_word;
