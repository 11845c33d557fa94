"""A Ctrl-C that an allocation's solve takes (the DP start or HiGHS catch it and return what they have,
saying "interrupted") ends the cheapest-first search of :func:`placement.provision.provision` there,
also where no ``stop`` says so (a library call): no allocation after it is solved."""

from __future__ import annotations

import dataclasses

import pytest

from placement import provision as prov
from placement import serving
from solvers.base import Status
from tests.instances import chain


@pytest.fixture
def solves(monkeypatch):
    """best_under_latency, counted by allocation; the one solved ``interrupt``-th answers as after a
    Ctrl-C its DP start took (feasible, 'interrupted (Ctrl-C): ...')."""
    real = serving.best_under_latency
    state = {"on": [], "interrupt": 0}

    def solve(graph, cluster, latency_max, options=None, **kw):
        state["on"].append(cluster.num_devices)
        sol = real(graph, cluster, latency_max, options, **kw)
        if len(state["on"]) == state["interrupt"]:
            msg = "interrupted (Ctrl-C): best start (dp) returned, not proven optimal"
            sol = dataclasses.replace(sol, status=Status.FEASIBLE, message=msg)
        return sol

    monkeypatch.setattr(serving, "best_under_latency", solve)
    return state


def test_a_ctrl_c_an_allocations_solve_takes_ends_the_search(solves):
    """A chain of 6 unit operators (comm 0.5) on up to 3 GPUs at 1 each, target 1000 / 3.2 = 312.5
    samples/s. By hand: 1 GPU is ruled out by its bound (6 ms, 167/s), 2 GPUs serve at best 3 + 0.5 =
    3.5 ms (286/s, short), 3 GPUs 2 + 0.5 + 0.5 = 3 ms (333/s): the answer. The solve on 2 GPUs taking
    the Ctrl-C ends the search there; it went on to solve 3 GPUs."""
    inst = chain(6, counts=(3,))
    target, slo = 1000 / 3.2, 100.0
    whole = prov.provision(inst.graph, inst.cluster, [1.0], target, latency_slo=slo)
    assert solves["on"] == [2, 3] and whole.best is not None and whole.best.counts == (3,)
    assert whole.best.max_load == pytest.approx(3.0) and whole.proven
    solves.update(on=[], interrupt=1)
    got = prov.provision(inst.graph, inst.cluster, [1.0], target, latency_slo=slo)
    assert solves["on"] == [2], solves["on"]
    assert got.best is None and not got.proven and got.stopped == "interrupted", got.stopped
    assert got.lowest_latency is None  # nor the lowest-latency program after it
    assert [a.max_load for a in got.efficient] == pytest.approx([3.5])  # what was found, kept
