"""PipeDream's planner and pure data parallelism on the replicated model
(solvers/pipedream_stages.py): valid plans (graphs.parallel's evaluator), never better than the
exact optimum (dp-replicated) on random instances and Piper's workloads, equal to it on chains where
PipeDream's DP is exact (a path, one kind, t = 1, the fastest variant dominating)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from graphs.model import DeviceKind
from graphs.parallel import (
    SCHEDULES,
    ParallelGraph,
    ParallelProblem,
    Stage,
    Variant,
    evaluate_plan,
)
from solvers.base import Status
from solvers.dp_stages import solve_problem as exact
from solvers.pipedream_stages import data_parallel, fastest_variants, linearise, solve_problem
from tests.instances import WORKLOADS
from tests.test_dp_stages import random_problem

GiB = 2 ** 30


def _check(problem, r):
    """A returned plan is valid and its objective is the evaluator's."""
    if r.plan is None:
        return math.inf
    ev = evaluate_plan(problem, r.plan)
    assert ev.valid, ev.problems
    assert r.objective == pytest.approx(ev.objective, rel=1e-12)
    assert r.status is Status.FEASIBLE  # a baseline never claims optimality
    return ev.objective


@pytest.mark.parametrize("seed", range(6))
def test_never_better_than_the_exact_optimum_on_random_instances(seed):
    rng = np.random.default_rng(100 + seed)
    found = 0
    for _ in range(40):
        p = random_problem(rng)
        best = exact(p)
        pd = _check(p, solve_problem(p))
        dpar = _check(p, data_parallel(p))
        if best.plan is None:
            assert math.isinf(pd) and math.isinf(dpar)
            continue
        assert pd >= best.objective * (1 - 1e-9)
        assert dpar >= best.objective * (1 - 1e-9)
        found += math.isfinite(pd)
    assert found > 5


def _chain_problem(rng, *, dominated: bool) -> ParallelProblem:
    """A path graph, one kind, only t = 1 variants; the first variant of each node is its fastest and,
    with ``dominated``, a second variant is no better anywhere (slower, more memory, same params)."""
    n = int(rng.integers(1, 7))
    tensors = [(u, [u + 1], [round(float(rng.random()), 2)]) for u in range(n - 1)]
    variants = []
    for u in range(n):
        params = float(rng.integers(0, 4))
        a, b = (float(x) for x in rng.random(2).round(2))
        b += 0.5
        w = b * float(rng.random())
        sync_in = {u - 1: round(float(rng.random()), 2)} if u and rng.random() < 0.5 else {}
        sync_out = {u: round(float(rng.random()), 2)} if u < n - 1 and rng.random() < 0.5 else {}
        tm = round(float(rng.random()) * 4, 2)
        variants.append(Variant(u, 0, 1, "vanilla", tm, params, a, b, w, sync_in, sync_out))
        if dominated:
            variants.append(Variant(u, 0, 1, "worse", tm + 0.5, params, a + 0.1, b + 0.1, w,
                                    {e: x + 0.1 for e, x in sync_in.items()}, dict(sync_out)))
    g = ParallelGraph.build(ids=list(range(n)), names=None, num_kinds=1, edges=[], tensors=tensors,
                            variants=variants)
    server = int(rng.integers(1, 4)) if rng.random() < 0.5 else None
    kind = DeviceKind("gpu", int(rng.integers(1, 7)), float(rng.uniform(1.0, 2.0 * n + 2)),
                        bandwidth=float(rng.uniform(1, 4)), server_size=server,
                        intra_bandwidth=float(rng.uniform(2, 8)), inter_bandwidth=float(rng.uniform(0.5, 2)))
    N = int(rng.choice([1, 2, 3, 4, 6, 8, 12]))
    return ParallelProblem(g, (kind,), N, str(rng.choice(SCHEDULES)),
                           max_replicas=None if rng.random() < 0.8 else int(rng.integers(1, 4)))


@pytest.mark.parametrize("dominated", [False, True])
def test_equals_the_exact_optimum_on_chains(dominated):
    rng = np.random.default_rng(7 + dominated)
    feasible = 0
    for _ in range(150):
        p = _chain_problem(rng, dominated=dominated)
        best = exact(p)
        r = solve_problem(p)
        got = _check(p, r)
        if best.plan is None:
            assert r.plan is None and r.status is Status.UNKNOWN  # a baseline proves nothing
            continue
        feasible += 1
        assert got == pytest.approx(best.objective, rel=1e-9, abs=1e-12)
    assert feasible > 50


def test_strictly_worse_where_the_optimum_mixes_kinds():
    # two nodes; node 0 is fast on kind a, node 1 on kind b: the optimum puts one on each kind,
    # PipeDream plans per kind and pays a slow node
    tensors = [(0, [1], [0.0, 0.0])]
    vs = [Variant(0, 0, 1, "v", 1.0), Variant(0, 1, 1, "v", 5.0),
          Variant(1, 0, 1, "v", 5.0), Variant(1, 1, 1, "v", 1.0)]
    g = ParallelGraph.build(ids=[0, 1], names=None, num_kinds=2, edges=[], tensors=tensors, variants=vs)
    p = ParallelProblem(g, (DeviceKind("a", 1), DeviceKind("b", 1)), 2)
    assert exact(p).objective == pytest.approx(1.0)
    assert solve_problem(p).objective == pytest.approx(6.0)
    assert data_parallel(p).objective == pytest.approx(6.0)


def test_strictly_worse_where_recomputation_is_needed():
    # the vanilla variant does not fit memory, recomputation does: PipeDream runs layers as they are
    vs = [Variant(0, 0, 1, "vanilla", 1.0, a=4.0, b=1.0), Variant(0, 0, 1, "recompute", 1.5, a=1.0, b=1.0)]
    g = ParallelGraph.build(ids=[0], names=None, num_kinds=1, edges=[], tensors=[], variants=vs)
    p = ParallelProblem(g, (DeviceKind("gpu", 1, memory=3.0),), 1)
    assert exact(p).objective == pytest.approx(1.5)
    r = solve_problem(p)
    # a baseline that finds nothing proves nothing
    assert r.plan is None and r.status is Status.UNKNOWN and "memory" in r.message


def test_data_parallel_hand_computed():
    # one node: 8 s per sample, 2 bytes of parameters; 4 devices, N = 4, bandwidth 1:
    # d = 4: 8/4 + 4 * 3 * 2 / 4 / 4 / 1 = 2 + 1.5
    vs = [Variant(0, 0, 1, "v", 8.0, params=2.0, a=1.0, b=2.0, w=2.0)]
    g = ParallelGraph.build(ids=[0], names=None, num_kinds=1, edges=[], tensors=[], variants=vs)
    p = ParallelProblem(g, (DeviceKind("gpu", 4, memory=10.0, bandwidth=1.0),), 4)
    r = data_parallel(p)
    assert r.plan == (Stage((0,), 0, 4, 1, (0,)),)
    assert r.objective == pytest.approx(3.5)
    # GPipe keeps N / d = 1 micro-batch per replica; with 3 devices the largest divisor of 4 is 2
    r = data_parallel(p.with_options(schedule="gpipe", kinds=(DeviceKind("gpu", 3, 10.0, bandwidth=1.0),)))
    assert r.plan[0].d == 2 and r.objective == pytest.approx(4.0 + 4 * 1 * 2 / 2 / 4)
    tight = p.with_options(schedule="gpipe", kinds=(DeviceKind("gpu", 1, memory=5.0, bandwidth=1.0),))
    r = data_parallel(tight)  # d = 1 holds 4 micro-batches: 4 + 2 > 5
    assert r.plan is None and "does not fit" in r.message


def test_linearise_merges_a_diamond_and_keeps_a_chain():
    tensors = [(0, [1, 2], [1.0]), (1, [3], [1.0]), (2, [3], [1.0]), (3, [4], [1.0])]
    vs = [Variant(u, 0, 1, "v", 1.0) for u in range(5)]
    g = ParallelGraph.build(ids=list(range(5)), names=None, num_kinds=1, edges=[], tensors=tensors,
                            variants=vs)
    groups = linearise(g)
    assert groups == [[0, 1, 2], [3], [4]]  # the diamond's tails 0, 1, 2 merge
    # an input that computes nothing and feeds every node (a mask) does not merge them
    tensors = [(0, [1, 2, 3], [1.0]), (1, [2], [1.0]), (2, [3], [1.0])]
    vs = [Variant(0, 0, 1, "v", 0.0)] + [Variant(u, 0, 1, "v", 1.0) for u in (1, 2, 3)]
    g = ParallelGraph.build(ids=list(range(4)), names=None, num_kinds=1, edges=[], tensors=tensors,
                            variants=vs)
    assert linearise(g) == [[0], [1], [2], [3]]


def test_registry_form_gives_a_valid_placement():
    from graphs.evaluate import evaluate
    from solvers.dp import solve as dp_solve
    from solvers.registry import solve
    from tests.instances import random_instance

    rng = np.random.default_rng(5)
    for _ in range(20):
        inst = random_instance(rng, max_items=5)
        opt = dp_solve(inst.graph, inst.cluster)
        sol = solve(inst.graph, inst.cluster, solver="pipedream", form="stages")
        if sol.assignment is None:
            continue
        ev = evaluate(inst.graph, inst.cluster, sol.assignment)
        assert ev.valid
        assert ev.max_load == pytest.approx(sol.objective, rel=1e-9)
        assert sol.objective >= opt.objective * (1 - 1e-9)


# ---------------------------------------------------------------- Piper's workloads
_SETTINGS = [("bert32a100", {}), ("resnet", {}),
             ("bert32a100", dict(devices=8, memory=8 * GiB, bandwidth=25 * GiB)),
             ("bert32a100", dict(devices=64, memory=8 * GiB, bandwidth=25 * GiB)),
             ("bert32a100", dict(devices=64, memory=2 * GiB, bandwidth=25 * GiB))]


@pytest.mark.parametrize("name,kw", _SETTINGS)
def test_piper_workloads_never_better_than_the_optimum(name, kw):
    from graphs.piper import read_piper

    path = os.path.join(WORKLOADS, "piper", f"{name}.json")
    if not os.path.exists(path):
        pytest.skip(f"Piper workloads not found at {os.path.dirname(path)} (set PLACEMENT_WORKLOADS)")
    p = read_piper(path, **kw)
    best = exact(p)
    for r in (solve_problem(p), data_parallel(p)):
        got = _check(p, r)
        if best.plan is None:
            assert math.isinf(got)
        else:
            assert got >= best.objective * (1 - 1e-9)
    if name == "bert32a100" and kw.get("devices") == 64 and kw["memory"] == 8 * GiB:
        # a real pipeline, replicated, and worse than the optimum (no recomputation, no t > 1)
        r = solve_problem(p)
        assert len(r.plan) > 1 and max(s.d for s in r.plan) > 1
        assert r.objective > best.objective * 1.5


def test_data_parallel_is_the_best_one_stage_plan_by_brute_force():
    """Pure data parallelism (one definition, also the benchmarks'): on every kind the largest allowed
    ``d`` and, among every ``t = 1`` variant combination, the fastest that fits memory (recomputation
    included), the best kind: brute force over the combinations agrees on random instances, tight
    memory included."""
    import itertools

    from graphs.parallel import evaluate_plan
    from tests.test_dp_stages import random_problem

    rng = np.random.default_rng(11)
    checked = fitted = 0
    for _ in range(200):
        p = random_problem(rng)
        g = p.graph
        best = math.inf
        for k, kind in enumerate(p.kinds):
            ds = [d for d in p.replica_degrees() if d <= kind.count]
            opts = [g.options.get((u, k, 1)) for u in range(g.num_nodes)]
            if not ds or not all(opts):
                continue
            for var in itertools.product(*opts):
                ev = evaluate_plan(p, [Stage(tuple(range(g.num_nodes)), k, ds[-1], 1, var)])
                if ev.valid:
                    best = min(best, ev.objective)
        r = data_parallel(p)
        if math.isinf(best):
            assert r.plan is None and r.status is Status.UNKNOWN  # a baseline proves nothing
            continue
        checked += 1
        assert r.status is Status.FEASIBLE and r.objective == pytest.approx(best, rel=1e-9)
        fast = fastest_variants(p, r.plan[0].kind)
        fitted += tuple(fast) != r.plan[0].variants
    assert checked > 50 and fitted > 0  # some instances need a slower variant to fit
