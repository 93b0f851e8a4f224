"""W1 of bench/README.md through the Python SDK's Worker, to compare with the TypeScript SDK's
(clients/typescript/bench/w1.ts, the same workload and figures; bench/sdk-w1.sh runs both).

    PGHOST=... python3 bench/sdk_w1.py [N] [K]

Prints "ROW|python (protobuf)|N|seconds|runs/s|xact/run|client CPU ms/run|server CPU ms/run|create runs/s|process runs/s|check"
(client CPU: this process's time over the workload, creates included; server CPU: the time of the
workers' server backends, from /proc, so the cluster must run on this machine).
"""
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
import dex  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
K = int(sys.argv[2]) if len(sys.argv) > 2 else 2


@dex.activity("inc")
def inc(n):
    return n + 1


@dex.workflow("w1")
async def w1(ctx, n):
    return await ctx.activity(inc, n)


def backends_cpu(client, app_prefix):
    """CPU seconds the server backends of the workers (application_name 'dex worker <prefix>...')
    have used (/proc/PID/stat: utime + stime)."""
    pids = [r[0] for r in client.conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s", (app_prefix + "%",))]
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass                        # gone meanwhile
    return total / os.sysconf("SC_CLK_TCK")


def xacts(client):
    time.sleep(1.5)         # the exited backends' counts
    return client.conn.execute("SELECT xact_commit FROM pg_stat_database "
                               "WHERE datname = current_database()").fetchone()[0]


def main():
    client = dex.Client("")
    tag = uuid.uuid4().hex[:6]
    wq, aq = f"w1py-wf-{tag}", f"w1py-act-{tag}"
    client.create_queue(wq, "workflow")
    client.create_queue(aq, "activity")
    x0 = xacts(client)
    t0 = time.monotonic()
    cpu0 = time.process_time()
    for i in range(0, N, 1000):
        client.start_many(w1, list(range(i, min(N, i + 1000))), queue=wq)
    t1 = time.monotonic()
    workers = [dex.Worker("", [wq], [aq], concurrency=100, max_batch=100, poll_timeout=60,
                          workflows=[w1], activities=[inc], worker_id=f"w1py-{i}").start()
               for i in range(K)]
    while client.conn.execute("SELECT count(*) FROM dex.runs WHERE queue = %s AND status = 'COMPLETED'",
                              (wq,)).fetchone()[0] < N:
        time.sleep(0.05)
    t2 = time.monotonic()
    cpu = time.process_time() - cpu0
    server_cpu = backends_cpu(client, "dex worker w1py-")
    for w in workers:
        w.shutdown()
    ok, n = client.conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'COMPLETED' AND result = to_jsonb((argument #>> '{}')::int + 1)), "
        "count(*) FROM dex.runs WHERE queue = %s", (wq,)).fetchone()
    x1 = xacts(client)
    s = t2 - t0
    print(f"ROW|python (protobuf)|{N}|{s:.2f}|{N / s:.0f}|{(x1 - x0) / N:.2f}|{1000 * cpu / N:.3f}|"
          f"{1000 * server_cpu / N:.3f}|"
          f"{N / (t1 - t0):.0f}|{N / (t2 - t1):.0f}|"
          f"{'ok' if ok == N else 'FAILED'}: {ok}/{n} completed with argument + 1")


if __name__ == "__main__":
    main()
