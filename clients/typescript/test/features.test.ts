/** The programming model: every workflow feature against a real cluster. */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  activity, workflow, ActivityError, ApplicationError, CancelledError, ChildRunError, NonRetryableError,
  NotFoundError, NotSerializableError, RunCancelledError, RunFailedError, WaitTimeout, WaitTimeoutError,
  AlreadyActiveError, AlreadyExistsError, ConnectionFailedError, DexError, InvalidArgumentError, InvalidStateError, Worker,
} from "./sdk.js";
import { client, eventually, kinds, queues, sleep, startWorker } from "./helpers.js";

const quiet = { info() {}, warn() {}, error() {} };

// -- activities: retries and terminal errors ---------------------------------------------------

const attempts = new Map<string, number>();
const flaky = activity("flaky", async (key: string, actx) => {
  attempts.set(key, (attempts.get(key) ?? 0) + 1);
  if (actx.info.attempt < 3) throw new Error(`attempt ${actx.info.attempt} fails`);
  return actx.info.attempt;
}, { retry: { maxAttempts: 5, initialDelay: "10ms", multiplier: 1 } });
const doomed = activity("doomed", async (key: string) => {
  attempts.set(key, (attempts.get(key) ?? 0) + 1);
  throw new NonRetryableError("card declined", { type: "Declined", details: { code: 51 } });
}, { retry: { maxAttempts: 5, initialDelay: "10ms" } });
const retries = workflow("retries", async (ctx, key: string) => {
  const attempt = await ctx.activity(flaky, key);
  try {
    await ctx.activity(doomed, key + "-doomed");
    return "not reached";
  } catch (e) {
    assert.ok(e instanceof ActivityError);
    return { attempt, type: e.type, details: e.details, attempts: e.attempts, message: e.message };
  }
});

test("an activity is retried by its policy; a terminal error fails it at once, typed", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [retries], activities: [flaky, doomed] });
  const key = qs[0];
  const id = await client().start(retries, key, { queue: qs[0] });
  const r = await client().result(id, { timeout: 20 });
  assert.equal(r.attempt, 3);
  assert.equal(attempts.get(key), 3);
  assert.equal(attempts.get(key + "-doomed"), 1);
  assert.equal(r.type, "Declined");
  assert.deepEqual(r.details, { code: 51 });
  assert.equal(r.attempts, 1);
  assert.match(r.message, /activity 'doomed' \(id 2\) failed after 1 attempt\(s\): card declined/);
});

const fails = workflow("fails", async () => {
  throw new ApplicationError("no stock", { type: "OutOfStock" });
});

test("a workflow that throws ends FAILED, and result() throws RunFailedError with the failure", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [fails] });
  const id = await client().start(fails, null, { queue: qs[0] });
  await assert.rejects(client().result(id, { timeout: 20 }), (e: unknown) => {
    assert.ok(e instanceof RunFailedError);
    assert.equal(e.type, "OutOfStock");
    assert.match(e.message, /no stock/);
    return true;
  });
});

// -- timers and events -------------------------------------------------------------------------

const sleeper = workflow("sleeper", async (ctx) => {
  const t0 = ctx.now().getTime();
  await ctx.sleep("300ms");
  return ctx.now().getTime() - t0;
});

test("ctx.sleep is a durable timer, and ctx.now() moves with the workflow tasks", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [sleeper] });
  const id = await client().start(sleeper, null, { queue: qs[0] });
  const elapsed = await client().result(id, { timeout: 20 });
  assert.ok(elapsed >= 300, `ctx.now() moved ${elapsed} ms`);
  const h = kinds(await client().history(id));
  assert.ok(h.includes("timerCreated") && h.includes("timerElapsed"));
});

const approval = workflow("approval", async (ctx, timeout: number) => {
  try {
    const v = await ctx.waitEvent<{ ok: boolean }>("approve", { timeout });
    return { approved: v.ok };
  } catch (e) {
    if (e instanceof WaitTimeout) return { timedOut: e.eventId };
    throw e;
  }
});

test("ctx.waitEvent returns the event's payload, and throws WaitTimeout after its timeout", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [approval] });
  const got = await client().start(approval, 30, { queue: qs[0] });
  await eventually(async () => kinds(await client().history(got)).includes("externalEventWaitStarted"), "the wait");
  assert.equal(await client().sendEvent(got, "approve", { ok: true }), true);
  assert.deepEqual(await client().result(got, { timeout: 20 }), { approved: true });
  // the timeout's timer was cancelled when the event came
  assert.ok(kinds(await client().history(got)).includes("timerCancelled"));
  const late = await client().start(approval, 0.3, { queue: qs[0] });
  assert.deepEqual(await client().result(late, { timeout: 20 }), { timedOut: "approve" });
});

// -- children, side effects, all / any -----------------------------------------------------------

const square = workflow("square", async (_ctx, n: number) => {
  if (n < 0) throw new ApplicationError("negative", { type: "Negative" });
  return n * n;
});
const parent = workflow("parent", async (ctx, ns: number[]) => {
  const results = await ctx.all(ns.map((n) => ctx.child(square, n)));
  let failure: string | undefined;
  try {
    await ctx.child(square, -1);
  } catch (e) {
    assert.ok(e instanceof ChildRunError);
    failure = `${e.type} ${e.workflowName} ${typeof e.runId}`;
  }
  return { results, failure };
});

test("child workflows: their results, and a failed child as ChildRunError", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [parent, square] });
  const id = await client().start(parent, [2, 3, 4], { queue: qs[0] });
  assert.deepEqual(await client().result(id, { timeout: 30 }), { results: [4, 9, 16], failure: "Negative square string" });
  const children = await client().list({ parentId: id });
  assert.equal(children.length, 4);
});

const forever = workflow("forever", async (ctx) => ctx.waitEvent("never"));
const impatient = workflow("impatient", async (ctx) => {
  const child = ctx.child(forever, null, { executionTimeout: 0.5, parentClosePolicy: "ABANDON" });
  ctx.setCustomStatus("waiting for the child");
  try {
    await child;
    return "child returned";
  } catch (e) {
    assert.ok(e instanceof ChildRunError);
    return { type: e.type, runId: e.runId === child.runId && typeof e.runId === "string" };
  }
});

test("a child run past its execution timeout ends TIMED_OUT, and the parent sees ChildRunError dex.TimedOut", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [impatient, forever] });
  const id = await client().start(impatient, null, { queue: qs[0] });
  assert.deepEqual(await client().result(id, { timeout: 30 }), { type: "dex.TimedOut", runId: true });
  assert.equal((await client().get(id)).customStatus, "waiting for the child");
  const [child] = await client().list({ parentId: id });
  assert.equal(child!.status, "TIMED_OUT");
});

let sideEffectCalls = 0;
const tick = activity("tick", async () => "tock");
const sideEffects = workflow("side-effects", async (ctx) => {
  const v = ctx.sideEffect(() => { sideEffectCalls++; return { n: 41 + sideEffectCalls }; }, "pick");
  await ctx.activity(tick);
  await ctx.activity(tick);
  return v;
});

test("a side effect runs once; replays return its recorded value", async (t) => {
  const qs = await queues();
  // no cache: every workflow task replays the whole history
  const w = await startWorker(t, qs, { workflows: [sideEffects], activities: [tick], workflowCacheSize: 0 });
  sideEffectCalls = 0;
  const id = await client().start(sideEffects, null, { queue: qs[0] });
  assert.deepEqual(await client().result(id, { timeout: 20 }), { n: 42 });
  assert.equal(sideEffectCalls, 1);
  assert.equal(w.stats.fullReplays, 3);
});

const slow = activity("slow", async (ms: number) => {
  await sleep(ms);
  return ms;
});
const racer = workflow("racer", async (ctx) => {
  const fast = ctx.activity(slow, 10);
  const timer = ctx.sleep(30, "long");
  const first = await ctx.any([timer, fast]);
  timer.cancel();
  const all = await ctx.all([ctx.activity(slow, 30), ctx.activity(slow, 1), fast]);
  const ev = ctx.waitEvent("never");
  const second = await ctx.any([ev, ctx.sleep(0.2, "short")]);
  return { first, all, second };
});

test("ctx.any gives the first to settle, ctx.all every result in order", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [racer], activities: [slow] });
  const id = await client().start(racer, null, { queue: qs[0] });
  assert.deepEqual(await client().result(id, { timeout: 20 }), { first: 1, all: [30, 1, 10], second: 1 });
  assert.ok(kinds(await client().history(id)).includes("timerCancelled"));
});

// -- continue-as-new, cancellation ---------------------------------------------------------------

const counter = workflow("counter", async (ctx, n: number) => {
  await ctx.sleep(0.01);
  if (n < 3) ctx.continueAsNew(n + 1);
  return { n, generation: ctx.generation };
});

test("continue-as-new starts the run over with a new argument", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [counter] });
  const id = await client().start(counter, 0, { queue: qs[0] });
  assert.deepEqual(await client().result(id, { timeout: 20 }), { n: 3, generation: 3 });
});

const cleanups: string[] = [];
const cleanup = activity("cleanup", async (what: string) => { cleanups.push(what); return what; });
const cancellable = workflow("cancellable", async (ctx, tag: string) => {
  try {
    await ctx.waitEvent("go");
    return "went";
  } catch (e) {
    if (!(e instanceof CancelledError)) throw e;
    await ctx.activity(cleanup, `${tag}: ${e.reason}`);
    throw e;
  }
});

test("cancellation: the workflow sees CancelledError, cleans up with an activity, the run ends CANCELLED", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [cancellable], activities: [cleanup] });
  const id = await client().start(cancellable, qs[0], { queue: qs[0] });
  await eventually(async () => kinds(await client().history(id)).includes("externalEventWaitStarted"), "the wait");
  await client().cancel(id, "changed my mind");
  await assert.rejects(client().result(id, { timeout: 20 }), RunCancelledError);
  assert.deepEqual(cleanups.filter((c) => c.startsWith(qs[0])), [`${qs[0]}: changed my mind`]);
  assert.equal((await client().get(id)).status, "CANCELLED");
});

// -- determinism helpers -------------------------------------------------------------------------

const record = activity("record", async (v: unknown) => v);
const dice = workflow("dice", async (ctx) => {
  const before = { r: ctx.random(), u: ctx.uuid(), now: ctx.now().toISOString() };
  await ctx.activity(record, before);
  await ctx.sleep(0.05);
  return { before, again: { r: ctx.random(), u: ctx.uuid() } };
});

test("ctx.random, ctx.uuid and ctx.now give the same values on replay", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [dice], activities: [record], workflowCacheSize: 0 });
  const id = await client().start(dice, null, { queue: qs[0] });
  const r = await client().result(id, { timeout: 20 });
  const h = await client().history(id);
  const recorded = JSON.parse(h.find((e) => e.activityTaskCompleted)!.activityTaskCompleted.result.json);
  assert.deepEqual(r.before, recorded);         // what replays computed is what the first run sent
  assert.match(r.before.u, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.notEqual(r.again.u, r.before.u);
  assert.ok(r.before.r >= 0 && r.before.r < 1);
});

// -- errors a user meets -------------------------------------------------------------------------

const late = workflow("late-comer", async () => "served");

test("a run of a workflow no worker has waits for one (dex.unserved lists it), and a worker that has it runs it", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [sleeper] });          // declares sleeper only (dex 1.6)
  const id = await client().start(late, null, { queue: qs[0] });
  await sleep(1000);
  assert.equal((await client().get(id)).status, "CREATED");
  const unserved = await client().sql("SELECT name, version, tasks FROM dex.unserved('0 s') WHERE queue = $1", [qs[0]]);
  assert.deepEqual(unserved.map((r) => [r.name, r.version, Number(r.tasks)]), [["late-comer", 1, 1]]);
  await startWorker(t, qs, { workflows: [late] });
  assert.equal(await client().result(id, { timeout: 20 }), "served");
});

test("an argument that is not JSON is refused before anything is sent, naming where", async () => {
  const qs = await queues();
  await assert.rejects(client().start("x", { a: [1, 2n] }, { queue: qs[0] }),
                       (e: unknown) => e instanceof NotSerializableError && /\$\.a\[1\] is a bigint/.test(e.message));
  await assert.rejects(client().sendEvent("01a21838-d12c-7200-a9c2-7f739601e8af", "e", { f: () => 1 }),
                       (e: unknown) => e instanceof NotSerializableError && /\$\.f is a function/.test(e.message));
  assert.equal((await client().list({ workflowName: "x" })).filter((r) => r.queue === qs[0]).length, 0);
});

test("every error the SDK throws is a DexError: a value it refuses before sending is InvalidArgumentError (22023)", async () => {
  const qs = await queues();
  const refused = (what: RegExp) => (e: unknown) =>
    e instanceof InvalidArgumentError && e instanceof DexError && e.sqlstate === "22023" && what.test(e.message);
  await assert.rejects(client().start(retries, "k", { queue: qs[0], executionTimeout: "5 parsecs" }),
                       refused(/^not a duration: "5 parsecs" \(use seconds, or "250ms"/));
  await assert.rejects(client().start(retries, "k", { queue: qs[0], executionTimeout: -1 }), refused(/must be positive/));
  assert.throws(() => workflow("", async () => null), refused(/^a workflow needs a name/));
  assert.throws(() => workflow("w", async () => null, { version: 0 }), refused(/version must be an integer >= 1, not 0/));
  assert.throws(() => new Worker({}), refused(/^a worker needs at least one workflow or activity queue/));
  await assert.rejects(new Worker({ workflowQueues: [qs[0]], workflows: [retries], logger: quiet,
                                    connection: "postgresql://nobody@localhost:1/none?connect_timeout=2" }).start(),
                       (e: unknown) => e instanceof ConnectionFailedError && e instanceof DexError);
  // the server's refusal of a value is the same class
  await assert.rejects(client().start(retries, "k", { queue: qs[0], version: 0 }),
                       (e: unknown) => e instanceof InvalidArgumentError && e.sqlstate === "22023");
});

const badArg = workflow("bad-arg", async (ctx) => {
  try {
    ctx.activity(record, { m: new Map() });
  } catch (e) {
    return (e as Error).constructor.name + ": " + (e as Error).message;
  }
  return "sent";
});

test("workflow code gets NotSerializableError for an activity argument that is not JSON", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [badArg], activities: [record] });
  const id = await client().start(badArg, null, { queue: qs[0] });
  assert.equal(await client().result(id, { timeout: 20 }),
               "NotSerializableError: the argument of activity 'record' is not JSON-serializable: $.m is a Map object");
});

test("client errors are typed: an unknown run is NotFoundError, a wait that ends first WaitTimeoutError", async (t) => {
  const qs = await queues();
  await assert.rejects(client().get("01a21838-d12c-7200-a9c2-000000000000"), NotFoundError);
  const id = await client().start(approval, 60, { queue: qs[0] });
  await assert.rejects(client().result(id, { timeout: 0.2 }), WaitTimeoutError);
  void t;
});

// -- the worker's limits, the client's lists ---------------------------------------------------

let running = 0, most = 0;
const busy = activity("busy", async () => {
  running++;
  most = Math.max(most, running);
  await sleep(100);
  running--;
  return most;
});
const crowd = workflow("crowd", async (ctx, n: number) => ctx.all(Array.from({ length: n }, () => ctx.activity(busy))));

test("a worker runs at most `concurrency` activities at once", async (t) => {
  const qs = await queues();
  running = 0;
  most = 0;
  await startWorker(t, qs, { workflows: [crowd], activities: [busy], concurrency: 3 });
  const id = await client().start(crowd, 9, { queue: qs[0] });
  const r: number[] = await client().result(id, { timeout: 30 });
  assert.equal(r.length, 9);
  assert.equal(most, 3);
});

const unknownActivity = workflow("unknown-activity", async (ctx) => {
  try {
    await ctx.activity("no-such-activity", null, { retry: { maxAttempts: 2, initialDelay: 0.01 } });
    return "ran";
  } catch (e) {
    return (e as ActivityError).type + " " + (e as ActivityError).attempts;
  }
});

test("an activity no worker has waits for one (dex.unserved lists it), and is not failed as unknown", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [unknownActivity], activities: [] });
  const id = await client().start(unknownActivity, null, { queue: qs[0] });
  await eventually(async () => (await client().sql("SELECT 1 FROM dex.unserved('0 s') WHERE queue = $1 AND name = 'no-such-activity'",
                                                   [qs[1]])).length === 1, "the activity shown unserved");
  assert.equal((await client().get(id)).status, "RUNNING");
  const noSuch = activity("no-such-activity", () => "here");
  await startWorker(t, qs, { workflowQueues: [], activities: [noSuch] });
  assert.equal(await client().result(id, { timeout: 20 }), "ran");
});

test("startMany starts one run per argument; list finds them; formatHistory prints a run's events", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [square] });
  const ids = await client().startMany(square, [1, 2, 3], { queue: qs[0], labels: { batch: qs[0] } });
  assert.equal(ids.length, 3);
  assert.deepEqual(await Promise.all(ids.map((id) => client().result(id, { timeout: 20 }))), [1, 4, 9]);
  const listed = await client().list({ labels: { batch: qs[0] }, status: "COMPLETED" });
  assert.deepEqual(listed.map((r) => r.id).sort(), [...ids].sort());
  assert.ok(listed.every((r) => r.done && r.workflowName === "square"));
  const table = await client().formatHistory(ids[1]!);
  assert.match(table, /^seq \| at +\| event +\| id \| details/);
  assert.match(table, /runCompleted +\| +\| result=4/);
});

const failing = activity("failing", async () => { throw new NonRetryableError("no"); });
const lateAwait = workflow("late-await", async (ctx) => {
  const both = ctx.all([ctx.activity(failing), ctx.activity(tick)]);
  await ctx.sleep(0.3);                              // both fails meanwhile, awaited only now
  try {
    await both;
    return "no failure";
  } catch (e) {
    return (e as ActivityError).activityName;
  }
});

test("ctx.all failing before it is awaited is no unhandled rejection: the workflow gets the failure when it awaits", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [lateAwait], activities: [failing, tick] });
  const id = await client().start(lateAwait, null, { queue: qs[0] });
  assert.equal(await client().result(id, { timeout: 20 }), "failing");
});

const givesAMap = activity("gives-a-map", () => ({ ids: new Map([[1, 2]]) }));
const mapFlow = workflow("map-flow", async (ctx) => {
  try {
    await ctx.activity(givesAMap, null, { retry: { maxAttempts: 5, initialDelay: 0.01 } });
    return "ran";
  } catch (e) {
    const err = e as ActivityError;
    return { type: err.type, attempts: err.attempts, message: err.failure.message, terminal: err.failure.terminal };
  }
});

test("an activity result that is not JSON fails the activity for good, naming where", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [mapFlow], activities: [givesAMap] });
  const id = await client().start(mapFlow, null, { queue: qs[0] });
  assert.deepEqual(await client().result(id, { timeout: 20 }), {
    type: "TypeError", attempts: 1, terminal: true,
    message: "the result of activity 'gives-a-map' is not JSON-serializable: $.ids is a Map object" });
});

test("server errors are typed by SQLSTATE: AlreadyExists, AlreadyActive, InvalidState, InvalidArgument (with the hint)", async (t) => {
  const qs = await queues();
  await assert.rejects(client().createQueue(qs[0], "workflow", { existOk: false }),
                       (e: unknown) => e instanceof AlreadyExistsError && e.sqlstate === "42710");
  assert.equal(await client().createQueue(qs[0], "workflow"), false);
  await assert.rejects(client().createQueue(`${qs[0]}-x`, "bogus" as "workflow"),
                       (e: unknown) => e instanceof InvalidArgumentError && e.sqlstate === "22023" &&
                         /invalid queue kind/.test(e.message) && /"workflow" or "activity"/.test(e.hint ?? ""));
  await client().start(approval, 60, { queue: qs[0], instanceId: `order-${qs[0]}` });
  await assert.rejects(client().start(approval, 60, { queue: qs[0], instanceId: `order-${qs[0]}` }),
                       (e: unknown) => e instanceof AlreadyActiveError && e.sqlstate === "23505");
  await startWorker(t, qs, { workflows: [square] });
  const done = await client().start(square, 3, { queue: qs[0] });
  assert.equal(await client().result(done, { timeout: 20 }), 9);
  await assert.rejects(client().sendEvent(done, "late", 1), (e: unknown) => e instanceof InvalidStateError && e.sqlstate === "55000");
});

// -- ctx.publish (dex 1.10) --------------------------------------------------------------------

let stepRuns = 0;
const pubStep = activity("pub-step", async (n: number) => { stepRuns += 1; return n + 1; });
const pubOrder = workflow("pub-order", async (ctx, n: number) => {
  ctx.publish("order.received", { n });
  let m = await ctx.activity(pubStep, n);       // replays: the publish above is not sent again
  ctx.publish("order.stepped", new Uint8Array([0, 1]));
  m = await ctx.activity(pubStep, m);
  ctx.publish("order.done");
  return m;
});

test("ctx.publish records each event once in the history, with its payload, whatever the replays", async (t) => {
  const qs = await queues();
  stepRuns = 0;
  await startWorker(t, qs, { workflows: [pubOrder], activities: [pubStep] });
  const id = await client().start(pubOrder, 1, { queue: qs[0] });
  assert.equal(await client().result(id, { timeout: 20 }), 3);
  const history = await client().history(id);
  const published = history.filter((e) => e.eventPublished).map((e) => e.eventPublished as Record<string, unknown>);
  assert.deepEqual(published.map((p) => p.name), ["order.received", "order.stepped", "order.done"]);
  assert.deepEqual(published[0].payload, { json: '{"n":1}' });
  assert.deepEqual(published[1].payload, { binary: "AAE=" });
  assert.equal(published[2].payload, undefined);
  assert.equal(kinds(history).filter((k) => k === "workflowTaskCompleted").length, 3);
  assert.equal(stepRuns, 2);
});
