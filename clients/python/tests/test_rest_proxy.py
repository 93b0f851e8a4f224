"""Behind a reverse proxy that terminates TLS, the server sees http:// and the proxy's Host:
the dashboard must not build absolute URLs from them, or an https:// page would fetch its
live parts from http://.  The live-refresh URL of the runs page and every redirect are
paths."""

import re

from serve_support import env, send, server  # noqa: F401  (fixtures)


def test_the_dashboard_names_no_scheme_nor_host(server, env):
    proxy = {"Host": "dex.example.org", "Cookie": f"dex_token={env.tokens['client']}"}
    code, _, page = send(server, "GET", f"/ui/runs?queue={env.wf}&status=FAILED", headers=proxy)
    assert code == 200, page[:300]
    polls = re.findall(r'data-poll="([^"]*)"', page)
    assert polls == [f"/ui/runs-live?queue={env.wf}&amp;status=FAILED"], polls
    assert "dex.example.org" not in page and "http://" not in page
    for path in ("/", "/ui/logout", "/redoc"):
        code, headers, _ = send(server, "POST" if path == "/ui/logout" else "GET", path, headers=proxy)
        assert code in (301, 303, 307) and headers["location"].startswith("/"), (path, headers)
