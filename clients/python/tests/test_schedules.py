"""Schedules through the client (dex 1.7): create, list, next times, alter, pause, unpause,
trigger, backfill, delete; bad input raises the error of its SQLSTATE and changes nothing; a
schedule every second is fired by the server's scheduler with no client polling, and its run
is found by its labels.  A real dex."""

import datetime as dt
import time
import uuid

import pytest

import dex
from dbtools import require_dex

UTC = dt.timezone.utc


@pytest.fixture
def client17(client):
    """The client, on a database whose dex has schedules (1.7) or later."""
    return require_dex(client, (1, 7), "schedules")


@pytest.fixture
def name(client17):
    """A schedule name of this test, deleted at the end (with its runs terminated)."""
    n = f"sched-{uuid.uuid4().hex[:8]}"
    yield n
    try:
        s = client17.get_schedule(n)
        client17.delete_schedule(n)
        if s.last_run_id and s.last_run_status not in dex.client.TERMINAL:
            client17.terminate(s.last_run_id)
    except dex.NotFound:
        pass
    client17.conn.execute(
        "SELECT count(dex.terminate_run(id)) FROM dex.workflow_run WHERE labels->>'dex.schedule' = %s"
        " AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TERMINATED', 'TIMED_OUT')", (n,))


def test_create_list_next_times(client17, queues, name):
    start = dt.datetime(2030, 3, 30, tzinfo=UTC)
    first = client17.create_schedule(name, "nightly", queue=queues[0], cron="30 2 * * *",
                                     timezone="Europe/Berlin", start_at=start,
                                     argument={"n": 1}, labels={"team": "ops"})
    assert first == dt.datetime(2030, 3, 30, 1, 30, tzinfo=UTC)
    # 2030-03-31 02:30 does not exist in Berlin: no tick that day
    assert client17.schedule_next_times(name, 3) == [
        dt.datetime(2030, 3, 30, 1, 30, tzinfo=UTC),
        dt.datetime(2030, 4, 1, 0, 30, tzinfo=UTC),
        dt.datetime(2030, 4, 2, 0, 30, tzinfo=UTC)]
    s = client17.get_schedule(name)
    assert (s.workflow_name, s.queue, s.cron, s.every, s.timezone, s.overlap) == \
        ("nightly", queues[0], "30 2 * * *", None, "Europe/Berlin", "skip")
    assert s.argument == {"n": 1} and s.labels == {"team": "ops"}
    assert s.catchup_window == dt.timedelta(minutes=1) and s.jitter == dt.timedelta(0)
    assert (s.runs_started, s.skipped, s.paused, s.last_run_id) == (0, 0, False, None)
    assert [x.name for x in client17.list_schedules(name_like=name)] == [name]
    assert client17.list_schedules(name_like=name, paused=True) == []


def test_bad_input_changes_nothing(client17, queues, name):
    client17.create_schedule(name, "w", queue=queues[0], every=dt.timedelta(hours=1),
                             start_at=dt.datetime(2030, 1, 1, tzinfo=UTC))
    before = client17.get_schedule(name)
    with pytest.raises(dex.InvalidArgument) as e:
        client17.create_schedule(name + "-x", "w", queue=queues[0], cron="*/5 * 32 * *")
    assert e.value.sqlstate == "22023" and "Field 3 (day of month) at position 7" in e.value.detail
    with pytest.raises(dex.AlreadyExists):
        client17.create_schedule(name, "w", queue=queues[0], every=60)
    with pytest.raises(dex.NotFound):
        client17.create_schedule(name + "-x", "w", queue="no-such-queue", every=60)
    with pytest.raises(dex.WrongKind):
        client17.create_schedule(name + "-x", "w", queue=queues[1], every=60)
    with pytest.raises(dex.InvalidArgument):
        client17.create_schedule(name + "-x", "w", queue=queues[0], every=60, cron="@daily")
    with pytest.raises(dex.InvalidArgument):
        client17.alter_schedule(name, timezone="Mars/Olympus")
    with pytest.raises(ValueError):
        client17.alter_schedule(name, overlap="sometimes")
    with pytest.raises(dex.NotFound):
        client17.pause_schedule(name + "-x")
    with pytest.raises(dex.NotFound):
        client17.trigger_schedule(name + "-x")
    with pytest.raises(dex.InvalidArgument):
        client17.backfill_schedule(name, dt.datetime(2030, 1, 2, tzinfo=UTC),
                                   dt.datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(dex.InvalidArgument):
        client17.schedule_next_times(name, 0)
    assert client17.get_schedule(name) == before
    assert client17.list_schedules(name_like=name + "-x") == []


def test_alter_pause_trigger_backfill_delete(client17, queues, name):
    client17.create_schedule(name, "w", queue=queues[0], every="1h",
                             start_at=dt.datetime(2030, 1, 1, tzinfo=UTC))
    nxt = client17.alter_schedule(name, cron="0 12 * * *", timezone="America/New_York",
                                  jitter=dt.timedelta(minutes=5), overlap="allow_all")
    s = client17.get_schedule(name)
    assert (s.cron, s.every, s.overlap, s.jitter) == ("0 12 * * *", None, "allow_all",
                                                      dt.timedelta(minutes=5))
    assert s.next_tick <= nxt < s.next_tick + dt.timedelta(minutes=5)

    client17.pause_schedule(name, "maintenance")
    s = client17.get_schedule(name)
    assert (s.paused, s.note, s.next_fire_at) == (True, "maintenance", None)
    assert client17.unpause_schedule(name) > dt.datetime.now(UTC)
    assert client17.get_schedule(name).paused is False

    run_id = client17.trigger_schedule(name)
    run = client17.get(run_id)
    assert run.workflow_name == "w" and run.labels["dex.schedule"] == name
    ticks = client17.backfill_schedule(name, dt.datetime(2025, 1, 1, tzinfo=UTC),
                                       dt.datetime(2025, 1, 3, tzinfo=UTC))
    assert [t for t, _ in ticks] == [dt.datetime(2025, 1, 1, 17, tzinfo=UTC),
                                     dt.datetime(2025, 1, 2, 17, tzinfo=UTC)]
    assert all(r is not None for _, r in ticks)
    # skip: a run of the schedule is active, so the tick starts nothing
    assert client17.trigger_schedule(name, overlap="skip") is None
    s = client17.get_schedule(name)
    assert (s.runs_started, s.skipped_overlap, s.last_run_id) == (3, 1, ticks[-1][1])
    assert s.last_run_status == "CREATED"

    client17.delete_schedule(name)
    with pytest.raises(dex.NotFound):
        client17.get_schedule(name)
    assert client17.get(run_id).status == "CREATED"     # its runs go on
    client17.conn.execute(
        "SELECT count(dex.terminate_run(id)) FROM dex.workflow_run WHERE labels->>'dex.schedule' = %s",
        (name,))


def test_fired_by_the_server(client17, queues, name):
    """Every second, by the scheduler worker: the runs appear with no client polling."""
    client17.create_schedule(name, "tick", queue=queues[0], every=1, overlap="allow_all")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        s = client17.get_schedule(name)
        if s.runs_started >= 2:
            break
        time.sleep(0.1)
    client17.pause_schedule(name)
    s = client17.get_schedule(name)
    assert s.runs_started >= 2 and s.last_run_status == "CREATED"
    runs = client17.list(labels={"dex.schedule": name})
    assert len(runs) == s.runs_started
    lateness = [r.created_at - dt.datetime.fromisoformat(r.labels["dex.tick"].replace("Z", "+00:00"))
                for r in runs]
    assert all(dt.timedelta(0) <= x < dt.timedelta(seconds=1) for x in lateness)
