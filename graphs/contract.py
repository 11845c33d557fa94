"""Contract an operator graph into the *class graph* that contiguous placement works on.

Every colocation class becomes one item (a forward part and a backward part that always share a
device); a node without a class is an item of its own. Items are ordered by the forward edges between
them; a backward-only item (no forward node) gets an empty forward stand-in whose forward edges mirror
its backward edges. Contraction can create cycles; every strongly connected component is fused into one
item (its nodes must share a device in any contiguous placement anyway).

Optionally, zero-cost leaves are merged into their only neighbour (a class with zero compute on every
device kind whose nodes touch exactly one other class). This never changes the optimum: moving such a
class onto its neighbour's device removes communication and adds no compute, and keeps every device's
set contiguous. Its memory must not bind, so the merge is only done when the class holds no memory or
the whole graph fits on the smallest device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import Cluster, OpGraph
from .order import topological_order

__all__ = ["ClassGraph", "contract", "colocation_items", "order_edges", "item_edges"]


@dataclass(frozen=True, eq=False)
class ClassGraph:
    """Items of a contiguous placement. ``node_class[u]`` is the item of node ``u``; items are numbered
    in a topological order of the forward item DAG ``(src, dst)``."""

    graph: OpGraph
    node_class: np.ndarray  # [n] int64
    num_classes: int
    src: np.ndarray  # [e] int64, forward edges between items (no duplicates, acyclic)
    dst: np.ndarray
    merged_zero_cost: int = 0  # how many items the zero-cost merge removed

    def members(self) -> list[np.ndarray]:
        order = np.argsort(self.node_class, kind="stable")
        bounds = np.searchsorted(self.node_class[order], np.arange(self.num_classes + 1))
        return [order[bounds[c]:bounds[c + 1]] for c in range(self.num_classes)]

    def class_sums(self, values: np.ndarray) -> np.ndarray:
        """Sum a per-node array (``[n]`` or ``[K, n]``) over each item."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim == 1:
            return np.bincount(self.node_class, weights=values, minlength=self.num_classes)
        out = np.zeros((values.shape[0], self.num_classes))
        for t in range(values.shape[0]):
            # bincount turns inf*0 into nan, so sum explicitly with np.add.at
            np.add.at(out[t], self.node_class, values[t])
        return out


def order_edges(graph: OpGraph, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The operator pairs that order a pipeline (``cls``: every operator's item): the forward edges,
    plus the backward edges mirrored where an endpoint's item has no forward operator (stand-ins)."""
    s, d = graph.src, graph.dst
    bw = graph.backward
    fwd = ~bw[s] & ~bw[d]
    has_fwd = np.zeros(int(cls.max()) + 1 if cls.size else 0, bool)
    has_fwd[cls[~bw]] = True
    standin = bw[s] & bw[d] & (~has_fwd[cls[s]] | ~has_fwd[cls[d]])
    return np.concatenate([s[fwd], d[standin]]), np.concatenate([d[fwd], s[standin]])


def item_edges(graph: OpGraph, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward edges between items: :func:`order_edges` between items, without duplicates."""
    a, b = order_edges(graph, cls)
    es, ed = cls[a], cls[b]
    keep = es != ed
    if not keep.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = np.unique(np.stack([es[keep], ed[keep]], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def colocation_items(graph: OpGraph) -> tuple[np.ndarray, int]:
    """Item of every node when only colocation classes are contracted, and the number of items."""
    key = np.where(graph.colocation >= 0, graph.colocation, -1 - np.arange(graph.num_nodes))
    return _relabel(key)


def _relabel(labels: np.ndarray) -> tuple[np.ndarray, int]:
    uniq, inv = np.unique(labels, return_inverse=True)
    return inv.astype(np.int64), len(uniq)


def contract(graph: OpGraph, cluster: Cluster | None = None, *, merge_zero_cost: bool = True) -> ClassGraph:
    """Contract colocation classes and cycles (and, if asked, zero-cost leaves); see the module doc."""
    # 1. colocation classes (a node without one is its own item)
    cls, C = colocation_items(graph)

    # 2. fuse strongly connected components of the item graph (only when there is a cycle)
    s, d = item_edges(graph, cls)
    if s.size and topological_order(C, s, d) is None:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        m = coo_matrix((np.ones(s.size), (s, d)), shape=(C, C)).tocsr()
        _, comp = connected_components(m, directed=True, connection="strong")
        cls, C = _relabel(comp[cls])

    merged = 0
    if merge_zero_cost:
        cls, merged = _merge_zero_cost_leaves(graph, cluster, cls, C)
        cls, C = _relabel(cls)

    # 3. number items in a topological order
    s, d = item_edges(graph, cls)
    order = topological_order(C, s, d)
    rank = np.empty(C, np.int64)
    rank[order] = np.arange(C)
    cls = rank[cls]
    s, d = rank[s], rank[d]
    o = np.lexsort((d, s))
    return ClassGraph(graph, cls, C, s[o], d[o], merged)


def _merge_zero_cost_leaves(graph: OpGraph, cluster: Cluster | None, cls: np.ndarray, C: int):
    """Merge, repeatedly, every zero-cost item with exactly one neighbouring item into that neighbour."""
    if cluster is not None:
        compute, _ = graph.costs_for(cluster)
        caps = [k.memory for k in cluster.kinds if k.count > 0 and k.memory is not None]
    else:
        compute, caps = graph.compute, []
    total_mem = float(graph.memory.sum())
    memory_binds = bool(caps) and total_mem > min(caps)

    zero_node = (compute == 0).all(axis=0)  # inf (unsupported) is not zero
    item_zero = np.ones(C, bool)
    np.logical_and.at(item_zero, cls, zero_node)
    item_mem = np.bincount(cls, weights=graph.memory, minlength=C)
    eligible = item_zero & ((item_mem == 0) | (not memory_binds))
    if not eligible.any():
        return cls, 0

    # undirected neighbourhoods between items over every edge (forward, backward, cross)
    a, b = cls[graph.src], cls[graph.dst]
    keep = a != b
    nbrs: list[set[int]] = [set() for _ in range(C)]
    for x, y in zip(a[keep].tolist(), b[keep].tolist()):
        nbrs[x].add(y)
        nbrs[y].add(x)
    parent = list(range(C))
    queue = [c for c in range(C) if eligible[c] and len(nbrs[c]) == 1]
    merged = 0
    while queue:
        c = queue.pop()
        if parent[c] != c or len(nbrs[c]) != 1:
            continue
        (t,) = nbrs[c]
        parent[c] = t
        nbrs[t].discard(c)
        nbrs[c] = set()
        merged += 1
        if eligible[t] and len(nbrs[t]) == 1:
            queue.append(t)

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    roots = np.array([root(c) for c in range(C)], dtype=np.int64)
    return roots[cls], merged
