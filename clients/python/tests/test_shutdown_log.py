"""A worker stopped gracefully (SIGTERM) leaves nothing in the server's log (issue 17): it ends
its long polls with dex.stop_waiting (1.6), where cancel requests left "ERROR: canceling
statement due to user request" there.  The test reads the server's log (pg_current_logfile() with a logging
collector, else the file the postmaster's stderr goes to, as pg_ctl -l makes it) and looks at the
lines of the worker's backends, found by application name and told apart by the process id in
log_line_prefix."""

import os
import sys
import time
import uuid

import psycopg
import pytest

from conftest import stop_with_sigterm, worker_process

HERE = os.path.dirname(os.path.abspath(__file__))


def server_log(conn):
    """The server's log file, or None when it cannot be read from here."""
    row = conn.execute("SELECT pg_current_logfile(), current_setting('data_directory'), "
                       "current_setting('log_line_prefix')").fetchone()
    current, data, prefix = row
    if "%p" not in prefix:
        return None
    if current:
        path = current if os.path.isabs(current) else os.path.join(data, current)
    else:
        try:
            with open(os.path.join(data, "postmaster.pid")) as f:
                pid = int(f.readline())
            path = os.readlink(f"/proc/{pid}/fd/2")
        except (OSError, ValueError):
            return None
    return path if os.path.isfile(path) and os.access(path, os.R_OK) else None


def backends(conn, worker_id):
    """The worker's backends: (pid, state, query)."""
    return conn.execute("SELECT pid, state, query FROM pg_stat_activity "
                        "WHERE application_name = %s", (f"dex worker {worker_id}",)).fetchall()


def test_a_worker_stopped_with_sigterm_leaves_no_error_in_the_server_log(conninfo, queues):
    with psycopg.connect(conninfo, autocommit=True) as conn:
        log = server_log(conn)
        if log is None:
            pytest.skip("the server's log cannot be read from here")
        start = os.path.getsize(log)
        worker_id = f"quiet-{uuid.uuid4().hex[:8]}"
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        with worker_process([sys.executable, "-m", "dex", "worker", "crashflows", "-w",
                             queues[0], "-a", queues[1], "--worker-id", worker_id],
                            cwd=HERE, env=env) as proc:
            # idle: both pollers in their long polls
            deadline = time.monotonic() + 20
            while True:
                rows = backends(conn, worker_id)
                waiting = [r for r in rows if r[1] == "active" and "wait" in r[2]]
                if len(waiting) == 2:
                    break
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, rows
                time.sleep(0.05)
            pids = [r[0] for r in rows]
            stop_with_sigterm(proc)
        deadline = time.monotonic() + 10            # the backends' last words
        while backends(conn, worker_id) and time.monotonic() < deadline:
            time.sleep(0.05)
    with open(log, errors="replace") as f:
        f.seek(start)
        lines = f.read().splitlines()
    said = [line for line in lines if any(f"[{pid}]" in line for pid in pids)]
    errors = [line for line in said if " ERROR: " in line or " FATAL: " in line]
    assert said == [], "\n".join(said)
