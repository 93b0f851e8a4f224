/** The client: queues, starting runs, waiting for their results, events, cancellation, history. */
import pg from "pg";
import { type Duration, type Message, eventKind, seconds, toJsonText } from "./convert.js";
import type { WorkflowDefinition } from "./definitions.js";
import {
  AlreadyExistsError, RunCancelledError, RunFailedError, RunTerminatedError, RunTimedOutError, WaitTimeoutError,
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

  /** Start one run per argument in one call (dex.create_runs); their ids, in order. */
  async startMany<A>(workflow: WorkflowDefinition<A> | string, args: A[],
                     options: Pick<StartOptions, "queue" | "version" | "priority" | "labels" | "startAt" | "executionTimeout">): Promise<string[]> {
    const [name, version] = Client.#workflow(workflow, options.version);
    const res = await this.#query(
      "SELECT id FROM dex.create_runs($1, $2, $3::jsonb[], $4, $5, $6::jsonb, $7, make_interval(secs => $8)) AS id",
      [name, options.queue, args.map((a, i) => jsonParam(a, `argument ${i} of workflow '${name}'`)), version,
       options.priority ?? 0, jsonParam(options.labels, "labels"), options.startAt ?? null, interval(options.executionTimeout)], false);
    return res.rows.map((r) => r.id);
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
