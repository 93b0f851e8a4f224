"""The REST API against a real server (python3 -m dex serve on a free port, as its own login
role): every endpoint's happy path, what each role may not do, bad input answered as
application/problem+json with nothing changed, and the database going away (503)."""

import threading
import time
import uuid

from serve_support import Server, call, env, server, sql  # noqa: F401  (fixtures)


def assert_problem(resp, status, sqlstate=None):
    code, headers, body = resp
    assert code == status, body
    assert headers["content-type"].startswith("application/problem+json"), headers
    assert body["status"] == status and body["title"]
    if sqlstate:
        assert body["sqlstate"] == sqlstate and body["type"] == f"urn:dex:sqlstate:{sqlstate}", body
    return body


def new_run(server, env, **kw):
    body = {"workflow_name": "rest", "queue": env.wf, **kw}
    code, headers, run = call(server, "POST", "/v1/runs", env.tokens["client"], body)
    assert code == 201, run
    assert headers["location"] == f"/v1/runs/{run['id']}"
    return run


def lease(server, env, queue, kind, run_id=None):
    """Poll the queue as the worker until the task (of run_id, if given) is leased."""
    for _ in range(50):
        code, _, body = call(server, "POST", f"/v1/queues/{queue}/poll", env.tokens["worker"],
                             {"worker_id": "rest-w", "max_tasks": 1, "lease_seconds": 60, "wait_seconds": 1})
        assert code == 200, body
        for t in body["tasks"]:
            assert t["kind"] == kind
            if run_id is None or t["run_id"] == run_id:
                return t
    raise AssertionError(f"no {kind} task on {queue}")


def complete(server, env, task, result):
    code, _, body = call(server, "POST", "/v1/tasks/complete", env.tokens["worker"],
                         {"run_id": task["run_id"], "task_id": task["task_id"],
                          "lock_version": task["lock_version"], "result": result})
    assert code == 204, body


def run_status(sql, run_id):
    return sql.execute("SELECT status FROM dex.runs WHERE id = %s", (run_id,)).fetchone()[0]


def test_tokens_authenticate_and_say_who(server, env, sql):
    assert call(server, "GET", "/healthz")[0] == 200
    body = assert_problem(call(server, "GET", "/v1/runs"), 401)
    assert "token" in body["detail"]
    assert call(server, "GET", "/v1/runs")[1]["www-authenticate"] == "Bearer"
    assert_problem(call(server, "GET", "/v1/runs", "dex_" + "0" * 64), 401)
    assert_problem(call(server, "GET", "/v1/runs", headers={"Authorization": "Basic eDp5"}), 401)
    for who in ("admin", "client", "worker", "other"):
        code, _, me = call(server, "GET", "/v1/whoami", env.tokens[who])
        assert code == 200 and me["role"] == env.roles[who], me
    may = {who: call(server, "GET", "/v1/whoami", env.tokens[who])[2]["may"] for who in env.tokens}
    assert may["admin"]["alter_queue"] and may["client"]["create_run"] and may["worker"]["poll_tasks"]
    assert not may["client"]["alter_queue"] and not may["client"]["poll_tasks"]
    assert not may["worker"]["create_run"] and not may["worker"]["cancel_run"]
    # a revoked token is refused from its next request on
    token = sql.execute("SELECT dex.create_api_token(%s, %s)",
                        (f"rest-tmp-{env.tag}", env.roles["client"])).fetchone()[0]
    assert call(server, "GET", "/v1/whoami", token)[0] == 200
    sql.execute("SELECT dex.revoke_api_token(%s)", (f"rest-tmp-{env.tag}",))
    assert_problem(call(server, "GET", "/v1/whoami", token), 401)
    # a token of a role the server's login role is not a member of is refused too
    outsider = f"rest_outsider_{env.tag}"
    sql.execute(f"CREATE ROLE {outsider} IN ROLE dex_admin")
    try:
        token = sql.execute("SELECT dex.create_api_token(%s, %s)",
                            (f"rest-outsider-{env.tag}", outsider)).fetchone()[0]
        assert_problem(call(server, "GET", "/v1/whoami", token), 401)
    finally:
        sql.execute("DELETE FROM dex.api_token WHERE name = %s", (f"rest-outsider-{env.tag}",))
        sql.execute(f"DROP ROLE {outsider}")


def test_a_run_from_start_to_end(server, env):
    run = new_run(server, env, argument={"order": 7}, instance_id=f"order-{env.tag}", priority=30,
                  labels={"shop": "berlin"}, concurrency_key="k")
    assert run["status"] == "CREATED" and run["argument"] == {"order": 7}
    assert run["priority"] == 30 and run["labels"] == {"shop": "berlin"} and run["queue"] == env.wf
    assert call(server, "GET", f"/v1/runs/{run['id']}", env.tokens["client"])[2] == run
    # the same instance id: an error, or the active run with if_active=return
    assert_problem(call(server, "POST", "/v1/runs", env.tokens["client"],
                        {"workflow_name": "rest", "queue": env.wf, "instance_id": f"order-{env.tag}"}),
                   409, "23505")
    code, _, same = call(server, "POST", "/v1/runs", env.tokens["client"],
                         {"workflow_name": "rest", "queue": env.wf, "instance_id": f"order-{env.tag}",
                          "if_active": "return"})
    assert code == 201 and same["id"] == run["id"]

    wft = lease(server, env, env.wf, "workflow", run["id"])
    assert wft["task_id"] == 0 and wft["task"]["runId"] == run["id"]
    complete(server, env, wft, [
        {"id": 1, "scheduleActivity": {"name": "charge", "queue": env.act, "argument": {"json": "41"}}},
        {"setCustomStatus": {"customStatus": "charging"}}])
    act = lease(server, env, env.act, "activity", run["id"])
    assert act["task"]["name"] == "charge" and act["task"]["attempt"] == 1
    code, _, hb = call(server, "POST", "/v1/tasks/heartbeat", env.tokens["worker"],
                       {"run_id": act["run_id"], "task_id": act["task_id"],
                        "lock_version": act["lock_version"], "lease_seconds": 120, "details": {"step": 1}})
    assert code == 200 and hb["locked_until"] > act["locked_until"], hb
    complete(server, env, act, {"receipt": "R-7"})
    wft = lease(server, env, env.wf, "workflow", run["id"])
    complete(server, env, wft, [{"completeRun": {"result": {"json": "\"done\""}}}])

    code, _, done = call(server, "GET", f"/v1/runs/{run['id']}", env.tokens["client"])
    assert done["status"] == "COMPLETED" and done["result"] == "done" and done["custom_status"] == "charging"
    code, _, hist = call(server, "GET", f"/v1/runs/{run['id']}/history", env.tokens["client"])
    kinds = [next(k for k in e["event"] if k not in ("id", "timestamp")) for e in hist["events"]]
    assert kinds[:3] == ["workflowTaskStarted", "runCreated", "runStarted"]
    assert "activityTaskCompleted" in kinds and kinds[-1] == "runCompleted"
    assert [e["sequence"] for e in hist["events"]] == list(range(1, len(kinds) + 1))
    code, _, atts = call(server, "GET", f"/v1/runs/{run['id']}/attempts", env.tokens["client"])
    assert code == 200
    assert {(a["task"], a["outcome"]) for a in atts["attempts"]} >= {("activity", "COMPLETED"),
                                                                      ("workflow", "COMPLETED")}
    # the worker reads histories too, but not runs
    assert call(server, "GET", f"/v1/runs/{run['id']}/history", env.tokens["worker"])[0] == 200
    assert_problem(call(server, "GET", f"/v1/runs/{run['id']}", env.tokens["worker"]), 403, "42501")


def test_listing_filters(server, env):
    mine = [new_run(server, env, workflow_name=f"flt-{env.tag}", labels={"tier": t},
                    instance_id=f"flt-{env.tag}-{i}")
            for i, t in enumerate(["gold", "gold", "silver"])]
    tok = env.tokens["client"]

    def ids(query):
        code, _, page = call(server, "GET", "/v1/runs?" + query, tok)
        assert code == 200, page
        return [r["id"] for r in page["runs"]]

    newest_first = [r["id"] for r in reversed(mine)]
    assert ids(f"workflow=flt-{env.tag}") == newest_first
    assert ids(f"workflow=flt-{env.tag}&label=tier=gold") == newest_first[1:]
    assert ids(f"workflow=flt-{env.tag}&label=tier=gold&label=shop=x") == []
    assert ids(f"instance_id=flt-{env.tag}-2") == [mine[2]["id"]]
    assert ids(f"workflow=flt-{env.tag}&status=CREATED&queue={env.wf}") == newest_first
    assert ids(f"workflow=flt-{env.tag}&status=COMPLETED") == []
    assert ids(f"workflow=flt-{env.tag}&queue=nope") == []
    after = mine[1]["created_at"].replace("+00:00", "Z")
    assert ids(f"workflow=flt-{env.tag}&created_after={after}") == newest_first[:2]
    assert ids(f"workflow=flt-{env.tag}&created_before={after}") == [mine[0]["id"]]
    code, _, counts = call(server, "GET", f"/v1/runs/counts?workflow=flt-{env.tag}", tok)
    assert counts == {"counts": {"CREATED": 3}, "since": None}


def test_run_controls(server, env, sql):
    tok = env.tokens["client"]
    run = new_run(server, env)
    wft = lease(server, env, env.wf, "workflow", run["id"])
    complete(server, env, wft, [{"id": 1, "waitExternalEvent": {"eventId": "go"}}])
    rid = run["id"]

    code, _, r = call(server, "POST", f"/v1/runs/{rid}/suspend", tok, {"reason": "incident 42"})
    assert code == 200 and r["status"] == "SUSPENDED"
    assert_problem(call(server, "POST", f"/v1/runs/{rid}/suspend", tok, {}), 409, "55000")
    code, _, r = call(server, "POST", f"/v1/runs/{rid}/resume", tok)
    assert code == 200 and r["status"] == "RUNNING"
    code, _, sent = call(server, "POST", f"/v1/runs/{rid}/events", tok, {"event_id": "hello", "payload": {"a": 1}})
    assert code == 200 and sent == {"delivered": True}
    assert call(server, "POST", f"/v1/runs/{rid}/events", tok, {"event_id": "hello"})[2] == {"delivered": False}
    code, _, r = call(server, "POST", f"/v1/runs/{rid}/cancel", tok, {"reason": "not needed"})
    assert code == 200 and r["status"] == "RUNNING"      # a request the workflow handles
    code, _, r = call(server, "POST", f"/v1/runs/{rid}/terminate", tok, {"reason": "now"})
    assert code == 200 and r["status"] == "TERMINATED"
    kinds = [next(k for k in e if k not in ("id", "timestamp"))
             for e in (h["event"] for h in call(server, "GET", f"/v1/runs/{rid}/history", tok)[2]["events"])]
    # the suspension, resumption and the cancellation request reach the workflow in its next
    # task, which never came: the history ends with the termination
    assert kinds[-1] == "runTerminated"
    # who acted: the token's role and name, not the server's login role (1.9)
    events = [h["event"] for h in call(server, "GET", f"/v1/runs/{rid}/history", tok)[2]["events"]]
    actor = f"{env.roles['client']} (token rest-client-{env.tag})"
    assert [e["runTerminated"]["by"] for e in events if "runTerminated" in e] == [actor]
    assert [e["runSuspended"]["by"] for e in events if "runSuspended" in e] == [actor]
    # an ended run: refused (409), nothing changed
    length = sql.execute("SELECT history_length FROM dex.runs WHERE id = %s", (rid,)).fetchone()[0]
    for action in ("cancel", "suspend", "terminate"):
        assert_problem(call(server, "POST", f"/v1/runs/{rid}/{action}", tok, {}), 409, "55000")
    assert_problem(call(server, "POST", f"/v1/runs/{rid}/events", tok, {"event_id": "late"}), 409, "55000")
    assert sql.execute("SELECT history_length FROM dex.runs WHERE id = %s", (rid,)).fetchone()[0] == length

    code, headers, again = call(server, "POST", f"/v1/runs/{rid}/restart", tok)
    assert code == 201 and again["origin"] == "RESTART" and again["origin_run_id"] == rid
    assert headers["location"] == f"/v1/runs/{again['id']}"
    completed = [e["sequence"] for e in call(server, "GET", f"/v1/runs/{rid}/history", tok)[2]["events"]
                 if "workflowTaskCompleted" in e["event"]]
    code, _, reset = call(server, "POST", f"/v1/runs/{rid}/reset", tok,
                          {"event_id": completed[-1], "reason": "fixed"})
    assert code == 201 and reset["origin"] == "RESET" and reset["origin_run_id"] == rid, reset
    assert run_status(sql, reset["id"]) in ("CREATED", "RUNNING")
    for r in (again, reset):
        call(server, "POST", f"/v1/runs/{r['id']}/terminate", tok, {"reason": "test over"})


def test_worker_calls_are_fenced(server, env, sql):
    run = new_run(server, env)
    wft = lease(server, env, env.wf, "workflow", run["id"])
    complete(server, env, wft, [{"id": 1, "scheduleActivity": {
        "name": "flaky", "queue": env.act, "retryPolicy": {"maxAttempts": 2, "initialDelay": "0.1s"}}}])
    act = lease(server, env, env.act, "activity", run["id"])
    stale = dict(run_id=act["run_id"], task_id=act["task_id"], lock_version=act["lock_version"] - 1)
    wtok = env.tokens["worker"]
    assert_problem(call(server, "POST", "/v1/tasks/complete", wtok, {**stale, "result": 1}), 409, "WD001")
    assert_problem(call(server, "POST", "/v1/tasks/fail", wtok, {**stale, "failure": {"message": "x"}}), 409, "WD001")
    assert_problem(call(server, "POST", "/v1/tasks/heartbeat", wtok, stale), 409, "WD001")
    # a failed attempt is retried: the second attempt comes back
    code, _, body = call(server, "POST", "/v1/tasks/fail", wtok,
                         {"run_id": act["run_id"], "task_id": act["task_id"],
                          "lock_version": act["lock_version"], "failure": {"message": "network", "type": "IO"}})
    assert code == 204, body
    second = lease(server, env, env.act, "activity", run["id"])
    assert second["task"]["attempt"] == 2 and second["task"]["lastFailure"]["message"] == "network"
    # the run ends: the worker's lease is void (WD002), nothing recorded
    call(server, "POST", f"/v1/runs/{run['id']}/terminate", env.tokens["client"], {})
    assert_problem(call(server, "POST", "/v1/tasks/complete", wtok,
                        {"run_id": second["run_id"], "task_id": second["task_id"],
                         "lock_version": second["lock_version"], "result": 2}), 409)
    assert run_status(sql, run["id"]) == "TERMINATED"


def test_long_poll_wakes_on_a_new_run(server, env):
    got = {}

    def poll():
        t0 = time.monotonic()
        got["resp"] = call(server, "POST", f"/v1/queues/{env.wf}/poll", env.tokens["worker"],
                           {"worker_id": "lp", "max_tasks": 5, "wait_seconds": 20})
        got["took"] = time.monotonic() - t0

    # drain what earlier tests left
    call(server, "POST", f"/v1/queues/{env.wf}/poll", env.tokens["worker"], {"worker_id": "lp", "max_tasks": 100})
    th = threading.Thread(target=poll)
    th.start()
    time.sleep(1.0)
    run = new_run(server, env)
    th.join(30)
    code, _, body = got["resp"]
    assert code == 200 and [t["run_id"] for t in body["tasks"]] == [run["id"]], body
    assert 0.8 < got["took"] < 15, got["took"]
    call(server, "POST", f"/v1/runs/{run['id']}/terminate", env.tokens["client"], {})


def test_queues(server, env, sql):
    adm = env.tokens["admin"]
    code, _, qs = call(server, "GET", "/v1/queues", adm)
    assert code == 200 and {env.wf, env.act} <= {q["name"] for q in qs["queues"]}
    code, _, q = call(server, "PATCH", f"/v1/queues/{env.act}", adm, {"paused": True, "capacity": 3})
    assert code == 200 and q["status"] == "PAUSED" and q["capacity"] == 3
    code, _, q = call(server, "PATCH", f"/v1/queues/{env.act}", adm, {"paused": False, "capacity": 0})
    assert q["status"] == "ACTIVE" and q["capacity"] is None
    # samples come every second (--sample-interval 1)
    deadline = time.monotonic() + 10
    while True:
        code, _, st = call(server, "GET", f"/v1/queues/{env.wf}", adm)
        assert code == 200 and st["queue"]["name"] == env.wf and st["latency_seconds"]["runs"] >= 0
        if len(st["samples"]) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(st["samples"]) >= 2 and {"ready", "leased", "completed_per_minute"} <= set(st["samples"][-1])
    assert call(server, "GET", f"/v1/queues/{env.act}", adm)[2]["latency_seconds"] is None
    name = f"rnew-{env.tag}"
    code, headers, made = call(server, "POST", "/v1/queues", adm, {"name": name, "kind": "activity", "capacity": 2})
    assert code == 201 and made["name"] == name and made["capacity"] == 2 and made["kind"] == "activity"
    assert_problem(call(server, "POST", "/v1/queues", adm, {"name": name, "kind": "activity"}), 409)
    assert_problem(call(server, "GET", "/v1/queues/nope-nope", adm), 404, "42704")


def test_what_roles_may_not_do(server, env, sql):
    run = new_run(server, env)
    rid = run["id"]
    other, client, worker = env.tokens["other"], env.tokens["client"], env.tokens["worker"]
    # another tenant: the run does not exist for it, its queue may not be named
    assert_problem(call(server, "GET", f"/v1/runs/{rid}", other), 404, "42704")
    assert_problem(call(server, "GET", f"/v1/runs/{rid}/history", other), 404, "42704")
    for action in ("cancel", "suspend", "resume", "terminate", "restart"):
        assert_problem(call(server, "POST", f"/v1/runs/{rid}/{action}", other, {}), 404, "42704")
    assert_problem(call(server, "POST", f"/v1/runs/{rid}/events", other, {"event_id": "x"}), 404, "42704")
    assert rid not in [r["id"] for r in call(server, "GET", f"/v1/runs?queue={env.wf}", other)[2]["runs"]]
    assert call(server, "GET", f"/v1/runs/counts?queue={env.wf}", other)[2]["counts"] == {}
    assert_problem(call(server, "POST", "/v1/runs", other, {"workflow_name": "x", "queue": env.wf}), 403, "42501")
    assert_problem(call(server, "POST", f"/v1/queues/{env.wf}/poll", other, {"worker_id": "o"}), 403, "42501")
    # a client leases nothing and manages no queue; a worker starts and steers no run
    assert_problem(call(server, "POST", f"/v1/queues/{env.wf}/poll", client, {"worker_id": "c"}), 403, "42501")
    assert_problem(call(server, "PATCH", f"/v1/queues/{env.wf}", client, {"paused": True}), 403, "42501")
    assert_problem(call(server, "GET", "/v1/queues", client), 403, "42501")
    assert_problem(call(server, "POST", "/v1/queues", client, {"name": f"x-{env.tag}", "kind": "workflow"}), 403, "42501")
    assert_problem(call(server, "POST", "/v1/runs", worker, {"workflow_name": "x", "queue": env.wf}), 403, "42501")
    assert_problem(call(server, "POST", f"/v1/runs/{rid}/cancel", worker, {}), 403, "42501")
    # nothing changed
    assert run_status(sql, rid) == "CREATED"
    assert sql.execute("SELECT status FROM dex.queue WHERE name = %s", (env.wf,)).fetchone()[0] == "ACTIVE"
    assert sql.execute("SELECT count(*) FROM dex.queue WHERE name = %s", (f"x-{env.tag}",)).fetchone()[0] == 0
    call(server, "POST", f"/v1/runs/{rid}/terminate", client, {})


def test_bad_input_changes_nothing(server, env, sql):
    tok = env.tokens["client"]
    before = sql.execute("SELECT count(*) FROM dex.runs WHERE queue = %s", (env.wf,)).fetchone()[0]
    bad_runs = [({"workflow_name": "x", "queue": env.wf, "priority": 500}, 400, "22023"),
                ({"workflow_name": "", "queue": env.wf}, 400, "22023"),
                ({"workflow_name": "x", "queue": env.wf, "labels": {"a": 1}}, 400, None),
                ({"workflow_name": "x", "queue": env.wf, "if_active": "maybe"}, 400, "22023"),
                ({"workflow_name": "x", "queue": env.wf, "execution_timeout_seconds": -1}, 400, "22023"),
                ({"workflow_name": "x", "queue": env.act}, 400, "42809"),
                ({"workflow_name": "x", "queue": "no-such-queue"}, 404, "42704"),
                ({"queue": env.wf}, 400, None)]
    for body, status, state in bad_runs:
        assert_problem(call(server, "POST", "/v1/runs", tok, body), status, state)
    code, _, raw = call(server, "POST", "/v1/runs", tok, headers={"Content-Type": "application/json"})
    assert code == 400
    for query in ("status=BOGUS", "cursor=%%%", "cursor=abc", "limit=0", "limit=501", "label=novalue", "label=a=1&label=a=2",
                  "created_after=2026-01-01T00:00:00", "created_after=yesterday", "parent_id=x"):
        assert_problem(call(server, "GET", "/v1/runs?" + query, tok), 400)
    assert_problem(call(server, "GET", "/v1/runs/not-a-uuid", tok), 400)
    run = new_run(server, env)
    assert_problem(call(server, "POST", f"/v1/runs/{run['id']}/reset", tok, {"event_id": 1}), 400, "22023")
    assert_problem(call(server, "POST", f"/v1/runs/{run['id']}/reset", tok, {}), 400)
    assert_problem(call(server, "POST", f"/v1/runs/{run['id']}/events", tok, {"payload": 1}), 400)
    assert_problem(call(server, "POST", f"/v1/runs/{uuid.uuid4()}/cancel", tok, {}), 404, "42704")
    assert_problem(call(server, "POST", f"/v1/queues/{env.wf}/poll", env.tokens["worker"],
                        {"worker_id": "w", "wait_seconds": 301}), 400)
    assert_problem(call(server, "POST", f"/v1/queues/{env.wf}/poll", env.tokens["worker"],
                        {"worker_id": "w", "max_tasks": 0}), 400, "22023")
    assert_problem(call(server, "POST", "/v1/tasks/complete", env.tokens["worker"],
                        {"run_id": run["id"], "task_id": 0, "lock_version": 1, "result": [{"bogus": {}}]}), 400)
    assert_problem(call(server, "PATCH", f"/v1/queues/{env.wf}", env.tokens["admin"], {"capacity": -2}), 400, "22023")
    # one run was made above, by new_run; none by the refused calls
    assert sql.execute("SELECT count(*) FROM dex.runs WHERE queue = %s", (env.wf,)).fetchone()[0] == before + 1
    assert sql.execute("SELECT status, history_length FROM dex.runs WHERE id = %s",
                       (run["id"],)).fetchone() == ("CREATED", 0)
    assert sql.execute("SELECT status, capacity FROM dex.queue WHERE name = %s", (env.wf,)).fetchone() == ("ACTIVE", None)
    call(server, "POST", f"/v1/runs/{run['id']}/terminate", tok, {})


def test_database_unavailable_is_503(env):
    from serve_support import free_port
    down = Server(f"host=127.0.0.1 port={free_port()} user=nobody connect_timeout=2")
    try:
        body = assert_problem(call(down, "GET", "/v1/runs", env.tokens["client"]), 503)
        assert "unavailable" in body["detail"]
        assert_problem(call(down, "POST", "/v1/runs", env.tokens["client"], {"workflow_name": "x", "queue": "q"}), 503)
        assert call(down, "GET", "/healthz")[0] == 503
    finally:
        down.stop()


def test_declared_polls_get_only_what_they_run(server, env):
    """A worker declares the (workflow, version) pairs it runs (dex 1.6): it gets only those."""
    a = new_run(server, env, workflow_name=f"decl-a-{env.tag}")
    b = new_run(server, env, workflow_name=f"decl-b-{env.tag}", workflow_version=2)
    code, _, body = call(server, "POST", f"/v1/queues/{env.wf}/poll", env.tokens["worker"],
                         {"worker_id": "decl", "max_tasks": 100, "names": [f"decl-b-{env.tag}"],
                          "versions": [2], "wait_seconds": 1})
    assert code == 200 and [t["run_id"] for t in body["tasks"]] == [b["id"]], body
    assert_problem(call(server, "POST", f"/v1/queues/{env.wf}/poll", env.tokens["worker"],
                        {"worker_id": "decl", "names": ["x"], "versions": [1, 2]}), 400, "22023")
    for r in (a, b):
        call(server, "POST", f"/v1/runs/{r['id']}/terminate", env.tokens["client"], {})
