"""The client: start runs, look at them, wait for their results, signal them."""

from __future__ import annotations

import datetime as _dt
import json
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import errors
from ._connect import add_pooler_hint, configure, connect
from ._convert import Duration, decode, event_kind, json_text, parse_timestamp, seconds
from .registry import workflow_definition

# The statuses of a run that has ended.  The others: DELAYED (start_at has not come), CREATED,
# RUNNING, SUSPENDED, BLOCKED.
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT")
WAIT_MODES = ("any", "all")
WAIT_FOR_RUNS_MAX = 1000        # the most runs one CALL dex.wait_for_runs takes


@dataclass
class Run:
    """A workflow run as dex.get_run shows it."""

    id: str
    workflow_name: str
    workflow_version: int
    queue: Optional[str]
    status: str
    instance_id: Optional[str] = None
    priority: int = 0
    labels: Dict[str, str] = field(default_factory=dict)
    custom_status: Optional[str] = None
    parent_id: Optional[str] = None
    argument: Any = None
    result: Any = None
    failure: Optional[dict] = None
    history_length: int = 0
    created_at: Optional[_dt.datetime] = None
    updated_at: Optional[_dt.datetime] = None
    started_at: Optional[_dt.datetime] = None
    completed_at: Optional[_dt.datetime] = None
    origin_run_id: Optional[str] = None     # the run this one restarts or resets (dex 1.4)
    origin: Optional[str] = None            # "RESTART" or "RESET"
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_row(cls, row: Dict[str, Any]) -> "Run":
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kw = {k: v for k, v in row.items() if k in known}
        kw["id"] = str(row["id"])
        for k in ("parent_id", "origin_run_id"):
            if kw.get(k) is not None:
                kw[k] = str(kw[k])
        kw["labels"] = row.get("labels") or {}
        return cls(**kw, extra={k: v for k, v in row.items() if k not in known})


@dataclass
class Attempt:
    """One attempt of a run's workflow task or activity, as dex.run_attempts shows it."""

    task: str                       # "workflow" or "activity"
    event_id: int                   # the activity's activityTaskCreated event id; 0: workflow
    name: Optional[str]             # the activity's name
    attempt: int
    worker_id: Optional[str]
    leased_at: Optional[_dt.datetime]
    ended_at: Optional[_dt.datetime]
    outcome: str                    # COMPLETED, FAILED, LEASE_EXPIRED or VOIDED
    failure: Optional[dict] = None  # dex.v1.Failure (JSON) of a failed attempt


OVERLAP_POLICIES = ("skip", "buffer_one", "allow_all", "cancel_other", "terminate_other")


@dataclass
class Schedule:
    """A schedule as the view dex.schedules shows it (dex 1.7)."""

    name: str
    workflow_name: str
    workflow_version: int
    queue: str
    cron: Optional[str]                 # a five-field expression or @hourly-style shorthand
    every: Optional[_dt.timedelta]      # or a fixed interval
    timezone: str
    overlap: str                        # one of OVERLAP_POLICIES
    catchup_window: _dt.timedelta
    jitter: _dt.timedelta
    start_at: Optional[_dt.datetime]
    end_at: Optional[_dt.datetime]
    paused: bool
    note: Optional[str]
    argument: Any
    labels: Optional[Dict[str, str]]
    next_tick: Optional[_dt.datetime]
    next_fire_at: Optional[_dt.datetime]    # the next tick plus its jitter; None while paused
    buffered_tick: Optional[_dt.datetime]
    last_tick: Optional[_dt.datetime]
    last_run_id: Optional[str]
    last_run_status: Optional[str]
    runs_started: int
    skipped_overlap: int                # ticks skipped because a run was active
    skipped_missed: int                 # ticks missed by more than catchup_window
    skipped: int
    created_at: _dt.datetime
    updated_at: _dt.datetime

    @classmethod
    def from_row(cls, row: Dict[str, Any]) -> "Schedule":
        known = cls.__dataclass_fields__
        values = {k: v for k, v in row.items() if k in known}
        if values.get("last_run_id") is not None:
            values["last_run_id"] = str(values["last_run_id"])
        return cls(**values)


def _start_at(when: _dt.datetime) -> _dt.datetime:
    if not isinstance(when, _dt.datetime):
        raise TypeError(f"start_at must be a datetime, not {type(when).__name__}")
    return when.astimezone()        # a naive datetime is local time, as in Python


def _interval(d: Duration) -> _dt.timedelta:
    return d if isinstance(d, _dt.timedelta) else _dt.timedelta(seconds=seconds(d))


def _json(value: Any, what: str, name: str) -> Optional[Jsonb]:
    """``value`` as a jsonb parameter (None for None), checked before anything is sent:
    :class:`dex.NotJSONError` names ``what`` and the first value in it that is not JSON."""
    if value is None:
        return None
    text = json_text(value, what, name)
    return Jsonb(value, dumps=lambda _: text)


class Client:
    """A connection to a database with dex.  ``conninfo`` is a libpq connection string
    ('' takes PGHOST, PGDATABASE, ...); or pass an open psycopg ``connection``.

    ``pooled`` says whether the connection goes through a connection pooler in transaction
    mode (PgBouncer's ``pool_mode = transaction``), where psycopg's prepared statements do not
    survive from one transaction to the next: ``True`` turns them off, ``False`` keeps them,
    ``None`` (the default) turns them off when a pooler is detected.  A ``connection`` of
    yours is used as you made it unless you say ``pooled=True`` (make it with
    ``prepare_threshold=None`` for a transaction pool).  :attr:`pooled` is whether the
    connection runs without prepared statements.

    What the server refuses raises a :class:`dex.ServerError` chosen by its SQLSTATE
    (:class:`dex.NotFound`, :class:`dex.WrongKind`, ...; see ``errors.SQLSTATE_ERRORS``), with
    psycopg's exception as ``__cause__``; a connection that cannot be made or is lost,
    :class:`dex.ConnectionFailed`.
    """

    def __init__(self, conninfo: str = "", *, connection: Optional[psycopg.Connection] = None,
                 pooled: Optional[bool] = None):
        self._own = connection is None
        if connection is None:
            try:
                self.conn, self.pooled = connect(conninfo, pooled)
            except psycopg.Error as e:
                raise errors.server_error(e) from e
        else:
            self.conn = connection
            self.pooled = configure(connection, True) if pooled else \
                connection.prepare_threshold is None

    def close(self) -> None:
        if self._own:
            self.conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _exec(self, sql: str, params: Sequence[Any] = (), row_factory: Any = None):
        cur = self.conn.cursor(row_factory=row_factory) if row_factory else self.conn.cursor()
        try:
            return cur.execute(sql, params)
        except psycopg.Error as e:
            add_pooler_hint(e)      # what to do when the connection is pooled unawares
            raise errors.server_error(e) from e

    def _has_function(self, name: str) -> bool:
        """Whether the installed dex has dex.<name> (asked once per client)."""
        cache = self.__dict__.setdefault("_functions", {})
        if name not in cache:
            cache[name] = self._exec(
                "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n "
                "ON n.oid = p.pronamespace WHERE n.nspname = 'dex' AND p.proname = %s)",
                (name,)).fetchone()[0]
        return cache[name]

    # -- queues --------------------------------------------------------------
    def create_queue(self, name: str, kind: str, capacity: Optional[int] = None,
                     exist_ok: bool = True) -> bool:
        """Create a 'workflow' or 'activity' queue; False if it existed (and ``exist_ok``,
        else :class:`dex.AlreadyExists`)."""
        try:
            if capacity is None:
                self._exec("SELECT dex.create_queue(%s, %s)", (name, kind))
            else:
                self._exec("SELECT dex.create_queue(%s, %s, %s)", (name, kind, capacity))
            return True
        except errors.AlreadyExists:
            if not exist_ok:
                raise
            return False

    def alter_queue(self, name: str, *, capacity: Optional[int] = None,
                    paused: Optional[bool] = None, rate_limit: Optional[int] = None,
                    rate_period: Optional[Duration] = None,
                    concurrency_limit: Optional[int] = None) -> None:
        """Change a queue (dex.alter_queue); what is left None stays as it is.

        ``capacity``: most tasks leased at once (0 removes the limit); ``paused``: polls hand
        out nothing.  Flow control (dex 1.7): ``rate_limit`` tasks handed out per
        ``rate_period`` (a timedelta, seconds or "500ms"; 1 second if never given) across
        every worker, 0 removing the limit; ``concurrency_limit``: how many runs of one
        concurrency key may be active at once on this workflow queue (1 by default).  Bad
        values raise :class:`dex.InvalidArgument` and change nothing."""
        extra, params = "", [name]
        for arg, value in (("capacity", capacity), ("paused", paused),
                           ("rate_limit", rate_limit),
                           ("rate_period", None if rate_period is None else _interval(rate_period)),
                           ("concurrency_limit", concurrency_limit)):
            if value is not None:
                extra += f", {arg} => %s"
                params.append(value)
        self._exec(f"SELECT dex.alter_queue(%s{extra})", params)

    def set_concurrency_limit(self, queue: str, key: str, max_runs: Optional[int]) -> None:
        """Let up to ``max_runs`` runs of concurrency key ``key`` be active at once on the
        workflow queue (dex 1.7; ``None`` gives the key its queue's limit back).  Raised, it
        admits waiting runs at once; lowered, the runs above it finish first."""
        self._exec("SELECT dex.set_concurrency_limit(%s, %s, %s)", (queue, key, max_runs))

    def queue_limits(self, queue: str) -> Dict[str, Any]:
        """The flow control of a queue (dex.queue_limits, dex 1.7): capacity, rate_limit,
        rate_period, tokens (None until a poll made its bucket, full), next_token_at,
        tasks_granted, polls_throttled, concurrency_limit, keys_with_limits."""
        row = self._exec("SELECT * FROM dex.queue_limits WHERE queue = %s", (queue,),
                         row_factory=dict_row).fetchone()
        if row is None:
            raise errors.NotFound(f'queue "{queue}" does not exist', sqlstate="42704")
        return row

    # -- runs ----------------------------------------------------------------
    @staticmethod
    def _workflow(workflow: Any, version: Optional[int]) -> tuple:
        # the version given, whatever it is (the server refuses 0 or less: 22023)
        if isinstance(workflow, str):
            return workflow, 1 if version is None else version
        d = workflow_definition(workflow)
        return d.name, d.version if version is None else version

    @staticmethod
    def _lifecycle(start_at: Optional[_dt.datetime], execution_timeout: Optional[Duration]
                   ) -> Tuple[str, list]:
        """The named arguments start_at and execution_timeout, when given (dex 1.4): an older
        dex, which has neither, still serves a start that does not use them."""
        extra, params = "", []
        if start_at is not None:
            extra += ", start_at => %s"
            params.append(_start_at(start_at))
        if execution_timeout is not None:
            extra += ", execution_timeout => %s"
            params.append(_interval(execution_timeout))
        return extra, params

    def start(self, workflow: Any, arg: Any = None, *, queue: str,
              version: Optional[int] = None, instance_id: Optional[str] = None,
              priority: int = 0, labels: Optional[Dict[str, str]] = None,
              concurrency_key: Optional[str] = None, if_active: str = "error",
              start_at: Optional[_dt.datetime] = None,
              execution_timeout: Optional[Duration] = None,
              debounce_key: Optional[str] = None, debounce: Optional[Duration] = None,
              debounce_max: Optional[Duration] = None) -> str:
        """Start a run of ``workflow`` (a ``@dex.workflow`` function or a name); its id.

        With ``instance_id``, a run of that instance that is still active makes this an
        error (:class:`dex.AlreadyActive`), or with ``if_active="return"`` returns
        that run's id: starting an instance becomes idempotent.  ``arg`` must be JSON
        (:class:`dex.NotJSONError` otherwise, before anything is sent).  What the server
        refuses raises a :class:`dex.ServerError` (:class:`dex.NotFound` for a queue that does
        not exist, ...), as every call of the client does.

        ``start_at`` (a datetime; a naive one is local time) in the future makes the run
        DELAYED until then.  ``execution_timeout`` (a timedelta, seconds or "90s") ends the
        run TIMED_OUT (failure type ``dex.TimedOut``) if it has not ended that long after its
        start.  Both need dex 1.4.

        ``debounce_key`` with ``debounce`` (dex 1.7): starts made with the same key (for this
        workflow and queue) while the run the first made has not started update that run
        instead (the last ``arg`` wins; its id is returned) and push its start to
        ``debounce`` after the latest, never past ``debounce_max`` after the first: one run
        starts per burst of starts."""
        name, version = self._workflow(workflow, version)
        extra, params = "", [name, queue, _json(arg, "the run's argument", "arg"), version,
                             instance_id, priority, _json(labels or None, "labels", "labels"),
                             concurrency_key]
        if if_active != "error":
            extra = ", if_active => %s"
            params.append(if_active)
        more, values = self._lifecycle(start_at, execution_timeout)
        extra += more
        params += values
        if debounce_key is not None:
            extra += ", debounce_key => %s, debounce => %s, debounce_max => %s"
            params += [debounce_key, None if debounce is None else _interval(debounce),
                       None if debounce_max is None else _interval(debounce_max)]
        row = self._exec(
            "SELECT dex.create_run(%s, %s, %s, workflow_version => %s, instance_id => %s, "
            f"priority => %s, labels => %s, concurrency_key => %s{extra})", params).fetchone()
        return str(row[0])

    def start_many(self, workflow: Any, args: Sequence[Any], *, queue: str,
                   version: Optional[int] = None, priority: int = 0,
                   labels: Optional[Dict[str, str]] = None,
                   start_at: Optional[_dt.datetime] = None,
                   execution_timeout: Optional[Duration] = None,
                   instance_ids: Optional[Sequence[Optional[str]]] = None,
                   concurrency_keys: Optional[Sequence[Optional[str]]] = None,
                   priorities: Optional[Sequence[Optional[int]]] = None,
                   run_labels: Optional[Sequence[Optional[Dict[str, str]]]] = None,
                   start_times: Optional[Sequence[Optional[_dt.datetime]]] = None) -> List[str]:
        """Start one run per argument in one call (dex.create_runs); their ids, in order.
        ``start_at`` and ``execution_timeout`` as for :meth:`start`.

        Per run (dex 1.7; sequences as long as ``args``, ``None`` for the default):
        ``instance_ids``, ``concurrency_keys``, ``priorities``, ``run_labels``, ``start_times``.
        A run whose instance id has an active run is not started: its place in the result
        holds that run's id (:meth:`start_many_rows` tells which)."""
        return [run_id for run_id, _ in self.start_many_rows(
            workflow, args, queue=queue, version=version, priority=priority, labels=labels,
            start_at=start_at, execution_timeout=execution_timeout, instance_ids=instance_ids,
            concurrency_keys=concurrency_keys, priorities=priorities, run_labels=run_labels,
            start_times=start_times)]

    def start_many_rows(self, workflow: Any, args: Sequence[Any], *, queue: str,
                        version: Optional[int] = None, priority: int = 0,
                        labels: Optional[Dict[str, str]] = None,
                        start_at: Optional[_dt.datetime] = None,
                        execution_timeout: Optional[Duration] = None,
                        instance_ids: Optional[Sequence[Optional[str]]] = None,
                        concurrency_keys: Optional[Sequence[Optional[str]]] = None,
                        priorities: Optional[Sequence[Optional[int]]] = None,
                        run_labels: Optional[Sequence[Optional[Dict[str, str]]]] = None,
                        start_times: Optional[Sequence[Optional[_dt.datetime]]] = None
                        ) -> List[Tuple[str, bool]]:
        """:meth:`start_many` with, per run, whether it was started (``False``: its instance id
        had an active run, whose id is given instead)."""
        name, version = self._workflow(workflow, version)
        extra, params = self._lifecycle(start_at, execution_timeout)
        for arg_name, values in (("instance_ids", instance_ids),
                                 ("concurrency_keys", concurrency_keys),
                                 ("priorities", priorities)):
            if values is not None:
                extra += f", {arg_name} => %s"
                params.append(list(values))
        if run_labels is not None:
            extra += ", run_labels => %s::jsonb[]"
            params.append([_json(x or None, f"run_labels[{i}]", "run_labels")
                           for i, x in enumerate(run_labels)])
        if start_times is not None:
            extra += ", start_times => %s::timestamptz[]"
            params.append([None if t is None else _start_at(t) for t in start_times])
        rows = self._exec(
            "SELECT * FROM dex.create_runs(%s, %s, %s::jsonb[], %s, %s, %s" + extra + ")",
            [name, queue, [_json(a, f"the argument of run {i} (from 0)", f"args[{i}]")
                           for i, a in enumerate(args)], version,
             priority, _json(labels or None, "labels", "labels")] + params).fetchall()
        # dex 1.6 and older return the ids alone
        return [(str(r[0]), bool(r[1]) if len(r) > 1 else True) for r in rows]

    def get(self, run_id: str) -> Run:
        """The run (raises :class:`dex.NotFound` if there is none)."""
        row = self._exec("SELECT * FROM dex.get_run(%s)", (run_id,), dict_row).fetchone()
        return Run.from_row(row)

    def result(self, run_id: str, timeout: Optional[float] = None) -> Any:
        """Wait for the run to end; its result.  Raises :class:`dex.RunFailedError`
        (:class:`dex.RunTerminatedError` for a terminated run, :class:`dex.RunTimedOutError`
        for one that ended TIMED_OUT), :class:`dex.RunCancelledError`, or TimeoutError after
        ``timeout`` seconds."""
        run = self.wait(run_id, timeout)
        if run.status == "COMPLETED":
            return run.result
        if run.status == "CANCELLED":
            raise errors.RunCancelledError(f"run {run_id} was cancelled")
        failure = run.failure or {}
        if run.status == "TERMINATED":
            raise errors.RunTerminatedError(f"run {run_id}: {failure.get('message', '')}", failure)
        if run.status == "TIMED_OUT":
            raise errors.RunTimedOutError(f"run {run_id} timed out: {failure.get('message', '')}",
                                          failure)
        raise errors.RunFailedError(f"run {run_id} failed: {failure.get('message', '')}", failure)

    def wait(self, run_id: str, timeout: Optional[float] = None,
             statuses: Sequence[str] = TERMINAL) -> Run:
        """Wait until the run's status is one of ``statuses`` (default: ended).  For an end,
        the server wakes the wait (``CALL dex.wait_for_run``, dex 1.3 and later, on an
        autocommit connection that is not pooled: behind a transaction pool a long CALL would
        hold one of the pool's server connections); otherwise dex.get_run is polled with
        backoff (20 ms growing to 1 s)."""
        deadline = None if timeout is None else time.monotonic() + seconds(timeout)
        if tuple(statuses) == TERMINAL and self._waits_in_server("wait_for_run"):
            while True:
                left = 60.0 if deadline is None else min(60.0, max(0.0, deadline - time.monotonic()))
                self._exec("CALL dex.wait_for_run(%s, make_interval(secs => %s))", (run_id, left))
                run = self.get(run_id)
                if run.status in statuses:
                    return run
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"run {run_id} is still {run.status} after {timeout} s")
        delay = 0.02
        while True:
            run = self.get(run_id)
            if run.status in statuses:
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} is still {run.status} after {timeout} s")
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)

    def _waits_in_server(self, procedure: str) -> bool:
        """Whether a wait may be a ``CALL dex.<procedure>``: the installed dex has it, and the
        connection is not pooled (behind a transaction pool a long CALL would hold one of the
        pool's server connections) and is in autocommit outside any transaction block (the
        procedure commits as it waits)."""
        return (self.conn.autocommit and not self.pooled
                and self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                and self._has_function(procedure))

    def wait_for_runs(self, run_ids: Sequence[str], timeout: Optional[float] = None,
                      mode: str = "any") -> List[str]:
        """Wait until any (``mode="any"``) or all (``"all"``) of the runs have ended; the ids
        of those that have, in the order given.  After ``timeout`` seconds (None: no limit)
        the ids of those that had ended then, which may be none: compare with ``run_ids``.
        An unknown run id raises :class:`dex.NotFound`.

        As :meth:`wait`: ``CALL dex.wait_for_runs`` (dex 1.4), woken as each run ends, on an
        autocommit connection that is not pooled, for up to 1000 runs; otherwise dex.get_run
        is polled with backoff."""
        if mode not in WAIT_MODES:
            raise ValueError(f"mode must be 'any' or 'all', not {mode!r}")
        ids = [str(r) for r in run_ids]
        if not ids:
            return []
        deadline = None if timeout is None else time.monotonic() + seconds(timeout)

        def enough(ended: List[str]) -> bool:
            return bool(ended) if mode == "any" else set(ended) >= set(ids)

        if len(ids) <= WAIT_FOR_RUNS_MAX and self._waits_in_server("wait_for_runs"):
            while True:
                left = 60.0 if deadline is None else min(60.0, max(0.0, deadline - time.monotonic()))
                row = self._exec("CALL dex.wait_for_runs(%s::uuid[], make_interval(secs => %s), %s)",
                                 (ids, left, mode)).fetchone()
                ended = [str(r) for r in (row[0] or [])]
                if enough(ended) or (deadline is not None and time.monotonic() >= deadline):
                    return ended
        delay = 0.02
        while True:
            rows = self._exec(
                "SELECT r.id, r.status FROM unnest(%s::uuid[]) WITH ORDINALITY AS u(id, n), "
                "LATERAL dex.get_run(u.id) AS r ORDER BY u.n", (ids,)).fetchall()
            ended = [str(i) for i, status in rows if status in TERMINAL]
            if enough(ended) or (deadline is not None and time.monotonic() >= deadline):
                return ended
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)

    def history(self, run_id: str) -> List[dict]:
        """The run's events (canonical dex.v1.WorkflowEvent JSON), in order."""
        return [event for _, event in self.history_rows(run_id)]

    def history_rows(self, run_id: str) -> List[Tuple[int, dict]]:
        """The run's events with their sequence numbers, ``(sequence, event)`` in order, as
        dex.run_history returns them: :meth:`reset` takes a sequence number."""
        return [(r[0], r[1]) for r in self._exec(
            "SELECT sequence, event FROM dex.run_history(%s) ORDER BY sequence",
            (run_id,)).fetchall()]

    def list(self, *, workflow_name: Optional[str] = None, status: Optional[str] = None,
             labels: Optional[Dict[str, str]] = None,
             created_after: Optional[_dt.datetime] = None,
             created_before: Optional[_dt.datetime] = None,
             completed_after: Optional[_dt.datetime] = None,
             completed_before: Optional[_dt.datetime] = None,
             parent_id: Optional[str] = None, before: Optional[str] = None,
             page_size: int = 100) -> List[Run]:
        """One page of runs matching every filter given, newest first (dex.list_runs).

        ``labels`` matches runs whose labels contain it; for the next page pass the
        last run's id as ``before``.  :meth:`iter_runs` walks every page."""
        if not self._has_function("list_runs"):
            raise errors.NotSupported("the installed dex has no dex.list_runs")
        rows = self._exec(
            "SELECT * FROM dex.list_runs(workflow_name => %s, status => %s, labels => %s, "
            "created_after => %s, created_before => %s, completed_after => %s, "
            "completed_before => %s, parent_id => %s::uuid, before_id => %s::uuid, "
            "page_size => %s::integer)",
            (workflow_name, status, _json(labels or None, "labels", "labels"), created_after,
             created_before, completed_after, completed_before, parent_id, before, page_size),
            dict_row).fetchall()
        return [Run.from_row(r) for r in rows]

    def iter_runs(self, **filters: Any) -> Iterator[Run]:
        """Every run matching the filters of :meth:`list`, newest first, page by page."""
        before = filters.pop("before", None)
        while True:
            page = self.list(before=before, **filters)
            yield from page
            if len(page) < filters.get("page_size", 100):
                return
            before = page[-1].id

    # -- acting on runs ---------------------------------------------------------
    def _call(self, fn: str, *args: Any) -> Any:
        if not self._has_function(fn):
            raise errors.NotSupported(f"the installed dex has no dex.{fn}")
        placeholders = ", ".join(["%s"] * len(args))
        return self._exec(f"SELECT dex.{fn}({placeholders})", args).fetchone()[0]

    def cancel(self, run_id: str, reason: Optional[str] = None) -> Any:
        """Request the run's cancellation: the workflow sees it (dex.CancelledError) and may
        clean up; the run then ends CANCELLED."""
        return self._call("cancel_run", run_id, reason) if reason is not None else \
            self._call("cancel_run", run_id)

    def terminate(self, run_id: str, reason: Optional[str] = None) -> Any:
        """End the run at once as TERMINATED, without running its workflow code (for code that
        cannot run); its pending tasks are void.  Use :meth:`cancel` when the workflow can
        clean up."""
        return self._call("terminate_run", run_id, reason) if reason is not None else \
            self._call("terminate_run", run_id)

    def purge(self, run_id: str) -> Any:
        """Delete a run that has ended now, with its history (dex_admin)."""
        return self._call("purge_run", run_id)

    def purge_runs(self, status: Optional[str] = None, queue: Optional[str] = None,
                   ended_before: Optional[Any] = None, limit: int = 1000) -> int:
        """Delete up to ``limit`` ended runs of that status and queue (None: any) that ended
        before ``ended_before`` (default: now), oldest first; how many went.  Call it again
        until it returns 0 (dex_admin)."""
        if not self._has_function("purge_runs"):
            raise errors.NotSupported("the installed dex has no dex.purge_runs")
        return self._exec(
            "SELECT dex.purge_runs(%s, %s, coalesce(%s, now()), %s)",
            (status, queue, ended_before, limit)).fetchone()[0]

    def restart(self, run_id: str) -> str:
        """Start a new run with the run's workflow, version, argument, queue, priority, labels
        and concurrency key (and its instance id, once the run has ended): the new run's id.
        Its ``origin_run_id`` is ``run_id``, its ``origin`` "RESTART" (dex 1.4)."""
        return str(self._call("restart_run", run_id))

    def reset(self, run_id: str, event_id: int, reason: Optional[str] = None) -> str:
        """Start a new run that goes back to a workflow task of the run and lets the code
        deployed since decide again what that task decided: the last workflow task completed at
        or before ``event_id`` (a sequence number of dex.run_history: :meth:`history_rows`, or
        the ``seq`` column of :meth:`format_history`; name the ``workflowTaskCompleted`` of the
        last good step).  The history before that task is kept, what the task was shown is
        shown again, its commands and all after them are dropped: activities completed before
        it are not run again, those pending are queued again.  A run still active is
        terminated first.  The new run's id (``origin`` "RESET"; dex 1.4)."""
        return str(self._call("reset_run", run_id, int(event_id), reason))

    def attempts(self, run_id: str) -> List[Attempt]:
        """Every attempt of the run's workflow tasks and activities, in the order they ended
        (dex.run_attempts, dex 1.4): who ran it, when, and its outcome (COMPLETED, FAILED,
        LEASE_EXPIRED, VOIDED) and failure."""
        if not self._has_function("run_attempts"):
            raise errors.NotSupported("the installed dex has no dex.run_attempts")
        rows = self._exec("SELECT * FROM dex.run_attempts(%s)", (run_id,), dict_row).fetchall()
        known = Attempt.__dataclass_fields__
        return [Attempt(**{k: v for k, v in r.items() if k in known}) for r in rows]

    def suspend(self, run_id: str, reason: Optional[str] = None) -> Any:
        """Suspend the run: no workflow task until it is resumed.  ``runSuspended`` records
        the reason (dex 1.4) and the session user."""
        return self._call("suspend_run", run_id, reason) if reason is not None else \
            self._call("suspend_run", run_id)

    def resume(self, run_id: str, reason: Optional[str] = None) -> Any:
        """Resume a suspended run, or retry a BLOCKED one; ``runResumed`` records the reason
        (dex 1.4) and the session user."""
        return self._call("resume_run", run_id, reason) if reason is not None else \
            self._call("resume_run", run_id)

    # -- schedules (dex 1.7, dex_admin) -----------------------------------------
    def _schedule_args(self, kw: Dict[str, Any]) -> Tuple[str, list]:
        """Named arguments of dex.create_schedule / dex.alter_schedule for the given options."""
        names, params = [], []
        for key, value in kw.items():
            if value is None:
                continue
            if key in ("every", "catchup_window", "jitter"):
                value = _interval(value)
            elif key in ("start_at", "end_at"):
                value = _start_at(value)
            elif key == "argument":
                value = _json(value, "the schedule's argument", "argument")
            elif key == "labels":
                value = _json(value, "labels", "labels")
            elif key == "overlap" and value not in OVERLAP_POLICIES:
                raise ValueError(f"overlap must be one of {', '.join(OVERLAP_POLICIES)}")
            names.append(f"{key} => %s")
            params.append(value)
        return "".join(", " + n for n in names), params

    def _schedules(self, fn: str) -> None:
        if not self._has_function(fn):
            raise errors.NotSupported(f"the installed dex has no dex.{fn} (schedules: dex 1.7)")

    def create_schedule(self, name: str, workflow: Any, *, queue: str, cron: Optional[str] = None,
                        every: Optional[Duration] = None, argument: Any = None,
                        version: Optional[int] = None, timezone: str = "UTC",
                        overlap: str = "skip", catchup_window: Optional[Duration] = None,
                        jitter: Optional[Duration] = None,
                        start_at: Optional[_dt.datetime] = None,
                        end_at: Optional[_dt.datetime] = None, paused: bool = False,
                        labels: Optional[Dict[str, str]] = None) -> Optional[_dt.datetime]:
        """Create a schedule that starts runs of ``workflow`` (a ``@dex.workflow`` function or a
        name) on ``queue`` at the ticks of ``cron`` (five fields, or ``@hourly`` and the like,
        in ``timezone``) or ``every`` interval; the next fire time (None if paused).

        ``overlap`` decides what a tick does while a run the schedule started is active (one of
        ``OVERLAP_POLICIES``); ticks missed by more than ``catchup_window`` (default a minute)
        are skipped and counted; ``jitter`` delays each tick by a deterministic amount below it.
        A name taken raises :class:`dex.AlreadyExists`, a bad expression
        :class:`dex.InvalidArgument` whose ``detail`` says where it is wrong."""
        self._schedules("create_schedule")
        wf, version = self._workflow(workflow, version)
        extra, params = self._schedule_args(dict(
            cron=cron, every=every, argument=argument, version=version, timezone=timezone,
            overlap=overlap, catchup_window=catchup_window, jitter=jitter, start_at=start_at,
            end_at=end_at, paused=paused, labels=labels or None))
        return self._exec(f"SELECT dex.create_schedule(%s, %s, %s{extra})",
                          [name, wf, queue] + params).fetchone()[0]

    def alter_schedule(self, name: str, *, cron: Optional[str] = None,
                       every: Optional[Duration] = None, argument: Any = None,
                       version: Optional[int] = None, timezone: Optional[str] = None,
                       overlap: Optional[str] = None,
                       catchup_window: Optional[Duration] = None,
                       jitter: Optional[Duration] = None,
                       start_at: Optional[_dt.datetime] = None,
                       end_at: Optional[_dt.datetime] = None,
                       labels: Optional[Dict[str, str]] = None, workflow: Any = None,
                       queue: Optional[str] = None) -> Optional[_dt.datetime]:
        """Change a schedule; what is None stays as it is (a ``cron`` replaces an ``every``
        and the reverse).  A change of its timing counts the ticks afresh from now.  The next
        fire time."""
        self._schedules("alter_schedule")
        wf = None if workflow is None else self._workflow(workflow, None)[0]
        extra, params = self._schedule_args(dict(
            cron=cron, every=every, argument=argument, version=version, timezone=timezone,
            overlap=overlap, catchup_window=catchup_window, jitter=jitter, start_at=start_at,
            end_at=end_at, labels=labels, workflow=wf, queue=queue))
        return self._exec(f"SELECT dex.alter_schedule(%s{extra})", [name] + params).fetchone()[0]

    def pause_schedule(self, name: str, note: Optional[str] = None) -> None:
        """Pause a schedule (with a note saying why): its ticks start nothing meanwhile, and
        are not caught up."""
        self._schedules("pause_schedule")
        self._exec("SELECT dex.pause_schedule(%s, %s)", (name, note))

    def unpause_schedule(self, name: str) -> Optional[_dt.datetime]:
        """Unpause a schedule: it fires from its next tick after now; that fire time."""
        self._schedules("unpause_schedule")
        return self._exec("SELECT dex.unpause_schedule(%s)", (name,)).fetchone()[0]

    def delete_schedule(self, name: str) -> None:
        """Delete a schedule; the runs it started go on."""
        self._schedules("delete_schedule")
        self._exec("SELECT dex.delete_schedule(%s)", (name,))

    def trigger_schedule(self, name: str, overlap: Optional[str] = None) -> Optional[str]:
        """Fire a schedule now under its overlap policy (or ``overlap``): the run started, or
        None if the policy started none."""
        self._schedules("trigger_schedule")
        row = self._exec("SELECT dex.trigger_schedule(%s, %s)", (name, overlap)).fetchone()
        return None if row[0] is None else str(row[0])

    def backfill_schedule(self, name: str, start: _dt.datetime, end: _dt.datetime,
                          overlap: Optional[str] = None
                          ) -> List[Tuple[_dt.datetime, Optional[str]]]:
        """Fire the schedule's ticks from ``start`` (included) to ``end`` (excluded), at most
        1000, under its overlap policy (or ``overlap``): (tick, run id or None) per tick."""
        self._schedules("backfill_schedule")
        rows = self._exec("SELECT tick, run_id FROM dex.backfill_schedule(%s, %s, %s, %s)",
                          (name, _start_at(start), _start_at(end), overlap)).fetchall()
        return [(t, None if r is None else str(r)) for t, r in rows]

    def schedule_next_times(self, name: str, n: int = 10) -> List[_dt.datetime]:
        """The schedule's next ``n`` ticks after now (1 to 1000), without jitter."""
        self._schedules("schedule_next_times")
        return [r[0] for r in self._exec("SELECT * FROM dex.schedule_next_times(%s, %s)",
                                         (name, n)).fetchall()]

    def get_schedule(self, name: str) -> Schedule:
        """The schedule (:class:`dex.NotFound` if there is none)."""
        self._schedules("create_schedule")
        row = self._exec("SELECT * FROM dex.schedules WHERE name = %s", (name,),
                         dict_row).fetchone()
        if row is None:
            raise errors.NotFound(f'schedule "{name}" does not exist', sqlstate="42704")
        return Schedule.from_row(row)

    def list_schedules(self, *, name_like: Optional[str] = None,
                       paused: Optional[bool] = None) -> List[Schedule]:
        """The schedules, by name: those whose name is LIKE ``name_like``, paused or not."""
        self._schedules("create_schedule")
        rows = self._exec(
            "SELECT * FROM dex.schedules WHERE (%s::text IS NULL OR name LIKE %s) "
            "AND (%s::boolean IS NULL OR paused = %s) ORDER BY name",
            (name_like, name_like, paused, paused), dict_row).fetchall()
        return [Schedule.from_row(r) for r in rows]

    def send_event(self, run_id: str, event_id: str, payload: Any = None) -> bool:
        """Send an external event; False if the run already had one with that id."""
        return self._exec("SELECT dex.send_external_event(%s, %s, %s)",
                          (run_id, event_id, _json(payload, "the event's payload", "payload"))
                          ).fetchone()[0]

    def send_events(self, events: Sequence[Tuple[str, str, Any]]) -> List[str]:
        """Send many external events in one call (dex.send_external_events, dex 1.7): each a
        ``(run_id, event_id, payload)``; the outcome of each, in order: ``"DELIVERED"``,
        ``"DUPLICATE"`` (the run had one with that id), ``"TARGET_ENDED"`` or
        ``"TARGET_NOT_FOUND"``, instead of an error."""
        if not events:
            return []
        rows = self._exec(
            "SELECT outcome FROM dex.send_external_events(%s::uuid[], %s::text[], %s::jsonb[])",
            ([str(e[0]) for e in events], [e[1] for e in events],
             [_json(e[2], f"the payload of event {i} (from 0)", "payload")
              for i, e in enumerate(events)])).fetchall()
        return [r[0] for r in rows]

    def send_event_to_instance(self, instance_id: str, event_id: str, payload: Any = None,
                               queue: str | None = None) -> bool:
        """Send an external event to the active run of a workflow instance.

        Instance ids are unique per workflow queue: without ``queue`` the run is looked
        for on every queue this role may use, and an id active on several of them is an
        error (SQLSTATE 21000) that asks for the queue.
        """
        return self._exec("SELECT dex.send_external_event_to_instance(%s, %s, %s, %s)",
                          (instance_id, event_id, _json(payload, "the event's payload", "payload"),
                           queue)).fetchone()[0]

    def format_history(self, run_id: str, width: int = 64) -> str:
        """The run's history as a table, one event per line (``seq``: its sequence number)."""
        rows = self.history_rows(run_id)
        return format_history([e for _, e in rows], width, [s for s, _ in rows])


def _brief(kind: str, body: dict) -> str:
    """A readable one-line summary of an event's details."""
    parts = []
    # "answers id N" first: activityTaskCreatedEventId, timerCreatedEventId, ...
    refs = [k for k in body if k.endswith("EventId")]
    for k in refs:
        parts.append(f"for={body[k]}")
    for k, v in body.items():
        if k in refs:
            continue
        if isinstance(v, dict) and set(v) <= {"json", "metadata"} and "json" in v:
            v = decode(v)
            text = json.dumps(v, separators=(",", ":"))
        elif isinstance(v, dict) and k in ("failure", "lastFailure", "cause"):
            text = repr(v.get("message", ""))
            if v.get("type"):
                text += f" ({v['type']})"
        elif isinstance(v, (dict, list)):
            text = json.dumps(v, separators=(",", ":"))
        elif isinstance(v, str) and k.endswith(("At", "Timestamp")):
            ts = parse_timestamp(v)
            text = ts.strftime("%H:%M:%S.%f")[:-3] if ts else v
        else:
            text = str(v)
        parts.append(f"{k}={text}")
    return " ".join(parts)


def format_history(events: List[dict], width: int = 64,
                   sequences: Optional[Sequence[int]] = None) -> str:
    """``events`` as a table, one a line; ``seq`` is the event's sequence number if
    ``sequences`` gives them, else its position (from 1)."""
    rows = []
    for i, ev in zip(sequences if sequences is not None else range(1, len(events) + 1), events):
        k = event_kind(ev)
        ts = parse_timestamp(ev.get("timestamp"))
        details = _brief(k, ev.get(k) or {})
        if len(details) > width:
            details = details[:width - 1] + "…"
        rows.append((str(i), ts.strftime("%H:%M:%S.%f")[:-3] if ts else "",
                     k, str(ev.get("id", "")), details))
    head = ("seq", "at", "event", "id", "details")
    widths = [max(len(h), *(len(r[c]) for r in rows)) if rows else len(h)
              for c, h in enumerate(head)]
    line = lambda r: " | ".join(v.rjust(widths[c]) if c in (0, 3) else v.ljust(widths[c])
                                for c, v in enumerate(r)).rstrip()
    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([line(head), sep] + [line(r) for r in rows])
