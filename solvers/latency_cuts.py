"""Latency start: a topological order cut into consecutive segments, one accelerator each, at the cut
points that a shortest path over the order finds cheapest.

Items are the blocks of :func:`solvers.greedy.blocks` (colocation classes, cycles fused) in one of its
two depth-first topological orders. A placement of this shape puts items ``i..j`` on one accelerator
(a convex set: everything between two of them in a topological order is between them in the order) or
one item on the fastest host. Run one after another, the pieces take at most the sum of their times, so
that sum bounds the placement's latency from above (a piece starts no later than the previous one ends):

* an accelerator segment takes its items' compute on its kind, plus the transfer (on that kind) of every
  node in it with a successor after it and of every node before it with a successor in it, once per node
  (the latency model's ``comm_out`` and ``comm_in``); its items must fit the kind's memory;
* a host item takes its nodes' host compute, summed.

The cheapest cut of the order (a shortest path over positions, with the number of accelerators used per
kind in the state, at most each kind's count) is returned; the latency evaluator then scores it, and the
latency search (:mod:`solvers.latency_search`) starts from it.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from graphs.latency import host_kinds
from graphs.model import Cluster, OpGraph

__all__ = ["cut_placement"]

_MAX_STATES = 512  # count vectors (accelerators used per kind) the shortest path keeps per position


def cut_placement(graph: OpGraph, cluster: Cluster, *, later_first: bool = False,
                  deadline: float | None = None) -> np.ndarray | None:
    """The cheapest cut of a topological order into accelerator segments and host items (see the module
    doc); ``later_first`` picks :func:`solvers.greedy.blocks`'s other order. ``None`` when no cut fits
    (memory, unsupported nodes) or the deadline (a ``time.perf_counter()`` value) passes."""
    from .greedy import blocks  # scipy's graph routines: imported when a cut is computed

    n = graph.num_nodes
    if n == 0:
        return None
    block, B, border = blocks(graph, later_first=later_first)
    bpos = np.empty(B, np.int64)
    bpos[border] = np.arange(B)
    p = bpos[block]  # the position of every node's item in the order
    compute_c, comm_c = graph.costs_for(cluster)
    hosts = host_kinds(cluster)
    acc = [t for t, k in enumerate(cluster.kinds) if k.count > 0 and not hosts[t]]
    host = [t for t, k in enumerate(cluster.kinds) if k.count > 0 and hosts[t]]
    counts = [cluster.kinds[t].count for t in acc]
    while math.prod(c + 1 for c in counts) > _MAX_STATES:
        counts[int(np.argmax(counts))] -= 1
    states = list(itertools.product(*[range(c + 1) for c in counts]))
    sid = {s: k for k, s in enumerate(states)}
    S = len(states)
    step = [[sid.get(tuple(v + (i == ti) for i, v in enumerate(s)), -1) for ti in range(len(acc))]
            for s in states]

    mem = np.concatenate([[0.0], np.cumsum(np.bincount(p, weights=graph.memory, minlength=B))])
    comp, unsup = {}, {}
    for t in acc:
        ok = np.isfinite(compute_c[t])
        comp[t] = np.concatenate([[0.0], np.cumsum(np.bincount(p, weights=np.where(ok, compute_c[t], 0.0),
                                                               minlength=B))])
        unsup[t] = np.concatenate([[0], np.cumsum(np.bincount(p[~ok], minlength=B))])
    host_item = np.full(B, np.inf)
    for t in host:
        c = np.bincount(p, weights=compute_c[t], minlength=B)  # inf stays inf: not on this host kind
        host_item = np.minimum(host_item, np.where(np.isnan(c), np.inf, c))
    host_kind_of_item = np.full(B, -1, np.int64)
    for t in host:
        c = np.bincount(p, weights=compute_c[t], minlength=B)
        host_kind_of_item[(c == host_item) & np.isfinite(c) & (host_kind_of_item < 0)] = t

    src, dst = graph.src, graph.dst
    cross = p[src] != p[dst]
    es, ed = src[cross], dst[cross]
    pes, ped = p[es], p[ed]
    last = np.full(n, -1, np.int64)  # the last item position a node feeds
    np.maximum.at(last, es, ped)
    sends = last > p

    best = np.full((B + 1, S), np.inf)
    best[0, sid[(0,) * len(acc)]] = 0.0
    par_i = np.full((B + 1, S), -1, np.int64)  # where the piece ending here starts
    par_k = np.full((B + 1, S), -1, np.int64)  # the state before it
    par_t = np.full((B + 1, S), -1, np.int64)  # its kind (-1: a host item)
    for i in range(B):
        if deadline is not None and time.perf_counter() > deadline:
            return None
        row = best[i]
        live = np.flatnonzero(np.isfinite(row))
        if live.size == 0:
            continue
        if np.isfinite(host_item[i]):
            cand = row + host_item[i]
            better = cand < best[i + 1]
            best[i + 1, better] = cand[better]
            par_i[i + 1, better], par_k[i + 1, better], par_t[i + 1, better] = i, np.flatnonzero(better), -1
        if not acc:
            continue
        # segments [i, j] for every j >= i: who sends out (items i..j with a successor after j) and who
        # sends in (a node before i, once, from the first j that holds one of its successors)
        out_sel = sends & (p >= i)
        in_sel = (pes < i) & (ped >= i)
        first = np.full(n, B, np.int64)
        np.minimum.at(first, es[in_sel], ped[in_sel])
        senders = np.flatnonzero(first < B)
        m = B - i
        for ti, t in enumerate(acc):
            c = comm_c[t]
            out = np.cumsum(np.bincount(p[out_sel] - i, weights=c[out_sel], minlength=m + 1)
                            - np.bincount(last[out_sel] - i, weights=c[out_sel], minlength=m + 1))[:m]
            inn = np.cumsum(np.bincount(first[senders] - i, weights=c[senders], minlength=m))[:m]
            seg = comp[t][i + 1:] - comp[t][i] + out + inn
            cap = cluster.kinds[t].memory
            ok = unsup[t][i + 1:] == unsup[t][i]
            if cap is not None:
                ok &= mem[i + 1:] - mem[i] <= cap
            seg = np.where(ok, seg, np.inf)
            for k in live.tolist():
                k2 = step[k][ti]
                if k2 < 0:
                    continue
                cand = row[k] + seg
                tgt = best[i + 1:, k2]
                better = cand < tgt
                if better.any():
                    tgt[better] = cand[better]
                    js = np.flatnonzero(better) + i + 1
                    par_i[js, k2], par_k[js, k2], par_t[js, k2] = i, k, ti
    k = int(np.argmin(best[B]))
    if not np.isfinite(best[B, k]):
        return None
    first_dev = np.concatenate([[0], np.cumsum([kd.count for kd in cluster.kinds])[:-1]])
    used = [0] * len(acc)
    item_dev = np.empty(B, np.int64)
    pieces = []
    j = B
    while j > 0:
        i, k0, ti = int(par_i[j, k]), int(par_k[j, k]), int(par_t[j, k])
        pieces.append((i, j, ti))
        j, k = i, k0
    for i, j, ti in reversed(pieces):
        if ti < 0:
            item_dev[border[i]] = first_dev[host_kind_of_item[i]]
        else:
            item_dev[border[i:j]] = first_dev[acc[ti]] + used[ti]
            used[ti] += 1
    return item_dev[block]
