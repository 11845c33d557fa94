"""``auto`` on the stage model is never worse than the one-device-per-stage optimum of its problem (every
stage ``d = t = 1``, each node on its first ``t = 1`` variant): it solves that restriction with the
pipeline DP first (solvers/dp_pipeline.py ``solve_restriction``) and keeps the plan unless a later step
beats it. The restriction's optimum is checked against a brute force over the problem's own plans."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from graphs.model import DeviceKind
from graphs.parallel import ParallelGraph, ParallelProblem, Stage, Variant, evaluate_plan
from solvers import auto_stages, dp_pipeline, dp_stages, ip_stages, pipedream_stages
from solvers.base import Status
from tests.brute_stages import _stage_options, all_plans, stage_sequences
from tests.test_dp_stages import random_problem


def _memory_by_node(rng: np.random.Generator) -> ParallelProblem | None:
    """:func:`random_problem` with no sync terms, no memory that depends on the micro-batches in flight
    (``a = w = 0``) and one memory per node: the problems whose restriction is exactly the pipeline
    model, so the pipeline DP's plan is the brute force's best ``d = t = 1`` plan. ``None`` where ``N``
    is below the devices (the restriction does not apply)."""
    p = random_problem(rng)
    g = p.graph
    if p.microbatches < sum(k.count for k in p.kinds):
        return None
    b = {v.node: float(rng.uniform(0.5, 1.5)) for v in g.variants}
    variants = [dataclasses.replace(v, a=0.0, w=0.0, b=b[v.node], sync_in={}, sync_out={})
                for v in g.variants]
    tensors = [(int(g.tensor_src[e]), g.consumers(e).tolist(), g.tensor_time[:, e])
               for e in range(g.num_tensors)]
    pg = ParallelGraph.build(ids=g.ids, names=None, num_kinds=len(p.kinds), edges=np.stack([g.src, g.dst], 1),
                             tensors=tensors, variants=variants, tensor_edges=False)
    return dataclasses.replace(p, graph=pg)


def _first_variant_optimum(p: ParallelProblem) -> float:
    """The best valid plan of ``p`` whose stages are all ``d = t = 1`` with every node on its first
    ``t = 1`` variant of the stage's kind, by brute force (``inf``: none): the plans of
    :func:`tests.brute_stages.all_plans` so restricted, listed and scored by the evaluator without
    listing the others (every ``t``, ``d`` and variant, most of its time; the same plans, checked in
    test_the_restricted_brute_force_scores_the_plans_all_plans_scores)."""
    g = p.graph
    total = sum(k.count for k in p.kinds)
    best = math.inf
    for chain in stage_sequences(p):
        if len(chain) > total:
            continue
        opts = [[(k, tuple(g.options[(u, k, 1)][0] for u in nodes)) for k, t, d in _stage_options(p, nodes)
                 if t == d == 1] for nodes in chain]
        for combo in itertools.product(*opts):
            used = [0] * len(p.kinds)
            for k, _ in combo:
                used[k] += 1
            if any(used[k] > p.kinds[k].count for k in range(len(p.kinds))) or len(combo) > p.microbatches:
                continue
            ev = evaluate_plan(p, [Stage(nodes, k, 1, 1, vs) for nodes, (k, vs) in zip(chain, combo)])
            if ev.valid:
                best = min(best, ev.objective)
    return best


def _first_variant_optimum_of_all_plans(p: ParallelProblem) -> float:
    """:func:`_first_variant_optimum` from every plan :func:`tests.brute_stages.all_plans` lists."""
    g = p.graph

    def first(st) -> bool:
        return st.d == st.t == 1 and all(v == g.options[(u, st.kind, 1)][0]
                                         for u, v in zip(st.nodes, st.variants))

    return min((ev.objective for ev in all_plans(p) if all(first(s.stage) for s in ev.stages)),
               default=math.inf)


def _cases(seed: int, count: int) -> list[tuple[ParallelProblem, float]]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        p = _memory_by_node(rng)
        if p is not None:
            out.append((p, _first_variant_optimum(p)))
    return out


def test_the_restricted_brute_force_scores_the_plans_all_plans_scores():
    """The restricted enumeration is the filter of every plan: equal optima, on 22 problems (18 with a
    plan; 182 of them, 138 with one, when it was written)."""
    rng = np.random.default_rng(302)
    finite = 0
    for _ in range(30):
        p = _memory_by_node(rng)
        if p is None:
            continue
        want = _first_variant_optimum_of_all_plans(p)
        assert _first_variant_optimum(p) == want
        finite += math.isfinite(want)
    assert finite >= 15


def test_the_restriction_is_solved_exactly_and_scored_on_the_problem():
    for p, want in _cases(300, 30):
        r = dp_pipeline.solve_restriction(p)
        if not math.isfinite(want):
            assert r.plan is None and r.status is Status.STOPPED
            continue
        assert r.status is Status.FEASIBLE and r.bound is None  # an upper bound on the optimum, no proof
        assert r.stats["restriction"] == "optimal"
        ev = evaluate_plan(p, r.plan)
        assert ev.valid and r.objective == ev.objective
        assert r.objective == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_auto_without_its_exact_paths_is_never_worse_than_one_device_per_stage():
    """No ideal count fits (max_ideals 1) and no integer program: the old auto fell through to
    PipeDream's planner, whose linear order and stages missed the best d = t = 1 plan on 6 of these 60
    problems (7.16 for 5.29, 4.67 for 2.27, ...)."""
    worse = 0
    for p, want in _cases(7, 60):
        r = auto_stages.solve_problem(p, max_ideals=1, refine=False)
        if not math.isfinite(want):
            continue
        assert r.plan is not None and evaluate_plan(p, r.plan).valid
        assert r.objective <= want * (1 + 1e-9), (r.objective, want, r.stats["path"])
        # the restriction proves nothing about the problem: optimal only where a step proved it
        best = dp_stages.solve_problem(p).objective
        assert r.objective >= best * (1 - 1e-9)
        if r.status is Status.OPTIMAL:
            assert r.objective == pytest.approx(best, rel=1e-9)
        else:
            assert r.status is Status.FEASIBLE and r.bound <= r.objective * (1 + 1e-12)
            assert r.stats["label"] == "heuristic"
        worse += pipedream_stages.solve_problem(p).objective > want * (1 + 1e-9)
    assert worse >= 5  # the cases the old path lost


def test_a_ctrl_c_in_the_one_device_per_stage_step_ends_auto(monkeypatch):
    """The pipeline DP takes a Ctrl-C outside its sweep (here: as it starts): auto says "interrupted"
    and runs nothing after it, as after the integer program's."""
    ran: list[str] = []

    def ctrl_c(*a, **kw):
        ran.append("pipeline")
        raise KeyboardInterrupt

    def spy(name, real):
        return lambda *a, **kw: ran.append(name) or real(*a, **kw)

    monkeypatch.setattr(dp_pipeline, "solve_pipeline", ctrl_c)
    for name, mod in (("dp", dp_stages), ("ip", ip_stages), ("pipedream", pipedream_stages)):
        monkeypatch.setattr(mod, "solve_problem", spy(name, mod.solve_problem))
    p, _ = _cases(7, 1)[0]
    r = auto_stages.solve_problem(p)
    assert ran == ["pipeline"], ran
    assert r.plan is None and r.status is Status.STOPPED and r.interrupted, (r.status, r.message)


def test_a_plan_the_schedule_memory_refuses_is_replaced_by_one_that_fits():
    """Two nodes in a chain (no tensor time), a = b = 1 each; two GPUs of 2.5 (time 1 a node) and a CPU
    (time 3 a node, ample memory); N = 4, 1F1B. With one micro-batch in flight a node needs 2: the
    optimum puts one node on each GPU (1), but the first of two stages holds 2 micro-batches and needs
    3 > 2.5, so the problem refuses it. With the most a stage can hold (3: the devices) a node needs 4,
    which only the CPU holds: both nodes there, 6, valid. (The brute force's best such plan is 3, the CPU
    first: the restriction gives plans, not the optimum, where the memory depends on the schedule.)"""
    variants = [Variant(u, k, 1, "vanilla", x, a=1.0, b=1.0)
                for u in range(2) for k, x in ((0, 1.0), (1, 3.0))]
    g = ParallelGraph.build(ids=[0, 1], names=None, num_kinds=2, edges=[(0, 1)],
                            tensors=[(0, [1], [0.0, 0.0])], variants=variants)
    kinds = (DeviceKind("gpu", 2, 2.5), DeviceKind("cpu", 1, 100.0, pays_communication=False))
    p = ParallelProblem(g, kinds, 4)
    restricted, chosen = dp_pipeline.pipeline_restriction(p)
    y1 = dp_pipeline.solve_pipeline(restricted)
    assert y1.objective == pytest.approx(1.0) and [st.kind for st in y1.plan] == [0, 0]
    plan = [dataclasses.replace(st, variants=tuple(int(chosen[v]) for v in st.variants)) for st in y1.plan]
    assert not evaluate_plan(p, plan).valid  # the first GPU stage needs 3
    r = dp_pipeline.solve_restriction(p)
    assert r.status is Status.FEASIBLE and r.stats["flight"] == 3
    assert r.objective == pytest.approx(6.0) and evaluate_plan(p, r.plan).valid
    assert _first_variant_optimum(p) == pytest.approx(3.0)
    a = auto_stages.solve_problem(p)
    assert a.status is Status.OPTIMAL and a.objective == pytest.approx(dp_stages.solve_problem(p).objective)
    assert a.objective <= 3.0
