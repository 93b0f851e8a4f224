/**
 * The worker and the client behind a real PgBouncer (Debian's pgbouncer) in transaction mode, in
 * front of the test cluster: workflows with activities, a timer and an event complete, the pooler
 * is detected (no named prepared statements), and a worker told `pooled: false` says why its
 * statements break instead of failing anything.  As clients/python/tests/test_pgbouncer.py.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import pg from "pg";
import { Client, activity, workflow } from "./sdk.js";
import { eventually, queues, sql, startWorker } from "./helpers.js";

const PGBOUNCER = "/usr/sbin/pgbouncer";

/** A pgbouncer of the test's own on a Unix socket in a private directory, in front of the test cluster (auth_type trust). */
async function startPgBouncer(t: TestContext, poolMode: string, poolSize: number): Promise<pg.ClientConfig | undefined> {
  try {
    accessSync(PGBOUNCER, constants.X_OK);
  } catch {
    t.skip(`no ${PGBOUNCER} (Debian package pgbouncer; test/deps.sh installs it)`);
    return undefined;
  }
  if (process.getuid?.() === 0) {
    t.skip("pgbouncer refuses to run as root (test/run-tests.sh runs the tests as the cluster's user)");
    return undefined;
  }
  const { rows: [where] } = await sql("SELECT current_user AS user, current_database() AS db, " +
                                      "current_setting('unix_socket_directories') AS dirs, current_setting('port') AS port");
  const dir = mkdtempSync(join(tmpdir(), "dex-pgb-"));        // short: a socket path has 107 bytes
  const log = join(dir, "pgbouncer.log");
  writeFileSync(join(dir, "users.txt"), `"${where.user}" ""\n`);
  writeFileSync(join(dir, "pgbouncer.ini"), `[databases]
${where.db} = host=${process.env.PGHOST ?? where.dirs.split(",")[0]} port=${where.port} dbname=${where.db}

[pgbouncer]
listen_port = 6432
unix_socket_dir = ${dir}
auth_type = trust
auth_file = ${dir}/users.txt
pool_mode = ${poolMode}
default_pool_size = ${poolSize}
max_client_conn = 100
logfile = ${log}
`);
  const proc: ChildProcess = spawn(PGBOUNCER, [join(dir, "pgbouncer.ini")], { stdio: "ignore" });
  t.after(async () => {
    proc.kill("SIGTERM");
    await new Promise((resolve) => (proc.exitCode !== null ? resolve(null) : proc.once("exit", resolve)));
    rmSync(dir, { recursive: true, force: true });
  });
  const config: pg.ClientConfig = { host: dir, port: 6432, database: where.db, user: where.user };
  await eventually(async () => {
    if (proc.exitCode !== null) throw new Error(`pgbouncer exited: ${readFileSync(log, "utf8")}`);
    const c = new pg.Client(config);
    try {
      await c.connect();
      await c.end();
      return true;
    } catch {
      return false;
    }
  }, "pgbouncer to accept connections", 10000);
  return config;
}

const add = activity("pgb-ts-add", (x: { a: number; b: number }) => x.a + x.b);
const flow = workflow("pgb-ts-flow", async (ctx, n: number) => {
  let total = 0;
  for (let i = 0; i < n; i++) total = await ctx.activity(add, { a: total, b: i });      // one after another
  const parts = await ctx.all([0, 1, 2, 3].map((i) => ctx.activity(add, { a: i, b: 1 })));
  await ctx.sleep(0.2);                                                                 // a durable timer
  const event = await ctx.waitEvent("go", { timeout: 60 });
  return { total, parts, event };
});

async function runFlows(client: Client, queue: string, sizes: number[]): Promise<void> {
  const runs = await Promise.all(sizes.map((n) => client.start(flow, n, { queue })));
  for (const [i, id] of runs.entries()) await client.sendEvent(id, "go", { n: sizes[i] });
  for (const [i, id] of runs.entries()) {
    const n = sizes[i]!;
    assert.deepEqual(await client.result(id, { timeout: 60 }), { total: (n * (n - 1)) / 2, parts: [1, 2, 3, 4], event: { n } });
  }
}

for (const wire of ["protobuf", "json"] as const) {
  test(`through PgBouncer in transaction mode (${wire}): the pooler is detected and workflows complete`, async (t) => {
    const bouncer = await startPgBouncer(t, "transaction", 6);
    if (!bouncer) return;
    const qs = await queues();
    const client = new Client(bouncer, { max: 2 });
    const w = await startWorker(t, qs, { workflows: [flow], activities: [add], connection: bouncer, wire, pollTimeout: 5 });
    assert.equal(w.behindPooler, true);
    await runFlows(client, qs[0], [3, 5, 8, 2]);
    await w.shutdown();                     // while PgBouncer runs (the hooks stop it first)
    await client.close();
  });
}

test("through PgBouncer with pooled: false, the worker's named statements break: it says why and fails nothing", async (t) => {
  const bouncer = await startPgBouncer(t, "transaction", 4);
  if (!bouncer) return;
  const qs = await queues();
  const said: string[] = [];
  const say = (...args: unknown[]) => { said.push(args.map(String).join(" ")); };
  // no workflow cache: the workflow loop completes with dex.complete_tasks, a named statement
  const w = await startWorker(t, qs, { workflows: [flow], activities: [add], connection: bouncer, pooled: false,
                                       workflowCacheSize: 0, pollTimeout: 2, logger: { info: say, warn: say, error: say } });
  assert.equal(w.behindPooler, false);
  const client = new Client(bouncer, { max: 2 });
  // whether the runs get through depends on which server connection each statement meets (a
  // worker misconfigured so may make no progress at all): what must hold is that it says why
  // and that no run fails for it
  const runs = await Promise.all([6, 6, 6].map((n) => client.start(flow, n, { queue: qs[0] })));
  for (const id of runs) await client.sendEvent(id, "go", {});
  await eventually(() => said.some((l) => /pooled: true/.test(l)), "the worker to say why", 20000);
  assert.ok(said.some((l) => /prepared statement "dex_.*" does not exist/.test(l)), said.join("\n"));
  await w.shutdown();
  const failed = await sql("SELECT count(*)::int AS n FROM dex.workflow_run WHERE id = ANY ($1::uuid[]) AND status = 'FAILED'", [runs]);
  assert.equal(failed.rows[0].n, 0);
  await client.close();
});
