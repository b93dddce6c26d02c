"""Drives a running batchpool through the official Azure Batch SDK, the whole way a script would.

Run with the Python of a virtualenv that has azure-batch 15.x (BatchClient) or 14.x
(BatchServiceClient); BATCHPOOL_URL, BATCHPOOL_ACCOUNT and BATCHPOOL_KEY say where and who.
Exits non-zero at the first thing that does not work as it does on Azure Batch.
"""

import os
import sys
import time

import azure.batch

from waiting import wait

URL = os.environ["BATCHPOOL_URL"]
ACCOUNT = os.environ["BATCHPOOL_ACCOUNT"]
KEY = os.environ["BATCHPOOL_KEY"]
VERSION = azure.batch.__version__ if hasattr(azure.batch, "__version__") else azure.batch.VERSION
MAJOR = int(VERSION.split(".")[0])
SUFFIX = f"sdk{MAJOR}"
POOL, JOB = f"pool-{SUFFIX}", f"job-{SUFFIX}"
BULK = int(os.environ.get("BATCHPOOL_BULK", "1000"))


def log(*args):
    print(f"[{SUFFIX}]", *args, flush=True)


def expect_error(status, call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - both SDKs raise their own types
        code = getattr(e, "status_code", None) or getattr(getattr(e, "response", None), "status_code", None)
        assert code == status, f"expected HTTP {status}, got {code}: {e}"
        return e
    raise AssertionError(f"expected HTTP {status}, the call succeeded")


def run_15():
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.batch import BatchClient, models
    from azure.batch.models._models import BatchJobTerminateOptions

    c = BatchClient(endpoint=URL, credential=AzureNamedKeyCredential(ACCOUNT, KEY))
    c.create_pool(models.BatchPoolCreateOptions(
        id=POOL, vm_size="standard_a1", target_dedicated_nodes=2, task_slots_per_node=4,
        resize_timeout=__import__("datetime").timedelta(minutes=15),
        # A pool that runs containers, so a task may have one of its own (seed 002).
        virtual_machine_configuration=models.VirtualMachineConfiguration(
            image_reference=models.BatchVmImageReference(publisher="microsoft-azure-batch", offer="ubuntu-server-container", sku="20-04-lts"),
            node_agent_sku_id="batch.node.ubuntu 20.04",
            container_configuration=models.BatchContainerConfiguration(type="dockerCompatible", container_image_names=["batchpool/node:latest"])),
        # An admin auto-user, as Microsoft's tutorials give a start task that installs software.
        start_task=models.BatchStartTask(command_line="echo started", wait_for_success=True, user_identity=models.UserIdentity(
            auto_user=models.AutoUserSpecification(scope=models.AutoUserScope.POOL, elevation_level=models.ElevationLevel.ADMIN)))))
    expect_error(409, lambda: c.create_pool(models.BatchPoolCreateOptions(id=POOL, vm_size="standard_a1")))
    wait("a steady pool", lambda: c.get_pool(POOL).allocation_state == models.AllocationState.STEADY)
    nodes = wait("2 idle nodes", lambda: [n for n in c.list_nodes(POOL) if n.state == models.BatchNodeState.IDLE]
                 if len([n for n in c.list_nodes(POOL) if n.state == models.BatchNodeState.IDLE]) == 2 else None)
    log("nodes", [n.id for n in nodes])
    assert c.pool_exists(POOL)
    pool = c.get_pool(POOL, select=["id", "state"])
    assert pool.id == POOL and pool.vm_size is None, "select limits the fields"
    idle = list(c.list_nodes(POOL, filter="state eq 'idle'"))
    assert len(idle) == 2

    c.create_job(models.BatchJobCreateOptions(id=JOB, pool_info=models.BatchPoolInfo(pool_id=POOL)))
    admin = models.UserIdentity(auto_user=models.AutoUserSpecification(elevation_level=models.ElevationLevel.ADMIN))
    assert c.get_pool(POOL).start_task.user_identity.auto_user.elevation_level == models.ElevationLevel.ADMIN
    c.create_task(JOB, models.BatchTaskCreateOptions(
        id="hello", command_line="/bin/sh -c 'echo hello from $AZ_BATCH_TASK_ID as $(id -u)'", user_identity=admin))
    plain = models.UserIdentity(auto_user=models.AutoUserSpecification(
        scope=models.AutoUserScope.TASK, elevation_level=models.ElevationLevel.NON_ADMIN))
    c.create_task(JOB, models.BatchTaskCreateOptions(id="plain", command_line="id -u", user_identity=plain))
    c.create_task(JOB, models.BatchTaskCreateOptions(id="boxed", command_line="echo $MODE", container_settings=models.BatchTaskContainerSettings(
        image_name="batchpool/node:latest", container_run_options="--rm -e MODE=boxed")))
    tasks = [models.BatchTaskCreateOptions(id=f"bulk{i}", command_line="true") for i in range(BULK)]
    c.create_tasks(JOB, tasks, max_concurrency=4)
    c.create_task(JOB, models.BatchTaskCreateOptions(id="long", command_line="sleep 60"))
    wait("all but one task to complete",
         lambda: c.get_job_task_counts(JOB).task_counts.completed == BULK + 3, timeout=300)
    counts = c.get_job_task_counts(JOB)
    assert counts.task_counts.succeeded == BULK + 3, counts
    stats = c.get_job(JOB, expand=["stats"]).job_statistics
    assert stats.succeeded_tasks_count == BULK + 3 and stats.wall_clock_time.total_seconds() > 0, stats
    assert c.get_pool(POOL, expand=["stats"]).pool_statistics.usage_statistics.dedicated_core_time.total_seconds() > 0
    shown = c.get_task(JOB, "plain").user_identity.auto_user
    assert (shown.scope, shown.elevation_level) == (models.AutoUserScope.TASK, models.ElevationLevel.NON_ADMIN), shown
    uid = int(b"".join(c.download_task_file(JOB, "plain", "stdout.txt")))
    assert uid > 1000000, f"a task-scope non-administrator runs as a user of its own, not {uid}"
    boxed = c.get_task(JOB, "boxed")
    assert b"".join(c.download_task_file(JOB, "boxed", "stdout.txt")) == b"boxed\n"
    assert boxed.container_settings.image_name == "batchpool/node:latest", boxed.container_settings
    assert boxed.execution_info.container_info.container_id, boxed.execution_info
    out = b"".join(c.download_task_file(JOB, "hello", "stdout.txt"))
    assert out == b"hello from hello as 0\n", out
    part = b"".join(c.download_task_file(JOB, "hello", "stdout.txt", ocp_range="bytes=0-4"))
    assert part == b"hello", part
    props = c.get_task_file_properties(JOB, "hello", "stdout.txt")
    assert props.content_length == len(out) and props.is_directory is False, props
    files = {f.name for f in c.list_task_files(JOB, "hello", recursive=True)}
    assert {"stdout.txt", "stderr.txt", "wd"} <= files, files
    c.delete_task_file(JOB, "hello", "stderr.txt")
    files = {f.name for f in c.list_task_files(JOB, "hello", recursive=True)}
    assert "stderr.txt" not in files and "stdout.txt" in files, files

    page = list(c.list_tasks(JOB, filter="state eq 'completed'", select=["id", "state"], max_results=100))
    assert len(page) == BULK + 3, len(page)
    assert all(t.state == models.BatchTaskState.COMPLETED for t in page)
    running = wait("the long task to run", lambda: c.get_task(JOB, "long").state == models.BatchTaskState.RUNNING)
    c.terminate_task(JOB, "long")
    t = wait("the terminated task", lambda: (lambda t: t if t.state == models.BatchTaskState.COMPLETED else None)(c.get_task(JOB, "long")))
    assert t.execution_info.failure_info.code == "TaskEnded", t.execution_info
    expect_error(404, lambda: c.get_task(JOB, "nope"))

    # Account-wide listings, reboot and remove of a node.
    counts = {pc.pool_id: pc for pc in c.list_pool_node_counts()}
    assert counts[POOL].dedicated.total == 2, counts[POOL]
    images = list(c.list_supported_images())
    assert images and images[0].node_agent_sku_id and images[0].image_reference.publisher, images
    usage = [u for u in c.list_pool_usage_metrics() if u.pool_id == POOL]
    assert usage and usage[0].total_core_hours > 0, usage
    node_id = nodes[0].id
    # Like terminate_job, reboot_node crashes client-side without options (an SDK bug).
    from azure.batch.models._models import BatchNodeRebootOptions
    c.begin_reboot_node(POOL, node_id, BatchNodeRebootOptions(node_reboot_kind="requeue"), polling_interval=0.2).result()
    # The poller ends when the node leaves `rebooting`; its start task then runs again.
    assert c.get_node(POOL, node_id).state != models.BatchNodeState.REBOOTING
    wait("the rebooted node to be idle", lambda: c.get_node(POOL, node_id).state == models.BatchNodeState.IDLE)
    logs = os.environ.get("BATCHPOOL_LOGS_URL")
    if logs:
        since = __import__("datetime").datetime.now(__import__("datetime").timezone.utc) - __import__("datetime").timedelta(hours=1)
        got = c.upload_node_logs(POOL, node_id, models.UploadBatchServiceLogsOptions(container_url=logs, start_time=since))
        assert got.number_of_files_uploaded == 2 and got.virtual_directory_name.startswith(f"{POOL}/{node_id}/"), got
    from azure.batch.models._models import BatchNodeReimageOptions
    other = nodes[1].id
    c.begin_reimage_node(POOL, other, BatchNodeReimageOptions(node_reimage_option="requeue"), polling_interval=0.2).result()
    assert c.get_node(POOL, other).state != models.BatchNodeState.REIMAGING
    wait("the reimaged node to be idle", lambda: c.get_node(POOL, other).state == models.BatchNodeState.IDLE)
    # Deallocated: stopped with its disk kept, counted as such, until it is started again.
    from azure.batch.models._models import BatchNodeDeallocateOptions
    c.begin_deallocate_node(POOL, node_id, BatchNodeDeallocateOptions(node_deallocate_option="requeue"), polling_interval=0.2).result()
    assert c.get_node(POOL, node_id).state == models.BatchNodeState.DEALLOCATED
    assert {pc.pool_id: pc for pc in c.list_pool_node_counts()}[POOL].dedicated.deallocated == 1
    c.begin_start_node(POOL, node_id, polling_interval=0.2).result()
    wait("the started node to be idle", lambda: c.get_node(POOL, node_id).state == models.BatchNodeState.IDLE)
    c.begin_remove_nodes(POOL, models.BatchNodeRemoveOptions(node_ids=[node_id]), polling_interval=0.2).result()
    assert [n.id for n in c.list_nodes(POOL)] == [nodes[1].id]
    assert c.get_pool(POOL).target_dedicated_nodes == 1

    schedules_15(c, models)
    auto_pool_15(c, models)
    c.begin_terminate_job(JOB, BatchJobTerminateOptions(termination_reason="done"), polling_interval=0.2).result()
    job = c.get_job(JOB)
    assert job.state == models.BatchJobState.COMPLETED and job.execution_info.termination_reason == "done", job
    # Autoscale: enabled with a formula, evaluated, and disabled again.
    c.enable_pool_auto_scale(POOL, models.BatchPoolEnableAutoScaleOptions(
        auto_scale_formula="$TargetDedicatedNodes = 1; $NodeDeallocationOption = taskcompletion;",
        auto_scale_evaluation_interval=__import__("datetime").timedelta(seconds=5)))
    pool = c.get_pool(POOL)
    assert pool.enable_auto_scale and pool.auto_scale_evaluation_interval.total_seconds() == 5, pool
    assert pool.auto_scale_run.results.startswith("$TargetDedicatedNodes=1;"), pool.auto_scale_run
    run = c.evaluate_pool_auto_scale(POOL, models.BatchPoolEvaluateAutoScaleOptions(
        auto_scale_formula="$TargetDedicatedNodes = min(3, $TargetDedicatedNodes + 2);"))
    assert run.results.startswith("$TargetDedicatedNodes=3;") and run.error is None, run
    expect_error(409, lambda: c.begin_resize_pool(POOL, models.BatchPoolResizeOptions(target_dedicated_nodes=0)).result())
    c.disable_pool_auto_scale(POOL)
    assert not c.get_pool(POOL).enable_auto_scale
    c.begin_resize_pool(POOL, models.BatchPoolResizeOptions(target_dedicated_nodes=0), polling_interval=0.2).result()
    assert c.get_pool(POOL).current_dedicated_nodes == 0
    # Low-priority nodes, sized and counted as the SDK reads them.
    c.begin_resize_pool(POOL, models.BatchPoolResizeOptions(target_dedicated_nodes=0, target_low_priority_nodes=1),
                        polling_interval=0.2).result()
    wait("an idle low-priority node", lambda: [n for n in c.list_nodes(POOL)
                                              if n.state == models.BatchNodeState.IDLE and n.is_dedicated is False] or None)
    pool = c.get_pool(POOL)
    assert pool.current_low_priority_nodes == 1 and pool.target_low_priority_nodes == 1, pool
    counts = {pc.pool_id: pc for pc in c.list_pool_node_counts()}
    assert counts[POOL].low_priority.total == 1 and counts[POOL].dedicated.total == 0, counts[POOL]
    c.begin_delete_job(JOB, polling_interval=0.2).result()
    expect_error(404, lambda: c.get_job(JOB))
    c.begin_delete_pool(POOL, polling_interval=0.2).result()
    expect_error(404, lambda: c.get_pool(POOL))
    assert POOL not in [p.id for p in c.list_pools()]
    waiting_15(c, models)


def waiting_15(c, models):
    """A job on a pool that does not exist: the task and the job carry waitReason (batchpool's
    extension); the SDK reads them as any task and job."""
    job = f"waiting-{SUFFIX}"
    c.create_job(models.BatchJobCreateOptions(id=job, pool_info=models.BatchPoolInfo(pool_id="no-such-pool")))
    c.create_task(job, models.BatchTaskCreateOptions(id="w", command_line="true"))
    raw = lambda call: call(cls=lambda response, deserialized, headers: response.http_response.json())
    wait("the task's waitReason", lambda: raw(lambda **k: c.get_task(job, "w", **k)).get("waitReason", {}).get("code") == "PoolNotFound")
    assert raw(lambda **k: c.get_job(job, **k))["waitReason"]["code"] == "PoolNotFound"
    task = c.get_task(job, "w")
    assert task.id == "w" and task.state == models.BatchTaskState.ACTIVE, task
    assert [t.id for t in c.list_tasks(job)] == ["w"]
    assert c.get_job(job).pool_info.pool_id == "no-such-pool"
    c.begin_delete_job(job, polling_interval=0.2).result()


def schedules_15(c, models):
    """Job schedules: one recurring every 2 s until doNotRunAfter; one changed, disabled,
    enabled, terminated and deleted through every route."""
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc)
    manager = models.BatchJobManagerTask(id="jm", command_line="/bin/sh -c 'echo run $AZ_BATCH_JOB_ID'")
    spec = models.BatchJobSpecification(pool_info=models.BatchPoolInfo(pool_id=POOL), job_manager_task=manager)
    every = models.BatchJobScheduleConfiguration(recurrence_interval=datetime.timedelta(seconds=2),
                                                 do_not_run_after=now + datetime.timedelta(seconds=5))
    c.create_job_schedule(models.BatchJobScheduleCreateOptions(id="every2s", schedule=every, job_specification=spec))
    wait("the recurring schedule to complete", lambda: c.get_job_schedule("every2s").state == models.BatchJobScheduleState.COMPLETED)
    jobs = sorted(j.id for j in c.list_jobs_from_schedule("every2s"))
    assert len(jobs) >= 2 and jobs[0] == "every2s:job-1", jobs
    assert all(c.get_job(j).state == models.BatchJobState.COMPLETED for j in jobs), jobs
    out = b"".join(c.download_task_file(jobs[0], "jm", "stdout.txt"))
    assert out == b"run every2s:job-1\n", out
    assert c.get_job_schedule("every2s").execution_info.recent_job.id in jobs

    later = models.BatchJobScheduleConfiguration(do_not_run_until=now + datetime.timedelta(hours=1))
    c.create_job_schedule(models.BatchJobScheduleCreateOptions(id="later", schedule=later, job_specification=spec))
    expect_error(409, lambda: c.create_job_schedule(models.BatchJobScheduleCreateOptions(id="later", schedule=later, job_specification=spec)))
    assert c.job_schedule_exists("later")
    expect_error(404, lambda: c.job_schedule_exists("nope"))  # 15.x raises on Azure's 404
    assert {"every2s", "later"} <= {s.id for s in c.list_job_schedules()}
    c.update_job_schedule("later", models.BatchJobScheduleUpdateOptions(metadata=[models.BatchMetadataItem(name="k", value="v")]))
    got = c.get_job_schedule("later")
    assert got.metadata[0].name == "k" and got.execution_info.next_run_time > now, got
    c.replace_job_schedule("later", models.BatchJobSchedule(schedule=later, job_specification=spec))
    assert not c.get_job_schedule("later").metadata, "PUT resets what it leaves out"
    c.disable_job_schedule("later")
    assert c.get_job_schedule("later").state == models.BatchJobScheduleState.DISABLED
    c.enable_job_schedule("later")
    assert c.get_job_schedule("later").state == models.BatchJobScheduleState.ACTIVE
    c.begin_terminate_job_schedule("later", polling_interval=0.2).result()
    assert c.get_job_schedule("later").state == models.BatchJobScheduleState.COMPLETED
    for sched in ("later", "every2s"):
        c.begin_delete_job_schedule(sched, polling_interval=0.2).result()
        expect_error(404, lambda: c.get_job_schedule(sched))
    wait("the schedules' jobs to go", lambda: not any(j.id.startswith("every2s:") for j in c.list_jobs()))


def auto_pool_15(c, models):
    """A job that makes its own pool: its task runs there, and the pool goes with the job once
    the job's release task has run."""
    from azure.batch.models._models import BatchJobTerminateOptions

    job = f"auto-{SUFFIX}"
    spec = models.BatchAutoPoolSpecification(
        auto_pool_id_prefix=f"auto{MAJOR}", pool_lifetime_option=models.BatchPoolLifetimeOption.JOB,
        # Nodes that talk to each other, upgraded by hand (15.x pools have no resource tags).
        pool=models.BatchPoolSpecification(vm_size="standard_a1", target_dedicated_nodes=1, enable_inter_node_communication=True,
                                           upgrade_policy=models.UpgradePolicy(mode=models.UpgradeMode.MANUAL)))
    c.create_job(models.BatchJobCreateOptions(
        id=job, pool_info=models.BatchPoolInfo(auto_pool_specification=spec),
        job_preparation_task=models.BatchJobPreparationTask(command_line="/bin/true"),
        job_release_task=models.BatchJobReleaseTask(command_line="/bin/sh -c 'sleep 1'")))
    got = c.get_job(job)
    pool = got.execution_info.pool_id
    assert pool.startswith(f"auto{MAJOR}_"), got.execution_info
    assert got.pool_info.auto_pool_specification.pool_lifetime_option == models.BatchPoolLifetimeOption.JOB
    made = c.get_pool(pool)
    assert made.vm_size == "standard_a1" and made.enable_inter_node_communication is True, made
    assert made.upgrade_policy.mode == models.UpgradeMode.MANUAL, made.upgrade_policy
    c.create_task(job, models.BatchTaskCreateOptions(id="where", command_line="/bin/sh -c 'echo $AZ_BATCH_POOL_ID'"))
    wait("the auto pool's task", lambda: c.get_task(job, "where").state == models.BatchTaskState.COMPLETED, timeout=120)
    assert b"".join(c.download_task_file(job, "where", "stdout.txt")) == f"{pool}\n".encode()
    # The terminate's poller waits while the job is terminating, its release task running.
    c.begin_terminate_job(job, BatchJobTerminateOptions(termination_reason="done"), polling_interval=0.2).result()
    assert c.get_job(job).state == models.BatchJobState.COMPLETED
    [status] = list(c.list_job_preparation_and_release_task_status(job))
    released = status.job_release_task_execution_info
    assert released.state == models.BatchJobReleaseTaskState.COMPLETED and released.exit_code == 0, status
    wait("the auto pool to go", lambda: pool not in [p.id for p in c.list_pools()], timeout=120)
    c.begin_delete_job(job, polling_interval=0.2).result()


def auto_pool_14(c, m):
    job = f"auto-{SUFFIX}"
    spec = m.AutoPoolSpecification(auto_pool_id_prefix=f"auto{MAJOR}", pool_lifetime_option=m.PoolLifetimeOption.job,
                                   pool=m.PoolSpecification(vm_size="standard_a1", target_dedicated_nodes=1,
                                                            enable_inter_node_communication=True, resource_tags={"team": SUFFIX},
                                                            upgrade_policy=m.UpgradePolicy(mode=m.UpgradeMode.manual)))
    c.job.add(m.JobAddParameter(id=job, pool_info=m.PoolInformation(auto_pool_specification=spec)))
    got = c.job.get(job)
    pool = got.execution_info.pool_id
    assert pool.startswith(f"auto{MAJOR}_") and c.pool.exists(pool) is True, got.execution_info
    assert got.pool_info.auto_pool_specification.pool.vm_size == "standard_a1"
    made = c.pool.get(pool)
    assert made.enable_inter_node_communication is True and made.resource_tags == {"team": SUFFIX}, made
    assert made.upgrade_policy.mode == m.UpgradeMode.manual, made.upgrade_policy
    c.task.add(job, m.TaskAddParameter(id="where", command_line="/bin/sh -c 'echo $AZ_BATCH_POOL_ID'"))
    wait("the auto pool's task", lambda: c.task.get(job, "where").state == m.TaskState.completed, timeout=120)
    assert b"".join(c.file.get_from_task(job, "where", "stdout.txt")) == f"{pool}\n".encode()
    c.job.terminate(job)
    wait("the auto pool to go", lambda: not c.pool.exists(pool), timeout=120)
    c.job.delete(job)


def schedules_14(c, m):
    """Job schedules through the 14.x SDK's operations."""
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc)
    spec = m.JobSpecification(pool_info=m.PoolInformation(pool_id=POOL),
                              job_manager_task=m.JobManagerTask(id="jm", command_line="true"))
    every = m.Schedule(recurrence_interval=datetime.timedelta(seconds=2), do_not_run_after=now + datetime.timedelta(seconds=5))
    c.job_schedule.add(m.JobScheduleAddParameter(id="every2s", schedule=every, job_specification=spec))
    wait("the recurring schedule to complete", lambda: c.job_schedule.get("every2s").state == m.JobScheduleState.completed)
    jobs = sorted(j.id for j in c.job.list_from_job_schedule("every2s"))
    assert len(jobs) >= 2 and jobs[0] == "every2s:job-1", jobs
    assert c.job_schedule.exists("every2s") is True and c.job_schedule.exists("nope") is False
    later = m.Schedule(do_not_run_until=now + datetime.timedelta(hours=1))
    c.job_schedule.add(m.JobScheduleAddParameter(id="later", schedule=later, job_specification=spec))
    c.job_schedule.patch("later", m.JobSchedulePatchParameter(metadata=[m.MetadataItem(name="k", value="v")]))
    assert c.job_schedule.get("later").metadata[0].value == "v"
    c.job_schedule.update("later", m.JobScheduleUpdateParameter(schedule=later, job_specification=spec))
    c.job_schedule.disable("later")
    assert c.job_schedule.get("later").state == m.JobScheduleState.disabled
    c.job_schedule.enable("later")
    c.job_schedule.terminate("later")
    assert c.job_schedule.get("later").state == m.JobScheduleState.completed
    assert {"every2s", "later"} <= {s.id for s in c.job_schedule.list()}
    c.job_schedule.delete("later")
    c.job_schedule.delete("every2s")
    assert c.job_schedule.exists("later") is False


def run_14():
    import azure.batch.models as m
    from azure.batch import BatchServiceClient
    from azure.batch.batch_auth import SharedKeyCredentials

    c = BatchServiceClient(SharedKeyCredentials(ACCOUNT, KEY), batch_url=URL)
    c.pool.add(m.PoolAddParameter(id=POOL, vm_size="standard_a1", target_dedicated_nodes=2, task_slots_per_node=4,
                                  start_task=m.StartTask(command_line="echo started", wait_for_success=True, user_identity=m.UserIdentity(
                                      auto_user=m.AutoUserSpecification(scope=m.AutoUserScope.pool, elevation_level=m.ElevationLevel.admin))),
                                  # Azure retired classic node communication: scripts ask for simplified.
                                  target_node_communication_mode=m.NodeCommunicationMode.simplified))
    expect_error(409, lambda: c.pool.add(m.PoolAddParameter(id=POOL, vm_size="standard_a1")))
    wait("a steady pool", lambda: c.pool.get(POOL).allocation_state == m.AllocationState.steady)
    wait("2 idle nodes", lambda: len([n for n in c.compute_node.list(POOL) if n.state == m.ComputeNodeState.idle]) == 2)
    assert c.pool.exists(POOL) is True
    assert c.pool.exists("no-such-pool") is False
    c.job.add(m.JobAddParameter(id=JOB, pool_info=m.PoolInformation(pool_id=POOL)))
    admin = m.UserIdentity(auto_user=m.AutoUserSpecification(elevation_level=m.ElevationLevel.admin))
    got = c.pool.get(POOL)
    assert got.start_task.user_identity.auto_user.elevation_level == m.ElevationLevel.admin, got.start_task
    assert got.target_node_communication_mode == got.current_node_communication_mode == "simplified", got
    c.task.add(JOB, m.TaskAddParameter(id="hello", command_line="/bin/sh -c 'echo hello from $AZ_BATCH_TASK_ID as $(id -u)'",
                                       user_identity=admin))
    tasks = [m.TaskAddParameter(id=f"bulk{i}", command_line="true") for i in range(BULK)]
    for i in range(0, BULK, 100):
        result = c.task.add_collection(JOB, tasks[i:i + 100])
        assert all(r.status == m.TaskAddStatus.success for r in result.value), result
    c.task.add(JOB, m.TaskAddParameter(id="long", command_line="sleep 60"))
    wait("all but one task to complete", lambda: c.job.get_task_counts(JOB).task_counts.completed == BULK + 1, timeout=300)
    out = b"".join(c.file.get_from_task(JOB, "hello", "stdout.txt"))
    assert out == b"hello from hello as 0\n", out
    props = c.file.get_properties_from_task(JOB, "hello", "stdout.txt", raw=True)
    assert int(props.headers["Content-Length"]) == len(out)
    files = {f.name for f in c.file.list_from_task(JOB, "hello", recursive=True)}
    assert {"stdout.txt", "stderr.txt"} <= files, files
    c.file.delete_from_task(JOB, "hello", "stderr.txt")
    files = {f.name for f in c.file.list_from_task(JOB, "hello", recursive=True)}
    assert "stderr.txt" not in files and "stdout.txt" in files, files
    stats = c.job.get(JOB, job_get_options=m.JobGetOptions(expand="stats")).stats
    assert stats.num_succeeded_tasks == BULK + 1 and stats.wall_clock_time.total_seconds() > 0, stats
    usage = c.pool.get(POOL, pool_get_options=m.PoolGetOptions(expand="stats")).stats.usage_stats
    assert usage.dedicated_core_time.total_seconds() > 0, usage
    options = m.TaskListOptions(filter="state eq 'completed'", select="id,state", max_results=100)
    page = list(c.task.list(JOB, task_list_options=options))
    assert len(page) == BULK + 1, len(page)
    wait("the long task to run", lambda: c.task.get(JOB, "long").state == m.TaskState.running)
    c.task.terminate(JOB, "long")
    wait("the terminated task", lambda: c.task.get(JOB, "long").state == m.TaskState.completed)
    schedules_14(c, m)
    auto_pool_14(c, m)
    node = next(iter(c.compute_node.list(POOL))).id
    logs = os.environ.get("BATCHPOOL_LOGS_URL")
    if logs:
        import datetime
        since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        got = c.compute_node.upload_batch_service_logs(POOL, node, m.UploadBatchServiceLogsConfiguration(container_url=logs, start_time=since))
        assert got.number_of_files_uploaded == 2, got
    c.compute_node.reimage(POOL, node, node_reimage_option="taskcompletion")
    wait("the reimaged node to be idle", lambda: c.compute_node.get(POOL, node).state == m.ComputeNodeState.idle)
    c.job.terminate(JOB, terminate_reason="done")
    wait("the job to complete", lambda: c.job.get(JOB).state == m.JobState.completed)
    c.pool.resize(POOL, m.PoolResizeParameter(target_dedicated_nodes=0, target_low_priority_nodes=1))
    wait("a low-priority node alone", lambda: [n.is_dedicated for n in c.compute_node.list(POOL)] == [False]
         and c.pool.get(POOL).current_dedicated_nodes == 0)
    wait("it to be idle", lambda: next(iter(c.compute_node.list(POOL))).state == m.ComputeNodeState.idle)
    assert c.pool.get(POOL).current_low_priority_nodes == 1
    c.job.delete(JOB)
    wait("the job to go", lambda: not any(j.id == JOB for j in c.job.list()))
    c.pool.delete(POOL)
    wait("the pool to go", lambda: not c.pool.exists(POOL))


if __name__ == "__main__":
    log("azure-batch", VERSION, "against", URL)
    started = time.time()
    (run_15 if MAJOR >= 15 else run_14)()
    log(f"conformance flow passed in {time.time() - started:.1f} s")
    print("1 passed, 0 failed")
