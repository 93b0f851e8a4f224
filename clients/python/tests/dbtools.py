"""Helpers of the tests that look at the database directly (PGHOST, PGPORT, PGDATABASE)."""

import time

import psycopg


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
