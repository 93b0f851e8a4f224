"""Replay without a database: hand-made histories fed to dex.replay."""

import asyncio
import json

import pytest

import dex
from dex._runtime import WorkflowTaskFailure
from dex.registry import workflow_definition

TS = "2026-01-01T00:00:0{}Z"


def started(n=0):
    return {"timestamp": TS.format(n), "workflowTaskStarted": {"workerId": "w"}}


def completed():
    return {"workflowTaskCompleted": {}}


def first_task(argument=None):
    created = {"workflowName": "x", "queue": "q"}
    if argument is not None:
        created["argument"] = {"json": json.dumps(argument)}
    return [started(0), {"runCreated": created}, {"runStarted": {}}]


def task(history, new):
    return {"runId": "01a2", "workflowName": "x", "workflowVersion": 1,
            "history": history, "newEvents": new}


def run(fn, history, new):
    return dex.replay(task(history, new), workflow_definition(fn), "acts")


@dex.workflow("replay-two-steps")
async def two_steps(ctx, arg):
    a = await ctx.activity("a", arg)
    b = await ctx.activity("b", a)
    return b


def test_first_task_schedules_first_activity():
    cmds = run(two_steps, [], first_task(5))
    assert cmds == [{"id": 1, "scheduleActivity": {"name": "a", "queue": "acts",
                                                   "argument": {"json": "5"}}}]


def test_replay_matches_recorded_commands_and_sends_only_new_ones():
    history = first_task(5) + [
        completed(), {"id": 1, "activityTaskCreated": {"name": "a", "queue": "acts"}}]
    new = [started(1), {"activityTaskCompleted": {"activityTaskCreatedEventId": 1,
                                                  "result": {"json": "6"}}}]
    cmds = run(two_steps, history, new)
    assert cmds == [{"id": 2, "scheduleActivity": {"name": "b", "queue": "acts",
                                                   "argument": {"json": "6"}}}]
    history += new + [completed(), {"id": 2, "activityTaskCreated": {"name": "b", "queue": "acts"}}]
    new = [started(2), {"activityTaskCompleted": {"activityTaskCreatedEventId": 2,
                                                  "result": {"json": "\"done\""}}}]
    assert run(two_steps, history, new) == [{"completeRun": {"result": {"json": "\"done\""}}}]


def failed_task(fn, history, new):
    """The failure of a workflow task whose replay does not match its history."""
    with pytest.raises(WorkflowTaskFailure) as err:
        run(fn, history, new)
    assert err.value.failure["type"] == "dex.NonDeterminism"
    return err.value.failure["message"]


def test_mismatch_fails_the_workflow_task_naming_both():
    history = first_task(5) + [
        completed(), {"id": 1, "timerCreated": {"name": "nap"}}]
    new = [started(1), {"timerElapsed": {"timerCreatedEventId": 1}}]
    msg = failed_task(two_steps, history, new)
    assert "timerCreated 'nap' (id 1)" in msg
    assert "scheduleActivity 'a' (id 1)" in msg


async def strict(ctx, arg):
    return await ctx.activity("a", arg)


def test_a_workflow_may_have_non_determinism_fail_its_run():
    d = workflow_definition(dex.workflow("replay-strict", nondeterminism_fails_run=True)(strict))
    history = first_task(5) + [completed(), {"id": 1, "timerCreated": {"name": "nap"}}]
    (cmd,) = dex.replay(task(history, [started(1)]), d, "acts")
    failure = cmd["failRun"]["failure"]
    assert failure["type"] == "dex.NonDeterminism"
    assert "timerCreated 'nap' (id 1)" in failure["message"]


def test_other_activity_name_is_a_mismatch():
    history = first_task(5) + [
        completed(), {"id": 1, "activityTaskCreated": {"name": "charge", "queue": "acts"}}]
    msg = failed_task(two_steps, history, [started(1)])
    assert "'charge'" in msg
    assert "'a'" in msg


def test_missing_and_extra_commands_are_mismatches():
    # the history recorded two activities in the first task; the code issues one
    history = first_task(5) + [
        completed(), {"id": 1, "activityTaskCreated": {"name": "a", "queue": "acts"}},
        {"id": 2, "activityTaskCreated": {"name": "a2", "queue": "acts"}}]
    msg = failed_task(two_steps, history, [started(1)])
    assert "activityTaskCreated 'a2' (id 2)" in msg and "did not issue it" in msg
    # the history recorded nothing in the first task; the code issues an activity
    history = first_task(5) + [completed()]
    msg = failed_task(two_steps, history, [started(1)])
    assert "scheduleActivity 'a' (id 1)" in msg and "does not have" in msg


@dex.workflow("replay-race")
async def race(ctx):
    act = ctx.activity("slow")
    timer = ctx.sleep(10)
    winner = await ctx.any_of(act, timer)
    if winner is timer:
        return "timer"
    timer.cancel()
    return act.result()


def test_any_of_follows_the_order_of_recorded_events():
    history = first_task() + [
        completed(), {"id": 1, "activityTaskCreated": {"name": "slow", "queue": "acts"}},
        {"id": 2, "timerCreated": {"name": "sleep"}}]
    both_timer_first = [started(1), {"timerElapsed": {"timerCreatedEventId": 2}},
                        {"activityTaskCompleted": {"activityTaskCreatedEventId": 1,
                                                   "result": {"json": "1"}}}]
    assert run(race, history, both_timer_first) == [
        {"completeRun": {"result": {"json": "\"timer\""}}}]
    # both came: the activity won, the timer has fired already: nothing to cancel
    both_activity_first = list(reversed(both_timer_first[1:]))
    assert run(race, history, [started(1)] + both_activity_first) == [
        {"completeRun": {"result": {"json": "1"}}}]
    # only the activity came: the workflow cancels its timer
    assert run(race, history, [started(1), both_timer_first[2]]) == [
        {"id": 3, "cancelTimer": {"timerCreatedEventId": 2}},
        {"completeRun": {"result": {"json": "1"}}}]


@dex.workflow("replay-clock")
async def clock(ctx):
    seen = [(ctx.now().second, ctx.is_replaying)]
    await ctx.sleep(1)
    seen.append((ctx.now().second, ctx.is_replaying))
    await ctx.sleep(1)
    seen.append((ctx.now().second, ctx.is_replaying))
    return seen


def test_now_and_is_replaying_follow_the_task_being_replayed():
    history = first_task() + [completed(), {"id": 1, "timerCreated": {"name": "sleep"}},
                              started(4), {"timerElapsed": {"timerCreatedEventId": 1}},
                              completed(), {"id": 2, "timerCreated": {"name": "sleep"}}]
    new = [started(7), {"timerElapsed": {"timerCreatedEventId": 2}}]
    (cmd,) = run(clock, history, new)
    assert json.loads(cmd["completeRun"]["result"]["json"]) == [[0, True], [4, True], [7, False]]


class Foreign:
    def __await__(self):
        yield "something of another event loop"


@dex.workflow("replay-foreign")
async def uses_asyncio(ctx):
    await Foreign()


def not_dex_awaitable(fn):
    """The failure of a workflow task whose code awaits something that is not a dex awaitable:
    the task fails, as for non-determinism, not the run (it failed the run: the TypeScript SDK,
    which cannot throw into an await, fails the task, and so does this one now)."""
    with pytest.raises(WorkflowTaskFailure) as err:
        run(fn, [], first_task())
    assert err.value.failure["type"] == "dex.NotDexAwaitable"
    return err.value.failure["message"]


def test_awaiting_something_else_fails_the_workflow_task_clearly():
    assert not_dex_awaitable(uses_asyncio) == (
        "workflow code awaited 'something of another event loop', which is not a dex awaitable: "
        "workflows await only ctx.activity(), ctx.sleep(), ctx.wait_event(), ctx.child(), "
        "ctx.all_of(), ctx.any_of() and their own coroutines, never asyncio (ctx.sleep() for "
        "asyncio.sleep(), ctx.all_of() for asyncio.gather())")


@dex.workflow("replay-asyncio-sleep")
async def sleeps_with_asyncio(ctx):
    await asyncio.sleep(0)                  # a bare yield: lets the others run, harmless
    await asyncio.sleep(5)


@dex.workflow("replay-asyncio-gather")
async def gathers_with_asyncio(ctx):
    await asyncio.gather(ctx.sleep(1), ctx.sleep(2))


@pytest.mark.parametrize("fn, called", [(sleeps_with_asyncio, "create_future"),
                                        (gathers_with_asyncio, "create_task")])
def test_asyncio_in_a_workflow_says_it_is_not_a_dex_awaitable(fn, called):
    """asyncio.sleep(5) and asyncio.gather() ask for asyncio's running loop: outside one they
    failed with "RuntimeError: no running event loop"."""
    message = not_dex_awaitable(fn)
    assert message.startswith(f"workflow code called asyncio (its event loop's {called}), which "
                              "is not a dex awaitable: ")
    assert "ctx.sleep() for asyncio.sleep()" in message


def test_asyncio_in_a_workflow_inside_a_running_asyncio_loop():
    """dex.replay called from asyncio code: the workflow still gets dex's message, and the
    caller's loop is its running loop again afterwards."""
    async def main():
        loop = asyncio.get_running_loop()
        message = not_dex_awaitable(sleeps_with_asyncio)
        assert asyncio.get_running_loop() is loop
        await asyncio.sleep(0.01)
        return message

    assert "not a dex awaitable" in asyncio.run(main())
    with pytest.raises(RuntimeError, match="no running event loop"):
        asyncio.get_running_loop()


@dex.workflow("replay-set-result")
async def returns_a_set(ctx):
    return {"ids": {1, 2}}


@dex.workflow("replay-set-argument")
async def schedules_a_set(ctx):
    return await ctx.activity("a", {"s": {1}}, queue="q")


@dex.workflow("replay-set-side-effect")
async def records_a_set(ctx):
    return ctx.side_effect(lambda: {3}, name="ids")


@pytest.mark.parametrize("fn, message", [
    (returns_a_set, "the workflow's result is not JSON: result['ids'] is a set ({1, 2}), which "
                    "has no JSON form"),
    (schedules_a_set, "the argument of activity 'a' is not JSON: arg['s'] is a set ({1}), which "
                      "has no JSON form"),
    (records_a_set, "the result of side effect 'ids' is not JSON: result is a set ({3}), which "
                    "has no JSON form")])
def test_a_value_that_is_not_json_fails_the_run_and_names_it(fn, message):
    """A workflow result that JSON cannot hold made the replay itself raise, and the worker left
    the task to its lease, again and again; the others failed the run with json's message."""
    (cmd,) = run(fn, [], first_task())
    failure = cmd["failRun"]["failure"]
    assert failure["type"] == "NotJSONError"
    assert failure["message"] == message


def test_unknown_workflow_fails_the_run():
    (cmd,) = dex.replay(task([], first_task()), None)
    assert cmd["failRun"]["failure"]["type"] == "dex.UnknownWorkflow"


def test_format_history_is_a_table():
    text = dex.format_history(first_task(3) + [completed()])
    lines = text.splitlines()
    assert lines[0].split(" | ")[0].strip() == "seq"
    assert "runCreated" in text and "argument=3" in text
    assert len(lines) == 2 + 4


@dex.workflow("replay-side-effect")
async def side(ctx):
    value = ctx.side_effect(lambda: pytest.fail("a recorded side effect ran again"), name="pick")
    await ctx.sleep(1)
    return value


def test_a_recorded_side_effect_is_not_run_again():
    history = first_task() + [completed(),
                              {"id": 1, "sideEffectExecuted": {"name": "pick", "result": {"json": "7"}}},
                              {"id": 2, "timerCreated": {"name": "sleep"}}]
    new = [started(1), {"timerElapsed": {"timerCreatedEventId": 2}}]
    assert run(side, history, new) == [{"completeRun": {"result": {"json": "7"}}}]


@dex.workflow("replay-continue-pending")
async def continue_pending(ctx):
    ctx.activity("forgotten")
    ctx.continue_as_new(1)


def test_continue_as_new_with_pending_work_is_refused_in_workflow_code():
    (cmd,) = run(continue_pending, [], first_task())[1:]
    assert cmd["failRun"]["failure"]["type"] == "RuntimeError"
    assert "forgotten" in cmd["failRun"]["failure"]["message"]


@dex.workflow("replay-cancel")
async def cancel_me(ctx):
    try:
        await ctx.sleep(60)
        await ctx.wait_event("never")
    except dex.CancelledError as e:
        ctx.set_custom_status(f"cancelled: {e.reason}")
        raise


def test_cancellation_is_raised_at_the_current_await():
    history = first_task() + [completed(), {"id": 1, "timerCreated": {"name": "sleep"}}]
    # the timer fired and the cancellation came in the same task: the workflow moved on to
    # its next await (issuing the wait) and is cancelled there; the error escapes it, and
    # the worker ends the run with cancelRun
    new = [started(1), {"timerElapsed": {"timerCreatedEventId": 1}},
           {"runCancelRequested": {"reason": "no longer needed"}}]
    assert run(cancel_me, history, new) == [
        {"id": 2, "waitExternalEvent": {"eventId": "never"}},
        {"id": 3, "setCustomStatus": {"customStatus": "cancelled: no longer needed"}},
        {"cancelRun": {}}]
    new = [started(1), {"runCancelRequested": {}}]
    assert run(cancel_me, history, new) == [
        {"id": 2, "setCustomStatus": {"customStatus": "cancelled: "}}, {"cancelRun": {}}]


@dex.workflow("replay-compensate")
async def compensate(ctx):
    try:
        await ctx.wait_event("never")
    except dex.CancelledError:
        await ctx.activity("undo")      # the compensation runs: the run is still active
        raise


def test_a_cancelled_workflow_compensates_then_ends_the_run():
    history = first_task() + [completed(), {"id": 1, "externalEventWaitStarted": {"eventId": "never"}}]
    new = [started(1), {"runCancelRequested": {"reason": "r"}}]
    assert run(compensate, history, new) == [
        {"id": 2, "scheduleActivity": {"name": "undo", "queue": "acts"}}]
    history += new + [completed(), {"id": 2, "activityTaskCreated": {"name": "undo", "queue": "acts"}}]
    new = [started(2), {"activityTaskCompleted": {"activityTaskCreatedEventId": 2,
                                                  "result": {"json": "null"}}}]
    assert run(compensate, history, new) == [{"cancelRun": {}}]


def test_non_determinism_names_the_code_location():
    """As the TypeScript SDK: where in the workflow's code the command that does not match was
    issued."""
    history = first_task(5) + [
        completed(), {"id": 1, "timerCreated": {"name": "nap"}}]
    new = [started(1), {"timerElapsed": {"timerCreatedEventId": 1}}]
    msg = failed_task(two_steps, history, new)
    assert msg.endswith(f"in workflow task 1 at {__file__}:{two_steps.__code__.co_firstlineno + 2}")
