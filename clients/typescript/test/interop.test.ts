/**
 * Interoperability with the Python SDK (clients/python) on one queue pair: the same workflow
 * ("crash-order", test/fixtures/crashflows.ts and clients/python/tests/crashflows.py) started
 * from one language is worked by the other's workers, and a run begun by a Python worker is
 * finished by a TypeScript one, which replays the history Python wrote.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { client, queues, startWorker } from "./helpers.js";
import { activityLog, exited, lines, output, python, spawnPyWorker, spawnTsWorker, waitForLine } from "./proc.js";
import { order, step } from "./fixtures/crashflows.js";

const pyStart = (queue: string, seconds: number) =>
  python(`import dex; print(dex.Client().start("crash-order", {"seconds": ${seconds}}, queue=${JSON.stringify(queue)}))`);
const pyResult = (runId: string) =>
  python(`import dex, json; print(json.dumps(dex.Client().result(${JSON.stringify(runId)}, timeout=60)))`);

test("a run started from Python is worked by a TypeScript worker", async (t) => {
  const qs = await queues();
  const log = activityLog();
  await startWorker(t, qs, { workflows: [order], activities: [step] });
  const id = pyStart(qs[0], 0.1);
  assert.deepEqual(await client().result(id, { timeout: 30 }), ["a", "b", "c", "d"]);
  assert.deepEqual(JSON.parse(pyResult(id)), ["a", "b", "c", "d"]);
  assert.equal(lines(log).filter((l) => l.startsWith("done")).length, 4);
});

test("a run started from TypeScript is worked by a Python worker", async () => {
  const qs = await queues();
  const log = activityLog();
  const proc = spawnPyWorker(qs);
  try {
    const id = await client().start(order, { seconds: 0.1 }, { queue: qs[0] });
    assert.deepEqual(await client().result(id, { timeout: 30 }), ["a", "b", "c", "d"]);
    assert.equal(lines(log).filter((l) => l.startsWith("done")).length, 4);
  } finally {
    proc.kill("SIGTERM");
    await exited(proc, 20000);
  }
});

test("a run begun by a Python worker (killed mid-activity) is finished by a TypeScript worker, nothing done redone", async (t) => {
  const qs = await queues();
  const log = activityLog();
  const proc = spawnPyWorker(qs);
  const id = pyStart(qs[0], 2.0);
  await waitForLine(log, "start c 1", proc, 30000);
  proc.kill("SIGKILL");
  await exited(proc, 10000);
  const w = await startWorker(t, qs, { workflows: [order], activities: [step], activityLease: 1 });
  assert.deepEqual(await client().result(id, { timeout: 30 }), ["a", "b", "c", "d"]);
  const ls = lines(log);
  assert.equal(ls.filter((l) => l.startsWith("done a")).length, 1);
  assert.equal(ls.filter((l) => l.startsWith("done b")).length, 1);
  assert.deepEqual(ls.filter((l) => l.startsWith("done c")), ["done c 2"]);     // killed in attempt 1
  assert.deepEqual(ls.filter((l) => l.startsWith("start d")), ["start d 1"]);
  // the TypeScript worker replayed Python's commands: no non-determinism, a full replay
  assert.ok(w.stats.fullReplays >= 1);
  assert.equal((await client().get(id)).status, "COMPLETED");
});

test("a run begun by a TypeScript worker (killed mid-activity) is finished by a Python worker, nothing done redone", async () => {
  const qs = await queues();
  const log = activityLog();
  const ts = spawnTsWorker(qs);
  const id = await client().start(order, { seconds: 2.0 }, { queue: qs[0] });
  await waitForLine(log, "start c 1", ts);
  ts.kill("SIGKILL");
  await exited(ts, 10000);
  // The Python worker starts at once and waits in the server; the killed worker's waiting
  // connection is still there when c's retry falls due, and passes its wake-up on.
  const py = spawnPyWorker(qs);
  try {
    assert.deepEqual(await client().result(id, { timeout: 30 }).catch((e) => { throw new Error(`${e.message}: ${output(py)}`); }),
                     ["a", "b", "c", "d"]);
  } finally {
    py.kill("SIGTERM");
    await exited(py, 20000);
  }
  const ls = lines(log);
  assert.equal(ls.filter((l) => l.startsWith("done a")).length, 1);
  assert.equal(ls.filter((l) => l.startsWith("done b")).length, 1);
  assert.deepEqual(ls.filter((l) => l.startsWith("done c")), ["done c 2"]);
  assert.deepEqual(ls.filter((l) => l.startsWith("start d")), ["start d 1"]);
});
