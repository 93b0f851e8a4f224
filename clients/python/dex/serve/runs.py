"""Reading runs for the API and the dashboard: one filtered, keyset-paged query of the view
``dex.runs`` (which shows only the runs of queues the caller may use).

Pages are newest first and keyed on the run id, a UUIDv7 that grows with creation time: the
cursor is the last id of a page, and the next page is the runs with smaller ids.  Runs created
while a client pages get larger ids, so they never shift, repeat or hide a run of a later
page.  Only the filters given are in the statement (no ``$1 IS NULL OR ...``), so each shape
keeps its own plan; a lower bound on the creation time is also a lower bound on the id (an
id is taken after its transaction's ``now()``), an index range on the primary key.
"""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from typing import Any, Dict, List, Optional, Tuple

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from .db import Problem

RUN_COLUMNS = ("id", "workflow_name", "workflow_version", "queue", "status", "instance_id",
               "priority", "labels", "concurrency_key", "custom_status", "parent_id",
               "argument", "result", "failure", "history_length", "created_at", "updated_at",
               "started_at", "completed_at", "task_failures", "last_task_failure",
               "origin_run_id", "origin")
STATUSES = ("DELAYED", "CREATED", "RUNNING", "SUSPENDED", "BLOCKED", "COMPLETED", "FAILED",
            "CANCELLED", "TERMINATED", "TIMED_OUT")
ACTIVE = ("DELAYED", "CREATED", "RUNNING", "SUSPENDED", "BLOCKED")
MAX_PAGE = 500
COUNT_CAP = 10_000
# how far the clock that makes run ids may run behind now() of the creating transaction
_ID_CLOCK_SLACK = dt.timedelta(minutes=1)


def encode_cursor(run_id: Any) -> str:
    return base64.urlsafe_b64encode(uuid.UUID(str(run_id)).bytes).decode().rstrip("=")


def decode_cursor(cursor: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError):
        raise Problem(400, "Bad Request", f"invalid cursor {cursor!r}: pass next_cursor of the "
                      "previous page as it was returned") from None


def uuid7_floor(t: dt.datetime) -> uuid.UUID:
    """The smallest UUIDv7 of the millisecond ``t``."""
    ms = max(0, int(t.timestamp() * 1000))
    return uuid.UUID(bytes=ms.to_bytes(6, "big") + bytes(10))


def parse_labels(labels: Optional[List[str]]) -> Optional[Dict[str, str]]:
    """``["shop=berlin", "tier=gold"]`` -> ``{"shop": "berlin", "tier": "gold"}``."""
    if not labels:
        return None
    out: Dict[str, str] = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise Problem(400, "Bad Request", f"invalid label filter {item!r}: use key=value")
        if key in out:
            raise Problem(400, "Bad Request", f"label {key!r} is filtered on twice")
        out[key] = value
    return out


class RunFilter:
    """The filters of a run listing; each ``None`` filter is left out."""

    def __init__(self, status: Optional[str] = None, queue: Optional[str] = None,
                 workflow: Optional[str] = None, instance_id: Optional[str] = None,
                 labels: Optional[List[str]] = None, parent_id: Optional[uuid.UUID] = None,
                 created_after: Optional[dt.datetime] = None,
                 created_before: Optional[dt.datetime] = None):
        if status is not None and status not in STATUSES:
            raise Problem(400, "Bad Request", f"unknown status {status!r}",
                          allowed=list(STATUSES))
        for name, t in (("created_after", created_after), ("created_before", created_before)):
            if t is not None and t.tzinfo is None:
                raise Problem(400, "Bad Request", f"{name} needs a time zone (e.g. 2026-01-01T00:00:00Z)")
        self.status, self.queue, self.workflow, self.instance_id = status, queue, workflow, instance_id
        self.labels = parse_labels(labels)
        self.parent_id, self.created_after, self.created_before = parent_id, created_after, created_before

    def where(self, before: Optional[uuid.UUID] = None) -> Tuple[sql.Composable, List[Any]]:
        conds: List[sql.Composable] = []
        params: List[Any] = []

        def add(cond: str, value: Any) -> None:
            conds.append(sql.SQL(cond))
            params.append(value)

        if self.status is not None:
            add("status = %s", self.status)
        if self.queue is not None:
            add("queue = %s", self.queue)
        if self.workflow is not None:
            add("workflow_name = %s", self.workflow)
        if self.instance_id is not None:
            add("instance_id = %s", self.instance_id)
        if self.labels is not None:
            add("labels @> %s", Jsonb(self.labels))
        if self.parent_id is not None:
            add("parent_id = %s", self.parent_id)
        if self.created_after is not None:
            add("created_at >= %s", self.created_after)
            add("id >= %s", uuid7_floor(self.created_after - _ID_CLOCK_SLACK))
        if self.created_before is not None:
            add("created_at < %s", self.created_before)
        if before is not None:
            add("id < %s", before)
        if not conds:
            return sql.SQL(""), params
        return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds), params


def list_runs(conn: psycopg.Connection, flt: RunFilter, limit: int,
              cursor: Optional[str] = None) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """A page of runs, newest first, and the cursor of the next page (``None``: the last)."""
    if not 1 <= limit <= MAX_PAGE:
        raise Problem(400, "Bad Request", f"limit must be 1 to {MAX_PAGE}")
    where, params = flt.where(decode_cursor(cursor) if cursor else None)
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in RUN_COLUMNS)
    q = sql.SQL("SELECT {} FROM dex.runs{} ORDER BY id DESC LIMIT %s").format(cols, where)
    rows = conn.execute(q, params + [limit + 1]).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(rows[-1]["id"]) if more else None)


def count_runs(conn: psycopg.Connection, flt: RunFilter) -> Tuple[Dict[str, int], bool]:
    """Runs by status among the newest ``COUNT_CAP`` that match (so a count costs the same at
    any table size), and whether the cap was reached."""
    where, params = flt.where()
    q = sql.SQL("SELECT status, count(*) AS n FROM (SELECT status FROM dex.runs{} "
                "ORDER BY id DESC LIMIT %s) s GROUP BY status").format(where)
    rows = conn.execute(q, params + [COUNT_CAP + 1]).fetchall()
    counts = {r["status"]: r["n"] for r in rows}
    return counts, sum(counts.values()) > COUNT_CAP


def get_run(conn: psycopg.Connection, run_id: Any) -> Dict[str, Any]:
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in RUN_COLUMNS)
    row = conn.execute(sql.SQL("SELECT {} FROM dex.get_run(%s)").format(cols), (run_id,)).fetchone()
    assert row is not None
    return row


def history(conn: psycopg.Connection, run_id: Any) -> List[Dict[str, Any]]:
    return conn.execute("SELECT sequence, event FROM dex.run_history(%s) ORDER BY sequence",
                        (run_id,)).fetchall()


def attempts(conn: psycopg.Connection, run_id: Any) -> List[Dict[str, Any]]:
    return conn.execute("SELECT task, event_id, name, attempt, worker_id, leased_at, ended_at, "
                        "outcome, failure FROM dex.run_attempts(%s)", (run_id,)).fetchall()


QUEUE_SQL = """
SELECT d.queue AS name, d.kind, d.status, d.capacity, d.ready, d.leased, d.delayed,
       d.oldest_ready_at, extract(epoch FROM d.backlog_age)::float8 AS backlog_age_seconds,
       d.estimated, s.tasks_created, s.polls, s.polls_empty, s.tasks_leased, s.tasks_completed,
       s.tasks_failed, s.leases_expired
  FROM dex.queue_depth d LEFT JOIN dex.stat_queues s ON s.queue = d.queue
"""


def queues(conn: psycopg.Connection, name: Optional[str] = None) -> List[Dict[str, Any]]:
    if name is None:
        return conn.execute(QUEUE_SQL + " ORDER BY d.queue").fetchall()
    rows = conn.execute(QUEUE_SQL + " WHERE d.queue = %s", (name,)).fetchall()
    if not rows:
        raise Problem(404, "Not Found", f"queue \"{name}\" does not exist", "42704")
    return rows


def latency(conn: psycopg.Connection, queue: str, since: dt.datetime) -> Dict[str, Any]:
    """Percentiles of the time from creation to end of the runs of a workflow queue that
    were created and ended since ``since`` (an id range: cheap at any table size)."""
    row = conn.execute(
        "SELECT count(*) AS runs, percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP "
        "(ORDER BY extract(epoch FROM completed_at - created_at)) AS p "
        "FROM dex.runs WHERE queue = %s AND id >= %s AND created_at >= %s "
        "AND completed_at IS NOT NULL",
        (queue, uuid7_floor(since - _ID_CLOCK_SLACK), since)).fetchone()
    p = row["p"] or [None, None, None]
    return {"runs": row["runs"], "p50": p[0], "p90": p[1], "p99": p[2]}
