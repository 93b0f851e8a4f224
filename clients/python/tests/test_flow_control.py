"""Flow control of dex 1.7 through the client: a queue's rate limit and the concurrency limits
of its keys, set with Client.alter_queue and Client.set_concurrency_limit and read back with
Client.queue_limits.  A real dex, polled with dex.poll_tasks."""

import datetime as dt

import pytest

import dex
from dbtools import require_dex


@pytest.fixture
def client17(client):
    """The client, on a database whose dex has flow control (1.7) or later."""
    return require_dex(client, (1, 7), "flow control")


def leased(client, queue, n=100):
    (count,) = client.conn.execute(
        "SELECT count(*) FROM dex.poll_tasks(%s, 'pytest', %s)", (queue, n)).fetchone()
    client.conn.commit()
    return count


def test_rate_limit(client17, queues):
    wf, _ = queues
    c = client17
    for i in range(6):
        c.start("rated", i, queue=wf)
    c.alter_queue(wf, rate_limit=2, rate_period=dt.timedelta(hours=1))
    limits = c.queue_limits(wf)
    assert limits["rate_limit"] == 2 and limits["rate_period"] == dt.timedelta(hours=1)
    assert limits["tokens"] is None            # no poll made the bucket yet: it is full
    # at most 2 tasks an hour, however many the polls ask for
    assert leased(c, wf) == 2
    assert leased(c, wf) == 0
    limits = c.queue_limits(wf)
    assert limits["tasks_granted"] == 2 and limits["polls_throttled"] == 2
    assert limits["tokens"] < 1 and limits["next_token_at"] is not None
    # a faster period, given as seconds: tokens come back within the test
    c.alter_queue(wf, rate_limit=20, rate_period=1)
    assert c.queue_limits(wf)["rate_period"] == dt.timedelta(seconds=1)
    # removed: the rest is handed out at once
    c.alter_queue(wf, rate_limit=0)
    limits = c.queue_limits(wf)
    assert limits["rate_limit"] is None and limits["rate_period"] is None
    assert leased(c, wf) == 4


def test_rate_limit_bad_input(client17, queues):
    wf, act = queues
    c = client17
    c.alter_queue(act, rate_limit=5)
    for bad in (dict(rate_limit=-1), dict(rate_limit=5, rate_period=0),
                dict(rate_limit=5, rate_period=dt.timedelta(days=2)), dict(rate_limit=0, rate_period=1),
                dict(concurrency_limit=2)):      # an activity queue has no concurrency keys
        with pytest.raises(dex.InvalidArgument) as e:
            c.alter_queue(act, **bad)
        assert e.value.sqlstate == "22023", bad
        c.conn.rollback()
    limits = c.queue_limits(act)
    assert (limits["rate_limit"], limits["rate_period"]) == (5, dt.timedelta(seconds=1))
    with pytest.raises(dex.NotFound):
        c.alter_queue("no-such-queue", rate_limit=5)
    c.conn.rollback()
    with pytest.raises(dex.NotFound):
        c.queue_limits("no-such-queue")
    with pytest.raises(dex.InvalidArgument):
        c.set_concurrency_limit(wf, "k", 0)
    c.conn.rollback()


def admitted(client, runs):
    (count,) = client.conn.execute(
        "SELECT count(*) FROM dex.workflow_task WHERE run_id = ANY(%s::uuid[])", (runs,)).fetchone()
    return count


def test_concurrency_limit(client17, queues):
    wf, _ = queues
    c = client17
    c.set_concurrency_limit(wf, "tenant-1", 2)
    runs = [c.start("keyed", i, queue=wf, concurrency_key="tenant-1") for i in range(4)]
    c.conn.commit()
    assert admitted(c, runs) == 2                  # two at once, the others wait
    assert c.queue_limits(wf)["keys_with_limits"] == 1
    c.cancel(runs[0])
    assert admitted(c, runs[1:]) == 2              # one ended: exactly one more
    c.set_concurrency_limit(wf, "tenant-1", 3)
    assert admitted(c, runs[1:]) == 3              # raised: admitted at once
    c.set_concurrency_limit(wf, "tenant-1", None)  # back to the queue's limit (1)
    assert c.queue_limits(wf)["keys_with_limits"] == 0
    # the queue's limit counts for keys without their own
    c.alter_queue(wf, concurrency_limit=2)
    others = [c.start("keyed", i, queue=wf, concurrency_key="tenant-2") for i in range(3)]
    c.conn.commit()
    assert admitted(c, others) == 2
    assert c.queue_limits(wf)["concurrency_limit"] == 2
