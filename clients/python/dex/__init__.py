"""dex: the reference Python SDK of the dex durable execution engine (PostgreSQL).

    import dex

    @dex.activity("charge")
    def charge(order):
        return {"receipt": "R-" + str(order["id"])}

    @dex.workflow("checkout", version=1, activity_queue="payments")
    async def checkout(ctx, order):
        receipt = await ctx.activity(charge, order)
        await ctx.sleep(60)
        return receipt

    dex.Worker("", workflow_queues=["orders"], activity_queues=["payments"]).run()

See clients/python/README.md.
"""

from ._convert import RetryPolicy, decode, encode
from .client import OVERLAP_POLICIES, Attempt, Client, Run, Schedule, format_history
from .errors import (ActivityError, AlreadyActive, AlreadyExists, ApplicationError,
                     CancelledError, ChildRunError, ConnectionFailed, DexError,
                     DuplicateDefinition, FailureError, InvalidArgument, InvalidState,
                     LeaseLost, LimitExceeded, NonDeterminismError, NonRetryableError,
                     NotFound, NotJSONError, NotSupported, PermissionDenied, RunCancelledError,
                     RunFailedError, RunTerminatedError, RunTimedOutError, ServerError,
                     TaskRunEnded, WaitTimeout, WrongKind)
from .registry import activity, workflow
from .worker import ActivityContext, ActivityInfo, Worker, activity_context
from ._runtime import (ActivityHandle, ChildRun, EventWait, Future, Signal, Task, Timer,
                       WorkflowContext, replay)

__all__ = [
    "ActivityContext", "ActivityError", "ActivityHandle", "ActivityInfo", "AlreadyActive",
    "AlreadyExists", "ApplicationError", "Attempt", "CancelledError", "ChildRun",
    "ChildRunError", "Client", "ConnectionFailed", "DexError", "DuplicateDefinition",
    "EventWait", "FailureError", "Future", "InvalidArgument", "InvalidState", "LeaseLost",
    "LimitExceeded", "NonDeterminismError", "NonRetryableError", "NotFound", "NotJSONError",
    "NotSupported", "OVERLAP_POLICIES", "PermissionDenied", "RetryPolicy", "Run",
    "RunCancelledError", "RunFailedError", "RunTerminatedError", "RunTimedOutError", "Schedule",
    "ServerError", "Signal", "Task",
    "TaskRunEnded", "Timer", "WaitTimeout", "Worker", "WorkflowContext", "WrongKind",
    "activity", "activity_context", "decode", "encode", "format_history", "replay", "workflow",
]
__version__ = "1.11"   # the extension's default_version (dex.control); tests/test_version.py
