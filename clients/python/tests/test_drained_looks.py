"""A look of CALL dex.poll_tasks_wait that would find its queue as the backend's last look left
it, drained, with no commit since that made a task of the queue pollable, is skipped: no lease
statement (the server says so at DEBUG2). Each way a task becomes pollable makes the next look
look: another session's commit, a lease rolled back, a task the call itself makes."""

import uuid

import psycopg
import pytest

SKIPPED = "is drained since this backend's last look"


def has_poll_wait():
    with psycopg.connect("", autocommit=True) as c:
        return c.execute("SELECT count(*) > 0 FROM pg_proc WHERE proname = 'poll_tasks_wait' "
                         "AND pronamespace = 'dex'::regnamespace").fetchone()[0]


class Poller:
    """A session that polls with CALL dex.poll_tasks_wait and keeps the server's DEBUG2 lines."""

    def __init__(self):
        self.conn = psycopg.connect("", autocommit=True)
        self.conn.execute("SET client_min_messages = debug2")
        self.messages = []
        self.conn.add_notice_handler(lambda d: self.messages.append(d.message_primary or ""))

    def call(self, queue, timeout="50 ms", completions=None):
        """The tasks one call leased, and how many of its looks were skipped."""
        self.messages.clear()
        if completions is None:
            row = self.conn.execute(
                "CALL dex.poll_tasks_wait(%s, 'drained-worker', 10, '1 min', %s::interval, NULL)",
                (queue, timeout)).fetchone()
        else:
            runs, tasks, versions, results = completions
            row = self.conn.execute(
                "CALL dex.poll_tasks_wait(%s, 'drained-worker', 10, '1 min', %s::interval, NULL, "
                "false, %s::uuid[], %s::int[], %s::bigint[], %s::jsonb[], NULL)",
                (queue, timeout, runs, tasks, versions, results)).fetchone()
        return row[0], sum(SKIPPED in m for m in self.messages)

    def close(self):
        self.conn.close()


@pytest.fixture
def plain_queues(conninfo):         # conninfo: the extension exists
    tag = uuid.uuid4().hex[:8]
    wf, act = f"dl-wf-{tag}", f"dl-act-{tag}"
    with psycopg.connect("", autocommit=True) as c:
        c.execute("SELECT dex.create_queue(%s, 'workflow')", (wf,))
        c.execute("SELECT dex.create_queue(%s, 'activity')", (act,))
    return wf, act


@pytest.fixture
def poller(conninfo):
    if not has_poll_wait():
        pytest.skip("the installed dex has no dex.poll_tasks_wait")
    p = Poller()
    # a session's first look plans its statements, which may take longer than a call's timeout:
    # polls of two other queues plan them first
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect("", autocommit=True) as c:
        for kind in ("workflow", "activity"):
            c.execute("SELECT dex.create_queue(%s, %s)", (f"dl-warm-{kind}-{tag}", kind))
    for kind in ("workflow", "activity"):
        p.conn.execute("SELECT * FROM dex.poll_tasks(%s, 'drained-worker', 10, '1 min')",
                       (f"dl-warm-{kind}-{tag}",))
    yield p
    p.close()


def create_run(queue):
    with psycopg.connect("", autocommit=True) as c:
        return str(c.execute("SELECT dex.create_run('drained-flow', %s, '{}')",
                             (queue,)).fetchone()[0])


def test_a_drained_queue_is_not_looked_at_again_until_a_commit_makes_a_task(poller, plain_queues):
    wf, _ = plain_queues
    # the call looks, finds nothing, sleeps 50 ms; its look after the sleep is skipped
    tasks, skipped = poller.call(wf)
    assert tasks == [] and skipped == 1
    tasks, skipped = poller.call(wf)
    assert tasks == [] and skipped == 2
    run_id = create_run(wf)
    tasks, skipped = poller.call(wf)
    assert [t["runId"] for t in tasks] == [run_id] and skipped == 0
    # that look leased fewer than it could: the queue is drained again
    tasks, skipped = poller.call(wf)
    assert tasks == [] and skipped == 2


def test_another_queue_commit_leaves_the_skip(poller, plain_queues):
    wf, act = plain_queues
    poller.call(wf)
    with psycopg.connect("", autocommit=True) as c:
        other = f"dl-wf2-{uuid.uuid4().hex[:8]}"
        c.execute("SELECT dex.create_queue(%s, 'workflow')", (other,))
        c.execute("SELECT dex.create_run('drained-flow', %s, '{}')", (other,))
    tasks, skipped = poller.call(wf)
    assert tasks == [] and skipped == 2


def test_a_lease_rolled_back_is_found_by_the_next_look(poller, plain_queues):
    wf, _ = plain_queues
    run_id = create_run(wf)
    with psycopg.connect("") as other:          # a transaction block
        leased = other.execute("SELECT run_id FROM dex.poll_tasks(%s, 'other', 10, '1 min')",
                               (wf,)).fetchall()
        assert [str(r[0]) for r in leased] == [run_id]
        tasks, skipped = poller.call(wf)        # the task is leased: drained
        assert tasks == [] and skipped == 1
        other.rollback()                        # the task is pollable again, without a new task
    tasks, skipped = poller.call(wf)
    assert len(tasks) == 1 and skipped == 0


def test_a_task_the_call_itself_makes_is_looked_for(poller, plain_queues):
    wf, act = plain_queues
    run_id = create_run(wf)
    tasks, _ = poller.call(wf)
    assert len(tasks) == 1
    task = tasks[0]
    # the activity queue is drained for this backend
    tasks, skipped = poller.call(act)
    assert tasks == [] and skipped == 1
    # the call completes the workflow task, which schedules an activity on that queue, in the
    # transaction of its first look: that look looks, and leases it
    schedule = [{"id": 1, "scheduleActivity": {"name": "drained-step", "queue": act,
                                               "argument": {"json": "{}"}}}]
    completions = ([run_id], [int(task.get("taskId", 0))], [int(task["lockVersion"])],
                   [psycopg.types.json.Jsonb(schedule)])
    tasks, skipped = poller.call(act, completions=completions)
    assert [t["name"] for t in tasks] == ["drained-step"] and skipped == 0
