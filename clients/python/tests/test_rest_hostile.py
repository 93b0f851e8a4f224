"""The REST API against a hostile client (a real python3 -m dex serve): bodies nested too
deeply, NaN and infinities, numbers and dates out of every range, NUL characters, forged
cursors, unknown paths and methods, bodies that do not parse and bodies too large.  Every
refusal is a 4xx application/problem+json (never a 500) and changes nothing in the database;
what is merely extreme but valid (a date in year 1) is answered.  And no data the database
holds breaks an answer: runs made through SQL with arguments nested thousands deep are read
through every endpoint and page that shows them."""

import json
import time
import uuid

import pytest
from psycopg.types.json import Jsonb

from serve_support import call, env, send, server, sql  # noqa: F401  (fixtures)

DEEP = 300          # deeper than a request body may be (256)


def nested(depth, inner="1"):
    return "[" * depth + inner + "]" * depth


def state(sql, env):
    """What a refused request must leave as it was: the runs of the module's queues (each
    with its status and history), those queues, and the counts of everything the API makes."""
    runs = sql.execute("SELECT id, status, history_length, updated_at FROM dex.runs "
                       "WHERE queue IN (%s, %s) ORDER BY id", (env.wf, env.act)).fetchall()
    queues = sql.execute("SELECT name, status, capacity FROM dex.queue WHERE name IN (%s, %s) ORDER BY name",
                         (env.wf, env.act)).fetchall()
    counts = sql.execute("SELECT (SELECT count(*) FROM dex.workflow_run), (SELECT count(*) FROM dex.queue), "
                         "(SELECT count(*) FROM dex.schedule), (SELECT count(*) FROM dex.definition), "
                         "(SELECT count(*) FROM dex.api_token), (SELECT count(*) FROM dex.queue_grant), "
                         "(SELECT count(*) FROM dex.external_event)").fetchone()
    return runs, queues, counts


def refused(resp, status=None):
    """The answer is a 4xx problem (``status`` if given)."""
    code, headers, body = resp
    assert 400 <= code < 500 and (status is None or code == status), (code, body)
    assert headers["content-type"].startswith("application/problem+json"), (headers, body)
    doc = json.loads(body) if isinstance(body, str) else body
    assert doc["status"] == code and doc["title"] and doc["type"], doc
    return doc


@pytest.fixture(scope="module")
def a_run(server, env):
    code, _, run = call(server, "POST", "/v1/runs", env.tokens["client"], {"workflow_name": "h", "queue": env.wf})
    assert code == 201, run
    return run


def test_bad_bodies_are_refused_and_change_nothing(server, env, sql, a_run):
    client, worker, admin = env.tokens["client"], env.tokens["worker"], env.tokens["admin"]
    rid = a_run["id"]
    run = f'"workflow_name": "h", "queue": "{env.wf}"'
    lease = f'"run_id": "{rid}", "task_id": 0, "lock_version": 1'
    cases = [
        # (token, method, path, raw body, status or None for any 4xx)
        (client, "POST", "/v1/runs", f'{{{run}, "argument": {nested(DEEP)}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "argument": {nested(100_000)}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "argument": {{"a": {nested(DEEP)}}}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "execution_timeout_seconds": NaN}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "execution_timeout_seconds": "NaN"}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "execution_timeout_seconds": Infinity}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "execution_timeout_seconds": "-Infinity"}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "execution_timeout_seconds": 1e999}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "execution_timeout_seconds": 1e300}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "argument": 1e999}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "argument": {"9" * 5000}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "priority": {2**70}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "priority": {2**40}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "workflow_version": {2**31}}}', 400),
        (client, "POST", "/v1/runs", f'{{"workflow_name": "a\\u0000b", "queue": "{env.wf}"}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "argument": {{"k": "a\\u0000b"}}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "labels": {{"a\\u0000": "b"}}}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "instance_id": "\\u0000"}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "start_at": "99999-01-01T00:00:00Z"}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}, "start_at": 1e999}}', 400),
        (client, "POST", "/v1/runs", f'{{{run}', 400),
        (client, "POST", "/v1/runs", "", 400),
        (client, "POST", "/v1/runs", "[]", 400),
        (client, "POST", "/v1/runs", '"run"', 400),
        (client, "POST", "/v1/runs", "\xff\xfe", 400),
        (client, "POST", f"/v1/runs/{rid}/events", f'{{"event_id": "e", "payload": {nested(DEEP)}}}', 400),
        (client, "POST", f"/v1/runs/{rid}/events", '{"event_id": "\\u0000"}', 400),
        (client, "POST", f"/v1/runs/{rid}/cancel", '{"reason": "\\u0000"}', 400),
        (client, "POST", f"/v1/runs/{rid}/reset", f'{{"event_id": {2**40}}}', 400),
        (worker, "POST", f"/v1/queues/{env.act}/poll", '{"worker_id": "w", "lease_seconds": NaN}', 400),
        (worker, "POST", f"/v1/queues/{env.act}/poll", '{"worker_id": "w", "lease_seconds": "nan"}', 400),
        (worker, "POST", f"/v1/queues/{env.act}/poll", '{"worker_id": "w", "wait_seconds": "nan"}', 400),
        (worker, "POST", f"/v1/queues/{env.act}/poll", '{"worker_id": "w", "wait_seconds": -Infinity}', 400),
        (worker, "POST", f"/v1/queues/{env.act}/poll", f'{{"worker_id": "w", "max_tasks": {2**40}}}', 400),
        (worker, "POST", f"/v1/queues/{env.act}/poll", '{"worker_id": "w\\u0000"}', 400),
        (worker, "POST", f"/v1/queues/{env.wf}/poll",
         f'{{"worker_id": "w", "names": ["x"], "versions": [{2**40}]}}', 400),
        (worker, "POST", "/v1/queues/a%00b/poll", '{"worker_id": "w"}', 400),
        (worker, "POST", "/v1/tasks/complete", f'{{"run_id": "{rid}", "task_id": {2**70}, "lock_version": 1}}', 400),
        (worker, "POST", "/v1/tasks/complete", f'{{"run_id": "{rid}", "task_id": 0, "lock_version": {2**70}}}', 400),
        (worker, "POST", "/v1/tasks/complete", f'{{{lease}, "result": {nested(DEEP)}}}', 400),
        (worker, "POST", "/v1/tasks/fail", f'{{{lease}, "failure": {{"message": NaN}}}}', 400),
        (worker, "POST", "/v1/tasks/heartbeat", f'{{{lease}, "lease_seconds": 1e308}}', 400),
        (worker, "POST", "/v1/tasks/heartbeat", f'{{{lease}, "lease_seconds": "Infinity"}}', 400),
        (admin, "PATCH", f"/v1/queues/{env.wf}", '{"rate_limit": 5, "rate_period_seconds": "NaN"}', 400),
        (admin, "PATCH", f"/v1/queues/{env.wf}", '{"rate_limit": 5, "rate_period_seconds": NaN}', 400),
        (admin, "PATCH", f"/v1/queues/{env.wf}", f'{{"capacity": {2**40}}}', 400),
        (admin, "PATCH", f"/v1/queues/{env.wf}", f'{{"concurrency_limit": {2**70}}}', 400),
        (admin, "POST", "/v1/queues", '{"name": "a\\u0000", "kind": "workflow"}', 400),
        (admin, "POST", "/v1/queues", f'{{"name": "q-{env.tag}", "kind": "workflow", "capacity": {2**40}}}', 400),
        (admin, "POST", "/v1/definitions", f'{{"name": "d-{env.tag}", "definition": {{"x": {nested(DEEP)}}}}}', 400),
        (admin, "POST", "/v1/definitions", f'{{"name": "d-{env.tag}", "version": {2**40}, "definition": {{}}}}', 400),
        (admin, "POST", "/v1/schedules", f'{{"name": "s-{env.tag}", "workflow_name": "h", "queue": "{env.wf}", '
                                         '"every_seconds": "NaN"}', 400),
        (admin, "POST", "/v1/schedules", f'{{"name": "s-{env.tag}", "workflow_name": "h", "queue": "{env.wf}", '
                                         '"every_seconds": 1e999}', 400),
        (admin, "PATCH", f"/v1/schedules/s-{env.tag}", '{"jitter_seconds": NaN}', 400),
        # the wrong content type: the body is not read as JSON, and is not a run
        (client, "POST", "/v1/runs", f'{{{run}}}', 400, {"Content-Type": "text/plain"}),
        (client, "POST", "/v1/runs", f'{{{run}}}', 400, {"Content-Type": "application/x-www-form-urlencoded"}),
    ]
    for token, method, path, body, status, *headers in cases:
        before = state(sql, env)
        raw = body.encode("latin-1") if body.startswith("\xff") else body.encode()
        doc = refused(send(server, method, path, token, raw, *headers), status)
        assert state(sql, env) == before, (method, path, body[:80], doc)


def test_bodies_too_large_are_refused_before_they_are_read(server, env, sql):
    big = b'{"workflow_name": "h", "queue": "' + env.wf.encode() + b'", "argument": "' + b"x" * (9 << 20) + b'"}'
    before = state(sql, env)
    refused(send(server, "POST", "/v1/runs", env.tokens["client"], big), 413)
    refused(send(server, "POST", "/v1/runs", env.tokens["client"], big, chunked=True), 413)
    refused(send(server, "POST", "/v1/runs", env.tokens["client"], b"{}",
                 headers={"Content-Length": str(9 << 20)}), 413)
    assert state(sql, env) == before
    # the dashboard's forms too
    code, _, page = send(server, "POST", "/ui/login", None, b"token=" + b"x" * (9 << 20),
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert code == 413, page


def test_bad_queries_and_paths_are_refused(server, env, sql, a_run):
    client, admin = env.tokens["client"], env.tokens["admin"]
    cases = [
        ("GET", "/v1/runs?cursor=_____________________w", 400),     # year 10889
        ("GET", "/v1/runs?cursor=" + "A" * 300, 400),
        ("GET", "/v1/runs?cursor=%00", 400),
        ("GET", "/v1/runs?status=%00", 400),
        ("GET", "/v1/runs?queue=a%00b", 400),
        ("GET", "/v1/runs?workflow=%00", 400),
        ("GET", "/v1/runs?instance_id=%00", 400),
        ("GET", "/v1/runs?label=a%00=b", 400),
        ("GET", "/v1/runs?limit=99999999999999999999999", 400),
        ("GET", "/v1/runs?limit=nan", 400),
        ("GET", "/v1/runs?created_after=10000-01-01T00:00:00Z", 400),
        ("GET", "/v1/runs?created_after=nan", 400),
        ("GET", "/v1/runs?parent_id=%00", 400),
        ("GET", "/v1/runs/counts?queue=%00", 400),
        ("GET", "/v1/runs/%00", 400),
        ("GET", f"/v1/runs/{uuid.uuid4()}", 404),
        ("GET", "/v1/queues/a%00b", 400),
        ("GET", "/v1/definitions/x/99999999999", 400),
        ("GET", "/v1/definitions/%00", 400),
        ("GET", "/v1/schedules?cursor=%00", 400),
        ("GET", "/v1/schedules?cursor=AA", 400),
        ("GET", "/v1/schedules/x/next-times?n=99999999999", 400),
        ("GET", "/v1/user-tasks?assignee=%00", 400),
        ("GET", "/v1/nope", 404),
        ("GET", "/nope", 404),
        ("PUT", "/v1/runs", 405),
        ("DELETE", f"/v1/runs/{a_run['id']}", 405),
        ("POST", "/healthz", 405),
    ]
    for method, path, status in cases:
        for token in (client, admin):
            before = state(sql, env)
            doc = refused(send(server, method, path, token), status)
            assert state(sql, env) == before, (method, path, doc)
    code, headers, _ = send(server, "PUT", "/v1/runs", client)
    assert code == 405 and "GET" in headers["allow"]
    # a token with a character no token has
    refused(send(server, "GET", "/v1/runs", headers={"Authorization": "Bearer dex_\u00e9"}), 401)


def test_extreme_but_valid_queries_are_answered(server, env, a_run):
    """Dates at the ends of every range and an old cursor are valid filters: answered, not
    refused, and never a 500."""
    for query in ("created_after=0001-01-01T00:00:00Z", "created_before=9999-12-31T23:59:59Z",
                  "created_after=0001-01-01T00:00:00Z&created_before=9999-12-31T23:59:59.999999Z",
                  "created_before=0001-01-01T00:00:00Z", "created_after=9999-12-31T23:59:59Z",
                  "created_after=1e20", "cursor=AAAAAAAAAAAAAAAAAAAAAA", f"queue={env.wf}&limit=500"):
        for path in ("/v1/runs?", "/v1/runs/counts?"):
            code, _, page = send(server, "GET", path + query, env.tokens["client"])
            assert code == 200, (path, query, page[:300])
    code, _, page = call(server, "GET", f"/v1/runs?queue={env.wf}&created_after=0001-01-01T00:00:00Z",
                         env.tokens["client"])
    assert a_run["id"] in [r["id"] for r in page["runs"]]


def test_no_data_the_database_holds_breaks_an_answer(server, env, sql):
    """Runs made through SQL, whose arguments and events are nested up to 12,000 deep (as deep
    as PostgreSQL takes them), are read through the run, its history, the lists of every
    role that sees them, the counts and the dashboard; and a run made through the API as deep
    as a body may be (256) is read back equal."""
    client, admin = env.tokens["client"], env.tokens["admin"]
    deep = {}
    for depth in (500, 5000, 12000):
        rid = sql.execute("SELECT dex.create_run('deep', %s, %s::jsonb)", (env.wf, nested(depth))).fetchone()[0]
        sql.execute("SELECT dex.send_external_event(%s, 'e', %s::jsonb)", (rid, nested(depth, '"x"')))
        deep[str(rid)] = depth
    # and one that ended with such a result, in its history too
    rid = sql.execute("SELECT dex.create_run('deep-result', %s)", (env.wf,)).fetchone()[0]
    deadline = time.monotonic() + 30
    while not (task := sql.execute(
            "SELECT task_id, lock_version FROM dex.poll_tasks(%s, 'hostile', 1, '1 min', "
            "names => '{deep-result}', versions => '{1}')", (env.wf,)).fetchone()):
        assert time.monotonic() < deadline, "no workflow task"
        time.sleep(0.1)
    sql.execute("SELECT dex.complete_task(%s, %s, %s, %s)",
                (rid, task[0], task[1], Jsonb([{"completeRun": {"result": {"json": nested(12000)}}}])))
    ended = str(rid)
    deep[ended] = 12000
    for rid, depth in deep.items():
        flat = nested(depth).replace(" ", "")
        code, headers, text = send(server, "GET", f"/v1/runs/{rid}", client)
        assert code == 200 and headers["content-type"] == "application/json", text[:300]
        assert flat in text.replace(" ", "")
        code, _, text = send(server, "GET", f"/v1/runs/{rid}/history", client)
        assert code == 200, text[:300]
        code, _, text = send(server, "GET", f"/v1/runs/{rid}/attempts", client)
        assert code == 200, text[:300]
        code, _, text = send(server, "POST", f"/v1/runs/{rid}/restart", client)
        assert code == 201, text[:300]
    argued = [rid for rid in deep if rid != ended]
    for token, query, listed in ((client, f"queue={env.wf}", deep), (admin, "", deep), (admin, "limit=500", deep),
                                 (client, "workflow=deep", argued), (client, "status=COMPLETED", [ended])):
        code, _, text = send(server, "GET", f"/v1/runs?{query}", token)
        assert code == 200, (query, text[:300])
        assert all(rid in text for rid in listed), query
    assert send(server, "GET", f"/v1/runs/counts?queue={env.wf}", client)[0] == 200
    # the dashboard: the list and each run's page
    cookie = {"Cookie": f"dex_token={client}"}
    for path in ["/ui/runs", f"/ui/runs?queue={env.wf}"] + [f"/ui/runs/{rid}" for rid in deep]:
        code, _, page = send(server, "GET", path, headers=cookie)
        assert code == 200, (path, page[:300])
    # as deep as a request may be: made and read back equal
    arg = json.loads(nested(256 - 1))
    code, _, made = call(server, "POST", "/v1/runs", client, {"workflow_name": "deep", "queue": env.wf,
                                                              "argument": arg})
    assert code == 201, made
    assert call(server, "GET", f"/v1/runs/{made['id']}", client)[2]["argument"] == arg
    sql.execute("SELECT dex.terminate_run(id) FROM dex.runs WHERE queue = %s AND workflow_name = 'deep' "
                "AND status NOT IN ('TERMINATED', 'COMPLETED', 'FAILED', 'CANCELLED')", (env.wf,))


def test_the_dashboard_answers_bad_filters_with_a_page(server, env):
    cookie = {"Cookie": f"dex_token={env.tokens['client']}"}
    for path, status in (("/ui/runs?cursor=_____________________w", 400), ("/ui/runs?created_after=0001-01-01", 200),
                         ("/ui/runs?created_before=9999-12-31T23:59:59", 200), ("/ui/runs?queue=%00", 400),
                         ("/ui/nope", 404), (f"/ui/runs/{uuid.uuid4()}", 404)):
        code, headers, page = send(server, "GET", path, headers=cookie)
        assert code == status and headers["content-type"].startswith("text/html"), (path, code, page[:300])
