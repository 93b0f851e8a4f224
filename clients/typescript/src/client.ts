/** The client: queues, starting runs, waiting for their results, events, cancellation, history. */
import pg from "pg";
import { type Duration, type Message, eventKind, seconds, toJsonText } from "./convert.js";
import type { WorkflowDefinition } from "./definitions.js";
import {
  AlreadyExistsError, InvalidArgumentError, NotFoundError, RunCancelledError, RunFailedError, RunTerminatedError, RunTimedOutError, WaitTimeoutError,
} from "./errors.js";
import { type ConnectionOptions, isConnectionError, translate } from "./pg.js";

/** The statuses of a run that has ended (the others: DELAYED, CREATED, RUNNING, SUSPENDED, BLOCKED). */
export const TERMINAL = ["COMPLETED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT"] as const;

/** A workflow run as dex.get_run shows it. */
export interface Run {
  id: string;
  workflowName: string;
  workflowVersion: number;
  queue: string | null;
  status: string;
  instanceId: string | null;
  priority: number;
  labels: Record<string, string>;
  concurrencyKey: string | null;
  customStatus: string | null;
  parentId: string | null;
  argument: unknown;
  result: unknown;
  failure: Message | null;
  historyLength: number;
  createdAt: Date | null;
  updatedAt: Date | null;
  startedAt: Date | null;
  completedAt: Date | null;
  /** Whether the run has ended. */
  done: boolean;
}

function toRun(r: Record<string, any>): Run {
  return {
    id: r.id, workflowName: r.workflow_name, workflowVersion: r.workflow_version, queue: r.queue,
    status: r.status, instanceId: r.instance_id, priority: r.priority, labels: r.labels ?? {},
    concurrencyKey: r.concurrency_key, customStatus: r.custom_status, parentId: r.parent_id,
    argument: r.argument, result: r.result, failure: r.failure, historyLength: r.history_length ?? 0,
    createdAt: r.created_at, updatedAt: r.updated_at, startedAt: r.started_at, completedAt: r.completed_at,
    done: (TERMINAL as readonly string[]).includes(r.status),
  };
}

export interface StartOptions {
  queue: string;
  version?: number;
  /** At most one active run per instance id: a second start is an error, or with ifActive "return" gives the active run's id. */
  instanceId?: string;
  ifActive?: "error" | "return";
  priority?: number;
  labels?: Record<string, string>;
  concurrencyKey?: string;
  /** A future time makes the run DELAYED until then. */
  startAt?: Date;
  /** The run ends TIMED_OUT if it has not ended that long after its start. */
  executionTimeout?: Duration;
  /**
   * dex 1.7: starts with the same key (for this workflow and queue) while the run the first made
   * has not started update that run (the last argument wins; its id is returned) and push its
   * start to `debounce` after the latest, never past `debounceMax` after the first.
   */
  debounceKey?: string;
  debounce?: Duration;
  debounceMax?: Duration;
}

/** What became of one event of Client.sendEvents. */
export type EventOutcome = "DELIVERED" | "DUPLICATE" | "TARGET_ENDED" | "TARGET_NOT_FOUND";

export interface ListOptions {
  workflowName?: string;
  status?: string;
  labels?: Record<string, string>;
  createdAfter?: Date;
  createdBefore?: Date;
  completedAfter?: Date;
  completedBefore?: Date;
  parentId?: string;
  /** The last run of the previous page (runs are listed newest first). */
  before?: string;
  pageSize?: number;
}

/** Per-run options of Client.startMany (dex 1.7): arrays as long as the arguments, null or undefined for the default. */
export interface StartManyOptions extends Pick<StartOptions, "queue" | "version" | "priority" | "labels" | "startAt" | "executionTimeout"> {
  instanceIds?: Array<string | null | undefined>;
  concurrencyKeys?: Array<string | null | undefined>;
  /** Each run's priority, else `priority`. */
  priorities?: Array<number | null | undefined>;
  /** Each run's labels, else `labels`. */
  runLabels?: Array<Record<string, string> | null | undefined>;
  /** Each run's start time, else `startAt`. */
  startTimes?: Array<Date | null | undefined>;
}

/** What a tick does while a run its schedule started is active. */
export type OverlapPolicy = "skip" | "buffer_one" | "allow_all" | "cancel_other" | "terminate_other";

/** The settings of a schedule that Client.alterSchedule may change (undefined: unchanged). */
export interface ScheduleChange {
  /** A five-field cron expression or @daily-style shorthand (replaces an `every`). */
  cron?: string;
  /** A fixed interval of at least a second (replaces a `cron`). */
  every?: Duration;
  argument?: unknown;
  version?: number;
  /** A name of pg_timezone_names; the cron fields are matched against its wall clock. */
  timezone?: string;
  overlap?: OverlapPolicy;
  /** Ticks missed by more than this are skipped, not caught up. */
  catchupWindow?: Duration;
  /** Each tick fires up to this much later (a deterministic amount). */
  jitter?: Duration;
  /** No tick before it; in alterSchedule, null removes it. */
  startAt?: Date | null;
  /** No tick after it; in alterSchedule, null removes it. */
  endAt?: Date | null;
  /** Added to the labels of every run it starts. */
  labels?: Record<string, string>;
}

/** The settings of Client.createSchedule. */
export interface ScheduleOptions extends ScheduleChange {
  queue: string;
  paused?: boolean;
}

/** A schedule as the view dex.schedules shows it (dex 1.7); durations in seconds. */
export interface Schedule {
  name: string;
  workflowName: string;
  workflowVersion: number;
  queue: string;
  cron: string | null;
  everySeconds: number | null;
  timezone: string;
  overlap: OverlapPolicy;
  catchupWindowSeconds: number;
  jitterSeconds: number;
  startAt: Date | null;
  endAt: Date | null;
  paused: boolean;
  /** Why it was paused. */
  note: string | null;
  argument: unknown;
  labels: Record<string, string>;
  nextTick: Date | null;
  /** The next tick plus its jitter; null while paused or after the end. */
  nextFireAt: Date | null;
  bufferedTick: Date | null;
  /** The last tick that started a run, and that run. */
  lastTick: Date | null;
  lastRunId: string | null;
  lastRunStatus: string | null;
  runsStarted: number;
  /** Ticks skipped because a run was active, and because they were missed by more than the catch-up window. */
  skippedOverlap: number;
  skippedMissed: number;
  createdAt: Date;
  updatedAt: Date | null;
}

const SCHEDULE_SQL =
  "SELECT name, workflow_name, workflow_version, queue, cron, extract(epoch FROM every)::float8 AS every_s, " +
  "timezone, overlap, extract(epoch FROM catchup_window)::float8 AS catchup_s, extract(epoch FROM jitter)::float8 AS jitter_s, " +
  "start_at, end_at, paused, note, argument, labels, next_tick, next_fire_at, buffered_tick, last_tick, last_run_id, " +
  "last_run_status, runs_started::float8 AS runs_started, skipped_overlap::float8 AS skipped_overlap, " +
  "skipped_missed::float8 AS skipped_missed, created_at, updated_at FROM dex.schedules";

function toSchedule(r: Record<string, any>): Schedule {
  return {
    name: r.name, workflowName: r.workflow_name, workflowVersion: r.workflow_version, queue: r.queue, cron: r.cron,
    everySeconds: r.every_s, timezone: r.timezone, overlap: r.overlap, catchupWindowSeconds: r.catchup_s,
    jitterSeconds: r.jitter_s, startAt: r.start_at, endAt: r.end_at, paused: r.paused, note: r.note,
    argument: r.argument, labels: r.labels ?? {}, nextTick: r.next_tick, nextFireAt: r.next_fire_at,
    bufferedTick: r.buffered_tick, lastTick: r.last_tick, lastRunId: r.last_run_id, lastRunStatus: r.last_run_status,
    runsStarted: r.runs_started, skippedOverlap: r.skipped_overlap, skippedMissed: r.skipped_missed,
    createdAt: r.created_at, updatedAt: r.updated_at,
  };
}

/** Named arguments of dex.create_schedule / dex.alter_schedule for what `o` gives, numbered from `first`. */
function scheduleArgs(o: ScheduleChange & { paused?: boolean; workflow?: string; queue?: string }, first: number,
                      alter: boolean): [string, unknown[]] {
  const parts: string[] = [];
  const values: unknown[] = [];
  const add = (name: string, value: unknown, cast = "") => {
    if (value === undefined) return;
    values.push(value);
    parts.push(`, ${name} => $${first + values.length - 1}${cast}`);
  };
  add("cron", o.cron);
  add("every", o.every === undefined ? undefined : seconds(o.every), "::float8 * interval '1 second'");
  add("argument", o.argument === undefined ? undefined : jsonParam(o.argument, "the schedule's argument"), "::jsonb");
  add("version", o.version, "::integer");
  add("timezone", o.timezone);
  add("overlap", o.overlap);
  add("catchup_window", o.catchupWindow === undefined ? undefined : seconds(o.catchupWindow), "::float8 * interval '1 second'");
  add("jitter", o.jitter === undefined ? undefined : seconds(o.jitter), "::float8 * interval '1 second'");
  // in an alteration null removes start_at and end_at
  add("start_at", o.startAt === null ? (alter ? "-infinity" : undefined) : o.startAt, "::timestamptz");
  add("end_at", o.endAt === null ? (alter ? "infinity" : undefined) : o.endAt, "::timestamptz");
  add("labels", o.labels === undefined ? undefined : jsonParam(o.labels, "labels"), "::jsonb");
  add("paused", o.paused, "::boolean");
  add("workflow", o.workflow);
  if (alter) add("queue", o.queue);
  return [parts.join(""), values];
}

/** JSON text for a jsonb parameter (undefined and null are SQL NULL). */
function jsonParam(value: unknown, what: string): string | null {
  return value === undefined || value === null ? null : toJsonText(value, what);
}

function interval(d: Duration | undefined): number | null {
  return d === undefined ? null : seconds(d);
}

/**
 * A connection pool to a database with dex.  `connection` is a connection string or a
 * node-postgres pool config; by default the PG* environment variables.  Waits for runs run in
 * the server (CALL dex.wait_for_run), each on a connection of its own.
 */
export class Client {
  readonly #pool: pg.Pool;

  constructor(connection?: ConnectionOptions | pg.PoolConfig, options: { max?: number } = {}) {
    const config: pg.PoolConfig = typeof connection === "string" ? { connectionString: connection } : { ...(connection ?? {}) };
    config.max ??= options.max ?? 10;
    config.application_name ??= "dex client";
    this.#pool = new pg.Pool(config);
    this.#pool.on("error", () => { /* an idle connection died: the pool replaces it */ });
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }

  /**
   * One statement on a connection of the pool.  A connection the server dropped (a restart)
   * is only noticed when used: the statement is tried again on another one when it was not
   * sent (EPIPE) or when it may run twice (`idempotent`).
   */
  async #query(text: string, values: unknown[] = [], idempotent = true): Promise<pg.QueryResult> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#pool.query(text, values);
      } catch (e) {
        const unsent = (e as { code?: string }).code === "EPIPE";
        // every idle connection may be dead: as many tries as the pool has connections
        if (attempt > this.#pool.options.max + 2 || !isConnectionError(e) || !(unsent || idempotent)) throw translate(e);
        if (!unsent) await new Promise((resolve) => setTimeout(resolve, 200 * Math.min(attempt, 5)));
      }
    }
  }

  /** Any SQL statement on a connection of the pool (for what the client has no method for): its rows. */
  async sql<R extends Record<string, any> = Record<string, any>>(text: string, values: unknown[] = []): Promise<R[]> {
    return (await this.#query(text, values, false)).rows as R[];
  }

  /** Create a workflow or activity queue; false if it existed (and existOk, the default). */
  async createQueue(name: string, kind: "workflow" | "activity", options: { capacity?: number; existOk?: boolean } = {}): Promise<boolean> {
    try {
      await this.#query("SELECT dex.create_queue($1, $2, $3)", [name, kind, options.capacity ?? null], false);
      return true;
    } catch (e) {
      if (e instanceof AlreadyExistsError && (options.existOk ?? true)) return false;
      throw e;
    }
  }

  static #workflow(workflow: WorkflowDefinition | string, version?: number): [string, number] {
    return typeof workflow === "string" ? [workflow, version ?? 1] : [workflow.name, version ?? workflow.version];
  }

  /** Start a run of `workflow` (a definition or a name); its id. */
  async start<A>(workflow: WorkflowDefinition<A> | string, arg: A | undefined, options: StartOptions): Promise<string> {
    const [name, version] = Client.#workflow(workflow, options.version);
    // the debounce arguments only when given: an older dex has none
    const debounce = options.debounceKey === undefined ? "" :
      ", debounce_key => $12, debounce => make_interval(secs => $13), debounce_max => make_interval(secs => $14)";
    const res = await this.#query(
      "SELECT dex.create_run($1, $2, $3::jsonb, workflow_version => $4, instance_id => $5, priority => $6, " +
      "labels => $7::jsonb, concurrency_key => $8, if_active => $9, start_at => $10, " +
      "execution_timeout => make_interval(secs => $11)" + debounce + ") AS id",
      [name, options.queue, jsonParam(arg, `the argument of workflow '${name}'`), version, options.instanceId ?? null,
       options.priority ?? 0, jsonParam(options.labels, "labels"), options.concurrencyKey ?? null,
       options.ifActive ?? "error", options.startAt ?? null, interval(options.executionTimeout),
       ...(options.debounceKey === undefined ? [] :
         [options.debounceKey, interval(options.debounce), interval(options.debounceMax)])], false);
    return res.rows[0].id;
  }

  /**
   * Start one run per argument in one call (dex.create_runs); their ids, in order.  With the
   * per-run options of dex 1.7 (instanceIds, concurrencyKeys, priorities, runLabels,
   * startTimes), a run whose instance id has an active run is not started: its place holds that
   * run's id (startManyRows tells which).
   */
  async startMany<A>(workflow: WorkflowDefinition<A> | string, args: A[], options: StartManyOptions): Promise<string[]> {
    return (await this.startManyRows(workflow, args, options)).map((r) => r.id);
  }

  /** startMany with, per run, whether it was started (false: its instance id had an active run, whose id is given). */
  async startManyRows<A>(workflow: WorkflowDefinition<A> | string, args: A[],
                         options: StartManyOptions): Promise<Array<{ id: string; created: boolean }>> {
    const [name, version] = Client.#workflow(workflow, options.version);
    const values: unknown[] = [
      name, options.queue, args.map((a, i) => jsonParam(a, `argument ${i} of workflow '${name}'`)), version,
      options.priority ?? 0, jsonParam(options.labels, "labels"), options.startAt ?? null, interval(options.executionTimeout)];
    let extra = "";
    // the per-run arguments only when given: dex 1.6 has none
    const perRun = (arg: string, list: unknown[] | undefined, cast: string, map: (x: any, i: number) => unknown = (x) => x ?? null) => {
      if (list === undefined) return;
      if (list.length !== args.length) throw new InvalidArgumentError(`${arg} has ${list.length} elements for ${args.length} arguments`);
      values.push(list.map(map));
      extra += `, ${arg} => $${values.length}::${cast}`;
    };
    perRun("instance_ids", options.instanceIds, "text[]");
    perRun("concurrency_keys", options.concurrencyKeys, "text[]");
    perRun("priorities", options.priorities, "integer[]");
    perRun("run_labels", options.runLabels, "jsonb[]", (x, i) => jsonParam(x, `runLabels[${i}]`));
    perRun("start_times", options.startTimes, "timestamptz[]");
    const res = await this.#query(
      "SELECT * FROM dex.create_runs($1, $2, $3::jsonb[], $4, $5, $6::jsonb, $7, make_interval(secs => $8)" + extra + ")",
      values, false);
    // dex 1.6 returns the ids alone
    return res.rows.map((r) => ({ id: r.id, created: r.created ?? true }));
  }

  // -- schedules (dex 1.7; dex_admin's, as queues are) ----------------------------------------

  /**
   * Create a schedule that starts runs of `workflow` on `options.queue` at the ticks of a cron
   * expression (`cron`) in a time zone, or every fixed interval (`every`): exactly one of them.
   * Its next fire time (null if paused or none).  InvalidArgumentError for a malformed
   * expression, AlreadyExistsError for a taken name, NotSupported before dex 1.7.
   */
  async createSchedule(name: string, workflow: WorkflowDefinition | string, options: ScheduleOptions): Promise<Date | null> {
    const [wf, version] = Client.#workflow(workflow, options.version);
    const [extra, values] = scheduleArgs({ ...options, version }, 4, false);
    const res = await this.#query(`SELECT dex.create_schedule($1, $2, $3${extra}) AS next`, [name, wf, options.queue, ...values], false);
    return res.rows[0].next;
  }

  /**
   * Change a schedule: what is given (undefined stays as it is; a cron replaces an every and
   * the reverse; startAt or endAt null removes it).  The timing counts afresh from now.  Its
   * next fire time.
   */
  async alterSchedule(name: string, change: ScheduleChange & { workflow?: WorkflowDefinition | string; queue?: string }): Promise<Date | null> {
    const { workflow, ...rest } = change;
    // a definition gives its name and, unless `version` is given, its version
    const version = change.version ?? (typeof workflow === "object" ? workflow.version : undefined);
    const wfName = typeof workflow === "object" ? workflow.name : workflow;
    const [extra, values] = scheduleArgs({ ...rest, workflow: wfName, version }, 2, true);
    const res = await this.#query(`SELECT dex.alter_schedule($1${extra}) AS next`, [name, ...values], false);
    return res.rows[0].next;
  }

  /** Pause a schedule, with a note saying why: its ticks start nothing until it is unpaused (they are not caught up). */
  async pauseSchedule(name: string, note?: string): Promise<void> {
    await this.#query("SELECT dex.pause_schedule($1, $2)", [name, note ?? null]);
  }

  /** Unpause a schedule: it fires from its next tick after now; that fire time. */
  async unpauseSchedule(name: string): Promise<Date | null> {
    return (await this.#query("SELECT dex.unpause_schedule($1) AS next", [name])).rows[0].next;
  }

  /** Delete a schedule; the runs it started go on. */
  async deleteSchedule(name: string): Promise<void> {
    await this.#query("SELECT dex.delete_schedule($1)", [name], false);
  }

  /** Fire a schedule now, under its overlap policy or the one given: the run started, or null if the policy started none. */
  async triggerSchedule(name: string, overlap?: OverlapPolicy): Promise<string | null> {
    return (await this.#query("SELECT dex.trigger_schedule($1, $2) AS id", [name, overlap ?? null], false)).rows[0].id;
  }

  /**
   * Fire the ticks of the schedule from `from` (included) to `to` (excluded), at most 1000,
   * now, under its overlap policy or the one given: each tick with the run it started (null:
   * none).
   */
  async backfillSchedule(name: string, from: Date, to: Date, overlap?: OverlapPolicy): Promise<Array<{ tick: Date; runId: string | null }>> {
    const res = await this.#query("SELECT tick, run_id FROM dex.backfill_schedule($1, $2, $3, $4)",
                                  [name, from, to, overlap ?? null], false);
    return res.rows.map((r) => ({ tick: r.tick, runId: r.run_id }));
  }

  /** The next `n` (1 to 1000) ticks of the schedule after now, within its start and end, without jitter. */
  async scheduleNextTimes(name: string, n = 10): Promise<Date[]> {
    const res = await this.#query("SELECT t FROM dex.schedule_next_times($1, $2) AS t", [name, n]);
    return res.rows.map((r) => r.t);
  }

  /** The schedule (NotFoundError if there is none). */
  async getSchedule(name: string): Promise<Schedule> {
    const res = await this.#query(SCHEDULE_SQL + " WHERE name = $1", [name]);
    if (res.rows.length === 0) throw new NotFoundError(`schedule "${name}" does not exist`, { sqlstate: "42704" });
    return toSchedule(res.rows[0]);
  }

  /** Schedules by name, filtered by workflow, queue or paused. */
  async listSchedules(options: { workflowName?: string; queue?: string; paused?: boolean } = {}): Promise<Schedule[]> {
    const res = await this.#query(
      SCHEDULE_SQL + " WHERE ($1::text IS NULL OR workflow_name = $1) AND ($2::text IS NULL OR queue = $2) " +
      "AND ($3::boolean IS NULL OR paused = $3) ORDER BY name",
      [options.workflowName ?? null, options.queue ?? null, options.paused ?? null]);
    return res.rows.map(toSchedule);
  }

  /** The run (NotFoundError if there is none). */
  async get(runId: string): Promise<Run> {
    const res = await this.#query("SELECT * FROM dex.get_run($1)", [runId]);
    return toRun(res.rows[0]);
  }

  /** Wait (in the server) until the run has ended; the run.  WaitTimeoutError after `timeout` seconds. */
  async wait(runId: string, timeout?: Duration): Promise<Run> {
    const deadline = timeout === undefined ? Infinity : Date.now() + 1000 * seconds(timeout);
    for (;;) {
      const left = Math.min(60, Math.max(0, (deadline - Date.now()) / 1000));
      const res = await this.#query("CALL dex.wait_for_run($1, make_interval(secs => $2))", [runId, left]);
      if ((TERMINAL as readonly string[]).includes(res.rows[0].status)) return this.get(runId);
      if (Date.now() >= deadline) throw new WaitTimeoutError(`run ${runId} is still ${res.rows[0].status} after ${timeout} s`);
    }
  }

  /**
   * Wait for the run to end; its result.  Throws RunFailedError (RunTerminatedError,
   * RunTimedOutError), RunCancelledError, or WaitTimeoutError after `timeout` seconds.
   */
  async result<R = any>(runId: string, options: { timeout?: Duration } = {}): Promise<R> {
    const run = await this.wait(runId, options.timeout);
    const failure = run.failure ?? {};
    switch (run.status) {
      case "COMPLETED": return run.result as R;
      case "CANCELLED": throw new RunCancelledError(`run ${runId} was cancelled`);
      case "TERMINATED": throw new RunTerminatedError(`run ${runId}: ${failure.message ?? ""}`, failure);
      case "TIMED_OUT": throw new RunTimedOutError(`run ${runId} timed out: ${failure.message ?? ""}`, failure);
      default: throw new RunFailedError(`run ${runId} failed: ${failure.message ?? ""}`, failure);
    }
  }

  /** Send an external event; false if the run already had one with that id. */
  async sendEvent(runId: string, eventId: string, payload?: unknown): Promise<boolean> {
    const res = await this.#query("SELECT dex.send_external_event($1, $2, $3::jsonb) AS ok",
                                  [runId, eventId, jsonParam(payload, `the payload of event '${eventId}'`)]);
    return res.rows[0].ok;
  }

  /**
   * Send many external events in one call (dex.send_external_events, dex 1.7): each
   * [runId, eventId, payload]; the outcome of each, in order, instead of an error.
   */
  async sendEvents(events: Array<[string, string, unknown?]>): Promise<EventOutcome[]> {
    if (events.length === 0) return [];
    const res = await this.#query(
      "SELECT outcome FROM dex.send_external_events($1::uuid[], $2::text[], $3::jsonb[])",
      [events.map((e) => e[0]), events.map((e) => e[1]),
       events.map((e, i) => jsonParam(e[2], `the payload of event ${i}`))], false);
    return res.rows.map((r) => r.outcome as EventOutcome);
  }

  /**
   * Send an external event to the active run of a workflow instance; false if it already had
   * one with that id.  Without `queue`, an instance id active on several queues is an error.
   */
  async sendEventToInstance(instanceId: string, eventId: string, payload?: unknown, queue?: string): Promise<boolean> {
    const res = await this.#query("SELECT dex.send_external_event_to_instance($1, $2, $3::jsonb, $4) AS ok",
                                  [instanceId, eventId, jsonParam(payload, `the payload of event '${eventId}'`), queue ?? null]);
    return res.rows[0].ok;
  }

  /** Request the run's cancellation: the workflow sees a CancelledError, may clean up, and the run ends CANCELLED. */
  async cancel(runId: string, reason?: string): Promise<void> {
    await this.#query("SELECT dex.cancel_run($1, $2)", [runId, reason ?? null]);
  }

  /** End the run at once as TERMINATED, without running workflow code. */
  async terminate(runId: string, reason?: string): Promise<void> {
    await this.#query("SELECT dex.terminate_run($1, $2)", [runId, reason ?? null]);
  }

  /** One page of runs matching every filter given, newest first (dex.list_runs). */
  async list(options: ListOptions = {}): Promise<Run[]> {
    const res = await this.#query(
      "SELECT * FROM dex.list_runs(workflow_name => $1, status => $2, labels => $3::jsonb, created_after => $4, " +
      "created_before => $5, completed_after => $6, completed_before => $7, parent_id => $8::uuid, " +
      "before_id => $9::uuid, page_size => $10::integer)",
      [options.workflowName ?? null, options.status ?? null, jsonParam(options.labels, "labels"),
       options.createdAfter ?? null, options.createdBefore ?? null, options.completedAfter ?? null,
       options.completedBefore ?? null, options.parentId ?? null, options.before ?? null, options.pageSize ?? 100]);
    return res.rows.map(toRun);
  }

  /** The run's events (canonical dex.v1.WorkflowEvent JSON), in order. */
  async history(runId: string): Promise<Message[]> {
    return (await this.historyRows(runId)).map(([, e]) => e);
  }

  /** The run's events with their sequence numbers. */
  async historyRows(runId: string): Promise<Array<[number, Message]>> {
    const res = await this.#query("SELECT sequence, event FROM dex.run_history($1) ORDER BY sequence", [runId]);
    return res.rows.map((r) => [r.sequence, r.event]);
  }

  /** The run's history as a table, one event a line. */
  async formatHistory(runId: string, width = 64): Promise<string> {
    const rows = await this.historyRows(runId);
    return formatHistory(rows.map(([, e]) => e), width, rows.map(([s]) => s));
  }
}

function clock(ts: string | undefined): string {
  if (!ts) return "";
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? ts : d.toISOString().slice(11, 23);
}

/** A readable one-line summary of an event's details. */
function brief(body: Message): string {
  const parts: string[] = [];
  const refs = Object.keys(body).filter((k) => k.endsWith("EventId"));
  for (const k of refs) parts.push(`for=${body[k]}`);
  for (const [k, v] of Object.entries(body)) {
    if (refs.includes(k)) continue;
    let text: string;
    if (v && typeof v === "object" && typeof v.json === "string") text = JSON.stringify(JSON.parse(v.json));
    else if (v && typeof v === "object" && ["failure", "lastFailure", "cause"].includes(k)) text = `'${v.message ?? ""}'${v.type ? ` (${v.type})` : ""}`;
    else if (v && typeof v === "object") text = JSON.stringify(v);
    else if (typeof v === "string" && /(At|Timestamp)$/.test(k)) text = clock(v);
    else text = String(v);
    parts.push(`${k}=${text}`);
  }
  return parts.join(" ");
}

/** Events as a table, one a line; `seq` is the sequence number if given, else the position. */
export function formatHistory(events: Message[], width = 64, sequences?: number[]): string {
  const rows = events.map((ev, i) => {
    const k = eventKind(ev);
    let details = brief(ev[k] ?? {});
    if (details.length > width) details = details.slice(0, width - 1) + "…";
    return [String(sequences?.[i] ?? i + 1), clock(ev.timestamp), k, String(ev.id ?? ""), details];
  });
  const head = ["seq", "at", "event", "id", "details"];
  const widths = head.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
  const line = (r: string[]) => r.map((v, c) => (c === 0 || c === 3 ? v.padStart(widths[c]!) : v.padEnd(widths[c]!))).join(" | ").trimEnd();
  return [line(head), widths.map((w) => "-".repeat(w)).join("-+-"), ...rows.map(line)].join("\n");
}
