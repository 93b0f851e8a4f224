"""Helpers of the tests that look at the database directly (PGHOST, PGPORT, PGDATABASE)."""

import time

import psycopg
import pytest


def sql(query, params=()):
    """The rows of one statement, in a connection of its own (autocommit)."""
    with psycopg.connect("", autocommit=True) as c:
        return c.execute(query, params).fetchall()


def wait_until(what, predicate, timeout=30):
    """Poll ``predicate()`` every 0.1 s until it is true; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def first_failed_workflow_task(run_id, timeout=30):
    """(message, type) of the run's first failed workflow task, once there is one."""
    def failed():
        return sql("SELECT failure->>'message', failure->>'type' FROM dex.run_attempts(%s) "
                   "WHERE task = 'workflow' AND outcome = 'FAILED'", (run_id,))
    wait_until("a failed workflow task", failed, timeout)
    return tuple(failed()[0])


def require_dex(client, at_least, what):
    """``client``, if the database's dex is version ``at_least`` (a tuple) or later; the test
    is skipped otherwise, saying it has no ``what``."""
    (version,) = client.conn.execute(
        "SELECT extversion FROM pg_extension WHERE extname = 'dex'").fetchone()
    if tuple(int(p) for p in version.split(".")) < at_least:
        pytest.skip(f"dex {version} has no {what} ({'.'.join(map(str, at_least))})")
    return client
