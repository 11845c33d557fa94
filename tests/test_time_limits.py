"""Every solver honours --time-limit: it returns within the limit (10%, plus a little process noise on a
shared machine) with its best placement and an honest status."""

import os
import time

import pytest

from graphs.evaluate import evaluate
from graphs.reference import read_workload
from solvers.base import SolveOptions, Status
from solvers.registry import SOLVERS, get_solver, solve, solver_names

LIMIT = 3.0


def _form(name: str) -> str | None:
    """Stage-only solvers (data-parallel) run on the d = t = 1 stage problem of the graph."""
    return None if SOLVERS[name].pipeline else "stages"


@pytest.fixture(scope="module")
def hard(workloads):
    w = read_workload(os.path.join(workloads, "throughput-inputs/LayerGraphs/inceptionv3_training.json"))
    # load every solver's compiled kernels first: the limit is about the search, not the JIT
    from tests.instances import chain

    small = chain(4)
    for name in solver_names():
        if name != "expert":
            solve(small.graph, small.cluster, solver=name, options=SolveOptions(time_limit=5),
                  form=_form(name))
    get_solver("dp")(w.graph, w.cluster, SolveOptions(time_limit=1.0))  # the DP's parallel kernel
    return w


@pytest.mark.parametrize("name", [n for n in solver_names() if n not in ("expert", "greedy-latency")])
def test_solver_honours_the_time_limit(hard, name):
    t = time.perf_counter()
    sol = solve(hard.graph, hard.cluster, solver=name, options=SolveOptions(time_limit=LIMIT),
                form=_form(name))
    took = time.perf_counter() - t
    assert took <= LIMIT * 1.1 + 1.0, f"{name} took {took:.2f} s for a {LIMIT} s limit"
    if sol.status is Status.OPTIMAL:
        assert sol.gap is not None and sol.gap <= 1e-4
    if sol.assignment is not None:
        ev = evaluate(hard.graph, hard.cluster, sol.assignment)
        assert ev.valid
