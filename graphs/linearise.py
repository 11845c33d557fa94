"""PipeDream's linearisation of a DAG: merge the tails of every biconnected component, then walk the
groups depth-first. Both forms of the ``pipedream`` solver (one device per stage,
:mod:`solvers.pipedream`; replicated stages, :mod:`solvers.pipedream_stages`) linearise with
:func:`linearise`; they differ only in what they pass it (see their docs).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .disjoint import DisjointSets
from .order import topological_order

__all__ = ["linearise", "idle_sources"]

Regroup = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def idle_sources(n: int, dst, idle) -> np.ndarray:
    """Bool per node ``0..n-1``: the nodes without a predecessor (no edge ends there) that are ``idle``
    (compute nothing and hold nothing): input tensors, which a layer profiler does not see."""
    has_pred = np.zeros(n, bool)
    has_pred[np.asarray(dst, dtype=np.int64)] = True
    return ~has_pred & np.asarray(idle, dtype=bool)


def linearise(n: int, src, dst, *, unseen=None, regroup: Regroup | None = None, rank=None,
              highest_first: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """PipeDream's linearisation of the edges ``src[i] -> dst[i]`` between nodes ``0..n-1``:
    ``(group, order)``, the group of every node (numbered from 0) and the groups in walk order.

    1. View the edges as undirected, find the biconnected components (sets of edges) and merge, per
       component, every node that is the tail of one of its edges into one group (union-find). The
       out-edges of the ``unseen`` nodes (a bool per node; default none) take no part in this step:
       they are what the profiler PipeDream plans from would not see.
    2. ``regroup`` (optional) merges further and names what the walk follows: given every node's
       group as its smallest node, it returns ``(group, gsrc, gdst)``, groups numbered from 0 and the
       directed edges between them. Default: the groups and every edge between two of them.
    3. A cycle between groups (merging can close one) is merged away: the strongly connected
       components become one group each. Only then are groups renumbered; an acyclic result of
       ``regroup`` keeps its numbers.
    4. Walk the groups in topological order, always taking the most recently readied group next (a
       stack). Groups readied together are taken by the least ``rank`` of their nodes (integers; default:
       the node number), smallest first, or with ``highest_first`` largest first.
    """
    import networkx as nx

    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    seen = np.ones(src.size, bool) if unseen is None else ~np.asarray(unseen, dtype=bool)[src]

    # 1. union-find: the root of a group is its smallest node
    sets = DisjointSets(n)

    tails: dict[frozenset, list[int]] = {}
    for a, b in zip(src[seen].tolist(), dst[seen].tolist()):
        if a != b:
            tails.setdefault(frozenset((a, b)), []).append(a)
    und = nx.Graph()
    und.add_edges_from(tuple(e) for e in tails)
    for comp in nx.biconnected_component_edges(und):
        ts = [t for e in comp for t in tails[frozenset(e)]]
        for t in ts[1:]:
            a, b = sets.find(ts[0]), sets.find(t)
            if a != b:
                sets.link(max(a, b), under=min(a, b))
    label = np.array(sets.roots(), np.int64)

    # 2. further merges and the edges to walk
    if regroup is None:
        _, group = np.unique(label, return_inverse=True)
        group = group.reshape(-1).astype(np.int64)
        gs, gd = group[src], group[dst]
    else:
        group, gs, gd = regroup(label)
        group, gs, gd = (np.asarray(x, dtype=np.int64) for x in (group, gs, gd))
    G = int(group.max()) + 1 if n else 0
    keep = gs != gd
    gs, gd = gs[keep], gd[keep]

    # 3. merge cycles between groups (renumbering only then)
    if gs.size and topological_order(G, gs, gd) is None:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        m = coo_matrix((np.ones(gs.size), (gs, gd)), shape=(G, G)).tocsr()
        G, comp = connected_components(m, directed=True, connection="strong")
        comp = comp.astype(np.int64)
        group, gs, gd = comp[group], comp[gs], comp[gd]
        keep = gs != gd
        gs, gd = gs[keep], gd[keep]

    # 4. the walk; readied groups are stacked in ascending key, so the largest key is taken first
    least = np.full(G, np.iinfo(np.int64).max)
    np.minimum.at(least, group, np.arange(n) if rank is None else np.asarray(rank, dtype=np.int64))
    order = topological_order(G, gs, gd, key=least if highest_first else -least)
    return group, order
