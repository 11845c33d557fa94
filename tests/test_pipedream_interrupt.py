"""A Ctrl-C the PipeDream-style planner's DP takes (solvers.dp._sweep catches it and returns what it
has) is said in its answer, so that its callers (the serving sweep over batch sizes) stop on
:attr:`solvers.base.Solution.interrupted`: it said 'time limit reached before the DP finished'."""

from __future__ import annotations

import pytest

from solvers import dp, pipedream
from solvers.base import Status
from tests.instances import chain


def test_a_ctrl_c_in_the_planners_dp_is_said(monkeypatch):
    inst = chain(6)  # 6 unit operators, comm 0.5, on 2 GPUs: 3 a device, 3.5 by hand
    whole = pipedream.solve(inst.graph, inst.cluster)
    assert whole.status is Status.FEASIBLE and whole.objective == pytest.approx(3.5)
    assert not whole.interrupted
    calls = []

    def sweep(*args, **kw):  # what _sweep returns when the Ctrl-C lands in its first chunk
        calls.append(None)
        return 0, 0, False, True

    monkeypatch.setattr(dp, "_sweep", sweep)
    sol = pipedream.solve(inst.graph, inst.cluster)
    assert len(calls) == 1
    assert sol.interrupted and sol.status is Status.STOPPED and sol.assignment is None, (sol.status,
                                                                                         sol.message)
