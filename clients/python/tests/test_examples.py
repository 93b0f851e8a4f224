"""The examples in examples/ run and give the right answers."""

import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))


def test_saga_compensates_in_reverse_order(conninfo, capsys):
    import saga
    results = saga.main(conninfo)
    assert results["Lisbon"] == {"booked": ["flight to Lisbon", "hotel in Lisbon", "car in Lisbon"]}
    assert results["Oslo"] == {"failed": "no car left in Oslo",
                               "undone": ["hotel in Oslo", "flight to Oslo"]}
    assert "runFailed" in capsys.readouterr().out


def test_fanout_over_100_activities(conninfo):
    import fanout
    assert fanout.main(conninfo, 100) == 338350
