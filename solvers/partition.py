"""Baseline: a balanced min-cut graph partition (METIS, through ``pymetis``).

The paper compares against Scotch; a maintained multilevel partitioner plays that part here. The
colocation classes (items) of the graph are split into as many parts as there are accelerators (the
devices of kinds that pay communication; every device when there are none), balancing compute and
cutting as little communication as possible:

* a vertex per item, weighted by its compute on the accelerators (the cheapest accelerator kind);
* an undirected edge between two items, weighted by the output costs of the nodes of one that feed
  the other (once per node and neighbouring item, as the evaluator counts them);
* with several accelerator kinds, each part's target share of the weight is proportional to its
  kind's speed.

Weights are scaled to integers (METIS needs them). Items no accelerator can run go to the host
device that runs them fastest. METIS knows neither memory capacities nor the max-load objective, so
the partition is then *repaired*, not improved: while a device holds more memory than it has, the
single move that lowers the overflow most is made (:func:`solvers.local_search.descend` in repair
mode). The result is usually not contiguous.

Options: ``options.seed`` is METIS's seed; ``options.raw["ufactor"]`` its allowed imbalance in
thousandths (METIS's default: 30 = 3%).
"""

from __future__ import annotations

import time

import numpy as np

from graphs.errors import PlacementError
from graphs.model import Cluster, OpGraph

from ._common import finish, no_placement, require_objective
from .base import Solution, SolveOptions, Status
from .local_search import descend, move_problem, overflow

__all__ = ["solve", "item_graph"]

_SCALE = 10_000_000  # total vertex weight after scaling to integers


def item_graph(prob, graph: OpGraph, part_kinds: np.ndarray) -> tuple[np.ndarray, dict]:
    """Vertex weights (cheapest compute over ``part_kinds``) and undirected edge weights between items
    (``{(i, j): weight}`` with ``i < j``)."""
    vw = prob.item_compute[part_kinds].min(axis=0)
    comm = prob.node_comm[:, part_kinds].max(axis=1)
    cls = prob.node_item
    pairs = np.unique(np.stack([graph.src, cls[graph.dst]], axis=1), axis=0) if graph.num_edges \
        else np.zeros((0, 2), np.int64)
    ew: dict[tuple[int, int], float] = {}
    for u, j in pairs.tolist():
        i = int(cls[u])
        if i == j or comm[u] <= 0:
            continue
        key = (min(i, j), max(i, j))
        ew[key] = ew.get(key, 0.0) + float(comm[u])
    return vw, ew


def _metis(nparts: int, vw: np.ndarray, ew: dict, tpwgts, seed: int, ufactor: int | None) -> np.ndarray:
    try:
        import pymetis
    except ImportError:  # pragma: no cover - pymetis is a dependency
        raise PlacementError("the partition solver needs pymetis (pip install pymetis)") from None
    C = vw.size
    total = float(vw.sum()) + sum(ew.values())
    scale = _SCALE / total if total > 0 else 1.0
    adj: list[list[tuple[int, int]]] = [[] for _ in range(C)]
    for (i, j), w in ew.items():
        iw = max(1, int(round(w * scale)))
        adj[i].append((j, iw))
        adj[j].append((i, iw))
    xadj = [0]
    adjncy: list[int] = []
    eweights: list[int] = []
    for row in adj:
        for j, w in row:
            adjncy.append(j)
            eweights.append(w)
        xadj.append(len(adjncy))
    opts = {"seed": int(seed) & 0x7FFFFFFF}
    if ufactor is not None:
        opts["ufactor"] = int(ufactor)
    vweights = [int(round(x * scale)) for x in vw.tolist()]
    res = pymetis.part_graph(nparts, pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                             eweights=eweights if eweights else None, tpwgts=tpwgts,
                             options=pymetis.Options(**opts))
    return np.asarray(res.vertex_part, dtype=np.int64)


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Min-cut balanced partition of the items onto the accelerators, repaired for memory."""
    options = options or SolveOptions()
    require_objective("partition", options, ("max-load",))
    t0 = time.perf_counter()
    prob = move_problem(graph, cluster)
    D = cluster.num_devices
    pays = np.array([k.pays_communication for k in cluster.kinds])
    parts = np.flatnonzero(pays[prob.dkind])
    if parts.size == 0:
        parts = np.arange(D)
    part_kinds = np.unique(prob.dkind[parts])
    finite = np.isfinite(prob.item_compute[part_kinds])  # [Tp, C]
    on_parts = finite.any(axis=0)

    item_dev = np.full(prob.num_items, -1, np.int64)
    # items no accelerator runs: the fastest other device that runs them
    for x in np.flatnonzero(~on_parts).tolist():
        ok = np.flatnonzero(prob.allowed[x])
        if ok.size == 0:
            nodes = [graph.ids[u] for u in np.flatnonzero(prob.node_item == x)[:5]]
            return no_placement("partition", t0, f"no device kind runs node(s) {nodes}")
        item_dev[x] = ok[np.argmin(prob.item_compute[prob.dkind[ok], x])]

    sub = np.flatnonzero(on_parts)
    if sub.size:
        vw, ew = item_graph(prob, graph, part_kinds)
        vw = np.where(np.isfinite(vw), vw, 0.0)
        index = np.full(prob.num_items, -1, np.int64)
        index[sub] = np.arange(sub.size)
        ew_sub = {(int(index[i]), int(index[j])): w for (i, j), w in ew.items()
                  if index[i] >= 0 and index[j] >= 0}
        tpwgts = None
        if part_kinds.size > 1:
            common = finite.all(axis=0)
            base = prob.item_compute[part_kinds[0], common].sum()
            work = np.array([prob.item_compute[t, common].sum() for t in part_kinds])
            speed = base / work if base > 0 and (work > 0).all() else np.ones(part_kinds.size)
            share = speed[np.searchsorted(part_kinds, prob.dkind[parts])]
            share = share / share.sum()
            share[-1] = 1.0 - share[:-1].sum()
            tpwgts = share.tolist()
        if parts.size == 1:
            where = np.zeros(sub.size, np.int64)
        else:
            where = _metis(int(parts.size), vw[sub], ew_sub, tpwgts, options.seed, options.raw.get("ufactor"))
        item_dev[sub] = parts[where]
        # a part whose kind cannot run an item: its fastest device among those that can
        for x in sub[~prob.allowed[sub, item_dev[sub]]].tolist():
            ok = np.flatnonzero(prob.allowed[x])
            item_dev[x] = ok[np.argmin(prob.item_compute[prob.dkind[ok], x])]

    repaired = False
    if overflow(prob, item_dev) > 0:
        deadline = None if options.time_limit is None else t0 + options.time_limit
        item_dev, _ = descend(prob, item_dev, deadline=deadline, repair_only=True)
        repaired = True
        if overflow(prob, item_dev) > 0:
            return no_placement("partition", t0, "the partition could not be repaired to fit the devices' "
                                "memory", status=Status.FEASIBLE)
    stats = {"parts": int(parts.size), "items": prob.num_items, "memory_repair": repaired}
    return finish("partition", graph, cluster, item_dev[prob.node_item], options, t0,
                  message="METIS partition" + (", repaired for memory" if repaired else ""), stats=stats)

