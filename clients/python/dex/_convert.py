"""Payloads, durations, timestamps and retry policies in canonical proto3 JSON."""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import re
import traceback
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Tuple, Union

from .errors import ApplicationError, FailureError, InvalidArgument

Duration = Union[_dt.timedelta, int, float, str]


def encode(value: Any, what: str = "the value", name: str = "value") -> dict:
    """A dex.v1.Payload for ``value``: JSON text, or opaque bytes for ``bytes``; a value JSON
    cannot hold raises :class:`dex.NotJSONError` naming it (``what``, ``name``: as
    :func:`json_text`)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"binary": base64.b64encode(bytes(value)).decode("ascii")}
    return {"json": json_text(value, what, name)}


def decode(payload: Optional[dict]) -> Any:
    """The value of a dex.v1.Payload (``None`` for a missing or empty payload)."""
    if not payload:
        return None
    if "json" in payload:
        return json.loads(payload["json"])
    if "binary" in payload:
        return base64.b64decode(payload["binary"])
    return None


def json_text(value: Any, what: str, name: str) -> str:
    """``value`` as JSON text, as the server takes it, or :class:`dex.NotJSONError` naming
    ``what`` (``"the run's argument"``) and, from ``name`` (``"arg"``), where the first value
    is that JSON has no form for: a set, a datetime, an object, a key that is not a string, a
    NaN or an infinity (the server refuses those)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        from .errors import NotJSONError
        path, reason = _not_json(value, name, set()) or (name, f"fails: {e}")
        raise NotJSONError(what, path, f"{path} {reason}") from None


def _not_json(value: Any, path: str, seen: set) -> Optional[Tuple[str, str]]:
    """(path, what is wrong) of the first value in ``value`` that JSON has no form for."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, f"is {value!r}, not a JSON number")
    if not isinstance(value, (dict, list, tuple)):
        return path, f"is a {type(value).__name__} ({_short(value)}), which has no JSON form"
    if id(value) in seen:
        return path, "contains itself"
    seen.add(id(value))
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not (k is None or isinstance(k, (str, int, float, bool))):
                return path, f"has a key of type {type(k).__name__} ({_short(k)}), not a string"
            items.append((f"{path}[{k!r}]", v))
    else:
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    for p, v in items:
        found = _not_json(v, p, seen)
        if found:
            return found
    seen.discard(id(value))
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def roundtrip(value: Any, what: str = "the value", name: str = "value") -> Any:
    """``value`` as the workflow will see it when replayed (JSON turns tuples into lists...);
    :class:`dex.NotJSONError` as :func:`encode`."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return json.loads(json_text(value, what, name))


def seconds(d: Duration) -> float:
    if isinstance(d, _dt.timedelta):
        return d.total_seconds()
    if isinstance(d, str):
        return parse_duration(d)
    return float(d)


def duration(d: Duration) -> str:
    """A google.protobuf.Duration in JSON form: ``"1.5s"``."""
    s = seconds(d)
    if s < 0:
        raise InvalidArgument(f"negative duration {d!r}", sqlstate="22023")
    text = f"{s:.9f}".rstrip("0").rstrip(".")
    return text + "s"


_DURATION_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")


def parse_duration(text: str) -> float:
    m = _DURATION_RE.match(text)
    if not m:
        raise InvalidArgument(f"not a duration: {text!r} (use seconds, or \"250ms\", \"30s\", "
                              f"\"5m\", \"2h\", \"1d\")", sqlstate="22023")
    unit = {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[m.group(2)]
    return float(m.group(1)) * unit


def parse_timestamp(text: Optional[str]) -> Optional[_dt.datetime]:
    """A google.protobuf.Timestamp in JSON form (RFC 3339, up to nanoseconds) as an aware datetime."""
    if not text:
        return None
    m = re.match(r"^(.*?)(\.\d+)?(Z|[+-]\d\d:\d\d)$", text)
    if m:
        frac = (m.group(2) or "")[:7]
        text = m.group(1) + frac + ("+00:00" if m.group(3) == "Z" else m.group(3))
    return _dt.datetime.fromisoformat(text)


@dataclass
class RetryPolicy:
    """How an activity is retried (dex.v1.RetryPolicy). Unset fields take the engine's defaults.

    The delay before attempt n+1 is ``initial_delay * multiplier**(n-1)``, spread by
    ``± randomization_factor`` and capped at ``max_delay``."""

    max_attempts: Optional[int] = None
    initial_delay: Optional[Duration] = None
    multiplier: Optional[float] = None
    randomization_factor: Optional[float] = None
    max_delay: Optional[Duration] = None
    non_retryable_types: Sequence[str] = field(default_factory=tuple)

    def to_json(self) -> dict:
        out: dict = {}
        if self.max_attempts is not None:
            out["maxAttempts"] = int(self.max_attempts)
        if self.initial_delay is not None:
            out["initialDelay"] = duration(self.initial_delay)
        if self.multiplier is not None:
            out["multiplier"] = float(self.multiplier)
        if self.randomization_factor is not None:
            out["randomizationFactor"] = float(self.randomization_factor)
        if self.max_delay is not None:
            out["maxDelay"] = duration(self.max_delay)
        if self.non_retryable_types:
            out["nonRetryableTypes"] = list(self.non_retryable_types)
        return out


def retry_policy_json(policy: Union[None, RetryPolicy, dict]) -> Optional[dict]:
    if policy is None:
        return None
    if isinstance(policy, RetryPolicy):
        return policy.to_json()
    if isinstance(policy, dict):
        return dict(policy)
    raise TypeError(f"retry policy must be a dex.RetryPolicy or a dict, not {type(policy).__name__}")


def event_kind(event: dict) -> str:
    """The subject of a dex.v1.WorkflowEvent in JSON form: ``"activityTaskCreated"``, ..."""
    for k in event:
        if k != "id" and k != "timestamp":
            return k
    return "empty"


def command_kind(command: dict) -> str:
    for k in command:
        if k != "id":
            return k
    return "empty"


def failure_from_exception(exc: BaseException) -> dict:
    """The dex.v1.Failure (canonical JSON) describing ``exc`` and its causes."""
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
