"""Contiguous refinement: improve a contiguous placement by moving single items between stages.

An item may move to any used device whose pipeline position lies between its predecessors' and its
successors' positions, so the placement stays a chain of nested ideals (contiguous). A move is kept when
it makes the loads, sorted from the largest down, lexicographically smaller: the max-load never rises,
and plateaus are left by relieving the busiest devices. Used by ``auto`` to repair what coarsening lost.
"""

from __future__ import annotations

import time

import numpy as np

from graphs.contract import colocation_items, item_edges
from graphs.evaluate import evaluate
from graphs.model import Cluster, OpGraph

__all__ = ["refine"]


def _loads(graph, cluster, a):
    ev = evaluate(graph, cluster, a)
    return ev, np.array([d.load for d in ev.devices])


def _key(loads: np.ndarray) -> tuple:
    return tuple(np.round(np.sort(loads)[::-1], 12))


def refine(graph: OpGraph, cluster: Cluster, assignment: np.ndarray, *, deadline: float | None = None,
           max_rounds: int = 10_000) -> np.ndarray:
    """Return an assignment at least as good as ``assignment`` (which must be valid and contiguous)."""
    a = np.asarray(assignment, dtype=np.int64).copy()
    ev, loads = _loads(graph, cluster, a)
    if not ev.valid or not ev.contiguous:
        return a
    cls, C = colocation_items(graph)
    s, d = item_edges(graph, cls)
    preds: list[list[int]] = [[] for _ in range(C)]
    succs: list[list[int]] = [[] for _ in range(C)]
    for x, y in zip(s.tolist(), d.tolist()):
        succs[x].append(y)
        preds[y].append(x)
    item_nodes: list[list[int]] = [[] for _ in range(C)]
    for u, c in enumerate(cls.tolist()):
        item_nodes[c].append(u)
    item_dev = np.empty(C, np.int64)
    item_dev[cls] = a
    order = list(ev.stage_order)
    pos = {dev: i for i, dev in enumerate(order)}
    best = _key(loads)
    for _ in range(max_rounds):
        if deadline is not None and time.perf_counter() > deadline:
            break
        improved = False
        # try the busiest devices first, their items one by one
        for dev in np.argsort(-loads)[:2].tolist():
            if dev not in pos:
                continue
            for x in np.flatnonzero(item_dev == dev).tolist():
                lo = max((pos[item_dev[p]] for p in preds[x]), default=0)
                hi = min((pos[item_dev[q]] for q in succs[x]), default=len(order) - 1)
                for target in order[lo:hi + 1]:
                    if target == dev:
                        continue
                    trial = a.copy()
                    trial[item_nodes[x]] = target
                    ev2, loads2 = _loads(graph, cluster, trial)
                    if not ev2.valid:
                        continue
                    k = _key(loads2)
                    if k < best:
                        a, loads, best = trial, loads2, k
                        item_dev[x] = target
                        improved = True
                        break
                if improved:
                    break
            if improved:
                break
        if not improved:
            break
    return a
