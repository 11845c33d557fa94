"""An independent brute force over stage plans (every chain of nested ideals, every kind, ``t``, ``d``
and variant), which the exact stage solvers and the serving searches are checked against."""

from __future__ import annotations

import itertools

from graphs.ideals import enumerate_ideals
from graphs.parallel import Stage, evaluate_plan

__all__ = ["all_plans", "latency_targets"]


def all_plans(p):
    """Every valid plan's evaluation (stages: chains of nested ideals; every kind, t, d, variant)."""
    g = p.graph
    n = g.num_nodes
    lat = enumerate_ideals(n, g.src, g.dst)
    sets = [frozenset(lat.members(i).tolist()) for i in range(lat.num_ideals)]
    full = frozenset(range(n))
    total = sum(k.count for k in p.kinds)

    def chains(cur):
        if cur == full:
            yield []
            return
        for s in sets:
            if cur < s:
                for rest in chains(s):
                    yield [tuple(sorted(s - cur))] + rest

    degrees = p.replica_degrees()
    out = []
    for chain in chains(frozenset()):
        if len(chain) > total:
            continue
        opts = []
        for nodes in chain:
            o = []
            for k in range(len(p.kinds)):
                for t in g.degrees(k):
                    lists = [g.options.get((u, k, t)) for u in nodes]
                    if any(x is None for x in lists):
                        continue
                    o.extend((k, t, d, vs) for d in degrees if t * d <= p.kinds[k].count
                             for vs in itertools.product(*lists))
            opts.append(o)
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


def latency_targets(plans, below: float = 0.999) -> list[float]:
    """Latency targets that probe a search against the evaluations ``plans``: ``below`` times the least
    latency (no plan meets it unless that is 0), the least, the median and the largest."""
    lats = sorted({e.latency for e in plans})
    return [lats[0] * below, lats[0], lats[len(lats) // 2], lats[-1]]
