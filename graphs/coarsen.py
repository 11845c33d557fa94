"""Coarsening: make a graph narrower for the DP by forcing some operators to share a device.

Coarsening only *adds* colocation constraints, so a placement of the coarse graph is a valid placement
of the original one (same nodes, same costs, same evaluator): nothing is approximated except the set
of placements searched. Two ways, both cheap:

* :func:`merge_chains` — a forward edge ``u -> v`` where ``u`` has no other forward successor and ``v``
  no other forward predecessor is merged, as long as the merged item's compute stays within ``grain``.
  Long branches of parallel regions shrink to a few items, which is what makes the number of ideals
  explode; the grain bounds what is lost (a stage boundary moves by at most one merged item).
* :func:`merge_by_key` — operators that share a key (the reference format's ``layerId``, or a name
  prefix such as ``layer3.``) become one item: the layer graph of an operator graph.

**The stage model** (:mod:`graphs.parallel`), :func:`merge_stage_chains`: merge chains of nodes into one
node, so that the exact solvers run on a smaller graph. A plan of the coarse problem maps back to a plan of
the original with the same value (:meth:`Coarsening.expand`), so every coarse optimum is a valid plan of the
original; it is optimal there only among plans that keep each merged chain in one stage.

A *chain edge* ``u -> v`` is a DAG edge where ``u`` has no other successor and ``v`` no other
predecessor. Merging its two ends is exact in the model's terms for the plans that keep them together:

* the merged node runs on ``(kind, t)`` where both ends do, and its variants are the pairs of their
  variants (``time``, ``params``, ``a``, ``b``, ``w`` add up, so do the sync terms), at most
  ``max_variants`` pairs per ``(kind, t)``; an edge whose merge would exceed that is not merged;
* a tensor keeps its times; a merged node drops itself from the tensor's consumers (the tensor never
  crosses between the two), and a tensor left with no consumer is dropped with its sync terms (they
  are never paid: it cannot enter or leave a stage).

Merges go smallest combined fastest time first, until ``target`` nodes remain or no chain edge can be
merged.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from .contract import ClassGraph, contract
from .disjoint import DisjointSets
from .model import Cluster, OpGraph
from .parallel import ParallelGraph, ParallelProblem, Stage, Variant

__all__ = ["with_groups", "merge_chains", "merge_by_key", "name_prefix_keys", "Coarsening",
           "merge_stage_chains"]


def with_groups(graph: OpGraph, groups: np.ndarray) -> OpGraph:
    """A copy of ``graph`` whose nodes with equal ``groups[u]`` must share a device (on top of the
    graph's own colocation classes)."""
    # union of the old classes and the new groups, as connected components over nodes
    sets = DisjointSets(graph.num_nodes)
    for key in (graph.colocation, np.asarray(groups)):
        first: dict[int, int] = {}
        for u, k in enumerate(key.tolist()):
            if k < 0:
                continue
            if k in first:
                a, b = sets.find(u), sets.find(first[k])
                if a != b:
                    sets.link(a, under=b)
            else:
                first[k] = u
    roots = np.array(sets.roots(), dtype=np.int64)
    return OpGraph.build(
        names=graph.names, ids=graph.ids, kinds=graph.kinds, compute=graph.compute, comm=graph.comm,
        memory=graph.memory, edges=np.stack([graph.src, graph.dst], axis=1), backward=graph.backward,
        colocation=roots, source=graph.source, meta={**graph.meta, "coarsened": True},
    )


def merge_chains(graph: OpGraph, cluster: Cluster, grain: float, *,
                 items: ClassGraph | None = None) -> OpGraph:
    """Merge chain links of the item graph while the merged compute (on the cheapest device kind that
    can run it) stays at most ``grain``."""
    items = items or contract(graph, cluster)
    compute, _ = graph.costs_for(cluster)
    active = np.array([k.count > 0 for k in cluster.kinds])
    node_cost = np.where(active[:, None], compute, np.inf).min(axis=0)
    node_cost = np.where(np.isfinite(node_cost), node_cost, 0.0)
    C = items.num_classes
    cost = np.bincount(items.node_class, weights=node_cost, minlength=C)
    outdeg = np.bincount(items.src, minlength=C)
    indeg = np.bincount(items.dst, minlength=C)
    sets = DisjointSets(C)
    merged_cost = cost.tolist()
    for u, v in zip(items.src.tolist(), items.dst.tolist()):  # items are in topological order
        if outdeg[u] == 1 and indeg[v] == 1:
            a, b = sets.find(u), sets.find(v)
            if merged_cost[a] + merged_cost[b] <= grain:
                sets.link(b, under=a)
                merged_cost[a] += merged_cost[b]
    groups = np.array(sets.roots(), dtype=np.int64)[items.node_class]
    return with_groups(graph, groups)


def merge_by_key(graph: OpGraph, keys) -> OpGraph:
    """Operators with the same key (``None`` or a negative number: no key) share a device."""
    codes: dict = {}
    groups = np.array([-1 if (k is None or (isinstance(k, (int, np.integer)) and k < 0))
                       else codes.setdefault(k, len(codes)) for k in keys], dtype=np.int64)
    return with_groups(graph, groups)


def name_prefix_keys(graph: OpGraph, depth: int = 1, separators: str = "./") -> list:
    """The first ``depth`` components of every node name (``layer3.attn.q`` -> ``layer3``), or
    ``None`` for names with fewer components; backward nodes use their forward name's key."""
    out = []
    for name in graph.names:
        base = name[:-5] if name.endswith(".grad") else name
        for sep in separators[1:]:
            base = base.replace(sep, separators[0])
        parts = [p for p in base.split(separators[0]) if p]
        out.append(separators[0].join(parts[:depth]) if len(parts) > depth else None)
    return out


# --------------------------------------------------------------------------- the stage model
@dataclass(frozen=True, eq=False)
class Coarsening:
    """The coarse problem, the original nodes of every coarse node, and the original variants (one per
    member, in ``members`` order) of every coarse variant."""

    problem: ParallelProblem
    members: tuple[tuple[int, ...], ...]
    parts: tuple[tuple[int, ...], ...]

    def expand(self, plan: list[Stage]) -> list[Stage]:
        """The original problem's plan of a coarse ``plan`` (same stages, kinds, degrees and value)."""
        out = []
        for st in plan:
            nodes, vs = [], []
            for u, vi in zip(st.nodes, st.variants):
                nodes.extend(self.members[u])
                vs.extend(self.parts[vi])
            order = np.argsort(nodes, kind="stable")
            out.append(Stage(tuple(int(nodes[i]) for i in order), st.kind, st.d, st.t,
                             tuple(int(vs[i]) for i in order)))
        return out


def merge_stage_chains(problem: ParallelProblem, target: int, *, max_variants: int = 16) -> Coarsening:
    """Merge chain edges of ``problem``'s graph (see the module doc) down to about ``target`` nodes."""
    g = problem.graph
    n = g.num_nodes
    members: list[list[int]] = [[u] for u in range(n)]
    # per node: (kind, t) -> list of (original variant tuple, merged Variant fields)
    opts: list[dict[tuple[int, int], list[tuple[tuple[int, ...], dict]]]] = [{} for _ in range(n)]
    for vi, v in enumerate(g.variants):
        opts[v.node].setdefault((v.kind, v.t), []).append(((vi,), _fields(v)))
    succ = [set() for _ in range(n)]
    pred = [set() for _ in range(n)]
    for a, b in zip(g.src.tolist(), g.dst.tolist()):
        succ[a].add(b)
        pred[b].add(a)
    alive = [True] * n

    def fastest(u):
        return sum(min(f["time"] for _, f in vs) for vs in opts[u].values()) / max(1, len(opts[u]))

    def mergeable(a, b):
        if not (alive[a] and alive[b]) or succ[a] != {b} or pred[b] != {a}:
            return False
        if set(opts[a]) != set(opts[b]):
            return False
        return all(len(opts[a][kt]) * len(opts[b][kt]) <= max_variants for kt in opts[a])

    heap = [(fastest(a) + fastest(b), a, b) for a in range(n) for b in succ[a]]
    heapq.heapify(heap)
    count = n
    while count > target and heap:
        _, a, b = heapq.heappop(heap)
        if not mergeable(a, b):
            continue
        # merge b into a
        opts[a] = {kt: [(pa + pb, _add(fa, fb)) for (pa, fa), (pb, fb) in itertools.product(opts[a][kt],
                                                                                           opts[b][kt])]
                   for kt in opts[a]}
        members[a].extend(members[b])
        alive[b] = False
        succ[a] = succ[b]
        for c in succ[b]:
            pred[c].discard(b)
            pred[c].add(a)
        count -= 1
        for c in succ[a]:
            heapq.heappush(heap, (fastest(a) + fastest(c), a, c))
        for c in pred[a]:
            heapq.heappush(heap, (fastest(c) + fastest(a), c, a))

    keep = [u for u in range(n) if alive[u]]
    new_of = np.full(n, -1, np.int64)
    for i, u in enumerate(keep):
        for m in members[u]:
            new_of[m] = i
    tensors, tensor_map = [], {}
    for e in range(g.num_tensors):
        p = int(new_of[g.tensor_src[e]])
        cons = sorted({int(new_of[c]) for c in g.consumers(e)} - {p})
        if cons:
            tensor_map[e] = len(tensors)
            tensors.append((p, cons, g.tensor_time[:, e]))
    variants, parts = [], []
    for i, u in enumerate(keep):
        for (k, t), vs in opts[u].items():
            for orig, f in vs:
                # the variant's parts are in members[u] order, as expand() pairs them
                name = "+".join(g.variants[vi].name for vi in orig[:3]) + ("+..." if len(orig) > 3 else "")
                variants.append(Variant(i, k, t, name if len(orig) > 1 else g.variants[orig[0]].name,
                                        f["time"], params=f["params"], a=f["a"], b=f["b"],
                                        w=f["w"],
                                        sync_in={tensor_map[e]: x for e, x in f["sync_in"].items()
                                                 if e in tensor_map},
                                        sync_out={tensor_map[e]: x for e, x in f["sync_out"].items()
                                                  if e in tensor_map}))
                parts.append(orig)
    ids = [g.ids[members[u][0]] if len(members[u]) == 1 else
           f"{g.names[members[u][0]]}..{g.names[members[u][-1]]}" for u in keep]
    edges = sorted({(int(new_of[a]), int(new_of[b])) for a, b in zip(g.src.tolist(), g.dst.tolist())
                    if new_of[a] != new_of[b]})
    cg = ParallelGraph.build(ids=ids, names=ids, num_kinds=len(problem.kinds), edges=edges, tensors=tensors,
                             variants=variants, source=g.source, tensor_edges=False)
    return Coarsening(problem.with_options(graph=cg), tuple(tuple(members[u]) for u in keep), tuple(parts))


def _fields(v: Variant) -> dict:
    return {"time": v.time, "params": v.params, "a": v.a, "b": v.b, "w": v.w, "sync_in": dict(v.sync_in),
            "sync_out": dict(v.sync_out)}


def _add(x: dict, y: dict) -> dict:
    out = {k: x[k] + y[k] for k in ("time", "params", "a", "b", "w")}
    for side in ("sync_in", "sync_out"):
        d = dict(x[side])
        for e, t in y[side].items():
            d[e] = d.get(e, 0.0) + t
        out[side] = d
    return out
