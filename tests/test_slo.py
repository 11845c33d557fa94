"""Throughput under a latency target (and latency under a throughput target) against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.contract import colocation_items
from graphs.evaluate import evaluate
from graphs.latency import latency
from solvers import _milp, slo_ip
from solvers.base import SolveOptions, Status
from tests.instances import canonical_assignments, random_instance


def domain_points(inst):
    """(max-load, latency) of every serving-domain placement, up to renaming identical devices."""
    g, cl = inst.graph, inst.cluster
    cls, C = colocation_items(g)
    out = []
    for items_dev in canonical_assignments(C, cl):
        a = np.asarray(items_dev, np.int64)[cls]
        ev = latency(g, cl, a)
        if not ev.valid or not math.isfinite(ev.total) or max(ev.subgraphs_per_device().values(),
                                                                 default=0) > 1:
            continue
        out.append((evaluate(g, cl, a).max_load, ev.total))
    return out


def _instances(n, seed):
    rng = np.random.default_rng(seed)
    k = 0
    while k < n:
        inst = random_instance(rng, max_items=5, training=False)
        if inst.cluster.num_devices > 5:
            continue
        k += 1
        yield inst, rng


@pytest.mark.parametrize("seed", range(3))
def test_slo_equals_brute_force(seed):
    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    for inst, rng in _instances(8, seed):
        pts = domain_points(inst)
        g, cl = inst.graph, inst.cluster
        if not pts:
            sol = slo_ip.solve(g, cl, opts)
            assert sol.status == Status.INFEASIBLE
            continue
        lats = sorted(p[1] for p in pts)
        targets = [lats[0] * 0.999 - 1e-6, lats[0], lats[int(rng.integers(len(lats)))], math.inf]
        for L in targets:
            want = min((p[0] for p in pts if p[1] <= L * (1 + 1e-9) + 1e-12), default=math.inf)
            sol = slo_ip.solve(g, cl, opts, latency_max=L)
            if not math.isfinite(want):
                assert sol.status == Status.INFEASIBLE, (inst.label, L)
                continue
            assert sol.status == Status.OPTIMAL, (sol.status, sol.message)
            a = sol.assignment
            assert evaluate(g, cl, a).max_load == pytest.approx(sol.objective, rel=1e-9)
            assert latency(g, cl, a).total <= L * (1 + 1e-9) + 1e-12
            assert sol.objective == pytest.approx(want, rel=1e-6, abs=1e-9), (L, pts)


@pytest.mark.parametrize("seed", range(2))
def test_latency_under_a_throughput_target_equals_brute_force(seed):
    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    for inst, rng in _instances(8, 100 + seed):
        pts = domain_points(inst)
        if not pts:
            continue
        loads = sorted(p[0] for p in pts)
        for U in (loads[0], loads[int(rng.integers(len(loads)))], math.inf):
            want = min(p[1] for p in pts if p[0] <= U * (1 + 1e-9) + 1e-12)
            sol = slo_ip.solve(inst.graph, inst.cluster, opts, minimise="latency", max_load_max=U)
            assert sol.status == Status.OPTIMAL
            assert sol.objective == pytest.approx(want, rel=1e-6, abs=1e-9)
            assert sol.stats["max_load"] <= U * (1 + 1e-9) + 1e-12
            assert sol.bound <= sol.objective  # not above it by the rounding of the program's scaling


def test_latency_path_bound_is_the_one_subgraph_one_and_stays_below_brute_force():
    """Minimising latency, the solver's path bound is :func:`latency_bound` for one subgraph per
    accelerator (its domain): never above the domain's optimum, and stronger than the general bound on
    some of these instances (so dropping the domain would show)."""
    from solvers.latency_ip import latency_bound

    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    stronger = 0
    for seed in range(3):
        for inst, _ in _instances(8, 300 + seed):
            pts = domain_points(inst)
            if not pts:
                continue
            sol = slo_ip.solve(inst.graph, inst.cluster, opts, minimise="latency")
            lb = sol.stats["path_bound"]
            assert lb <= min(p[1] for p in pts) * (1 + 1e-9) + 1e-12, inst.label
            general = latency_bound(inst.graph, inst.cluster)
            assert lb >= general * (1 - 1e-9) - 1e-12, inst.label
            stronger += lb > general * (1 + 1e-9) + 1e-12
    assert stronger > 0


def interrupted_once(monkeypatch, plan: bool = True) -> list:
    """``solvers.dp.solve`` as a Ctrl-C during its first run leaves it (the DP takes the
    ``KeyboardInterrupt`` and returns the plan it has, "interrupted", nothing proven; with ``plan``
    false, before it had one); later runs are real, as they are once the one Ctrl-C has been taken.
    Returns the runs' time limits."""
    import dataclasses

    from solvers import dp
    from solvers.base import Solution

    real, runs = dp.solve, []

    def solve(graph, cluster, options=None):
        runs.append(None if options is None else options.time_limit)
        sol = real(graph, cluster, options)
        if len(runs) > 1 or sol.assignment is None:
            return sol
        if not plan:
            return Solution(None, math.inf, Status.STOPPED, "dp",
                            message="interrupted before any placement was found")
        return dataclasses.replace(sol, status=Status.FEASIBLE, bound=None, gap=None,
                                   message="interrupted; best placement over a few topological orders "
                                           "returned (not proven optimal)")

    monkeypatch.setattr(dp, "solve", solve)
    return runs


@pytest.mark.parametrize("target", [math.inf, 6.0])
def test_a_ctrl_c_the_dp_start_took_ends_the_search_under_a_latency_target(monkeypatch, target):
    """``place --latency-slo X --max-replicas 1`` (serving.best_under_latency) lost a Ctrl-C: when the DP
    start took it, it ran slo_ip.solve in full, which ran the DP again and then the integer program (to
    the time limit, none by default). The DP now runs once (solvers.slo_ip.dp_start, for both) and its
    Ctrl-C stops the search, no program run, no other start tried: the DP's plan, ``feasible``, marked
    interrupted, where it meets the target, else ``stopped``, no plan. Without a target that is the DP's
    plan (by the evaluator); a chain of 6 unit nodes on 2 GPUs has latency 6 on one GPU alone and more
    when split (a transfer of 0.5 on the way), and the DP's plan is split: it misses a target of 6."""
    from placement.serving import best_under_latency
    from solvers import dp
    from tests.instances import chain

    inst = chain(6)
    g, cl = inst.graph, inst.cluster
    plan = dp.solve(g, cl, SolveOptions()).assignment
    assert len(set(plan.tolist())) == 2 and latency(g, cl, plan).total > 6.0
    runs = interrupted_once(monkeypatch)
    sol = best_under_latency(g, cl, target, SolveOptions())
    assert len(runs) == 1, runs
    assert sol.interrupted and sol.status is not Status.OPTIMAL and "mip_status" not in sol.stats, sol.message
    if math.isinf(target):
        assert sol.status is Status.FEASIBLE and sol.message.startswith("interrupted (Ctrl-C): best start")
        assert sol.stats["returned"] == "dp" and np.array_equal(sol.assignment, plan)
        assert sol.objective == pytest.approx(evaluate(g, cl, plan).max_load)
    else:
        assert sol.status is Status.STOPPED and sol.assignment is None
        assert sol.message == "interrupted (Ctrl-C) before any placement was found"


def test_the_dp_start_never_runs_past_the_time_left(monkeypatch):
    """best_under_latency gave its DP start max(0.5, 0.3 t) s: 0.5 s with 0.1 s left. Both DP starts
    (solvers.slo_ip.dp_start) now get 0.3 of the time left, at least 0.5 s, never more than is left."""
    from placement.serving import best_under_latency
    from solvers import dp
    from tests.instances import chain

    real, runs = dp.solve, []

    def spy(graph, cluster, options=None):
        runs.append(options.time_limit)
        return real(graph, cluster, options)

    monkeypatch.setattr(dp, "solve", spy)
    g, cl = chain(6).graph, chain(6).cluster
    best_under_latency(g, cl, 5.0, SolveOptions(time_limit=0.1))
    assert len(runs) == 1 and runs[0] <= 0.1, runs
    runs.clear()
    slo_ip.solve(g, cl, SolveOptions(time_limit=0.1), latency_max=5.0)  # the program's own start
    assert len(runs) == 1 and runs[0] <= 0.1, runs
    for left, share in ((None, None), (10.0, 3.0), (1.0, 0.5), (0.1, 0.1), (0.0, 0.0)):
        slo_ip.dp_start(g, cl, left)
        assert runs[-1] == (share if share is None else pytest.approx(share)), left


@pytest.mark.parametrize("minimise", ["max-load", "latency"])
def test_a_bound_above_the_plans_value_is_never_a_closed_gap(monkeypatch, minimise):
    """The serving program clamped HiGHS's bound to the plan's value: a bound far above it (a model that
    disagrees with the evaluator) read as a closed gap, "optimal". It is now judged as every solver's
    (solvers.base.check_bound): not trusted, so not proven (the latency's path bound still stands)."""
    import dataclasses

    from solvers import _milp

    real = _milp.solve_mip

    def doctored(*a, **k):
        res = real(*a, **k)
        return dataclasses.replace(res, bound=1e9) if res.status == _milp.OPTIMAL else res

    inst, _ = next(_instances(1, 7))
    opts = SolveOptions(gap=1e-9, raw={"dp_warm_start": False})
    honest = slo_ip.solve(inst.graph, inst.cluster, opts, minimise=minimise)
    assert honest.status == Status.OPTIMAL
    monkeypatch.setattr(_milp, "solve_mip", doctored)
    sol = slo_ip.solve(inst.graph, inst.cluster, opts, minimise=minimise)
    assert sol.objective == pytest.approx(honest.objective)
    assert sol.stats["bound_mismatch"] == 1e9
    if minimise == "max-load":
        assert sol.status == Status.FEASIBLE and sol.bound is None
    else:  # the path bound, which does not depend on the program, remains
        assert sol.bound == pytest.approx(min(sol.stats["path_bound"], sol.objective))
        assert sol.status == (Status.OPTIMAL if sol.gap <= 1e-6 else Status.FEASIBLE)


@pytest.mark.parametrize("fallback, proven", [(2.0, True), (1.5, False), (None, False)])
def test_the_one_verdict_rule_trusts_a_model_free_bound_beside_a_mismatched_one(fallback, proven):
    """Every integer program reports by ``_milp.judge``: a bound above the evaluated value (its model
    disagrees with the evaluator) is dropped, and a model-free bound that meets the value still proves
    the placement (by hand: value 2, fallback 2 -> gap 0; fallback 1.5 -> gap 0.25; none -> no bound)."""
    res = _milp.MipResult(_milp.OPTIMAL, np.zeros(1), 2.0, 1e9, 0.1, "", {})
    v = _milp.judge(res, 2.0, fallback, 1e-4, what="latency", kept="the path bound")
    assert v.mismatch == 1e9 and v.proven is proven
    assert v.bound == fallback and v.gap == (None if fallback is None else (2.0 - fallback) / 2.0)
    assert "disagrees with the evaluator" in v.message
