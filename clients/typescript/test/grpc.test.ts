/**
 * The gRPC API (dex.v1.DexService, docs/grpc.md) from another language: @grpc/grpc-js with the
 * .proto files loaded at run time, against `python3 -m dex serve --grpc-port` (and `python3 -m dex
 * grpc` for the pool test).  Roles, queues and tokens of this file only: a client and a worker of
 * one tenant, and another tenant with no grant on its queues.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";
import { eventually, sleep, sql } from "./helpers.js";
import { PYTHON, PYTHON_SDK } from "./proc.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const PROTO = resolve(ROOT, "proto");

const def = loader.loadSync(["dex/v1/service.proto", "grpc/health/v1/health.proto",
  "grpc/reflection/v1alpha/reflection.proto"], { includeDirs: [PROTO], longs: String, enums: String, defaults: true, oneofs: true, arrays: true });
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const pkg = grpc.loadPackageDefinition(def) as any;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Msg = any;

const tag = randomUUID().slice(0, 8);
const roles = { client: `grpc_client_${tag}`, worker: `grpc_worker_${tag}`, other: `grpc_other_${tag}`, server: `grpc_server_${tag}` };
const tokens: Record<"client" | "worker" | "other", string> = { client: "", worker: "", other: "" };
const procs = new Set<ChildProcess>();
const made: string[] = [];
let dex: Msg, health: Msg, reflection: Msg, address = "";

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => done(port));
    });
  });
}

/** Two queues of the tenant (workflow, activity), granted to its client and worker only. */
async function queues(): Promise<[string, string]> {
  const t = randomUUID().slice(0, 8);
  const wf = `grpc-wf-${t}`, act = `grpc-act-${t}`;
  made.push(wf, act);
  await sql("SELECT dex.create_queue($1, 'workflow'), dex.create_queue($2, 'activity')", [wf, act]);
  for (const q of [wf, act]) {
    for (const r of ["dex_client", "dex_worker"]) await sql("SELECT dex.revoke_queue($1, $2::regrole)", [q, r]);
    for (const r of [roles.client, roles.worker]) await sql("SELECT dex.grant_queue($1, $2::regrole)", [q, r]);
  }
  return [wf, act];
}

/** `python3 -m dex ...` (from clients/python), as the server's login role; its output kept. */
function python(args: string[]): { proc: ChildProcess; out: () => string } {
  const proc = spawn(PYTHON, ["-m", "dex", "--conninfo", `user=${roles.server}`, ...args],
    { cwd: PYTHON_SDK, env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout!.on("data", (d) => { out += d; });
  proc.stderr!.on("data", (d) => { out += d; });
  procs.add(proc);
  return { proc, out: () => out };
}

function meta(token?: string): grpc.Metadata {
  const m = new grpc.Metadata();
  if (token !== undefined) m.set("authorization", `Bearer ${token}`);
  return m;
}

/** A unary call: its answer, or the grpc.ServiceError it ended with. */
function call(client: Msg, method: string, request: Msg, token?: string, seconds = 30): Promise<Msg> {
  return new Promise((done, fail) => {
    client[method](request, meta(token), { deadline: Date.now() + seconds * 1000 },
      (err: grpc.ServiceError | null, res: Msg) => (err ? fail(err) : done(res)));
  });
}

async function refused(p: Promise<unknown>, code: grpc.status, sqlstate?: string): Promise<grpc.ServiceError> {
  try {
    await p;
  } catch (e) {
    const err = e as grpc.ServiceError;
    assert.equal(err.code, code, `${grpc.status[err.code]}: ${err.details}`);
    if (sqlstate) {
      assert.deepEqual(err.metadata.get("dex-sqlstate"), [sqlstate]);
      // google.rpc.Status with an ErrorInfo whose reason is the SQLSTATE
      const details = err.metadata.get("grpc-status-details-bin")[0] as Buffer;
      assert.ok(details.includes(Buffer.from("type.googleapis.com/google.rpc.ErrorInfo")), "ErrorInfo in the details");
      assert.ok(details.includes(Buffer.from(sqlstate)), "the SQLSTATE in the details");
    }
    return err;
  }
  assert.fail(`expected ${grpc.status[code]}`);
}

async function waitServing(client: Msg, out: () => string): Promise<void> {
  await eventually(async () => {
    try {
      return (await call(client, "Check", { service: "" }, undefined, 2)).status === "SERVING";
    } catch {
      return false;
    }
  }, `the gRPC server to serve:\n${out()}`, 30000);
}

const json = (v: unknown) => ({ json: JSON.stringify(v) });
const parse = (p: Msg) => (p?.json !== undefined ? JSON.parse(p.json) : null);
const seconds = (s: number) => ({ seconds: Math.floor(s), nanos: Math.round((s % 1) * 1e9) });
const leaseOf = (t: Msg) => (t.workflow ? { runId: t.workflow.runId, taskId: 0, lockVersion: t.workflow.lockVersion }
  : { runId: t.activity.runId, taskId: t.activity.taskId, lockVersion: t.activity.lockVersion });
const events = (w: Msg) => [...w.history, ...w.newEvents];

before(async () => {
  const r = roles;
  for (const stmt of [`CREATE ROLE ${r.client} IN ROLE dex_client`, `CREATE ROLE ${r.worker} IN ROLE dex_worker`,
    `CREATE ROLE ${r.other} IN ROLE dex_client, dex_worker`, `CREATE ROLE ${r.server} LOGIN`,
    `GRANT ${r.client}, ${r.worker}, ${r.other} TO ${r.server}`]) await sql(stmt);
  for (const k of ["client", "worker", "other"] as const) {
    tokens[k] = (await sql("SELECT dex.create_api_token($1, $2::regrole) AS t", [`grpc-${k}-${tag}`, roles[k]])).rows[0].t;
  }
  const [http, port] = [await freePort(), await freePort()];
  address = `127.0.0.1:${port}`;
  const s = python(["serve", "--listen", `127.0.0.1:${http}`, "--grpc-port", String(port), "--pool-size", "4",
    "--sample-interval", "60"]);
  dex = new pkg.dex.v1.DexService(address, grpc.credentials.createInsecure());
  health = new pkg.grpc.health.v1.Health(address, grpc.credentials.createInsecure());
  reflection = new pkg.grpc.reflection.v1alpha.ServerReflection(address, grpc.credentials.createInsecure());
  await waitServing(health, s.out);
});

after(async () => {
  for (const c of [dex, health, reflection]) c?.close();
  for (const p of procs) {
    if (p.exitCode === null && p.signalCode === null) {
      p.kill("SIGTERM");
      await new Promise((done) => { p.once("exit", done); setTimeout(done, 5000); });
    }
  }
  await sql("DELETE FROM dex.api_token WHERE name LIKE $1", [`grpc-%-${tag}`]);
  for (const q of made) {
    for (const r of [roles.client, roles.worker]) await sql("SELECT dex.revoke_queue($1, $2::regrole)", [q, r]).catch(() => {});
  }
  await sql(`DROP ROLE ${roles.server}, ${roles.client}, ${roles.worker}, ${roles.other}`).catch(() => {});
});

test("health: SERVING for the server and dex.v1.DexService, NOT_FOUND for another; reflection lists the services and serves their files", async () => {
  assert.equal((await call(health, "Check", { service: "" })).status, "SERVING");
  assert.equal((await call(health, "Check", { service: "dex.v1.DexService" })).status, "SERVING");
  await refused(call(health, "Check", { service: "no.Such" }), grpc.status.NOT_FOUND);

  const stream = reflection.ServerReflectionInfo();
  const answers: Msg[] = [];
  stream.on("data", (m: Msg) => answers.push(m));
  const ended = new Promise((done) => stream.on("end", done));
  stream.write({ listServices: "" });
  stream.write({ fileContainingSymbol: "dex.v1.DexService.PollTasks" });
  stream.write({ fileByFilename: "no/such.proto" });
  stream.end();
  await ended;
  assert.equal(answers.length, 3);
  const names = answers[0].listServicesResponse.service.map((s: Msg) => s.name);
  for (const n of ["dex.v1.DexService", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"]) {
    assert.ok(names.includes(n), `${n} in ${names}`);
  }
  const files: Buffer[] = answers[1].fileDescriptorResponse.fileDescriptorProto;
  assert.ok(files[0].includes(Buffer.from("dex/v1/service.proto")), "service.proto first");
  for (const dep of ["dex/v1/task.proto", "dex/v1/event.proto", "dex/v1/common.proto", "google/protobuf/duration.proto"]) {
    assert.ok(files.some((f) => f.subarray(0, 64).includes(Buffer.from(dep))), `${dep} with it`);
  }
  assert.equal(answers[2].errorResponse.errorCode, grpc.status.NOT_FOUND);
});

test("a worker over gRPC: poll, a heartbeat, a failed attempt retried, completions carried in long polls", async () => {
  const [wf, act] = await queues();
  const run = await call(dex, "StartRun", { workflowName: "double", queue: wf, argument: json({ n: 2 }), labels: { via: "grpc" } }, tokens.client);
  assert.equal(run.status, "RUN_STATUS_CREATED");
  assert.deepEqual(parse(run.argument), { n: 2 });

  // the workflow task: the run's start, answered with an activity
  let p = await call(dex, "PollTasks", { queue: wf, workerId: "ts-grpc", wait: seconds(5) }, tokens.worker);
  assert.equal(p.tasks.length, 1);
  const w = p.tasks[0].workflow;
  assert.equal(w.runId, run.id);
  assert.ok(events(w).some((e: Msg) => e.runCreated && parse(e.runCreated.argument).n === 2));
  await call(dex, "CompleteTask", { lease: leaseOf(p.tasks[0]), workflow: { commands: [{ id: 1, scheduleActivity: {
    name: "double", queue: act, argument: json(2), retryPolicy: { maxAttempts: 3, initialDelay: seconds(0.1), randomizationFactor: 0 },
  } }] } }, tokens.worker);

  // the activity: a heartbeat, then a retryable failure
  p = await call(dex, "PollTasks", { queue: act, workerId: "ts-grpc", wait: seconds(5), lease: seconds(30) }, tokens.worker);
  let a = p.tasks[0].activity;
  assert.equal(a.name, "double");
  assert.equal(a.attempt, 1);
  const beat = await call(dex, "Heartbeat", { lease: leaseOf(p.tasks[0]), leaseDuration: seconds(60), details: json({ done: 1 }) }, tokens.worker);
  assert.ok(Number(beat.lockedUntil.seconds) * 1000 > Date.now() + 45000, "the lease was extended");
  await call(dex, "FailTask", { lease: leaseOf(p.tasks[0]), failure: { message: "flaky", type: "Flaky" } }, tokens.worker);

  // the retry, with the failure and the heartbeat's details; completed in the next long poll
  p = await call(dex, "PollTasks", { queue: act, workerId: "ts-grpc", wait: seconds(10) }, tokens.worker);
  a = p.tasks[0].activity;
  assert.equal(a.attempt, 2);
  assert.equal(a.lastFailure.message, "flaky");
  assert.deepEqual(parse(a.heartbeatDetails), { done: 1 });
  p = await call(dex, "PollTasks", { queue: act, workerId: "ts-grpc", completions: [{ lease: leaseOf(p.tasks[0]), activity: json(4) }] }, tokens.worker);
  assert.deepEqual(p.completed, [true]);
  assert.equal(p.tasks.length, 0);

  // the workflow sees the result and completes the run, carried in its last poll
  p = await call(dex, "PollTasks", { queue: wf, workerId: "ts-grpc", wait: seconds(10) }, tokens.worker);
  const done = events(p.tasks[0].workflow).find((e: Msg) => e.activityTaskCompleted);
  assert.equal(done.activityTaskCompleted.activityTaskCreatedEventId, 1);
  assert.equal(parse(done.activityTaskCompleted.result), 4);
  const last = { lease: leaseOf(p.tasks[0]), workflow: { commands: [{ completeRun: { result: json({ doubled: 4 }) } }] } };
  p = await call(dex, "PollTasks", { queue: wf, workerId: "ts-grpc", completions: [last] }, tokens.worker);
  assert.deepEqual(p.completed, [true]);
  // the same completion again: its lease is gone, which the answer says (no error)
  p = await call(dex, "PollTasks", { queue: wf, workerId: "ts-grpc", completions: [last] }, tokens.worker);
  assert.deepEqual(p.completed, [false]);

  const got = await call(dex, "GetRun", { runId: run.id }, tokens.client);
  assert.equal(got.status, "RUN_STATUS_COMPLETED");
  assert.deepEqual(parse(got.result), { doubled: 4 });
  assert.equal(got.taskFailures ?? 0, 0);     // consecutive failed workflow tasks: none
  const attempts = (await sql("SELECT outcome FROM dex.run_attempts($1) WHERE task = 'activity' ORDER BY attempt", [run.id])).rows;
  assert.deepEqual(attempts.map((x) => x.outcome), ["FAILED", "COMPLETED"]);
  assert.deepEqual(got.labels, { via: "grpc" });
  const h = await call(dex, "GetHistory", { runId: run.id }, tokens.client);
  assert.equal(h.events.length, got.historyLength);
  assert.ok(h.events.at(-1).runCompleted);
});

test("the long poll answers when a run starts; StopWaiting ends one at once", async () => {
  const [wf] = await queues();
  const t0 = Date.now();
  const poll = call(dex, "PollTasks", { queue: wf, workerId: "ts-waiter", wait: seconds(20) }, tokens.worker);
  await sleep(300);
  const run = await call(dex, "StartRun", { workflowName: "w", queue: wf }, tokens.client);
  const p = await poll;
  assert.equal(p.tasks[0].workflow.runId, run.id);
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);

  const t1 = Date.now();
  const waiting = call(dex, "PollTasks", { queue: wf, workerId: "ts-stopper", wait: seconds(20) }, tokens.worker);
  await sleep(500);
  const stopped = await call(dex, "StopWaiting", { workerId: "ts-stopper" }, tokens.worker);
  assert.ok(stopped.stopped >= 1, `stopped ${stopped.stopped}`);
  assert.equal((await waiting).tasks.length, 0);
  assert.ok(Date.now() - t1 < 5000, `took ${Date.now() - t1} ms`);
  await call(dex, "TerminateRun", { runId: run.id, reason: "done" }, tokens.client);
});

test("PollTasksStream: each request answered in order, completions carried", async () => {
  const [wf] = await queues();
  const stream = dex.PollTasksStream(meta(tokens.worker));
  const answers: Msg[] = [];
  let wake: (() => void) | undefined;
  stream.on("data", (m: Msg) => { answers.push(m); wake?.(); });
  const ended = new Promise((done, fail) => { stream.on("end", done); stream.on("error", fail); });
  const next = async (n: number) => { while (answers.length < n) await new Promise<void>((r) => { wake = r; }); return answers[n - 1]; };

  stream.write({ queue: wf, workerId: "ts-stream" });
  assert.equal((await next(1)).tasks.length, 0);
  const run = await call(dex, "StartRun", { workflowName: "w", queue: wf, argument: json("x") }, tokens.client);
  stream.write({ queue: wf, workerId: "ts-stream", wait: seconds(10) });
  const t = (await next(2)).tasks[0];
  assert.equal(t.workflow.runId, run.id);
  stream.write({ queue: wf, workerId: "ts-stream", completions: [{ lease: leaseOf(t), workflow: { commands: [{ completeRun: { result: json("y") } }] } }] });
  assert.deepEqual((await next(3)).completed, [true]);
  stream.end();
  await ended;
  assert.equal((await call(dex, "GetRun", { runId: run.id }, tokens.client)).status, "RUN_STATUS_COMPLETED");
});

test("a SIGKILLed gRPC worker's activity is handed out again once its lease expires", async () => {
  const [wf, act] = await queues();
  const run = await call(dex, "StartRun", { workflowName: "w", queue: wf }, tokens.client);
  let p = await call(dex, "PollTasks", { queue: wf, workerId: "ts-grpc", wait: seconds(5) }, tokens.worker);
  await call(dex, "CompleteTask", { lease: leaseOf(p.tasks[0]), workflow: { commands: [{ id: 1, scheduleActivity: {
    name: "slow", queue: act, retryPolicy: { initialDelay: seconds(0.1), randomizationFactor: 0 } } }] } }, tokens.worker);

  // another process leases it for 2 s over gRPC, says so, and is killed while it holds it
  const script = `
    const grpc = require("@grpc/grpc-js"), loader = require("@grpc/proto-loader");
    const def = loader.loadSync("dex/v1/service.proto", { includeDirs: [${JSON.stringify(PROTO)}], longs: String, oneofs: true, arrays: true });
    const dex = new (grpc.loadPackageDefinition(def).dex.v1.DexService)(${JSON.stringify(address)}, grpc.credentials.createInsecure());
    const m = new grpc.Metadata(); m.set("authorization", "Bearer " + process.env.TOKEN);
    dex.PollTasks({ queue: ${JSON.stringify(act)}, workerId: "doomed", lease: { seconds: 2 }, wait: { seconds: 10 } }, m, (err, res) => {
      if (err) { console.log("error " + err.message); process.exit(1); }
      console.log("leased " + res.tasks[0].activity.runId + " attempt " + res.tasks[0].activity.attempt);
      setInterval(() => {}, 1000);
    });`;
  const child = spawn(process.execPath, ["-e", script], { cwd: resolve(ROOT, "clients/typescript"), env: { ...process.env, TOKEN: tokens.worker },
    stdio: ["ignore", "pipe", "pipe"] });
  procs.add(child);
  let out = "";
  child.stdout!.on("data", (d) => { out += d; });
  child.stderr!.on("data", (d) => { out += d; });
  await eventually(() => out.includes(`leased ${run.id} attempt 1`), `the worker to lease the activity: ${out}`, 15000);
  child.kill("SIGKILL");
  const killed = Date.now();

  p = { tasks: [] };
  while (p.tasks.length === 0 && Date.now() - killed < 30000) {
    p = await call(dex, "PollTasks", { queue: act, workerId: "ts-grpc", wait: seconds(5) }, tokens.worker);
  }
  const a = p.tasks[0]?.activity;
  assert.ok(a, "the activity was handed out again");
  assert.equal(a.runId, run.id);
  assert.equal(a.attempt, 2);
  assert.ok(Date.now() - killed >= 1000, "not before the lease expired");
  await call(dex, "CompleteTask", { lease: leaseOf(p.tasks[0]), activity: json("ok") }, tokens.worker);
  await call(dex, "TerminateRun", { runId: run.id }, tokens.client);
});

test("runs: a batch, pages, events one and many, and the lifecycle actions", async () => {
  const [wf] = await queues();
  const batch = await call(dex, "StartRuns", { workflowName: "b", queue: wf, arguments: [json(1), json(2), json(3)],
    instanceIds: ["i1", "", "i3"], labels: { batch: tag } }, tokens.client);
  assert.equal(batch.runs.length, 3);
  assert.ok(batch.runs.every((r: Msg) => r.created));
  const again = await call(dex, "StartRuns", { workflowName: "b", queue: wf, arguments: [json(9)], instanceIds: ["i1"] }, tokens.client);
  assert.equal(again.runs[0].id, batch.runs[0].id);
  assert.equal(again.runs[0].created ?? false, false);

  // keyset pages, newest first
  const seen: string[] = [];
  let cursor = "";
  for (let i = 0; i < 10; i++) {
    const page = await call(dex, "ListRuns", { queue: wf, labels: { batch: tag }, limit: 2, cursor }, tokens.client);
    seen.push(...page.runs.map((r: Msg) => r.id));
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  assert.deepEqual(seen, batch.runs.map((r: Msg) => r.id).reverse());
  assert.equal((await call(dex, "ListRuns", { queue: wf, instanceId: "i3" }, tokens.client)).runs[0].id, batch.runs[2].id);
  assert.equal((await call(dex, "ListRuns", { queue: wf, status: "COMPLETED" }, tokens.client)).runs.length, 0);

  const [r1, r2, r3] = batch.runs.map((r: Msg) => r.id);
  assert.equal((await call(dex, "SendEvent", { runId: r1, eventId: "e", payload: json({ a: 1 }) }, tokens.client)).delivered, true);
  assert.equal((await call(dex, "SendEvent", { runId: r1, eventId: "e" }, tokens.client)).delivered, false);
  const sent = await call(dex, "SendEvents", { events: [{ runId: r2, eventId: "e" }, { runId: r1, eventId: "e" },
    { runId: randomUUID(), eventId: "e" }] }, tokens.client);
  assert.deepEqual(sent.outcomes.map((o: Msg) => o.outcome), ["DELIVERED", "DUPLICATE", "TARGET_NOT_FOUND"]);

  // r2 and r3 have not started: cancelled and terminated at once
  assert.equal((await call(dex, "CancelRun", { runId: r2, reason: "no" }, tokens.client)).status, "RUN_STATUS_CANCELLED");
  assert.equal((await call(dex, "TerminateRun", { runId: r3, reason: "stop" }, tokens.client)).status, "RUN_STATUS_TERMINATED");
  const restarted = await call(dex, "RestartRun", { runId: r3 }, tokens.client);
  assert.equal(restarted.originRunId, r3);
  assert.notEqual(restarted.id, r3);
  await refused(call(dex, "SuspendRun", { runId: r3 }, tokens.client), grpc.status.FAILED_PRECONDITION, "55000");

  // r1 runs a workflow task, then is suspended, resumed and reset to that task
  let p = await call(dex, "PollTasks", { queue: wf, workerId: "ts-grpc", maxTasks: 10, wait: seconds(5) }, tokens.worker);
  assert.ok(p.tasks.some((x: Msg) => x.workflow.runId === r1), "r1's workflow task");
  const completions = p.tasks.map((x: Msg) => ({ lease: leaseOf(x), workflow: { commands: [{ setCustomStatus: { customStatus: "seen" } }] } }));
  p = await call(dex, "PollTasks", { queue: wf, workerId: "ts-grpc", completions }, tokens.worker);
  assert.ok(p.completed.length > 0 && p.completed.every(Boolean));
  assert.equal((await call(dex, "SuspendRun", { runId: r1, reason: "wait" }, tokens.client)).status, "RUN_STATUS_SUSPENDED");
  assert.equal((await call(dex, "ResumeRun", { runId: r1 }, tokens.client)).status, "RUN_STATUS_RUNNING");
  const h = await call(dex, "GetHistory", { runId: r1 }, tokens.client);
  const completedAt = h.events.findIndex((e: Msg) => e.workflowTaskCompleted) + 1;
  assert.ok(completedAt > 0);
  const reset = await call(dex, "ResetRun", { runId: r1, eventId: completedAt, reason: "again" }, tokens.client);
  assert.equal(reset.originRunId, r1);
  assert.notEqual(reset.id, r1);
  for (const id of [r1, restarted.id, reset.id]) await call(dex, "TerminateRun", { runId: id }, tokens.client).catch(() => {});
});

test("tenants: another tenant's token sees none of the runs and may not use the queues", async () => {
  const [wf] = await queues();
  const run = await call(dex, "StartRun", { workflowName: "w", queue: wf }, tokens.client);
  await refused(call(dex, "GetRun", { runId: run.id }, tokens.other), grpc.status.NOT_FOUND, "42704");
  await refused(call(dex, "GetHistory", { runId: run.id }, tokens.other), grpc.status.NOT_FOUND);
  await refused(call(dex, "CancelRun", { runId: run.id }, tokens.other), grpc.status.NOT_FOUND, "42704");
  await refused(call(dex, "SendEvent", { runId: run.id, eventId: "x" }, tokens.other), grpc.status.NOT_FOUND, "42704");
  assert.equal((await call(dex, "ListRuns", { queue: wf }, tokens.other)).runs.length, 0);
  await refused(call(dex, "StartRun", { workflowName: "w", queue: wf }, tokens.other), grpc.status.PERMISSION_DENIED, "42501");
  await refused(call(dex, "PollTasks", { queue: wf, workerId: "thief" }, tokens.other), grpc.status.PERMISSION_DENIED, "42501");
  await refused(call(dex, "PollTasks", { queue: wf, workerId: "thief", wait: seconds(1) }, tokens.other), grpc.status.PERMISSION_DENIED, "42501");
  // the client role is no worker, and the worker role starts no runs
  await refused(call(dex, "PollTasks", { queue: wf, workerId: "c" }, tokens.client), grpc.status.PERMISSION_DENIED, "42501");
  assert.equal((await call(dex, "GetRun", { runId: run.id }, tokens.client)).status, "RUN_STATUS_CREATED");
  await call(dex, "TerminateRun", { runId: run.id }, tokens.client);
});

test("error codes: no or a bad token, bad input, a lost lease, a taken instance id", async () => {
  const [wf, act] = await queues();
  await refused(call(dex, "GetRun", { runId: randomUUID() }), grpc.status.UNAUTHENTICATED);
  await refused(call(dex, "GetRun", { runId: randomUUID() }, "dex_nosuchtoken"), grpc.status.UNAUTHENTICATED);
  await refused(call(dex, "GetRun", { runId: "not-a-uuid" }, tokens.client), grpc.status.INVALID_ARGUMENT);
  await refused(call(dex, "GetRun", { runId: randomUUID() }, tokens.client), grpc.status.NOT_FOUND, "42704");
  await refused(call(dex, "StartRun", { workflowName: "w", queue: wf, argument: { binary: Buffer.from([1]) } }, tokens.client), grpc.status.INVALID_ARGUMENT);
  await refused(call(dex, "StartRun", { workflowName: "w", queue: wf, argument: { json: "{nope" } }, tokens.client), grpc.status.INVALID_ARGUMENT);
  await refused(call(dex, "StartRun", { workflowName: "w", queue: act }, tokens.client), grpc.status.INVALID_ARGUMENT, "42809");
  await refused(call(dex, "StartRun", { workflowName: "w", queue: `grpc-none-${tag}` }, tokens.client), grpc.status.NOT_FOUND, "42704");
  await refused(call(dex, "StartRun", { workflowName: "", queue: wf }, tokens.client), grpc.status.INVALID_ARGUMENT);
  await refused(call(dex, "ListRuns", { status: "BOGUS" }, tokens.client), grpc.status.INVALID_ARGUMENT);
  await refused(call(dex, "ListRuns", { cursor: "%%%" }, tokens.client), grpc.status.INVALID_ARGUMENT);
  await refused(call(dex, "PollTasks", { queue: wf, workerId: "w", wait: seconds(301) }, tokens.worker), grpc.status.INVALID_ARGUMENT);
  await refused(call(dex, "CompleteTask", { lease: { runId: randomUUID(), taskId: 0, lockVersion: "1" } }, tokens.worker), grpc.status.INVALID_ARGUMENT);

  const first = await call(dex, "StartRun", { workflowName: "w", queue: wf, instanceId: `once-${tag}` }, tokens.client);
  await refused(call(dex, "StartRun", { workflowName: "w", queue: wf, instanceId: `once-${tag}` }, tokens.client), grpc.status.ALREADY_EXISTS, "23505");
  assert.equal((await call(dex, "StartRun", { workflowName: "w", queue: wf, instanceId: `once-${tag}`, returnActive: true }, tokens.client)).id, first.id);

  const p = await call(dex, "PollTasks", { queue: wf, workerId: "w", wait: seconds(5) }, tokens.worker);
  const lease = leaseOf(p.tasks[0]);
  const stale = { ...lease, lockVersion: String(BigInt(lease.lockVersion) + 1n) };
  const err = await refused(call(dex, "CompleteTask", { lease: stale, workflow: { commands: [] } }, tokens.worker), grpc.status.ABORTED, "WD001");
  assert.match(err.details, /lease|lock/i);
  await call(dex, "TerminateRun", { runId: first.id }, tokens.client);
  await refused(call(dex, "CompleteTask", { lease, workflow: { commands: [] } }, tokens.worker), grpc.status.FAILED_PRECONDITION, "WD002");
});

test("the pools: long polls beyond the waits' pool are refused at once, and other calls still answer", async () => {
  const [wf] = await queues();
  const port = await freePort();
  const s = python(["grpc", "--listen", `127.0.0.1:${port}`, "--pool-size", "1"]);
  const small = new pkg.dex.v1.DexService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const smallHealth = new pkg.grpc.health.v1.Health(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  try {
    await waitServing(smallHealth, s.out);
    // a long poll answers before its call's deadline; one cancelled gives its wait back at once
    const t = Date.now();
    assert.equal((await call(small, "PollTasks", { queue: wf, workerId: "hasty", wait: seconds(15) }, tokens.worker, 2)).tasks.length, 0);
    assert.ok(Date.now() - t < 2000, `answered after ${Date.now() - t} ms`);
    const cancelled = small.PollTasks({ queue: wf, workerId: "quitter", wait: seconds(15) }, meta(tokens.worker), () => {});
    await sleep(500);
    cancelled.cancel();
    await sleep(300);
    const holding = call(small, "PollTasks", { queue: wf, workerId: "holder", wait: seconds(15) }, tokens.worker);
    await sleep(500);
    const t0 = Date.now();
    const err = await refused(call(small, "PollTasks", { queue: wf, workerId: "late", wait: seconds(15) }, tokens.worker), grpc.status.UNAVAILABLE);
    assert.ok(Date.now() - t0 < 3000, `refused after ${Date.now() - t0} ms`);
    assert.deepEqual(err.metadata.get("retry-after"), ["1"]);
    // a poll without a wait, and the other calls, take the requests' pool
    assert.equal((await call(small, "PollTasks", { queue: wf, workerId: "quick" }, tokens.worker)).tasks.length, 0);
    const run = await call(small, "StartRun", { workflowName: "w", queue: wf }, tokens.client);
    assert.equal((await holding).tasks[0].workflow.runId, run.id);
    await call(small, "TerminateRun", { runId: run.id }, tokens.client);
  } finally {
    small.close();
    smallHealth.close();
    s.proc.kill("SIGTERM");
    const code = await new Promise((done) => s.proc.once("exit", (c) => done(c)));
    assert.equal(code, 0, s.out());
  }
});

test("the order workflow of the demo, worked by examples/grpc/order_worker.cjs (the proto and the docs, no SDK)", async () => {
  const [wf, act] = await queues();
  const worker = spawn(process.execPath, [resolve(ROOT, "examples/grpc/order_worker.cjs")], {
    env: { ...process.env, NODE_PATH: resolve(ROOT, "clients/typescript/node_modules"), DEX_GRPC: address, DEX_TOKEN: tokens.worker,
      DEX_DEMO_WORKFLOW_QUEUE: wf, DEX_DEMO_ACTIVITY_QUEUE: act },
    stdio: ["ignore", "pipe", "pipe"] });
  procs.add(worker);
  let out = "";
  worker.stdout!.on("data", (d) => { out += d; });
  worker.stderr!.on("data", (d) => { out += d; });
  const order = { id: 42, items: ["book", "lamp"], amount: 99, packing_seconds: 0.3, courier_delay: 1 };
  const run = await call(dex, "StartRun", { workflowName: "order", queue: wf, argument: json(order) }, tokens.client);
  await eventually(async () => (await call(dex, "GetRun", { runId: run.id }, tokens.client)).customStatus === "awaiting approval",
    `the order to wait for approval: ${out}`, 20000);
  await call(dex, "SendEvent", { runId: run.id, eventId: "approval", payload: json({ by: "ana" }) }, tokens.client);
  let got: Msg;
  await eventually(async () => (got = await call(dex, "GetRun", { runId: run.id }, tokens.client)).status === "RUN_STATUS_COMPLETED",
    `the order to complete: ${out}`, 20000);
  const result = parse(got.result);
  assert.deepEqual({ ...result, shipped_at: undefined }, { order: 42, receipt: "R-42", parcel: "P-42", tracking: "TRK-42",
    approved_by: "ana", shipped_at: undefined });
  assert.match(result.shipped_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$/);
  assert.equal(got.customStatus, "shipped");
  for (const name of ["reserve_stock", "charge_card", "pack_parcel", "ship"]) {
    assert.match(out, new RegExp(`activity ${name} for order 42: attempt 1 done`));
  }
  worker.kill("SIGTERM");
  const code = await new Promise((done) => (worker.exitCode !== null ? done(worker.exitCode) : worker.once("exit", (c) => done(c))));
  assert.equal(code, 0, out);
  assert.match(out, /stopped/);
});
