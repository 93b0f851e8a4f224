/**
 * Test fixtures: a database with dex (PGHOST, PGPORT, PGDATABASE from test/run-tests.sh), fresh
 * queues per test, workers stopped when the test ends.
 */
import { randomUUID } from "node:crypto";
import { after, type TestContext } from "node:test";
import pg from "pg";
import { Client, Worker, type WorkerOptions, eventKind, type Message } from "./sdk.js";

let shared: Client | undefined;

/** The client of the test file (one pool, closed when the file's tests end). */
export function client(): Client {
  if (!shared) {
    shared = new Client();
    after(async () => {
      await shared?.close();
      shared = undefined;
    });
  }
  return shared;
}

/** A workflow queue and an activity queue of this test only. */
export async function queues(): Promise<[string, string]> {
  const tag = randomUUID().slice(0, 8);
  const wf = `ts-wf-${tag}`, act = `ts-act-${tag}`;
  await client().createQueue(wf, "workflow");
  await client().createQueue(act, "activity");
  return [wf, act];
}

/** A started worker on the queues, shut down when the test ends. */
export async function startWorker(t: TestContext, qs: [string, string], options: Partial<WorkerOptions>): Promise<Worker> {
  const w = new Worker({
    workflowQueues: [qs[0]], activityQueues: [qs[1]], concurrency: 8, pollTimeout: 5, shutdownTimeout: 5,
    ...options,
  });
  await w.start();
  t.after(() => w.shutdown());
  return w;
}

export function kinds(history: Message[]): string[] {
  return history.map(eventKind);
}

/** One SQL statement on a connection of its own. */
export async function sql(text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const c = new pg.Client();
  await c.connect();
  try {
    return await c.query(text, values);
  } finally {
    await c.end();
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The first failed workflow task of the run (dex.run_attempts), once there is one: its failure's message and type. */
export async function failedWorkflowTask(runId: string): Promise<{ message: string; type: string }> {
  const failed = async () => (await sql(
    "SELECT failure->>'message' AS message, failure->>'type' AS type FROM dex.run_attempts($1) " +
    "WHERE task = 'workflow' AND outcome = 'FAILED'", [runId])).rows;
  await eventually(async () => (await failed()).length > 0, "a failed workflow task");
  return (await failed())[0];
}

/** Poll `check` until it holds (or fail after `timeout` ms). */
export async function eventually(check: () => Promise<boolean> | boolean, what: string, timeout = 15000): Promise<void> {
  const deadline = Date.now() + timeout;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}
