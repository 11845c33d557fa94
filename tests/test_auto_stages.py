"""``auto`` on the replicated model (solvers/auto_stages.py) and the chain coarsening it uses
(graphs/coarsen.py): never better than the exact DP's optimum, equal when the exact path runs,
labels that say what was proven, coarse plans that map back to valid plans of the same value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.coarsen import merge_stage_chains
from graphs.parallel import SCHEDULES, evaluate_plan
from solvers.auto_stages import LABELS, solve_problem
from solvers.base import SolveOptions, Status
from solvers.dp_stages import solve_problem as dp_solve
from solvers.registry import solve
from tests.test_dp_stages import random_problem
from tests.test_ip_stages import _chain_problem


def test_coarse_plans_map_back_with_the_same_value():
    rng = np.random.default_rng(21)
    merged = checked = 0
    for _ in range(150):
        p = random_problem(rng)
        co = merge_stage_chains(p, 1)
        merged += p.graph.num_nodes - co.problem.graph.num_nodes
        assert sorted(u for m in co.members for u in m) == list(range(p.graph.num_nodes))
        r = dp_solve(co.problem)
        if r.plan is None:
            continue
        ev = evaluate_plan(p, co.expand(r.plan))
        assert ev.valid, ev.problems
        assert ev.objective == pytest.approx(r.objective, rel=1e-9, abs=1e-12)
        assert ev.objective >= dp_solve(p).objective * (1 - 1e-9)
        checked += 1
    assert merged >= 10 and checked >= 50


def test_chain_merges_multiply_variants_within_the_cap():
    p = _chain_problem(n=10, devices=4, N=4)
    co = merge_stage_chains(p, 1, max_variants=4)  # two t=1 variants per node: pairs only (2 x 2 = 4)
    assert co.problem.graph.num_nodes <= 7  # a matching of the 9 chain edges, greedily
    assert all(len(m) <= 2 for m in co.members)
    assert max(len(v) for v in co.problem.graph.options.values()) == 4
    r = dp_solve(co.problem)
    ev = evaluate_plan(p, co.expand(r.plan))
    assert ev.valid and ev.objective == pytest.approx(r.objective, rel=1e-9)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_exact_path_equals_the_dp(schedule):
    rng = np.random.default_rng(100 + SCHEDULES.index(schedule))
    for _ in range(20):
        p = random_problem(rng).with_options(schedule=schedule)
        want = dp_solve(p)
        r = solve_problem(p)
        # the one-device-per-stage step runs first (its plan a bound for the DP), then the exact DP
        assert r.stats["label"] == "exact" and r.stats["path"] in (["dp"], ["pipeline d=t=1", "dp"])
        assert r.status is want.status
        if want.plan is not None:
            assert r.objective == want.objective


@pytest.mark.parametrize("seed", range(3))
def test_forced_coarsening_is_never_better_than_the_optimum(seed):
    rng = np.random.default_rng(200 + seed)
    labels = set()
    for _ in range(20):
        p = random_problem(rng)
        want = dp_solve(p)
        r = solve_problem(p, max_ideals=1, ip_time=5.0)  # no ideals fit: coarsening, then the MILP
        assert r.stats["label"] in LABELS
        labels.add(r.stats["label"])
        assert "dp" not in r.stats["path"]
        if r.plan is None:
            assert want.plan is None or r.status is not Status.INFEASIBLE
            continue
        ev = evaluate_plan(p, r.plan)
        assert ev.valid, ev.problems
        assert r.objective == ev.objective
        if want.plan is not None:
            assert r.objective >= want.objective * (1 - 1e-9)
            if r.status is Status.OPTIMAL:
                assert r.stats["label"] == "exact"
                assert r.objective == pytest.approx(want.objective, rel=1e-6)
        else:
            assert r.status is Status.INFEASIBLE
    assert "exact" in labels


def test_coarsened_without_refinement_is_labelled_so():
    p = _chain_problem(n=30, devices=4, N=4)
    r = solve_problem(p, max_ideals=20, refine=False)
    assert r.stats["label"] == "exact-on-coarsened" and r.status is Status.FEASIBLE
    assert any("merged nodes" in s for s in r.stats["path"])
    assert evaluate_plan(p, r.plan).valid
    assert r.objective >= dp_solve(p).objective * (1 - 1e-9)
    refined = solve_problem(p, max_ideals=20, ip_time=2.0)  # the MILP starts from the coarse plan
    assert refined.stats["path"][-1] == "ip" and refined.stats["label"] in LABELS
    assert evaluate_plan(p, refined.plan).valid
    assert dp_solve(p).objective * (1 - 1e-9) <= refined.objective <= r.objective
    if refined.status is Status.FEASIBLE:
        assert refined.stats["bound"] is not None and refined.stats["gap"] is not None


def test_registry_form_equals_the_pipeline_dp():
    from solvers.dp import solve as pipeline_dp
    from tests.instances import random_instance

    rng = np.random.default_rng(12)
    for _ in range(15):
        inst = random_instance(rng, max_items=5)
        a = pipeline_dp(inst.graph, inst.cluster)
        b = solve(inst.graph, inst.cluster, solver="auto", options=SolveOptions(), form="stages")
        assert b.status is a.status
        if a.status is Status.OPTIMAL:
            assert b.objective == pytest.approx(a.objective, rel=1e-9)
            assert b.stats["label"] == "exact" and math.isclose(b.bound, b.objective)


def test_an_unproven_plan_reports_the_bound_that_is_proven():
    """Coarsened, not refined: the plan is not proven, but every plan's largest stage takes at least the
    total work over all devices. Before, the bound was null with 'optimal among plans that keep ...'."""
    from solvers.dp_stages import work_lower_bound

    p = _chain_problem(n=30, devices=4, N=4)
    r = solve(p, options=SolveOptions(raw={"max_ideals": 20, "refine": False}))
    assert r.status is Status.FEASIBLE and r.stats["label"] == "exact-on-coarsened"
    assert r.bound is not None and work_lower_bound(p) <= r.bound <= r.objective
    assert r.bound <= dp_solve(p).objective * (1 + 1e-9)  # a lower bound on the optimum itself
    assert r.gap == pytest.approx((r.objective - r.bound) / r.objective)
    assert "the exact DP was not run (more than 20 ideals)" in r.message and "total work" in r.message


def test_a_time_limit_stop_on_piper_gnmt_says_what_stopped_and_what_is_proven(workloads):
    """GNMT (Piper) at a 1 s limit: the exact DP and the coarse DP stop, the MILP is not started. Before:
    'not proven optimal', bound null; the DP had proven total work / devices (52.0453)."""
    import os

    from graphs.piper import read_piper

    p = read_piper(os.path.join(workloads, "piper/gnmt.json"))
    r = solve(p, options=SolveOptions(time_limit=1.0))
    assert r.status is Status.FEASIBLE, r.message
    assert r.bound == pytest.approx(52.0453, rel=1e-9) and r.bound <= r.objective
    assert 0 < r.gap < 0.05
    assert "the exact DP stopped at the time limit" in r.message
    assert "the integer program was not started" in r.message
