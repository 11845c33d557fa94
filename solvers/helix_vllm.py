"""Pipeline replicas for vLLM on a Helix cluster (:mod:`graphs.helix`): node-disjoint chains of single
nodes, each chain one vLLM replica (one GPU per pipeline stage), maximising their total tokens/s.

A Helix layout lets many flow paths share a node; vLLM's replicas cannot (a GPU belongs to one
replica), so the best Helix layout can be a poor vLLM deployment (a stage of several nodes in parallel
leaves all but one of them in no replica). This plans for vLLM directly.

A replica's tokens/s in Helix's model is its smallest node capacity ``c(k)`` or link between
consecutive stages. For ``R`` replicas all at least ``F``, a small integer program decides how many
nodes of each group (region, GPU type, profile) hold ``k`` layers in each replica: ``k`` only where
``c(k) >= F``, every replica exactly ``L`` layers, the nodes of a group shared out; a replica spans
several regions only where some link between each two of them carries ``F``, and its stages then run
region by region with the best-linked pair of nodes at each border. ``F`` is searched over the
capacities that can be a bottleneck, for every ``R`` up to what the nodes' memory allows, and the
best total kept; nodes left over then make more replicas while they can. Every replica is scored
alone by :func:`graphs.helix.max_flow` (the one evaluator), and the total is the sum of those
scores. A heuristic: no bound is claimed for it.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence

import numpy as np

from graphs.helix import HelixCluster, max_flow

__all__ = ["plan_replicas", "chains_value"]

Chain = list[tuple[int, tuple[int, int]]]  # (node, (start, layers)) in stage order


def _groups(cluster: HelixCluster, model: str, free: set[int]) -> list[tuple[int, object, list[int]]]:
    by: dict[tuple, list[int]] = {}
    for n in cluster.nodes:
        if n.index in free and n.profiles[model].max_num_layers > 0:
            by.setdefault((n.region or 0, n.profiles[model]), []).append(n.index)
    return [(r, p, sorted(ix)) for (r, p), ix in by.items()]


def _region_sets(cluster: HelixCluster, model: str, regions: list[int], F: float) -> list[tuple[int, ...]]:
    """Sets of regions a replica of ``F`` may span: between any two of them some link carries ``F``
    each way (:func:`_borders` then puts such a pair at the border; a region alone always may)."""
    dl = cluster.directed_links(model)
    region = {n.index: n.region or 0 for n in cluster.nodes}
    ok: dict[tuple[int, int], bool] = {}
    for (a, b), cap in dl.items():
        if a in region and b in region and region[a] != region[b] and cap >= F:
            ok[(region[a], region[b])] = True
    out = []
    for m in range(1, len(regions) + 1):
        for sub in itertools.combinations(regions, m):
            if all(ok.get((x, y), False) for x in sub for y in sub if x != y):
                out.append(sub)
    return out


def _borders(cluster: HelixCluster, model: str, chain: list[tuple[int, int, int]], spare: dict) -> Chain:
    """Nodes for a replica's stages ``(region, layers, group)`` in region order: at each border between
    regions, the stage pair and nodes (of those groups, from ``spare``) with the fastest link go last
    and first; the other stages take the next spare nodes of their group."""
    dl = cluster.directed_links(model)
    segs: list[list[tuple[int, int]]] = []  # per region: (layers, group)
    for r, k, g in chain:
        if not segs or segs[-1][0][0] != r:
            segs.append([(r, k, g)])
        else:
            segs[-1].append((r, k, g))
    nodes: list[list[int | None]] = [[None] * len(seg) for seg in segs]
    for b in range(len(segs) - 1):
        best = (-1.0, None)
        for ia, (_, _, ga) in enumerate(segs[b]):
            for ib, (_, _, gb) in enumerate(segs[b + 1]):
                if nodes[b][ia] is not None or nodes[b + 1][ib] is not None:
                    continue
                for u in spare[ga]:
                    for v in spare[gb]:
                        if u != v and dl.get((u, v), 0.0) > best[0]:
                            best = (dl[(u, v)], (ia, ib, u, v))
        if best[1] is None:
            continue
        ia, ib, u, v = best[1]
        spare[segs[b][ia][2]].remove(u)
        spare[segs[b + 1][ib][2]].remove(v)
        nodes[b][ia], nodes[b + 1][ib] = u, v
        # the border stages at the segment's end and the next one's start
        segs[b].append(segs[b].pop(ia))
        nodes[b].append(nodes[b].pop(ia))
        segs[b + 1].insert(0, segs[b + 1].pop(ib))
        nodes[b + 1].insert(0, nodes[b + 1].pop(ib))
    out, s = [], 0
    for seg, ns in zip(segs, nodes):
        for (_, k, g), a in zip(seg, ns):
            out.append((spare[g].pop(0) if a is None else a, (s, k)))
            s += k
    return out


def _solve(cluster, model, groups, R: int, F: float, time_limit: float, threads) -> list[Chain] | None:
    """``R`` replicas each of capacity ``>= F`` from ``groups``, or ``None`` (none found in time)."""
    from ._milp import MilpModel, solve_mip

    L = cluster.models[model].num_layers
    regions = sorted({r for r, _, _ in groups})
    sets = _region_sets(cluster, model, regions, F)
    items = [(gi, k) for gi, (_, p, _) in enumerate(groups) for k in range(1, p.max_num_layers + 1)
             if p.capacity_at(k) >= F]
    if not items:
        return None
    mdl = MilpModel()
    x = [mdl.add_cols(len(items), lb=0, ub=[len(groups[g][2]) for g, _ in items], integer=True)
         for _ in range(R)]
    z = [mdl.add_cols(len(sets), lb=0, ub=1, integer=True) for _ in range(R)]
    ks = np.array([k for _, k in items], float)
    for r in range(R):
        mdl.add_rows([float(L)], [float(L)], np.zeros(len(items), int), x[r], ks)
        mdl.add_rows([1.0], [1.0], np.zeros(len(sets), int), z[r], 1.0)
        for j, (g, _) in enumerate(items):  # a group's nodes only in a replica whose regions include it
            allowed = [si for si, sub in enumerate(sets) if groups[g][0] in sub]
            cols = np.r_[x[r][j], z[r][allowed]] if allowed else np.array([x[r][j]])
            vals = np.r_[1.0, -float(len(groups[g][2])) * np.ones(len(allowed))]
            mdl.add_rows([-np.inf], [0.0], np.zeros(len(cols), int), cols, vals)
    for g in range(len(groups)):
        js = [j for j, (gg, _) in enumerate(items) if gg == g]
        if js:
            cols = np.concatenate([x[r][js] for r in range(R)])
            mdl.add_rows([-np.inf], [float(len(groups[g][2]))], np.zeros(len(cols), int), cols, 1.0)
    res = solve_mip(mdl, time_limit=time_limit, gap=1.0, threads=threads)
    if res.interrupted:  # HiGHS took the Ctrl-C and returned: the planning stops (as the layout's does)
        raise KeyboardInterrupt
    if res.x is None:
        return None
    spare = {g: list(ix) for g, (_, _, ix) in enumerate(groups)}
    chains = []
    for r in range(R):
        # stages region by region, so that a replica crosses each border once
        stages = sorted(((groups[g][0], k, g) for j, (g, k) in enumerate(items)
                         for _ in range(int(round(res.x[x[r][j]])))), key=lambda t: t[0])
        chains.append(_borders(cluster, model, stages, spare))
    return chains


def _score(cluster: HelixCluster, model: str, chain: Chain) -> float:
    return max_flow(cluster, model, dict(chain)) if chain else 0.0


def _candidates(groups) -> list[float]:
    return sorted({p.capacity_at(k) for _, p, _ in groups for k in range(1, p.max_num_layers + 1)
                   if p.capacity_at(k) > 0})


def _best_set(cluster, model, free: set[int], deadline: float, threads) -> list[Chain]:
    """The best ``R`` replicas of a common ``F`` found among ``free`` nodes (module docstring)."""
    L = cluster.models[model].num_layers
    groups = _groups(cluster, model, free)
    room = sum(len(ix) * p.max_num_layers for _, p, ix in groups)
    cands = _candidates(groups)
    best: tuple[float, list[Chain]] = (0.0, [])
    for R in range(1, room // L + 1):
        lo, hi = 0, len(cands) - 1  # the largest candidate F at which R replicas exist
        any_found = False
        while lo <= hi and time.monotonic() < deadline:
            mid = (lo + hi) // 2
            left = max(0.1, min(5.0, deadline - time.monotonic()))
            found = _solve(cluster, model, groups, R, cands[mid], left, threads)
            if found is None:
                hi = mid - 1
                continue
            any_found, lo = True, mid + 1
            # the scorer decides (a border may have no link as fast as F): every solution found counts
            total = sum(_score(cluster, model, c) for c in found)
            if total > best[0]:
                best = (total, found)
        if not any_found:
            break  # more replicas only get harder
    return best[1]


def plan_replicas(cluster: HelixCluster, model: str, *, time_limit: float = 20.0,
                  threads: int | None = None, exclude: Sequence[int] = ()) -> list[Chain]:
    """Node-disjoint single-node chains over ``[0, L)`` for vLLM (module docstring), best first; nodes in
    ``exclude`` are not used. A Ctrl-C its integer program took (HiGHS returns, said interrupted) is
    raised as ``KeyboardInterrupt``: the planning stops, as the layout search's does."""
    deadline = time.monotonic() + time_limit
    free = {n.index for n in cluster.nodes} - set(exclude)
    chains: list[Chain] = []
    while free and time.monotonic() < deadline:
        more = [c for c in _best_set(cluster, model, free, deadline, threads)
                if _score(cluster, model, c) > 0]
        if not more:
            break
        chains += more
        free -= {i for c in more for i, _ in c}
    return sorted(chains, key=lambda c: -_score(cluster, model, c)) if chains else []


def chains_value(cluster: HelixCluster, model: str, chains: Sequence[Chain]) -> float:
    """The sum of each chain's max-flow scored alone (what disjoint replicas serve)."""
    return math.fsum(_score(cluster, model, c) for c in chains)
