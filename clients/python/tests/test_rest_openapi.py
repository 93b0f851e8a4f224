"""The OpenAPI document the server serves is the one checked in (clients/python/openapi.json):
a change of the API must regenerate it (python3 -m dex serve --openapi > openapi.json)."""

import json
import os
import subprocess
import sys

from serve_support import PKG, call, env, send, server  # noqa: F401  (fixtures)

CHECKED_IN = os.path.join(PKG, "openapi.json")


def test_served_document_is_checked_in(server):
    code, headers, served = call(server, "GET", "/openapi.json")
    assert code == 200 and headers["content-type"] == "application/json"
    with open(CHECKED_IN) as f:
        checked_in = json.load(f)
    assert served == checked_in, ("the served OpenAPI document differs from clients/python/openapi.json: "
                                  "regenerate it with python3 -m dex serve --openapi > openapi.json")


def test_document_covers_the_api(server):
    with open(CHECKED_IN) as f:
        doc = json.load(f)
    ops = {(m.upper(), p) for p, ms in doc["paths"].items() for m in ms}
    for op in [("GET", "/v1/runs"), ("POST", "/v1/runs"), ("GET", "/v1/runs/{run_id}"),
               ("GET", "/v1/runs/{run_id}/history"), ("GET", "/v1/runs/{run_id}/attempts"),
               ("POST", "/v1/runs/{run_id}/cancel"), ("POST", "/v1/runs/{run_id}/suspend"),
               ("POST", "/v1/runs/{run_id}/resume"), ("POST", "/v1/runs/{run_id}/terminate"),
               ("POST", "/v1/runs/{run_id}/restart"), ("POST", "/v1/runs/{run_id}/reset"),
               ("POST", "/v1/runs/{run_id}/events"), ("GET", "/v1/queues"), ("POST", "/v1/queues"),
               ("GET", "/v1/queues/{name}"), ("PATCH", "/v1/queues/{name}"),
               ("POST", "/v1/queues/{name}/poll"), ("POST", "/v1/tasks/complete"),
               ("POST", "/v1/tasks/fail"), ("POST", "/v1/tasks/heartbeat")]:
        assert op in ops, op
    # every /v1 operation documents its problems
    for p, ms in doc["paths"].items():
        if p.startswith("/v1"):
            for m, op in ms.items():
                assert {"400", "401", "403", "404", "409", "503"} <= set(op["responses"]), (m, p)
                assert "422" not in op["responses"]
    # and the generator writes the same document
    out = subprocess.run([sys.executable, "-m", "dex", "serve", "--openapi"], cwd=PKG,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == doc


def test_the_reference_loads_nothing_from_another_host(server):
    """/docs is the served document as one page of HTML (every operation and schema), which
    loads nothing from another host; /redoc leads to it; so does the dashboard's API link."""
    import re

    code, headers, page = call(server, "GET", "/docs")
    assert code == 200 and headers["content-type"].startswith("text/html")
    with open(CHECKED_IN) as f:
        doc = json.load(f)
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert f'id="{op["operationId"]}"' in page, path
    for name in doc["components"]["schemas"]:
        assert f'id="schema-{name}"' in page, name
    code, _, login = call(server, "GET", "/ui/login")
    assert code == 200 and 'href="/docs"' in login
    for html in (page, login):
        links = re.findall(r'(?:src|href|action)\s*=\s*"([^"]*)"', html)
        assert links and not [u for u in links if re.match(r"^(?:[a-z]+:)?//", u, re.I)], links
        assert "@import" not in html and "url(" not in html
    code, headers, _ = send(server, "GET", "/redoc")
    assert code == 301 and headers["location"] == "/docs"
