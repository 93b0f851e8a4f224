"""A read-only role, made with the recipe of docs/monitoring.md (REST API, "A read-only role"): through
the API and the dashboard it reads the runs, histories and attempts of the queues granted to
it, and nothing else; every call that would change something is refused (403) with nothing
changed, and it sees no action."""

import uuid

import pytest

from serve_support import call, env, send, server, sql  # noqa: F401  (fixtures)

RECIPE = """
CREATE ROLE {r} NOLOGIN;
GRANT USAGE ON SCHEMA dex TO {r};
GRANT SELECT ON dex.runs, dex.runs_in_status, dex.run_status_horizon TO {r};
GRANT EXECUTE ON FUNCTION dex.get_run(uuid), dex.run_history(uuid), dex.run_attempts(uuid),
  dex.usable_queue_ids(), dex.payload_value(bytea), dex.to_json(text, bytea) TO {r};
"""


@pytest.fixture
def reader(env, sql):
    role = f"rest_reader_{env.tag}"
    for stmt in RECIPE.format(r=role).split(";"):
        if stmt.strip():
            sql.execute(stmt)
    sql.execute("SELECT dex.grant_queue(%s, %s)", (env.wf, role))
    sql.execute(f"GRANT {role} TO {env.roles['server']}")
    token = sql.execute("SELECT dex.create_api_token(%s, %s)", (f"rest-reader-{env.tag}", role)).fetchone()[0]
    yield token
    sql.execute("DELETE FROM dex.api_token WHERE name = %s", (f"rest-reader-{env.tag}",))
    sql.execute("SELECT dex.revoke_queue(%s, %s)", (env.wf, role))
    sql.execute(f"DROP OWNED BY {role}")
    sql.execute(f"DROP ROLE {role}")


def test_a_reader_reads_runs_and_histories_and_nothing_else(server, env, sql, reader):
    code, _, run = call(server, "POST", "/v1/runs", env.tokens["client"],
                        {"workflow_name": "read", "queue": env.wf, "argument": {"n": 1}})
    assert code == 201, run
    rid = run["id"]
    code, _, page = call(server, "GET", f"/v1/runs?queue={env.wf}", reader)
    assert code == 200 and rid in [r["id"] for r in page["runs"]], page
    assert call(server, "GET", f"/v1/runs/{rid}", reader)[2]["argument"] == {"n": 1}
    assert call(server, "GET", f"/v1/runs/{rid}/history", reader)[0] == 200
    assert call(server, "GET", f"/v1/runs/{rid}/attempts", reader)[0] == 200
    assert call(server, "GET", f"/v1/runs/counts?queue={env.wf}", reader)[2]["counts"]["CREATED"] >= 1
    # the runs of a queue not granted to it do not exist for it
    other_q = f"rest-reader-other-{env.tag}"
    sql.execute("SELECT dex.create_queue(%s, 'workflow')", (other_q,))
    other = str(sql.execute("SELECT dex.create_run('x', %s)", (other_q,)).fetchone()[0])
    assert call(server, "GET", f"/v1/runs/{other}", reader)[0] == 404
    assert other not in [r["id"] for r in call(server, "GET", "/v1/runs", reader)[2]["runs"]]
    sql.execute("SELECT dex.terminate_run(%s)", (other,))
    code, _, me = call(server, "GET", "/v1/whoami", reader)
    assert code == 200 and not any(me["may"].values()), me
    before = sql.execute("SELECT status, history_length FROM dex.runs WHERE id = %s", (rid,)).fetchone()
    runs_before = sql.execute("SELECT count(*) FROM dex.workflow_run").fetchone()[0]
    for method, path, body in (("POST", "/v1/runs", {"workflow_name": "x", "queue": env.wf}),
                               ("POST", f"/v1/runs/{rid}/cancel", {}), ("POST", f"/v1/runs/{rid}/terminate", {}),
                               ("POST", f"/v1/runs/{rid}/restart", {}), ("POST", f"/v1/runs/{rid}/events", {"event_id": "e"}),
                               ("POST", f"/v1/queues/{env.wf}/poll", {"worker_id": "r"}),
                               ("PATCH", f"/v1/queues/{env.wf}", {"paused": True}), ("GET", "/v1/queues", None),
                               ("GET", "/v1/schedules", None), ("POST", "/v1/queues", {"name": f"r-{env.tag}", "kind": "workflow"})):
        code, headers, problem = call(server, method, path, reader, body)
        assert code == 403 and headers["content-type"] == "application/problem+json", (method, path, problem)
    assert sql.execute("SELECT status, history_length FROM dex.runs WHERE id = %s", (rid,)).fetchone() == before
    assert sql.execute("SELECT count(*) FROM dex.workflow_run").fetchone()[0] == runs_before
    # the dashboard: the runs and the run, without a single action
    cookie = {"Cookie": f"dex_token={reader}"}
    code, _, page = send(server, "GET", f"/ui/runs?queue={env.wf}", headers=cookie)
    assert code == 200 and rid in page
    code, _, page = send(server, "GET", f"/ui/runs/{rid}", headers=cookie)
    assert code == 200 and 'id="action-' not in page, page[:500]
    assert send(server, "GET", f"/ui/runs/{rid}/confirm/cancel", headers=cookie)[0] == 403
    assert send(server, "GET", "/ui/queues", headers=cookie)[0] == 403
    assert send(server, "GET", f"/ui/runs/{uuid.uuid4()}", headers=cookie)[0] == 404
    call(server, "POST", f"/v1/runs/{rid}/terminate", env.tokens["client"], {})
