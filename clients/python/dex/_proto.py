"""The protobuf wire form of the dex.v1 messages the SDK sends and receives, in pure Python.

The SDK works with messages in their canonical proto3 JSON shape (dicts with camelCase keys,
payloads as ``{"json": "..."}``, timestamps and durations as strings, 64-bit integers as
strings, enums by name), whichever wire form it uses.  This module converts between that shape
and protobuf bytes, so that a worker can use ``dex.poll_tasks_pb`` / ``dex.complete_tasks_pb``
without a protobuf library: :func:`decode` gives exactly what the server's ``dex.to_json``
gives for the same bytes, and :func:`encode` gives bytes the server reads as ``dex.from_json``
would read the dict (tests/test_proto.py checks both against the server).

Why not a general protobuf runtime: the SDK needs a dozen messages, proto3 only (varints,
length-delimited fields, one double), and one thing a general runtime would not do for us:
skip the part of a workflow task's history a cached workflow has already seen without
decoding it (:func:`decode_workflow_task` with ``skip``).

The schema below mirrors proto/dex/v1/*.proto (tests/test_proto.py compares them).
"""

from __future__ import annotations

import base64
import calendar
import re
import struct
import time
from typing import Any, Dict, List, Optional, Tuple

# Field kinds.  Scalars first; the decoder tests the common ones first.
INT32, INT64, BOOL, ENUM, DOUBLE, STRING, BYTES, MESSAGE, TIMESTAMP, DURATION, MAP = range(11)

# How _decode stores a field's value: left out when zero (proto3 scalars), always (oneof
# members, messages), or appended to a list (repeated fields).
_ZERO_OUT, _KEEP, _APPEND = 0, 1, 2

_WIRE_TYPE = {INT32: 0, INT64: 0, BOOL: 0, ENUM: 0, DOUBLE: 1, STRING: 2, BYTES: 2,
              MESSAGE: 2, TIMESTAMP: 2, DURATION: 2, MAP: 2}

_R, _O = "repeated", "oneof"


def _oneof(members: str) -> List[tuple]:
    """Oneof members that are messages named as the field: "10 runStarted, 11 ..."."""
    out = []
    for item in members.split(","):
        number, name = item.split()
        out.append((int(number), name, MESSAGE, "dex.v1." + name[0].upper() + name[1:], _O))
    return out


# The command and the event it records have the same fields.
_SCHEDULE_ACTIVITY = [
    (1, "name", STRING), (2, "queue", STRING), (3, "argument", MESSAGE, "dex.v1.Payload"),
    (4, "retryPolicy", MESSAGE, "dex.v1.RetryPolicy"), (5, "priority", INT32),
    (6, "startToCloseTimeout", DURATION), (7, "scheduleToCloseTimeout", DURATION),
    (8, "heartbeatTimeout", DURATION)]

# message -> [(number, json name, kind, message type or enum, repeated, in a oneof)]
# A kind of MESSAGE names the message type; TIMESTAMP and DURATION are the well-known types,
# whose JSON forms are strings; MAP is map<string, string>.
SCHEMA: Dict[str, List[tuple]] = {
    # common.proto
    "dex.v1.Payload": [
        (1, "metadata", MAP), (2, "json", STRING, _O), (3, "binary", BYTES, _O)],
    "dex.v1.Failure": [
        (1, "message", STRING), (2, "details", MESSAGE, "dex.v1.Payload"),
        (3, "cause", MESSAGE, "dex.v1.Failure"), (4, "terminal", BOOL), (5, "type", STRING)],
    "dex.v1.RetryPolicy": [
        (1, "maxAttempts", INT32), (2, "initialDelay", DURATION), (3, "multiplier", DOUBLE),
        # proto3 optional (explicit presence), which is a oneof of one field on the wire:
        # a 0 is sent and kept
        (4, "randomizationFactor", DOUBLE, _O), (5, "maxDelay", DURATION),
        (6, "nonRetryableTypes", STRING, _R)],
    # event.proto
    "dex.v1.WorkflowEvent": [
        (1, "id", INT32), (2, "timestamp", TIMESTAMP)] + _oneof("""
        10 workflowTaskStarted, 11 workflowTaskCompleted, 20 runCreated, 21 runStarted,
        22 runCompleted, 23 runFailed, 24 runCancelled, 25 runSuspended, 26 runResumed,
        27 runContinuedAsNew, 28 runCancelRequested, 29 customStatusSet, 30 runTerminated,
        31 runTimedOut, 40 activityTaskCreated, 41 activityTaskCompleted, 42 activityTaskFailed,
        50 timerCreated, 51 timerElapsed, 52 timerCancelled, 60 childRunCreated,
        61 childRunCompleted, 62 childRunFailed, 70 sideEffectExecuted, 71 markerRecorded,
        72 eventPublished,
        80 externalEventReceived, 81 externalEventWaitStarted, 82 externalRunSignalled,
        83 externalRunSignalResult"""),
    "dex.v1.WorkflowTaskStarted": [(1, "workerId", STRING), (2, "attempt", INT32)],
    "dex.v1.WorkflowTaskCompleted": [],
    "dex.v1.ParentRun": [(1, "runId", STRING), (2, "childRunCreatedEventId", INT32)],
    "dex.v1.RunCreated": [
        (1, "workflowName", STRING), (2, "workflowVersion", INT32), (3, "queue", STRING),
        (4, "argument", MESSAGE, "dex.v1.Payload"), (5, "instanceId", STRING),
        (6, "priority", INT32), (7, "labels", MAP), (8, "concurrencyKey", STRING),
        (9, "parent", MESSAGE, "dex.v1.ParentRun"), (10, "origin", MESSAGE, "dex.v1.RunOrigin")],
    "dex.v1.RunOrigin": [(1, "runId", STRING), (2, "kind", STRING), (3, "eventId", INT32)],
    "dex.v1.RunStarted": [],
    "dex.v1.RunCompleted": [(1, "result", MESSAGE, "dex.v1.Payload")],
    "dex.v1.RunFailed": [(1, "failure", MESSAGE, "dex.v1.Failure")],
    "dex.v1.RunCancelled": [(1, "reason", STRING), (2, "by", STRING)],
    "dex.v1.RunCancelRequested": [(1, "reason", STRING), (2, "by", STRING)],
    "dex.v1.RunTerminated": [(1, "reason", STRING), (2, "by", STRING)],
    "dex.v1.RunTimedOut": [(1, "deadline", TIMESTAMP)],
    "dex.v1.RunSuspended": [(1, "reason", STRING), (2, "by", STRING)],
    "dex.v1.RunResumed": [(1, "reason", STRING), (2, "by", STRING)],
    "dex.v1.RunContinuedAsNew": [
        (1, "argument", MESSAGE, "dex.v1.Payload"), (2, "generation", INT32)],
    "dex.v1.CustomStatusSet": [(1, "customStatus", STRING)],
    "dex.v1.ActivityTaskCreated": _SCHEDULE_ACTIVITY,
    "dex.v1.ActivityTaskCompleted": [
        (1, "activityTaskCreatedEventId", INT32), (2, "result", MESSAGE, "dex.v1.Payload"),
        (3, "attempt", INT32), (4, "workerId", STRING), (5, "startedAt", TIMESTAMP)],
    "dex.v1.ActivityTaskFailed": [
        (1, "activityTaskCreatedEventId", INT32), (2, "failure", MESSAGE, "dex.v1.Failure"),
        (3, "attempts", INT32)],
    "dex.v1.TimerCreated": [(1, "name", STRING), (2, "elapseAt", TIMESTAMP)],
    "dex.v1.TimerElapsed": [(1, "timerCreatedEventId", INT32)],
    "dex.v1.TimerCancelled": [(1, "timerCreatedEventId", INT32)],
    "dex.v1.ChildRunCreated": [
        (1, "runId", STRING), (2, "workflowName", STRING), (3, "workflowVersion", INT32),
        (4, "queue", STRING), (5, "argument", MESSAGE, "dex.v1.Payload"),
        (6, "instanceId", STRING), (7, "priority", INT32), (8, "labels", MAP),
        (9, "concurrencyKey", STRING), (10, "executionTimeout", DURATION),
        (11, "parentClosePolicy", ENUM, "dex.v1.ParentClosePolicy")],
    "dex.v1.ChildRunCompleted": [
        (1, "childRunCreatedEventId", INT32), (2, "result", MESSAGE, "dex.v1.Payload")],
    "dex.v1.ChildRunFailed": [
        (1, "childRunCreatedEventId", INT32), (2, "failure", MESSAGE, "dex.v1.Failure")],
    "dex.v1.SideEffectExecuted": [(1, "name", STRING), (2, "result", MESSAGE, "dex.v1.Payload")],
    "dex.v1.MarkerRecorded": [(1, "name", STRING), (2, "details", MESSAGE, "dex.v1.Payload")],
    "dex.v1.EventPublished": [(1, "name", STRING), (2, "payload", MESSAGE, "dex.v1.Payload")],
    "dex.v1.ExternalEventReceived": [
        (1, "eventId", STRING), (2, "payload", MESSAGE, "dex.v1.Payload")],
    "dex.v1.ExternalEventWaitStarted": [(1, "eventId", STRING), (2, "timeoutAt", TIMESTAMP)],
    "dex.v1.ExternalRunSignalled": [
        (1, "runId", STRING), (2, "instanceId", STRING), (3, "queue", STRING),
        (4, "eventId", STRING), (5, "outcome", ENUM, "dex.v1.SignalOutcome")],
    "dex.v1.ExternalRunSignalResult": [
        (1, "externalRunSignalledEventId", INT32), (2, "outcome", ENUM, "dex.v1.SignalOutcome"),
        (3, "runId", STRING)],
    "dex.v1.EventBatch": [(1, "events", MESSAGE, "dex.v1.WorkflowEvent", _R)],
    "dex.v1.PublishedEvent": [
        (1, "runId", STRING), (2, "queue", STRING), (3, "workflowName", STRING),
        (4, "workflowVersion", INT32), (5, "generation", INT32), (6, "kind", STRING),
        (7, "event", MESSAGE, "dex.v1.WorkflowEvent"), (8, "sequence", INT32)],
    # command.proto
    "dex.v1.Command": [
        (1, "id", INT32)] + _oneof("""
        10 scheduleActivity, 11 startTimer, 12 cancelTimer, 13 startChildRun,
        14 recordSideEffect, 15 waitExternalEvent, 16 setCustomStatus, 17 completeRun,
        18 failRun, 19 continueAsNew, 20 cancelRun, 21 recordMarker, 22 signalExternalRun,
        23 publishEvent"""),
    "dex.v1.ScheduleActivity": _SCHEDULE_ACTIVITY,
    "dex.v1.StartTimer": [(1, "name", STRING), (2, "delay", DURATION)],
    "dex.v1.CancelTimer": [(1, "timerCreatedEventId", INT32)],
    "dex.v1.CancelRun": [],
    "dex.v1.StartChildRun": [
        (1, "workflowName", STRING), (2, "workflowVersion", INT32), (3, "queue", STRING),
        (4, "argument", MESSAGE, "dex.v1.Payload"), (5, "instanceId", STRING),
        (6, "priority", INT32), (7, "labels", MAP), (8, "concurrencyKey", STRING),
        (9, "executionTimeout", DURATION),
        (10, "parentClosePolicy", ENUM, "dex.v1.ParentClosePolicy")],
    "dex.v1.RecordSideEffect": [(1, "name", STRING), (2, "result", MESSAGE, "dex.v1.Payload")],
    "dex.v1.RecordMarker": [(1, "name", STRING), (2, "details", MESSAGE, "dex.v1.Payload")],
    "dex.v1.PublishEvent": [(1, "name", STRING), (2, "payload", MESSAGE, "dex.v1.Payload")],
    "dex.v1.WaitExternalEvent": [(1, "eventId", STRING), (2, "timeout", DURATION)],
    "dex.v1.SignalExternalRun": [
        (1, "runId", STRING), (2, "instanceId", STRING), (3, "queue", STRING),
        (4, "eventId", STRING), (5, "payload", MESSAGE, "dex.v1.Payload")],
    "dex.v1.SetCustomStatus": [(1, "customStatus", STRING)],
    "dex.v1.CompleteRun": [(1, "result", MESSAGE, "dex.v1.Payload")],
    "dex.v1.FailRun": [(1, "failure", MESSAGE, "dex.v1.Failure")],
    "dex.v1.ContinueAsNew": [(1, "argument", MESSAGE, "dex.v1.Payload")],
    "dex.v1.WorkflowTaskCompletion": [(1, "commands", MESSAGE, "dex.v1.Command", _R)],
    # task.proto
    "dex.v1.WorkflowTask": [
        (1, "history", MESSAGE, "dex.v1.WorkflowEvent", _R),
        (2, "newEvents", MESSAGE, "dex.v1.WorkflowEvent", _R),
        (3, "runId", STRING), (4, "workflowName", STRING), (5, "workflowVersion", INT32),
        (6, "queue", STRING), (7, "lockVersion", INT64), (8, "lockedUntil", TIMESTAMP),
        (9, "status", ENUM, "dex.v1.RunStatus"), (10, "historyLength", INT32),
        (11, "historyOmitted", INT32)],
    "dex.v1.ActivityTask": [
        (1, "runId", STRING), (2, "taskId", INT32), (3, "name", STRING), (4, "queue", STRING),
        (5, "argument", MESSAGE, "dex.v1.Payload"), (6, "attempt", INT32),
        (7, "lockVersion", INT64), (8, "lockedUntil", TIMESTAMP),
        (9, "retryPolicy", MESSAGE, "dex.v1.RetryPolicy"),
        (10, "heartbeatDetails", MESSAGE, "dex.v1.Payload"),
        (11, "lastFailure", MESSAGE, "dex.v1.Failure")],
}

ENUMS: Dict[str, Dict[int, str]] = {
    "dex.v1.RunStatus": {0: "RUN_STATUS_UNSPECIFIED", 1: "RUN_STATUS_CREATED",
                         2: "RUN_STATUS_RUNNING", 3: "RUN_STATUS_SUSPENDED",
                         4: "RUN_STATUS_CANCELLED", 5: "RUN_STATUS_COMPLETED",
                         6: "RUN_STATUS_FAILED", 7: "RUN_STATUS_TERMINATED",
                         8: "RUN_STATUS_BLOCKED", 9: "RUN_STATUS_TIMED_OUT",
                         10: "RUN_STATUS_DELAYED"},
    "dex.v1.ParentClosePolicy": {0: "PARENT_CLOSE_POLICY_UNSPECIFIED",
                                 1: "PARENT_CLOSE_POLICY_TERMINATE",
                                 2: "PARENT_CLOSE_POLICY_REQUEST_CANCEL",
                                 3: "PARENT_CLOSE_POLICY_ABANDON"},
    "dex.v1.SignalOutcome": {0: "SIGNAL_OUTCOME_UNSPECIFIED", 1: "SIGNAL_OUTCOME_DELIVERED",
                             2: "SIGNAL_OUTCOME_DUPLICATE", 3: "SIGNAL_OUTCOME_TARGET_ENDED",
                             4: "SIGNAL_OUTCOME_TARGET_NOT_FOUND"},
}


class ProtobufError(ValueError):
    """Bytes that are not the protobuf encoding of the expected message, or a dict that does
    not fit its message."""


class _Field:
    __slots__ = ("number", "name", "kind", "type", "repeated", "oneof", "sub", "enum",
                 "tag", "tag_bytes")

    def __init__(self, number: int, name: str, kind: int, *rest: str) -> None:
        self.number, self.name, self.kind = number, name, kind
        self.type = rest[0] if rest and rest[0] not in (_R, _O) else None
        self.repeated = _R in rest
        self.oneof = _O in rest
        self.sub: Optional[_Message] = None
        self.enum: Optional[Dict[int, str]] = None
        self.tag = number << 3 | _WIRE_TYPE[kind]
        self.tag_bytes = _varint_bytes(self.tag)


class _Message:
    """A message's fields by tag (for decoding) and by JSON name (for encoding)."""

    __slots__ = ("name", "fields", "decoding", "by_name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fields: List[_Field] = []
        self.decoding: Dict[int, tuple] = {}     # tag -> (name, kind, message or enum, store)
        self.by_name: Dict[str, _Field] = {}


def _varint_bytes(value: int) -> bytes:
    if value < 0:
        value += 1 << 64            # negative int32/int64: ten bytes, two's complement
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _build() -> Dict[str, _Message]:
    messages = {name: _Message(name) for name in SCHEMA}
    for name, fields in SCHEMA.items():
        m = messages[name]
        for spec in fields:
            f = _Field(*spec)
            if f.kind == MESSAGE:
                f.sub = messages[f.type]
            elif f.kind == ENUM:
                f.enum = ENUMS[f.type]
            m.fields.append(f)
            m.by_name[f.name] = f
    for m in messages.values():
        for f in m.fields:
            store = (_APPEND if f.repeated else
                     _KEEP if f.oneof or f.kind in (MESSAGE, TIMESTAMP, DURATION) else _ZERO_OUT)
            m.decoding[f.tag] = (f.name, f.kind, f.sub or f.enum, store)
    return messages


MESSAGES = _build()


# ---------------------------------------------------------------------------
# Decoding: protobuf bytes -> canonical JSON shape
# ---------------------------------------------------------------------------

def _nanos_text(nanos: int) -> str:
    """0, 3, 6 or 9 fractional digits, as the server writes them ("1.500s", not "1.5s")."""
    if nanos == 0:
        return ""
    if nanos % 1000000 == 0:
        return ".%03d" % (nanos // 1000000)
    if nanos % 1000 == 0:
        return ".%06d" % (nanos // 1000)
    return ".%09d" % nanos


_last_second: Tuple[Optional[int], str] = (None, "")  # the events of a history share seconds
_timestamps: Dict[bytes, str] = {}       # and the events of one workflow task one timestamp


def _timestamp_text(seconds: int, nanos: int) -> str:
    global _last_second
    last = _last_second                  # one read: other threads may replace it meanwhile
    if last[0] != seconds:
        last = (seconds, "%04d-%02d-%02dT%02d:%02d:%02d" % time.gmtime(seconds)[:6])
        _last_second = last
    return last[1] + _nanos_text(nanos) + "Z"


def _duration_text(seconds: int, nanos: int) -> str:
    sign = "-" if seconds < 0 or nanos < 0 else ""
    return "%s%d%ss" % (sign, abs(seconds), _nanos_text(abs(nanos)))


def _seconds_nanos(buf: bytes, pos: int, end: int) -> Tuple[int, int]:
    """A google.protobuf.Timestamp or Duration: (seconds, nanos)."""
    seconds = nanos = 0
    while pos < end:
        tag = buf[pos]
        pos += 1
        value, pos = _read_varint(buf, pos)
        if value >= 1 << 63:
            value -= 1 << 64
        if tag == 0x08:
            seconds = value
        elif tag == 0x10:
            nanos = value if value < 1 << 31 else value - (1 << 32)
        else:
            raise ProtobufError(f"unexpected tag {tag} in a Timestamp or Duration")
    return seconds, nanos


def _read_varint(buf: bytes, pos: int) -> Tuple[int, int]:
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    value = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _skip(buf: bytes, pos: int, wire: int) -> int:
    """Skip a field of an unknown number (a newer server's addition)."""
    if wire == 0:
        return _read_varint(buf, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        n, pos = _read_varint(buf, pos)
        return pos + n
    if wire == 5:
        return pos + 4
    raise ProtobufError(f"unsupported wire type {wire}")


def _decode(buf: bytes, pos: int, end: int, msg: _Message) -> dict:
    # The hot loop of polling with protobuf: one dict lookup a field, locals only.
    out: dict = {}
    fields = msg.decoding
    while pos < end:
        tag = buf[pos]
        pos += 1
        if tag >= 0x80:
            tag, pos = _read_varint(buf, pos - 1)
        f = fields.get(tag)
        if f is None:
            pos = _skip(buf, pos, tag & 7)
            continue
        name, kind, sub, store = f
        if tag & 7 == 2:
            n = buf[pos]
            pos += 1
            if n >= 0x80:
                n, pos = _read_varint(buf, pos - 1)
            stop = pos + n
            if stop > end:
                raise ProtobufError(f"field {name} of {msg.name} runs past the end")
            if kind == MESSAGE:
                value: Any = _decode(buf, pos, stop, sub)
            elif kind == STRING:
                value = str(buf[pos:stop], "utf-8")
            elif kind == TIMESTAMP:
                raw = buf[pos:stop]
                value = _timestamps.get(raw)
                if value is None:
                    value = _timestamp_text(*_seconds_nanos(buf, pos, stop))
                    if len(_timestamps) > 4096:
                        _timestamps.clear()
                    _timestamps[raw] = value
            elif kind == DURATION:
                value = _duration_text(*_seconds_nanos(buf, pos, stop))
            elif kind == BYTES:
                value = base64.b64encode(buf[pos:stop]).decode("ascii")
            else:                               # MAP: one entry
                key, value = _decode_map_entry(buf, pos, stop)
                out.setdefault(name, {})[key] = value
                pos = stop
                continue
            pos = stop
        elif tag & 7 == 0:
            value = buf[pos]
            pos += 1
            if value >= 0x80:
                value, pos = _read_varint(buf, pos - 1)
            if kind == INT32:
                if value >= 1 << 63:
                    value -= 1 << 64
            elif kind == INT64:            # a string in JSON; zero stays 0, left out
                if value:
                    value = str(value - (1 << 64) if value >= 1 << 63 else value)
            elif kind == BOOL:
                value = value != 0
            elif value:                    # ENUM, by name; zero stays 0, left out
                value = sub.get(value, value)
        else:                              # DOUBLE, the only fixed64 field
            value = struct.unpack_from("<d", buf, pos)[0]
            pos += 8
        if store == _KEEP or (store == _ZERO_OUT and value):
            out[name] = value
        elif store == _APPEND:
            out.setdefault(name, []).append(value)
    if pos != end:
        raise ProtobufError(f"truncated {msg.name}")
    return out


def _decode_map_entry(buf: bytes, pos: int, end: int) -> Tuple[str, str]:
    key = value = ""
    while pos < end:
        tag = buf[pos]
        n, p = _read_varint(buf, pos + 1)
        if tag == 0x0A:
            key = str(buf[p:p + n], "utf-8")
        elif tag == 0x12:
            value = str(buf[p:p + n], "utf-8")
        else:
            raise ProtobufError(f"unexpected tag {tag} in a map entry")
        pos = p + n
    return key, value


def decode(message_type: str, data: bytes) -> dict:
    """``data``, a protobuf-encoded ``message_type`` (e.g. ``"dex.v1.ActivityTask"``), as the
    dict of its canonical proto3 JSON form: what ``dex.to_json`` returns for it."""
    data = bytes(data)
    try:
        return _decode(data, 0, len(data), MESSAGES[message_type])
    except IndexError:
        raise ProtobufError(f"truncated {message_type}") from None


def decode_workflow_task(data: bytes, skip: int = 0) -> Tuple[dict, int]:
    """A dex.v1.WorkflowTask, leaving out its first ``skip`` history events undecoded.

    Returns ``(task, skipped)``: ``task["history"]`` holds the events after the first
    ``skipped`` (``skipped`` is less than ``skip`` when the history is shorter).  Skipping
    costs a few operations an event, decoding it a few hundred: a worker that has the run's
    state cached needs only the events after those it has seen."""
    data = bytes(data)
    pos, end, skipped = 0, len(data), 0
    try:
        while skipped < skip and pos < end and data[pos] == 0x0A:     # history, field 1
            n, p = _read_varint(data, pos + 1)
            pos = p + n
            skipped += 1
        if pos > end:
            raise IndexError
        task = _decode(data, pos, end, MESSAGES["dex.v1.WorkflowTask"])
    except IndexError:
        raise ProtobufError("truncated dex.v1.WorkflowTask") from None
    return task, skipped


def _keys_message(name: str, numbers: Tuple[int, ...]) -> _Message:
    m = _Message(name)
    m.decoding = {tag: v for tag, v in MESSAGES[name].decoding.items() if tag >> 3 in numbers}
    return m


_TASK_KEYS = {"dex.v1.WorkflowTask": _keys_message("dex.v1.WorkflowTask", (3, 7)),
              "dex.v1.ActivityTask": _keys_message("dex.v1.ActivityTask", (1, 2, 7))}
_HISTORY_OMITTED = _keys_message("dex.v1.WorkflowTask", (11,))


def history_omitted(data: bytes) -> int:
    """WorkflowTask.history_omitted of an encoded task, its other fields skipped undecoded:
    how many events at the history's start the task left out (dex 1.5, worker_cache)."""
    data = bytes(data)
    try:
        return int(_decode(data, 0, len(data), _HISTORY_OMITTED).get("historyOmitted", 0))
    except IndexError:
        raise ProtobufError("truncated dex.v1.WorkflowTask") from None


def task_keys(message_type: str, data: bytes) -> Tuple[str, int, int]:
    """The run id, task id (0 for a workflow task) and lock version of an encoded
    dex.v1.WorkflowTask or dex.v1.ActivityTask; its other fields are skipped undecoded."""
    data = bytes(data)
    try:
        d = _decode(data, 0, len(data), _TASK_KEYS[message_type])
    except IndexError:
        raise ProtobufError(f"truncated {message_type}") from None
    return d.get("runId", ""), int(d.get("taskId", 0)), int(d.get("lockVersion", 0))


# ---------------------------------------------------------------------------
# Encoding: canonical JSON shape -> protobuf bytes
# ---------------------------------------------------------------------------

def _parse_seconds_nanos(text: str, what: str) -> Tuple[int, int]:
    """"1.5s" -> (1, 500000000), "-0.25s" -> (0, -250000000)."""
    if not isinstance(text, str) or not text.endswith("s"):
        raise ProtobufError(f"{what}: not a duration: {text!r}")
    body = text[:-1]
    neg = body.startswith("-")
    if neg:
        body = body[1:]
    whole, _, frac = body.partition(".")
    if not whole.isdigit() or (frac and not frac.isdigit()) or len(frac) > 9:
        raise ProtobufError(f"{what}: not a duration: {text!r}")
    seconds, nanos = int(whole), int(frac.ljust(9, "0")) if frac else 0
    return (-seconds, -nanos) if neg else (seconds, nanos)


_TIMESTAMP_RE = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def _parse_timestamp(text: str, what: str) -> Tuple[int, int]:
    """RFC 3339 -> (seconds, nanos)."""
    m = _TIMESTAMP_RE.match(text if isinstance(text, str) else "")
    if not m:
        raise ProtobufError(f"{what}: not an RFC 3339 timestamp: {text!r}")
    seconds = calendar.timegm(tuple(int(g) for g in m.groups()[:6]))
    if m.group(8) != "Z":
        sign = 1 if m.group(8)[0] == "+" else -1
        seconds -= sign * (int(m.group(8)[1:3]) * 3600 + int(m.group(8)[4:6]) * 60)
    return seconds, int((m.group(7) or "0").ljust(9, "0"))


def _encode_seconds_nanos(seconds: int, nanos: int) -> bytes:
    out = b""
    if seconds:
        out += b"\x08" + _varint_bytes(seconds)
    if nanos:
        out += b"\x10" + _varint_bytes(nanos)
    return out


def _encode_value(f: _Field, value: Any, out: bytearray, where: str) -> None:
    kind = f.kind
    out += f.tag_bytes
    if kind == STRING:
        if not isinstance(value, str):
            raise ProtobufError(f"{where}: expected a string, not {value!r}")
        b = value.encode("utf-8")
        out += _varint_bytes(len(b))
        out += b
    elif kind == MESSAGE:
        if not isinstance(value, dict):
            raise ProtobufError(f"{where}: expected an object, not {value!r}")
        b = _encode(value, f.sub, where)
        out += _varint_bytes(len(b))
        out += b
    elif kind == INT32 or kind == INT64:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ProtobufError(f"{where}: expected an integer, not {value!r}")
        out += _varint_bytes(int(value))
    elif kind == BOOL:
        out += b"\x01" if value else b"\x00"
    elif kind == DOUBLE:
        out += struct.pack("<d", float(value))
    elif kind == DURATION or kind == TIMESTAMP:
        b = _encode_seconds_nanos(*(_parse_seconds_nanos if kind == DURATION
                                    else _parse_timestamp)(value, where))
        out += _varint_bytes(len(b))
        out += b
    elif kind == BYTES:
        b = base64.b64decode(value) if isinstance(value, str) else bytes(value)
        out += _varint_bytes(len(b))
        out += b
    elif kind == ENUM:
        if isinstance(value, str):
            numbers = {v: k for k, v in f.enum.items()}
            if value not in numbers:
                raise ProtobufError(f"{where}: unknown enum value {value!r}")
            value = numbers[value]
        out += _varint_bytes(int(value))
    else:
        raise ProtobufError(f"{where}: cannot encode")


def _encode(obj: dict, msg: _Message, where: str = "") -> bytes:
    out = bytearray()
    by_name = msg.by_name
    for name, value in obj.items():
        f = by_name.get(name)
        path = f"{where}.{name}" if where else name
        if f is None:
            raise ProtobufError(f"{path}: {msg.name} has no field {name!r}")
        if value is None:
            continue
        if f.kind == MAP:
            for k, v in value.items():
                kb, vb = str(k).encode("utf-8"), str(v).encode("utf-8")
                entry = (b"\x0a" + _varint_bytes(len(kb)) + kb +
                         b"\x12" + _varint_bytes(len(vb)) + vb)
                out += f.tag_bytes
                out += _varint_bytes(len(entry))
                out += entry
        elif f.repeated:
            for i, v in enumerate(value):
                _encode_value(f, v, out, f"{path}[{i}]")
        elif value or f.oneof or f.kind == MESSAGE:
            _encode_value(f, value, out, path)
    return bytes(out)


def encode(message_type: str, obj: dict) -> bytes:
    """The protobuf encoding of ``obj``, a ``message_type`` in canonical JSON shape: the bytes
    ``dex.from_json`` would make of it (fields in another order, which protobuf allows)."""
    return _encode(obj, MESSAGES[message_type])


def encode_commands(commands: List[dict]) -> bytes:
    """A dex.v1.WorkflowTaskCompletion of ``commands`` (their JSON shape)."""
    cmd = MESSAGES["dex.v1.Command"]
    out = bytearray()
    for i, c in enumerate(commands):
        b = _encode(c, cmd, f"commands[{i}]")
        out += b"\x0a"
        out += _varint_bytes(len(b))
        out += b
    return bytes(out)


def encode_json_payload(json_text: str) -> bytes:
    """A dex.v1.Payload holding JSON text: what an activity result is on the wire."""
    b = json_text.encode("utf-8")
    return b"\x12" + _varint_bytes(len(b)) + b
