"""Fewer transactions per workflow (dex 1.5's completions in CALL dex.poll_tasks_wait(_pb)): an
activity that succeeds while the poller of its queue waits for a free slot (concurrency=1: every
slot busy) is completed by that poller's next CALL, not by the reporter; a full batch of workflow
tasks is completed by the CALL that takes the next ones, not by dex.complete_tasks.  Failures go
through the reporter as before; a carried completion whose lease was lost is settled once."""

import logging
import threading
import time

import psycopg
import pytest

import dex
from dbtools import require_dex, wait_until


@dex.activity("carry-square")
def square(x):
    time.sleep(0.1)         # the poller is back waiting for the slot before it ends
    return {"square": x * x}


@dex.workflow("carry-flow")
async def flow(ctx, n):
    return await ctx.activity(square, n)


@dex.activity("carry-broken", retry=dex.RetryPolicy(max_attempts=1))
def broken(x):
    time.sleep(0.1)
    raise RuntimeError(f"broken {x}")


@dex.activity("carry-huge")
def huge(x):
    time.sleep(0.1)
    return "x" * (1100 * 1024)          # past dex.max_payload_size (1 MB)


@dex.workflow("carry-recovers")
async def recovers(ctx, arg):
    """The activity named arg["first"] fails for good; then square."""
    try:
        await ctx.activity(arg["first"], arg["n"])
    except dex.ActivityError as e:
        return {"caught": e.failure.get("type"), "message": e.failure.get("message"),
                "then": await ctx.activity(square, arg["n"])}
    return "not reached"


started, go = threading.Event(), threading.Event()


@dex.activity("carry-held")
def held(x):
    started.set()
    go.wait(20)
    return x


@dex.workflow("carry-held-flow")
async def held_flow(ctx, n):
    return await ctx.activity(held, n)


@pytest.fixture
def client15(client):
    return require_dex(client, (1, 5), "completions in CALL dex.poll_tasks_wait")


N = 20


def hold_an_activity(client, queues, start_worker, poll_timeout):
    """A worker with concurrency=1 whose one activity (held) runs until ``go`` is set, and whose
    poller waits for the slot meanwhile (a result then is handed to it); the worker and run."""
    started.clear()
    go.clear()
    w = start_worker(concurrency=1, poll_timeout=poll_timeout, workflows=[held_flow],
                     activities=[held])
    run_id = client.start(held_flow, 7, queue=queues[0])
    wait_until("the activity running", started.is_set)

    def poller_waits_for_the_slot():
        with w._lock:
            return queues[1] in w._carry
    wait_until("the poller waiting for the slot", poller_waits_for_the_slot)
    return w, run_id


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_completions_ride_the_next_call_when_no_slot_is_free(client15, queues, start_worker,
                                                             wire):
    w = start_worker(wire=wire, concurrency=1, max_batch=1, poll_timeout=30,
                     workflows=[flow], activities=[square])
    runs = [client15.start(flow, i, queue=queues[0]) for i in range(N)]
    for i, run_id in enumerate(runs):
        assert client15.result(run_id, timeout=60) == {"square": i * i}
    w.shutdown()        # ends the last calls, whose answers settle what they carried
    s = w.stats
    assert s["activities_completed"] == N and s["activities_failed"] == 0
    assert s["leases_lost"] == 0 and s["workflow_tasks"] == 2 * N
    # nearly every activity ended while the poller waited for the one slot: its next CALL
    # completed it, and the reporter had (almost) nothing to send
    assert s["activity_completions_in_poll"] >= N - N // 4, s
    assert s["reporter_calls"] <= N // 4, s
    # each batch of one workflow task was full: completed by the CALL that took the next one
    assert s["workflow_complete_calls"] == 0, s


@pytest.mark.parametrize("first, caught, reporter_calls", [
    ("carry-broken", "RuntimeError", 1),       # dex.fail_tasks
    # the CALL that carried it was refused (54000) and changed nothing: the reporter's batch
    # (refused), the result alone (refused), its failure for good; the poller goes on
    ("carry-huge", "dex.ResultRefused", 3)])
def test_failures_go_through_the_reporter(client15, queues, start_worker, first, caught,
                                          reporter_calls):
    w = start_worker(concurrency=1, poll_timeout=30, workflows=[recovers],
                     activities=[broken, huge, square])
    run_id = client15.start(recovers, {"first": first, "n": 3}, queue=queues[0])
    out = client15.result(run_id, timeout=30)
    assert out["caught"] == caught and out["then"] == {"square": 9}, out
    w.shutdown()
    s = w.stats
    # the failure by the reporter, square's result in the poller's CALL
    assert s["reporter_calls"] == reporter_calls and s["activity_completions_in_poll"] == 1, s
    assert s["leases_lost"] == 0 and w._inflight == {}


def test_a_carried_completion_whose_lease_was_lost_is_settled_once(client15, queues,
                                                                   start_worker, caplog):
    w, run_id = hold_an_activity(client15, queues, start_worker, poll_timeout=2)
    client15.terminate(run_id, "ended while its activity ran")
    go.set()
    wait_until("the carried completion sent", lambda: w.stats["activity_completions_in_poll"])
    w.shutdown()
    s = w.stats
    assert s["activity_completions_in_poll"] == 1 and s["leases_lost"] == 1, s
    assert s["activities_completed"] == 0 and s["reporter_calls"] == 0, s
    assert w._inflight == {}
    said = [r.getMessage() for r in caplog.records if r.name == "dex.worker"]
    assert sum("lease lost, outcome discarded" in m for m in said) == 1, said


def test_a_carried_completion_is_sent_again_quietly_after_a_lost_connection(
        client15, queues, start_worker, caplog):
    caplog.set_level(logging.WARNING, "dex.worker")
    w = start_worker(concurrency=1, poll_timeout=1, workflows=[flow], activities=[square])
    real = w._wire.complete_and_poll_wait
    failed = []

    def applied_then_lost(*args, **kw):
        out = real(*args, **kw)
        if not kw.get("workflow", True) and not failed:
            failed.append(1)            # the completion was made; its answer is lost
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return out

    w._wire.complete_and_poll_wait = applied_then_lost
    run_id = client15.start(flow, 4, queue=queues[0])
    assert client15.result(run_id, timeout=30) == {"square": 16}
    wait_until("the completion sent again", lambda: w.stats["reporter_calls"] == 1)
    w.shutdown()
    assert failed and w.stats["leases_lost"] == 0 and w.stats["activity_completions_in_poll"] == 0
    assert w._inflight == {}
    said = [r.getMessage() for r in caplog.records if r.name == "dex.worker"]
    assert not any("lease lost" in m for m in said), said


def test_what_the_poller_holds_when_the_worker_stops_goes_to_the_reporter(
        client15, queues, start_worker):
    w, run_id = hold_an_activity(client15, queues, start_worker, poll_timeout=30)
    (r,) = w._inflight.values()
    w._stopping.set()       # as shutdown does, before the poller was woken: it holds r then
    go.set()
    wait_until("the result sent", lambda: w.stats["activities_completed"] == 1)
    assert r.handed and w.stats["reporter_calls"] == 1
    assert w.stats["activity_completions_in_poll"] == 0 and w.stats["leases_lost"] == 0
    w.shutdown()
    assert "activityTaskCompleted" in [dex._convert.event_kind(e) for e in client15.history(run_id)]
