"""The pure-Python protobuf codec (dex._proto) against the .proto files and against the
server's own conversions, dex.to_json and dex.from_json."""

import json
import os
import re

import pytest

import dex
from dex import _proto

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "..", "proto", "dex", "v1")

TS = "2026-11-22T03:59:53.770419Z"
PAYLOAD = {"json": json.dumps({"order": 1042, "name": "Zoë ✓", "items": [1, 2.5, None]})}
FAILURE = {"message": "card declined", "type": "CardError", "terminal": True,
           "details": {"json": "{\"code\": 51}"},
           "cause": {"message": "network: timeout", "cause": {"message": "root"}}}
RETRY = {"maxAttempts": 5, "initialDelay": "1.500s", "multiplier": 2.5,
         "randomizationFactor": 0.1, "maxDelay": "3600s", "nonRetryableTypes": ["A", "B"]}

# Every event subject, every command kind, both task kinds, in canonical JSON.
EVENTS = [
    {"timestamp": TS, "workflowTaskStarted": {"workerId": "host:1:ab", "attempt": 3}},
    {"timestamp": "2026-11-22T03:59:53Z", "runCreated": {
        "workflowName": "checkout", "workflowVersion": 3, "queue": "orders", "argument": PAYLOAD,
        "instanceId": "order-1", "priority": 50, "labels": {"shop": "berlin", "ü": "ß"},
        "concurrencyKey": "k", "parent": {"runId": "01a2", "childRunCreatedEventId": 4},
        "origin": {"runId": "01a1", "kind": "RESET", "eventId": 12}}},
    {"timestamp": "2026-11-22T03:59:53.770Z", "runStarted": {}},
    {"timestamp": TS, "workflowTaskCompleted": {}},
    {"id": 1, "timestamp": TS, "activityTaskCreated": {
        "name": "charge", "queue": "payments", "argument": PAYLOAD, "retryPolicy": RETRY,
        "priority": -5, "startToCloseTimeout": "10s", "scheduleToCloseTimeout": "0.000000001s",
        "heartbeatTimeout": "2.250s"}},
    {"timestamp": TS, "activityTaskCompleted": {"activityTaskCreatedEventId": 1,
                                                "result": PAYLOAD, "attempt": 2,
                                                "workerId": "host:2:cd", "startedAt": TS}},
    {"timestamp": TS, "activityTaskFailed": {"activityTaskCreatedEventId": 1,
                                             "failure": FAILURE, "attempts": 6}},
    {"id": 2, "timestamp": TS, "timerCreated": {"name": "nap", "elapseAt": "1969-07-20T20:17:40.5Z"}},
    {"timestamp": TS, "timerElapsed": {"timerCreatedEventId": 2}},
    {"id": 3, "timestamp": TS, "timerCancelled": {"timerCreatedEventId": 2}},
    {"id": 4, "timestamp": TS, "childRunCreated": {
        "runId": "01a3", "workflowName": "ship", "workflowVersion": 1, "queue": "q",
        "argument": {"binary": "AAEC/w==", "metadata": {"encoding": "raw"}},
        "instanceId": "s-1", "priority": 1, "labels": {"a": "b"}, "concurrencyKey": "c",
        "executionTimeout": "90s", "parentClosePolicy": "PARENT_CLOSE_POLICY_REQUEST_CANCEL"}},
    {"timestamp": TS, "childRunCompleted": {"childRunCreatedEventId": 4, "result": PAYLOAD}},
    {"timestamp": TS, "childRunFailed": {"childRunCreatedEventId": 4, "failure": FAILURE}},
    {"id": 5, "timestamp": TS, "sideEffectExecuted": {"name": "uuid", "result": PAYLOAD}},
    {"timestamp": TS, "externalEventReceived": {"eventId": "approval", "payload": PAYLOAD}},
    {"id": 6, "timestamp": TS, "externalEventWaitStarted": {"eventId": "approval",
                                                            "timeoutAt": "9999-12-31T23:59:59Z"}},
    {"id": 7, "timestamp": TS, "customStatusSet": {"customStatus": "waiting ⏳"}},
    {"timestamp": TS, "runCancelRequested": {"reason": "asked", "by": "ana"}},
    {"timestamp": TS, "runSuspended": {"reason": "maintenance", "by": "ops"}},
    {"timestamp": TS, "runResumed": {}},
    {"id": 8, "timestamp": TS, "runContinuedAsNew": {"argument": PAYLOAD, "generation": 2}},
    {"id": 9, "timestamp": TS, "runCompleted": {"result": PAYLOAD}},
    {"id": 9, "timestamp": TS, "runFailed": {"failure": FAILURE}},
    {"timestamp": "0001-01-01T00:00:00Z", "runCancelled": {"reason": "r", "by": "dex"}},
    {"timestamp": TS, "runTerminated": {"reason": "stuck", "by": "ana"}},
    {"timestamp": TS, "runTimedOut": {"deadline": "2026-11-22T04:01:23.500Z"}},
]

COMMANDS = [
    {"id": 1, "scheduleActivity": {
        "name": "charge", "queue": "payments", "argument": PAYLOAD, "retryPolicy": RETRY,
        "priority": 3, "startToCloseTimeout": "1.5s", "scheduleToCloseTimeout": "60s",
        "heartbeatTimeout": "0.25s"}},
    {"id": 2, "startTimer": {"name": "sleep", "delay": "0.001s"}},
    {"id": 3, "cancelTimer": {"timerCreatedEventId": 2}},
    {"id": 4, "startChildRun": {"workflowName": "ship", "workflowVersion": 2, "queue": "q",
                                "argument": PAYLOAD, "instanceId": "i", "priority": 7,
                                "labels": {"x": "y"}, "concurrencyKey": "k",
                                "executionTimeout": "1.5s",
                                "parentClosePolicy": "PARENT_CLOSE_POLICY_ABANDON"}},
    {"startChildRun": {"workflowName": "ship", "parentClosePolicy": "PARENT_CLOSE_POLICY_TERMINATE"}},
    {"id": 5, "recordSideEffect": {"name": "r", "result": PAYLOAD}},
    {"id": 6, "waitExternalEvent": {"eventId": "go", "timeout": "3600s"}},
    {"id": 7, "waitExternalEvent": {"eventId": "forever"}},
    {"id": 8, "setCustomStatus": {"customStatus": ""}},
    {"id": 9, "completeRun": {}},
    {"completeRun": {"result": PAYLOAD}},
    {"failRun": {"failure": FAILURE}},
    {"continueAsNew": {"argument": {"json": "null"}}},
]

MESSAGES = [
    ("dex.v1.WorkflowTask", {
        "history": EVENTS[:12], "newEvents": EVENTS[12:], "runId": "01a20169-15a5",
        "workflowName": "checkout", "workflowVersion": 1, "queue": "orders",
        "lockVersion": "9007199254740993", "lockedUntil": TS, "status": "RUN_STATUS_RUNNING",
        "historyLength": 12}),
    ("dex.v1.WorkflowTask", {"newEvents": EVENTS[:3], "runId": "r", "lockVersion": "1",
                             "status": "RUN_STATUS_CREATED"}),
    ("dex.v1.ActivityTask", {
        "runId": "01a2", "taskId": 3, "name": "charge", "queue": "payments",
        "argument": PAYLOAD, "attempt": 2, "lockVersion": "215", "lockedUntil": TS,
        "retryPolicy": RETRY, "heartbeatDetails": {"json": "{\"done\": 40}"},
        "lastFailure": FAILURE}),
    ("dex.v1.WorkflowTaskCompletion", {"commands": COMMANDS}),
    ("dex.v1.Payload", {"json": ""}),
    ("dex.v1.Payload", {"binary": "", "metadata": {"k": "v"}}),
    ("dex.v1.Failure", FAILURE),
    ("dex.v1.RetryPolicy", {"initialDelay": "-1.5s", "maxDelay": "0s"}),
    ("dex.v1.EventBatch", {"events": EVENTS}),
]


@pytest.fixture(scope="module")
def db(conninfo):
    import psycopg
    with psycopg.connect(conninfo, autocommit=True) as conn:
        yield conn


def server_bytes(db, message_type, obj):
    return bytes(db.execute("SELECT dex.from_json(%s, %s::jsonb)",
                            (message_type, json.dumps(obj))).fetchone()[0])


def server_json(db, message_type, data):
    return db.execute("SELECT dex.to_json(%s, %s)", (message_type, data)).fetchone()[0]


@pytest.mark.parametrize("message_type,obj", MESSAGES, ids=[m[0] for m in MESSAGES])
def test_decoding_the_servers_bytes_gives_the_servers_json(db, message_type, obj):
    data = server_bytes(db, message_type, obj)
    assert _proto.decode(message_type, data) == server_json(db, message_type, data)


@pytest.mark.parametrize("message_type,obj", MESSAGES, ids=[m[0] for m in MESSAGES])
def test_the_server_reads_our_bytes_as_it_reads_the_json(db, message_type, obj):
    canonical = server_json(db, message_type, server_bytes(db, message_type, obj))
    ours = _proto.encode(message_type, obj)
    assert server_json(db, message_type, ours) == canonical
    # and our encoding of the canonical form round-trips through our decoder
    assert _proto.decode(message_type, _proto.encode(message_type, canonical)) == canonical


def test_commands_and_results_as_the_worker_sends_them(db):
    data = _proto.encode_commands(COMMANDS)
    assert data == _proto.encode("dex.v1.WorkflowTaskCompletion", {"commands": COMMANDS})
    assert server_json(db, "dex.v1.WorkflowTaskCompletion", data) == server_json(
        db, "dex.v1.WorkflowTaskCompletion",
        server_bytes(db, "dex.v1.WorkflowTaskCompletion", {"commands": COMMANDS}))
    value = {"ü": [1, "two", None]}
    payload = _proto.encode_json_payload(json.dumps(value))
    assert db.execute("SELECT dex.payload_value(%s)", (payload,)).fetchone()[0] == value


def test_polled_tasks_decode_as_the_json_forms_show_them(db, client, queues):
    wf, act = queues
    run_id = client.start("proto-poll", {"n": 1}, queue=wf, labels={"k": "v"})
    client.send_event(run_id, "early", {"x": "é"})
    (row,) = db.execute("SELECT task FROM dex.poll_tasks_pb(%s, 'w', 1, '1 minute')", (wf,),
                        binary=True).fetchall()
    task = _proto.decode("dex.v1.WorkflowTask", row[0])
    assert task == server_json(db, "dex.v1.WorkflowTask", row[0])
    assert task["runId"] == run_id and dex._convert.event_kind(task["newEvents"][0]) == \
        "workflowTaskStarted"


def test_skipping_history_events_without_decoding_them(db):
    task = MESSAGES[0][1]
    data = server_bytes(db, "dex.v1.WorkflowTask", task)
    full = server_json(db, "dex.v1.WorkflowTask", data)
    for skip in (0, 1, 5, 12, 40):
        part, skipped = _proto.decode_workflow_task(data, skip)
        assert skipped == min(skip, 12)
        assert part.get("history", []) == full["history"][skipped:]
        assert {k: v for k, v in part.items() if k != "history"} == \
            {k: v for k, v in full.items() if k != "history"}


def test_bad_bytes_are_refused_and_unknown_fields_skipped():
    data = _proto.encode("dex.v1.Failure", FAILURE)
    for cut in (1, 5, len(data) - 1):
        with pytest.raises(_proto.ProtobufError):
            _proto.decode("dex.v1.Failure", data[:cut])
    # a field this SDK does not know (number 15, a varint and a string): skipped
    newer = data + b"\x78\x05" + b"\x82\x01\x02hi"
    assert _proto.decode("dex.v1.Failure", newer) == _proto.decode("dex.v1.Failure", data)
    with pytest.raises(_proto.ProtobufError):
        _proto.encode("dex.v1.Failure", {"message": "m", "nope": 1})
    with pytest.raises(_proto.ProtobufError):
        _proto.encode("dex.v1.StartTimer", {"delay": "5 minutes"})


_FIELD = re.compile(r"^\s*(repeated\s+)?(map<\s*string\s*,\s*string\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+);")
_KINDS = {"int32": _proto.INT32, "int64": _proto.INT64, "bool": _proto.BOOL,
          "double": _proto.DOUBLE, "string": _proto.STRING, "bytes": _proto.BYTES,
          "google.protobuf.Timestamp": _proto.TIMESTAMP,
          "google.protobuf.Duration": _proto.DURATION}


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


# the gRPC service's own messages (docs/grpc.md), which the SDK never encodes
GRPC_ONLY = {"service.proto"}


def parse_enums():
    """enum -> {number: value name} from proto/dex/v1."""
    enums = {}
    for fn in sorted(os.listdir(PROTO_DIR)):
        if fn.endswith(".proto") and fn not in GRPC_ONLY:
            text = re.sub(r"//[^\n]*", "", open(os.path.join(PROTO_DIR, fn)).read())
            for name, body in re.findall(r"\benum\s+(\w+)\s*\{([^}]*)\}", text):
                enums["dex.v1." + name] = {int(n): v for v, n in
                                           re.findall(r"(\w+)\s*=\s*(\d+)\s*;", body)}
    return enums


def parse_protos():
    """message -> {number: (json name, kind, type, repeated, oneof)} from proto/dex/v1."""
    messages = {}
    enums = parse_enums()
    for fn in sorted(os.listdir(PROTO_DIR)):
        if not fn.endswith(".proto") or fn in GRPC_ONLY:
            continue
        stack = []          # open blocks: ("message", name) or ("oneof", name)
        for line in open(os.path.join(PROTO_DIR, fn)):
            line = line.split("//")[0]
            m = re.match(r"^\s*(message|oneof|enum)\s+(\w+)\s*\{", line)
            if m:
                stack.append((m.group(1), m.group(2)))
                if m.group(1) == "message":
                    messages["dex.v1." + m.group(2)] = {}
                continue
            if "}" in line:
                stack.pop()
                continue
            m = _FIELD.match(line)
            if m and stack and stack[-1][0] in ("message", "oneof"):
                msg = next(n for k, n in reversed(stack) if k == "message")
                repeated, typ, name, number = m.groups()
                if typ.startswith("map<"):
                    kind, typ = _proto.MAP, None
                elif typ in _KINDS:
                    kind, typ = _KINDS[typ], None
                elif "dex.v1." + typ in enums:
                    kind, typ = _proto.ENUM, "dex.v1." + typ
                else:
                    kind, typ = _proto.MESSAGE, "dex.v1." + typ
                messages["dex.v1." + msg][int(number)] = (
                    _camel(name), kind, typ, bool(repeated), stack[-1][0] == "oneof")
    return messages


@pytest.mark.skipif(not os.path.isdir(PROTO_DIR), reason="no proto/ next to the SDK")
def test_the_schema_is_the_proto_files():
    expected = parse_protos()
    assert set(expected) == set(_proto.MESSAGES)
    for name, fields in expected.items():
        ours = {f.number: (f.name, f.kind, f.type, f.repeated, f.oneof)
                for f in _proto.MESSAGES[name].fields}
        assert ours == fields, name
    assert parse_enums() == _proto.ENUMS
