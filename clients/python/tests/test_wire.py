"""A worker with each wire form (Worker(wire=...)): the same workflow gives the same result
and the same history, whatever goes over the connection."""

import pytest

import dex
from conftest import event_kinds


@dex.activity("wire-echo")
def echo(x):
    return x


@dex.activity("wire-bytes")
def octets(b):
    return list(b)


@dex.activity("wire-nothing")
def nothing():
    return None


@dex.activity("wire-flaky", retry=dex.RetryPolicy(initial_delay=0.05, randomization_factor=0,
                                                  max_attempts=3))
def flaky(x):
    info = dex.activity_context().info
    if info.attempt < 3:
        raise dex.ApplicationError(f"attempt {info.attempt} fails", type="Flaky",
                                   details={"attempt": info.attempt})
    return {"attempt": info.attempt, "last": info.last_failure["message"]}


@dex.activity("wire-broken")
def broken(x):
    raise dex.NonRetryableError("broken for good", type="Broken")


@dex.workflow("wire-flow")
async def flow(ctx, arg):
    text = await ctx.activity(echo, {"text": "Zoë ✓ \"quoted\" \\ back", "n": 2 ** 40})
    raw = await ctx.activity(octets, b"\x00\x01\xff")      # a binary payload
    none = await ctx.activity(nothing)
    retried = await ctx.activity(flaky, 1)
    try:
        await ctx.activity(broken, 1)
        failed = None
    except dex.ActivityError as e:
        failed = {"type": e.type, "attempts": e.attempts}
    event = await ctx.wait_event("go", timeout=30)
    await ctx.sleep(0.01)
    return {"text": text, "raw": raw, "none": none, "retried": retried, "failed": failed,
            "event": event, "arg": arg}


EXPECTED = {"text": {"text": "Zoë ✓ \"quoted\" \\ back", "n": 2 ** 40}, "raw": [0, 1, 255],
            "none": None, "retried": {"attempt": 3, "last": "attempt 2 fails"},
            "failed": {"type": "Broken", "attempts": 1}, "event": {"by": "ünï"},
            "arg": {"labels": ["a", "b"]}}


@pytest.mark.parametrize("wire", ["protobuf", "json"])
def test_a_worker_with_each_wire_form(client, queues, start_worker, wire):
    w = start_worker(wire=wire, workflows=[flow],
                     activities=[echo, octets, nothing, flaky, broken])
    assert w.wire == wire
    run_id = client.start(flow, {"labels": ["a", "b"]}, queue=queues[0])
    client.send_event(run_id, "go", {"by": "ünï"})
    assert client.result(run_id, timeout=30) == EXPECTED
    kinds = event_kinds(client.history(run_id))
    assert kinds.count("activityTaskCompleted") == 4 and kinds.count("activityTaskFailed") == 1
    failed = [e["activityTaskFailed"] for e in client.history(run_id) if "activityTaskFailed" in e]
    assert failed[0]["failure"]["message"] == "broken for good"
    assert failed[0]["failure"]["terminal"] is True
    assert w.stats["activities_failed"] == 3 and w.stats["activities_completed"] == 4


def test_the_default_wire_form_is_protobuf_and_unknown_ones_are_refused(conninfo):
    assert dex.Worker(conninfo, ["q"]).wire == "protobuf"
    with pytest.raises(ValueError):
        dex.Worker(conninfo, ["q"], wire="xml")
