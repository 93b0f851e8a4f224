"""The worker: polls workflow and activity queues, replays workflows, runs activities.

Threads, each with its own connection (autocommit):

* one poller per workflow queue: ``dex.poll_tasks`` (a batch), run each task (resumed
  from the workflow cache, or replayed from its history), ``dex.complete_tasks`` (one
  call for the batch); when a poll comes back empty, ``CALL dex.wait_for_tasks`` (the
  long poll: no statement while idle).  On a direct connection to a dex 1.5 or later, one
  ``CALL dex.poll_tasks_wait(_pb)`` instead completes the batch run, looks for the next one
  and waits only when there is none: one call and one transaction per batch;
* one poller per activity queue: leases as many tasks as there are free slots
  (``concurrency`` activities run at once, in a thread pool), long-polls when idle;
* one reporter: sends activity results and failures in batches
  (``dex.complete_tasks`` / ``dex.fail_tasks``) and extends the leases of running
  activities (``dex.heartbeat_tasks``) every third of the lease.  An activity that succeeds
  while the poller of its queue (the worker's only activity queue, on a direct connection to
  a dex 1.5 or later) waits for a free slot is handed to that poller instead: the ``CALL
  dex.poll_tasks_wait(_pb)`` that takes the next task completes it (one transaction less per
  activity when every slot is busy, as with ``concurrency=1``).

On SIGTERM (or :meth:`Worker.shutdown`) the pollers stop leasing, workflow tasks
in hand are completed, running activities get ``shutdown_timeout`` seconds to
finish and report; those still running then are failed as retryable
(``dex.WorkerShutdown``), so their retry does not wait for the lease to expire.

A queue that the server refuses at the first poll for a reason that polling again will not
mend (it does not exist or the role may not use it, 42704; a queue of the other kind; no dex in
the database, ...: SQLSTATE classes 42, 3F and 22) stops the worker: it says so in one line that names the queue and its kind,
and :meth:`Worker.run` raises the error (``python3 -m dex worker`` exits 1).  A queue refused
after it was polled is said once and tried again with backoff (1 s, doubling, up to 30 s).

Task calls use the protobuf forms (``dex.poll_tasks_pb``, ...) by default, or the JSON
forms (``wire="json"``); see _wire.py.

Every call is one statement in autocommit and no session state is kept between calls, so the
worker runs behind a connection pooler in transaction mode (PgBouncer) too; there its
connections must not use prepared statements (``pooled``, see _connect.py).  A waiting
long poll holds its server connection for the whole wait: the pool needs one per waiting
queue of every worker, plus room for the other connections.
"""

from __future__ import annotations

import asyncio
import logging
import os
import collections
import contextlib
import queue as _queue
import signal
import socket
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import psycopg
from psycopg.types.json import Jsonb

from . import errors
from ._connect import POOLER_HINT, connect as _connect_pooled, is_prepared_statement_error
from ._convert import decode, failure_from_exception, json_text
from ._wire import PROTOBUF, Declared, Wire, wire as _wire_named
from .registry import (ACTIVITIES, WORKFLOWS, ActivityDefinition, WorkflowDefinition,
                       activity_definition, register, workflow_definition)
from ._runtime import WorkflowTaskFailure, _Replayer, fail_run_command

log = logging.getLogger("dex.worker")

LEASE_LOST = "WD001"

# A queue the server refuses after it was polled (revoked, ...) is tried again after 1 s, then
# after twice as long each time, up to 30 s.
REFUSED_BACKOFF = (1.0, 30.0)

# The most names one poll may declare (the server's DEX_MAX_DECLARED)
DECLARE_MAX = 1000

# The wire form a worker uses unless told otherwise (Worker(wire=...)), as measured by
# clients/python/bench/wire.py (README, "Wire format"): protobuf is half the bytes or less
# and less server CPU for every task call, and with the workflow cache it is also less
# client CPU, since a cached run's history is skipped rather than decoded.  JSON costs
# less client CPU only for workflow tasks with long histories and no cache.
DEFAULT_WIRE = PROTOBUF


class ActivityInfo:
    """What an activity attempt is: its run, id, name, attempt number, previous failure."""

    def __init__(self, task: dict, lock_version: int) -> None:
        self.run_id: str = task.get("runId", "")
        self.task_id: int = int(task.get("taskId", 0))
        self.name: str = task.get("name", "")
        self.queue: str = task.get("queue", "")
        self.attempt: int = int(task.get("attempt", 1))
        self.lock_version = lock_version
        self.retry_policy: dict = task.get("retryPolicy") or {}
        self.last_failure: Optional[dict] = task.get("lastFailure")

    def __repr__(self) -> str:
        return f"<ActivityInfo {self.name} run={self.run_id} id={self.task_id} attempt={self.attempt}>"


class ActivityContext:
    """Available to activity code through :func:`dex.activity_context`."""

    def __init__(self, info: ActivityInfo, worker: "Worker") -> None:
        self.info = info
        self._worker = worker
        self.lease_lost = False

    @property
    def shutting_down(self) -> bool:
        """True once the worker was asked to stop: long activities may wind up early."""
        return self._worker._stopping.is_set()

    def heartbeat(self) -> None:
        """The worker extends leases by itself while the activity runs; this raises
        :class:`dex.LeaseLost` if the lease was lost (the result would be discarded)."""
        if self.lease_lost:
            raise errors.LeaseLost(f"the lease of activity {self.info.name} (id "
                                   f"{self.info.task_id}) of run {self.info.run_id} was lost")


_local = threading.local()


def activity_context() -> ActivityContext:
    """The context of the activity running in this thread."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise RuntimeError("not in an activity")
    return ctx


class _Running:
    """An activity task this worker holds."""

    def __init__(self, row: Tuple, task: dict, worker: "Worker",
                 queue: Optional[str] = None) -> None:
        run_id, task_id, lock_version, _ = row
        self.queue = queue                  # the activity queue whose poller leased it
        self.run_id = run_id
        self.task_id = task_id
        self.lock_version = lock_version
        self.task = task
        self.ctx = ActivityContext(ActivityInfo(task, lock_version), worker)
        self.outcome: Optional[Tuple[str, Any]] = None   # ("complete", value) | ("fail", failure)
        self.reported = False
        self.finished = False
        # its outcome was handed to the poller of its queue, to be sent with its next CALL
        # (no heartbeats then: the task may be completed while the call waits)
        self.handed = False
        # that CALL failed and its outcome may have been applied: a lost lease when it is
        # sent again is then no news (neither counted nor said)
        self.maybe_applied = False

    @property
    def key(self) -> Tuple[Any, int]:
        return (self.run_id, self.task_id)


class WorkflowCache:
    """The workflow state of recently run runs (sticky execution), least recently used out.

    A run's state is taken out while one of its tasks is being run and put back only after
    the engine accepted that task's completion, so an entry always stands for a history that
    ends with this worker's last completion.  Whatever else happened to the run meanwhile
    shows up as a history that does not continue where the state left off, and the task is
    replayed from scratch (see ``_Replayer.resume``)."""

    def __init__(self, size: int) -> None:
        self.size = max(0, int(size))
        self._runs: "collections.OrderedDict[Any, _Replayer]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: Any) -> bool:
        return run_id in self._runs

    def take(self, run_id: Any) -> Optional[_Replayer]:
        with self._lock:
            return self._runs.pop(run_id, None)

    def put(self, run_id: Any, state: _Replayer) -> None:
        if self.size == 0 or state.finished:
            state.close()
            return
        with self._lock:
            old = self._runs.pop(run_id, None)
            self._runs[run_id] = state
            evicted = [self._runs.popitem(last=False)[1] for _ in
                       range(len(self._runs) - self.size)]
        for s in ([old] if old is not None and old is not state else []) + evicted:
            s.close()

    def clear(self) -> None:
        with self._lock:
            states, self._runs = list(self._runs.values()), collections.OrderedDict()
        for s in states:
            s.close()


def _sqlstate(e: BaseException) -> Optional[str]:
    return getattr(e, "sqlstate", None)


def _connection_error(e: BaseException) -> bool:
    """Whether ``e`` is about the connection rather than the call: the connection was lost
    (no SQLSTATE), or a prepared statement of psycopg's is not in the server session (a
    transaction pool, see _connect.py).  The call did not run or its outcome is unknown:
    it must not be taken for the engine refusing what was sent."""
    return ((isinstance(e, psycopg.OperationalError) and not _sqlstate(e))
            or is_prepared_statement_error(e))


def _refused_for_good(e: BaseException) -> bool:
    """Whether the server refused a call of a poller for a reason that calling again will not
    mend: the queue does not exist or the role may not use it (42704), a queue of the wrong
    kind (42809; with dex 1.6, a poll that declares workflows on an activity queue or the
    other way round is 22023), no privilege (42501), dex is not installed in the database
    (3F000) or has not the routine (42883): SQLSTATE classes 42, 3F and 22 (what escapes a
    poller's loop is its polls' and waits': it deals with refused completions itself)."""
    return isinstance(e, psycopg.Error) and (_sqlstate(e) or "")[:2] in ("42", "3F", "22")


def _queue_error(kind: str, queue: str, e: BaseException) -> errors.ServerError:
    """The :class:`dex.ServerError` for ``e``, refused on a queue, in one line that names the
    queue and its kind (and, for a queue that does not exist, how to create it)."""
    error = errors.server_error(e)
    error.__cause__ = e
    other = "activity" if kind == "workflow" else "workflow"
    if f'{other} queue "{queue}"' in error.message:
        # a queue of the other kind, whatever the SQLSTATE (22023 for what a poll declares)
        error = errors.WrongKind(error.message, sqlstate=error.sqlstate, detail=error.detail,
                                 hint=error.hint)
        error.__cause__ = e
        hint = (f"; it is {'an' if other == 'activity' else 'a'} {other} queue: give it as "
                f"one (python3 -m dex worker -{other[0]} {queue}, or "
                f"Worker({other}_queues=[...]))")
    elif error.sqlstate == "42704" and error.hint is None and f'queue "{queue}"' in error.message:
        hint = f"; create it first: SELECT dex.create_queue('{queue}', '{kind}')"
    else:
        hint = ""
    error.args = (f"{kind} queue {queue!r}: " + str(error).replace("\n", "; ") + hint,)
    return error


class Worker:
    """Runs the registered workflows and activities of some queues.

    ``conninfo`` is a libpq connection string ('' takes PGHOST, PGDATABASE, ...).
    Workflows and activities default to every ``@dex.workflow`` / ``@dex.activity``
    imported so far; pass ``workflows=`` / ``activities=`` to choose.

    ``wire`` is the form of the task calls: ``"protobuf"`` (the default: ``dex.poll_tasks_pb``
    and friends, the cheaper form as measured) or ``"json"``.  ``workflow_cache_size`` is how
    many runs' workflow state the worker keeps between their tasks, so that a run's next task
    runs only its new step instead of replaying the whole history (0 turns it off).

    ``pooled`` says whether the connections go through a connection pooler in transaction
    mode (PgBouncer's ``pool_mode = transaction``), where psycopg's prepared statements do not
    survive from one transaction to the next: ``True`` turns them off, ``False`` keeps them
    (a direct connection), ``None`` (the default) turns them off when a pooler is detected
    (see :attr:`behind_pooler`).
    """

    def __init__(self, conninfo: str = "", workflow_queues: Sequence[str] = (),
                 activity_queues: Sequence[str] = (), concurrency: int = 10, *,
                 workflows: Optional[Iterable[Any]] = None,
                 activities: Optional[Iterable[Any]] = None,
                 worker_id: Optional[str] = None, max_batch: int = 100,
                 workflow_lease: float = 10.0, activity_lease: float = 30.0,
                 poll_timeout: float = 30.0, shutdown_timeout: float = 30.0,
                 default_activity_queue: Optional[str] = None,
                 wire: Optional[str] = None, workflow_cache_size: int = 1000,
                 pooled: Optional[bool] = None) -> None:
        if isinstance(workflow_queues, str):
            workflow_queues = [workflow_queues]
        if isinstance(activity_queues, str):
            activity_queues = [activity_queues]
        if not workflow_queues and not activity_queues:
            raise ValueError("a worker needs at least one workflow or activity queue")
        self.conninfo = conninfo
        self.pooled = pooled
        # whether the connections run without prepared statements, as pooled ones: known once
        # the first one is made (with pooled=None, whether a pooler was detected)
        self.behind_pooler: Optional[bool] = None if pooled is None else bool(pooled)
        self.workflow_queues = list(workflow_queues)
        self.activity_queues = list(activity_queues)
        self.concurrency = max(1, int(concurrency))
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.max_batch = max(1, min(int(max_batch), 1000))
        self.workflow_lease = float(workflow_lease)
        self.activity_lease = float(activity_lease)
        self.poll_timeout = float(poll_timeout)
        self.shutdown_timeout = float(shutdown_timeout)
        self.default_activity_queue = default_activity_queue or (
            self.activity_queues[0] if self.activity_queues else None)
        self._wire: Wire = _wire_named(wire or DEFAULT_WIRE)
        self.wire = self._wire.name
        self.cache = WorkflowCache(workflow_cache_size)
        if workflows is None:
            self._workflows: Dict[Tuple[str, int], WorkflowDefinition] = WORKFLOWS
        else:
            self._workflows = {}
            for w in workflows:
                register(self._workflows, workflow_definition(w))
        if activities is None:
            self._activities: Dict[str, ActivityDefinition] = ACTIVITIES
        else:
            self._activities = {}
            for a in activities:
                register(self._activities, activity_definition(a))

        self._stopping = threading.Event()       # no more leasing
        self._stop_requested = threading.Event()  # SIGTERM / SIGINT seen
        self._threads: List[threading.Thread] = []
        self._reporter: Optional[threading.Thread] = None
        self._executor: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        self._slots = threading.Condition(self._lock)
        self._free = self.concurrency
        self._inflight: Dict[Tuple[Any, int], _Running] = {}
        self._results: "_queue.Queue[Optional[_Running]]" = _queue.Queue()
        # per activity queue whose poller waits for a free slot (_reserve) and whose next call
        # may carry completions: the successful outcomes handed to it meanwhile (_finish)
        self._carry: Dict[str, List[_Running]] = {}
        # connections whose call may sleep in the server, and whether dex.stop_waiting ends it
        # (a CALL dex.poll_tasks_wait) or only a cancel does (dex.wait_for_tasks)
        self._waiting: Dict[psycopg.Connection, bool] = {}
        self._stopper: Optional[psycopg.Connection] = None    # shutdown's, for dex.stop_waiting
        self._can_stop_waits = True              # False: the installed dex has no stop_waiting
        # per connection, whether an idle poller may take its tasks with one CALL
        # dex.poll_tasks_wait(_pb) (None: not checked yet); False for pooled connections
        self._poll_wait_ok: "weakref.WeakKeyDictionary[psycopg.Connection, Optional[bool]]" = \
            weakref.WeakKeyDictionary()
        self._use_poll_wait = True               # private: False forces the two-call path
        # per connection, what the installed dex's polls take (Wire.api_level): worker_cache
        # (1.5: incremental histories), names and versions (1.6: what the worker runs)
        self._api_levels: "weakref.WeakKeyDictionary[psycopg.Connection, Tuple[int, bool]]" = \
            weakref.WeakKeyDictionary()
        # per connection, whether dex.heartbeat_tasks takes the tasks' queue (1.5)
        self._heartbeat_by_queue: "weakref.WeakKeyDictionary[psycopg.Connection, bool]" = \
            weakref.WeakKeyDictionary()
        self._parts: Dict[bool, int] = {}      # pollers per queue, by kind (workflow: True)
        # the queues a call of this worker's polled (its refusals are retried, not fatal):
        # marked as each poll returns, not as the loop's turn ends, which with the one-call
        # wait takes as long as tasks keep coming
        self._polled: Set[str] = set()
        self._started = False
        # what stopped the worker by itself (a queue that does not exist, ...): run() raises it
        self.error: Optional[errors.DexError] = None
        # counters, for tests and curious people
        # (activity_completions_in_poll: activity outcomes the pollers' CALLs carried;
        # reporter_calls: the reporter's completion and failure calls; workflow_complete_calls:
        # the workflow pollers' dex.complete_tasks calls)
        self.stats = {"workflow_tasks": 0, "activities_completed": 0, "activities_failed": 0,
                      "leases_lost": 0, "full_replays": 0, "cache_hits": 0, "cache_stale": 0,
                      "history_reads": 0, "activity_completions_in_poll": 0,
                      "reporter_calls": 0, "workflow_complete_calls": 0,
                      "activities_abandoned": 0}

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self) -> "Worker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def start(self) -> "Worker":
        """Start polling in background threads; returns at once."""
        if self._started:
            return self
        self._parts = {True: self._declaration_parts(True), False: self._declaration_parts(False)}
        if not self._parts[True] and not self._parts[False]:
            raise errors.DexError(f"worker {self.worker_id} has nothing to run: no workflows for "
                                  f"its workflow queues {self.workflow_queues} and no activities "
                                  f"for its activity queues {self.activity_queues}")
        self._started = True
        if self._parts[False]:
            self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="dex-activity")
            self._reporter = threading.Thread(target=self._guard, args=(self._reporter_loop,),
                                              name="dex-reporter", daemon=True)
            self._reporter.start()
        for workflow, queues, loop, prefix in (
                (True, self.workflow_queues, self._workflow_loop, "wf"),
                (False, self.activity_queues, self._activity_loop, "act")):
            for q in queues:
                for part in range(self._parts[workflow]):
                    self._spawn(loop, q, part, f"dex-{prefix}-{q}" + (f"-{part}" if part else ""))
        log.info("worker %s started: workflow queues %s, activity queues %s, concurrency %d",
                 self.worker_id, self.workflow_queues, self.activity_queues, self.concurrency)
        return self

    def run(self) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully.  A worker that cannot poll
        one of its queues (it does not exist, ...) stops by itself: this raises that error
        (:attr:`error`, a :class:`dex.ServerError`)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stop_requested.set())
        self.start()
        try:
            while not self._stop_requested.wait(0.5):
                pass
        finally:
            log.info("worker %s: shutting down", self.worker_id)
            self.shutdown()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Ask :meth:`run` to return (thread-safe, signal-safe)."""
        self._stop_requested.set()

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Stop leasing, finish what is in hand, wait for running activities (up to
        ``timeout``, default ``shutdown_timeout``), fail the rest as retryable."""
        if not self._started:
            return
        self._stopping.set()
        with self._slots:
            self._slots.notify_all()
        # end the long polls; again and again, in case one was just entering its CALL
        while any(t.is_alive() for t in self._threads):
            self._cancel_waits()
            for t in self._threads:
                t.join(0.2)
        self._close_stopper()
        deadline = time.monotonic() + (self.shutdown_timeout if timeout is None else timeout)
        while time.monotonic() < deadline:
            with self._lock:
                busy = [r for r in self._inflight.values() if not r.reported]
            if not busy:
                break
            time.sleep(0.05)
        with self._lock:
            abandoned = [r for r in self._inflight.values() if not r.finished and not r.reported]
        self.stats["activities_abandoned"] += len(abandoned)
        for r in abandoned:
            log.warning("activity %s (id %s) of run %s still running at shutdown: failing it as "
                        "retryable (its code goes on until it returns: a process that does not "
                        "want to wait for it ends with os._exit)", r.ctx.info.name, r.task_id,
                        r.run_id)
            self._report(r, ("fail", {"message": "the worker shut down before the activity "
                                      "finished", "type": "dex.WorkerShutdown"}))
        if self._reporter is not None:
            self._results.put(None)
            self._reporter.join(30)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self.cache.clear()
        self._started = False
        log.info("worker %s stopped", self.worker_id)

    def _fail(self, error: errors.DexError) -> None:
        """Stop the worker for an error that polling again would not mend: say it in one line,
        and keep it (the first one) as :attr:`error`, which :meth:`run` raises."""
        with self._lock:
            if self.error is None:
                self.error = error
        log.error("%s; the worker stops", error)
        self._stopping.set()
        self._stop_requested.set()
        with self._slots:
            self._slots.notify_all()

    def _spawn(self, fn: Any, q: str, part: int, name: str) -> None:
        t = threading.Thread(target=self._guard, args=(fn, q, part), name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException:
            log.exception("worker thread %s died", threading.current_thread().name)

    # -- connections -------------------------------------------------------
    def _connect(self) -> psycopg.Connection:
        while True:
            try:
                conn, pooled = _connect_pooled(
                    self.conninfo, self.pooled,
                    application_name=f"dex worker {self.worker_id}"[:63])
                with self._lock:        # the threads connect at the same time: say it once
                    first = self.pooled is None and pooled and not self.behind_pooler
                    self.behind_pooler = pooled
                    self._poll_wait_ok[conn] = False if pooled else None
                if first:
                    log.info("worker %s: the connection goes through a connection pooler; "
                             "prepared statements are off", self.worker_id)
                return conn
            except psycopg.OperationalError as e:
                if self._stopping.is_set():
                    raise
                log.warning("cannot connect (%s); retrying in 1 s", e)
                time.sleep(1)

    def _cancel_waits(self) -> None:
        """End the calls sleeping in the server: ``dex.stop_waiting`` (1.6) ends this worker's
        ``CALL dex.poll_tasks_wait`` as at its timeout, leaving nothing in the server's log; a
        call it cannot end (``dex.wait_for_tasks``, or a dex without it) is cancelled, which
        the server logs as an error.  Shutdown calls this until its threads are done, so a
        call that entered its wait after one round is ended by the next."""
        with self._lock:
            waits = dict(self._waiting)
        if not waits:
            return
        stopped = any(waits.values()) and self._stop_waits()
        for c, stoppable in waits.items():
            if stoppable and stopped:
                continue
            try:
                c.cancel()
            except Exception:
                pass

    def _stop_waits(self) -> bool:
        """``SELECT dex.stop_waiting(worker_id)`` on a connection of its own; whether it
        ran."""
        if not self._can_stop_waits:
            return False
        try:
            if self._stopper is None or self._stopper.closed:
                self._stopper, _ = _connect_pooled(
                    self.conninfo, self.pooled,
                    application_name=f"dex worker {self.worker_id} (stop)"[:63])
            self._stopper.execute("SELECT dex.stop_waiting(%s)", (self.worker_id,), prepare=False)
            return True
        except psycopg.errors.UndefinedFunction:
            self._can_stop_waits = False            # a dex before 1.6
        except psycopg.Error as e:
            log.warning("worker %s: dex.stop_waiting failed (%s); cancelling the waits",
                        self.worker_id, e)
        return False

    def _close_stopper(self) -> None:
        if self._stopper is not None:
            try:
                self._stopper.close()
            except Exception:
                pass
            self._stopper = None

    @contextlib.contextmanager
    def _waiting_on(self, conn: psycopg.Connection, stoppable: bool = False) -> Iterator[None]:
        """While a call on the connection may sleep in the server: shutdown ends it
        (:meth:`_cancel_waits`); ``stoppable``: a ``CALL dex.poll_tasks_wait``, which
        ``dex.stop_waiting`` ends."""
        with self._lock:
            self._waiting[conn] = stoppable
        try:
            yield
        finally:
            with self._lock:
                self._waiting.pop(conn, None)

    def _long_poll(self, conn: psycopg.Connection, queue: str) -> None:
        with self._waiting_on(conn):
            try:
                if self._stopping.is_set():
                    return
                conn.execute("CALL dex.wait_for_tasks(%s, %s::interval)",
                             (queue, f"{self.poll_timeout} seconds"))
            except psycopg.errors.QueryCanceled:
                if not self._stopping.is_set():
                    raise

    def _can_poll_wait(self, conn: psycopg.Connection) -> bool:
        """Whether the connection may poll and long-poll in one ``CALL
        dex.poll_tasks_wait(_pb)``: the installed dex has it (1.4; checked once per
        connection), and the connection is in autocommit and not pooled (behind a
        transaction pool a long CALL would hold one of the pool's server connections; there
        the two-call path stays, dex.poll_tasks + CALL dex.wait_for_tasks)."""
        if not self._use_poll_wait:
            return False
        with self._lock:
            ok = self._poll_wait_ok.get(conn, False)
        if ok is None:
            # and a direct connection, whatever ``pooled`` says (pooled=False skips the
            # pooler check): the backend runs its statements (as _connect.behind_pooler)
            pid = conn.execute("SELECT pg_catalog.pg_backend_pid()", prepare=False).fetchone()[0]
            ok = bool(conn.autocommit and self._api_level(conn)[1] and pid == conn.info.backend_pid)
            with self._lock:
                self._poll_wait_ok[conn] = ok
        return ok

    def _has_routines(self, conn: psycopg.Connection,
                      known: "weakref.WeakKeyDictionary[psycopg.Connection, bool]",
                      *signatures: str) -> bool:
        """Whether the installed dex has all these routines (to_regprocedure signatures),
        looked up once per connection and kept in ``known``."""
        with self._lock:
            ok = known.get(conn)
        if ok is None:
            ok = bool(conn.execute(
                "SELECT " + " AND ".join(["to_regprocedure(%s) IS NOT NULL"] * len(signatures)),
                signatures, prepare=False).fetchone()[0])
            with self._lock:
                known[conn] = ok
        return ok

    def _api_level(self, conn: psycopg.Connection) -> Tuple[int, bool]:
        """What the installed dex's polls take (:meth:`Wire.api_level`), looked up once per
        connection."""
        with self._lock:
            level = self._api_levels.get(conn)
        if level is None:
            level = self._wire.api_level(conn)
            with self._lock:
                self._api_levels[conn] = level
        return level

    def _worker_cache(self, conn: psycopg.Connection) -> bool:
        """Whether this worker's workflow polls on the connection ask for incremental
        histories (dex 1.5's ``worker_cache``): it keeps run states (a workflow cache) and the
        installed dex has the argument (and the one-call wait that takes completions)."""
        return self.cache.size > 0 and self._poll_completes(conn)

    def _declaration_parts(self, workflow: bool) -> int:
        """How many pollers each queue of the kind gets: one per DECLARE_MAX of what the
        worker runs of that kind (a poll declares at most that many), none when it runs
        nothing of it (said once: those queues are not polled)."""
        queues = self.workflow_queues if workflow else self.activity_queues
        n = len(self._workflows if workflow else self._activities)
        if queues and n == 0:
            log.warning("worker %s has no %s: it does not poll its %s queues %s", self.worker_id,
                        "workflows" if workflow else "activities",
                        "workflow" if workflow else "activity", queues)
        return -(-n // DECLARE_MAX) if queues else 0

    def _declared(self, conn: psycopg.Connection, workflow: bool, part: int) -> Declared:
        """What the polls of a poller declare it runs (dex 1.6), so that the server hands it
        nothing else: part ``part`` (DECLARE_MAX each, see :meth:`_declaration_parts`) of the
        (name, version) pairs of the worker's workflows on a workflow queue, of the names of
        its activities on an activity queue.  None (every task) when the installed dex
        cannot take it (before 1.6)."""
        if self._api_level(conn)[0] < 7:
            return None
        part_of = slice(part * DECLARE_MAX, (part + 1) * DECLARE_MAX)
        if workflow:
            keys = sorted(self._workflows)[part_of]
            return [k[0] for k in keys], [k[1] for k in keys]
        return sorted(self._activities)[part_of], None

    def _poll_wait(self, conn: psycopg.Connection, queue: str, n: int, lease: float,
                   workflow: bool, part: int) -> List[Tuple]:
        """Lease up to ``n`` tasks, waiting for some (up to ``poll_timeout``) in the same
        call; shutdown cancels the wait as it does ``_long_poll``'s (no task is leased then).
        The first call of a queue does not wait: a refusal that stops the worker
        (:meth:`_polling`) is then one the server made at once, not a revoke that came while
        the call waited."""
        with self._waiting_on(conn, stoppable=True):
            try:
                if self._stopping.is_set():
                    return []
                rows = self._wire.poll_wait(
                    conn, queue, self.worker_id, n, lease,
                    self.poll_timeout if queue in self._polled else 0, workflow,
                    workflow and self._worker_cache(conn), self._declared(conn, workflow, part))
            except psycopg.errors.QueryCanceled:
                if not self._stopping.is_set():
                    raise
                return []
        self._polled.add(queue)
        return rows

    def _polling(self, body: Any, queue: str, kind: str) -> None:
        """Run ``body(conn)`` until stopping; reconnect after connection errors.  A call the
        server refuses for good (:func:`_refused_for_good`: the queue does not exist, ...)
        stops the worker if the queue was never polled (:meth:`_fail`), and is said once, in
        a line, and retried with backoff if it was."""
        conn: Optional[psycopg.Connection] = None
        refused: Optional[str] = None       # what the server says, while it refuses
        delay = REFUSED_BACKOFF[0]
        while not self._stopping.is_set():
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                body(conn)
                self._polled.add(queue)
                if refused is not None:
                    log.info("%s queue %r: polled again", kind, queue)
                    refused, delay = None, REFUSED_BACKOFF[0]
            except psycopg.OperationalError as e:
                if self._stopping.is_set():
                    break
                log.warning("queue %s: connection problem (%s); reconnecting", queue, e)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.5)
            except Exception as e:
                if self._stopping.is_set():
                    break
                if is_prepared_statement_error(e):
                    # nothing ran; a new connection starts with no prepared statements
                    log.error("queue %s: %s; %s; reconnecting", queue, e, POOLER_HINT)
                    if conn is not None:
                        conn.close()
                    conn = None
                elif _refused_for_good(e):
                    error = _queue_error(kind, queue, e)
                    if queue not in self._polled:
                        self._fail(error)
                        break
                    if str(error) != refused:
                        refused = str(error)
                        log.error("%s; trying again, less and less often", error)
                    self._stopping.wait(delay)
                    delay = min(2 * delay, REFUSED_BACKOFF[1])
                    continue
                else:
                    log.exception("queue %s: unexpected error; going on in 1 s", queue)
                time.sleep(1)
        if conn is not None:
            conn.close()

    # -- workflow tasks ------------------------------------------------------
    def _workflow_loop(self, queue: str, part: int) -> None:
        # the last poll did not fill a batch: the next one may wait.  With the one-call
        # wait that poll looks first, so a batch it did not fill goes straight to it (one
        # call, where a plain poll that finds nothing would cost a call more)
        idle = False

        def body(conn: psycopg.Connection) -> None:
            nonlocal idle
            if self._can_poll_wait(conn) and (idle or self._worker_cache(conn)):
                # the poll and the long poll in one call; with incremental histories (1.5)
                # the tasks it returns are completed by the next such call, which takes the
                # ones after them: it looks first and waits only when there are none, so a
                # full batch goes to it too (one call and one transaction, where
                # dex.complete_tasks and a plain poll are two)
                deferred = self._worker_cache(conn)
                rows = self._poll_wait(conn, queue, self.max_batch, self.workflow_lease, True, part)
                while rows:
                    if not deferred or self._stopping.is_set():
                        self._workflow_batch(conn, queue, part, rows)
                        break
                    rows = self._complete_and_poll_wait(conn, queue, part, rows)
                idle = not rows or len(rows) < self.max_batch
                return
            n = self._workflow_batch(conn, queue, part)
            if n == 0 and not self._can_poll_wait(conn):
                self._long_poll(conn, queue)
            idle = n < self.max_batch if self._can_poll_wait(conn) else n == 0
        self._polling(body, queue, "workflow")

    def _complete_and_poll_wait(self, conn: psycopg.Connection, queue: str, part: int,
                                rows: List[Tuple]) -> List[Tuple]:
        """Run the leased workflow tasks, then complete them and wait for the next ones in
        one CALL (dex 1.5); the rows it leased.  A completion the engine refuses (invalid
        commands) fails that call, which then changed nothing: the tasks are completed as
        :meth:`_workflow_batch` does, and the next ones polled with the plain one-call wait."""
        done, results, states = self._run_workflow_tasks(conn, rows)
        if not done:
            return self._poll_wait(conn, queue, self.max_batch, self.workflow_lease, True, part)
        wire = self._wire
        try:
            with self._waiting_on(conn, stoppable=True):
                leased, applied = wire.complete_and_poll_wait(
                    conn, queue, self.worker_id, self.max_batch, self.workflow_lease,
                    self.poll_timeout, done, [wire.commands(c) for c in results],
                    self._declared(conn, True, part))
        except psycopg.errors.Error as e:
            for_shutdown = isinstance(e, psycopg.errors.QueryCanceled) and self._stopping.is_set()
            if _connection_error(e) or isinstance(e, psycopg.errors.QueryCanceled):
                for s in states:            # applied or not, unknown: keep nothing
                    s.close()
                if not for_shutdown:
                    raise
                # shutdown cancelled the call, perhaps before its completions: make them
                # (those it made are refused now as lost leases, harmlessly)
                try:
                    wire.complete(conn, done, [wire.commands(c) for c in results])
                except psycopg.errors.Error:
                    log.warning("shutdown: %d workflow task(s) left to their leases", len(done))
                return []
            log.warning("completion with the poll refused (%s); completing apart", e)
            self._complete_workflow_tasks(conn, done, results, states)
            return self._poll_wait(conn, queue, self.max_batch, self.workflow_lease, True, part)
        self._settle_workflow_tasks(done, states, {r[0] for r, ok in zip(done, applied) if ok})
        return leased

    def _workflow_batch(self, conn: psycopg.Connection, queue: str, part: int,
                        rows: Optional[List[Tuple]] = None) -> int:
        """Poll a batch of workflow tasks (unless given), run them, complete them in one
        call; how many tasks were polled."""
        wire = self._wire
        if rows is None:
            rows = wire.poll(conn, queue, self.worker_id, self.max_batch, self.workflow_lease,
                             self._worker_cache(conn), self._declared(conn, True, part))
            self._polled.add(queue)
        done, results, states = self._run_workflow_tasks(conn, rows)
        if done:
            self._complete_workflow_tasks(conn, done, results, states)
        return len(rows)

    def _run_workflow_tasks(self, conn: psycopg.Connection, rows: List[Tuple]
                            ) -> Tuple[List[Tuple], List[List[dict]], List[_Replayer]]:
        """Run the leased workflow tasks: the rows run, their commands and states (a task
        the SDK could not run is left to its lease; one whose replay met a patch that the
        code does not match is failed, to be retried after a backoff)."""
        wire = self._wire
        done, results, states = [], [], []
        failed, failures = [], []
        for row in rows:
            try:
                state, cmds = self._run_workflow_task(row[0], row[3], wire, conn)
            except WorkflowTaskFailure as e:
                failed.append(row)
                failures.append(wire.failure(e.failure))
                continue
            except Exception:       # a bug of the SDK: leave the task to its lease
                log.exception("run %s: replay failed; its workflow task is left to expire",
                              row[0])
                continue
            done.append(row)
            results.append(cmds)
            states.append(state)
        if failed:
            try:
                wire.complete(conn, failed, failures, fail=True)
            except psycopg.errors.Error as e:
                if _connection_error(e):
                    raise
                # refused (a failure too large, ...): they fail when their leases expire
                log.error("%d workflow task(s) could not be failed (%s); left to their leases",
                          len(failed), e)
        return done, results, states

    def _run_workflow_task(self, run_id: Any, raw: Any, wire: Wire,
                           conn: Optional[psycopg.Connection] = None) -> Tuple[_Replayer, List[dict]]:
        """The run's workflow state after the task, and the task's commands: resumed from
        the cache when the run's state is there and the history continues where it left off,
        else replayed from the whole history (read with ``conn`` when the task left out the
        part this worker had seen, and the state is gone)."""
        state = self.cache.take(run_id)
        task: Optional[dict] = None
        omitted = wire.history_omitted(raw)
        if state is not None:
            # the history in the message starts after the omitted events; skip, undecoded,
            # those of them the state has seen
            task, skipped = wire.workflow_task(raw, max(0, state.history_seen - omitted))
            try:
                cmds = state.resume(task, task.get("history") or [], omitted + skipped)
            except WorkflowTaskFailure:
                state.close()
                raise
            except Exception:           # a bug of the SDK: the full replay may do better
                log.exception("run %s: resuming its cached state failed; replaying", run_id)
                cmds = None
            if cmds is not None:
                self.stats["cache_hits"] += 1
                return state, cmds
            state.close()
            self.stats["cache_stale"] += 1
            if skipped:
                task = None
        if task is None:
            task, _ = wire.workflow_task(raw)
        if omitted:
            task = self._whole_task(conn, run_id, task, wire)
        state = self._replayer(task)
        try:
            cmds = state.run(task)
        except BaseException:
            state.close()
            raise
        self.stats["full_replays"] += 1
        return state, cmds

    def _whole_task(self, conn: Optional[psycopg.Connection], run_id: Any, task: dict,
                    wire: Wire) -> dict:
        """The task with its whole history, for a task that left out events this worker no
        longer has (its cached state was evicted, or the worker restarted under the same id).
        The history read is the one the task was leased at: only its completion adds to it."""
        if conn is None:
            raise RuntimeError(f"run {run_id}: the task left out its history and no connection "
                               "was given to read it")
        length = int(task.get("historyLength") or 0)
        history = wire.run_history(conn, run_id)
        if len(history) < length:
            raise RuntimeError(f"run {run_id}: its history has {len(history)} events, the task "
                               f"says {length}")
        self.stats["history_reads"] += 1
        return dict(task, history=history[:length], historyOmitted=0)

    def _replayer(self, task: dict) -> _Replayer:
        d = self._workflows.get((task.get("workflowName", ""), int(task.get("workflowVersion", 1))))
        return _Replayer(d, self.default_activity_queue)

    def run_workflow_task(self, task: dict) -> List[dict]:
        """The commands for one workflow task (dex.v1.WorkflowTask as JSON), replayed from
        its whole history (the cache is neither used nor filled)."""
        state = self._replayer(task)
        try:
            return state.run(task)
        finally:
            state.close()

    def _complete_workflow_tasks(self, conn: psycopg.Connection, rows: List[Tuple],
                                 results: List[List[dict]], states: List[_Replayer]) -> None:
        wire = self._wire
        try:
            self.stats["workflow_complete_calls"] += 1
            done = wire.complete(conn, rows, [wire.commands(c) for c in results])
        except psycopg.errors.Error as e:
            for s in states:
                s.close()
            if _connection_error(e):
                raise
            # a completion was refused (invalid commands): one by one, to find it
            log.warning("batch completion refused (%s); completing one by one", e)
            for row, cmds in zip(rows, results):
                self._complete_one_workflow_task(conn, row, cmds)
            return
        self._settle_workflow_tasks(rows, states, {d[0] for d in done if d[2]})

    def _settle_workflow_tasks(self, rows: List[Tuple], states: List[_Replayer],
                               completed: set) -> None:
        """After a completion call: keep the state of each run whose task the engine
        completed (ids in ``completed``), drop the others' (their leases were lost)."""
        self.stats["workflow_tasks"] += len(completed)
        for row, state in zip(rows, states):
            if row[0] in completed:
                self.cache.put(row[0], state)       # closes it when it is not to be kept
            else:
                state.close()
                self.stats["leases_lost"] += 1
                log.warning("workflow task of run %s: lease lost, result discarded", row[0])

    def _complete_one_workflow_task(self, conn: psycopg.Connection, row: Tuple,
                                    cmds: List[dict]) -> None:
        run_id, task_id, lv, _ = row
        for attempt in (cmds, None):
            if attempt is None:
                attempt = [fail_run_command(f"the engine refused the workflow's commands: {msg}",
                                            "dex.InvalidCommands")]
            try:
                conn.execute("SELECT dex.complete_task(%s, %s, %s, %s)",
                             (run_id, task_id, lv, Jsonb(attempt)))
                self.stats["workflow_tasks"] += 1
                return
            except psycopg.errors.Error as e:
                if _sqlstate(e) == LEASE_LOST:
                    self.stats["leases_lost"] += 1
                    log.warning("workflow task of run %s: lease lost, result discarded", run_id)
                    return
                if _connection_error(e):
                    raise
                msg = f"{e.sqlstate}: {e.diag.message_primary}"
                log.error("run %s: completion refused: %s", run_id, msg)
        log.error("run %s: could not complete its workflow task", run_id)

    # -- activity tasks ------------------------------------------------------
    def _reserve(self, carry: Optional[str] = None) -> Tuple[int, List[_Running]]:
        """Take the free slots (up to ``max_batch``), waiting for one: how many (0 when the
        worker stops), and, with ``carry`` (the poller's queue), the successful outcomes of that
        queue's activities handed to the poller while it waited (see :meth:`_finish`), for its
        next call to carry.  They are the caller's to send or to pass to the reporter."""
        held: List[_Running] = []
        with self._slots:
            try:
                while self._free == 0 and not self._stopping.is_set():
                    if carry is not None:
                        self._carry[carry] = held
                    self._slots.wait(1)
            finally:
                if carry is not None:
                    self._carry.pop(carry, None)
            if self._stopping.is_set():
                return 0, held
            n = min(self._free, self.max_batch)
            self._free -= n
            return n, held

    def _release(self, n: int) -> None:
        if n:
            with self._slots:
                self._free += n
                self._slots.notify_all()

    def _activity_loop(self, queue: str, part: int) -> None:
        wire = self._wire
        idle = False            # the last poll found nothing
        # the one-call wait holds its reserved slots while it waits: only when no other
        # activity queue of this worker shares them
        one_queue = len(self.activity_queues) * self._parts[False] == 1

        def body(conn: psycopg.Connection) -> None:
            nonlocal idle
            # outcomes handed to this poller while it waits for a slot are carried by its
            # next CALL, which looks for tasks first (returning at once when there are some):
            # with some in hand it CALLs, even after a poll that filled its batch
            call = one_queue and self._can_poll_wait(conn)
            n, held = self._reserve(queue if call and self._poll_completes(conn) else None)
            try:
                if n == 0:
                    return
                if call and (idle or held):
                    rows = self._complete_activities_and_poll_wait(conn, queue, part, n, held)
                else:
                    self._resend(held)      # (none: they would have made it CALL)
                    rows = wire.poll(conn, queue, self.worker_id, n, self.activity_lease,
                                     declared=self._declared(conn, False, part))
                    self._polled.add(queue)
            except BaseException:
                self._release(n)
                raise
            finally:
                self._resend(held)          # what no call took (stopping, ...): not lost
            self._release(n - len(rows))
            # a batch not filled: the one-call wait looks first, so it goes to it
            idle = len(rows) < n if one_queue and self._can_poll_wait(conn) else not rows
            for row in rows:
                try:
                    task = wire.activity_task(row[3])
                except Exception:       # left to its lease, which fails the attempt
                    self._release(1)
                    log.exception("run %s: activity task %s cannot be decoded", row[0], row[1])
                    continue
                r = _Running(row, task, self, queue)
                with self._lock:
                    self._inflight[r.key] = r
                self._executor.submit(self._execute, r)
            if not rows and not (one_queue and self._can_poll_wait(conn)):
                self._long_poll(conn, queue)
        self._polling(body, queue, "activity")

    def _execute(self, r: _Running) -> None:
        info = r.ctx.info
        _local.ctx = r.ctx
        try:
            d = self._activities.get(info.name)
            if d is None:
                raise errors.ApplicationError(f"no activity {info.name!r} is registered on worker "
                                              f"{self.worker_id}", type="dex.UnknownActivity")
            arg = decode(r.task.get("argument"))
            if d.is_async:
                result = asyncio.run(d.fn(arg) if d.takes_arg else d.fn())
            else:
                result = d.fn(arg) if d.takes_arg else d.fn()
            try:
                json_text(result, f"the result of activity {info.name!r}", "result")
            except errors.NotJSONError as e:
                raise errors.NonRetryableError(str(e), type="TypeError") from None
            outcome: Tuple[str, Any] = ("complete", result)
        except BaseException as e:        # activity code may raise anything
            outcome = ("fail", failure_from_exception(e))
            log.info("activity %s (id %s) of run %s, attempt %s failed: %s",
                     info.name, info.task_id, info.run_id, info.attempt, e)
        finally:
            _local.ctx = None
        r.finished = True
        self._finish(r, outcome)

    def _finish(self, r: _Running, outcome: Tuple[str, Any]) -> None:
        """Pass the outcome on (as :meth:`_report`), then free the activity's slot, under the
        slots' lock: a poller woken by the free slot finds the outcome in its hands when it
        was handed to it.  A success goes to the poller of its queue when that poller waits
        for a slot (:meth:`_reserve`), to be carried by its next call; else, and always
        while the poller is in a call (it never waits for activities), to the reporter."""
        with self._slots:
            first = r.outcome is None
            if first:
                r.outcome = outcome
                held = self._carry.get(r.queue) if outcome[0] == "complete" else None
                if held is not None:
                    r.handed = True
                    held.append(r)
                else:
                    self._results.put(r)
            self._free += 1
            self._slots.notify_all()

    def _report(self, r: _Running, outcome: Tuple[str, Any]) -> None:
        """Queue the outcome for the reporter; only the first outcome of a task counts (an
        activity abandoned at shutdown that finishes later is dropped)."""
        with self._lock:
            if r.outcome is not None:
                return
            r.outcome = outcome
        self._results.put(r)

    def _resend(self, rs: List[_Running], maybe_applied: bool = False) -> None:
        """Pass outcomes handed to a poller that no call of its applied to the reporter
        (emptying ``rs``); ``maybe_applied``: the call that carried them failed with its
        outcome unknown (a connection error, a cancel)."""
        for r in rs:
            r.maybe_applied = r.maybe_applied or maybe_applied
            self._results.put(r)
        rs.clear()

    def _poll_completes(self, conn: psycopg.Connection) -> bool:
        """Whether the installed dex's one-call wait takes completions (1.5)."""
        level = self._api_level(conn)
        return level[0] >= 5 and level[1]

    def _complete_activities_and_poll_wait(self, conn: psycopg.Connection, queue: str,
                                           part: int, n: int, held: List[_Running]
                                           ) -> List[Tuple]:
        """Lease up to ``n`` activity tasks with the one-call wait (as :meth:`_poll_wait`),
        completing in the same CALL, and the same transaction as its first look, the
        activities whose outcomes were handed to the poller (``held``, emptied: each is
        settled from the call's answer, or passed to the reporter).  The rows leased.

        A call that failed on its connection, or was cancelled, may or may not have applied
        them: the reporter sends them again, and a lost lease is then no news.  A call the
        server refused (a result too large, ...) changed nothing: the reporter sends them
        (one by one when its batch is refused too), and a plain one-call wait polls."""
        if not held:
            return self._poll_wait(conn, queue, n, self.activity_lease, False, part)
        carried = list(held)
        held.clear()
        wire = self._wire
        try:
            with self._waiting_on(conn, stoppable=True):
                if self._stopping.is_set():
                    self._resend(carried)
                    return []
                rows, applied = wire.complete_and_poll_wait(
                    conn, queue, self.worker_id, n, self.activity_lease, self.poll_timeout,
                    [(r.run_id, r.task_id, r.lock_version) for r in carried],
                    [wire.result(r.outcome[1]) for r in carried],
                    self._declared(conn, False, part),
                    workflow=False)
        except psycopg.errors.Error as e:
            cancelled = isinstance(e, psycopg.errors.QueryCanceled)
            if _connection_error(e) or cancelled:
                self._resend(carried, maybe_applied=True)
                if cancelled and self._stopping.is_set():
                    return []
                raise
            log.warning("activity completions with the poll refused (%s); the reporter sends "
                        "them", e)
            self._resend(carried)
            return self._poll_wait(conn, queue, n, self.activity_lease, False, part)
        except BaseException:
            self._resend(carried, maybe_applied=True)
            raise
        self.stats["activity_completions_in_poll"] += len(carried)
        for r, ok in zip(carried, applied):
            self._settle(r, bool(ok))
        return rows

    def _reporter_loop(self) -> None:
        conn: Optional[psycopg.Connection] = None
        interval = max(0.2, self.activity_lease / 3)
        next_beat = time.monotonic() + interval
        stop = False
        while True:
            batch: List[_Running] = []
            try:
                item = self._results.get(timeout=max(0.0, next_beat - time.monotonic()))
                while True:
                    if item is None:
                        stop = True
                    else:
                        batch.append(item)
                    if len(batch) >= 1000:
                        break
                    item = self._results.get_nowait()
            except _queue.Empty:
                pass
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                if batch:
                    self._send_results(conn, batch)
                if time.monotonic() >= next_beat:
                    self._heartbeat(conn)
                    next_beat = time.monotonic() + interval
            except psycopg.Error as e:
                if not (isinstance(e, psycopg.OperationalError) or is_prepared_statement_error(e)):
                    raise
                if is_prepared_statement_error(e):
                    log.error("reporter: %s; %s; reconnecting", e, POOLER_HINT)
                else:
                    log.warning("reporter: connection problem (%s); retrying", e)
                if conn is not None:
                    conn.close()
                conn = None
                for r in batch:         # send them again
                    self._results.put(r)
                time.sleep(0.5)
                if stop and self._results.qsize() and time.monotonic() > next_beat + 30:
                    log.error("reporter: giving up on %d results", self._results.qsize())
                    break
                if stop:
                    self._results.put(None)
                    stop = False
                continue
            if stop and self._results.empty():
                break
        if conn is not None:
            conn.close()

    def _send_results(self, conn: psycopg.Connection, batch: List[_Running]) -> None:
        done = [r for r in batch if r.outcome[0] == "complete"]
        failed = [r for r in batch if r.outcome[0] == "fail"]
        wire = self._wire
        for rs, fail in ((done, False), (failed, True)):
            if not rs:
                continue
            encode = wire.failure if fail else wire.result
            try:
                self.stats["reporter_calls"] += 1
                out = wire.complete(conn, [(r.run_id, r.task_id, r.lock_version) for r in rs],
                                    [encode(r.outcome[1]) for r in rs], fail=fail)
            except psycopg.errors.Error as e:
                if _connection_error(e):
                    raise
                log.warning("reporter: %s refused (%s); one by one",
                            "dex.fail_tasks" if fail else "dex.complete_tasks", e)
                for r in rs:
                    self._send_one(conn, r)
                continue
            ok = {(row[0], row[1]) for row in out if row[2]}
            for r in rs:
                self._settle(r, r.key in ok)

    def _send_one(self, conn: psycopg.Connection, r: _Running) -> None:
        kind, value = r.outcome
        try:
            self.stats["reporter_calls"] += 1
            if kind == "complete":
                conn.execute("SELECT dex.complete_task(%s, %s, %s, %s)",
                             (r.run_id, r.task_id, r.lock_version,
                              Jsonb(value) if value is not None else None))
            else:
                conn.execute("SELECT dex.fail_task(%s, %s, %s, %s)",
                             (r.run_id, r.task_id, r.lock_version, Jsonb(value)))
            self._settle(r, True)
        except psycopg.errors.Error as e:
            if _connection_error(e):
                raise
            if _sqlstate(e) == LEASE_LOST:
                self._settle(r, False)
                return
            # the result itself is refused (too large, ...): that is the activity's failure
            log.error("activity %s (id %s) of run %s: result refused: %s", r.ctx.info.name,
                      r.task_id, r.run_id, e)
            try:
                self.stats["reporter_calls"] += 1
                conn.execute("SELECT dex.fail_task(%s, %s, %s, %s)",
                             (r.run_id, r.task_id, r.lock_version, Jsonb({
                                 "message": f"the engine refused the activity's result: {e}",
                                 "type": "dex.ResultRefused", "terminal": True})))
                self._settle(r, True)
            except psycopg.errors.Error as e2:
                if _connection_error(e2):
                    raise
                log.error("could not fail activity %s of run %s: %s", r.task_id, r.run_id, e2)
                self._settle(r, False)

    def _settle(self, r: _Running, ok: bool) -> None:
        with self._lock:
            r.reported = True
            self._inflight.pop(r.key, None)
        if not ok and r.maybe_applied:
            # sent again after a call that may have applied it: perhaps its own completion
            log.debug("activity %s (id %s) of run %s: sent again, already done or lease lost",
                      r.ctx.info.name, r.task_id, r.run_id)
        elif not ok:
            self.stats["leases_lost"] += 1
            log.warning("activity %s (id %s) of run %s: lease lost, outcome discarded",
                        r.ctx.info.name, r.task_id, r.run_id)
        elif r.outcome[0] == "complete":
            self.stats["activities_completed"] += 1
        else:
            self.stats["activities_failed"] += 1

    def _heartbeat(self, conn: psycopg.Connection) -> None:
        with self._lock:
            held = [r for r in self._inflight.values() if not r.reported and not r.handed]
        if not held:
            return
        # dex 1.5 takes the tasks' queue, so that it looks at that queue's partition only
        # (with hundreds of queues, the difference between ~1 ms and hundreds): one call per
        # queue then
        by_queue = self._has_routines(
            conn, self._heartbeat_by_queue,
            "dex.heartbeat_tasks(uuid[],integer[],bigint[],interval,text)")
        groups: Dict[Optional[str], List[_Running]] = {}
        for r in held:
            groups.setdefault(r.task.get("queue") if by_queue else None, []).append(r)
        kept = set()
        for queue, rs in groups.items():
            out = conn.execute(
                "SELECT run_id, task_id FROM dex.heartbeat_tasks("
                "%s::uuid[], %s::integer[], %s::bigint[], %s::interval"
                + (", %s)" if queue else ")"),
                ([r.run_id for r in rs], [r.task_id for r in rs], [r.lock_version for r in rs],
                 f"{self.activity_lease} seconds") + ((queue,) if queue else ())).fetchall()
            kept |= {(row[0], row[1]) for row in out}
        for r in held:
            if r.key not in kept and not r.ctx.lease_lost:
                r.ctx.lease_lost = True
                log.warning("activity %s (id %s) of run %s: lease lost while running",
                            r.ctx.info.name, r.task_id, r.run_id)
