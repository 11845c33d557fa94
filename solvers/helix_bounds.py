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
from scipy.optimize import linprog  # here, not in a bound: importing it is loading, not solving

from graphs.helix import HelixCluster, NodeProfile

__all__ = ["layer_budget_bound", "cover_bound", "crossing_bound", "integer_cover_bound"]


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


def _pairs_bound(cluster: HelixCluster, model: str, F: float, max_components: int = 12) -> float:
    """What paths using at most one node-node link slower than ``F`` can carry: the sum, over every
    set of one or two components of the links ``>= F``, of the layer-budget bound of its nodes
    (``inf`` with more than ``max_components`` components: not computed)."""
    import itertools

    comps = _fast_components(cluster, model, F)
    if len(comps) > max_components:
        return math.inf
    L = cluster.models[model].num_layers
    prof = {n.index: n.profiles[model] for n in cluster.nodes}
    return sum(_budget_bound([prof[a] for comp in sets for a in comp], L)
               for m in (1, 2) for sets in itertools.combinations(comps, m))


class _IntegerCovers:
    """The integer cover program of :func:`integer_cover_bound` for one cluster and model."""

    def __init__(self, cluster: HelixCluster, model: str, max_columns: int) -> None:
        counts: dict[NodeProfile, int] = {}
        for n in cluster.nodes:
            p = n.profiles[model]
            if p.max_num_layers > 0:
                counts[p] = counts.get(p, 0) + 1
        self.L = cluster.models[model].num_layers
        self.types = list(counts)
        self.count = [counts[p] for p in self.types]
        self.max_columns = max_columns

    def _items(self, F: float) -> list[tuple[int, int, float]]:
        """``(type, layers, capacity counted up to F)``: per type the most layers at which a node
        covers ``F`` alone, every ``k`` above that (short of ``F``), and ``k = 1``."""
        out = []
        for t, p in enumerate(self.types):
            caps = [(k, p.capacity_at(k)) for k in range(1, p.max_num_layers + 1)]
            alone = max((k for k, c in caps if c >= F), default=0)
            for k, c in caps:
                if c > 0 and (k == alone or k > alone or k == 1):
                    out.append((t, k, min(c, F)))
        return sorted(out, key=lambda it: -it[2])

    def _columns(self, items, F: float) -> list[tuple[int, ...]] | None:
        """Minimal covers of ``F`` (multisets of items within the node counts), and every pair of an
        item covering alone with another item; ``None`` past ``max_columns``."""
        J = len(items)
        caps = [c for _, _, c in items]
        room = list(self.count)
        out: list[tuple[int, ...]] = []
        counts = [0] * J
        tail = [0.0] * (J + 1)  # what the items from j on can add at most
        for j in range(J - 1, -1, -1):
            tail[j] = tail[j + 1] + caps[j] * self.count[items[j][0]]
        thresh = F * (1 - 1e-12)

        def dfs(j: int, total: float, smallest: float) -> bool:
            if total >= thresh:
                if total - smallest < thresh:  # items sorted by capacity: dropping the smallest fails
                    out.append(tuple(counts))
                return len(out) <= self.max_columns
            if j == J or total + tail[j] < thresh:
                return True
            t = items[j][0]
            for c in range(min(room[t], math.ceil((F - total) / caps[j]) if caps[j] > 0 else 0), -1, -1):
                counts[j] = c
                room[t] -= c
                ok = dfs(j + 1, total + c * caps[j], caps[j] if c else smallest)
                room[t] += c
                counts[j] = 0
                if not ok:
                    return False
            return True

        if not dfs(0, 0.0, math.inf):
            return None
        seen = set(out)
        for j in range(J):
            if caps[j] < thresh:
                continue
            for x in range(J):
                a = [0] * J
                a[j] += 1
                a[x] += 1
                need = {}
                for i, c in enumerate(a):
                    need[items[i][0]] = need.get(items[i][0], 0) + c
                if all(need[t] <= self.count[t] for t in need) and tuple(a) not in seen:
                    seen.add(tuple(a))
                    out.append(tuple(a))
        return out

    def feasible(self, F: float, deadline: float, multi: int = 0, single_layer: bool = False,
                 threads: int | None = None) -> bool | None:
        """Whether integer node counts and layer counts cover ``L`` layers at ``F`` (with at least
        ``multi`` layers covered by two items or more, with ``single_layer`` items of one layer
        each): ``False`` only when proven, ``None`` when undecided (deadline, too many covers)."""
        from ._milp import INFEASIBLE, MilpModel, solve_mip

        items = self._items(F)
        cols = self._columns(items, F)
        if cols is None:
            return None
        if not cols:
            return False
        J, C = len(items), len(cols)
        A = np.array(cols, float).T  # J x C
        mdl = MilpModel()
        y = mdl.add_cols(C, lb=0, ub=self.L, integer=True)
        u = mdl.add_cols(J, lb=0, ub=[float(self.count[t]) for t, _, _ in items], integer=True)
        # every item's use at most k per node holding it
        r, cc, vv = [], [], []
        for j in range(J):
            nz = np.flatnonzero(A[j])
            r += [j] * (len(nz) + 1)
            cc += list(y[nz]) + [u[j]]
            vv += list(A[j, nz]) + [-float(items[j][1])]
        mdl.add_rows(np.full(J, -np.inf), np.zeros(J), r, cc, vv)
        for t in range(len(self.types)):
            js = [j for j in range(J) if items[j][0] == t]
            if js:
                mdl.add_rows([-np.inf], [float(self.count[t])], np.zeros(len(js), int), u[js], 1.0)
        mdl.add_rows([float(self.L)], [np.inf], np.zeros(C, int), y, 1.0)
        # a cover that takes an item twice or more needs that many distinct nodes holding it:
        # ``y_S <= L z_S`` and ``u_j >= S_j z_S`` with ``z_S`` binary
        # one batch of rows in the order of one cover at a time (a row per call took most of a short
        # time limit): a cover's y_S <= L z_S, then its u_j >= S_j z_S
        twice = np.flatnonzero(A.max(axis=0) >= 2)
        if twice.size:
            n = twice.size
            z = mdl.add_cols(n, lb=0, ub=1, integer=True)
            ks, js = np.nonzero(A[:, twice].T >= 2)  # by cover, then item
            before = np.concatenate([[0], np.cumsum(np.bincount(ks, minlength=n))[:-1]])
            head = np.arange(n) + before  # each cover's y-row; its u-rows follow it
            mine = head[ks] + 1 + np.arange(ks.size) - before[ks]
            lo = np.zeros(n + ks.size)
            hi = np.full(n + ks.size, np.inf)
            lo[head], hi[head] = -np.inf, 0.0
            rows = np.concatenate([np.repeat(head, 2), np.repeat(mine, 2)])
            cols = np.concatenate([np.column_stack([y[twice], z]).ravel(),
                                   np.column_stack([u[js], z[ks]]).ravel()])
            vals = np.concatenate([np.tile([1.0, -float(self.L)], n),
                                   np.column_stack([np.ones(ks.size), -A[js, twice[ks]]]).ravel()])
            mdl.add_rows(lo, hi, rows, cols, vals)
        if multi:
            ok_items = np.array([(not single_layer) or k == 1 for _, k, _ in items])
            many = (A.sum(axis=0) >= 2) & (A[~ok_items].sum(axis=0) == 0)
            if not many.any():
                return False
            mdl.add_rows([float(multi)], [np.inf], np.zeros(int(many.sum()), int), y[many], 1.0)
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        res = solve_mip(mdl, time_limit=left, gap=1.0, threads=threads)
        if res.interrupted:  # HiGHS took the Ctrl-C and returned: the caller's search stops
            raise KeyboardInterrupt
        if res.status == INFEASIBLE:
            return False
        return True if res.x is not None else None


def integer_cover_bound(cluster: HelixCluster, model: str, lo: float, hi: float, *,
                        deadline: float = math.inf, rel_tol: float = 1e-5, threads: int | None = None,
                        max_columns: int = 20000) -> float:
    """An upper bound on every layout's max-flow, at most ``hi``: the cover and crossing arguments
    with whole nodes.

    **Covers in integers.** In a layout of flow ``F``, a node of type ``t`` holds some ``k`` layers
    and each layer's holders cover ``F`` (module docstring), so integers ``u_tk`` (nodes of type ``t``
    holding ``k`` layers, ``sum_k u_tk <= N_t``) and ``y_S`` (layers whose holders contain the cover
    ``S``) satisfy ``sum_S y_S = L`` and ``sum_S S_j y_S <= k_j u_j`` for every item ``j = (t, k)``:
    the cover LP of :func:`cover_bound` with the node and layer counts integral, as they are in a
    layout. The covers ``S`` are enumerated: every layer's holders contain a *minimal* cover (drop
    holders while they still cover ``F``; using fewer items than a node offers is allowed), and a
    cover taking an item ``j`` twice or more needs as many distinct nodes: ``u_j >= S_j`` wherever
    ``y_S > 0`` (a binary per such cover). Items: a
    node holding ``k`` layers with ``c_t(k) >= F`` may be counted as holding the most layers ``k*``
    at which its capacity still covers ``F`` (capacity ``>= F`` still, more layers to offer); so per
    type only ``k*``, every ``k > k*`` (capacities short of ``F``) and ``k = 1`` are items, each
    counted at ``min(c_t(k), F)``.

    **Crossings.** With the case split of :func:`crossing_bound`: (A) no path uses a link slower than
    ``F``, the sum of the fast components' budgets is at least ``F`` (then only the covers are asked
    for); (B) some path does, so some layer has two holders or more (``y`` of the covers of two items
    or more adds up to one or more; a layer with two holders contains a minimal cover of two items or
    more, or one item covering alone and another: those pairs are columns too); (C) where paths with
    at most one slow link cannot carry ``F`` (the sum over every set of one or two fast components of
    their budgets is below ``F``; a path with at most one slow link stays inside at most two
    components, and the paths of one set of components carry a flow of the layout restricted to it),
    some path uses two slow links or more. Two consecutive ones, at boundaries ``b1 < b2`` (layers
    advance along a path; a source link is at 0, a sink link at ``L``), give each a layer in ``{b -
    1, b}`` with two holders or more (the claim of :func:`crossing_bound`). They differ unless ``b2 =
    b1 + 1``, only layer ``b1`` has two holders and layers ``b1 - 1`` and ``b1 + 1`` one each: the
    path's node ``i`` before the first slow link (it ends at ``b1``) and its node ``k`` after the
    second (it starts at ``b1 + 1``). A holder of layer ``b1`` that held ``b1 - 1`` too would be
    ``i``, and one that held ``b1 + 1`` would be ``k``, and neither holds ``b1``: every holder of
    layer ``b1`` holds that one layer. So in case (C) two layers have two holders or more, or one
    layer has two or more holders of one layer each (their minimal sub-cover, or a pair of one item
    covering alone and another, is of items with ``k = 1``; those are kept as items for this).

    ``F`` is bisected in ``(lo, hi]`` for the smallest value proven impossible in every case that
    applies (by HiGHS on the integer program; undecided stops the search). A layout of flow ``F' >=
    F`` is in a case that applies at ``F`` (slow links at ``F`` are slow at ``F'``, its covers of
    ``F'`` cover ``F``, and its node counts hold for both), so none reaches that value. ``None`` of
    the enumeration (more than ``max_columns`` covers) counts as undecided."""
    prog = _IntegerCovers(cluster, model, max_columns)

    def reachable(F: float) -> bool | None:
        if _separate_bound(cluster, model, F) >= F:
            return prog.feasible(F, deadline, threads=threads)
        if _pairs_bound(cluster, model, F) >= F:
            return prog.feasible(F, deadline, multi=1, threads=threads)
        ok = prog.feasible(F, deadline, multi=2, threads=threads)
        if ok is None or ok:
            return ok
        return prog.feasible(F, deadline, multi=1, single_layer=True, threads=threads)

    first = lo * (1 + 2 * rel_tol) if lo > 0 else None
    return _bisect(reachable, lo, hi, rel_tol=rel_tol, deadline=deadline, first=first)
