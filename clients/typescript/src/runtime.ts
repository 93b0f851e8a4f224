/**
 * Running workflow code by replay (the same model as the Python SDK's `_runtime.py`).
 *
 * A workflow task (dex.v1.WorkflowTask, JSON form) carries the run's history and the events
 * the workflow has not seen yet.  {@link Replayer.run} re-runs the workflow function from its
 * start, feeding it the recorded events task by task, and returns the new task's commands:
 *
 * - the history is cut into workflow tasks: `workflowTaskStarted`, the events the task was
 *   shown (its inputs), `workflowTaskCompleted`, then the events of the commands it returned;
 * - for each task: apply its inputs (they settle the futures workflow code awaits), let
 *   workflow code run until it waits again, then compare what it asked for with what the task
 *   recorded.  Every command carries an id, 1, 2, 3, ... in the order workflow code issues
 *   them over the run's life; a command whose id is in the history is matched against the
 *   recorded event (same kind and name, same task) and not sent again; anything else during
 *   replay is non-determinism: the workflow task fails (type dex.NonDeterminism, naming both
 *   sides) and is retried after a backoff until code that matches is deployed (the run parks
 *   BLOCKED after dex.max_workflow_task_failures; dex.resume_run retries it), or, for a
 *   workflow declared with `nonDeterminismFailsRun`, the run fails;
 * - the last task is the new one: its commands go to the engine.
 *
 * Workflow code is an `async` function on JavaScript's own promises.  Its awaitables are dex
 * futures (thenables settled only by history events) and promises made of them, so once the
 * inputs of a task are applied everything workflow code can do happens in microtasks:
 * {@link drain} waits for a macrotask turn (setImmediate), by which time the microtask queue
 * is empty and the workflow waits for the next event.  Awaiting anything else (a timer, I/O)
 * breaks that: workflow code must not.  `ctx.now()` is the timestamp of the current task's
 * `workflowTaskStarted`.
 *
 * Cancellation: `runCancelRequested` rejects every dex future still pending with a
 * {@link CancelledError}; futures made afterwards (the cleanup's) work as usual.
 */
import { createHash } from "node:crypto";
import {
  type Duration, type Json, type Message, commandKind, decode, duration, encode, eventKind,
  parseTimestamp, retryPolicyJson, roundtrip, type RetryPolicy,
} from "./convert.js";
import type { ActivityDefinition, WorkflowDefinition } from "./definitions.js";
import {
  ActivityError, CancelledError, ChildRunError, DexError, InvalidArgumentError, NON_DETERMINISM, NOT_DEX_AWAITABLE,
  NonDeterminismError, UNKNOWN_WORKFLOW, WaitTimeout, failureFromError,
} from "./errors.js";
import { codeLocation } from "./location.js";

/** The event each command records (command kind -> event kind). */
export const COMMAND_EVENT: Record<string, string> = {
  scheduleActivity: "activityTaskCreated",
  startTimer: "timerCreated",
  cancelTimer: "timerCancelled",
  waitExternalEvent: "externalEventWaitStarted",
  recordSideEffect: "sideEffectExecuted",
  setCustomStatus: "customStatusSet",
  startChildRun: "childRunCreated",
  signalExternalRun: "externalRunSignalled",
  completeRun: "runCompleted",
  failRun: "runFailed",
  cancelRun: "runCancelled",
  continueAsNew: "runContinuedAsNew",
  recordMarker: "markerRecorded",
  publishEvent: "eventPublished",
};
const EVENT_COMMAND = new Set(Object.values(COMMAND_EVENT));
/** The field that must match on replay besides the kind and the id. */
const KEY_FIELD: Record<string, string> = {
  scheduleActivity: "name", activityTaskCreated: "name",
  startTimer: "name", timerCreated: "name",
  cancelTimer: "timerCreatedEventId", timerCancelled: "timerCreatedEventId",
  waitExternalEvent: "eventId", externalEventWaitStarted: "eventId",
  recordSideEffect: "name", sideEffectExecuted: "name",
  startChildRun: "workflowName", childRunCreated: "workflowName",
  signalExternalRun: "eventId", externalRunSignalled: "eventId",
  recordMarker: "name", markerRecorded: "name",
  publishEvent: "name", eventPublished: "name",
};

/** The marker ctx.patched records: this + the change id. */
const PATCH_MARKER = "dex.patch:";

function patchName(changeId: string): string {
  if (typeof changeId !== "string" || !changeId) throw new InvalidArgumentError("a patch's change id is a non-empty string");
  return PATCH_MARKER + changeId;
}

/** The change id of a patch marker event, or undefined. */
function patchOf(ev: Message | undefined): string | undefined {
  const name: string = ev?.markerRecorded?.name ?? "";
  return name.startsWith(PATCH_MARKER) ? name.slice(PATCH_MARKER.length) : undefined;
}

/**
 * A workflow task the worker fails (dex.fail_tasks), not its run: it is handed out again after
 * a backoff, and the run is BLOCKED after dex.max_workflow_task_failures.  Replay throws it for
 * non-determinism about a patch, which deploying code that matches the run's history mends.
 */
export class WorkflowTaskFailure extends Error {
  constructor(readonly failure: Message) {
    super(failure.message ?? "");
  }
}

const PARENT_CLOSE_POLICIES = ["TERMINATE", "REQUEST_CANCEL", "ABANDON"] as const;
export type ParentClosePolicy = (typeof PARENT_CLOSE_POLICIES)[number];

const DEX_AWAITABLES = "workflows await only ctx.activity(), ctx.sleep(), ctx.waitEvent(), ctx.child(), ctx.all(), ctx.any() " +
  "and their own async functions, never setTimeout, setImmediate or I/O (ctx.sleep() for setTimeout)";

/** Workflow code waits for something that is not a dex awaitable: its workflow task fails (dex.NotDexAwaitable). */
class NotDexAwaitable extends DexError {}

/** " at file:line:column" of the user's code where `e` was made, or "". */
function at(e: Error): string {
  const where = codeLocation(e.stack);
  return where ? ` at ${where}` : "";
}

/** Let every microtask run: workflow code then waits for the next history event. */
function drain(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

// ---------------------------------------------------------------------------------------------
// Futures
// ---------------------------------------------------------------------------------------------

/**
 * Something workflow code awaits: an activity's result, a timer, an event, a child run.
 * Settled only by history events, so replay settles it at the same point every time.
 */
export class DexFuture<T = unknown> implements PromiseLike<T> {
  #state: "pending" | "resolved" | "rejected" = "pending";
  #value: T | undefined;
  #error: unknown;
  #listeners: Array<() => void> = [];

  /** Whether it has settled. */
  get done(): boolean {
    return this.#state !== "pending";
  }

  /** @internal */
  _resolve(value: T): void {
    if (this.#state !== "pending") return;
    this.#state = "resolved";
    this.#value = value;
    this.#notify();
  }

  /** @internal */
  _reject(error: unknown): void {
    if (this.#state !== "pending") return;
    this.#state = "rejected";
    this.#error = error;
    this.#notify();
  }

  #notify(): void {
    const ls = this.#listeners;
    this.#listeners = [];
    for (const l of ls) l();
  }

  then<A = T, B = never>(onfulfilled?: ((value: T) => A | PromiseLike<A>) | null,
                         onrejected?: ((reason: any) => B | PromiseLike<B>) | null): Promise<A | B> {
    const settled = new Promise<T>((resolve, reject) => {
      const settle = () => (this.#state === "resolved" ? resolve(this.#value as T) : reject(this.#error));
      if (this.#state === "pending") this.#listeners.push(settle);
      else settle();
    });
    return settled.then(onfulfilled, onrejected);
  }

  /** @internal Whether something waits for it (workflow code awaits it, or a promise made of it). */
  get _awaited(): boolean {
    return this.#listeners.length > 0;
  }

  /** @internal Call `fn` when it settles (at once if it has); the function that stops that. */
  _watch(fn: () => void): () => void {
    if (this.#state !== "pending") {
      fn();
      return () => {};
    }
    this.#listeners.push(fn);
    return () => {
      const i = this.#listeners.indexOf(fn);
      if (i >= 0) this.#listeners.splice(i, 1);
    };
  }
}

/** An activity the workflow scheduled: await it for its result (or an {@link ActivityError}). */
export class ActivityHandle<T = any> extends DexFuture<T> {
  constructor(readonly id: number, readonly name: string) {
    super();
  }
}

/** A durable timer: await it, or {@link Timer.cancel} it. */
export class Timer extends DexFuture<void> {
  /** @internal */
  constructor(readonly id: number, readonly name: string, private readonly replayer: Replayer) {
    super();
  }
  /** Cancel the timer (a cancelTimer command); awaiting it then throws CancelledError. */
  cancel(): boolean {
    if (this.done) return false;
    this.replayer.cancelTimer(this);
    return true;
  }
}

/** Waiting for an external event: resolves to its payload, or throws {@link WaitTimeout}. */
export class EventWait<T = any> extends DexFuture<T> {
  constructor(readonly id: number, readonly eventId: string, readonly hasTimeout: boolean) {
    super();
  }
}

/** A child run: resolves to its result, or throws {@link ChildRunError}. `runId` is known from the next workflow task on. */
export class ChildRun<T = any> extends DexFuture<T> {
  runId: string | undefined;
  constructor(readonly id: number, readonly workflowName: string) {
    super();
  }
}

/** What became of an external event a workflow sent (ctx.signal). */
export type SignalOutcome = "DELIVERED" | "DUPLICATE" | "TARGET_ENDED" | "TARGET_NOT_FOUND";

/**
 * An external event this workflow sent to another run (ctx.signal): resolves, in the next
 * workflow task, to its outcome.  Awaiting it is optional.  `runId` is the target, once known.
 */
export class Signal extends DexFuture<SignalOutcome> {
  runId: string | undefined;
  constructor(readonly id: number, readonly eventId: string) {
    super();
  }
}

/** "SIGNAL_OUTCOME_DELIVERED" -> "DELIVERED" */
function signalOutcome(value: unknown): SignalOutcome {
  return String(value ?? "").replace(/^SIGNAL_OUTCOME_/, "") as SignalOutcome;
}

/** The target of ctx.signal: exactly one of runId and instanceId (with its queue, else this run's). */
export interface SignalTarget {
  runId?: string;
  instanceId?: string;
  queue?: string;
}

// ---------------------------------------------------------------------------------------------
// The context
// ---------------------------------------------------------------------------------------------

export interface ActivityCallOptions {
  queue?: string;
  retry?: RetryPolicy;
  priority?: number;
  startToCloseTimeout?: Duration;
  scheduleToCloseTimeout?: Duration;
  heartbeatTimeout?: Duration;
}

export interface ChildOptions {
  version?: number;
  queue?: string;
  instanceId?: string;
  priority?: number;
  labels?: Record<string, string>;
  concurrencyKey?: string;
  /** The child ends TIMED_OUT if it has not ended that long after its start. */
  executionTimeout?: Duration;
  /** What the child does when this run ends first (default TERMINATE). */
  parentClosePolicy?: ParentClosePolicy;
}

/** A logger that says nothing while the workflow replays what it already did. */
export interface WorkflowLogger {
  debug(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

/**
 * What workflow code gets as its first parameter.  Workflow code must be deterministic: given
 * the same history it must issue the same commands in the same order.  Use `ctx.now()` rather
 * than the clock, `ctx.random()` / `ctx.uuid()` / `ctx.sideEffect()` rather than randomness,
 * activities for any I/O, `ctx.sleep()` rather than setTimeout, and `ctx.log` for logs.
 */
export class WorkflowContext {
  /** @internal */
  readonly r: Replayer;
  #rng: (() => number) | undefined;
  readonly log: WorkflowLogger;

  /** @internal */
  constructor(replayer: Replayer) {
    this.r = replayer;
    const say = (level: "debug" | "info" | "warn" | "error") => (...args: unknown[]) => {
      if (!this.r.replaying && !this.r.closed) console[level](`[${this.workflowName} ${this.runId}]`, ...args);
    };
    this.log = { debug: say("debug"), info: say("info"), warn: say("warn"), error: say("error") };
  }

  get runId(): string { return this.r.task.runId ?? ""; }
  get workflowName(): string { return this.r.task.workflowName ?? ""; }
  get workflowVersion(): number { return Number(this.r.task.workflowVersion ?? 1); }
  get queue(): string { return this.r.task.queue ?? ""; }
  /** The run's argument (also the workflow function's second parameter). */
  get argument(): any { return this.r.argument; }
  get instanceId(): string | undefined { return this.r.runInfo.instanceId; }
  get labels(): Record<string, string> { return { ...(this.r.runInfo.labels ?? {}) }; }
  get parentRunId(): string | undefined { return this.r.runInfo.parent?.runId; }
  /** How many times the run continued as new (0 for its first history). */
  get generation(): number { return this.r.generation; }
  /** True while workflow code re-runs a workflow task whose commands are recorded. */
  get isReplaying(): boolean { return this.r.replaying; }
  /** True once the run's cancellation was requested (dex.cancel_run). */
  get cancelRequested(): boolean { return this.r.cancelReason !== undefined; }
  get cancelReason(): string | undefined { return this.r.cancelReason; }

  /** The deterministic clock: when the current workflow task started. */
  now(): Date {
    return new Date(this.r.now.getTime());
  }

  /** A number in [0, 1) from a generator seeded by the run id: the same numbers on every replay. */
  random(): number {
    if (!this.#rng) this.#rng = seededRandom(this.runId);
    return this.#rng();
  }

  /** A random (version 4) UUID that stays the same on replay. */
  uuid(): string {
    const b = Buffer.alloc(16);
    for (let i = 0; i < 16; i++) b[i] = Math.floor(this.random() * 256);
    b[6] = (b[6]! & 0x0f) | 0x40;
    b[8] = (b[8]! & 0x3f) | 0x80;
    const h = b.toString("hex");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  /**
   * Schedule an activity (a definition or its name) with one JSON argument; await the handle
   * for its result.  Options left out come from the activity's declaration, then the engine's
   * defaults.
   */
  activity<A, R>(activity: ActivityDefinition<A, R>, arg?: A, options?: ActivityCallOptions): ActivityHandle<R>;
  activity<R = any>(activity: string, arg?: unknown, options?: ActivityCallOptions): ActivityHandle<R>;
  activity(activity: ActivityDefinition | string, arg?: unknown, options: ActivityCallOptions = {}): ActivityHandle {
    const d = typeof activity === "string" ? this.r.activities.get(activity) : activity;
    const name = typeof activity === "string" ? activity : activity.name;
    const queue = options.queue ?? d?.queue ?? this.r.definition?.activityQueue ?? this.r.defaultActivityQueue;
    if (!queue) {
      throw new DexError(`activity '${name}': no queue (give { queue }, or declare one with activity(..., { queue }) ` +
                         `or workflow(..., { activityQueue }), or give the worker an activity queue)`);
    }
    const body: Message = { name, queue };
    if (arg !== undefined && arg !== null) body.argument = encode(arg, `the argument of activity '${name}'`);
    const policy = retryPolicyJson(options.retry ?? d?.retry);
    if (policy) body.retryPolicy = policy;
    if (options.priority) body.priority = Math.trunc(options.priority);
    const timeouts: Array<[string, Duration | undefined]> = [
      ["startToCloseTimeout", options.startToCloseTimeout ?? d?.startToCloseTimeout],
      ["scheduleToCloseTimeout", options.scheduleToCloseTimeout ?? d?.scheduleToCloseTimeout],
      ["heartbeatTimeout", options.heartbeatTimeout ?? d?.heartbeatTimeout],
    ];
    for (const [field, value] of timeouts) if (value !== undefined) body[field] = duration(value);
    const [id] = this.r.command("scheduleActivity", body);
    const handle = new ActivityHandle(id, name);
    this.r.pendingActivities.set(id, handle);
    return handle;
  }

  /** A durable timer of `delay` (seconds, or "30s", "5m", ...); await it to sleep. */
  sleep(delay: Duration, name = "sleep"): Timer {
    const [id] = this.r.command("startTimer", { name, delay: duration(delay) });
    const timer = new Timer(id, name, this.r);
    this.r.timers.set(id, timer);
    return timer;
  }

  /**
   * Wait for the external event `eventId` (dex.send_external_event): its payload.  With a
   * timeout, awaiting throws {@link WaitTimeout} if no event came in time.  An event that came
   * before the wait resolves it at once.
   */
  waitEvent<T = any>(eventId: string, options: { timeout?: Duration } = {}): EventWait<T> {
    if (this.r.received.has(eventId)) {
      const w = new EventWait<T>(0, eventId, false);
      w._resolve(this.r.received.get(eventId) as T);
      return w;
    }
    const body: Message = { eventId };
    if (options.timeout !== undefined) body.timeout = duration(options.timeout);
    const [id] = this.r.command("waitExternalEvent", body);
    const w = new EventWait<T>(id, eventId, options.timeout !== undefined);
    const list = this.r.waiters.get(eventId) ?? [];
    list.push(w);
    this.r.waiters.set(eventId, list);
    if (options.timeout !== undefined) this.r.timers.set(id, w);
    return w;
  }

  /** Run `fn()` once and record its (JSON) result; replays return the recorded value. */
  sideEffect<T>(fn: () => T, name?: string): T {
    const n = name ?? (fn.name || "sideEffect");
    if (this.r.peekRecorded() !== undefined || this.r.replaying) {
      const [, ev] = this.r.command("recordSideEffect", { name: n });
      return decode(ev?.sideEffectExecuted?.result) as T;
    }
    const value = roundtrip(fn(), `the result of side effect '${n}'`);
    this.r.command("recordSideEffect", { name: n, result: encode(value) });
    return value;
  }

  /**
   * Whether this run takes the new path of change `changeId`: true for a run that reaches this
   * point under code that has the change (a marker is recorded), and on replay for a run that
   * recorded it here; false for a run that passed this point under the old code.  The answer is
   * kept for the run.  Keep the old path until no run that took it remains, then
   * {@link deprecatePatch}.
   */
  patched(changeId: string): boolean {
    const r = this.r;
    const known = r.patches.get(changeId);
    if (known !== undefined) return known;
    const name = patchName(changeId);
    const rec = r.peekRecorded();
    let taken: boolean;
    if (rec) {
      const marker = patchOf(rec);
      if (marker !== undefined && marker !== changeId) {
        throw r.nondeterminism(`non-determinism: patch '${changeId}' is checked where the history recorded patch ` +
                               `'${marker}' (id ${rec.id}): the patches of the code do not match the run's`, changeId);
      }
      taken = marker === changeId;      // else the old code issued another command here
    } else {
      taken = !r.replaying;             // replaying: the old code issued nothing more in that task
    }
    if (taken) r.command("recordMarker", { name });
    r.patches.set(changeId, taken);
    return taken;
  }

  /**
   * Change `changeId`'s old path is gone from the code: runs that recorded its marker replay it
   * here, new runs record nothing.  Remove the call once no run that recorded it remains.
   */
  deprecatePatch(changeId: string): void {
    const r = this.r;
    const name = patchName(changeId);
    const rec = r.peekRecorded();
    const marker = patchOf(rec);
    if (marker === changeId) {
      r.command("recordMarker", { name });
    } else if (marker !== undefined) {
      throw r.nondeterminism(`non-determinism: deprecated patch '${changeId}' is met where the history recorded ` +
                             `patch '${marker}' (id ${rec!.id})`, changeId);
    }
    r.patches.set(changeId, true);
  }

  /**
   * Publish an event of the workflow's own (dex 1.10): recorded in the history as eventPublished once,
   * whatever the replays, and, when the run's queue publishes its events
   * (`dex.alter_queue(q, publish => true)`), sent to logical decoding consumers when this workflow task's
   * completion commits (docs/publishing.md). `name`: 1 to 255 bytes; `payload`: a JSON value or bytes, optional.
   */
  publish(name: string, payload?: unknown): void {
    const body: Message = { name: String(name) };
    if (payload !== undefined) body.payload = encode(payload, `the payload of published event ${name}`);
    this.r.command("publishEvent", body);
  }

  /** Set the run's custom status (shown by dex.get_run); "" clears it. */
  setCustomStatus(status: string): void {
    this.r.command("setCustomStatus", { customStatus: String(status) });
  }

  /** Start a child run (a workflow definition or a name); await it for its result. */
  child<A, R>(workflow: WorkflowDefinition<A, R>, arg?: A, options?: ChildOptions): ChildRun<R>;
  child<R = any>(workflow: string, arg?: unknown, options?: ChildOptions): ChildRun<R>;
  child(workflow: WorkflowDefinition | string, arg?: unknown, options: ChildOptions = {}): ChildRun {
    const name = typeof workflow === "string" ? workflow : workflow.name;
    const version = options.version ?? (typeof workflow === "string" ? 1 : workflow.version);
    const body: Message = { workflowName: name, workflowVersion: version };
    if (options.queue) body.queue = options.queue;
    if (arg !== undefined && arg !== null) body.argument = encode(arg, `the argument of child workflow '${name}'`);
    if (options.instanceId) body.instanceId = options.instanceId;
    if (options.priority) body.priority = Math.trunc(options.priority);
    if (options.labels && Object.keys(options.labels).length) body.labels = { ...options.labels };
    if (options.concurrencyKey) body.concurrencyKey = options.concurrencyKey;
    if (options.executionTimeout !== undefined) body.executionTimeout = duration(options.executionTimeout);
    if (options.parentClosePolicy !== undefined) {
      const p = String(options.parentClosePolicy).toUpperCase().replace(/^PARENT_CLOSE_POLICY_/, "");
      if (!(PARENT_CLOSE_POLICIES as readonly string[]).includes(p)) {
        throw new InvalidArgumentError(`parentClosePolicy must be one of ${PARENT_CLOSE_POLICIES.join(", ")}, not ${options.parentClosePolicy}`);
      }
      body.parentClosePolicy = "PARENT_CLOSE_POLICY_" + p;
    }
    const [id, recorded] = this.r.command("startChildRun", body);
    const handle = new ChildRun(id, name);
    if (recorded) handle.runId = recorded.childRunCreated?.runId;
    this.r.children.set(id, handle);
    return handle;
  }

  /**
   * Send the external event `eventId` with `payload` (JSON) to another run, as
   * dex.send_external_event does: to `target.runId`, or to the active run of
   * `target.instanceId` on `target.queue` (this run's queue when left out).  Returns at once;
   * the event is sent in the transaction that records this workflow task, and its outcome is
   * recorded in the run's history (externalRunSignalled).  Await the returned {@link Signal}
   * for it ("DELIVERED", "DUPLICATE", "TARGET_ENDED" or "TARGET_NOT_FOUND"); the same on replay.
   */
  signal(eventId: string, payload: unknown, target: SignalTarget): Signal {
    if ((target.runId === undefined) === (target.instanceId === undefined)) {
      throw new InvalidArgumentError("ctx.signal: give exactly one of runId and instanceId");
    }
    if (target.runId !== undefined && target.queue !== undefined) {
      throw new InvalidArgumentError("ctx.signal: a queue tells instance ids apart; a runId needs none");
    }
    const body: Message = { eventId: String(eventId) };
    if (target.runId !== undefined) body.runId = String(target.runId);
    else {
      body.instanceId = String(target.instanceId);
      if (target.queue) body.queue = target.queue;
    }
    if (payload !== undefined && payload !== null) body.payload = encode(payload, `the payload of signal '${eventId}'`);
    const [id, recorded] = this.r.command("signalExternalRun", body);
    const handle = new Signal(id, String(eventId));
    if (recorded) handle.runId = recorded.externalRunSignalled?.runId || undefined;
    this.r.signals.set(id, handle);
    return handle;
  }

  /**
   * End this run's history and start over with `arg`.  It throws (never returns); the run
   * continues as new when the workflow function ends, whatever it returns or throws then.
   * The engine refuses it while activities or timers are pending: await or cancel them first.
   */
  continueAsNew(arg?: unknown): never {
    const pending = [...this.r.pendingActivities.values(), ...this.r.timers.values()].filter((f) => !f.done);
    if (pending.length) {
      throw new DexError("continueAsNew with work pending (await or cancel it first): " +
                         pending.map((f) => f.constructor.name + " " + (f as { id: number }).id).join(", "));
    }
    this.r.continueAsNew = { arg: arg === undefined ? undefined : roundtrip(arg, "the argument of continueAsNew") };
    throw new ContinueAsNew();
  }

  /** Await all: their results in order; the first failure (in completion order) is thrown. */
  all<T extends readonly unknown[] | []>(items: T): Promise<{ -readonly [K in keyof T]: Awaited<T[K]> }> {
    const all = Promise.all(items) as Promise<{ -readonly [K in keyof T]: Awaited<T[K]> }>;
    // awaited later (after a timer, say), its failure must not count as an unhandled rejection,
    // which would end the worker's process: whoever awaits it still gets the failure
    all.catch(() => {});
    return all;
  }

  /** Await the first to settle (resolve or reject): its index.  Then await that item for its value. */
  any(items: readonly PromiseLike<unknown>[]): Promise<number> {
    return new Promise<number>((resolve) => {
      // the dex futures that lose stop being waited for: a workflow that goes on to await
      // something that is not a dex awaitable is then seen waiting for nothing of dex
      const unwatch: Array<() => void> = [];
      const first = (i: number) => {
        for (const u of unwatch) u();
        resolve(i);
      };
      items.forEach((item, i) => {
        if (item instanceof DexFuture) unwatch.push(item._watch(() => first(i)));
        else Promise.resolve(item).then(() => first(i), () => first(i));
      });
    });
  }
}

/** Thrown by ctx.continueAsNew() to end the workflow function (let it through). */
export class ContinueAsNew extends DexError {
  constructor() {
    super("continue as new (the workflow function must let this error through)");
  }
}

/** sfc32 seeded with the SHA-256 of `seed`: deterministic, fast, good enough for workflows. */
function seededRandom(seed: string): () => number {
  const h = createHash("sha256").update(seed).digest();
  let a = h.readUInt32BE(0), b = h.readUInt32BE(4), c = h.readUInt32BE(8), d = h.readUInt32BE(12);
  return () => {
    a >>>= 0; b >>>= 0; c >>>= 0; d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
}

// ---------------------------------------------------------------------------------------------
// Replay
// ---------------------------------------------------------------------------------------------

/** One workflow task of the history. */
class Segment {
  inputs: Message[] = [];
  recorded: Message[] = [];
  completed = false;
  constructor(readonly index: number, readonly started: Message) {}
}

function describe(kind: string, body: Message, id: number | string): string {
  const key = KEY_FIELD[kind];
  const v = key ? body[key] : undefined;
  return `${kind}${v !== undefined && v !== "" ? ` '${v}'` : ""} (id ${id})`;
}

function sameEvent(a: Message, b: Message): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Take the future of command `id` out of `map` and settle it: with the payload's value, or the error made for it. */
function settleFrom<F extends DexFuture<any>>(map: Map<number, F>, id: unknown, ok: boolean, payload: Message | undefined,
                                              error: (f: F) => unknown): void {
  const key = Number(id ?? 0);
  const f = map.get(key);
  if (!f) return;
  map.delete(key);
  if (ok) f._resolve(decode(payload));
  else f._reject(error(f));
}

export function failRunCommand(message: string, type: string): Message {
  return { failRun: { failure: { message, type, terminal: true } } };
}

/**
 * The state of one run's workflow code: its promises, futures and what the history recorded.
 * {@link run} builds it by replaying a whole history; a worker may keep it (its workflow
 * cache) and {@link resume} it with the run's next workflow task, which runs only the new step,
 * as long as the history continues exactly where it left off.
 */
export class Replayer {
  task: Message = {};
  readonly ctx: WorkflowContext;
  argument: any = null;
  runInfo: Message = {};
  now = new Date();
  replaying = false;
  closed = false;
  cancelReason: string | undefined;
  generation = 0;
  continueAsNew: { arg: unknown } | undefined;
  readonly pendingActivities = new Map<number, ActivityHandle>();
  readonly timers = new Map<number, Timer | EventWait>();
  readonly children = new Map<number, ChildRun>();
  readonly signals = new Map<number, Signal>();
  readonly waiters = new Map<string, EventWait[]>();
  readonly received = new Map<string, unknown>();
  /** ctx.patched's answers, per change id. */
  readonly patches = new Map<string, boolean>();
  private main: { done: boolean; ok: boolean; value: unknown } | undefined;
  private fatal: NonDeterminismError | undefined;
  private nextId = 0;
  private segment: Segment | undefined;
  private recorded = new Map<number, [Segment, Message]>();
  private matched = new Set<number>();
  private out: Message[] = [];
  private cur: Segment | undefined;
  private carry: Message[] = [];
  private count = 0;
  /** What the last task was, for resume(): the history's length when polled, the events shown, the commands sent. */
  historySeen = 0;
  private shown: Message[] = [];
  private sent: Message[] = [];
  /** The run ends with this task, or the state is unusable. */
  finished = false;

  constructor(readonly definition: WorkflowDefinition | undefined,
              readonly activities: Map<string, ActivityDefinition>,
              readonly defaultActivityQueue: string | undefined) {
    this.ctx = new WorkflowContext(this);
  }

  /** Cut events into workflow tasks, going on from those fed before; the tasks they start. */
  private feed(events: Message[]): Segment[] {
    const fresh: Segment[] = [];
    let cur = this.cur, carry = this.carry;
    for (const ev of events) {
      const k = eventKind(ev);
      if (k === "workflowTaskStarted") {
        cur = new Segment(++this.count, ev);
        cur.inputs = carry;
        carry = [];
        fresh.push(cur);
      } else if (k === "workflowTaskCompleted" && cur) {
        cur.completed = true;
      } else if (cur && cur.completed && EVENT_COMMAND.has(k)) {
        cur.recorded.push(ev);
        if (ev.id) this.recorded.set(Number(ev.id), [cur, ev]);
      } else if (cur && !cur.completed) {
        cur.inputs.push(ev);
      } else {
        carry.push(ev);
      }
    }
    this.cur = cur;
    this.carry = carry;
    return fresh;
  }

  peekRecorded(): Message | undefined {
    return this.recorded.get(this.nextId + 1)?.[1];
  }

  /** Non-determinism, which ends the replay; with `changeId`, about a patch (the workflow task fails, not the run). */
  nondeterminism(message: string, changeId?: string): NonDeterminismError {
    const err = new NonDeterminismError(message);
    this.patchOfFatal = this.fatal ? this.patchOfFatal : changeId;
    this.fatal ??= err;
    return err;
  }

  private patchOfFatal: string | undefined;
  /** Where the last command issued in a task that is not a replay was issued (its stack). */
  private lastCall: Error | undefined;
  /** Workflow code ran after its task ended (said once). */
  private wentOnLate = false;

  /** Issue a command: a new one is sent, a recorded one is matched; [id, recorded event]. */
  command(kind: string, body: Message): [number, Message | undefined] {
    if (this.closed) {
      const err = new DexError("the workflow task is over: workflow code cannot issue commands now " +
                               "(did it await something that is not a dex awaitable, such as a timer or I/O?)");
      if (!this.wentOnLate) {
        // its task may have ended long ago: say where it went on, once
        this.wentOnLate = true;
        console.error(`dex: run ${this.task.runId ?? "?"}: workflow code went on after its workflow task ended, at ` +
                      `${codeLocation(err.stack) ?? "an unknown place"}: the await before that is not a dex awaitable`);
      }
      throw err;
    }
    if (!this.replaying) this.lastCall = new Error();
    const id = ++this.nextId;
    const seg = this.segment!;
    const rec = this.recorded.get(id);
    if (rec) {
      const [rseg, ev] = rec;
      const ek = eventKind(ev);
      const eb: Message = ev[ek] ?? {};
      const key = KEY_FIELD[kind];
      const same = ek === COMMAND_EVENT[kind] && (key === undefined || (eb[key] || null) === (body[key] || null));
      if (!same || rseg !== seg) {
        throw this.nondeterminism(
          `non-determinism: the history has ${describe(ek, eb, id)}, recorded by workflow task ${rseg.index}, ` +
          `but on replay the workflow issues ${describe(kind, body, id)} in workflow task ${seg.index}${at(new Error())}`,
          patchOf(ev) ?? patchOf({ markerRecorded: body }));
      }
      this.matched.add(id);
      return [id, ev];
    }
    if (this.replaying) {
      const list = seg.recorded.map((e) => describe(eventKind(e), e[eventKind(e)] ?? {}, e.id ?? 0));
      throw this.nondeterminism(
        `non-determinism: on replay of workflow task ${seg.index} the workflow issues ${describe(kind, body, id)}${at(new Error())}, ` +
        `which the history does not have (that task recorded ${list.length ? list.join(", ") : "no command"})`,
        kind === "recordMarker" ? patchOf({ markerRecorded: body }) : undefined);
    }
    this.out.push({ id, [kind]: body });
    return [id, undefined];
  }

  cancelTimer(timer: Timer): void {
    this.command("cancelTimer", { timerCreatedEventId: timer.id });
    this.timers.delete(timer.id);
    timer._reject(new CancelledError("timer cancelled"));
  }

  private startMain(): void {
    if (this.main || !this.definition) return;
    const main = { done: false, ok: false, value: undefined as unknown };
    this.main = main;
    const fn = this.definition.fn;
    Promise.resolve()
      .then(() => fn(this.ctx, this.argument))
      .then((v) => { main.done = true; main.ok = true; main.value = v; },
            (e) => { main.done = true; main.value = e; });
  }

  private apply(ev: Message): void {
    const k = eventKind(ev);
    const b: Message = ev[k] ?? {};
    switch (k) {
      case "runCreated":
        this.runInfo = b;
        this.argument = decode(b.argument);
        break;
      case "runStarted":
        this.startMain();
        break;
      case "runContinuedAsNew":          // the history of a later generation starts so
        this.argument = decode(b.argument);
        this.generation = Number(b.generation ?? 0);
        break;
      case "activityTaskCompleted":
      case "activityTaskFailed":
        settleFrom(this.pendingActivities, b.activityTaskCreatedEventId, k === "activityTaskCompleted", b.result,
                   (h) => new ActivityError(h.name, h.id, b.failure ?? {}, Number(b.attempts ?? 0)));
        break;
      case "timerElapsed": {
        const id = Number(b.timerCreatedEventId ?? 0);
        const t = this.timers.get(id);
        if (!t) break;
        this.timers.delete(id);
        if (t instanceof EventWait) {
          const ws = this.waiters.get(t.eventId) ?? [];
          const i = ws.indexOf(t);
          if (i >= 0) ws.splice(i, 1);
          t._reject(new WaitTimeout(t.eventId));
        } else {
          t._resolve();
        }
        break;
      }
      case "externalEventReceived": {
        const eid: string = b.eventId ?? "";
        if (this.received.has(eid)) break;
        const value = decode(b.payload);
        this.received.set(eid, value);
        const ws = this.waiters.get(eid) ?? [];
        this.waiters.delete(eid);
        for (const w of ws) {
          w._resolve(value);
          if (w.hasTimeout && this.timers.delete(w.id)) {
            // the timeout's timer is no longer wanted
            this.command("cancelTimer", { timerCreatedEventId: w.id });
          }
        }
        break;
      }
      case "externalRunSignalResult": {
        const id = Number(b.externalRunSignalledEventId ?? 0);
        const sig = this.signals.get(id);
        if (!sig) break;
        this.signals.delete(id);
        sig.runId = b.runId || undefined;
        sig._resolve(signalOutcome(b.outcome));
        break;
      }
      case "runCancelRequested":
        if (this.cancelReason === undefined) {
          this.cancelReason = b.reason ?? "";
          this.cancelPending(new CancelledError(this.cancelReason));
        }
        break;
      case "childRunCompleted":
      case "childRunFailed":
        settleFrom(this.children, b.childRunCreatedEventId, k === "childRunCompleted", b.result,
                   (h) => new ChildRunError(h.workflowName, h.runId, b.failure ?? {}));
        break;
      default:
        // runSuspended, runResumed and anything unknown: nothing for workflow code
        break;
    }
  }

  /** Reject every pending future (in command order, so that replays do the same). */
  private cancelPending(err: CancelledError): void {
    const pending: Array<[number, DexFuture<any>]> = [
      ...this.pendingActivities.entries(), ...this.timers.entries(), ...this.children.entries(),
    ];
    for (const ws of this.waiters.values()) for (const w of ws) pending.push([w.id, w]);
    pending.sort((x, y) => x[0] - y[0]);
    this.pendingActivities.clear();
    this.timers.clear();
    this.children.clear();
    this.waiters.clear();
    for (const [, f] of pending) f._reject(err);
  }

  /**
   * Replay the whole history of `task` (dex.v1.WorkflowTask as JSON) and run the new workflow
   * task: its commands.  Call {@link close} when the state is not kept.
   */
  async run(task: Message): Promise<Message[]> {
    this.task = task;
    if (!this.definition) {
      this.finished = true;
      return [failRunCommand(`no workflow '${task.workflowName}' version ${task.workflowVersion ?? 1} is registered on this worker`,
                             UNKNOWN_WORKFLOW)];
    }
    const fresh: Message[] = task.newEvents ?? [];
    const segments = this.feed([...(task.history ?? []), ...fresh]);
    return this.step(task, segments, fresh);
  }

  /**
   * Run the next workflow task of a run whose state this is, without replaying: its commands,
   * or undefined when the history does not continue exactly where the state left off (another
   * worker ran a task meanwhile, the last completion was lost, a continue-as-new began a new
   * history...), so that the caller replays from scratch.  `history` is the task's history
   * from event `offset` on (a task may leave out the events this worker has seen).
   */
  async resume(task: Message, history: Message[], offset = 0): Promise<Message[] | undefined> {
    if (this.finished || !this.definition) return undefined;
    const start = this.historySeen - offset;
    if (start < 0 || Number(task.historyLength ?? 0) !== offset + history.length) return undefined;
    const tail = history.slice(start);
    const n = this.shown.length;
    if (tail.length <= n || !this.shown.every((e, i) => sameEvent(e, tail[i]!))) return undefined;
    const rest = tail.slice(n);
    if (eventKind(rest[0]!) !== "workflowTaskCompleted") return undefined;
    const recorded: string[] = [];
    for (const ev of rest.slice(1)) {
      const k = eventKind(ev);
      if (k === "workflowTaskStarted") return undefined;
      if (EVENT_COMMAND.has(k)) recorded.push(`${Number(ev.id ?? 0)}:${k}`);
    }
    const sent = this.sent.map((c) => `${Number(c.id ?? 0)}:${COMMAND_EVENT[commandKind(c)]}`);
    if (recorded.join(",") !== sent.join(",")) return undefined;
    const pending = this.cur;
    this.task = task;
    const fresh: Message[] = task.newEvents ?? [];
    const segments = this.feed([...rest, ...fresh]);
    if (!pending || !pending.completed) return undefined;
    for (const ev of pending.recorded) {   // what the engine recorded of the commands sent
      const id = Number(ev.id ?? 0);
      this.matched.add(id);
      const child = this.children.get(id);
      if (child) child.runId = ev.childRunCreated?.runId;
      const sig = this.signals.get(id);
      if (sig) sig.runId = ev.externalRunSignalled?.runId || undefined;
    }
    return this.step(task, segments, fresh);
  }

  private async step(task: Message, segments: Segment[], fresh: Message[]): Promise<Message[]> {
    this.closed = false;
    this.out = [];
    let out: Message[];
    try {
      if (!segments.length || segments[segments.length - 1]!.completed) {
        throw new NonDeterminismError("the task has no new workflow task to run");
      }
      for (const seg of segments) await this.play(seg);
      out = this.out;
      if (this.main?.done) {
        this.finished = true;
        out.push(this.finalCommand());
      }
    } catch (e) {
      this.finished = true;
      if (e instanceof NotDexAwaitable) {
        console.error(`dex: run ${task.runId}: ${e.message}`);
        // a mistake of the code, as non-determinism: the task fails, and a fixed deploy lets the run go on
        throw new WorkflowTaskFailure({ message: e.message, type: NOT_DEX_AWAITABLE });
      }
      if (e instanceof NonDeterminismError) {
        console.error(`dex: run ${task.runId}: ${e.message}`);
        if (this.patchOfFatal === undefined && this.definition?.nonDeterminismFailsRun) {
          return [failRunCommand(e.message, NON_DETERMINISM)];
        }
        // the task fails, not the run: retried after a backoff, BLOCKED after
        // dex.max_workflow_task_failures, so that a fixed deploy lets the run go on
        throw new WorkflowTaskFailure({
          message: e.message, type: NON_DETERMINISM,
          ...(this.patchOfFatal !== undefined ? { details: encode({ changeId: this.patchOfFatal }) } : {}),
        });
      }
      throw e;
    } finally {
      this.closed = true;
    }
    this.historySeen = Number(task.historyLength ?? 0);
    this.shown = fresh;
    this.sent = out;
    // what the context reads of the task (run id, names, queue), not its history
    const { history: _h, newEvents: _n, ...rest } = task;
    this.task = rest;
    // every recorded command is matched by now: what is kept is the workflow's own state
    this.recorded = new Map();
    this.matched = new Set();
    for (const seg of segments) seg.inputs = [];
    return out;
  }

  /** Apply a task's inputs and let workflow code run until it waits; for a recorded task, check it issued exactly what was recorded. */
  private async play(seg: Segment): Promise<void> {
    this.segment = seg;
    this.replaying = seg.completed;
    this.now = parseTimestamp(seg.started.timestamp) ?? this.now;
    for (const ev of seg.inputs) this.apply(ev);
    await drain();
    if (this.fatal) throw this.fatal;
    if (this.main && !this.main.done && !this.waitsForDex()) {
      throw new NotDexAwaitable(
        `workflow code awaits something that is not a dex awaitable (a timer, I/O, or a promise that no dex awaitable ` +
        `settles)${this.lastCall ? ` after its last dex call${at(this.lastCall)}` : ""}: ${DEX_AWAITABLES}`);
    }
    if (seg.completed) {
      const missing = seg.recorded.find((e) => e.id && !this.matched.has(Number(e.id)));
      if (missing) {
        const k = eventKind(missing);
        throw this.nondeterminism(
          `non-determinism: the history has ${describe(k, missing[k] ?? {}, missing.id)}, recorded by workflow task ` +
          `${seg.index}, but on replay the workflow did not issue it (it issued nothing more in that task)`, patchOf(missing));
      }
      if (this.main?.done) {
        throw this.nondeterminism(`non-determinism: on replay the workflow ended in workflow task ${seg.index}, but the history goes on`);
      }
    }
  }

  /** Whether workflow code waits for something of dex: a future of a command pending (a promise made of it waits for it). */
  private waitsForDex(): boolean {
    const pending: Iterable<DexFuture<any>>[] = [this.pendingActivities.values(), this.timers.values(), this.children.values(),
                                                 this.signals.values(), ...[...this.waiters.values()].map((ws) => ws.values())];
    return pending.some((fs) => [...fs].some((f) => f._awaited));
  }

  /** Drop the state: workflow code still waiting never runs again (and can issue nothing). */
  close(): void {
    this.closed = true;
    this.finished = true;
  }

  private finalCommand(): Message {
    const main = this.main!;
    if (this.continueAsNew) {
      const arg = this.continueAsNew.arg;
      return { continueAsNew: arg === undefined || arg === null ? {} : { argument: encode(arg) } };
    }
    if (main.ok) {
      try {
        return { completeRun: { result: encode(main.value, `the result of workflow '${this.definition!.name}'`) } };
      } catch (e) {
        return { failRun: { failure: { ...failureFromError(e), terminal: true } } };
      }
    }
    if (main.value instanceof CancelledError && this.cancelReason !== undefined) return { cancelRun: {} };
    return { failRun: { failure: failureFromError(main.value) } };
  }
}

/** The commands of a workflow task for `definition`, replaying its whole history. */
export async function replay(task: Message, definition: WorkflowDefinition | undefined,
                             activities: ActivityDefinition[] = [], defaultActivityQueue?: string): Promise<Message[]> {
  const r = new Replayer(definition, new Map(activities.map((a) => [a.name, a])), defaultActivityQueue);
  try {
    return await r.run(task);
  } finally {
    r.close();
  }
}

export type { Json };
