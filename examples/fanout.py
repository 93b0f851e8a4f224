"""Fan-out / fan-in: one workflow runs 100 activities at once and adds up their results.

    python3 examples/fanout.py      # with PGHOST, PGDATABASE, ... naming a database with dex

All 100 scheduleActivity commands go out in one workflow task; the worker leases the
activity tasks in batches (dex.poll_tasks with max_tasks), reports results in batches
(dex.complete_tasks), and the workflow wakes up as results arrive, until all_of has every
result. Each wake-up resumes the run's state from the worker's workflow cache rather than
replaying the history (only the first task replays), however long the history grows.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))

import dex  # noqa: E402

QUEUE, ACTIVITIES = "fanout", "fanout-squares"


@dex.activity("square")
def square(n):
    return n * n


@dex.workflow("sum_of_squares", activity_queue=ACTIVITIES)
async def sum_of_squares(ctx, n):
    squares = await ctx.all_of([ctx.activity(square, i) for i in range(1, n + 1)])
    ctx.set_custom_status(f"{len(squares)} squares")
    return sum(squares)


def main(conninfo="", n=100):
    client = dex.Client(conninfo)
    client.create_queue(QUEUE, "workflow")
    client.create_queue(ACTIVITIES, "activity")
    t0 = time.monotonic()
    with dex.Worker(conninfo, [QUEUE], [ACTIVITIES], concurrency=20,
                    workflows=[sum_of_squares], activities=[square]) as worker:
        run_id = client.start(sum_of_squares, n, queue=QUEUE)
        total = client.result(run_id, timeout=60)
    run = client.get(run_id)
    print(f"sum of the squares of 1..{n} = {total} ({run.custom_status}, "
          f"{run.history_length} events, {worker.stats['workflow_tasks']} workflow tasks, "
          f"{worker.stats['cache_hits']} resumed from the cache, {time.monotonic() - t0:.2f} s)")
    assert total == n * (n + 1) * (2 * n + 1) // 6
    client.close()
    return total


if __name__ == "__main__":
    main()
