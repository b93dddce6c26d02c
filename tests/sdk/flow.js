// The official JavaScript SDK (@azure/batch 10.x, api-version 2022-10-01.16.0) along a script's
// core flow: a pool whose start task gets a SAS resource file, a job, tasks through the
// collection route, polling, task counts, stdout.txt whole and by range, a filtered list,
// terminate, and the job and the pool deleted (the SDK signs a DELETE without a body with an
// empty Content-Length line). BATCHPOOL_URL, BATCHPOOL_ACCOUNT, BATCHPOOL_KEY say where and
// who; BATCHPOOL_INPUT is a SAS URL whose blob holds "resource\n".
"use strict";
const assert = require("assert");
const { BatchServiceClient, BatchSharedKeyCredentials } = require("@azure/batch");

const client = new BatchServiceClient(
  new BatchSharedKeyCredentials(process.env.BATCHPOOL_ACCOUNT, process.env.BATCHPOOL_KEY),
  process.env.BATCHPOOL_URL,
);
const POOL = "jspool";
const JOB = "jsjob";

async function waitFor(what, check, seconds = 120) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function text(response) {
  const chunks = [];
  for await (const chunk of response.readableStreamBody) chunks.push(chunk);
  return Buffer.concat(chunks).toString();
}

async function main() {
  await client.pool.add({
    id: POOL, vmSize: "STANDARD_A1_V2", targetDedicatedNodes: 1, taskSlotsPerNode: 2,
    startTask: {
      commandLine: "/bin/sh -c 'cp in.txt $AZ_BATCH_NODE_SHARED_DIR/in.txt'", waitForSuccess: true,
      resourceFiles: [{ httpUrl: process.env.BATCHPOOL_INPUT, filePath: "in.txt" }],
    },
  });
  await waitFor("an idle node", async () => {
    const nodes = await client.computeNode.list(POOL);
    return nodes.length === 1 && nodes[0].state === "idle";
  });
  await client.job.add({ id: JOB, poolInfo: { poolId: POOL } });
  const tasks = [...Array(10).keys()].map((i) => ({
    id: `t${i}`, commandLine: `/bin/sh -c 'cat $AZ_BATCH_NODE_SHARED_DIR/in.txt; echo task ${i}'`,
  }));
  const added = await client.task.addCollection(JOB, tasks);
  assert.ok(added.value.every((r) => r.status === "success"), JSON.stringify(added.value));
  await waitFor("every task to complete", async () => {
    const counts = await client.job.getTaskCounts(JOB);
    return counts.taskCounts.completed === 10 && counts.taskCounts.succeeded === 10;
  });
  const out = await text(await client.file.getFromTask(JOB, "t3", "stdout.txt"));
  assert.strictEqual(out, "resource\ntask 3\n");
  const ranged = await text(await client.file.getFromTask(JOB, "t3", "stdout.txt", {
    fileGetFromTaskOptions: { ocpRange: "bytes=0-7" },
  }));
  assert.strictEqual(ranged, "resource");
  const completed = await client.task.list(JOB, { taskListOptions: { filter: "state eq 'completed'", select: "id,state" } });
  assert.strictEqual(completed.length, 10);
  await client.task.add(JOB, { id: "long", commandLine: "sleep 60" });
  await waitFor("the long task to run", async () => (await client.task.get(JOB, "long")).state === "running");
  await client.task.terminate(JOB, "long");
  await waitFor("the terminated task", async () => (await client.task.get(JOB, "long")).state === "completed");
  await client.job.deleteMethod(JOB);
  await client.pool.deleteMethod(POOL);
  await waitFor("the pool to go", async () => {
    try {
      await client.pool.get(POOL);
      return false;
    } catch (e) {
      return e.statusCode === 404;
    }
  });
  console.log("javascript flow passed");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
