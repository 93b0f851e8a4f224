/**
 * Schedules (dex 1.7) through the Client: create, read, list, next times, alter, pause,
 * unpause, trigger, backfill, delete, typed errors that change nothing; a schedule fired by the
 * server with a worker running its workflow; startMany's per-run options.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { workflow, AlreadyExistsError, InvalidArgumentError, NotFoundError } from "./sdk.js";
import { client, eventually, queues, sql, startWorker } from "./helpers.js";

const report = workflow("ts-report", async (_ctx, arg: { kind: string }) => `report ${arg.kind}`);

function scheduleName(): string {
  return `ts-sched-${randomUUID().slice(0, 8)}`;
}

async function runsOf(name: string): Promise<Array<{ id: string; status: string }>> {
  return (await sql("SELECT id::text, status FROM dex.runs WHERE labels->>'dex.schedule' = $1 ORDER BY id", [name])).rows;
}

test("a schedule is created, read, listed and its next times computed", async (t) => {
  const [wf] = await queues();
  const name = scheduleName();
  t.after(() => sql("DELETE FROM dex.schedule WHERE name LIKE $1", [name + "%"]));
  const next = await client().createSchedule(name, report, {
    queue: wf, cron: "30 2 * * *", timezone: "Europe/Berlin", argument: { kind: "daily" }, labels: { team: "ops" },
  });
  assert.ok(next instanceof Date && next.getTime() > Date.now());
  const s = await client().getSchedule(name);
  assert.equal(s.workflowName, "ts-report");
  assert.equal(s.workflowVersion, 1);
  assert.equal(s.queue, wf);
  assert.equal(s.cron, "30 2 * * *");
  assert.equal(s.everySeconds, null);
  assert.equal(s.timezone, "Europe/Berlin");
  assert.equal(s.overlap, "skip");
  assert.equal(s.catchupWindowSeconds, 60);
  assert.deepEqual(s.argument, { kind: "daily" });
  assert.deepEqual(s.labels, { team: "ops" });
  assert.equal(s.paused, false);
  assert.equal(s.nextFireAt?.getTime(), next.getTime());
  assert.equal(s.runsStarted, 0);
  assert.equal(s.lastRunId, null);
  const times = await client().scheduleNextTimes(name, 3);
  assert.equal(times.length, 3);
  assert.equal(times[0]!.getTime(), next.getTime());
  for (const x of times) assert.equal(x.getUTCMinutes(), 30);
  for (let i = 1; i < 3; i++) {
    const hours = (times[i]!.getTime() - times[i - 1]!.getTime()) / 3600e3;
    assert.ok(hours >= 23 && hours <= 25, String(hours));
  }
  await client().createSchedule(name + "-b", "ts-sync", { queue: wf, every: "5m", overlap: "buffer_one", paused: true });
  const b = await client().getSchedule(name + "-b");
  assert.equal(b.everySeconds, 300);
  assert.equal(b.cron, null);
  assert.equal(b.paused, true);
  assert.equal(b.nextFireAt, null);
  assert.deepEqual((await client().listSchedules({ queue: wf })).map((x) => x.name), [name, name + "-b"]);
  assert.deepEqual((await client().listSchedules({ queue: wf, paused: true })).map((x) => x.name), [name + "-b"]);
  assert.deepEqual((await client().listSchedules({ workflowName: "ts-report", queue: wf })).map((x) => x.name), [name]);
});

test("alter, pause, unpause, trigger, backfill and delete a schedule", async (t) => {
  const [wf] = await queues();
  const name = scheduleName();
  t.after(() => sql("DELETE FROM dex.schedule WHERE name = $1", [name]));
  await client().createSchedule(name, report, { queue: wf, cron: "@daily", startAt: new Date("2030-01-01T00:00:00Z") });
  await client().alterSchedule(name, { every: "1h", jitter: 5, overlap: "allow_all" });
  let s = await client().getSchedule(name);
  assert.equal(s.cron, null);
  assert.equal(s.everySeconds, 3600);
  assert.equal(s.jitterSeconds, 5);
  assert.equal(s.overlap, "allow_all");
  assert.equal(s.startAt?.toISOString(), "2030-01-01T00:00:00.000Z");
  // null removes startAt; what is not given stays
  await client().alterSchedule(name, { startAt: null, argument: { kind: "hourly" } });
  s = await client().getSchedule(name);
  assert.equal(s.startAt, null);
  assert.equal(s.everySeconds, 3600);
  assert.deepEqual(s.argument, { kind: "hourly" });
  await client().pauseSchedule(name, "migration INC-42");
  s = await client().getSchedule(name);
  assert.equal(s.paused, true);
  assert.equal(s.note, "migration INC-42");
  assert.equal(s.nextFireAt, null);
  const next = await client().unpauseSchedule(name);
  assert.ok(next instanceof Date);
  assert.equal((await client().getSchedule(name)).paused, false);
  // trigger: a run now, labelled with the schedule
  const runId = await client().triggerSchedule(name);
  assert.ok(runId);
  const run = await client().get(runId);
  assert.equal(run.labels["dex.schedule"], name);
  assert.deepEqual(run.argument, { kind: "hourly" });
  s = await client().getSchedule(name);
  assert.equal(s.lastRunId, runId);
  assert.equal(s.lastRunStatus, "CREATED");
  assert.equal(s.runsStarted, 1);
  // skip while it is active
  assert.equal(await client().triggerSchedule(name, "skip"), null);
  const ticks = await client().backfillSchedule(name, new Date("2029-01-01T00:00:00Z"), new Date("2029-01-01T03:00:00Z"));
  assert.deepEqual(ticks.map((x) => x.tick.toISOString()),
                   ["2029-01-01T00:00:00.000Z", "2029-01-01T01:00:00.000Z", "2029-01-01T02:00:00.000Z"]);
  assert.ok(ticks.every((x) => x.runId));
  assert.equal((await runsOf(name)).length, 4);
  await client().deleteSchedule(name);
  await assert.rejects(client().getSchedule(name), NotFoundError);
  await assert.rejects(client().deleteSchedule(name), NotFoundError);
  assert.equal((await runsOf(name)).length, 4);     // its runs go on
});

test("bad input is refused with a typed error and changes nothing", async (t) => {
  const [wf] = await queues();
  const name = scheduleName();
  t.after(() => sql("DELETE FROM dex.schedule WHERE name LIKE $1", [name + "%"]));
  await client().createSchedule(name, report, { queue: wf, cron: "@hourly" });
  const before = await client().getSchedule(name);
  await assert.rejects(client().createSchedule(name + "-x", report, { queue: wf, cron: "*/5 * 32 * *" }),
                       (e: unknown) => e instanceof InvalidArgumentError && /day of month/.test(String((e as InvalidArgumentError).detail)));
  await assert.rejects(client().createSchedule(name + "-x", report, { queue: wf }), InvalidArgumentError);
  await assert.rejects(client().createSchedule(name, report, { queue: wf, cron: "@daily" }), AlreadyExistsError);
  await assert.rejects(client().createSchedule(name + "-x", report, { queue: "nope-" + name, cron: "@daily" }), NotFoundError);
  await assert.rejects(client().alterSchedule(name, { timezone: "Mars/Olympus" }), InvalidArgumentError);
  await assert.rejects(client().alterSchedule(name, { overlap: "sometimes" as never }), InvalidArgumentError);
  await assert.rejects(client().alterSchedule(name, { every: "1 fortnight" }), InvalidArgumentError);
  await assert.rejects(client().triggerSchedule(name, "sometimes" as never), InvalidArgumentError);
  await assert.rejects(client().scheduleNextTimes(name, 0), InvalidArgumentError);
  await assert.rejects(client().pauseSchedule(name + "-x"), NotFoundError);
  await assert.rejects(client().unpauseSchedule(name + "-x"), NotFoundError);
  await assert.rejects(client().triggerSchedule(name + "-x"), NotFoundError);
  assert.deepEqual(await client().getSchedule(name), before);
  assert.deepEqual((await client().listSchedules({ queue: wf })).map((x) => x.name), [name]);
  assert.equal((await runsOf(name)).length, 0);
});

test("the server fires a schedule and a worker runs what it started", async (t) => {
  const qs = await queues();
  const name = scheduleName();
  t.after(() => sql("DELETE FROM dex.schedule WHERE name = $1", [name]));
  await startWorker(t, qs, { workflows: [report] });
  await client().createSchedule(name, report, { queue: qs[0], every: 1, argument: { kind: "tick" } });
  await eventually(async () => (await runsOf(name)).some((r) => r.status === "COMPLETED"), "a completed run of the schedule");
  const done = (await runsOf(name)).find((r) => r.status === "COMPLETED")!;
  assert.equal(await client().result(done.id), "report tick");
  await client().pauseSchedule(name);
});

test("startMany takes per-run instance ids, priorities, labels and start times", async () => {
  const [wf] = await queues();
  const tag = randomUUID().slice(0, 8);
  const first = await client().start("batch", 0, { queue: wf, instanceId: `${tag}-a` });
  const later = new Date(Date.now() + 3600e3);
  const rows = await client().startManyRows("batch", [1, 2, 3], {
    queue: wf, labels: { batch: tag }, priority: 1,
    instanceIds: [`${tag}-a`, `${tag}-b`, null], priorities: [null, 7, undefined],
    runLabels: [null, { special: "yes" }, null], startTimes: [null, null, later],
    concurrencyKeys: [null, "k", null],
  });
  assert.deepEqual(rows.map((r) => r.created), [false, true, true]);
  assert.equal(rows[0]!.id, first);        // the active run of the instance id
  const b = await client().get(rows[1]!.id);
  assert.equal(b.priority, 7);
  assert.deepEqual(b.labels, { special: "yes" });
  assert.equal(b.instanceId, `${tag}-b`);
  assert.equal(b.concurrencyKey, "k");
  const c = await client().get(rows[2]!.id);
  assert.equal(c.priority, 1);
  assert.deepEqual(c.labels, { batch: tag });
  assert.equal(c.status, "DELAYED");
  assert.equal((await client().startMany("batch", [4], { queue: wf })).length, 1);
  await assert.rejects(client().startMany("batch", [5, 6], { queue: wf, priorities: [1] }), InvalidArgumentError);
});
