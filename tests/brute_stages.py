"""An independent brute force over stage plans (every chain of nested ideals, every kind, ``t``, ``d``
and variant), which the exact stage solvers and the serving searches are checked against.

:func:`all_plans` lists every valid plan; :func:`optimum` finds the least time per sample over the same
plans without listing them (for the wider instances of :mod:`tests.stage_instances`, where the product
of every stage's variants is too large to list). Neither reads a solver's code: the evaluator
(:func:`graphs.parallel.evaluate_plan`) scores every plan. A problem built with ``contiguous=False``
takes any assignment of nodes to stages in any order (:func:`ordered_partitions`), not only chains of
nested ideals."""

from __future__ import annotations

import itertools
import math

from graphs.ideals import enumerate_ideals
from graphs.parallel import MEMORY_RTOL, Stage, evaluate_plan, in_flight

__all__ = ["all_plans", "optimum", "stage_sequences", "ordered_partitions", "latency_targets"]

def ordered_partitions(n: int):
    """Every sequence of disjoint non-empty node sets (sorted tuples) covering ``range(n)``: every way
    to put nodes into stages and order the stages."""
    def parts(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for p in parts(rest):
            for i in range(len(p)):
                yield p[:i] + [[first] + p[i]] + p[i + 1:]
            yield p + [[first]]

    for p in parts(list(range(n))):
        for perm in itertools.permutations(p):
            yield [tuple(sorted(b)) for b in perm]


def _chains(p):
    """Every chain of nested ideals of ``p``'s DAG, as the node sets of its stages in order."""
    g = p.graph
    n = g.num_nodes
    lat = enumerate_ideals(n, g.src, g.dst)
    sets = [frozenset(lat.members(i).tolist()) for i in range(lat.num_ideals)]
    full = frozenset(range(n))

    def chains(cur):
        if cur == full:
            yield []
            return
        for s in sets:
            if cur < s:
                for rest in chains(s):
                    yield [tuple(sorted(s - cur))] + rest

    return chains(frozenset())


def stage_sequences(p):
    """The node sets of the stages, in order, of every plan ``p`` may have: chains of nested ideals when
    the problem is contiguous; otherwise every ordered partition of the nodes whose order every edge
    between its stages follows, or, where the edges between its stages make a cycle, in every order.
    (An order some edge goes back against, of stages that have another, is the same plan as that other
    order: the pipeline runs its stages in an order of its edges, and so does the evaluator.)"""
    if p.contiguous:
        return _chains(p)
    return (seq for seq in ordered_partitions(p.graph.num_nodes) if _forward_or_cyclic(p, seq))


def _forward_or_cyclic(p, seq) -> bool:
    """Whether every edge between the stages ``seq`` goes forward in its order, or they have no order."""
    g = p.graph
    where = {u: i for i, nodes in enumerate(seq) for u in nodes}
    pairs = {(where[a], where[b]) for a, b in zip(g.src.tolist(), g.dst.tolist()) if where[a] != where[b]}
    if all(a < b for a, b in pairs):
        return True
    # no order at all: repeatedly remove stages nothing enters; a cycle leaves some
    left = set(range(len(seq)))
    while True:
        free = {x for x in left if not any(a in left and b == x for a, b in pairs)}
        if not free:
            return bool(left)
        left -= free


def _stage_options(p, nodes):
    """``(k, t, d)`` a stage of ``nodes`` may take: every node has a variant on ``k`` split ``t`` ways,
    ``d`` an allowed degree, ``t * d`` devices of ``k`` at most."""
    g = p.graph
    out = []
    for k in range(len(p.kinds)):
        for t in g.degrees(k):
            if all((u, k, t) in g.options for u in nodes):
                out.extend((k, t, d) for d in p.replica_degrees() if t * d <= p.kinds[k].count)
    return out


def all_plans(p):
    """Every valid plan's evaluation (stages: chains of nested ideals, or any ordered partition when
    ``p.contiguous`` is false; every kind, t, d, variant)."""
    g = p.graph
    total = sum(k.count for k in p.kinds)
    out = []
    for chain in stage_sequences(p):
        if len(chain) > total:
            continue
        opts = []
        for nodes in chain:
            opts.append([(k, t, d, vs) for k, t, d in _stage_options(p, nodes)
                         for vs in itertools.product(*[g.options[(u, k, t)] for u in nodes])])
        for combo in itertools.product(*opts):
            used = [0] * len(p.kinds)
            for k, t, d, _ in combo:
                used[k] += t * d
            if any(used[k] > p.kinds[k].count for k in range(len(p.kinds))) \
                    or sum(c[2] for c in combo) > p.microbatches:
                continue
            ev = evaluate_plan(p, [Stage(nodes, k, d, t, vs) for nodes, (k, t, d, vs) in zip(chain, combo)])
            if ev.valid:
                out.append(ev)
    return out


def optimum(p) -> tuple[float, list[Stage] | None]:
    """The least time per sample over the plans :func:`all_plans` lists, and a plan that has it
    (``(inf, None)`` when there is none), without listing them all.

    A stage's time per sample and memory depend on its own nodes, kind, ``t``, ``d`` and variants and on
    ``s``, the sum of ``d`` over it and the stages after it (its micro-batches in flight), and on nothing
    else of the plan; a plan is valid when its structure is (a partition, devices and micro-batches
    enough) and every stage fits its memory. So for each stage sequence and each ``(k, t, d)`` per stage
    that the devices and micro-batches allow, each stage takes its fastest variants that fit, found by
    scoring, with the evaluator, every variant choice of that stage in a plan whose other stages are
    fixed. Stages are chosen from the last (whose ``s`` is its ``d``) to the first, and a branch stops
    once a stage is no faster than the best plan found (the value is the slowest stage's). The plan
    returned is re-scored whole, and must be valid at the value found."""
    g = p.graph
    kinds = p.kinds
    N = p.microbatches
    total = sum(k.count for k in kinds)
    memo: dict = {}
    found: list = [math.inf, None]

    def stage_best(plan, i, k, t, d, s):
        """Least time per sample of stage ``i`` of ``plan`` on ``(k, t, d)``, ``s`` the sum of ``d`` from
        it on (the stages after it are set already), over its variant choices that fit the memory:
        ``(value, variants)``, ``(inf, None)`` when none fits."""
        nodes = plan[i].nodes
        key = (nodes, k, t, d, s)
        if key not in memo:
            best: tuple = (math.inf, None)
            for vs in itertools.product(*[g.options[(u, k, t)] for u in nodes]):
                trial = list(plan)
                trial[i] = Stage(nodes, k, d, t, vs)
                st = evaluate_plan(p, trial).stages[i]
                assert st.in_flight == in_flight(p.schedule, d, s, N)  # the d's after i sum to s - d
                if st.memory <= st.capacity * (1 + MEMORY_RTOL) and st.time_per_sample < best[0]:
                    best = (st.time_per_sample, vs)
            memo[key] = best
        return memo[key]

    def rec(plan, opts, i, used, s, worst):
        """Set stage ``i`` and those before it (the ones after are set, their ``d`` summing to ``s``)."""
        if i < 0:
            if worst < found[0]:
                found[0], found[1] = worst, list(plan)
            return
        keep = plan[i]
        for k, t, d in opts[i]:
            if used[k] + t * d > kinds[k].count or s + d + i > N:  # the i stages before need d >= 1
                continue
            value, vs = stage_best(plan, i, k, t, d, s + d)
            if vs is None or max(worst, value) >= found[0]:
                continue
            plan[i] = Stage(keep.nodes, k, d, t, vs)
            used[k] += t * d
            rec(plan, opts, i - 1, used, s + d, max(worst, value))
            used[k] -= t * d
        plan[i] = keep

    for seq in stage_sequences(p):
        opts = [_stage_options(p, nodes) for nodes in seq]
        if len(seq) > total or any(not o for o in opts):
            continue
        # every stage starts at its first option and first variants; they are then set last to first
        plan = [Stage(nodes, k, d, t, tuple(g.options[(u, k, t)][0] for u in nodes))
                for nodes, (k, t, d) in zip(seq, (o[0] for o in opts))]
        rec(plan, opts, len(seq) - 1, [0] * len(kinds), 0, 0.0)
    if found[1] is None:
        return math.inf, None
    ev = evaluate_plan(p, found[1])
    assert ev.valid and ev.objective == found[0], (ev.problems, ev.objective, found[0])
    return found[0], found[1]


def latency_targets(plans, below: float = 0.999) -> list[float]:
    """Latency targets that probe a search against the evaluations ``plans``: ``below`` times the least
    latency (no plan meets it unless that is 0), the least, the median and the largest."""
    lats = sorted({e.latency for e in plans})
    return [lats[0] * below, lats[0], lats[len(lats) // 2], lats[-1]]
