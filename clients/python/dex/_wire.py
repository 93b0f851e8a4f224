"""The two wire forms of dex's task API, behind one interface for the worker.

Every task function of dex has a JSON form (``dex.poll_tasks``, ``dex.complete_tasks``, ...,
``jsonb``) and a protobuf form (``dex.poll_tasks_pb``, ``dex.complete_tasks_pb``, ...,
``bytea``).  Inside the SDK messages always have their canonical JSON shape (dicts); a
:class:`Wire` only decides what goes over the connection: ``jsonb`` that psycopg parses
with the C ``json`` module, or protobuf bytes that :mod:`dex._proto` converts in Python.

Which is cheaper depends on the call (clients/python/README.md, "Wire format", has the
figures): protobuf is a third of the bytes and less server work, but decoding it in pure
Python costs more client CPU than ``json.loads`` unless most of it can be skipped, which is
what a worker with the run's state cached does with a workflow task's history.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, List, Optional, Sequence, Tuple

import psycopg
from psycopg.types.json import Jsonb

from . import _proto

JSON = "json"
PROTOBUF = "protobuf"

# What a poll declares the worker runs (dex 1.6): workflow names with their versions on a
# workflow queue, activity names (versions None) on an activity queue; None: every task.
Declared = Optional[Tuple[List[str], Optional[List[int]]]]


def _declared_sql(declared: Declared) -> Tuple[str, tuple]:
    """The arguments a poll adds for what it declares (named: they follow the defaults)."""
    if declared is None:
        return "", ()
    return ", names => %s::text[], versions => %s::integer[]", (declared[0], declared[1])


class Wire:
    """One wire form: the SQL to call and how to turn SDK values into parameters and back."""

    name = ""
    suffix = ""          # of the SQL functions: "" or "_pb"
    array_type = ""      # of their message arrays: "jsonb[]" or "bytea[]"

    def poll(self, conn: psycopg.Connection, queue: str, worker_id: str, n: int,
             lease: float, cache: bool = False, declared: Declared = None) -> List[Tuple]:
        """Lease up to ``n`` tasks: rows of (run_id, task_id, lock_version, task as sent).
        ``cache``: the worker keeps run states (dex 1.5's worker_cache: a workflow task of a
        run this worker completed last leaves out the history it was shown).  ``declared``:
        the only tasks it takes (dex 1.6)."""
        more, args = _declared_sql(declared)
        return conn.execute(
            f"SELECT run_id, task_id, lock_version, task FROM dex.poll_tasks{self.suffix}"
            f"(%s, %s, %s, %s::interval{', %s' if cache or declared else ''}{more})",
            (queue, worker_id, n, f"{lease} seconds") + ((cache,) if cache or declared else ())
            + args, binary=True).fetchall()

    def api_level(self, conn: psycopg.Connection) -> Tuple[int, bool]:
        """What the installed dex's polls take: the number of arguments of
        dex.poll_tasks(_pb) (4 before 1.5, 5 with 1.5's worker_cache, 7 with 1.6's names and
        versions), and whether it has dex.poll_tasks_wait(_pb) (1.4)."""
        row = conn.execute(
            "SELECT (SELECT p.pronargs FROM pg_catalog.pg_proc p WHERE p.oid = to_regproc(%s)), "
            "to_regproc(%s) IS NOT NULL",
            (f"dex.poll_tasks{self.suffix}", f"dex.poll_tasks_wait{self.suffix}"),
            prepare=False).fetchone()
        return int(row[0] or 0), bool(row[1])

    def poll_wait(self, conn: psycopg.Connection, queue: str, worker_id: str, n: int,
                  lease: float, timeout: float, workflow: bool,
                  cache: bool = False, declared: Declared = None) -> List[Tuple]:
        """``CALL dex.poll_tasks_wait(_pb)``: lease up to ``n`` tasks, waiting up to
        ``timeout`` seconds for some; rows as :meth:`poll` returns them.  Never prepared:
        it runs once a wake-up or timeout, so preparing would save nothing."""
        more, args = _declared_sql(declared)
        row = conn.execute(
            f"CALL dex.poll_tasks_wait{self.suffix}(%s, %s, %s, %s::interval, %s::interval, NULL"
            f"{', true' if cache else ''}{more})",
            (queue, worker_id, n, f"{lease} seconds", f"{timeout} seconds") + args,
            binary=True, prepare=False).fetchone()
        tasks = (row[0] if row else None) or []
        return [self.task_row(t, workflow) for t in tasks]

    def complete_and_poll_wait(self, conn: psycopg.Connection, queue: str, worker_id: str,
                               n: int, lease: float, timeout: float,
                               done: Sequence[Tuple[Any, int, int]], values: Sequence[Any],
                               declared: Declared = None, workflow: bool = True
                               ) -> Tuple[List[Tuple], List[bool]]:
        """``CALL dex.poll_tasks_wait(_pb)`` with completions (dex 1.5): complete the ``done``
        rows with their encoded values (:meth:`commands` of workflow tasks, asking for
        incremental histories as a workflow poll with worker_cache; or :meth:`result` of
        activities, ``workflow`` false), then lease as :meth:`poll_wait`; the rows leased, and
        whether each completion was applied (false: its lease was lost)."""
        more, args = _declared_sql(declared)
        row = conn.execute(
            f"CALL dex.poll_tasks_wait{self.suffix}(%s, %s, %s, %s::interval, %s::interval, NULL, "
            f"{'true' if workflow else 'false'}, %b::uuid[], %t::integer[], %t::bigint[], "
            f"%b::{self.array_type}{more})",
            (queue, worker_id, n, f"{lease} seconds", f"{timeout} seconds",
             [r[0] for r in done], [r[1] for r in done], [r[2] for r in done], list(values))
            + args, binary=True, prepare=False).fetchone()
        tasks = (row[0] if row else None) or []
        return [self.task_row(t, workflow) for t in tasks], list(row[1] or [])

    def task_row(self, raw: Any, workflow: bool) -> Tuple:
        """(run_id, task_id, lock_version, task as sent) of a task message."""
        raise NotImplementedError

    def workflow_task(self, raw: Any, skip: int = 0) -> Tuple[dict, int]:
        """A polled workflow task as a dict, and how many history events at its start were
        left out (at most ``skip``; the JSON form always has them all)."""
        raise NotImplementedError

    def history_omitted(self, raw: Any) -> int:
        """How many events at the history's start the server left out of a polled workflow
        task (``historyOmitted``: this worker completed the run's previous task)."""
        raise NotImplementedError

    def run_history(self, conn: psycopg.Connection, run_id: Any) -> List[dict]:
        """The run's whole history, for a task that left out events this worker no longer
        has (``dex.run_history_pb`` or ``dex.run_history``)."""
        raise NotImplementedError

    def activity_task(self, raw: Any) -> dict:
        raise NotImplementedError

    def commands(self, commands: List[dict]) -> Any:
        """A workflow task's commands as a parameter of dex.complete_tasks."""
        raise NotImplementedError

    def result(self, value: Any) -> Any:
        """An activity's (JSON-serializable) result as a parameter of dex.complete_tasks."""
        raise NotImplementedError

    def failure(self, failure: dict) -> Any:
        """A dex.v1.Failure (JSON shape) as a parameter of dex.fail_tasks."""
        raise NotImplementedError

    def complete(self, conn: psycopg.Connection, rows: Sequence[Tuple[Any, int, int]],
                 values: Sequence[Any], fail: bool = False) -> List[Tuple]:
        """dex.complete_tasks (or dex.fail_tasks) for (run_id, task_id, lock_version) rows
        and their encoded values: rows of (run_id, task_id, done)."""
        fn, col = ("fail_tasks", "failed") if fail else ("complete_tasks", "completed")
        # Messages and run ids go as binary arrays (%b): in text form psycopg would
        # hex-escape every bytea (twice the bytes) and backslash every quote of every JSON.
        # Small integers are shorter as text (%t) than at 8 to 12 bytes each in binary.
        return conn.execute(
            f"SELECT run_id, task_id, {col} FROM dex.{fn}{self.suffix}("
            f"%b::uuid[], %t::integer[], %t::bigint[], %b::{self.array_type})",
            ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], list(values)),
            binary=True).fetchall()


class JsonWire(Wire):
    name, suffix, array_type = JSON, "", "jsonb[]"

    def task_row(self, raw: Any, workflow: bool) -> Tuple:
        return (uuid.UUID(raw["runId"]), int(raw.get("taskId") or 0),
                int(raw.get("lockVersion") or 0), raw)

    def workflow_task(self, raw: Any, skip: int = 0) -> Tuple[dict, int]:
        return raw, 0

    def history_omitted(self, raw: Any) -> int:
        return int(raw.get("historyOmitted") or 0)

    def run_history(self, conn: psycopg.Connection, run_id: Any) -> List[dict]:
        return [r[0] for r in conn.execute(
            "SELECT event FROM dex.run_history(%s) ORDER BY sequence", (run_id,)).fetchall()]

    def activity_task(self, raw: Any) -> dict:
        return raw

    def commands(self, commands: List[dict]) -> Any:
        return Jsonb(commands)

    def result(self, value: Any) -> Any:
        return None if value is None else Jsonb(value)

    def failure(self, failure: dict) -> Any:
        return Jsonb(failure)


class ProtobufWire(Wire):
    name, suffix, array_type = PROTOBUF, "_pb", "bytea[]"

    def task_row(self, raw: Any, workflow: bool) -> Tuple:
        run_id, task_id, lock_version = _proto.task_keys(
            "dex.v1.WorkflowTask" if workflow else "dex.v1.ActivityTask", raw)
        return uuid.UUID(run_id), task_id, lock_version, raw

    def workflow_task(self, raw: Any, skip: int = 0) -> Tuple[dict, int]:
        return _proto.decode_workflow_task(raw, skip)

    def history_omitted(self, raw: Any) -> int:
        return _proto.history_omitted(raw)

    def run_history(self, conn: psycopg.Connection, run_id: Any) -> List[dict]:
        row = conn.execute("SELECT dex.run_history_pb(%s)", (run_id,), binary=True).fetchone()
        return list(_proto.decode("dex.v1.EventBatch", row[0]).get("events") or [])

    def activity_task(self, raw: Any) -> dict:
        return _proto.decode("dex.v1.ActivityTask", raw)

    def commands(self, commands: List[dict]) -> Any:
        return _proto.encode_commands(commands)

    def result(self, value: Any) -> Any:
        if value is None:
            return None
        return _proto.encode_json_payload(json.dumps(value, separators=(",", ":"),
                                                     ensure_ascii=False))

    def failure(self, failure: dict) -> Any:
        return _proto.encode("dex.v1.Failure", failure)


def wire(name: Optional[str]) -> Wire:
    """The :class:`Wire` called ``name`` ("json" or "protobuf")."""
    if name == JSON:
        return JsonWire()
    if name in (PROTOBUF, "pb"):
        return ProtobufWire()
    raise ValueError(f"unknown wire form {name!r} (use 'json' or 'protobuf')")
