"""The REST API's schedules and queue limits against a real server (python3 -m dex serve on a
free port, as its own login role): create, list by pages, get, alter, pause, unpause, trigger,
backfill, next times and delete as dex_admin; what other roles may not do; bad input answered
as application/problem+json with nothing changed; a queue's rate and concurrency limits set by
PATCH and read back in its GET."""

import datetime as dt
import uuid

import pytest

from serve_support import call, env, server, sql  # noqa: F401  (fixtures)
from test_rest_api import assert_problem


@pytest.fixture
def name(env, sql):
    n = f"rs-{uuid.uuid4().hex[:8]}"
    yield n
    sql.execute("DELETE FROM dex.schedule WHERE name LIKE %s", (n + "%",))


def create(server, env, name, **kw):
    body = {"name": name, "workflow_name": "nightly", "queue": env.wf, "cron": "30 2 * * *", **kw}
    code, headers, s = call(server, "POST", "/v1/schedules", env.tokens["admin"], body)
    assert code == 201, s
    assert headers["location"] == f"/v1/schedules/{name}"
    return s


def test_create_get_list_next_times(server, env, sql, name):
    s = create(server, env, name, timezone="Europe/Berlin", argument={"kind": "daily"},
               labels={"team": "ops"}, jitter_seconds=0)
    assert s["cron"] == "30 2 * * *" and s["every_seconds"] is None and s["timezone"] == "Europe/Berlin"
    assert s["workflow_name"] == "nightly" and s["queue"] == env.wf and s["overlap"] == "skip"
    assert s["argument"] == {"kind": "daily"} and s["labels"] == {"team": "ops"}
    assert not s["paused"] and s["next_fire_at"] and s["last_run_id"] is None and s["runs_started"] == 0
    assert s["catchup_window_seconds"] == 60.0
    code, _, got = call(server, "GET", f"/v1/schedules/{name}", env.tokens["admin"])
    assert code == 200 and got == s
    # the next times are 02:30 in Berlin (00:30 or 01:30 UTC), a day apart, the first = next_fire_at
    code, _, nt = call(server, "GET", f"/v1/schedules/{name}/next-times?n=3", env.tokens["admin"])
    assert code == 200 and len(nt["times"]) == 3, nt
    times = [dt.datetime.fromisoformat(t) for t in nt["times"]]
    assert times[0] == dt.datetime.fromisoformat(s["next_fire_at"])
    assert all(t.astimezone(dt.timezone.utc).minute == 30 for t in times)
    assert all(dt.timedelta(hours=23) <= b - a <= dt.timedelta(hours=25) for a, b in zip(times, times[1:]))
    # an every schedule, paused from the start
    e = create(server, env, name + "-b", cron=None, every_seconds=300, paused=True, overlap="buffer_one")
    assert e["every_seconds"] == 300.0 and e["cron"] is None and e["paused"] and e["next_fire_at"] is None
    # pages by name: every schedule of the queue once, in order
    seen, cursor = [], None
    while True:
        path = f"/v1/schedules?queue={env.wf}&limit=1" + (f"&cursor={cursor}" if cursor else "")
        code, _, page = call(server, "GET", path, env.tokens["admin"])
        assert code == 200, page
        seen += [x["name"] for x in page["schedules"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert [n for n in seen if n.startswith(name)] == [name, name + "-b"]
    code, _, page = call(server, "GET", f"/v1/schedules?queue={env.wf}&paused=true", env.tokens["admin"])
    assert [x["name"] for x in page["schedules"] if x["name"].startswith(name)] == [name + "-b"]
    assert_problem(call(server, "GET", "/v1/schedules?cursor=%25%25", env.tokens["admin"]), 400)
    assert_problem(call(server, "GET", "/v1/schedules?limit=0", env.tokens["admin"]), 400)


def test_alter_pause_unpause_trigger_backfill_delete(server, env, sql, name):
    create(server, env, name, start_at="2030-01-01T00:00:00Z")
    code, _, s = call(server, "PATCH", f"/v1/schedules/{name}", env.tokens["admin"],
                      {"every_seconds": 3600, "jitter_seconds": 5, "overlap": "allow_all"})
    assert code == 200, s
    assert s["cron"] is None and s["every_seconds"] == 3600.0 and s["jitter_seconds"] == 5.0
    assert s["overlap"] == "allow_all" and s["start_at"].startswith("2030-01-01")
    # an explicit null removes start_at; what is not given stays
    code, _, s = call(server, "PATCH", f"/v1/schedules/{name}", env.tokens["admin"], {"start_at": None})
    assert code == 200 and s["start_at"] is None and s["every_seconds"] == 3600.0, s
    code, _, s = call(server, "POST", f"/v1/schedules/{name}/pause", env.tokens["admin"],
                      {"note": "migration INC-42"})
    assert code == 200 and s["paused"] and s["note"] == "migration INC-42" and s["next_fire_at"] is None
    code, _, s = call(server, "POST", f"/v1/schedules/{name}/unpause", env.tokens["admin"])
    assert code == 200 and not s["paused"] and s["next_fire_at"], s
    # trigger: a run now, labelled with the schedule, and the schedule's last run
    code, _, t = call(server, "POST", f"/v1/schedules/{name}/trigger", env.tokens["admin"])
    assert code == 200 and t["run_id"] and t["run"]["id"] == t["run_id"], t
    assert t["run"]["labels"]["dex.schedule"] == name and t["run"]["queue"] == env.wf
    code, _, s = call(server, "GET", f"/v1/schedules/{name}", env.tokens["admin"])
    assert s["last_run_id"] == t["run_id"] and s["last_run_status"] == "CREATED" and s["runs_started"] == 1
    # skip while it is active: no run
    code, _, t2 = call(server, "POST", f"/v1/schedules/{name}/trigger", env.tokens["admin"], {"overlap": "skip"})
    assert code == 200 and t2 == {"run_id": None, "run": None}
    # backfill three hourly ticks, each a run
    code, _, b = call(server, "POST", f"/v1/schedules/{name}/backfill", env.tokens["admin"],
                      {"from": "2029-01-01T00:00:00Z", "to": "2029-01-01T03:00:00Z"})
    assert code == 200, b
    assert [dt.datetime.fromisoformat(x["tick"]).hour for x in b["ticks"]] == [0, 1, 2]
    assert all(x["run_id"] for x in b["ticks"])
    assert sql.execute("SELECT count(*) FROM dex.runs WHERE labels->>'dex.schedule' = %s",
                       (name,)).fetchone()[0] == 4
    code, _, _ = call(server, "DELETE", f"/v1/schedules/{name}", env.tokens["admin"])
    assert code == 204
    assert_problem(call(server, "GET", f"/v1/schedules/{name}", env.tokens["admin"]), 404, "42704")
    assert_problem(call(server, "DELETE", f"/v1/schedules/{name}", env.tokens["admin"]), 404, "42704")
    # the runs it started go on
    assert sql.execute("SELECT count(*) FROM dex.runs WHERE labels->>'dex.schedule' = %s",
                       (name,)).fetchone()[0] == 4


def test_bad_input_and_other_roles_change_nothing(server, env, sql, name):
    create(server, env, name)
    before = sql.execute("SELECT * FROM dex.schedules WHERE name = %s", (name,)).fetchone()
    bad = [("POST", "/v1/schedules", {"name": name + "-x", "workflow_name": "w", "queue": env.wf,
                                      "cron": "*/5 * 32 * *"}, "22023"),
           ("POST", "/v1/schedules", {"name": name + "-x", "workflow_name": "w", "queue": env.wf}, "22023"),
           ("POST", "/v1/schedules", {"name": name, "workflow_name": "w", "queue": env.wf,
                                      "cron": "@daily"}, None),
           ("POST", "/v1/schedules", {"name": name + "-x", "workflow_name": "w", "queue": "nope-" + name,
                                      "cron": "@daily"}, "42704"),
           ("PATCH", f"/v1/schedules/{name}", {"timezone": "Mars/Olympus"}, "22023"),
           ("PATCH", f"/v1/schedules/{name}", {"overlap": "sometimes"}, "22023"),
           ("PATCH", f"/v1/schedules/{name}", {"every_seconds": 1e300}, None),
           ("POST", f"/v1/schedules/{name}/trigger", {"overlap": "sometimes"}, "22023"),
           ("POST", f"/v1/schedules/{name}/backfill", {"from": "2030-01-01T00:00:00Z"}, None),
           ("GET", f"/v1/schedules/{name}/next-times?n=0", None, "22023"),
           ("PATCH", f"/v1/schedules/{name}-x", {"cron": "@daily"}, "42704"),
           ("POST", f"/v1/schedules/{name}-x/pause", None, "42704")]
    for method, path, body, code in bad:
        resp = call(server, method, path, env.tokens["admin"], body)
        status = {"42704": 404, None: resp[0]}.get(code, 400)
        if code is None:
            assert resp[0] in (400, 409), resp
        assert_problem(resp, status, code)
    # the duplicate is a conflict
    assert call(server, "POST", "/v1/schedules", env.tokens["admin"],
                {"name": name, "workflow_name": "w", "queue": env.wf, "cron": "@daily"})[0] == 409
    # schedules are dex_admin's: the others are forbidden to read or steer them
    for who in ("client", "worker", "other"):
        tok = env.tokens[who]
        assert_problem(call(server, "GET", "/v1/schedules", tok), 403, "42501")
        assert_problem(call(server, "GET", f"/v1/schedules/{name}", tok), 403, "42501")
        assert_problem(call(server, "POST", f"/v1/schedules/{name}/trigger", tok), 403, "42501")
        assert_problem(call(server, "POST", f"/v1/schedules/{name}/pause", tok), 403, "42501")
        assert_problem(call(server, "DELETE", f"/v1/schedules/{name}", tok), 403, "42501")
        assert_problem(call(server, "POST", "/v1/schedules", tok,
                            {"name": name + "-y", "workflow_name": "w", "queue": env.wf, "cron": "@daily"}),
                       403, "42501")
    assert_problem(call(server, "GET", "/v1/schedules"), 401)
    assert sql.execute("SELECT * FROM dex.schedules WHERE name = %s", (name,)).fetchone() == before
    assert sql.execute("SELECT count(*) FROM dex.schedule WHERE name LIKE %s",
                       (name + "-%",)).fetchone()[0] == 0
    assert sql.execute("SELECT count(*) FROM dex.runs WHERE labels->>'dex.schedule' = %s",
                       (name,)).fetchone()[0] == 0
    may = call(server, "GET", "/v1/whoami", env.tokens["admin"])[2]["may"]
    assert may["trigger_schedule"] and may["pause_schedule"]
    assert not call(server, "GET", "/v1/whoami", env.tokens["client"])[2]["may"]["trigger_schedule"]


def test_queue_limits(server, env, sql):
    q = f"rlim-{uuid.uuid4().hex[:8]}"
    code, _, _ = call(server, "POST", "/v1/queues", env.tokens["admin"], {"name": q, "kind": "workflow"})
    assert code == 201
    code, _, body = call(server, "GET", f"/v1/queues/{q}", env.tokens["admin"])
    assert code == 200 and body["limits"]["rate_limit"] is None and body["limits"]["concurrency_limit"] == 1
    code, _, body = call(server, "PATCH", f"/v1/queues/{q}", env.tokens["admin"],
                         {"rate_limit": 20, "rate_period_seconds": 60, "concurrency_limit": 3})
    assert code == 200, body
    code, _, body = call(server, "GET", f"/v1/queues/{q}", env.tokens["admin"])
    lim = body["limits"]
    assert lim["rate_limit"] == 20 and lim["rate_period_seconds"] == 60.0 and lim["concurrency_limit"] == 3, lim
    assert lim["tasks_granted"] == 0 and lim["keys_with_limits"] == 0
    # bad input changes nothing; a client may not change limits
    assert_problem(call(server, "PATCH", f"/v1/queues/{q}", env.tokens["admin"], {"rate_limit": -1}), 400, "22023")
    assert_problem(call(server, "PATCH", f"/v1/queues/{q}", env.tokens["client"], {"rate_limit": 1}), 403, "42501")
    code, _, body = call(server, "GET", f"/v1/queues/{q}", env.tokens["admin"])
    assert body["limits"]["rate_limit"] == 20
    # a rate limit of 0 removes it; the keys' limit goes back to 1
    code, _, body = call(server, "PATCH", f"/v1/queues/{q}", env.tokens["admin"],
                         {"rate_limit": 0, "concurrency_limit": 1})
    assert code == 200, body
    lim = call(server, "GET", f"/v1/queues/{q}", env.tokens["admin"])[2]["limits"]
    assert lim["rate_limit"] is None and lim["concurrency_limit"] == 1
