"""Replay after a worker crash, graceful shutdown on SIGTERM, non-determinism detection."""

import os
import signal
import subprocess
import sys
import time

import pytest

import crashflows
import dex
from conftest import event_kinds

HERE = os.path.dirname(os.path.abspath(__file__))


def spawn_worker(queues, log, *extra):
    env = dict(os.environ, DEX_TEST_LOG=str(log),
               PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-m", "dex", "worker", "crashflows", "-w", queues[0], "-a", queues[1],
         "--activity-lease", "1", "--workflow-lease", "2", *extra],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_line(log, line, proc, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        if log.exists() and line in log.read_text().splitlines():
            return
        if proc.poll() is not None:
            pytest.fail(f"the worker exited ({proc.returncode}): {proc.stdout.read()}")
        assert time.monotonic() < deadline, f"no {line!r} in {log.read_text()!r}"
        time.sleep(0.02)


def test_a_killed_worker_is_replaced_and_nothing_done_is_redone(client, queues, start_worker,
                                                                 tmp_path, monkeypatch):
    log = tmp_path / "activities.log"
    monkeypatch.setenv("DEX_TEST_LOG", str(log))
    proc = spawn_worker(queues, log)
    try:
        run_id = client.start(crashflows.order, {"seconds": 2.0}, queue=queues[0])
        wait_for_line(log, "start c 1", proc)
        proc.kill()                                   # SIGKILL, in the middle of activity c
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    start_worker()                                    # a new worker, in this process
    assert client.result(run_id, timeout=30) == ["a", "b", "c", "d"]
    lines = log.read_text().splitlines()
    # a and b ran once; c's interrupted attempt ran again (its lease expired); d once
    assert lines.count("done a 1") == 1 and lines.count("done b 1") == 1
    assert "done c 1" not in lines and lines.count("done c 2") == 1
    assert [line for line in lines if line.startswith("start d")] == ["start d 1"]
    completed = [e["activityTaskCompleted"] for e in client.history(run_id)
                 if "activityTaskCompleted" in e]
    assert [c["attempt"] for c in completed] == [1, 1, 2, 1]


def sigterm_while_c_runs(client, queues, log, seconds, shutdown_timeout):
    """A worker process runs crash-order, whose activity c takes ``seconds``; SIGTERM while c
    runs: the worker exits 0 within 10 s.  The run's id and what the worker printed."""
    proc = spawn_worker(queues, log, "--shutdown-timeout", str(shutdown_timeout))
    try:
        run_id = client.start(crashflows.order, {"seconds": seconds}, queue=queues[0])
        wait_for_line(log, "start c 1", proc)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert time.monotonic() - t0 < 10
        return run_id, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_lets_running_activities_finish(client, queues, start_worker, tmp_path,
                                                monkeypatch):
    log = tmp_path / "activities.log"
    monkeypatch.setenv("DEX_TEST_LOG", str(log))
    run_id, _ = sigterm_while_c_runs(client, queues, log, 1.0, 10)
    # c finished and was reported before the worker left: nothing is redone
    assert "done c 1" in log.read_text().splitlines()
    start_worker()
    assert client.result(run_id, timeout=30) == ["a", "b", "c", "d"]
    assert "start c 2" not in log.read_text().splitlines()


def test_sigterm_ends_the_process_after_the_shutdown_timeout_though_an_activity_goes_on(
        client, queues, tmp_path, monkeypatch):
    """An activity that ignores the shutdown: its attempt is failed as retryable when the
    shutdown timeout passes, and the process ends then (its thread kept it until the
    activity returned, for a result nobody takes)."""
    log = tmp_path / "activities.log"
    monkeypatch.setenv("DEX_TEST_LOG", str(log))
    run_id, out = sigterm_while_c_runs(client, queues, log, 60.0, 1)
    assert "still running at shutdown: failing it as retryable" in out
    assert "done c 1" not in log.read_text().splitlines()
    failures = [a.failure["type"] for a in client.attempts(run_id) if a.failure]
    assert failures == ["dex.WorkerShutdown"]
    client.terminate(run_id)


def test_shutdown_gives_up_on_activities_that_do_not_finish(client, queues, start_worker,
                                                            tmp_path, monkeypatch):
    log = tmp_path / "activities.log"
    monkeypatch.setenv("DEX_TEST_LOG", str(log))
    w = start_worker()
    run_id = client.start(crashflows.order, {"seconds": 3.0}, queue=queues[0])
    deadline = time.monotonic() + 10
    while "start c 1" not in (log.read_text().splitlines() if log.exists() else []):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    w.shutdown(timeout=0.2)
    failed = [e["activityTaskFailed"] for e in client.history(run_id) if "activityTaskFailed" in e]
    assert failed == []     # a retryable failure: the activity is retried, not failed
    start_worker()
    assert client.result(run_id, timeout=30) == ["a", "b", "c", "d"]
    assert "start c 2" in log.read_text().splitlines()


@dex.activity("nd-a")
def nd_a():
    return "a"


async def nd_v1(ctx):
    await ctx.activity(nd_a)
    await ctx.wait_event("go")


async def nd_v2(ctx):                  # the same workflow, edited: a timer where the activity was
    await ctx.sleep(1)
    await ctx.wait_event("go")


def test_changed_code_of_a_workflow_that_asks_for_it_fails_the_run(client, queues, start_worker):
    # by default non-determinism fails the workflow task (test_bad_deploy.py); a workflow
    # declared with nondeterminism_fails_run fails the run instead
    v1 = dex.workflow("nd-flow")(nd_v1)
    w = start_worker(workflows=[v1])
    run_id = client.start("nd-flow", queue=queues[0])
    deadline = time.monotonic() + 10
    while "externalEventWaitStarted" not in event_kinds(client.history(run_id)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    w.shutdown()
    # the next deployment, a process where v1 was never defined (in this one, defining another
    # function under the same name and version is refused)
    dex.registry.WORKFLOWS.pop(("nd-flow", 1))
    v2 = dex.workflow("nd-flow", nondeterminism_fails_run=True)(nd_v2)
    start_worker(workflows=[v2])
    client.send_event(run_id, "go")
    with pytest.raises(dex.RunFailedError) as err:
        client.result(run_id, timeout=10)
    failure = err.value.failure
    assert failure["type"] == "dex.NonDeterminism"
    assert "activityTaskCreated 'nd-a' (id 1)" in failure["message"]
    assert "startTimer 'sleep' (id 1)" in failure["message"]
