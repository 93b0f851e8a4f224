/**
 * W1 of bench/README.md through the TypeScript SDK's Worker: N one-activity workflows (created
 * up front, 1,000 per dex.create_runs call, argument = the run's index), then K workers, each
 * with one workflow and one activity queue loop; the activity returns its argument + 1.
 *
 *   node dist/bench/w1.js [N] [K] [WIRE]   (PG* variables name the database; WIRE: protobuf, the
 *                                          default, or json; bench/run.sh runs both)
 *
 * Prints one line "ROW|typescript (WIRE)|N|seconds|runs/s|xact/run|client CPU ms/run|server CPU ms/run|create runs/s|process runs/s|check"
 * (client CPU: this process's user + system time over the workload, creates included; server CPU:
 * the time of the workers' server backends, from /proc, so the cluster must run on this machine).
 * xact/run: the database's committed transactions (pg_stat_database) over the workload, read
 * after the workers have disconnected (a backend reports its counts when it exits).
 */
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { Client, Worker, activity, workflow } from "../src/index.js";

const N = Number(process.argv[2] ?? 10000), K = Number(process.argv[3] ?? 2);
const wire = (process.argv[4] ?? "protobuf") as "protobuf" | "json";
const inc = activity("inc", (n: number) => n + 1);
const w1 = workflow("w1", async (ctx, n: number) => ctx.activity(inc, n));

/** CPU seconds the server backends of the workers have used (/proc/PID/stat: utime + stime). */
async function backendsCpu(client: Client): Promise<number> {
  const ticks = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout.trim()) || 100;
  const rows = await client.sql("SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'dex worker w1ts-%'");
  let total = 0;
  for (const { pid } of rows) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(")").at(-1)!.trim().split(/\s+/);
      total += Number(fields[11]) + Number(fields[12]);
    } catch {
      /* gone meanwhile */
    }
  }
  return total / ticks;
}

async function xacts(client: Client): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 1500));     // the exited backends' counts
  const [row] = await client.sql("SELECT xact_commit::bigint AS n FROM pg_stat_database WHERE datname = current_database()");
  return Number(row!.n);
}

const client = new Client(undefined, { max: 2 });
const tag = randomUUID().slice(0, 6);
const wq = `w1ts-wf-${tag}`, aq = `w1ts-act-${tag}`;
await client.createQueue(wq, "workflow");
await client.createQueue(aq, "activity");
const x0 = await xacts(client);
const t0 = performance.now();
const cpu0 = process.cpuUsage();
for (let i = 0; i < N; i += 1000) {
  await client.startMany(w1, Array.from({ length: Math.min(1000, N - i) }, (_, j) => i + j), { queue: wq });
}
const t1 = performance.now();
const workers = Array.from({ length: K }, (_, i) => new Worker({
  workflowQueues: [wq], activityQueues: [aq], workflows: [w1], activities: [inc], workerId: `w1ts-${i}`,
  concurrency: 100, maxBatch: 100, pollTimeout: 60, wire, logger: { info() {}, warn: console.warn, error: console.error },
}));
await Promise.all(workers.map((w) => w.start()));
for (;;) {
  const [row] = await client.sql("SELECT count(*)::int AS n FROM dex.runs WHERE queue = $1 AND status = 'COMPLETED'", [wq]);
  if (row!.n >= N) break;
  await new Promise((resolve) => setTimeout(resolve, 50));
}
const t2 = performance.now();
const cpu = process.cpuUsage(cpu0);
const serverCpu = await backendsCpu(client);
await Promise.all(workers.map((w) => w.shutdown()));
const [check] = await client.sql(
  "SELECT count(*) FILTER (WHERE status = 'COMPLETED' AND result = to_jsonb((argument #>> '{}')::int + 1))::int AS ok, count(*)::int AS n " +
  "FROM dex.runs WHERE queue = $1", [wq]);
const x1 = await xacts(client);
await client.close();
const s = (t2 - t0) / 1000;
console.log(`ROW|typescript (${wire})|${N}|${s.toFixed(2)}|${(N / s).toFixed(0)}|${((x1 - x0) / N).toFixed(2)}|` +
            `${((cpu.user + cpu.system) / 1000 / N).toFixed(3)}|${((1000 * serverCpu) / N).toFixed(3)}|` +
            `${(N / ((t1 - t0) / 1000)).toFixed(0)}|${(N / ((t2 - t1) / 1000)).toFixed(0)}|` +
            `${check!.ok === N ? "ok" : "FAILED"}: ${check!.ok}/${check!.n} completed with argument + 1`);
