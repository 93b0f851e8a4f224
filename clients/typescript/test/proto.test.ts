/**
 * The protobuf codec (src/proto.ts) against the server's own conversions, dex.to_json and
 * dex.from_json, on the Python SDK's test messages (every event, every command, both tasks), and
 * its schema against the Python SDK's, which clients/python/tests/test_proto.py checks against
 * proto/dex/v1/*.proto.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ENUMS, ProtobufError, decode, decodeWorkflowTask, encode, encodeCommands, encodeJsonPayload, historyOmitted,
         schemaDescription, taskKeys } from "../src/proto.js";
import { sql } from "./helpers.js";
import { python } from "./proc.js";

type Fixtures = { messages: Array<[string, Record<string, any>]>; commands: Array<Record<string, any>>; failure: Record<string, any> };
const fixtures = JSON.parse(python(
  "import json, test_proto as t; print(json.dumps({'messages': t.MESSAGES, 'commands': t.COMMANDS, 'failure': t.FAILURE}))")) as Fixtures;

async function serverBytes(type: string, obj: unknown): Promise<Buffer> {
  return (await sql("SELECT dex.from_json($1, $2::jsonb) AS b", [type, JSON.stringify(obj)])).rows[0].b;
}

async function serverJson(type: string, data: Buffer): Promise<unknown> {
  return (await sql("SELECT dex.to_json($1, $2) AS j", [type, data])).rows[0].j;
}

test("the schema is the Python SDK's (which its tests check against the .proto files)", () => {
  const py = JSON.parse(python(
    "import json; from dex import _proto as p\n" +
    "kinds = ['int32', 'int64', 'bool', 'enum', 'double', 'string', 'bytes', 'message', 'timestamp', 'duration', 'map']\n" +
    "print(json.dumps({'schema': {m: [[f[0], f[1], kinds[f[2]], next((x for x in f[3:] if x not in ('repeated', 'oneof')), None),\n" +
    "                                  'repeated' in f[3:], 'oneof' in f[3:]] for f in fs] for m, fs in p.SCHEMA.items()},\n" +
    "                  'enums': {e: [v[i] for i in sorted(v)] for e, v in p.ENUMS.items()}}))"));
  assert.deepEqual(schemaDescription(), py.schema);
  assert.deepEqual(ENUMS, py.enums);
});

test("decoding the server's bytes gives the server's JSON; the server reads our bytes as it reads the JSON", async () => {
  for (const [type, obj] of fixtures.messages) {
    const data = await serverBytes(type, obj);
    const canonical = await serverJson(type, data);
    assert.deepEqual(decode(type, data), canonical, type);
    assert.deepEqual(await serverJson(type, encode(type, obj)), canonical, type);
    assert.deepEqual(decode(type, encode(type, canonical as Record<string, any>)), canonical, type);
  }
});

test("commands and activity results as the worker sends them", async () => {
  const data = encodeCommands(fixtures.commands);
  assert.deepEqual(data, encode("dex.v1.WorkflowTaskCompletion", { commands: fixtures.commands }));
  assert.deepEqual(await serverJson("dex.v1.WorkflowTaskCompletion", data),
                   await serverJson("dex.v1.WorkflowTaskCompletion", await serverBytes("dex.v1.WorkflowTaskCompletion", { commands: fixtures.commands })));
  const value = { "ü": [1, "two", null] };
  const payload = encodeJsonPayload(JSON.stringify(value));
  assert.deepEqual((await sql("SELECT dex.payload_value($1) AS v", [payload])).rows[0].v, value);
});

test("a workflow task's history is skipped undecoded; its keys and historyOmitted are read alone", async () => {
  const [, task] = fixtures.messages[0]!;
  const data = await serverBytes("dex.v1.WorkflowTask", task);
  const full = await serverJson("dex.v1.WorkflowTask", data) as Record<string, any>;
  for (const skip of [0, 1, 5, 12, 40]) {
    const [part, skipped] = decodeWorkflowTask(data, skip);
    assert.equal(skipped, Math.min(skip, 12));
    assert.deepEqual(part.history ?? [], full.history.slice(skipped));
    const { history: _a, ...rest } = part;
    const { history: _b, ...fullRest } = full;
    assert.deepEqual(rest, fullRest);
  }
  assert.deepEqual(taskKeys("dex.v1.WorkflowTask", data), { runId: task.runId, taskId: 0, lockVersion: "9007199254740993" });
  assert.equal(historyOmitted(data), 0);
  assert.equal(historyOmitted(encode("dex.v1.WorkflowTask", { runId: "r", historyOmitted: 7 })), 7);
});

test("bad bytes are refused with ProtobufError, unknown fields skipped, objects that do not fit refused", () => {
  const data = encode("dex.v1.Failure", fixtures.failure);
  for (const cut of [1, 5, data.length - 1]) {
    assert.throws(() => decode("dex.v1.Failure", data.subarray(0, cut)), ProtobufError);
  }
  // a field this SDK does not know (number 15: a varint, then a string): skipped
  const newer = Buffer.concat([data, Buffer.from([0x78, 0x05, 0x82, 0x01, 0x02, 0x68, 0x69])]);
  assert.deepEqual(decode("dex.v1.Failure", newer), decode("dex.v1.Failure", data));
  assert.throws(() => encode("dex.v1.Failure", { message: "m", nope: 1 }), /dex.v1.Failure has no field 'nope'/);
  assert.throws(() => encode("dex.v1.StartTimer", { delay: "5 minutes" }), ProtobufError);
});
