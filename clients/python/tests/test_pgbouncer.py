"""The SDK behind a real PgBouncer (Debian's pgbouncer, /usr/sbin/pgbouncer) in front of the
test cluster: with a small pool in transaction mode (and in statement and session mode), a
worker and a client complete workflows; the pooler is detected; without pooled the worker's
prepared statements break in a transaction pool, and the SDK says why without failing anything;
the long poll wakes, holds its server connection while it waits, is cancelled at shutdown
and frees its server connection when its worker is killed."""

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

import crashflows
import dex
import dex.__main__
from conftest import event_kinds
from dex._connect import POOLER_HINT, behind_pooler

HERE = os.path.dirname(os.path.abspath(__file__))
PGBOUNCER = "/usr/sbin/pgbouncer"


class PgBouncer:
    """A pgbouncer of this test's own, listening on a Unix socket in a private directory, in
    front of the test cluster (as the test's user, with auth_type = trust)."""

    def __init__(self, pool_mode: str, pool_size: int) -> None:
        with psycopg.connect("", autocommit=True) as c:    # where the cluster is
            host, port, user, db = c.info.host, c.info.port, c.info.user, c.info.dbname
        self.dir = tempfile.mkdtemp(prefix="dex-pgb-")    # short: a socket path has 107 bytes
        self.port = 6432
        self.user, self.dbname = user, db
        self.log = os.path.join(self.dir, "pgbouncer.log")
        with open(os.path.join(self.dir, "users.txt"), "w") as f:
            f.write(f'"{user}" ""\n')
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(ini, "w") as f:
            f.write(f"""[databases]
{db} = host={host} port={port} dbname={db}

[pgbouncer]
listen_port = {self.port}
unix_socket_dir = {self.dir}
auth_type = trust
auth_file = {self.dir}/users.txt
admin_users = {user}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 100
logfile = {self.log}
""")
        self.proc = subprocess.Popen([PGBOUNCER, ini], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        self.conninfo = f"host={self.dir} port={self.port} dbname={db} user={user}"
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.admin() as a:
                    a.execute("SHOW VERSION")
                break
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"pgbouncer did not start: {self.log_text()}")
                time.sleep(0.05)

    def admin(self) -> psycopg.Connection:
        """A connection to pgbouncer's admin console (simple query protocol only)."""
        return psycopg.connect(f"host={self.dir} port={self.port} dbname=pgbouncer "
                               f"user={self.user}", autocommit=True,
                               cursor_factory=psycopg.ClientCursor)

    def show(self, what: str) -> list:
        with self.admin() as a:
            return a.cursor(row_factory=dict_row).execute(f"SHOW {what}").fetchall()

    def pool(self) -> dict:
        """The test database's row of SHOW POOLS."""
        return [p for p in self.show("POOLS") if p["database"] == self.dbname][0]

    def log_text(self) -> str:
        try:
            with open(self.log) as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pgbouncer(conninfo):
    """pgbouncer(pool_mode="transaction", pool_size=2): a started PgBouncer, stopped at the end."""
    if not os.access(PGBOUNCER, os.X_OK):
        pytest.skip(f"no {PGBOUNCER} (Debian package pgbouncer; test/deps.sh installs it)")
    if os.geteuid() == 0:
        pytest.skip("pgbouncer refuses to run as root (test/run-tests.sh runs the tests as "
                    "the cluster's user)")
    started = []

    def start(pool_mode: str = "transaction", pool_size: int = 2) -> PgBouncer:
        b = PgBouncer(pool_mode, pool_size)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture
def worker(queues):
    """worker(conninfo, **options): a started Worker on the test's queues, shut down at the end."""
    workers = []

    def start(conninfo: str, **kw) -> dex.Worker:
        kw.setdefault("workflow_queues", [queues[0]])
        kw.setdefault("activity_queues", [queues[1]])
        kw.setdefault("concurrency", 8)
        kw.setdefault("shutdown_timeout", 5)
        w = dex.Worker(conninfo, **kw).start()
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.shutdown()


@pytest.fixture
def observer(conninfo):
    """A direct connection to the cluster, to look at pg_stat_activity."""
    with psycopg.connect(conninfo, autocommit=True) as c:
        yield c


def waits(observer, application_name):
    """The server backends of a client that are inside CALL dex.wait_for_tasks now."""
    return observer.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND state = 'active' "
        "AND query LIKE 'CALL dex.wait_for_tasks%%'", (application_name,)).fetchall()


def wait_until(what, timeout=15, message=""):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, message or f"timed out waiting for {what}"
        time.sleep(0.05)


@dex.activity("pgb-add")
def add(x):
    return x["a"] + x["b"]


@dex.workflow("pgb-flow")
async def flow(ctx, n):
    total = 0
    for i in range(n):                              # one after another
        total = await ctx.activity(add, {"a": total, "b": i})
    parts = await ctx.all_of(*[ctx.activity(add, {"a": i, "b": 1}) for i in range(4)])
    await ctx.sleep(0.2)                            # a durable timer
    event = await ctx.wait_event("go", timeout=60)
    return {"total": total, "parts": parts, "event": event}


def expected(n):
    return {"total": sum(range(n)), "parts": [1, 2, 3, 4], "event": {"n": n}}


def run_flows(client, queue, sizes, timeout=60):
    runs = {client.start(flow, n, queue=queue): n for n in sizes}
    for run_id, n in runs.items():
        client.send_event(run_id, "go", {"n": n})
    for run_id, n in runs.items():
        assert client.result(run_id, timeout=timeout) == expected(n)
    return list(runs)


@pytest.mark.parametrize("mode, pooled", [("transaction", None), ("transaction", True),
                                          ("statement", None), ("session", None),
                                          ("session", False)],
                         ids=["transaction", "transaction-pooled=True", "statement", "session",
                              "session-pooled=False"])
def test_a_worker_and_a_client_through_pgbouncer(pgbouncer, queues, worker, caplog, mode, pooled):
    caplog.set_level(logging.INFO, logger="dex")
    # transaction and statement pools: two queues wait in dex.wait_for_tasks, and one more
    # server connection for the rest; a session pool: one for each connection (the worker's
    # two pollers and reporter, the client)
    b = pgbouncer(pool_mode=mode, pool_size=4 if mode == "session" else 3)
    w = worker(b.conninfo, pooled=pooled, poll_timeout=30)
    with dex.Client(b.conninfo, pooled=pooled) as client:
        # a session pool keeps the session: there prepared statements may stay (pooled=False)
        assert client.pooled is (pooled is not False)
        assert (client.conn.prepare_threshold is None) is (pooled is not False)
        # each run: 8 to 12 activities, 4 at once, a timer, an event; every statement runs
        # far more often than psycopg's prepare_threshold (5)
        run_ids = run_flows(client, queues[0], [8, 9, 10, 11, 12])
        kinds = event_kinds(client.history(run_ids[0]))
        assert kinds.count("activityTaskCompleted") == 12 and "timerElapsed" in kinds
        clients, servers = len(b.show("CLIENTS")), len(b.show("SERVERS"))
        if mode != "session":       # more clients than server connections: a shared pool
            assert clients > servers > 0 and servers <= 3
    assert w.behind_pooler is (pooled is not False)
    assert w.stats["activities_completed"] == 8 + 9 + 10 + 11 + 12 + 5 * 4
    assert w.stats["activities_failed"] == 0 and w.stats["leases_lost"] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], \
        [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    detected = [r for r in caplog.records if "goes through a connection pooler" in r.getMessage()]
    assert len(detected) == (1 if pooled is None else 0)


def test_a_pooler_is_detected_and_a_direct_connection_keeps_prepared_statements(
        pgbouncer, conninfo, queues, worker):
    with dex.Client(conninfo) as direct:
        assert direct.pooled is False and direct.conn.prepare_threshold == 5
        assert behind_pooler(direct.conn) is False
    w = worker(conninfo, poll_timeout=5)            # direct
    wait_until(lambda: w.behind_pooler is not None)
    assert w.behind_pooler is False
    for mode in ("transaction", "session"):
        b = pgbouncer(pool_mode=mode)
        with dex.Client(b.conninfo) as c:
            assert c.pooled is True and c.conn.prepare_threshold is None, mode
            with dex.Client(b.conninfo, pooled=False) as c2:   # told: no check
                assert c2.pooled is False and c2.conn.prepare_threshold == 5
                assert behind_pooler(c2.conn) is True
    # a connection of the caller's is used as it was made, unless pooled=True
    with psycopg.connect(b.conninfo, autocommit=True) as own:
        assert dex.Client(connection=own).pooled is False and own.prepare_threshold == 5
        assert dex.Client(connection=own, pooled=True).pooled is True
        assert own.prepare_threshold is None


def test_without_pooled_the_worker_fails_and_says_why(pgbouncer, conninfo, client, queues,
                                                      worker, caplog):
    caplog.set_level(logging.INFO, logger="dex")
    b = pgbouncer(pool_size=2)
    # the client: two of them, each preparing its statements (_pg3_0) after 5 runs, on the
    # server connections of one pool
    run_id = client.start(flow, 1, queue=queues[0])
    with dex.Client(b.conninfo, pooled=False) as c1, dex.Client(b.conninfo, pooled=False) as c2:
        with pytest.raises(dex.ServerError) as raised:
            for _ in range(20):
                c1.get(run_id)
                c2.get(run_id)
    assert isinstance(raised.value.__cause__, (psycopg.errors.InvalidSqlStatementName,
                                               psycopg.errors.DuplicatePreparedStatement))
    assert raised.value.sqlstate in ("26000", "42P05") and "_pg3_" in str(raised.value)
    assert any(POOLER_HINT in n for n in raised.value.__notes__)

    # the worker: its two pollers and its reporter each prepare their own _pg3_0; the two
    # server connections of the pool cannot hold three (and already hold the clients').  The
    # errors are logged with the hint, and taken for what they are: nothing ran, so nothing
    # is failed (no run, no activity)
    w = worker(b.conninfo, pooled=False, poll_timeout=2)
    assert w.behind_pooler is False
    runs = [client.start(flow, 12, queue=queues[0]) for _ in range(3)]
    for r in runs:
        client.send_event(r, "go", {"n": 12})

    def errors():
        return [r.getMessage() for r in caplog.records
                if r.levelno >= logging.ERROR and r.name == "dex.worker"]
    wait_until(errors, 60, "the worker without pooled ran into no prepared-statement error")
    assert all("_pg3_" in m and POOLER_HINT in m for m in errors()), errors()
    w.shutdown()
    assert w.stats["activities_failed"] == 0
    for r in runs:
        run = client.get(r)
        assert run.status != "FAILED", run.failure
        assert "activityTaskFailed" not in event_kinds(client.history(r))
    # a worker that detects the pooler finishes them (through a pool with room for it)
    worker(pgbouncer(pool_size=3).conninfo, poll_timeout=30)
    for r in runs:
        assert client.result(r, timeout=60) == expected(12)


def test_the_long_poll_through_the_pool_wakes_and_is_cancelled_at_shutdown(
        pgbouncer, queues, worker, observer):
    b = pgbouncer(pool_size=3)
    w = worker(b.conninfo, poll_timeout=30, worker_id=f"pgb-{uuid.uuid4().hex[:8]}")
    app = f"dex worker {w.worker_id}"
    # idle: each queue's poller waits in dex.wait_for_tasks, on a server connection of its own
    wait_until(lambda: len(waits(observer, app)) == 2, message="the worker is not waiting")
    assert b.pool()["sv_active"] >= 2
    with dex.Client(b.conninfo) as client:
        t0 = time.monotonic()
        run_id = client.start(flow, 3, queue=queues[0])
        client.send_event(run_id, "go", {"n": 3})
        assert client.result(run_id, timeout=25) == expected(3)
        # woken by the commits (run, activity results, timer), not by the 30 s timeout
        assert time.monotonic() - t0 < 15
    wait_until(lambda: len(waits(observer, app)) == 2, message="the worker is not waiting again")
    t0 = time.monotonic()
    w.shutdown()            # wakes the waits with cancel requests, which pgbouncer forwards
    assert time.monotonic() - t0 < 5
    assert waits(observer, app) == []


def test_a_waiting_worker_holds_a_server_connection_for_the_whole_wait(
        pgbouncer, queues, worker, observer):
    b = pgbouncer(pool_size=2)
    w = worker(b.conninfo, poll_timeout=4, worker_id=f"pgb-{uuid.uuid4().hex[:8]}")
    wait_until(lambda: len(waits(observer, f"dex worker {w.worker_id}")) == 2,
               message="the worker is not waiting")
    assert b.pool()["sv_active"] == 2
    # the two waits hold the whole pool: another client's statement waits for one of them
    done = threading.Event()

    def select():
        with psycopg.connect(b.conninfo, autocommit=True, prepare_threshold=None) as c:
            c.execute("SELECT 1")
        done.set()
    t0 = time.monotonic()
    t = threading.Thread(target=select, daemon=True)
    t.start()
    assert not done.wait(1.0), "a statement ran while the waits held every server connection"
    assert b.pool()["cl_waiting"] >= 1
    # ... until a wait ends (its 4 s timeout) and gives its server connection back
    assert done.wait(4 + 5)
    assert time.monotonic() - t0 < 4 + 5
    t.join()


def spawn_cli_worker(conninfo, queues, log, *extra):
    env = dict(os.environ, DEX_TEST_LOG=str(log),
               PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-m", "dex", "--conninfo", conninfo, "worker", "crashflows",
         "-w", queues[0], "-a", queues[1], *extra],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_cli_worker_with_pooled_and_a_killed_waiter(pgbouncer, queues, observer, tmp_path,
                                                        monkeypatch):
    monkeypatch.setenv("DEX_TEST_LOG", str(tmp_path / "activities.log"))
    b = pgbouncer(pool_size=3)
    worker_id = f"pgb-cli-{uuid.uuid4().hex[:8]}"
    proc = spawn_cli_worker(b.conninfo, queues, tmp_path / "activities.log", "--pooled",
                            "--worker-id", worker_id)
    try:
        with dex.Client(b.conninfo) as client:
            run_id = client.start(crashflows.order, {"seconds": 0.1}, queue=queues[0])
            assert client.result(run_id, timeout=30) == ["a", "b", "c", "d"]
        app = f"dex worker {worker_id}"
        wait_until(lambda: len(waits(observer, app)) == 2, message="the worker is not waiting")
        proc.kill()                     # SIGKILL, in the middle of its waits
        proc.wait(10)
        # pgbouncer closes the server connections whose client left mid-statement; each
        # waiting backend sees its client gone within 2 s and ends
        wait_until(lambda: waits(observer, app) == [], 10,
                   "the waits of the killed worker still hold their server connections")
        wait_until(lambda: b.pool()["sv_active"] == 0, 10, "the pool is still busy")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stdout.read()
    assert "prepared statement" not in out, out


@pytest.mark.parametrize("flag, pooled", [([], None), (["--pooled"], True),
                                          (["--no-pooled"], False)])
def test_the_cli_passes_pooled_on(monkeypatch, flag, pooled):
    seen = {}

    class FakeWorker:
        stats = {"activities_abandoned": 0}

        def __init__(self, *args, **kwargs):
            seen.update(kwargs)

        def run(self):
            pass

    monkeypatch.setattr(dex.__main__, "Worker", FakeWorker)
    assert dex.__main__.main(["worker", "crashflows", "-w", "q", *flag]) == 0
    assert seen["pooled"] is pooled


def test_a_prepared_statement_error_is_the_connections_not_the_calls():
    """A call that failed because a prepared statement was missing did not run: the worker
    must not take it for the engine refusing the commands or the result (and fail the run or
    the activity for it), but reconnect and let the lease bring the task back."""
    w = dex.Worker("", ["q"], ["a"], pooled=False)
    error = psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_0" does not exist')

    class Broken:
        def execute(self, *args, **kwargs):
            raise error

    class State:
        closed = False

        def close(self):
            self.closed = True

    state = State()
    with pytest.raises(psycopg.errors.InvalidSqlStatementName):
        w._complete_workflow_tasks(Broken(), [(uuid.uuid4(), 0, 1, b"")], [[]], [state])
    assert state.closed and w.stats["workflow_tasks"] == 0
    r = dex.worker._Running((uuid.uuid4(), 1, 1, None), {"name": "pgb-add"}, w)
    r.outcome = ("complete", 3)
    with pytest.raises(psycopg.errors.InvalidSqlStatementName):
        w._send_results(Broken(), [r])
    assert not r.reported and w.stats["activities_failed"] == 0
