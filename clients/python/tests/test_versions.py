"""Deploying new code (dex 1.6): a worker declares the (workflow, version) pairs and the
activities it has, and the server hands it nothing else.  A rolling deploy loses no run: runs
of a version no worker runs wait, shown by dex.unserved, until a worker that has it polls."""

import uuid

import pytest

import dex
from dbtools import sql, wait_until


@dex.activity("dv-step")
def step(n):
    return n + 1


@dex.workflow("dv-flow", version=1)
async def flow_v1(ctx, n):
    await ctx.sleep(2)
    return await ctx.activity(step, n)


@dex.workflow("dv-flow", version=2)
async def flow_v2(ctx, n):
    return 100 * await ctx.activity(step, n)


@dex.workflow("dv-needs-missing")
async def needs_missing(ctx, n):
    return await ctx.activity("dv-missing", n)


@dex.activity("dv-missing")
def missing(n):
    return -n


def declares_versions():
    return sql("SELECT pronargs = 7 FROM pg_proc WHERE oid = to_regproc('dex.poll_tasks')")[0][0]


def workers_of(client, run_id):
    """The ids of the workers that started the run's workflow tasks."""
    return {e["workflowTaskStarted"]["workerId"] for e in client.history(run_id)
            if "workflowTaskStarted" in e}


def statuses(ids):
    return dict(sql("SELECT status, count(*) FROM dex.workflow_run WHERE id = ANY(%s::uuid[]) "
                    "GROUP BY 1", (ids,)))


def test_rolling_deploy_loses_no_run(client, queues, start_worker):
    if not declares_versions():
        pytest.skip("the installed dex has no version-aware dispatch")
    wf = queues[0]
    tag = uuid.uuid4().hex[:6]
    old = start_worker(workflows=[flow_v1], activities=[step], worker_id=f"v1-{tag}")
    v1_runs = client.start_many(flow_v1, list(range(100)), queue=wf)
    # every run took its first step on version 1 and waits on its two-second timer
    wait_until("100 runs waiting on their timers",
               lambda: statuses(v1_runs) == {"RUNNING": 100}
               and not sql("SELECT 1 FROM dex.workflow_task WHERE run_id = ANY(%s::uuid[]) "
                           "AND locked_by IS NULL", (v1_runs,)))

    # the deploy: a version-2 worker starts, the version-1 worker stops
    new = start_worker(workflows=[flow_v2], activities=[step], worker_id=f"v2-{tag}")
    old.shutdown()
    v2_runs = client.start_many(flow_v2, [1, 2, 3], queue=wf, version=2)
    assert [client.result(r, timeout=30) for r in v2_runs] == [200, 300, 400]

    # the version-1 runs' timers fire: their tasks wait, unserved, and none fails
    def unserved_v1():
        rows = sql("SELECT tasks, last_polled FROM dex.unserved('1 s') "
                   "WHERE queue = %s AND name = 'dv-flow' AND version = 1", (wf,))
        return rows[0] if rows else None
    wait_until("the version-1 tasks shown unserved", lambda: (unserved_v1() or (0,))[0] == 100)
    assert unserved_v1()[1] is not None          # a version-1 worker polled, before it stopped
    assert statuses(v1_runs) == {"RUNNING": 100}
    assert not any(new.worker_id in workers_of(client, r) for r in v1_runs[:10])

    # a worker with version 1 comes back: every run completes, on version-1 workers only
    back = start_worker(workflows=[flow_v1], activities=[step], worker_id=f"v1b-{tag}")
    assert [client.result(r, timeout=60) for r in v1_runs] == [n + 1 for n in range(100)]
    assert statuses(v1_runs) == {"COMPLETED": 100}
    for r in v1_runs:
        assert workers_of(client, r) <= {old.worker_id, back.worker_id}, r
    for r in v2_runs:
        assert workers_of(client, r) == {new.worker_id}
    assert not sql("SELECT 1 FROM dex.unserved('0 s') WHERE queue = %s", (wf,))


def test_an_activity_no_worker_has_waits(client, queues, start_worker):
    if not declares_versions():
        pytest.skip("the installed dex has no version-aware dispatch")
    wf, act = queues
    start_worker(workflows=[needs_missing], activities=[step])
    run_id = client.start(needs_missing, 5, queue=wf)

    def unserved_missing():
        return sql("SELECT kind, version, tasks FROM dex.unserved('1 s') "
                   "WHERE queue = %s AND name = 'dv-missing'", (act,))
    wait_until("the activity shown unserved", lambda: unserved_missing() == [("activity", None, 1)])
    assert client.get(run_id).status == "RUNNING"         # not failed as an unknown activity
    start_worker(workflow_queues=[], activities=[missing])
    assert client.result(run_id, timeout=30) == -5
