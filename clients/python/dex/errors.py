"""Exceptions of the dex SDK: their mapping to dex.v1.Failure, and the server's errors by
SQLSTATE."""

from __future__ import annotations

from typing import Any, Optional

import psycopg


class DexError(Exception):
    """Base class of every exception this SDK raises."""


class ApplicationError(DexError):
    """An error raised by activity or workflow code on purpose.

    ``type`` is matched against a retry policy's ``non_retryable_types``;
    ``terminal=True`` means "never retry, whatever the policy says"; ``details``
    is any JSON value.  Activities may raise any exception: an ordinary one is
    retryable, its type is the exception's class name.
    """

    def __init__(self, message: str, *, type: Optional[str] = None,
                 details: Any = None, terminal: bool = False):
        super().__init__(message)
        self.message = message
        self.type = type
        self.details = details
        self.terminal = terminal


class NonRetryableError(ApplicationError):
    """An :class:`ApplicationError` that is never retried (``terminal``)."""

    def __init__(self, message: str, **kw):
        kw["terminal"] = True
        super().__init__(message, **kw)


class FailureError(DexError):
    """Something failed inside the engine's world; ``failure`` is the dex.v1.Failure (JSON).

    ``cause`` (``__cause__``) is the failure's cause, converted to an exception."""

    def __init__(self, message: str, failure: Optional[dict] = None):
        super().__init__(message)
        self.failure = failure or {}

    @property
    def type(self) -> Optional[str]:
        return self.failure.get("type")

    @property
    def details(self) -> Any:
        from ._convert import decode
        return decode(self.failure.get("details"))


class ActivityError(FailureError):
    """An activity failed for good (its retries are exhausted, or the failure was terminal)."""

    def __init__(self, name: str, activity_id: int, failure: dict, attempts: int):
        super().__init__(f"activity {name!r} (id {activity_id}) failed after {attempts} "
                         f"attempt(s): {failure.get('message', '')}", failure)
        self.name = name
        self.activity_id = activity_id
        self.attempts = attempts


class ChildRunError(FailureError):
    """A child run failed, was cancelled or terminated (``type`` ``dex.Terminated``), or timed
    out (``type`` ``dex.TimedOut``: its execution timeout passed)."""

    _ENDED = {"dex.TimedOut": "timed out", "dex.Terminated": "was terminated"}

    def __init__(self, workflow_name: str, run_id: Optional[str], failure: dict):
        ended = self._ENDED.get(failure.get("type"), "failed")
        super().__init__(f"child run {run_id or '?'} of {workflow_name!r} {ended}: "
                         f"{failure.get('message', '')}", failure)
        self.workflow_name = workflow_name
        self.run_id = run_id


class WaitTimeout(DexError, TimeoutError):
    """``ctx.wait_event(..., timeout=...)``: no event came in time."""

    def __init__(self, event_id: str):
        super().__init__(f"no external event {event_id!r} came before the timeout")
        self.event_id = event_id


class CancelledError(DexError):
    """Raised into workflow code when the run's cancellation is requested.

    Catch it to clean up (run compensations, which still work); let it
    propagate (or raise it again) to let the run end CANCELLED."""

    def __init__(self, reason: str = ""):
        super().__init__(f"run cancellation requested{': ' + reason if reason else ''}")
        self.reason = reason


class NonDeterminismError(DexError):
    """Replay produced a command that does not match the recorded history."""


class RunFailedError(FailureError):
    """Client: the run ended FAILED."""


class RunTerminatedError(RunFailedError):
    """Client: the run ended TERMINATED (dex.terminate_run); its failure says by whom and why."""


class RunTimedOutError(RunFailedError):
    """Client: the run ended TIMED_OUT: it had not ended by its execution timeout (failure type
    ``dex.TimedOut``)."""


class RunCancelledError(DexError):
    """Client: the run ended CANCELLED."""


class ServerError(DexError):
    """The database refused a call of the SDK, or failed it: a PostgreSQL error.

    ``sqlstate`` is its SQLSTATE (None when the connection failed before the server answered);
    ``message``, ``detail`` and ``hint`` are the server's primary message, detail and hint
    (None when it gave none).  The psycopg exception is ``__cause__``.  Which subclass is
    raised depends on the SQLSTATE (:func:`server_error`); the others are raised as this
    class."""

    def __init__(self, message: str, *, sqlstate: Optional[str] = None,
                 detail: Optional[str] = None, hint: Optional[str] = None):
        super().__init__(message + (f" (SQLSTATE {sqlstate})" if sqlstate else "") + "".join(
            f"\n{label}: {value}" for label, value in (("DETAIL", detail), ("HINT", hint))
            if value))
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint


class NotFound(ServerError):
    """42704: the queue, run or message type does not exist, or the role may not use it."""


class WrongKind(ServerError):
    """42809: a queue of the wrong kind (a workflow queue where an activity queue is needed, or
    the other way round)."""


class AlreadyExists(ServerError):
    """42710: a queue of that name exists (or, on a schema up to 1.7, shares its partition)."""


class AlreadyActive(ServerError):
    """23505: a run of that instance id is still active; ``detail`` names it."""


class PermissionDenied(ServerError):
    """42501: the role may not do this (a queue it was not granted, a function of dex_admin)."""


class InvalidArgument(ServerError, ValueError):
    """SQLSTATE class 22: a value refused (of the wrong shape, a NULL where one is required,
    out of range, malformed JSON or protobuf): by the server, or by the SDK before anything is
    sent (``sqlstate`` 22023 then, as the server would say: ``"5 parsecs"`` is no duration)."""


class InvalidState(ServerError):
    """55000: not possible in the run's state (cancel an ended run, an event for an ended run,
    continue-as-new with work pending); 25000: a wait called inside a transaction block."""


class LimitExceeded(ServerError):
    """54000: a payload, a reason or a batch over its limit."""


class ConnectionFailed(ServerError):
    """The database could not be reached, or the connection was lost (SQLSTATE class 08, or
    none): what was sent may or may not have been done."""


class LeaseLost(ServerError):
    """The task's lease was lost (SQLSTATE WD001): another worker holds it, or it completed."""

    def __init__(self, message: str, **kw: Any):
        kw.setdefault("sqlstate", "WD001")
        super().__init__(message, **kw)


class TaskRunEnded(ServerError):
    """WD002: the task's run was cancelled or terminated: stop working on the task."""


class NotSupported(ServerError):
    """The installed dex does not offer this yet (also SQLSTATE 42883: a routine it lacks;
    3F000: no schema dex, the extension is not installed in that database)."""


# The exception of each SQLSTATE (server_error looks for the code, then its class: the first
# two characters).
SQLSTATE_ERRORS = {
    "42704": NotFound, "42809": WrongKind, "42710": AlreadyExists, "23505": AlreadyActive,
    "42501": PermissionDenied, "22": InvalidArgument, "55000": InvalidState,
    "25": InvalidState, "54": LimitExceeded, "08": ConnectionFailed, "WD001": LeaseLost,
    "WD002": TaskRunEnded, "42883": NotSupported, "3F000": NotSupported, "0A000": NotSupported,
}


def server_error(e: BaseException) -> ServerError:
    """The :class:`ServerError` (subclass) for ``e``, an error of psycopg: by its SQLSTATE, with
    the server's message, detail and hint, and ``e``'s notes.  Raise it ``from e``."""
    sqlstate = getattr(e, "sqlstate", None)
    diag = getattr(e, "diag", None)
    message = (diag.message_primary if diag is not None else None) or str(e) or type(e).__name__
    cls = SQLSTATE_ERRORS.get(sqlstate or "") or SQLSTATE_ERRORS.get((sqlstate or "")[:2])
    if cls is None:
        cls = ConnectionFailed if sqlstate is None and isinstance(e, psycopg.OperationalError) \
            else ServerError
    err = cls(message, sqlstate=sqlstate, detail=diag.message_detail if diag else None,
              hint=diag.message_hint if diag else None)
    for note in getattr(e, "__notes__", ()):
        err.add_note(note)
    return err


class DuplicateDefinition(DexError, ValueError):
    """A second workflow of the same name and version, or a second activity of the same name,
    by another function: a worker could not tell which one to run."""


class NotJSONError(DexError, TypeError):
    """A value the SDK is to send as JSON is not JSON (nothing was sent): ``what`` names it
    (``"the run's argument"``), ``path`` is the first value in it that JSON has no form for
    (``"arg['items'][1]"``)."""

    def __init__(self, what: str, path: str, reason: str):
        super().__init__(f"{what} is not JSON: {reason}")
        self.what = what
        self.path = path
