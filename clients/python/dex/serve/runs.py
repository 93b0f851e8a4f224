"""Reading runs for the API and the dashboard, through the view ``dex.runs`` (which shows
only the runs of queues the caller may use).

Pages are newest first and keyed on the run id, a UUIDv7 that grows with creation time: the
cursor is the last id of a page, and the next page is the runs with smaller ids.  Runs created
while a client pages get larger ids, so they never shift, repeat or hide a run of a later
page.

``dex.runs`` is a security barrier view: its caller filter is applied before any ORDER BY or
LIMIT of the query around it, so "the newest 50" would read and sort every run.  The
conditions on the id, status, queue, workflow, instance id and times are leakproof, so they do
go into the view, where the primary key (or an index on the filter) serves them.  A page is
therefore looked for in windows of creation time, newest first, each sized so that the
planner expects its search to cost about as much as reading 15,000 runs (``windows``: a small
table, or a rare status with an index on it, is one window); each window is one index scan
that reads only the ids (unused columns of the view are not computed), and the page's runs are
then fetched by id.  A search that takes longer than its budget ends early with a short page,
possibly empty, whose cursor continues where it stopped, so that a rare filter over millions
of runs answers page by page in bounded time (60 ms of searching; the counts 40 ms), and the
dashboard's run list in well under 200 ms; ``next_cursor`` null is the end.  A page without
filters goes on until it has found a run (2 s at most), so it is never empty while there are
runs to show.  Only the filters
given are in the statement (no ``$1 IS NULL OR ...``), so each shape keeps its own plan.
The live counts use the same windows and say how far back they counted.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import time
import uuid
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

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
# how long before taking a run's id its creating transaction may have started (created_at)
_ID_CLOCK_SLACK = dt.timedelta(minutes=1)
_MIN_WINDOW = dt.timedelta(milliseconds=50)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)     # the first time of a UUIDv7
WINDOW_COST = 20000     # planner cost units a window may take (see windows)
PAGE_BUDGET = 0.06      # seconds a page may search before it answers
FIRST_RUN_BUDGET = 2.0  # seconds an unfiltered page may search for its first run
COUNT_BUDGET = 0.04     # seconds the counts may count
_INDEX_BATCH = 200      # ids read from dex.runs_in_status at a time
RECENT_BUDGET = 0.5     # seconds a status search may take over the runs above the sweep's horizon


def encode_cursor(run_id: Any) -> str:
    return base64.urlsafe_b64encode(uuid.UUID(str(run_id)).bytes).decode().rstrip("=")


def decode_cursor(cursor: str) -> uuid.UUID:
    """The run id of a cursor; 400 for one that is not an id of a time Python can hold (a
    forged cursor may say year 10889)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        run_id = uuid.UUID(bytes=raw)
        uuid_time(run_id)
        return run_id
    except (ValueError, TypeError, OverflowError, OSError):
        raise Problem(400, "Bad Request", f"invalid cursor {cursor[:60]!r}: pass next_cursor of the "
                      "previous page as it was returned") from None


def uuid_time(u: uuid.UUID) -> dt.datetime:
    """The creation time a UUIDv7 holds (its first 48 bits, milliseconds since 1970)."""
    return dt.datetime.fromtimestamp(int.from_bytes(u.bytes[:6], "big") / 1000, dt.timezone.utc)


def shifted(t: dt.datetime, by: dt.timedelta) -> dt.datetime:
    """``t + by``, or the first or last time Python can hold if that is out of its range."""
    try:
        return t + by
    except OverflowError:
        return (dt.datetime.max if by > dt.timedelta(0) else dt.datetime.min).replace(tzinfo=dt.timezone.utc)


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

    def where(self, before: Optional[uuid.UUID] = None,
              since: Optional[uuid.UUID] = None) -> Tuple[sql.Composable, List[Any]]:
        """The WHERE clause of the filters, for ids in [since, before)."""
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
        if self.created_before is not None:
            add("created_at < %s", self.created_before)
        if before is not None:
            add("id < %s", before)
        if since is not None:
            add("id >= %s", since)
        if not conds:
            return sql.SQL(""), params
        return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds), params

    def id_floor(self) -> Optional[uuid.UUID]:
        """The smallest id a run created after ``created_after`` can have (an id is taken
        after its transaction's now(), at most ``_ID_CLOCK_SLACK`` after)."""
        if self.created_after is None:
            return None
        return uuid7_floor(shifted(self.created_after, -_ID_CLOCK_SLACK))

    @property
    def unfiltered(self) -> bool:
        return all(v is None for v in (self.status, self.queue, self.workflow, self.instance_id, self.labels,
                                       self.parent_id, self.created_after, self.created_before))

    def _cost(self, conn: psycopg.Connection, since: Optional[uuid.UUID], before: Optional[uuid.UUID]) -> float:
        """What the planner expects the search of the ids in [since, before) to cost."""
        where, params = self.where(before, since)
        plan = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) SELECT id FROM dex.runs{}").format(where),
                            params).fetchone()
        return float(plan["QUERY PLAN"][0]["Plan"]["Total Cost"])

    def windows(self, conn: psycopg.Connection, before: Optional[uuid.UUID],
                since: Optional[uuid.UUID] = None
                ) -> Iterator[Tuple[Optional[uuid.UUID], Optional[uuid.UUID], bool]]:
        """Id ranges [since, before) to search, newest first, and whether each is the last:
        that one has no lower bound (or the one of created_after).  Each is about the widest
        whose search the planner expects to cost at most ``WINDOW_COST`` (EXPLAIN of the search
        itself, so that an index serving the filter, as one on status, makes a rare match
        cheap however old): the first is everything at once if that fits, else found by
        bisecting the width between ``_MIN_WINDOW`` and all time (in log scale, then, when
        the best is estimated nearly empty -- a gap since the newest run -- linearly up to
        where the runs begin); each next one is twice the last one's width if that fits, or
        the same (reaching on through a gap as the first does), or else bisected below it.
        A steady stream of runs costs one or two EXPLAINs a window, a gap or a burst about a
        dozen for the window that reaches it.  ``since``: no run below that id (the last
        window ends there).  ``WINDOW_COST`` is about what reading 15,000
        runs by the primary key costs: more than half a bucket of the id's histogram at a
        million runs (the statistics tell ranges no finer apart), 10-15 ms here."""
        start = uuid_time(before) if before else conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        hi = before
        if self.created_before is not None:
            # an id is taken after its transaction's now() (created_at), and a creating
            # transaction is taken to last at most _ID_CLOCK_SLACK before it takes the id
            cap = shifted(self.created_before, _ID_CLOCK_SLACK)
            if cap < start:
                start, hi = cap, uuid7_floor(cap)
        floor = self.id_floor()
        if since is not None and (floor is None or since > floor):
            floor = since
        if floor is not None and hi is not None and hi <= floor:
            return

        def lower(width: dt.timedelta) -> Tuple[Optional[uuid.UUID], bool]:
            """The lower bound of the window of that width, and whether it is the last."""
            lo = uuid7_floor(shifted(start, -width))
            if (floor is not None and lo <= floor) or lo.int == 0:
                return floor, True
            return lo, False

        costs: Dict[dt.timedelta, float] = {}     # of the window being chosen, by width

        def cost(width: dt.timedelta) -> float:
            if width not in costs:
                costs[width] = self._cost(conn, lower(width)[0], hi)
            return costs[width]

        def bisect(good: dt.timedelta, bad: dt.timedelta, probes: int,
                   linear: bool = False) -> Tuple[dt.timedelta, dt.timedelta]:
            """Narrowed [good, bad): the width that fits, and one that does not."""
            for _ in range(probes):
                mid = (good + bad) / 2 if linear else good * math.sqrt(bad / good)
                if cost(mid) <= WINDOW_COST:
                    good = mid
                else:
                    bad = mid
            return good, bad

        width: Optional[dt.timedelta] = None
        while True:
            costs.clear()
            too_wide: Optional[dt.timedelta] = None
            if width is None:
                everything = max(start - _EPOCH, _MIN_WINDOW * 2)
                if cost(everything) <= WINDOW_COST:
                    yield floor, hi, True
                    return
                width, too_wide = bisect(_MIN_WINDOW, everything, 8)
            elif cost(width * 2) <= WINDOW_COST:
                width *= 2
            elif cost(width) <= WINDOW_COST:
                too_wide = width * 2
            else:
                width, too_wide = bisect(_MIN_WINDOW, width, 4)
            if too_wide is not None and cost(width) < WINDOW_COST / 10:
                width, _ = bisect(width, too_wide, 5, linear=True)   # a gap: reach where runs begin
            lo, last = lower(width)
            yield lo, hi, last
            if last:
                return
            hi, start = lo, shifted(start, -width)


def status_horizon(conn: psycopg.Connection) -> Optional[uuid.UUID]:
    """The id below which every run that is not COMPLETED is in ``dex.runs_in_status``
    (1.11), or ``None`` when that cannot serve: an older dex, a role without the grants of
    ``docs/security.md``, or nothing swept yet (the windows then search everything)."""
    usable = conn.execute(
        "SELECT coalesce(has_table_privilege(to_regclass('dex.runs_in_status'), 'SELECT') "
        "AND has_table_privilege(to_regclass('dex.run_status_horizon'), 'SELECT'), "
        "false) AS usable").fetchone()["usable"]
    if not usable:
        return None
    horizon = conn.execute("SELECT horizon FROM dex.run_status_horizon").fetchone()["horizon"]
    return horizon if horizon.int else None


def _indexed_ids(conn: psycopg.Connection, flt: RunFilter, before: uuid.UUID, want: int,
                 deadline: float) -> Tuple[List[uuid.UUID], Optional[uuid.UUID]]:
    """Up to ``want`` ids of runs below ``before`` that match the filter, found through
    ``dex.runs_in_status`` (whose rows are checked against ``dex.runs``, the truth), newest
    first; and where the search stopped (``None``: it found them all, or no more exist)."""
    floor = flt.id_floor()
    where, params = flt.where()
    ids: List[uuid.UUID] = []
    while True:
        q = "SELECT id FROM dex.runs_in_status WHERE status = %s AND id < %s"
        args: List[Any] = [flt.status, before]
        if floor is not None:
            q += " AND id >= %s"
            args.append(floor)
        batch = [r["id"] for r in conn.execute(q + " ORDER BY id DESC LIMIT %s", args + [_INDEX_BATCH])]
        if not batch:
            return ids, None
        ids += [r["id"] for r in conn.execute(
            sql.SQL("SELECT id FROM dex.runs{} AND id = ANY(%s) ORDER BY id DESC").format(where),
            params + [batch])]
        if len(ids) >= want:
            return ids[:want], None
        if len(batch) < _INDEX_BATCH:
            return ids, None
        before = batch[-1]
        if time.monotonic() > deadline:
            return ids, before


def list_runs(conn: psycopg.Connection, flt: RunFilter, limit: int, cursor: Optional[str] = None,
              budget: float = PAGE_BUDGET) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """A page of at most ``limit`` runs, newest first, and the cursor of the next page
    (``None``: the last).  A page is short when the search ran out of its budget; an
    unfiltered one only once it has found a run (or after ``FIRST_RUN_BUDGET``), so that it
    is never empty while the caller may see runs.  A status other than COMPLETED is looked
    for among the runs newer than the status sweep's horizon, then in ``dex.runs_in_status``
    (1.11): a run in that status is found at once however old it is."""
    if not 1 <= limit <= MAX_PAGE:
        raise Problem(400, "Bad Request", f"limit must be 1 to {MAX_PAGE}")
    before = decode_cursor(cursor) if cursor else None
    ids: List[uuid.UUID] = []
    next_cursor: Optional[str] = None
    t0 = time.monotonic()
    horizon = (status_horizon(conn)
               if flt.status not in (None, "COMPLETED") and flt.parent_id is None else None)
    # the runs above the horizon are a minute's worth: searched through, unless the sweep lags
    window_budget = budget if horizon is None else max(budget, RECENT_BUDGET)
    reached_horizon = False
    if flt.parent_id is not None:
        # a parent's children: found through their own index, however old
        windows: Iterable[Tuple[Optional[uuid.UUID], Optional[uuid.UUID], bool]] = [(None, before, True)]
    else:
        windows = flt.windows(conn, before, horizon)
    for lo, hi, last in windows:
        where, params = flt.where(hi, lo)
        q = sql.SQL("SELECT id FROM dex.runs{} ORDER BY id DESC LIMIT %s").format(where)
        ids += [r["id"] for r in conn.execute(q, params + [limit + 1 - len(ids)])]
        if len(ids) > limit:
            ids = ids[:limit]
            next_cursor = encode_cursor(ids[-1])
            break
        if last:
            reached_horizon = True
            break
        spent = time.monotonic() - t0
        if spent > window_budget and (ids or not flt.unfiltered or spent > FIRST_RUN_BUDGET):
            next_cursor = encode_cursor(lo)
            break
    else:
        reached_horizon = True      # no window at all: the cursor is below the horizon
    if horizon is not None and reached_horizon and len(ids) <= limit:
        below = horizon if before is None or before > horizon else before
        more, stopped = _indexed_ids(conn, flt, below, limit + 1 - len(ids), time.monotonic() + budget)
        ids += more
        if len(ids) > limit:
            ids = ids[:limit]
            next_cursor = encode_cursor(ids[-1])
        elif stopped is not None:
            next_cursor = encode_cursor(stopped)
    if not ids:
        return [], next_cursor
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in RUN_COLUMNS)
    rows = conn.execute(sql.SQL("SELECT {} FROM dex.runs WHERE id = ANY(%s) ORDER BY id DESC").format(cols),
                        (ids,)).fetchall()
    return rows, next_cursor


def _count_in_windows(conn: psycopg.Connection, flt: RunFilter, before: Optional[uuid.UUID],
                      since: Optional[uuid.UUID], budget: float
                      ) -> Tuple[Dict[str, int], Optional[dt.datetime], bool]:
    """Runs by status with ids in [since, before), newest first, in windows, until more than
    ``COUNT_CAP`` or ``budget`` seconds: the counts, the creation time back to which they
    were counted (``None``: to ``since``), and whether they reached ``since``."""
    counts: Dict[str, int] = {}
    t0 = time.monotonic()
    for lo, hi, last in flt.windows(conn, before, since):
        where, params = flt.where(hi, lo)
        q = sql.SQL("SELECT status, count(*) AS n FROM dex.runs{} GROUP BY status").format(where)
        for r in conn.execute(q, params):
            counts[r["status"]] = counts.get(r["status"], 0) + r["n"]
        if last:
            break
        if sum(counts.values()) > COUNT_CAP or time.monotonic() - t0 > budget:
            return counts, uuid_time(lo), False
    return counts, None, True


def count_runs(conn: psycopg.Connection, flt: RunFilter, budget: float = COUNT_BUDGET
               ) -> Tuple[Dict[str, int], Optional[dt.datetime], bool]:
    """Runs by status; the creation time back to which they were counted (``None``: all
    runs); and whether that time bounds the COMPLETED runs only, every other status being
    counted in full.  Counted newest first, in windows, until more than ``COUNT_CAP`` or the
    budget is spent.  Of all runs or a queue's, with ``dex.runs_in_status`` (1.11), the runs
    of every other status are counted whatever their age (each up to a little over
    ``COUNT_CAP``): the windows then count the runs newer than the status sweep's horizon,
    and only the COMPLETED ones below it; before 1.11, and with other filters, every status
    is counted back to the same time."""
    # the index serves counts of all runs or of a queue; other filters are counted in windows
    by_index = flt.status is None and all(v is None for v in (
        flt.workflow, flt.instance_id, flt.labels, flt.parent_id, flt.created_after, flt.created_before))
    horizon = status_horizon(conn) if by_index else None
    if horizon is None:
        counts, since, _ = _count_in_windows(conn, flt, None, None, budget)
        return counts, since, False
    counts, since, reached = _count_in_windows(conn, flt, None, horizon, max(budget, RECENT_BUDGET))
    if not reached:
        return counts, since, False
    # below the horizon: every other status from dex.runs_in_status (its own status: a row
    # whose run changed a moment ago may count under the old one) ...
    for status in STATUSES:
        if status == "COMPLETED":
            continue
        q = "SELECT count(*) AS n FROM (SELECT 1 FROM dex.runs_in_status WHERE status = %s AND id < %s"
        args: List[Any] = [status, horizon]
        if flt.queue is not None:
            q += " AND queue = %s"
            args.append(flt.queue)
        n = conn.execute(q + " LIMIT %s) x", args + [COUNT_CAP + 1]).fetchone()["n"]
        if n:
            counts[status] = counts.get(status, 0) + n
    # ... and the COMPLETED runs in windows, as far as the budget goes
    completed, since, _ = _count_in_windows(conn, RunFilter("COMPLETED", flt.queue), horizon, None, budget)
    if completed:
        counts["COMPLETED"] = counts.get("COMPLETED", 0) + completed["COMPLETED"]
    return counts, since, True


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


def queue_limits(conn: psycopg.Connection, queue: str) -> Optional[Dict[str, Any]]:
    """The queue's row of ``dex.queue_limits`` (dex 1.7), or None on an older schema or for a
    role that may not read it (a savepoint keeps the request's transaction usable)."""
    try:
        with conn.transaction():
            return conn.execute(
                "SELECT capacity, rate_limit, extract(epoch FROM rate_period)::float8 AS rate_period_seconds, "
                "tokens, next_token_at, tasks_granted, polls_throttled, concurrency_limit, keys_with_limits "
                "FROM dex.queue_limits WHERE queue = %s", (queue,)).fetchone()
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedTable):
        return None


def latency(conn: psycopg.Connection, queue: str, since: dt.datetime) -> Dict[str, Any]:
    """Percentiles of the time from creation to end of the runs of a workflow queue that
    were created and ended since ``since`` (an id range: cheap at any table size)."""
    row = conn.execute(
        "SELECT count(*) AS runs, percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP "
        "(ORDER BY extract(epoch FROM completed_at - created_at)) AS p "
        "FROM dex.runs WHERE queue = %s AND id >= %s AND created_at >= %s "
        "AND completed_at IS NOT NULL",
        (queue, uuid7_floor(shifted(since, -_ID_CLOCK_SLACK)), since)).fetchone()
    p = row["p"] or [None, None, None]
    return {"runs": row["runs"], "p50": p[0], "p90": p[1], "p99": p[2]}
