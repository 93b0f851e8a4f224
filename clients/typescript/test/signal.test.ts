/** Signalling another run from a workflow (ctx.signal, dex 1.7) against a real cluster. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { workflow } from "./sdk.js";
import { client, eventually, kinds, queues, startWorker } from "./helpers.js";

const waiter = workflow("ts-sig-waiter", async (ctx) => ctx.waitEvent("go"));
const signaller = workflow("ts-sig-signaller", async (ctx, arg: { to?: string; instance?: string }) => {
  const sig = arg.to !== undefined
    ? ctx.signal("go", { from: ctx.runId }, { runId: arg.to })
    : ctx.signal("go", { from: ctx.runId }, { instanceId: arg.instance });
  const outcome = await sig;
  return { outcome, target: sig.runId ?? null };
});

test("a workflow signals another that waits for the event; the outcome is recorded and returned", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [waiter, signaller], workflowCacheSize: 0 });
  const target = await client().start(waiter, undefined, { queue: qs[0] });
  await eventually(async () => kinds(await client().history(target)).includes("externalEventWaitStarted"), "the wait");
  const sender = await client().start(signaller, { to: target }, { queue: qs[0] });
  assert.deepEqual(await client().result(sender, { timeout: 20 }), { outcome: "DELIVERED", target });
  assert.deepEqual(await client().result(target, { timeout: 20 }), { from: sender });
  const signalled = (await client().history(sender)).filter((e) => e.externalRunSignalled).map((e) => e.externalRunSignalled);
  assert.deepEqual(signalled, [{ runId: target, eventId: "go", outcome: "SIGNAL_OUTCOME_DELIVERED" }]);

  // by instance id; then to a run that ended, and to one that never was
  const instance = `ts-sig-${Date.now()}`;
  const byInstance = await client().start(waiter, undefined, { queue: qs[0], instanceId: instance });
  const sender2 = await client().start(signaller, { instance }, { queue: qs[0] });
  assert.deepEqual(await client().result(sender2, { timeout: 20 }), { outcome: "DELIVERED", target: byInstance });
  await client().result(byInstance, { timeout: 20 });
  const late = await client().start(signaller, { to: target }, { queue: qs[0] });
  assert.deepEqual(await client().result(late, { timeout: 20 }), { outcome: "TARGET_ENDED", target });
  const nobody = await client().start(signaller, { to: "01234567-89ab-7def-8123-456789abcdef" }, { queue: qs[0] });
  assert.deepEqual(await client().result(nobody, { timeout: 20 }), { outcome: "TARGET_NOT_FOUND", target: null });
});

const echo = workflow("ts-sig-echo", async (_ctx, arg: unknown) => arg);

test("debounced starts make one run with the last argument; sendEvents reports each event", async (t) => {
  const qs = await queues();
  const key = `k-${Date.now()}`;
  const ids = [];
  for (let n = 0; n < 4; n++) {
    ids.push(await client().start(echo, n, { queue: qs[0], debounceKey: key, debounce: 0.5, debounceMax: 10 }));
  }
  assert.equal(new Set(ids).size, 1);
  assert.equal((await client().get(ids[0])).status, "DELAYED");
  await startWorker(t, qs, { workflows: [waiter, echo] });
  assert.equal(await client().result(ids[0], { timeout: 20 }), 3);

  const a = await client().start(waiter, undefined, { queue: qs[0] });
  const outcomes = await client().sendEvents([[a, "go", "A"], [a, "go", "again"], [ids[0], "go"],
                                              ["01234567-89ab-7def-8123-456789abcdef", "go"]]);
  assert.deepEqual(outcomes, ["DELIVERED", "DUPLICATE", "TARGET_ENDED", "TARGET_NOT_FOUND"]);
  assert.equal(await client().result(a, { timeout: 20 }), "A");
  assert.deepEqual(await client().sendEvents([]), []);
});
