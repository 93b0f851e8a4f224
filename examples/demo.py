"""The dex demo (bash test/demo.sh runs it on a throwaway cluster).

1. starts a worker process (python3 -m dex worker order ...) and an order run;
2. when the three parallel activities are under way and two are done, kills the worker
   with SIGKILL, in the middle of the third;
3. starts a new worker: it replays the run from its history, and only the interrupted
   activity runs again;
4. approves the order (an external event); the run sleeps on a durable timer, ships and
   completes;
5. prints the result, how often each activity ran, and the run's history as a table.

Connection: the PG* environment variables (PGHOST, PGPORT, PGDATABASE, ...).
"""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python"))

import dex  # noqa: E402
import order  # noqa: E402,F401  (the workflow and its activities)

WORKFLOW_QUEUE = "orders"


def say(text=""):
    print(text, flush=True)


def start_worker(n, log):
    env = dict(os.environ, DEX_DEMO_LOG=log,
               PYTHONPATH=os.path.join(os.path.dirname(HERE), "clients", "python"))
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "dex", "worker", "order",
         "--workflow-queue", WORKFLOW_QUEUE, "--activity-queue", order.ACTIVITY_QUEUE,
         "--activity-lease", "2", "--workflow-lease", "5", "--worker-id", f"worker-{n}"],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def relay():
        for line in proc.stdout:
            say(f"    [worker {n}] {line.rstrip()}")
    threading.Thread(target=relay, daemon=True).start()
    say(f"--- worker {n} started (pid {proc.pid})")
    return proc


def wait_until(what, check, timeout=30):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.05)


def main():
    t0 = time.monotonic()
    log = tempfile.NamedTemporaryFile(prefix="dex-demo-", suffix=".log", delete=False).name
    lines = lambda: open(log).read().splitlines()
    client = dex.Client("")
    client.conn.execute("SET client_min_messages = warning")
    client.conn.execute("CREATE EXTENSION IF NOT EXISTS dex")
    client.create_queue(WORKFLOW_QUEUE, "workflow")
    client.create_queue(order.ACTIVITY_QUEUE, "activity")

    worker1 = start_worker(1, log)
    the_order = {"id": 1042, "items": ["kettle", "teapot"], "amount": 41.5,
                 "packing_seconds": 3, "courier_delay": 2}
    run_id = client.start(order.order_workflow, the_order, queue=WORKFLOW_QUEUE,
                          instance_id="order-1042", labels={"shop": "demo"})
    say(f"--- started run {run_id} of workflow 'order' (instance order-1042)")

    def completed_activities():
        return sum("activityTaskCompleted" in e for e in client.history(run_id))
    wait_until("pack_parcel to start", lambda: any("pack_parcel" in l and "started" in l for l in lines()))
    wait_until("two activities to complete", lambda: completed_activities() >= 2)
    say("--- reserve_stock and charge_card are done, pack_parcel is running: "
        "killing worker 1 with SIGKILL")
    worker1.send_signal(signal.SIGKILL)
    worker1.wait()

    worker2 = start_worker(2, log)
    say("--- pack_parcel's lease (2 s) expires; the scheduler counts the attempt as failed and "
        "retries it")
    wait_until("the approval wait", lambda: client.get(run_id).custom_status == "awaiting approval")
    say("--- the run waits for approval: sending it (dex.send_external_event_to_instance)")
    client.send_event_to_instance("order-1042", "approval", {"by": "ana"})
    wait_until("the courier timer", lambda: client.get(run_id).custom_status == "waiting for the courier")
    say("--- approved; the run sleeps on a durable timer until the courier's slot")
    result = client.result(run_id, timeout=60)
    say(f"--- run completed: {result}")

    worker2.send_signal(signal.SIGTERM)
    code = worker2.wait(30)
    say(f"--- worker 2 stopped on SIGTERM (exit status {code})")

    run = client.get(run_id)
    say()
    say(f"run {run.id}: {run.workflow_name} v{run.workflow_version}, {run.status}, "
        f"custom status {run.custom_status!r}, {run.history_length} events, "
        f"{(run.completed_at - run.created_at).total_seconds():.1f} s")
    say()
    say("How often each activity ran (from the activities' own log):")
    ok = True
    for name in ("reserve_stock", "charge_card", "pack_parcel", "ship"):
        started = [l for l in lines() if l.startswith(f"activity {name} ") and l.endswith("started")]
        done = [l for l in lines() if l.startswith(f"activity {name} ") and l.endswith("done")]
        note = ""
        if name == "pack_parcel":
            note = "  (attempt 1 died with worker 1; attempt 2 ran on worker 2)"
            ok &= len(done) == 1
        else:
            ok &= len(started) == 1 and len(done) == 1
        say(f"  {name:14} started {len(started)}x, completed {len(done)}x{note}")
    say()
    say("The run's history (dex.run_history):")
    say(client.format_history(run_id))
    say()
    os.unlink(log)
    if run.status != "COMPLETED" or not ok or code != 0:
        raise SystemExit("demo: FAILED: the run did not finish exactly once per completed activity")
    say(f"demo: OK in {time.monotonic() - t0:.1f} s: the run survived a SIGKILLed worker, and no "
        "completed activity ran twice")


if __name__ == "__main__":
    main()
