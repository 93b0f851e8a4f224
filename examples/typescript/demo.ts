/**
 * The dex demo in TypeScript (the same as examples/demo.py; bash test/demo.sh ts runs it on a
 * throwaway cluster):
 *
 * 1. starts a worker process (node worker.js) and an order run;
 * 2. when the three parallel activities are under way and two are done, kills the worker with
 *    SIGKILL, in the middle of the third;
 * 3. starts a new worker: it replays the run from its history, and only the interrupted
 *    activity runs again;
 * 4. approves the order (an external event); the run sleeps on a durable timer, ships and
 *    completes;
 * 5. prints the result, how often each activity ran, and the run's history as a table.
 *
 * Connection: the PG* environment variables (PGHOST, PGPORT, PGDATABASE, ...).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "../../clients/typescript/dist/src/index.js";
import { ACTIVITY_QUEUE, type Order } from "./order.js";

const here = dirname(fileURLToPath(import.meta.url));
const WORKFLOW_QUEUE = process.env.DEX_DEMO_WORKFLOW_QUEUE ?? "orders";
const say = (text = "") => console.log(text);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function startWorker(n: number, log: string): ChildProcess {
  const proc = spawn(process.execPath, [join(here, "worker.js"), `worker-${n}`],
                     { env: { ...process.env, DEX_DEMO_LOG: log }, stdio: ["ignore", "pipe", "pipe"] });
  for (const stream of [proc.stdout!, proc.stderr!]) {
    let buf = "";
    stream.on("data", (d: Buffer) => {
      buf += d;
      const lines = buf.split("\n");
      buf = lines.pop()!;
      for (const l of lines) say(`    [worker ${n}] ${l}`);
    });
  }
  say(`--- worker ${n} started (pid ${proc.pid})`);
  return proc;
}

async function waitUntil(what: string, check: () => boolean | Promise<boolean>, timeout = 30000): Promise<void> {
  const deadline = Date.now() + timeout;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`demo: timed out waiting for ${what}`);
    await sleep(50);
  }
}

function exited(proc: ChildProcess): Promise<number | null> {
  return proc.exitCode !== null ? Promise.resolve(proc.exitCode) : new Promise((resolve) => proc.once("exit", resolve));
}

async function main(): Promise<void> {
  const t0 = Date.now();
  const log = join(mkdtempSync(join(tmpdir(), "dex-demo-")), "activities.log");
  const lines = () => (existsSync(log) ? readFileSync(log, "utf8").split("\n").filter(Boolean) : []);
  const client = new Client();
  await client.sql("CREATE EXTENSION IF NOT EXISTS dex");
  await client.createQueue(WORKFLOW_QUEUE, "workflow");
  await client.createQueue(ACTIVITY_QUEUE, "activity");
  const worker1 = startWorker(1, log);
  const order: Order = { id: 1042, items: ["kettle", "teapot"], amount: 41.5, packingSeconds: 3, courierDelay: 2 };
  const instanceId = `order-${order.id}-${WORKFLOW_QUEUE}`;
  const runId = await client.start("order", order, { queue: WORKFLOW_QUEUE, instanceId, labels: { shop: "demo" } });
  say(`--- started run ${runId} of workflow 'order' (instance ${instanceId})`);
  const completedActivities = async () => (await client.history(runId)).filter((e) => e.activityTaskCompleted).length;
  await waitUntil("pack_parcel to start", () => lines().some((l) => l.includes("pack_parcel") && l.endsWith("started")));
  await waitUntil("two activities to complete", async () => (await completedActivities()) >= 2);
  say("--- reserve_stock and charge_card are done, pack_parcel is running: killing worker 1 with SIGKILL");
  worker1.kill("SIGKILL");
  await exited(worker1);
  const worker2 = startWorker(2, log);
  say("--- pack_parcel's lease (2 s) expires; the scheduler counts the attempt as failed and retries it");
  await waitUntil("the approval wait", async () => (await client.get(runId)).customStatus === "awaiting approval");
  say("--- the run waits for approval: sending it (dex.send_external_event_to_instance)");
  await client.sendEventToInstance(instanceId, "approval", { by: "ana" });
  await waitUntil("the courier timer", async () => (await client.get(runId)).customStatus === "waiting for the courier");
  say("--- approved; the run sleeps on a durable timer until the courier's slot");
  const result = await client.result(runId, { timeout: 60 });
  say(`--- run completed: ${JSON.stringify(result)}`);
  worker2.kill("SIGTERM");
  const code = await exited(worker2);
  say(`--- worker 2 stopped on SIGTERM (exit status ${code})`);
  const run = await client.get(runId);
  say();
  say(`run ${run.id}: ${run.workflowName} v${run.workflowVersion}, ${run.status}, custom status '${run.customStatus}', ` +
      `${run.historyLength} events, ${((run.completedAt!.getTime() - run.createdAt!.getTime()) / 1000).toFixed(1)} s`);
  say();
  say("How often each activity ran (from the activities' own log):");
  let ok = true;
  for (const name of ["reserve_stock", "charge_card", "pack_parcel", "ship"]) {
    const mine = lines().filter((l) => l.startsWith(`activity ${name} `));
    const started = mine.filter((l) => l.endsWith("started")).length, done = mine.filter((l) => l.endsWith("done")).length;
    let note = "";
    if (name === "pack_parcel") {
      note = "  (attempt 1 died with worker 1; attempt 2 ran on worker 2)";
      ok &&= done === 1;
    } else {
      ok &&= started === 1 && done === 1;
    }
    say(`  ${name.padEnd(14)} started ${started}x, completed ${done}x${note}`);
  }
  say();
  say("The run's history (dex.run_history):");
  say(await client.formatHistory(runId));
  say();
  await client.close();
  rmSync(dirname(log), { recursive: true, force: true });
  if (run.status !== "COMPLETED" || !ok || code !== 0) {
    throw new Error("demo: FAILED: the run did not finish exactly once per completed activity");
  }
  say(`demo: OK in ${((Date.now() - t0) / 1000).toFixed(1)} s: the run survived a SIGKILLed worker, and no completed activity ran twice`);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
