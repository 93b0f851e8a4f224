/**
 * The two wire forms of dex's task API, behind one interface for the worker (as the Python
 * SDK's `dex/_wire.py`).
 *
 * Every task function of dex has a JSON form (`dex.poll_tasks`, `dex.complete_tasks`, ...,
 * `jsonb`) and a protobuf form (`dex.poll_tasks_pb`, `dex.complete_tasks_pb`, ..., `bytea`).
 * Inside the SDK messages always have their canonical JSON shape; a {@link Wire} decides only
 * what crosses the connection: `jsonb` that node-postgres parses with JSON.parse, or protobuf
 * bytes that src/proto.ts converts.  node-postgres sends a Buffer parameter in binary, so the
 * message arrays go as binary `bytea[]` (built here); it reads every result as text, so a
 * polled `bytea[]` comes as hex, which {@link byteaArray} turns back into bytes.
 */
import pg from "pg";
import { type Message, toJsonText } from "./convert.js";
import { ProtobufError, decode, decodeWorkflowTask, encode, encodeCommands, encodeJsonPayload, historyOmitted, taskKeys } from "./proto.js";

/** A leased task: its keys, and the task message as the server sent it (`raw`). */
export interface Row {
  runId: string;
  taskId: number;
  lockVersion: string;
  raw: unknown;
}

export const JSON_WIRE = "json";
export const PROTOBUF_WIRE = "protobuf";
export type WireName = typeof JSON_WIRE | typeof PROTOBUF_WIRE;

/** One wire form: the suffix of the SQL functions, and how SDK values become parameters and results SDK values. */
export interface Wire {
  readonly name: WireName;
  /** Of the SQL functions: "" or "_pb". */
  readonly suffix: string;
  /** Of their message arrays: "jsonb[]" or "bytea[]". */
  readonly arrayType: string;
  /** Node-postgres' parsers of a statement's results, for its `types`. */
  readonly types: pg.CustomTypesConfig | undefined;
  /** A polled task (an element of poll_tasks_wait's `tasks`, or poll_tasks' `task`) as a Row. */
  row(raw: unknown, workflow: boolean): Row;
  /** A polled workflow task, leaving out at most `skip` history events at its start undecoded (JSON has them all): [task, skipped]. */
  workflowTask(raw: unknown, skip: number): [Message, number];
  /** How many events at the history's start the server left out (worker_cache). */
  historyOmitted(raw: unknown): number;
  activityTask(raw: unknown): Message;
  /** The `tasks` of a CALL dex.poll_tasks_wait(_pb) (null: none). */
  tasks(value: unknown): unknown[];
  /** Workflow tasks' commands, activity results or failures as one `$N::<arrayType>` parameter. */
  commandsArray(commands: Message[][]): unknown;
  resultsArray(values: unknown[]): unknown;
  failuresArray(failures: Message[]): unknown;
  /** The statement reading a run's whole history, and its events from the rows. */
  readonly historyQuery: string;
  history(rows: Array<Record<string, any>>): Message[];
}

/** JSON text of each value for a jsonb[] parameter (undefined and null are SQL NULL). */
function jsonArray(values: unknown[]): Array<string | null> {
  return values.map((v) => (v === null || v === undefined ? null : JSON.stringify(v)));
}

const jsonWire: Wire = {
  name: JSON_WIRE, suffix: "", arrayType: "jsonb[]", types: undefined,
  row(raw) {
    const t = raw as Message;
    return { runId: t.runId, taskId: Number(t.taskId ?? 0), lockVersion: String(t.lockVersion ?? "0"), raw };
  },
  workflowTask: (raw) => [raw as Message, 0],
  historyOmitted: (raw) => Number((raw as Message).historyOmitted ?? 0),
  activityTask: (raw) => raw as Message,
  tasks: (value) => (value ?? []) as unknown[],
  commandsArray: (commands) => jsonArray(commands),
  resultsArray: (values) => jsonArray(values),
  failuresArray: (failures) => jsonArray(failures),
  historyQuery: "SELECT event FROM dex.run_history($1) ORDER BY sequence",
  history: (rows) => rows.map((r) => r.event as Message),
};

const BYTEA = 17, BYTEA_ARRAY = 1001;

/**
 * A bytea[] in PostgreSQL's text form with hex bytea output, `{"\\x0a12..","\\x..",NULL}`,
 * as Buffers: a backslash makes every element quoted, and hex has no quote to escape.
 */
export function byteaArray(text: string): Array<Buffer | null> {
  const out: Array<Buffer | null> = [];
  let i = 1;                                          // after "{"
  while (i < text.length - 1) {
    if (text.startsWith("NULL", i)) {
      out.push(null);
      i += 5;
    } else if (text.startsWith('"\\\\x', i)) {
      const end = text.indexOf('"', i + 4);
      out.push(Buffer.from(text.slice(i + 4, end), "hex"));
      i = end + 2;
    } else {
      throw new ProtobufError(`not a bytea[] in hex form: ${text.slice(0, 40)}...`);
    }
  }
  return out;
}

/** Buffers as one binary bytea[] parameter (array_recv's form: node-postgres sends a Buffer as binary). */
function binaryByteaArray(items: Array<Buffer | null>): Buffer {
  const head = Buffer.alloc(items.length ? 20 : 12);
  head.writeInt32BE(items.length ? 1 : 0, 0);                    // dimensions
  head.writeInt32BE(items.some((b) => b === null) ? 1 : 0, 4);  // has nulls
  head.writeUInt32BE(BYTEA, 8);                                 // element type
  if (items.length) {
    head.writeInt32BE(items.length, 12);
    head.writeInt32BE(1, 16);                                   // lower bound
  }
  const parts: Buffer[] = [head];
  for (const b of items) {
    const len = Buffer.alloc(4);
    len.writeInt32BE(b === null ? -1 : b.length);
    parts.push(len);
    if (b !== null) parts.push(b);
  }
  return Buffer.concat(parts);
}

const protobufTypes: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === BYTEA_ARRAY ? byteaArray : pg.types.getTypeParser(oid, format as "text")) as pg.CustomTypesConfig["getTypeParser"],
};

const protobufWire: Wire = {
  name: PROTOBUF_WIRE, suffix: "_pb", arrayType: "bytea[]", types: protobufTypes,
  row(raw, workflow) {
    return { ...taskKeys(workflow ? "dex.v1.WorkflowTask" : "dex.v1.ActivityTask", raw as Buffer), raw };
  },
  workflowTask: (raw, skip) => decodeWorkflowTask(raw as Buffer, skip),
  historyOmitted: (raw) => historyOmitted(raw as Buffer),
  activityTask: (raw) => decode("dex.v1.ActivityTask", raw as Buffer),
  tasks: (value) => (value ?? []) as unknown[],
  commandsArray: (commands) => binaryByteaArray(commands.map(encodeCommands)),
  resultsArray: (values) => binaryByteaArray(values.map((v) =>
    v === null || v === undefined ? null : encodeJsonPayload(toJsonText(v, "an activity result")))),
  failuresArray: (failures) => binaryByteaArray(failures.map((f) => encode("dex.v1.Failure", f))),
  historyQuery: "SELECT dex.run_history_pb($1) AS batch",
  history: (rows) => (decode("dex.v1.EventBatch", rows[0]?.batch ?? Buffer.alloc(0)).events ?? []) as Message[],
};

/** The {@link Wire} called `name`. */
export function wireNamed(name: WireName): Wire {
  return name === JSON_WIRE ? jsonWire : protobufWire;
}
