"""An idle worker takes its tasks with one CALL dex.poll_tasks_wait(_pb) (dex 1.4) on a direct
connection, and falls back to dex.poll_tasks + CALL dex.wait_for_tasks otherwise."""

import time
import uuid

import psycopg
import pytest

import dex


@dex.activity("pw-double")
def double(x):
    return 2 * x


@dex.workflow("pw-flow")
async def flow(ctx, n):
    return await ctx.activity(double, n)


def has_poll_wait():
    with psycopg.connect("", autocommit=True) as c:     # dex 1.4 or later
        return c.execute("SELECT count(*) > 0 FROM pg_proc WHERE proname = 'poll_tasks_wait_pb' "
                         "AND pronamespace = 'dex'::regnamespace").fetchone()[0]


def backend_queries(application_name):
    with psycopg.connect("", autocommit=True) as c:
        return [r[0] for r in c.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s "
            "AND state = 'active'", (application_name,)).fetchall()]


def wait_until(what, predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_an_idle_worker_polls_and_waits_in_one_call(client, queues, start_worker, wire):
    if not has_poll_wait():
        pytest.skip("the installed dex has no dex.poll_tasks_wait_pb")
    w = start_worker(wire=wire, poll_timeout=30, worker_id=f"pw-{uuid.uuid4().hex[:8]}")
    app = f"dex worker {w.worker_id}"
    call = "CALL dex.poll_tasks_wait_pb(" if wire == "protobuf" else "CALL dex.poll_tasks_wait("
    # both queues' pollers wait inside the one-call procedure, not in dex.wait_for_tasks
    wait_until("both pollers in the one-call wait",
               lambda: sum(q.startswith(call) for q in backend_queries(app)) == 2)
    assert not any("wait_for_tasks" in q for q in backend_queries(app))
    for n in (1, 2, 3):         # each woken and taken by the waiting call
        run_id = client.start(flow, n, queue=queues[0])
        assert client.result(run_id, timeout=20) == 2 * n
        wait_until("the pollers back in the one-call wait",
                   lambda: sum(q.startswith(call) for q in backend_queries(app)) == 2)
    t0 = time.monotonic()
    w.shutdown()                # cancels the waits: does not wait out the 30 s timeout
    assert time.monotonic() - t0 < 10
    assert backend_queries(app) == []


def test_the_fallback_polls_then_waits_for_tasks(client, queues, start_worker, monkeypatch):
    orig_init = dex.Worker.__init__

    def init(self, *a, **kw):
        orig_init(self, *a, **kw)
        self._use_poll_wait = False
    monkeypatch.setattr(dex.Worker, "__init__", init)
    w = start_worker(poll_timeout=30, worker_id=f"pw-{uuid.uuid4().hex[:8]}")
    app = f"dex worker {w.worker_id}"
    wait_until("both pollers in dex.wait_for_tasks",
               lambda: sum(q.startswith("CALL dex.wait_for_tasks(")
                           for q in backend_queries(app)) == 2)
    assert not any("poll_tasks_wait" in q for q in backend_queries(app))
    run_id = client.start(flow, 5, queue=queues[0])
    assert client.result(run_id, timeout=20) == 10
    t0 = time.monotonic()
    w.shutdown()
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_an_idle_worker_completes_and_takes_the_next_task_in_one_call(client, queues,
                                                                      start_worker, wire):
    # dex 1.5: the workflow tasks a waiting call returned are completed by the next call,
    # which then waits for the next tasks: no separate completion call
    w = start_worker(wire=wire, poll_timeout=30)
    calls = {"with completions": 0, "plain completions": 0}
    combined, plain = w._wire.complete_and_poll_wait, w._wire.complete

    def counted_combined(*args, **kw):
        calls["with completions"] += 1
        return combined(*args, **kw)

    def counted_plain(conn, rows, values, fail=False):
        if any(r[1] == 0 for r in rows):
            calls["plain completions"] += 1
        return plain(conn, rows, values, fail)

    w._wire.complete_and_poll_wait, w._wire.complete = counted_combined, counted_plain
    app, call = f"dex worker {w.worker_id}", "CALL dex.poll_tasks_wait"
    wait_until("the pollers in the one-call wait",
               lambda: sum(q.startswith(call) for q in backend_queries(app)) == 2)
    for n in (1, 2, 3):
        run_id = client.start(flow, n, queue=queues[0])
        assert client.result(run_id, timeout=20) == 2 * n
    # each run has two workflow tasks, each completed with the call that waits for more
    assert calls == {"with completions": 6, "plain completions": 0}
    # (the last call's outcome is known when it returns, after its wait: not counted yet)
    assert w.stats["workflow_tasks"] == 5 and w.stats["leases_lost"] == 0
