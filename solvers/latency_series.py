"""A lower bound on the latency from the graph's series structure: split at *bottleneck* nodes, bound
each piece on its own, and add the pieces' bounds.

A node ``c`` is a bottleneck when every other node is one of its ancestors or one of its descendants.
Then, with ``G1`` = ``c`` and its ancestors and ``G2`` = its descendants, every placement's latency
is at least ``OPT(G1) + OPT(G2)``, the least latencies of the two pieces placed on their own (each on
the whole cluster, with the same number of subgraphs per accelerator, colocation classes restricted to
the piece). Why, in the latency model of :mod:`graphs.latency` (subgraphs are convex):

* a subgraph that holds a node of ``G1`` and one of ``G2`` holds ``c`` (a path joins them through
  ``c``), so at most one subgraph ``S`` straddles the two pieces, and no node of ``G2`` outside ``S``
  feeds ``S`` (it would lie on a path from ``c`` back into ``S``);
* split ``S`` into ``S1 = S ∩ G1`` and ``S2 = S ∩ G2``: every transfer either part pays on its own
  piece is one ``S`` pays (``c`` is a sink of ``G1`` and absent from ``G2``), so the two durations add
  up to at most ``S``'s; every other subgraph pays no more on its piece than in the whole graph;
* on ``G1`` alone every task starts no later than in the whole schedule, so ``G1`` is done by
  ``start(S) + dur(S1)`` (by the finish of ``c`` when ``c`` is on a host); every node of ``G2`` outside
  ``S`` descends from ``c`` and starts after ``S`` finishes, so ``G2`` alone, ``S2`` first, is done by
  ``latency - finish(S) + dur(S2)``. Adding the two: ``OPT(G1) + OPT(G2) <= latency``.

The split is applied again inside each piece (removing ``c`` from ``G2`` can make new bottlenecks,
e.g. where ``c`` fed a residual connection) until no piece has one; :func:`series_bound` adds the
bounds of those last pieces, the *blocks*. Any lower bound of a block will do (a path bound, an
integer program's proven bound), and identical blocks (a transformer's repeated layers) are bounded
once.

A bottleneck is found by a sufficient test on one topological order: ``c`` at position ``k`` with no
edge from before ``k`` to after it, every node before ``k`` reaching some node at ``k`` or later (so,
through ``c``, reaching ``c``) and every node after ``k`` reached from some node at ``k`` or earlier.
A bottleneck that an edge bypasses (a residual connection around it) is missed until the split at an
earlier bottleneck removes that edge's tail.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from graphs.model import Cluster, OpGraph
from graphs.order import topological_order

__all__ = ["induced", "series_blocks", "series_bound"]


def induced(graph: OpGraph, nodes: np.ndarray) -> OpGraph:
    """The subgraph of ``graph`` on ``nodes`` (sorted node indices): their costs, memory and
    colocation classes, and the edges between them."""
    nodes = np.asarray(nodes, np.int64)
    edges = np.stack(_edges_within(graph, nodes), axis=1)
    keep_nodes = nodes.tolist()
    return OpGraph.build(names=[graph.names[u] for u in keep_nodes], ids=[graph.ids[u] for u in keep_nodes],
                         kinds=graph.kinds, compute=graph.compute[:, nodes], comm=graph.comm[:, nodes],
                         memory=graph.memory[nodes], edges=edges, backward=graph.backward[nodes],
                         colocation=graph.colocation[nodes], source=graph.source, meta=graph.meta)


def _edges_within(graph: OpGraph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges of ``graph`` between ``nodes`` (sorted node indices), as positions in ``nodes``."""
    pos = np.full(graph.num_nodes, -1, np.int64)
    pos[nodes] = np.arange(nodes.size)
    keep = (pos[graph.src] >= 0) & (pos[graph.dst] >= 0)
    return pos[graph.src[keep]], pos[graph.dst[keep]]


def _cuts(n: int, src: np.ndarray, dst: np.ndarray, order: np.ndarray) -> list[int]:
    """Positions ``k < n - 1`` in ``order`` whose node passes the bottleneck test (see the module doc)."""
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    ps, pd = pos[src], pos[dst]
    # edges over position k: ps < k < pd
    over = np.zeros(n + 1, np.int64)
    np.add.at(over, ps + 1, 1)
    np.add.at(over, pd, -1)
    over = np.cumsum(over)[:n]
    # the farthest position a node reaches (-1: a sink) and the nearest that reaches it (n: a source)
    far = np.full(n, -1, np.int64)
    near = np.full(n, n, np.int64)
    by_pos_src = np.argsort(ps, kind="stable")
    by_pos_dst = np.argsort(pd, kind="stable")
    succ_ptr = np.searchsorted(ps[by_pos_src], np.arange(n + 1))
    pred_ptr = np.searchsorted(pd[by_pos_dst], np.arange(n + 1))
    for p in range(n - 1, -1, -1):
        kids = pd[by_pos_src[succ_ptr[p]:succ_ptr[p + 1]]]
        if kids.size:
            far[p] = max(int(kids.max()), int(far[kids].max()))
    for p in range(n):
        parents = ps[by_pos_dst[pred_ptr[p]:pred_ptr[p + 1]]]
        if parents.size:
            near[p] = min(int(parents.min()), int(near[parents].min()))
    # before k: every node reaches k or later; after k: every node is reached from k or earlier
    reach_ok = np.concatenate([[n], np.minimum.accumulate(far)])[:n] >= np.arange(n)
    from_ok = np.concatenate([np.maximum.accumulate(near[::-1])[::-1][1:], [-1]]) <= np.arange(n)
    ok = (over == 0) & reach_ok & from_ok
    ok[n - 1] = False  # a sink: nothing after it to split off
    return np.flatnonzero(ok).tolist()


def series_blocks(graph: OpGraph) -> list[np.ndarray]:
    """The blocks of the repeated split at bottleneck nodes (see the module doc): sorted node index
    arrays that partition the graph's nodes."""
    out: list[np.ndarray] = []
    stack = [np.arange(graph.num_nodes, dtype=np.int64)]
    while stack:
        nodes = stack.pop()
        if nodes.size <= 1:
            out.append(nodes)
            continue
        src, dst = _edges_within(graph, nodes)
        order = topological_order(nodes.size, src, dst)
        cuts = _cuts(nodes.size, src, dst, order)
        if not cuts:
            out.append(nodes)
            continue
        bounds = [0] + [k + 1 for k in cuts] + [nodes.size]
        for a, b in zip(bounds[:-1], bounds[1:]):
            stack.append(np.sort(nodes[order[a:b]]))
    out.sort(key=lambda b: int(b[0]) if b.size else -1)
    return out


def _key(graph: OpGraph) -> bytes:
    """Equal for two blocks that are the same placement problem (same costs, memory, edges and classes
    in the same node order)."""
    _, colo = np.unique(graph.colocation, return_inverse=True)
    colo = np.where(graph.colocation >= 0, colo, -1)
    parts = [graph.compute, graph.comm, graph.memory, graph.src, graph.dst, colo.astype(np.int64),
             np.array([graph.num_nodes])]
    return b"|".join(np.ascontiguousarray(p).tobytes() for p in parts) + "|".join(graph.kinds).encode()


def series_bound(graph: OpGraph, cluster: Cluster,
                 block_bound: Callable[[OpGraph, Cluster], float]) -> tuple[float, list[dict]]:
    """The sum over :func:`series_blocks` of ``block_bound(block graph, cluster)`` (a lower bound on the
    least latency of that block placed on its own), each distinct block bounded once; with one entry
    per block (its size and bound) in the order of the blocks. ``-inf`` when a block has no finite bound
    (nothing is proven then)."""
    cache: dict[bytes, float] = {}
    total = 0.0
    rows = []
    for nodes in series_blocks(graph):
        g = induced(graph, nodes)
        key = _key(g)
        if key not in cache:
            cache[key] = float(block_bound(g, cluster))
        b = cache[key]
        rows.append({"nodes": int(nodes.size), "bound": b})
        if not math.isfinite(b):
            return -math.inf, rows
        total += b
    return total, rows
