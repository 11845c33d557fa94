"""Upper bounds on the max-flow of every layout of a model on a Helix cluster (:mod:`graphs.helix`).

Both rest on one fact. In a layout of flow ``F`` every unit of flow passes, for every layer ``l``,
through exactly one node holding ``l`` (a path's layer ranges are contiguous, disjoint and cover the
model), so the flows ``phi_i <= c_i(k_i)`` of the nodes holding ``l`` add up to ``F``: the capacities of
the nodes holding each layer form a *cover* of ``F``. Links only take flow away, so neither bound looks
at them.

* :func:`layer_budget_bound`: with ``phi_i <= min(c_i(k_i), F)`` summed over the ``L`` layers,
  ``sum_i k_i phi_i = L F``, hence ``sum_i max_k k min(c_i(k), F) >= L F``; the left side over ``F``
  does not increase with ``F``, so the largest ``F`` satisfying it bounds every layout. Closed form up
  to a bisection.
* :func:`cover_bound`: the same question as a bin-covering one. Each of the ``L`` layers needs a cover
  of ``F`` by node capacities; a node of type ``t`` holding ``k`` layers offers its capacity ``c_t(k)``
  to ``k`` layers. Dropping where the layers lie, and which node is which, leaves a linear program over
  covers (columns ``y_S``: layers covered by cover ``S``; ``u_tk``: nodes of type ``t`` with ``k``
  layers, ``sum_k u_tk <= N_t``, each cover's use of ``(t, k)`` at most ``k u_tk``): if it cannot
  cover ``L`` layers, no layout reaches ``F``. Covers are generated as needed (column generation, the
  pricing a min-cost covering knapsack by dynamic programming on capacities rounded up to a grid, which
  admits every true cover and so keeps the bound valid), and ``F`` is bisected. Unlike the budget, it
  counts what covers waste above ``F``: two nodes of 1066 and 601 tokens/s cover 1563 with 104 to
  spare, and no pair of capacities may fit exactly.
"""

from __future__ import annotations

import math
import time

import numpy as np

from graphs.helix import HelixCluster, NodeProfile

__all__ = ["layer_budget_bound", "cover_bound"]


def _budget(profiles: list[NodeProfile], F: float) -> float:
    """``sum_i max_k k min(c_i(k) / F, 1)``: layers' worth of flow ``F`` the nodes can carry at most."""
    return sum(max(k * min(p.capacity_at(k) / F, 1.0) for k in range(1, p.max_num_layers + 1))
               for p in profiles if p.max_num_layers > 0)


def layer_budget_bound(cluster: HelixCluster, model: str) -> float:
    """An upper bound on the max-flow of every layout of ``model`` on ``cluster``: the largest ``F`` with
    ``sum_i max_k k min(c_i(k), F) >= L F`` (module docstring)."""
    L = cluster.models[model].num_layers
    profiles = [n.profiles[model] for n in cluster.nodes]
    if sum(p.max_num_layers for p in profiles) < L:  # no chain of nodes holds every layer
        return 0.0
    hi = sum(max(p.capacity, default=0.0) for p in profiles)  # no flow beats every node in parallel
    if hi <= 0 or _budget(profiles, hi) >= L:
        return hi
    lo = 0.0
    for _ in range(200):  # to float precision
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if _budget(profiles, mid) >= L:
            lo = mid
        else:
            hi = mid
    return hi


class _CoverLP:
    """The cover LP of one cluster and model, with the covers generated so far."""

    def __init__(self, cluster: HelixCluster, model: str) -> None:
        counts: dict[NodeProfile, int] = {}
        for n in cluster.nodes:
            p = n.profiles[model]
            counts[p] = counts.get(p, 0) + 1
        self.L = cluster.models[model].num_layers
        self.types = list(counts)
        self.count = np.array([counts[p] for p in self.types], float)
        items = [(t, k, p.capacity_at(k)) for t, p in enumerate(self.types)
                 for k in range(1, p.max_num_layers + 1) if p.capacity_at(k) > 0]
        self.item_type = np.array([t for t, _, _ in items], int)
        self.item_k = np.array([k for _, k, _ in items], float)
        self.cap = np.array([c for _, _, c in items], float)
        self.covers: list[np.ndarray] = []

    def _price(self, pi: np.ndarray, F: float, delta: float) -> tuple[float, np.ndarray]:
        """The cheapest cover of ``F`` at item prices ``pi``, capacities rounded up to the grid
        ``delta`` (every true cover is one): ``(cost, multiplicities)``. An unbounded covering knapsack,
        one item at a time: ``g[x]`` (cheapest to reach ``x`` grid steps, ``0`` for ``x <= 0``) becomes
        ``min_m g[x - m cu] + m pi_j``, a running minimum along each residue class of ``cu``."""
        G = int(math.floor(F / delta))
        # an item of capacity F or more covers alone: counting it as F keeps the arrays small
        cu = np.maximum(np.ceil(np.minimum(self.cap, F) / delta).astype(np.int64), 1)
        g = np.zeros(G + 1)
        g[1:] = np.inf
        stages = [g]
        for j in range(len(pi)):
            c = int(cu[j])
            rows = -(-(G + 1 + c) // c)
            padded = np.full(rows * c, np.inf)
            padded[:c] = 0.0  # x <= 0: nothing left to cover
            padded[c:c + G + 1] = g
            grid = padded.reshape(rows, c)
            m = np.arange(rows, dtype=float)[:, None] * pi[j]
            g = (m + np.minimum.accumulate(grid - m, axis=0)).ravel()[c:c + G + 1]
            stages.append(g)
        a = np.zeros(len(pi), np.int64)
        x = G
        for j in range(len(pi) - 1, -1, -1):  # how many of item j the optimum took
            prev, c = stages[j], int(cu[j])
            ms = np.arange(0, x // c + 2)
            left = x - ms * c
            cost = np.where(left <= 0, 0.0, prev[np.maximum(left, 0)]) + ms * pi[j]
            mj = int(ms[np.argmin(cost)])
            a[j] = mj
            x = max(x - mj * c, 0)
        return float(stages[-1][G]), a

    def coverable(self, F: float, deadline: float) -> bool | None:
        """Whether the LP covers ``L`` layers at ``F``: ``False`` only when proven (column generation
        converged), ``None`` when the deadline stopped it first."""
        from scipy.optimize import linprog

        J, T = len(self.cap), len(self.types)
        if J == 0:
            return False
        delta = max(F * 1e-4, 1e-9)
        # covers of a larger F kept, singles added: every item repeated until it covers F
        self.covers = [a for a in self.covers if a @ self.cap >= F]
        for j in range(J):
            a = np.zeros(J, np.int64)
            a[j] = math.ceil(F / self.cap[j])
            self.covers.append(a)
        k_diag = np.diag(-self.item_k)
        type_rows = np.zeros((T, J))
        type_rows[self.item_type, np.arange(J)] = 1.0
        while time.monotonic() < deadline:
            S = np.array(self.covers, float).T  # J x covers
            n = S.shape[1]
            A = np.block([[S, k_diag], [np.zeros((T, n)), type_rows]])
            b = np.r_[np.zeros(J), self.count]
            res = linprog(np.r_[-np.ones(n), np.zeros(J)], A_ub=A, b_ub=b, bounds=(0, None), method="highs")
            if res.status != 0:
                return None
            value = -res.fun
            if value >= self.L * (1 - 1e-9):
                return True
            pi = np.maximum(-res.ineqlin.marginals[:J], 0.0)
            cost, a = self._price(pi, F, delta)
            if cost >= 1 - 1e-7:
                # no cover has a positive reduced profit: the LP's optimum is ``value`` (a margin for
                # the LP's tolerances before calling it short of L)
                return True if value >= self.L * (1 - 1e-6) else False
            self.covers.append(a)
        return None


def cover_bound(cluster: HelixCluster, model: str, lo: float, hi: float, *, deadline: float = math.inf,
                rel_tol: float = 1e-4) -> float:
    """An upper bound on every layout's max-flow, at most ``hi`` (a known bound): the smallest ``F`` in
    ``(lo, hi]`` at which the cover LP (module docstring) was proven unable to cover the model, searched
    by bisection to ``rel_tol``; ``hi`` if none was proven by ``deadline``. ``lo``: a flow some layout
    reaches (so the LP covers it)."""
    lp = _CoverLP(cluster, model)
    lo = max(lo, 0.0)
    while hi - lo > rel_tol * hi and time.monotonic() < deadline:
        mid = 0.5 * (lo + hi)
        ok = lp.coverable(mid, deadline)
        if ok is None:
            break
        if ok:
            lo = mid
        else:
            hi = mid
    return hi
