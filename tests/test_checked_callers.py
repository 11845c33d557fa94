"""Every caller that runs a solver function itself (not through :func:`solvers.registry.solve`) holds its
answer to the registry's rules (:func:`solvers.registry.checked`): a solver answer doctored to a wrong
objective raises at the call site, and one doctored to a dishonest status (``optimal`` with a 5% gap, or
a bound above its value) comes out not proven. The undoctored answers are checked against brute force
or the evaluator first, so each test can tell the doctoring apart."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from graphs.evaluate import evaluate
from graphs.latency import latency
from graphs.reference import Workload
from placement import serving_stages as ss
from placement.cluster.curves import graph_curve, problem_curve
from placement.provision import provision
from placement.serving import batch_frontier, best_under_latency, sweep
from solvers import registry
from solvers.base import Solution, SolveOptions, Status
from tests.brute_stages import all_plans, latency_targets
from tests.instances import random_instance
from tests.onnx_models import save, small_cnn
from tests.test_dp_stages import random_problem
from tests.test_slo import domain_points

ARGS = SimpleNamespace(time_limit=None, solver="dp")
DOCTORED = ("gap", "bound")  # the dishonest statuses; "value" (a wrong objective) raises


def doctor(sol: Solution, how: str) -> Solution:
    """``sol`` with a wrong objective (``value``: 10% high), or claiming ``optimal`` with a 5% gap
    (``gap``) or with a bound 10% above its value (``bound``); as it is for ``none``, or without a plan."""
    if how == "none" or not sol.found or not math.isfinite(sol.objective):
        return sol
    v = sol.objective
    if how == "value":
        return dataclasses.replace(sol, objective=1.1 * v)
    if how == "gap":
        return dataclasses.replace(sol, status=Status.OPTIMAL, bound=0.95 * v, gap=0.05)
    assert how == "bound"
    return dataclasses.replace(sol, status=Status.OPTIMAL, bound=1.1 * v, gap=0.0)


def doctored(monkeypatch, module, name: str, how: str) -> list[Solution]:
    """Replace ``module.name`` (a solver function) by one whose answers are doctored ``how``; the list
    receives each answer as the solver gave it."""
    real = getattr(module, name)
    given: list[Solution] = []

    def run(*a, **k):
        sol = real(*a, **k)
        given.append(sol)
        return doctor(sol, how)

    monkeypatch.setattr(module, name, run)
    return given


def honest(sol: Solution) -> bool:
    """Not claimed optimal beyond its proof: no bound above the value, optimal only with it closed."""
    if sol.bound is not None and sol.bound > sol.objective * (1 + 1e-6):
        return False
    return sol.status is not Status.OPTIMAL or (sol.bound is not None and sol.gap is not None
                                                 and sol.gap <= 1e-6)


# ------------------------------------------------------------------ the registry's one check


def _instance(seed: int = 0, hosts: bool | None = None):
    """A small inference instance (at most 4 devices; with host cores or without, if ``hosts`` says)
    that has a placement."""
    from solvers import dp

    rng = np.random.default_rng(seed)
    while True:
        inst = random_instance(rng, max_items=5, training=False)
        has_hosts = any(not k.pays_communication and k.count > 0 for k in inst.cluster.kinds)
        if inst.cluster.num_devices <= 4 and (hosts is None or has_hosts == hosts) and \
                dp.solve(inst.graph, inst.cluster).status is Status.OPTIMAL:
            return inst


def test_checked_takes_the_evaluators_value_and_holds_the_status_to_the_proof():
    from solvers import dp, slo_ip

    inst = _instance()
    g, cl = inst.graph, inst.cluster
    sol = dp.solve(g, cl)
    ok = registry.checked("dp", g, sol, cluster=cl)
    assert ok.status is Status.OPTIMAL
    assert ok.objective == pytest.approx(evaluate(g, cl, sol.assignment).max_load)
    with pytest.raises(AssertionError, match="the dp solver says"):
        registry.checked("dp", g, doctor(sol, "value"), cluster=cl)
    for how in DOCTORED:
        got = registry.checked("dp", g, doctor(sol, how), cluster=cl)
        assert got.status is Status.FEASIBLE and honest(got), how
    # the latency objective is the latency model's value of the placement
    low = slo_ip.solve(g, cl, minimise="latency")
    got = registry.checked("slo-ip", g, low, cluster=cl, objective="latency")
    assert got.objective == pytest.approx(latency(g, cl, low.assignment).total)
    assert got.objective == pytest.approx(min(lat for _, lat in domain_points(inst)), rel=1e-6)
    # a plan above a limit it was held to is a bug
    with pytest.raises(AssertionError, match="above its limit"):
        registry.checked("slo-ip", g, low, cluster=cl, objective="latency", latency_max=0.9 * got.objective)


def test_solve_runs_every_answer_through_checked(monkeypatch):
    inst = _instance()
    seen = []
    real = registry.checked
    monkeypatch.setattr(registry, "checked", lambda *a, **k: seen.append(a[0]) or real(*a, **k))
    registry.solve(inst.graph, inst.cluster, solver="dp")
    registry.solve(random_problem(np.random.default_rng(1)), solver="dp")
    assert seen == ["dp", "dp"]


# ------------------------------------------------------------------ placement.serving_stages


def _stage_problems(seed: int, count: int = 30):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        p = random_problem(rng)
        if p.graph.num_nodes <= 4:
            yield p


@pytest.fixture(scope="module")
def under_target():
    """A stage problem and a latency target whose answer is the integer program's under the target,
    proven (the stage optimum misses the target), checked against every plan."""
    for p in _stage_problems(5):
        plans = all_plans(p)
        for bound in latency_targets(plans) if plans else ():
            ans, _ = ss.best_plan(p, ARGS, latency=bound)
            if ans is not None and ans.how == "integer program under the target" and ans.proven:
                under = [e.objective for e in plans if e.latency <= bound * (1 + 1e-12)]
                assert ans.evaluation.objective == pytest.approx(min(under), rel=1e-9)
                return p, bound
    pytest.fail("no problem whose answer is the integer program under the target")


@pytest.mark.parametrize("how", DOCTORED)
def test_under_target_does_not_take_a_dishonest_optimal(under_target, monkeypatch, how):
    from solvers import ip_stages

    p, bound = under_target
    doctored(monkeypatch, ip_stages, "solve_problem", how)
    ans, _ = ss.best_plan(p, ARGS, latency=bound)
    assert not (ans.how.startswith("integer program") and ans.proven), ans
    assert ans.bound is None or ans.bound <= ans.evaluation.objective * (1 + 1e-9)


def test_under_target_raises_on_a_wrong_objective(under_target, monkeypatch):
    from solvers import ip_stages

    p, bound = under_target
    doctored(monkeypatch, ip_stages, "solve_problem", "value")
    with pytest.raises(AssertionError, match="the ip solver says"):
        ss.best_plan(p, ARGS, latency=bound)


@pytest.fixture(scope="module")
def frontier_problem():
    """A stage problem whose exact frontier has a proven point."""
    for p in _stage_problems(7):
        pts = ss.frontier_points(p, ARGS, 1)
        if any(pt.frontier for pt in pts):
            return p
    pytest.fail("no problem with a proven frontier point")


@pytest.mark.parametrize("how", DOCTORED)
def test_exact_frontier_proves_no_point_from_a_dishonest_optimal(frontier_problem, monkeypatch, how):
    from solvers import ip_stages

    doctored(monkeypatch, ip_stages, "solve_problem", how)
    pts = ss.frontier_points(frontier_problem, ARGS, 1)
    assert pts and not any(pt.frontier for pt in pts)


def test_exact_frontier_raises_on_a_wrong_objective(frontier_problem, monkeypatch):
    from solvers import ip_stages

    doctored(monkeypatch, ip_stages, "solve_problem", "value")
    with pytest.raises(AssertionError, match="the ip solver says"):
        ss.frontier_points(frontier_problem, ARGS, 1)


def test_lowest_latency_is_checked(monkeypatch):
    from solvers import ip_stages

    p = next(q for q in _stage_problems(3) if all_plans(q))
    ans = ss.lowest_latency(p)
    assert ans.status is Status.OPTIMAL
    assert ans.objective == pytest.approx(1e3 * min(e.latency for e in all_plans(p)), rel=1e-9)
    for how in DOCTORED:
        with monkeypatch.context() as m:
            doctored(m, ip_stages, "solve_problem", how)
            got = ss.lowest_latency(p)
        assert got.status is Status.FEASIBLE and honest(got), how
    doctored(monkeypatch, ip_stages, "solve_problem", "value")
    with pytest.raises(AssertionError, match="the ip solver says"):
        ss.lowest_latency(p)


# ------------------------------------------------------------------ placement.serving


def test_best_under_latency_checks_the_serving_program(monkeypatch):
    from solvers import dp, slo_ip

    inst = _instance(2)
    g, cl = inst.graph, inst.cluster
    start = dp.solve(g, cl).assignment
    target = max(lat for _, lat in domain_points(inst))
    opts = SolveOptions(warm_start=start, gap=1e-9)  # a warm start: the program, not the DP's shortcut
    sol = best_under_latency(g, cl, target, opts)
    want = min(load for load, lat in domain_points(inst) if lat <= target * (1 + 1e-9))
    assert sol.status is Status.OPTIMAL and sol.objective == pytest.approx(want, rel=1e-6)
    for how in DOCTORED:
        with monkeypatch.context() as m:
            doctored(m, slo_ip, "solve", how)
            got = best_under_latency(g, cl, target, opts)
        assert got.status is Status.FEASIBLE and honest(got), how
    doctored(monkeypatch, slo_ip, "solve", "value")
    with pytest.raises(AssertionError, match="the slo-ip solver says"):
        best_under_latency(g, cl, target, opts)


def test_best_under_latency_takes_no_shortcut_from_a_dishonest_dp(monkeypatch):
    """The DP's optimum within the target is the answer without a program only when it is proven: a DP
    answer claiming optimal with a 5% gap sends the search to the program."""
    from solvers import slo_ip

    inst = _instance(3, hosts=False)
    g, cl = inst.graph, inst.cluster
    target = max(lat for _, lat in domain_points(inst)) * 2
    assert "no plan serves more" in best_under_latency(g, cl, target).message  # the shortcut
    doctored(monkeypatch, slo_ip, "dp_start", "gap")
    ran = doctored(monkeypatch, slo_ip, "solve", "none")
    best_under_latency(g, cl, target)
    assert ran


def test_batch_frontier_checks_the_dp_and_the_programs(monkeypatch):
    from solvers import dp, slo_ip

    inst = _instance(4, hosts=False)
    w = Workload(inst.graph, inst.cluster)
    opts = SolveOptions(gap=1e-9)
    real = slo_ip.solve
    unlimited = []  # the programs for the max-load without a latency limit

    def spy(*a, **k):
        if k.get("minimise", "max-load") == "max-load" and math.isinf(k.get("latency_max", math.inf)):
            unlimited.append(k)
        return real(*a, **k)

    monkeypatch.setattr(slo_ip, "solve", spy)
    pts, proven = batch_frontier(w, opts)
    # without host cores the exact DP's optimum is the throughput end: no program runs for it
    assert proven and pts and not unlimited
    with monkeypatch.context() as m:
        doctored(m, dp, "solve", "gap")  # a DP optimum not proven: the program must find the end
        batch_frontier(w, opts)
    assert unlimited
    with monkeypatch.context() as m:
        doctored(m, dp, "solve", "value")
        with pytest.raises(AssertionError, match="the dp solver says"):
            batch_frontier(w, opts)
    monkeypatch.setattr(slo_ip, "solve", real)
    for how in DOCTORED:
        with monkeypatch.context() as m:
            doctored(m, slo_ip, "solve", how)
            assert not batch_frontier(w, opts)[1], how
    doctored(monkeypatch, slo_ip, "solve", "value")
    with pytest.raises(AssertionError, match="the slo-ip solver says"):
        batch_frontier(w, opts)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return save(small_cnn(), tmp_path_factory.mktemp("m") / "cnn.onnx")


def test_the_sweeps_lowest_latency_is_checked(cnn, monkeypatch):
    from solvers import slo_ip

    def run():
        return sweep(cnn, "t4:1,cpu:1", [1], latency_slo=1e-6, options=SolveOptions(time_limit=60))

    assert run().lowest_proven
    with monkeypatch.context() as m:
        doctored(m, slo_ip, "solve", "gap")
        assert not run().lowest_proven
    doctored(monkeypatch, slo_ip, "solve", "value")
    with pytest.raises(AssertionError, match="the slo-ip solver says"):
        run()


# ------------------------------------------------------------------ placement.provision


def test_provision_checks_the_dp_and_its_curve(monkeypatch):
    from solvers import dp

    inst = _instance(5)
    g, cl = inst.graph, inst.cluster
    prices = np.ones(len(cl.kinds))
    target = 1e3 / dp.solve(g, cl).objective  # the full cluster's throughput: some allocation meets it
    got = provision(g, cl, prices, target)
    assert got.proven and got.solution.objective == pytest.approx(
        dp.solve(g, cl.with_counts(got.best.counts)).objective)
    with monkeypatch.context() as m:
        doctored(m, dp, "solve", "gap")
        assert not provision(g, cl, prices, target).proven
    with monkeypatch.context() as m:
        doctored(m, dp, "solve", "value")
        with pytest.raises(AssertionError, match="the dp solver says"):
            provision(g, cl, prices, target)
    real = dp.curve  # a curve 10% off at every allocation disagrees with the DP there

    def off(*a, **k):
        c = real(*a, **k)
        return dataclasses.replace(c, values={key: 1.1 * v for key, v in c.values.items()})

    monkeypatch.setattr(dp, "curve", off)
    with pytest.raises(AssertionError, match="the throughput curve at"):
        provision(g, cl, prices, target * 0.5)


def test_provision_checks_the_lowest_latency(monkeypatch):
    from solvers import slo_ip

    inst = _instance(6)
    g, cl = inst.graph, inst.cluster
    prices = np.ones(len(cl.kinds))
    got = provision(g, cl, prices, 1e-3, latency_slo=1e-12)  # no allocation meets it
    low = got.lowest_latency
    assert got.best is None and low is not None and low.status is Status.OPTIMAL
    assert low.objective == pytest.approx(min(lat for _, lat in domain_points(inst)), rel=1e-6)
    with monkeypatch.context() as m:
        doctored(m, slo_ip, "solve", "gap")
        low = provision(g, cl, prices, 1e-3, latency_slo=1e-12).lowest_latency
        assert low.status is Status.FEASIBLE and honest(low)
    doctored(monkeypatch, slo_ip, "solve", "value")
    with pytest.raises(AssertionError, match="the slo-ip solver says"):
        provision(g, cl, prices, 1e-3, latency_slo=1e-12)


# ------------------------------------------------------------------ placement.cluster.curves


def test_the_stage_curve_checks_each_allocations_dp(monkeypatch):
    from solvers import dp_stages

    p = next(q for q in _stage_problems(8) if all_plans(q))
    assert problem_curve(p).exact
    with monkeypatch.context() as m:
        doctored(m, dp_stages, "solve_problem", "gap")
        assert not problem_curve(p).exact
    doctored(monkeypatch, dp_stages, "solve_problem", "value")
    with pytest.raises(AssertionError, match="the dp solver says"):
        problem_curve(p)


def test_the_per_count_curve_checks_auto(monkeypatch):
    from solvers import auto

    inst = _instance(9)
    assert graph_curve(inst.graph, inst.cluster, force_fallback=True).exact
    with monkeypatch.context() as m:
        doctored(m, auto, "solve", "gap")
        assert not graph_curve(inst.graph, inst.cluster, force_fallback=True).exact
    doctored(monkeypatch, auto, "solve", "value")
    with pytest.raises(AssertionError, match="the auto solver says"):
        graph_curve(inst.graph, inst.cluster, force_fallback=True)


def test_a_host_points_placement_is_checked_against_the_curve(monkeypatch):
    from solvers import dp

    for seed in range(10, 40):  # an instance whose curve has a point on host cores
        inst = _instance(seed, hosts=True)
        host = [not k.pays_communication for k in inst.cluster.kinds]
        c = graph_curve(inst.graph, inst.cluster)
        if any(any(x and h for x, h in zip(pt.counts, host)) for pt in c.points):
            break
    else:
        pytest.fail("no curve with a point on host cores")
    with monkeypatch.context() as m:
        doctored(m, dp, "solve", "value")
        with pytest.raises(AssertionError, match="the dp solver says"):
            graph_curve(inst.graph, inst.cluster)
    real = dp.curve

    def off(*a, **k):
        cv = real(*a, **k)
        return dataclasses.replace(cv, values={key: 1.1 * v for key, v in cv.values.items()})

    monkeypatch.setattr(dp, "curve", off)
    with pytest.raises(AssertionError, match="the throughput curve at"):
        graph_curve(inst.graph, inst.cluster)
