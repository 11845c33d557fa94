"""A Ctrl-C that one of the frontier's solvers takes (the DP, HiGHS: they catch it and return what they
have, saying "interrupted") ends the frontier search there, also where no ``stop`` says so (the
library's :func:`placement.serving.batch_frontier` and :func:`~placement.serving.frontier`): what was
found so far, not proven, and nothing after it (no program, no next batch size)."""

from __future__ import annotations

import dataclasses

import pytest

from graphs.evaluate import evaluate
from graphs.reference import Workload
from placement import serving
from solvers import dp, slo_ip
from tests.instances import chain


def _chain_workload() -> Workload:
    inst = chain(6)  # 6 unit operators, comm 0.5, on 2 GPUs: the max-load optimum 3 + 0.5 = 3.5 by hand
    return Workload(inst.graph, inst.cluster)


@pytest.fixture
def programs(monkeypatch):
    """The serving programs run (slo_ip.solve), counted; ``interrupt`` (the call number) makes that
    one answer as after a Ctrl-C HiGHS took: its plan, feasible, 'interrupted (Ctrl-C); ...'."""
    real = slo_ip.solve
    state = {"calls": 0, "interrupt": 0}

    def solve(*args, **kw):
        state["calls"] += 1
        sol = real(*args, **kw)
        if state["calls"] == state["interrupt"]:
            sol = dataclasses.replace(sol, status=serving.Status.FEASIBLE,
                                      message="interrupted (Ctrl-C); best placement so far")
        return sol

    monkeypatch.setattr(slo_ip, "solve", solve)
    return state


def _dp_interrupted_at(monkeypatch, at: int) -> None:
    """The DP's chunk loop takes the Ctrl-C in its ``at``-th call (on the chain: 1, 2 the runs over two
    topological orders, 3 the lattice): dp.solve returns the orders' best, 'interrupted'."""
    real, calls = dp._sweep, []

    def sweep(*args, **kw):
        calls.append(None)
        return (0, 0, False, True) if len(calls) == at else real(*args, **kw)

    monkeypatch.setattr(dp, "_sweep", sweep)


def test_a_ctrl_c_the_dp_takes_ends_the_frontier_with_its_plan(programs, monkeypatch):
    """The throughput end's DP interrupted in the lattice: its plan (the first order's, on a chain every
    split, so 3.5) is the one point, not proven, and no program runs. The frontier went on to the
    programs before (they ran the whole descent)."""
    w = _chain_workload()
    whole, proven = serving.batch_frontier(w)
    assert proven and programs["calls"] >= 2
    programs["calls"] = 0
    _dp_interrupted_at(monkeypatch, 3)
    pts, proven = serving.batch_frontier(w)
    assert programs["calls"] == 0 and not proven
    assert len(pts) == 1 and not pts[0].proven
    assert pts[0].max_load == pytest.approx(3.5)
    assert evaluate(w.graph, w.cluster, pts[0].placement.assignment).max_load == pytest.approx(3.5)


def test_a_ctrl_c_a_program_takes_ends_the_frontier(programs):
    """The DP proves the throughput end (3.5) and the first program (least latency at that max-load)
    takes the Ctrl-C: its plan is the one point, not proven, and no program runs after it."""
    programs["interrupt"] = 1
    pts, proven = serving.batch_frontier(_chain_workload())
    assert programs["calls"] == 1 and not proven
    assert len(pts) == 1 and not pts[0].proven and pts[0].max_load == pytest.approx(3.5)


def test_a_ctrl_c_at_one_batch_size_ends_the_sweep_over_them(programs, monkeypatch):
    """frontier over batch sizes 1 and 2 (the chain stands for both): the DP at batch 1 takes the
    Ctrl-C; batch 2 is not tried, and the frontier says it was interrupted, not proven."""
    loaded = []
    monkeypatch.setattr(serving, "batch_workload", lambda path, devices, b, **kw: loaded.append(b)
                        or _chain_workload())
    _dp_interrupted_at(monkeypatch, 3)
    fr = serving.frontier("chain.onnx", None, [1, 2])
    assert loaded == [1] and programs["calls"] == 0
    assert not fr.proven and fr.stopped == "batch 1: interrupted", fr.stopped
    assert [p.max_load for p in fr.points] == pytest.approx([3.5])
