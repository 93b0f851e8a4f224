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


def test_a_worker_polls_no_queue_it_has_nothing_to_run_for(client, queues, start_worker, caplog):
    """A worker given a queue of a kind it has nothing registered for declared nothing and took
    every task of it, failing other workers' runs (dex.UnknownWorkflow) and activities
    (dex.UnknownActivity).  It does not poll such a queue, and says so."""
    if not declares_versions():
        pytest.skip("the installed dex has no version-aware dispatch")
    wf, act = queues
    tag = uuid.uuid4().hex[:6]
    no_workflows = start_worker(workflows=[], activities=[missing], worker_id=f"nowf-{tag}")
    no_activities = start_worker(workflows=[needs_missing], activities=[],
                                 worker_id=f"noact-{tag}")
    assert [r.getMessage() for r in caplog.records if "it does not poll" in r.getMessage()] == [
        f"worker nowf-{tag} has no workflows: it does not poll its workflow queues ['{wf}']",
        f"worker noact-{tag} has no activities: it does not poll its activity queues ['{act}']"]
    run_id = client.start(flow_v2, 1, queue=wf, version=2)     # a workflow neither has
    served = client.start(needs_missing, 5, queue=wf)          # the activity of the other's
    assert client.result(served, timeout=30) == -5
    assert workers_of(client, served) == {no_activities.worker_id}
    wait_until("the workflow nobody has shown unserved", lambda: sql(
        "SELECT 1 FROM dex.unserved('0 s') WHERE queue = %s AND name = 'dv-flow'", (wf,)))
    assert client.get(run_id).status == "CREATED"
    assert no_workflows.stats["workflow_tasks"] == 0
    assert no_activities.stats["activities_failed"] == 0
    with pytest.raises(dex.DexError, match="has nothing to run: no workflows for its workflow "
                       r"queues \['q'\] and no activities for its activity queues \[\]"):
        dex.Worker("", ["q"], workflows=[], worker_id="idle").start()


class _Generated:
    """A workflow of the test's own, not in the global registry."""

    def __init__(self, name):
        async def fn(ctx, arg):
            return name
        self.__dex_workflow__ = dex.registry.WorkflowDefinition(name, 1, fn, None, True)


def test_a_worker_with_more_workflows_than_a_poll_declares_polls_only_them(
        client, queues, start_worker):
    """1,200 workflows, more than one poll declares (1,000): the worker declared none and took
    every task of its queue.  It polls with one poller per 1,000, each declaring its part."""
    if not declares_versions():
        pytest.skip("the installed dex has no version-aware dispatch")
    wf = queues[0]
    tag = uuid.uuid4().hex[:6]
    many = [_Generated(f"dv-many-{tag}-{i:04d}") for i in range(1200)]
    w = start_worker(workflows=many, activities=[step], activity_queues=[])
    assert sorted(t.name for t in w._threads) == [f"dex-wf-{wf}", f"dex-wf-{wf}-1"]
    first = client.start(f"dv-many-{tag}-0007", None, queue=wf)
    last = client.start(f"dv-many-{tag}-1199", None, queue=wf)
    other = client.start(flow_v1, 1, queue=wf)                 # not among them
    assert client.result(first, timeout=30) == f"dv-many-{tag}-0007"
    assert client.result(last, timeout=30) == f"dv-many-{tag}-1199"
    wait_until("the workflow it does not have shown unserved", lambda: sql(
        "SELECT 1 FROM dex.unserved('0 s') WHERE queue = %s AND name = 'dv-flow'", (wf,)))
    assert client.get(other).status == "CREATED"
