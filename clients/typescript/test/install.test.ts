/**
 * A new project made from the README's install steps alone ("Install"): the SDK packed, a
 * project with "type": "module", the SDK, TypeScript and @types/node installed with npm, the
 * README's tsconfig.json (strict, NodeNext), compiled and run: a worker runs a workflow.
 *
 * npm runs for real, against a registry of the test's own on 127.0.0.1 that serves the packages
 * the SDK's own node_modules has (test/deps.sh installed them from its lockfile), so nothing
 * comes from the internet and npm resolves what the SDK's package.json asks for, as it would.
 */
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { type Server, createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), "../..");          // clients/typescript

/** Run a command and wait for it without blocking this process (whose registry npm talks to); its stdout. */
function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<string> {
  return new Promise((done, fail) => {
    execFile(cmd, args, { cwd, encoding: "utf8", timeout: 180000, env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      if (err) fail(new Error(`${cmd} ${args.join(" ")} in ${cwd} failed (${err.message}):\n${stdout}\n${stderr}`));
      else done(stdout);
    });
  });
}

/** The packages of the SDK's node_modules, packed: name -> [package.json, tarball file]. */
async function packInstalled(into: string): Promise<Map<string, [Record<string, any>, string]>> {
  const dirs: string[] = [];
  for (const entry of readdirSync(join(SDK, "node_modules"))) {
    if (entry.startsWith(".")) continue;
    if (entry.startsWith("@")) for (const sub of readdirSync(join(SDK, "node_modules", entry))) dirs.push(join(entry, sub));
    else dirs.push(entry);
  }
  const packages = new Map<string, [Record<string, any>, string]>();
  for (const d of dirs) {
    const dir = join(SDK, "node_modules", d);
    const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    const file = (await run("npm", ["pack", "--ignore-scripts", "--pack-destination", into, dir], into)).trim().split("\n").at(-1)!;
    packages.set(manifest.name, [manifest, join(into, file)]);
  }
  return packages;
}

/** An npm registry on 127.0.0.1 serving one version of each package (its packument and tarball). */
async function localRegistry(packages: Map<string, [Record<string, any>, string]>): Promise<[Server, string]> {
  const server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? "/").slice(1));
    const tarball = /^-\/(.+)$/.exec(path);
    if (tarball) {
      const found = [...packages.values()].find(([, file]) => file.endsWith("/" + tarball[1]));
      if (!found) return void res.writeHead(404).end();
      return void res.writeHead(200, { "content-type": "application/octet-stream" }).end(readFileSync(found[1]));
    }
    const pkg = packages.get(path);
    if (!pkg) return void res.writeHead(404, { "content-type": "application/json" }).end("{}");
    const [manifest, file] = pkg;
    const data = readFileSync(file);
    const { address, port } = server.address() as { address: string; port: number };
    const version = { ...manifest, dist: {
      tarball: `http://${address}:${port}/-/${file.split("/").at(-1)}`,
      integrity: "sha512-" + createHash("sha512").update(data).digest("base64"),
      shasum: createHash("sha1").update(data).digest("hex"),
    } };
    res.writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ name: manifest.name, "dist-tags": { latest: manifest.version }, versions: { [manifest.version]: version } }));
  });
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  const { port } = server.address() as { port: number };
  return [server, `http://127.0.0.1:${port}/`];
}

test("a new project made from the README's install steps compiles strictly, runs a workflow, and require() says what to do", async (t) => {
  if (!existsSync(join(SDK, "node_modules", "typescript")) || !existsSync(join(SDK, "dist", "src", "index.js"))) {
    t.skip("the SDK is not built with its packages (npm ci && npm run build in clients/typescript)");
    return;
  }
  const work = mkdtempSync(join(tmpdir(), "dex-ts-install-"));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const local = join(work, "packages");
  mkdirSync(local);
  const packages = await packInstalled(local);
  // the README: "npm pack" in clients/typescript (its prepack builds dist/src, built already here)
  const sdkTarball = join(work, (await run("npm", ["pack", "--ignore-scripts", "--pack-destination", work], SDK)).trim().split("\n").at(-1)!);
  const [server, registry] = await localRegistry(packages);
  t.after(() => server.close());
  const npm = { npm_config_registry: registry, npm_config_cache: join(work, "npm-cache"), npm_config_audit: "false",
                npm_config_fund: "false", npm_config_update_notifier: "false" };

  // the README's steps, as a new user types them
  const app = join(work, "my-worker");
  mkdirSync(app);
  await run("npm", ["init", "-y"], app, npm);
  await run("npm", ["pkg", "set", "type=module"], app, npm);
  await run("npm", ["install", sdkTarball], app, npm);
  await run("npm", ["install", "--save-dev", "typescript", "@types/node"], app, npm);
  const readme = readFileSync(join(SDK, "README.md"), "utf8");
  const tsconfig = /```json tsconfig\.json\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(tsconfig, "the README shows the new project's tsconfig.json");
  writeFileSync(join(app, "tsconfig.json"), tsconfig);

  const tag = randomUUID().slice(0, 8);
  mkdirSync(join(app, "src"));
  writeFileSync(join(app, "src", "main.ts"), `
import { Client, Worker, activity, workflow } from "@dex/client";

const greet = activity("install-greet", (name: string) => \`hello \${name}\`);
const hello = workflow("install-hello", async (ctx, name: string) => ({ greeting: await ctx.activity(greet, name) }));

const client = new Client();
await client.createQueue("install-wf-${tag}", "workflow");
await client.createQueue("install-act-${tag}", "activity");
const worker = await new Worker({ workflowQueues: ["install-wf-${tag}"], activityQueues: ["install-act-${tag}"],
                                  workflows: [hello], activities: [greet] }).start();
const runId = await client.start(hello, "new project", { queue: "install-wf-${tag}" });
const result: { greeting: string } = await client.result(runId, { timeout: 30 });
console.log(JSON.stringify(result));
await worker.shutdown();
await client.close();
`);
  await run(join(app, "node_modules", ".bin", "tsc"), ["-p", "."], app);
  assert.equal((await run(process.execPath, [join(app, "dist", "main.js")], app)).trim(), '{"greeting":"hello new project"}');

  // CommonJS: require() fails with what to do instead of ERR_PACKAGE_PATH_NOT_EXPORTED
  const r = spawnSync(process.execPath, ["-e", "require('@dex/client')"], { cwd: app, encoding: "utf8" });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /@dex\/client is an ES module: import it/);
  assert.doesNotMatch(r.stderr, /ERR_PACKAGE_PATH_NOT_EXPORTED/);
});
