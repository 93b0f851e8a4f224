"""The workflow cache (sticky execution): a run's next task resumes its cached workflow state
and gives the same commands as a full replay; anything unexpected falls back to replay."""

import dataclasses
import time

import psycopg
import pytest

import dex
from dbtools import first_failed_workflow_task
from dex._convert import command_kind
from dex._runtime import COMMAND_EVENT, WorkflowTaskFailure, _Replayer
from dex.registry import workflow_definition
from dex.worker import WorkflowCache

TS = "2026-01-01T00:00:{:02d}Z"


# ---------------------------------------------------------------------------
# Without a database: hand-made histories, recorded as the engine records them
# ---------------------------------------------------------------------------

def started(n, worker="w"):
    return {"timestamp": TS.format(n), "workflowTaskStarted": {"workerId": worker}}


def first_events(argument=5):
    return [started(0), {"timestamp": TS.format(0), "runCreated": {
        "workflowName": "x", "queue": "q", "argument": {"json": str(argument)}}},
        {"timestamp": TS.format(0), "runStarted": {}}]


def record(history, new, commands, n):
    """The history after the engine completed a task that showed ``new`` with ``commands``."""
    out = history + new + [{"timestamp": TS.format(n), "workflowTaskCompleted": {}}]
    for c in commands:
        kind = command_kind(c)
        body = dict(c[kind])
        if kind == "startChildRun":
            body["runId"] = f"child-{c['id']}"
        ev = {"timestamp": TS.format(n), COMMAND_EVENT[kind]: body}
        if c.get("id"):
            ev["id"] = c["id"]
        out.append(ev)
    return out


def task(history, new):
    return {"runId": "01a2", "workflowName": "x", "workflowVersion": 1, "history": history,
            "newEvents": new, "historyLength": len(history)}


def done(id, value, n):
    return {"timestamp": TS.format(n), "activityTaskCompleted": {
        "activityTaskCreatedEventId": id, "result": {"json": str(value)}}}


closed = []


@dex.workflow("cache-three-steps")
async def three_steps(ctx, arg):
    try:
        a = await ctx.activity("a", arg)
        child = ctx.child("kid", a)
        b, c = await ctx.all_of(ctx.activity("b", a), child)
        ctx.set_custom_status(f"child {child.run_id}")
        return await ctx.activity("c", b + c)
    finally:
        if ctx.is_replaying is False and ctx.cancel_requested is False:
            closed.append(ctx.run_id)


def fresh():
    return _Replayer(workflow_definition(three_steps), "acts")


def replayed(t):
    return dex.replay(t, workflow_definition(three_steps), "acts")


def test_resuming_gives_the_commands_of_a_full_replay():
    state = fresh()
    new = first_events()
    cmds = state.run(task([], new))
    assert [command_kind(c) for c in cmds] == ["scheduleActivity"]
    history = record([], new, cmds, 1)
    steps = [[started(2), done(1, 6, 2)],
             [started(3), done(3, 7, 3), {"timestamp": TS.format(3), "childRunCompleted": {
                 "childRunCreatedEventId": 2, "result": {"json": "8"}}}],
             [started(4), done(5, 15, 4)]]
    for i, new in enumerate(steps):
        t = task(history, new)
        expected = replayed(t)
        assert state.resume(t, history) == expected
        history = record(history, new, expected, 5 + i)
    assert expected == [{"completeRun": {"result": {"json": "15"}}}]
    assert state.finished
    # the child's run id came from the history the cached state never replayed
    status = [e for e in history if "customStatusSet" in e]
    assert status[0]["customStatusSet"]["customStatus"] == "child child-2"


def two_tasks():
    """A state that ran the first task, and the history after its completion."""
    state = fresh()
    new = first_events()
    cmds = state.run(task([], new))
    return state, record([], new, cmds, 1)


def test_a_history_given_from_an_offset_is_enough():
    # a protobuf task leaves out the events the state has seen (here 5, or some of them)
    for offset in (5, 3):
        state, history = two_tasks()
        new = [started(2), done(1, 6, 2)]
        t = task(history, new)
        cmds = state.resume(t, history)
        assert state.history_seen == 5
        history = record(history, new, cmds, 2)
        new = [started(3), done(3, 7, 3)]
        t = task(history, new)
        expected = replayed(t)
        t["history"] = history[offset:]
        assert state.resume(t, history[offset:], offset) == expected
    state, history = two_tasks()
    assert state.resume(task(history, new), history[1:], 1) is None   # 1 is past what it saw


def test_another_workers_task_in_between_is_a_miss():
    state, history = two_tasks()
    new = [started(2, "other"), done(1, 6, 2)]
    history = record(history, new, replayed(task(history, new)), 2)
    new = [started(3), done(3, 7, 3), {"timestamp": TS.format(3), "childRunCompleted": {
        "childRunCreatedEventId": 2, "result": {"json": "8"}}}]
    t = task(history, new)
    assert state.resume(t, history) is None
    assert [command_kind(c) for c in replayed(t)] == ["setCustomStatus", "scheduleActivity"]


def test_a_lost_completion_is_a_miss():
    # the first task's lease expired: another worker ran it again and recorded that
    state = fresh()
    new = first_events()
    cmds = state.run(task([], new))
    theirs = [started(1, "other")] + new[1:]
    history = record([], theirs, cmds, 1)
    t = task(history, [started(2), done(1, 6, 2)])
    assert state.resume(t, history) is None


def test_recorded_commands_that_are_not_the_ones_sent_are_a_miss_and_replay_says_why():
    state = fresh()
    new = first_events()
    state.run(task([], new))
    other = [{"id": 1, "startTimer": {"name": "nap", "delay": "1s"}}]  # other code's command
    history = record([], new, other, 1)
    t = task(history, [started(2), {"timestamp": TS.format(2), "timerElapsed": {
        "timerCreatedEventId": 1}}])
    assert state.resume(t, history) is None
    with pytest.raises(WorkflowTaskFailure) as err:
        replayed(t)
    assert err.value.failure["type"] == "dex.NonDeterminism"


def test_a_new_history_is_a_miss():
    # continue-as-new, or anything else that makes the history shorter or different
    state, history = two_tasks()
    t = task([], [started(2)] + first_events()[1:])
    assert state.resume(t, []) is None
    t = task(history[:-1], [started(2), done(1, 6, 2)])
    assert state.resume(t, history[:-1]) is None


def test_the_cache_keeps_the_most_recently_used_and_closes_the_rest():
    closed.clear()
    cache = WorkflowCache(2)
    states = {}
    for run_id in ("r1", "r2", "r3"):
        state = fresh()
        t = task([], first_events())
        t["runId"] = run_id
        state.run(t)
        states[run_id] = state
        cache.put(run_id, state)
        if run_id == "r2":
            assert cache.take("r1") is states["r1"]      # r1 in use ...
            cache.put("r1", states["r1"])                # ... and back: the most recent
    assert "r2" not in cache and "r1" in cache and "r3" in cache and len(cache) == 2
    ours = lambda: sorted(r for r in closed if r in states)   # noqa: E731 (others: by gc)
    assert states["r2"].finished and ours() == ["r2"]   # its coroutine was closed
    cache.clear()
    assert len(cache) == 0 and ours() == ["r1", "r2", "r3"]
    finished = fresh()
    finished.finished = True
    WorkflowCache(5).put("r4", finished)                 # a finished run is not kept


# ---------------------------------------------------------------------------
# With the engine
# ---------------------------------------------------------------------------

@dex.activity("cache-echo")
def echo(x):
    return x


@dex.activity("cache-fail-once", retry=dex.RetryPolicy(initial_delay=0.05, randomization_factor=0))
def fail_once(x):
    if dex.activity_context().info.attempt == 1:
        raise RuntimeError("first attempt fails")
    return x


@dex.workflow("cache-kid")
async def kid(ctx, n):
    return await ctx.activity(echo, n * 2)


@dex.workflow("cache-rich")
async def rich(ctx, arg):
    ctx.set_custom_status("fan-out")
    first = await ctx.all_of(ctx.activity(echo, {"n": 1}), ctx.activity(echo, {"n": 2}))
    timer = ctx.sleep(30, name="slow")
    winner = await ctx.any_of(ctx.activity(echo, "fast"), timer)
    if winner is not timer:
        timer.cancel()
    answer = ctx.side_effect(lambda: 42, name="answer")
    token = str(ctx.uuid4())
    approval = await ctx.wait_event("approval", timeout=60)
    try:
        await ctx.wait_event("never", timeout=0.05)
        late = "came"
    except dex.WaitTimeout:
        late = "timed out"
    child = await ctx.child(kid, 21)
    retried = await ctx.activity(fail_once, "ok")
    total = 0
    for i in range(3):
        total += await ctx.activity(echo, i)
        await ctx.sleep(0.01)
    return {"first": first, "answer": answer, "token": len(token), "approval": approval,
            "late": late, "child": child, "retried": retried, "total": total,
            "now": ctx.now().year}


def checking(worker, mismatches):
    """Make every cache hit of ``worker`` also replay the task from scratch and compare."""
    run_task = worker._run_workflow_task

    def run(run_id, raw, wire, conn=None):
        hits = worker.stats["cache_hits"]
        state, cmds = run_task(run_id, raw, wire, conn)
        if worker.stats["cache_hits"] > hits:
            full, _ = wire.workflow_task(raw)
            if wire.history_omitted(raw):       # incremental: the whole history, as leased
                full = dict(full, history=wire.run_history(conn, run_id)[:full["historyLength"]])
            expected = worker.run_workflow_task(full)
            if cmds != expected:
                mismatches.append((cmds, expected))
        return state, cmds

    worker._run_workflow_task = run
    return worker


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_every_cache_hit_gives_the_commands_of_a_full_replay(client, queues, start_worker,
                                                             wire):
    mismatches = []
    w = checking(start_worker(wire=wire, workflows=[rich, kid], activities=[echo, fail_once]),
                 mismatches)
    run_id = client.start(rich, {"order": 1}, queue=queues[0])
    client.send_event(run_id, "approval", {"by": "ana"})
    result = client.result(run_id, timeout=30)
    assert result == {"first": [{"n": 1}, {"n": 2}], "answer": 42, "token": 36,
                      "approval": {"by": "ana"}, "late": "timed out", "child": 42,
                      "retried": "ok", "total": 3, "now": result["now"]}
    assert mismatches == []
    assert w.stats["cache_hits"] >= 8
    assert w.stats["full_replays"] == 2        # the first tasks of the run and of its child
    assert w.stats["cache_stale"] == 0
    assert len(w.cache) == 0                   # both runs ended: nothing is kept for them


@dex.workflow("cache-waits")
async def waits(ctx, n):
    first = await ctx.wait_event("a")
    second = await ctx.wait_event("b")
    return n + first + second


def wait_for_history(client, run_id, kind, count=1, timeout=10):
    deadline = time.monotonic() + timeout
    while sum(1 for e in client.history(run_id) if kind in e) < count:
        assert time.monotonic() < deadline, f"no {kind} in the history of {run_id}"
        time.sleep(0.02)


def test_eviction_makes_the_next_task_a_full_replay(client, queues, start_worker):
    w = start_worker(workflows=[waits], workflow_cache_size=2)
    ids = []
    for i in range(4):                         # one at a time: the cache's order is known
        ids.append(client.start(waits, i, queue=queues[0]))
        wait_for_history(client, ids[-1], "externalEventWaitStarted")
    assert len(w.cache) == 2 and ids[2] in {str(k) for k in w.cache._runs}
    for run_id in ids:
        client.send_event(run_id, "a", 10)
        wait_for_history(client, run_id, "externalEventWaitStarted", 2)
    # with room for two, each run's state was evicted by the two runs after it: every
    # second task was a full replay, and runs 2 and 3 are cached now
    assert w.stats["full_replays"] == 4 + 4 and w.stats["cache_hits"] == 0
    for run_id in reversed(ids):               # 3 and 2 resume; 1 and 0 replay
        client.send_event(run_id, "b", 100)
        assert client.result(run_id, timeout=10) == ids.index(run_id) + 110
    assert w.stats["cache_hits"] == 2 and w.stats["full_replays"] == 8 + 2


def manual_worker(conninfo, queues, **kw):
    """A worker whose batches the test runs itself (not started: no threads)."""
    return dex.Worker(conninfo, [queues[0]], workflows=[waits], **kw)


def batch(worker, conn, queue):
    n = worker._workflow_batch(conn, queue, 0)
    assert n == 1
    return n


def test_another_worker_running_the_run_in_between_forces_a_full_replay(conninfo, client,
                                                                         queues):
    a, b = manual_worker(conninfo, queues), manual_worker(conninfo, queues)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        run_id = client.start(waits, 1, queue=queues[0])
        batch(a, conn, queues[0])                       # a runs the first task, caches it
        client.send_event(run_id, "a", 10)
        batch(b, conn, queues[0])                       # b runs the second
        client.send_event(run_id, "b", 100)
        batch(a, conn, queues[0])                       # a: stale state, full replay
        assert client.result(run_id, timeout=10) == 111
    assert a.stats == dict(a.stats, full_replays=2, cache_hits=0, cache_stale=1)
    assert b.stats["full_replays"] == 1


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_a_cached_run_is_sent_only_the_last_batch(conninfo, client, queues, wire):
    # dex 1.5: the worker polls with worker_cache; a task of a run it completed last leaves
    # out the history that worker was shown, and the cached state resumes from the rest
    a = manual_worker(conninfo, queues, wire=wire)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        run_id = client.start(waits, 1, queue=queues[0])
        batch(a, conn, queues[0])                       # the first task: nothing to leave out
        client.send_event(run_id, "a", 10)
        batch(a, conn, queues[0])
        client.send_event(run_id, "b", 100)
        rows = a._wire.poll(conn, queues[0], a.worker_id, 1, a.workflow_lease, True)
        raw = rows[0][3]
        task, _ = a._wire.workflow_task(raw)
        # the second task was shown 5 events; its batch: 2 shown, completed, wait started
        assert a._wire.history_omitted(raw) == 5
        assert task["historyLength"] == 9 and len(task["history"]) == 4
        a._workflow_batch(conn, queues[0], 0, rows)
        assert client.result(run_id, timeout=10) == 111
    assert a.stats == dict(a.stats, full_replays=1, cache_hits=2, cache_stale=0, history_reads=0)


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_a_worker_that_lost_the_state_reads_the_history(conninfo, client, queues, wire):
    a = manual_worker(conninfo, queues, wire=wire)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        run_id = client.start(waits, 1, queue=queues[0])
        batch(a, conn, queues[0])
        client.send_event(run_id, "a", 10)
        batch(a, conn, queues[0])
        a.cache.clear()                                 # as after a restart under the same id
        client.send_event(run_id, "b", 100)
        batch(a, conn, queues[0])                       # the task leaves out 5 events: read
        assert client.result(run_id, timeout=10) == 111
    assert a.stats == dict(a.stats, full_replays=2, cache_hits=1, history_reads=1)


def test_a_lost_lease_is_not_cached(conninfo, client, queues):
    a = manual_worker(conninfo, queues, workflow_lease=0.2)
    b = manual_worker(conninfo, queues)
    wire = a._wire
    with psycopg.connect(conninfo, autocommit=True) as conn:
        run_id = client.start(waits, 1, queue=queues[0])
        rows = wire.poll(conn, queues[0], a.worker_id, 1, a.workflow_lease)
        state, cmds = a._run_workflow_task(rows[0][0], rows[0][3], wire)
        time.sleep(0.4)                                 # a's lease expires; b takes the task
        batch(b, conn, queues[0])
        a._complete_workflow_tasks(conn, rows, [cmds], [state])
        assert a.stats["leases_lost"] == 1 and len(a.cache) == 0 and state.finished
        client.send_event(run_id, "a", 10)
        client.send_event(run_id, "b", 100)
        batch(a, conn, queues[0])
        assert client.result(run_id, timeout=10) == 111


@dex.workflow("cache-nd")
async def nd_v1(ctx):
    await ctx.activity(echo, "v1")
    await ctx.wait_event("go")
    await ctx.wait_event("again")


async def nd_v2(ctx):                  # the same workflow, edited: a timer first
    await ctx.sleep(0.01)
    await ctx.wait_event("go")
    await ctx.wait_event("again")


def test_the_determinism_check_still_works_with_the_cache(client, queues, start_worker):
    w = start_worker(workflows=[nd_v1], activities=[echo])
    run_id = client.start(nd_v1, queue=queues[0])
    wait_for_history(client, run_id, "externalEventWaitStarted")
    # the code changes under a running worker: its cached state runs the old code on ...
    w._workflows[("cache-nd", 1)] = dataclasses.replace(workflow_definition(nd_v1), fn=nd_v2)
    client.send_event(run_id, "go")
    wait_for_history(client, run_id, "externalEventWaitStarted", 2)
    assert w.stats["cache_hits"] == 2
    # ... until the run is replayed: then the change is found.  The worker caches the run's
    # state after its completion commits, so the history shows it a moment before the cache
    # does: clear the cache once the state is in it, or the clear comes first and is lost
    deadline = time.monotonic() + 10
    while len(w.cache) == 0 and time.monotonic() < deadline:   # the worker runs this run only
        time.sleep(0.01)
    assert len(w.cache) == 1
    w.cache.clear()
    client.send_event(run_id, "again")

    message, kind = first_failed_workflow_task(run_id)
    assert kind == "dex.NonDeterminism"
    assert "activityTaskCreated 'cache-echo' (id 1)" in message
    assert client.get(run_id).status == "RUNNING"          # the task failed, not the run
    # the code that matches comes back: the retried task completes the run
    w._workflows[("cache-nd", 1)] = workflow_definition(nd_v1)
    assert client.result(run_id, timeout=30) is None
