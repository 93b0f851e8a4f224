"""The examples in examples/ run and give the right answers."""

import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))


def test_saga_compensates_in_reverse_order(conninfo, capsys):
    import saga
    results = saga.main(conninfo)
    assert results["Lisbon"] == {"booked": ["flight to Lisbon", "hotel in Lisbon", "car in Lisbon"]}
    assert results["Oslo"] == {"failed": "no car left in Oslo",
                               "undone": ["hotel in Oslo", "flight to Oslo"]}
    assert "runFailed" in capsys.readouterr().out


def test_fanout_over_100_activities(conninfo):
    import fanout
    assert fanout.main(conninfo, 100) == 338350


def test_sql_worker_completes_the_order(conninfo):
    """examples/sql_worker.sql (a worker in plain SQL whose results ride its next CALL
    dex.poll_tasks_wait) runs: the run completes with the charged amount, its activity retried once."""
    import re
    import shutil
    import subprocess
    import psycopg
    psql = shutil.which("psql")
    assert psql, "psql is needed to run the example"
    out = subprocess.run([psql, "-X", "-f", os.path.join(EXAMPLES, "sql_worker.sql")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "COMPLETED" in out.stdout and '"charged": 42' in out.stdout
    run = re.search(r"started run (\S+)", out.stdout).group(1)
    with psycopg.connect(conninfo, autocommit=True) as c:
        row = c.execute(
            "SELECT r.status, (SELECT array_agg((h.event->'activityTaskCompleted'->>'attempt')::int) "
            "                  FROM dex.run_history(r.id) h WHERE h.event ? 'activityTaskCompleted') "
            "FROM dex.runs r WHERE r.id = %s", (run,)).fetchone()
    assert row == ("COMPLETED", [2])        # the first attempt failed, the retry succeeded
