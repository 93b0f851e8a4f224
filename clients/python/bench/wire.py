"""What each wire form costs the SDK's hot calls, end to end: bytes, server CPU, client CPU.

    PGHOST=... python3 clients/python/bench/wire.py [--runs 100] [--steps 50] [--batch 100]
    bash clients/python/bench/run.sh          # the same on a throwaway cluster

Workload: ``--runs`` runs of a chain workflow of ``--steps`` sequential activities, each
activity's argument and result a JSON object of about 100 bytes; workflow task k of a run
therefore carries a history of about 4k events.  A single-threaded driver plays a worker: it
polls a batch of workflow tasks, decodes them, runs them (full replay, or resumed from the
workflow cache), encodes their commands and completes the batch; then the same for activity
tasks; until every run completed.  It does this once per configuration, on fresh runs:

    json        dex.poll_tasks / dex.complete_tasks (jsonb), no workflow cache
    protobuf    dex.poll_tasks_pb / dex.complete_tasks_pb (bytea, dex._proto), no cache
    json+cache, protobuf+cache   the same with the workflow cache (Worker's default)

and reports, per task, for each call:

    bytes    what the client received and sent on its TCP connection over the call
             (the kernel's TCP_INFO counters: libpq's messages, no TCP/IP headers)
    server   CPU time of the connection's backend over the call (/proc/PID/schedstat;
             the server runs on this machine), the commit included
    client   this thread's CPU time (time.thread_time) for the call and the conversion of
             its values: psycopg parsing jsonb (json.loads) or dex._proto decoding /
             encoding protobuf; replaying or resuming workflow code is reported apart

Results are binary (psycopg ``binary=True``) in both forms, so a bytea is not hex-escaped and
a jsonb is its text; parameters are what psycopg sends by default (jsonb as text, bytea in
binary).  The figures of the README's "Wire format" come from
``--runs 100 --steps 50`` and ``--runs 100 --steps 5`` (2 cores, shared; CPU figures vary by
about 10 % between runs, bytes not at all).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import psycopg  # noqa: E402

import dex  # noqa: E402
from dex import _wire  # noqa: E402
from dex._runtime import _Replayer  # noqa: E402
from dex.registry import workflow_definition  # noqa: E402
from dex.worker import WorkflowCache  # noqa: E402

NOTE = "x" * 80          # makes each argument and result about 100 bytes of JSON


@dex.activity("bench-wire-step")
def step(x: dict) -> dict:
    return {"i": x["i"] + 1, "note": NOTE}


@dex.workflow("bench-wire-chain")
async def chain(ctx: dex.WorkflowContext, n: int) -> int:
    x = {"i": 0, "note": NOTE}
    for _ in range(n):
        x = await ctx.activity(step, x)
    return x["i"]


class SocketBytes:
    """Bytes received and sent on a TCP connection, from the kernel (TCP_INFO's
    tcpi_bytes_received and tcpi_bytes_acked): the payload, exactly what libpq exchanged."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.sock = socket.fromfd(conn.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM)
        if self.sock.family != socket.AF_INET:
            raise RuntimeError("bytes are counted on TCP connections only: connect with "
                               "host=127.0.0.1 (clients/python/bench/run.sh does)")

    def __call__(self) -> Tuple[int, int]:
        info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        acked, received = struct.unpack_from("<QQ", info, 120)
        return received, acked


class Meter:
    """Sums, per call, bytes read and written, server CPU and client CPU."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.stat = f"/proc/{conn.info.backend_pid}/schedstat"
        self.io = SocketBytes(conn)
        self.sums: Dict[str, List[float]] = {}

    def server_ns(self) -> int:
        with open(self.stat) as f:
            return int(f.read().split()[0])

    def measure(self, call: str, fn: Callable[[], Any], items: Callable[[Any], int]) -> Any:
        s0, io0 = self.server_ns(), self.io()
        c0 = time.thread_time_ns()
        out = fn()
        c1 = time.thread_time_ns()
        io1, s1 = self.io(), self.server_ns()
        acc = self.sums.setdefault(call, [0, 0, 0, 0, 0])
        acc[0] += items(out)
        acc[1] += io1[0] - io0[0]
        acc[2] += io1[1] - io0[1]
        acc[3] += s1 - s0
        acc[4] += c1 - c0
        return out

    def cpu(self, call: str, fn: Callable[[], Any], items: int) -> Any:
        c0 = time.thread_time_ns()
        out = fn()
        acc = self.sums.setdefault(call, [0, 0, 0, 0, 0])
        acc[0] += items
        acc[4] += time.thread_time_ns() - c0
        return out


def drive(conninfo: str, form: str, cache_size: int, runs: int, steps: int,
          batch: int) -> Tuple[Dict[str, List[float]], float, Dict[str, int]]:
    """Run the workload once with one wire form; the meter's sums, the wall time, counts."""
    wire = _wire.wire(form)
    tag = uuid.uuid4().hex[:8]
    wq, aq = f"bw-{tag}", f"ba-{tag}"
    with dex.Client(conninfo) as client:
        client.create_queue(wq, "workflow")
        client.create_queue(aq, "activity")
        ids = client.start_many(chain, [steps] * runs, queue=wq)
    definition = workflow_definition(chain)
    cache = WorkflowCache(cache_size)
    counts = {"full_replays": 0, "cache_hits": 0, "history_events": 0, "workflow_tasks": 0}
    conn = psycopg.connect(conninfo, autocommit=True)
    meter = Meter(conn)
    worker_id = f"bench-{tag}"
    t0 = time.monotonic()
    left = runs
    while left:
        # workflow tasks
        rows = meter.measure("poll workflow tasks",
                             lambda: [(r, wire.workflow_task(r[3], cache_skip(cache, r[0])))
                                      for r in wire.poll(conn, wq, worker_id, batch, 60)],
                             len)
        done, results, states = [], [], []
        for row, (task, skipped) in rows:
            state = cache.take(row[0])
            cmds = None
            if state is not None:
                cmds = meter.cpu("run workflow code", lambda: state.resume(
                    task, task.get("history") or [], skipped), 1)
                if cmds is None:
                    state.close()
                else:
                    counts["cache_hits"] += 1
            if cmds is None:
                if skipped:
                    task, _ = wire.workflow_task(row[3])
                state = _Replayer(definition, aq)
                cmds = meter.cpu("run workflow code", lambda: state.run(task), 1)
                counts["full_replays"] += 1
            counts["history_events"] += int(task.get("historyLength", 0))
            counts["workflow_tasks"] += 1
            left -= any("completeRun" in c or "failRun" in c for c in cmds)
            done.append(row)
            results.append(cmds)
            states.append(state)
        if done:
            out = meter.measure("complete workflow tasks", lambda: wire.complete(
                conn, done, [wire.commands(c) for c in results]), len)
            ok = {r[0] for r in out if r[2]}
            assert len(ok) == len(done), "a workflow completion was refused"
            for row, state in zip(done, states):
                cache.put(row[0], state)
        # activity tasks
        acts = meter.measure("poll activity tasks",
                             lambda: [(r, wire.activity_task(r[3]))
                                      for r in wire.poll(conn, aq, worker_id, batch, 60)], len)
        if not rows and not acts:
            raise RuntimeError(f"{left} runs have no task to poll")
        if acts:
            values = [step(dex.decode(t.get("argument"))) for _, t in acts]
            meter.measure("complete activity tasks", lambda: wire.complete(
                conn, [r for r, _ in acts], [wire.result(v) for v in values]), len)
    wall = time.monotonic() - t0
    conn.close()
    cache.clear()
    with dex.Client(conninfo) as client:
        assert all(client.get(i).status == "COMPLETED" for i in ids)
    return meter.sums, wall, counts


def cache_skip(cache: WorkflowCache, run_id: Any) -> int:
    """How many history events a cached run's state has seen (0 when it is not cached)."""
    state = cache._runs.get(run_id)
    return state.history_seen if state is not None else 0


def worker_run(conninfo: str, form: str, cache_size: int, runs: int, steps: int,
               concurrency: int) -> Dict[str, float]:
    """The real thing: ``python3 -m dex worker`` in a process of its own runs ``runs`` chains;
    its wall time, its CPU time (all threads) and its connections' server CPU time."""
    tag = uuid.uuid4().hex[:8]
    wq, aq, worker_id = f"bw-{tag}", f"ba-{tag}", f"bench-{tag}"
    with dex.Client(conninfo) as client:
        client.create_queue(wq, "workflow")
        client.create_queue(aq, "activity")
        ids = client.start_many(chain, [steps] * runs, queue=wq)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "dex", "--conninfo", conninfo, "worker", "wire", "-w", wq,
             "-a", aq, "-c", str(concurrency), "--worker-id", worker_id, "--wire", form,
             "--workflow-cache-size", str(cache_size)], cwd=HERE, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for i in ids:
                client.result(i, timeout=600)
            wall = time.monotonic() - t0
            pids = [r[0] for r in client.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                (f"dex worker {worker_id}"[:63],)).fetchall()]
            server = 0
            for pid in pids:
                with open(f"/proc/{pid}/schedstat") as f:
                    server += int(f.read().split()[0])
            proc.send_signal(signal.SIGTERM)
            _, _, usage = os.wait4(proc.pid, 0)
            proc.returncode = 0
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
    tasks = runs * (2 * steps + 1)
    return {"wall": wall, "tasks/s": tasks / wall,
            "client µs/task": (usage.ru_utime + usage.ru_stime) * 1e6 / tasks,
            "server µs/task": server / 1000 / tasks}


def per_task(sums: Dict[str, List[float]]) -> Dict[str, List[float]]:
    """Per call: [tasks, bytes received, bytes sent, server µs, client µs], per task."""
    out = {}
    for call, (n, rd, wr, srv, cli) in sums.items():
        n = max(1, n)
        out[call] = [n, rd / n, wr / n, srv / n / 1000, cli / n / 1000]
    return out


def median(values: List[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conninfo", default="")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3,
                   help="rounds (each runs every configuration once); medians are shown")
    p.add_argument("--configs", default="json,protobuf,json+cache,protobuf+cache")
    p.add_argument("--worker", action="store_true",
                   help="run the real worker instead (python3 -m dex worker, concurrency 10)")
    args = p.parse_args()
    with psycopg.connect(args.conninfo, autocommit=True) as c:
        c.execute("SET client_min_messages = warning")
        c.execute("CREATE EXTENSION IF NOT EXISTS dex")
    configs = args.configs.split(",")
    if args.worker:
        return worker_main(args, configs)
    rounds: Dict[str, List[Tuple[Dict[str, List[float]], float, Dict[str, int]]]] = {
        c: [] for c in configs}
    for r in range(args.repeat):
        for config in configs:          # interleaved, so that a busy moment hits them all
            form, _, cached = config.partition("+")
            sums, wall, counts = drive(args.conninfo, form, 1000 if cached else 0, args.runs,
                                       args.steps, args.batch)
            rounds[config].append((per_task(sums), wall, counts))
            print(f"round {r + 1}, {config}: {wall:.1f} s", file=sys.stderr)
    print(f"# {args.runs} runs x {args.steps} activities, batches of {args.batch}, median of "
          f"{args.repeat} rounds; per task: bytes received and sent by the client, server and "
          f"client CPU in µs")
    for config in configs:
        results = rounds[config]
        counts = results[0][2]
        mean_hist = counts["history_events"] / max(1, counts["workflow_tasks"])
        print(f"\n## {config}: {median([w for _, w, _ in results]):.1f} s, "
              f"{counts['workflow_tasks']} workflow tasks (history {mean_hist:.0f} events on "
              f"average), {counts['full_replays']} full replays, {counts['cache_hits']} resumed")
        print(f"{'call':26} {'tasks':>6} {'B recv':>8} {'B sent':>8} {'server µs':>10} "
              f"{'client µs':>10}")
        for call in results[0][0]:
            row = [median([res[call][i] for res, _, _ in results]) for i in range(5)]
            print(f"{call:26} {row[0]:6.0f} {row[1]:8.0f} {row[2]:8.0f} {row[3]:10.1f} "
                  f"{row[4]:10.1f}")
        print("RESULT " + json.dumps({"config": config, "rounds": rounds[config]}))


def worker_main(args: argparse.Namespace, configs: List[str]) -> None:
    rounds: Dict[str, List[Dict[str, float]]] = {c: [] for c in configs}
    for r in range(args.repeat):
        for config in configs:
            form, _, cached = config.partition("+")
            rounds[config].append(worker_run(args.conninfo, form, 1000 if cached else 0,
                                             args.runs, args.steps, 10))
            print(f"round {r + 1}, {config}: {rounds[config][-1]}", file=sys.stderr)
    print(f"# the worker (python3 -m dex worker, concurrency 10): {args.runs} runs x "
          f"{args.steps} activities, median of {args.repeat} rounds; per task (workflow and "
          f"activity tasks): the worker process's CPU and its connections' server CPU")
    print(f"{'config':16} {'s':>6} {'tasks/s':>8} {'client µs':>10} {'server µs':>10}")
    for config in configs:
        m = {k: median([x[k] for x in rounds[config]]) for k in rounds[config][0]}
        print(f"{config:16} {m['wall']:6.1f} {m['tasks/s']:8.0f} {m['client µs/task']:10.1f} "
              f"{m['server µs/task']:10.1f}")


if __name__ == "__main__":
    main()
