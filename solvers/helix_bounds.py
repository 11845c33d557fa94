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

__all__ = ["layer_budget_bound", "cover_bound", "crossing_bound"]


def _budget(profiles: list[NodeProfile], F: float) -> float:
    """``sum_i max_k k min(c_i(k) / F, 1)``: layers' worth of flow ``F`` the nodes can carry at most."""
    return sum(max(k * min(p.capacity_at(k) / F, 1.0) for k in range(1, p.max_num_layers + 1))
               for p in profiles if p.max_num_layers > 0)


def layer_budget_bound(cluster: HelixCluster, model: str) -> float:
    """An upper bound on the max-flow of every layout of ``model`` on ``cluster``: the largest ``F`` with
    ``sum_i max_k k min(c_i(k), F) >= L F`` (module docstring)."""
    return _budget_bound([n.profiles[model] for n in cluster.nodes], cluster.models[model].num_layers)


def _budget_bound(profiles: list[NodeProfile], L: int) -> float:
    """:func:`layer_budget_bound` of the nodes with these profiles."""
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

    def _knapsack(self, pi: np.ndarray, F: float, delta: float) -> tuple[np.ndarray, list[np.ndarray]]:
        """The covering knapsack's tables at item prices ``pi``, capacities rounded up to the grid
        ``delta`` (every true cover is one): ``(cu, stages)``, ``stages[j][x]`` the cheapest way to cover
        ``x`` grid steps with the first ``j`` items (``0`` for ``x <= 0``). An unbounded covering
        knapsack, one item at a time: ``g[x]`` becomes ``min_m g[x - m cu] + m pi_j``, a running minimum
        along each residue class of ``cu``."""
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
        return cu, stages

    @staticmethod
    def _backtrack(pi: np.ndarray, cu: np.ndarray, stages: list[np.ndarray], x: int) -> np.ndarray:
        """The multiplicities of the cheapest cover of ``x`` grid steps in the tables of
        :meth:`_knapsack`."""
        a = np.zeros(len(pi), np.int64)
        for j in range(len(pi) - 1, -1, -1):  # how many of item j the optimum took
            prev, c = stages[j], int(cu[j])
            ms = np.arange(0, max(x, 0) // c + 2)
            left = x - ms * c
            cost = np.where(left <= 0, 0.0, prev[np.maximum(left, 0)]) + ms * pi[j]
            mj = int(ms[np.argmin(cost)])
            a[j] = mj
            x = max(x - mj * c, 0)
        return a

    def _price(self, pi: np.ndarray, F: float, delta: float) -> tuple[float, np.ndarray]:
        """The cheapest cover of ``F`` at item prices ``pi`` (on the grid ``delta``, see
        :meth:`_knapsack`): ``(cost, multiplicities)``."""
        cu, stages = self._knapsack(pi, F, delta)
        G = len(stages[0]) - 1
        return float(stages[-1][G]), self._backtrack(pi, cu, stages, G)

    def _price_multi(self, pi: np.ndarray, F: float, delta: float) -> tuple[float, np.ndarray]:
        """The cheapest cover of ``F`` with at least two items (counted with multiplicity): one item
        ``j``, then the cheapest non-empty cover of what ``j`` leaves (the cheapest single item when
        ``j`` covers alone), over every ``j``."""
        cu, stages = self._knapsack(pi, F, delta)
        G = len(stages[0]) - 1
        g = stages[-1]
        cheapest = int(np.argmin(pi))
        best, best_a = math.inf, None
        for j in range(len(pi)):
            left = G - int(cu[j])
            rest = g[left] if left > 0 else float(pi[cheapest])
            if pi[j] + rest < best:
                best = float(pi[j] + rest)
                if left > 0:
                    a = self._backtrack(pi, cu, stages, left)
                else:
                    a = np.zeros(len(pi), np.int64)
                    a[cheapest] = 1
                a[j] += 1
                best_a = a
        return best, best_a

    def coverable(self, F: float, deadline: float, *, multi: bool = False, grid: float = 1e-4) -> bool | None:
        """Whether the LP covers ``L`` layers at ``F``: ``False`` only when proven (column generation
        converged), ``None`` when the deadline stopped it first. ``multi``: with the extra row that at
        least one layer's cover has two or more items (:func:`crossing_bound`). ``grid``: the pricing's
        rounding of capacities, relative to ``F``."""
        from scipy.optimize import linprog

        J, T = len(self.cap), len(self.types)
        if J == 0:
            return False
        delta = max(F * grid, 1e-9)
        # covers of a larger F kept, singles added: every item repeated until it covers F
        self.covers = [a for a in self.covers if a @ self.cap >= F]
        for j in range(J):
            a = np.zeros(J, np.int64)
            a[j] = math.ceil(F / self.cap[j])
            self.covers.append(a)
        k_diag = np.diag(-self.item_k)
        type_rows = np.zeros((T, J))
        type_rows[self.item_type, np.arange(J)] = 1.0
        # the multi row ``sum of multi-item covers >= 1`` starts satisfiable through an artificial
        # column ``s`` that costs M layers: a value below L with it is below L without it
        M = 10.0 * self.L
        while time.monotonic() < deadline:
            S = np.array(self.covers, float).T  # J x covers
            n = S.shape[1]
            A = np.block([[S, k_diag], [np.zeros((T, n)), type_rows]])
            b = np.r_[np.zeros(J), self.count]
            c = np.r_[-np.ones(n), np.zeros(J)]
            if multi:
                many = (S.sum(axis=0) >= 2).astype(float)
                A = np.block([[A, np.zeros((J + T, 1))],
                              [-many[None, :], np.zeros((1, J)), -np.ones((1, 1))]])
                b = np.r_[b, -1.0]
                c = np.r_[c, M]
            res = linprog(c, A_ub=A, b_ub=b, bounds=(0, None), method="highs")
            if res.status != 0:
                return None
            value = -res.fun
            if value >= self.L * (1 - 1e-9):
                return True
            pi = np.maximum(-res.ineqlin.marginals[:J], 0.0)
            cost, a = self._price(pi, F, delta)
            if cost < 1 - 1e-7:
                self.covers.append(a)
                continue
            if multi:
                mu = max(-res.ineqlin.marginals[-1], 0.0)
                cost_m, a_m = self._price_multi(pi, F, delta)
                if cost_m < 1 + mu - 1e-7:
                    self.covers.append(a_m)
                    continue
            # no cover has a positive reduced profit: the LP's optimum is ``value`` (a margin for the
            # LP's tolerances before calling it short of L)
            return True if value >= self.L * (1 - 1e-6) else False
        return None


def cover_bound(cluster: HelixCluster, model: str, lo: float, hi: float, *, deadline: float = math.inf,
                rel_tol: float = 1e-4) -> float:
    """An upper bound on every layout's max-flow, at most ``hi`` (a known bound): the smallest ``F`` in
    ``(lo, hi]`` at which the cover LP (module docstring) was proven unable to cover the model, searched
    by bisection to ``rel_tol``; ``hi`` if none was proven by ``deadline``. ``lo``: a flow some layout
    reaches (so the LP covers it)."""
    lp = _CoverLP(cluster, model)
    return _bisect(lambda F: lp.coverable(F, deadline), lo, hi, rel_tol=rel_tol, deadline=deadline)


def _bisect(reachable, lo: float, hi: float, *, rel_tol: float, deadline: float,
            first: float | None = None) -> float:
    """The smallest ``F`` in ``(lo, hi]`` at which ``reachable(F)`` was ``False`` (proven impossible),
    bisected to ``rel_tol``: ``True`` raises ``lo``, ``None`` (undecided by ``deadline``) stops;
    ``first``: the point tried first, where it lies in ``(lo, hi)``."""
    lo = max(lo, 0.0)
    while hi - lo > rel_tol * hi and time.monotonic() < deadline:
        mid = first if first is not None and first < hi else 0.5 * (lo + hi)
        first = None
        ok = reachable(mid)
        if ok is None:
            break
        if ok:
            lo = mid
        else:
            hi = mid
    return hi


def _fast_components(cluster: HelixCluster, model: str, F: float) -> list[list[int]]:
    """The nodes joined by node-node links of capacity ``>= F`` (either direction), as components."""
    parent = {n.index: n.index for n in cluster.nodes}

    def root(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for (a, b), cap in cluster.directed_links(model).items():
        if a in parent and b in parent and cap >= F:
            parent[root(a)] = root(b)
    comps: dict[int, list[int]] = {}
    for a in parent:
        comps.setdefault(root(a), []).append(a)
    return list(comps.values())


def _separate_bound(cluster: HelixCluster, model: str, F: float) -> float:
    """Case A of :func:`crossing_bound`: the flow of layouts whose paths use no link slower than ``F``,
    at most the sum of the layer-budget bounds of the fast components."""
    L = cluster.models[model].num_layers
    prof = {n.index: n.profiles[model] for n in cluster.nodes}
    return sum(_budget_bound([prof[a] for a in comp], L) for comp in _fast_components(cluster, model, F))


def crossing_bound(cluster: HelixCluster, model: str, lo: float, hi: float, *, deadline: float = math.inf,
                   rel_tol: float = 1e-5) -> float:
    """An upper bound on every layout's max-flow that sees slow links, at most ``hi`` (a known bound).

    **Claim.** Take a layout with flow ``F`` and call a link (source and sink links included) *slow* if
    its capacity is below ``F``. If some flow path uses a slow link, some layer is held by two or more
    nodes. Proof: a slow node-node link ``i -> j`` with flow joins a boundary ``b = e_i = s_j``, ``0 < b
    < L``. If another node ends at ``b``, layer ``b - 1`` has two holders; if another starts at ``b``,
    layer ``b`` has. Otherwise ``j`` is the only node ``i`` can send to (``b < L``: no sink arc), so ``i``
    carries at most the link's capacity ``< F``; every path passes through exactly one holder of layer
    ``b - 1``, so the holders' flows add up to ``F`` and another node holds it. A slow source link into
    ``j``: the holders of layer 0 are the nodes starting at 0 and carry ``F`` between them, ``j`` less,
    so another node starts at 0 (the sink likewise at layer ``L - 1``).

    **Bound.** So every layout of flow ``F`` is in one of two cases. (A) No path uses a slow link: each
    path stays inside one component of the graph of links ``>= F``, and ``F`` is at most the sum of the
    components' layer-budget bounds (each component's share is a flow of the layout restricted to it).
    (B) The cover LP of :func:`cover_bound` covers ``L`` layers at ``F`` *with at least one layer's
    cover of two or more items* (the holders of every layer cover ``F``; two holders make a cover of two
    items). This function bisects ``F`` in ``(lo, hi]`` for the smallest value at which both cases were
    proven impossible: (A) by the sum falling below ``F``, (B) by column generation converging below
    ``L`` layers (pricing as in :func:`cover_bound`, plus the cheapest cover with two items or more;
    the multi-cover row is met at first by an artificial column that costs ``10 L`` layers, so a value
    below ``L`` with it is below ``L`` without it).
    No layout reaches that value, since a layout of flow ``F' >= F`` is in case (A) or (B) at ``F``
    as well (links slower than ``F`` are slower than ``F'``; its covers of ``F'`` cover ``F``).

    It helps where the link-free bounds are reached only by chains of single nodes, as LLaMA-2 70B on
    Helix's three-region cluster: there every chain must cross a link of about 900 tokens/s between
    regions, so a layer needs two nodes, which no flow above 1754.38 can afford.
    """
    lp = _CoverLP(cluster, model)

    def reachable(F: float) -> bool | None:
        if _separate_bound(cluster, model, F) >= F:
            return True
        # the pricing's grid as fine as the bisection: capacities rounded up by less than the
        # tolerance, so a layout just below ``hi`` cannot hide behind the rounding
        return lp.coverable(F, deadline, multi=True, grid=rel_tol)

    # first just above ``lo``: where ``lo`` is optimal, one LP proves it
    first = lo * (1 + 2 * rel_tol) if lo > 0 else None
    return _bisect(reachable, lo, hi, rel_tol=rel_tol, deadline=deadline, first=first)
