"""What the client raises (issue 17): the server's errors as dex.ServerError subclasses chosen
by SQLSTATE, with the server's message, detail and hint and the psycopg exception as
__cause__; a value that is not JSON refused before anything is sent, naming the argument and
where in it the offending value is."""

import datetime as dt
import math
import uuid

import psycopg
import pytest
from psycopg.pq import DiagnosticField

import dex
from dex.errors import server_error

NO_SUCH_RUN = "01234567-89ab-7def-8123-456789abcdef"


@dex.workflow("errors-flow")
async def flow(ctx, arg):
    return arg


def test_an_unknown_queue_is_not_found(client):
    name = f"no-such-queue-{uuid.uuid4().hex[:8]}"
    with pytest.raises(dex.NotFound) as raised:
        client.start(flow, 1, queue=name)
    e = raised.value
    assert isinstance(e, dex.ServerError) and isinstance(e, dex.DexError)
    assert isinstance(e.__cause__, psycopg.errors.UndefinedObject)
    assert e.sqlstate == "42704"
    assert e.message == f'queue "{name}" does not exist'
    assert str(e).startswith(f'queue "{name}" does not exist (SQLSTATE 42704)')
    assert e.hint is None or name in e.hint


def test_a_queue_of_the_wrong_kind(client, queues):
    with pytest.raises(dex.WrongKind) as raised:
        client.start(flow, 1, queue=queues[1])          # an activity queue
    e = raised.value
    assert isinstance(e.__cause__, psycopg.errors.WrongObjectType)
    assert e.sqlstate == "42809"
    assert e.message == f'queue "{queues[1]}" is not a workflow queue'
    assert e.detail == "It is an activity queue."
    assert "\nDETAIL: It is an activity queue." in str(e)


def test_more_server_errors(client, queues):
    with pytest.raises(dex.AlreadyExists) as raised:
        client.create_queue(queues[0], "workflow", exist_ok=False)
    assert raised.value.sqlstate == "42710"
    assert client.create_queue(queues[0], "workflow") is False         # exist_ok
    with pytest.raises(dex.NotFound) as raised:
        client.get(NO_SUCH_RUN)
    assert NO_SUCH_RUN in raised.value.message
    with pytest.raises(dex.InvalidArgument) as raised:
        client.start(flow, 1, queue=queues[0], priority=10 ** 6)
    assert raised.value.sqlstate.startswith("22")



def test_a_version_the_server_refuses_is_sent_as_given(client, queues):
    """version=0 started version 1 (``version or 1``): the caller's version goes to the
    server, which refuses 0 (22023), for a name and for a definition alike."""
    name = f"errors-version-{uuid.uuid4().hex[:8]}"
    for workflow in (name, flow):
        with pytest.raises(dex.InvalidArgument) as raised:
            client.start(workflow, 1, queue=queues[0], version=0)
        assert raised.value.sqlstate == "22023"
        with pytest.raises(dex.InvalidArgument):
            client.start_many(workflow, [1], queue=queues[0], version=0)
    assert client.list(workflow_name=name) == []

def psycopg_error(sqlstate, message, detail=None):
    """The exception psycopg raises for a server error of that SQLSTATE (as from a result)."""
    try:
        cls = psycopg.errors.lookup(sqlstate)
    except KeyError:                    # dex's own: psycopg has no class of its own for them
        cls = psycopg.errors.DatabaseError
    info = {DiagnosticField.SQLSTATE: sqlstate.encode(),
            DiagnosticField.MESSAGE_PRIMARY: message.encode()}
    if detail:
        info[DiagnosticField.MESSAGE_DETAIL] = detail.encode()
    return cls(message, info=info)


def test_server_error_is_chosen_by_sqlstate():
    def mapped(sqlstate, message="it failed"):
        return server_error(psycopg_error(sqlstate, message))

    expected = {"42704": dex.NotFound, "42809": dex.WrongKind, "42710": dex.AlreadyExists,
                "23505": dex.AlreadyActive, "42501": dex.PermissionDenied,
                "22023": dex.InvalidArgument, "22P02": dex.InvalidArgument,
                "22004": dex.InvalidArgument, "55000": dex.InvalidState,
                "25000": dex.InvalidState, "54000": dex.LimitExceeded, "42883": dex.NotSupported,
                "3F000": dex.NotSupported, "40001": dex.ServerError, "57014": dex.ServerError,
                "08006": dex.ConnectionFailed}
    for sqlstate, cls in expected.items():
        e = mapped(sqlstate)
        assert type(e) is cls, sqlstate
        assert e.sqlstate == sqlstate and e.message == "it failed"
    # dex's own class WD: the subclasses that existed before keep their meaning
    lost = mapped("WD001", "the lease is lost")
    assert type(lost) is dex.LeaseLost and lost.sqlstate == "WD001"
    assert lost.message == "the lease is lost"
    ended = server_error(psycopg_error("WD002", "run cancelled", "Stop working on it."))
    assert type(ended) is dex.TaskRunEnded and ended.detail == "Stop working on it."
    assert dex.LeaseLost("lost").sqlstate == "WD001"
    assert issubclass(dex.LeaseLost, dex.DexError) and issubclass(dex.NotSupported, dex.DexError)
    # no SQLSTATE: the connection failed before the server answered
    gone = server_error(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert type(gone) is dex.ConnectionFailed and gone.sqlstate is None
    assert str(gone) == "server closed the connection unexpectedly"


def test_a_client_that_cannot_connect():
    with pytest.raises(dex.ConnectionFailed) as raised:
        dex.Client("host=/nonexistent-dex-socket-dir port=1 connect_timeout=2")
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)


def test_a_run_argument_that_is_not_json(client, queues):
    name = f"errors-none-{uuid.uuid4().hex[:8]}"
    cases = [({"items": [1, {2, 3}]}, "arg['items'][1]", "is a set ({2, 3})"),
             ([1.5, math.nan], "arg[1]", "is nan, not a JSON number"),
             ({"at": dt.datetime(2026, 1, 1)}, "arg['at']", "is a datetime"),
             ({(1, 2): "pair"}, "arg", "has a key of type tuple ((1, 2)), not a string")]
    for arg, path, what in cases:
        with pytest.raises(dex.NotJSONError) as raised:
            client.start(name, arg, queue=queues[0])
        e = raised.value
        assert isinstance(e, TypeError) and isinstance(e, dex.DexError)
        assert e.path == path
        assert str(e).startswith(f"the run's argument is not JSON: {path} {what}")
        assert e.__cause__ is None and e.__suppress_context__
    with pytest.raises(dex.NotJSONError) as raised:
        client.start_many(name, [1, {"x": {1}}], queue=queues[0])
    assert raised.value.path == "args[1]['x']"
    assert client.list(workflow_name=name) == []            # nothing was sent
    run_id = client.start(name, 1, queue=queues[0])
    with pytest.raises(dex.NotJSONError) as raised:
        client.send_event(run_id, "go", {"when": dt.date(2026, 1, 1)})
    assert raised.value.path == "payload['when']"
    assert "the event's payload is not JSON" in str(raised.value)
    client.terminate(run_id)


def test_a_value_the_sdk_refuses_before_sending_is_invalid_argument(client, queues):
    """As the TypeScript SDK: a duration that is none is refused as the server would refuse it
    (InvalidArgument, 22023), and is still a ValueError."""
    with pytest.raises(dex.InvalidArgument) as raised:
        client.start(flow, 1, queue=queues[0], execution_timeout="5 parsecs")
    assert isinstance(raised.value, ValueError) and raised.value.sqlstate == "22023"
    assert raised.value.message == ("not a duration: '5 parsecs' (use seconds, or \"250ms\", "
                                    "\"30s\", \"5m\", \"2h\", \"1d\")")
    with pytest.raises(dex.InvalidArgument, match="^negative duration -1"):
        dex.RetryPolicy(initial_delay=-1).to_json()
