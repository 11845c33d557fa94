"""Compute utilisation (model FLOPs utilisation, MFU): the fraction of a device's peak FLOP/s a plan uses.

This is not the busy-time utilisation (``load / max-load``, or busy time over makespan in a
simulation), which says how long a device is occupied. MFU says how much arithmetic it does in that
time: a device busy 100% of the time on memory-bound operators still has a low MFU.

Definition, for a placement run as a pipeline in steady state (one sample, i.e. one batch, leaves
every ``period`` = max-load milliseconds):

* a device's FLOPs per sample are the operator FLOPs of its nodes as ``placement inspect`` counts
  them (:func:`graphs.costs.op_flops`; a backward node counts ``backward_factor`` times its forward
  twin, the factor its time was derived with);
* its **peak time** is the time those FLOPs would take at the catalog's peak FLOP/s of its kind (the
  fp16 peak for half-precision operators, fp32 otherwise; no efficiency factor);
* its **MFU** = peak time / period = achieved FLOP/s over peak FLOP/s;
* the plan's **total MFU** = all devices' FLOPs per period over the sum of the peaks of every device
  of the cluster (devices left idle count: they are paid for), at the precision of most of the
  model's FLOPs.

The period comes from the costs, so where those are measured (``--costs profile`` or a cost table),
MFU uses the measured times. Graphs without FLOP annotations (reference JSON workloads) or without
the catalog's peaks have no MFU (:func:`compute_utilisation` returns ``None``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .evaluate import check_assignment, evaluate
from .model import Cluster, OpGraph

__all__ = ["DeviceMFU", "PlanMFU", "compute_utilisation", "has_flops"]

_MS = 1e-3  # graph times are milliseconds


@dataclass(frozen=True)
class DeviceMFU:
    """One device's arithmetic: FLOPs per sample, its kind's peak and the achieved fraction of it."""

    device: int
    name: str
    kind: str
    flops: float  # per sample (one batch)
    peak_flops: float  # FLOP/s: fp32 peak (the fp16 one when all its FLOPs are half precision)
    achieved: float  # FLOP/s in steady state
    mfu: float  # peak time of its FLOPs / period


@dataclass(frozen=True)
class PlanMFU:
    """MFU of every device and of the whole plan, for one sample every ``period_ms``."""

    devices: tuple[DeviceMFU, ...]
    period_ms: float
    flops: float  # per sample, all devices
    achieved: float  # FLOP/s, all devices
    peak_flops: float  # FLOP/s, every device of the cluster
    total: float  # achieved / peak_flops

    def as_dict(self) -> dict:
        """The result file's ``compute_utilisation`` object."""
        return {
            "definition": "achieved FLOP/s over the catalog's peak FLOP/s (MFU), one sample per max-load",
            "period_ms": self.period_ms if math.isfinite(self.period_ms) else None,
            "flops_per_sample": self.flops, "achieved_flops_per_s": self.achieved,
            "peak_flops_per_s": self.peak_flops, "total": self.total,
            "devices": [{"device": d.device, "name": d.name, "kind": d.kind, "flops_per_sample": d.flops,
                         "peak_flops_per_s": d.peak_flops, "achieved_flops_per_s": d.achieved, "mfu": d.mfu}
                        for d in self.devices],
        }


def has_flops(graph: OpGraph) -> bool:
    """Whether the graph carries operator FLOPs and the catalog peaks MFU needs."""
    return "flops" in graph.meta and isinstance(graph.meta.get("peak_flops"), dict)


def node_flops(graph: OpGraph) -> np.ndarray:
    """FLOPs of every node: forward nodes their operator's, backward twins ``backward_factor`` times."""
    flops = np.asarray(graph.meta["flops"], dtype=np.float64)
    n, nf = graph.num_nodes, flops.size
    if n == nf:
        return flops.copy()
    training = graph.meta.get("training")
    factor = float(training.get("backward_factor", 2.0)) if isinstance(training, dict) else 2.0
    out = np.zeros(n)
    idx = np.arange(n)
    # the front end appends one backward twin per forward node, in order (see graphs.training)
    out[:] = flops[idx % nf] * np.where(graph.backward, factor, 1.0)
    return out


def compute_utilisation(graph: OpGraph, cluster: Cluster, assignment, *,
                        period_ms: float | None = None) -> PlanMFU | None:
    """MFU of a placement (see the module doc); ``period_ms`` defaults to the placement's max-load.
    ``None`` when the graph has no FLOP annotations or a kind has no catalog peak."""
    if not has_flops(graph):
        return None
    peaks = graph.meta["peak_flops"]
    if any(k.name not in peaks for k in cluster.kinds):
        return None
    a = check_assignment(graph, cluster, assignment)
    if period_ms is None:
        period_ms = evaluate(graph, cluster, a).max_load
    flops = node_flops(graph)
    half = np.asarray(graph.meta.get("half", (False,) * len(graph.meta["flops"])), dtype=bool)
    half = half[np.arange(graph.num_nodes) % half.size] if half.size else np.zeros(graph.num_nodes, bool)
    dkind = cluster.device_kind()
    period_s = period_ms * _MS
    model_half = float(flops[half].sum()) > float(flops[~half].sum())  # mostly half precision
    out = []
    total_peak = 0.0
    for d in range(cluster.num_devices):
        kind = cluster.kinds[int(dkind[d])]
        fp32, fp16 = (float(x) for x in peaks[kind.name])
        total_peak += fp16 if model_half else fp32
        on = a == d
        f = float(flops[on].sum())
        peak_time = float((flops[on] / np.where(half[on], fp16, fp32)).sum())  # seconds
        peak = fp16 if on.any() and half[on].all() else fp32
        ok = period_s > 0 and math.isfinite(period_s)
        out.append(DeviceMFU(d, cluster.device_name(d), kind.name, f, peak,
                             f / period_s if ok else 0.0, peak_time / period_s if ok else 0.0))
    total_flops = float(sum(x.flops for x in out))
    ok = period_s > 0 and math.isfinite(period_s)
    achieved = total_flops / period_s if ok else 0.0
    return PlanMFU(tuple(out), float(period_ms), total_flops, achieved, total_peak,
                   achieved / total_peak if total_peak > 0 else 0.0)
