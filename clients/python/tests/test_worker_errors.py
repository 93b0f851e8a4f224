"""A worker that cannot poll one of its queues (issue 17): it said so with a ten-line traceback
every second, forever, and looked healthy.  Now it says once, in a line, which queue (and of
which kind) and what the server answered, and stops: `python3 -m dex worker` exits 1,
Worker.run() raises the error.  A queue refused after it was polled is retried with backoff,
said once."""

import logging
import os
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.pq import DiagnosticField

import dex
import dex.worker

HERE = os.path.dirname(os.path.abspath(__file__))


def run_cli_worker(*args, timeout=30):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    try:
        return subprocess.run([sys.executable, "-m", "dex", "worker", "crashflows", *args],
                              cwd=HERE, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the worker did not stop in {timeout} s: ...{(e.stderr or b'')[-1500:]!r}")


@pytest.mark.parametrize("kind", ["workflow", "activity"])
def test_a_worker_of_a_queue_that_does_not_exist_says_so_once_and_exits(queues, kind):
    missing = f"no-such-{uuid.uuid4().hex[:8]}"
    flags = ["-w", missing, "-a", queues[1]] if kind == "workflow" else \
        ["-w", queues[0], "-a", missing]
    out = run_cli_worker(*flags)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    said = [line for line in out.stderr.splitlines() if "does not exist" in line]
    assert len(said) == 1, out.stderr
    assert said[0].endswith(
        f"dex.worker {kind} queue '{missing}': queue \"{missing}\" does not exist (SQLSTATE "
        f"42704); create it first: SELECT dex.create_queue('{missing}', '{kind}'); the worker "
        "stops")


def test_a_queue_of_the_other_kind_is_wrong_kind_as_in_typescript():
    refused = psycopg.errors.InvalidParameterValue(
        'names are workflow names, but "a" is an activity queue',
        info={DiagnosticField.SQLSTATE: b"22023",
              DiagnosticField.MESSAGE_PRIMARY: b'workflows are declared on activity queue "a"'})
    error = dex.worker._queue_error("workflow", "a", refused)
    assert isinstance(error, dex.WrongKind) and error.sqlstate == "22023"
    assert error.__cause__ is refused
    assert str(error).endswith("it is an activity queue: give it as one (python3 -m dex worker "
                               "-a a, or Worker(activity_queues=[...]))")


def test_a_queue_given_as_the_other_kind_is_said_so(queues):
    """-w with an activity queue, or -a with a workflow queue: the server refuses the poll,
    which declares what the worker runs (22023), and the worker says which kind the queue is."""
    for flags, kind, other, flag in ((["-w", queues[1]], "workflow", "an activity", "-a"),
                                     (["-a", queues[0]], "activity", "a workflow", "-w")):
        out = run_cli_worker(*flags)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        said = [line for line in out.stderr.splitlines() if "the worker stops" in line]
        assert len(said) == 1, out.stderr
        queue = flags[1]
        assert f"dex.worker {kind} queue '{queue}': " in said[0]
        assert "(SQLSTATE 22023)" in said[0]
        assert said[0].endswith(f"; it is {other} queue: give it as one (python3 -m dex worker "
                                f"{flag} {queue}, or Worker({other.split()[1]}_queues=[...]))"
                                "; the worker stops")


def test_worker_run_raises_what_stopped_it(conninfo, queues):
    missing = f"no-such-{uuid.uuid4().hex[:8]}"
    w = dex.Worker(conninfo, [missing], [queues[1]], poll_timeout=2, shutdown_timeout=2)
    raised = []

    def run():
        try:
            w.run()
        except BaseException as e:
            raised.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if t.is_alive():
        w.stop()
        t.join()
        pytest.fail("the worker did not stop by itself")
    (e,) = raised
    assert isinstance(e, dex.NotFound)
    assert e is w.error and e.sqlstate == "42704"
    assert isinstance(e.__cause__, psycopg.errors.UndefinedObject)
    assert str(e).startswith(f"workflow queue '{missing}': queue \"{missing}\" "
                                        "does not exist (SQLSTATE 42704)")


class Conn:
    closed = False

    def close(self):
        self.closed = True


def test_a_queue_refused_after_it_was_polled_is_said_once_and_retried(monkeypatch, caplog):
    """The queue went away (a grant revoked, ...) while the worker polled it: the worker goes
    on (its other queues may be fine), says so in one line, tries again less and less often,
    and says when the queue answers again."""
    monkeypatch.setattr(dex.worker, "REFUSED_BACKOFF", (0.01, 0.04))
    caplog.set_level(logging.INFO, logger="dex")
    w = dex.Worker("", ["q"], pooled=False)
    monkeypatch.setattr(w, "_connect", Conn)
    refused = psycopg.errors.UndefinedObject(
        'queue "q" does not exist', info={DiagnosticField.SQLSTATE: b"42704",
                                          DiagnosticField.MESSAGE_PRIMARY: b'queue "q" does not exist'})
    calls = []

    def body(conn):
        calls.append(conn)
        if 2 <= len(calls) <= 6:
            raise refused
        if len(calls) == 8:
            w._stopping.set()

    w._polling(body, "q", "workflow")
    assert len(calls) == 8 and w.error is None
    said = [r.getMessage() for r in caplog.records if r.name == "dex.worker"]
    assert said == ["workflow queue 'q': queue \"q\" does not exist (SQLSTATE 42704); create it "
                    "first: SELECT dex.create_queue('q', 'workflow'); trying again, less and "
                    "less often",
                    "workflow queue 'q': polled again"]


@dex.activity("worker-errors-set")
def gives_a_set():
    return {"ids": {1}}


def test_an_activity_result_that_is_not_json_fails_it_for_good_and_names_it():
    w = dex.Worker("", ["q"], ["a"], activities=[gives_a_set])
    r = dex.worker._Running((uuid.uuid4(), 1, 1, None), {"name": "worker-errors-set"}, w)
    w._execute(r)
    kind, failure = r.outcome
    assert kind == "fail" and failure["terminal"] and failure["type"] == "TypeError"
    assert failure["message"] == ("the result of activity 'worker-errors-set' is not JSON: "
                                  "result['ids'] is a set ({1}), which has no JSON form")


def test_a_refused_workflow_task_failure_stays_in_the_batch(monkeypatch, caplog):
    """dex.fail_tasks refusing a workflow task's failure (22023, 54000) is the completion's
    business: it must not escape to the poller's loop, which would take it for the queue's
    poll being refused and stop the worker."""
    w = dex.Worker("", ["q"], pooled=False)

    def fails(run_id, raw, wire, conn):
        raise dex._runtime.WorkflowTaskFailure({"message": "a patch does not match"})
    monkeypatch.setattr(w, "_run_workflow_task", fails)

    class Refusing:
        def execute(self, *args, **kwargs):
            raise psycopg.errors.InvalidParameterValue("the failure is refused")

    assert w._run_workflow_tasks(Refusing(), [(uuid.uuid4(), 1, 1, b"")]) == ([], [], [])
    assert any("1 workflow task(s) could not be failed (the failure is refused); left to their "
               "leases" in r.getMessage() for r in caplog.records)


@dex.workflow("worker-errors-revoked")
async def revoked_flow(ctx, n):
    return await ctx.activity(revoked_step, n)


@dex.activity("worker-errors-revoked-step")
def revoked_step(n):
    return n + 1


def test_a_queue_revoked_while_its_worker_waits_is_retried(
        conninfo, client, queues, monkeypatch, caplog):
    """The revoke reaches the worker's CALL dex.poll_tasks_wait while it waits (42501): the
    worker had polled the queue, so it says so and tries again, and goes on once the queue is
    granted back.  It stopped for good: a call that had not returned (30 s without a task, or
    never while tasks kept coming) did not count as polled."""
    monkeypatch.setattr(dex.worker, "REFUSED_BACKOFF", (0.2, 0.4))
    caplog.set_level(logging.INFO, logger="dex")
    role = f"worker_errors_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE dex_worker")
        w = dex.Worker(f"{conninfo} user={role}", [queues[0]], [queues[1]], poll_timeout=30,
                       shutdown_timeout=2, workflows=[revoked_flow], activities=[revoked_step])
        try:
            w.start()
            run_id = client.start(revoked_flow, 1, queue=queues[0])
            assert client.result(run_id, timeout=20) == 2
            time.sleep(0.5)                 # the workflow poller waits in its CALL again
            admin.execute("SELECT dex.revoke_queue(%s, 'dex_worker')", (queues[0],))
            deadline = time.monotonic() + 15
            while not any("trying again" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the worker never said the queue was refused"
                time.sleep(0.05)
            assert w.error is None and not w._stopping.is_set()
            admin.execute("SELECT dex.grant_queue(%s, 'dex_worker')", (queues[0],))
            run_id = client.start(revoked_flow, 5, queue=queues[0])
            assert client.result(run_id, timeout=20) == 6
            assert w.error is None
            assert not any("the worker stops" in r.getMessage() for r in caplog.records)
        finally:
            w.shutdown()
            admin.execute("SELECT dex.grant_queue(%s, 'dex_worker')", (queues[0],))
            admin.execute(f"DROP ROLE {role}")
