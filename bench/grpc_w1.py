"""W1 of bench/README.md through workers over the gRPC API (docs/grpc.md) instead of SQL: the
same workload as bench/sdk_w1.py (N one-activity workflows created up front with create_runs,
then K workers, each one workflow and one activity loop of up to 100 tasks a poll), served by
``python3 -m dex grpc`` (started here, as a login role of its own; its calls run as the
workers' token's role).

    PGHOST=... python3 bench/grpc_w1.py [N] [K] [unary|stream]

unary: each round is a PollTasks call carrying the last round's completions, with a 5 s wait;
stream: the same requests on one PollTasksStream per loop.  The worker answers a workflow task
from its history (no SDK): the first schedules ``inc``, the next completes the run with its
result.

Prints "ROW|grpc (<mode>)|N|seconds|runs/s|xact/run|client CPU ms/run|server CPU ms/run|create
runs/s|process runs/s|check|gateway CPU ms/run": client CPU is this process's (the workers and
the driver's creates), server CPU the gRPC server's database backends (application_name
'dex serve', from /proc), gateway CPU the gRPC server process itself.  Then "EMPTY|<mode>|..." for 2,000 polls of an empty queue
without a wait, one at a time: their round trip and the gRPC server's CPU per poll.
"""
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..", "clients", "python")
sys.path.insert(0, PKG)
import grpc  # noqa: E402
import psycopg  # noqa: E402
from google.protobuf.duration_pb2 import Duration  # noqa: E402

from dex.v1 import command_pb2 as cmd, common_pb2 as common, service_pb2 as pb  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
K = int(sys.argv[2]) if len(sys.argv) > 2 else 2
MODE = sys.argv[3] if len(sys.argv) > 3 else "unary"


def cpu_of(pid):
    """CPU seconds of a process (/proc/PID/stat: utime + stime)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0                      # gone meanwhile


def xacts(conn):
    time.sleep(1.5)         # the exited backends' counts
    return conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workflow(t):
    """The commands of a W1 workflow task, from its history."""
    events = list(t.history) + list(t.new_events)
    done = next((e.activity_task_completed for e in events if e.HasField("activity_task_completed")), None)
    if done is not None:
        return [cmd.Command(complete_run=cmd.CompleteRun(result=done.result))]
    arg = next(e.run_created.argument for e in events if e.HasField("run_created"))
    return [cmd.Command(id=1, schedule_activity=cmd.ScheduleActivity(name="inc", queue=AQ, argument=arg))]


def completion(task):
    if task.HasField("workflow"):
        t = task.workflow
        return pb.TaskCompletion(lease=pb.Lease(run_id=t.run_id, task_id=0, lock_version=t.lock_version),
                                 workflow=cmd.WorkflowTaskCompletion(commands=workflow(t)))
    a = task.activity
    return pb.TaskCompletion(lease=pb.Lease(run_id=a.run_id, task_id=a.task_id, lock_version=a.lock_version),
                             activity=common.Payload(json=str(int(a.argument.json) + 1)))


class Loop(threading.Thread):
    """One worker loop on one queue: poll up to 100 tasks, carrying the last round's completions."""

    def __init__(self, stub, token, queue, worker_id):
        super().__init__(daemon=True)
        self.stub, self.queue, self.worker_id = stub, queue, worker_id
        self.meta = (("authorization", f"Bearer {token}"),)
        self.stopping = False

    def requests(self, first):
        return pb.PollTasksRequest(queue=self.queue, worker_id=self.worker_id, max_tasks=100,
                                   wait=Duration(seconds=0 if self.stopping else 5), completions=first)

    def run(self):
        done = []
        if MODE == "stream":
            import queue as q
            out = q.Queue()
            answers = self.stub.PollTasksStream(iter(out.get, None), metadata=self.meta)
            out.put(self.requests(done))
            for answer in answers:
                done = [completion(t) for t in answer.tasks]
                if self.stopping and not done:
                    out.put(None)
                    continue
                out.put(self.requests(done))
            return
        while not self.stopping or done:
            answer = self.stub.PollTasks(self.requests(done), metadata=self.meta, timeout=60)
            done = [completion(t) for t in answer.tasks]


AQ = ""


def empty_polls(stub, token, queue, gateway, n=2000):
    """n polls of an empty queue without a wait, one at a time, as unary calls or on one stream:
    the round trip's median (ms) and the gRPC server's CPU per poll (ms).  What the two wires
    cost apart from the work: each poll is one transaction either way."""
    meta = (("authorization", f"Bearer {token}"),)
    req = pb.PollTasksRequest(queue=queue, worker_id="w1grpc-empty", max_tasks=100)
    times = []
    gw0 = cpu_of(gateway.pid)
    if MODE == "stream":
        import queue as q
        out = q.Queue()
        answers = stub.PollTasksStream(iter(out.get, None), metadata=meta)
        for _ in range(n):
            t = time.perf_counter()
            out.put(req)
            next(answers)
            times.append(time.perf_counter() - t)
        out.put(None)
        for _ in answers:
            pass
    else:
        for _ in range(n):
            t = time.perf_counter()
            stub.PollTasks(req, metadata=meta, timeout=30)
            times.append(time.perf_counter() - t)
    times.sort()
    return 1000 * times[n // 2], 1000 * (cpu_of(gateway.pid) - gw0) / n


def main():
    global AQ
    conn = psycopg.connect("", autocommit=True)
    tag = uuid.uuid4().hex[:6]
    wq, AQ = f"w1grpc-wf-{tag}", f"w1grpc-act-{tag}"
    worker, server = f"w1grpc_worker_{tag}", f"w1grpc_server_{tag}"
    conn.execute(f"CREATE ROLE {worker} IN ROLE dex_client, dex_worker")
    conn.execute(f"CREATE ROLE {server} LOGIN")
    conn.execute(f"GRANT {worker} TO {server}")
    conn.execute("SELECT dex.create_queue(%s, 'workflow'), dex.create_queue(%s, 'activity')", (wq, AQ))
    for q in (wq, AQ):
        conn.execute("SELECT dex.grant_queue(%s, %s::regrole)", (q, worker))
    token = conn.execute("SELECT dex.create_api_token(%s, %s::regrole)", (f"w1grpc-{tag}", worker)).fetchone()[0]
    port = free_port()
    gateway = subprocess.Popen([sys.executable, "-m", "dex", "--conninfo", f"user={server}", "grpc",
                                "--listen", f"127.0.0.1:{port}", "--pool-size", str(2 * K)],
                               cwd=PKG, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)])
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = type("Stub", (), {})()
    for name, req, resp in (("PollTasks", pb.PollTasksRequest, pb.PollTasksResponse),):
        setattr(stub, name, channel.unary_unary(f"/dex.v1.DexService/{name}", request_serializer=req.SerializeToString,
                                                response_deserializer=resp.FromString))
    stub.PollTasksStream = channel.stream_stream("/dex.v1.DexService/PollTasksStream",
                                                 request_serializer=pb.PollTasksRequest.SerializeToString,
                                                 response_deserializer=pb.PollTasksResponse.FromString)
    try:
        x0 = xacts(conn)
        t0 = time.monotonic()
        cpu0, gw0 = time.process_time(), cpu_of(gateway.pid)
        for i in range(0, N, 1000):
            conn.execute("SELECT count(*) FROM dex.create_runs('w1', %s, "
                         "(SELECT array_agg(to_jsonb(n)) FROM generate_series(%s::int, %s::int) n))", (wq, i, min(N, i + 1000) - 1))
        t1 = time.monotonic()
        loops = [Loop(stub, token, q, f"w1grpc-{i}") for i in range(K) for q in (wq, AQ)]
        for lp in loops:
            lp.start()
        while conn.execute("SELECT count(*) FROM dex.runs WHERE queue = %s AND status = 'COMPLETED'",
                           (wq,)).fetchone()[0] < N:
            time.sleep(0.05)
        t2 = time.monotonic()
        cpu = time.process_time() - cpu0
        gw = cpu_of(gateway.pid) - gw0
        server_cpu = sum(cpu_of(r[0]) for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'dex serve' AND usename = %s", (server,)))
        for lp in loops:
            lp.stopping = True
        for lp in loops:
            lp.join(15)         # each ends at its next answer (5 s at most)
        ok, n = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'COMPLETED' AND result = to_jsonb((argument #>> '{}')::int + 1)), "
            "count(*) FROM dex.runs WHERE queue = %s", (wq,)).fetchone()
        x1 = xacts(conn)
        empty_p50, empty_cpu = empty_polls(stub, token, wq, gateway)
    finally:
        gateway.terminate()
        gateway.wait(15)
        channel.close()
    s = t2 - t0
    print(f"ROW|grpc ({MODE})|{N}|{s:.2f}|{N / s:.0f}|{(x1 - x0) / N:.2f}|{1000 * cpu / N:.3f}|"
          f"{1000 * server_cpu / N:.3f}|{N / (t1 - t0):.0f}|{N / (t2 - t1):.0f}|"
          f"{'ok' if ok == N else 'FAILED'}: {ok}/{n} completed with argument + 1|{1000 * gw / N:.3f}", flush=True)
    print(f"EMPTY|{MODE}|2000 polls of an empty queue one at a time: round trip p50 {empty_p50:.2f} ms, "
          f"gRPC server CPU {empty_cpu:.3f} ms a poll", flush=True)
    conn.execute("DELETE FROM dex.api_token WHERE name = %s", (f"w1grpc-{tag}",))
    for q in (wq, AQ):
        conn.execute("SELECT dex.revoke_queue(%s, %s::regrole)", (q, worker))
    conn.execute(f"DROP ROLE {server}, {worker}")


if __name__ == "__main__":
    main()
