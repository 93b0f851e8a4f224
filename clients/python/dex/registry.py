"""The ``@workflow`` and ``@activity`` decorators and the registry they fill."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

from ._convert import Duration, RetryPolicy
from .errors import DuplicateDefinition


@dataclass
class WorkflowDefinition:
    name: str
    version: int
    fn: Callable
    activity_queue: Optional[str]   # default queue of the activities it calls
    takes_arg: bool
    nondeterminism_fails_run: bool = False
    # the __spec__ of the module's execution that defined it: a reload makes a new one
    module_run: Any = field(default=None, repr=False, compare=False)


@dataclass
class ActivityDefinition:
    name: str
    fn: Callable
    queue: Optional[str]
    retry: Union[None, RetryPolicy, dict]
    start_to_close_timeout: Optional[Duration]
    schedule_to_close_timeout: Optional[Duration]
    heartbeat_timeout: Optional[Duration]
    takes_arg: bool
    is_async: bool
    module_run: Any = field(default=None, repr=False, compare=False)


# Every decorated function, as a worker takes them by default.
WORKFLOWS: Dict[Tuple[str, int], WorkflowDefinition] = {}
ACTIVITIES: Dict[str, ActivityDefinition] = {}


def _where(fn: Callable) -> str:
    code = getattr(fn, "__code__", None)
    place = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{fn.__module__}.{fn.__qualname__}{place}"


def _module_run(fn: Callable) -> Any:
    """What tells one execution of the module that defines ``fn`` from another: its
    ``__spec__``, which importlib.reload replaces (None for a script run as __main__)."""
    return getattr(fn, "__globals__", {}).get("__spec__")


def _place(fn: Callable) -> Tuple[Any, Any]:
    code = getattr(fn, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else (None, None)


def _redefinition(old: Any, new: Any) -> bool:
    """Whether ``new`` is ``old``'s function defined again, which replaces it: the same module
    and qualified name, and the same place (a test that defines it and runs twice), or another
    execution of its module (reloaded) or another file (a notebook's cell run again).  Two
    functions of one name at two places of one file in one execution are a copy-paste."""
    if (old.fn.__module__, old.fn.__qualname__) != (new.fn.__module__, new.fn.__qualname__):
        return False
    (old_file, old_line), (new_file, new_line) = _place(old.fn), _place(new.fn)
    return old_line == new_line or old_file != new_file or old.module_run is not new.module_run


def register(table: Dict[Any, Any], d: Union["WorkflowDefinition", "ActivityDefinition"]) -> None:
    """Put the definition ``d`` in ``table`` (of workflows by name and version, or of
    activities by name), unless another function has its key: :class:`dex.DuplicateDefinition`.
    The same function defined again (its module reloaded, a test run twice) replaces its old
    definition; a second function of the same name in the same module (a copy-paste) is
    another function."""
    if isinstance(d, WorkflowDefinition):
        key: Any = (d.name, d.version)
        what, other = f"workflow {d.name!r} version {d.version}", "version"
    else:
        key, what, other = d.name, f"activity {d.name!r}", "name"
    old = table.get(key)
    if old is not None and not _redefinition(old, d):
        modules = {old.fn.__module__, d.fn.__module__}
        twice = (" (one module imported twice, as __main__ and by its name? Keep workflows and "
                 "activities out of the script you run)") if "__main__" in modules else ""
        raise DuplicateDefinition(f"{what} is defined twice: by {_where(old.fn)} and by "
                                  f"{_where(d.fn)}; give one of them another {other}{twice}")
    table[key] = d


def _positional_params(fn: Callable) -> int:
    n = 0
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
        elif p.kind == p.VAR_POSITIONAL:
            return 99
    return n


def workflow(name: Union[str, Callable, None] = None, version: int = 1, *,
             activity_queue: Optional[str] = None, nondeterminism_fails_run: bool = False):
    """Declare a workflow: ``async def fn(ctx, arg)`` (or ``fn(ctx)``).

    ``name`` defaults to the function's name; runs are started with that name and
    version.  ``activity_queue`` is the queue its activities go to when neither the
    call nor the activity's declaration names one.  A replay that does not match the
    history (non-determinism: a bad deploy) fails the workflow task, which is retried
    after a backoff and parks the run BLOCKED after ``dex.max_workflow_task_failures``,
    so that deploying a fix lets the run go on; with ``nondeterminism_fails_run`` it
    fails the run instead (``dex.NonDeterminism``)."""

    def deco(fn: Callable) -> Callable:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {fn.__qualname__} must be an 'async def' function")
        d = WorkflowDefinition(name=wname or fn.__name__, version=int(version), fn=fn,
                               activity_queue=activity_queue,
                               takes_arg=_positional_params(fn) >= 2,
                               nondeterminism_fails_run=bool(nondeterminism_fails_run),
                               module_run=_module_run(fn))
        register(WORKFLOWS, d)
        fn.__dex_workflow__ = d
        return fn

    if callable(name):          # bare @workflow
        wname = None
        return deco(name)
    wname = name
    return deco


def activity(name: Union[str, Callable, None] = None, *, queue: Optional[str] = None,
             retry: Union[None, RetryPolicy, dict] = None,
             start_to_close_timeout: Optional[Duration] = None,
             schedule_to_close_timeout: Optional[Duration] = None,
             heartbeat_timeout: Optional[Duration] = None):
    """Declare an activity: ``def fn(arg)`` or ``async def fn(arg)`` (or without argument).

    The options are defaults for workflows that call it; a call may override them."""

    def deco(fn: Callable) -> Callable:
        d = ActivityDefinition(name=aname or fn.__name__, fn=fn, queue=queue, retry=retry,
                               start_to_close_timeout=start_to_close_timeout,
                               schedule_to_close_timeout=schedule_to_close_timeout,
                               heartbeat_timeout=heartbeat_timeout,
                               takes_arg=_positional_params(fn) >= 1,
                               is_async=inspect.iscoroutinefunction(fn),
                               module_run=_module_run(fn))
        register(ACTIVITIES, d)
        fn.__dex_activity__ = d
        return fn

    if callable(name):          # bare @activity
        aname = None
        return deco(name)
    aname = name
    return deco


def workflow_definition(obj: Any) -> WorkflowDefinition:
    d = getattr(obj, "__dex_workflow__", None)
    if d is None:
        raise TypeError(f"{obj!r} is not a @dex.workflow")
    return d


def activity_definition(obj: Any) -> ActivityDefinition:
    d = getattr(obj, "__dex_activity__", None)
    if d is None:
        raise TypeError(f"{obj!r} is not a @dex.activity")
    return d
