// The demo's order workflow (examples/order.py) as a worker written only against dex's gRPC API:
// proto/dex/v1/service.proto, docs/grpc.md and docs/protocol.md.  No dex SDK: a workflow task is
// answered by a pure function of the run's history (the task carries all of it), so there is no
// replay engine to write; the activities are plain functions.
//
//   NODE_PATH=clients/typescript/node_modules \
//   DEX_GRPC=127.0.0.1:50051 DEX_TOKEN=dex_... \
//   DEX_DEMO_WORKFLOW_QUEUE=orders DEX_DEMO_ACTIVITY_QUEUE=order-activities \
//   node examples/grpc/order_worker.cjs
//
// It needs @grpc/grpc-js and @grpc/proto-loader (npm).  It stops on SIGTERM: StopWaiting ends its
// long polls, and the completions it holds are sent before it exits.
"use strict";
const path = require("node:path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const PROTO = path.join(__dirname, "..", "..", "proto");
const def = loader.loadSync("dex/v1/service.proto", {
  includeDirs: [PROTO], longs: String, enums: String, defaults: true, oneofs: true, arrays: true,
});
const DexService = grpc.loadPackageDefinition(def).dex.v1.DexService;

const address = process.env.DEX_GRPC || "127.0.0.1:50051";
const token = process.env.DEX_TOKEN;
const workflowQueue = process.env.DEX_DEMO_WORKFLOW_QUEUE || "orders";
const activityQueue = process.env.DEX_DEMO_ACTIVITY_QUEUE || "order-activities";
const workerId = `grpc-order-worker-${process.pid}`;

const dex = new DexService(address, grpc.credentials.createInsecure());
const meta = new grpc.Metadata();
meta.set("authorization", `Bearer ${token}`);

function call(method, request, seconds = 30) {
  return new Promise((resolve, reject) => {
    dex[method](request, meta, { deadline: Date.now() + seconds * 1000 }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

const json = (value) => ({ json: JSON.stringify(value) });
const parse = (payload) => (payload && payload.json !== undefined ? JSON.parse(payload.json) : null);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the activities

const activities = {
  async reserve_stock(order) { await sleep(200); return { reserved: order.items }; },
  async charge_card(order) { await sleep(400); return { receipt: `R-${order.id}`, amount: order.amount }; },
  async pack_parcel(order) { await sleep(1000 * (order.packing_seconds ?? 3)); return { parcel: `P-${order.id}` }; },
  async ship(order) { await sleep(100); return { tracking: `TRK-${order.id}` }; },
};

// ---- the workflow: the commands that follow from a history

// Command ids (docs/protocol.md: they grow over the run's life; the events a command causes
// carry its id, and the events that answer it name it).
const RESERVE = 1, CHARGE = 2, PACK = 3, APPROVAL = 4, COURIER = 5, SHIP = 6;

function decide(events) {
  const order = parse(events.find((e) => e.runCreated)?.runCreated.argument);
  const created = new Set(), results = new Map(), elapsed = new Set();
  let approval = null, waiting = false, now = null;
  for (const e of events) {
    if (e.workflowTaskStarted) now = e.timestamp;
    if (e.activityTaskCreated) created.add(e.id);
    if (e.activityTaskCompleted) results.set(e.activityTaskCompleted.activityTaskCreatedEventId, parse(e.activityTaskCompleted.result));
    if (e.activityTaskFailed) {
      const f = e.activityTaskFailed.failure || {};
      return [{ failRun: { failure: { message: `activity ${e.activityTaskFailed.activityTaskCreatedEventId} failed: ${f.message}`, cause: f } } }];
    }
    if (e.externalEventWaitStarted && e.id === APPROVAL) waiting = true;
    if (e.externalEventReceived && e.externalEventReceived.eventId === "approval") approval = parse(e.externalEventReceived.payload);
    if (e.timerElapsed) elapsed.add(e.timerElapsed.timerCreatedEventId);
  }
  const activity = (id, name, extra = {}) => ({ id, scheduleActivity: { name, queue: activityQueue, argument: json(order), ...extra } });
  if (!created.has(RESERVE)) {
    // three activities at once; pack_parcel retried after 0.5 s without jitter
    return [activity(RESERVE, "reserve_stock"), activity(CHARGE, "charge_card"),
      activity(PACK, "pack_parcel", { startToCloseTimeout: { seconds: 60 },
        retryPolicy: { initialDelay: { nanos: 500000000 }, randomizationFactor: 0 } })];
  }
  if (![RESERVE, CHARGE, PACK].every((id) => results.has(id))) return [];
  if (approval === null) {
    if (elapsed.has(APPROVAL)) {
      return [{ failRun: { failure: { message: "not approved in time", type: "NotApproved" } } }];
    }
    return waiting ? [] : [{ setCustomStatus: { customStatus: "awaiting approval" } },
      { id: APPROVAL, waitExternalEvent: { eventId: "approval", timeout: { seconds: 300 } } }];
  }
  if (!elapsed.has(COURIER)) {
    if (events.some((e) => e.timerCreated && e.id === COURIER)) return [];
    return [{ setCustomStatus: { customStatus: "waiting for the courier" } },
      { id: COURIER, startTimer: { name: "courier slot", delay: { seconds: order.courier_delay ?? 2 } } }];
  }
  if (!created.has(SHIP)) return [activity(SHIP, "ship")];
  if (!results.has(SHIP)) return [];
  const shippedAt = new Date(Number(now.seconds) * 1000).toISOString().slice(0, 19) + "+00:00";
  return [{ setCustomStatus: { customStatus: "shipped" } },
    { completeRun: { result: json({ order: order.id, receipt: results.get(CHARGE).receipt,
      parcel: results.get(PACK).parcel, tracking: results.get(SHIP).tracking,
      approved_by: approval.by, shipped_at: shippedAt }) } }];
}

// ---- the two loops: one long poll per round, carrying the completions of the last

let stopping = false;

async function loop(queue, work) {
  let completions = [];
  while (!stopping || completions.length) {
    const res = await call("PollTasks", { queue, workerId, maxTasks: 4, wait: { seconds: stopping ? 0 : 10 },
      lease: { seconds: 60 }, completions }, 40);
    completions = [];
    await Promise.all(res.tasks.map(async (t) => {
      const lease = t.workflow ? { runId: t.workflow.runId, taskId: 0, lockVersion: t.workflow.lockVersion }
        : { runId: t.activity.runId, taskId: t.activity.taskId, lockVersion: t.activity.lockVersion };
      try {
        completions.push({ lease, ...(await work(t)) });
      } catch (err) {
        console.log(`task of run ${lease.runId} failed: ${err.message}`);
        await call("FailTask", { lease, failure: { message: String(err.message), type: err.name } });
      }
    }));
  }
}

async function workflowTask(t) {
  const w = t.workflow;
  const commands = decide([...w.history, ...w.newEvents]);
  console.log(`workflow task of run ${w.runId}: ${commands.map((c) => Object.keys(c).find((k) => k !== "id")).join(", ") || "nothing new"}`);
  return { workflow: { commands } };
}

async function activityTask(t) {
  const a = t.activity;
  const order = parse(a.argument);
  console.log(`activity ${a.name} for order ${order.id}: attempt ${a.attempt} started`);
  const result = await activities[a.name](order);
  console.log(`activity ${a.name} for order ${order.id}: attempt ${a.attempt} done`);
  return { activity: json(result) };
}

process.on("SIGTERM", () => {
  stopping = true;
  call("StopWaiting", { workerId }).catch(() => {});
});

console.log(`worker ${workerId} on ${address}: ${workflowQueue}, ${activityQueue}`);
Promise.all([loop(workflowQueue, workflowTask), loop(activityQueue, activityTask)]).then(() => {
  console.log(`worker ${workerId} stopped`);
  dex.close();
}, (err) => {
  console.error(`worker ${workerId}: ${err.message}`);
  process.exit(1);
});
