"""A status filter finds a run whatever its age (dex 1.11: dex.run_status_index, kept by a
trigger and the maintenance worker's status sweep).  A FAILED, a TERMINATED and a still
CREATED run older than the sweep's horizon are on the first page of their status, below newer
COMPLETED runs; the counts reach them; a run that changes status after the sweep is found
under its new status only; a role sees none of another queue's.  Without the index, with
windows of the smallest width and no time budget, the same first pages are empty (what the
test tells apart).  Then the same through GET /v1/runs of a running server."""

import time
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from serve_support import call, env, server, sql  # noqa: F401  (fixtures)


def wait_swept(sql, newest, timeout=60.0):
    """Until the status sweep's horizon is past the run id ``newest``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sql.execute("SELECT horizon > %s FROM dex.run_status_sweep", (newest,)).fetchone()[0]:
            return
        time.sleep(0.5)
    raise AssertionError("the status sweep did not pass the runs in %s s" % timeout)


@pytest.fixture(scope="module")
def aged(env, conninfo):
    """Runs of a workflow of its own: FAILED, TERMINATED, CREATED (nobody polls), then 30
    newer ones in bursts 80 ms apart, COMPLETED (set straight in the table: only their
    presence matters), all swept.  One set for the module (the sweep takes ten seconds at least):
    the test that changes their statuses comes last."""
    with psycopg.connect(conninfo, autocommit=True) as sql:
        # the sweep indexes runs ten seconds old (its least), not a minute
        sql.execute("ALTER SYSTEM SET dex.status_sweep_age = '10s'")
        sql.execute("SELECT pg_reload_conf()")
        try:
            yield from _aged(env, sql)
        finally:
            sql.execute("ALTER SYSTEM RESET dex.status_sweep_age")
            sql.execute("SELECT pg_reload_conf()")


def _aged(env, sql):
    wf = f"aged-{env.tag}-{uuid.uuid4().hex[:6]}"
    failed = sql.execute("SELECT dex.create_run(%s, %s)", (wf, env.wf)).fetchone()[0]
    task = sql.execute("SELECT run_id, lock_version FROM dex.poll_tasks(%s, 'w', 1)", (env.wf,)).fetchone()
    assert task[0] == failed
    sql.execute("SELECT dex.complete_task(%s, 0, %s, '[{\"id\": 1, \"failRun\": {\"failure\": {\"message\": \"no\"}}}]')",
                (failed, task[1]))
    terminated = sql.execute("SELECT dex.create_run(%s, %s)", (wf, env.wf)).fetchone()[0]
    sql.execute("SELECT dex.terminate_run(%s)", (terminated,))
    created = sql.execute("SELECT dex.create_run(%s, %s)", (wf, env.wf)).fetchone()[0]
    newer = []
    for _ in range(6):      # a window of the search (50 ms at least) holds one burst
        time.sleep(0.08)
        newer += [r[0] for r in sql.execute(
            "SELECT id FROM dex.create_runs(%s, %s, array_fill(NULL::jsonb, ARRAY[5]))", (wf, env.wf))]
    sql.execute("UPDATE dex.workflow_run SET status = 'COMPLETED', completed_at = now() WHERE id = ANY(%s)", (newer,))
    sql.execute("DELETE FROM dex.workflow_task WHERE run_id = ANY(%s)", (newer,))
    wait_swept(sql, max(newer))
    sql.execute("ANALYZE dex.workflow_run")
    yield {"wf": wf, "FAILED": failed, "TERMINATED": terminated, "CREATED": created, "newer": newer}
    sql.execute("SELECT dex.terminate_run(id) FROM dex.workflow_run WHERE workflow_name = %s "
                "AND status NOT IN ('COMPLETED', 'FAILED', 'TERMINATED')", (wf,))


def test_old_runs_of_a_status_are_on_the_first_page(aged, env, conninfo, monkeypatch):
    from dex.serve import runs as R
    with psycopg.connect(conninfo, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(f"SET ROLE {env.roles['client']}")
        for status in ("FAILED", "TERMINATED", "CREATED"):
            # (the role sees other tests' runs too: the page may stop with a cursor after them)
            flt = R.RunFilter(status=status, workflow=aged["wf"])
            rows, _ = R.list_runs(conn, flt, 10, budget=0.06)
            assert [r["id"] for r in rows] == [aged[status]], status
        # the counts reach them; the COMPLETED ones are counted in windows as before
        # (the counts of a queue, or of all runs, use the index; the queue holds these runs only)
        counts, _, in_full = R.count_runs(conn, R.RunFilter(queue=env.wf), budget=0)
        assert in_full
        # other filters count every status in windows, back to the same time
        assert not R.count_runs(conn, R.RunFilter(workflow=aged["wf"]))[2]
        assert {s: counts.get(s) for s in ("FAILED", "TERMINATED", "CREATED")} == \
            {"FAILED": 1, "TERMINATED": 1, "CREATED": 1}, counts
        # without the index (an older dex, or a role without its grants), with windows of
        # the smallest width, the search runs out of its budget first
        monkeypatch.setattr(R, "status_horizon", lambda conn: None)
        monkeypatch.setattr(R, "WINDOW_COST", 0.001)
        for status in ("FAILED", "TERMINATED", "CREATED"):
            rows, cursor = R.list_runs(conn, R.RunFilter(status=status, workflow=aged["wf"]), 10, budget=0)
            assert rows == [] and cursor is not None, status


def test_the_api_and_the_dashboard_find_them(aged, env, server, sql):
    for status in ("FAILED", "TERMINATED", "CREATED"):
        code, _, page = call(server, "GET", f"/v1/runs?status={status}&workflow={aged['wf']}",
                             env.tokens["client"])
        assert code == 200 and [r["id"] for r in page["runs"]] == [str(aged[status])], page
    code, _, counts = call(server, "GET", f"/v1/runs/counts?queue={env.wf}", env.tokens["client"])
    assert code == 200 and counts["counts"] == {"FAILED": 1, "TERMINATED": 1, "CREATED": 1, "COMPLETED": 30}
    # a role that may not use the queue sees none of its runs through the index either
    code, _, page = call(server, "GET", f"/v1/runs?status=FAILED&workflow={aged['wf']}", env.tokens["other"])
    assert code == 200 and page["runs"] == [], page
    code, _, counts = call(server, "GET", f"/v1/runs/counts?queue={env.wf}", env.tokens["other"])
    assert code == 200 and counts["counts"] == {}, counts


def test_a_status_change_after_the_sweep_moves_the_run(aged, env, sql, conninfo):
    from dex.serve import runs as R
    sql.execute("SELECT dex.terminate_run(%s)", (aged["CREATED"],))
    # and one completes long after it was created: it leaves the index
    sql.execute("UPDATE dex.workflow_run SET status = 'COMPLETED' WHERE id = %s", (aged["TERMINATED"],))
    with psycopg.connect(conninfo, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(f"SET ROLE {env.roles['client']}")
        rows, _ = R.list_runs(conn, R.RunFilter(status="CREATED", workflow=aged["wf"]), 10)
        assert rows == []
        rows, _ = R.list_runs(conn, R.RunFilter(status="TERMINATED", workflow=aged["wf"]), 10)
        assert [r["id"] for r in rows] == [aged["CREATED"]]
    assert sql.execute("SELECT count(*) FROM dex.run_status_index WHERE run_id = %s",
                       (aged["TERMINATED"],)).fetchone()[0] == 0
