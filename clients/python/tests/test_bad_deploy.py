"""A bad deploy fails workflow tasks, not runs: 50 running runs meet code that does not
replay their histories, their workflow tasks fail and are retried, no run fails, and the
fixed deploy completes every one; runs parked BLOCKED by it complete once resumed."""

import dataclasses
import uuid

import dex
from dbtools import sql, wait_until
from dex.registry import workflow_definition

RUNS = 50


@dex.activity("bd-step")
def bd_step(n):
    return n * 2


@dex.workflow("bd-good")
async def good(ctx, n):
    a = await ctx.activity(bd_step, n)
    await ctx.wait_event("go")
    return a + 1


@dex.workflow("bd-bad")
async def bad(ctx, n):                  # the same workflow, edited: a timer first
    await ctx.sleep(0.01)
    a = await ctx.activity(bd_step, n)
    await ctx.wait_event("go")
    return a + 1


class _Deploy:
    """The code of ``fn`` deployed as workflow "bd-flow" version 1."""

    def __init__(self, fn):
        self.__dex_workflow__ = dataclasses.replace(workflow_definition(fn), name="bd-flow",
                                                    version=1)


def deploy(start_worker, current, fn, **kw):
    """Stop the current worker (if any), start one with ``fn``'s code."""
    if current is not None:
        current.shutdown()
    return start_worker(workflows=[_Deploy(fn)], activities=[bd_step],
                        worker_id=f"{fn.__name__}-{uuid.uuid4().hex[:6]}", **kw)


def count(query, runs):
    return sql(query, (list(runs),))[0][0]


def waiting_for_event(runs):
    return count("SELECT count(*) FROM dex.workflow_run r WHERE r.id = ANY (%s::uuid[]) "
                 "AND r.status = 'RUNNING' "
                 "AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id) "
                 "AND NOT EXISTS (SELECT 1 FROM dex.activity_task a WHERE a.run_id = r.id)", runs)


def with_failed_task(runs):
    """How many of the runs had a workflow task fail for non-determinism."""
    return count("SELECT count(DISTINCT r) FROM unnest(%s::uuid[]) AS r, "
                 "LATERAL dex.run_attempts(r) a WHERE a.task = 'workflow' AND a.outcome = 'FAILED' "
                 "AND a.failure->>'type' = 'dex.NonDeterminism'", runs)


def with_status(runs, status):
    return count(f"SELECT count(*) FROM dex.workflow_run WHERE id = ANY (%s::uuid[]) "
                 f"AND status = '{status}'", runs)


def start_runs(client, queue, numbers):
    runs = [client.start("bd-flow", n, queue=queue) for n in numbers]
    wait_until("the runs waiting for their event", lambda: waiting_for_event(runs) == len(runs))
    return runs


def test_a_bad_deploy_fails_workflow_tasks_and_the_fix_completes_every_run(
        client, queues, start_worker):
    w = deploy(start_worker, None, good, concurrency=16)
    runs = start_runs(client, queues[0], range(RUNS))

    w = deploy(start_worker, w, bad, concurrency=16)
    for run_id in runs:
        client.send_event(run_id, "go")
    wait_until("every run's workflow task failing", lambda: with_failed_task(runs) == RUNS, 60)
    assert with_status(runs, "FAILED") == 0
    assert with_status(runs, "RUNNING") == RUNS
    (message,) = sql("SELECT a.failure->>'message' FROM dex.run_attempts(%s) a "
                     "WHERE a.outcome = 'FAILED' LIMIT 1", (runs[0],))[0]
    assert "activityTaskCreated 'bd-step' (id 1)" in message, message     # what the history has
    assert "startTimer 'sleep' (id 1)" in message, message                # what the code issued

    deploy(start_worker, w, good, concurrency=16)        # the fix (or the rollback)
    results = [client.result(run_id, timeout=120) for run_id in runs]
    assert results == [n * 2 + 1 for n in range(RUNS)]


def test_runs_blocked_by_a_bad_deploy_complete_once_resumed(client, queues, start_worker):
    w = deploy(start_worker, None, good)
    runs = start_runs(client, queues[0], range(5))

    # a worker whose sessions park a run after two failed tasks in a row
    w = deploy(start_worker, w, bad,
               conninfo="options='-c dex.max_workflow_task_failures=2'")
    for run_id in runs:
        client.send_event(run_id, "go")
    wait_until("the runs BLOCKED", lambda: with_status(runs, "BLOCKED") == len(runs), 60)
    assert with_status(runs, "FAILED") == 0

    w = deploy(start_worker, w, good)
    assert with_status(runs, "BLOCKED") == len(runs)     # parked until an operator says so
    for run_id in runs:
        client.resume(run_id, "fixed in the next deploy")
    assert [client.result(run_id, timeout=60) for run_id in runs] == [n * 2 + 1 for n in range(5)]
    resumed = [e["runResumed"] for e in client.history(runs[0]) if "runResumed" in e]
    assert resumed and resumed[0]["reason"] == "fixed in the next deploy"
