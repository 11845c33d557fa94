"""Serving a model: batch size as a decision, a latency target, the throughput–latency frontier.

Throughput is in **samples per second**: a placement of a model at batch size ``b`` releases one batch
every max-load milliseconds (the pipeline's period), so it serves ``1000 b / max-load`` samples/s. Its
latency is the time one batch takes end to end (:mod:`graphs.latency`).

* :func:`batch_workload` costs the model at one batch size (roofline, profile or a table: the front
  end's models), with memory that grows with the batch: every node holds its parameters **and its
  output** (a conservative working set: no tensor is freed while the stage runs).
* :func:`sweep` places the model at each candidate batch size (``auto``: 1, 2, 4, ... until samples/s
  stop improving by more than 1% or nothing fits in memory) and returns the best. Without a latency
  target each point is the default solver's max-load optimum; with one, the serving IP's best
  throughput under it (:mod:`solvers.slo_ip`), and a batch size whose lowest latency misses the
  target ends an ``auto`` sweep (a larger batch takes at least as long).
* :func:`frontier` gives every batch size's non-dominated (samples/s, latency) plans, by the epsilon-
  constraint method on the serving IP: from no latency limit, minimise max-load, then minimise latency
  at that max-load; tighten the limit to just below that latency (a relative step of ``1e-5``, the
  frontier's resolution); repeat until infeasible. Across batch sizes
  the dominated points are dropped. A point is *proven* when both of its programs were solved to
  optimality.

Nothing here prints; errors are :class:`graphs.errors.PlacementError` subclasses.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from graphs.errors import InputError, PlacementError
from graphs.evaluate import evaluate
from graphs.latency import latency
from graphs.model import OpGraph
from graphs.reference import Workload
from solvers.base import Solution, SolveOptions, Status

from .api import Placement, place

__all__ = ["ServingPoint", "Sweep", "Frontier", "parse_batch_sizes", "batch_workload", "serving_point",
           "sweep", "frontier", "non_dominated", "AUTO_MAX_BATCH"]

AUTO_MAX_BATCH = 1024
_IMPROVES = 0.01  # an auto sweep continues while samples/s grow by more than this fraction
# the frontier's resolution: the next point must be this much faster (relative); well above the MIP
# solver's tolerances, so that the program cannot return the previous point within them
_STEP = 1e-5


@dataclass(frozen=True, eq=False)
class ServingPoint:
    """One plan at one batch size: its placement and what it serves."""

    batch_size: int
    placement: Placement
    samples_per_s: float
    latency_ms: float  # one batch, end to end
    proven: bool  # the solver proved the plan optimal for what it was asked

    @property
    def max_load(self) -> float:
        return self.placement.max_load


@dataclass(frozen=True, eq=False)
class Sweep:
    """Every batch size tried, in order: a :class:`ServingPoint`, or the reason there is none."""

    points: tuple[tuple[int, ServingPoint | None, str], ...]
    best: ServingPoint | None
    stopped: str  # why an auto sweep stopped ("" for a given list)
    latency_slo: float | None = None
    lowest_latency: float | None = None  # when no batch size meets the target: the smallest latency


@dataclass(frozen=True, eq=False)
class Frontier:
    """Non-dominated plans, by samples/s decreasing (latency decreasing)."""

    points: tuple[ServingPoint, ...]
    per_batch: dict  # batch size -> its own non-dominated points (before merging)
    proven: bool


def parse_batch_sizes(text: str | int | Sequence[int] | None) -> list[int] | None:
    """``"auto"`` (or ``None``) -> ``None``; ``"1,2,8"`` -> ``[1, 2, 8]``; an int -> ``[int]``."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "auto"):
        return None
    if isinstance(text, int) and not isinstance(text, bool):
        items = [text]
    elif isinstance(text, str):
        items = []
        for part in text.split(","):
            part = part.strip()
            if not part.isdigit():
                raise InputError(f"batch sizes {text!r}: {part!r} is not a positive integer (write auto or "
                                 f"a list such as 1,2,4,8)")
            items.append(int(part))
    else:
        items = list(text)
    if not items or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in items):
        raise InputError(f"batch sizes must be positive integers, got {text!r}")
    return sorted(set(items))


def batch_workload(path: str | os.PathLike, devices, batch_size: int, *, costs: str = "roofline",
                   dims=None, device_files: Iterable[str] = (), activations: bool = True) -> Workload:
    """The model at ``batch_size`` (a fixed batch in the file is made symbolic first,
    :mod:`graphs.onnx_batch`), costed, with each node's output added to its memory (``activations``)."""
    from graphs.onnx_batch import batchable_path, check_batch
    from graphs.onnx_workload import prepare_onnx

    src = batchable_path(path)
    g, w = prepare_onnx(src, devices, costs, batch_size, dims=dims, device_files=device_files)
    check_batch(g, batch_size)
    graph = w.graph
    if activations:
        out_bytes = np.asarray(graph.meta["output_bytes"], np.float64)
        mem = graph.memory + out_bytes
        mem.setflags(write=False)
        meta = dict(graph.meta, memory_model="parameters + outputs")
        graph = dataclasses.replace(graph, memory=mem, meta=meta)
    return Workload(graph, w.cluster)


def _point(graph: OpGraph, cluster, sol: Solution, objective: str = "max-load") -> ServingPoint:
    ev = evaluate(graph, cluster, sol.assignment)
    p = Placement(graph, cluster, sol, ev, objective)
    b = int(graph.meta.get("batch_size") or 1)
    lat = latency(graph, cluster, sol.assignment, subgraphs=sol.stats.get("subgraphs")).total
    sps = 1e3 * b / ev.max_load if ev.max_load > 0 else math.inf
    return ServingPoint(b, p, sps, lat, sol.status == Status.OPTIMAL)


def serving_point(w: Workload, *, latency_slo: float | None = None, solver: str | None = None,
                  options: SolveOptions | None = None) -> tuple[ServingPoint | None, Solution]:
    """The best-throughput plan of one workload, under ``latency_slo`` (ms) if given: the default
    solver's (or ``solver``'s) max-load optimum without a target, the serving IP's with one."""
    options = options or SolveOptions()
    if latency_slo is None:
        p = place(w.graph, w.cluster, solver, options)
        if p.assignment is None:
            return None, p.solution
        return _point(w.graph, w.cluster, p.solution), p.solution
    from solvers import slo_ip

    sol = slo_ip.solve(w.graph, w.cluster, options, latency_max=float(latency_slo))
    if sol.assignment is None:
        return None, sol
    return _point(w.graph, w.cluster, sol), sol


def sweep(path: str | os.PathLike, devices, batch_sizes: Sequence[int] | None = None, *,
          costs: str = "roofline", latency_slo: float | None = None, solver: str | None = None,
          options: SolveOptions | None = None, dims=None, device_files: Iterable[str] = (),
          max_batch: int = AUTO_MAX_BATCH) -> Sweep:
    """Place the model at each batch size (``None``: auto, see the module doc); the best is the one
    with the most samples/s (the smaller batch on a tie)."""
    options = options or SolveOptions()
    auto = batch_sizes is None
    sizes = [1 << k for k in range(int(math.log2(max_batch)) + 1)] if auto else list(batch_sizes)
    points: list[tuple[int, ServingPoint | None, str]] = []
    best: ServingPoint | None = None
    stopped = ""
    for b in sizes:
        w = batch_workload(path, devices, b, costs=costs, dims=dims, device_files=device_files)
        pt, sol = serving_point(w, latency_slo=latency_slo, solver=solver, options=options)
        points.append((b, pt, "" if pt is not None else (sol.message or sol.status.value)))
        if pt is None:
            if auto:
                if latency_slo is not None and sol.status == Status.INFEASIBLE and "latency" in sol.message:
                    stopped = f"batch {b}: no plan meets the latency target"
                elif sol.status == Status.INFEASIBLE:
                    stopped = f"batch {b}: {sol.message or 'no placement'} (memory runs out)"
                else:
                    stopped = f"batch {b}: {sol.message or 'no placement found'}"
                break
            continue
        if best is not None and auto and pt.samples_per_s <= best.samples_per_s * (1 + _IMPROVES):
            stopped = (f"batch {b}: {pt.samples_per_s:.6g} samples/s, no better than batch "
                       f"{best.batch_size}'s {best.samples_per_s:.6g}")
            break
        if best is None or pt.samples_per_s > best.samples_per_s * (1 + 1e-12):
            best = pt
    else:
        if auto:
            stopped = f"reached the largest batch tried ({sizes[-1]})"
    lowest = None
    if best is None and latency_slo is not None:
        from solvers import slo_ip

        w = batch_workload(path, devices, sizes[0], costs=costs, dims=dims, device_files=device_files)
        sol = slo_ip.solve(w.graph, w.cluster, options, minimise="latency")
        lowest = sol.objective if sol.assignment is not None else None
    return Sweep(tuple(points), best, stopped, latency_slo, lowest)


def non_dominated(points: Iterable[ServingPoint], rel: float = 1e-9) -> list[ServingPoint]:
    """The points no other point beats on both samples/s (higher) and latency (lower), by samples/s
    decreasing; of equal points the first (smaller batch) is kept."""
    pts = sorted(points, key=lambda p: (-p.samples_per_s, p.latency_ms, p.batch_size))
    out: list[ServingPoint] = []
    for p in pts:
        if out and p.latency_ms >= out[-1].latency_ms * (1 - rel):
            continue  # no faster than a point with at least its throughput
        out.append(p)
    return out


def batch_frontier(w: Workload, options: SolveOptions | None = None, *, max_points: int = 50
                   ) -> tuple[list[ServingPoint], bool]:
    """One workload's non-dominated (max-load, latency) plans by the epsilon-constraint method (see the
    module doc), and whether every point was proven."""
    from solvers import slo_ip

    options = options or SolveOptions()
    pool = _start_pool(w, options)
    points: list[ServingPoint] = []
    proven = True
    limit = math.inf
    for _ in range(max_points):
        fits = [(load, a) for load, lat, a in pool if lat <= limit]
        start = min(fits, key=lambda x: x[0])[1] if fits else None
        first = slo_ip.solve(w.graph, w.cluster, dataclasses.replace(options, warm_start=start),
                             latency_max=limit)
        if first.assignment is None:
            if first.status != Status.INFEASIBLE:
                proven = False  # stopped at a limit: points beyond this one are unknown
            break
        load = first.stats["max_load"]
        second = slo_ip.solve(w.graph, w.cluster, dataclasses.replace(options, warm_start=first.assignment),
                              minimise="latency", max_load_max=load, latency_max=limit)
        sol = second if second.assignment is not None else first
        pt = _point(w.graph, w.cluster, sol)
        ok = first.status == Status.OPTIMAL and second.status == Status.OPTIMAL
        pt = dataclasses.replace(pt, proven=ok)
        proven &= ok
        if points and pt.latency_ms >= points[-1].latency_ms * (1 - 1e-9):
            break  # no progress (numerical limits)
        points.append(pt)
        limit = pt.latency_ms * (1 - _STEP)
    else:
        proven = False  # more points may exist
    # under time limits a later point (not proven) can dominate an earlier one: keep the front only
    return non_dominated(points), proven


def _start_pool(w: Workload, options: SolveOptions, max_allocations: int = 64
                ) -> list[tuple[float, float, np.ndarray]]:
    """Starts for the frontier's programs: the DP's placement on sub-clusters (every count of each
    accelerator kind, host kinds all or none), as ``(max-load, latency, assignment)`` on the full
    cluster. Fewer devices mean fewer hops: these plans trade throughput for latency, which is what the
    tightening limits ask for, and a program under a time limit starts from the best that fits."""
    import itertools

    from graphs.model import Cluster, DeviceKind
    from solvers import dp

    cl = w.cluster
    choices = [range(k.count + 1) if k.pays_communication else sorted({0, k.count}) for k in cl.kinds]
    first = np.concatenate([[0], np.cumsum([k.count for k in cl.kinds])[:-1]])
    out = []
    for counts in itertools.islice(itertools.product(*choices), max_allocations + 1):
        if sum(counts) == 0:
            continue
        sub = Cluster(tuple(DeviceKind(k.name, c, k.memory, k.pays_communication)
                            for k, c in zip(cl.kinds, counts)))
        try:
            sol = dp.solve(w.graph, sub, SolveOptions(time_limit=options.time_limit,
                                                      raw={"max_ideals": 200_000}))
        except PlacementError:
            continue
        if sol.assignment is None:
            continue
        sub_first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        kind_of = sub.device_kind()
        a = first[kind_of[sol.assignment]] + (sol.assignment - sub_first[kind_of[sol.assignment]])
        lat = latency(w.graph, cl, a)
        if lat.valid and max(lat.subgraphs_per_device().values(), default=0) <= 1:
            out.append((evaluate(w.graph, cl, a).max_load, lat.total, a))
    return out


def frontier(path: str | os.PathLike, devices, batch_sizes: Sequence[int] | None = None, *,
             costs: str = "roofline", options: SolveOptions | None = None, dims=None,
             device_files: Iterable[str] = (), max_points: int = 50) -> Frontier:
    """Non-dominated (samples/s, latency) plans over the batch sizes (``None``: those an auto sweep
    tries, stopping once the best throughput stops improving)."""
    options = options or SolveOptions()
    auto = batch_sizes is None
    sizes = [1 << k for k in range(int(math.log2(AUTO_MAX_BATCH)) + 1)] if auto else list(batch_sizes)
    per_batch: dict[int, list[ServingPoint]] = {}
    proven = True
    best = 0.0
    for b in sizes:
        w = batch_workload(path, devices, b, costs=costs, dims=dims, device_files=device_files)
        pts, ok = batch_frontier(w, options, max_points=max_points)
        per_batch[b] = pts
        proven &= ok
        if not pts:
            if auto:
                break
            continue
        top = max(p.samples_per_s for p in pts)
        if auto and best and top <= best * (1 + _IMPROVES):
            break
        best = max(best, top)
    merged = non_dominated([p for pts in per_batch.values() for p in pts])
    return Frontier(tuple(merged), per_batch, proven)
