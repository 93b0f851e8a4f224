"""Patching (dex 1.6): changing a workflow's code under running runs without a new version.
``ctx.patched("id")`` records a marker where a run first takes the new path; runs that passed
that point under the old code replay the old path; ``ctx.deprecate_patch("id")`` replaces it
once the old path is gone; a patch the code does not match fails the workflow task (retried),
not the run."""

import dataclasses
import uuid

import pytest

import dex
from dbtools import first_failed_workflow_task, sql, wait_until
from dex.registry import workflow_definition


@dex.activity("pt-old")
def old_step(n):
    return f"old {n}"


@dex.activity("pt-new")
def new_step(n):
    return f"new {n}"


# Four deploys of one workflow's code (each registered under a name of its own here; the
# tests run them as "pt-flow" version 1, one deploy at a time).
@dex.workflow("pt-before")
async def before(ctx, n):
    a = await ctx.activity(old_step, n)
    await ctx.wait_event("go")
    return a


@dex.workflow("pt-patched")
async def patched(ctx, n):
    if ctx.patched("use-new-step"):
        a = await ctx.activity(new_step, n)
    else:
        a = await ctx.activity(old_step, n)
    assert ctx.patched("use-new-step") == (a.startswith("new"))     # the answer is kept
    await ctx.wait_event("go")
    return a


@dex.workflow("pt-deprecated")
async def deprecated(ctx, n):
    ctx.deprecate_patch("use-new-step")
    a = await ctx.activity(new_step, n)
    await ctx.wait_event("go")
    return a


@dex.workflow("pt-misplaced")
async def misplaced(ctx, n):
    a = await ctx.activity(new_step, n)         # the patch check was moved below
    if ctx.patched("use-new-step"):
        a = a.upper()
    await ctx.wait_event("go")
    return a


class _Deploy:
    """The code of ``fn`` deployed as workflow "pt-flow" version 1."""

    def __init__(self, fn):
        self.__dex_workflow__ = dataclasses.replace(workflow_definition(fn), name="pt-flow",
                                                    version=1)


def waiting_for_event(run_id):
    """The run waits for its event: its activity is done and it has no workflow task."""
    return bool(sql("SELECT 1 FROM dex.workflow_run r WHERE r.id = %s AND r.status = 'RUNNING' "
                    "AND NOT EXISTS (SELECT 1 FROM dex.workflow_task t WHERE t.run_id = r.id) "
                    "AND NOT EXISTS (SELECT 1 FROM dex.activity_task a WHERE a.run_id = r.id)",
                    (run_id,)))


def markers(client, run_id):
    return [e["markerRecorded"]["name"] for e in client.history(run_id) if "markerRecorded" in e]


def deploy(start_worker, current, fn):
    """Stop the current worker (if any), start one with ``fn``'s code."""
    if current is not None:
        current.shutdown()
    return start_worker(workflows=[_Deploy(fn)], activities=[old_step, new_step],
                        worker_id=f"{fn.__name__}-{uuid.uuid4().hex[:6]}")


def start(client, queue, n):
    run_id = client.start("pt-flow", n, queue=queue)
    wait_until(f"run {n} waiting for its event", lambda: waiting_for_event(run_id))
    return run_id


def test_old_runs_replay_the_old_path_new_runs_take_the_new(client, queues, start_worker):
    wf = queues[0]
    w = deploy(start_worker, None, before)
    old = start(client, wf, 1)                          # took the old path under the old code

    w = deploy(start_worker, w, patched)
    new = start(client, wf, 2)                          # takes the new path, recording it
    assert markers(client, new) == ["dex.patch:use-new-step"]
    client.send_event(old, "go")                        # replayed by the patched code
    assert client.result(old, timeout=30) == "old 1"
    assert markers(client, old) == []

    w = deploy(start_worker, w, deprecated)             # the old path is gone from the code
    client.send_event(new, "go")                        # replays the marker it recorded
    assert client.result(new, timeout=30) == "new 2"
    newer = start(client, wf, 3)
    client.send_event(newer, "go")
    assert client.result(newer, timeout=30) == "new 3"
    assert markers(client, newer) == []                 # nothing recorded any more
    assert {r: client.get(r).status for r in (old, new, newer)} == \
        {old: "COMPLETED", new: "COMPLETED", newer: "COMPLETED"}


def test_a_misplaced_patch_fails_the_task_not_the_run(client, queues, start_worker):
    wf = queues[0]
    w = deploy(start_worker, None, patched)
    run_id = start(client, wf, 4)                       # recorded the marker first

    w = deploy(start_worker, w, misplaced)              # the check moved: history does not match
    client.send_event(run_id, "go")

    message, kind = first_failed_workflow_task(run_id)
    assert kind == "dex.NonDeterminism"
    assert "use-new-step" in message, message
    assert client.get(run_id).status == "RUNNING"        # the run goes on

    deploy(start_worker, w, patched)                    # the code that matches comes back
    assert client.result(run_id, timeout=60) == "new 4"


def test_a_patch_that_is_not_a_string_is_refused():
    with pytest.raises(ValueError, match="change id"):
        dex._runtime._patch_name("")
