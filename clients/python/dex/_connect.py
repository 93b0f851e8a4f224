"""Connections of the worker and the client, and connection poolers in front of the server.

Everything the SDK does is a single statement in autocommit, so each call is a transaction of
its own and the SDK keeps no state in the server session between calls (no SET, temporary
table, advisory lock, LISTEN, cursor or open transaction): a pooler in *transaction* mode
(PgBouncer's ``pool_mode = transaction``), which hands each transaction whichever server
connection is free, serves it as well as a direct connection does -- except for one thing
psycopg does by itself: it prepares a statement it ran ``prepare_threshold`` (5) times, as
``_pg3_0``, ``_pg3_1``, ... in the session, and later runs it by that name.  Through a
transaction pool the next transaction may land on a server connection where that statement
does not exist (``prepared statement "_pg3_0" does not exist``), or where another client
prepared its own ``_pg3_0`` (``... already exists``).

So a connection that goes through a pooler runs without prepared statements
(``prepare_threshold = None``).  ``pooled=True`` says so; ``pooled=None`` (the default)
finds out: a pooler answers the client's connection with a cancel key of its own (it
forwards cancel requests itself), so the backend process id the connection was given
(``BackendKeyData``, ``conn.info.backend_pid``) is not the id of the server process that
runs its statements (``pg_backend_pid()``).  PgBouncer makes up its keys (tested with 1.18,
in transaction, statement and session mode; a session pool is then treated as pooled too,
which costs only the prepared statements); a plain TCP proxy passes the server's through, and it keeps
the session, so prepared statements are safe behind it.  A pooler that passed the server's
key through would not be detected: say ``pooled=True``.  ``pooled=False`` keeps psycopg's
default and skips the check.

The worker's cancel requests (its shutdown wakes its long polls with them) go to the pooler,
which forwards them to the server connection running the client's statement.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import psycopg

# SQLSTATEs of a prepared statement that is missing (26000, invalid_sql_statement_name) or
# already taken (42P05, duplicate_prepared_statement) in the server session.
_PREPARED_STATEMENT_STATES = ("26000", "42P05")

POOLER_HINT = ("the connection seems to go through a connection pooler in transaction "
               "pooling mode (e.g. PgBouncer's pool_mode = transaction), where a statement "
               "psycopg prepared in one transaction is missing from the server connection of "
               "the next one, or clashes with another client's: pass pooled=True (python3 -m "
               "dex worker --pooled), or leave pooled unset so that the pooler is detected")


def behind_pooler(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` reaches the server through a connection pooler: the backend process
    id it was given at connection time is not that of the server process that runs its
    statements.  Runs one statement (in a transaction of its own if ``conn`` is in
    autocommit)."""
    row = conn.execute("SELECT pg_catalog.pg_backend_pid()", prepare=False).fetchone()
    return row is not None and row[0] != conn.info.backend_pid


def configure(conn: psycopg.Connection, pooled: Optional[bool]) -> bool:
    """Make ``conn`` safe for a transaction pool when it is pooled (``pooled=True``, or
    ``None`` and :func:`behind_pooler` says so): no prepared statements.  Whether it is
    treated as pooled."""
    if pooled is None:
        pooled = behind_pooler(conn)
    if pooled:
        conn.prepare_threshold = None
    return bool(pooled)


def connect(conninfo: str, pooled: Optional[bool],
            **kwargs: Any) -> Tuple[psycopg.Connection, bool]:
    """An autocommit connection made as :func:`configure` says, and whether it is pooled."""
    if pooled:
        kwargs["prepare_threshold"] = None
    conn = psycopg.connect(conninfo, autocommit=True, **kwargs)
    try:
        return conn, configure(conn, pooled)
    except BaseException:
        conn.close()
        raise


def is_prepared_statement_error(e: BaseException) -> bool:
    """Whether ``e`` is the server saying that one of psycopg's prepared statements is not
    (or already) in the session: what a transaction pool does to a connection that uses
    them.  Such a statement did not run at all."""
    return (isinstance(e, psycopg.Error) and getattr(e, "sqlstate", None)
            in _PREPARED_STATEMENT_STATES and "_pg3_" in str(e))


def add_pooler_hint(e: BaseException) -> None:
    """Add :data:`POOLER_HINT` to ``e``'s notes (shown with its traceback) when it is a
    prepared-statement error."""
    if is_prepared_statement_error(e) and POOLER_HINT not in getattr(e, "__notes__", ()):
        e.add_note(f"dex: {POOLER_HINT}")
