"""Exceptions of the dex SDK, and their mapping to dex.v1.Failure."""

from __future__ import annotations

import traceback
from typing import Any, Optional


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


class LeaseLost(DexError):
    """The task's lease was lost (SQLSTATE WD001): another worker holds it, or it completed."""


class NotSupported(DexError):
    """The installed dex does not offer this yet."""


def failure_from_exception(exc: BaseException) -> dict:
    """The dex.v1.Failure (canonical JSON) describing ``exc`` and its causes."""
    from ._convert import encode
    seen = set()

    def one(e: BaseException) -> dict:
        seen.add(id(e))
        if isinstance(e, ApplicationError):
            f = {"message": e.message, "type": e.type or type(e).__name__}
            if e.terminal:
                f["terminal"] = True
            details = {"traceback": _tb(e)} if e.details is None else e.details
        elif isinstance(e, FailureError):
            f = {"message": str(e), "type": type(e).__name__}
            if e.failure:
                f["cause"] = e.failure
            details = None
        else:
            f = {"message": str(e) or type(e).__name__, "type": type(e).__name__}
            details = {"traceback": _tb(e)}
        if details is not None and "details" not in f:
            try:
                f["details"] = encode(details)
            except (TypeError, ValueError):
                f["details"] = encode({"repr": repr(details)})
        cause = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        if cause is not None and id(cause) not in seen and "cause" not in f:
            f["cause"] = one(cause)
        return f

    return one(exc)


def _tb(e: BaseException) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]
