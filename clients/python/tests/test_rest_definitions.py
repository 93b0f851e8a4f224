"""Workflows defined in JSON through the REST API (1.7): a definition is stored (its schema's
errors are 400 with the JSON path), read and listed; its runs are started only by roles it is
granted to (1.9); a run of it goes through a SQL step, a user task completed once and a signal;
it is deleted once no run uses it."""

import time

from serve_support import call, env, server, sql  # noqa: F401  (fixtures)

DEFINITION = {"steps": [
    {"id": "double", "type": "sql", "sql": "SELECT ($1->>'n')::int * 2 AS n", "next": "review"},
    {"id": "review", "type": "user", "candidateGroups": ["ops"], "form": {"fields": ["approved"]},
     "next": "paid"},
    {"id": "paid", "type": "signal", "signal": "paid", "resultVariable": "payment", "next": "end"},
    {"id": "end", "type": "end"}]}


def problem(resp, status, sqlstate):
    code, headers, body = resp
    assert code == status, body
    assert headers["content-type"].startswith("application/problem+json"), headers
    assert body["sqlstate"] == sqlstate, body
    return body


def wait(predicate, what):
    for _ in range(1000):
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"no {what}")


def test_a_definition_from_creation_to_its_end(server, env, sql):
    name, queue = f"rest-def-{env.tag}", f"rdef-{env.tag}"
    admin, client = env.tokens["admin"], env.tokens["client"]
    try:
        assert call(server, "POST", "/v1/queues", admin, {"name": queue, "kind": "workflow"})[0] == 201

        # checked against the schema: the offending element's path; only administrators store them
        body = problem(call(server, "POST", "/v1/definitions", admin,
                            {"name": name, "definition": {"steps": [{"id": "a", "type": "end", "next": "a"}]}}),
                       400, "22023")
        assert "$.steps[0].next" in body["detail"]
        problem(call(server, "POST", "/v1/definitions", client, {"name": name, "definition": DEFINITION}),
                403, "42501")
        code, headers, d = call(server, "POST", "/v1/definitions", admin,
                                {"name": name, "version": 1, "definition": DEFINITION})
        assert code == 201, d
        assert headers["location"] == f"/v1/definitions/{name}/1"
        assert d["owner"] == env.roles["admin"] and d["steps"] == 4 and d["definition"] == DEFINITION
        problem(call(server, "POST", "/v1/definitions", admin, {"name": name, "definition": DEFINITION}),
                409, "42710")
        assert call(server, "GET", f"/v1/definitions/{name}", client)[2]["version"] == 1
        assert call(server, "GET", f"/v1/definitions/{name}/1", client)[2]["definition"] == DEFINITION
        problem(call(server, "GET", f"/v1/definitions/{name}/2", client), 404, "42704")
        listed = call(server, "GET", f"/v1/definitions?name={name}", client)[2]["definitions"]
        assert [(x["name"], x["version"], x["definition"]) for x in listed] == [(name, 1, None)]

        # its SQL runs as its owner: a client starts its runs only once granted (1.9), and a
        # refused start creates nothing
        problem(call(server, "POST", "/v1/runs", client,
                     {"workflow_name": name, "queue": queue, "argument": {"n": 21}}), 403, "42501")
        assert sql.execute("SELECT count(*) FROM dex.workflow_run WHERE workflow_name = %s",
                           (name,)).fetchone()[0] == 0
        sql.execute("SELECT dex.grant_definition(%s, %s)", (name, env.roles["client"]))

        # a run: the SQL step runs, then it waits for a person
        code, _, run = call(server, "POST", "/v1/runs", client,
                            {"workflow_name": name, "queue": queue, "argument": {"n": 21}})
        assert code == 201, run
        path = f"/v1/user-tasks?run_id={run['id']}"
        tasks = wait(lambda: call(server, "GET", path, client)[2]["user_tasks"], "user task")
        assert [(t["step"], t["candidate_groups"], t["form"], t["workflow_name"]) for t in tasks] == \
            [("review", ["ops"], {"fields": ["approved"]}, name)]
        assert call(server, "GET", "/v1/user-tasks?candidate_group=ops", client)[2]["user_tasks"] == tasks
        # in use: not deleted
        problem(call(server, "DELETE", f"/v1/definitions/{name}/1", admin), 409, "55006")

        # completed once; the second completion changes nothing
        done = f"/v1/runs/{run['id']}/user-tasks/review/complete"
        assert call(server, "POST", done, client, {"variables": {"approved": True}})[0] == 204
        problem(call(server, "POST", done, client, {"variables": {"approved": False}}), 409, "55000")
        code, _, sent = call(server, "POST", f"/v1/runs/{run['id']}/signals/paid", client, {"payload": {"eur": 42}})
        assert code == 200 and sent == {"delivered": True}
        end = wait(lambda: (lambda r: r if r["status"] == "COMPLETED" else None)(
            call(server, "GET", f"/v1/runs/{run['id']}", client)[2]), "completed run")
        assert end["result"] == {"n": 42, "approved": True, "payment": {"eur": 42}}

        assert call(server, "DELETE", f"/v1/definitions/{name}/1", admin)[0] == 204
        problem(call(server, "GET", f"/v1/definitions/{name}", client), 404, "42704")
    finally:
        sql.execute("DELETE FROM dex.definition WHERE name = %s", (name,))
