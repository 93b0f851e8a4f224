/**
 * The errors of the dex SDK and their mapping to dex.v1.Failure (canonical JSON).
 * Every error this SDK throws at a user is a {@link DexError}.
 */
import type { Message } from "./message.js";

/** Base class of every error this SDK throws. */
export class DexError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * An error raised by activity or workflow code on purpose.
 * `type` is matched against a retry policy's `nonRetryableTypes` (default: the class name);
 * `terminal` means "never retry, whatever the policy says"; `details` is any JSON value.
 * Any other error an activity throws is retryable, its type the error's class name.
 */
export class ApplicationError extends DexError {
  readonly type: string | undefined;
  readonly details: unknown;
  readonly terminal: boolean;
  constructor(message: string, options: { type?: string; details?: unknown; terminal?: boolean; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.type = options.type;
    this.details = options.details;
    this.terminal = options.terminal ?? false;
  }
}

/** An {@link ApplicationError} that is never retried (terminal). */
export class NonRetryableError extends ApplicationError {
  constructor(message: string, options: { type?: string; details?: unknown; cause?: unknown } = {}) {
    super(message, { ...options, terminal: true });
  }
}

/** Something failed in the engine's world; `failure` is the dex.v1.Failure (JSON). */
export class FailureError extends DexError {
  readonly failure: Message;
  constructor(message: string, failure: Message = {}) {
    super(message);
    this.failure = failure;
  }
  /** The failure's type: an ApplicationError's type, or the failing error's class name. */
  get type(): string | undefined {
    return this.failure.type;
  }
  /** The failure's details (JSON), if any. */
  get details(): unknown {
    const d = this.failure.details;
    return d && typeof d.json === "string" ? JSON.parse(d.json) : undefined;
  }
}

/** In workflow code: an activity failed for good (retries exhausted, or a terminal failure). */
export class ActivityError extends FailureError {
  constructor(readonly activityName: string, readonly activityId: number, failure: Message, readonly attempts: number) {
    super(`activity '${activityName}' (id ${activityId}) failed after ${attempts} attempt(s): ${failure.message ?? ""}`, failure);
  }
}

/** In workflow code: a child run failed, was cancelled, terminated (type dex.Terminated) or timed out (dex.TimedOut). */
export class ChildRunError extends FailureError {
  constructor(readonly workflowName: string, readonly runId: string | undefined, failure: Message) {
    const ended = failure.type === "dex.TimedOut" ? "timed out" : failure.type === "dex.Terminated" ? "was terminated" : "failed";
    super(`child run ${runId ?? "?"} of '${workflowName}' ${ended}: ${failure.message ?? ""}`, failure);
  }
}

/** In workflow code: `ctx.waitEvent(id, { timeout })` saw no event in time. */
export class WaitTimeout extends DexError {
  constructor(readonly eventId: string) {
    super(`no external event '${eventId}' came before the timeout`);
  }
}

/**
 * In workflow code: the run's cancellation was requested (every dex awaitable pending then
 * rejects with it), or a timer was cancelled.  Catch it to clean up (activities still work);
 * let it escape the workflow function to end the run CANCELLED.
 */
export class CancelledError extends DexError {
  constructor(readonly reason = "") {
    super(`run cancellation requested${reason ? ": " + reason : ""}`);
  }
}

/** Replay issued a command that does not match the recorded history (the message names both). */
export class NonDeterminismError extends DexError {}

/** Client: the run ended FAILED; `failure` says why. */
export class RunFailedError extends FailureError {}
/** Client: the run ended TERMINATED (dex.terminate_run). */
export class RunTerminatedError extends RunFailedError {}
/** Client: the run ended TIMED_OUT (its execution timeout passed). */
export class RunTimedOutError extends RunFailedError {}
/** Client: the run ended CANCELLED. */
export class RunCancelledError extends DexError {}
/** Client: a wait for a run ended before the run did. */
export class WaitTimeoutError extends DexError {}

/**
 * An error of the server, by its SQLSTATE (the subclasses below), with its message, detail and
 * hint; `cause` is node-postgres' error.
 */
export class ServerError extends DexError {
  readonly sqlstate: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;
  constructor(message: string, options: { sqlstate?: string; detail?: string; hint?: string; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.sqlstate = options.sqlstate;
    this.detail = options.detail;
    this.hint = options.hint;
  }
}

/** 42704: the queue, run or message type does not exist, or the role may not use it. */
export class NotFoundError extends ServerError {}
/** 42809: a queue of the wrong kind (a workflow queue where an activity queue is needed, or the reverse). */
export class WrongKindError extends ServerError {}
/** 42710: a queue of that name exists. */
export class AlreadyExistsError extends ServerError {}
/** 23505: a run of that instance id is still active; `detail` names it. */
export class AlreadyActiveError extends ServerError {}
/** 42501: the role may not do this (a queue it was not granted, a function of dex_admin). */
export class PermissionDeniedError extends ServerError {}
/**
 * SQLSTATE class 22: a value refused (wrong shape, a NULL where one is required, out of
 * range): by the server, or by the SDK before anything is sent (`sqlstate` 22023 then, as the
 * server would say: "5 parsecs" is no duration).
 */
export class InvalidArgumentError extends ServerError {
  constructor(message: string, options: { sqlstate?: string; detail?: string; hint?: string; cause?: unknown } = {}) {
    super(message, { sqlstate: "22023", ...options });
  }
}
/** 55000: not possible in the run's state (an event for an ended run, ...); class 25: a wait inside a transaction block. */
export class InvalidStateError extends ServerError {}
/** Class 54: a payload, a reason or a batch over its limit. */
export class LimitExceededError extends ServerError {}
/** The database could not be reached or the connection was lost (class 08, or no SQLSTATE): what was sent may or may not have been done. */
export class ConnectionFailedError extends ServerError {}
/** A task's lease was lost (SQLSTATE WD001): another worker holds it, or it completed. */
export class LeaseLost extends ServerError {}
/** WD002: the task's run was cancelled or terminated. */
export class TaskRunEndedError extends ServerError {}
/** The installed dex does not offer this (42883: a routine it lacks; 3F000: no schema dex; 0A000). */
export class NotSupported extends ServerError {}

const SQLSTATE_ERRORS: Record<string, new (message: string, options: { sqlstate?: string; detail?: string; hint?: string; cause?: unknown }) => ServerError> = {
  "42704": NotFoundError, "42809": WrongKindError, "42710": AlreadyExistsError, "23505": AlreadyActiveError,
  "42501": PermissionDeniedError, "22": InvalidArgumentError, "55000": InvalidStateError, "25": InvalidStateError,
  "54": LimitExceededError, "08": ConnectionFailedError, "WD001": LeaseLost, "WD002": TaskRunEndedError,
  "42883": NotSupported, "3F000": NotSupported, "0A000": NotSupported,
};

/** The {@link ServerError} (subclass) for an error of node-postgres: by its SQLSTATE, then its class. */
export function serverError(e: unknown): ServerError {
  const code = sqlstate(e);
  const { message, detail, hint } = (e ?? {}) as { message?: string; detail?: string; hint?: string };
  const cls = code === undefined ? ConnectionFailedError : (SQLSTATE_ERRORS[code] ?? SQLSTATE_ERRORS[code.slice(0, 2)] ?? ServerError);
  return new cls(message || String(e), { sqlstate: code, detail, hint, cause: e });
}

/** A value that must be JSON (an argument, a result, a payload) is not. */
export class NotSerializableError extends DexError {
  constructor(readonly what: string, readonly path: string, reason: string) {
    super(`${what} is not JSON-serializable: ${path} is ${reason}`);
  }
}

/** A worker was given a queue as the other kind (a workflow queue as an activity queue, or the reverse): the server's refusal, saying which kind it is. */
export class QueueKindError extends WrongKindError {}

/** Two definitions given to a worker for one (workflow, version), or one activity name: it could not tell which one to run. */
export class DuplicateDefinitionError extends DexError {}


/** A workflow task of a workflow (name, version) this worker does not have. */
export const UNKNOWN_WORKFLOW = "dex.UnknownWorkflow";
/** The failure type of a run failed for non-determinism. */
export const NON_DETERMINISM = "dex.NonDeterminism";
/** The failure type of a workflow task whose code awaits something that is not a dex awaitable. */
export const NOT_DEX_AWAITABLE = "dex.NotDexAwaitable";

function className(e: unknown): string {
  if (e instanceof Error) {
    const n = e.constructor?.name;
    return n && n !== "Object" ? n : e.name;
  }
  return typeof e;
}

/** The dex.v1.Failure (canonical JSON) describing `e` and its causes. */
export function failureFromError(e: unknown, seen = new Set<unknown>()): Message {
  seen.add(e);
  let f: Message;
  if (e instanceof ApplicationError) {
    f = { message: e.message, type: e.type ?? className(e) };
    if (e.terminal) f.terminal = true;
    f.details = detailsPayload(e.details === undefined ? { stack: e.stack ?? "" } : e.details);
  } else if (e instanceof FailureError) {
    f = { message: e.message, type: className(e) };
    if (Object.keys(e.failure).length) f.cause = e.failure;
  } else if (e instanceof Error) {
    f = { message: e.message || className(e), type: className(e), details: detailsPayload({ stack: e.stack ?? "" }) };
  } else {
    f = { message: String(e), type: className(e) };
  }
  const cause = e instanceof Error ? e.cause : undefined;
  if (cause !== undefined && !seen.has(cause) && !f.cause) f.cause = failureFromError(cause, seen);
  return f;
}

function detailsPayload(details: unknown): Message {
  try {
    return { json: JSON.stringify(details) ?? "null" };
  } catch {
    return { json: JSON.stringify({ repr: String(details) }) };
  }
}

/** The SQLSTATE of a node-postgres error, if it has one. */
export function sqlstate(e: unknown): string | undefined {
  // a server's error has a severity; a system error's code ("EPIPE") can look like a SQLSTATE
  const { code, severity } = (e ?? {}) as { code?: unknown; severity?: unknown };
  return typeof code === "string" && typeof severity === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}
