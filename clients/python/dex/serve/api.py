"""The REST API (``/v1``): runs, queues, the worker calls, workflows defined in JSON and their
user tasks, each a call of dex's SQL API
made with the caller's role (see ``db.py``).  The OpenAPI document FastAPI makes from these
routes is checked in as ``clients/python/openapi.json`` (``python3 -m dex serve
--openapi``); ``tests/test_rest_openapi.py`` fails when the two differ."""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from typing import Any, Dict, List, Optional
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response
from psycopg.types.json import Jsonb
from pydantic import BaseModel, Field, StrictStr, conint
from starlette.concurrency import run_in_threadpool

from . import jsonio, runs as R
from .db import Problem, bearer_token
from .routing import Route

router = APIRouter(prefix="/v1", route_class=Route)

PROBLEM = {"content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
ERRORS = {400: {"description": "bad input", **PROBLEM},
          401: {"description": "no valid API token", **PROBLEM},
          403: {"description": "the token's role may not do this", **PROBLEM},
          404: {"description": "unknown, or of a queue the role may not use", **PROBLEM},
          409: {"description": "stale lease, ended run or wrong state", **PROBLEM},
          503: {"description": "database unavailable", **PROBLEM}}


# the integers of dex's SQL functions: a larger one is bad input (400), not a call of a
# function that does not exist (psycopg would send it as a bigint or a numeric)
Int32 = conint(ge=-2**31, le=2**31 - 1)
Int64 = conint(ge=-2**63, le=2**63 - 1)


class ProblemModel(BaseModel):
    type: str = Field(..., description="urn:dex:sqlstate:<SQLSTATE> when the database refused, else about:blank")
    title: str
    status: int
    detail: Optional[str]
    sqlstate: Optional[str] = Field(None, description="dex's or PostgreSQL's error code")
    hint: Optional[str]
    sqlDetail: Optional[str]

    class Config:
        title = "Problem"


class Run(BaseModel):
    id: uuid.UUID
    workflow_name: str
    workflow_version: int
    queue: str
    status: str = Field(..., description="DELAYED, CREATED, RUNNING, SUSPENDED, BLOCKED, COMPLETED, "
                                         "FAILED, CANCELLED, TERMINATED or TIMED_OUT")
    instance_id: Optional[str]
    priority: int
    labels: Optional[Dict[str, str]]
    concurrency_key: Optional[str]
    custom_status: Optional[str]
    parent_id: Optional[uuid.UUID]
    argument: Any
    result: Any
    failure: Optional[Dict[str, Any]]
    history_length: int
    created_at: dt.datetime
    updated_at: Optional[dt.datetime]
    started_at: Optional[dt.datetime]
    completed_at: Optional[dt.datetime]
    task_failures: int
    last_task_failure: Optional[Dict[str, Any]]
    origin_run_id: Optional[uuid.UUID]
    origin: Optional[str]


class RunPage(BaseModel):
    runs: List[Run] = Field(..., description="newest first; fewer than limit (even none) when the search "
                                             "ran out of its time budget: follow next_cursor")
    next_cursor: Optional[str] = Field(None, description="pass as cursor for the next page; null on the last")


class RunCounts(BaseModel):
    counts: Dict[str, int] = Field(..., description="runs by status that match, counted newest first; from "
                                   "dex 1.11 every status but COMPLETED whatever its runs' age (up to a "
                                   "little over 10,000 each)")
    since: Optional[dt.datetime] = Field(..., description="the counts (from dex 1.11, of all runs or of a "
                                                          "queue: of COMPLETED only) are of the runs created since "
                                                          "then (past 10,000 runs or the time budget); null: of all")


class RunCreate(BaseModel):
    workflow_name: str
    queue: str
    argument: Any = None
    workflow_version: Int32 = 1
    instance_id: Optional[str] = None
    priority: Int32 = 0
    labels: Optional[Dict[str, StrictStr]] = None
    concurrency_key: Optional[str] = None
    if_active: str = Field("error", description="'error' or 'return' (the active run of the instance id)")
    start_at: Optional[dt.datetime] = None
    execution_timeout_seconds: Optional[float] = None


class Reason(BaseModel):
    reason: Optional[str] = None


class Reset(BaseModel):
    event_id: Int32 = Field(..., description="a sequence of the run's history: the new run goes back to the "
                                           "last workflow task completed at or before it")
    reason: Optional[str] = None


class ExternalEvent(BaseModel):
    event_id: str
    payload: Any = None


class Delivered(BaseModel):
    delivered: bool = Field(..., description="false: the run had already received an event with this id")


class HistoryEvent(BaseModel):
    sequence: int
    event: Dict[str, Any] = Field(..., description="a dex.v1.WorkflowEvent in canonical proto3 JSON")


class History(BaseModel):
    events: List[HistoryEvent]


class Attempt(BaseModel):
    task: str
    event_id: int
    name: Optional[str]
    attempt: Optional[int]
    worker_id: Optional[str]
    leased_at: Optional[dt.datetime]
    ended_at: Optional[dt.datetime]
    outcome: str
    failure: Optional[Dict[str, Any]]


class Attempts(BaseModel):
    attempts: List[Attempt]


class DefinitionCreate(BaseModel):
    name: str
    version: Int32 = 1
    definition: Dict[str, Any] = Field(..., description="the JSON document (docs/json-workflows.md)")


class Definition(BaseModel):
    name: str
    version: int
    owner: str = Field(..., description="the role whose privileges its SQL steps have")
    created_at: dt.datetime
    steps: int
    definition: Optional[Dict[str, Any]] = Field(None, description="the document (not in listings)")


class Definitions(BaseModel):
    definitions: List[Definition]


class UserTask(BaseModel):
    run_id: uuid.UUID
    step: str
    assignee: Optional[str]
    candidate_groups: Optional[List[str]]
    form: Any
    workflow_name: str
    workflow_version: int
    created_at: dt.datetime


class UserTasks(BaseModel):
    user_tasks: List[UserTask]


class UserTaskCompletion(BaseModel):
    variables: Optional[Dict[str, Any]] = Field(None, description="merged into the run's variables")


class Signal(BaseModel):
    payload: Any = None


class Queue(BaseModel):
    name: str
    kind: str
    status: str
    capacity: Optional[int]
    ready: int
    leased: int
    delayed: int
    oldest_ready_at: Optional[dt.datetime]
    backlog_age_seconds: Optional[float]
    estimated: bool
    tasks_created: Optional[int]
    polls: Optional[int]
    polls_empty: Optional[int]
    tasks_leased: Optional[int]
    tasks_completed: Optional[int]
    tasks_failed: Optional[int]
    leases_expired: Optional[int]


class Queues(BaseModel):
    queues: List[Queue]


class QueueCreate(BaseModel):
    name: str
    kind: str = Field(..., description="'workflow' or 'activity'")
    capacity: Optional[Int32] = None


class QueueChange(BaseModel):
    paused: Optional[bool] = None
    capacity: Optional[Int32] = Field(None, description="most tasks leased at once; 0 removes the limit")
    rate_limit: Optional[Int32] = Field(None, description="most tasks handed out per rate_period_seconds; "
                                                        "0 removes the limit (dex 1.7)")
    rate_period_seconds: Optional[float] = Field(None, description="the rate limit's period (1 second "
                                                                   "unless given)")
    concurrency_limit: Optional[Int32] = Field(None, description="runs of a concurrency key active at once "
                                                               "(dex 1.7)")


class QueueLimits(BaseModel):
    capacity: Optional[int]
    rate_limit: Optional[int]
    rate_period_seconds: Optional[float]
    tokens: Optional[float] = Field(..., description="the rate limit's bucket now (null: full, no poll yet)")
    next_token_at: Optional[dt.datetime]
    tasks_granted: int
    polls_throttled: int
    concurrency_limit: Optional[int]
    keys_with_limits: int


class Sample(BaseModel):
    at: dt.datetime
    ready: int
    leased: int
    delayed: int
    completed_per_minute: float
    failed_per_minute: float


class Latency(BaseModel):
    runs: int
    p50: Optional[float]
    p90: Optional[float]
    p99: Optional[float]


class QueueStats(BaseModel):
    queue: Queue
    samples: List[Sample] = Field(..., description="the last hour, oldest first (empty until the server "
                                                   "has sampled; needs pg_monitor for the server's login role)")
    latency_seconds: Optional[Latency] = Field(None, description="creation to end of the runs of a workflow "
                                                                 "queue created and ended in the last hour")
    limits: Optional[QueueLimits] = Field(None, description="its flow control (dex.queue_limits, dex 1.7); "
                                                            "null for a role that may not read it")


class Poll(BaseModel):
    worker_id: str
    max_tasks: Int32 = 1
    lease_seconds: float = 300
    wait_seconds: float = Field(0, description="with no task ready, wait up to this long for one (long poll)")
    names: Optional[List[str]] = Field(None, description="what the worker runs: the workflows (with versions) "
                                                         "or the activities it declares; null: every task")
    versions: Optional[List[Int32]] = Field(None, description="on a workflow queue, the version of each name")


class Task(BaseModel):
    kind: str = Field(..., description="'workflow' or 'activity'")
    run_id: uuid.UUID
    task_id: int
    lock_version: int
    locked_until: dt.datetime
    task: Dict[str, Any] = Field(..., description="a dex.v1.WorkflowTask or dex.v1.ActivityTask in canonical JSON")


class Tasks(BaseModel):
    tasks: List[Task]


class Lease(BaseModel):
    run_id: uuid.UUID
    task_id: Int32
    lock_version: Int64


class Completion(Lease):
    result: Any = Field(None, description="workflow task: the list of commands; activity: its JSON result")


class Failure(Lease):
    failure: Dict[str, Any] = Field(..., description="a dex.v1.Failure: message, type, terminal, details, ...")


class Heartbeat(Lease):
    lease_seconds: float = 300
    details: Any = None


class Extended(BaseModel):
    locked_until: dt.datetime


class WhoAmI(BaseModel):
    role: str
    may: Dict[str, bool] = Field(..., description="the calls the role may make")


def caller(request: Request) -> str:
    """The bearer token of the request (the API takes no cookie: no cross-site requests)."""
    return bearer_token(request.headers.get("authorization", ""))


def db(request: Request):
    return request.app.state.db


def _jsonb(value: Any) -> Optional[Jsonb]:
    return None if value is None else Jsonb(value)


def reply(content: Any, status: int = 200, location: Optional[str] = None) -> Response:
    """An endpoint's answer, encoded here rather than by FastAPI, whose encoder recurses and
    fails on values nested as deeply as the database may hold them (``jsonio.dumps`` does
    not).  The ``response_model`` of a route documents it.  Made inside the request's
    transaction, nothing commits whose answer could not be made."""
    return Response(jsonio.dumps(content), status_code=status, media_type="application/json",
                    headers={"Location": location} if location else None)


def _interval(seconds: Optional[float], name: str) -> Optional[dt.timedelta]:
    if seconds is None:
        return None
    if not math.isfinite(seconds):
        raise Problem(400, "Bad Request", f"{name} must be a finite number of seconds")
    try:
        return dt.timedelta(seconds=seconds)
    except OverflowError:
        raise Problem(400, "Bad Request", f"{name} is out of range") from None


# the calls whose privilege the dashboard and /v1/whoami show, by name (whatever their signature)
PRIVILEGES = ("create_run", "cancel_run", "suspend_run", "resume_run", "terminate_run", "restart_run",
              "reset_run", "send_external_event", "alter_queue", "create_queue", "poll_tasks", "queue_depth",
              "create_schedule", "pause_schedule", "unpause_schedule", "trigger_schedule")


def privileges(conn) -> Dict[str, Any]:
    """The current role ("role") and which of dex's calls it may make."""
    may: Dict[str, Any] = {name: False for name in PRIVILEGES}
    for r in conn.execute(
            "SELECT p.proname AS name, bool_or(has_function_privilege(p.oid, 'EXECUTE')) AS may "
            "FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'dex'::regnamespace "
            "AND p.proname = ANY(%s) GROUP BY p.proname", (list(PRIVILEGES),)):
        may[r["name"]] = r["may"]
    may["role"] = conn.execute("SELECT current_user AS role").fetchone()["role"]
    return may


@router.get("/whoami", response_model=WhoAmI, responses=ERRORS, tags=["tokens"],
            summary="The role the token's requests run as, and what it may call")
def whoami(request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        row = privileges(conn)
    return reply({"role": row.pop("role"), "may": row})


@router.get("/runs", response_model=RunPage, responses=ERRORS, tags=["runs"],
            summary="Runs, newest first, a page at a time")
def list_runs(request: Request, token: str = Depends(caller),
              status: Optional[str] = None, queue: Optional[str] = None,
              workflow: Optional[str] = None, instance_id: Optional[str] = None,
              label: Optional[List[str]] = Query(None, description="key=value; repeat for more"),
              parent_id: Optional[uuid.UUID] = None,
              created_after: Optional[dt.datetime] = None, created_before: Optional[dt.datetime] = None,
              cursor: Optional[str] = None, limit: int = 50):
    flt = R.RunFilter(status, queue, workflow, instance_id, label, parent_id, created_after, created_before)
    with db(request).as_caller(token) as conn:
        rows, next_cursor = R.list_runs(conn, flt, limit, cursor)
        return reply({"runs": rows, "next_cursor": next_cursor})


@router.get("/runs/counts", response_model=RunCounts, responses=ERRORS, tags=["runs"],
            summary="Runs by status, with the filters of the listing")
def count_runs(request: Request, token: str = Depends(caller),
               queue: Optional[str] = None, workflow: Optional[str] = None,
               instance_id: Optional[str] = None,
               label: Optional[List[str]] = Query(None, description="key=value; repeat for more"),
               created_after: Optional[dt.datetime] = None, created_before: Optional[dt.datetime] = None):
    flt = R.RunFilter(None, queue, workflow, instance_id, label, None, created_after, created_before)
    with db(request).as_caller(token) as conn:
        counts, since, _ = R.count_runs(conn, flt)
    return reply({"counts": counts, "since": since})


@router.post("/runs", response_model=Run, status_code=201, responses=ERRORS, tags=["runs"],
             summary="Start a run (dex.create_run)")
def create_run(body: RunCreate, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        run_id = conn.execute(
            "SELECT dex.create_run(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) AS id",
            (body.workflow_name, body.queue, _jsonb(body.argument), body.workflow_version,
             body.instance_id, body.priority, _jsonb(body.labels), body.concurrency_key,
             body.if_active, body.start_at,
             _interval(body.execution_timeout_seconds, "execution_timeout_seconds"))).fetchone()["id"]
        return reply(R.get_run(conn, run_id), 201, f"/v1/runs/{run_id}")


@router.get("/runs/{run_id}", response_model=Run, responses=ERRORS, tags=["runs"], summary="A run")
def get_run(run_id: uuid.UUID, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply(R.get_run(conn, run_id))


@router.get("/runs/{run_id}/history", response_model=History, responses=ERRORS, tags=["runs"],
            summary="The run's event history, in order")
def get_history(run_id: uuid.UUID, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply({"events": R.history(conn, run_id)})


@router.get("/runs/{run_id}/attempts", response_model=Attempts, responses=ERRORS, tags=["runs"],
            summary="Every ended attempt of the run's workflow tasks and activities")
def get_attempts(run_id: uuid.UUID, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply({"attempts": R.attempts(conn, run_id)})


def _control(fn: str, doc: str):
    def control(run_id: uuid.UUID, request: Request, body: Reason = Reason(),
                token: str = Depends(caller)):
        with db(request).as_caller(token) as conn:
            conn.execute(f"SELECT dex.{fn}(%s, %s)", (run_id, body.reason))
            return reply(R.get_run(conn, run_id))
    control.__name__ = fn
    router.post(f"/runs/{{run_id}}/{fn.split('_')[0]}", response_model=Run, responses=ERRORS,
                tags=["runs"], summary=doc)(control)


_control("cancel_run", "Cancel a run (dex.cancel_run): the workflow cleans up, or it ends now if not executing")
_control("suspend_run", "Suspend a running run (dex.suspend_run)")
_control("resume_run", "Resume a suspended run, or retry a blocked one (dex.resume_run)")
_control("terminate_run", "End a run now without running its code (dex.terminate_run)")


@router.post("/runs/{run_id}/restart", response_model=Run, status_code=201, responses=ERRORS,
             tags=["runs"], summary="Run it again from the start as a new run (dex.restart_run)")
def restart_run(run_id: uuid.UUID, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        new = conn.execute("SELECT dex.restart_run(%s) AS id", (run_id,)).fetchone()["id"]
        return reply(R.get_run(conn, new), 201, f"/v1/runs/{new}")


@router.post("/runs/{run_id}/reset", response_model=Run, status_code=201, responses=ERRORS,
             tags=["runs"], summary="A new run that goes back to a workflow task of this one (dex.reset_run)")
def reset_run(run_id: uuid.UUID, body: Reset, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        new = conn.execute("SELECT dex.reset_run(%s, %s, %s) AS id",
                           (run_id, body.event_id, body.reason)).fetchone()["id"]
        return reply(R.get_run(conn, new), 201, f"/v1/runs/{new}")


@router.post("/runs/{run_id}/events", response_model=Delivered, responses=ERRORS, tags=["runs"],
             summary="Send an external event to a run (dex.send_external_event)")
def send_event(run_id: uuid.UUID, body: ExternalEvent, request: Request, token: str = Depends(caller)):
    return _send(request, token, run_id, body.event_id, body.payload)


def _send(request: Request, token: str, run_id: uuid.UUID, event_id: str, payload: Any):
    with db(request).as_caller(token) as conn:
        return reply(conn.execute("SELECT dex.send_external_event(%s, %s, %s) AS delivered",
                                  (run_id, event_id, _jsonb(payload))).fetchone())


@router.get("/queues", response_model=Queues, responses=ERRORS, tags=["queues"],
            summary="Every queue: what it holds now and its counters (dex.queue_depth, dex.stat_queues)")
def list_queues(request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply({"queues": R.queues(conn)})


@router.post("/queues", response_model=Queue, status_code=201, responses=ERRORS, tags=["queues"],
             summary="Create a queue (dex.create_queue)")
def create_queue(body: QueueCreate, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        conn.execute("SELECT dex.create_queue(%s, %s, %s)", (body.name, body.kind, body.capacity))
        return reply(R.queues(conn, body.name)[0], 201, f"/v1/queues/{quote(body.name, safe='')}")


@router.get("/queues/{name}", response_model=QueueStats, responses=ERRORS, tags=["queues"],
            summary="A queue now, its depth and throughput over the last hour, and run latency")
def get_queue(name: str, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        q = R.queues(conn, name)[0]
        lat = (R.latency(conn, name, dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1))
               if q["kind"] == "workflow" else None)
        limits = R.queue_limits(conn, name)
    return reply({"queue": q, "samples": request.app.state.sampler.series(name), "latency_seconds": lat,
                  "limits": limits})


@router.patch("/queues/{name}", response_model=Queue, responses=ERRORS, tags=["queues"],
              summary="Pause or resume a queue, or change its capacity, rate limit or concurrency "
                      "limit (dex.alter_queue)")
def alter_queue(name: str, body: QueueChange, request: Request, token: str = Depends(caller)):
    limits = {"rate_limit": body.rate_limit,
              "rate_period": _interval(body.rate_period_seconds, "rate_period_seconds"),
              "concurrency_limit": body.concurrency_limit}
    extra = "".join(f", {k} => %s" for k, v in limits.items() if v is not None)
    with db(request).as_caller(token) as conn:
        conn.execute(f"SELECT dex.alter_queue(%s, %s, %s{extra})",
                     [name, body.capacity, body.paused] + [v for v in limits.values() if v is not None])
        return reply(R.queues(conn, name)[0])


@router.post("/queues/{name}/poll", response_model=Tasks,
             responses={**ERRORS, 503: {"description": "database unavailable, or the server already holds "
                                                      "as many long polls as --pool-size: poll again after "
                                                      "Retry-After", **PROBLEM}},
             tags=["workers"],
             summary="Lease tasks of the queue (dex.poll_tasks), waiting up to wait_seconds for some")
async def poll(name: str, body: Poll, request: Request, token: str = Depends(caller)):
    # async: the waits run in the database's own threads (db.Database.wait_for_tasks), so a
    # crowd of waiting workers holds none of the threads that serve other requests
    lease = _interval(body.lease_seconds, "lease_seconds")
    if not 0 <= body.wait_seconds <= 300:
        raise Problem(400, "Bad Request", "wait_seconds must be 0 to 300")
    args = (name, body.worker_id, body.max_tasks, lease, body.names, body.versions)
    deadline = time.monotonic() + body.wait_seconds
    while True:
        answer, leased = await run_in_threadpool(_lease, request, token, args)
        # a wake-up may be for a task another poller took, or that this one does not run
        if leased or time.monotonic() >= deadline:
            return answer
        if not await db(request).wait_for_tasks(name, deadline - time.monotonic(),
                                                lambda: _gone(request)):
            return answer       # its client went away: lease nothing more for it


def _lease(request: Request, token: str, args: tuple):
    with db(request).as_caller(token) as conn:
        tasks = conn.execute("SELECT kind, run_id, task_id, lock_version, locked_until, task "
                             "FROM dex.poll_tasks(%s, %s, %s, %s, names => %s, versions => %s)",
                             args).fetchall()
        return reply({"tasks": tasks}), bool(tasks)


async def _gone(request: Request) -> None:
    """Returns when the client has closed its connection (the body has been read, so the
    next message of the request is its end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _report(request: Request, token: str, fn: str, lease: Lease, value: Optional[Jsonb]) -> Response:
    with db(request).as_caller(token) as conn:
        conn.execute(f"SELECT dex.{fn}(%s, %s, %s, %s)",
                     (lease.run_id, lease.task_id, lease.lock_version, value))
    return Response(status_code=204)


@router.post("/tasks/complete", status_code=204, responses=ERRORS, tags=["workers"],
             summary="Complete a leased task (dex.complete_task)")
def complete(body: Completion, request: Request, token: str = Depends(caller)):
    return _report(request, token, "complete_task", body, _jsonb(body.result))


@router.post("/tasks/fail", status_code=204, responses=ERRORS, tags=["workers"],
             summary="Fail an attempt of a leased task (dex.fail_task)")
def fail(body: Failure, request: Request, token: str = Depends(caller)):
    return _report(request, token, "fail_task", body, Jsonb(body.failure))


@router.post("/tasks/heartbeat", response_model=Extended, responses=ERRORS, tags=["workers"],
             summary="Extend a held lease (dex.heartbeat_task)")
def heartbeat(body: Heartbeat, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply(conn.execute("SELECT dex.heartbeat_task(%s, %s, %s, %s, %s) AS locked_until",
                                  (body.run_id, body.task_id, body.lock_version,
                                   _interval(body.lease_seconds, "lease_seconds"),
                                   _jsonb(body.details))).fetchone())


# ---- workflows defined in JSON (1.7) and their user tasks

_DEFINITION_COLUMNS = "name, version, owner::text AS owner, created_at, steps"


def _definition(conn, name: str, version: Optional[int]) -> Dict[str, Any]:
    doc = conn.execute("SELECT dex.get_definition(%s, %s) AS d", (name, version)).fetchone()["d"]
    if doc is None:
        raise Problem(404, "Not Found", f"definition {name!r} has no version {version}" if version
                      else f"definition {name!r} does not exist", "42704")
    row = next(r for r in reversed(conn.execute(
        f"SELECT {_DEFINITION_COLUMNS} FROM dex.list_definitions(%s)", (name,)).fetchall())
        if version is None or r["version"] == version)
    return {**row, "definition": doc}


@router.get("/definitions", response_model=Definitions, responses=ERRORS, tags=["definitions"],
            summary="Workflows defined in JSON, by name and version (dex.list_definitions)")
def list_definitions(request: Request, token: str = Depends(caller), name: Optional[str] = None):
    with db(request).as_caller(token) as conn:
        rows = conn.execute(f"SELECT {_DEFINITION_COLUMNS}, NULL::jsonb AS definition "
                            "FROM dex.list_definitions(%s)", (name,)).fetchall()
        return reply({"definitions": rows})


@router.post("/definitions", response_model=Definition, status_code=201, responses=ERRORS,
             tags=["definitions"], summary="Store a workflow defined in JSON (dex.create_definition)")
def create_definition(body: DefinitionCreate, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        conn.execute("SELECT dex.create_definition(%s, %s, %s)", (body.name, body.version, Jsonb(body.definition)))
        return reply(_definition(conn, body.name, body.version), 201,
                     f"/v1/definitions/{quote(body.name, safe='')}/{body.version}")


@router.get("/definitions/{name}", response_model=Definition, responses=ERRORS, tags=["definitions"],
            summary="The latest version of a definition, with its document")
def get_latest_definition(name: str, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply(_definition(conn, name, None))


@router.get("/definitions/{name}/{version}", response_model=Definition, responses=ERRORS,
            tags=["definitions"], summary="A version of a definition, with its document")
def get_definition(name: str, version: Int32, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply(_definition(conn, name, version))


@router.delete("/definitions/{name}/{version}", status_code=204, responses=ERRORS, tags=["definitions"],
               summary="Delete a definition no run that has not ended uses (dex.delete_definition)")
def delete_definition(name: str, version: Int32, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        conn.execute("SELECT dex.delete_definition(%s, %s)", (name, version))
    return Response(status_code=204)


@router.get("/user-tasks", response_model=UserTasks, responses=ERRORS, tags=["definitions"],
            summary="User tasks waiting for a person (dex.user_tasks)")
def list_user_tasks(request: Request, token: str = Depends(caller), run_id: Optional[uuid.UUID] = None,
                    assignee: Optional[str] = None, candidate_group: Optional[str] = None):
    with db(request).as_caller(token) as conn:
        rows = conn.execute("SELECT run_id, step, assignee, candidate_groups, form, workflow_name, "
                            "workflow_version, created_at FROM dex.user_tasks(%s, %s, %s)",
                            (run_id, assignee, candidate_group)).fetchall()
        return reply({"user_tasks": rows})


@router.post("/runs/{run_id}/user-tasks/{step}/complete", status_code=204, responses=ERRORS,
             tags=["definitions"], summary="Complete the user task a run waits for at a step, once "
                                           "(dex.complete_user_task)")
def complete_user_task(run_id: uuid.UUID, step: str, request: Request,
                       body: UserTaskCompletion = UserTaskCompletion(), token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        conn.execute("SELECT dex.complete_user_task(%s, %s, %s)", (run_id, step, _jsonb(body.variables)))
    return Response(status_code=204)


@router.post("/runs/{run_id}/signals/{signal}", response_model=Delivered, responses=ERRORS,
             tags=["definitions"], summary="Send a signal to a run (dex.send_external_event with the "
                                           "signal's name as the event id)")
def send_signal(run_id: uuid.UUID, signal: str, request: Request, body: Signal = Signal(),
                token: str = Depends(caller)):
    return _send(request, token, run_id, signal, body.payload)
