/**
 * The protobuf wire form of the dex.v1 messages a worker sends and receives, without a
 * protobuf library (the same codec as the Python SDK's `dex/_proto.py`).
 *
 * The SDK works with messages in their canonical proto3 JSON shape (objects with camelCase
 * keys, payloads as `{ json: "..." }`, timestamps and durations as strings, 64-bit integers as
 * strings, enums by name), whichever wire form it uses.  This module converts between that shape
 * and protobuf bytes: {@link decode} gives what the server's `dex.to_json` gives for the same
 * bytes, and {@link encode} gives bytes the server reads as `dex.from_json` reads the object
 * (test/proto.test.ts checks both against the server, and the schema against the Python SDK's,
 * which its tests check against proto/dex/v1/*.proto).
 *
 * Why not a protobuf library: a dozen proto3 messages (varints, length-delimited fields, one
 * double), and one thing a general runtime would not do: skip the part of a workflow task's
 * history that a cached workflow has seen without decoding it ({@link decodeWorkflowTask}).
 */
import type { Message } from "./convert.js";
import { DexError } from "./errors.js";

/** Bytes that are not the protobuf encoding of the expected message, or an object that does not fit its message. */
export class ProtobufError extends DexError {}

// Field kinds
const INT32 = 0, INT64 = 1, BOOL = 2, ENUM = 3, DOUBLE = 4, STRING = 5, BYTES = 6, MESSAGE = 7, TIMESTAMP = 8,
  DURATION = 9, MAP = 10;
const KIND_NAMES = ["int32", "int64", "bool", "enum", "double", "string", "bytes", "message", "timestamp", "duration", "map"];
const WIRE_TYPE = [0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2];
const R = "repeated", O = "oneof";

/** [number, JSON name, kind, message or enum type, "repeated" | "oneof"] */
type FieldSpec = [number, string, number, ...string[]];

/** Oneof members that are messages named as the field: "10 runStarted, 11 ..." */
function oneof(members: string): FieldSpec[] {
  return members.split(",").map((item) => {
    const [number, name] = item.trim().split(/\s+/) as [string, string];
    return [Number(number), name, MESSAGE, "dex.v1." + name[0]!.toUpperCase() + name.slice(1), O];
  });
}

// The command and the event it records have the same fields.
const SCHEDULE_ACTIVITY: FieldSpec[] = [
  [1, "name", STRING], [2, "queue", STRING], [3, "argument", MESSAGE, "dex.v1.Payload"],
  [4, "retryPolicy", MESSAGE, "dex.v1.RetryPolicy"], [5, "priority", INT32],
  [6, "startToCloseTimeout", DURATION], [7, "scheduleToCloseTimeout", DURATION], [8, "heartbeatTimeout", DURATION]];

/** message -> its fields; MESSAGE names the message type, TIMESTAMP and DURATION are the well-known types, MAP is map<string, string>. */
export const SCHEMA: Record<string, FieldSpec[]> = {
  // common.proto
  "dex.v1.Payload": [[1, "metadata", MAP], [2, "json", STRING, O], [3, "binary", BYTES, O]],
  "dex.v1.Failure": [
    [1, "message", STRING], [2, "details", MESSAGE, "dex.v1.Payload"], [3, "cause", MESSAGE, "dex.v1.Failure"],
    [4, "terminal", BOOL], [5, "type", STRING]],
  "dex.v1.RetryPolicy": [
    [1, "maxAttempts", INT32], [2, "initialDelay", DURATION], [3, "multiplier", DOUBLE],
    // proto3 optional (explicit presence), a oneof of one field on the wire: a 0 is sent and kept
    [4, "randomizationFactor", DOUBLE, O], [5, "maxDelay", DURATION], [6, "nonRetryableTypes", STRING, R]],
  // event.proto
  "dex.v1.WorkflowEvent": [[1, "id", INT32], [2, "timestamp", TIMESTAMP], ...oneof(`
    10 workflowTaskStarted, 11 workflowTaskCompleted, 20 runCreated, 21 runStarted, 22 runCompleted, 23 runFailed,
    24 runCancelled, 25 runSuspended, 26 runResumed, 27 runContinuedAsNew, 28 runCancelRequested, 29 customStatusSet,
    30 runTerminated, 31 runTimedOut, 40 activityTaskCreated, 41 activityTaskCompleted, 42 activityTaskFailed,
    50 timerCreated, 51 timerElapsed, 52 timerCancelled, 60 childRunCreated, 61 childRunCompleted, 62 childRunFailed,
    70 sideEffectExecuted, 71 markerRecorded, 72 eventPublished, 80 externalEventReceived, 81 externalEventWaitStarted,
    82 externalRunSignalled, 83 externalRunSignalResult`)],
  "dex.v1.WorkflowTaskStarted": [[1, "workerId", STRING], [2, "attempt", INT32]],
  "dex.v1.WorkflowTaskCompleted": [],
  "dex.v1.ParentRun": [[1, "runId", STRING], [2, "childRunCreatedEventId", INT32]],
  "dex.v1.RunCreated": [
    [1, "workflowName", STRING], [2, "workflowVersion", INT32], [3, "queue", STRING],
    [4, "argument", MESSAGE, "dex.v1.Payload"], [5, "instanceId", STRING], [6, "priority", INT32], [7, "labels", MAP],
    [8, "concurrencyKey", STRING], [9, "parent", MESSAGE, "dex.v1.ParentRun"], [10, "origin", MESSAGE, "dex.v1.RunOrigin"]],
  "dex.v1.RunOrigin": [[1, "runId", STRING], [2, "kind", STRING], [3, "eventId", INT32]],
  "dex.v1.RunStarted": [],
  "dex.v1.RunCompleted": [[1, "result", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.RunFailed": [[1, "failure", MESSAGE, "dex.v1.Failure"]],
  "dex.v1.RunCancelled": [[1, "reason", STRING], [2, "by", STRING]],
  "dex.v1.RunCancelRequested": [[1, "reason", STRING], [2, "by", STRING]],
  "dex.v1.RunTerminated": [[1, "reason", STRING], [2, "by", STRING]],
  "dex.v1.RunTimedOut": [[1, "deadline", TIMESTAMP]],
  "dex.v1.RunSuspended": [[1, "reason", STRING], [2, "by", STRING]],
  "dex.v1.RunResumed": [[1, "reason", STRING], [2, "by", STRING]],
  "dex.v1.RunContinuedAsNew": [[1, "argument", MESSAGE, "dex.v1.Payload"], [2, "generation", INT32]],
  "dex.v1.CustomStatusSet": [[1, "customStatus", STRING]],
  "dex.v1.ActivityTaskCreated": SCHEDULE_ACTIVITY,
  "dex.v1.ActivityTaskCompleted": [
    [1, "activityTaskCreatedEventId", INT32], [2, "result", MESSAGE, "dex.v1.Payload"], [3, "attempt", INT32],
    [4, "workerId", STRING], [5, "startedAt", TIMESTAMP]],
  "dex.v1.ActivityTaskFailed": [
    [1, "activityTaskCreatedEventId", INT32], [2, "failure", MESSAGE, "dex.v1.Failure"], [3, "attempts", INT32]],
  "dex.v1.TimerCreated": [[1, "name", STRING], [2, "elapseAt", TIMESTAMP]],
  "dex.v1.TimerElapsed": [[1, "timerCreatedEventId", INT32]],
  "dex.v1.TimerCancelled": [[1, "timerCreatedEventId", INT32]],
  "dex.v1.ChildRunCreated": [
    [1, "runId", STRING], [2, "workflowName", STRING], [3, "workflowVersion", INT32], [4, "queue", STRING],
    [5, "argument", MESSAGE, "dex.v1.Payload"], [6, "instanceId", STRING], [7, "priority", INT32], [8, "labels", MAP],
    [9, "concurrencyKey", STRING], [10, "executionTimeout", DURATION], [11, "parentClosePolicy", ENUM, "dex.v1.ParentClosePolicy"]],
  "dex.v1.ChildRunCompleted": [[1, "childRunCreatedEventId", INT32], [2, "result", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.ChildRunFailed": [[1, "childRunCreatedEventId", INT32], [2, "failure", MESSAGE, "dex.v1.Failure"]],
  "dex.v1.SideEffectExecuted": [[1, "name", STRING], [2, "result", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.MarkerRecorded": [[1, "name", STRING], [2, "details", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.EventPublished": [[1, "name", STRING], [2, "payload", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.ExternalEventReceived": [[1, "eventId", STRING], [2, "payload", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.ExternalEventWaitStarted": [[1, "eventId", STRING], [2, "timeoutAt", TIMESTAMP]],
  "dex.v1.ExternalRunSignalled": [
    [1, "runId", STRING], [2, "instanceId", STRING], [3, "queue", STRING], [4, "eventId", STRING],
    [5, "outcome", ENUM, "dex.v1.SignalOutcome"]],
  "dex.v1.ExternalRunSignalResult": [
    [1, "externalRunSignalledEventId", INT32], [2, "outcome", ENUM, "dex.v1.SignalOutcome"], [3, "runId", STRING]],
  "dex.v1.EventBatch": [[1, "events", MESSAGE, "dex.v1.WorkflowEvent", R]],
  "dex.v1.PublishedEvent": [
    [1, "runId", STRING], [2, "queue", STRING], [3, "workflowName", STRING], [4, "workflowVersion", INT32],
    [5, "generation", INT32], [6, "kind", STRING], [7, "event", MESSAGE, "dex.v1.WorkflowEvent"], [8, "sequence", INT32]],
  // command.proto
  "dex.v1.Command": [[1, "id", INT32], ...oneof(`
    10 scheduleActivity, 11 startTimer, 12 cancelTimer, 13 startChildRun, 14 recordSideEffect, 15 waitExternalEvent,
    16 setCustomStatus, 17 completeRun, 18 failRun, 19 continueAsNew, 20 cancelRun, 21 recordMarker, 22 signalExternalRun,
    23 publishEvent`)],
  "dex.v1.ScheduleActivity": SCHEDULE_ACTIVITY,
  "dex.v1.StartTimer": [[1, "name", STRING], [2, "delay", DURATION]],
  "dex.v1.CancelTimer": [[1, "timerCreatedEventId", INT32]],
  "dex.v1.CancelRun": [],
  "dex.v1.StartChildRun": [
    [1, "workflowName", STRING], [2, "workflowVersion", INT32], [3, "queue", STRING], [4, "argument", MESSAGE, "dex.v1.Payload"],
    [5, "instanceId", STRING], [6, "priority", INT32], [7, "labels", MAP], [8, "concurrencyKey", STRING],
    [9, "executionTimeout", DURATION], [10, "parentClosePolicy", ENUM, "dex.v1.ParentClosePolicy"]],
  "dex.v1.RecordSideEffect": [[1, "name", STRING], [2, "result", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.RecordMarker": [[1, "name", STRING], [2, "details", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.PublishEvent": [[1, "name", STRING], [2, "payload", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.WaitExternalEvent": [[1, "eventId", STRING], [2, "timeout", DURATION]],
  "dex.v1.SignalExternalRun": [
    [1, "runId", STRING], [2, "instanceId", STRING], [3, "queue", STRING], [4, "eventId", STRING],
    [5, "payload", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.SetCustomStatus": [[1, "customStatus", STRING]],
  "dex.v1.CompleteRun": [[1, "result", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.FailRun": [[1, "failure", MESSAGE, "dex.v1.Failure"]],
  "dex.v1.ContinueAsNew": [[1, "argument", MESSAGE, "dex.v1.Payload"]],
  "dex.v1.WorkflowTaskCompletion": [[1, "commands", MESSAGE, "dex.v1.Command", R]],
  // task.proto
  "dex.v1.WorkflowTask": [
    [1, "history", MESSAGE, "dex.v1.WorkflowEvent", R], [2, "newEvents", MESSAGE, "dex.v1.WorkflowEvent", R],
    [3, "runId", STRING], [4, "workflowName", STRING], [5, "workflowVersion", INT32], [6, "queue", STRING],
    [7, "lockVersion", INT64], [8, "lockedUntil", TIMESTAMP], [9, "status", ENUM, "dex.v1.RunStatus"],
    [10, "historyLength", INT32], [11, "historyOmitted", INT32]],
  "dex.v1.ActivityTask": [
    [1, "runId", STRING], [2, "taskId", INT32], [3, "name", STRING], [4, "queue", STRING],
    [5, "argument", MESSAGE, "dex.v1.Payload"], [6, "attempt", INT32], [7, "lockVersion", INT64],
    [8, "lockedUntil", TIMESTAMP], [9, "retryPolicy", MESSAGE, "dex.v1.RetryPolicy"],
    [10, "heartbeatDetails", MESSAGE, "dex.v1.Payload"], [11, "lastFailure", MESSAGE, "dex.v1.Failure"]],
};

export const ENUMS: Record<string, string[]> = {
  "dex.v1.RunStatus": ["RUN_STATUS_UNSPECIFIED", "RUN_STATUS_CREATED", "RUN_STATUS_RUNNING", "RUN_STATUS_SUSPENDED",
                       "RUN_STATUS_CANCELLED", "RUN_STATUS_COMPLETED", "RUN_STATUS_FAILED", "RUN_STATUS_TERMINATED",
                       "RUN_STATUS_BLOCKED", "RUN_STATUS_TIMED_OUT", "RUN_STATUS_DELAYED"],
  "dex.v1.ParentClosePolicy": ["PARENT_CLOSE_POLICY_UNSPECIFIED", "PARENT_CLOSE_POLICY_TERMINATE",
                               "PARENT_CLOSE_POLICY_REQUEST_CANCEL", "PARENT_CLOSE_POLICY_ABANDON"],
  "dex.v1.SignalOutcome": ["SIGNAL_OUTCOME_UNSPECIFIED", "SIGNAL_OUTCOME_DELIVERED", "SIGNAL_OUTCOME_DUPLICATE",
                           "SIGNAL_OUTCOME_TARGET_ENDED", "SIGNAL_OUTCOME_TARGET_NOT_FOUND"],
};

/** How a decoded field's value is stored: left out when zero (proto3 scalars), always (oneof members, messages), appended (repeated). */
const ZERO_OUT = 0, KEEP = 1, APPEND = 2;

interface Field {
  number: number;
  name: string;
  kind: number;
  repeated: boolean;
  oneof: boolean;
  sub: Msg | undefined;
  enumNames: string[] | undefined;
  store: number;
  tag: Buffer;
}

interface Msg {
  name: string;
  fields: Field[];
  /** by tag (number << 3 | wire type), for decoding */
  byTag: Map<number, Field>;
  /** by JSON name, for encoding */
  byName: Map<string, Field>;
}

function build(): Map<string, Msg> {
  const messages = new Map<string, Msg>();
  for (const name of Object.keys(SCHEMA)) messages.set(name, { name, fields: [], byTag: new Map(), byName: new Map() });
  for (const [name, specs] of Object.entries(SCHEMA)) {
    const m = messages.get(name)!;
    for (const [number, fname, kind, ...rest] of specs) {
      const type = rest[0] !== R && rest[0] !== O ? rest[0] : undefined;
      const repeated = rest.includes(R), isOneof = rest.includes(O);
      const tag = (number << 3) | WIRE_TYPE[kind]!;
      const f: Field = {
        number, name: fname, kind, repeated, oneof: isOneof,
        sub: kind === MESSAGE ? messages.get(type!) : undefined,
        enumNames: kind === ENUM ? ENUMS[type!] : undefined,
        store: repeated ? APPEND : isOneof || kind === MESSAGE || kind === TIMESTAMP || kind === DURATION ? KEEP : ZERO_OUT,
        tag: varintBytes(tag),
      };
      m.fields.push(f);
      m.byTag.set(tag, f);
      m.byName.set(fname, f);
    }
  }
  return messages;
}

/** The schema as the Python SDK's `_proto.SCHEMA` shows it, for the test that compares them. */
export function schemaDescription(): Record<string, Array<[number, string, string, string | null, boolean, boolean]>> {
  const out: Record<string, Array<[number, string, string, string | null, boolean, boolean]>> = {};
  for (const [name, specs] of Object.entries(SCHEMA)) {
    out[name] = specs.map(([number, fname, kind, ...rest]) =>
      [number, fname, KIND_NAMES[kind]!, rest[0] !== R && rest[0] !== O && rest[0] !== undefined ? rest[0] : null,
       rest.includes(R), rest.includes(O)]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding: protobuf bytes -> canonical JSON shape
// ---------------------------------------------------------------------------------------------

/** 0, 3, 6 or 9 fractional digits, as the server writes them ("1.500s", not "1.5s"). */
function nanosText(nanos: number): string {
  if (nanos === 0) return "";
  if (nanos % 1_000_000 === 0) return "." + String(nanos / 1_000_000).padStart(3, "0");
  if (nanos % 1000 === 0) return "." + String(nanos / 1000).padStart(6, "0");
  return "." + String(nanos).padStart(9, "0");
}

let lastSecond = NaN, lastSecondText = "";     // the events of a history share seconds

function timestampText(seconds: number, nanos: number): string {
  if (seconds !== lastSecond) {
    lastSecondText = new Date(seconds * 1000).toISOString().slice(0, 19);    // (years 0001-9999)
    lastSecond = seconds;
  }
  return lastSecondText + nanosText(nanos) + "Z";
}

function durationText(seconds: number, nanos: number): string {
  const sign = seconds < 0 || nanos < 0 ? "-" : "";
  return `${sign}${Math.abs(seconds)}${nanosText(Math.abs(nanos))}s`;
}

/** The decoder's position in its buffer. */
class Reader {
  pos: number;
  constructor(readonly buf: Buffer, pos: number, readonly end: number) {
    this.pos = pos;
  }

  /** A varint as a number (exact up to 2^53; a negative int32 or int64 is read as its 64-bit value). */
  varint(): number {
    if (this.pos >= this.end) throw new ProtobufError("truncated varint");
    const buf = this.buf;
    let b = buf[this.pos++]!;
    if (b < 0x80) return b;
    let value = b & 0x7f;
    let mul = 0x80;
    for (let i = 1; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtobufError("truncated varint");
      b = buf[this.pos++]!;
      value += (b & 0x7f) * mul;
      if (b < 0x80) return value;
      mul *= 0x80;
    }
    throw new ProtobufError("varint too long");
  }

  /** An int32 varint (a negative one is ten bytes on the wire: its low 32 bits are the value). */
  int32(): number {
    let value = 0;
    for (let shift = 0; shift < 70; shift += 7) {
      if (this.pos >= this.end) throw new ProtobufError("truncated varint");
      const b = this.buf[this.pos++]!;
      if (shift < 32) value |= (b & 0x7f) << shift;
      if (b < 0x80) return value | 0;
    }
    throw new ProtobufError("varint too long");
  }

  /** A varint as a BigInt (64 bits, exact). */
  varint64(): bigint {
    let value = 0n, shift = 0n;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtobufError("truncated varint");
      const b = this.buf[this.pos++]!;
      value |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return value;
      shift += 7n;
    }
    throw new ProtobufError("varint too long");
  }

  skip(wire: number): void {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) {
      const n = this.varint();                      // (before this.pos is read)
      this.pos += n;
    }
    else if (wire === 5) this.pos += 4;
    else throw new ProtobufError(`unsupported wire type ${wire}`);
  }
}

/** A google.protobuf.Timestamp or Duration: [seconds, nanos]. */
function secondsNanos(buf: Buffer, pos: number, end: number): [number, number] {
  const r = new Reader(buf, pos, end);
  let seconds = 0, nanos = 0;
  while (r.pos < end) {
    const tag = buf[r.pos++];
    if (tag === 0x08) seconds = Number(BigInt.asIntN(64, r.varint64()));
    else if (tag === 0x10) nanos = Number(BigInt.asIntN(32, r.varint64()));
    else throw new ProtobufError(`unexpected tag ${tag} in a Timestamp or Duration`);
  }
  return [seconds, nanos];
}

function decodeMapEntry(buf: Buffer, pos: number, end: number): [string, string] {
  const r = new Reader(buf, pos, end);
  let key = "", value = "";
  while (r.pos < end) {
    const tag = buf[r.pos++];
    const n = r.varint();
    if (tag === 0x0a) key = buf.toString("utf8", r.pos, r.pos + n);
    else if (tag === 0x12) value = buf.toString("utf8", r.pos, r.pos + n);
    else throw new ProtobufError(`unexpected tag ${tag} in a map entry`);
    r.pos += n;
  }
  return [key, value];
}

function decodeMessage(r: Reader, end: number, msg: Msg, byTag = msg.byTag): Message {
  const out: Message = {};
  const buf = r.buf;
  while (r.pos < end) {
    const tag = r.varint();
    const f = byTag.get(tag);
    if (f === undefined) {
      r.skip(tag & 7);
      continue;
    }
    let value: unknown;
    const wire = tag & 7;
    if (wire === 2) {
      const n = r.varint();
      const start = r.pos, stop = start + n;
      if (stop > end) throw new ProtobufError(`field ${f.name} of ${msg.name} runs past the end`);
      switch (f.kind) {
        case MESSAGE:
          value = decodeMessage(r, stop, f.sub!);
          break;
        case STRING:
          value = buf.toString("utf8", start, stop);
          break;
        case TIMESTAMP:
          value = timestampText(...secondsNanos(buf, start, stop));
          break;
        case DURATION:
          value = durationText(...secondsNanos(buf, start, stop));
          break;
        case BYTES:
          value = buf.toString("base64", start, stop);
          break;
        default: {                                  // MAP: one entry
          const [k, v] = decodeMapEntry(buf, start, stop);
          (out[f.name] ??= {})[k] = v;
          r.pos = stop;
          continue;
        }
      }
      r.pos = stop;
    } else if (wire === 0) {
      if (f.kind === INT64) {
        const v = BigInt.asIntN(64, r.varint64());
        value = v === 0n ? 0 : v.toString();            // a string in JSON; zero left out
      } else if (f.kind === INT32) {
        value = r.int32();
      } else {
        const v = r.varint();
        if (f.kind === BOOL) value = v !== 0;
        else value = v === 0 ? 0 : (f.enumNames![v] ?? v);   // ENUM by name; zero left out
      }
    } else if (wire === 1) {                        // DOUBLE, the only fixed64 field
      if (r.pos + 8 > end) throw new ProtobufError(`field ${f.name} of ${msg.name} runs past the end`);
      value = buf.readDoubleLE(r.pos);
      r.pos += 8;
    } else {
      throw new ProtobufError(`unsupported wire type ${wire} in ${msg.name}`);
    }
    if (f.store === KEEP || (f.store === ZERO_OUT && value)) out[f.name] = value;
    else if (f.store === APPEND) (out[f.name] ??= []).push(value);
  }
  if (r.pos !== end) throw new ProtobufError(`truncated ${msg.name}`);
  return out;
}

const MESSAGES = build();

function messageType(type: string): Msg {
  const m = MESSAGES.get(type);
  if (!m) throw new ProtobufError(`unknown message type ${type}`);
  return m;
}

function guarded<T>(type: string, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof RangeError) throw new ProtobufError(`truncated ${type}`);   // read past the buffer
    throw e;
  }
}

/** `data`, a protobuf-encoded `type` (e.g. "dex.v1.ActivityTask"), in its canonical JSON shape: what `dex.to_json` returns for it. */
export function decode(type: string, data: Uint8Array): Message {
  const buf = asBuffer(data);
  return guarded(type, () => decodeMessage(new Reader(buf, 0, buf.length), buf.length, messageType(type)));
}

/**
 * A dex.v1.WorkflowTask, leaving out its first `skip` history events undecoded: the task
 * (its `history` holds the events after the first `skipped`) and `skipped` (less than `skip`
 * when the history is shorter).  Skipping costs a few operations an event, decoding it a few
 * hundred: a worker that has the run's state cached needs only the events after those it has seen.
 */
export function decodeWorkflowTask(data: Uint8Array, skip = 0): [Message, number] {
  const buf = asBuffer(data);
  return guarded("dex.v1.WorkflowTask", () => {
    const r = new Reader(buf, 0, buf.length);
    let skipped = 0;
    while (skipped < skip && r.pos < buf.length && buf[r.pos] === 0x0a) {    // history, field 1
      r.pos++;
      const n = r.varint();
      r.pos += n;
      skipped++;
    }
    if (r.pos > buf.length) throw new ProtobufError("truncated dex.v1.WorkflowTask");
    return [decodeMessage(r, buf.length, messageType("dex.v1.WorkflowTask")), skipped];
  });
}

function only(type: string, numbers: number[]): Map<number, Field> {
  return new Map([...messageType(type).byTag].filter(([, f]) => numbers.includes(f.number)));
}

const TASK_KEYS: Record<string, Map<number, Field>> = {
  "dex.v1.WorkflowTask": only("dex.v1.WorkflowTask", [3, 7]),
  "dex.v1.ActivityTask": only("dex.v1.ActivityTask", [1, 2, 7]),
};
const HISTORY_OMITTED = only("dex.v1.WorkflowTask", [11]);

function decodeOnly(type: string, data: Uint8Array, fields: Map<number, Field>): Message {
  const buf = asBuffer(data);
  return guarded(type, () => decodeMessage(new Reader(buf, 0, buf.length), buf.length, messageType(type), fields));
}

/** The run id, task id (0 for a workflow task) and lock version of an encoded dex.v1.WorkflowTask or dex.v1.ActivityTask; the rest is skipped undecoded. */
export function taskKeys(type: "dex.v1.WorkflowTask" | "dex.v1.ActivityTask", data: Uint8Array): { runId: string; taskId: number; lockVersion: string } {
  const d = decodeOnly(type, data, TASK_KEYS[type]!);
  return { runId: d.runId ?? "", taskId: Number(d.taskId ?? 0), lockVersion: String(d.lockVersion ?? "0") };
}

/** WorkflowTask.history_omitted of an encoded task, its other fields skipped undecoded. */
export function historyOmitted(data: Uint8Array): number {
  return Number(decodeOnly("dex.v1.WorkflowTask", data, HISTORY_OMITTED).historyOmitted ?? 0);
}

function asBuffer(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

// ---------------------------------------------------------------------------------------------
// Encoding: canonical JSON shape -> protobuf bytes
// ---------------------------------------------------------------------------------------------

function varintBytes(value: number | bigint): Buffer {
  let v = BigInt(value);
  if (v < 0n) v += 1n << 64n;                      // negative int32/int64: ten bytes, two's complement
  const out: number[] = [];
  while (v > 0x7fn) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Buffer.from(out);
}

/** A growing buffer of encoded bytes. */
class Writer {
  buf = Buffer.allocUnsafe(256);
  length = 0;

  #room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(bigger, 0, 0, this.length);
    this.buf = bigger;
  }

  varint(value: number): void {
    if (value < 0 || value > Number.MAX_SAFE_INTEGER) return this.bytes(varintBytes(value));
    this.#room(10);
    while (value > 0x7f) {
      this.buf[this.length++] = (value % 0x80) | 0x80;
      value = Math.floor(value / 0x80);
    }
    this.buf[this.length++] = value;
  }

  bytes(b: Uint8Array): void {
    this.#room(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }

  /** A length-delimited field's body: its length, then it. */
  delimited(b: Uint8Array): void {
    this.varint(b.length);
    this.bytes(b);
  }

  done(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

/** "1.5s" -> [1, 500000000], "-0.25s" -> [0, -250000000] */
function parseSecondsNanos(text: unknown, where: string): [bigint, number] {
  const m = typeof text === "string" ? /^(-?)(\d+)(?:\.(\d{1,9}))?s$/.exec(text) : null;
  if (!m) throw new ProtobufError(`${where}: not a duration: ${JSON.stringify(text)}`);
  const sign = m[1] ? -1 : 1;
  return [BigInt(sign) * BigInt(m[2]!), sign * Number((m[3] ?? "0").padEnd(9, "0"))];
}

const TIMESTAMP_RE = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/;

/** RFC 3339 -> [seconds, nanos] */
function parseTimestamp(text: unknown, where: string): [bigint, number] {
  const m = typeof text === "string" ? TIMESTAMP_RE.exec(text) : null;
  if (!m) throw new ProtobufError(`${where}: not an RFC 3339 timestamp: ${JSON.stringify(text)}`);
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  date.setUTCHours(h, mi, s, 0);
  let seconds = BigInt(date.getTime() / 1000);
  if (m[8] !== "Z") {
    const sign = m[8]![0] === "+" ? 1n : -1n;
    seconds -= sign * BigInt(Number(m[8]!.slice(1, 3)) * 3600 + Number(m[8]!.slice(4, 6)) * 60);
  }
  return [seconds, Number((m[7] ?? "0").padEnd(9, "0"))];
}

function encodeSecondsNanos([seconds, nanos]: [bigint, number]): Buffer {
  const parts: Buffer[] = [];
  if (seconds !== 0n) parts.push(Buffer.from([0x08]), varintBytes(seconds));
  if (nanos !== 0) parts.push(Buffer.from([0x10]), varintBytes(nanos));
  return Buffer.concat(parts);
}

function encodeValue(f: Field, value: any, w: Writer, where: string): void {
  w.bytes(f.tag);
  switch (f.kind) {
    case STRING:
      if (typeof value !== "string") throw new ProtobufError(`${where}: expected a string, not ${JSON.stringify(value)}`);
      w.delimited(Buffer.from(value, "utf8"));
      break;
    case MESSAGE:
      if (value === null || typeof value !== "object" || Array.isArray(value)) {
        throw new ProtobufError(`${where}: expected an object, not ${JSON.stringify(value)}`);
      }
      w.delimited(encodeMessage(value, f.sub!, where));
      break;
    case INT32:
    case INT64:
      if (!(typeof value === "number" && Number.isInteger(value)) && !(typeof value === "string" && /^-?\d+$/.test(value))) {
        throw new ProtobufError(`${where}: expected an integer, not ${JSON.stringify(value)}`);
      }
      if (typeof value === "number") w.varint(value);
      else w.bytes(varintBytes(BigInt(value)));
      break;
    case BOOL:
      w.varint(value ? 1 : 0);
      break;
    case DOUBLE: {
      const b = Buffer.allocUnsafe(8);
      b.writeDoubleLE(Number(value));
      w.bytes(b);
      break;
    }
    case DURATION:
      w.delimited(encodeSecondsNanos(parseSecondsNanos(value, where)));
      break;
    case TIMESTAMP:
      w.delimited(encodeSecondsNanos(parseTimestamp(value, where)));
      break;
    case BYTES:
      w.delimited(typeof value === "string" ? Buffer.from(value, "base64") : asBuffer(value));
      break;
    case ENUM: {
      const n = typeof value === "string" ? f.enumNames!.indexOf(value) : Number(value);
      if (n < 0) throw new ProtobufError(`${where}: unknown enum value ${JSON.stringify(value)}`);
      w.varint(n);
      break;
    }
    default:
      throw new ProtobufError(`${where}: cannot encode`);
  }
}

function encodeMessage(obj: Message, msg: Msg, where = ""): Buffer {
  const w = new Writer();
  for (const [name, value] of Object.entries(obj)) {
    const f = msg.byName.get(name);
    const path = where ? `${where}.${name}` : name;
    if (f === undefined) throw new ProtobufError(`${path}: ${msg.name} has no field '${name}'`);
    if (value === null || value === undefined) continue;
    if (f.kind === MAP) {
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        const entry = new Writer();
        entry.bytes(Buffer.from([0x0a]));
        entry.delimited(Buffer.from(String(k), "utf8"));
        entry.bytes(Buffer.from([0x12]));
        entry.delimited(Buffer.from(String(v), "utf8"));
        w.bytes(f.tag);
        w.delimited(entry.done());
      }
    } else if (f.repeated) {
      (value as unknown[]).forEach((v, i) => encodeValue(f, v, w, `${path}[${i}]`));
    } else if (value || f.oneof || f.kind === MESSAGE) {
      encodeValue(f, value, w, path);
    }
  }
  return w.done();
}

/** The protobuf encoding of `obj`, a `type` in canonical JSON shape: the bytes `dex.from_json` would make of it (fields maybe in another order, which protobuf allows). */
export function encode(type: string, obj: Message): Buffer {
  return encodeMessage(obj, messageType(type));
}

/** A dex.v1.WorkflowTaskCompletion of `commands` (their JSON shape). */
export function encodeCommands(commands: Message[]): Buffer {
  const cmd = messageType("dex.v1.Command");
  const w = new Writer();
  commands.forEach((c, i) => {
    w.bytes(Buffer.from([0x0a]));
    w.delimited(encodeMessage(c, cmd, `commands[${i}]`));
  });
  return w.done();
}

/** A dex.v1.Payload holding JSON text: what an activity result is on the wire. */
export function encodeJsonPayload(jsonText: string): Buffer {
  const w = new Writer();
  w.bytes(Buffer.from([0x12]));
  w.delimited(Buffer.from(jsonText, "utf8"));
  return w.done();
}
