"""Cursor pagination of GET /v1/runs is stable under concurrent inserts: paging through while
another session keeps creating runs returns every run that existed when paging began exactly
once, newest first, and none of the pages shifts."""

import threading
import time

import psycopg

from serve_support import call, env, server, sql  # noqa: F401  (fixtures)


def test_pages_are_stable_while_runs_are_created(server, env, sql, conninfo):
    wf = f"page-{env.tag}"
    existing = [r[0] for r in sql.execute(
        "SELECT id FROM dex.create_runs(%s, %s, array_fill(NULL::jsonb, ARRAY[230]))", (wf, env.wf)).fetchall()]
    stop = threading.Event()
    made = []

    def insert():
        with psycopg.connect(conninfo, autocommit=True) as c:
            while not stop.is_set():
                made.extend(r[0] for r in c.execute(
                    "SELECT id FROM dex.create_runs(%s, %s, array_fill(NULL::jsonb, ARRAY[7]))", (wf, env.wf)))

    th = threading.Thread(target=insert)
    th.start()
    try:
        seen, pages, cursor = [], 0, None
        while True:
            q = f"/v1/runs?workflow={wf}&limit=25" + (f"&cursor={cursor}" if cursor else "")
            code, _, page = call(server, "GET", q, env.tokens["client"])
            assert code == 200, page
            seen += [r["id"] for r in page["runs"]]
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break
            # the insertions run on while paging
            while len(made) < pages * 7 and th.is_alive():
                time.sleep(0.005)
    finally:
        stop.set()
        th.join()
    assert len(made) >= 7 * (pages - 1) > 0
    assert len(seen) == len(set(seen)), "a run was listed twice"
    assert seen == sorted(seen, reverse=True), "not newest first"
    existing_ids = {str(i) for i in existing}
    assert existing_ids <= set(seen), "a run that existed when paging began was skipped"
    # what the pages held beyond the runs that existed is only runs made meanwhile
    assert set(seen) - existing_ids <= {str(i) for i in made}
    assert pages >= 10
    sql.execute("SELECT dex.terminate_run(id) FROM dex.runs WHERE workflow_name = %s AND status = 'CREATED'", (wf,))


def test_short_pages_go_on_where_the_search_stopped(env, sql, conninfo, monkeypatch):
    """A search that runs out of its budget answers a short page (even an empty one) whose
    cursor continues where it stopped: with no budget at all, each page is one window of
    the search, and following the cursors still lists every run once, newest first."""
    from psycopg.rows import dict_row

    from dex.serve import runs as R
    wf = f"budget-{env.tag}"
    made = []
    for _ in range(8):      # 8 bursts of 5 runs, 80 ms apart: windows of 50 ms hold one each
        made += [str(r[0]) for r in sql.execute(
            "SELECT id FROM dex.create_runs(%s, %s, array_fill(NULL::jsonb, ARRAY[5]))", (wf, env.wf)).fetchall()]
        time.sleep(0.08)
    sql.execute("ANALYZE dex.workflow_run")
    monkeypatch.setattr(R, "WINDOW_COST", 10)    # about what an empty range costs
    with psycopg.connect(conninfo, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(f"SET ROLE {env.roles['client']}")
        flt = R.RunFilter(workflow=wf)
        seen, cursor, pages, short = [], None, 0, 0
        while True:
            rows, cursor = R.list_runs(conn, flt, 15, cursor, budget=0)
            seen += [str(r["id"]) for r in rows]
            pages += 1
            short += len(rows) < 15 and cursor is not None
            if cursor is None:
                break
            assert pages < 1000
        assert seen == sorted(made, reverse=True)
        assert short > 0 and pages > 3, (short, pages)
        # and with the default window and budget, three full pages
        monkeypatch.undo()
        rows1, c1 = R.list_runs(conn, flt, 15)
        rows2, c2 = R.list_runs(conn, flt, 15, c1)
        rows3, c3 = R.list_runs(conn, flt, 15, c2)
        assert [len(rows1), len(rows2), len(rows3), c3] == [15, 15, 10, None]
        counts, since, _ = R.count_runs(conn, flt)
        assert counts == {"CREATED": 40} and since is None
    sql.execute("SELECT dex.terminate_run(id) FROM dex.runs WHERE workflow_name = %s", (wf,))
