/**
 * Payloads, durations, timestamps and retry policies in canonical proto3 JSON (the wire form
 * of dex's JSON API: dex.v1.Payload is `{"json": "<text>"}` or `{"binary": "<base64>"}`).
 */
import { InvalidArgumentError, NotSerializableError } from "./errors.js";
import type { Message } from "./message.js";

/** A JSON value: what arguments, results, event payloads and side effects may be. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A message of dex's protobuf schema in its canonical JSON form. */
export type { Message } from "./message.js";

/** Seconds (a number), or text with a unit: "250ms", "30s", "5m", "2h", "1d". */
export type Duration = number | string;

/**
 * `value` checked for JSON: a clear {@link NotSerializableError} naming where in it a value
 * is not JSON (a function, undefined in an array, a BigInt, NaN, a cycle, a Map...).
 * Objects with `toJSON` (Date) are taken as JSON.stringify takes them.
 */
export function checkJson(value: unknown, what: string): void {
  const seen = new Set<object>();
  const walk = (v: unknown, path: string): void => {
    if (v === null || typeof v === "string" || typeof v === "boolean") return;
    if (typeof v === "number") {
      if (!Number.isFinite(v)) throw new NotSerializableError(what, path, `${v} is not a finite number`);
      return;
    }
    if (typeof v === "object") {
      if (typeof (v as { toJSON?: unknown }).toJSON === "function") return;
      if (seen.has(v)) throw new NotSerializableError(what, path, "a cycle");
      const proto = Object.getPrototypeOf(v);
      if (Array.isArray(v)) {
        seen.add(v);
        v.forEach((x, i) => walk(x, `${path}[${i}]`));
        seen.delete(v);
        return;
      }
      if (proto !== Object.prototype && proto !== null) {
        throw new NotSerializableError(what, path, `a ${proto?.constructor?.name ?? "non-plain"} object`);
      }
      seen.add(v);
      for (const [k, x] of Object.entries(v)) {
        if (x !== undefined) walk(x, `${path}.${k}`);
      }
      seen.delete(v);
      return;
    }
    throw new NotSerializableError(what, path, typeof v === "undefined" ? "undefined" : `a ${typeof v}`);
  };
  walk(value, "$");
}

/** JSON text of `value` (undefined is null), after {@link checkJson}. */
export function toJsonText(value: unknown, what: string): string {
  if (value === undefined) return "null";
  checkJson(value, what);
  return JSON.stringify(value);
}

/** `value` as workflow code sees it on replay (what JSON makes of it). */
export function roundtrip<T>(value: T, what: string): T {
  return JSON.parse(toJsonText(value, what)) as T;
}

/** A dex.v1.Payload for a JSON value. */
export function encode(value: unknown, what = "value"): Message {
  if (value instanceof Uint8Array) return { binary: Buffer.from(value).toString("base64") };
  return { json: toJsonText(value, what) };
}

/** The value of a dex.v1.Payload (null for a missing or empty one; a Buffer for binary). */
export function decode(payload: Message | null | undefined): any {
  if (!payload) return null;
  if (typeof payload.json === "string") return JSON.parse(payload.json);
  if (typeof payload.binary === "string") return Buffer.from(payload.binary, "base64");
  return null;
}

const UNITS: Record<string, number> = { ms: 0.001, s: 1, "": 1, m: 60, min: 60, h: 3600, d: 86400 };

/** A duration in seconds. */
export function seconds(d: Duration): number {
  if (typeof d === "number") {
    if (!Number.isFinite(d)) throw new InvalidArgumentError(`not a duration: ${d}`);
    return d;
  }
  const m = /^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$/.exec(String(d));
  if (!m) throw new InvalidArgumentError(`not a duration: ${JSON.stringify(d)} (use seconds, or "250ms", "30s", "5m", "2h", "1d")`);
  return Number(m[1]) * UNITS[m[2] ?? ""]!;
}

/** A google.protobuf.Duration in JSON form: "1.5s". */
export function duration(d: Duration): string {
  const s = seconds(d);
  if (s < 0) throw new InvalidArgumentError(`negative duration ${JSON.stringify(d)}`);
  return s.toFixed(9).replace(/\.?0+$/, "") + "s";
}

/** A google.protobuf.Timestamp in JSON form (RFC 3339) as a Date (millisecond precision). */
export function parseTimestamp(text: string | undefined | null): Date | null {
  if (!text) return null;
  const d = new Date(text);
  return Number.isNaN(d.getTime()) ? null : d;
}

/**
 * How an activity is retried (dex.v1.RetryPolicy); fields left out take the engine's defaults.
 * The delay before attempt n+1 is `initialDelay * multiplier^(n-1)`, spread by
 * `± randomizationFactor` and capped at `maxDelay`.
 */
export interface RetryPolicy {
  maxAttempts?: number;
  initialDelay?: Duration;
  multiplier?: number;
  randomizationFactor?: number;
  maxDelay?: Duration;
  /** Failure types (an ApplicationError's `type`, else the error's class name) never retried. */
  nonRetryableTypes?: string[];
}

export function retryPolicyJson(p: RetryPolicy | undefined): Message | undefined {
  if (!p) return undefined;
  const out: Message = {};
  if (p.maxAttempts !== undefined) out.maxAttempts = Math.trunc(p.maxAttempts);
  if (p.initialDelay !== undefined) out.initialDelay = duration(p.initialDelay);
  if (p.multiplier !== undefined) out.multiplier = p.multiplier;
  if (p.randomizationFactor !== undefined) out.randomizationFactor = p.randomizationFactor;
  if (p.maxDelay !== undefined) out.maxDelay = duration(p.maxDelay);
  if (p.nonRetryableTypes?.length) out.nonRetryableTypes = [...p.nonRetryableTypes];
  return Object.keys(out).length ? out : undefined;
}

/** The subject of a dex.v1.WorkflowEvent in JSON form: "activityTaskCreated", ... */
export function eventKind(event: Message): string {
  for (const k of Object.keys(event)) if (k !== "id" && k !== "timestamp") return k;
  return "empty";
}

/** The kind of a dex.v1.Command in JSON form: "scheduleActivity", ... */
export function commandKind(command: Message): string {
  for (const k of Object.keys(command)) if (k !== "id") return k;
  return "empty";
}
