/** The TypeScript demo (examples/typescript, built by the suite) on queues of its own. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { randomUUID } from "node:crypto";

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
