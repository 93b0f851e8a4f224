"""A crowd of long polls against python3 -m dex serve --pool-size 4: while four workers wait
in POST /v1/queues/{q}/poll, reads, actions, the dashboard and /healthz answer at once; a
fifth wait is refused at once with 503 and Retry-After; a waiting worker that goes away
frees its place; and the waits still end with the task that wakes them."""

import json
import socket
import threading
import time

import pytest

from serve_support import Server, call, env, send, sql  # noqa: F401  (fixtures)

POOL = 4


@pytest.fixture(scope="module")
def server(env):
    s = Server(env.conninfo, pool_size=POOL)
    yield s
    s.stop()


def waiting(sql, env):
    """Connections of the server's login role waiting in dex.wait_for_tasks."""
    return sql.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND state = 'active' "
                       "AND query LIKE 'CALL dex.wait_for_tasks%%'", (env.roles["server"],)).fetchone()[0]


def wait_for(what, predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_crowd_of_long_polls_starves_nothing(server, env, sql):
    worker, client = env.tokens["worker"], env.tokens["client"]
    polls = []

    def long_poll(i):
        t0 = time.monotonic()
        code, _, body = call(server, "POST", f"/v1/queues/{env.wf}/poll", worker,
                             {"worker_id": f"crowd-{i}", "wait_seconds": 15})
        polls.append((code, body, time.monotonic() - t0))

    crowd = [threading.Thread(target=long_poll, args=(i,)) for i in range(POOL)]
    for t in crowd:
        t.start()
    wait_for("the crowd to wait", lambda: waiting(sql, env) == POOL)

    def quick(method, path, token=None, body=None, headers=None):
        t0 = time.monotonic()
        code, _, answer = send(server, method, path, token, json.dumps(body).encode() if body else b"", headers)
        took = time.monotonic() - t0
        assert took < 2, (method, path, took)
        return code, json.loads(answer) if method == "POST" else answer

    for _ in range(3):
        assert quick("GET", "/healthz")[0] == 200
        assert quick("GET", "/v1/runs", client)[0] == 200
        assert quick("GET", f"/v1/queues/{env.wf}", env.tokens["admin"])[0] == 200
        assert quick("GET", "/ui/runs", headers={"Cookie": f"dex_token={client}"})[0] == 200
    admin, other = env.tokens["admin"], f"crowd-other-{env.tag}"
    assert quick("POST", "/v1/queues", admin, {"name": other, "kind": "workflow"})[0] == 201
    code, run = quick("POST", "/v1/runs", admin, {"workflow_name": "other", "queue": other})
    assert code == 201, run
    code, cancelled = quick("POST", f"/v1/runs/{run['id']}/terminate", admin, {})
    assert code == 200 and cancelled["status"] == "TERMINATED", cancelled
    # one more wait: refused at once, with the time to come back
    t0 = time.monotonic()
    code, headers, problem = call(server, "POST", f"/v1/queues/{env.wf}/poll", worker,
                                  {"worker_id": "one-too-many", "wait_seconds": 30})
    assert time.monotonic() - t0 < 2
    assert code == 503 and headers["retry-after"] == "1", (code, problem)
    assert headers["content-type"] == "application/problem+json" and "long polls" in problem["detail"]
    # a poll that does not wait is answered as ever
    code, _, body = call(server, "POST", f"/v1/queues/{env.act}/poll", worker, {"worker_id": "quick"})
    assert code == 200 and body == {"tasks": []}
    assert len(polls) == 0 and waiting(sql, env) == POOL
    # a task wakes a waiting worker; the others wait on
    code, _, made = call(server, "POST", "/v1/runs", client, {"workflow_name": "crowd", "queue": env.wf})
    assert code == 201, made
    wait_for("a woken poll", lambda: len(polls) == 1)
    code, body, took = polls[0]
    assert code == 200 and [t["run_id"] for t in body["tasks"]] == [made["id"]] and took < 15, polls
    wait_for("the others to wait on", lambda: waiting(sql, env) == POOL - 1)
    # a worker that goes away while it waits frees its place at once
    raw = socket.create_connection(("127.0.0.1", server.port))
    payload = b'{"worker_id": "gone", "wait_seconds": 60}'
    raw.sendall(b"POST /v1/queues/" + env.wf.encode() + b"/poll HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + worker.encode() + b"\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    wait_for("the last place to be taken", lambda: waiting(sql, env) == POOL)
    raw.close()
    wait_for("the place of the client that left to be freed", lambda: waiting(sql, env) == POOL - 1)
    code, _, body = call(server, "POST", f"/v1/queues/{env.act}/poll", worker,
                         {"worker_id": "again", "wait_seconds": 0.2})
    assert code == 200, body
    for t in crowd:
        t.join(60)
    assert [p[0] for p in polls] == [200] * POOL
    sql.execute("SELECT dex.terminate_run(id) FROM dex.runs WHERE queue = %s AND status NOT IN "
                "('TERMINATED', 'COMPLETED', 'FAILED', 'CANCELLED')", (env.wf,))
