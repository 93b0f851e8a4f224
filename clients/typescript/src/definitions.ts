/** Declaring workflows and activities: `workflow(name, fn)` and `activity(name, fn)`. */
import type { Duration, RetryPolicy } from "./convert.js";
import type { WorkflowContext } from "./runtime.js";
import type { ActivityContext } from "./worker.js";
import { InvalidArgumentError } from "./errors.js";
import { codeLocation } from "./location.js";

export type WorkflowFunction<A = any, R = any> = (ctx: WorkflowContext, arg: A) => Promise<R>;
export type ActivityFunction<A = any, R = any> = (arg: A, ctx: ActivityContext) => R | Promise<R>;

export interface WorkflowOptions {
  /** Runs are started with this version (default 1); a worker runs each (name, version) it has. */
  version?: number;
  /** The queue of the activities it calls when neither the call nor the activity names one. */
  activityQueue?: string;
  /**
   * A replay that does not match the history (non-determinism: a bad deploy) fails the
   * workflow task, which is retried after a backoff and parks the run BLOCKED after
   * dex.max_workflow_task_failures, so that deploying a fix lets the run go on; with
   * `nonDeterminismFailsRun: true` it fails the run instead (dex.NonDeterminism).
   */
  nonDeterminismFailsRun?: boolean;
}

export interface WorkflowDefinition<A = any, R = any> {
  readonly kind: "workflow";
  /** Where it was defined (file:line:column), for messages. */
  readonly definedAt: string;
  readonly name: string;
  readonly version: number;
  readonly fn: WorkflowFunction<A, R>;
  readonly activityQueue: string | undefined;
  readonly nonDeterminismFailsRun: boolean;
}

export interface ActivityOptions {
  /** Its queue, when the workflow's call does not name one. */
  queue?: string;
  retry?: RetryPolicy;
  startToCloseTimeout?: Duration;
  scheduleToCloseTimeout?: Duration;
  heartbeatTimeout?: Duration;
}

export interface ActivityDefinition<A = any, R = any> extends ActivityOptions {
  readonly kind: "activity";
  readonly definedAt: string;
  readonly name: string;
  readonly fn: ActivityFunction<A, R>;
}

function checkName(what: string, name: unknown): string {
  if (typeof name !== "string" || name === "") throw new InvalidArgumentError(`${what} needs a name (a non-empty string)`);
  return name;
}

/**
 * Declare a workflow: `async (ctx, arg) => result`, replayed deterministically from its
 * history.  Pass the definition to a Worker (to run it) and to Client.start (or a name).
 */
export function workflow<A = any, R = any>(name: string, fn: WorkflowFunction<A, R>, options: WorkflowOptions = {}): WorkflowDefinition<A, R> {
  checkName("a workflow", name);
  if (typeof fn !== "function") throw new InvalidArgumentError(`workflow '${name}': its code must be a function (ctx, arg) => Promise`);
  const version = options.version ?? 1;
  if (!Number.isInteger(version) || version < 1) throw new InvalidArgumentError(`workflow '${name}': version must be an integer >= 1, not ${version}`);
  return Object.freeze({
    kind: "workflow", definedAt: codeLocation(new Error().stack) ?? "an unknown place", name, version, fn, activityQueue: options.activityQueue,
    nonDeterminismFailsRun: options.nonDeterminismFailsRun === true,
  });
}

/**
 * Declare an activity: `(arg, ctx) => result` (sync or async), run at least once by a worker
 * of its queue; the options are defaults for the workflows that call it.
 */
export function activity<A = any, R = any>(name: string, fn: ActivityFunction<A, R>, options: ActivityOptions = {}): ActivityDefinition<A, R> {
  checkName("an activity", name);
  if (typeof fn !== "function") throw new InvalidArgumentError(`activity '${name}': its code must be a function (arg, ctx) => result`);
  return Object.freeze({ ...options, kind: "activity", definedAt: codeLocation(new Error().stack) ?? "an unknown place", name, fn });
}
