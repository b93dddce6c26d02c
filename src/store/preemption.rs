//! Task preemption (a job's allowTaskPreemption): which running tasks give their slots to a job
//! of higher priority that is waiting for them.

use sqlx::PgExecutor;

/// A running attempt to requeue: its task, attempt and node.
pub struct Victim {
    pub task_pk: i64,
    pub attempt: i32,
    pub node_pk: i64,
}

/// Whether any active job allows its tasks to be preempted (usually none: the cheap question
/// asked before [`victims`]).
pub async fn any_preemptible(db: impl PgExecutor<'_>) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM jobs WHERE allow_task_preemption AND state = 'active') AS "any!""#
    )
    .fetch_one(db)
    .await
}

/// The attempts to requeue so that waiting tasks of higher priority get slots. A pool waits
/// when none of its usable nodes has a free slot and an active job on it has ready tasks
/// (up to 100 counted per job; not those that only a dedicated node may take) with room under
/// its maxParallelTasks; the jobs of the highest such priority want a slot each. They get them
/// from the running tasks, on the pool's usable nodes, of its jobs of lower priority that allow
/// preemption: the lowest priority first, the latest started first.
pub async fn victims(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<Victim>> {
    sqlx::query_as!(
        Victim,
        r#"WITH waiting AS (
            SELECT p.pk AS pool_pk, j.priority,
                least(
                    (SELECT count(*) FROM (SELECT 1 FROM tasks t WHERE t.job_pk = j.pk AND t.state = 'active'
                        AND t.unmet_deps = 0 AND t.required_slots <= p.task_slots_per_node
                        AND NOT t.dedicated_only LIMIT 100) ready),
                    CASE WHEN j.max_parallel_tasks < 0 THEN 100
                         ELSE j.max_parallel_tasks - (SELECT count(*) FROM tasks r WHERE r.job_pk = j.pk
                            AND r.state IN ('preparing', 'running')) END) AS wants
            FROM pools p JOIN jobs j ON j.account = p.account AND lower(j.pool_id) = lower(p.id)
            WHERE p.state = 'active' AND j.state = 'active'
              AND EXISTS (SELECT 1 FROM jobs v WHERE v.account = p.account AND lower(v.pool_id) = lower(p.id)
                    AND v.allow_task_preemption AND v.state = 'active' AND v.priority < j.priority)
              AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.pool_pk = p.pk AND n.state IN ('idle', 'running')
                    AND n.running_task_slots < p.task_slots_per_node AND NOT n.scheduling_disabled)
        ), first AS (
            SELECT DISTINCT ON (pool_pk) pool_pk, priority,
                sum(wants) OVER (PARTITION BY pool_pk, priority) AS wants
            FROM waiting WHERE wants > 0 ORDER BY pool_pk, priority DESC
        ), ranked AS (
            SELECT t.pk AS task_pk, t.attempt, n.pk AS node_pk, f.wants,
                row_number() OVER (PARTITION BY f.pool_pk ORDER BY v.priority, t.start_time DESC NULLS FIRST, t.pk) AS rank
            FROM first f JOIN nodes n ON n.pool_pk = f.pool_pk AND n.state IN ('idle', 'running')
                AND NOT n.scheduling_disabled
            JOIN tasks t ON t.node_pk = n.pk AND t.state IN ('preparing', 'running')
            JOIN jobs v ON v.pk = t.job_pk
            WHERE v.allow_task_preemption AND v.priority < f.priority
        )
        SELECT task_pk AS "task_pk!", attempt AS "attempt!", node_pk AS "node_pk!" FROM ranked WHERE rank <= wants"#
    )
    .fetch_all(db)
    .await
}
