"""The server's connections, and the role each request runs as.

The server logs in with its own role (the DSN's), which must be a member of every role its
API tokens map to.  A request takes a connection from a small pool, and in one transaction
turns its token into a role (``dex.authenticate_api_token``, which answers only for roles
the login role is a member of), ``SET LOCAL ROLE`` to it, and runs dex's SQL functions: so
PostgreSQL's grants and dex's queue grants decide what it may do, and the role ends with the
transaction whatever happens.  No role is ever set for a session, so the server may sit
behind a pooler in transaction mode: the long poll's wait (``dex.wait_for_tasks``, which must
run outside a transaction block) runs with the server's own role, between two polls made as
the caller (``Database.wait_for_tasks``).

Two pools of ``size`` connections each: one for requests, one for long polls' waits, so that
waiting workers never take the connections that reads and actions need.  A wait that finds
the second pool full is refused at once (503 with ``Retry-After``), and a wait ends early
when its client goes away.  A pooled connection that the server closed while it sat idle (a
restart of PostgreSQL, ``pg_terminate_backend``) is noticed before it is handed out and
replaced, so the first request after a restart succeeds.

Errors become :class:`Problem` (``application/problem+json``) with the HTTP status of their
SQLSTATE (:func:`http_status`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import queue as queue_mod
import select
import threading
import time
from typing import Any, Awaitable, Callable, Dict, Iterator, Optional

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from starlette.exceptions import HTTPException

from . import jsonio
from .._connect import connect


class Problem(HTTPException):
    """An error answered as RFC 7807 ``application/problem+json``.

    Attributes: ``status`` (HTTP), ``title``, ``detail`` (what went wrong, for people),
    ``sqlstate`` (dex's or PostgreSQL's error code, when the database refused), ``headers``
    (of the answer, e.g. ``Retry-After``) and ``extra`` (further members of the problem
    document).  An ``HTTPException``, so that FastAPI lets it through as it is when it is
    raised while a request body is read."""

    def __init__(self, status: int, title: str, detail: Optional[str] = None,
                 sqlstate: Optional[str] = None, headers: Optional[Dict[str, str]] = None,
                 **extra: Any):
        super().__init__(status, detail or title, headers)
        self.status, self.title, self.detail, self.sqlstate, self.extra = \
            status, title, detail, sqlstate, extra

    def __str__(self) -> str:
        return self.detail or self.title

    def document(self) -> Dict[str, Any]:
        doc: Dict[str, Any] = {
            "type": f"urn:dex:sqlstate:{self.sqlstate}" if self.sqlstate else "about:blank",
            "title": self.title, "status": self.status}
        if self.detail:
            doc["detail"] = self.detail
        if self.sqlstate:
            doc["sqlstate"] = self.sqlstate
        doc.update(self.extra)
        return doc


# SQLSTATE -> HTTP status: exact codes first, then classes (two characters).
_STATUS_BY_CODE = {
    "42501": 403,   # insufficient_privilege: no dex role for the call, or no grant on the queue
    "42704": 404,   # undefined_object: unknown run, queue or token (or one the caller may not see)
    "WD001": 409,   # dex: the lease was lost (stale lock version)
    "WD002": 409,   # dex: the task's run was cancelled or has ended
    "55000": 409,   # object_not_in_prerequisite_state: the run has ended, is not running, ...
    "55006": 409,   # object_in_use: a definition runs that have not ended use
    "23505": 409,   # unique_violation: the instance id has an active run
    "42710": 409,   # duplicate_object: a queue or token of that name exists
    "21000": 400,   # cardinality_violation: the instance id is active on several queues
    "42809": 400,   # wrong_object_type: a run on an activity queue, ...
    "42601": 400, "42804": 400, "42P02": 400,
    "57014": 503,   # query_canceled (statement_timeout)
}
_STATUS_BY_CLASS = {
    "22": 400,      # data_exception: bad input (invalid, NULL, out of range)
    "23": 409,      # integrity_constraint_violation
    "54": 400,      # program_limit_exceeded: payload or history too big
    "08": 503, "53": 503, "57": 503, "58": 503,   # connection, resources, operator intervention
    "40": 503,      # serialization failure, deadlock: retry
    "28": 401,
}

_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}


def title(status: int) -> str:
    return _TITLES.get(status, "Error")


def http_status(sqlstate: Optional[str]) -> int:
    """The HTTP status of a SQLSTATE: 400 bad input, 403 not allowed, 404 unknown, 409 stale
    lease or ended run (a state conflict), 503 database unavailable, 500 anything else."""
    if not sqlstate:
        return 503
    return _STATUS_BY_CODE.get(sqlstate) or _STATUS_BY_CLASS.get(sqlstate[:2], 500)


def problem_from(e: psycopg.Error) -> Problem:
    diag = e.diag
    code = e.sqlstate
    if code:
        status = http_status(code)
    elif isinstance(e, psycopg.OperationalError):
        status = 503        # no connection: the server is down, restarting or unreachable
    elif isinstance(e, psycopg.DataError):
        status = 400        # refused by psycopg before sending: a NUL character in text
    else:
        status = 500
    extra = {}
    if diag.message_detail:
        extra["sqlDetail"] = diag.message_detail
    if diag.message_hint:
        extra["hint"] = diag.message_hint
    detail = diag.message_primary or str(e).strip() or type(e).__name__
    if status == 503 and code is None:
        detail = f"the database is unavailable: {detail}"
    return Problem(status, title(status), detail, code, **extra)


RETRY_AFTER = {"Retry-After": "1"}


def bearer_token(authorization: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` header (REST) or ``authorization``
    metadata (gRPC); 401 without one."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip() or "\x00" in token:
        raise Problem(401, "Unauthorized", "an API token is required (Authorization: Bearer <token>)")
    return token.strip()


def _alive(conn: psycopg.Connection) -> bool:
    """Whether an idle connection still works.  A server that shuts down or ends a backend
    sends it an error and closes it, so that it has something to read: a connection with
    nothing to read is taken as it is (no round trip); one with something is checked with
    an empty statement, which reads it and fails if the server is gone."""
    if conn.closed or conn.broken:
        return False
    try:
        if select.select([conn.fileno()], [], [], 0)[0]:
            conn.execute("")
        return True
    except (psycopg.Error, OSError, ValueError):
        return False


class _Pool:
    """At most ``size`` connections of the server's login role (autocommit; a request opens
    its own transaction), the last returned handed out first."""

    def __init__(self, connect: Callable[[], psycopg.Connection], size: int, name: str):
        self._connect, self.size, self.name = connect, size, name
        self._idle: "queue_mod.LifoQueue[psycopg.Connection]" = queue_mod.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)

    @contextlib.contextmanager
    def connection(self, timeout: float) -> Iterator[psycopg.Connection]:
        """A working connection, waiting up to ``timeout`` seconds for a free one (503 after
        that); closed instead of returned if it broke or was left in a transaction."""
        if not self._slots.acquire(timeout=timeout):
            raise Problem(503, title(503), f"every database connection of the server for {self.name} "
                          "is busy", headers=RETRY_AFTER)
        conn = None
        try:
            conn = self._take()
            yield conn
        finally:
            if conn is not None:
                if (conn.closed or conn.broken
                        or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
                    conn.close()
                else:
                    self._idle.put(conn)
            self._slots.release()

    def _take(self) -> psycopg.Connection:
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue_mod.Empty:
                break
            if _alive(conn):
                return conn
            conn.close()
        try:
            return self._connect()
        except psycopg.Error as e:
            raise problem_from(e) from e

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue_mod.Empty:
                return


class Database:
    """The server's connections: ``size`` for requests, and ``size`` more for the waits of
    long polls, each in a thread of its own (so that they take neither the requests'
    connections nor the threads that run requests)."""

    def __init__(self, conninfo: str, size: int = 10, connect_timeout: int = 5):
        self.conninfo, self.size = conninfo, size
        self.connect_timeout = connect_timeout
        self._requests = _Pool(self._connect, size, "requests")
        self._waits = _Pool(self._connect, size, "long polls")
        self._wait_threads = concurrent.futures.ThreadPoolExecutor(size, "dex-serve-wait")
        self._waiting = 0           # waits running; changed on the event loop only

    def _connect(self) -> psycopg.Connection:
        # behind a pooler in transaction mode: no prepared statements (see dex._connect)
        conn, _ = connect(self.conninfo, None, connect_timeout=self.connect_timeout,
                          application_name="dex serve")
        conn.row_factory = dict_row
        set_json_loads(jsonio.load, conn)      # any depth the database holds
        return conn

    def connection(self, timeout: float = 30):
        """A connection of the requests' pool (see ``_Pool.connection``)."""
        return self._requests.connection(timeout)

    def close(self) -> None:
        self._requests.close()
        self._waits.close()
        self._wait_threads.shutdown(wait=False)

    @contextlib.contextmanager
    def as_caller(self, token: Optional[str]) -> Iterator[psycopg.Connection]:
        """A connection in a transaction that runs as the role of ``token`` (401 if it maps
        to none the server may act as)."""
        with self.connection() as conn:
            try:
                with conn.transaction():
                    role = self._role_of(conn, token)
                    conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
                    yield conn
            except psycopg.Error as e:
                raise problem_from(e) from e

    async def wait_for_tasks(self, queue: str, seconds: float,
                             gone: Callable[[], Awaitable[Any]]) -> bool:
        """The long poll's wait, with the server's own role and no role switched: a session
        ``SET ROLE`` would outlive its statement on a connection that a pooler in transaction
        mode hands to other clients.  Only called after a poll as the caller's role found the
        queue empty (so the caller may use it, and learns nothing here).  Runs in a thread
        and a connection of the waits' pool: refused at once (503, ``Retry-After``) when all
        are taken, cancelled when ``gone()`` returns (the client went away).  False if it
        was cancelled so."""
        if self._waiting >= self._waits.size:
            raise Problem(503, title(503), f"the server already holds its {self._waits.size} "
                          "long polls: poll again after Retry-After, or without wait_seconds",
                          headers=RETRY_AFTER)
        self._waiting += 1
        running: Dict[str, Any] = {}
        job = asyncio.get_running_loop().run_in_executor(
            self._wait_threads, self._wait, queue, seconds, running)
        left = asyncio.ensure_future(gone())
        try:
            done, _ = await asyncio.wait({job, left}, return_when=asyncio.FIRST_COMPLETED)
            if job not in done:
                running["stop"] = True
                if "conn" in running:
                    running["conn"].cancel()
            await job
            return job in done
        finally:
            left.cancel()
            self._waiting -= 1

    def _wait(self, queue: str, seconds: float, running: Dict[str, Any]) -> None:
        """Without the right to wait on the queue (the login role does not inherit a worker
        role), it sleeps a little instead, and the caller polls again."""
        with self._waits.connection(timeout=0) as conn:
            running["conn"] = conn
            if running.get("stop"):
                return
            try:
                conn.execute("CALL dex.wait_for_tasks(%s, %s)", (queue, dt.timedelta(seconds=seconds)))
            except psycopg.Error as e:
                if e.sqlstate == "57014" and running.get("stop"):
                    return          # cancelled: its client went away
                if e.sqlstate not in ("42501", "42883"):
                    raise problem_from(e) from e
                time.sleep(min(0.5, seconds))

    @staticmethod
    def _role_of(conn: psycopg.Connection, token: Optional[str]) -> str:
        if not token:
            raise Problem(401, _TITLES[401], "an API token is required (Authorization: Bearer <token>)")
        row = conn.execute("SELECT dex.authenticate_api_token(%s) AS role", (token,)).fetchone()
        if row is None or row["role"] is None:
            raise Problem(401, _TITLES[401],
                          "the API token is unknown, expired or revoked, or its role is not one "
                          "this server may act as")
        return row["role"]
