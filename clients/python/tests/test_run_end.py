"""A run that its workflow ends leaves nothing pending behind (its timers, external events,
activities and their retries are withdrawn), and a run that ends with nothing pending is
counted as any other (its duration), whichever way the end looks for pending work."""

import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb


@pytest.fixture
def db(conninfo):                   # conninfo: the extension exists
    with psycopg.connect("", autocommit=True) as c:
        yield c


@pytest.fixture
def plain_queues(db):
    tag = uuid.uuid4().hex[:8]
    wf, act = f"re-wf-{tag}", f"re-act-{tag}"
    db.execute("SELECT dex.create_queue(%s, 'workflow'), dex.create_queue(%s, 'activity')", (wf, act))
    return wf, act


def poll(db, queue):
    rows = db.execute("SELECT run_id, task_id, lock_version, task FROM dex.poll_tasks(%s, 'w', 10, '1 min')",
                      (queue,)).fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def complete(db, task, result):
    run_id, task_id, version, _ = task
    db.execute("SELECT dex.complete_task(%s, %s, %s, %s)", (run_id, task_id, version, Jsonb(result)))


def pending(db, run_id):
    return db.execute(
        "SELECT (SELECT count(*) FROM dex.activity_task WHERE run_id = %(r)s), "
        "       (SELECT count(*) FROM dex.activity_retry WHERE run_id = %(r)s), "
        "       (SELECT count(*) FROM dex.workflow_inbox WHERE run_id = %(r)s), "
        "       (SELECT count(*) FROM dex.run_timer WHERE run_id = %(r)s), "
        "       (SELECT count(*) FROM dex.external_event WHERE run_id = %(r)s)",
        {"r": run_id}).fetchone()


def test_a_run_its_workflow_ends_leaves_nothing_pending(db, plain_queues):
    wf, act = plain_queues
    run_id = db.execute("SELECT dex.create_run('re-flow', %s)", (wf,)).fetchone()[0]
    # the workflow starts a timer of an hour and an activity that retries an hour after a failure
    complete(db, poll(db, wf), [
        {"id": 1, "startTimer": {"delay": "3600s"}},
        {"id": 2, "scheduleActivity": {"name": "re-step", "queue": act,
                                       "retryPolicy": {"maxAttempts": 5, "initialDelay": "3600s"}}}])
    run_id_, task_id, version, _ = poll(db, act)
    db.execute("SELECT dex.fail_task(%s, %s, %s, %s)",
               (run_id_, task_id, version, Jsonb({"message": "not yet"})))
    # an event wakes the workflow, which ends the run with all that still pending
    assert db.execute("SELECT dex.send_external_event(%s, 're-ping')", (run_id,)).fetchone()[0]
    activities, retries, inbox, _, _ = pending(db, run_id)
    assert activities == 1 and retries == 1 and inbox >= 2      # the timer and the event
    complete(db, poll(db, wf), [{"completeRun": {}}])
    assert db.execute("SELECT status FROM dex.get_run(%s)", (run_id,)).fetchone()[0] == "COMPLETED"
    assert pending(db, run_id) == (0, 0, 0, 0, 0)


def test_a_run_that_ends_with_nothing_pending_counts_its_duration(db, plain_queues):
    wf, act = plain_queues
    name = f"re-done-{uuid.uuid4().hex[:8]}"
    run_id = db.execute("SELECT dex.create_run(%s, %s)", (name, wf)).fetchone()[0]
    complete(db, poll(db, wf), [{"id": 1, "scheduleActivity": {"name": "re-step", "queue": act}}])
    complete(db, poll(db, act), 1)
    complete(db, poll(db, wf), [{"completeRun": {}}])
    assert db.execute("SELECT status FROM dex.get_run(%s)", (run_id,)).fetchone()[0] == "COMPLETED"
    assert pending(db, run_id) == (0, 0, 0, 0, 0)
    if "dex" not in db.execute("SHOW shared_preload_libraries").fetchone()[0]:
        pytest.skip("dex is not preloaded: no histograms")
    counted = db.execute("SELECT count FROM dex.latency_histograms() WHERE histogram = 'run_duration' "
                         "AND workflow = %s AND datid = (SELECT oid FROM pg_database "
                         "WHERE datname = current_database())", (name,)).fetchall()
    assert counted == [(1,)]
