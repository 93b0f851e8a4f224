"""The run lifecycle of dex 1.4 through the client: delayed starts (start_at), execution
timeouts, restart, reset, attempts, waiting for many runs, and a child's execution timeout and
parent close policy.  A worker in this process, a real dex."""

import collections
import datetime as dt
import threading
import time
import uuid

import pytest

import dex
from dbtools import require_dex
from conftest import event_kinds

NO_SUCH_RUN = "01234567-89ab-7def-8123-456789abcdef"


@pytest.fixture(scope="module")
def queues(conninfo):
    """A workflow queue and an activity queue for the whole module, not one pair a test: each
    queue is a partition of the task tables, which a test database keeps for good, and every
    partition makes statements on those tables (heartbeats among them) slower to plan."""
    tag = uuid.uuid4().hex[:8]
    wf, act = f"wf-lc-{tag}", f"act-lc-{tag}"
    with dex.Client(conninfo) as c:
        c.create_queue(wf, "workflow")
        c.create_queue(act, "activity")
    return wf, act


@pytest.fixture
def client14(client):
    """The client, on a database whose dex has run lifecycle controls (1.4) or later."""
    return require_dex(client, (1, 4), "run lifecycle controls")


calls = collections.Counter()
lock = threading.Lock()


def count(*key):
    with lock:
        calls[key] += 1
        return calls[key]


def wait_until(what, predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def wait_for_kind(client, run_id, kind, timeout=10):
    wait_until(f"{kind} in the history of {run_id}",
               lambda: kind in event_kinds(client.history(run_id)), timeout)


def server_now(client):
    return client.conn.execute("SELECT now()").fetchone()[0]


@dex.workflow("lc-echo")
async def echo(ctx, arg):
    return {"arg": arg, "started": ctx.now().isoformat()}


@dex.workflow("lc-waits")
async def waits(ctx, arg=None):
    return await ctx.wait_event("go")


# -- delayed starts -------------------------------------------------------------

def test_a_delayed_run_starts_at_start_at(client14, queues, start_worker):
    client = client14
    start_worker()
    start_at = server_now(client) + dt.timedelta(seconds=2.5)
    run_id = client.start(echo, 1, queue=queues[0], start_at=start_at)
    run = client.get(run_id)
    assert run.status == "DELAYED" and not run.done and run.started_at is None
    assert [r.id for r in client.list(status="DELAYED", workflow_name="lc-echo")
            if r.id == run_id] == [run_id]
    time.sleep(0.5)
    assert client.get(run_id).status == "DELAYED"        # a worker is there, and waits
    result = client.result(run_id, timeout=15)
    run = client.get(run_id)
    assert run.status == "COMPLETED" and result["arg"] == 1
    assert run.started_at >= start_at
    assert dex._convert.parse_timestamp(result["started"].replace("+00:00", "Z")) >= start_at


def test_start_at_in_the_past_or_now_starts_at_once(client14, queues, start_worker):
    client = client14
    start_worker()
    past = client.start(echo, 2, queue=queues[0],
                        start_at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1))
    assert client.get(past).status != "DELAYED"
    assert client.result(past, timeout=10)["arg"] == 2


def test_start_many_delayed(client14, queues, start_worker):
    client = client14
    start_worker()
    start_at = server_now(client) + dt.timedelta(seconds=1)
    ids = client.start_many(echo, [1, 2, 3], queue=queues[0], start_at=start_at)
    assert [client.get(i).status for i in ids] == ["DELAYED"] * 3
    assert [client.result(i, timeout=15)["arg"] for i in ids] == [1, 2, 3]
    assert all(client.get(i).started_at >= start_at for i in ids)


def test_terminating_a_delayed_run(client14, queues, start_worker):
    client = client14
    start_worker()
    run_id = client.start(echo, 1, queue=queues[0],
                          start_at=server_now(client) + dt.timedelta(seconds=1))
    client.terminate(run_id, "not wanted after all")
    with pytest.raises(dex.RunTerminatedError):
        client.result(run_id, timeout=5)
    time.sleep(1.5)                                       # past its start_at: it stays ended
    run = client.get(run_id)
    assert run.status == "TERMINATED" and run.result is None
    assert event_kinds(client.history(run_id))[-1] == "runTerminated"


# -- execution timeouts -----------------------------------------------------------

def test_execution_timeout_ends_the_run_timed_out(client14, queues, start_worker):
    client = client14
    start_worker()
    t0 = time.monotonic()
    run_id = client.start(waits, queue=queues[0], execution_timeout=dt.timedelta(seconds=1))
    with pytest.raises(dex.RunTimedOutError) as err:
        client.result(run_id, timeout=15)
    # CALL dex.wait_for_run woke when the run timed out (not at the end of its 60 s)
    assert 0.9 <= time.monotonic() - t0 < 8
    assert isinstance(err.value, dex.RunFailedError)
    assert err.value.failure["type"] == "dex.TimedOut" and err.value.type == "dex.TimedOut"
    run = client.get(run_id)
    assert run.status == "TIMED_OUT" and run.done
    history = client.history(run_id)
    assert event_kinds(history)[-1] == "runTimedOut"
    # it ended on time, and can do nothing more
    with pytest.raises(dex.InvalidState):
        client.terminate(run_id)
    with pytest.raises(dex.InvalidState):
        client.send_event(run_id, "go", 1)
    assert client.get(run_id).status == "TIMED_OUT"
    client.purge(run_id)
    with pytest.raises(dex.NotFound):
        client.get(run_id)


def test_a_run_that_ends_in_time_does_not_time_out(client14, queues, start_worker):
    client = client14
    start_worker()
    run_id = client.start(echo, 5, queue=queues[0], execution_timeout=10)
    assert client.result(run_id, timeout=10)["arg"] == 5
    assert client.get(run_id).status == "COMPLETED"
    # its deadline went with it (dex.run_timer keeps pending timers only): it cannot time out
    (left,) = client.conn.execute("SELECT count(*) FROM dex.run_timer WHERE run_id = %s",
                                  (run_id,)).fetchone()
    assert left == 0


def test_the_execution_timeout_counts_from_the_delayed_start(client14, queues, start_worker):
    client = client14
    start_worker()
    start_at = server_now(client) + dt.timedelta(seconds=3)
    run_id = client.start(waits, queue=queues[0], start_at=start_at, execution_timeout="1s")
    time.sleep(1.5)          # past the timeout counted from its creation, before its start
    assert client.get(run_id).status == "DELAYED"
    with pytest.raises(dex.RunTimedOutError):
        client.result(run_id, timeout=15)
    run = client.get(run_id)
    assert run.status == "TIMED_OUT"
    (deadline,) = [e["runTimedOut"].get("deadline") for e in client.history(run_id)
                   if "runTimedOut" in e]
    assert dex._convert.parse_timestamp(deadline) >= start_at + dt.timedelta(seconds=1)
    assert run.completed_at >= start_at + dt.timedelta(seconds=1)


def test_the_timeout_of_a_suspended_run(client14, queues, start_worker):
    client = client14
    start_worker()
    run_id = client.start(waits, queue=queues[0], execution_timeout=3)
    wait_for_kind(client, run_id, "externalEventWaitStarted")
    client.suspend(run_id)
    assert client.get(run_id).status == "SUSPENDED"
    with pytest.raises(dex.RunTimedOutError):
        client.result(run_id, timeout=10)


def test_suspend_and_resume_record_why_and_who(client14, queues, start_worker):
    client = client14
    if not client.conn.execute("SELECT to_regprocedure('dex.suspend_run(uuid, text)') IS NOT NULL"
                               ).fetchone()[0]:
        pytest.skip("this dex 1.4 was installed before suspend_run took a reason")
    start_worker()
    run_id = client.start(waits, queue=queues[0])
    wait_for_kind(client, run_id, "externalEventWaitStarted")
    client.suspend(run_id, "maintenance window")
    client.resume(run_id, "window over")
    client.send_event(run_id, "go", 1)
    assert client.result(run_id, timeout=10) == 1
    (user,) = client.conn.execute("SELECT session_user").fetchone()
    history = client.history(run_id)
    (suspended,) = [e["runSuspended"] for e in history if "runSuspended" in e]
    (resumed,) = [e["runResumed"] for e in history if "runResumed" in e]
    assert suspended == {"reason": "maintenance window", "by": user}
    assert resumed == {"reason": "window over", "by": user}


# -- restart ----------------------------------------------------------------------

def test_restart(client14, queues, start_worker):
    client = client14
    start_worker()
    instance = f"rs-{queues[0]}"
    old = client.start(echo, {"n": 7}, queue=queues[0], instance_id=instance, priority=3,
                       labels={"k": queues[0]})
    first = client.result(old, timeout=10)
    new = client.restart(old)
    assert new != old
    run = client.get(new)
    assert (run.workflow_name, run.workflow_version, run.queue) == ("lc-echo", 1, queues[0])
    assert run.argument == {"n": 7} and run.priority == 3 and run.labels == {"k": queues[0]}
    assert run.instance_id == instance          # the old run had ended
    assert (run.origin_run_id, run.origin) == (old, "RESTART")
    assert client.get(old).origin is None and client.get(old).status == "COMPLETED"
    second = client.result(new, timeout=10)
    assert second["arg"] == first["arg"] == {"n": 7}
    created = client.history(new)
    (rc,) = [e["runCreated"] for e in created if "runCreated" in e]
    assert rc["origin"]["runId"] == old and rc["origin"]["kind"] == "RESTART"
    # restart of a restart: its origin is the run restarted
    third = client.restart(new)
    assert client.get(third).origin_run_id == new
    client.result(third, timeout=10)


def test_restarting_an_active_run_leaves_its_instance_id(client14, queues, start_worker):
    client = client14
    start_worker()
    instance = f"ra-{queues[0]}"
    old = client.start(waits, queue=queues[0], instance_id=instance)
    new = client.restart(old)
    assert client.get(new).instance_id is None     # the old run still has it
    assert client.get(old).status not in dex.client.TERMINAL
    client.send_event(old, "go", "old")
    client.send_event(new, "go", "new")
    assert client.result(old, timeout=10) == "old"
    assert client.result(new, timeout=10) == "new"


# -- reset ------------------------------------------------------------------------

@dex.activity("lc-step")
def step(arg):
    info = dex.activity_context().info
    count(info.run_id, arg)
    return f"{arg} done"


@dex.workflow("lc-two-steps")
async def two_steps(ctx):
    a = await ctx.activity(step, "a")
    b = await ctx.activity(step, "b")
    return [a, b]


@dex.workflow("lc-step-then-wait")
async def step_then_wait(ctx):
    a = await ctx.activity(step, "a")
    go = await ctx.wait_event("go")
    return [a, go]


def completed_tasks(client, run_id):
    """The sequence numbers of the run's workflowTaskCompleted events, and of its activities'
    completions: ({seq}, {activity name: seq})."""
    rows = client.history_rows(run_id)
    created = {e["id"]: e["activityTaskCreated"]["argument"] for _, e in rows
               if "activityTaskCreated" in e}
    wtc = [s for s, e in rows if "workflowTaskCompleted" in e]
    done = {dex.decode(created[e["activityTaskCompleted"]["activityTaskCreatedEventId"]]): s
            for s, e in rows if "activityTaskCompleted" in e}
    return wtc, done


def test_reset_does_not_run_completed_activities_again(client14, queues, start_worker):
    client = client14
    start_worker()
    old = client.start(two_steps, queue=queues[0])
    assert client.result(old, timeout=15) == ["a done", "b done"]
    assert calls[old, "a"] == calls[old, "b"] == 1
    wtc, done = completed_tasks(client, old)
    # the first workflow task completed after activity a completed: it scheduled b
    after_a = min(s for s in wtc if s > done["a"])
    new = client.reset(old, after_a, "rerun b")
    run = client.get(new)
    assert (run.origin_run_id, run.origin) == (old, "RESET")
    assert client.result(new, timeout=15) == ["a done", "b done"]
    assert calls[new, "a"] == 0 and calls[new, "b"] == 1
    # the new history starts with the old one, up to and with that workflow task
    old_events = [e for _, e in client.history_rows(old) if _ <= after_a]
    new_history = client.history(new)
    assert event_kinds(new_history)[-1] == "runCompleted"
    assert event_kinds(new_history).count("activityTaskCompleted") == 2
    (rc,) = [e["runCreated"] for e in new_history if "runCreated" in e]
    assert rc["origin"] == {"runId": old, "kind": "RESET", "eventId": after_a}
    assert [dex._convert.event_kind(e) for e in old_events] == event_kinds(new_history)[:len(old_events)]
    assert client.get(old).status == "COMPLETED"     # an ended run is left as it was


def test_reset_to_the_first_workflow_task(client14, queues, start_worker):
    client = client14
    start_worker()
    old = client.start(two_steps, queue=queues[0])
    client.result(old, timeout=15)
    wtc, done = completed_tasks(client, old)
    # an event between two workflow tasks: the last one completed at or before it
    assert wtc[0] < done["a"] < wtc[1]
    new = client.reset(old, done["a"])
    assert client.result(new, timeout=15) == ["a done", "b done"]
    assert calls[new, "a"] == calls[new, "b"] == 1       # a was pending then: scheduled again
    new2 = client.reset(old, wtc[0])
    assert client.result(new2, timeout=15) == ["a done", "b done"]
    assert calls[new2, "a"] == calls[new2, "b"] == 1


def test_reset_of_an_active_run_terminates_it(client14, queues, start_worker):
    client = client14
    start_worker()
    instance = f"rr-{queues[0]}"
    old = client.start(step_then_wait, queue=queues[0], instance_id=instance)
    wait_for_kind(client, old, "externalEventWaitStarted")
    wtc, done = completed_tasks(client, old)
    new = client.reset(old, wtc[-1], "new code deployed")
    with pytest.raises(dex.RunTerminatedError) as err:
        client.result(old, timeout=5)
    assert "new code deployed" in err.value.failure.get("message", "")
    assert client.get(new).instance_id == instance     # the instance id went to the new run
    client.send_event_to_instance(instance, "go", "went", queue=queues[0])
    assert client.result(new, timeout=15) == ["a done", "went"]
    assert calls[new, "a"] == 0


@pytest.mark.parametrize("point", ["last workflow task", "run end"])
def test_reset_to_the_workflow_task_that_completed_the_run(client14, queues, start_worker, point):
    client = client14
    start_worker()
    old = client.start(two_steps, queue=queues[0])
    client.result(old, timeout=15)
    wtc, done = completed_tasks(client, old)
    rows = client.history_rows(old)
    assert dex._convert.event_kind(rows[-1][1]) == "runCompleted"
    new = client.reset(old, wtc[-1] if point == "last workflow task" else rows[-1][0])
    # the old run's end is not part of the new run: its code runs the last step again
    run = client.wait(new, timeout=15)
    assert (run.status, run.failure) == ("COMPLETED", None)
    assert run.result == ["a done", "b done"]
    assert event_kinds(client.history(new)).count("runCompleted") == 1
    assert calls[new, "a"] == calls[new, "b"] == 0


def test_reset_delivers_the_events_received_after_the_point_again(client14, queues, start_worker):
    client = client14
    start_worker()
    old = client.start(step_then_wait, queue=queues[0])
    wait_for_kind(client, old, "externalEventWaitStarted")
    client.send_event(old, "go", "first")
    assert client.result(old, timeout=15) == ["a done", "first"]
    rows = client.history_rows(old)
    # the wait's event: after the workflow task that began the wait, before the next one
    (wait,) = [seq for seq, e in rows if "externalEventWaitStarted" in e]
    new = client.reset(old, wait)
    assert client.result(new, timeout=15) == ["a done", "first"]
    assert calls[new, "a"] == 0
    received = [e for e in client.history(new) if "externalEventReceived" in e]
    assert [dex.decode(e["externalEventReceived"]["payload"]) for e in received] == ["first"]


bug = {"on": True}


@dex.workflow("lc-buggy")
async def buggy(ctx):
    a = await ctx.activity(step, "a")
    if bug["on"]:
        raise ValueError("bug in step 2")
    b = await ctx.activity(step, "b")
    return [a, b]


def test_reset_after_a_fix_decides_the_failed_task_again(client14, queues, start_worker):
    client = client14
    start_worker()
    bug["on"] = True
    old = client.start(buggy, queue=queues[0])
    with pytest.raises(dex.RunFailedError):
        client.result(old, timeout=15)
    wtc, done = completed_tasks(client, old)
    bug["on"] = False          # the fix is deployed
    try:
        new = client.reset(old, wtc[-1], "bug fixed")
        assert client.result(new, timeout=15) == ["a done", "b done"]
    finally:
        bug["on"] = True
    assert calls[new, "a"] == 0 and calls[new, "b"] == 1
    kinds = event_kinds(client.history(new))
    assert "runFailed" not in kinds and kinds[-1] == "runCompleted"
    assert client.get(old).status == "FAILED"


def test_reset_refuses_event_ids_before_any_workflow_task(client14, queues, start_worker):
    client = client14
    start_worker()
    old = client.start(echo, 0, queue=queues[0])
    client.result(old, timeout=10)
    wtc, _ = completed_tasks(client, old)
    for bad in (0, -1):
        with pytest.raises(dex.InvalidArgument):
            client.reset(old, bad)
    if wtc[0] > 1:
        with pytest.raises(dex.InvalidArgument):
            client.reset(old, wtc[0] - 1)


# -- attempts -------------------------------------------------------------------

@dex.activity("lc-flaky", retry=dex.RetryPolicy(max_attempts=3, initial_delay=0.05,
                                                randomization_factor=0))
def flaky(_):
    info = dex.activity_context().info
    if info.attempt == 1:
        raise ConnectionError("first attempt fails")
    return info.attempt


@dex.workflow("lc-flaky")
async def flaky_wf(ctx):
    return await ctx.activity(flaky)


def test_run_attempts(client14, queues, start_worker):
    client = client14
    w = start_worker()
    run_id = client.start(flaky_wf, queue=queues[0])
    assert client.result(run_id, timeout=15) == 2
    attempts = client.attempts(run_id)
    acts = [a for a in attempts if a.task == "activity"]
    assert [(a.name, a.attempt, a.outcome) for a in acts] == [
        ("lc-flaky", 1, "FAILED"), ("lc-flaky", 2, "COMPLETED")]
    failed, completed = acts
    assert failed.failure["message"] == "first attempt fails"
    assert failed.failure["type"] == "ConnectionError"
    assert completed.failure is None
    created = [e["id"] for e in client.history(run_id) if "activityTaskCreated" in e]
    assert failed.event_id == completed.event_id == created[0]
    for a in acts:
        assert a.worker_id == w.worker_id
        assert a.leased_at is not None and a.leased_at <= a.ended_at
    assert failed.ended_at <= completed.leased_at
    wf = [a for a in attempts if a.task == "workflow"]
    assert wf and all(a.event_id == 0 and a.outcome == "COMPLETED" and a.name is None
                      for a in wf)
    assert len(wf) == event_kinds(client.history(run_id)).count("workflowTaskCompleted")
    assert [a.ended_at for a in attempts] == sorted(a.ended_at for a in attempts)


@dex.activity("lc-long")
def long_activity(_):
    ctx = dex.activity_context()
    count(ctx.info.run_id, "long started")
    end = time.monotonic() + 10
    try:
        while time.monotonic() < end:
            ctx.heartbeat()
            time.sleep(0.05)
    except dex.LeaseLost:
        count(ctx.info.run_id, "long lost its lease")
        raise


@dex.workflow("lc-long")
async def long_wf(ctx):
    return await ctx.activity(long_activity)


def test_attempts_voided_by_termination(client14, queues, start_worker):
    client = client14
    w = start_worker(activity_lease=3)
    run_id = client.start(long_wf, queue=queues[0])
    wait_until("the activity's start", lambda: calls[run_id, "long started"] == 1)
    client.terminate(run_id, "enough")
    attempts = client.attempts(run_id)
    acts = [a for a in attempts if a.task == "activity"]
    assert [(a.name, a.attempt, a.outcome, a.worker_id) for a in acts] == [
        ("lc-long", 1, "VOIDED", w.worker_id)]
    assert acts[0].leased_at <= acts[0].ended_at
    wait_until("the lost lease", lambda: calls[run_id, "long lost its lease"] == 1)
    assert [a.outcome for a in client.attempts(run_id) if a.task == "activity"] == ["VOIDED"]


@dex.activity("lc-once", retry=dex.RetryPolicy(initial_delay=0.05, randomization_factor=0))
def once(_):
    return dex.activity_context().info.attempt


@dex.workflow("lc-once")
async def once_wf(ctx, queue):
    return await ctx.activity(once, queue=queue)


def test_attempts_whose_lease_expired(client14, conninfo, queues, start_worker):
    client = client14
    start_worker(activity_queues=[])
    run_id = client.start(once_wf, queues[1], queue=queues[0])
    wait_for_kind(client, run_id, "activityTaskCreated")
    # a worker that leases the activity for 0.3 s and dies
    wait_until("the activity task", lambda: [r[0] for r in client.conn.execute(
        "SELECT run_id::text FROM dex.poll_tasks(%s, 'dead-worker', 1, '0.3 s')",
        (queues[1],)).fetchall()] == [run_id])
    start_worker(workflow_queues=[])
    assert client.result(run_id, timeout=20) == 2
    acts = [(a.attempt, a.outcome, a.worker_id) for a in client.attempts(run_id)
            if a.task == "activity"]
    assert acts[0] == (1, "LEASE_EXPIRED", "dead-worker") and acts[1][:2] == (2, "COMPLETED")
    assert len(acts) == 2


# -- waiting for many runs ---------------------------------------------------------

@pytest.mark.parametrize("pooled", [False, True], ids=["in-server", "polling"])
def test_wait_for_runs(client14, conninfo, queues, start_worker, pooled):
    start_worker()
    with dex.Client(conninfo, pooled=pooled) as client:
        if not pooled:
            assert client._waits_in_server("wait_for_runs")
        ids = [client.start(waits, i, queue=queues[0]) for i in range(3)]
        assert client.wait_for_runs(ids, timeout=0.3) == []
        assert client.wait_for_runs(ids, timeout=0.3, mode="all") == []
        for i in ids:
            wait_for_kind(client, i, "externalEventWaitStarted")
        # a run that ends while the client waits wakes it
        threading.Timer(0.5, client14.send_event, (ids[1], "go", 1)).start()
        t0 = time.monotonic()
        assert client.wait_for_runs(ids, timeout=20) == [ids[1]]
        assert time.monotonic() - t0 < 5
        assert client.wait_for_runs(ids, timeout=0.3, mode="all") == [ids[1]]
        threading.Timer(0.3, client14.send_event, (ids[2], "go", 2)).start()
        threading.Timer(0.6, client14.send_event, (ids[0], "go", 0)).start()
        t0 = time.monotonic()
        assert client.wait_for_runs(ids, timeout=20, mode="all") == ids   # in the order given
        assert time.monotonic() - t0 < 5
        assert client.wait_for_runs(ids[::-1], timeout=0) == ids[::-1]
        assert client.wait_for_runs([]) == []
        with pytest.raises(ValueError):
            client.wait_for_runs(ids, mode="some")
        with pytest.raises(dex.NotFound):
            client.wait_for_runs([ids[0], NO_SUCH_RUN], timeout=0)
        # a timed-out run has ended too
        late = client.start(waits, queue=queues[0], execution_timeout=0.5)
        assert client.wait_for_runs([late], timeout=20) == [late]


def test_wait_for_more_runs_than_one_call_takes(client14, queues, start_worker, monkeypatch):
    client = client14
    start_worker()
    done = client.start(echo, 0, queue=queues[0])
    client.result(done, timeout=10)
    ids = [client.start(waits, i, queue=queues[0]) for i in range(3)]
    statements = []
    exec_ = client._exec
    monkeypatch.setattr(client, "_exec", lambda sql, *a, **k: statements.append(sql) or
                        exec_(sql, *a, **k))
    monkeypatch.setattr(dex.client, "WAIT_FOR_RUNS_MAX", 3)
    assert client.wait_for_runs(ids + [done], timeout=0.2) == [done]      # polled
    assert client.wait_for_runs(ids + [done], timeout=0.2, mode="all") == [done]
    assert not any("wait_for_runs" in sql for sql in statements)
    assert client.wait_for_runs(ids, timeout=0.1) == []                   # 3: one CALL
    assert "CALL dex.wait_for_runs" in statements[-1]
    for i in ids:
        client.send_event(i, "go", None)


def test_wait_for_runs_in_a_transaction_block_polls(client14, queues, start_worker):
    client = client14
    start_worker()
    run_id = client.start(echo, 3, queue=queues[0])
    with client.conn.transaction():
        assert not client._waits_in_server("wait_for_runs")
        assert client.wait_for_runs([run_id], timeout=20) == [run_id]
        assert client.result(run_id, timeout=1)["arg"] == 3


# -- bad input ----------------------------------------------------------------------

def test_unknown_runs(client14):
    client = client14
    for call in (lambda: client.restart(NO_SUCH_RUN), lambda: client.reset(NO_SUCH_RUN, 4),
                 lambda: client.attempts(NO_SUCH_RUN), lambda: client.get(NO_SUCH_RUN),
                 lambda: client.wait_for_runs([NO_SUCH_RUN], timeout=0),
                 lambda: client.terminate(NO_SUCH_RUN)):
        with pytest.raises(dex.NotFound) as err:
            call()
        assert err.value.sqlstate == "42704"


def test_bad_lifecycle_arguments(client14, queues):
    client = client14
    with pytest.raises(TypeError):
        client.start(echo, queue=queues[0], start_at=1.5)
    for bad in (-1, 0, dt.timedelta(seconds=-1)):
        with pytest.raises(dex.InvalidArgument):
            client.start(echo, queue=queues[0], execution_timeout=bad)
    with pytest.raises(ValueError):
        dex._runtime.parent_close_policy_json("ORPHAN")
    assert dex._runtime.parent_close_policy_json("abandon") == "PARENT_CLOSE_POLICY_ABANDON"


# -- children -------------------------------------------------------------------------

@dex.workflow("lc-child-times-out")
async def child_times_out(ctx):
    try:
        await ctx.child(waits, execution_timeout=1)
    except dex.ChildRunError as e:
        return {"type": e.type, "message": str(e)}
    return "no timeout"


def test_a_childs_execution_timeout(client14, queues, start_worker):
    client = client14
    start_worker()
    run_id = client.start(child_times_out, queue=queues[0])
    result = client.result(run_id, timeout=15)
    assert result["type"] == "dex.TimedOut" and " timed out: " in result["message"]
    (created,) = [e["childRunCreated"] for e in client.history(run_id) if "childRunCreated" in e]
    assert created["executionTimeout"] == "1s"
    assert client.get(created["runId"]).status == "TIMED_OUT"


@dex.workflow("lc-child-waits-cancellable")
async def child_cancellable(ctx):
    try:
        return await ctx.wait_event("go")
    except dex.CancelledError:
        ctx.side_effect(lambda: "cleaned up", name="cleanup")
        raise


@dex.workflow("lc-parent-leaves")
async def parent_leaves(ctx, policy):
    kid = ctx.child(child_cancellable, parent_close_policy=policy)
    await ctx.sleep(0.2)          # the child runs meanwhile
    return kid.run_id


@pytest.mark.parametrize("policy,status", [(None, "TERMINATED"), ("TERMINATE", "TERMINATED"),
                                           ("REQUEST_CANCEL", "CANCELLED"),
                                           ("ABANDON", "RUNNING")])
def test_parent_close_policy(client14, queues, start_worker, policy, status):
    client = client14
    start_worker()
    parent_id = client.start(parent_leaves, policy, queue=queues[0])
    child_id = client.result(parent_id, timeout=15)
    (created,) = [e["childRunCreated"] for e in client.history(parent_id) if "childRunCreated" in e]
    assert created["runId"] == child_id
    if policy is not None:
        assert created["parentClosePolicy"] == f"PARENT_CLOSE_POLICY_{policy}"
    if status == "RUNNING":
        wait_for_kind(client, child_id, "externalEventWaitStarted")
        time.sleep(0.3)
        assert client.get(child_id).status == "RUNNING"
        client.send_event(child_id, "go", "on its own")
        assert client.result(child_id, timeout=10) == "on its own"
        return
    assert client.wait(child_id, timeout=10).status == status
    if status == "CANCELLED":
        assert "sideEffectExecuted" in event_kinds(client.history(child_id))


@dex.workflow("lc-parent-waits")
async def parent_waits(ctx, policy):
    kid = ctx.child(child_cancellable, parent_close_policy=policy)
    await ctx.sleep(0.1)
    ctx.set_custom_status(kid.run_id or "")
    await ctx.wait_event("never")


@pytest.mark.parametrize("policy,status", [(None, "TERMINATED"), ("REQUEST_CANCEL", "CANCELLED"),
                                           ("ABANDON", "RUNNING")])
def test_a_parent_that_times_out_applies_its_close_policy(client14, queues, start_worker,
                                                           policy, status):
    client = client14
    start_worker()
    parent_id = client.start(parent_waits, policy, queue=queues[0], execution_timeout=2)
    with pytest.raises(dex.RunTimedOutError):
        client.result(parent_id, timeout=15)
    (created,) = [e["childRunCreated"] for e in client.history(parent_id) if "childRunCreated" in e]
    child_id = created["runId"]
    if status == "RUNNING":
        time.sleep(0.5)
        assert client.get(child_id).status == "RUNNING"
        client.terminate(child_id)
    else:
        assert client.wait(child_id, timeout=10).status == status
