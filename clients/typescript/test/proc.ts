/** Worker subprocesses (TypeScript and Python) and the activity log they share with the test. */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after } from "node:test";
import { eventually } from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));            // dist/test
export const PYTHON_SDK = resolve(here, "../../../python");       // clients/python
export const PYTHON = process.env.DEX_PYTHON ?? "/usr/bin/python3";

/** A fresh activity log file, named in DEX_TEST_LOG for this process and its children. */
export function activityLog(): string {
  const f = join(mkdtempSync(join(tmpdir(), "dex-ts-")), "activities.log");
  process.env.DEX_TEST_LOG = f;
  return f;
}

export function lines(log: string): string[] {
  return existsSync(log) ? readFileSync(log, "utf8").split("\n").filter(Boolean) : [];
}

const children = new Set<ChildProcess>();
after(() => { for (const c of children) if (c.exitCode === null) c.kill("SIGKILL"); });

function track(c: ChildProcess): ChildProcess {
  children.add(c);
  let out = "";
  c.stdout?.on("data", (d) => { out += d; });
  c.stderr?.on("data", (d) => { out += d; });
  (c as ChildProcess & { output: () => string }).output = () => out;
  return c;
}

export function output(c: ChildProcess): string {
  return (c as ChildProcess & { output?: () => string }).output?.() ?? "";
}

/** A TypeScript worker process on the queues (test/fixtures/worker-main.ts). */
export function spawnTsWorker(qs: [string, string], shutdownTimeout = 30): ChildProcess {
  return track(spawn(process.execPath, [join(here, "fixtures/worker-main.js"), qs[0], qs[1], String(shutdownTimeout)],
                     { env: process.env, stdio: ["ignore", "pipe", "pipe"] }));
}

const pyEnv = () => ({ ...process.env, PYTHONDONTWRITEBYTECODE: "1",
                       PYTHONPATH: `${PYTHON_SDK}:${join(PYTHON_SDK, "tests")}` });

/** A Python worker process (python3 -m dex worker crashflows, its default protobuf wire form) on the queues. */
export function spawnPyWorker(qs: [string, string]): ChildProcess {
  return track(spawn(PYTHON, ["-m", "dex", "worker", "crashflows", "-w", qs[0], "-a", qs[1], "--activity-lease", "1",
                              "--workflow-lease", "2"],
                     { env: pyEnv(), cwd: join(PYTHON_SDK, "tests"), stdio: ["ignore", "pipe", "pipe"] }));
}

/** Python code run with the Python SDK importable; its stdout, trimmed. */
export function python(code: string): string {
  const r = spawnSync(PYTHON, ["-c", code], { env: pyEnv(), encoding: "utf8", timeout: 60000 });
  if (r.status !== 0) throw new Error(`python failed (${r.status}): ${r.stderr}`);
  return r.stdout.trim();
}

/** Wait for `line` in the log while the process lives. */
export async function waitForLine(log: string, line: string, proc?: ChildProcess, timeout = 20000): Promise<void> {
  await eventually(() => {
    if (proc && proc.exitCode !== null) throw new Error(`the worker exited (${proc.exitCode}): ${output(proc)}`);
    return lines(log).includes(line);
  }, `'${line}' in ${log} (${lines(log).join(", ")})`, timeout);
}

export function exited(c: ChildProcess, timeout: number): Promise<number | null> {
  return new Promise((resolveExit, reject) => {
    if (c.exitCode !== null) return resolveExit(c.exitCode);
    const t = setTimeout(() => reject(new Error(`the process did not exit in ${timeout} ms: ${output(c)}`)), timeout);
    c.once("exit", (code) => { clearTimeout(t); resolveExit(code); });
  });
}
