"""Workflows defined in JSON against the same flow as an SDK workflow (docs/performance.md).

The flow: three steps, each adding 1 to a number. As a definition, three SQL steps that dex's
interpreter runs inside the server; as an SDK workflow (the Python SDK's Worker, K workers), a
workflow that calls three activities in turn.

    PGHOST=... python3 bench/definitions.py [N] [K]

Prints "ROW|kind|N|seconds|runs/s|xact/run|check" per kind (transactions: the database's
commits over the workload, the workers' and dex's own included, per run).
"""
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
import dex  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
K = int(sys.argv[2]) if len(sys.argv) > 2 else 2


@dex.activity("inc3")
def inc3(n):
    return n + 1


@dex.workflow("three_steps")
async def three_steps(ctx, n):
    n = await ctx.activity(inc3, n)
    n = await ctx.activity(inc3, n)
    return await ctx.activity(inc3, n)


DEFINITION = """{"steps": [
  {"id": "a", "type": "sql", "sql": "SELECT ($1->>'n')::int + 1 AS n", "next": "b"},
  {"id": "b", "type": "sql", "sql": "SELECT ($1->>'n')::int + 1 AS n", "next": "c"},
  {"id": "c", "type": "sql", "sql": "SELECT ($1->>'n')::int + 1 AS n", "next": "e"},
  {"id": "e", "type": "end", "output": "$.n"}]}"""


def xacts(client):
    time.sleep(1.5)         # the exited backends' counts
    return client.conn.execute("SELECT xact_commit FROM pg_stat_database "
                               "WHERE datname = current_database()").fetchone()[0]


def wait_completed(client, ids):
    # by id (primary key lookups): a count over the queue's runs reads every run of the
    # database (runs have no index on their queue), 1M more after W5's backlog in `make bench`
    while client.conn.execute("SELECT count(*) FROM dex.workflow_run WHERE id = ANY (%s::uuid[]) "
                              "AND status = 'COMPLETED'", (ids,)).fetchone()[0] < N:
        time.sleep(0.05)


def check(client, queue, result_sql):
    ok, n = client.conn.execute(
        f"SELECT count(*) FILTER (WHERE status = 'COMPLETED' AND result = {result_sql}), count(*) "
        "FROM dex.runs WHERE queue = %s", (queue,)).fetchone()
    return f"{'ok' if ok == N else 'FAILED'}: {ok}/{n} completed with argument + 3"


def row(kind, s, x, result):
    print(f"ROW|{kind}|{N}|{s:.2f}|{N / s:.0f}|{x / N:.2f}|{result}", flush=True)


def definition(client, tag):
    wq = f"def3-wf-{tag}"
    client.create_queue(wq, "workflow")
    client.conn.execute("SELECT dex.create_definition(%s, 1, %s::jsonb)", (f"def3-{tag}", DEFINITION))
    x0 = xacts(client)
    t0 = time.monotonic()
    ids = []
    for i in range(0, N, 1000):
        ids += [r[0] for r in client.conn.execute(
            "SELECT id FROM dex.create_runs(%s, %s, "
            "ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(%s::int, %s::int) g), 1)",
            (f"def3-{tag}", wq, i, min(N, i + 1000) - 1)).fetchall()]
    wait_completed(client, ids)
    s = time.monotonic() - t0
    row("definition", s, xacts(client) - x0, check(client, wq, "to_jsonb((argument->>'n')::int + 3)"))


def sdk(client, tag):
    wq, aq = f"sdk3-wf-{tag}", f"sdk3-act-{tag}"
    client.create_queue(wq, "workflow")
    client.create_queue(aq, "activity")
    x0 = xacts(client)
    t0 = time.monotonic()
    ids = []
    for i in range(0, N, 1000):
        ids += client.start_many(three_steps, list(range(i, min(N, i + 1000))), queue=wq)
    workers = [dex.Worker("", [wq], [aq], concurrency=100, max_batch=100, poll_timeout=60,
                          workflows=[three_steps], activities=[inc3], worker_id=f"sdk3-{i}").start()
               for i in range(K)]
    wait_completed(client, ids)
    s = time.monotonic() - t0
    for w in workers:
        w.shutdown()
    row("sdk", s, xacts(client) - x0, check(client, wq, "to_jsonb((argument #>> '{}')::int + 3)"))


def main():
    client = dex.Client("")
    tag = uuid.uuid4().hex[:6]
    definition(client, tag)
    sdk(client, tag)


if __name__ == "__main__":
    main()
