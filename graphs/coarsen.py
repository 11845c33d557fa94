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
"""

from __future__ import annotations

import numpy as np

from .contract import ClassGraph, contract
from .model import Cluster, OpGraph

__all__ = ["with_groups", "merge_chains", "merge_by_key", "name_prefix_keys"]


def with_groups(graph: OpGraph, groups: np.ndarray) -> OpGraph:
    """A copy of ``graph`` whose nodes with equal ``groups[u]`` must share a device (on top of the
    graph's own colocation classes)."""
    # union of the old classes and the new groups, as connected components over nodes
    n = graph.num_nodes
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for key in (graph.colocation, np.asarray(groups)):
        first: dict[int, int] = {}
        for u, k in enumerate(key.tolist()):
            if k < 0:
                continue
            if k in first:
                a, b = find(u), find(first[k])
                if a != b:
                    parent[a] = b
            else:
                first[k] = u
    roots = np.array([find(u) for u in range(n)], dtype=np.int64)
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
    parent = list(range(C))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    merged_cost = cost.tolist()
    for u, v in zip(items.src.tolist(), items.dst.tolist()):  # items are in topological order
        if outdeg[u] == 1 and indeg[v] == 1:
            a, b = find(u), find(v)
            if merged_cost[a] + merged_cost[b] <= grain:
                parent[b] = a
                merged_cost[a] += merged_cost[b]
    groups = np.array([find(c) for c in range(C)], dtype=np.int64)[items.node_class]
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
