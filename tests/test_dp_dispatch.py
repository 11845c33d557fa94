"""The stage DP's dispatch to the pipeline kernel (solvers/dp_pipeline.py): on stage problems that are
exactly the one-device-per-stage model the dispatched answer equals the stage kernel's (forced with
``kernel="stage"``) and an independent brute force (tests/brute_stages.py); every near-miss is refused
by :func:`graphs.parallel.pipeline_misfit` and still solved, by the stage kernel, to the brute force's
value. Expected values come from the brute force or the other kernel, never from the code's own output."""

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
    Variant,
    evaluate_plan,
    from_opgraph,
    is_pipeline_model,
    pipeline_misfit,
)
from solvers.base import SolveOptions, Status
from solvers.dp_stages import solve_problem
from solvers.registry import solve
from tests.brute_stages import all_plans
from tests.instances import random_instance


def brute_force(p: ParallelProblem) -> float:
    return min((ev.objective for ev in all_plans(p)), default=math.inf)


def assert_same(a, b) -> None:
    """Two answers of one problem agree: status, value, and each plan scores its value."""
    assert a.status == b.status, (a.status, a.message, b.status, b.message)
    if math.isfinite(b.objective):
        assert a.objective == pytest.approx(b.objective, rel=1e-9, abs=1e-12)
    else:
        assert math.isinf(a.objective)
    for r in (a, b):
        if r.plan is not None:
            assert r.evaluation.valid and r.evaluation.objective == r.objective


def check(p: ParallelProblem, *, pipeline: bool) -> None:
    assert is_pipeline_model(p) == pipeline, pipeline_misfit(p)
    auto = solve_problem(p)
    stage = solve_problem(p, kernel="stage")
    assert auto.stats["kernel"] == ("pipeline" if pipeline else "stage")
    assert stage.stats["kernel"] == "stage"
    assert_same(auto, stage)
    best = brute_force(p)
    if math.isfinite(best):
        assert auto.status is Status.OPTIMAL
        assert auto.objective == pytest.approx(best, rel=1e-9, abs=1e-12)
        assert evaluate_plan(p, auto.plan).objective == pytest.approx(best, rel=1e-9, abs=1e-12)
    else:
        assert auto.status is Status.INFEASIBLE and auto.plan is None


# ------------------------------------------------------------------ pipeline-model problems
def pipeline_problem(rng: np.random.Generator, *, host: bool | None = None) -> ParallelProblem:
    """A random stage problem that is the pipeline model: one t = 1 variant per (node, kind) with
    a = w = 0 and one ``b`` per node, no sync terms, d = 1 only, N >= devices; tensors of every shape
    (one to all consumers, one per edge, several per producer, consumers earlier in the order as a
    gradient's are); optionally a host kind that pays no communication."""
    n = int(rng.integers(1, 6))
    host = bool(rng.random() < 0.4) if host is None else host
    K = int(rng.integers(1, 3)) + int(host)
    pays = [True] * (K - int(host)) + [False] * int(host)
    edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.45]
    tensors = []
    for u in range(n):
        others = [v for v in range(n) if v != u]
        for _ in range(int(rng.integers(0, 3))):
            if not others:
                break
            cons = [v for v in others if rng.random() < 0.5] or [int(rng.choice(others))]
            tensors.append((u, cons, [round(float(rng.random()), 2) if pays[k] else 0.0 for k in range(K)]))
    variants = []
    for u in range(n):
        b = round(float(rng.uniform(0, 2)), 2)
        runs = rng.random(K) >= 0.2
        runs[int(rng.integers(K))] = True  # some kind runs every node
        for k in np.flatnonzero(runs).tolist():
            variants.append(Variant(u, k, 1, "vanilla", round(float(rng.uniform(0, 4)), 2),
                                    params=float(rng.integers(0, 3)), b=b))
    g = ParallelGraph.build(ids=list(range(n)), names=None, num_kinds=K, edges=edges, tensors=tensors,
                            variants=variants, tensor_edges=False)
    kinds = []
    for k in range(K):
        cap = None if rng.random() < 0.3 else float(rng.uniform(1.0, 2.0 * n + 1))
        kinds.append(DeviceKind(f"{'cpu' if not pays[k] else 'gpu'}{k}", int(rng.integers(0 if k else 1, 4)),
                                cap, pays[k]))
    devices = sum(k.count for k in kinds)
    N = devices + int(rng.integers(0, 3))
    return ParallelProblem(g, tuple(kinds), N, str(rng.choice(SCHEDULES)), max_replicas=1)


@pytest.mark.parametrize("seed", range(6))
def test_pipeline_problems_equal_the_stage_kernel_and_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(25):
        check(pipeline_problem(rng), pipeline=True)


@pytest.mark.parametrize("seed", range(3))
def test_from_opgraph_problems_dispatch_and_equal_both(seed):
    """Reference-model instances (training and inference, colocation, host CPUs, unsupported nodes,
    memory limits) through :func:`from_opgraph`, which is the pipeline model."""
    rng = np.random.default_rng(200 + seed)
    for _ in range(20):
        inst = random_instance(rng, max_items=4)
        p, _ = from_opgraph(inst.graph, inst.cluster)
        if p.graph.num_nodes > 6:
            continue
        check(p, pipeline=len({u for (u, _, _) in p.graph.options}) == p.graph.num_nodes)


def test_hosts_are_included():
    rng = np.random.default_rng(5)
    seen = 0
    for _ in range(15):
        p = pipeline_problem(rng, host=True)
        seen += sum(k.count for k in p.kinds if not k.pays_communication) > 0
        check(p, pipeline=True)
    assert seen


# ------------------------------------------------------------------ near-misses
def _rebuild(p: ParallelProblem, variants=None, **changes) -> ParallelProblem:
    g = p.graph
    tensors = [(int(g.tensor_src[e]), g.consumers(e).tolist(), g.tensor_time[:, e])
               for e in range(g.num_tensors)]
    g2 = ParallelGraph.build(ids=g.ids, names=g.names, num_kinds=len(p.kinds),
                             edges=np.stack([g.src, g.dst], 1), tensors=tensors,
                             variants=list(g.variants) if variants is None else variants, tensor_edges=False)
    return p.with_options(graph=g2, **changes)


def _with_tensor(rng) -> ParallelProblem:
    while True:
        p = pipeline_problem(rng, host=False)
        if p.graph.num_tensors and p.graph.num_nodes >= 2 and sum(k.count for k in p.kinds) >= 2:
            return p


def near_misses(p: ParallelProblem) -> dict[str, ParallelProblem]:
    g = p.graph
    vs = list(g.variants)
    v0 = vs[0]
    e = 0
    cons = int(g.consumers(e)[0])
    devices = sum(k.count for k in p.kinds)
    synced = [replace_variant(v, sync_in={e: 0.3}) if v.node == cons else v for v in vs]
    return {
        "a nonzero": _rebuild(p, [replace_variant(v0, a=0.4)] + vs[1:]),
        "w nonzero": _rebuild(p, [replace_variant(v0, w=min(0.3, v0.b))] + vs[1:]) if v0.b > 0 else None,
        "t = 2 variant": _rebuild(p, vs + [replace_variant(v0, t=2, time=v0.time / 3, name="tp2")]),
        "two variants": _rebuild(p, vs + [replace_variant(v0, time=v0.time / 2, b=v0.b + 0.5, name="alt")]),
        "sync term": _rebuild(p, synced),
        "N too small": p.with_options(microbatches=devices - 1),
        "d = 2 allowed": p.with_options(microbatches=2 * devices, max_replicas=None),
    }


def replace_variant(v: Variant, **kw) -> Variant:
    from dataclasses import replace

    return replace(v, **kw)


@pytest.mark.parametrize("seed", range(4))
def test_near_misses_are_refused_and_solved_by_the_stage_kernel(seed):
    rng = np.random.default_rng(300 + seed)
    for _ in range(6):
        p = _with_tensor(rng)
        assert is_pipeline_model(p)
        for what, q in near_misses(p).items():
            if q is None:
                continue
            assert pipeline_misfit(q), what
            check(q, pipeline=False)
            with pytest.raises(InputError, match="not the one-device-per-stage pipeline model"):
                solve_problem(q, kernel="pipeline")


def test_other_refusals():
    rng = np.random.default_rng(8)
    p = _with_tensor(rng)
    assert "contiguous" in pipeline_misfit(p.with_options(contiguous=False))
    colo = ParallelGraph.build(ids=p.graph.ids, names=None, num_kinds=len(p.kinds),
                               edges=np.stack([p.graph.src, p.graph.dst], 1), tensors=[],
                               variants=p.graph.variants, tensor_edges=False,
                               colocation=[0] * p.graph.num_nodes)
    assert "colocation" in pipeline_misfit(p.with_options(graph=colo))
    if len(p.kinds) > 1 and any(v.kind == 1 for v in p.graph.variants):
        vs = [replace_variant(v, b=v.b + 1.0) if v.kind == 1 else v for v in p.graph.variants]
        assert "differs between kinds" in pipeline_misfit(_rebuild(p, vs))
    lone = _rebuild(p, [v for v in p.graph.variants if v.node != 0])
    assert "no variant" in pipeline_misfit(lone)
    assert solve_problem(lone).status is Status.INFEASIBLE and solve_problem(lone).stats["kernel"] == "stage"
    with pytest.raises(InputError, match="unknown dp kernel"):
        solve_problem(p, kernel="fast")


# ------------------------------------------------------------------ limits, bounds, the registry
def _banded(n: int, *, count: int = 8) -> ParallelProblem:
    rng = np.random.default_rng(9)
    edges = [(u, v) for v in range(n) for u in range(max(0, v - 4), v) if rng.random() < 0.3]
    variants = [Variant(u, 0, 1, "vanilla", float(rng.random()), b=1.0) for u in range(n)]
    g = ParallelGraph.build(ids=list(range(n)), names=[str(u) for u in range(n)], num_kinds=1, edges=edges,
                            tensors=[(u, [v], np.array([0.01])) for u, v in edges], variants=variants)
    return ParallelProblem(g, (DeviceKind("gpu", count, 40.0),), count, max_replicas=1)


def test_max_ideals_and_time_limits_hold_on_the_pipeline_path():
    p = _banded(16)
    assert is_pipeline_model(p)
    best = solve_problem(p, kernel="stage")
    assert best.status is Status.OPTIMAL
    r = solve_problem(p, max_ideals=40)
    assert r.stats["kernel"] == "pipeline"
    assert r.status is Status.FEASIBLE and "not proven" in r.message
    ev = evaluate_plan(p, r.plan)
    assert ev.valid and r.objective == ev.objective >= best.objective * (1 - 1e-12)
    assert r.bound is not None and r.bound <= best.objective * (1 + 1e-12)
    full = solve_problem(p)
    assert full.status is Status.OPTIMAL and full.objective == pytest.approx(best.objective, rel=1e-9)
    for ub in (r.objective * 0.999, best.objective * 0.999):  # below the chain plan: none kept above it
        for kernel in ("auto", "stage"):
            q = solve_problem(p, max_ideals=40, upper_bound=ub, kernel=kernel)
            assert q.status in (Status.STOPPED, Status.FEASIBLE, Status.INFEASIBLE), kernel
            assert q.plan is None or q.objective <= ub
            assert (q.plan is None) == (q.status is not Status.FEASIBLE)
    for limit in (0.0, 1e-4):
        q = solve_problem(p, time_limit=limit)
        assert q.stats["kernel"] == "pipeline"
        assert (q.plan is None) == (q.status is Status.STOPPED)
        assert q.status in (Status.STOPPED, Status.FEASIBLE, Status.OPTIMAL)
        if q.plan is not None:
            assert evaluate_plan(p, q.plan).objective == q.objective >= best.objective * (1 - 1e-12)
        if q.bound is not None:
            assert q.bound <= best.objective * (1 + 1e-12)


def test_upper_bound_is_honoured_as_by_the_stage_kernel():
    p = _banded(10, count=3)
    best = solve_problem(p, kernel="stage").objective
    for ub in (best * 0.9, best * (1 + 1e-9), best * 2):
        a = solve_problem(p, upper_bound=ub)
        b = solve_problem(p, upper_bound=ub, kernel="stage")
        assert a.stats["kernel"] == "pipeline"
        assert_same(a, b)


def test_the_registry_dispatches_and_can_force_the_stage_kernel():
    p = _banded(8, count=3)
    a = solve(p, solver="dp")
    b = solve(p, solver="dp", options=SolveOptions(raw={"kernel": "stage"}))
    assert a.stats["kernel"] == "pipeline" and b.stats["kernel"] == "stage"
    assert_same(a, b)
    assert a.objective == pytest.approx(brute_force(p), rel=1e-9)


def test_an_empty_graph_stays_with_the_stage_kernel():
    g = ParallelGraph.build(ids=[], names=None, num_kinds=1, edges=[], tensors=[], variants=[])
    p = ParallelProblem(g, (DeviceKind("gpu", 2),), 2, max_replicas=1)
    assert "no nodes" in pipeline_misfit(p)
    assert solve_problem(p).stats["kernel"] == "stage"


def test_a_node_that_fits_nowhere_is_named_by_the_problems_id():
    # dispatched to the pipeline kernel, the message named the kernel graph's nodes ('v1, t1, r2')
    variants = [Variant(0, 0, 1, "vanilla", 1.0, b=1.0), Variant(1, 0, 1, "vanilla", 1.0, b=5.0),
                Variant(2, 0, 1, "vanilla", 1.0, b=1.0)]
    g = ParallelGraph.build(ids=["embed", "block", "head"], names=None, num_kinds=1, edges=[],
                            tensors=[(0, [1], [0.1]), (1, [2], [0.1])], variants=variants)
    p = ParallelProblem(g, (DeviceKind("gpu", 2, 2.0),), 2, max_replicas=1)
    assert is_pipeline_model(p)
    for kernel in ("auto", "stage"):
        r = solve_problem(p, kernel=kernel)
        assert r.status is Status.INFEASIBLE and "block" in r.message, (kernel, r.message)
        assert "embed" not in r.message and "head" not in r.message and "v1" not in r.message, r.message
