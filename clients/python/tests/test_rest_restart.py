"""PostgreSQL restarts under a running python3 -m dex serve: the pool's idle connections are
all dead then, and the first request after the restart, /healthz included, must not get one.
The test restarts a cluster of its own (initdb in a temporary directory, the suite's binaries
and installed dex), not the suite's, which other tests use."""

import os
import shutil
import subprocess
import tempfile
import threading

import psycopg
import pytest

from serve_support import Env, Server, call


def _bindir():
    pg_ctl = shutil.which("pg_ctl") or "/usr/lib/postgresql/15/bin/pg_ctl"
    if not os.access(pg_ctl, os.X_OK):
        pytest.skip("no pg_ctl")
    return os.path.dirname(pg_ctl)


@pytest.fixture
def cluster(conninfo):
    """A cluster of the test's own with dex, on a Unix socket in a private directory: its
    data directory, its pg_ctl and its libpq connection string."""
    if os.geteuid() == 0:
        pytest.skip("PostgreSQL refuses to run as root (test/run-tests.sh runs the tests as "
                    "the cluster's user)")
    bindir = _bindir()
    with psycopg.connect(conninfo) as c:       # the port of the suite's cluster: free in our directory
        port = c.info.port
    root = tempfile.mkdtemp(prefix="dex-rst-")
    data = os.path.join(root, "data")
    pg_ctl = [os.path.join(bindir, "pg_ctl"), "-D", data, "-l", os.path.join(root, "log"), "-w", "-t", "60"]
    subprocess.run([os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-E", "UTF8",
                    "--locale=C", "--no-sync"], check=True, capture_output=True)
    with open(os.path.join(data, "postgresql.conf"), "a") as f:
        f.write(f"listen_addresses = ''\nunix_socket_directories = '{root}'\nport = {port}\n"
                "shared_preload_libraries = 'dex'\ndex.database = 'postgres'\n")
    subprocess.run(pg_ctl + ["start"], check=True, capture_output=True)
    dsn = f"host={root} port={port} dbname=postgres"
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SET client_min_messages = warning")
            c.execute("CREATE EXTENSION dex")
        yield pg_ctl, dsn
    finally:
        subprocess.run(pg_ctl + ["-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def test_the_first_request_after_a_restart_succeeds(cluster):
    pg_ctl, dsn = cluster
    with psycopg.connect(dsn, autocommit=True) as c:
        env = Env(c)
    srv = Server(f"{dsn} user={env.roles['server']}", pool_size=4)
    try:
        tok = env.tokens["client"]
        code, _, run = call(srv, "POST", "/v1/runs", tok, {"workflow_name": "r", "queue": env.wf})
        assert code == 201, run

        def fill_the_pool():
            """Four requests at once: the pool holds four idle connections after them."""
            got = []
            threads = [threading.Thread(target=lambda: got.append(call(srv, "GET", "/v1/runs", tok)[0]))
                       for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            return got

        assert fill_the_pool() == [200] * 4
        subprocess.run(pg_ctl + ["-m", "fast", "restart"], check=True, capture_output=True)
        assert call(srv, "GET", "/healthz")[0] == 200
        code, _, page = call(srv, "GET", "/v1/runs", tok)
        assert code == 200 and run["id"] in [r["id"] for r in page["runs"]], page
        assert fill_the_pool() == [200] * 4
        # the long polls' own connections too
        code, _, body = call(srv, "POST", f"/v1/queues/{env.act}/poll", env.tokens["worker"],
                             {"worker_id": "r", "wait_seconds": 0.5})
        assert code == 200 and body == {"tasks": []}, body
        subprocess.run(pg_ctl + ["-m", "fast", "restart"], check=True, capture_output=True)
        code, _, body = call(srv, "POST", f"/v1/queues/{env.act}/poll", env.tokens["worker"],
                             {"worker_id": "r", "wait_seconds": 0.5})
        assert code == 200 and body == {"tasks": []}, body
        # while it is down: 503, and /healthz says so; back up: 200
        subprocess.run(pg_ctl + ["-m", "fast", "stop"], check=True, capture_output=True)
        assert call(srv, "GET", "/healthz")[0] == 503
        assert call(srv, "GET", "/v1/runs", tok)[0] == 503
        subprocess.run(pg_ctl + ["start"], check=True, capture_output=True)
        assert call(srv, "GET", "/healthz")[0] == 200
        assert call(srv, "GET", f"/v1/runs/{run['id']}", tok)[0] == 200
    finally:
        srv.stop()
