"""Latency integer program: the placement of an inference graph with the smallest single-sample latency.

The model is :mod:`graphs.latency`'s: host nodes (kinds that pay no communication) run as soon as their
inputs are ready; every accelerator runs up to ``q`` (``options.subgraphs_per_device``) subgraphs one
after another, each starting when all its inputs have arrived and the previous one has finished, and
taking its compute plus its communication in and out. Memory is per accelerator.

Variables, with ``c`` an item (a colocation class when ``q = 1``; a node when ``q > 1``, as colocation is
per device and a class may span a device's subgraphs), ``s = (d, j)`` the ``j``-th subgraph slot of
accelerator ``d`` and ``t`` a host kind:

* ``x[c, s]``, ``h[c, t]`` (binary): where each item goes, exactly one place; with ``q > 1``, every
  member of a colocation class on its first member's device (the sum over the device's slots, or the
  host place, equal);
* ``w[u, s]`` (continuous): an ancestor-closed set of nodes that holds slot ``s`` and none of the nodes
  its outputs reach from outside, so every slot is convex (contiguous);
* ``out[u, s] >= x[u's item, s] - x[v's item, s]``, ``in[u, s] >= x[v's item, s] - x[u's item, s]``
  for every edge ``u -> v``: communication paid by the slot;
* times: node finish ``f[u]``, slot start ``S[s]`` and finish ``F[s] = S[s] + compute + comm``;
  ``f[v] >= f[u] + host compute of v`` along every edge, ``f[u] >= F[s]`` when ``u`` is in ``s``,
  ``S[s] >= f[u]`` when ``u`` feeds ``s`` from outside, ``S[(d, j+1)] >= F[(d, j)]``; the latency is at
  least every sink's finish. The conditional constraints use the horizon ``M`` = the warm start's
  latency (no better placement finishes later), which also bounds every time variable.

The latency variable starts at :func:`latency_bound`: the largest of the critical path and a bound on
a few long paths that counts the transfers and memory limits a path cannot avoid, including the
transfers of nodes off the path that a segment's subgraph cannot hold (with ``q = 1``, through their
colocation classes) (:func:`path_bound`), which the LP relaxation misses (fractional placements pay
almost no communication); it is also the reported bound when the MIP solver proves less
(``options.raw["path_bound"] = False``: the critical path only, as before). Where the graph has
bottleneck nodes (every other node before or after them), the *series bound* of
:mod:`solvers.latency_series` raises it: the blocks between bottlenecks bounded alone (by this solver on
each distinct block, in 40% of the time left) and added (``stats["series_bound"]``,
``options.raw["series_bound"] = False`` leaves it out); when it meets the warm start, HiGHS is not run.

Identical accelerators are ordered by the smallest class each holds (symmetry breaking). The warm start
is the best of ``options.warm_start``, the DP's throughput placement, a greedy fill in topological order
(the reference's latency heuristic), everything on a host, a topological order cut at its cheapest points
(:mod:`solvers.latency_cuts`; ``options.raw["cut_starts"] = False`` leaves them out), and the latency
local search (:mod:`solvers.latency_search`) from each of these, best first, within 15% of the time left
(``stats["warm_start"]`` says which won, ``stats["search"]`` lists the searches;
``options.raw["latency_search"] = False`` leaves it out).
"""

from __future__ import annotations

import math
import time

import numpy as np

from graphs.contract import colocation_items
from graphs.errors import InfeasibleError, InputError, PlacementError
from graphs.evaluate import evaluate
from graphs.latency import host_kinds, latency
from graphs.model import Cluster, OpGraph
from graphs.parallel import usable_memory

from . import _milp
from ._common import none_fits
from .base import Solution, SolveOptions, Status, check_bound, time_left
from .latency_search import improve, in_domain, tolerance

__all__ = ["solve", "greedy_fill", "critical_path", "path_bound", "latency_bound"]

#: what a placement of the latency model must keep, besides memory
_LATENCY_RULE = ("each node runs only on the kinds that have a cost for it, and each accelerator runs at "
                 "most options.subgraphs_per_device subgraphs")


def greedy_fill(graph: OpGraph, cluster: Cluster) -> np.ndarray | None:
    """A quick latency placement: walk the classes in topological order and fill accelerators one after
    another up to their memory, overflowing to a host (``None`` if some class fits nowhere)."""
    cls, C = colocation_items(graph)
    compute_c, _ = graph.costs_for(cluster)
    item_comp = np.zeros((compute_c.shape[0], C))
    for t in range(compute_c.shape[0]):
        np.add.at(item_comp[t], cls, compute_c[t])
    mem = np.bincount(cls, weights=graph.memory, minlength=C)
    hosts = host_kinds(cluster)
    dkind = cluster.device_kind()
    first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]])
    order = _class_order(graph, cls, C)
    accel = [d for d in range(cluster.num_devices) if not hosts[dkind[d]]]
    item_dev = np.full(C, -1, np.int64)
    cur = 0
    used_mem = 0.0
    for c in order:
        placed = False
        while cur < len(accel):
            d = accel[cur]
            t = int(dkind[d])
            cap = cluster.kinds[t].memory
            if np.isfinite(item_comp[t, c]) and (cap is None or used_mem + mem[c] <= cap):
                item_dev[c] = d
                used_mem += mem[c]
                placed = True
                break
            if used_mem == 0.0 and (not np.isfinite(item_comp[t, c]) or (cap is not None and mem[c] > cap)):
                break  # this class cannot go on this kind at all: leave the device open for the next
            cur += 1
            used_mem = 0.0
        if placed:
            continue
        for t in np.flatnonzero(hosts):
            if cluster.kinds[t].count > 0 and np.isfinite(item_comp[t, c]):
                item_dev[c] = first[t]
                placed = True
                break
        if not placed:
            return None
    return item_dev[cls]


def _class_order(graph: OpGraph, cls: np.ndarray, C: int) -> list[int]:
    """Classes in the topological order of their first node."""
    pos = np.empty(graph.num_nodes, np.int64)
    pos[graph.topological_order()] = np.arange(graph.num_nodes)
    first = np.full(C, graph.num_nodes, np.int64)
    np.minimum.at(first, cls, pos)
    return np.argsort(first, kind="stable").tolist()


class _LatencyModel:
    """The latency program (see the module doc). Columns ``x[c, p]`` place *item* ``c`` at *place* ``p``:
    a subgraph slot ``(d, j)`` of an accelerator, or a host device (one place per host kind when its
    memory cannot bind, since which host runs a node does not matter).

    With one subgraph per accelerator the items are the colocation classes. With more, they are the
    nodes, and a class's members share a device, not a subgraph: the model's (and the reference's
    ``lip.py``) colocation is per device, so ``a -> b -> c`` with ``a`` and ``c`` colocated may run
    ``{a}``, ``b`` elsewhere, then ``{c}`` on one accelerator (a class in one slot would have to hold
    ``b`` too, being convex)."""

    def __init__(self, graph: OpGraph, cluster: Cluster, q: int, horizon: float, symmetry: bool = True):
        self.graph, self.cluster, self.q = graph, cluster, q
        n = graph.num_nodes
        col, CC = colocation_items(graph)  # the colocation classes
        if q > 1 and CC < n:
            cls, C = np.arange(n, dtype=np.int64), n  # a class may span a device's subgraphs
        else:
            cls, C = col, CC
        self.cls, self.C = cls, C
        compute_c, comm_c = graph.costs_for(cluster)
        T = compute_c.shape[0]
        comp = np.zeros((T, C))
        for t in range(T):
            np.add.at(comp[t], cls, compute_c[t])
        mem = np.bincount(cls, weights=graph.memory, minlength=C)
        # what a whole class needs on one device (its members share it), per item
        ccomp = np.zeros((T, CC))
        for t in range(T):
            np.add.at(ccomp[t], col, compute_c[t])
        cmem = np.bincount(col, weights=graph.memory, minlength=CC)
        rep = np.zeros(C, np.int64)  # an item's class
        rep[cls] = col
        hosts = host_kinds(cluster)
        dkind = cluster.device_kind()
        self.dkind = dkind
        first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]])
        places: list[tuple[int, int, bool]] = []  # (device, subgraph index, is accelerator slot)
        self.host_place_of_kind: dict[int, int] = {}  # host kinds with a single place
        for t, kind in enumerate(cluster.kinds):
            devs = range(int(first[t]), int(first[t]) + kind.count)
            if not hosts[t]:
                places += [(d, j, True) for d in devs for j in range(q)]
            elif kind.count == 0:
                continue
            elif mem.sum() <= usable_memory(kind.memory):  # one host place holds every node
                self.host_place_of_kind[t] = len(places)
                places.append((int(first[t]), 0, False))
            else:
                places += [(d, 0, False) for d in devs]
        self.places = places
        NP = len(places)
        slot_ids = [p for p, pl in enumerate(places) if pl[2]]
        host_ids = [p for p, pl in enumerate(places) if not pl[2]]
        self.slot_ids, self.host_ids = slot_ids, host_ids
        M = float(horizon)
        m = _milp.MilpModel()
        self.m = m

        # placement
        ubx = np.ones((C, NP))
        for p, (d, _, _) in enumerate(places):
            t = int(dkind[d])
            cap = cluster.kinds[t].memory
            ubx[(~np.isfinite(ccomp[t]) | ((cmem > cap) if cap is not None else False))[rep], p] = 0.0
        if (ubx.sum(axis=1) == 0).any():
            c = int(np.flatnonzero(ubx.sum(axis=1) == 0)[0])
            nodes = ", ".join(str(graph.ids[u]) for u in np.flatnonzero(cls == c)[:4])
            raise InfeasibleError(f"no device can hold node(s) {nodes}: unsupported everywhere or too large "
                                  f"for every device's memory")
        x = m.add_cols(C * NP, ub=ubx.ravel(), integer=True).reshape(C, NP)
        self.x = x
        allc = np.arange(C)
        m.add_rows(np.ones(C), np.ones(C), np.repeat(allc, NP), x.ravel(), 1.0)
        # memory per device (all its places)
        dev_places: dict[int, list[int]] = {}
        for p, (d, _, _) in enumerate(places):
            dev_places.setdefault(d, []).append(p)
        self.dev_places = dev_places
        if C > CC:
            # colocation per device: every member of a class on the device its first member is on
            # (a host place stands for its device, or for its whole kind when memory cannot bind)
            head = np.full(CC, n, np.int64)
            np.minimum.at(head, col, np.arange(n))  # each class's first member
            ui = np.flatnonzero(head[col] != np.arange(n))  # every other member
            u0 = head[col[ui]]
            K = ui.size
            r = np.arange(K)
            for ps in dev_places.values():  # an accelerator's slots, or one host place
                m.add_rows(np.zeros(K), np.zeros(K), np.concatenate([r] * (2 * len(ps))),
                           np.concatenate([x[u0, p] for p in ps] + [x[ui, p] for p in ps]),
                           np.concatenate([np.ones(K)] * len(ps) + [-np.ones(K)] * len(ps)))
        for d, ps in dev_places.items():
            cap = cluster.kinds[int(dkind[d])].memory
            if cap is None or mem.sum() <= cap:
                continue
            m.add_rows([-np.inf], [cap], np.zeros(C * len(ps), np.int64),
                       np.concatenate([x[:, p] for p in ps]), np.tile(mem, len(ps)))
        # symmetry: identical devices (consecutive, same kind, each with its own places) ordered by their
        # smallest class: sum_p x[c, p on d] <= sum_{c' < c} sum_p x[c', p on d-1]
        self.ys: list[tuple[np.ndarray, list[int]]] = []
        if symmetry:
            for d in sorted(dev_places):
                d0 = d - 1
                if d0 not in dev_places or dkind[d0] != dkind[d] or int(dkind[d]) in self.host_place_of_kind:
                    continue
                s0, s1 = dev_places[d0], dev_places[d]
                y = m.add_cols(C, lb=0, ub=C)  # y[c] = classes <= c on d0
                self.ys.append((y, s0))
                r = np.arange(C)
                rows = [r] + [r] * len(s0) + [r[1:]]
                cols = [y] + [x[:, p] for p in s0] + [y[:-1]]
                vals = [np.ones(C)] + [-np.ones(C)] * len(s0) + [-np.ones(C - 1)]
                m.add_rows(np.zeros(C), np.zeros(C), np.concatenate(rows), np.concatenate(cols),
                           np.concatenate(vals))
                m.add_rows([0.0], [0.0], np.zeros(len(s1), np.int64), x[0, s1], 1.0)
                if C > 1:
                    r = np.arange(C - 1)
                    rows = [r] * len(s1) + [r]
                    cols = [x[1:, p] for p in s1] + [y[:-1]]
                    vals = [np.ones(C - 1)] * len(s1) + [-np.ones(C - 1)]
                    m.add_rows(np.full(C - 1, -np.inf), np.zeros(C - 1), np.concatenate(rows),
                               np.concatenate(cols), np.concatenate(vals))

        src, dst = graph.src, graph.dst
        cs, cd = cls[src], cls[dst]
        cross = cs != cd
        es, ed = src[cross], dst[cross]  # node edges between classes
        E, Ea = es.size, src.size
        # convexity of every slot: w[:, s] ancestor-closed, holds the slot, and excludes every node that
        # a slot node feeds outside the slot
        self.w = None
        if slot_ids and E:
            w = m.add_cols(n * len(slot_ids), lb=0, ub=1).reshape(n, len(slot_ids))
            self.w = w
            nodes = np.arange(n)
            for k_, p in enumerate(slot_ids):
                m.add_rows(np.zeros(n), np.full(n, np.inf), np.concatenate([nodes, nodes]),
                           np.concatenate([w[:, k_], x[cls, p]]), np.concatenate([np.ones(n), -np.ones(n)]))
                r = np.arange(Ea)
                m.add_rows(np.full(Ea, -np.inf), np.zeros(Ea), np.concatenate([r, r]),
                           np.concatenate([w[dst, k_], w[src, k_]]),
                           np.concatenate([np.ones(Ea), -np.ones(Ea)]))
                r = np.arange(E)
                m.add_rows(np.full(E, -np.inf), np.ones(E), np.concatenate([r, r, r]),
                           np.concatenate([w[ed, k_], x[cs[cross], p], x[cd[cross], p]]),
                           np.concatenate([np.ones(E), np.ones(E), -np.ones(E)]))

        # communication per slot: (u, class fed) pairs of nodes that pay
        keep = cross & (comm_c[:, src].max(axis=0) > 0)
        pairs = np.unique(np.stack([src[keep], cd[keep]], axis=1), axis=0) if keep.any() \
            else np.zeros((0, 2), np.int64)
        pu, pv = pairs[:, 0], pairs[:, 1]
        cnodes = np.unique(pu)
        pn = np.searchsorted(cnodes, pu)
        Q, N = pu.size, cnodes.size
        self.pu, self.pv, self.cnodes = pu, pv, cnodes
        self.out, self.inn = {}, {}
        qi = np.arange(Q)
        for p in slot_ids:
            t = int(dkind[places[p][0]])
            if N == 0 or not (comm_c[t, cnodes] > 0).any():
                continue
            out = m.add_cols(N, lb=0, ub=1)
            inn = m.add_cols(N, lb=0, ub=1)
            self.out[p], self.inn[p] = out, inn
            m.add_rows(np.zeros(Q), np.full(Q, np.inf), np.concatenate([qi, qi, qi]),
                       np.concatenate([out[pn], x[cls[pu], p], x[pv, p]]),
                       np.concatenate([np.ones(Q), -np.ones(Q), np.ones(Q)]))
            m.add_rows(np.zeros(Q), np.full(Q, np.inf), np.concatenate([qi, qi, qi]),
                       np.concatenate([inn[pn], x[pv, p], x[cls[pu], p]]),
                       np.concatenate([np.ones(Q), -np.ones(Q), np.ones(Q)]))

        # times
        f = m.add_cols(n, lb=0, ub=M)
        St = m.add_cols(NP, lb=0, ub=M)  # used for slots only
        F = m.add_cols(NP, lb=0, ub=M)
        self.f, self.St, self.F = f, St, F
        # host compute of v: sum over host places of cpu(v) x[cv, p]
        hv_cols, hv_vals = [], []
        for p in host_ids:
            t = int(dkind[places[p][0]])
            hv_cols.append(x[cls, p])
            hv_vals.append(np.where(np.isfinite(compute_c[t]), compute_c[t], 0.0))
        nodes = np.arange(n)
        H = len(host_ids)
        m.add_rows(np.zeros(n), np.full(n, np.inf), np.concatenate([nodes] + [nodes] * H),
                   np.concatenate([f] + hv_cols), np.concatenate([np.ones(n)] + [-v for v in hv_vals]))
        if Ea:
            r = np.arange(Ea)
            m.add_rows(np.zeros(Ea), np.full(Ea, np.inf), np.concatenate([r, r] + [r] * H),
                       np.concatenate([f[dst], f[src]] + [c[dst] for c in hv_cols]),
                       np.concatenate([np.ones(Ea), -np.ones(Ea)] + [-v[dst] for v in hv_vals]))
        # e[v]: when v's own computation completes (a subgraph runs its nodes one after another in
        # topological order), so e[v] >= e[u] + compute(v) along every edge and f[v] >= e[v]: every path
        # of the graph bounds the latency by its compute, whatever the placement
        e = m.add_cols(n, lb=0, ub=M)
        self.e = e
        cv_cols, cv_vals = [], []
        for p in range(NP):
            t = int(dkind[places[p][0]])
            cv_cols.append(x[cls, p])
            cv_vals.append(np.where(np.isfinite(compute_c[t]), compute_c[t], 0.0))
        m.add_rows(np.zeros(n), np.full(n, np.inf), np.concatenate([nodes] * (NP + 1)),
                   np.concatenate([e] + cv_cols), np.concatenate([np.ones(n)] + [-v for v in cv_vals]))
        if Ea:
            r = np.arange(Ea)
            m.add_rows(np.zeros(Ea), np.full(Ea, np.inf), np.concatenate([r, r] + [r] * NP),
                       np.concatenate([e[dst], e[src]] + [c[dst] for c in cv_cols]),
                       np.concatenate([np.ones(Ea), -np.ones(Ea)] + [-v[dst] for v in cv_vals]))
        m.add_rows(np.zeros(n), np.full(n, np.inf), np.concatenate([nodes, nodes]), np.concatenate([f, e]),
                   np.concatenate([np.ones(n), -np.ones(n)]))
        self.node_compute_rows = cv_vals
        # crossing delay: when u -> v leaves u's subgraph (or host), v's computation also waits for u's
        # output to be sent (if u is on an accelerator) and received (if v is): with y = 1 only when
        # both classes are at the same place, e[v] >= e[u] + compute(v) + c(u) (a_u - y) + c(u) (a_v - y)
        acc_kinds = sorted({int(dkind[places[p][0]]) for p in slot_ids})
        self.y_pairs = np.zeros((0, 2), np.int64)
        self.cmin = None
        if acc_kinds and E:
            cmin = comm_c[acc_kinds].min(axis=0)
            self.cmin = cmin
            sel = cmin[es] > 0
            if sel.any():
                ue, ve = es[sel], ed[sel]
                pairs, inv = np.unique(np.stack([cls[ue], cls[ve]], axis=1), axis=0, return_inverse=True)
                inv = inv.ravel()
                K = pairs.shape[0]
                y = m.add_cols(K, lb=0, ub=1)
                self.y, self.y_pairs = y, pairs
                r = np.arange(K)
                for p in range(NP):
                    for sign in (1.0, -1.0):
                        m.add_rows(np.full(K, -np.inf), np.ones(K), np.concatenate([r, r, r]),
                                   np.concatenate([y, x[pairs[:, 0], p], x[pairs[:, 1], p]]),
                                   np.concatenate([np.ones(K), sign * np.ones(K), -sign * np.ones(K)]))
                k = ue.size
                r = np.arange(k)
                cu = cmin[ue]
                rows = [r, r, r] + [r] * NP + [r] * len(slot_ids) * 2
                cols = [e[ve], e[ue], y[inv]] + [c[ve] for c in cv_cols] + \
                    [x[cls[ue], p] for p in slot_ids] + [x[cls[ve], p] for p in slot_ids]
                vals = [np.ones(k), -np.ones(k), 2 * cu] + [-v[ve] for v in cv_vals] + \
                    [-cu] * (2 * len(slot_ids))
                m.add_rows(np.zeros(k), np.full(k, np.inf), np.concatenate(rows), np.concatenate(cols),
                           np.concatenate(vals))
        fp = np.unique(np.stack([es, cd[cross]], axis=1), axis=0) if E else np.zeros((0, 2), np.int64)
        for p in slot_ids:
            d, j, _ = places[p]
            t = int(dkind[d])
            # f[u] >= F[s] - M (1 - x[cu, s])
            m.add_rows(np.full(n, -M), np.full(n, np.inf), np.concatenate([nodes, nodes, nodes]),
                       np.concatenate([f, np.full(n, F[p]), x[cls, p]]),
                       np.concatenate([np.ones(n), -np.ones(n), -M * np.ones(n)]))
            # S[s] >= f[u] - M (1 - x[cv, s] + x[cu, s]) for u feeding class cv
            if fp.shape[0]:
                K = fp.shape[0]
                r = np.arange(K)
                u, cv = fp[:, 0], fp[:, 1]
                m.add_rows(np.full(K, -M), np.full(K, np.inf), np.concatenate([r, r, r, r]),
                           np.concatenate([np.full(K, St[p]), f[u], x[cv, p], x[cls[u], p]]),
                           np.concatenate([np.ones(K), -np.ones(K), -M * np.ones(K), M * np.ones(K)]))
            # F[s] = S[s] + compute + comm
            cvec = np.where(np.isfinite(comp[t]), comp[t], 0.0)
            cols = [np.array([F[p], St[p]]), x[:, p]]
            vals = [np.array([1.0, -1.0]), -cvec]
            if p in self.out:
                cost = comm_c[t, cnodes]
                cols += [self.out[p], self.inn[p]]
                vals += [-cost, -cost]
            cc = np.concatenate(cols)
            m.add_rows([0.0], [0.0], np.zeros(cc.size, np.int64), cc, np.concatenate(vals))
            if j > 0:  # the previous slot of the device is place p - 1
                m.add_rows([0.0], [np.inf], [0, 0], [St[p], F[p - 1]], [1.0, -1.0])
        Tv = m.add_cols(1, lb=0, ub=M, cost=1.0)[0]
        self.T = Tv
        sinks = np.flatnonzero(np.bincount(src, minlength=n) == 0)
        k = sinks.size
        r = np.arange(k)
        m.add_rows(np.zeros(k), np.full(k, np.inf), np.concatenate([r, r]),
                   np.concatenate([np.full(k, Tv), f[sinks]]), np.concatenate([np.ones(k), -np.ones(k)]))

    # ---------------------------------------------------------------- warm start and decoding
    def place_of(self, d: int, j: int) -> int | None:
        t = int(self.dkind[d])
        if t in self.host_place_of_kind:
            return self.host_place_of_kind[t]
        for p in self.dev_places.get(d, []):
            if self.places[p][1] == max(j, 0):
                return p
        return None

    def start_vector(self, a: np.ndarray, sub: np.ndarray) -> np.ndarray | None:
        """Model variables for a placement (``sub``: subgraph index per node, -1 on hosts), with
        identical devices renamed into the symmetry breaking's order; ``None`` if it does not fit."""
        cls, C = self.cls, self.C
        item_dev = np.full(C, -1, np.int64)
        item_dev[cls] = a
        item_sub = np.full(C, -1, np.int64)
        item_sub[cls] = sub
        if (item_dev[cls] != a).any() or (item_sub[cls] != sub).any():
            return None
        # rename devices of each symmetric group by their smallest class
        remap = {}
        for t in range(len(self.cluster.kinds)):
            if t in self.host_place_of_kind:
                continue
            devs = [d for d in sorted(self.dev_places) if self.dkind[d] == t]
            firsts = [int(np.flatnonzero(item_dev == d)[0]) if (item_dev == d).any() else 1 << 60
                      for d in devs]
            for new, old in zip(devs, [devs[i] for i in np.argsort(firsts, kind="stable")]):
                remap[old] = new
        item_dev = np.array([remap.get(int(d), int(d)) for d in item_dev], dtype=np.int64)
        where = np.empty(C, np.int64)
        for c in range(C):
            p = self.place_of(int(item_dev[c]), int(item_sub[c]))
            if p is None:
                return None
            where[c] = p
        new_a = np.array([self.places[p][0] for p in where], dtype=np.int64)[cls]
        new_sub = np.array([self.places[p][1] if self.places[p][2] else -1 for p in where],
                           dtype=np.int64)[cls]
        ev = latency(self.graph, self.cluster, new_a, subgraphs=new_sub)
        if not ev.valid:
            return None
        v = np.zeros(self.m.num_cols)
        X = np.zeros((C, len(self.places)))
        X[np.arange(C), where] = 1.0
        v[self.x.ravel()] = X.ravel()
        for y, s0 in self.ys:
            v[y] = np.cumsum(X[:, s0].sum(axis=1))
        if self.w is not None:
            anc = X[cls][:, self.slot_ids]  # slot nodes and all their ancestors
            succ_ptr, succ_idx = self.graph.successors_csr()
            for u in self.graph.topological_order()[::-1].tolist():
                kids = succ_idx[succ_ptr[u]:succ_ptr[u + 1]]
                if kids.size:
                    anc[u] = np.maximum(anc[u], anc[kids].max(axis=0))
            v[self.w.ravel()] = anc.ravel()
        pos = np.searchsorted(self.cnodes, self.pu)
        cu, cv = cls[self.pu], self.pv
        for p in self.out:
            o = np.zeros(self.cnodes.size)
            iv = np.zeros(self.cnodes.size)
            np.maximum.at(o, pos, np.clip(X[cu, p] - X[cv, p], 0, 1))
            np.maximum.at(iv, pos, np.clip(X[cv, p] - X[cu, p], 0, 1))
            v[self.out[p]] = o
            v[self.inn[p]] = iv
        v[self.f] = ev.finish
        # e: the least solution of its rows: longest compute path, every node at its placed kind, plus
        # the crossing delays
        nn = self.graph.num_nodes
        own = np.array([self.node_compute_rows[where[self.cls[u]]][u] for u in range(nn)])
        on_acc = np.array([self.places[p][2] for p in where], dtype=float)[self.cls]
        e = np.zeros(nn)
        src, dst = self.graph.src, self.graph.dst
        delay = np.zeros(src.size)
        if self.cmin is not None:
            crossing = where[self.cls[src]] != where[self.cls[dst]]
            delay = np.where(crossing, self.cmin[src] * (on_acc[src] + on_acc[dst]), 0.0)
        order_e = np.argsort(dst, kind="stable")
        pred_ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=nn))])
        for u in self.graph.topological_order().tolist():
            idx = order_e[pred_ptr[u]:pred_ptr[u + 1]]
            e[u] = own[u] + (float((e[src[idx]] + delay[idx]).max()) if idx.size else 0.0)
        v[self.e] = e
        if self.y_pairs.shape[0]:
            v[self.y] = (where[self.y_pairs[:, 0]] == where[self.y_pairs[:, 1]]).astype(float)
        by_slot = {(s.device, s.index): s for s in ev.subgraphs}
        prev_finish: dict[int, float] = {}
        for p in self.slot_ids:
            d, j, _ = self.places[p]
            sg = by_slot.get((d, j))
            if sg is not None:
                v[self.St[p]], v[self.F[p]] = sg.start, sg.finish
            else:  # an empty slot: zero length, right after the device's previous one
                v[self.St[p]] = v[self.F[p]] = prev_finish.get(d, 0.0)
            prev_finish[d] = v[self.F[p]]
        v[self.T] = ev.total
        return v

    def decode(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        where = np.argmax(v[self.x], axis=1)
        a = np.array([self.places[p][0] for p in where], dtype=np.int64)[self.cls]
        sub = np.array([self.places[p][1] if self.places[p][2] else -1 for p in where],
                       dtype=np.int64)[self.cls]
        return a, sub


def _candidates(graph, cluster, options, deadline, stats, *, search: bool = False):
    """Warm-start placements: given, DP, greedy fills, all on a host; with ``search`` (what :func:`solve`
    asks for) also cut topological orders and the local search from the best starts."""
    out = []
    if options.warm_start is not None:
        a = np.asarray(options.warm_start, np.int64)
        if a.shape != (graph.num_nodes,):
            raise InputError(f"the warm start has shape {a.shape}; expected one device per node "
                             f"({graph.num_nodes},)")
        out.append(("given", a))
    left = time_left(deadline)
    if options.raw.get("dp_warm_start", True) and (left is None or left >= 5.0):
        from . import dp

        share = float(options.raw.get("dp_time_share", 0.2))
        # the DP optimises throughput, not latency: a start, so it gets a share of the time (30 s at most
        # without a limit)
        dp_time = float(options.raw.get("dp_time_s", 30.0)) if left is None else share * left
        try:
            sol = dp.solve(graph, cluster, SolveOptions(time_limit=dp_time,
                                                        raw={"max_ideals": options.raw.get("dp_max_ideals",
                                                                                           200_000)}))
            stats["dp_status"] = sol.status.value
            if "interrupted" in sol.message:  # Ctrl-C during the DP: stop after the starts
                stats["interrupted"] = True
            if sol.assignment is not None:
                out.append(("dp", np.asarray(sol.assignment, np.int64)))
        except PlacementError as e:
            stats["dp_status"] = f"skipped: {e}"
    g = greedy_fill(graph, cluster)
    if g is not None:
        out.append(("greedy", g))
    try:  # the greedy-latency baseline (the reference's heuristic and an earliest-finish variant)
        from . import greedy
    except ImportError:  # pragma: no cover - the baseline is optional here
        greedy = None
    if greedy is not None:
        for strategy in ("fill", "earliest-finish"):
            try:
                opts = SolveOptions(objective="latency", raw={"strategy": strategy})
                sol = greedy.solve(graph, cluster, opts)
            except PlacementError:
                continue
            if sol.assignment is not None:
                out.append((f"greedy-{strategy}", np.asarray(sol.assignment, np.int64)))
    hosts = host_kinds(cluster)
    compute_c, _ = graph.costs_for(cluster)
    first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]])
    for t in np.flatnonzero(hosts):
        if cluster.kinds[t].count > 0 and np.isfinite(compute_c[t]).all():
            out.append(("host", np.full(graph.num_nodes, first[t], np.int64)))
            break
    if search and options.raw.get("cut_starts", True) and not stats.get("interrupted"):
        from .latency_cuts import cut_placement

        for name, later in (("cuts", False), ("cuts-later", True)):
            # a start: 10% of the time left each (30 s without a limit), else none
            left = time_left(deadline)
            until = time.perf_counter() + (float(options.raw.get("cut_time_s", 30.0)) if left is None
                                           else 0.1 * left)
            a = cut_placement(graph, cluster, later_first=later, deadline=until)
            if a is not None:
                out.append((name, a))
    if search and options.raw.get("latency_search", True) and not stats.get("interrupted"):
        searched = _searched(graph, cluster, options, deadline, stats, out)
        if searched is not None:
            out.append(searched)
    return out


def _searched(graph, cluster, options, deadline, stats, starts):
    """The latency local search (:mod:`solvers.latency_search`) from every distinct start in the domain,
    best first, within a share of the time left (``raw["search_time_share"]``, default 0.15;
    ``raw["search_time_s"]``, default 30 s, without a limit). ``(name, placement)`` of the best it finds
    when that beats every start, else ``None``; ``stats["search"]`` lists the runs."""
    q = int(options.subgraphs_per_device)
    ready = []
    for name, a in starts:
        ev = latency(graph, cluster, a)
        if in_domain(ev, q):
            ready.append((ev.total, name, np.asarray(a, np.int64)))
    if not ready:
        return None
    ready.sort(key=lambda r: r[0])
    left = time_left(deadline)
    budget = float(options.raw.get("search_time_s", 30.0)) if left is None else \
        float(options.raw.get("search_time_share", 0.15)) * left
    until = time.perf_counter() + budget
    runs, seen = [], []
    best = (ready[0][0], None, None)
    for _value, name, a in ready:
        if time.perf_counter() >= until:
            break
        if any(np.array_equal(a, b) for b in seen):
            continue
        seen.append(a)
        res = improve(graph, cluster, a, subgraphs_per_device=q, deadline=until)
        runs.append({"from": name, "start": res.start_latency, "latency": res.latency,
                     "evaluations": res.evaluations, "moves": res.moves, "time_s": round(res.seconds, 3),
                     "stopped": res.stopped})
        if res.latency < best[0] - tolerance(best[0]):  # not round-off of the same schedule
            best = (res.latency, name, res.assignment)
        if res.stopped == "interrupted":  # Ctrl-C during the search: stop after the starts
            stats["interrupted"] = True
            break
    stats["search"] = runs
    return None if best[1] is None else (f"search from {best[1]}", best[2])


_BLOCK_MIP_MAX = 400  # nodes: a larger block gets its path bound only


def _series(graph, cluster, options, deadline, stats) -> float | None:
    """The series bound (:mod:`solvers.latency_series`): blocks between bottleneck nodes, each bounded
    by the larger of its :func:`latency_bound` and the proven bound of this solver run on the block alone
    (distinct blocks of more than one node, up to :data:`_BLOCK_MIP_MAX` nodes, in a share of the time
    left: ``raw["series_time_share"]``, default 0.4, or ``raw["series_time_s"]``, default 30 s,
    without a limit). ``None`` when the graph has no bottleneck or the bound proves nothing;
    ``stats["series"]`` tells how it went."""
    from .latency_series import series_blocks, series_bound

    q = int(options.subgraphs_per_device)
    t0 = time.perf_counter()
    blocks = series_blocks(graph)
    if len(blocks) < 2:
        return None
    left = None if deadline is None else max(0.0, deadline - t0)
    until = t0 + (float(options.raw.get("series_time_s", 30.0)) if left is None
                  else float(options.raw.get("series_time_share", 0.4)) * left)
    info = {"blocks": len(blocks), "largest": max(int(b.size) for b in blocks), "solved": 0, "bounded": 0}

    def block_bound(g: OpGraph, cl: Cluster) -> float:
        lb = latency_bound(g, cl, subgraphs_per_device=q)
        budget = until - time.perf_counter()
        if g.num_nodes == 1 or g.num_nodes > _BLOCK_MIP_MAX or budget <= 0.05 or stats.get("interrupted"):
            return lb  # one node: its cheapest kind, which the path bound already is
        # the block alone, its bound proven exactly (a tight gap: the blocks' bounds add up); a small block
        # needs no costly starts, the integer program finds its optimum
        sol = solve(g, cl, SolveOptions(objective="latency", subgraphs_per_device=q, time_limit=budget,
                                        gap=1e-7, threads=options.threads, seed=options.seed,
                                        backend=options.backend,
                                        raw={"series_bound": False, "dp_warm_start": False,
                                             "cut_starts": False, "latency_search": False}))
        if "interrupted" in sol.message:
            stats["interrupted"] = True
        info["bounded"] += 1
        info["solved"] += sol.status is Status.OPTIMAL
        if sol.bound is not None and math.isfinite(sol.bound):
            lb = max(lb, float(sol.bound))
        return lb

    total, _rows = series_bound(graph, cluster, block_bound)
    info["time_s"] = round(time.perf_counter() - t0, 3)
    stats["series"] = info
    return total if math.isfinite(total) else None


#: the work after the integer program, counted in latency evaluations of the graph (the max-load
#: evaluation takes about two, on the reference graphs): the solver's scoring and the registry's check
_AFTER_SCORINGS = 8


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None, *,
          solver: str = "ip") -> Solution:
    """Minimum-latency placement of an inference graph (``--objective latency``)."""
    options = options or SolveOptions()
    if graph.is_training:
        raise InputError("the latency objective is for inference graphs; this graph has backward nodes")
    q = int(options.subgraphs_per_device)
    if q < 1:
        raise InputError(f"subgraphs per device must be at least 1, got {q}")
    t_start = time.perf_counter()
    deadline = None if options.time_limit is None else t_start + options.time_limit
    stats: dict = {"objective": "latency", "subgraphs_per_device": q}
    best = None
    scorings = []  # seconds of each start's latency evaluation: what scoring the answer costs, roughly
    for name, a in _candidates(graph, cluster, options, deadline, stats, search=True):
        t = time.perf_counter()
        ev = latency(graph, cluster, a)
        scorings.append(time.perf_counter() - t)
        if not in_domain(ev, q):
            continue
        stats[f"warm_{name}"] = ev.total
        if best is None or ev.total < best[2].total:
            best = (name, a, ev)
    if best is None:
        horizon = _horizon(graph, cluster, q)
        if not math.isfinite(horizon):
            return Solution(None, math.inf, Status.INFEASIBLE, solver, time=time.perf_counter() - t_start,
                            stats=stats, message="no device can run some node")
    else:
        horizon = best[2].total
    horizon = horizon * (1 + 1e-6) + 1e-9
    try:
        model = _LatencyModel(graph, cluster, q, horizon, symmetry=bool(options.raw.get("symmetry", True)))
    except InfeasibleError as e:
        return Solution(None, math.inf, Status.INFEASIBLE, solver, message=str(e),
                        time=time.perf_counter() - t_start, stats=stats)
    lb = latency_bound(graph, cluster, subgraphs_per_device=q)
    stats["critical_path"] = critical_path(graph, cluster)
    stats["path_bound"] = lb
    if not options.raw.get("path_bound", True):
        lb = stats["critical_path"]
    series = None
    if options.raw.get("series_bound", True) and not stats.get("interrupted"):
        series = _series(graph, cluster, options, deadline, stats)
        if series is not None:
            stats["series_bound"] = series
            lb = max(lb, series)
    if options.raw.get("path_bound", True) or series is not None:
        # the latency variable starts at the bound (a hair below, and never above the horizon, so that
        # round-off cannot cut off an optimal start): HiGHS's LP relaxation cannot see it
        model.m.tighten([model.T], lb=min(lb, horizon) * (1 - 1e-9))
    start = None
    if best is not None and options.raw.get("warm_start", True) is not False:
        start = model.start_vector(best[1], best[2].subgraph)
        stats["warm_start"] = best[0] if start is not None else f"{best[0]} (rejected)"
        stats["warm_start_value"] = best[2].total
    # the program gets what is left but the work after it: decoding its answer, then scoring it (latency
    # and max-load) here and again in the registry's check, about _AFTER_SCORINGS latency evaluations
    left = time_left(deadline)
    if left is not None and scorings:
        left -= min(0.25 * left, _AFTER_SCORINGS * float(np.median(scorings)))
    if stats.get("interrupted") and best is not None:
        res = _milp.MipResult(_milp.TIME_LIMIT, None, math.inf, None, 0.0,
                              "interrupted (Ctrl-C) before the integer program ran; warm start returned")
    elif series is not None and start is not None and \
            (check_bound(None, best[2].total, fallback=lb).gap or 0.0) <= options.gap:
        # the series bound already closes the gap on the warm start: nothing left for HiGHS to prove
        res = _milp.MipResult(_milp.OPTIMAL, start, best[2].total, lb, 0.0,
                              "the series bound meets the warm start; the integer program was not run")
        stats["mip_skipped"] = True
    else:
        res = _milp.solve_mip(model.m, backend=options.backend, time_limit=left, gap=options.gap,
                              threads=options.threads, start=start, raw=options.raw,
                              seed=options.seed)
    stats.update(res.stats)
    stats["mip_status"] = res.status
    elapsed = time.perf_counter() - t_start
    if res.status == _milp.INFEASIBLE and best is not None:
        # the warm start is a valid placement within the domain, so the program is wrong to call itself
        # infeasible (its model is stricter than the evaluator's): say so and return the warm start, never
        # 'infeasible' with a placement in hand
        stats["model_disagrees"] = "infeasible, with a valid warm start"
        res = _milp.MipResult(_milp.ERROR, None, math.inf, None, res.time,
                              f"the integer program reported no placement, but the warm start ({best[0]}) "
                              f"is a valid one: the program's model disagrees with the evaluator; the warm "
                              f"start is returned, with the path bound only", res.stats)
    if res.status == _milp.INFEASIBLE:
        return Solution(None, math.inf, Status.INFEASIBLE, solver, time=elapsed, stats=stats,
                        message=none_fits(graph, cluster, "placement", _LATENCY_RULE))
    a = sub = None
    if res.x is not None:
        a, sub = model.decode(res.x)
        ev = latency(graph, cluster, a, subgraphs=sub)
        if not ev.valid:
            stats["decode_problem"] = "; ".join(ev.problems)
            a = None
    if a is None and best is not None:
        # keep the warm start rather than return nothing
        a, ev = best[1], best[2]
        sub = ev.subgraph
        stats["returned"] = "warm start"
    if a is None:
        status = Status.STOPPED if res.status != _milp.ERROR else Status.ERROR
        return Solution(None, math.inf, status, solver, bound=res.bound, time=elapsed, stats=stats,
                        message=(res.message or "no placement found") + "; no placement found")
    value = ev.total
    stats["model_objective"] = None if res.x is None else float(res.x[model.T])
    stats["subgraphs"] = [int(s) for s in sub]
    stats["max_load"] = evaluate(graph, cluster, a).max_load
    verdict = _milp.judge(res, value, lb, options.gap, what="latency", kept="the path bound")
    bound, gap, proven, msg = verdict.bound, verdict.gap, verdict.proven, verdict.message
    if verdict.mismatch is not None:
        stats["bound_mismatch"] = verdict.mismatch
    return Solution(np.asarray(a, np.int64), value, Status.OPTIMAL if proven else Status.FEASIBLE, solver,
                    bound=bound, gap=gap, time=elapsed, message=msg, stats=stats)


def critical_path(graph: OpGraph, cluster: Cluster) -> float:
    """A lower bound on any placement's latency: the longest path, every node at its cheapest kind
    (no communication)."""
    compute_c, _ = graph.costs_for(cluster)
    active = [t for t, k in enumerate(cluster.kinds) if k.count > 0]
    cheapest = np.where(np.isfinite(compute_c[active]), compute_c[active], np.inf).min(axis=0)
    if not np.isfinite(cheapest).all():
        return 0.0
    finish = cheapest.copy()
    n = graph.num_nodes
    order_e = np.argsort(graph.dst, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(graph.dst, minlength=n))])
    for v in graph.topological_order().tolist():
        idx = order_e[ptr[v]:ptr[v + 1]]
        if idx.size:
            finish[v] = cheapest[v] + finish[graph.src[idx]].max()
    return float(finish.max(initial=0.0))


def _longest_path(graph: OpGraph, weight: np.ndarray) -> list[int]:
    """The nodes of a path of largest total ``weight``, source to sink."""
    n = graph.num_nodes
    order_e = np.argsort(graph.dst, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(graph.dst, minlength=n))])
    finish = weight.astype(float).copy()
    parent = np.full(n, -1, np.int64)
    for v in graph.topological_order().tolist():
        idx = order_e[ptr[v]:ptr[v + 1]]
        if idx.size:
            p = int(graph.src[idx][np.argmax(finish[graph.src[idx]])])
            finish[v] = weight[v] + finish[p]
            parent[v] = p
    v = int(np.argmax(finish)) if n else -1
    path = []
    while v >= 0:
        path.append(v)
        v = int(parent[v])
    return path[::-1]


_BETWEEN_MAX_PATH = 2000  # longer paths: segments count the path's own nodes only (tables are m x m)


def path_bound(graph: OpGraph, cluster: Cluster, path, *, one_subgraph: bool = False) -> float:
    """A lower bound on any placement's latency from one path ``v_1 -> ... -> v_m`` of the graph.

    Along the path every node finishes after its predecessor on it: a host node takes its compute on a
    host kind; on an accelerator, the path's nodes in one subgraph ``S`` are consecutive (a *segment*
    ``v_i .. v_j``), and as ``S`` is convex it also holds every node on a path between them
    (``v_i ->* x ->* v_j``, the *between-set*). So ``S`` takes at least the compute of the between-set
    and holds its memory within one device's. The bound is the cheapest way to cut the path into host
    nodes and such segments (a shortest path over cut points), each segment on its cheapest
    accelerator kind; what the rest of the graph adds is left out, so it stays a bound.

    Transfers a segment must pay (each node once, as the model counts them). With ``ri[z]`` the last
    path index that reaches ``z`` and ``ro[z]`` the first path index ``z`` reaches:

    * no node ``z`` with ``ri[z] > j`` is in ``S``: ``v_i ->* v_{j+1} ->* z`` would put ``v_{j+1}`` in
      the convex ``S``, and the segment ends at ``v_j``. Likewise no ``z`` with ``ro[z] < i``
      (``z ->* v_{i-1} ->* v_i``). So a between-set node with a successor ``y``, ``ri[y] > j``, sends
      its output out of ``S`` (``v_j`` itself when the path goes on), and a node ``x``, ``ro[x] < i``,
      with a successor in the between-set sends its output into ``S`` (``v_{i-1}`` itself);
    * with one subgraph per accelerator (``one_subgraph``), a colocation class sits in one subgraph,
      so the two tests above apply to a node's whole class (largest ``ri``, smallest ``ro`` over it),
      and a class with a member in the between-set brings its other members (those in no between-set
      of the path) into ``S``: their compute, memory and outgoing transfers count too.

    Every charge is a distinct node's transfer in or out of ``S``, so their sum is at most ``S``'s.
    A cut of the path that no placement realises only adds options to the minimum: still a bound."""
    path = np.asarray(path, np.int64)
    m = path.size
    if m == 0:
        return 0.0
    compute_c, comm_c = graph.costs_for(cluster)
    hosts = host_kinds(cluster)
    active = [t for t, k in enumerate(cluster.kinds) if k.count > 0]
    accel = [t for t in active if not hosts[t]]
    host_cost = np.full(m, np.inf)
    for t in active:
        if hosts[t]:
            host_cost = np.minimum(host_cost, compute_c[t, path])
    n = graph.num_nodes
    if m <= _BETWEEN_MAX_PATH:
        # node x lies between v_i and v_j (both included) iff i <= ri[x] and ro[x] <= j
        pos = np.full(n, -1, np.int64)
        pos[path] = np.arange(m)
        ri = pos.copy()
        ro = np.where(pos >= 0, pos, m)
        order = graph.topological_order()
        s_ord = np.argsort(graph.dst, kind="stable")
        s_ptr = np.concatenate([[0], np.cumsum(np.bincount(graph.dst, minlength=n))])
        for v in order.tolist():
            preds = graph.src[s_ord[s_ptr[v]:s_ptr[v + 1]]]
            if preds.size:
                ri[v] = max(ri[v], int(ri[preds].max()))
        succ_ptr, succ_idx = graph.successors_csr()
        for v in order[::-1].tolist():
            kids = succ_idx[succ_ptr[v]:succ_ptr[v + 1]]
            if kids.size:
                ro[v] = min(ro[v], int(ro[kids].min()))
        inside = (ri >= 0) & (ro < m)
        ri_x, ro_x = ri, ro  # the exclusion tests (per class with one subgraph per accelerator)
        extra = np.zeros(0, np.int64)
        rep = np.zeros(0, np.int64)
        if one_subgraph:
            cls, C = colocation_items(graph)
            cri = np.full(C, -1, np.int64)
            np.maximum.at(cri, cls, ri)
            cro = np.full(C, m, np.int64)
            np.minimum.at(cro, cls, ro)
            ri_x, ro_x = cri[cls], cro[cls]
            # a class's members in no between-set follow one inside member (any: a subset of S)
            crep = np.full(C, -1, np.int64)
            ins = np.flatnonzero(inside)
            crep[cls[ins]] = ins
            extra = np.flatnonzero(~inside & (crep[cls] >= 0))
            rep = crep[cls[extra]]
        so = np.full(n, -1, np.int64)  # the largest ri_x over a node's successors
        np.maximum.at(so, graph.src, ri_x[graph.dst])
        ins = np.flatnonzero(inside)
        a_pt = np.concatenate([ri[ins], ri[rep]])  # where each node counts: (its ri, its ro) or its rep's
        b_pt = np.concatenate([ro[ins], ro[rep]])
        who = np.concatenate([ins, extra])
        out_end = so[who]  # it sends out of S while j < out_end
        sends = out_end > b_pt

        def table(w_pt, w_end=None):
            cell = np.zeros((m, m))
            np.add.at(cell, (a_pt, b_pt), w_pt)
            if w_end is not None:
                np.add.at(cell, (a_pt[sends], out_end[sends]), -w_end)
            # table[i, j] = sum of cell[a, b] over a >= i, b <= j
            return np.cumsum(np.cumsum(cell[::-1], axis=0)[::-1], axis=1)

        mem_tab = table(graph.memory[who])
        comp_tabs = [table(compute_c[t, who]) for t in accel]
        out_tabs = [table(np.where(sends, comm_c[t, who], 0.0), comm_c[t, who[sends]]) for t in accel]
        # side inputs: edges x -> y, y inside; x pays into S = segment i..j when ro_x[x] < i and j >= ro[y]
        e_in = inside[graph.dst]
        ex, ey = graph.src[e_in], graph.dst[e_in]
        ex_ro, ey_ri, ey_ro = ro_x[ex], ri[ey], ro[ey]

        def side_in(i):
            sel = (ex_ro < i) & (ey_ri >= i)
            first = np.full(n, m, np.int64)  # per sender, the first j with a receiver in the between-set
            np.minimum.at(first, ex[sel], ey_ro[sel])
            senders = np.flatnonzero(first < m)
            out = []
            for t in accel:
                acc = np.bincount(first[senders], weights=comm_c[t, senders], minlength=m)
                out.append(np.cumsum(acc)[i:])
            return out

        def seg_costs(i):
            ins_c = side_in(i)
            return ([comp_tabs[k][i, i:] + out_tabs[k][i, i:] + ins_c[k] for k in range(len(accel))],
                    mem_tab[i, i:])
    else:
        def seg_costs(i):
            comps = []
            for t in accel:
                seg = np.cumsum(compute_c[t, path[i:]]) + (comm_c[t, path[i - 1]] if i > 0 else 0.0)
                seg[: m - 1 - i] += comm_c[t, path[i:m - 1]]  # the path goes on after v_j
                comps.append(seg)
            return comps, np.cumsum(graph.memory[path[i:]])

    best = np.full(m + 1, np.inf)  # best[i]: the first i path nodes finished
    best[0] = 0.0
    for i in range(m):
        if not np.isfinite(best[i]):
            continue
        best[i + 1] = min(best[i + 1], best[i] + host_cost[i])
        segs, mem = seg_costs(i)
        for t, seg in zip(accel, segs):
            cap = cluster.kinds[t].memory
            ok = np.isfinite(seg)
            if cap is not None:
                ok &= mem <= cap
            k = int(np.argmin(ok)) if not ok.all() else ok.size  # segments v_i .. v_j, j < i + k
            if k == 0:
                continue
            np.minimum(best[i + 1:i + 1 + k], best[i] + seg[:k], out=best[i + 1:i + 1 + k])
    return float(best[m])


def latency_bound(graph: OpGraph, cluster: Cluster, *, subgraphs_per_device: int | None = None) -> float:
    """A lower bound on any placement's latency: the critical path, and :func:`path_bound` on the
    longest paths by a few weights (compute at the cheapest and at the host kinds, communication,
    memory, compute plus communication), which counts the transfers and memory limits a path cannot
    avoid. ``subgraphs_per_device == 1``: a bound for placements with one subgraph per accelerator
    only (colocated nodes share it); ``None``: for any number."""
    lb = critical_path(graph, cluster)
    if graph.num_nodes == 0:
        return lb
    one = subgraphs_per_device == 1
    compute_c, comm_c = graph.costs_for(cluster)
    hosts = host_kinds(cluster)
    active = [t for t, k in enumerate(cluster.kinds) if k.count > 0]

    def finite_min(rows):
        if not rows:
            return np.zeros(graph.num_nodes)
        v = np.min(np.stack(rows), axis=0)
        return np.where(np.isfinite(v), v, 0.0)

    cheapest = finite_min([compute_c[t] for t in active])
    host = finite_min([compute_c[t] for t in active if hosts[t]])
    comm = finite_min([comm_c[t] for t in active if not hosts[t]])
    weights = [cheapest, host, comm, graph.memory / max(float(graph.memory.max(initial=0.0)), 1e-300),
               cheapest + comm]
    seen = set()
    for w in weights:
        path = _longest_path(graph, w)
        key = tuple(path)
        if key in seen:
            continue
        seen.add(key)
        b = path_bound(graph, cluster, path, one_subgraph=one)
        if math.isfinite(b):  # inf: some path node runs nowhere, which the solver reports itself
            lb = max(lb, b)
    return lb


def _horizon(graph: OpGraph, cluster: Cluster, q: int) -> float:
    """A latency that some optimal placement does not exceed, when no placement is known: all tasks
    one after another, every node at its slowest supported cost, every output sent once and received
    by every subgraph slot."""
    compute_c, comm_c = graph.costs_for(cluster)
    fin = np.where(np.isfinite(compute_c), compute_c, -np.inf).max(axis=0)
    if not np.isfinite(fin).all():
        return math.inf
    return float(fin.sum() + comm_c.max(axis=0).sum() * (1 + q * cluster.num_devices))
