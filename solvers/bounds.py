"""Cheap, provable lower bounds on the minimum max-load of a contiguous placement.

All of them are relaxations that keep only what every placement must satisfy, computed on the items of
:func:`graphs.contract.contract` (nodes that a contiguous placement must keep together), so they bound
the contiguous optimum the DP finds (and, on colocation-only items, any placement):

* :func:`item_bound` — the largest unsplittable item: every item runs on some device whose kind supports
  it and can hold it, so the max-load is at least ``max_i min_t compute[t, i]`` over such kinds.
* :func:`work_bound` — the total work spread over the devices, kind by kind, as a linear program (HiGHS
  through scipy): items may be split fractionally between kinds, a kind's devices share its work
  evenly, memory is shared likewise, and item ``i`` may only go to kind ``t`` if
  ``compute[t, i] <= T``. The smallest ``T`` for which that is feasible bounds the optimum (the optimum
  placement is such a fractional solution at its own max-load); it is found exactly by a binary search
  over the breakpoints ``compute[t, i]``, one LP each. A node's time differs per kind, so neither "total
  work / devices" on one kind nor the cheapest kind per node would be right: the LP weighs both.
  Communication is left out (it only adds load), which is where the bound loses tightness.

:func:`lower_bounds` returns both with their maximum, and the LP's dual prices of the kinds: for any
prices ``y >= 0``, ``sum over items of min_t y_t compute[t, i] <= ub * sum_t y_t count_t`` must hold for
any set of items placed on ``count`` devices within load ``ub`` — the DP uses that to drop device-count
states that cannot lead to a placement within its upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphs.contract import ClassGraph, contract
from graphs.model import Cluster, OpGraph

__all__ = ["Bounds", "lower_bounds", "item_bound", "work_bound", "usable"]


@dataclass(frozen=True)
class Bounds:
    """Lower bounds on the contiguous optimum; ``value`` is the best (largest) of them. ``prices``: the
    work LP's dual price per device kind (non-negative, largest 1; zeros when the LP was not solved)."""

    value: float
    item: float
    work: float
    prices: np.ndarray


def usable(item_compute: np.ndarray, item_memory: np.ndarray, counts: np.ndarray,
           caps: np.ndarray) -> np.ndarray:
    """``[T, C]``: kind ``t`` has devices, supports item ``i`` and can hold it."""
    return (counts[:, None] > 0) & np.isfinite(item_compute) & (item_memory[None, :] <= caps[:, None])


def item_bound(item_compute: np.ndarray, item_memory: np.ndarray, counts: np.ndarray,
               caps: np.ndarray) -> float:
    """The largest item's cheapest compute over the kinds that can run and hold it (``inf`` if some item
    fits nowhere)."""
    ok = usable(item_compute, item_memory, counts, caps)
    best = np.where(ok, item_compute, np.inf).min(axis=0, initial=np.inf)
    return float(best.max(initial=0.0))


def _work_lp(cost: np.ndarray, memory: np.ndarray, counts: np.ndarray, caps: np.ndarray, allowed: np.ndarray):
    """min T: every item split over its allowed kinds, kind t's work <= counts[t] T, its memory <=
    counts[t] caps[t]. Returns (T or inf, prices per kind)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    T, C = cost.shape
    kt, ki = np.nonzero(allowed)
    nv = kt.size
    if np.any(~allowed.any(axis=0)):
        return math.inf, np.zeros(T)
    # columns: x (nv), then the load T
    c = np.zeros(nv + 1)
    c[-1] = 1.0
    a_eq = coo_matrix((np.ones(nv), (ki, np.arange(nv))), shape=(C, nv + 1))
    rows = [kt, np.arange(T)]
    cols = [np.arange(nv), np.full(T, nv)]
    vals = [cost[kt, ki], -counts.astype(float)]
    b_ub = [np.zeros(T)]
    finite = np.flatnonzero(np.isfinite(caps) & (counts > 0))
    if finite.size and memory.any():
        pos = np.full(T, -1)
        pos[finite] = T + np.arange(finite.size)
        sel = pos[kt] >= 0
        rows.append(pos[kt[sel]])
        cols.append(np.arange(nv)[sel])
        vals.append(memory[ki[sel]])
        b_ub.append(counts[finite] * caps[finite])
    nrows = T + (finite.size if len(rows) > 2 else 0)
    a_ub = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(nrows, nv + 1))
    res = linprog(c, A_ub=a_ub.tocsr(), b_ub=np.concatenate(b_ub), A_eq=a_eq.tocsr(), b_eq=np.ones(C),
                  bounds=(0, None), method="highs")
    if res.status != 0:
        return math.inf, np.zeros(T)
    prices = np.abs(np.asarray(res.ineqlin.marginals[:T], dtype=float))
    return float(res.fun), prices


def work_bound(item_compute: np.ndarray, item_memory: np.ndarray, counts: np.ndarray,
               caps: np.ndarray) -> tuple[float, np.ndarray]:
    """The work LP's bound (see the module documentation) and its dual prices per kind. ``inf`` when no
    fractional placement fits the memory."""
    T = item_compute.shape[0]
    ok = usable(item_compute, item_memory, counts, caps)
    if item_compute.shape[1] == 0:
        return 0.0, np.zeros(T)
    start = item_bound(item_compute, item_memory, counts, caps)
    if not math.isfinite(start):
        return math.inf, np.zeros(T)
    cost = np.where(ok, item_compute, 0.0)
    marks = np.unique(cost[ok])
    marks = marks[marks >= start]
    if marks.size == 0 or marks[0] > start:
        marks = np.concatenate([[start], marks])
    memo: dict[int, tuple[float, np.ndarray]] = {}

    def lp(k: int):
        if k not in memo:
            memo[k] = _work_lp(cost, item_memory, counts, caps, ok & (cost <= marks[k]))
        return memo[k]

    def feasible_before_next(k: int) -> bool:
        val, _ = lp(k)
        return k == marks.size - 1 or val < marks[k + 1]

    lo, hi = 0, marks.size - 1
    if not feasible_before_next(hi):
        return math.inf, np.zeros(T)
    while lo < hi:  # smallest k whose interval [marks[k], marks[k+1]) holds a feasible load
        mid = (lo + hi) // 2
        if feasible_before_next(mid):
            hi = mid
        else:
            lo = mid + 1
    val, prices = lp(lo)
    return float(max(marks[lo], val)), prices


def lower_bounds(graph: OpGraph, cluster: Cluster, *, items: ClassGraph | None = None) -> Bounds:
    """Both bounds of the module on ``graph`` placed contiguously on ``cluster``."""
    if items is None:
        items = contract(graph, cluster)
    compute, _ = graph.costs_for(cluster)
    counts = np.array([k.count for k in cluster.kinds], dtype=np.int64)
    caps = np.array([math.inf if k.memory is None else float(k.memory) for k in cluster.kinds])
    return bounds_of_items(items.class_sums(compute), items.class_sums(graph.memory), counts, caps)


def bounds_of_items(item_compute: np.ndarray, item_memory: np.ndarray, counts: np.ndarray,
                    caps: np.ndarray) -> Bounds:
    """:func:`lower_bounds` on prepared item arrays (``[T, C]`` compute, ``[C]`` memory, per-kind counts
    and capacities)."""
    ib = item_bound(item_compute, item_memory, counts, caps)
    wb, prices = work_bound(item_compute, item_memory, counts, caps)
    top = prices.max(initial=0.0)
    prices = prices / top if top > 0 else prices
    return Bounds(max(ib, wb), ib, wb, prices)
