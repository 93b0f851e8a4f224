/** The worker: crashes, shutdown, heartbeats, lost leases, the workflow cache, non-determinism. */
import assert from "node:assert/strict";
import { type TestContext, test } from "node:test";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { activity, workflow, replay, ApplicationError, LeaseLost, NotFoundError, QueueKindError, Worker, WrongKindError, commandKind, eventKind, type Message } from "./sdk.js";
import { client, eventually, failedWorkflowTask, kinds, queues, sleep, sql, startWorker } from "./helpers.js";
import { activityLog, exited, lines, output, spawnTsWorker, waitForLine } from "./proc.js";
import { order, step } from "./fixtures/crashflows.js";

test("a worker killed with SIGKILL mid-run is replaced, and no completed activity runs again", async (t) => {
  const qs = await queues();
  const log = activityLog();
  const proc = spawnTsWorker(qs);
  const id = await client().start(order, { seconds: 2.0 }, { queue: qs[0] });
  await waitForLine(log, "start c 1", proc);
  proc.kill("SIGKILL");                              // in the middle of activity c
  await exited(proc, 10000);
  await startWorker(t, qs, { workflows: [order], activities: [step], activityLease: 1 });
  assert.deepEqual(await client().result(id, { timeout: 30 }), ["a", "b", "c", "d"]);
  const ls = lines(log);
  assert.equal(ls.filter((l) => l === "done a 1").length, 1);
  assert.equal(ls.filter((l) => l === "done b 1").length, 1);
  assert.ok(!ls.includes("done c 1"), ls.join(", "));
  assert.equal(ls.filter((l) => l === "done c 2").length, 1);
  assert.deepEqual(ls.filter((l) => l.startsWith("start d")), ["start d 1"]);
  const completed = (await client().history(id)).filter((e) => e.activityTaskCompleted).map((e) => e.activityTaskCompleted.attempt);
  assert.deepEqual(completed, [1, 1, 2, 1]);
});

test("SIGTERM: the worker stops leasing, lets the running activity finish and report, and exits 0", async (t) => {
  const qs = await queues();
  const log = activityLog();
  const proc = spawnTsWorker(qs, 10);
  const id = await client().start(order, { seconds: 1.0 }, { queue: qs[0] });
  await waitForLine(log, "start c 1", proc);
  const t0 = Date.now();
  proc.kill("SIGTERM");
  assert.equal(await exited(proc, 15000), 0, output(proc));
  assert.ok(Date.now() - t0 < 10000);
  assert.ok(lines(log).includes("done c 1"));
  assert.match(output(proc), /stopped .*"activitiesCompleted":3/);
  // c was reported before the worker left: nothing is redone
  await startWorker(t, qs, { workflows: [order], activities: [step] });
  assert.deepEqual(await client().result(id, { timeout: 30 }), ["a", "b", "c", "d"]);
  assert.equal(lines(log).filter((l) => l.startsWith("start c")).length, 1);
});

test("SIGTERM on an idle worker ends its long polls at once", async () => {
  const qs = await queues();
  const proc = spawnTsWorker(qs, 10);
  await sleep(1500);                                 // started, and in its long polls by now
  assert.equal(proc.exitCode, null, output(proc));
  const t0 = Date.now();
  proc.kill("SIGTERM");
  assert.equal(await exited(proc, 10000), 0, output(proc));
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  // dex.stop_waiting ended them as at their timeout: no cancel, so nothing in the server's log
  const workerId = /worker (\S+) starting/.exec(output(proc))?.[1];
  assert.ok(workerId, output(proc));
  if (process.env.DEX_LOG) {
    const logged = readFileSync(process.env.DEX_LOG, "utf8").split("\n").filter((l) => l.includes(workerId) && /ERROR|FATAL/.test(l));
    assert.deepEqual(logged, []);
  }
});

const quiet = { info() {}, warn() {}, error() {} };

test("a worker on a queue that does not exist stops: run() rejects with NotFoundError saying how to create it", async () => {
  const missing = `no-such-queue-${Date.now()}`;
  const w = new Worker({ workflowQueues: [missing], workflows: [oneStep], pollTimeout: 5, logger: quiet });
  const t0 = Date.now();
  await assert.rejects(w.run(), (e: unknown) => e instanceof NotFoundError && e.sqlstate === "42704" && e.cause !== undefined &&
    e.message === `workflow queue '${missing}': queue "${missing}" does not exist (SQLSTATE 42704); ` +
                  `create it first: SELECT dex.create_queue('${missing}', 'workflow')`);
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
});

test("a queue given as the other kind stops the worker: QueueKindError says which kind it is", async () => {
  const qs = await queues();
  const w = new Worker({ workflowQueues: [qs[1]], workflows: [oneStep], pollTimeout: 5, logger: quiet });
  await assert.rejects(w.run(), (e: unknown) => e instanceof QueueKindError && e instanceof WrongKindError && e.sqlstate === "22023" &&
    e.message.includes(`workflow queue '${qs[1]}'`) && /it is an activity queue: give it in activityQueues$/.test(e.message));
  const a = new Worker({ activityQueues: [qs[0]], activities: [one], pollTimeout: 5, logger: quiet });
  await assert.rejects(a.run(), (e: unknown) => e instanceof QueueKindError && /it is a workflow queue/.test(e.message));
});

let gate: () => void = () => {};
const holdOn = activity("hold-on", async (ms: number, actx) => {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    await sleep(50);
    actx.heartbeat();
  }
  return actx.info.attempt;
});
const holder = workflow("holder", async (ctx, ms: number) => ctx.activity(holdOn, ms));

test("heartbeats keep the lease of an activity that runs longer than it", async (t) => {
  const qs = await queues();
  const w = await startWorker(t, qs, { workflows: [holder], activities: [holdOn], activityLease: 1 });
  const id = await client().start(holder, 3000, { queue: qs[0] });
  assert.equal(await client().result(id, { timeout: 30 }), 1);
  assert.equal(w.stats.leasesLost, 0);
});

const seen: unknown[] = [];
const abandoned = activity("abandoned", async (_: null, actx) => {
  await new Promise<void>((resolve) => actx.signal.addEventListener("abort", () => resolve()));
  seen.push(actx.signal.reason?.constructor?.name, actx.leaseLost);
  try {
    actx.heartbeat();
  } catch (e) {
    seen.push(e instanceof LeaseLost);
  }
  return "late";
});
const abandoner = workflow("abandoner", async (ctx) => ctx.activity(abandoned, null));

test("a lost lease (the run was terminated) aborts the activity's signal and heartbeat() throws LeaseLost", async (t) => {
  const qs = await queues();
  const w = await startWorker(t, qs, { workflows: [abandoner], activities: [abandoned], activityLease: 1 });
  const id = await client().start(abandoner, null, { queue: qs[0] });
  await eventually(async () => kinds(await client().history(id)).includes("activityTaskCreated"), "the activity");
  await sleep(300);
  await client().terminate(id, "enough");
  await eventually(() => seen.length === 3, "the activity to see its lease lost");
  assert.deepEqual(seen, ["LeaseLost", true, true]);
  await eventually(() => w.stats.leasesLost >= 1, "the outcome to be discarded");
  assert.equal((await client().get(id)).status, "TERMINATED");
});

const stubborn = activity("stubborn", async (ms: number, actx) => {
  if (actx.info.attempt === 1) await sleep(ms);       // ignores the shutdown
  return actx.info.attempt;
}, { retry: { initialDelay: 0.05 } });
const stubbornFlow = workflow("stubborn-flow", async (ctx) => ctx.activity(stubborn, 4000));

test("shutdown fails an activity still running after the timeout as retryable, and another worker retries it", async (t) => {
  const qs = await queues();
  const w = await startWorker(t, qs, { workflows: [stubbornFlow], activities: [stubborn] });
  const id = await client().start(stubbornFlow, null, { queue: qs[0] });
  await eventually(async () => kinds(await client().history(id)).includes("activityTaskCreated"), "the activity");
  await sleep(300);
  const t0 = Date.now();
  await w.shutdown(0.3);
  assert.ok(Date.now() - t0 < 3000, `shutdown took ${Date.now() - t0} ms`);
  await startWorker(t, qs, { workflows: [stubbornFlow], activities: [stubborn] });
  assert.equal(await client().result(id, { timeout: 20 }), 2);
  const attempts = await sqlAttempts(id);
  assert.ok(attempts.some((a) => a.failure?.type === "dex.WorkerShutdown"), JSON.stringify(attempts));
});

async function sqlAttempts(runId: string): Promise<Array<{ outcome: string; failure: Message | null }>> {
  return (await sql("SELECT outcome, failure FROM dex.run_attempts($1) WHERE task = 'activity'", [runId])).rows;
}

// -- the workflow cache and replay -----------------------------------------------------------------

const fanout = workflow("fanout", async (ctx, n: number) => {
  const parts = await ctx.all(Array.from({ length: n }, (_, i) => ctx.activity(step, { name: `p${i}` })));
  const pick = ctx.sideEffect(() => parts.length * 10, "pick");
  await ctx.sleep(0.05);
  const w = ctx.waitEvent("maybe", { timeout: 0.1 });
  const got = await w.then(() => "event", () => "timeout");
  const last = await ctx.activity(step, { name: `last${pick}` });
  return { parts, got, last, at: ctx.uuid() };
});

const EVENT_COMMAND: Record<string, string> = {
  activityTaskCreated: "scheduleActivity", timerCreated: "startTimer", timerCancelled: "cancelTimer",
  externalEventWaitStarted: "waitExternalEvent", sideEffectExecuted: "recordSideEffect", runCompleted: "completeRun",
};

function commandsOf(history: Message[]): string[] {
  return history.filter((e) => e.id).map((e) => {
    const k = eventKind(e);
    return `${e.id}:${k}:${e[k].name ?? e[k].eventId ?? ""}`;
  });
}

for (const wire of ["protobuf", "json"] as const) test(`${wire}: a run with the workflow cache and one replayed from scratch at every task give the same commands`, async (t) => {
  activityLog();
  const cached = await queues(), uncached = await queues();
  const wc = await startWorker(t, cached, { workflows: [fanout], activities: [step], wire });
  const wu = await startWorker(t, uncached, { workflows: [fanout], activities: [step], workflowCacheSize: 0, wire });
  assert.equal(wc.wire, wire);
  const a = await client().start(fanout, 3, { queue: cached[0] });
  const b = await client().start(fanout, 3, { queue: uncached[0] });
  const ra = await client().result(a, { timeout: 30 }), rb = await client().result(b, { timeout: 30 });
  assert.deepEqual({ ...ra, at: 0 }, { ...rb, at: 0 });
  const ha = await client().history(a), hb = await client().history(b);
  assert.deepEqual(commandsOf(ha), commandsOf(hb));
  assert.ok(wc.stats.cacheHits >= 3 && wc.stats.fullReplays === 1, JSON.stringify(wc.stats));
  assert.ok(wu.stats.cacheHits === 0 && wu.stats.fullReplays >= 4, JSON.stringify(wu.stats));
  // and replaying the cached run's history offline, task by task, gives what each task recorded
  const starts = ha.map((e, i) => (eventKind(e) === "workflowTaskStarted" ? i : -1)).filter((i) => i >= 0);
  for (const s of starts) {
    const end = ha.findIndex((e, i) => i > s && eventKind(e) === "workflowTaskCompleted");
    const task = { runId: a, workflowName: "fanout", workflowVersion: 1, queue: cached[0],
                   history: ha.slice(0, s), newEvents: ha.slice(s, end), historyLength: s };
    const cmds = await replay(task, fanout, [step], cached[1]);
    const next = ha.findIndex((e, i) => i > end && eventKind(e) === "workflowTaskStarted");
    const recorded = ha.slice(end + 1, next < 0 ? ha.length : next).filter((e) => EVENT_COMMAND[eventKind(e)]);
    assert.deepEqual(cmds.map((c) => `${c.id ?? ""}:${commandKind(c)}`),
                     recorded.map((e) => `${e.id ?? ""}:${EVENT_COMMAND[eventKind(e)]}`));
  }
});

let variant = "a";
let started: () => void = () => {};
const ndStep = activity("nd-step", async () => {
  started();
  await new Promise<void>((resolve) => { gate = resolve; });
  return 1;
});
const ndOther = activity("nd-other", async () => 2);
const changing = workflow("changing", async (ctx) => {
  if (variant === "a") await ctx.activity(ndStep);
  else await ctx.activity(ndOther);
  return "done";
});
const strict = workflow("changing-strict", changing.fn, { nonDeterminismFailsRun: true });

async function deployChange(t: TestContext, def: typeof changing): Promise<[string, string[]]> {
  const qs = await queues();
  variant = "a";
  const running = new Promise<void>((resolve) => { started = resolve; });
  await startWorker(t, qs, { workflows: [def], activities: [ndStep, ndOther], workflowCacheSize: 0 });
  const id = await client().start(def, null, { queue: qs[0] });
  await running;
  variant = "b";                                     // "deploy" other code mid-run
  gate();
  return [id, qs];
}

const NAMES_BOTH = /the history has activityTaskCreated 'nd-step' \(id 1\), recorded by workflow task 1, but on replay the workflow issues scheduleActivity 'nd-other' \(id 1\) in workflow task 1/;

test("non-determinism: a replay that issues another command fails the workflow task, naming both; the rollback completes the run", async (t) => {
  const [id] = await deployChange(t, changing);
  const f = await failedWorkflowTask(id);
  assert.equal(f.type, "dex.NonDeterminism");
  assert.match(f.message, NAMES_BOTH);
  assert.equal((await client().get(id)).status, "RUNNING");      // the task failed, not the run
  variant = "a";                                     // the rollback: the retried task completes it
  assert.equal(await client().result(id, { timeout: 30 }), "done");
});

let napFirst = true;
const tick = activity("tick", (n: number) => n + 1);
const napper = workflow("napper", async (ctx, n: number) => {
  if (napFirst) await new Promise((resolve) => setTimeout(resolve, 100));      // not a dex awaitable
  return ctx.activity(tick, n);
});

test("a workflow that awaits a Node timer fails its workflow task, saying so and where, instead of hanging; fixed code completes the run", async (t) => {
  const qs = await queues();
  napFirst = true;
  const errors: string[] = [];
  const consoleError = console.error;
  console.error = (...args: unknown[]) => { errors.push(args.map(String).join(" ")); };
  t.after(() => { console.error = consoleError; });
  await startWorker(t, qs, { workflows: [napper], activities: [tick], workflowCacheSize: 0 });
  const id = await client().start(napper, 1, { queue: qs[0] });
  const f = await failedWorkflowTask(id);
  assert.equal(f.type, "dex.NotDexAwaitable");
  assert.match(f.message, /^workflow code awaits something that is not a dex awaitable \(a timer, I\/O, or a promise that no dex awaitable settles\): workflows await only ctx.activity\(\), ctx.sleep\(\)/);
  assert.match(f.message, /never setTimeout, setImmediate or I\/O \(ctx.sleep\(\) for setTimeout\)$/);
  assert.equal((await client().get(id)).status, "CREATED");      // the task failed, not the run (it never took a step)
  // the code that went on after its task ended is said, with where: the line after the bad await
  await eventually(() => errors.some((e) => e.includes("went on after its workflow task ended")), "the late code said");
  assert.match(errors.find((e) => e.includes("went on after"))!, /at file:\/\/.*worker\.test\.js:\d+:\d+: the await before that is not a dex awaitable/);
  napFirst = false;                                  // the fix is deployed: the retried task completes the run
  assert.equal(await client().result(id, { timeout: 30 }), 2);
});

test("the stalled workflow's message names its last dex call", async () => {
  const late = workflow("late-nap", async (ctx) => {
    await ctx.sideEffect(() => 1, "one");
    await new Promise(() => {});                     // a promise nothing of dex settles
  });
  const task = { runId: "r", workflowName: "late-nap", newEvents: [
    { timestamp: "2026-01-01T00:00:00Z", workflowTaskStarted: {} }, { runCreated: { workflowName: "late-nap" } }, { runStarted: {} }] };
  await assert.rejects(replay(task, late), (e: unknown) => e instanceof Error &&
    / after its last dex call at file:\/\/.*worker\.test\.js:\d+:\d+: workflows await only/.test(e.message));
});

test("non-determinism: a workflow declared with nonDeterminismFailsRun fails its run", async (t) => {
  const [id] = await deployChange(t, strict);
  const err = await client().result(id, { timeout: 20 }).catch((e) => e);
  assert.equal(err.type, "dex.NonDeterminism");
  assert.match(err.message, NAMES_BOTH);
});

test("server restart mid-run: the worker reconnects and the run finishes, nothing done twice", async (t) => {
  const pgdata = process.env.DEX_PGDATA, bindir = process.env.PG_BINDIR;
  if (!pgdata || !bindir) {
    t.skip("DEX_PGDATA and PG_BINDIR name the cluster to restart (test/run-tests.sh sets them)");
    return;
  }
  const qs = await queues();
  const log = activityLog();
  await startWorker(t, qs, { workflows: [order], activities: [step], activityLease: 5 });
  const id = await client().start(order, { seconds: 1.5 }, { queue: qs[0] });
  await waitForLine(log, "start c 1");
  // -l: the server's output goes to its log, not to a pipe of ours (which would stay open)
  const serverLog = process.env.DEX_LOG ?? `${log}.server`;
  const r = spawnSync(`${bindir}/pg_ctl`, ["-D", pgdata, "-l", serverLog, "-m", "fast", "-w", "-t", "60", "restart"],
                      { encoding: "utf8", timeout: 90000 });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(await client().result(id, { timeout: 60 }), ["a", "b", "c", "d"]);
  const ls = lines(log);
  for (const name of ["a", "b", "d"]) assert.equal(ls.filter((l) => l.startsWith(`done ${name}`)).length, 1, ls.join(", "));
});

const one = activity("one-step", (n: number) => n + 1);
const oneStep = workflow("one-step-flow", async (ctx, n: number) => ctx.activity(one, n));

test("completions and activity results go back in batches: far fewer calls than tasks", async (t) => {
  const qs = await queues();
  const ids = await client().startMany(oneStep, Array.from({ length: 200 }, (_, i) => i), { queue: qs[0] });
  const w = await startWorker(t, qs, { workflows: [oneStep], activities: [one], concurrency: 100 });
  const results = await Promise.all(ids.map((id) => client().result(id, { timeout: 60 })));
  assert.deepEqual(results, Array.from({ length: 200 }, (_, i) => i + 1));
  await eventually(() => w.stats.workflowTasks === 400, "every workflow task's completion to be counted");
  assert.equal(w.stats.activitiesCompleted, 200);
  t.diagnostic(JSON.stringify(w.stats));
  // 400 workflow tasks and 200 activity results: batches of up to 100 (maxBatch), so a handful
  // of calls each when they come in bursts; one call per task would be 400 and 200
  assert.ok(w.stats.workflowCompletionCalls <= 40, JSON.stringify(w.stats));
  assert.ok(w.stats.activityReportCalls <= 40, JSON.stringify(w.stats));
});

const stepper = workflow("stepper", async (ctx, n: number) => {
  let total = 0;
  for (let i = 0; i < 4; i++) total += await ctx.activity(one, n + i);
  return total;
});

test("a workflow cache smaller than the runs in flight evicts states; evicted runs replay and finish right", async (t) => {
  const qs = await queues();
  const w = await startWorker(t, qs, { workflows: [stepper], activities: [one], workflowCacheSize: 2 });
  const ids = await client().startMany(stepper, [0, 10, 20, 30, 40, 50], { queue: qs[0] });
  const results = await Promise.all(ids.map((id) => client().result(id, { timeout: 60 })));
  assert.deepEqual(results, [0, 10, 20, 30, 40, 50].map((n) => 4 * n + 10));
  assert.ok(w.cachedRuns <= 2, `${w.cachedRuns} runs cached`);
  assert.ok(w.stats.fullReplays > 6, JSON.stringify(w.stats));   // more than one per run: evictions
});

// -- fewer transactions: completions ride the next poll -------------------------------------------

test("one activity slot: activity results ride the activity loop's next poll, full workflow batches the workflow loop's", async (t) => {
  const qs = await queues();
  const ids = await client().startMany(oneStep, Array.from({ length: 20 }, (_, i) => i), { queue: qs[0] });
  const w = await startWorker(t, qs, { workflows: [oneStep], activities: [one], concurrency: 1, maxBatch: 1, pollTimeout: 1 });
  const results = await Promise.all(ids.map((id) => client().result(id, { timeout: 60 })));
  assert.deepEqual(results, Array.from({ length: 20 }, (_, i) => i + 1));
  await eventually(() => w.stats.workflowTasks === 40 && w.stats.activitiesCompleted === 20, "every completion to be counted");
  t.diagnostic(JSON.stringify(w.stats));
  // the activity loop's CALLs completed the results (the slot was busy when each activity
  // ended): the reporter sent none, or hardly any
  assert.ok(w.stats.activityReportCalls <= 2, JSON.stringify(w.stats));
  assert.ok(w.stats.activityCompletionsInPoll >= 18, JSON.stringify(w.stats));
  assert.ok(w.stats.activityCompletionsInPoll <= w.stats.activitiesCompleted, JSON.stringify(w.stats));
  // every batch of the workflow loop was full (maxBatch 1), and each was completed by the CALL
  // that leased the next: none by a dex.complete_tasks of its own
  assert.equal(w.stats.workflowCompletionsInPoll, 40, JSON.stringify(w.stats));
  assert.equal(w.stats.workflowCompletionCalls, 40, JSON.stringify(w.stats));
  assert.equal(w.stats.leasesLost, 0);
});

const refuses = activity("refuses", () => {
  throw new ApplicationError("refused", { type: "Refused" });
}, { retry: { maxAttempts: 1 } });
const refusing = workflow("refusing", async (ctx) => ctx.activity(refuses, null));

test("one activity slot: a failed activity goes to the reporter (dex.fail_tasks), not with the poll", async (t) => {
  const qs = await queues();
  const w = await startWorker(t, qs, { workflows: [refusing], activities: [refuses], concurrency: 1, pollTimeout: 1 });
  const id = await client().start(refusing, null, { queue: qs[0] });
  const err = await client().result(id, { timeout: 30 }).catch((e) => e);
  assert.match(String(err?.message), /refused/);
  assert.equal((await client().get(id)).status, "FAILED");
  await eventually(() => w.stats.activitiesFailed === 1, "the failure to be counted");
  assert.equal(w.stats.activityReportCalls, 1, JSON.stringify(w.stats));
  assert.equal(w.stats.activityCompletionsInPoll, 0, JSON.stringify(w.stats));
  assert.equal(w.stats.activitiesCompleted, 0, JSON.stringify(w.stats));
});

let openGate: () => void = () => {};
let gateReached: () => void = () => {};
const gated = activity("gated", async () => {
  await new Promise<void>((resolve) => {
    openGate = resolve;
    gateReached();
  });
  return "late";
});
const gatedFlow = workflow("gated-flow", async (ctx) => ctx.activity(gated, null));

/** A worker with one activity slot, a run of gated-flow whose activity waits for openGate(), the activity queue. */
async function gatedRun(t: TestContext, pollTimeout: number): Promise<[Worker, string, string]> {
  const qs = await queues();
  const reached = new Promise<void>((resolve) => { gateReached = resolve; });
  const w = await startWorker(t, qs, { workflows: [gatedFlow], activities: [gated], concurrency: 1, pollTimeout, logger: quiet });
  const id = await client().start(gatedFlow, null, { queue: qs[0] });
  await reached;
  return [w, id, qs[1]];
}

test("one activity slot: a result handed to the poll after its lease was lost (the run was terminated) is discarded, once", async (t) => {
  const [w, id] = await gatedRun(t, 1);
  await client().terminate(id, "enough");
  openGate();                                        // it ends now, with its lease lost
  await eventually(() => w.stats.leasesLost === 1, "the lost lease to be counted");
  await sleep(1500);                                 // a poll or two later: not sent again
  assert.equal(w.stats.leasesLost, 1, JSON.stringify(w.stats));
  // the activity loop's CALL sent it (completed = false), not the reporter
  assert.equal(w.stats.activityReportCalls, 0, JSON.stringify(w.stats));
  assert.equal(w.stats.activityCompletionsInPoll, 0, JSON.stringify(w.stats));
  assert.equal(w.stats.activitiesCompleted, 0, JSON.stringify(w.stats));
  assert.equal((await client().get(id)).status, "TERMINATED");
});

test("one activity slot: the poll's connection broken after it completed a result: the reporter sends it again, quietly", async (t) => {
  const [w, id, activityQueue] = await gatedRun(t, 10);
  openGate();
  // the CALL completed it before its wait: the run ends while the CALL still waits
  assert.equal(await client().result(id, { timeout: 30 }), "late");
  assert.equal(w.stats.activityReportCalls, 0, JSON.stringify(w.stats));
  let killed = 0;
  await eventually(async () => {
    killed = (await sql("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE $1 AND pg_terminate_backend(pid)",
                        [`%waiting for tasks on queue "${activityQueue}"%`])).rows[0].n;
    return killed === 1;
  }, "the activity loop's CALL to wait");
  // the reporter sends it again: refused as a lost lease, which is no lost lease here
  await eventually(() => w.stats.activityReportCalls === 1, "the reporter to send it again");
  assert.equal(w.stats.leasesLost, 0, JSON.stringify(w.stats));
  assert.equal(w.stats.activityCompletionsInPoll, 0, JSON.stringify(w.stats));
});

const big = activity("big", (n: number) => (n > 0 ? "x".repeat(n) : "small"));
const bigFlow = workflow("big-flow", async (ctx, n: number) => ctx.activity(big, n));

test("one activity slot: a result too large for the poll's completions (54000) goes to the reporter, which fails the activity", async (t) => {
  const qs = await queues();
  const w = await startWorker(t, qs, { workflows: [bigFlow], activities: [big], concurrency: 1, pollTimeout: 1, logger: quiet });
  const id = await client().start(bigFlow, 1100 * 1024, { queue: qs[0] });   // dex.max_payload_size is 1MB
  const err = await client().result(id, { timeout: 30 }).catch((e) => e);
  assert.match(String(err?.message), /the engine refused the activity.s result: payload is too large/);
  await eventually(() => w.stats.activitiesFailed === 1, "the refused result to be failed");
  assert.equal(w.stats.activityCompletionsInPoll, 0, JSON.stringify(w.stats));
  // the refused CALL changed nothing, and the next ones go on as before
  const next = await client().start(bigFlow, 0, { queue: qs[0] });
  assert.equal(await client().result(next, { timeout: 30 }), "small");
  await eventually(() => w.stats.activityCompletionsInPoll === 1, "the next result to ride the poll");
  assert.equal(w.stats.leasesLost, 0, JSON.stringify(w.stats));
});
