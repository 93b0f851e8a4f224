/**
 * What a worker does with a mistake of its setup, as the Python SDK does: a queue it cannot poll
 * (said once, in a line; stops if never polled, retried with backoff if it was), a queue of a
 * kind it runs nothing of (not polled), more than a poll declares (a loop per 1,000), two
 * definitions of one (workflow, version) (refused).
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { activity, workflow, DexError, DuplicateDefinitionError, Worker } from "./sdk.js";
import { client, eventually, queues, sql, startWorker } from "./helpers.js";

function recorder(): { lines: string[]; logger: Pick<Console, "info" | "warn" | "error"> } {
  const lines: string[] = [];
  const say = (...args: unknown[]) => { lines.push(args.map(String).join(" ")); };
  return { lines, logger: { info: say, warn: say, error: say } };
}

const revokedStep = activity("we-revoked-step", (n: number) => n + 1);
const revokedFlow = workflow("we-revoked", async (ctx, n: number) => ctx.activity(revokedStep, n));

test("a queue revoked while its worker waits in the server is said once and retried, and polled again once granted", async (t) => {
  const qs = await queues();
  const role = `we_${randomUUID().slice(0, 8)}`;
  await sql(`CREATE ROLE ${role} LOGIN IN ROLE dex_worker`);
  const { lines, logger } = recorder();
  const w = await startWorker(t, qs, { workflows: [revokedFlow], activities: [revokedStep], connection: { user: role },
                                       pollTimeout: 30, logger });
  t.after(async () => {
    await w.shutdown();                                 // (before its role goes)
    await sql("SELECT dex.grant_queue($1, 'dex_worker')", [qs[0]]);
    await sql(`DROP ROLE ${role}`);
  });
  assert.equal(await client().result(await client().start(revokedFlow, 1, { queue: qs[0] }), { timeout: 20 }), 2);
  await new Promise((resolve) => setTimeout(resolve, 500));      // the workflow loop waits in its CALL again
  await sql("SELECT dex.revoke_queue($1, 'dex_worker')", [qs[0]]);
  await eventually(() => lines.some((l) => l.includes("trying again, less and less often")), "the refusal said");
  const said = lines.filter((l) => l.includes("trying again"));
  assert.equal(said.length, 1, lines.join("\n"));
  assert.match(said[0]!, new RegExp(`workflow queue '${qs[0]}': permission denied for queue "${qs[0]}" \\(SQLSTATE 42501\\)`));
  assert.equal(w.error, undefined);
  assert.ok(!w.stopping);
  await sql("SELECT dex.grant_queue($1, 'dex_worker')", [qs[0]]);
  assert.equal(await client().result(await client().start(revokedFlow, 5, { queue: qs[0] }), { timeout: 20 }), 6);
  assert.ok(!lines.some((l) => l.includes("the worker stops")), lines.join("\n"));
});

const mine = workflow("we-mine", async (ctx, n: number) => ctx.activity(revokedStep, n));
const notMine = workflow("we-not-mine", async () => "served");

test("a worker does not poll a queue of a kind it runs nothing of, says so, and refuses to start with nothing to run", async (t) => {
  const qs = await queues();
  const tag = randomUUID().slice(0, 6);
  const a = recorder(), b = recorder();
  const noWorkflows = await startWorker(t, qs, { workflows: [], activities: [revokedStep], workerId: `nowf-${tag}`, logger: a.logger });
  const noActivities = await startWorker(t, qs, { workflows: [mine], activities: [], workerId: `noact-${tag}`, logger: b.logger });
  assert.deepEqual(a.lines, [`dex: worker nowf-${tag} has no workflows: it does not poll its workflow queues ["${qs[0]}"]`]);
  assert.deepEqual(b.lines, [`dex: worker noact-${tag} has no activities: it does not poll its activity queues ["${qs[1]}"]`]);
  const nobodys = await client().start(notMine, null, { queue: qs[0] });
  const served = await client().start(mine, 5, { queue: qs[0] });
  assert.equal(await client().result(served, { timeout: 20 }), 6);
  await eventually(async () => (await client().sql("SELECT 1 FROM dex.unserved('0 s') WHERE queue = $1 AND name = 'we-not-mine'",
                                                   [qs[0]])).length === 1, "the workflow nobody has shown unserved");
  assert.equal((await client().get(nobodys)).status, "CREATED");
  assert.equal(noWorkflows.stats.workflowTasks, 0);
  assert.equal(noActivities.stats.activitiesFailed + noActivities.stats.activitiesCompleted, 0);
  await assert.rejects(new Worker({ workflowQueues: ["q"], workflows: [], workerId: "idle", logger: recorder().logger }).start(),
                       (e: unknown) => e instanceof DexError &&
                         e.message === 'worker idle has nothing to run: no workflows for its workflow queues ["q"] and no activities for its activity queues []');
});

test("a worker with more workflows than a poll declares (1,000) polls with a loop per 1,000, each declaring its part", async (t) => {
  const qs = await queues();
  const tag = randomUUID().slice(0, 6);
  const many = Array.from({ length: 1200 }, (_, i) => {
    const name = `we-many-${tag}-${String(i).padStart(4, "0")}`;
    return workflow(name, async () => name);
  });
  await startWorker(t, qs, { workflows: many, activityQueues: [] });
  const first = await client().start(many[7]!, null, { queue: qs[0] });
  const last = await client().start(many[1199]!, null, { queue: qs[0] });
  const other = await client().start(notMine, null, { queue: qs[0] });
  assert.equal(await client().result(first, { timeout: 20 }), many[7]!.name);
  assert.equal(await client().result(last, { timeout: 20 }), many[1199]!.name);
  await eventually(async () => (await client().sql("SELECT 1 FROM dex.unserved('0 s') WHERE queue = $1 AND name = 'we-not-mine'",
                                                   [qs[0]])).length === 1, "the workflow it does not have shown unserved");
  assert.equal((await client().get(other)).status, "CREATED");
});

test("two definitions of one (workflow, version), or of one activity name, are refused, naming where each was made", () => {
  const a = workflow("we-twice", async () => 1);
  const b = workflow("we-twice", async () => 2);
  assert.throws(() => new Worker({ workflowQueues: ["q"], workflows: [a, b] }), (e: unknown) =>
    e instanceof DuplicateDefinitionError &&
    /^workflow 'we-twice' version 1 is defined twice: at .*worker-errors\.test\.js:\d+:\d+ and at .*worker-errors\.test\.js:\d+:\d+; give one of them another version$/
      .test(e.message));
  new Worker({ workflowQueues: ["q"], workflows: [a, a, workflow("we-twice", async () => 3, { version: 2 })] });   // the same one twice is one
  assert.throws(() => new Worker({ activityQueues: ["q"], activities: [activity("we-act", () => 1), activity("we-act", () => 2)] }),
                (e: unknown) => e instanceof DuplicateDefinitionError &&
                  /^activity 'we-act' is defined twice: .* give one of them another name$/.test(e.message));
});
