/**
 * The worker: polls workflow and activity queues, replays workflows, runs activities.
 *
 * One Node process, one connection per loop (every call one statement in autocommit):
 *
 * - one loop per workflow queue: `CALL dex.poll_tasks_wait` (lease a batch, waiting in the
 *   server while there is none: the long poll), run each task (resumed from the workflow cache,
 *   or replayed from its history), then complete the batch and lease the next one in the same
 *   CALL (dex 1.5's completions with worker_cache), a full batch too: the CALL looks first, so
 *   it returns at once when more tasks are there, and waits only when there are none;
 * - one loop per activity queue: leases as many tasks as there are free slots (`concurrency`
 *   activities run at once), long-polls when idle; with one activity queue (the one-call wait),
 *   the results of activities that end while its loop is between calls (waiting for a free
 *   slot: all are busy) ride its next CALL as completions, in the transaction that leases the
 *   next tasks;
 * - one reporter: sends the other activity results and the failures in batches
 *   (`dex.complete_tasks` / `dex.fail_tasks`) and extends the leases of running activities
 *   (`dex.heartbeat_tasks`, one call per queue) every third of the lease.
 *
 * On SIGTERM (with {@link Worker.run}) or {@link Worker.shutdown} the loops stop leasing (a
 * waiting long poll is cancelled), workflow tasks in hand are completed, running activities get
 * `shutdownTimeout` seconds to finish and report; those still running then are failed as
 * retryable (dex.WorkerShutdown), so their retry does not wait for the lease to expire.
 *
 * Task calls use the protobuf forms by default (`dex.poll_tasks_wait_pb`, ..., see wire.ts), or
 * the JSON forms (`wire: "json"`); the workflow cache asks the server for incremental histories
 * (worker_cache), so a cached run's task carries only what is new.
 *
 * A worker polls only what it runs: each poll declares its (workflow, version) pairs or activity
 * names (dex 1.6), at most 1,000 a poll, so a queue gets one loop per 1,000 of them; a queue of a
 * kind the worker runs nothing of is not polled.  Behind a connection pooler in transaction
 * mode (PgBouncer) its connections use no named prepared statements (`pooled`).
 */
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { type Message, decode, toJsonText } from "./convert.js";
import type { ActivityDefinition, WorkflowDefinition } from "./definitions.js";
import {
  ApplicationError, DexError, DuplicateDefinitionError, InvalidArgumentError, LeaseLost, NonRetryableError, QueueKindError,
  type ServerError, failureFromError, serverError, sqlstate,
} from "./errors.js";
import {
  type ConnectionOptions, POOLER_HINT, behindPooler, cancelQuery, closeQuietly, connect, hasRoutines, isBroken, isConnectionError,
  isPreparedStatementError, notSupported, translate,
} from "./pg.js";
import { Replayer, WorkflowTaskFailure, failRunCommand } from "./runtime.js";
import { PROTOBUF_WIRE, type Row, type Wire, type WireName, wireNamed } from "./wire.js";

const LEASE_LOST = "WD001";
/** The most names one poll may declare (the server's DEX_MAX_DECLARED). */
const DECLARE_MAX = 1000;
/** A queue the server refuses after it was polled (revoked, ...) is tried again after 1 s, then twice as long each time, up to 30 s. */
const REFUSED_BACKOFF: [number, number] = [1000, 30_000];

/**
 * One polling loop: a queue, its kind, and which part of what the worker runs of that kind
 * its polls declare (DECLARE_MAX each).
 */
interface Poller {
  queue: string;
  workflow: boolean;
  part: number;
}

/**
 * Whether the server refused a poll for a reason that polling again will not mend: the queue
 * does not exist or the role may not use it (42704, 42501), a queue of the other kind (42809,
 * or 22023 for what the poll declares), no dex in the database (3F000) or not the routine
 * (42883): SQLSTATE classes 42, 3F and 22.
 */
function refusedForGood(e: unknown): boolean {
  return ["42", "3F", "22"].includes(sqlstate(e)?.slice(0, 2) ?? "");
}

/**
 * The {@link ServerError} for a poll the server refused, in one line that names the queue and its
 * kind, and for a queue of the other kind ({@link QueueKindError}) or one that does not exist
 * how to mend it.
 */
function queueError(p: Poller, e: unknown): ServerError {
  const err = serverError(e);
  const kind = p.workflow ? "workflow" : "activity", other = p.workflow ? "activity" : "workflow";
  const said = `${kind} queue '${p.queue}': ${err.message} (SQLSTATE ${err.sqlstate})` +
    (err.detail ? `; DETAIL: ${err.detail}` : "") + (err.hint ? `; HINT: ${err.hint}` : "");
  const options = { sqlstate: err.sqlstate, detail: err.detail, hint: err.hint, cause: e };
  if (err.message.includes(`${other} queue "${p.queue}"`)) {
    return new QueueKindError(`${said}; it is ${p.workflow ? "an" : "a"} ${other} queue: give it in ${other}Queues`, options);
  }
  if (err.sqlstate === "42704" && err.hint === undefined && err.message.includes(`queue "${p.queue}"`)) {
    return new (err.constructor as typeof ServerError)(`${said}; create it first: SELECT dex.create_queue('${p.queue}', '${kind}')`, options);
  }
  return new (err.constructor as typeof ServerError)(said, options);
}

/** Put a definition in a worker's table, unless another one has its key: {@link DuplicateDefinitionError}. */
function register<D extends { definedAt: string }>(table: Map<string, D>, key: string, d: D, what: string, other: string): void {
  const old = table.get(key);
  if (old !== undefined && old !== d) {
    throw new DuplicateDefinitionError(`${what} is defined twice: at ${old.definedAt} and at ${d.definedAt}; give one of them another ${other}`);
  }
  table.set(key, d);
}

/** A query text with `$N` / `$V` (the declaration's parameters) numbered after `base` parameters. */
function withDeclared(text: string, declared: { sql: string; values: unknown[] }, base: number): string {
  return text.replace("/*declared*/", declared.sql.replace("$N", `$${base + 1}`).replace("$V", `$${base + 2}`));
}

export interface WorkerOptions {
  /** A connection string or node-postgres config; default: the PG* environment variables. */
  connection?: ConnectionOptions;
  workflowQueues?: string[];
  activityQueues?: string[];
  workflows?: WorkflowDefinition[];
  activities?: ActivityDefinition[];
  /** How many activities run at once (default 10). */
  concurrency?: number;
  workerId?: string;
  /** The most tasks leased or completed in one call (default 100, at most 1000). */
  maxBatch?: number;
  /** Lease of a workflow task, seconds (default 10). */
  workflowLease?: number;
  /** Lease of an activity task, seconds (default 30); extended every third of it while it runs. */
  activityLease?: number;
  /** How long one long poll waits in the server, seconds (default 30). */
  pollTimeout?: number;
  /** How long shutdown waits for running activities, seconds (default 30). */
  shutdownTimeout?: number;
  /** The queue of activities no call or declaration gives one (default the first activity queue). */
  defaultActivityQueue?: string;
  /** How many runs' workflow state is kept between their tasks (default 1000; 0: off). */
  workflowCacheSize?: number;
  /** Where the worker's own messages go (default console). */
  logger?: Pick<Console, "info" | "warn" | "error">;
  /**
   * The form of the task calls: "protobuf" (the default: `dex.poll_tasks_wait_pb` and friends,
   * the cheaper as measured, see the README) or "json".
   */
  wire?: WireName;
  /**
   * Whether the connections go through a connection pooler in transaction mode (PgBouncer's
   * `pool_mode = transaction`), where a named prepared statement does not survive from one
   * transaction to the next: true turns them off, false keeps them, undefined (the default)
   * turns them off when a pooler is detected (the backend's process id is not the one the
   * connection was given).
   */
  pooled?: boolean;
}

/** What an activity attempt is. */
export interface ActivityInfo {
  runId: string;
  taskId: number;
  name: string;
  queue: string;
  attempt: number;
  lockVersion: string;
  retryPolicy: Message;
  lastFailure: Message | undefined;
}

/** The second parameter of activity code. */
export class ActivityContext {
  #leaseLost = false;
  readonly #abort = new AbortController();
  /** @internal */
  constructor(readonly info: ActivityInfo, private readonly worker: Worker) {}

  /** Aborted when the lease is lost or the worker shuts down: long activities may wind up early. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }
  get leaseLost(): boolean {
    return this.#leaseLost;
  }
  get shuttingDown(): boolean {
    return this.worker.stopping;
  }
  /**
   * The worker extends leases by itself while the activity runs; this throws {@link LeaseLost}
   * if the lease was lost (the result would be discarded).
   */
  heartbeat(): void {
    if (this.#leaseLost) {
      throw new LeaseLost(`the lease of activity '${this.info.name}' (id ${this.info.taskId}) of run ${this.info.runId} was lost`, { sqlstate: "WD001" });
    }
  }
  /** @internal */
  _loseLease(): void {
    this.#leaseLost = true;
    this.#abort.abort(new LeaseLost(`the lease of activity '${this.info.name}' was lost`, { sqlstate: "WD001" }));
  }
  /** @internal */
  _shutdown(): void {
    if (!this.#abort.signal.aborted) this.#abort.abort(new DexError("the worker is shutting down"));
  }
}

type Outcome = { kind: "complete"; value: unknown } | { kind: "fail"; failure: Message };

/** Completions a CALL dex.poll_tasks_wait makes before it leases: the tasks and their results. */
type Completions = { rows: Row[]; results: unknown[] };

class Running {
  outcome: Outcome | undefined;
  reported = false;
  finished = false;
  /** Sent before in a call whose end is unknown (it may have applied it): a lost lease then is expected. */
  resent = false;
  /** In the activity loop's CALL (which completes it before it waits): no heartbeat. */
  inCall = false;
  readonly ctx: ActivityContext;
  constructor(readonly row: Row, readonly task: Message, worker: Worker) {
    const t = task;
    this.ctx = new ActivityContext({
      runId: row.runId, taskId: row.taskId, name: t.name ?? "", queue: t.queue ?? "",
      attempt: Number(t.attempt ?? 1), lockVersion: row.lockVersion, retryPolicy: t.retryPolicy ?? {},
      lastFailure: t.lastFailure,
    }, worker);
  }
  get key(): string {
    return `${this.row.runId}/${this.row.taskId}`;
  }
}

/**
 * The workflow state of recently run runs, least recently used out.  A run's state is taken
 * out while one of its tasks runs and put back only after the engine accepted that task's
 * completion, so an entry always stands for a history that ends with this worker's last
 * completion; anything else shows up as a history that does not continue where the state left
 * off, and the task is replayed from scratch.
 */
class WorkflowCache {
  readonly #runs = new Map<string, Replayer>();
  constructor(readonly size: number) {}
  get length(): number {
    return this.#runs.size;
  }
  take(runId: string): Replayer | undefined {
    const s = this.#runs.get(runId);
    this.#runs.delete(runId);
    return s;
  }
  put(runId: string, state: Replayer): void {
    if (this.size === 0 || state.finished) {
      state.close();
      return;
    }
    this.#runs.get(runId)?.close();
    this.#runs.delete(runId);
    this.#runs.set(runId, state);
    while (this.#runs.size > this.size) {
      const [oldest, s] = this.#runs.entries().next().value as [string, Replayer];
      this.#runs.delete(oldest);
      s.close();
    }
  }
  clear(): void {
    for (const s of this.#runs.values()) s.close();
    this.#runs.clear();
  }
}

/** dex.run_history failed while a workflow task was being run. */
class HistoryReadError extends Error {
  constructor(cause: unknown) {
    super("the run's history could not be read", { cause });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export interface WorkerStats {
  workflowTasks: number;
  activitiesCompleted: number;
  activitiesFailed: number;
  leasesLost: number;
  fullReplays: number;
  cacheHits: number;
  cacheStale: number;
  historyReads: number;
  /** Calls that completed workflow tasks (each a batch: dex.complete_tasks or CALL dex.poll_tasks_wait). */
  workflowCompletionCalls: number;
  /** Workflow tasks completed by the CALL dex.poll_tasks_wait that leased the next ones. */
  workflowCompletionsInPoll: number;
  /** Calls of the reporter that reported activity outcomes (each a batch: dex.complete_tasks or dex.fail_tasks). */
  activityReportCalls: number;
  /** Activity results completed by the activity loop's CALL dex.poll_tasks_wait, not by the reporter. */
  activityCompletionsInPoll: number;
  /** Activities still running when shutdown's timeout passed, failed as retryable (dex.WorkerShutdown); their code goes on. */
  activitiesAbandoned: number;
}

/** Runs workflows and activities of some queues. */
export class Worker {
  readonly workerId: string;
  readonly workflowQueues: string[];
  readonly activityQueues: string[];
  readonly concurrency: number;
  readonly maxBatch: number;
  readonly workflowLease: number;
  readonly activityLease: number;
  readonly pollTimeout: number;
  readonly shutdownTimeout: number;
  readonly defaultActivityQueue: string | undefined;
  readonly stats: WorkerStats = {
    workflowTasks: 0, activitiesCompleted: 0, activitiesFailed: 0, leasesLost: 0,
    fullReplays: 0, cacheHits: 0, cacheStale: 0, historyReads: 0, workflowCompletionCalls: 0, workflowCompletionsInPoll: 0,
    activityReportCalls: 0, activityCompletionsInPoll: 0, activitiesAbandoned: 0,
  };
  readonly #connection: ConnectionOptions;
  readonly #workflows = new Map<string, WorkflowDefinition>();
  readonly #activities = new Map<string, ActivityDefinition>();
  readonly #cache: WorkflowCache;
  readonly #log: Pick<Console, "info" | "warn" | "error">;
  #stopping = false;
  #started = false;
  #loops: Promise<void>[] = [];
  #reporter: Promise<void> | undefined;
  #free: number;
  #slotWaiters: Array<() => void> = [];
  readonly #inflight = new Map<string, Running>();
  #results: Running[] = [];
  /**
   * Results for the next CALL of the activity loop (the one-call wait, one activity queue):
   * taken while `#handoffOpen`, that is while that loop is between its calls (waiting for a free
   * slot, or on its way to its next call), so that none waits for a call to end.
   */
  #handoff: Running[] = [];
  #handoffOpen = false;
  #wakeReporter: (() => void) | undefined;
  #reporterStop = false;
  /** Connections whose call may sleep in the server, and whether dex.stop_waiting ends it (a CALL dex.poll_tasks_wait). */
  readonly #waiting = new Map<pg.Client, boolean>();
  /** Whether the installed dex has dex.stop_waiting (1.6). */
  #canStopWaits = false;
  readonly #wire: Wire;
  readonly #pooled: boolean | undefined;
  /** Whether the connections run without named prepared statements (pooled, or a pooler detected by start()). */
  behindPooler: boolean | undefined;
  /** The queues a poll of this worker's went through: a refusal of them is retried, not fatal. */
  readonly #polled = new Set<string>();
  /** What stopped the worker by itself (a queue that does not exist): run() rejects with it. */
  error: DexError | undefined;

  constructor(options: WorkerOptions) {
    this.workflowQueues = [...(options.workflowQueues ?? [])];
    this.activityQueues = [...(options.activityQueues ?? [])];
    if (!this.workflowQueues.length && !this.activityQueues.length) {
      throw new InvalidArgumentError("a worker needs at least one workflow or activity queue");
    }
    this.#connection = options.connection;
    this.concurrency = Math.max(1, Math.trunc(options.concurrency ?? 10));
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 6)}`;
    this.maxBatch = Math.max(1, Math.min(Math.trunc(options.maxBatch ?? 100), 1000));
    this.workflowLease = options.workflowLease ?? 10;
    this.activityLease = options.activityLease ?? 30;
    this.pollTimeout = options.pollTimeout ?? 30;
    this.shutdownTimeout = options.shutdownTimeout ?? 30;
    this.defaultActivityQueue = options.defaultActivityQueue ?? this.activityQueues[0];
    this.#cache = new WorkflowCache(Math.max(0, Math.trunc(options.workflowCacheSize ?? 1000)));
    this.#log = options.logger ?? console;
    this.#free = this.concurrency;
    this.#wire = wireNamed(options.wire ?? PROTOBUF_WIRE);
    this.#pooled = options.pooled;
    this.behindPooler = options.pooled;
    for (const w of options.workflows ?? []) {
      if (w?.kind !== "workflow") throw new InvalidArgumentError(`not a workflow definition (use workflow(name, fn)): ${String(w)}`);
      register(this.#workflows, `${w.name}@${w.version}`, w, `workflow '${w.name}' version ${w.version}`, "version");
    }
    for (const a of options.activities ?? []) {
      if (a?.kind !== "activity") throw new InvalidArgumentError(`not an activity definition (use activity(name, fn)): ${String(a)}`);
      register(this.#activities, a.name, a, `activity '${a.name}'`, "name");
    }
  }

  /** The form of the task calls: "protobuf" or "json". */
  get wire(): WireName {
    return this.#wire.name;
  }

  /** True once the worker was asked to stop. */
  get stopping(): boolean {
    return this.#stopping;
  }

  /** How many runs' states the workflow cache holds. */
  get cachedRuns(): number {
    return this.#cache.length;
  }

  // -- lifecycle --------------------------------------------------------------------------------

  /** Start polling; resolves once the installed dex was checked (rejects if it is too old). */
  async start(): Promise<this> {
    if (this.#started) return this;
    const conn = await connect(this.#connection, `dex worker ${this.workerId}`).catch((e) => { throw translate(e); });
    try {
      // what the installed dex's polls take: 5 arguments with 1.5's worker_cache (and the
      // one-call wait's completions), 7 with 1.6's names and versions (what a worker runs)
      const res = await conn.query(
        "SELECT (SELECT p.pronargs FROM pg_catalog.pg_proc p WHERE p.oid = to_regproc('dex.poll_tasks')) AS n, " +
        "to_regproc('dex.poll_tasks_wait') IS NOT NULL AS wait");
      const level = Number(res.rows[0]?.n ?? 0);
      if (level < 5 || !res.rows[0]?.wait ||
          !(await hasRoutines(conn, "dex.heartbeat_tasks(uuid[],integer[],bigint[],interval,text)"))) {
        throw notSupported("dex.poll_tasks_wait with worker_cache and completions");
      }
      this.#declares = level >= 7;
      this.#canStopWaits = await hasRoutines(conn, "dex.stop_waiting(text)");
      if (this.#pooled === undefined && (this.behindPooler = await behindPooler(conn))) {
        this.#log.info(`dex: worker ${this.workerId}: the connection goes through a connection pooler; named prepared statements are off`);
      }
    } catch (e) {
      throw translate(e);
    } finally {
      await closeQuietly(conn);
    }
    const pollers = [...this.#pollers(true), ...this.#pollers(false)];
    if (!pollers.length) {
      throw new DexError(`worker ${this.workerId} has nothing to run: no workflows for its workflow queues ` +
                         `${JSON.stringify(this.workflowQueues)} and no activities for its activity queues ${JSON.stringify(this.activityQueues)}`);
    }
    this.#started = true;
    this.#stopping = false;
    this.error = undefined;
    this.#reporterStop = false;
    this.#activityPollers = pollers.filter((p) => !p.workflow).length;
    if (this.#activityPollers) this.#reporter = this.#guard("reporter", () => this.#reporterLoop());
    for (const p of pollers) {
      const what = `${p.workflow ? "workflow" : "activity"} queue ${p.queue}${p.part ? ` (part ${p.part})` : ""}`;
      this.#loops.push(this.#guard(what, () => (p.workflow ? this.#workflowLoop(p) : this.#activityLoop(p))));
    }
    return this;
  }

  /** How many activity loops there are: with one, it may hold its slots while it waits in the server. */
  #activityPollers = 0;

  /**
   * The polling loops of the queues of a kind: one per DECLARE_MAX of what the worker runs of
   * that kind (a poll declares at most that many), none when it runs nothing of it (said once:
   * those queues are not polled).
   */
  #pollers(workflow: boolean): Poller[] {
    const queues = workflow ? this.workflowQueues : this.activityQueues;
    const n = (workflow ? this.#workflows : this.#activities).size;
    if (queues.length && n === 0) {
      this.#log.warn(`dex: worker ${this.workerId} has no ${workflow ? "workflows" : "activities"}: ` +
                     `it does not poll its ${workflow ? "workflow" : "activity"} queues ${JSON.stringify(queues)}`);
    }
    const parts = this.#declares ? Math.ceil(n / DECLARE_MAX) : Math.min(n, 1);
    return queues.flatMap((queue) => Array.from({ length: parts }, (_, part) => ({ queue, workflow, part })));
  }

  /** Start, then run until SIGTERM or SIGINT, then shut down gracefully. */
  async run(): Promise<void> {
    await this.start();
    await new Promise<void>((resolve) => {
      const stop = () => {
        process.off("SIGTERM", stop);
        process.off("SIGINT", stop);
        resolve();
      };
      process.on("SIGTERM", stop);
      process.on("SIGINT", stop);
      this.#stopRequested = stop;
      if (this.#stopping) stop();
    });
    await this.shutdown();
    if (this.error) throw this.error;
  }

  #stopRequested: (() => void) | undefined;
  /** Whether the polls declare what the worker runs (dex 1.6). */
  #declares = false;

  /**
   * The declaration of a poller's polls (dex 1.6: the server hands the worker nothing else):
   * its part of the (name, version) pairs of the worker's workflows on a workflow queue, of the
   * names of its activities on an activity queue; none (every task of the queue) before 1.6.
   */
  #declared(p: Poller): { sql: string; values: unknown[] } {
    if (!this.#declares) return { sql: "", values: [] };
    const part = (xs: unknown[]) => xs.slice(p.part * DECLARE_MAX, (p.part + 1) * DECLARE_MAX);
    const workflows = part([...this.#workflows.values()]) as WorkflowDefinition[];
    const names = p.workflow ? workflows.map((w) => w.name) : part([...this.#activities.keys()]);
    const versions = p.workflow ? workflows.map((w) => w.version) : null;
    return { sql: ", names => $N::text[], versions => $V::integer[]", values: [names, versions] };
  }

  /** A statement's name, unless the connections go through a pooler, where a named statement may be missing or another one. */
  #named(name: string): string | undefined {
    return this.behindPooler ? undefined : `${name}${this.#wire.suffix}`;
  }

  /**
   * Stop leasing, finish what is in hand, wait for running activities (up to `timeout`
   * seconds, default shutdownTimeout), fail the rest as retryable.
   */
  shutdown(timeout?: number): Promise<void> {
    // one shutdown at a time: a second call (run()'s, after a programmatic one) waits for it
    this.#shutdown ??= this.#shutdownOnce(timeout).finally(() => { this.#shutdown = undefined; });
    return this.#shutdown;
  }

  #shutdown: Promise<void> | undefined;

  async #shutdownOnce(timeout?: number): Promise<void> {
    if (!this.#started) return;
    this.#stopRequested?.();
    this.#stopping = true;
    for (const w of this.#slotWaiters.splice(0)) w();
    for (const wake of this.#pauses) wake();
    for (const r of this.#inflight.values()) r.ctx._shutdown();
    let loopsDone = false;
    const all = Promise.all(this.#loops).then(() => { loopsDone = true; });
    while (!loopsDone) {
      await this.#cancelWaits();
      await Promise.race([all, sleep(200)]);
    }
    this.#returnHandoff();                // what the activity loop did not send
    const deadline = Date.now() + 1000 * (timeout ?? this.shutdownTimeout);
    while (Date.now() < deadline && [...this.#inflight.values()].some((r) => !r.reported)) await sleep(50);
    for (const r of this.#inflight.values()) {
      if (!r.finished && !r.reported) {
        this.stats.activitiesAbandoned++;
        this.#log.warn(`dex: activity ${r.ctx.info.name} (id ${r.row.taskId}) of run ${r.row.runId} still running at shutdown: ` +
                       "failing it as retryable (its code goes on until it returns: call process.exit() after run() not to wait for it)");
        this.#report(r, { kind: "fail", failure: { message: "the worker shut down before the activity finished", type: "dex.WorkerShutdown" } });
      }
    }
    this.#reporterStop = true;
    this.#wakeReporter?.();
    await this.#reporter;
    this.#cache.clear();
    this.#loops = [];
    this.#started = false;
  }

  async #guard(what: string, fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (e) {
      this.#log.error(`dex: worker ${this.workerId}: ${what} died:`, e);
    }
  }

  async #connect(): Promise<pg.Client> {
    for (;;) {
      try {
        return await connect(this.#connection, `dex worker ${this.workerId}`);
      } catch (e) {
        if (this.#stopping) throw e;
        this.#log.warn(`dex: cannot connect (${(e as Error).message}); retrying in 1 s`);
        await sleep(1000);
      }
    }
  }

  /**
   * End the calls sleeping in the server (shutdown): dex.stop_waiting (1.6) ends this worker's
   * CALL dex.poll_tasks_wait as at its timeout, leaving nothing in the server's log; a call it
   * cannot end (dex.wait_for_tasks, or a dex without it) is cancelled, which the server logs
   * as an error.  Shutdown calls this until its loops are done, so that a call that entered its
   * wait after one round is ended by the next.
   */
  async #cancelWaits(): Promise<void> {
    const stop = this.#canStopWaits && [...this.#waiting.values()].some((stoppable) => stoppable);
    const others = [...this.#waiting].filter(([, stoppable]) => !(stoppable && this.#canStopWaits)).map(([c]) => c);
    // (the protocol's cancel request: a pooler forwards it to the server connection it lent)
    for (const c of others) cancelQuery(this.#connection, c);
    if (!stop) return;
    let conn: pg.Client | undefined;
    try {
      conn = await connect(this.#connection, `dex worker ${this.workerId} shutdown`);
      await conn.query("SELECT dex.stop_waiting($1)", [this.workerId]);
    } catch (e) {
      this.#log.warn(`dex: could not end the long polls: ${(e as Error).message}`);
    } finally {
      await closeQuietly(conn);
    }
  }

  /** Wait `ms`, or less if the worker stops meanwhile. */
  async #pause(ms: number): Promise<void> {
    if (this.#stopping) return;
    let wake = () => {};
    const woken = new Promise<void>((resolve) => { wake = resolve; });
    this.#pauses.add(wake);
    const t = setTimeout(wake, ms);
    await woken;
    clearTimeout(t);
    this.#pauses.delete(wake);
  }

  readonly #pauses = new Set<() => void>();

  /**
   * Run `body(conn)` until stopping; reconnect after connection errors.  A poll the server
   * refuses for good ({@link refusedForGood}: the queue does not exist, ...) stops the worker
   * if the queue was never polled, and is said once and tried again with backoff if it was.
   */
  async #polling(p: Poller, body: (conn: pg.Client) => Promise<void>): Promise<void> {
    let conn: pg.Client | undefined;
    let refused: string | undefined;           // what the server says, while it refuses
    let delay = REFUSED_BACKOFF[0];
    while (!this.#stopping) {
      try {
        if (!conn || isBroken(conn)) {
          await closeQuietly(conn);
          conn = await this.#connect();
        }
        await body(conn);
        this.#polled.add(p.queue);
        if (refused !== undefined) {
          this.#log.info(`dex: ${p.workflow ? "workflow" : "activity"} queue '${p.queue}': polled again`);
          refused = undefined;
          delay = REFUSED_BACKOFF[0];
        }
      } catch (e) {
        if (this.#stopping) break;
        if (isPreparedStatementError(e)) {
          this.#log.error(`dex: queue ${p.queue}: ${(e as Error).message}; ${POOLER_HINT}; reconnecting`);
          await closeQuietly(conn);
          conn = undefined;
        } else if (isConnectionError(e) || (conn && isBroken(conn))) {
          this.#log.warn(`dex: queue ${p.queue}: connection problem (${(e as Error).message}); reconnecting`);
          await closeQuietly(conn);
          conn = undefined;
          await sleep(500);
        } else if (refusedForGood(e)) {
          const error = queueError(p, e);
          if (!this.#polled.has(p.queue)) {
            this.error ??= error;
            this.#log.error(`dex: worker ${this.workerId}: ${error.message}; the worker stops`);
            this.#stopping = true;
            this.#stopRequested?.();
            break;
          }
          if (error.message !== refused) {
            refused = error.message;
            this.#log.error(`dex: worker ${this.workerId}: ${error.message}; trying again, less and less often`);
          }
          await this.#pause(delay);
          delay = Math.min(2 * delay, REFUSED_BACKOFF[1]);
        } else {
          this.#log.error(`dex: queue ${p.queue}: unexpected error; going on in 1 s:`, e);
          await sleep(1000);
        }
      }
    }
    await closeQuietly(conn);
  }

  /** A call that may sleep in the server: shutdown cancels it; a cancellation then is no error. */
  async #waitingCall<T>(conn: pg.Client, stoppable: boolean, call: () => Promise<T>, cancelled: T): Promise<T> {
    if (this.#stopping) return cancelled;
    this.#waiting.set(conn, stoppable);
    try {
      return await call();
    } catch (e) {
      if (sqlstate(e) === "57014" && this.#stopping) return cancelled;
      throw e;
    } finally {
      this.#waiting.delete(conn);
    }
  }

  /**
   * The CALL dex.poll_tasks_wait(_pb) that leases up to `n` tasks of the poller's queue, making
   * the completions given (as dex.complete_tasks takes them) first, in the transaction of its
   * first look.  The first call of a queue does not wait: a refusal that stops the worker
   * (#polling) is then one the server made at once, not a revoke that came while it waited.
   */
  #pollWaitQuery(p: Poller, n: number, cache: boolean, completions?: Completions): pg.QueryConfig {
    const wire = this.#wire;
    const declared = this.#declared(p);
    const lease = p.workflow ? this.workflowLease : this.activityLease;
    const head = [p.queue, this.workerId, n, lease, this.#polled.has(p.queue) ? this.pollTimeout : 0, cache];
    const call = `CALL dex.poll_tasks_wait${wire.suffix}($1, $2, $3, make_interval(secs => $4), make_interval(secs => $5), NULL, $6`;
    if (!completions) {
      return { text: withDeclared(`${call}/*declared*/)`, declared, 6), values: [...head, ...declared.values], types: wire.types };
    }
    return {
      text: withDeclared(`${call}, $7::uuid[], $8::integer[], $9::bigint[], $10::${wire.arrayType}/*declared*/)`, declared, 10),
      values: [...head, completions.rows.map((r) => r.runId), completions.rows.map((r) => r.taskId),
               completions.rows.map((r) => r.lockVersion),
               p.workflow ? wire.commandsArray(completions.results as Message[][]) : wire.resultsArray(completions.results),
               ...declared.values],
      types: wire.types,
    };
  }

  /** The rows of the tasks a CALL dex.poll_tasks_wait(_pb) leased; the queue counts as polled. */
  #leased(p: Poller, res: pg.QueryResult): Row[] {
    this.#polled.add(p.queue);
    return this.#wire.tasks(res.rows[0]?.tasks).map((t) => this.#wire.row(t, p.workflow));
  }

  async #pollWait(conn: pg.Client, p: Poller, n: number, cache: boolean): Promise<Row[]> {
    return this.#waitingCall(conn, true, async () => this.#leased(p, await conn.query(this.#pollWaitQuery(p, n, cache))), []);
  }

  async #poll(conn: pg.Client, p: Poller, n: number, cache: boolean): Promise<Row[]> {
    const declared = this.#declared(p);
    const res = await conn.query({
      name: this.#named(`dex_poll_${p.workflow ? "w" : "a"}${cache ? "c" : "n"}${declared.sql ? "d" : ""}`),
      text: withDeclared(`SELECT task FROM dex.poll_tasks${this.#wire.suffix}($1, $2, $3, make_interval(secs => $4), $5/*declared*/)`,
                         declared, 5),
      values: [p.queue, this.workerId, n, p.workflow ? this.workflowLease : this.activityLease, cache, ...declared.values],
    });
    this.#polled.add(p.queue);
    return res.rows.map((r: { task: unknown }) => this.#wire.row(r.task, p.workflow));
  }

  /** dex.complete_tasks(_pb) or dex.fail_tasks(_pb) of a batch: the keys of those applied ("run/task"). */
  async #completeBatch(conn: pg.Client, rows: Row[], values: unknown, fail: boolean): Promise<Set<string>> {
    const fn = fail ? "fail_tasks" : "complete_tasks";
    const res = await conn.query({
      name: this.#named(`dex_${fn}`),
      text: `SELECT run_id, task_id, ${fail ? "failed" : "completed"} AS ok FROM dex.${fn}${this.#wire.suffix}(` +
            `$1::uuid[], $2::integer[], $3::bigint[], $4::${this.#wire.arrayType})`,
      values: [rows.map((r) => r.runId), rows.map((r) => r.taskId), rows.map((r) => r.lockVersion), values],
    });
    return new Set(res.rows.filter((r) => r.ok).map((r) => `${r.run_id}/${r.task_id}`));
  }

  // -- workflow tasks ----------------------------------------------------------------------------

  async #workflowLoop(p: Poller): Promise<void> {
    const cache = this.#cache.size > 0;
    await this.#polling(p, async (conn) => {
      let rows = await this.#pollWait(conn, p, this.maxBatch, cache);
      while (rows.length) {
        const done = await this.#runWorkflowTasks(conn, rows);
        if (cache && !this.#stopping) {
          // complete them and lease the next ones in one call (waiting only if there are none)
          rows = await this.#completeAndPollWait(conn, p, done);
        } else {
          await this.#completeWorkflowTasks(conn, done);
          rows = this.#stopping ? [] : await this.#poll(conn, p, this.maxBatch, cache);
        }
      }
    });
  }

  async #runWorkflowTasks(conn: pg.Client, rows: Row[]): Promise<Array<[Row, Message[], Replayer]>> {
    const done: Array<[Row, Message[], Replayer]> = [];
    const failed: Array<[Row, Message]> = [];
    for (const row of rows) {
      try {
        const [state, cmds] = await this.#runWorkflowTask(conn, row);
        done.push([row, cmds, state]);
      } catch (e) {
        if (e instanceof WorkflowTaskFailure) {       // the task fails, not the run
          this.#log.error(`dex: run ${row.runId}: its workflow task fails: ${e.message}`);
          failed.push([row, e.failure]);
          continue;
        }
        // the history could not be read: the connection's loop deals with it
        if (e instanceof HistoryReadError) throw e.cause;
        // a bug of the SDK: leave the task to its lease
        this.#log.error(`dex: run ${row.runId}: replay failed; its workflow task is left to expire:`, e);
      }
    }
    if (failed.length) {
      try {
        await this.#completeBatch(conn, failed.map(([r]) => r), this.#wire.failuresArray(failed.map(([, f]) => f)), true);
      } catch (e) {
        if (isConnectionError(e)) throw e;
        // refused (a failure too large, ...): the completion's business, not the poll's
        this.#log.error(`dex: ${failed.length} workflow task(s) could not be failed (${(e as Error).message}); left to their leases`);
      }
    }
    return done;
  }

  #replayer(task: Message): Replayer {
    const d = this.#workflows.get(`${task.workflowName ?? ""}@${Number(task.workflowVersion ?? 1)}`);
    return new Replayer(d, this.#activities, this.defaultActivityQueue);
  }

  /**
   * The run's state after the task and the task's commands: resumed from the cache when the
   * run's state is there and the history continues where it left off, else replayed from the
   * whole history (read from the server when the task left out the part this worker had seen).
   */
  async #runWorkflowTask(conn: pg.Client, row: Row): Promise<[Replayer, Message[]]> {
    const wire = this.#wire;
    let task: Message | undefined;
    const omitted = wire.historyOmitted(row.raw);
    const cached = this.#cache.take(row.runId);
    if (cached) {
      // the history in the message starts after the omitted events; skip, undecoded, those of them the state has seen
      const [shown, skipped] = wire.workflowTask(row.raw, Math.max(0, cached.historySeen - omitted));
      let cmds: Message[] | undefined;
      try {
        cmds = await cached.resume(shown, shown.history ?? [], omitted + skipped);
      } catch (e) {
        if (e instanceof WorkflowTaskFailure) {
          cached.close();
          throw e;
        }
        this.#log.warn(`dex: run ${row.runId}: resuming its cached state failed; replaying:`, e);
      }
      if (cmds) {
        this.stats.cacheHits++;
        return [cached, cmds];
      }
      cached.close();
      this.stats.cacheStale++;
      if (!skipped) task = shown;
    }
    task ??= wire.workflowTask(row.raw, 0)[0];
    if (omitted) task = await this.#wholeTask(conn, row.runId, task);
    const state = this.#replayer(task);
    try {
      const cmds = await state.run(task);
      this.stats.fullReplays++;
      return [state, cmds];
    } catch (e) {
      state.close();
      throw e;
    }
  }

  /** The task with its whole history (as it was when leased: only its completion adds to it). */
  async #wholeTask(conn: pg.Client, runId: string, task: Message): Promise<Message> {
    const length = Number(task.historyLength ?? 0);
    let history: Message[];
    try {
      history = this.#wire.history((await conn.query({ text: this.#wire.historyQuery, values: [runId] })).rows);
    } catch (e) {
      throw new HistoryReadError(e);
    }
    if (history.length < length) throw new DexError(`run ${runId}: its history has ${history.length} events, the task says ${length}`);
    this.stats.historyReads++;
    return { ...task, history: history.slice(0, length), historyOmitted: 0 };
  }

  /** Run them, complete them and lease the next ones in one CALL; the rows leased. */
  async #completeAndPollWait(conn: pg.Client, p: Poller, done: Array<[Row, Message[], Replayer]>): Promise<Row[]> {
    if (!done.length) return this.#pollWait(conn, p, this.maxBatch, true);
    let res: pg.QueryResult;
    try {
      this.#waiting.set(conn, true);
      try {
        res = await conn.query(this.#pollWaitQuery(p, this.maxBatch, true,
                                                   { rows: done.map((d) => d[0]), results: done.map((d) => d[1]) }));
      } finally {
        this.#waiting.delete(conn);
      }
    } catch (e) {
      if (sqlstate(e) === "57014" || isConnectionError(e)) {
        for (const d of done) d[2].close();      // applied or not, unknown: keep nothing
        if (!(sqlstate(e) === "57014" && this.#stopping)) throw e;
        // shutdown cancelled the call, perhaps before its completions: make them (those it
        // made are refused now as lost leases, harmlessly)
        // (the states are closed: none is cached)
        await this.#completeWorkflowTasks(conn, done, true)
          .catch(() => this.#log.warn(`dex: shutdown: ${done.length} workflow task(s) left to their leases`));
        return [];
      }
      this.#log.warn(`dex: completion with the poll refused (${(e as Error).message}); completing apart`);
      await this.#completeWorkflowTasks(conn, done);
      return this.#pollWait(conn, p, this.maxBatch, true);
    }
    this.stats.workflowCompletionCalls++;
    const applied: boolean[] = res.rows[0]?.completed ?? [];
    this.stats.workflowCompletionsInPoll += applied.filter((a) => a === true).length;
    this.#settleWorkflowTasks(done, (i) => applied[i] === true);
    return this.#leased(p, res);
  }

  /** dex.complete_tasks for the batch; `quiet`: a lost lease is expected (the tasks may be completed already). */
  async #completeWorkflowTasks(conn: pg.Client, done: Array<[Row, Message[], Replayer]>, quiet = false): Promise<void> {
    if (!done.length) return;
    let ok: Set<string>;
    try {
      ok = await this.#completeBatch(conn, done.map((d) => d[0]), this.#wire.commandsArray(done.map((d) => d[1])), false);
    } catch (e) {
      for (const d of done) d[2].close();
      if (isConnectionError(e)) throw e;
      // a completion was refused (invalid commands): one by one, to find it
      this.#log.warn(`dex: batch completion refused (${(e as Error).message}); completing one by one`);
      for (const [row, cmds] of done) await this.#completeOneWorkflowTask(conn, row, cmds);
      return;
    }
    this.stats.workflowCompletionCalls++;
    this.#settleWorkflowTasks(done, (i) => ok.has(`${done[i]![0].runId}/0`), quiet);
  }

  /** Keep the state of each run whose task the engine completed, drop the others' (lost leases). */
  #settleWorkflowTasks(done: Array<[Row, Message[], Replayer]>, completed: (i: number) => boolean, quiet = false): void {
    done.forEach(([row, , state], i) => {
      if (completed(i)) {
        this.stats.workflowTasks++;
        this.#cache.put(row.runId, state);
      } else {
        state.close();
        if (quiet) return;
        this.stats.leasesLost++;
        this.#log.warn(`dex: workflow task of run ${row.runId}: lease lost, result discarded`);
      }
    });
  }

  async #completeOneWorkflowTask(conn: pg.Client, row: Row, cmds: Message[]): Promise<void> {
    let attempt = cmds;
    for (let i = 0; i < 2; i++) {
      try {
        await conn.query("SELECT dex.complete_task($1, $2, $3, $4::jsonb)", [row.runId, row.taskId, row.lockVersion, JSON.stringify(attempt)]);
        this.stats.workflowTasks++;
        return;
      } catch (e) {
        if (sqlstate(e) === LEASE_LOST) {
          this.stats.leasesLost++;
          this.#log.warn(`dex: workflow task of run ${row.runId}: lease lost, result discarded`);
          return;
        }
        if (isConnectionError(e)) throw e;
        const msg = `${sqlstate(e)}: ${(e as Error).message}`;
        this.#log.error(`dex: run ${row.runId}: completion refused: ${msg}`);
        attempt = [failRunCommand(`the engine refused the workflow's commands: ${msg}`, "dex.InvalidCommands")];
      }
    }
    this.#log.error(`dex: run ${row.runId}: could not complete its workflow task`);
  }

  // -- activity tasks ----------------------------------------------------------------------------

  async #reserve(): Promise<number> {
    while (this.#free === 0 && !this.#stopping) await new Promise<void>((resolve) => this.#slotWaiters.push(resolve));
    if (this.#stopping) return 0;
    const n = Math.min(this.#free, this.maxBatch);
    this.#free -= n;
    return n;
  }

  #release(n: number): void {
    if (n <= 0) return;
    this.#free += n;
    for (const w of this.#slotWaiters.splice(0)) w();
  }

  async #activityLoop(p: Poller): Promise<void> {
    // the one-call wait holds its reserved slots while it waits: only when no other activity
    // loop of this worker shares them; otherwise poll, and long-poll with dex.wait_for_tasks
    const oneQueue = this.#activityPollers === 1;
    const queue = p.queue;
    await this.#polling(p, async (conn) => {
      // between calls: results of activities ending now ride the next call (see #handoff)
      this.#handoffOpen = oneQueue;
      const n = await this.#reserve();
      this.#handoffOpen = false;
      if (n === 0) {
        this.#returnHandoff();
        return;
      }
      let rows: Row[];
      try {
        rows = oneQueue ? await this.#pollWaitWithResults(conn, p, n, this.#handoff.splice(0))
                        : await this.#poll(conn, p, n, false);
      } catch (e) {
        this.#release(n);
        throw e;
      }
      this.#release(n - rows.length);
      for (const row of rows) {
        let task: Message;
        try {
          task = this.#wire.activityTask(row.raw);
        } catch (e) {                                 // left to its lease, which fails the attempt
          this.#release(1);
          this.#log.error(`dex: run ${row.runId}: activity task ${row.taskId} cannot be decoded:`, e);
          continue;
        }
        const r = new Running(row, task, this);
        this.#inflight.set(r.key, r);
        void this.#execute(r);
      }
      if (!rows.length && !oneQueue) {
        await this.#waitingCall(conn, false, () => conn.query("CALL dex.wait_for_tasks($1, make_interval(secs => $2))", [queue, this.pollTimeout]), undefined);
      }
      // (not while it would reconnect first: they would wait for that)
      this.#handoffOpen = oneQueue && !this.#stopping && !isBroken(conn);
    });
    this.#handoffOpen = false;
  }

  /**
   * The one-call wait of the activity loop, completing `handed` (results of activities of its
   * queue) first, in the transaction that leases the next tasks; each settled from `completed`.
   * A call that fails leaves them to the reporter: refused (a result too large, ...), it changed
   * nothing; broken or cancelled, it may have applied them, so a lost lease then is expected.
   */
  async #pollWaitWithResults(conn: pg.Client, p: Poller, n: number, handed: Running[]): Promise<Row[]> {
    if (!handed.length || this.#stopping) {
      this.#toReporter(handed);
      return this.#pollWait(conn, p, n, false);
    }
    for (const r of handed) r.inCall = true;
    let res: pg.QueryResult;
    try {
      this.#waiting.set(conn, true);
      try {
        res = await conn.query(this.#pollWaitQuery(p, n, false, {
          rows: handed.map((r) => r.row), results: handed.map((r) => (r.outcome as { value: unknown }).value) }));
      } finally {
        this.#waiting.delete(conn);
      }
    } catch (e) {
      if (sqlstate(e) === "57014" || isConnectionError(e)) {
        for (const r of handed) r.resent = true;
        this.#toReporter(handed);
        if (sqlstate(e) === "57014" && this.#stopping) return [];
        throw e;
      }
      this.#log.warn(`dex: activity results with the poll refused (${(e as Error).message}); the reporter sends them`);
      this.#toReporter(handed);
      return this.#pollWait(conn, p, n, false);
    }
    const applied: boolean[] = res.rows[0]?.completed ?? [];
    handed.forEach((r, i) => {
      if (applied[i] === true) this.stats.activityCompletionsInPoll++;
      this.#settle(r, applied[i] === true);
    });
    return this.#leased(p, res);
  }

  async #execute(r: Running): Promise<void> {
    const info = r.ctx.info;
    let outcome: Outcome;
    try {
      const d = this.#activities.get(info.name);
      if (!d) throw new ApplicationError(`no activity '${info.name}' is registered on worker ${this.workerId}`, { type: "dex.UnknownActivity" });
      const result = await d.fn(decode(r.task.argument), r.ctx);
      try {
        toJsonText(result, `the result of activity '${info.name}'`);
      } catch (e) {
        throw new NonRetryableError((e as Error).message, { type: "TypeError" });
      }
      outcome = { kind: "complete", value: result === undefined ? null : result };
    } catch (e) {
      outcome = { kind: "fail", failure: failureFromError(e) };
    }
    r.finished = true;
    // before the slot is released: the activity loop, woken by it, takes a result handed to it
    if (outcome.kind === "complete" && this.#handoffOpen && !this.#stopping && !r.outcome) {
      r.outcome = outcome;
      this.#handoff.push(r);
    } else {
      this.#report(r, outcome);
    }
    this.#release(1);
  }

  /** Queue the outcome for the reporter; only a task's first outcome counts. */
  #report(r: Running, outcome: Outcome): void {
    if (r.outcome) return;
    r.outcome = outcome;
    this.#toReporter([r]);
  }

  /** Queue outcomes set already for the reporter. */
  #toReporter(rs: Running[]): void {
    if (!rs.length) return;
    for (const r of rs) r.inCall = false;
    this.#results.push(...rs);
    this.#wakeReporter?.();
  }

  /** Give the reporter what was handed to the activity loop and not sent. */
  #returnHandoff(): void {
    this.#handoffOpen = false;
    this.#toReporter(this.#handoff.splice(0));
  }

  async #reporterLoop(): Promise<void> {
    let conn: pg.Client | undefined;
    const interval = Math.max(200, (this.activityLease * 1000) / 3);
    let nextBeat = Date.now() + interval;
    for (;;) {
      if (!this.#results.length && !this.#reporterStop) {
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, Math.max(0, nextBeat - Date.now()));
          this.#wakeReporter = () => { clearTimeout(t); resolve(); };
        });
        this.#wakeReporter = undefined;
      }
      const batch = this.#results.splice(0, 1000);
      try {
        if (!conn || isBroken(conn)) {
          await closeQuietly(conn);
          conn = await connect(this.#connection, `dex worker ${this.workerId}`);
        }
        if (batch.length) await this.#sendResults(conn, batch);
        if (Date.now() >= nextBeat) {
          await this.#heartbeat(conn);
          nextBeat = Date.now() + interval;
        }
      } catch (e) {
        this.#log.warn(`dex: reporter: ${(e as Error).message}${isPreparedStatementError(e) ? `; ${POOLER_HINT}` : ""}; retrying`);
        await closeQuietly(conn);
        conn = undefined;
        this.#results.unshift(...batch);        // send them again
        if (this.#reporterStop && Date.now() > nextBeat + 30_000) {
          this.#log.error(`dex: reporter: giving up on ${this.#results.length} results`);
          break;
        }
        await sleep(500);
        continue;
      }
      if (this.#reporterStop && !this.#results.length) break;
    }
    await closeQuietly(conn);
  }

  async #sendResults(conn: pg.Client, batch: Running[]): Promise<void> {
    // grouped first: a result refused one by one becomes a failure (reported already)
    const groups = [false, true].map((fail) => batch.filter((r) => (r.outcome!.kind === "fail") === fail));
    for (const [i, rs] of groups.entries()) {
      const fail = i === 1;
      if (!rs.length) continue;
      const values = fail ? this.#wire.failuresArray(rs.map((r) => (r.outcome as { failure: Message }).failure))
                          : this.#wire.resultsArray(rs.map((r) => (r.outcome as { value: unknown }).value));
      let ok: Set<string>;
      try {
        ok = await this.#completeBatch(conn, rs.map((r) => r.row), values, fail);
      } catch (e) {
        if (isConnectionError(e)) throw e;
        this.#log.warn(`dex: reporter: dex.${fail ? "fail_tasks" : "complete_tasks"} refused (${(e as Error).message}); one by one`);
        for (const r of rs) await this.#sendOne(conn, r);
        continue;
      }
      this.stats.activityReportCalls++;
      for (const r of rs) this.#settle(r, ok.has(r.key));
    }
  }

  async #sendOne(conn: pg.Client, r: Running): Promise<void> {
    const o = r.outcome!;
    const keys = [r.row.runId, r.row.taskId, r.row.lockVersion];
    try {
      if (o.kind === "complete") await conn.query("SELECT dex.complete_task($1, $2, $3, $4::jsonb)", [...keys, o.value === null ? null : JSON.stringify(o.value)]);
      else await conn.query("SELECT dex.fail_task($1, $2, $3, $4::jsonb)", [...keys, JSON.stringify(o.failure)]);
      this.#settle(r, true);
    } catch (e) {
      if (isConnectionError(e)) throw e;
      if (sqlstate(e) === LEASE_LOST) {
        this.#settle(r, false);
        return;
      }
      // the result itself is refused (too large, ...): that is the activity's failure
      this.#log.error(`dex: activity ${r.ctx.info.name} (id ${r.row.taskId}) of run ${r.row.runId}: result refused: ${(e as Error).message}`);
      try {
        await conn.query("SELECT dex.fail_task($1, $2, $3, $4::jsonb)", [...keys, JSON.stringify({
          message: `the engine refused the activity's result: ${(e as Error).message}`, type: "dex.ResultRefused", terminal: true })]);
        r.outcome = { kind: "fail", failure: {} };
        this.#settle(r, true);
      } catch (e2) {
        if (isConnectionError(e2)) throw e2;
        this.#settle(r, false);
      }
    }
  }

  #settle(r: Running, ok: boolean): void {
    r.reported = true;
    this.#inflight.delete(r.key);
    if (!ok) {
      if (r.resent) return;              // perhaps applied by the call that broke
      this.stats.leasesLost++;
      this.#log.warn(`dex: activity ${r.ctx.info.name} (id ${r.row.taskId}) of run ${r.row.runId}: lease lost, outcome discarded`);
    } else if (r.outcome!.kind === "complete") {
      this.stats.activitiesCompleted++;
    } else {
      this.stats.activitiesFailed++;
    }
  }

  async #heartbeat(conn: pg.Client): Promise<void> {
    const held = [...this.#inflight.values()].filter((r) => !r.reported && !r.inCall);
    if (!held.length) return;
    const groups = new Map<string, Running[]>();
    for (const r of held) groups.set(r.ctx.info.queue, [...(groups.get(r.ctx.info.queue) ?? []), r]);
    const kept = new Set<string>();
    for (const [queue, rs] of groups) {
      const res = await conn.query({
        name: this.#named("dex_heartbeat_tasks"),
        text: "SELECT run_id, task_id FROM dex.heartbeat_tasks($1::uuid[], $2::integer[], $3::bigint[], make_interval(secs => $4), $5)",
        values: [rs.map((r) => r.row.runId), rs.map((r) => r.row.taskId), rs.map((r) => r.row.lockVersion), this.activityLease, queue],
      });
      for (const row of res.rows) kept.add(`${row.run_id}/${row.task_id}`);
    }
    for (const r of held) {
      if (!kept.has(r.key) && !r.ctx.leaseLost && !r.reported) {
        r.ctx._loseLease();
        this.#log.warn(`dex: activity ${r.ctx.info.name} (id ${r.row.taskId}) of run ${r.row.runId}: lease lost while running`);
      }
    }
  }
}
