"""The REST API's schedules (``/v1/schedules``): each endpoint one call of dex's schedule
functions (dex 1.7) or a read of the view ``dex.schedules``, made with the caller's role (see
``db.py``).  Schedules are managed like queues, by ``dex_admin``: other roles get 403 from the
database's grants.  Durations are seconds (``every_seconds``, ``jitter_seconds``, ...), as
elsewhere in the API.  The dashboard's schedules page reads them through ``list_schedules``
and ``get_schedule`` too."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from typing import Any, Dict, List, Optional, Tuple

from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field, StrictStr

from . import runs as R
from .api import ERRORS, Int32, Run, _interval, _jsonb, caller, db, reply
from .db import Problem
from .routing import Route

router = APIRouter(prefix="/v1", route_class=Route)

SCHEDULE_SQL = """
SELECT name, workflow_name, workflow_version, queue, cron,
       extract(epoch FROM every)::float8 AS every_seconds, timezone, overlap,
       extract(epoch FROM catchup_window)::float8 AS catchup_window_seconds,
       extract(epoch FROM jitter)::float8 AS jitter_seconds, start_at, end_at, paused, note,
       argument, labels, next_tick, next_fire_at, buffered_tick, last_tick, last_run_id,
       last_run_status, runs_started, skipped_overlap, skipped_missed, skipped, created_at, updated_at
  FROM dex.schedules
"""
MAX_PAGE = 500


class Schedule(BaseModel):
    name: str
    workflow_name: str
    workflow_version: int
    queue: str
    cron: Optional[str] = Field(..., description="a five-field cron expression (or @daily-style shorthand); "
                                                 "null when the schedule runs every fixed interval")
    every_seconds: Optional[float] = Field(..., description="the fixed interval; null with a cron expression")
    timezone: str
    overlap: str = Field(..., description="skip, buffer_one, allow_all, cancel_other or terminate_other")
    catchup_window_seconds: float
    jitter_seconds: float
    start_at: Optional[dt.datetime]
    end_at: Optional[dt.datetime]
    paused: bool
    note: Optional[str] = Field(..., description="why it was paused")
    argument: Any
    labels: Optional[Dict[str, str]]
    next_tick: Optional[dt.datetime]
    next_fire_at: Optional[dt.datetime] = Field(..., description="when the next tick fires (with jitter); "
                                                                 "null while paused or after the end")
    buffered_tick: Optional[dt.datetime]
    last_tick: Optional[dt.datetime] = Field(..., description="the last tick that started a run")
    last_run_id: Optional[uuid.UUID]
    last_run_status: Optional[str]
    runs_started: int
    skipped_overlap: int
    skipped_missed: int
    skipped: int
    created_at: dt.datetime
    updated_at: Optional[dt.datetime]


class SchedulePage(BaseModel):
    schedules: List[Schedule] = Field(..., description="by name")
    next_cursor: Optional[str] = Field(None, description="pass as cursor for the next page; null on the last")


class ScheduleChange(BaseModel):
    cron: Optional[str] = Field(None, description="replaces an every")
    every_seconds: Optional[float] = Field(None, description="replaces a cron (at least 1)")
    argument: Any = None
    workflow_version: Optional[Int32] = None
    timezone: Optional[str] = None
    overlap: Optional[str] = None
    catchup_window_seconds: Optional[float] = None
    jitter_seconds: Optional[float] = None
    start_at: Optional[dt.datetime] = Field(None, description="in a PATCH, null removes it")
    end_at: Optional[dt.datetime] = Field(None, description="in a PATCH, null removes it")
    labels: Optional[Dict[str, StrictStr]] = None


class ScheduleCreate(ScheduleChange):
    name: str
    workflow_name: str
    queue: str
    paused: bool = False


class SchedulePatch(ScheduleChange):
    workflow_name: Optional[str] = None
    queue: Optional[str] = None


class Pause(BaseModel):
    note: Optional[str] = Field(None, description="why, shown with the schedule")


class Trigger(BaseModel):
    overlap: Optional[str] = Field(None, description="the policy of this tick; the schedule's by default")


class Triggered(BaseModel):
    run_id: Optional[uuid.UUID] = Field(..., description="null: the overlap policy started no run")
    run: Optional[Run]


class Backfill(BaseModel):
    from_: dt.datetime = Field(..., alias="from", description="the first tick at or after it")
    to: dt.datetime = Field(..., description="ticks before it (at most 1000 in all)")
    overlap: Optional[str] = None


class Tick(BaseModel):
    tick: dt.datetime
    run_id: Optional[uuid.UUID] = Field(..., description="null: the overlap policy started no run")


class Ticks(BaseModel):
    ticks: List[Tick]


class NextTimes(BaseModel):
    times: List[dt.datetime] = Field(..., description="the next ticks after now, without jitter")


def _cursor(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def _after(cursor: str) -> str:
    try:
        name = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
        if not name:
            raise ValueError(cursor)
        return name
    except (ValueError, UnicodeDecodeError):
        raise Problem(400, "Bad Request", f"invalid cursor {cursor!r}: pass next_cursor of the "
                      "previous page as it was returned") from None


def list_schedules(conn, workflow: Optional[str] = None, queue: Optional[str] = None,
                   paused: Optional[bool] = None, cursor: Optional[str] = None,
                   limit: int = 50) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """A page of schedules by name, and the cursor of the next (None on the last)."""
    if not 1 <= limit <= MAX_PAGE:
        raise Problem(400, "Bad Request", f"limit must be 1 to {MAX_PAGE}")
    conds, params = [], []   # type: List[str], List[Any]
    for col, value in (("workflow_name", workflow), ("queue", queue), ("paused", paused)):
        if value is not None:
            conds.append(f"{col} = %s")
            params.append(value)
    if cursor:
        conds.append("name COLLATE \"C\" > %s")
        params.append(_after(cursor))
    where = " WHERE " + " AND ".join(conds) if conds else ""
    rows = conn.execute(SCHEDULE_SQL + where + " ORDER BY name COLLATE \"C\" LIMIT %s",
                        params + [limit + 1]).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (_cursor(rows[-1]["name"]) if more else None)


def get_schedule(conn, name: str) -> Dict[str, Any]:
    row = conn.execute(SCHEDULE_SQL + " WHERE name = %s", (name,)).fetchone()
    if row is None:
        raise Problem(404, "Not Found", f"schedule \"{name}\" does not exist", "42704")
    return row


def _settings(body: ScheduleChange, patch: bool) -> Tuple[str, List[Any]]:
    """Named arguments of dex.create_schedule / dex.alter_schedule for what the body gives; in a
    PATCH an explicit null start_at or end_at removes it."""
    given = body.__fields_set__
    pairs: List[Tuple[str, str, Any]] = [
        ("cron", "%s", body.cron),
        ("every", "%s", _interval(body.every_seconds, "every_seconds")),
        ("argument", "%s", _jsonb(body.argument)),
        ("version", "%s", body.workflow_version),
        ("timezone", "%s", body.timezone),
        ("overlap", "%s", body.overlap),
        ("catchup_window", "%s", _interval(body.catchup_window_seconds, "catchup_window_seconds")),
        ("jitter", "%s", _interval(body.jitter_seconds, "jitter_seconds")),
        ("labels", "%s", _jsonb(body.labels)),
    ]
    for key, removed in (("start_at", "-infinity"), ("end_at", "infinity")):
        value = getattr(body, key)
        if value is None and patch and key in given:
            value = removed
        pairs.append((key, "%s::timestamptz", value))
    if isinstance(body, SchedulePatch):
        pairs += [("workflow", "%s", body.workflow_name), ("queue", "%s", body.queue)]
    if isinstance(body, ScheduleCreate) and body.paused:
        pairs.append(("paused", "%s", True))
    used = [(k, p, v) for k, p, v in pairs if v is not None]
    return "".join(f", {k} => {p}" for k, p, _ in used), [v for _, _, v in used]


@router.get("/schedules", response_model=SchedulePage, responses=ERRORS, tags=["schedules"],
            summary="Schedules by name, a page at a time, with their next fire time and last run (dex.schedules)")
def list_(request: Request, token: str = Depends(caller), workflow: Optional[str] = None,
          queue: Optional[str] = None, paused: Optional[bool] = None,
          cursor: Optional[str] = None, limit: int = 50):
    with db(request).as_caller(token) as conn:
        rows, next_cursor = list_schedules(conn, workflow, queue, paused, cursor, limit)
        return reply({"schedules": rows, "next_cursor": next_cursor})


@router.post("/schedules", response_model=Schedule, status_code=201, responses=ERRORS, tags=["schedules"],
             summary="Create a schedule (dex.create_schedule): give cron or every_seconds")
def create(body: ScheduleCreate, request: Request, token: str = Depends(caller)):
    extra, params = _settings(body, patch=False)
    with db(request).as_caller(token) as conn:
        conn.execute(f"SELECT dex.create_schedule(%s, %s, %s{extra})",
                     [body.name, body.workflow_name, body.queue] + params)
        return reply(get_schedule(conn, body.name), 201, f"/v1/schedules/{quote(body.name, safe='')}")


@router.get("/schedules/{name}", response_model=Schedule, responses=ERRORS, tags=["schedules"],
            summary="A schedule")
def get(name: str, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        return reply(get_schedule(conn, name))


@router.patch("/schedules/{name}", response_model=Schedule, responses=ERRORS, tags=["schedules"],
              summary="Change a schedule (dex.alter_schedule); what is not given stays as it is")
def alter(name: str, body: SchedulePatch, request: Request, token: str = Depends(caller)):
    extra, params = _settings(body, patch=True)
    with db(request).as_caller(token) as conn:
        conn.execute(f"SELECT dex.alter_schedule(%s{extra})", [name] + params)
        return reply(get_schedule(conn, name))


@router.delete("/schedules/{name}", status_code=204, responses=ERRORS, tags=["schedules"],
               summary="Delete a schedule (dex.delete_schedule); the runs it started go on")
def delete(name: str, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        conn.execute("SELECT dex.delete_schedule(%s)", (name,))
    return Response(status_code=204)


@router.post("/schedules/{name}/pause", response_model=Schedule, responses=ERRORS, tags=["schedules"],
             summary="Pause a schedule (dex.pause_schedule): its ticks start nothing until unpaused")
def pause(name: str, request: Request, body: Pause = Pause(), token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        conn.execute("SELECT dex.pause_schedule(%s, %s)", (name, body.note))
        return reply(get_schedule(conn, name))


@router.post("/schedules/{name}/unpause", response_model=Schedule, responses=ERRORS, tags=["schedules"],
             summary="Unpause a schedule (dex.unpause_schedule): it fires from its next tick after now")
def unpause(name: str, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        conn.execute("SELECT dex.unpause_schedule(%s)", (name,))
        return reply(get_schedule(conn, name))


@router.post("/schedules/{name}/trigger", response_model=Triggered, responses=ERRORS, tags=["schedules"],
             summary="Fire a schedule now (dex.trigger_schedule), under its overlap policy or the one given")
def trigger(name: str, request: Request, body: Trigger = Trigger(), token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        run_id = conn.execute("SELECT dex.trigger_schedule(%s, %s) AS id", (name, body.overlap)).fetchone()["id"]
        return reply({"run_id": run_id, "run": R.get_run(conn, run_id) if run_id else None})


@router.post("/schedules/{name}/backfill", response_model=Ticks, responses=ERRORS, tags=["schedules"],
             summary="Fire the ticks from 'from' (included) to 'to' (excluded) now (dex.backfill_schedule)")
def backfill(name: str, body: Backfill, request: Request, token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        rows = conn.execute("SELECT tick, run_id FROM dex.backfill_schedule(%s, %s, %s, %s)",
                            (name, body.from_, body.to, body.overlap)).fetchall()
        return reply({"ticks": rows})


@router.get("/schedules/{name}/next-times", response_model=NextTimes, responses=ERRORS, tags=["schedules"],
            summary="The next n ticks after now (dex.schedule_next_times)")
def next_times(name: str, request: Request, n: Int32 = Query(10), token: str = Depends(caller)):
    with db(request).as_caller(token) as conn:
        rows = conn.execute("SELECT t FROM dex.schedule_next_times(%s, %s) AS t", (name, n)).fetchall()
        return reply({"times": [r["t"] for r in rows]})
