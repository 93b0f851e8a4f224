"""ctx.publish (dex 1.10): an event of the workflow's own, recorded once in the history as
eventPublished whatever the replays, with its payload; the queue's publishing is the server's
(test/t/025_publish.pl reads the messages with a real consumer)."""

import collections
import json

import psycopg

import dex
from conftest import event_kinds

ran = collections.Counter()


@dex.activity("pub-step")
def step(n):
    ran["step"] += 1
    return n + 1


@dex.workflow("pub-order")
async def order(ctx, n):
    ctx.publish("order.received", {"n": n})
    m = await ctx.activity(step, n)             # replays: the publish above is not sent again
    ctx.publish("order.stepped", b"\x00\x01")   # bytes are a payload too
    m = await ctx.activity(step, m)
    ctx.publish("order.done")                   # no payload
    return m


def test_publish_records_each_event_once(client, queues, start_worker):
    ran.clear()
    start_worker()
    run_id = client.start(order, 1, queue=queues[0])
    assert client.result(run_id, timeout=20) == 3
    history = client.history(run_id)
    published = [e["eventPublished"] for e in history if "eventPublished" in e]
    assert [p["name"] for p in published] == ["order.received", "order.stepped", "order.done"]
    assert json.loads(published[0]["payload"]["json"]) == {"n": 1}
    assert published[1]["payload"] == {"binary": "AAE="}
    assert "payload" not in published[2]
    # three workflow tasks, each replaying what came before, and each event once
    assert event_kinds(history).count("workflowTaskCompleted") == 3
    assert ran["step"] == 2


def test_publish_on_a_publishing_queue(conninfo, client, queues, start_worker):
    """Publishing on: the run goes as before (this cluster's wal_level sends nothing)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SET client_min_messages = error")
        conn.execute("SELECT dex.alter_queue(%s, publish => true)", (queues[0],))
    start_worker()
    run_id = client.start(order, 10, queue=queues[0])
    assert client.result(run_id, timeout=20) == 12
    assert event_kinds(client.history(run_id)).count("eventPublished") == 3
