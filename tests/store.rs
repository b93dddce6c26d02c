//! store/ and the migrations against a real PostgreSQL, without the server: the migrations apply to
//! an empty database and to one holding data, the database refuses a state word no enum spells,
//! and a task's life (add, claim, start, end) keeps slots, counts and dependencies in step.

mod common;

use std::borrow::Cow;

use batchpool::domain::job::{AllTasksComplete, TaskFailureMode, TaskState};
use batchpool::domain::pool::{
    AllocationState, JobDefaultOrder, NodeFillType, NodeState, PoolState,
};
use batchpool::scheduler::ahead::AheadSetting;
use batchpool::store::{self, jobs, nodes, pools, tasks};
use serde_json::json;
use sqlx::migrate::Migrator;
use sqlx::PgPool;

async fn migrated() -> PgPool {
    let db = PgPool::connect(&common::fresh_database().await)
        .await
        .unwrap();
    store::MIGRATOR.run(&db).await.unwrap();
    db
}

fn new_pool(id: &str, slots: i32) -> pools::NewPool {
    pools::NewPool {
        account: "acct".into(),
        id: id.into(),
        display_name: None,
        vm_size: "standard_a1".into(),
        vcpus: 1.0,
        memory_mib: 1024,
        image: "img".into(),
        vm_config: None,
        start_task: None,
        task_slots_per_node: slots,
        node_fill_type: NodeFillType::Pack,
        job_default_order: JobDefaultOrder::CreationTime,
        node_communication_mode: batchpool::domain::pool::NodeCommunicationMode::Default,
        inter_node_communication: false,
        resource_tags: None,
        manual_upgrades: false,
        target_dedicated_nodes: 0,
        target_low_priority_nodes: 0,
        resize_timeout_ticks: 9_000_000_000,
        metadata: json!([]),
        billing_plan: None,
        service_pk: None,
        pool_service: false,
        application_packages: None,
        auto_scale: None,
    }
}

fn new_job(id: &str, pool: &str) -> jobs::NewJob {
    jobs::NewJob {
        account: "acct".into(),
        id: id.into(),
        display_name: None,
        uses_task_dependencies: true,
        common_environment: json!([]),
        props: jobs::JobProps {
            priority: 0,
            max_parallel_tasks: -1,
            max_wall_clock_ticks: None,
            max_task_retry_count: 0,
            allow_task_preemption: false,
            pool_id: pool.into(),
            auto_pool: None,
            on_all_tasks_complete: AllTasksComplete::NoAction,
            on_task_failure: TaskFailureMode::NoAction,
            metadata: json!([]),
        },
        preparation_task: None,
        release_task: None,
        manager_task: None,
    }
}

fn new_task(id: &str, depends_on: &[&str]) -> tasks::NewTask {
    tasks::NewTask {
        id: id.into(),
        display_name: None,
        command_line: "true".into(),
        environment: json!([]),
        required_slots: 1,
        max_wall_clock_ticks: None,
        retention_ticks: 6_048_000_000_000,
        max_task_retry_count: 0,
        depends_on: None,
        dependency_ids: depends_on.iter().map(|d| d.to_string()).collect(),
        dependency_ranges: vec![],
        exit_conditions: None,
        extra: json!({}),
        files: None,
        kills_job: false,
        dedicated_only: false,
        job_token: false,
    }
}

#[tokio::test]
async fn migrations_apply_to_an_empty_database_and_once_only() {
    let db = migrated().await;
    // A second run (every server start does one) finds nothing to do and changes nothing.
    store::MIGRATOR.run(&db).await.unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(applied as usize, store::MIGRATOR.migrations.len());
}

/// The last migration applied over a database that already holds a pool, a job and tasks (as an
/// upgrade would find it) keeps them readable through store/.
#[tokio::test]
async fn the_latest_migration_upgrades_a_database_with_data() {
    let db = PgPool::connect(&common::fresh_database().await)
        .await
        .unwrap();
    let all = &store::MIGRATOR.migrations;
    let before = Migrator {
        migrations: Cow::Owned(all[..all.len() - 1].to_vec()),
        ignore_missing: false,
        locking: true,
        no_tx: false,
    };
    before.run(&db).await.unwrap();
    // A pool, a job and its tasks as the schema before the latest migration holds them: written
    // with plain SQL, since store/ writes the columns of the latest schema.
    sqlx::query(
        "INSERT INTO pools (account, id, vm_size, vcpus, memory_mib, image, task_slots_per_node, node_fill_type, \
            target_dedicated_nodes, resize_timeout_ticks, state, state_transition_time, allocation_state, \
            allocation_state_transition_time, creation_time, last_modified) \
         VALUES ('acct', 'p', 'standard_a1', 1, 1024, 'img', 2, 'spread', 0, 9000000000, 'active', now(), 'steady', \
            now(), now(), now())",
    )
    .execute(&db)
    .await
    .unwrap();
    let job_pk: i64 = sqlx::query_scalar(
        "INSERT INTO jobs (account, id, pool_id, state, state_transition_time, start_time, creation_time, last_modified) \
         VALUES ('acct', 'j', 'p', 'active', now(), now(), now(), now()) RETURNING pk",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    for (id, unmet) in [("a", 0), ("b", 1)] {
        sqlx::query(
            "INSERT INTO tasks (job_pk, id, command_line, retention_ticks, max_task_retry_count, unmet_deps, \
                state, state_transition_time, creation_time, last_modified) \
             VALUES ($1, $2, 'true', 0, 0, $3, 'active', now(), now(), now())",
        )
        .bind(job_pk)
        .bind(id)
        .bind(unmet)
        .execute(&db)
        .await
        .unwrap();
    }

    // One of them ended, as the schema before kept it (its counts moved by its triggers).
    sqlx::query(
        "UPDATE tasks SET state = 'completed', result = 'success', exit_code = 0, end_time = now() \
         WHERE job_pk = $1 AND id = 'a'",
    )
    .bind(job_pk)
    .execute(&db)
    .await
    .unwrap();

    store::MIGRATOR.run(&db).await.unwrap();
    let counts = tasks::counts(&db, job_pk).await.unwrap();
    assert_eq!(
        (
            counts.active,
            counts.completed,
            counts.succeeded,
            counts.failed
        ),
        (1, 1, 1, 0),
        "the tasks there were are counted: {counts:?}"
    );
    let pool = pools::get(&db, "acct", "p").await.unwrap().unwrap();
    assert_eq!(
        (pool.state, pool.allocation_state),
        (PoolState::Active, AllocationState::Steady)
    );
    let job = jobs::get(&db, "acct", "j", jobs::Lock::None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.pk, job_pk);
    let b = tasks::get(&db, job.pk, "b").await.unwrap().unwrap();
    assert_eq!((b.state, b.unmet_deps), (TaskState::Active, 1));
}

#[tokio::test]
async fn the_database_refuses_a_state_word_no_enum_spells() {
    let db = migrated().await;
    pools::insert(&db, &new_pool("p", 1)).await.unwrap();
    jobs::insert(&db, &new_job("j", "p")).await.unwrap();
    // Words of another column, or of the wire in another case, are not state words here.
    for (table, column, word) in [
        ("pools", "state", "Active"),
        ("pools", "allocation_state", "active"),
        ("jobs", "state", "running"),
        ("jobs", "on_task_failure", "terminatejob"),
    ] {
        let err = sqlx::query(&format!("UPDATE {table} SET {column} = $1"))
            .bind(word)
            .execute(&db)
            .await
            .expect_err(&format!("{table}.{column} took {word:?}"));
        assert!(
            format!("{err:?}").contains(&format!("{table}_{column}_word")),
            "{err:?}"
        );
    }
}

/// Pool `p` of one node `n1` with `slots` slots, made and started through store/, and job `j`
/// on it.
async fn one_node_and_a_job(db: &PgPool, slots: i32) -> (nodes::NodeRow, jobs::JobRow) {
    pools::insert(db, &new_pool("p", slots)).await.unwrap();
    let pool = pools::get(db, "acct", "p").await.unwrap().unwrap();
    nodes::insert_creating(db, pool.pk, &["n1".to_string()], true)
        .await
        .unwrap();
    let node = nodes::get(db, pool.pk, "n1").await.unwrap().unwrap();
    assert_eq!(node.state, NodeState::Creating);
    assert!(nodes::set_started(
        db,
        node.pk,
        NodeState::Idle,
        ("c1", "10.0.0.2", "local"),
        None
    )
    .await
    .unwrap());
    jobs::insert(db, &new_job("j", "p")).await.unwrap();
    let job = jobs::get(db, "acct", "j", jobs::Lock::None)
        .await
        .unwrap()
        .unwrap();
    (node, job)
}

/// Two tasks, the second depending on the first, on a pool of one node with one slot: each is
/// claimed, started and ended through store/, and the node's slots, the job's counts and the
/// dependency count follow.
#[tokio::test]
async fn a_task_life_keeps_slots_counts_and_dependencies_in_step() {
    let db = migrated().await;
    let (node, job) = one_node_and_a_job(&db, 1).await;
    let mut tx = db.begin().await.unwrap();
    let added = tasks::insert_many(
        &mut tx,
        job.pk,
        &[new_task("a", &[]), new_task("b", &["a"])],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(added, ["a", "b"]);

    for (id, next_unmet) in [("a", 0), ("b", 0)] {
        let mut tx = db.begin().await.unwrap();
        let free = nodes::lock_free_slots(&mut *tx, 0).await.unwrap();
        assert_eq!(free.len(), 1, "the node has its one slot free before {id}");
        // Only the task whose dependencies are met is ready.
        let ready = tasks::claim_ready(&mut *tx, (job.pk, 0), 10).await.unwrap();
        assert_eq!(ready.len(), 1, "one ready task before {id}");
        let per_node = tasks::PerNode {
            nodes: vec![node.pk],
            slots: vec![1],
            tasks: vec![1],
        };
        let started = tasks::start_attempts(&mut *tx, (&[ready[0].pk], &[node.pk]), &per_node)
            .await
            .unwrap();
        assert_eq!((started[0].task_id.as_str(), started[0].attempt), (id, 1));
        tx.commit().await.unwrap();
        assert_eq!(
            nodes::get_by_pk(&db, node.pk).await.unwrap().unwrap().state,
            NodeState::Running
        );
        assert!(
            nodes::lock_free_slots(&db, 0).await.unwrap().is_empty(),
            "the slot is taken"
        );

        let mut tx = db.begin().await.unwrap();
        let ending = tasks::Ending::Completed {
            exit_code: Some(0),
            result: "success",
            failure_info: None,
            satisfies_dependants: true,
        };
        let ended = tasks::end_attempt(
            &mut tx,
            started[0].pk,
            Some(1),
            &[TaskState::Running],
            ending,
        )
        .await
        .unwrap()
        .expect("the attempt was running");
        tx.commit().await.unwrap();
        assert_eq!(ended.state, TaskState::Completed);
        assert!(ended.was_running);
        let node_now = nodes::get_by_pk(&db, node.pk).await.unwrap().unwrap();
        assert_eq!(
            (node_now.state, node_now.running_task_slots),
            (NodeState::Idle, 0)
        );
        let b = tasks::get(&db, job.pk, "b").await.unwrap().unwrap();
        assert_eq!(b.unmet_deps, next_unmet, "after {id}");
    }
    // Ending an attempt twice changes nothing: the second finds it no longer running.
    let a = tasks::get(&db, job.pk, "a").await.unwrap().unwrap();
    let mut tx = db.begin().await.unwrap();
    let again = tasks::end_attempt(
        &mut tx,
        a.pk,
        Some(1),
        &[TaskState::Running],
        tasks::Ending::Requeue,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(again.is_none());
    let counts = tasks::counts(&db, job.pk).await.unwrap();
    assert_eq!(
        (
            counts.completed,
            counts.succeeded,
            counts.failed,
            counts.active
        ),
        (2, 2, 0, 0)
    );
    let node_now = nodes::get_by_pk(&db, node.pk).await.unwrap().unwrap();
    assert_eq!(
        (node_now.total_tasks_run, node_now.total_tasks_succeeded),
        (2, 2)
    );
}

/// Each rotation replaces the key it names and leaves the other working: for an account's
/// Shared Key keys and for a web service's keys (made in SQL).
#[tokio::test]
async fn rotating_one_key_leaves_the_other() {
    let db = migrated().await;
    assert!(store::accounts::create(&db, "acct", "p0", "s0")
        .await
        .unwrap());
    let keys = |db: PgPool| async move {
        let k = store::accounts::get(&db, "acct").await.unwrap().unwrap();
        (k.primary_key, k.secondary_key)
    };
    assert!(store::accounts::rotate(&db, "acct", true, "s1")
        .await
        .unwrap());
    assert_eq!(keys(db.clone()).await, ("p0".to_string(), "s1".to_string()));
    assert!(store::accounts::rotate(&db, "acct", false, "p1")
        .await
        .unwrap());
    assert_eq!(keys(db.clone()).await, ("p1".to_string(), "s1".to_string()));
    assert!(!store::accounts::rotate(&db, "nobody", false, "p2")
        .await
        .unwrap());

    let def = store::services::ServiceDef {
        title: None,
        description: None,
        image: None,
        command: "true".into(),
        inputs: json!({}),
        outputs: json!({}),
        global_parameters: json!({}),
        billing_plan: "plan".into(),
    };
    let (svc, created) = store::services::upsert(&db, "acct", "ns", "svc", &def)
        .await
        .unwrap();
    assert!(created);
    for secondary in [true, false] {
        let before = store::services::get_by_pk(&db, svc.pk)
            .await
            .unwrap()
            .unwrap();
        let key = store::services::regenerate_key(&db, svc.pk, secondary)
            .await
            .unwrap();
        let after = store::services::get_by_pk(&db, svc.pk)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(key.len(), 64, "two UUIDs without dashes");
        let pair = |row: &store::services::ServiceRow| {
            (row.primary_key.clone(), row.secondary_key.clone())
        };
        let expected = if secondary {
            (before.primary_key.clone(), key.clone())
        } else {
            (key.clone(), before.secondary_key.clone())
        };
        assert_eq!(
            pair(&after),
            expected,
            "regenerating the secondary: {secondary}"
        );
        assert_ne!(pair(&after), pair(&before));
    }
    let (again, created) = store::services::upsert(&db, "acct", "ns", "SVC", &def)
        .await
        .unwrap();
    assert!(!created, "the same name, in any case, is replaced");
    assert_eq!(again.pk, svc.pk);
}

/// A pass whose outcomes the database refuses in part (here a trigger refuses exit code 99):
/// the others are recorded, the refused one's task fails saying why (its slot freed, not left
/// running for ever), and the pass still fills the free slots.
#[tokio::test]
async fn an_outcome_the_database_refuses_fails_its_task_and_holds_nothing_back() {
    use batchpool::scheduler::complete::Outcome;
    use batchpool::scheduler::dispatch;
    let db = migrated().await;
    let (_, job) = one_node_and_a_job(&db, 2).await;
    let mut tx = db.begin().await.unwrap();
    let three = [new_task("a", &[]), new_task("b", &[]), new_task("c", &[])];
    tasks::insert_many(&mut tx, job.pk, &three).await.unwrap();
    tx.commit().await.unwrap();
    let mut placed = dispatch::pass(&db, &[], &Default::default()).await.unwrap();
    placed.sort_by(|x, y| x.task_id.cmp(&y.task_id));
    let ids: Vec<_> = placed.iter().map(|a| a.task_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "the node's two slots");

    sqlx::raw_sql(
        "CREATE FUNCTION refuse_99() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
           IF NEW.exit_code = 99 THEN RAISE EXCEPTION 'exit code 99 is refused here'; END IF;
           RETURN NEW; END $$;
         CREATE TRIGGER refuse_99 BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION refuse_99();",
    )
    .execute(&db)
    .await
    .unwrap();
    let codes = [0, 99];
    let mut ended: Vec<_> = placed
        .into_iter()
        .zip(codes)
        .map(|(a, code)| (a, Outcome::Exited(code), Default::default()))
        .collect();
    let recorded = std::sync::Mutex::new(Vec::new());
    let note = |done: &[_]| {
        let ids = done
            .iter()
            .map(|(a, _, _): &(tasks::AttemptRow, _, _)| a.task_id.clone());
        recorded.lock().unwrap().extend(ids)
    };
    let placed = dispatch::record_and_pass(
        &db,
        note,
        &mut ended,
        (AheadSetting::Fixed(0), &Default::default()),
    )
    .await
    .unwrap();
    assert!(ended.is_empty(), "nothing left to record");
    let mut recorded = recorded.into_inner().unwrap();
    recorded.sort();
    assert_eq!(recorded, ["a", "b"]);
    let ids: Vec<_> = placed.iter().map(|a| a.task_id.as_str()).collect();
    assert_eq!(ids, ["c"], "the pass filled a freed slot");

    let a = tasks::get(&db, job.pk, "a").await.unwrap().unwrap();
    assert_eq!((a.state, a.exit_code), (TaskState::Completed, Some(0)));
    assert_eq!(a.result.as_deref(), Some("success"));
    let b = tasks::get(&db, job.pk, "b").await.unwrap().unwrap();
    assert_eq!((b.state, b.exit_code), (TaskState::Completed, None));
    assert_eq!(b.result.as_deref(), Some("failure"));
    let info = b.failure_info.expect("the refused task says why");
    assert_eq!(info["code"], "TaskOutcomeNotRecorded", "{info}");
    assert!(
        info["message"]
            .as_str()
            .unwrap()
            .contains("exit code 99 is refused here"),
        "{info}"
    );

    // A message that quotes a NUL (from a storage service, say), which jsonb cannot hold, is
    // recorded with the NUL replaced, not refused.
    let failure = batchpool::scheduler::complete::Failure::new("FileUploadError", "bad\0name");
    let c = placed.into_iter().next().unwrap();
    let outcome = Outcome::UploadFailed {
        exit_code: 0,
        failure,
    };
    dispatch::pass(
        &db,
        &[(c, outcome, Default::default())],
        &Default::default(),
    )
    .await
    .unwrap();
    let c = tasks::get(&db, job.pk, "c").await.unwrap().unwrap();
    assert_eq!(c.state, TaskState::Completed);
    let info = c.failure_info.expect("the upload failure is told");
    assert!(
        info["message"]
            .as_str()
            .unwrap()
            .contains("bad\u{fffd}name"),
        "{info}"
    );
}
