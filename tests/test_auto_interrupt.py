"""A Ctrl-C that ``auto``'s steps take (the DP and HiGHS catch it and return what they have, saying
"interrupted") ends ``auto`` at once, and its answer says so: its callers (the serving sweep, the
frontier, ``cluster simulate``) stop on :attr:`solvers.base.Solution.interrupted`."""

from __future__ import annotations

import numpy as np
import pytest

from graphs.evaluate import evaluate
from solvers import auto, dp
from solvers.base import Solution, SolveOptions, Status
from tests.instances import chain


@pytest.fixture
def sweeps(monkeypatch):
    """A stand-in for the DP's chunk loop that takes the Ctrl-C in its ``at``-th call (what
    :func:`solvers.dp._sweep` returns when it lands in its first chunk); ``calls`` counts them."""
    real = dp._sweep
    state = {"at": 0, "calls": 0}

    def sweep(*args, **kw):
        state["calls"] += 1
        if state["calls"] == state["at"]:
            return 0, 0, False, True
        return real(*args, **kw)

    monkeypatch.setattr(dp, "_sweep", sweep)
    return state


def test_a_ctrl_c_the_dp_takes_ends_auto_with_what_it_has(sweeps, monkeypatch):
    """A chain of 6 unit operators (comm 0.5) on 2 GPUs: the DP over 2 topological orders, then the
    lattice and its tie-break pass, 4 DP runs. By hand the optimum is 3 operators a device, 3 + 0.5 =
    3.5 (2/4: 4.5). A Ctrl-C in an order's run was lost (auto ran the other order and the lattice and
    returned 'exact' without a word), and so was one in the tie-break pass."""
    inst = chain(6)
    after: list[str] = []
    real_refine = auto.refine
    monkeypatch.setattr(auto, "refine", lambda *a, **k: after.append("refine") or real_refine(*a, **k))
    whole = auto.solve(inst.graph, inst.cluster)
    assert whole.status is Status.OPTIMAL and whole.objective == pytest.approx(3.5)
    assert not whole.interrupted and sweeps["calls"] == 4
    for at in range(1, 5):
        sweeps.update(at=at, calls=0)
        after.clear()
        sol = auto.solve(inst.graph, inst.cluster)
        assert sol.interrupted, (at, sol.message)
        assert sweeps["calls"] == at and not after, (at, sweeps["calls"], after)  # nothing ran after it
        if at == 1:  # nothing found yet
            assert sol.status is Status.STOPPED and sol.assignment is None
        elif at < 4:  # the first order's plan (on a chain, its prefixes are every split): not proven
            assert sol.status is Status.FEASIBLE and sol.objective == pytest.approx(3.5)
        else:  # the tie-break pass: the first pass's optimum is proven all the same
            assert sol.status is Status.OPTIMAL and sol.objective == pytest.approx(3.5)
        if sol.assignment is not None:
            assert evaluate(inst.graph, inst.cluster, sol.assignment).max_load == pytest.approx(3.5)


def test_a_ctrl_c_the_integer_program_takes_reaches_autos_caller(monkeypatch):
    """With the lattice over the memory budget (memory_limit: 3 ideals) auto's path is the heuristic,
    the refinement and the contiguous IP. An IP that took the Ctrl-C returns its start saying so (as
    solvers._milp does); auto's answer said 'heuristic' only, and the caller went on."""
    from solvers import registry

    inst = chain(6)
    ran = []

    def interrupted_ip(graph, cluster, options):
        ran.append(options.warm_start)
        a = np.asarray(options.warm_start)
        return Solution(a, evaluate(graph, cluster, a).max_load, Status.FEASIBLE, "ip",
                        message="interrupted (Ctrl-C); best placement so far")

    real = registry.get_solver
    monkeypatch.setattr(registry, "get_solver", lambda name: interrupted_ip if name == "ip" else real(name))
    sol = auto.solve(inst.graph, inst.cluster, SolveOptions(raw={"memory_limit": 3 * 400}))
    assert len(ran) == 1 and sol.stats["path"] == "heuristic"
    assert sol.interrupted and sol.status is Status.FEASIBLE, (sol.status, sol.message)
    assert sol.objective == pytest.approx(3.5)


def test_a_ctrl_c_in_the_refinement_keeps_the_plan_found(monkeypatch):
    """The same heuristic path: a Ctrl-C during the refinement of the heuristic's plan raised out of
    auto, dropping that plan (the command exited 130 with nothing). Now the plan is the answer, not
    proven, said interrupted, and the IP does not run."""
    from solvers import registry

    inst = chain(6)

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(auto, "refine", ctrl_c)
    real = registry.get_solver
    monkeypatch.setattr(registry, "get_solver",
                        lambda name: pytest.fail("the IP ran after a Ctrl-C") if name == "ip" else real(name))
    sol = auto.solve(inst.graph, inst.cluster, SolveOptions(raw={"memory_limit": 3 * 400}))
    assert sol.interrupted and sol.status is Status.FEASIBLE and sol.assignment is not None, sol.message
    assert sol.objective == pytest.approx(evaluate(inst.graph, inst.cluster, sol.assignment).max_load)
