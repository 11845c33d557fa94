"""The contiguous MILP for replicated pipelines (solvers/ip_stages.py): equal to the exact DP
(dp-replicated, itself checked against brute force) on small random instances under every schedule,
warm starts, honest statuses under a time limit, and the registry form on the pipeline model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.model import DeviceKind
from graphs.parallel import (
    SCHEDULES,
    ParallelGraph,
    ParallelProblem,
    Stage,
    Variant,
    evaluate_plan,
)
from solvers.base import SolveOptions, Status
from solvers.dp_stages import solve_problem as dp_solve
from solvers.ip_stages import solve_problem
from solvers.registry import solve
from tests.test_dp_stages import random_problem


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_equals_the_exact_dp_on_random_instances(schedule):
    rng = np.random.default_rng(SCHEDULES.index(schedule))
    feasible = 0
    for _ in range(40):
        p = random_problem(rng).with_options(schedule=schedule)
        want = dp_solve(p)
        r = solve_problem(p, gap=1e-9)
        if want.status is Status.INFEASIBLE:
            assert r.status is Status.INFEASIBLE and r.plan is None
            continue
        feasible += 1
        assert r.status is Status.OPTIMAL, r.message
        ev = evaluate_plan(p, r.plan)
        assert ev.valid, ev.problems
        assert r.objective == ev.objective
        assert r.objective == pytest.approx(want.objective, rel=1e-7, abs=1e-12)
        # the proof travels with the answer: its bound and gap, not only its message
        assert r.bound is not None and r.bound <= r.objective * (1 + 1e-9)
        assert r.bound == pytest.approx(want.objective, rel=1e-6, abs=1e-12) and r.gap <= 1e-6
    assert feasible >= 20  # the comparison must not be vacuous


def _chain_problem(n: int = 40, devices: int = 8, N: int = 8) -> ParallelProblem:
    """A chain of ``n`` nodes, each with a vanilla and a recompute variant (t = 1) and a t = 2 split."""
    rng = np.random.default_rng(5)
    tensors = [(u, [u + 1], [float(rng.uniform(0.1, 0.5))]) for u in range(n - 1)]
    V = []
    for u in range(n):
        x = float(rng.uniform(1, 3))
        V.append(Variant(u, 0, 1, "vanilla", x, params=5.0, a=2.0, b=4.0, w=2.0))
        V.append(Variant(u, 0, 1, "recompute", 1.3 * x, params=5.0, a=0.5, b=4.0, w=2.0))
        V.append(Variant(u, 0, 2, "vanilla", 0.6 * x, params=2.5, a=1.0, b=2.0, w=1.0))
    g = ParallelGraph.build(ids=list(range(n)), names=None, num_kinds=1, edges=[], tensors=tensors,
                            variants=V)
    return ParallelProblem(g, (DeviceKind("gpu", devices, 60.0, bandwidth=10.0),), N, "1f1b")


@pytest.mark.parametrize("start", ["dp", "pipedream", "dp-replicated", "pipedream-replicated"])
def test_warm_start_is_used_and_never_lost(start):
    p = _chain_problem(n=12, devices=4, N=4)
    r = solve_problem(p, warm_start=start, time_limit=60)
    assert r.stats["warm_start"] is not None
    assert r.plan is not None and evaluate_plan(p, r.plan).valid
    assert r.objective <= r.stats["warm_start"] * (1 + 1e-12)
    if r.status is Status.OPTIMAL:
        assert r.objective == pytest.approx(dp_solve(p).objective, rel=1e-6)


def test_time_limit_gives_feasible_with_bound_and_gap():
    p = _chain_problem()
    from solvers.pipedream_stages import solve_problem as pipedream

    start = pipedream(p).plan
    r = solve_problem(p, warm_start=start, time_limit=0.05)
    assert r.status is Status.FEASIBLE
    assert r.plan is not None and evaluate_plan(p, r.plan).valid
    assert "gap" in r.message
    best = dp_solve(p).objective
    assert r.objective >= best * (1 - 1e-9)
    bound = r.stats["bound"]
    assert bound is None or bound <= best * (1 + 1e-6)
    assert r.stats["gap"] is None or 0.0 <= r.stats["gap"] <= 1.0
    # the result's own fields carry what the message says (the CLI's summary and JSON read them)
    assert r.bound == bound and r.gap == pytest.approx(r.stats["gap"], rel=1e-12)


def test_invalid_warm_start_is_an_input_error():
    p = _chain_problem(n=4, devices=2, N=2)
    with pytest.raises(InputError, match="warm-start"):
        solve_problem(p, warm_start=[Stage((0, 1), 0, 1, 1, (0, 2))])
    with pytest.raises(InputError, match="unknown warm start"):
        solve_problem(p, warm_start="nope")


def test_registry_form_equals_the_pipeline_dp():
    from solvers.dp import solve as pipeline_dp
    from tests.instances import random_instance

    rng = np.random.default_rng(11)
    for _ in range(15):
        inst = random_instance(rng, max_items=5)
        a = pipeline_dp(inst.graph, inst.cluster)
        b = solve(inst.graph, inst.cluster, solver="ip", options=SolveOptions(gap=1e-9), form="stages")
        if a.status is Status.INFEASIBLE:
            assert b.status is Status.INFEASIBLE
            continue
        assert b.status is Status.OPTIMAL, b.message
        assert b.objective == pytest.approx(a.objective, rel=1e-7)
        assert math.isfinite(b.bound) and b.gap is not None


def test_a_limit_before_any_plan_is_stopped():
    """Cold (no warm start) at a limit too short for a first plan: status ``stopped``, no plan, nothing
    claimed (not ``feasible`` without a plan, not ``infeasible`` without a proof)."""
    r = solve_problem(_chain_problem(), time_limit=0.0)
    assert r.plan is None and r.status is Status.STOPPED and "time limit" in r.message


@pytest.mark.parametrize("count,least", [
    (24, (36, 10)),
    pytest.param(60, (40, 5), marks=pytest.mark.slow),  # the first 24 and 36 more, in the slow run
])
def test_under_a_latency_target_equals_brute_force(count, least):
    """latency_max: the most samples/s among plans whose latency meets the target, equal to an
    independent brute force over every plan (tests/brute_stages.py) on small random instances, at
    targets between the least latency and the throughput optimum's; infeasible exactly when no plan
    meets it. The default run checks the first 24 problems of the seed; the slow run all 60 (the
    original size; about 17 s on 2 cores)."""
    from tests.brute_stages import all_plans, latency_targets

    rng = np.random.default_rng(11)
    checked = infeasible = 0
    for _ in range(count):
        p = random_problem(rng)
        plans = all_plans(p)
        if not plans:
            continue
        for target in latency_targets(plans, below=0.99):
            meets = [e.objective for e in plans if e.latency <= target * (1 + 1e-9)]
            r = solve_problem(p, gap=1e-9, latency_max=target)
            if not meets:
                assert r.status is Status.INFEASIBLE and r.plan is None, (r.status, r.message)
                infeasible += 1
                continue
            assert r.status is Status.OPTIMAL, r.message
            ev = evaluate_plan(p, r.plan)
            assert ev.valid and ev.latency <= target * (1 + 1e-9)
            assert r.objective == pytest.approx(min(meets), rel=1e-7, abs=1e-12)
            checked += 1
    assert checked >= least[0] and infeasible >= least[1], (checked, infeasible)  # neither side vacuous


@pytest.mark.parametrize("count,least", [
    (24, (45, 15, 15)),
    pytest.param(60, (60, 20, 10), marks=pytest.mark.slow),  # the first 24 and 36 more, in the slow run
])
def test_least_latency_under_a_time_cap_equals_brute_force(count, least):
    """objective="latency": the least latency among plans whose time per sample is at most the cap,
    equal to an independent brute force over every plan on small random instances (caps from the
    throughput optimum to the slowest plan, and one below every plan: infeasible); the two limits
    together too. The default run checks the first 24 problems of the seed; the slow run all 60 (the
    original size; about 12 s on 2 cores)."""
    from tests.brute_stages import all_plans

    rng = np.random.default_rng(23)
    checked = infeasible = both = 0
    for _ in range(count):
        p = random_problem(rng)
        plans = all_plans(p)
        if not plans:
            continue
        times = sorted({e.objective for e in plans})
        for cap in (times[0] * 0.99, times[0], times[len(times) // 2], None):
            under = [e.latency for e in plans if cap is None or e.objective <= cap * (1 + 1e-9)]
            r = solve_problem(p, gap=1e-9, objective="latency", max_load_max=cap)
            if not under:
                assert r.status is Status.INFEASIBLE and r.plan is None, (r.status, r.message)
                infeasible += 1
                continue
            assert r.status is Status.OPTIMAL, r.message
            ev = evaluate_plan(p, r.plan)
            assert ev.valid and (cap is None or ev.objective <= cap * (1 + 1e-9))
            assert r.objective == ev.latency
            assert r.objective == pytest.approx(min(under), rel=1e-7, abs=1e-12)
            assert r.stats["bound"] <= r.objective
            checked += 1
        # both limits: the least latency under the median cap, among plans meeting a latency target
        cap, lat = times[len(times) // 2], sorted(e.latency for e in plans)[len(plans) // 2]
        under = [e.latency for e in plans
                 if e.objective <= cap * (1 + 1e-9) and e.latency <= lat * (1 + 1e-9)]
        r = solve_problem(p, gap=1e-9, objective="latency", max_load_max=cap, latency_max=lat)
        if under:
            assert r.status is Status.OPTIMAL
            assert r.objective == pytest.approx(min(under), rel=1e-7, abs=1e-12)
            both += 1
        else:
            assert r.status is Status.INFEASIBLE
    assert checked >= least[0] and infeasible >= least[1] and both >= least[2], (checked, infeasible, both)


def test_latency_objective_options_are_checked():
    p = _chain_problem(6, 4, 4)
    with pytest.raises(InputError, match="objective"):
        solve_problem(p, objective="throughput")
    with pytest.raises(InputError, match="max_load_max"):
        solve_problem(p, max_load_max=1.0)  # a cap on the time per sample belongs to the latency objective
