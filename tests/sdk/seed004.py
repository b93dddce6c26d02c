"""Seed 004's workflow (an app and its input files uploaded to blob storage, a pool whose start
task fetches the app, one task per input with resource files in and output files out) through
the official azure-batch 15.x SDK and azure-storage-blob, against a running batchpool and the
Azurite emulator. Outputs are downloaded and checked byte for byte; a failing task uploads its
stderr with `taskfailure` and nothing with `tasksuccess`.

BATCHPOOL_URL, BATCHPOOL_ACCOUNT and BATCHPOOL_KEY say where and who; AZURITE_BLOB is the
emulator's blob endpoint. Exits non-zero at the first thing that does not work as on Azure.
"""

import datetime
import os
import uuid

from azure.batch import BatchClient, models
from azure.core.credentials import AzureNamedKeyCredential
from azure.storage.blob import (BlobServiceClient, ContainerSasPermissions, BlobSasPermissions,
                                generate_blob_sas, generate_container_sas)

from waiting import wait

URL = os.environ["BATCHPOOL_URL"]
ACCOUNT = os.environ["BATCHPOOL_ACCOUNT"]
KEY = os.environ["BATCHPOOL_KEY"]
BLOB = os.environ["AZURITE_BLOB"]
STORAGE_ACCOUNT = "devstoreaccount1"
STORAGE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
RUN = uuid.uuid4().hex[:8]
APP, INPUT, OUTPUT = f"app-{RUN}", f"input-{RUN}", f"output-{RUN}"
POOL, JOB = "pool-seed004", "job-seed004"
# Every number in an input differs from the others (13k mod 97), so the sorted output is exact.
INPUTS = {f"taskdata{i}.txt": "".join(f"{(i * 7 + k * 13) % 97} line {k}\n" for k in range(20 + i)) for i in range(3)}
# The "app": sorts its input into its output and says how many lines it saw.
MAIN = "#!/bin/sh\nsort -n \"$1\" > \"$2\"\necho \"$(wc -l < \"$1\") lines in $1\"\n"


def expiry():
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)


def upload(blobs, container, name, text):
    client = blobs.get_blob_client(container, name)
    client.upload_blob(text.encode(), overwrite=True)
    sas = generate_blob_sas(STORAGE_ACCOUNT, container, name, account_key=STORAGE_KEY,
                            permission=BlobSasPermissions(read=True), expiry=expiry())
    return f"{client.url}?{sas}"


def container_url(container, permission):
    sas = generate_container_sas(STORAGE_ACCOUNT, container, account_key=STORAGE_KEY,
                                 permission=permission, expiry=expiry())
    return f"{BLOB}/{container}?{sas}"


def main():
    conn = (f"DefaultEndpointsProtocol=http;AccountName={STORAGE_ACCOUNT};AccountKey={STORAGE_KEY};"
            f"BlobEndpoint={BLOB};")
    blobs = BlobServiceClient.from_connection_string(conn)
    for c in (APP, INPUT, OUTPUT):
        blobs.create_container(c)
    upload(blobs, APP, "main.sh", MAIN)
    input_urls = {name: upload(blobs, INPUT, name, text) for name, text in INPUTS.items()}
    app_container = container_url(APP, ContainerSasPermissions(read=True, list=True))
    output_container = container_url(OUTPUT, ContainerSasPermissions(write=True))

    batch = BatchClient(endpoint=URL, credential=AzureNamedKeyCredential(ACCOUNT, KEY))
    # The start task fetches the app into the node's shared directory, as the seed installs it.
    batch.create_pool(models.BatchPoolCreateOptions(
        id=POOL, vm_size="standard_a1", target_dedicated_nodes=1,
        start_task=models.BatchStartTask(
            command_line="/bin/sh -c 'cp app/main.sh $AZ_BATCH_NODE_SHARED_DIR/main.sh'",
            resource_files=[models.ResourceFile(storage_container_url=app_container, file_path="app")],
            wait_for_success=True)))
    wait("an idle node", lambda: [n for n in batch.list_nodes(POOL) if n.state == models.BatchNodeState.IDLE])
    batch.create_job(models.BatchJobCreateOptions(id=JOB, pool_info=models.BatchPoolInfo(pool_id=POOL)))

    def outputs(task_id):
        def out(pattern, path, condition):
            return models.OutputFile(
                file_pattern=pattern,
                destination=models.OutputFileDestination(container=models.OutputFileBlobContainerDestination(
                    container_url=output_container, path=path)),
                upload_options=models.OutputFileUploadConfiguration(upload_condition=condition))
        return [out("result.txt", f"{task_id}/result.txt", models.OutputFileUploadCondition.TASK_SUCCESS),
                out("../std*.txt", f"{task_id}/logs", models.OutputFileUploadCondition.TASK_FAILURE)]

    tasks = []
    for i, (name, url) in enumerate(input_urls.items()):
        tasks.append(models.BatchTaskCreateOptions(
            id=f"task{i}",
            command_line=f"/bin/sh -c 'sh $AZ_BATCH_NODE_SHARED_DIR/main.sh {name} result.txt'",
            resource_files=[models.ResourceFile(http_url=url, file_path=name)],
            output_files=outputs(f"task{i}")))
    # The same app on an input that was never uploaded (its SAS is good): the download fails, the
    # command never runs.
    missing_sas = generate_blob_sas(STORAGE_ACCOUNT, INPUT, "nothing.txt", account_key=STORAGE_KEY,
                                    permission=BlobSasPermissions(read=True), expiry=expiry())
    missing_url = f"{BLOB}/{INPUT}/nothing.txt?{missing_sas}"
    tasks.append(models.BatchTaskCreateOptions(
        id="noinput", command_line="/bin/sh -c 'sh $AZ_BATCH_NODE_SHARED_DIR/main.sh nothing.txt result.txt'",
        resource_files=[models.ResourceFile(http_url=missing_url, file_path="nothing.txt")],
        output_files=outputs("noinput")))
    # A command that fails: its logs go up (taskfailure), its result does not (tasksuccess).
    tasks.append(models.BatchTaskCreateOptions(
        id="failing", command_line="/bin/sh -c 'echo partial > result.txt; echo broken >&2; exit 2'",
        output_files=outputs("failing")))
    batch.create_tasks(JOB, tasks)
    wait("every task to complete", lambda: batch.get_job_task_counts(JOB).task_counts.completed == len(tasks))

    out = blobs.get_container_client(OUTPUT)
    for i, (name, text) in enumerate(INPUTS.items()):
        task = batch.get_task(JOB, f"task{i}")
        assert task.execution_info.result == models.BatchTaskExecutionResult.SUCCESS, task.execution_info
        assert task.resource_files[0].file_path == name, task.resource_files
        expected = "".join(sorted(text.splitlines(keepends=True), key=lambda line: int(line.split()[0])))
        got = out.download_blob(f"task{i}/result.txt").readall().decode()
        assert got == expected, (got, expected)
        stdout = b"".join(batch.download_task_file(JOB, f"task{i}", "stdout.txt")).decode()
        assert stdout == f"{len(text.splitlines())} lines in {name}\n", stdout
    names = sorted(b.name for b in out.list_blobs())
    assert not any(n.startswith("task0/logs") for n in names), names

    noinput = batch.get_task(JOB, "noinput").execution_info
    assert noinput.result == models.BatchTaskExecutionResult.FAILURE, noinput
    assert noinput.failure_info.code == "BlobNotFound", noinput.failure_info
    assert noinput.exit_code is None, noinput
    assert not any(n.startswith("noinput/") for n in names), names

    failing = batch.get_task(JOB, "failing").execution_info
    assert failing.exit_code == 2, failing
    assert "failing/result.txt" not in names, names
    assert out.download_blob("failing/logs/stderr.txt").readall() == b"broken\n"
    assert out.download_blob("failing/logs/stdout.txt").readall() == b""

    batch.begin_delete_job(JOB, polling_interval=0.2).result()
    batch.begin_resize_pool(POOL, models.BatchPoolResizeOptions(target_dedicated_nodes=0),
                            polling_interval=0.2).result()
    print("seed 004 flow passed", flush=True)


if __name__ == "__main__":
    main()
