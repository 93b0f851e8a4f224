"""The gRPC API (``dex.v1.DexService``, proto/dex/v1/service.proto), gRPC's health service
and server reflection, on ``grpc.aio`` (Debian's python3-grpcio).

It is the REST API over another wire: the same :class:`db.Database` (its two pools, so that
long polls' waits never take the connections other calls need, and a wait that finds its
pool full is refused at once), the same token to role mapping (``Database.as_caller``: one
transaction per call, ``SET LOCAL ROLE`` to the token's role), the same reads of runs
(``runs.py``).  Served beside REST (``python3 -m dex serve --grpc-port N``) it runs on
uvicorn's event loop and shares REST's pools and their limits; ``python3 -m dex grpc``
serves it alone.  The database calls run in threads of their own (``_calls``), so a call
waiting for a connection holds no event loop.

The worker calls pass tasks and completions to the ``_pb`` functions as they are: a polled
task's bytes go into the answer without being decoded (``_poll_answer`` writes the few bytes
around them), and a completion is encoded once, for ``dex.complete_tasks_pb``.

Errors: a :class:`db.Problem` ends the call with the gRPC code of its SQLSTATE
(:func:`grpc_code`, the table in docs/grpc.md), the SQLSTATE in the trailing metadata
``dex-sqlstate`` and in a ``google.rpc.ErrorInfo`` of ``grpc-status-details-bin``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import logging
import uuid
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Set, Tuple

import grpc
import psycopg
from google.protobuf import descriptor_pool, json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from psycopg.types.json import Jsonb

from ..v1 import common_pb2, event_pb2, service_pb2 as pb
from . import jsonio, runs as R
from .api import _interval
from .db import Database, Problem, bearer_token, problem_from
from .pb import health_pb2, reflection_pb2

log = logging.getLogger("dex.serve.grpc")

SERVICE = "dex.v1.DexService"
HEALTH = "grpc.health.v1.Health"
REFLECTION = ("grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection")
MAX_WAIT = 300.0
DEADLINE_MARGIN = 0.5   # seconds before a call's deadline that its long poll answers

C = grpc.StatusCode
# SQLSTATE -> gRPC status: exact codes first, then classes (two characters); as db.http_status
_CODE_BY_SQLSTATE = {
    "42501": C.PERMISSION_DENIED,    # no dex role for the call, or no grant on the queue
    "42704": C.NOT_FOUND,            # unknown run, queue or token (or one the caller may not see)
    "WD001": C.ABORTED,              # dex: the lease was lost (stale lock version)
    "WD002": C.FAILED_PRECONDITION,  # dex: the task's run was cancelled or has ended
    "55000": C.FAILED_PRECONDITION,  # the run has ended, is not running, ...
    "55006": C.FAILED_PRECONDITION,  # a definition runs that have not ended use
    "23505": C.ALREADY_EXISTS,       # the instance id has an active run
    "42710": C.ALREADY_EXISTS,       # a queue or token of that name exists
    "21000": C.INVALID_ARGUMENT,     # the instance id is active on several queues
    "42809": C.INVALID_ARGUMENT,     # a run on an activity queue, ...
    "42601": C.INVALID_ARGUMENT, "42804": C.INVALID_ARGUMENT, "42P02": C.INVALID_ARGUMENT,
    "57014": C.UNAVAILABLE,          # query_canceled (statement_timeout)
}
_CODE_BY_CLASS = {
    "22": C.INVALID_ARGUMENT,        # data_exception: bad input
    "23": C.FAILED_PRECONDITION,     # integrity_constraint_violation
    "54": C.INVALID_ARGUMENT,        # program_limit_exceeded: payload or history too big
    "08": C.UNAVAILABLE, "53": C.UNAVAILABLE, "57": C.UNAVAILABLE, "58": C.UNAVAILABLE,
    "40": C.UNAVAILABLE,             # serialization failure, deadlock: retry
    "28": C.UNAUTHENTICATED,
}
# a Problem without a SQLSTATE (the server's own checks), by its HTTP status
_CODE_BY_HTTP = {400: C.INVALID_ARGUMENT, 401: C.UNAUTHENTICATED, 403: C.PERMISSION_DENIED,
                 404: C.NOT_FOUND, 409: C.FAILED_PRECONDITION, 413: C.INVALID_ARGUMENT,
                 503: C.UNAVAILABLE}


def grpc_code(p: Problem) -> grpc.StatusCode:
    """The gRPC status of a problem: by its SQLSTATE when the database refused, else by its
    HTTP status (which ``db.problem_from`` chose when there is no SQLSTATE)."""
    if p.sqlstate:
        return (_CODE_BY_SQLSTATE.get(p.sqlstate) or _CODE_BY_CLASS.get(p.sqlstate[:2])
                or C.INTERNAL)
    return _CODE_BY_HTTP.get(p.status, C.INTERNAL)


def _bad(detail: str) -> Problem:
    return Problem(400, "Bad Request", detail)


# ---- protobuf wire helpers (the few bytes written by hand)

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _status_details(code: grpc.StatusCode, message: str, sqlstate: str) -> bytes:
    """A google.rpc.Status with one google.rpc.ErrorInfo {reason: SQLSTATE, domain: "dex"}."""
    info = _field(1, sqlstate.encode()) + _field(2, b"dex")
    anything = _field(1, b"type.googleapis.com/google.rpc.ErrorInfo") + _field(2, info)
    return (_varint(1 << 3) + _varint(code.value[0]) + _field(2, message.encode())
            + _field(3, anything))


def _poll_answer(tasks: Iterable[Tuple[str, bytes]], completed: List[bool]) -> bytes:
    """An encoded PollTasksResponse around tasks as ``dex.poll_tasks_pb`` encoded them: Task
    field 1 is a WorkflowTask, 2 an ActivityTask."""
    out = b"".join(_field(1, _field(1 if kind == "workflow" else 2, bytes(task)))
                   for kind, task in tasks)
    if completed:
        out += _field(2, bytes(1 if c else 0 for c in completed))
    return out


# ---- request fields to SQL arguments

def _uuid(text: str, name: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except (ValueError, TypeError, AttributeError):
        raise _bad(f"{name} must be a UUID, not {text[:60]!r}") from None


def _json(p: common_pb2.Payload, name: str) -> Any:
    """A Payload the SQL API takes as jsonb: its JSON, parsed (None when unset)."""
    which = p.WhichOneof("content")
    if which is None:
        return None
    if which != "json":
        raise _bad(f"{name} must be JSON (Payload.json): the SQL call takes jsonb")
    try:
        return Jsonb(jsonio.load(p.json))
    except ValueError as e:
        raise _bad(f"{name} is not JSON: {e}") from None


def _seconds(msg: Any, field: str, default: Optional[float]) -> Optional[float]:
    """A Duration field in seconds; ``default`` when it is unset."""
    if not msg.HasField(field):
        return default
    d: Duration = getattr(msg, field)
    return d.seconds + d.nanos / 1e9


def _time(msg: Any, field: str) -> Optional[dt.datetime]:
    if not msg.HasField(field):
        return None
    try:
        return getattr(msg, field).ToDatetime().replace(tzinfo=dt.timezone.utc)
    except (ValueError, OverflowError):
        raise _bad(f"{field} is out of range") from None


def _lease(lease: pb.Lease) -> Tuple[uuid.UUID, int, int]:
    return _uuid(lease.run_id, "lease.run_id"), lease.task_id, lease.lock_version


def _result(msg: Any) -> bytes:
    """The encoded result of a CompleteTaskRequest or a TaskCompletion."""
    which = msg.WhichOneof("result")
    if which is None:
        raise _bad("a completion needs its result: workflow (a WorkflowTaskCompletion) or "
                   "activity (a Payload)")
    return getattr(msg, which).SerializeToString()


# ---- database rows to messages

def _set_time(ts: Timestamp, value: Optional[dt.datetime]) -> None:
    if value is not None:
        ts.FromDatetime(value.astimezone(dt.timezone.utc).replace(tzinfo=None))


def _failure(value: Any) -> Optional[common_pb2.Failure]:
    if not value:
        return None
    f = common_pb2.Failure()
    try:
        json_format.ParseDict(value, f, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError):
        f.message = str(value.get("message", "")) if isinstance(value, dict) else str(value)
    return f


def run_message(row: Dict[str, Any]) -> pb.Run:
    """A row of ``dex.runs`` (runs.RUN_COLUMNS) as a Run."""
    r = pb.Run(id=str(row["id"]), workflow_name=row["workflow_name"],
               workflow_version=row["workflow_version"], queue=row["queue"],
               status=common_pb2.RunStatus.Value("RUN_STATUS_" + row["status"]),
               instance_id=row["instance_id"] or "", priority=row["priority"] or 0,
               concurrency_key=row["concurrency_key"] or "",
               custom_status=row["custom_status"] or "",
               parent_id=str(row["parent_id"] or ""), history_length=row["history_length"] or 0,
               task_failures=row["task_failures"] or 0,
               origin_run_id=str(row["origin_run_id"] or ""), origin=row["origin"] or "")
    for k, v in (row["labels"] or {}).items():
        r.labels[k] = str(v)
    for name in ("argument", "result"):
        if row[name] is not None:
            getattr(r, name).json = jsonio.dumps(row[name])
    for name in ("failure", "last_task_failure"):
        f = _failure(row[name])
        if f is not None:
            getattr(r, name).CopyFrom(f)
    for name in ("created_at", "updated_at", "started_at", "completed_at"):
        _set_time(getattr(r, name), row[name])
    return r


Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class DexService:
    """The calls of ``dex.v1.DexService``.  Each checks its request, then runs one transaction
    as the caller's role in a thread of ``calls``."""

    def __init__(self, db: Database, calls: concurrent.futures.Executor):
        self.db, self.calls = db, calls
        # the server's own waits of long polls, by (token, worker id): StopWaiting ends them
        self._waits: Dict[Tuple[str, str], Set[asyncio.Event]] = {}

    # -- plumbing

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.calls, fn, *args)

    def _as_caller(self, token: str, fn: Callable[[psycopg.Connection], Any]) -> Any:
        with self.db.as_caller(token) as conn:
            return fn(conn)

    async def _call(self, context: grpc.aio.ServicerContext, fn: Callable[[psycopg.Connection], Any]) -> Any:
        return await self._run(self._as_caller, _token(context), fn)

    # -- runs

    async def StartRun(self, req: pb.StartRunRequest, context) -> pb.Run:
        args = (req.workflow_name, req.queue, _json(req.argument, "argument"), req.workflow_version or 1,
                req.instance_id or None, req.priority, Jsonb(dict(req.labels)) if req.labels else None,
                req.concurrency_key or None, "return" if req.return_active else "error",
                _time(req, "start_at"),
                _interval(_seconds(req, "execution_timeout", None), "execution_timeout"))

        def start(conn):
            run_id = conn.execute("SELECT dex.create_run(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) AS id",
                                  args).fetchone()["id"]
            return run_message(R.get_run(conn, run_id))
        return await self._call(context, start)

    async def StartRuns(self, req: pb.StartRunsRequest, context) -> pb.StartRunsResponse:
        if req.instance_ids and len(req.instance_ids) != len(req.arguments):
            raise _bad("instance_ids must be empty or as many as arguments")
        args = (req.workflow_name, req.queue,
                [_json(a, f"arguments[{i}]") for i, a in enumerate(req.arguments)],
                req.workflow_version or 1, req.priority, Jsonb(dict(req.labels)) if req.labels else None,
                _time(req, "start_at"),
                _interval(_seconds(req, "execution_timeout", None), "execution_timeout"),
                [i or None for i in req.instance_ids] if req.instance_ids else None)

        def start(conn):
            rows = conn.execute("SELECT id, created FROM dex.create_runs(%s, %s, %s::jsonb[], %s, %s, %s, "
                                "%s, %s, %s)", args).fetchall()
            return pb.StartRunsResponse(runs=[pb.StartedRun(id=str(r["id"]), created=r["created"])
                                              for r in rows])
        return await self._call(context, start)

    async def GetRun(self, req: pb.GetRunRequest, context) -> pb.Run:
        run_id = _uuid(req.run_id, "run_id")
        return await self._call(context, lambda conn: run_message(R.get_run(conn, run_id)))

    async def ListRuns(self, req: pb.ListRunsRequest, context) -> pb.ListRunsResponse:
        flt = R.RunFilter(req.status or None, req.queue or None, req.workflow or None,
                          req.instance_id or None, [f"{k}={v}" for k, v in sorted(req.labels.items())] or None,
                          _uuid(req.parent_id, "parent_id") if req.parent_id else None,
                          _time(req, "created_after"), _time(req, "created_before"))
        limit = req.limit or 50

        def page(conn):
            rows, cursor = R.list_runs(conn, flt, limit, req.cursor or None)
            return pb.ListRunsResponse(runs=[run_message(r) for r in rows], next_cursor=cursor or "")
        return await self._call(context, page)

    async def GetHistory(self, req: pb.GetHistoryRequest, context) -> bytes:
        run_id = _uuid(req.run_id, "run_id")

        def history(conn):
            row = conn.execute("SELECT dex.run_history_pb(%s) AS h", (run_id,)).fetchone()
            if row["h"] is None:
                raise Problem(404, "Not Found", f"run {run_id} does not exist", "42704")
            return bytes(row["h"])       # an encoded EventBatch, as it is
        return await self._call(context, history)

    async def SendEvent(self, req: pb.SendEventRequest, context) -> pb.SendEventResponse:
        args = (_uuid(req.run_id, "run_id"), req.event_id, _json(req.payload, "payload"))

        def send(conn):
            return pb.SendEventResponse(delivered=conn.execute(
                "SELECT dex.send_external_event(%s, %s, %s) AS d", args).fetchone()["d"])
        return await self._call(context, send)

    async def SendEvents(self, req: pb.SendEventsRequest, context) -> pb.SendEventsResponse:
        ids = [_uuid(e.run_id, f"events[{i}].run_id") for i, e in enumerate(req.events)]
        names = [e.event_id for e in req.events]
        payloads = [_json(e.payload, f"events[{i}].payload") for i, e in enumerate(req.events)]

        def send(conn):
            rows = conn.execute("SELECT run_id, event_id, delivered, outcome FROM "
                                "dex.send_external_events(%s, %s, %s::jsonb[])", (ids, names, payloads))
            return pb.SendEventsResponse(outcomes=[
                pb.SendEventsResponse.Outcome(run_id=str(r["run_id"]), event_id=r["event_id"],
                                              delivered=r["delivered"], outcome=r["outcome"]) for r in rows])
        return await self._call(context, send)

    async def _action(self, fn: str, req: pb.RunActionRequest, context) -> pb.Run:
        run_id = _uuid(req.run_id, "run_id")

        def act(conn):
            conn.execute(f"SELECT dex.{fn}(%s, %s)", (run_id, req.reason or None))
            return run_message(R.get_run(conn, run_id))
        return await self._call(context, act)

    async def CancelRun(self, req, context):
        return await self._action("cancel_run", req, context)

    async def SuspendRun(self, req, context):
        return await self._action("suspend_run", req, context)

    async def ResumeRun(self, req, context):
        return await self._action("resume_run", req, context)

    async def TerminateRun(self, req, context):
        return await self._action("terminate_run", req, context)

    async def RestartRun(self, req: pb.RestartRunRequest, context) -> pb.Run:
        run_id = _uuid(req.run_id, "run_id")

        def restart(conn):
            new = conn.execute("SELECT dex.restart_run(%s) AS id", (run_id,)).fetchone()["id"]
            return run_message(R.get_run(conn, new))
        return await self._call(context, restart)

    async def ResetRun(self, req: pb.ResetRunRequest, context) -> pb.Run:
        run_id = _uuid(req.run_id, "run_id")

        def reset(conn):
            new = conn.execute("SELECT dex.reset_run(%s, %s, %s) AS id",
                               (run_id, req.event_id, req.reason or None)).fetchone()["id"]
            return run_message(R.get_run(conn, new))
        return await self._call(context, reset)

    # -- workers

    async def PollTasks(self, req: pb.PollTasksRequest, context) -> bytes:
        return await self._poll(req, _token(context), context)

    async def PollTasksStream(self, requests, context):
        token = _token(context)
        async for req in requests:
            yield await self._poll(req, token, context)

    async def _poll(self, req: pb.PollTasksRequest, token: str, context) -> bytes:
        wait = _seconds(req, "wait", 0.0) or 0.0
        if not 0 <= wait <= MAX_WAIT:
            raise _bad(f"wait must be 0 to {MAX_WAIT:.0f} seconds")
        # answer (empty) before the call's deadline rather than lease tasks nobody will receive
        left = context.time_remaining()
        if left is not None:
            wait = max(0.0, min(wait, left - DEADLINE_MARGIN))
        lease = _interval(_seconds(req, "lease", 300.0), "lease")
        args = (req.queue, req.worker_id, req.max_tasks or 1, lease, req.worker_cache,
                list(req.names) or None, list(req.versions) or None)
        done = None
        if req.completions:
            leases = [_lease(c.lease) for c in req.completions]
            done = ([x[0] for x in leases], [x[1] for x in leases], [x[2] for x in leases],
                    [_result(c) for c in req.completions])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        completed: List[bool] = []
        while True:
            tasks, got = await self._run(self._lease_tasks, token, args, done)
            if done is not None:
                completed, done = got, None
            # a wake-up may be for a task another poller took, or that this one does not run
            if tasks or loop.time() >= deadline:
                return _poll_answer(tasks, completed)
            if not await self._wait(token, req, deadline - loop.time()):
                return _poll_answer(tasks, completed)

    def _lease_tasks(self, token: str, args: tuple, done: Optional[tuple]) -> Tuple[list, List[bool]]:
        with self.db.as_caller(token) as conn:
            completed: List[bool] = []
            if done is not None:
                got = {(r["run_id"], r["task_id"]): r["completed"] for r in conn.execute(
                    "SELECT run_id, task_id, completed FROM dex.complete_tasks_pb(%s, %s, %s, %s)", done)}
                completed = [got.get((r, t), False) for r, t in zip(done[0], done[1])]
            tasks = conn.execute("SELECT kind, task FROM dex.poll_tasks_pb(%s, %s, %s, %s, %s, %s, %s)",
                                 args).fetchall()
            return [(t["kind"], t["task"]) for t in tasks], completed

    async def _wait(self, token: str, req: pb.PollTasksRequest, seconds: float) -> bool:
        """The long poll's wait (``Database.wait_for_tasks``, in the waits' pool), ended early by
        StopWaiting or by the call's end (its client cancelled it or went away)."""
        stop = asyncio.Event()
        key = (token, req.worker_id)
        self._waits.setdefault(key, set()).add(stop)
        job = asyncio.ensure_future(self.db.wait_for_tasks(req.queue, seconds, stop.wait))
        try:
            return await asyncio.shield(job) and not stop.is_set()
        except asyncio.CancelledError:
            stop.set()          # the call was cancelled: end the wait, free its connection
            await asyncio.gather(job, return_exceptions=True)
            raise
        finally:
            waits = self._waits.get(key)
            if waits is not None:
                waits.discard(stop)
                if not waits:
                    del self._waits[key]

    async def CompleteTask(self, req: pb.CompleteTaskRequest, context) -> pb.CompleteTaskResponse:
        args = (*_lease(req.lease), _result(req))

        def complete(conn):
            conn.execute("SELECT dex.complete_task_pb(%s, %s, %s, %s)", args)
            return pb.CompleteTaskResponse()
        return await self._call(context, complete)

    async def FailTask(self, req: pb.FailTaskRequest, context) -> pb.FailTaskResponse:
        args = (*_lease(req.lease), req.failure.SerializeToString())

        def fail(conn):
            conn.execute("SELECT dex.fail_task_pb(%s, %s, %s, %s)", args)
            return pb.FailTaskResponse()
        return await self._call(context, fail)

    async def Heartbeat(self, req: pb.HeartbeatRequest, context) -> pb.HeartbeatResponse:
        args = (*_lease(req.lease),
                _interval(_seconds(req, "lease_duration", 300.0), "lease_duration"),
                _json(req.details, "details"))

        def beat(conn):
            until = conn.execute("SELECT dex.heartbeat_task(%s, %s, %s, %s, %s) AS t", args).fetchone()["t"]
            out = pb.HeartbeatResponse()
            _set_time(out.locked_until, until)
            return out
        return await self._call(context, beat)

    async def StopWaiting(self, req: pb.StopWaitingRequest, context) -> pb.StopWaitingResponse:
        token = _token(context)
        stopped = await self._run(self._as_caller, token, lambda conn: conn.execute(
            "SELECT dex.stop_waiting(%s) AS n", (req.worker_id,)).fetchone()["n"])
        ours = self._waits.get((token, req.worker_id), set())
        for stop in ours:
            stop.set()
        return pb.StopWaitingResponse(stopped=(stopped or 0) + len(ours))


def _token(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return bearer_token(value if isinstance(value, str) else value.decode("latin-1"))
    return bearer_token("")


async def _abort(context: grpc.aio.ServicerContext, p: Problem) -> None:
    code = grpc_code(p)
    message = str(p)
    if p.extra.get("hint"):
        message += f" (hint: {p.extra['hint']})"
    trailing: List[Tuple[str, Any]] = []
    if p.sqlstate:
        trailing += [("dex-sqlstate", p.sqlstate),
                     ("grpc-status-details-bin", _status_details(code, message, p.sqlstate))]
    if p.headers and "Retry-After" in p.headers:
        trailing.append(("retry-after", p.headers["Retry-After"]))
    await context.abort(code, message, tuple(trailing))


def _guarded(fn: Handler) -> Handler:
    """A unary call whose Problem (or database error) ends it with its gRPC status."""
    async def call(req: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(req, context)
        except Problem as p:
            await _abort(context, p)
        except psycopg.Error as e:
            await _abort(context, problem_from(e))
    return call


def _guarded_stream(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def call(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            async for answer in fn(requests, context):
                yield answer
        except Problem as p:
            await _abort(context, p)
        except psycopg.Error as e:
            await _abort(context, problem_from(e))
    return call


def _serialize(message: Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def dex_handler(service: DexService) -> grpc.GenericRpcHandler:
    methods = {}
    for m in pb.DESCRIPTOR.services_by_name["DexService"].methods:
        req = getattr(pb, m.input_type.name, None) or getattr(event_pb2, m.input_type.name)
        fn = getattr(service, m.name)
        if m.client_streaming:
            methods[m.name] = grpc.stream_stream_rpc_method_handler(
                _guarded_stream(fn), request_deserializer=req.FromString, response_serializer=_serialize)
        else:
            methods[m.name] = grpc.unary_unary_rpc_method_handler(
                _guarded(fn), request_deserializer=req.FromString, response_serializer=_serialize)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


# ---- grpc.health.v1

class Health:
    """SERVING while the database answers ``SELECT 1`` within 5 s (a connection of the
    requests' pool, as REST's /healthz), for "" and dex.v1.DexService."""

    KNOWN = ("", SERVICE)
    S = health_pb2.HealthCheckResponse

    def __init__(self, db: Database, calls: concurrent.futures.Executor):
        self.db, self.calls = db, calls

    def _status(self) -> int:
        try:
            with self.db.connection(timeout=5) as conn:
                conn.execute("SELECT 1")
            return self.S.SERVING
        except (Problem, psycopg.Error):
            return self.S.NOT_SERVING

    async def _now(self) -> int:
        return await asyncio.get_running_loop().run_in_executor(self.calls, self._status)

    async def Check(self, req: health_pb2.HealthCheckRequest, context) -> health_pb2.HealthCheckResponse:
        if req.service not in self.KNOWN:
            await context.abort(C.NOT_FOUND, f"unknown service {req.service!r}")
        return self.S(status=await self._now())

    async def Watch(self, req: health_pb2.HealthCheckRequest, context):
        if req.service not in self.KNOWN:
            yield self.S(status=self.S.SERVICE_UNKNOWN)
            return
        last = None
        while True:
            status = await self._now()
            if status != last:
                yield self.S(status=status)
                last = status
            await asyncio.sleep(5)

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(HEALTH, {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.Check, request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=_serialize),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.Watch, request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=_serialize)})


# ---- grpc.reflection.v1alpha and v1 (the same messages on the wire)

class Reflection:
    """Server reflection from the default descriptor pool, where the generated modules put
    dex.v1's files, health.proto and reflection.proto."""

    def __init__(self, services: List[str]):
        self.services = services
        self.pool = descriptor_pool.Default()

    def _files(self, fd: Any) -> List[bytes]:
        """The file and every file it imports, each once, the file first."""
        out, seen, todo = [], set(), [fd]
        while todo:
            f = todo.pop(0)
            if f.name in seen:
                continue
            seen.add(f.name)
            out.append(f.serialized_pb)
            todo.extend(f.dependencies)
        return out

    def _symbol_file(self, symbol: str) -> Any:
        name = symbol
        while name:
            try:
                return self.pool.FindFileContainingSymbol(name)
            except KeyError:
                name = name.rpartition(".")[0]      # a method or a field: its parent
        raise KeyError(symbol)

    def answer(self, req: reflection_pb2.ServerReflectionRequest) -> reflection_pb2.ServerReflectionResponse:
        out = reflection_pb2.ServerReflectionResponse(valid_host=req.host, original_request=req)
        which = req.WhichOneof("message_request")
        try:
            if which == "list_services":
                out.list_services_response.service.extend(
                    reflection_pb2.ServiceResponse(name=s) for s in self.services)
            elif which == "file_by_filename":
                out.file_descriptor_response.file_descriptor_proto.extend(
                    self._files(self.pool.FindFileByName(req.file_by_filename)))
            elif which == "file_containing_symbol":
                out.file_descriptor_response.file_descriptor_proto.extend(
                    self._files(self._symbol_file(req.file_containing_symbol)))
            elif which == "all_extension_numbers_of_type":
                self.pool.FindMessageTypeByName(req.all_extension_numbers_of_type)
                out.all_extension_numbers_response.base_type_name = req.all_extension_numbers_of_type
            else:
                raise KeyError(which)
        except KeyError:
            out.error_response.error_code = C.NOT_FOUND.value[0]
            out.error_response.error_message = f"not found: {which}"
        return out

    async def ServerReflectionInfo(self, requests, context):
        async for req in requests:
            yield self.answer(req)

    def handlers(self) -> List[grpc.GenericRpcHandler]:
        return [grpc.method_handlers_generic_handler(name, {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                self.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=_serialize)}) for name in REFLECTION]


# ---- the server

async def start(db: Database, address: str, threads: Optional[int] = None) -> Tuple[grpc.aio.Server, int]:
    """Starts serving dex.v1.DexService, health and reflection on ``address`` ("host:port";
    port 0 takes a free one) on the running event loop: the server and its port.  Its
    database calls run in ``threads`` threads (twice the pool size by default; they wait for
    a connection of the requests' pool as REST's calls do)."""
    calls = concurrent.futures.ThreadPoolExecutor(threads or 2 * db.size, "dex-grpc")
    service = DexService(db, calls)
    reflection = Reflection([SERVICE, HEALTH, *REFLECTION])
    server = grpc.aio.server(handlers=[dex_handler(service), Health(db, calls).handler(),
                                       *reflection.handlers()],
                             options=[("grpc.max_receive_message_length", 64 << 20),
                                      ("grpc.max_send_message_length", 64 << 20)])
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address} for gRPC")
    await server.start()
    server._dex_calls = calls       # type: ignore[attr-defined]
    log.info("gRPC API (dex.v1.DexService) on %s", address.rpartition(":")[0] + f":{port}")
    return server, port


async def stop(server: grpc.aio.Server, grace: float = 5.0) -> None:
    await server.stop(grace)
    server._dex_calls.shutdown(wait=False)      # type: ignore[attr-defined]


def serve(conninfo: str, host: str, port: int, pool_size: int = 10) -> None:
    """``python3 -m dex grpc``: the gRPC API alone, until SIGTERM or SIGINT."""
    import signal

    async def main() -> None:
        db = Database(conninfo, size=pool_size)
        server, _ = await start(db, f"{host}:{port}")
        ended = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, ended.set)
        await ended.wait()
        await stop(server)
        db.close()

    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    asyncio.run(main())

