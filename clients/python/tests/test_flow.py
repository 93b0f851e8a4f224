"""Flow control of dex 1.7 through the client: a workflow signalling another run
(ctx.signal), debounced starts (Client.start's debounce_key), the batch forms
(Client.start_many's per-run options, Client.send_events).  A worker in this process, a real
dex."""

import datetime as dt
import threading
import time
import uuid

import pytest

import dex
from dbtools import require_dex, wait_until
from conftest import event_kinds


@pytest.fixture(scope="module")
def queues(conninfo):
    """A workflow and an activity queue for the whole module (see test_lifecycle.py)."""
    tag = uuid.uuid4().hex[:8]
    wf, act = f"wf-fl-{tag}", f"act-fl-{tag}"
    with dex.Client(conninfo) as c:
        c.create_queue(wf, "workflow")
        c.create_queue(act, "activity")
    return wf, act


@pytest.fixture
def client17(client):
    """The client, on a database whose dex has flow control (1.7) or later."""
    return require_dex(client, (1, 7), "flow control")


@dex.workflow("fl-waiter")
async def waiter(ctx, arg=None):
    return await ctx.wait_event("go")


@dex.workflow("fl-signaller")
async def signaller(ctx, arg):
    """Signals the run arg["to"] (or the instance arg["instance"]); returns the outcome."""
    if "to" in arg:
        sig = ctx.signal("go", {"from": ctx.run_id}, run_id=arg["to"])
    else:
        sig = ctx.signal("go", {"from": ctx.run_id}, instance_id=arg["instance"])
    outcome = await sig
    return {"outcome": outcome, "target": sig.run_id}


@dex.workflow("fl-fire-and-forget")
async def fire_and_forget(ctx, arg):
    ctx.signal("go", "no wait", run_id=arg)
    return "sent"


@dex.workflow("fl-echo")
async def echo(ctx, arg=None):
    return arg


# -- signalling another run ---------------------------------------------------------

def test_a_workflow_signals_another_that_waits(client17, queues, start_worker):
    client = client17
    start_worker()
    target = client.start(waiter, queue=queues[0])
    wait_until("the target waits",
               lambda: "externalEventWaitStarted" in event_kinds(client.history(target)), timeout=10)
    sender = client.start(signaller, {"to": target}, queue=queues[0])
    assert client.result(sender, timeout=15) == {"outcome": "DELIVERED", "target": target}
    assert client.result(target, timeout=15) == {"from": sender}
    history = client.history(sender)
    signalled = [e["externalRunSignalled"] for e in history if "externalRunSignalled" in e]
    assert signalled == [{"runId": target, "eventId": "go", "outcome": "SIGNAL_OUTCOME_DELIVERED"}]
    assert "externalRunSignalResult" in event_kinds(history)


def test_signal_by_instance_id_and_to_runs_that_ended_or_do_not_exist(client17, queues,
                                                                      start_worker):
    client = client17
    start_worker()
    instance = f"fl-{uuid.uuid4().hex[:8]}"
    target = client.start(waiter, queue=queues[0], instance_id=instance)
    sender = client.start(signaller, {"instance": instance}, queue=queues[0])
    assert client.result(sender, timeout=15) == {"outcome": "DELIVERED", "target": target}
    assert client.result(target, timeout=15)["from"] == sender

    # the target has ended now; and a run that never was
    again = client.start(signaller, {"to": target}, queue=queues[0])
    assert client.result(again, timeout=15) == {"outcome": "TARGET_ENDED", "target": target}
    nobody = client.start(signaller, {"to": "01234567-89ab-7def-8123-456789abcdef"},
                          queue=queues[0])
    assert client.result(nobody, timeout=15) == {"outcome": "TARGET_NOT_FOUND", "target": None}
    gone = client.start(signaller, {"instance": "fl-no-such-instance"}, queue=queues[0])
    assert client.result(gone, timeout=15)["outcome"] == "TARGET_NOT_FOUND"


def test_a_signal_not_awaited_is_sent_and_recorded(client17, queues, start_worker):
    client = client17
    start_worker()
    target = client.start(waiter, queue=queues[0])
    sender = client.start(fire_and_forget, target, queue=queues[0])
    assert client.result(sender, timeout=15) == "sent"
    assert client.result(target, timeout=15) == "no wait"
    kinds = event_kinds(client.history(sender))
    assert "externalRunSignalled" in kinds


def test_signal_replays_deterministically(client17, queues, start_worker):
    """A worker without a cache replays the sender's whole history at each task: the signal
    is matched, not sent again, and its outcome is the recorded one."""
    client = client17
    start_worker(workflow_cache_size=0)
    target = client.start(waiter, queue=queues[0])
    sender = client.start(signaller, {"to": target}, queue=queues[0])
    assert client.result(sender, timeout=15)["outcome"] == "DELIVERED"
    history = client.history(sender)
    assert event_kinds(history).count("externalRunSignalled") == 1
    # replaying the recorded history gives the same commands (none new) and no non-determinism
    assert client.result(target, timeout=15) == {"from": sender}


def test_signal_needs_exactly_one_target(client17, queues):
    ctx_errors = []

    @dex.workflow("fl-bad-signal")
    async def bad(ctx, arg=None):
        try:
            ctx.signal("go", run_id="x", instance_id="y")
        except ValueError as e:
            ctx_errors.append(str(e))
        return None

    commands = dex.replay({"runId": "r", "workflowName": "fl-bad-signal", "workflowVersion": 1,
                           "history": [],
                           "newEvents": [{"workflowTaskStarted": {}}, {"runCreated": {}},
                                         {"runStarted": {}}]},
                          bad.__dex_workflow__)
    assert ctx_errors and "exactly one" in ctx_errors[0]
    assert "completeRun" in commands[-1]


# -- debounce ---------------------------------------------------------------------

def test_debounced_starts_make_one_run_with_the_last_argument(client17, queues, start_worker):
    client = client17
    key = f"k-{uuid.uuid4().hex[:8]}"
    ids = [client.start(echo, n, queue=queues[0], debounce_key=key, debounce=1.0,
                        debounce_max=10) for n in range(5)]
    assert len(set(ids)) == 1
    assert client.get(ids[0]).status == "DELAYED"
    start_worker()
    assert client.result(ids[0], timeout=15) == 4
    # the window is over: the next start makes a new run
    later = client.start(echo, "again", queue=queues[0], debounce_key=key, debounce=0.2)
    assert later != ids[0]
    assert client.result(later, timeout=15) == "again"


def test_debounce_max_bounds_the_delay(client17, queues, start_worker):
    client = client17
    start_worker()
    key = f"k-{uuid.uuid4().hex[:8]}"
    first = client.start(echo, 0, queue=queues[0], debounce_key=key, debounce=0.6,
                         debounce_max=1.5)
    t0 = time.monotonic()
    runs = {first}
    n = 0
    # keep calling every 0.2 s: without debounce_max the run would never start
    while client.get(first).status == "DELAYED" and time.monotonic() - t0 < 10:
        n += 1
        runs.add(client.start(echo, n, queue=queues[0], debounce_key=key, debounce=0.6,
                              debounce_max=1.5))
        time.sleep(0.2)
    assert client.get(first).status != "DELAYED"
    assert time.monotonic() - t0 < 5
    assert client.result(first, timeout=15) >= 1


def test_debounce_bad_arguments(client17, queues):
    client = client17
    with pytest.raises(dex.InvalidArgument):
        client.start(echo, 1, queue=queues[0], debounce_key="k", debounce=0)
    with pytest.raises(dex.InvalidArgument):
        client.start(echo, 1, queue=queues[0], debounce_key="k", debounce=5, debounce_max=1)


def test_concurrent_debounced_starts_make_one_run(client17, queues, conninfo):
    key = f"k-{uuid.uuid4().hex[:8]}"
    got = []

    def call(n):
        with dex.Client(conninfo) as c:
            got.append(c.start(echo, n, queue=queues[0], debounce_key=key, debounce=30))

    threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len(set(got)) == 1
    assert client17.get(got[0]).status == "DELAYED"
    client17.terminate(got[0])


# -- batch forms ------------------------------------------------------------------

def test_start_many_per_run_options(client17, queues, start_worker):
    client = client17
    tag = uuid.uuid4().hex[:8]
    existing = client.start(waiter, queue=queues[0], instance_id=f"i1-{tag}")
    rows = client.start_many_rows(
        echo, [1, 2, 3, 4], queue=queues[0],
        instance_ids=[f"i1-{tag}", f"i2-{tag}", None, f"i2-{tag}"],
        priorities=[None, 9, 3, None],
        run_labels=[None, {"tenant": "a"}, None, None],
        concurrency_keys=[None, None, f"ck-{tag}", None])
    assert rows[0] == (existing, False)
    assert rows[1][1] is True and rows[2][1] is True
    assert rows[3] == (rows[1][0], False)      # the batch's own instance id
    second = client.get(rows[1][0])
    assert second.priority == 9 and second.labels == {"tenant": "a"}
    assert second.instance_id == f"i2-{tag}"
    assert client.get(rows[2][0]).priority == 3
    start_worker()
    assert client.result(rows[1][0], timeout=15) == 2
    assert client.result(rows[2][0], timeout=15) == 3
    client.send_event(existing, "go", "done")
    assert client.result(existing, timeout=15) == "done"
    # start times per run: a naive datetime is local time, None is now
    later = dt.datetime.now() + dt.timedelta(hours=1)
    ids = client.start_many(echo, ["a", "b"], queue=queues[0], start_times=[later, None])
    assert [client.get(i).status for i in ids][0] == "DELAYED"
    assert client.result(ids[1], timeout=15) == "b"
    client.terminate(ids[0])


def test_send_events_outcome_per_event(client17, queues, start_worker):
    client = client17
    a = client.start(waiter, queue=queues[0])
    b = client.start(waiter, queue=queues[0])
    ended = client.start(echo, 1, queue=queues[0])
    start_worker()
    client.result(ended, timeout=15)
    outcomes = client.send_events([(a, "go", "A"), (b, "go", "B"), (a, "go", "again"),
                                   (ended, "go", None),
                                   ("01234567-89ab-7def-8123-456789abcdef", "go", None)])
    assert outcomes == ["DELIVERED", "DELIVERED", "DUPLICATE", "TARGET_ENDED", "TARGET_NOT_FOUND"]
    assert client.result(a, timeout=15) == "A"
    assert client.result(b, timeout=15) == "B"
    assert client.send_events([]) == []
