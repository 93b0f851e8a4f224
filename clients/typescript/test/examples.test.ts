/** The TypeScript demo (examples/typescript, built by the suite) on queues of its own. */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { randomUUID } from "node:crypto";
import { client, eventually } from "./helpers.js";

const demo = resolve(dirname(fileURLToPath(import.meta.url)), "../../../../examples/typescript/demo.js");

test("the demo: a worker SIGKILLed mid-activity, the run finished by another, no completed activity run twice", (t) => {
  if (!existsSync(demo)) {
    t.skip(`${demo} is not built (tsc -p examples/typescript)`);
    return;
  }
  const tag = randomUUID().slice(0, 8);
  const r = spawnSync(process.execPath, [demo], {
    encoding: "utf8", timeout: 120000,
    env: { ...process.env, DEX_DEMO_WORKFLOW_QUEUE: `demo-orders-${tag}`, DEX_DEMO_ACTIVITY_QUEUE: `demo-activities-${tag}` },
  });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /pack_parcel +started 2x, completed 1x/);
  assert.match(r.stdout, /ship +started 1x, completed 1x/);
  assert.match(r.stdout, /demo: OK in/);
});

const exampleWorker = resolve(dirname(fileURLToPath(import.meta.url)), "../../../../examples/typescript/worker.js");

test("SIGTERM: the example worker ends its process once the shutdown timeout passed, though an activity ignores the signal", async (t) => {
  if (!existsSync(exampleWorker)) {
    t.skip(`${exampleWorker} is not built (tsc -p examples/typescript)`);
    return;
  }
  const tag = randomUUID().slice(0, 8);
  const env = { ...process.env, DEX_DEMO_WORKFLOW_QUEUE: `ex-orders-${tag}`, DEX_DEMO_ACTIVITY_QUEUE: `ex-activities-${tag}`,
                DEX_DEMO_SHUTDOWN_TIMEOUT: "1" };
  await client().createQueue(env.DEX_DEMO_WORKFLOW_QUEUE, "workflow");
  await client().createQueue(env.DEX_DEMO_ACTIVITY_QUEUE, "activity");
  const proc = spawn(process.execPath, [exampleWorker, `ex-${tag}`], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout.on("data", (d) => { out += d; });
  proc.stderr.on("data", (d) => { out += d; });
  t.after(() => { if (proc.exitCode === null) proc.kill("SIGKILL"); });
  // packing takes a minute and does not look at actx.signal
  const id = await client().start("order", { id: 7, items: ["x"], amount: 1, packingSeconds: 60 }, { queue: env.DEX_DEMO_WORKFLOW_QUEUE });
  await eventually(() => out.includes("activity pack_parcel for order 7: attempt 1 started"), "pack_parcel to start", 20000);
  const t0 = Date.now();
  proc.kill("SIGTERM");
  const code = await new Promise((done) => (proc.exitCode !== null ? done(proc.exitCode) : proc.once("exit", done)));
  assert.equal(code, 0, out);
  assert.ok(Date.now() - t0 < 8000, `took ${Date.now() - t0} ms: ${out}`);
  assert.match(out, /pack_parcel \(id \d+\) of run .* still running at shutdown: failing it as retryable/);
  assert.match(out, new RegExp(`worker ex-${tag} stopped`));
  const attempts = await client().sql("SELECT failure->>'type' AS type FROM dex.run_attempts($1) WHERE task = 'activity' AND failure IS NOT NULL", [id]);
  assert.deepEqual(attempts.map((a) => a.type), ["dex.WorkerShutdown"]);
  await client().terminate(id, "the test is over");
});
