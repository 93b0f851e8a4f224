"""JSON in and out of the server, for any request and any data the database holds.

In: a request body is read up to ``MAX_BODY`` bytes (413 beyond), and a JSON body must be
UTF-8, nested at most ``MAX_DEPTH`` deep, and hold only finite numbers (no ``NaN``,
``Infinity`` nor ``1e999``): anything else is a 400 problem before any handler runs, so a
refused request changes nothing.  The depth is measured on the text before parsing, so a
body that passes also passes every later step that recurses (pydantic, psycopg's dumper).

Out: the database accepts JSON nested far deeper than Python's ``json`` module can parse or
write (PostgreSQL's limit is its stack: about 15,000 levels), and a run's argument is
whatever its creator sent through SQL.  So the loader given to psycopg (``load``) falls back
to keeping such a value as its text (:class:`RawJSON`), and :func:`dumps` writes any value,
at any depth, without recursion when the fast C encoder cannot: the API answers every run
the database holds."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import uuid
from typing import Any, List

MAX_BODY = 8 * 1024 * 1024      # bytes: eight times dex.max_payload_size's default
MAX_DEPTH = 256                 # nesting of a request body (the database reads back any depth)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


class BadJSON(ValueError):
    """A request body the API refuses (the message says why)."""


class RawJSON:
    """JSON text from the database, kept as text because it is nested too deeply for
    Python's parser; :func:`dumps` writes it as it is."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"RawJSON({self.text[:40]!r}...)"


def too_deep(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text nests arrays and objects more than ``limit`` deep (brackets
    inside strings do not count); linear, without parsing."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    level = 0
    for b in _STRING.sub(b"", body).translate(None, _NOT_BRACKET):
        level += 1 if b in b"[{" else -1
        if level > limit:
            return True
    return False


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJSON(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON number")


def parse_body(body: bytes) -> Any:
    """A request body as Python values, or :class:`BadJSON`."""
    if too_deep(body):
        raise BadJSON(f"the body is nested more than {MAX_DEPTH} deep")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadJSON(f"the body is not UTF-8: {e}") from None
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except BadJSON:
        raise
    except (ValueError, RecursionError) as e:     # JSONDecodeError, or an integer of 4,300+ digits
        raise BadJSON(f"the body is not JSON: {e}") from None


def load(data: Any) -> Any:
    """psycopg's loader of json and jsonb: Python values, or :class:`RawJSON` when the value
    is nested too deeply to parse."""
    try:
        return json.loads(data)
    except RecursionError:
        return RawJSON(bytes(data).decode("utf-8"))


class _Slow(Exception):
    """The fast encoder met something only the iterative one writes."""


def _plain(value: Any) -> Any:
    """A value that is not JSON itself as JSON would have it, as FastAPI writes it."""
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise _Slow() if isinstance(value, RawJSON) else TypeError(f"{type(value).__name__} is not JSON")


def dumps(value: Any, indent: bool = False) -> str:
    """``value`` as JSON text (compact, or indented for people, keys sorted), whatever its
    depth; non-finite floats are written as null."""
    try:
        if indent:
            return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False,
                              default=_plain)
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                          default=_plain)
    except (RecursionError, _Slow, ValueError):
        return _dumps_iteratively(value)


class _Text(str):
    """Text the iterative encoder writes as it is (punctuation, keys)."""


def _dumps_iteratively(value: Any) -> str:
    out: List[str] = []
    todo: List[Any] = [value]
    while todo:
        v = todo.pop()
        if type(v) is _Text:
            out.append(v)
        elif isinstance(v, RawJSON):
            out.append(v.text)
        elif v is None or isinstance(v, (str, int)):      # bool is an int
            out.append(json.dumps(v, ensure_ascii=False))
        elif isinstance(v, float):
            out.append(repr(v) if math.isfinite(v) else "null")
        elif isinstance(v, dict):
            todo.append(_Text("}"))
            items = list(v.items())
            for i in range(len(items) - 1, -1, -1):
                k, item = items[i]
                todo.append(item)
                todo.append(_Text(("," if i else "") + json.dumps(str(k), ensure_ascii=False) + ":"))
            todo.append(_Text("{"))
        elif isinstance(v, (list, tuple)):
            todo.append(_Text("]"))
            for i in range(len(v) - 1, -1, -1):
                todo.append(v[i])
                if i:
                    todo.append(_Text(","))
            todo.append(_Text("["))
        else:
            todo.append(_plain(v))
    return "".join(out)
