"""Input pipelines (Synergy's model): a job's throughput once its samples must be read and preprocessed.

Each sample (one unit of the job's ``samples``, in which its curve's times are: one of the ``batch_size``
samples a run of an ONNX model processes, one generated token of an LLM config, one pass of any other
workload's graph) is read from storage or from a cache of the dataset in host memory, decoded and
augmented on host CPU cores, then processed by the accelerator pipeline. Rates are in samples per unit
of the job's stage curve's time (its ``unit``: ms, the simulation's usual unit; s for a Piper-format
workload; a reference workload's own unit read as ms).
The section's figures are in ms and GB/s: :class:`AnalyticRate` converts them into the curve's unit in one
place (``ms_per_unit``), and the formulas below read "ms" as that unit.

**The analytic model** (a job's ``input`` section). With ``g`` accelerators, ``c`` host cores and ``m``
bytes of host memory, the job picks a placement ``p`` of its graph: an efficient point of its
accelerator curve (:mod:`~placement.cluster.curves`) using ``c_p <= c`` host cores as pipeline stages,
with time per sample ``t_p`` and host memory ``M_p`` (its operators on host cores, plus the job's base
``host_memory_gb``). The other ``c - c_p`` cores feed the data and the other ``m - M_p`` bytes cache the
dataset::

    accelerator rate  R_acc = 1 / t_p
    CPU rate          R_cpu = (c - c_p) / cpu_ms_per_sample               (inf if cpu_ms_per_sample = 0)
    storage rate      R_sto = B / ((1 - f) * sample_bytes),  f = min(1, (m - M_p) / dataset_bytes)
                                                      (inf if f = 1 or sample_bytes = 0)
    rate(g, c, m)     = max over p (within g and c, M_p <= m) of min(R_acc, R_cpu, R_sto)

``B`` is the job's storage bandwidth (``storage_gbps``, decimal GB per second, in bytes per ms). As in
Synergy, a cache holding a fraction ``f`` of the dataset serves that fraction of every epoch's samples
from memory (whose bandwidth is not the bottleneck) and the rest comes from storage. The split of cores
between stages and feeding is exact: the maximum runs over every placement of the curve, hence over every
number of stage cores. The job *uses* the fewest feeding cores (``ceil(rate * cpu_ms_per_sample)``) and
the smallest cache (``dataset * max(0, 1 - B / (rate * sample_bytes))``) that keep its rate.

**A measured table** (``throughput``: samples per second at ``a`` accelerators over a full grid of cores
and memory, Synergy's optimistic profiling). The job runs on exactly ``a`` accelerators of its kind (the
table says nothing about other counts). The table is first made monotone (a running maximum along both
axes: a job given more may leave it idle); between grid points the rate is **bilinear** in (cores,
memory); below the fewest measured cores it falls linearly to 0 at 0 cores; beyond the largest it stays
flat; below the smallest measured memory the job cannot run (profiles start at the memory a job needs).

**Options for the policies.** The policies choose among a finite set of (devices, host memory) options per
job: every vector of devices up to the job's limits, at host memory ``M_p`` plus a cache of ``0, D/8,
2D/8, ..., D`` (``D``: the dataset) for the analytic model, or at the table's memory levels; each with
the devices and memory it uses, then only the Pareto-efficient ones (faster than every option that needs
no more of anything). :meth:`PipelineCurve.best_within` is exact for any allocation, memory included.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from graphs.errors import InputError

from .curves import CurveCache, CurvePoint, JobCurve, job_curve
from .formats import ClusterSpec, InputSpec, JobSpec, ThroughputTable

__all__ = ["PipelineCurve", "AnalyticRate", "TableRate", "pipeline_curve", "table_curve", "job_rates",
           "storage_rate", "cpu_rate", "cache_needed", "CACHE_LEVELS", "MS_PER_UNIT"]

CACHE_LEVELS = 8  # option cache sizes: multiples of dataset / CACHE_LEVELS
_TOL = 1e-9


#: milliseconds per unit of a stage curve's time, for the units an input section's figures convert into;
#: a curve that says no unit (a reference workload's own), or another one, has its times read as ms
MS_PER_UNIT = {"": 1.0, "ms": 1.0, "s": 1e3, "us": 1e-3}


# --------------------------------------------------------------------------- the three rates
def _cpu_per_sample(inp: InputSpec, ms_per_unit: float) -> float:
    """CPU time per sample in the curve's unit."""
    return inp.cpu_ms_per_sample / ms_per_unit


def _bandwidth(inp: InputSpec, ms_per_unit: float) -> float:
    """Storage bytes per unit of the curve's time."""
    return inp.storage_bytes_per_s / 1e3 * ms_per_unit


def cpu_rate(inp: InputSpec, cores: float, ms_per_unit: float = 1.0) -> float:
    """Samples per unit (ms by default; ``ms_per_unit`` ms each) that ``cores`` feeding cores preprocess."""
    if inp.cpu_ms_per_sample == 0:
        return math.inf
    return max(0.0, cores) / _cpu_per_sample(inp, ms_per_unit)


def storage_rate(inp: InputSpec, cache: float, ms_per_unit: float = 1.0) -> float:
    """Samples per unit (ms by default) that storage sustains when ``cache`` bytes of the dataset sit in
    host memory."""
    f = 1.0 if inp.dataset_bytes <= cache else max(0.0, cache) / inp.dataset_bytes
    if f >= 1.0 or inp.sample_bytes == 0:
        return math.inf
    return _bandwidth(inp, ms_per_unit) / ((1.0 - f) * inp.sample_bytes)


def cache_needed(inp: InputSpec, rate: float, ms_per_unit: float = 1.0) -> float:
    """The smallest cache (bytes) at which storage sustains ``rate`` samples per unit (ms by default)."""
    if inp.sample_bytes == 0 or rate <= 0:
        return 0.0
    if not math.isfinite(rate):
        return inp.dataset_bytes
    return inp.dataset_bytes * max(0.0, 1.0 - _bandwidth(inp, ms_per_unit) / (rate * inp.sample_bytes))


# --------------------------------------------------------------------------- rate functions
class AnalyticRate:
    """``rate(counts, memory)`` of the analytic model over a job's accelerator (stage) curve, in samples per
    unit of the curve's time: the input section's ms and GB/s are converted by ``ms_per_unit`` (the
    milliseconds in one unit of the curve: 1 for ms, 1000 for s), here and nowhere else."""

    def __init__(self, stage: JobCurve, inp: InputSpec) -> None:
        self.stage, self.input = stage, inp
        self.ms_per_unit = MS_PER_UNIT.get(stage.unit, 1.0)
        self.cpu = _cpu_per_sample(inp, self.ms_per_unit)  # CPU time per sample, in the curve's unit
        self.bandwidth = _bandwidth(inp, self.ms_per_unit)  # storage bytes per unit of the curve's time
        self.h = next((t for t, x in enumerate(stage.host) if x), None)
        pts = stage.points
        self.P = np.array([p.counts for p in pts], dtype=np.int64).reshape(len(pts), len(stage.kinds))
        self.t = np.array([p.time_per_sample for p in pts], dtype=float)
        self.M = np.array([p.host_memory for p in pts], dtype=float)

    def rates(self, counts: Sequence[int], cache: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per stage point (rows) and cache size (columns): the pipeline's rate, and which points fit."""
        inp = self.input
        fits = (self.P <= np.asarray(counts)).all(axis=1)
        feed = (counts[self.h] - self.P[:, self.h]) if self.h is not None else np.zeros(len(self.t))
        r_acc = 1.0 / self.t
        r_cpu = (np.full(len(self.t), math.inf) if inp.cpu_ms_per_sample == 0
                 else feed / self.cpu)
        cache = np.asarray(cache, dtype=float)
        if inp.sample_bytes == 0:
            r_sto = np.full(cache.shape, math.inf)
        else:
            f = np.ones(cache.shape) if inp.dataset_bytes == 0 else np.clip(cache / inp.dataset_bytes, 0, 1)
            with np.errstate(divide="ignore"):
                r_sto = np.where(f >= 1.0, math.inf,
                                 self.bandwidth / ((1.0 - f) * inp.sample_bytes))
        r = np.minimum(np.minimum(r_acc, r_cpu)[:, None], r_sto)
        return r, fits

    def used(self, k: int, counts: Sequence[int], rate: float) -> tuple[tuple[int, ...], float]:
        """Devices and memory stage point ``k`` uses to run at ``rate`` within ``counts``."""
        u = list(self.P[k])
        if self.h is not None:
            feed = counts[self.h] - u[self.h]
            if self.input.cpu_ms_per_sample == 0:
                need = 0
            else:
                need = min(feed, max(0, math.ceil(rate * self.cpu - _TOL)))
            u[self.h] += need
        return tuple(int(x) for x in u), float(self.M[k] + cache_needed(self.input, rate, self.ms_per_unit))

    def _best(self, counts: Sequence[int], memory: float):
        """``(rate, stage point index, used devices, used memory)``; index ``None`` when nothing runs."""
        zero = (0.0, None, tuple(0 for _ in counts), 0.0)
        if not len(self.t):
            return zero
        cache = np.maximum(memory - self.M, 0.0) if math.isfinite(memory) else np.full(len(self.t), math.inf)
        r, fits = self.rates(counts, cache[:, None])
        r = np.where(fits & (self.M <= memory * (1 + 1e-12)), r[:, 0], -1.0)
        best = float(r.max())
        if best <= 0:
            return zero
        # among the placements reaching the best rate, the one that uses least
        uses = [(self.used(k, counts, best), k) for k in np.flatnonzero(r >= best * (1 - 1e-12))]
        (u, mem), k = min(uses, key=lambda x: (sum(x[0][0]), x[0][1]))
        return best, int(k), u, min(mem, memory)

    def __call__(self, counts: Sequence[int], memory: float) -> tuple[float, tuple[int, ...], float]:
        rate, _, used, mem = self._best(counts, memory)
        return rate, used, mem

    def breakdown(self, counts: Sequence[int], memory: float) -> dict[str, float]:
        """The three rates (samples per unit of the curve's time) of the placement the job runs on this
        allocation (devices and memory held): which one binds."""
        _, k, _, _ = self._best(counts, memory)
        if k is None:
            return {"accelerator": 0.0, "cpu": 0.0, "storage": 0.0}
        feed = (counts[self.h] - self.P[k][self.h]) if self.h is not None else 0
        return {"accelerator": float(1 / self.t[k]), "cpu": cpu_rate(self.input, feed, self.ms_per_unit),
                "storage": storage_rate(self.input, memory - self.M[k], self.ms_per_unit)}

    def options(self, limits: Sequence[int]) -> list[tuple[tuple[int, ...], float, float]]:
        """(used devices, used memory, rate) at every device vector and cache level (before filtering)."""
        inp = self.input
        levels = (np.array([0.0]) if inp.dataset_bytes == 0
                  else np.linspace(0.0, inp.dataset_bytes, CACHE_LEVELS + 1))
        out = {}
        for c in itertools.product(*(range(n + 1) for n in limits)):
            if not len(self.t):
                break
            r, fits = self.rates(c, levels[None, :])
            for k in np.flatnonzero(fits):
                for rate in set(r[k].tolist()):
                    if rate <= 0:
                        continue
                    u, mem = self.used(k, c, rate)
                    key = (u, round(mem, 3))
                    if out.get(key, (0.0,))[0] < rate:
                        out[key] = (rate, mem)
        return [(u, mem, rate) for (u, _), (rate, mem) in out.items()]


class TableRate:
    """``rate(counts, memory)`` from a measured table at a fixed accelerator count (see the module doc)."""

    def __init__(self, table: ThroughputTable, acc: int, host: int | None, base_memory: float) -> None:
        self.table, self.acc, self.h, self.base = table, acc, host, base_memory
        grid = np.array(table.rate, dtype=float) / 1e3  # samples per ms
        grid = np.maximum.accumulate(np.maximum.accumulate(grid, axis=0), axis=1)
        self.repaired = bool((grid > np.array(table.rate) / 1e3 * (1 + 1e-12)).any())
        self.cpus = np.concatenate([[0.0], np.asarray(table.cpus, dtype=float)])
        self.grid = np.vstack([np.zeros((1, grid.shape[1])), grid])  # 0 cores: rate 0
        self.mem = np.asarray(table.memory, dtype=float)

    def _column(self, memory: float) -> np.ndarray:
        """The rate at every measured core count (with 0 cores first) at ``memory`` bytes (linear between
        the measured levels, flat beyond the last)."""
        memory = min(memory, self.mem[-1])
        k = int(np.searchsorted(self.mem, memory, side="right")) - 1
        if k >= len(self.mem) - 1:
            return self.grid[:, -1]
        w = (memory - self.mem[k]) / (self.mem[k + 1] - self.mem[k])
        return self.grid[:, k] * (1 - w) + self.grid[:, k + 1] * w

    def _interp(self, cores: float, memory: float) -> float:
        cores = min(cores, self.cpus[-1])
        if memory < self.mem[0] * (1 - 1e-12) or cores <= 0:
            return 0.0
        return float(np.interp(cores, self.cpus, self._column(memory)))

    def _least_memory(self, cores: float, rate: float, most: float) -> float:
        """The least memory (at least the smallest level, at most ``most``) at which ``cores`` cores reach
        ``rate``: the rate is linear in memory between levels, so the first level reaching it and the
        one before bound a linear solve."""
        at = np.array([np.interp(min(cores, self.cpus[-1]), self.cpus, self.grid[:, k])
                       for k in range(len(self.mem))])
        ok = np.flatnonzero(at >= rate * (1 - 1e-12))
        if not len(ok) or ok[0] == 0:
            return float(self.mem[0]) if len(ok) else float(most)
        k = int(ok[0])
        lo, hi = at[k - 1], at[k]
        m = self.mem[k - 1] + (self.mem[k] - self.mem[k - 1]) * (rate - lo) / (hi - lo)
        return float(min(max(m, self.mem[k - 1]), most))

    def __call__(self, counts: Sequence[int], memory: float) -> tuple[float, tuple[int, ...], float]:
        zero = (0.0, tuple(0 for _ in counts), 0.0)
        if counts[self.acc] < self.table.accelerators or self.h is None:
            return zero
        avail = memory - self.base
        if avail < self.mem[0] * (1 - 1e-12) or counts[self.h] <= 0:
            return zero
        col = self._column(avail)
        rate = float(np.interp(min(counts[self.h], self.cpus[-1]), self.cpus, col))
        if rate <= 0:
            return zero
        # the fewest cores, then the least memory, that keep the rate
        whole = np.interp(np.arange(int(counts[self.h]) + 1), self.cpus, col)
        cores = int(np.flatnonzero(whole >= rate * (1 - 1e-12))[0])
        m = self._least_memory(cores, rate, min(avail, self.mem[-1]))
        u = [0] * len(counts)
        u[self.acc] = self.table.accelerators
        u[self.h] = cores
        return rate, tuple(u), float(self.base + m)

    def options(self, limits: Sequence[int]) -> list[tuple[tuple[int, ...], float, float]]:
        out = []
        c = [0] * len(limits)
        c[self.acc] = self.table.accelerators
        for cores in range(1, (limits[self.h] if self.h is not None else 0) + 1):
            c[self.h] = cores
            for m in self.mem:
                rate, u, mem = self(c, self.base + m)
                if rate > 0:
                    out.append((u, mem, rate))
        return out


# --------------------------------------------------------------------------- the curve
@dataclass(frozen=True, eq=False)
class PipelineCurve(JobCurve):
    """A job's curve with its input pipeline: ``points`` are the Pareto-efficient (devices, host memory)
    options, ``values`` the time per sample per device vector with unlimited memory, and
    :meth:`best_within` is exact (the rate function at that allocation)."""

    rate: Callable | None = None

    def best_within(self, counts: Sequence[int], host_memory: float = math.inf) -> CurvePoint | None:
        r, used, mem = self.rate(self.clip(counts), host_memory)
        if r <= 0:
            return None
        return CurvePoint(used, 1.0 / r, mem)


def _pareto(opts: list[tuple[tuple[int, ...], float, float]]) -> list[CurvePoint]:
    """The options no other one dominates (no more devices of any kind, no more memory, at least as
    fast), as curve points sorted by total devices."""
    opts = sorted(opts, key=lambda o: (-o[2], sum(o[0]), o[1]))
    kept_c: list[tuple[int, ...]] = []
    kept_m: list[float] = []
    pts = []
    for c, m, r in opts:
        if kept_c:
            C = np.array(kept_c)
            if ((C <= np.array(c)).all(axis=1) & (np.array(kept_m) <= m * (1 + 1e-12) + 1e-9)).any():
                continue
        kept_c.append(c)
        kept_m.append(m)
        pts.append(CurvePoint(c, 1.0 / r, m))
    pts.sort(key=lambda p: (sum(p.counts), p.counts, p.host_memory))
    return pts


def _curve(rate, kinds, limits, host, base_memory, unit, method, exact, seconds, notes) -> PipelineCurve:
    points = tuple(_pareto(rate.options(limits)))
    values = {}
    for c in itertools.product(*(range(n + 1) for n in limits)):
        r = rate(c, math.inf)[0]
        values[c] = 1.0 / r if r > 0 else math.inf
    return PipelineCurve(tuple(kinds), tuple(limits), tuple(host), values, points, base_memory, unit, method,
                         exact, seconds, tuple(notes), rate=rate)


def pipeline_curve(stage: JobCurve, inp: InputSpec) -> PipelineCurve:
    """The analytic input-pipeline curve over an accelerator (stage) curve, in the stage curve's time
    unit: an input section changes a job's rate, never its unit, so a job on a workload keeps the unit
    it has without one. The section's figures are milliseconds and seconds, converted into the curve's
    unit (ms, s or us; a Piper workload's curve is in s); a stage curve that says no unit (a
    reference-format workload's own) or a unit it does not know has its times read as milliseconds
    against them, and says so in a note."""
    notes = stage.notes
    if not stage.unit:
        notes += ("its workload says no time unit (a reference-format workload's own): its input "
                  "section's figures (ms, GB/s) take its times as ms; a workload in ms says so with "
                  "\"unit\": \"ms\"",)
    elif stage.unit not in MS_PER_UNIT:
        notes += (f"its workload's time unit {stage.unit!r} is not one its input section's figures "
                  f"(ms, GB/s) convert into ({', '.join(u for u in MS_PER_UNIT if u)}): they take its "
                  f"times as ms",)
    return _curve(AnalyticRate(stage, inp), stage.kinds, stage.limits, stage.host, stage.base_memory,
                  stage.unit, stage.method + "+input", stage.exact, stage.seconds, notes)


def table_curve(table: ThroughputTable, kinds: Sequence[str], counts: Sequence[int], host: Sequence[bool], *,
                accelerator: str | None = None, limit: dict | None = None, base_memory: float = 0.0,
                name: str = "") -> PipelineCurve:
    """The curve of a job given by a measured throughput table, on a cluster of ``counts`` per kind."""
    accels = [k for k, h in zip(kinds, host) if not h]
    hosts = [t for t, h in enumerate(host) if h]
    if accelerator is None:
        if len(accels) != 1:
            raise InputError(f"job {name!r}: the cluster has {len(accels) or 'no'} accelerator kinds; say "
                             f"which one its throughput table was measured on with \"accelerator\"")
        accelerator = accels[0]
    a = list(kinds).index(accelerator)
    if not hosts:
        raise InputError(f"job {name!r}: its throughput table is over host cores, and the cluster has none")
    limits = [min(n, (limit or {}).get(k, n)) for k, n in zip(kinds, counts)]
    if limits[a] < table.accelerators:
        raise InputError(f"job {name!r}: its throughput table is at {table.accelerators} {accelerator} "
                         f"accelerators, the cluster (or its limit) has {limits[a]}")
    limits = [table.accelerators if t == a else (limits[t] if t in hosts else 0) for t in range(len(kinds))]
    rate = TableRate(table, a, hosts[0], base_memory)
    notes = (["throughput table made monotone (a running maximum over cores and memory)"] if rate.repaired
             else [])
    return _curve(rate, kinds, limits, host, base_memory, "ms", "table", True, 0.0, notes)


def job_rates(job: JobSpec, cluster: ClusterSpec, *, cache: CurveCache | None = None, **kw) -> JobCurve:
    """The curve the policies use for ``job``: its accelerator curve (:func:`job_curve`, ``kw`` passed on)
    with its input pipeline when it has one, or its measured table."""
    if job.throughput is not None:
        return table_curve(job.throughput, cluster.kinds, cluster.counts, cluster.host,
                           accelerator=job.accelerator, limit=dict(job.limit or {}),
                           base_memory=job.host_memory, name=job.name)
    stage = job_curve(job, cluster, cache=cache, **kw)
    if job.input is None:
        return stage
    if job.input.cpu_ms_per_sample > 0 and not any(
            h and n > 0 for h, n in zip(stage.host, stage.limits)):
        raise InputError(f"job {job.name!r}: its input pipeline needs host CPU cores (cpu_ms_per_sample "
                         f"> 0) and it can use none on this cluster")
    c = pipeline_curve(stage, job.input)
    if not c.points:
        raise InputError(f"job {job.name!r}: no allocation of the cluster feeds and runs it")
    return c
