"""Workflows and activities that tests run in a worker subprocess (python3 -m dex worker
crashflows ...) and in the test process.  Activities append to the file named by
DEX_TEST_LOG, so that executions are counted across processes."""

import os
import time

import dex


def note(line):
    with open(os.environ["DEX_TEST_LOG"], "a") as f:
        f.write(line + "\n")


@dex.activity("crash-step", retry=dex.RetryPolicy(initial_delay=0.1, randomization_factor=0))
def step(arg):
    info = dex.activity_context().info
    note(f"start {arg['name']} {info.attempt}")
    time.sleep(arg.get("seconds", 0))
    note(f"done {arg['name']} {info.attempt}")
    return arg["name"]


@dex.workflow("crash-order")
async def order(ctx, arg):
    first = await ctx.all_of(ctx.activity(step, {"name": "a"}), ctx.activity(step, {"name": "b"}))
    slow = await ctx.activity(step, {"name": "c", "seconds": arg.get("seconds", 2.0)})
    await ctx.sleep(0.1)
    last = await ctx.activity(step, {"name": "d"})
    return first + [slow, last]
