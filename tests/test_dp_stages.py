"""The exact replicated DP (solvers/dp_stages.py) against brute force on small random instances
(several kinds, replication, tensor-parallel variants, recompute, tight memory, every schedule), its
knapsack against brute force, and against the pipeline DP with d = t = 1."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest

from graphs.model import DeviceKind
from graphs.parallel import (
    SCHEDULES,
    ParallelGraph,
    ParallelProblem,
    Variant,
    evaluate_plan,
)
from solvers.base import Status
from solvers.dp_stages import knapsack, solve_problem
from solvers.registry import solve
from tests.brute_stages import all_plans, optimum


def random_problem(rng: np.random.Generator) -> ParallelProblem:
    n = int(rng.integers(1, 5))
    K = int(rng.integers(1, 3))
    edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.5]
    tensors = []
    for u in range(n):
        outs = [v for (a, v) in edges if a == u]
        if not outs:
            continue
        if rng.random() < 0.5:  # one tensor to all consumers (reference style) or one per edge (Piper)
            tensors.append((u, outs, rng.random(K).round(2)))
        else:
            tensors.extend((u, [v], rng.random(K).round(2)) for v in outs)
    variants = []
    shared = rng.random() < 0.5  # every node's variants share one parameter size (Piper's files)
    for u in range(n):
        for k in range(K):
            for t in (1, 2):
                params = float(rng.integers(0, 4))
                if (t == 1 and rng.random() < 0.15) or (t == 2 and rng.random() < 0.5):
                    continue
                for j in range(int(rng.integers(1, 4))):
                    a, b = rng.random(2).round(2)
                    ins = [e for e, (s, cons, _) in enumerate(tensors) if u in cons]
                    outs = [e for e, (s, _, _) in enumerate(tensors) if s == u]
                    variants.append(Variant(
                        u, k, t, f"v{j}", round(float(rng.random()), 2) * 4 / t,
                        params=params if shared else float(rng.integers(0, 4)),
                        a=float(a), b=float(b) + 0.5, w=float(b) * float(rng.random()),
                        sync_in={e: round(float(rng.random()), 2) for e in ins if rng.random() < 0.5},
                        sync_out={e: round(float(rng.random()), 2) for e in outs if rng.random() < 0.5}))
    g = ParallelGraph.build(ids=list(range(n)), names=None, num_kinds=K, edges=edges, tensors=tensors,
                            variants=variants)
    kinds = []
    for k in range(K):
        server = int(rng.integers(1, 4)) if rng.random() < 0.5 else None
        kinds.append(DeviceKind(f"k{k}", int(rng.integers(1, 4)), float(rng.uniform(1.0, 2.0 * n + 2)),
                                  bandwidth=float(rng.uniform(1, 4)), server_size=server,
                                  intra_bandwidth=float(rng.uniform(2, 8)),
                                  inter_bandwidth=float(rng.uniform(0.5, 2))))
    N = int(rng.choice([1, 2, 3, 4, 6]))
    return ParallelProblem(g, tuple(kinds), N, str(rng.choice(SCHEDULES)),
                           max_replicas=None if rng.random() < 0.8 else 1)


def brute_force(p: ParallelProblem) -> float:
    return min((ev.objective for ev in all_plans(p)), default=math.inf)


def _listing_is_long(p: ParallelProblem) -> bool:
    """Two kinds and five devices or more: 56 of the 300 problems below, which took 20 of the 26 s that
    listing every plan of all 300 took on 2 cores (one took 6 s)."""
    return len(p.kinds) == 2 and sum(k.count for k in p.kinds) >= 5


@pytest.mark.parametrize("reference", ["mixed", pytest.param("every plan", marks=pytest.mark.slow)])
@pytest.mark.parametrize("seed", range(12))
def test_equals_brute_force_on_random_instances(seed, reference):
    """The same 300 problems in either run. ``every plan`` (slow): each against the least of
    :func:`all_plans`. ``mixed`` (default run): those whose listing is long (:func:`_listing_is_long`)
    against :func:`tests.brute_stages.optimum` (the same least value without listing every plan, which
    ``tests.test_conformance`` checks against the list), the other 244 against the list."""
    rng = np.random.default_rng(seed)
    for _ in range(25):
        p = random_problem(rng)
        want = optimum(p)[0] if reference == "mixed" and _listing_is_long(p) else brute_force(p)
        r = solve_problem(p)
        if math.isinf(want):
            assert r.status is Status.INFEASIBLE and r.plan is None
            continue
        assert r.status is Status.OPTIMAL
        ev = evaluate_plan(p, r.plan)
        assert ev.valid, ev.problems
        assert ev.objective == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert r.objective == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_knapsack_equals_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(1, 8))
        ch = [[(round(float(rng.random()), int(rng.integers(1, 4))),
                round(float(rng.random()), int(rng.integers(1, 4))))
               for _ in range(int(rng.integers(1, 4)))] for _ in range(n)]
        cap = float(rng.random() * n * 0.7)
        best = math.inf
        for combo in itertools.product(*[range(len(c)) for c in ch]):
            if sum(ch[i][j][1] for i, j in enumerate(combo)) <= cap:
                best = min(best, sum(ch[i][j][0] for i, j in enumerate(combo)))
        v, pick = knapsack(ch, cap)
        if math.isinf(best):
            assert math.isinf(v)
            continue
        assert v == pytest.approx(best, abs=1e-9)
        assert sum(ch[i][j][1] for i, j in enumerate(pick)) <= cap
        assert sum(ch[i][j][0] for i, j in enumerate(pick)) == pytest.approx(v, abs=1e-9)


def test_knapsack_equals_a_capacity_dp_on_many_classes():
    """Up to 90 classes with integer memory (more items and candidates than the insertion sorts take, and
    more states than the workspace starts with; identical items in groups): against a DP over memory."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        n = int(rng.integers(40, 90))
        kinds = [(float(rng.integers(5, 30)), float(rng.integers(0, 6)), float(rng.integers(1, 9)))
                 for _ in range(int(rng.integers(2, 8)))]  # (time, memory, extra time of the lean choice)
        ch = []
        for _ in range(n):
            tm, mm, dt = kinds[int(rng.integers(len(kinds)))]
            ch.append([(tm, mm + float(rng.integers(1, 6))), (tm + dt, mm)] if rng.random() < 0.9
                      else [(tm, mm), (tm + dt, mm + 1.0), (tm + 2 * dt, 0.0)])
        cap = float(sum(min(m for _, m in c) for c in ch) + rng.integers(0, 3 * n))
        best = np.full(int(cap) + 1, np.inf)
        best[0] = 0.0
        for c in ch:  # least time per memory used, class by class
            nxt = np.full_like(best, np.inf)
            for tm, mm in c:
                m = int(mm)
                nxt[m:] = np.minimum(nxt[m:], best[:best.size - m] + tm)
            best = nxt
        v, pick = knapsack(ch, cap)
        assert v == pytest.approx(best.min(), abs=1e-9)
        assert sum(ch[i][j][1] for i, j in enumerate(pick)) <= cap
        assert sum(ch[i][j][0] for i, j in enumerate(pick)) == pytest.approx(v, abs=1e-9)


def test_knapsack_beats_the_greedy_where_it_is_not_exact():
    # greedy by time saved per byte takes the 3-for-2 upgrade first and then cannot afford the 2-for-5
    ch = [[(10.0, 0.0), (7.0, 2.0)], [(10.0, 0.0), (5.0, 3.0)]]
    assert knapsack(ch, 3.0) == (15.0, [0, 1])


# ---------------------------------------------------------- the pipeline model and reference workloads
@pytest.mark.parametrize("kernel", ["stage", "auto"])
def test_random_reference_instances_equal_the_pipeline_dp(kernel):
    """``kernel="stage"`` forces the stage kernel, which ``auto`` would not run on these problems (they
    are the pipeline model: tests/test_dp_dispatch.py)."""
    from solvers.base import SolveOptions
    from solvers.dp import solve as dp_solve
    from tests.instances import random_instance

    rng = np.random.default_rng(3)
    for _ in range(30):
        inst = random_instance(rng, max_items=5)
        a = dp_solve(inst.graph, inst.cluster)
        b = solve(inst.graph, inst.cluster, solver="dp", form="stages",
                  options=SolveOptions(raw={"kernel": kernel}))
        assert a.status == b.status
        if a.status is Status.OPTIMAL:
            assert b.objective == pytest.approx(a.objective, rel=1e-9)


_FEW = ["throughput-inputs/LayerGraphs/bert24_training.json",
        "throughput-inputs/LayerGraphs/resnet50_training.json",
        "throughput-inputs/OperatorGraphs/resnet50_inference.json",
        "throughput-inputs/OperatorGraphs/resnet50_training.json"]


@pytest.mark.parametrize("kernel", ["stage", "auto"])
@pytest.mark.parametrize("key", _FEW)
def test_reference_workloads_equal_the_pipeline_dp(workloads, key, kernel):
    import json

    from graphs.reference import read_workload
    from solvers.base import SolveOptions

    path = os.path.join(workloads, key)
    if not os.path.exists(path):
        pytest.skip(f"{key} is not among the shared workloads")
    ref = json.load(open(os.path.join(workloads, "reference_results.json")))["throughput"][key]["dp_max_load"]
    w = read_workload(path)
    sol = solve(w.graph, w.cluster, solver="dp", form="stages", options=SolveOptions(raw={"kernel": kernel}))
    assert sol.status is Status.OPTIMAL
    assert sol.stats["kernel"] == ("stage" if kernel == "stage" else "pipeline")
    assert sol.objective == pytest.approx(ref, rel=1e-9)
    from graphs.evaluate import evaluate

    ev = evaluate(w.graph, w.cluster, sol.assignment)
    assert ev.valid and ev.max_load == pytest.approx(ref, rel=1e-9)


def test_a_limit_before_any_plan_is_stopped_not_feasible():
    """At a time limit with no plan the status says so (``stopped``): never ``feasible`` without a plan,
    never ``infeasible`` without a proof; a plan found in time keeps ``optimal``."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        p = random_problem(rng)
        r = solve_problem(p, time_limit=0.0)
        assert r.plan is None and r.status is Status.STOPPED and math.isinf(r.objective)
        assert "time" in r.message
        full = solve_problem(p, time_limit=60.0)
        assert full.status in (Status.OPTIMAL, Status.INFEASIBLE)
        assert (full.plan is None) == (full.status is Status.INFEASIBLE)


def test_time_limit_is_honoured_on_a_large_lattice():
    """A random 60-node DAG with many ideals: the solve returns within the limit plus a small overshoot
    (the limit is checked between chunks of work), with an honest status."""
    import time

    rng = np.random.default_rng(3)
    n = 60
    edges = [(u, v) for v in range(n) for u in range(max(0, v - 6), v) if rng.random() < 0.15]
    variants = [Variant(u, 0, 1, "vanilla", float(rng.random()), 1.0, 1.0, 1.0) for u in range(n)]
    g = ParallelGraph.build(ids=list(range(n)), names=[str(u) for u in range(n)], num_kinds=1, edges=edges,
                            tensors=[(u, [v], np.array([0.01])) for u, v in edges], variants=variants)
    p = ParallelProblem(g, (DeviceKind("gpu", 16, 1e9, bandwidth=1.0),), 16)
    solve_problem(p, time_limit=0.5)  # compiled before timing
    t0 = time.perf_counter()
    r = solve_problem(p, time_limit=1.0)
    took = time.perf_counter() - t0
    assert took < 3.0
    assert r.status in (Status.OPTIMAL, Status.FEASIBLE, Status.STOPPED)
    assert (r.plan is None) == (r.status is Status.STOPPED)


# ---------------------------------------------------------------- repeated layers (the step-function memo)
def layers_problem(rng: np.random.Generator, n: int) -> ParallelProblem:
    """A chain of ``n`` identical layers (the same variants, syncs and edge costs) after a distinct first
    node: stages of equal length have equal knapsacks, so the DP's memo of step functions is used."""
    K = int(rng.integers(1, 3))
    edges = [(u, u + 1) for u in range(n - 1)]
    cost = rng.random(K).round(2)
    tensors = [(u, [u + 1], cost) for u in range(n - 1)]
    layer = [(round(float(rng.random()), 2) + 0.1, float(rng.integers(0, 4)), float(a), float(b) + 0.5,
              float(b) * float(rng.random()), round(float(rng.random()), 2), round(float(rng.random()), 2))
             for a, b in rng.random((int(rng.integers(1, 4)), 2)).round(2)]
    variants = []
    for u in range(n):
        mine = layer if u else [(x[0] * 2, *x[1:]) for x in layer]
        for k in range(K):
            for t in (1, 2):
                for j, (tm, params, a, b, w, si, so) in enumerate(mine):
                    variants.append(Variant(u, k, t, f"v{j}", tm / t, params=params, a=a / t, b=b / t,
                                            w=w / t, sync_in={u - 1: si} if u else {},
                                            sync_out={u: so} if u < n - 1 else {}))
    g = ParallelGraph.build(ids=list(range(n)), names=None, num_kinds=K, edges=edges, tensors=tensors,
                            variants=variants)
    kinds = tuple(DeviceKind(f"k{k}", int(rng.integers(1, 5)), float(rng.uniform(1.0, 0.8 * n + 2)),
                               bandwidth=float(rng.uniform(1, 4))) for k in range(K))
    return ParallelProblem(g, kinds, int(rng.choice([1, 2, 4, 6, 8])), str(rng.choice(SCHEDULES)))


def _without_memo(monkeypatch):
    import solvers.dp_stages as dpr

    real = dpr._node_data
    monkeypatch.setattr(dpr, "_node_data", lambda p: dict(real(p), repeated=False))


@pytest.mark.parametrize("reference", ["optimum", pytest.param("every plan", marks=pytest.mark.slow)])
@pytest.mark.parametrize("seed", range(4))
def test_repeated_layers_equal_brute_force(seed, reference):
    """The same 24 problems against either brute force of :mod:`tests.brute_stages`: ``optimum`` (the
    least over every plan without listing them, which ``tests.test_conformance`` checks against the list;
    about 4 s in all) in the default run, and the minimum over :func:`all_plans` (slow: about 50 s on 2
    cores, mostly four problems on two kinds with six micro-batches)."""
    import solvers.dp_stages as dpr

    rng = np.random.default_rng(100 + seed)
    for _ in range(6):
        p = layers_problem(rng, 4)
        assert dpr._node_data(p)["repeated"]
        want = optimum(p)[0] if reference == "optimum" else brute_force(p)
        r = solve_problem(p)
        if math.isinf(want):
            assert r.status is Status.INFEASIBLE
            continue
        assert r.status is Status.OPTIMAL
        assert r.objective == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_the_memo_changes_nothing_but_time(monkeypatch):
    """With and without the memo of step functions: the same plan, value and stage options (a reused step
    function is the one that would have been computed)."""
    import solvers.dp_stages as dpr

    rng = np.random.default_rng(5)
    probs = [layers_problem(rng, int(rng.integers(6, 30))) for _ in range(30)]
    memo = [solve_problem(p) for p in probs]
    assert sum(r.stats.get("knapsack_memo_hits", 0) for r in memo) > 0
    with monkeypatch.context() as m:  # a memo that starts with one entry has to grow
        grown = []
        m.setattr(dpr, "_MEMO_ENTRIES", 1)
        m.setattr(dpr, "_grow_memo", lambda *a, real=dpr._grow_memo: grown.append(1) or real(*a))
        tiny = [solve_problem(p) for p in probs]
        assert grown
    _without_memo(monkeypatch)
    for p, a, c in zip(probs, memo, tiny):
        b = solve_problem(p)
        assert b.stats.get("knapsack_memo_hits", 0) == 0
        for x in (a, c):
            assert (x.status, x.objective, x.plan) == (b.status, b.objective, b.plan)
            for key in ("pairs", "stage_options", "steps"):
                assert x.stats.get(key) == b.stats.get(key)


def _banded_problem(n: int) -> ParallelProblem:
    """A random DAG of ``n`` nodes with edges at most 4 apart, two variants per node, one kind."""
    rng = np.random.default_rng(9)
    edges = [(u, v) for v in range(n) for u in range(max(0, v - 4), v) if rng.random() < 0.3]
    variants = [Variant(u, 0, 1, name, float(rng.random()) * f, 1.0, a, 1.0)
                for u in range(n) for name, f, a in (("vanilla", 1.0, 2.0), ("recompute", 1.3, 0.5))]
    g = ParallelGraph.build(ids=list(range(n)), names=[str(u) for u in range(n)], num_kinds=1, edges=edges,
                            tensors=[(u, [v], np.array([0.01])) for u, v in edges], variants=variants)
    return ParallelProblem(g, (DeviceKind("gpu", 8, 40.0, bandwidth=1.0),), 8)


def test_a_lattice_over_the_budget_returns_the_chain_plan_built_and_evaluated():
    """Past ``max_ideals`` the best plan of the chain passes is the answer (``feasible``, not proven): it
    is built only then, and is valid with the evaluator's value. 20 nodes (1560 ideals): the full lattice
    then fits the default budget, and its optimum is strictly below the chain plan's; with 30 (before),
    the full solve spent about 7 s finding its lattice over the default budget too, and returned the same
    chain plan."""
    p = _banded_problem(20)
    r = solve_problem(p, max_ideals=40)
    assert r.status is Status.FEASIBLE and "not proven" in r.message
    ev = evaluate_plan(p, r.plan)
    assert ev.valid, ev.problems
    assert r.objective == ev.objective == r.evaluation.objective
    assert "build" not in r.stats
    assert solve_problem(p).objective <= r.objective


def test_the_chain_pass_value_is_never_reported_as_a_bound():
    """The restricted pass's optimum bounds the problem's from above; with the full lattice over the
    budget, the bound reported is a proven one (below the true optimum, found here with the full
    lattice). Before, the chain pass's value was the bound: above the optimum on GNMT."""
    p = _banded_problem(14)
    best = solve_problem(p)
    assert best.status is Status.OPTIMAL
    r = solve_problem(p, max_ideals=40)
    assert r.status is Status.FEASIBLE
    assert r.bound is not None and r.bound <= best.objective * (1 + 1e-12)
    assert "lower_bound" not in r.stats and r.stats["chain_value"] >= best.objective * (1 - 1e-12)
