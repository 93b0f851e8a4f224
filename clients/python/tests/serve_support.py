"""Shared by the REST API and dashboard tests: roles, queues and API tokens of one test
module, and ``python3 -m dex serve`` running on a free local port as its own login role
(a member of the roles its tokens map to, as the README sets it up)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Dict, Optional, Tuple

import psycopg
import pytest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python3 -m dex serve`` in a subprocess."""

    def __init__(self, conninfo: str, sample_interval: float = 1.0, pool_size: int = 6):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"dex-serve-{self.port}-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dex", "--conninfo", conninfo, "serve",
             "--listen", f"127.0.0.1:{self.port}", "--sample-interval", str(sample_interval),
             "--pool-size", str(pool_size)],
            cwd=PKG, stdout=self.log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/openapi.json", timeout=2).read()
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(f"dex serve did not start:\n{self.log.read()}")
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def call(server: Server, method: str, path: str, token: Optional[str] = None,
         body: Any = None, headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, str], Any]:
    """One HTTP request: (status, headers, parsed JSON body or text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, hdrs, raw = r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, dict(e.headers), e.read()
    hdrs = {k.lower(): v for k, v in hdrs.items()}
    text = raw.decode()
    ctype = hdrs.get("content-type", "")
    return status, hdrs, (json.loads(text) if "json" in ctype and text else text)


def send(server: Server, method: str, path: str, token: Optional[str] = None, body: bytes = b"",
         headers: Optional[Dict[str, str]] = None, chunked: bool = False) -> Tuple[int, Dict[str, str], str]:
    """One HTTP request with the body as given (bytes, or sent in chunks of 64 KiB without a
    Content-Length): (status, headers, body as text, unparsed)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    try:
        if chunked:
            conn.request(method, path, body=(body[i:i + 65536] for i in range(0, len(body), 65536)),
                         headers=hdrs, encode_chunked=True)
        else:
            conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


class Env:
    """Roles, queues and tokens of one test module:

    - ``admin``: a member of dex_admin; ``client``: dex_client with a grant on the queues;
      ``worker``: dex_worker with a grant on the queues; ``other``: dex_client and dex_worker
      of another tenant, with no grant on them; ``server``: the server's login role, a member
      of all four and of pg_monitor;
    - ``wf``, ``act``: a workflow and an activity queue kept to ``client`` and ``worker``."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self.tag = uuid.uuid4().hex[:8]
        t = self.tag
        self.roles = {k: f"rest_{k}_{t}" for k in ("admin", "client", "worker", "other", "server")}
        r = self.roles
        for stmt in (f"CREATE ROLE {r['admin']} IN ROLE dex_admin",
                     f"CREATE ROLE {r['client']} IN ROLE dex_client",
                     f"CREATE ROLE {r['worker']} IN ROLE dex_worker",
                     f"CREATE ROLE {r['other']} IN ROLE dex_client, dex_worker",
                     f"CREATE ROLE {r['server']} LOGIN IN ROLE pg_monitor",
                     f"GRANT {r['admin']}, {r['client']}, {r['worker']}, {r['other']} TO {r['server']}"):
            conn.execute(stmt)
        self.wf, self.act = f"rwf-{t}", f"ract-{t}"
        conn.execute("SELECT dex.create_queue(%s, 'workflow'), dex.create_queue(%s, 'activity')",
                     (self.wf, self.act))
        for q in (self.wf, self.act):
            for role in ("dex_client", "dex_worker"):
                conn.execute("SELECT dex.revoke_queue(%s, %s)", (q, role))
            for role in (r["client"], r["worker"]):
                conn.execute("SELECT dex.grant_queue(%s, %s)", (q, role))
        self.tokens = {k: conn.execute("SELECT dex.create_api_token(%s, %s)",
                                       (f"rest-{k}-{t}", r[k])).fetchone()[0]
                       for k in ("admin", "client", "worker", "other")}
        self.conninfo = f"user={r['server']}"

    def drop(self) -> None:
        r = self.roles
        self.conn.execute("DELETE FROM dex.api_token WHERE name LIKE %s", (f"rest-%-{self.tag}",))
        for q in (self.wf, self.act):
            for role in (r["client"], r["worker"]):
                self.conn.execute("SELECT dex.revoke_queue(%s, %s)", (q, role))
        self.conn.execute(f"DROP ROLE {r['server']}, {r['admin']}, {r['client']}, {r['worker']}, {r['other']}")


@pytest.fixture(scope="module")
def env(conninfo):
    with psycopg.connect(conninfo, autocommit=True) as conn:
        e = Env(conn)
        try:
            yield e
        finally:
            e.drop()


@pytest.fixture(scope="module")
def server(env):
    s = Server(env.conninfo)
    yield s
    s.stop()


@pytest.fixture
def sql(conninfo):
    """A superuser connection, to look at what the API did."""
    with psycopg.connect(conninfo, autocommit=True) as c:
        yield c
