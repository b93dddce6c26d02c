"""Microsoft's Python quickstart for Azure Batch (Azure-Samples/batch-python-quickstart, which pins
azure-batch==11.0.0), as its script runs it, with any msrest-generation SDK (5.x to 14.x):
a pool of 2 nodes, a job, one task per input file through add_collection with the file as a SAS
resource file, polling until every task completes, each task's stdout.txt, then the job and the
pool deleted. Each SDK speaks its own api-version, in its own shape: 5.x a resource file's
blob_source, before 10.0 a pool's max_tasks_per_node and bare task counts.

BATCHPOOL_URL, BATCHPOOL_ACCOUNT and BATCHPOOL_KEY say where and who; BATCHPOOL_INPUTS holds the
input files' SAS URLs, one a line (the quickstart uploads them to its storage account first).
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
    client.job.delete(JOB_ID)
    client.pool.delete(POOL_ID)
    log("quickstart passed")


if __name__ == "__main__":
    main()
