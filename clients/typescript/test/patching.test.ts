/**
 * Patching (dex 1.6): changing a workflow's code under running runs without a new version.
 * ctx.patched(id) records a marker where a run first takes the new path; runs that passed that
 * point under the old code replay the old path; ctx.deprecatePatch(id) replaces it once the old
 * path is gone; a patch the code does not match fails the workflow task (retried), not the run.
 */
import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import { randomUUID } from "node:crypto";
import { activity, workflow, type Worker, type WorkflowFunction } from "./sdk.js";
import { client, eventually, failedWorkflowTask, queues, sql, startWorker } from "./helpers.js";

const oldStep = activity("pt-old", (n: number) => `old ${n}`);
const newStep = activity("pt-new", (n: number) => `new ${n}`);

// four deploys of one workflow's code, each run as "pt-flow" version 1, one deploy at a time
const before: WorkflowFunction = async (ctx, n: number) => {
  const a = await ctx.activity(oldStep, n);
  await ctx.waitEvent("go");
  return a;
};
const patched: WorkflowFunction = async (ctx, n: number) => {
  const a = ctx.patched("use-new-step") ? await ctx.activity(newStep, n) : await ctx.activity(oldStep, n);
  assert.equal(ctx.patched("use-new-step"), a.startsWith("new"));      // the answer is kept
  await ctx.waitEvent("go");
  return a;
};
const deprecated: WorkflowFunction = async (ctx, n: number) => {
  ctx.deprecatePatch("use-new-step");
  const a = await ctx.activity(newStep, n);
  await ctx.waitEvent("go");
  return a;
};
const misplaced: WorkflowFunction = async (ctx, n: number) => {
  let a: string = await ctx.activity(newStep, n);          // the patch check was moved below
  if (ctx.patched("use-new-step")) a = a.toUpperCase();
  await ctx.waitEvent("go");
  return a;
};

async function deploy(t: TestContext, qs: [string, string], current: Worker | undefined, fn: WorkflowFunction): Promise<Worker> {
  await current?.shutdown();
  return startWorker(t, qs, { workflows: [workflow("pt-flow", fn)], activities: [oldStep, newStep],
                              workerId: `${fn.name}-${randomUUID().slice(0, 6)}` });
}

async function waitingForEvent(runId: string): Promise<boolean> {
  return (await sql(
    "SELECT 1 FROM dex.workflow_run r WHERE r.id = $1 AND r.status = 'RUNNING' " +
    "AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id) " +
    "AND NOT EXISTS (SELECT 1 FROM dex.activity_task a WHERE a.run_id = r.id)", [runId])).rowCount === 1;
}

async function start(queue: string, n: number): Promise<string> {
  const id = await client().start("pt-flow", n, { queue });
  await eventually(() => waitingForEvent(id), `run ${n} waiting for its event`);
  return id;
}

async function markers(runId: string): Promise<string[]> {
  return (await client().history(runId)).filter((e) => e.markerRecorded).map((e) => e.markerRecorded.name);
}

test("patching: old runs replay the old path, new runs take the new one, deprecated code replays the marker", async (t) => {
  const qs = await queues();
  let w = await deploy(t, qs, undefined, before);
  const old = await start(qs[0], 1);                   // took the old path under the old code
  w = await deploy(t, qs, w, patched);
  const fresh = await start(qs[0], 2);                 // takes the new path, recording it
  assert.deepEqual(await markers(fresh), ["dex.patch:use-new-step"]);
  await client().sendEvent(old, "go");                 // replayed by the patched code
  assert.equal(await client().result(old, { timeout: 30 }), "old 1");
  assert.deepEqual(await markers(old), []);
  w = await deploy(t, qs, w, deprecated);              // the old path is gone from the code
  await client().sendEvent(fresh, "go");               // replays the marker it recorded
  assert.equal(await client().result(fresh, { timeout: 30 }), "new 2");
  const newer = await start(qs[0], 3);
  await client().sendEvent(newer, "go");
  assert.equal(await client().result(newer, { timeout: 30 }), "new 3");
  assert.deepEqual(await markers(newer), []);          // nothing recorded any more
});

test("patching: a misplaced patch fails the workflow task (dex.NonDeterminism naming it), not the run", async (t) => {
  const qs = await queues();
  let w = await deploy(t, qs, undefined, patched);
  const id = await start(qs[0], 4);                    // recorded the marker first
  w = await deploy(t, qs, w, misplaced);               // the check moved: the history does not match
  await client().sendEvent(id, "go");
  const f = await failedWorkflowTask(id);
  assert.equal(f.type, "dex.NonDeterminism");
  assert.match(f.message, /use-new-step/);
  assert.equal((await client().get(id)).status, "RUNNING");      // the run goes on
  await deploy(t, qs, w, patched);                     // the code that matches comes back
  assert.equal(await client().result(id, { timeout: 60 }), "new 4");
});

test("patching: a change id must be a non-empty string", async () => {
  const { replay } = await import("./sdk.js");
  const wf = workflow("pt-bad", async (ctx) => ctx.patched(""));
  const cmds = await replay({ runId: "r", workflowName: "pt-bad", newEvents: [
    { timestamp: "2026-01-01T00:00:00Z", workflowTaskStarted: {} },
    { runCreated: { workflowName: "pt-bad" } }, { runStarted: {} }] }, wf);
  assert.equal(cmds[0]!.failRun.failure.type, "InvalidArgumentError");
  assert.match(cmds[0]!.failRun.failure.message, /change id is a non-empty string/);
});
