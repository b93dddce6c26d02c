"""Microsoft's Python quickstart for Azure Batch (Azure-Samples/batch-python-quickstart, which pins
azure-batch==11.0.0), as its script runs it, with any msrest-generation SDK (5.x to 14.x):
a pool of 2 nodes, a job, one task per input file through add_collection with the file as a SAS
resource file, polling until every task completes, each task's stdout.txt, then the job and the
pool deleted. Each SDK speaks its own api-version, in its own shape: 5.x a resource file's
blob_source, before 10.0 a pool's max_tasks_per_node and bare task counts.

Then the core flow every client of the matrix runs (core_flow). BATCHPOOL_URL, BATCHPOOL_ACCOUNT and
BATCHPOOL_KEY say where and who; BATCHPOOL_INPUTS holds the input files' SAS URLs, one a line (the
quickstart uploads them to its storage account first); BATCHPOOL_OUTPUT is a container's SAS URL
that output files may be written to.
"""

import datetime
import os
import time

import azure.batch
import azure.batch.models as batchmodels
from azure.batch import BatchServiceClient
from azure.batch.batch_auth import SharedKeyCredentials

URL = os.environ["BATCHPOOL_URL"]
VERSION = azure.batch.VERSION if hasattr(azure.batch, "VERSION") else azure.batch.__version__
MAJOR = int(VERSION.split(".")[0])
POOL_ID, JOB_ID = f"PythonQuickstartPool{MAJOR}", f"PythonQuickstartJob{MAJOR}"
# The quickstart's own size, in its own capitals.
POOL_VM_SIZE = "STANDARD_DS1_V2"


def log(*args):
    print(f"[azure-batch {VERSION}]", *args, flush=True)


def resource_file(url, name):
    if MAJOR < 6:  # api-version 2018-08-01.7.0: one blobSource per file
        return batchmodels.ResourceFile(blob_source=url, file_path=name)
    return batchmodels.ResourceFile(http_url=url, file_path=name)


def create_pool(client):
    slots = {"max_tasks_per_node": 2} if MAJOR < 10 else {"task_slots_per_node": 2}
    new_pool = batchmodels.PoolAddParameter(
        id=POOL_ID,
        virtual_machine_configuration=batchmodels.VirtualMachineConfiguration(
            image_reference=batchmodels.ImageReference(
                publisher="canonical", offer="0001-com-ubuntu-server-focal", sku="20_04-lts", version="latest"),
            node_agent_sku_id="batch.node.ubuntu 20.04"),
        vm_size=POOL_VM_SIZE,
        target_dedicated_nodes=2,
        **slots)
    client.pool.add(new_pool)
    got = client.pool.get(POOL_ID)
    assert got.vm_size.lower() == POOL_VM_SIZE.lower(), got.vm_size
    assert getattr(got, next(iter(slots))) == 2, got


def add_tasks(client, inputs):
    tasks = [batchmodels.TaskAddParameter(
        id=f"Task{idx}", command_line=f'/bin/bash -c "cat {name}"', resource_files=[resource_file(url, name)])
        for idx, (url, name) in enumerate(inputs)]
    result = client.task.add_collection(JOB_ID, tasks)
    assert all(r.status == batchmodels.TaskAddStatus.success for r in result.value), result


def wait_for_tasks_to_complete(client, timeout):
    deadline = datetime.datetime.now() + timeout
    while datetime.datetime.now() < deadline:
        if all(t.state == batchmodels.TaskState.completed for t in client.task.list(JOB_ID)):
            return
        time.sleep(1)
    raise RuntimeError("the tasks did not complete in time")


def main():
    credentials = SharedKeyCredentials(os.environ["BATCHPOOL_ACCOUNT"], os.environ["BATCHPOOL_KEY"])
    # 5.x named the account's URL base_url.
    client = BatchServiceClient(credentials, **({"base_url": URL} if MAJOR < 6 else {"batch_url": URL}))
    urls = os.environ["BATCHPOOL_INPUTS"].split()
    inputs = [(url, url.split("?")[0].rsplit("/", 1)[1]) for url in urls]
    create_pool(client)
    client.job.add(batchmodels.JobAddParameter(id=JOB_ID, pool_info=batchmodels.PoolInformation(pool_id=POOL_ID)))
    add_tasks(client, inputs)
    wait_for_tasks_to_complete(client, datetime.timedelta(minutes=5))
    for task in client.task.list(JOB_ID):
        node_id = client.task.get(JOB_ID, task.id).node_info.node_id
        text = b"".join(client.file.get_from_task(JOB_ID, task.id, "stdout.txt")).decode()
        name = inputs[int(task.id[len("Task"):])][1]
        assert text == f"contents of {name}\n", (task.id, node_id, text)
        assert task.execution_info.exit_code == 0, task.execution_info
    counts = client.job.get_task_counts(JOB_ID)
    counts = counts if MAJOR < 10 else counts.task_counts  # bare before api-version 2020-09-01.12.0
    assert (counts.completed, counts.succeeded) == (len(inputs), len(inputs)), counts
    core_flow(client, inputs[0][0])
    waiting(client)
    client.job.delete(JOB_ID)
    client.pool.delete(POOL_ID)
    log("quickstart passed")


def core_flow(client, input_url):
    """The core flow every client of the matrix runs, past the quickstart: a pool whose start task
    gets a SAS resource file, tasks whose output files go to a SAS container, paging, $filter, a
    ranged read, terminate. The test checks the uploaded files."""
    pool, job = f"CorePool{MAJOR}", f"CoreJob{MAJOR}"
    client.pool.add(batchmodels.PoolAddParameter(
        id=pool, vm_size="standard_a1_v2", target_dedicated_nodes=1,
        virtual_machine_configuration=batchmodels.VirtualMachineConfiguration(
            image_reference=batchmodels.ImageReference(publisher="canonical", offer="0001-com-ubuntu-server-jammy", sku="22_04-lts"),
            node_agent_sku_id="batch.node.ubuntu 22.04"),
        start_task=batchmodels.StartTask(
            command_line="/bin/bash -c 'cp in.txt $AZ_BATCH_NODE_SHARED_DIR/in.txt'", wait_for_success=True,
            resource_files=[resource_file(input_url, "in.txt")])))
    client.job.add(batchmodels.JobAddParameter(id=job, pool_info=batchmodels.PoolInformation(pool_id=pool)))
    upload = batchmodels.OutputFileUploadOptions(upload_condition=batchmodels.OutputFileUploadCondition.task_success)
    tasks = [batchmodels.TaskAddParameter(
        id=f"t{i}", command_line=f"/bin/bash -c 'cat $AZ_BATCH_NODE_SHARED_DIR/in.txt; echo {i} > out.txt'",
        output_files=[batchmodels.OutputFile(
            file_pattern="out.txt", upload_options=upload,
            destination=batchmodels.OutputFileDestination(container=batchmodels.OutputFileBlobContainerDestination(
                container_url=os.environ["BATCHPOOL_OUTPUT"], path=f"{MAJOR}/t{i}.txt")))])
        for i in range(12)]
    result = client.task.add_collection(job, tasks)
    assert all(r.status == batchmodels.TaskAddStatus.success for r in result.value), result
    deadline = time.time() + 300
    while not all(t.state == batchmodels.TaskState.completed for t in client.task.list(job)):
        assert time.time() < deadline, "the core flow's tasks did not complete in time"
        time.sleep(0.5)
    # Five a page: the SDK follows odata.nextLink.
    paged = list(client.task.list(job, task_list_options=batchmodels.TaskListOptions(max_results=5)))
    assert sorted(t.id for t in paged) == sorted(f"t{i}" for i in range(12)), [t.id for t in paged]
    done = list(client.task.list(job, task_list_options=batchmodels.TaskListOptions(
        filter="state eq 'completed' and executionInfo/exitCode eq 0", select="id,state")))
    assert len(done) == 12 and done[0].command_line is None, done
    ranged = b"".join(client.file.get_from_task(job, "t3", "stdout.txt", file_get_from_task_options=
                                                batchmodels.FileGetFromTaskOptions(ocp_range="bytes=9-11"))).decode()
    assert ranged == "of ", ranged
    client.task.add(job, batchmodels.TaskAddParameter(id="long", command_line="sleep 60"))
    deadline = time.time() + 120
    while client.task.get(job, "long").state != batchmodels.TaskState.running:
        assert time.time() < deadline, "the long task did not start"
        time.sleep(0.2)
    client.task.terminate(job, "long")
    assert client.task.get(job, "long").state == batchmodels.TaskState.completed
    client.job.terminate(job)
    client.job.delete(job)
    client.pool.delete(pool)


def waiting(client):
    """A job on a pool that does not exist: its task and the job carry waitReason (batchpool's
    extension), and the SDK reads both as it reads any task and job, ignoring what it does not
    know."""
    job = f"Waiting{MAJOR}"
    client.job.add(batchmodels.JobAddParameter(id=job, pool_info=batchmodels.PoolInformation(pool_id="NoSuchPool")))
    client.task.add(job, batchmodels.TaskAddParameter(id="w", command_line="true"))
    deadline = time.time() + 60
    while client.task.get(job, "w", raw=True).response.json().get("waitReason", {}).get("code") != "PoolNotFound":
        assert time.time() < deadline, "the task has no waitReason"
        time.sleep(0.2)
    assert client.job.get(job, raw=True).response.json()["waitReason"]["code"] == "PoolNotFound"
    task = client.task.get(job, "w")
    assert task.id == "w" and task.state == batchmodels.TaskState.active, task
    assert [t.id for t in client.task.list(job)] == ["w"]
    assert client.job.get(job).pool_info.pool_id == "NoSuchPool"
    assert job in [j.id for j in client.job.list()]
    client.job.delete(job)


if __name__ == "__main__":
    main()
