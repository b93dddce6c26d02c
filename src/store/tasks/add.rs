//! Adding tasks: which ids a job has already, which numbered ids a range misses, and the insert
//! of a batch with its dependencies.

use sqlx::{PgExecutor, Postgres, Transaction};

use super::NewTask;

/// Ids among `ids` that the job has already.
///
/// One lookup per id by the whole (job_pk, lower(id)) key, whatever the job's size. The earlier
/// `lower(id) = ANY(SELECT ...)` form let the cached generic plan of this prepared statement
/// (made while the table was small) read every task of the job for each request: while a job
/// grew to 300,000 tasks it took 95% of the database's time and added tasks at 3,900/s.
pub async fn existing_ids(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    ids: &[String],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT t.id FROM unnest($2::text[]) AS x(id), \
         LATERAL (SELECT id FROM tasks WHERE job_pk = $1 AND lower(id) = lower(x.id) LIMIT 1) t",
        job_pk,
        ids,
    )
    .fetch_all(db)
    .await
}

/// For each inclusive range, the lowest number in it that is neither a task id of the job (see
/// `task_number` in the migrations) nor among `also` (the numbered tasks being added with them);
/// None if the range is complete. Reads only the numbers in the ranges, through the index.
pub async fn first_missing_in_ranges(
    db: impl PgExecutor<'_>,
    job_pk: i64,
    ranges: &[(i64, i64)],
    also: &[i64],
) -> sqlx::Result<Vec<Option<i64>>> {
    let (lo, hi): (Vec<i64>, Vec<i64>) = ranges.iter().copied().unzip();
    // The k-th number present (from 1) is lo + k - 1 until the first gap. `hi - lo` rather than
    // the range's size, which overflows for 0..i64::MAX.
    sqlx::query_scalar!(
        "SELECT (SELECT coalesce(min(r.lo + u.k - 1) FILTER (WHERE u.n <> r.lo + u.k - 1), \
                                 CASE WHEN count(*) <= r.hi - r.lo THEN r.lo + count(*) END) \
                 FROM (SELECT n, row_number() OVER (ORDER BY n) AS k FROM ( \
                     SELECT task_number(id) AS n FROM tasks WHERE job_pk = $1 AND task_number(id) BETWEEN r.lo AND r.hi \
                     UNION SELECT n FROM unnest($4::bigint[]) AS b(n) WHERE n BETWEEN r.lo AND r.hi) s) u) \
         FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS r(lo, hi, i) ORDER BY r.i",
        job_pk,
        lo as _,
        hi as _,
        also,
    )
    .fetch_all(db)
    .await
}

/// Inserts tasks (ids known to be new) with their dependencies, in the caller's transaction.
/// Dependencies must name tasks of the job or of this batch. Returns the ids inserted.
pub async fn insert_many(
    tx: &mut Transaction<'_, Postgres>,
    job_pk: i64,
    tasks: &[NewTask],
) -> sqlx::Result<Vec<String>> {
    macro_rules! column {
        ($f:expr) => {
            tasks.iter().map($f).collect::<Vec<_>>()
        };
    }
    let inserted = sqlx::query_scalar!(
        r#"INSERT INTO tasks (job_pk, id, display_name, command_line, environment, required_slots, max_wall_clock_ticks,
            retention_ticks, max_task_retry_count, depends_on, exit_conditions, extra, files, kills_job, dedicated_only,
            job_token, state, state_transition_time, creation_time, last_modified)
         SELECT $1, * , 'active', now(), now(), now() FROM unnest($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::int[],
            $7::bigint[], $8::bigint[], $9::int[], $10::jsonb[], $11::jsonb[], $12::jsonb[], $13::jsonb[], $14::bool[],
            $15::bool[], $16::bool[])
         ON CONFLICT (job_pk, lower(id)) DO NOTHING RETURNING id"#,
        job_pk,
        &column!(|t| t.id.clone()) as _,
        &column!(|t| t.display_name.clone()) as _,
        &column!(|t| t.command_line.clone()) as _,
        &column!(|t| t.environment.clone()) as _,
        &column!(|t| t.required_slots) as _,
        &column!(|t| t.max_wall_clock_ticks) as _,
        &column!(|t| t.retention_ticks) as _,
        &column!(|t| t.max_task_retry_count) as _,
        &column!(|t| t.depends_on.clone()) as _,
        &column!(|t| t.exit_conditions.clone()) as _,
        &column!(|t| t.extra.clone()) as _,
        &column!(|t| t.files.clone()) as _,
        &column!(|t| t.kills_job) as _,
        &column!(|t| t.dedicated_only) as _,
        &column!(|t| t.job_token) as _,
    )
    .fetch_all(&mut **tx)
    .await?;

    insert_dependencies(tx, job_pk, tasks).await?;
    Ok(inserted)
}

/// Records the dependencies of tasks just inserted (dependencies on tasks of the job or of the
/// same batch) and counts each task's unmet ones.
async fn insert_dependencies(
    tx: &mut Transaction<'_, Postgres>,
    job_pk: i64,
    tasks: &[NewTask],
) -> sqlx::Result<()> {
    // One row per (task, id depended on) and per (task, range); ranges stay ranges.
    let (mut from, mut to) = (Vec::new(), Vec::new());
    let (mut range_from, mut lo, mut hi) = (Vec::new(), Vec::new(), Vec::new());
    for task in tasks {
        for dep in &task.dependency_ids {
            from.push(task.id.clone());
            to.push(dep.clone());
        }
        for &(start, end) in &task.dependency_ranges {
            range_from.push(task.id.clone());
            lo.push(start);
            hi.push(end);
        }
    }
    if from.is_empty() && range_from.is_empty() {
        return Ok(());
    }
    // Lock the tasks depended on, so that none completes unseen between counting it as unmet
    // and the dependency row being visible to its completion.
    sqlx::query!(
        "SELECT 1 AS locked FROM tasks WHERE job_pk = $1 AND lower(id) = ANY(ARRAY(SELECT lower(x) FROM unnest($2::text[]) AS x)) FOR SHARE",
        job_pk,
        &to,
    )
    .fetch_all(&mut **tx)
        .await?;
    sqlx::query!(
        "SELECT 1 AS locked FROM tasks d, unnest($2::bigint[], $3::bigint[]) AS r(lo, hi) \
         WHERE d.job_pk = $1 AND task_number(d.id) BETWEEN r.lo AND r.hi FOR SHARE OF d",
        job_pk,
        &lo,
        &hi,
    )
    .fetch_all(&mut **tx)
    .await?;
    sqlx::query!(
        "INSERT INTO task_deps (task_pk, depends_on_pk) \
         SELECT t.pk, d.pk FROM unnest($2::text[], $3::text[]) AS e(task_id, dep_id) \
             JOIN tasks t ON t.job_pk = $1 AND lower(t.id) = lower(e.task_id) \
             JOIN tasks d ON d.job_pk = $1 AND lower(d.id) = lower(e.dep_id) \
         UNION SELECT t.pk, d.pk FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS r(task_id, lo, hi) \
             JOIN tasks t ON t.job_pk = $1 AND lower(t.id) = lower(r.task_id) \
             JOIN tasks d ON d.job_pk = $1 AND task_number(d.id) BETWEEN r.lo AND r.hi \
         ON CONFLICT DO NOTHING",
        job_pk,
        &from as _,
        &to,
        &range_from,
        &lo,
        &hi,
    )
    .execute(&mut **tx)
    .await?;
    from.extend(range_from);
    sqlx::query!(
        "UPDATE tasks t SET unmet_deps = (SELECT count(*) FROM task_deps td JOIN tasks d ON d.pk = td.depends_on_pk \
             WHERE td.task_pk = t.pk AND NOT (d.state = 'completed' AND d.satisfies_dependants)) \
         WHERE t.job_pk = $1 AND lower(t.id) = ANY(ARRAY(SELECT lower(x) FROM unnest($2::text[]) AS x))",
        job_pk,
        &from as _,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The most task slots an unfinished task of a job on pool `pool_id` needs, if there is one.
pub async fn most_slots_needed(
    db: impl PgExecutor<'_>,
    account: &str,
    pool_id: &str,
) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar!(
        "SELECT max(t.required_slots) FROM tasks t JOIN jobs j ON j.pk = t.job_pk \
         WHERE j.account = $1 AND lower(j.pool_id) = lower($2) AND j.state <> 'completed' \
           AND t.state <> 'completed'",
        account,
        pool_id,
    )
    .fetch_one(db)
    .await
}
