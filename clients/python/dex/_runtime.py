"""Running workflow code by replay.

A workflow task (dex.v1.WorkflowTask, JSON form) carries the run's whole history
and the events the workflow has not seen yet.  :func:`replay` re-runs the
workflow function from its start, feeding it the recorded events task by task,
and returns the commands of the new workflow task:

* the history is cut into workflow tasks: ``workflowTaskStarted``, the events the
  task was shown (its *inputs*: run started, activity results, timers fired,
  external events, ...), ``workflowTaskCompleted``, then the events of the
  commands the task returned (``activityTaskCreated``, ``timerCreated``, ...);
* for each task: apply its inputs (they resolve the futures workflow code awaits),
  run workflow code until every coroutine waits, then compare what it asked for
  with what the task recorded.  Every command carries an id, 1, 2, 3, ... in the
  order workflow code issues them over the run's life; a command whose id is in
  the history is matched against the recorded event (same kind and name, same
  task) and not sent again; anything else during replay is non-determinism: the
  workflow task fails (``dex.NonDeterminism``, naming both sides), and is retried
  after a backoff until code that matches is deployed (the run parks BLOCKED after
  ``dex.max_workflow_task_failures``; ``dex.resume_run`` retries it), or, for a
  workflow declared with ``nondeterminism_fails_run``, the run fails;
* the last task is the new one: its commands go to the engine.

Patches change workflow code under running runs: ``ctx.patched("id")`` records a
``dex.patch:id`` marker where new code first takes the new path, and on replay returns
whether the run recorded it there; the old path keeps the command ids the old code used.
A replay that meets a patch marker where the code has none (or another) always fails
the workflow task, whatever the workflow's declaration.

Workflow code is an ``async def`` run by a small deterministic event loop of our
own (not asyncio): ready callbacks run in FIFO order, and nothing but dex
awaitables may be awaited.  ``ctx.now()`` is the timestamp of the current task's
``workflowTaskStarted``.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import hashlib
import logging
import os
import random as _random
import sys
import uuid as _uuid
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from . import errors
from ._convert import (Duration, decode, duration, encode, event_kind, command_kind,
                       failure_from_exception, parse_timestamp, retry_policy_json, roundtrip)
from .registry import ACTIVITIES, WorkflowDefinition, activity_definition

log = logging.getLogger("dex.runtime")

# The event each command records (command kind -> event kind), and the field
# that must match on replay (besides the kind and the id).
COMMAND_EVENT = {
    "scheduleActivity": "activityTaskCreated",
    "startTimer": "timerCreated",
    "cancelTimer": "timerCancelled",
    "waitExternalEvent": "externalEventWaitStarted",
    "recordSideEffect": "sideEffectExecuted",
    "setCustomStatus": "customStatusSet",
    "startChildRun": "childRunCreated",
    "completeRun": "runCompleted",
    "failRun": "runFailed",
    "cancelRun": "runCancelled",
    "continueAsNew": "runContinuedAsNew",
    "recordMarker": "markerRecorded",
    "signalExternalRun": "externalRunSignalled",
    "publishEvent": "eventPublished",
}
EVENT_COMMAND = {v: k for k, v in COMMAND_EVENT.items()}
KEY_FIELD = {
    "scheduleActivity": "name", "activityTaskCreated": "name",
    "startTimer": "name", "timerCreated": "name",
    "cancelTimer": "timerCreatedEventId", "timerCancelled": "timerCreatedEventId",
    "waitExternalEvent": "eventId", "externalEventWaitStarted": "eventId",
    "recordSideEffect": "name", "sideEffectExecuted": "name",
    "startChildRun": "workflowName", "childRunCreated": "workflowName",
    "recordMarker": "name", "markerRecorded": "name",
    "signalExternalRun": "eventId", "externalRunSignalled": "eventId",
    "publishEvent": "name", "eventPublished": "name",
}

PATCH_MARKER = "dex.patch:"     # + the change id: the marker ctx.patched records

NON_DETERMINISM = "dex.NonDeterminism"
# the failure type of a workflow task whose code awaited something that is not a dex awaitable
NOT_DEX_AWAITABLE = "dex.NotDexAwaitable"

PARENT_CLOSE_POLICIES = ("TERMINATE", "REQUEST_CANCEL", "ABANDON")


def parent_close_policy_json(policy: str) -> str:
    """"ABANDON" (or "abandon", or "PARENT_CLOSE_POLICY_ABANDON") -> the enum's JSON name."""
    name = str(policy).upper()
    if name.startswith("PARENT_CLOSE_POLICY_"):
        name = name[len("PARENT_CLOSE_POLICY_"):]
    if name not in PARENT_CLOSE_POLICIES:
        raise ValueError(f"parent_close_policy must be one of {', '.join(PARENT_CLOSE_POLICIES)}, "
                         f"not {policy!r}")
    return "PARENT_CLOSE_POLICY_" + name


# ---------------------------------------------------------------------------
# Futures, tasks and the loop
# ---------------------------------------------------------------------------

class _Loop:
    def __init__(self) -> None:
        self._ready: collections.deque = collections.deque()
        self.fatal: Optional[BaseException] = None
        self.no_asyncio = _NoAsyncio(self)

    def call_soon(self, fn: Callable, *args: Any) -> None:
        self._ready.append((fn, args))

    def run(self) -> None:
        """Run callbacks until every coroutine waits for something."""
        while self._ready:
            fn, args = self._ready.popleft()
            fn(*args)
            if self.fatal is not None:
                raise self.fatal


class Future:
    """Something workflow code can await: an activity's result, a timer, an event, ..."""

    def __init__(self, loop: _Loop) -> None:
        self._loop = loop
        self._done = False
        self._result: Any = None
        self._exc: Optional[BaseException] = None
        self._callbacks: List[Callable] = []

    def done(self) -> bool:
        return self._done

    def result(self) -> Any:
        """The result (raises the failure) of a done future."""
        if not self._done:
            raise RuntimeError(f"{self!r} is not done")
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self) -> Optional[BaseException]:
        if not self._done:
            raise RuntimeError(f"{self!r} is not done")
        return self._exc

    def _set_result(self, value: Any) -> None:
        if self._done:
            return
        self._done, self._result = True, value
        self._schedule_callbacks()

    def _set_exception(self, exc: BaseException) -> None:
        if self._done:
            return
        self._done, self._exc = True, exc
        self._schedule_callbacks()

    def _schedule_callbacks(self) -> None:
        cbs, self._callbacks = self._callbacks, []
        for cb in cbs:
            self._loop.call_soon(cb, self)

    def add_done_callback(self, cb: Callable[["Future"], Any]) -> None:
        if self._done:
            self._loop.call_soon(cb, self)
        else:
            self._callbacks.append(cb)

    def remove_done_callback(self, cb: Callable) -> None:
        try:
            self._callbacks.remove(cb)
        except ValueError:
            pass

    def __await__(self):
        if not self._done:
            yield self
        return self.result()

    __iter__ = __await__


DEX_AWAITABLES = ("workflows await only ctx.activity(), ctx.sleep(), ctx.wait_event(), "
                  "ctx.child(), ctx.all_of(), ctx.any_of() and their own coroutines, never "
                  "asyncio (ctx.sleep() for asyncio.sleep(), ctx.all_of() for asyncio.gather())")


class _NotDexAwaitable(TypeError):
    """Workflow code awaited something that is not a dex awaitable: a mistake of the code, as
    non-determinism is, so its workflow task fails (dex.NotDexAwaitable) and a fixed deploy
    lets the run go on."""


class _NoAsyncio:
    """asyncio's running loop while workflow code runs: asyncio.sleep(1), asyncio.gather(),
    asyncio.create_task() and the like ask for the running loop first (outside any loop they
    would fail with "no running event loop"), and get this, whose every use says what is
    wrong, and fails the workflow task (whatever the code does with the error)."""

    def __init__(self, loop: "_Loop") -> None:
        self._dex_loop = loop

    def __getattr__(self, name: str) -> Any:
        err = _NotDexAwaitable(f"workflow code called asyncio (its event loop's {name}), which "
                               f"is not a dex awaitable: {DEX_AWAITABLES}")
        self._dex_loop.fatal = self._dex_loop.fatal or err
        raise err


class Task(Future):
    """A coroutine run by the workflow loop (``ctx.start(coro)``); awaitable like any future."""

    def __init__(self, loop: _Loop, coro: Any, name: str = "task") -> None:
        super().__init__(loop)
        self._coro = coro
        self._name = name
        self._waiting: Optional[Future] = None
        loop.call_soon(self._step, None)

    def __repr__(self) -> str:
        return f"<dex Task {self._name}{' done' if self._done else ''}>"

    def _step(self, exc: Optional[BaseException] = None) -> None:
        if self._done:
            return
        try:
            yielded = self._send(exc)
        except StopIteration as stop:
            self._set_result(stop.value)
        except (Exception, _ContinueAsNew) as e:
            self._set_exception(e)
        else:
            if yielded is None:         # a bare yield (asyncio.sleep(0)): just let others run
                yielded = Future(self._loop)
                yielded._set_result(None)
            if isinstance(yielded, Future):
                self._waiting = yielded
                yielded.add_done_callback(self._wakeup)
            else:
                self._loop.fatal = self._loop.fatal or _NotDexAwaitable(
                    f"workflow code awaited {yielded!r}, which is not a dex awaitable: "
                    f"{DEX_AWAITABLES}")

    def _send(self, exc: Optional[BaseException]) -> Any:
        """Run the coroutine to its next await, with asyncio's running loop a :class:`_NoAsyncio`
        meanwhile (and then again what it was: this thread's asyncio loop, if any, is not
        ours)."""
        outer = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self._loop.no_asyncio)
        try:
            return self._coro.send(None) if exc is None else self._coro.throw(exc)
        finally:
            asyncio.events._set_running_loop(outer)

    def _wakeup(self, fut: Future) -> None:
        if fut is not self._waiting:    # a wake-up that a cancellation overtook
            return
        self._waiting = None
        self._step(None)

    def _cancel(self, exc: BaseException) -> None:
        """Raise ``exc`` at the coroutine's current await."""
        if not self._done:
            self._loop.call_soon(self._throw, exc)

    def _throw(self, exc: BaseException) -> None:
        if self._done:
            return
        if self._waiting is not None:
            self._waiting.remove_done_callback(self._wakeup)
            self._waiting = None
        self._step(exc)

    def _close(self) -> None:
        try:
            self._coro.close()
        except BaseException:       # workflow code misbehaving in finally: blocks
            pass


class ActivityHandle(Future):
    """An activity the workflow scheduled: await it for its result (or :class:`ActivityError`)."""

    def __init__(self, loop: _Loop, id: int, name: str) -> None:
        super().__init__(loop)
        self.id, self.name = id, name

    def __repr__(self) -> str:
        return f"<dex Activity {self.name!r} id={self.id}{' done' if self._done else ''}>"


class Timer(Future):
    """A durable timer; await it, or :meth:`cancel` it."""

    def __init__(self, loop: _Loop, id: int, name: str, ctx: "WorkflowContext") -> None:
        super().__init__(loop)
        self.id, self.name, self._ctx = id, name, ctx

    def __repr__(self) -> str:
        return f"<dex Timer {self.name!r} id={self.id}{' done' if self._done else ''}>"

    def cancel(self) -> bool:
        """Cancel the timer (a cancelTimer command); awaiting it then raises CancelledError."""
        if self._done:
            return False
        self._ctx._cancel_timer(self)
        return True


class EventWait(Future):
    """Waiting for an external event: resolves to its payload, or raises :class:`WaitTimeout`."""

    def __init__(self, loop: _Loop, id: int, event_id: str, has_timeout: bool) -> None:
        super().__init__(loop)
        self.id, self.event_id, self.has_timeout = id, event_id, has_timeout

    def __repr__(self) -> str:
        return f"<dex EventWait {self.event_id!r} id={self.id}{' done' if self._done else ''}>"


class ChildRun(Future):
    """A child run: resolves to its result, or raises :class:`ChildRunError`.

    ``run_id`` is known from the workflow task after the one that started it."""

    def __init__(self, loop: _Loop, id: int, workflow_name: str) -> None:
        super().__init__(loop)
        self.id, self.workflow_name = id, workflow_name
        self.run_id: Optional[str] = None

    def __repr__(self) -> str:
        return f"<dex ChildRun {self.workflow_name!r} id={self.id}{' done' if self._done else ''}>"


class Signal(Future):
    """An external event this workflow sent to another run (``ctx.signal``): resolves, in the
    next workflow task, to the outcome: ``"DELIVERED"``, ``"DUPLICATE"`` (the target had an
    event with this id: dropped), ``"TARGET_ENDED"`` or ``"TARGET_NOT_FOUND"``.  Awaiting it
    is optional: the event is sent when the workflow task completes either way.

    ``run_id`` is the target run, once known (with the outcome)."""

    def __init__(self, loop: _Loop, id: int, event_id: str) -> None:
        super().__init__(loop)
        self.id, self.event_id = id, event_id
        self.run_id: Optional[str] = None

    def __repr__(self) -> str:
        return f"<dex Signal {self.event_id!r} id={self.id}{' done' if self._done else ''}>"


SIGNAL_OUTCOME_PREFIX = "SIGNAL_OUTCOME_"


def signal_outcome(value: Any) -> str:
    """"SIGNAL_OUTCOME_DELIVERED" (or its number) -> "DELIVERED"."""
    names = {1: "DELIVERED", 2: "DUPLICATE", 3: "TARGET_ENDED", 4: "TARGET_NOT_FOUND"}
    if isinstance(value, int):
        return names.get(value, "UNSPECIFIED")
    name = str(value or "UNSPECIFIED")
    return name[len(SIGNAL_OUTCOME_PREFIX):] if name.startswith(SIGNAL_OUTCOME_PREFIX) else name


class _ContinueAsNew(BaseException):
    """Raised by ctx.continue_as_new(); a BaseException so that ``except Exception`` lets it by."""

    def __init__(self, argument: Any) -> None:
        super().__init__("continue as new")
        self.argument = argument


# ---------------------------------------------------------------------------
# The context
# ---------------------------------------------------------------------------

class _ReplaySilentLogger(logging.LoggerAdapter):
    """A logger that says nothing while the workflow replays what it already did."""

    def __init__(self, logger: logging.Logger, ctx: "WorkflowContext") -> None:
        super().__init__(logger, {})
        self._ctx = ctx

    def isEnabledFor(self, level: int) -> bool:
        return not self._ctx._silent() and self.logger.isEnabledFor(level)

    def process(self, msg, kwargs):
        return f"[{self._ctx.workflow_name} {self._ctx.run_id}] {msg}", kwargs


class WorkflowContext:
    """What workflow code gets as its first parameter.

    Workflow code must be deterministic: given the same history it must issue the
    same commands in the same order.  Use ``ctx.now()`` rather than the clock,
    ``ctx.random()`` / ``ctx.uuid4()`` / ``ctx.side_effect()`` rather than
    randomness, activities for any I/O, and ``ctx.logger`` for logs."""

    def __init__(self, replayer: "_Replayer") -> None:
        self._r = replayer
        self._rng: Optional[_random.Random] = None
        self.logger = _ReplaySilentLogger(logging.getLogger("dex.workflow.user"), self)

    # -- what the run is -------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._r.task.get("runId", "")

    @property
    def workflow_name(self) -> str:
        return self._r.task.get("workflowName", "")

    @property
    def workflow_version(self) -> int:
        return int(self._r.task.get("workflowVersion", 1))

    @property
    def queue(self) -> str:
        return self._r.task.get("queue", "")

    @property
    def argument(self) -> Any:
        """The run's argument (also passed to the workflow function)."""
        return self._r.argument

    @property
    def instance_id(self) -> Optional[str]:
        return self._r.run_info.get("instanceId")

    @property
    def labels(self) -> Dict[str, str]:
        return dict(self._r.run_info.get("labels") or {})

    @property
    def parent_run_id(self) -> Optional[str]:
        return (self._r.run_info.get("parent") or {}).get("runId")

    @property
    def generation(self) -> int:
        """How many times the run continued as new (0 for its first history)."""
        return self._r.generation

    @property
    def is_replaying(self) -> bool:
        """True while workflow code re-runs a workflow task whose commands are recorded."""
        return self._r.replaying

    @property
    def cancel_requested(self) -> bool:
        """True once the run's cancellation was requested (dex.cancel_run)."""
        return self._r.cancel_reason is not None

    @property
    def cancel_reason(self) -> Optional[str]:
        return self._r.cancel_reason

    def now(self) -> _dt.datetime:
        """The deterministic clock: when the current workflow task started (UTC, aware)."""
        return self._r.now

    def random(self) -> _random.Random:
        """A random generator seeded by the run id: the same numbers on every replay."""
        if self._rng is None:
            seed = hashlib.sha256(self.run_id.encode()).digest()
            self._rng = _random.Random(int.from_bytes(seed[:16], "big"))
        return self._rng

    def uuid4(self) -> _uuid.UUID:
        """A random UUID that stays the same on replay."""
        return _uuid.UUID(int=self.random().getrandbits(128), version=4)

    def _silent(self) -> bool:
        return self._r.replaying or self._r.closed

    # -- commands ----------------------------------------------------------
    def activity(self, activity: Any, arg: Any = None, *, queue: Optional[str] = None,
                 retry: Any = None, priority: Optional[int] = None,
                 start_to_close_timeout: Optional[Duration] = None,
                 schedule_to_close_timeout: Optional[Duration] = None,
                 heartbeat_timeout: Optional[Duration] = None) -> ActivityHandle:
        """Schedule an activity (a ``@dex.activity`` function or its name) with one JSON argument.

        Returns at once; await the handle for the result.  ``retry`` is a
        :class:`dex.RetryPolicy` (or its JSON); options left out come from the
        activity's declaration, then from the engine's defaults."""
        if isinstance(activity, str):
            name, d = activity, ACTIVITIES.get(activity)
        else:
            d = activity_definition(activity)
            name = d.name
        queue = (queue or (d.queue if d else None) or self._r.definition.activity_queue
                 or self._r.default_activity_queue)
        if not queue:
            raise ValueError(f"activity {name!r}: no queue (give queue=, or declare one with "
                             "@activity(queue=...) or @workflow(activity_queue=...))")
        body: Dict[str, Any] = {"name": name, "queue": queue}
        if arg is not None:
            body["argument"] = encode(arg, f"the argument of activity {name!r}", "arg")
        policy = retry_policy_json(retry if retry is not None else (d.retry if d else None))
        if policy:
            body["retryPolicy"] = policy
        if priority:
            body["priority"] = int(priority)
        for field, given, default in (
                ("startToCloseTimeout", start_to_close_timeout, d and d.start_to_close_timeout),
                ("scheduleToCloseTimeout", schedule_to_close_timeout, d and d.schedule_to_close_timeout),
                ("heartbeatTimeout", heartbeat_timeout, d and d.heartbeat_timeout)):
            value = given if given is not None else default
            if value is not None:
                body[field] = duration(value)
        cid, _ = self._r.command("scheduleActivity", body)
        handle = ActivityHandle(self._r.loop, cid, name)
        self._r.activities[cid] = handle
        return handle

    def sleep(self, delay: Duration, name: str = "sleep") -> Timer:
        """A durable timer of ``delay`` (seconds, a timedelta or "30s"); await it to sleep."""
        cid, _ = self._r.command("startTimer", {"name": name, "delay": duration(delay)})
        timer = Timer(self._r.loop, cid, name, self)
        self._r.timers[cid] = timer
        return timer

    timer = sleep

    def _cancel_timer(self, timer: Timer) -> None:
        self._r.command("cancelTimer", {"timerCreatedEventId": timer.id})
        self._r.timers.pop(timer.id, None)
        timer._set_exception(errors.CancelledError("timer cancelled"))

    def wait_event(self, event_id: str, timeout: Optional[Duration] = None) -> EventWait:
        """Wait for the external event ``event_id`` (dex.send_external_event); its payload.

        With ``timeout``, awaiting raises :class:`dex.WaitTimeout` if no event came in
        time.  An event that came before the wait is returned at once."""
        if event_id in self._r.received:
            w = EventWait(self._r.loop, 0, event_id, False)
            w._set_result(self._r.received[event_id])
            return w
        body: Dict[str, Any] = {"eventId": event_id}
        if timeout is not None:
            body["timeout"] = duration(timeout)
        cid, _ = self._r.command("waitExternalEvent", body)
        w = EventWait(self._r.loop, cid, event_id, timeout is not None)
        self._r.waiters.setdefault(event_id, []).append(w)
        if timeout is not None:
            self._r.timers[cid] = w
        return w

    def side_effect(self, fn: Callable[[], Any], name: Optional[str] = None) -> Any:
        """Run ``fn()`` once and record its (JSON) result; replays return the recorded value."""
        name = name or getattr(fn, "__name__", "side_effect")
        if self._r.peek_recorded() is not None or self._r.replaying:
            # recorded: command() checks kind and name, and the recorded value is returned
            _, ev = self._r.command("recordSideEffect", {"name": name})
            return decode((ev or {}).get("sideEffectExecuted", {}).get("result"))
        value = roundtrip(fn(), f"the result of side effect {name!r}", "result")
        self._r.command("recordSideEffect", {"name": name, "result": encode(value)})
        return value

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the new path of change ``change_id``: ``True`` for a run
        that reaches this point under code that has the change (a marker is recorded), and on
        replay for a run that recorded it here; ``False`` for a run that passed this point
        under the old code.  The answer is kept for the run: later calls say the same.  Keep
        the old path until no run that took it remains, then :meth:`deprecate_patch`."""
        r = self._r
        if change_id in r.patches:
            return r.patches[change_id]
        name = _patch_name(change_id)
        rec = r.peek_recorded()
        if rec is not None:
            marker = _patch_of(rec)
            if marker == change_id:
                r.command("recordMarker", {"name": name})
                r.patches[change_id] = True
                return True
            if marker is not None:
                raise r.nondeterminism(
                    f"non-determinism: patch {change_id!r} is checked where the history "
                    f"recorded patch {marker!r} (id {rec.get('id')}): the patches of the code "
                    f"do not match the run's", change_id)
            r.patches[change_id] = False        # the old code issued another command here
            return False
        if r.replaying:
            r.patches[change_id] = False        # the old code issued nothing more in that task
            return False
        r.command("recordMarker", {"name": name})
        r.patches[change_id] = True
        return True

    def deprecate_patch(self, change_id: str) -> None:
        """Change ``change_id``'s old path is gone from the code: runs that recorded its
        marker replay it here, new runs record nothing.  Remove the call once no run that
        recorded the marker remains."""
        r = self._r
        rec = r.peek_recorded()
        marker = _patch_of(rec) if rec is not None else None
        if marker == change_id:
            r.command("recordMarker", {"name": _patch_name(change_id)})
        elif marker is not None:
            raise r.nondeterminism(
                f"non-determinism: deprecated patch {change_id!r} is met where the history "
                f"recorded patch {marker!r} (id {rec.get('id')})", change_id)
        r.patches[change_id] = True

    def publish(self, name: str, payload: Any = None) -> None:
        """Publish an event of the workflow's own (dex 1.10): recorded in the history as
        ``eventPublished`` once, whatever the replays, and, when the run's queue publishes
        its events (``dex.alter_queue(q, publish => true)``), sent to logical decoding
        consumers when this workflow task's completion commits (docs/publishing.md).
        ``name``: 1 to 255 bytes; ``payload``: a JSON value or bytes, optional."""
        body: Dict[str, Any] = {"name": str(name)}
        if payload is not None:
            body["payload"] = encode(payload, f"the payload of published event {name!r}", "payload")
        self._r.command("publishEvent", body)

    def set_custom_status(self, status: str) -> None:
        """Set the run's custom status (shown by dex.get_run); '' clears it."""
        self._r.command("setCustomStatus", {"customStatus": str(status)})

    def child(self, workflow: Any, arg: Any = None, *, version: Optional[int] = None,
              queue: Optional[str] = None, instance_id: Optional[str] = None,
              priority: Optional[int] = None, labels: Optional[Dict[str, str]] = None,
              concurrency_key: Optional[str] = None,
              execution_timeout: Optional[Duration] = None,
              parent_close_policy: Optional[str] = None) -> ChildRun:
        """Start a child run (a ``@dex.workflow`` function or a name); await it for its result.

        ``execution_timeout``: the child ends TIMED_OUT if it has not ended that long after its
        start (awaiting it raises :class:`dex.ChildRunError` of type ``dex.TimedOut``).
        ``parent_close_policy``: what the child does when this run ends before it:
        ``"TERMINATE"`` (the engine's default), ``"REQUEST_CANCEL"`` (it sees a cancellation
        request) or ``"ABANDON"`` (it runs on).  Both need dex 1.4."""
        if isinstance(workflow, str):
            name, wversion = workflow, version or 1
        else:
            d = getattr(workflow, "__dex_workflow__")
            name, wversion = d.name, version or d.version
        body: Dict[str, Any] = {"workflowName": name, "workflowVersion": int(wversion)}
        if queue:
            body["queue"] = queue
        if arg is not None:
            body["argument"] = encode(arg, f"the argument of child run {name!r}", "arg")
        if instance_id:
            body["instanceId"] = instance_id
        if priority:
            body["priority"] = int(priority)
        if labels:
            body["labels"] = dict(labels)
        if concurrency_key:
            body["concurrencyKey"] = concurrency_key
        if execution_timeout is not None:
            body["executionTimeout"] = duration(execution_timeout)
        if parent_close_policy is not None:
            body["parentClosePolicy"] = parent_close_policy_json(parent_close_policy)
        cid, recorded = self._r.command("startChildRun", body)
        handle = ChildRun(self._r.loop, cid, name)
        if recorded is not None:
            handle.run_id = recorded.get("childRunCreated", {}).get("runId")
        self._r.children[cid] = handle
        return handle

    def signal(self, event_id: str, payload: Any = None, *, run_id: Optional[str] = None,
               instance_id: Optional[str] = None, queue: Optional[str] = None) -> Signal:
        """Send the external event ``event_id`` with ``payload`` (JSON) to another run, as
        ``dex.send_external_event`` does: to ``run_id``, or to the active run of
        ``instance_id`` on ``queue`` (this run's queue when left out).  Give exactly one of
        ``run_id`` and ``instance_id``.

        Returns at once; the event is sent, in the transaction that records this workflow
        task, and the outcome is in the run's history (``externalRunSignalled``).  Await the
        returned :class:`Signal` for it: ``"DELIVERED"``, ``"DUPLICATE"``, ``"TARGET_ENDED"``
        or ``"TARGET_NOT_FOUND"``; the same on every replay."""
        if (run_id is None) == (instance_id is None):
            raise ValueError("ctx.signal: give exactly one of run_id and instance_id")
        if run_id is not None and queue is not None:
            raise ValueError("ctx.signal: a queue tells instance ids apart; a run_id needs none")
        body: Dict[str, Any] = {"eventId": str(event_id)}
        if run_id is not None:
            body["runId"] = str(run_id)
        else:
            body["instanceId"] = str(instance_id)
            if queue:
                body["queue"] = queue
        if payload is not None:
            body["payload"] = encode(payload, f"the payload of signal {event_id!r}", "payload")
        cid, recorded = self._r.command("signalExternalRun", body)
        handle = Signal(self._r.loop, cid, str(event_id))
        if recorded is not None:
            handle.run_id = (recorded.get("externalRunSignalled") or {}).get("runId") or None
        self._r.signals[cid] = handle
        return handle

    def continue_as_new(self, arg: Any = None) -> None:
        """End this run's history and start over with ``arg`` (never returns).

        The engine refuses it while activities or timers are pending: await or cancel
        them first (a RuntimeError says so here)."""
        pending = [repr(f) for f in list(self._r.activities.values()) + list(self._r.timers.values())
                   if not f.done()]
        if pending:
            raise RuntimeError("continue_as_new with work pending (await or cancel it first): "
                               + ", ".join(pending))
        raise _ContinueAsNew(arg)

    # -- combining awaitables ----------------------------------------------
    def start(self, coro: Any, name: str = "task") -> Task:
        """Run a coroutine of workflow code concurrently; returns an awaitable Task."""
        task = Task(self._r.loop, coro, name)
        self._r.tasks.append(task)
        return task

    def _future(self, aw: Any) -> Future:
        if isinstance(aw, Future):
            return aw
        if hasattr(aw, "send") and hasattr(aw, "throw"):
            return self.start(aw)
        raise TypeError(f"{aw!r} is not awaitable in a workflow")

    def _many(self, aws: Sequence[Any]) -> List[Future]:
        if len(aws) == 1 and isinstance(aws[0], (list, tuple)):
            aws = aws[0]
        return [self._future(a) for a in aws]

    def all_of(self, *aws: Any) -> Future:
        """Await all: their results in order; the first failure (in completion order) is raised."""
        futs = self._many(aws)
        out = Future(self._r.loop)
        remaining = [len(futs)]
        if not futs:
            out._set_result([])

        def one(f: Future) -> None:
            if out.done():
                return
            if f._exc is not None:
                out._set_exception(f._exc)
                return
            remaining[0] -= 1
            if remaining[0] == 0:
                out._set_result([g._result for g in futs])

        for f in futs:
            f.add_done_callback(one)
        return out

    def any_of(self, *aws: Any) -> Future:
        """Await the first to finish: resolves to that awaitable (not its result); check
        ``winner is a``, then ``a.result()``."""
        futs = self._many(aws)
        out = Future(self._r.loop)
        for f in futs:
            if f.done():
                out._set_result(f)
                return out

        def one(f: Future) -> None:
            out._set_result(f)

        for f in futs:
            f.add_done_callback(one)
        return out


# ---------------------------------------------------------------------------
# Replay
# ---------------------------------------------------------------------------

class _Segment:
    """One workflow task of the history."""

    def __init__(self, index: int, started: dict) -> None:
        self.index = index
        self.started = started
        self.inputs: List[dict] = []
        self.recorded: List[dict] = []
        self.completed = False


def _patch_name(change_id: str) -> str:
    if not isinstance(change_id, str) or not change_id:
        raise ValueError("a patch's change id is a non-empty string")
    return PATCH_MARKER + change_id


def _patch_of(ev: dict) -> Optional[str]:
    """The change id of a patch marker event, or None."""
    name = (ev.get("markerRecorded") or {}).get("name") or ""
    return name[len(PATCH_MARKER):] if name.startswith(PATCH_MARKER) else None


class WorkflowTaskFailure(Exception):
    """A workflow task the worker fails (dex.fail_tasks), not its run: it is handed out
    again after a backoff, and BLOCKED after dex.max_workflow_task_failures.  ``failure`` is
    the dex.v1.Failure (JSON shape)."""

    def __init__(self, failure: dict) -> None:
        super().__init__(failure.get("message", ""))
        self.failure = failure


_SDK_DIR = os.path.dirname(os.path.abspath(__file__))


def _code_location() -> str:
    """" at file:line" of the workflow code that called into the SDK (the first frame outside
    the dex package), as the TypeScript SDK names it; "" if there is none."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _SDK_DIR:
        frame = frame.f_back
    return f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""


def _describe(kind: str, body: dict, id: int) -> str:
    key = KEY_FIELD.get(kind)
    name = f" {body.get(key)!r}" if key and body.get(key) not in (None, "") else ""
    return f"{kind}{name} (id {id})"


class _Replayer:
    """The state of one run's workflow code: its coroutines, futures and what the history
    recorded.  :meth:`run` builds it by replaying a whole history; the worker may keep it
    (its workflow cache) and :meth:`resume` it with the next workflow task of the run, which
    runs only the new step, as long as the history continues exactly where it left off."""

    def __init__(self, definition: Optional[WorkflowDefinition],
                 default_activity_queue: Optional[str]) -> None:
        self.task: dict = {}
        self.definition = definition
        self.default_activity_queue = default_activity_queue
        self.loop = _Loop()
        self.ctx = WorkflowContext(self)
        self.argument: Any = None
        self.run_info: dict = {}
        self.main: Optional[Task] = None
        self.tasks: List[Task] = []
        self.now = _dt.datetime.now(_dt.timezone.utc)
        self.replaying = False
        self.closed = False
        self.cancel_reason: Optional[str] = None
        self.generation = 0
        self.activities: Dict[int, ActivityHandle] = {}
        self.timers: Dict[int, Future] = {}
        self.children: Dict[int, ChildRun] = {}
        self.signals: Dict[int, Signal] = {}
        self.waiters: Dict[str, List[EventWait]] = {}
        self.received: Dict[str, Any] = {}
        self.patches: Dict[str, bool] = {}          # ctx.patched's answers, per change id
        self.next_id = 0
        self.segment: Optional[_Segment] = None
        self.recorded: Dict[int, Tuple[_Segment, dict]] = {}
        self.matched: set = set()
        self.out: List[dict] = []
        # cutting the history into workflow tasks, event by event (see _feed)
        self._cur: Optional[_Segment] = None
        self._carry: List[dict] = []
        self._count = 0
        # what the last task was, for resume(): the history's length when it was polled,
        # the events it showed and the commands it sent
        self.history_seen = 0
        self.shown: List[dict] = []
        self.sent: List[dict] = []
        self.finished = False           # the run ends with this task, or the state is unusable

    # -- the history ---------------------------------------------------------
    def _feed(self, events: Sequence[dict]) -> List[_Segment]:
        """Cut ``events`` into workflow tasks, going on from the events fed before; returns
        the workflow tasks they start.

        A task is ``workflowTaskStarted``, the events it was shown (its inputs),
        ``workflowTaskCompleted``, then the events of its commands.  Other events after
        ``workflowTaskCompleted`` (none today) become inputs of the next task."""
        new: List[_Segment] = []
        cur, carry = self._cur, self._carry
        for ev in events:
            k = event_kind(ev)
            if k == "workflowTaskStarted":
                self._count += 1
                cur = _Segment(self._count, ev)
                cur.inputs, carry = carry, []
                new.append(cur)
            elif k == "workflowTaskCompleted" and cur is not None:
                cur.completed = True
            elif cur is not None and cur.completed and k in EVENT_COMMAND:
                cur.recorded.append(ev)
                if ev.get("id"):
                    self.recorded[int(ev["id"])] = (cur, ev)
            elif cur is not None and not cur.completed:
                cur.inputs.append(ev)
            else:
                carry.append(ev)
        self._cur, self._carry = cur, carry
        return new

    # -- commands ------------------------------------------------------------
    def peek_recorded(self) -> Optional[dict]:
        rec = self.recorded.get(self.next_id + 1)
        return rec[1] if rec else None

    def nondeterminism(self, message: str, change_id: Optional[str] = None
                       ) -> errors.NonDeterminismError:
        """Non-determinism, which ends the replay; with ``change_id``, about a patch (the
        workflow task fails, not the run)."""
        err = errors.NonDeterminismError(message)
        err.change_id = change_id           # type: ignore[attr-defined]
        self.loop.fatal = err
        return err

    def command(self, kind: str, body: dict) -> Tuple[int, Optional[dict]]:
        """Issue a command: a new one is sent, a recorded one is matched; returns (id, event)."""
        if self.closed:
            raise RuntimeError("the workflow task is over: workflow code cannot issue commands now")
        self.next_id += 1
        cid = self.next_id
        seg = self.segment
        rec = self.recorded.get(cid)
        if rec is not None:
            rseg, ev = rec
            ek = event_kind(ev)
            eb = ev.get(ek) or {}
            key = KEY_FIELD.get(kind)
            same = (ek == COMMAND_EVENT[kind] and
                    (key is None or (eb.get(key) or None) == (body.get(key) or None)))
            if not same or rseg is not seg:
                raise self.nondeterminism(
                    f"non-determinism: the history has {_describe(ek, eb, cid)}, recorded by "
                    f"workflow task {rseg.index}, but on replay the workflow issues "
                    f"{_describe(kind, body, cid)} in workflow task {seg.index}{_code_location()}",
                    _patch_of(ev) or _patch_of({"markerRecorded": body}))
            self.matched.add(cid)
            return cid, ev
        if self.replaying:
            raise self.nondeterminism(
                f"non-determinism: on replay of workflow task {seg.index} the workflow issues "
                f"{_describe(kind, body, cid)}{_code_location()}, which the history does not have "
                f"(that task recorded {self._recorded_list(seg)})",
                _patch_of({"markerRecorded": body}) if kind == "recordMarker" else None)
        self.out.append({"id": cid, kind: body})
        return cid, None

    @staticmethod
    def _recorded_list(seg: _Segment) -> str:
        items = [_describe(event_kind(e), e.get(event_kind(e)) or {}, e.get("id", 0))
                 for e in seg.recorded]
        return ", ".join(items) if items else "no command"

    # -- events --------------------------------------------------------------
    def _start_main(self) -> None:
        if self.main is not None or self.definition is None:
            return
        fn = self.definition.fn
        coro = fn(self.ctx, self.argument) if self.definition.takes_arg else fn(self.ctx)
        self.main = Task(self.loop, coro, self.definition.name)

    def apply(self, ev: dict) -> None:
        k = event_kind(ev)
        b = ev.get(k) or {}
        if k == "runCreated":
            self.run_info = b
            self.argument = decode(b.get("argument"))
        elif k == "runStarted":
            self._start_main()
        elif k == "runContinuedAsNew":        # the history of a later generation starts so
            self.argument = decode(b.get("argument"))
            self.generation = int(b.get("generation", 0))
        elif k == "activityTaskCompleted":
            h = self.activities.pop(int(b.get("activityTaskCreatedEventId", 0)), None)
            if h is not None:
                h._set_result(decode(b.get("result")))
        elif k == "activityTaskFailed":
            h = self.activities.pop(int(b.get("activityTaskCreatedEventId", 0)), None)
            if h is not None:
                h._set_exception(errors.ActivityError(h.name, h.id, b.get("failure") or {},
                                                      int(b.get("attempts", 0))))
        elif k == "timerElapsed":
            t = self.timers.pop(int(b.get("timerCreatedEventId", 0)), None)
            if isinstance(t, EventWait):
                ws = self.waiters.get(t.event_id, [])
                if t in ws:
                    ws.remove(t)
                t._set_exception(errors.WaitTimeout(t.event_id))
            elif t is not None:
                t._set_result(None)
        elif k == "externalEventReceived":
            eid = b.get("eventId", "")
            if eid in self.received:
                return
            value = decode(b.get("payload"))
            self.received[eid] = value
            for w in self.waiters.pop(eid, []):
                w._set_result(value)
                if w.has_timeout and self.timers.pop(w.id, None) is not None:
                    # the timeout's timer is no longer wanted
                    self.command("cancelTimer", {"timerCreatedEventId": w.id})
        elif k == "externalRunSignalResult":
            s = self.signals.pop(int(b.get("externalRunSignalledEventId", 0)), None)
            if s is not None:
                s.run_id = b.get("runId") or None
                s._set_result(signal_outcome(b.get("outcome")))
        elif k == "runCancelRequested":
            if self.cancel_reason is None:
                self.cancel_reason = b.get("reason", "")
                if self.main is not None:
                    self.main._cancel(errors.CancelledError(self.cancel_reason))
        elif k == "childRunCompleted":
            h = self.children.pop(int(b.get("childRunCreatedEventId", 0)), None)
            if h is not None:
                h._set_result(decode(b.get("result")))
        elif k == "childRunFailed":
            h = self.children.pop(int(b.get("childRunCreatedEventId", 0)), None)
            if h is not None:
                h._set_exception(errors.ChildRunError(h.workflow_name, h.run_id,
                                                      b.get("failure") or {}))
        # runSuspended, runResumed and anything unknown: nothing for workflow code

    # -- the whole task --------------------------------------------------------
    def run(self, task: dict) -> List[dict]:
        """Replay the whole history of ``task`` (dex.v1.WorkflowTask as JSON) and run the new
        workflow task: its commands.  Call :meth:`close` when the state is not kept."""
        self.task = task
        if self.definition is None:
            self.finished = True
            return [fail_run_command(
                f"no workflow {task.get('workflowName')!r} version "
                f"{task.get('workflowVersion', 1)} is registered on this worker",
                "dex.UnknownWorkflow")]
        new = list(task.get("newEvents") or [])
        segments = self._feed(list(task.get("history") or []) + new)
        return self._step(task, segments, new)

    def resume(self, task: dict, history: Sequence[dict], offset: int = 0) -> Optional[List[dict]]:
        """Run the next workflow task of a run whose state this is, without replaying: its
        commands, or ``None`` (nothing changed) when the history does not continue exactly
        where the state left off, so that the caller replays from scratch.

        ``history`` is the task's history from event ``offset`` on (a protobuf task can
        leave out the events the state has seen).  What must follow them: the events the
        last task was shown, ``workflowTaskCompleted``, then the events of exactly the
        commands it sent.  Anything else (another worker ran a task of the run meanwhile,
        the last completion was lost, a continue-as-new began a new history) is a miss."""
        if self.finished or self.definition is None:
            return None
        start = self.history_seen - offset
        if start < 0 or int(task.get("historyLength", 0)) != offset + len(history):
            return None
        tail = history[start:]
        n = len(self.shown)
        if len(tail) <= n or tail[:n] != self.shown:
            return None
        rest = tail[n:]
        if event_kind(rest[0]) != "workflowTaskCompleted":
            return None
        recorded = []
        for ev in rest[1:]:
            k = event_kind(ev)
            if k == "workflowTaskStarted":
                return None
            if k in EVENT_COMMAND:
                recorded.append((int(ev.get("id") or 0), k))
        if recorded != [(int(c.get("id") or 0), COMMAND_EVENT.get(command_kind(c)))
                        for c in self.sent]:
            return None
        pending = self._cur
        self.task = task
        new = list(task.get("newEvents") or [])
        segments = self._feed(rest + new)
        if pending is None or not pending.completed:     # cannot be, after the checks above
            return None
        for ev in pending.recorded:     # what the engine recorded of the commands sent
            cid = int(ev.get("id") or 0)
            self.matched.add(cid)
            child = self.children.get(cid)
            if child is not None:
                child.run_id = (ev.get("childRunCreated") or {}).get("runId")
            sig = self.signals.get(cid)
            if sig is not None:
                sig.run_id = (ev.get("externalRunSignalled") or {}).get("runId") or None
        return self._step(task, segments, new)

    def _step(self, task: dict, segments: List[_Segment], new: List[dict]) -> List[dict]:
        """Play ``segments`` (recorded ones replay, the last is the new task); the commands."""
        self.closed = False
        self.out = []
        try:
            if not segments or segments[-1].completed:
                raise errors.NonDeterminismError("the task has no new workflow task to run")
            for seg in segments:
                self._play(seg)
            out = self.out
            if self.main is not None and self.main.done():
                self.finished = True
                final = self._final_command()
                if final is not None:
                    out.append(final)
        except _NotDexAwaitable as e:
            self.finished = True
            log.error("run %s: %s", task.get("runId"), e)
            raise WorkflowTaskFailure({"message": str(e), "type": NOT_DEX_AWAITABLE})
        except errors.NonDeterminismError as e:
            self.finished = True
            log.error("run %s: %s", task.get("runId"), e)
            change_id = getattr(e, "change_id", None)
            if self.definition is not None and self.definition.nondeterminism_fails_run \
                    and change_id is None:
                return [fail_run_command(str(e), NON_DETERMINISM)]
            # the task fails, not the run: retried after a backoff, BLOCKED after
            # dex.max_workflow_task_failures, so that a fixed deploy lets the run go on
            details = {"changeId": change_id} if change_id is not None else None
            raise WorkflowTaskFailure({"message": str(e), "type": NON_DETERMINISM,
                                       **({"details": encode(details)} if details else {})})
        except BaseException:
            self.finished = True
            raise
        finally:
            self.closed = True
        self.history_seen = int(task.get("historyLength", 0))
        self.shown = new
        self.sent = out
        # what the context reads of the task (run id, names, queue), not its history
        self.task = {k: v for k, v in task.items() if k != "history" and k != "newEvents"}
        # Every recorded command is matched by now: what is kept for the next task is the
        # workflow's own state, not the history it was rebuilt from.
        self.recorded, self.matched = {}, set()
        for seg in segments:
            seg.inputs = []
        return out

    def _play(self, seg: _Segment) -> None:
        """Apply a workflow task's inputs and run workflow code until it waits; for a recorded
        task, check that the code issued exactly what the task recorded."""
        self.segment = seg
        self.replaying = seg.completed
        self.now = parse_timestamp(seg.started.get("timestamp")) or self.now
        for ev in seg.inputs:
            self.apply(ev)
        self.loop.run()
        if seg.completed:
            missing = [e for e in seg.recorded if e.get("id") and int(e["id"]) not in self.matched]
            if missing:
                e = missing[0]
                k = event_kind(e)
                raise self.nondeterminism(
                    f"non-determinism: the history has {_describe(k, e.get(k) or {}, e['id'])}, "
                    f"recorded by workflow task {seg.index}, but on replay the workflow "
                    f"did not issue it (it issued nothing more in that task)", _patch_of(e))
            if self.main is not None and self.main.done():
                raise self.nondeterminism(
                    f"non-determinism: on replay the workflow ended in workflow task "
                    f"{seg.index}, but the history goes on")

    def close(self) -> None:
        """End the workflow's coroutines (their ``finally`` blocks run, without commands)."""
        self.closed = True
        self.finished = True
        for f in ([self.main] if self.main is not None else []) + self.tasks:
            if not f.done():
                f._close()

    def _final_command(self) -> Optional[dict]:
        exc = self.main._exc
        try:
            if exc is None:
                return {"completeRun": {"result": encode(self.main._result,
                                                         "the workflow's result", "result")}}
            if isinstance(exc, _ContinueAsNew):
                body = {} if exc.argument is None else {"argument": encode(
                    exc.argument, "continue_as_new's argument", "arg")}
                return {"continueAsNew": body}
        except errors.NotJSONError as e:        # the run fails, rather than its task forever
            exc = e
        if isinstance(exc, errors.CancelledError) and self.cancel_reason is not None:
            return cancelled_command(self.cancel_reason)
        failure = failure_from_exception(exc)
        return {"failRun": {"failure": failure}}


def fail_run_command(message: str, type: str) -> dict:
    return {"failRun": {"failure": {"message": message, "type": type, "terminal": True}}}


def cancelled_command(reason: str) -> Optional[dict]:
    """What a workflow sends when it lets a cancellation end the run (dex.CancelledError
    escaped it): cancelRun.  A workflow that catches the error goes on (its cleanup runs as
    usual) and ends the run as it returns or raises."""
    return {"cancelRun": {}}


def replay(task: dict, definition: Optional[WorkflowDefinition],
           default_activity_queue: Optional[str] = None) -> List[dict]:
    """The commands of a workflow task (dex.v1.WorkflowTask as JSON) for ``definition``,
    replaying its whole history."""
    r = _Replayer(definition, default_activity_queue)
    try:
        return r.run(task)
    finally:
        r.close()
