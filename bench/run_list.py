"""How fast the dashboard's run list answers with many runs (issue 19: under 200 ms with
1,000,000 runs).  bench/run_list.sh runs it on a throwaway cluster; it also runs against any
database with dex (PGHOST, PGPORT, PGDATABASE; a superuser):

    python3 bench/run_list.py --runs 1000000 --serve

Set-up (once, kept in the database): BENCH_RUNS runs on three workflow queues, 10,000 per
dex.create_runs call, four workflow names (one rare: 1 run in 100), a label per batch; then
their statuses are set straight in dex.workflow_run (as no client could: only the data matters
here) to a production-like mix: 90 % COMPLETED, 5 % FAILED, 1 % TERMINATED, 0.2 % CANCELLED,
the rest active, and ANALYZE; and the oldest run is made TIMED_OUT, the one run of its
status (a failed run among a million newer ones).  Then the role of a dashboard user
(dex_client, every queue) asks for the first page and a later page of the run list, with the
live counts, under each filter the dashboard has, through the same code (dex.serve.runs):
the first page also on a new connection each time (as a freshly started server's, whose
first statements are slow), counting the empty ones; and, with --serve, end to end: GET
/ui/runs of python3 -m dex serve, which lists a page and counts.  Printed: the median and the
95th percentile of 20 tries each, in milliseconds; whether dex.workflow_run has an index on
(status, id) (create it by hand to compare), and whether the status filters and counts use
dex.runs_in_status (1.11: the set-up then waits until the status sweep has passed every run).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time

import psycopg
from psycopg.rows import dict_row

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))

from dex.serve import runs as R  # noqa: E402

QUEUES = ("bench-orders", "bench-emails", "bench-reports")
ROLE = "bench_dashboard"


def setup(conn: psycopg.Connection, n: int) -> None:
    have = conn.execute("SELECT count(*) FROM dex.workflow_run").fetchone()[0]
    if have >= n:
        print(f"{have} runs already there", file=sys.stderr)
        return
    for q in QUEUES:
        conn.execute("SELECT dex.create_queue(%s, 'workflow') WHERE NOT EXISTS "
                     "(SELECT FROM dex.queue WHERE name = %s)", (q, q))
    t0 = time.monotonic()
    batches = (n - have + 9999) // 10000
    for i in range(batches):
        name = "refund" if i % 100 == 7 else ("checkout", "email", "report")[i % 3]
        conn.execute("SELECT count(*) FROM dex.create_runs(%s, %s, array_fill('{\"n\": 1}'::jsonb, ARRAY[10000]), "
                     "labels => jsonb_build_object('shop', %s::text))",
                     (name, QUEUES[i % 3], f"shop-{i % 7}"))
        if i % 10 == 9:
            print(f"  {(i + 1) * 10000} runs, {time.monotonic() - t0:.0f} s", file=sys.stderr)
    conn.execute("""
        UPDATE dex.workflow_run SET
            status = CASE WHEN h < 900 THEN 'COMPLETED' WHEN h < 950 THEN 'FAILED'
                          WHEN h < 960 THEN 'TERMINATED' WHEN h < 962 THEN 'CANCELLED'
                          WHEN h < 990 THEN 'RUNNING' ELSE 'CREATED' END,
            started_at = created_at,
            completed_at = CASE WHEN h < 962 THEN created_at + interval '2 s' END
          FROM (SELECT id AS rid, abs(hashtext(id::text)) % 1000 AS h FROM dex.workflow_run) x
         WHERE id = rid""")
    conn.execute("VACUUM ANALYZE dex.workflow_run")
    print(f"set up {n} runs in {time.monotonic() - t0:.0f} s", file=sys.stderr)


def wait_for_sweep(conn: psycopg.Connection) -> bool:
    """Until the status sweep (1.11) has passed the newest run; False before 1.11."""
    if conn.execute("SELECT to_regclass('dex.run_status_sweep') IS NULL").fetchone()[0]:
        return False
    t0 = time.monotonic()
    while not conn.execute("SELECT horizon > (SELECT id FROM dex.workflow_run ORDER BY id DESC LIMIT 1) "
                           "FROM dex.run_status_sweep").fetchone()[0]:
        time.sleep(0.5)
    print(f"the status sweep passed every run after {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return True


def one_old_failure(conn: psycopg.Connection) -> None:
    conn.execute("UPDATE dex.workflow_run SET status = 'TIMED_OUT' WHERE id = (SELECT id FROM "
                 "dex.workflow_run ORDER BY id LIMIT 1) AND NOT EXISTS (SELECT FROM dex.workflow_run WHERE status = 'TIMED_OUT')")


def timed(fn, tries: int = 20):
    out = []
    for _ in range(tries):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.95) - 1]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "1000000")))
    p.add_argument("--serve", action="store_true",
                   help="also time GET /ui/runs of python3 -m dex serve (started here, as the superuser)")
    args = p.parse_args()
    with psycopg.connect("", autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS dex")
        setup(conn, args.runs)
        one_old_failure(conn)
        swept = wait_for_sweep(conn)
        indexed = conn.execute("SELECT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                               "AND a.attnum = i.indkey[0] WHERE i.indrelid = 'dex.workflow_run'::regclass "
                               "AND a.attname = 'status')").fetchone()[0]
        conn.execute(f"DO $$BEGIN CREATE ROLE {ROLE} IN ROLE dex_client; "
                     "EXCEPTION WHEN duplicate_object THEN NULL; END$$")
        total = conn.execute("SELECT count(*) FROM dex.workflow_run").fetchone()[0]
        old = conn.execute("SELECT min(created_at) + (max(created_at) - min(created_at)) / 2 "
                           "FROM dex.workflow_run").fetchone()[0]
    cases = [
        ("no filter", {}),
        ("status FAILED (5 %)", {"status": "FAILED"}),
        ("status CANCELLED (0.2 %)", {"status": "CANCELLED"}),
        ("status CREATED (1 %)", {"status": "CREATED"}),
        ("queue", {"queue": QUEUES[1]}),
        ("workflow checkout", {"workflow": "checkout"}),
        ("workflow refund (1 %)", {"workflow": "refund"}),
        ("label shop=shop-3", {"labels": ["shop=shop-3"]}),
        ("instance id (none)", {"instance_id": "order-1042"}),
        ("created after (mid-table)", {"created_after": old}),
        ("created before (mid-table)", {"created_before": old}),
        ("status FAILED + workflow refund", {"status": "FAILED", "workflow": "refund"}),
        ("status TIMED_OUT (one run, the oldest)", {"status": "TIMED_OUT"}),
    ]
    print(f"\nrun list with {total} runs, {'an' if indexed else 'no'} index on dex.workflow_run (status, id), "
          f"{'with' if swept else 'without'} dex.runs_in_status "
          "(milliseconds: median / p95 of 20; empty: first pages with no run)\n")
    print("| filter | first page, new connection (empty) | first page | page 20 | live counts |")
    print("|---|---|---|---|---|")
    with psycopg.connect("", autocommit=True, row_factory=dict_row) as conn:
        conn.execute(f"SET ROLE {ROLE}")
        for name, kw in cases:
            flt = R.RunFilter(**kw)
            empty = []

            def cold():
                with psycopg.connect("", autocommit=True, row_factory=dict_row) as fresh:
                    fresh.execute(f"SET ROLE {ROLE}")
                    t0 = time.perf_counter()
                    rows, _ = R.list_runs(fresh, flt, 50)
                    empty.append(not rows)
                    return (time.perf_counter() - t0) * 1000
            new = sorted(cold() for _ in range(20))
            new_conn = (statistics.median(new), new[int(len(new) * 0.95) - 1])
            first = timed(lambda: R.list_runs(conn, flt, 50))
            cursor = None
            for _ in range(19):
                _, cursor = R.list_runs(conn, flt, 50, cursor)
                if cursor is None:
                    break
            later = timed(lambda: R.list_runs(conn, flt, 50, cursor)) if cursor else None
            counts = timed(lambda: R.count_runs(conn, flt))
            fmt = lambda m: "–" if m is None else f"{m[0]:.1f} / {m[1]:.1f}"  # noqa: E731
            print(f"| {name} | {fmt(new_conn)} ({sum(empty)}) | {fmt(first)} | {fmt(later)} | {fmt(counts)} |",
                  flush=True)
    if args.serve:
        import subprocess
        import urllib.request
        with psycopg.connect("", autocommit=True) as conn:
            conn.execute("DELETE FROM dex.api_token WHERE name = 'bench-dashboard'")
            token = conn.execute("SELECT dex.create_api_token('bench-dashboard', %s)", (ROLE,)).fetchone()[0]
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        srv = subprocess.Popen([sys.executable, "-m", "dex", "serve", "--listen", f"127.0.0.1:{port}"],
                               cwd=os.path.join(HERE, "..", "clients", "python"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    urllib.request.urlopen(url + "/healthz").read()
                    break
                except OSError:
                    time.sleep(0.1)

            def get(path):
                req = urllib.request.Request(url + path, headers={"Cookie": f"dex_token={token}"})
                with urllib.request.urlopen(req) as r:
                    assert r.status == 200 and b'id="runs"' in r.read()
            print("\nthe dashboard's run list, GET through dex serve (the page: list and live counts)\n")
            print("| page | median / p95 |")
            print("|---|---|")
            for path in ("/ui/runs", "/ui/runs?status=FAILED", "/ui/runs?status=CANCELLED",
                         f"/ui/runs?queue={QUEUES[1]}", "/ui/runs?workflow=refund",
                         "/ui/runs?label=shop%3Dshop-3", "/ui/runs?instance_id=order-1042"):
                m = timed(lambda: get(path))
                print(f"| `{path}` | {m[0]:.1f} / {m[1]:.1f} |", flush=True)
        finally:
            srv.terminate()
            srv.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
