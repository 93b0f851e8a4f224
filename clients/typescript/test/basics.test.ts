import assert from "node:assert/strict";
import { test } from "node:test";
import { activity, workflow, ActivityError, ApplicationError, NonRetryableError } from "./sdk.js";
import { client, queues, startWorker, kinds } from "./helpers.js";

const greet = activity("greet", async (name: string) => `hello ${name}`);
const hello = workflow("hello", async (ctx, name: string) => {
  const a = await ctx.activity(greet, name);
  return { greeting: a, runId: ctx.runId };
});

test("an activity's result comes back to the workflow, and the run's result to the client", async (t) => {
  const qs = await queues();
  await startWorker(t, qs, { workflows: [hello], activities: [greet] });
  const id = await client().start(hello, "ts", { queue: qs[0] });
  const result = await client().result(id, { timeout: 20 });
  assert.deepEqual(result, { greeting: "hello ts", runId: id });
  const h = await client().history(id);
  assert.ok(kinds(h).includes("activityTaskCompleted"));
  assert.equal(kinds(h).at(-1), "runCompleted");
});
