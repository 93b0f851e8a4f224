"""Fixtures: a database with dex (PGHOST, PGPORT, PGDATABASE from test/run-tests.sh), fresh
queues per test, and workers that stop when the test ends."""

import contextlib
import os
import signal
import subprocess
import sys
import uuid

import psycopg
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))     # the dex package
sys.path.insert(0, HERE)                      # workflow modules shared with subprocesses

import dex  # noqa: E402


@pytest.fixture(scope="session")
def conninfo():
    try:
        with psycopg.connect("", autocommit=True) as c:
            c.execute("SET client_min_messages = warning")
            c.execute("CREATE EXTENSION IF NOT EXISTS dex")
    except psycopg.OperationalError as e:
        pytest.skip(f"no database to test against (set PGHOST, PGPORT, PGDATABASE): {e}")
    return ""


@pytest.fixture
def client(conninfo):
    with dex.Client(conninfo) as c:
        yield c


@pytest.fixture
def queues(client):
    """A workflow queue and an activity queue of this test only."""
    tag = uuid.uuid4().hex[:8]
    wf, act = f"wf-{tag}", f"act-{tag}"
    client.create_queue(wf, "workflow")
    client.create_queue(act, "activity")
    return wf, act


@pytest.fixture
def start_worker(conninfo, queues):
    """start_worker(**options): a started Worker on the test's queues (on the suite's database,
    or ``conninfo=``), shut down at the end."""
    workers = []

    def start(**kw):
        kw.setdefault("workflow_queues", [queues[0]])
        kw.setdefault("activity_queues", [queues[1]])
        kw.setdefault("concurrency", 8)
        kw.setdefault("poll_timeout", 5)
        kw.setdefault("shutdown_timeout", 5)
        w = dex.Worker(kw.pop("conninfo", conninfo), **kw).start()
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.shutdown()


def event_kinds(history):
    return [dex._convert.event_kind(e) for e in history]


@contextlib.contextmanager
def worker_process(args, **kw):
    """A worker in a subprocess (its output, as text, in proc.stdout), killed at the end if it
    is still running."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stop_with_sigterm(proc, timeout=30):
    """Stop a worker subprocess as a service manager does; it must exit 0.  Its output."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out
