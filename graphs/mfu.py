"""Compute utilisation (model FLOPs utilisation, MFU): the fraction of a device's peak FLOP/s a plan uses.

This is not the busy-time utilisation (``load / max-load``, or busy time over makespan in a
simulation), which says how long a device is occupied. MFU says how much arithmetic it does in that
time: a device busy 100% of the time on memory-bound operators still has a low MFU.

Definition, for a placement run as a pipeline in steady state: one run of the graph, a batch of
``graph.batch_size`` samples (an ONNX model's batch size; 1 for every other graph), leaves every
``period`` = max-load milliseconds, since the graph's FLOPs and times are per run:

* a device's FLOPs per run are the operator FLOPs of its nodes as ``placement inspect`` counts
  them (:func:`graphs.costs.op_flops`, at the graph's batch size; a backward node counts
  ``backward_factor`` times its forward twin, the factor its time was derived with);
* its **peak time** is the time those FLOPs would take at the peak FLOP/s of its kind for each
  operator's class: the catalog's fp32 peak (the fp16 one for half-precision operators; no efficiency
  factor) for a preset; for a calibrated kind (``placement calibrate``) the measured rate of the
  operator's class, Conv, MatMul/Gemm or other arithmetic (the highest of the other-arithmetic rate
  and the kind's own-rate operators'), since those are the fastest rates its costs use;
* an operator whose cost (measured, or from a cost table) is below its peak time ran faster than the
  "peak": its peak time is then its cost (the peak was understated), and :attr:`PlanMFU.capped` counts
  such operators, so that MFU is never above 100 %;
* its **MFU** = peak time / period = achieved FLOP/s over peak FLOP/s, where a device's peak FLOP/s is
  its FLOPs over their peak time (the peak of the mix of classes it runs);
* the plan's **total MFU** = all devices' FLOPs per period over the sum of the peaks of every device
  of the cluster (devices left idle count: they are paid for, at the peak of the whole model's mix on
  their kind). Each device's achieved rate is at most its peak, so the total is at most 1 too.

The period comes from the costs, so where those are measured (``--costs profile`` or a cost table),
MFU uses the measured times. Graphs without FLOP annotations (reference JSON workloads) or without
the catalog's peaks have no MFU (:func:`compute_utilisation` returns ``None``).

The result file's ``compute_utilisation`` (:meth:`PlanMFU.as_dict`) gives both: per sample
(``flops_per_sample``, ``period_ms``) and per batch (``flops_per_batch``, ``batch_period_ms``), with
``batch_size``; the MFU is the same either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .evaluate import check_assignment, evaluate
from .model import Cluster, OpGraph

__all__ = ["DeviceMFU", "PlanMFU", "compute_utilisation", "stage_utilisation", "has_flops", "peak_rates"]

_MS = 1e-3  # graph times are milliseconds


@dataclass(frozen=True)
class DeviceMFU:
    """One device's arithmetic: FLOPs per run of the graph (a batch), its kind's peak and the achieved
    fraction of it."""

    device: int
    name: str
    kind: str
    flops: float  # per run of the graph (one batch of the plan's batch_size samples)
    peak_flops: float  # FLOP/s: its FLOPs over their peak time (the fp32 peak for a preset, fp32 work)
    achieved: float  # FLOP/s in steady state
    mfu: float  # peak time of its FLOPs / period


@dataclass(frozen=True)
class PlanMFU:
    """MFU of every device and of the whole plan, one run of the graph (a batch of ``batch_size``
    samples) every ``period_ms``: ``period_ms`` and the FLOPs are per run, as the graph's figures."""

    devices: tuple[DeviceMFU, ...]
    period_ms: float  # per run of the graph (one batch)
    flops: float  # per run, all devices
    achieved: float  # FLOP/s, all devices
    peak_flops: float  # FLOP/s, every device of the cluster
    total: float  # achieved / peak_flops
    capped: int = 0  # operators whose cost beat their kind's peak (their peak time is their cost)
    batch_size: int = 1  # samples per run of the graph (its batch_size)

    def as_dict(self) -> dict:
        """The result file's ``compute_utilisation`` object: FLOPs and period per sample and per batch
        (one run of the model), with the batch size; files written before it had ``batch_size`` held
        per-batch figures under ``flops_per_sample`` and ``period_ms`` (docs/formats.md)."""
        b = self.batch_size
        period = self.period_ms if math.isfinite(self.period_ms) else None
        return {
            "definition": "achieved FLOP/s over the peak FLOP/s of each operator's class on its kind (the "
                          "catalog's peak, or a calibrated kind's measured Conv / MatMul / other rate), in "
                          "steady state: one batch of batch_size samples (one run of the model) every "
                          "max-load, batch_period_ms; per sample, flops_per_sample every period_ms",
            "batch_size": b,
            "period_ms": None if period is None else period / b,
            "batch_period_ms": period,
            "flops_per_sample": self.flops / b, "flops_per_batch": self.flops,
            "achieved_flops_per_s": self.achieved, "peak_flops_per_s": self.peak_flops, "total": self.total,
            "operators_faster_than_peak": self.capped,
            "devices": [{"device": d.device, "name": d.name, "kind": d.kind, "flops_per_sample": d.flops / b,
                         "flops_per_batch": d.flops, "peak_flops_per_s": d.peak_flops,
                         "achieved_flops_per_s": d.achieved, "mfu": d.mfu}
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


def peak_rates(spec) -> tuple[float, float, float, float]:
    """``(other, fp16, conv, matmul)`` FLOP/s that MFU measures a :class:`~graphs.devices.DeviceSpec`
    against: for a preset the catalog's fp32 peak (fp16 for half precision) in every class; for a
    calibrated kind the measured Conv and MatMul/Gemm rates, and for other arithmetic the highest of
    its fp32 rate and its own-rate operators' (``op_gflops``). What the front end stores in
    ``graph.meta["peak_flops"]`` for each kind."""
    other = max([float(spec.fp32)] + [float(r) for _, r in getattr(spec, "op_flops", ())])
    conv = spec.conv_flops if getattr(spec, "conv_flops", None) else other
    matmul = spec.matmul_flops if getattr(spec, "matmul_flops", None) else other
    return other, float(spec.fp16), float(conv), float(matmul)


def _node_rates(graph: OpGraph, peaks: tuple, half: np.ndarray) -> np.ndarray:
    """Peak FLOP/s of every node on a kind with ``peaks`` (``(fp32, fp16)`` or :func:`peak_rates`)."""
    from .devices import CONV_TYPES, MATMUL_TYPES

    fp32, fp16 = float(peaks[0]), float(peaks[1])
    conv, matmul = (float(peaks[2]), float(peaks[3])) if len(peaks) >= 4 else (fp32, fp32)
    types = graph.meta.get("op_type")
    rate = np.full(graph.num_nodes, fp32)
    if types:
        nf = len(types)
        for i in range(graph.num_nodes):
            t = types[i % nf]
            rate[i] = conv if t in CONV_TYPES else matmul if t in MATMUL_TYPES else fp32
    return np.where(half, fp16, rate)


def compute_utilisation(graph: OpGraph, cluster: Cluster, assignment, *,
                        period_ms: float | None = None) -> PlanMFU | None:
    """MFU of a placement (see the module doc); ``period_ms``, the time per run of the graph (per batch),
    defaults to the placement's max-load. ``None`` when the graph has no FLOP annotations or a kind has
    no catalog peak."""
    if not has_flops(graph) or any(k.name not in graph.meta["peak_flops"] for k in cluster.kinds):
        return None
    a = check_assignment(graph, cluster, assignment)
    if period_ms is None:
        period_ms = evaluate(graph, cluster, a).max_load
    return _utilisation(graph, cluster, [(a == d, 1.0) for d in range(cluster.num_devices)], period_ms)


def stage_utilisation(graph: OpGraph, cluster: Cluster, stages, period_ms: float) -> PlanMFU | None:
    """MFU of a stage plan, one run of the graph (a batch) every ``period_ms``: ``stages`` are ``(kind
    index, node mask, devices)`` in pipeline order, each stage's ``devices`` (``d * t``) numbered kind
    by kind in that order, as the stage table names them; each of them does ``1 / devices`` of its
    stage's FLOPs (its replica's share of the samples, its share of a tensor-parallel split). ``None``
    as for :func:`compute_utilisation`."""
    if not has_flops(graph) or any(k.name not in graph.meta["peak_flops"] for k in cluster.kinds):
        return None
    start = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])])
    nxt = [0] * len(cluster.kinds)
    share = [(np.zeros(graph.num_nodes, bool), 1.0)] * cluster.num_devices
    for kind, mask, devices in stages:
        mask = np.asarray(mask, bool)  # one array per stage: its operators are counted once (capped)
        for j in range(devices):
            share[int(start[kind]) + nxt[kind] + j] = (mask, 1.0 / devices)
        nxt[kind] += devices
    return _utilisation(graph, cluster, share, period_ms)


def _utilisation(graph: OpGraph, cluster: Cluster, share, period_ms: float) -> PlanMFU:
    """MFU when device ``d`` runs the fraction ``share[d][1]`` of the nodes ``share[d][0]`` (a mask)."""
    peaks = graph.meta["peak_flops"]
    flops = node_flops(graph)
    half = np.asarray(graph.meta.get("half", (False,) * len(graph.meta["flops"])), dtype=bool)
    half = half[np.arange(graph.num_nodes) % half.size] if half.size else np.zeros(graph.num_nodes, bool)
    dkind = cluster.device_kind()
    period_s = period_ms * _MS
    ok = period_s > 0 and math.isfinite(period_s)
    kind_index = {k.name: t for t, k in enumerate(cluster.kinds)}
    # peak seconds of every node on every kind: its FLOPs at its class's rate, at most its cost there
    peak_s = np.empty((len(cluster.kinds), graph.num_nodes))
    capped = np.zeros((len(cluster.kinds), graph.num_nodes), bool)
    for k in cluster.kinds:
        t = kind_index[k.name]
        ideal = flops / _node_rates(graph, peaks[k.name], half)
        cost = np.asarray(graph.compute[t], dtype=np.float64) * _MS
        capped[t] = np.isfinite(cost) & (cost < ideal * (1 - 1e-9))
        peak_s[t] = np.where(capped[t], cost, ideal)
    total_f = float(flops.sum())
    out = []
    total_peak = 0.0
    n_capped = 0
    counted: set[int] = set()
    for d in range(cluster.num_devices):
        t = int(dkind[d])
        kind = cluster.kinds[t]
        on, frac = share[d]
        f = float(flops[on].sum()) * frac
        p_time = float(peak_s[t, on].sum()) * frac
        model_time = float(peak_s[t].sum())  # the whole model's mix on this kind: an idle device's peak
        if f > 0 and p_time > 0:
            peak = f / p_time
        elif total_f > 0 and model_time > 0:
            peak = total_f / model_time
        else:
            peak = float(peaks[kind.name][0])
        total_peak += peak
        if id(on) not in counted:  # the devices of one stage share its mask
            counted.add(id(on))
            n_capped += int(capped[t, on].sum())
        out.append(DeviceMFU(d, cluster.device_name(d), kind.name, f, peak,
                             f / period_s if ok else 0.0, p_time / period_s if ok else 0.0))
    total_flops = float(sum(x.flops for x in out))
    achieved = total_flops / period_s if ok else 0.0
    return PlanMFU(tuple(out), float(period_ms), total_flops, achieved, total_peak,
                   achieved / total_peak if total_peak > 0 else 0.0, n_capped, graph.batch_size)


def pct(x: float) -> str:
    """A utilisation as printed: ``12.34%``, three significant digits below 0.1%."""
    return f"{100 * x:.2f}%" if x >= 0.001 else f"{100 * x:.3g}%"
