"""Baseline: everything on the best single device that can hold it.

The reference tables' "one acc." column puts the whole graph on one accelerator *ignoring memory*;
this baseline respects memory and support, so on a graph too big for one accelerator it falls back to
the best device that does fit (a host CPU, typically), or reports that no single device can hold it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from graphs.model import Cluster, OpGraph
from graphs.parallel import usable_memory

from ._common import finish, no_placement, require_objective
from .base import Solution, SolveOptions

__all__ = ["solve", "best_single_device"]


def best_single_device(graph: OpGraph, cluster: Cluster) -> tuple[int | None, float, list[str]]:
    """``(device, load, reasons)``: the first device of the kind with the smallest total compute among
    the kinds that run every node and hold all of its memory (``None`` and the reason per kind when
    there is none). With one device nothing crosses a device boundary, so the load is compute only."""
    compute, _ = graph.costs_for(cluster)
    total_mem = float(graph.memory.sum())
    first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]])
    best, best_load, reasons = None, math.inf, []
    for t, k in enumerate(cluster.kinds):
        if k.count == 0:
            continue
        unsupported = int((~np.isfinite(compute[t])).sum())
        if unsupported:
            reasons.append(f"{k.name}: {unsupported} node(s) unsupported")
            continue
        if total_mem > usable_memory(k.memory):
            reasons.append(f"{k.name}: needs {total_mem:.6g} bytes, holds {k.memory:.6g}")
            continue
        load = float(compute[t].sum())
        if load < best_load:
            best, best_load = int(first[t]), load
    return best, best_load, reasons


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Place every node on the single device (of the cluster) that runs the graph fastest."""
    options = options or SolveOptions()
    require_objective("single", options, ("max-load", "latency"))
    t0 = time.perf_counter()
    device, _, reasons = best_single_device(graph, cluster)
    if device is None:
        return no_placement("single", t0, "no single device can hold the whole graph ("
                            + "; ".join(reasons) + ")")
    a = np.full(graph.num_nodes, device, np.int64)
    return finish("single", graph, cluster, a, options, t0,
                  message=f"everything on {cluster.device_name(device)}")
