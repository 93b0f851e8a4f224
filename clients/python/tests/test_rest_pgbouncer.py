"""dex serve behind a real PgBouncer in transaction mode (Debian's pgbouncer): requests of
different roles and long polls share two server connections, and every request still runs as
its own token's role, never another's: the server sets a role only for a transaction (SET
LOCAL ROLE), and its statements are not prepared (a transaction pool would lose them)."""

import threading

from serve_support import Server, call, env, server, sql  # noqa: F401  (fixtures)
from test_pgbouncer import pgbouncer  # noqa: F401  (fixture)


def test_roles_do_not_leak_through_a_transaction_pool(pgbouncer, env, sql):  # noqa: F811
    b = pgbouncer("transaction", 2)
    srv = Server(b.conninfo)
    try:
        code, _, run = call(srv, "POST", "/v1/runs", env.tokens["client"],
                            {"workflow_name": "pgb", "queue": env.wf})
        assert code == 201, run
        errors = []

        def whoami(who):
            for _ in range(25):
                code, _, me = call(srv, "GET", "/v1/whoami", env.tokens[who])
                if code != 200 or me["role"] != env.roles[who]:
                    errors.append((who, code, me))

        def other_tenant():
            for _ in range(15):
                code, _, page = call(srv, "GET", f"/v1/runs?queue={env.wf}", env.tokens["other"])
                if code != 200 or page["runs"]:
                    errors.append(("other lists", code, page))
                code, _, body = call(srv, "GET", f"/v1/runs/{run['id']}", env.tokens["other"])
                if code != 404:
                    errors.append(("other reads", code, body))

        def long_poll():
            for _ in range(3):
                code, _, body = call(srv, "POST", f"/v1/queues/{env.act}/poll", env.tokens["worker"],
                                     {"worker_id": "pgb", "wait_seconds": 1})
                if code != 200 or body["tasks"]:
                    errors.append(("poll", code, body))

        threads = ([threading.Thread(target=whoami, args=(w,)) for w in ("admin", "client", "worker", "other")]
                   + [threading.Thread(target=other_tenant), threading.Thread(target=long_poll)])
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert b.pool()["sv_active"] + b.pool()["sv_idle"] <= 2
        code, _, got = call(srv, "GET", f"/v1/runs/{run['id']}", env.tokens["client"])
        assert code == 200 and got["id"] == run["id"]
        call(srv, "POST", f"/v1/runs/{run['id']}/terminate", env.tokens["client"], {})
    finally:
        srv.stop()
