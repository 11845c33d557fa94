"""Baseline: the greedy latency heuristic — operators in topological order, each onto the device that
finishes it earliest, respecting memory.

Items are the colocation classes with cycles between them fused (they must share a device), taken in
a topological order. For each item, every device whose kind runs it and whose memory still holds it
is tried, and the item goes where its estimated finish time is earliest (ties: the device that
already holds one of its predecessors, then the lowest device number):

* on a host (a kind that pays no communication) it starts when its inputs are ready and takes its
  compute time: hosts run as many nodes at once as needed;
* on an accelerator it starts when the device is free and its inputs are ready, and takes its compute
  and the transfer in of every input the device does not hold yet;
* an input that comes from another accelerator is ready once that accelerator has also sent it out
  (the sender pays the transfer the first time a successor lands elsewhere, which delays it).

The estimate is only the heuristic's guide: the placement is evaluated by the latency model
(:func:`graphs.latency.latency`), which is what ``objective`` reports.

``options.raw["strategy"]``: ``"earliest-finish"`` (the above), ``"fill"`` (the reference's greedy:
fill the accelerators one after another with items in topological order while memory lasts, the rest
on the fastest host) or ``"best"`` (default: both, keeping the lower latency). Each runs on two
depth-first topological orders (ties between ready items broken both ways), as the reference's
results depend on that order; the lowest latency is kept.
With ``options.objective == "max-load"`` the same placement is returned with its max-load.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from graphs.contract import colocation_items
from graphs.errors import InputError
from graphs.latency import host_kinds
from graphs.model import Cluster, OpGraph
from graphs.order import topological_order
from graphs.parallel import usable_memory

from ._common import finish, no_placement, objective_value, require_objective
from .base import Solution, SolveOptions, Status

__all__ = ["solve", "blocks", "earliest_finish", "fill"]

STRATEGIES = ("earliest-finish", "fill", "best")


def blocks(graph: OpGraph, *, later_first: bool = False) -> tuple[np.ndarray, int, np.ndarray]:
    """``(block of every node, number of blocks, blocks in a topological order)``: colocation classes
    with every cycle between them fused, over all edges. The order is depth first (a stack of ready
    blocks); of blocks readied together, the one listed first in the graph is taken first, or last
    with ``later_first``."""
    cls, C = colocation_items(graph)
    s, d = cls[graph.src], cls[graph.dst]
    keep = s != d
    if keep.any():
        m = coo_matrix((np.ones(int(keep.sum())), (s[keep], d[keep])), shape=(C, C)).tocsr()
        ncomp, comp = connected_components(m, directed=True, connection="strong")
        if ncomp < C:
            cls = np.unique(comp[cls], return_inverse=True)[1].reshape(-1).astype(np.int64)
            C = int(cls.max()) + 1
            s, d = cls[graph.src], cls[graph.dst]
            keep = s != d
    pairs = np.unique(np.stack([s[keep], d[keep]], axis=1), axis=0) if keep.any() else np.zeros((0, 2), int)
    first = np.full(C, graph.num_nodes)
    np.minimum.at(first, cls, np.arange(graph.num_nodes))
    # depth first (finish a branch before starting the next one), ties by first node
    order = topological_order(C, pairs[:, 0], pairs[:, 1], key=first if later_first else -first)
    return cls, C, order


class _Setup:
    """Per-block sums and per-device facts shared by both strategies."""

    def __init__(self, graph: OpGraph, cluster: Cluster):
        self.graph, self.cluster = graph, cluster
        self.cls, self.C, self.order = blocks(graph)
        self.orders = {"earlier": self.order, "later": blocks(graph, later_first=True)[2]}
        compute, comm = graph.costs_for(cluster)
        T = len(cluster.kinds)
        self.dkind = cluster.device_kind()
        self.host = host_kinds(cluster)[self.dkind]
        self.caps = np.array([usable_memory(cluster.kinds[t].memory) for t in self.dkind.tolist()])
        self.compute = np.zeros((T, self.C))
        for t in range(T):
            np.add.at(self.compute[t], self.cls, compute[t])
        self.memory = np.bincount(self.cls, weights=graph.memory, minlength=self.C)
        self.comm = comm  # [T, n]
        self.members = [[] for _ in range(self.C)]
        for u, c in enumerate(self.cls.tolist()):
            self.members[c].append(u)
        self.preds: list[list[int]] = [[] for _ in range(graph.num_nodes)]
        self.has_succ = np.zeros(graph.num_nodes, bool)
        for a, b in zip(graph.src.tolist(), graph.dst.tolist()):
            if self.cls[a] != self.cls[b]:
                self.preds[b].append(a)
                self.has_succ[a] = True

    def fits(self, x: int, mem: np.ndarray) -> np.ndarray:
        return np.isfinite(self.compute[self.dkind, x]) & (mem + self.memory[x] <= self.caps)


def earliest_finish(st: _Setup) -> np.ndarray | None:
    """The earliest-finish placement (device per block), or ``None`` if some block fits nowhere.

    A node's output is paid for by its accelerator the first time a successor lands elsewhere: that
    delays the sender (its finish and its device) by the transfer."""
    D = st.dkind.size
    dev = np.full(st.C, -1, np.int64)
    node_fin = np.zeros(st.graph.num_nodes)
    sent = np.zeros(st.graph.num_nodes, bool)
    avail = np.zeros(D)
    mem = np.zeros(D)
    received = [set() for _ in range(D)]
    for x in st.order.tolist():
        ok = np.flatnonzero(st.fits(x, mem))
        if ok.size == 0:
            return None
        nodes = st.members[x]
        in_nodes = sorted({p for u in nodes for p in st.preds[u]})
        pdev = {p: int(dev[st.cls[p]]) for p in in_nodes}
        # when each input is out of its device if it has to leave it (sender pays once)
        leave = {p: node_fin[p] + (0.0 if sent[p] or st.host[pdev[p]]
                                   else st.comm[st.dkind[pdev[p]], p]) for p in in_nodes}
        best, best_key = -1, None
        for d in ok.tolist():
            t = int(st.dkind[d])
            ready = max((node_fin[p] if pdev[p] == d else leave[p] for p in in_nodes), default=0.0)
            if st.host[d]:
                fin = ready + st.compute[t, x]
            else:
                cin = sum(st.comm[t, p] for p in in_nodes if pdev[p] != d and p not in received[d])
                fin = max(ready, avail[d]) + st.compute[t, x] + cin
            key = (fin, d not in pdev.values(), d)
            if best_key is None or key < best_key:
                best, best_key = d, key
        d = best
        dev[x] = d
        mem[d] += st.memory[x]
        for p in in_nodes:
            if pdev[p] != d and not sent[p]:
                sent[p] = True
                if not st.host[pdev[p]]:
                    cost = st.comm[st.dkind[pdev[p]], p]
                    node_fin[p] += cost
                    avail[pdev[p]] += cost
        fin = best_key[0]
        if not st.host[d]:
            avail[d] = fin
            received[d].update(p for p in in_nodes if pdev[p] != d)
        for u in nodes:
            node_fin[u] = fin
    return dev


def fill(st: _Setup) -> np.ndarray | None:
    """The reference's greedy: accelerators filled one after another in topological order while memory
    lasts; what no accelerator takes goes to the fastest host that runs it."""
    accel = np.flatnonzero(~st.host)
    hosts = np.flatnonzero(st.host)
    D = st.dkind.size
    mem = np.zeros(D)
    dev = np.full(st.C, -1, np.int64)
    cur = 0
    for x in st.order.tolist():
        placed = False
        while cur < accel.size:
            d = int(accel[cur])
            if st.fits(x, mem)[d]:
                dev[x], placed = d, True
                mem[d] += st.memory[x]
                break
            if mem[d] == 0 and not np.isfinite(st.compute[st.dkind[d], x]):
                break  # unsupported here: leave the device open for the next block
            if mem[d] == 0:
                break  # too big for an empty accelerator: to a host
            cur += 1
        if placed:
            continue
        ok = hosts[st.fits(x, mem)[hosts]] if hosts.size else hosts
        if ok.size == 0:
            ok = np.flatnonzero(st.fits(x, mem))
            if ok.size == 0:
                return None
        d = int(ok[np.argmin(st.compute[st.dkind[ok], x])])
        dev[x] = d
        mem[d] += st.memory[x]
    return dev


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Greedy latency placement (see the module doc)."""
    options = options or SolveOptions()
    require_objective("greedy-latency", options, ("latency", "max-load"))
    strategy = options.raw.get("strategy", "best")
    if strategy not in STRATEGIES:
        raise InputError(f"greedy-latency: unknown strategy {strategy!r}; "
                         f"choose one of: {', '.join(STRATEGIES)}")
    t0 = time.perf_counter()
    st = _Setup(graph, cluster)
    found: dict[str, tuple[float, np.ndarray]] = {}
    for name, fn in (("earliest-finish", earliest_finish), ("fill", fill)):
        if strategy not in (name, "best"):
            continue
        for tie, order in st.orders.items():
            st.order = order
            dev = fn(st)
            if dev is None:
                continue
            a = dev[st.cls]
            value, problems = objective_value(graph, cluster, a, "latency")
            if not problems and math.isfinite(value):
                found[f"{name}/{tie}-first"] = (value, a)
    if not found:
        return no_placement("greedy-latency", t0, "the greedy found no placement that fits the devices' "
                            "memory", status=Status.FEASIBLE)
    name = min(found, key=lambda k: found[k][0])
    stats = {f"latency_{k}": v for k, (v, _) in found.items()}
    stats["strategy"] = name
    # its plan is chosen by latency whatever the objective: under another one, say so beside the value
    why = "" if options.objective == "latency" else f" (chosen for the least latency; {options.objective} " \
        f"is not what it minimises)"
    return finish("greedy-latency", graph, cluster, found[name][1], options, t0,
                  message=f"{name} greedy{why}", stats=stats)
