"""Throughput curves: a job's best time per sample for every allocation it could get.

For a job whose devices may number up to ``limits[t]`` per kind, :func:`graph_curve` returns the optimum
max-load (time per sample) for **every** vector of devices used per kind from one unpruned DP run
(:func:`solvers.dp.curve`: the DP's table is indexed by devices used per kind, so its last row holds all
of them). When that DP is too expensive (too many ideals, or over ``curve_time_limit``), it falls back
to one :func:`solvers.auto.solve` per vector and says so (``method``, ``exact``, ``notes``); values are
then made monotone (a job given more devices may leave some idle).

**Host memory.** A job needs host memory for the operators its placement puts on host CPU cores (their
``memory``: weights, and for training gradients, optimiser state and stashed activations), plus a fixed
``base`` it declares (``host_memory_gb`` in the job list: its input pipeline, say). An allocation with no
host cores needs only the base. For the efficient points with host cores, the placement is the one the
DP returns for that allocation (:func:`solvers.dp.solve` on that many devices), which is also the
placement the job would run. An allocation's time per sample is therefore the best over the points that
fit both its devices and its host memory (:meth:`JobCurve.best_within`).

**ONNX jobs** get the stage model by default (:func:`onnx_curve`: replicas, tensor parallelism,
variants), per allocation the faster of its plan and the one-device-per-stage curve's, so a job that
fits one GPU runs as replicas rather than as a pipeline and no point is worse than the pipeline-only
one. A job with ``"max_replicas": 1`` gets the one-device-per-stage curve alone; Piper-format jobs get
the stage model (:func:`problem_curve`), and so do LLM model configs (:func:`llm_curve`: the decode
problem of ``placement place config.json``, a sample one generated token); reference-format jobs the
one-device-per-stage curve. An ONNX job's times are milliseconds per sample, as ``place`` prints them:
at a batch size above 1, a run of the model's batch takes ``batch_size`` times as long, and its
``samples`` count samples, not runs (a model of fixed input shape given no batch size is per run).

Curves are cached per (model file and its content hash, devices and their figures, cost model, training,
batch size, optimiser, limits, replica limit, base memory, options) in a :class:`CurveCache`: in memory,
and as JSON in a folder when one is given (the command line uses ``~/.cache/placement/curves`` or
``--cache-dir``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphs.errors import InputError

from .formats import ClusterSpec, JobSpec, json_number

if TYPE_CHECKING:
    from graphs.parallel import ParallelProblem

__all__ = ["CurvePoint", "JobCurve", "CurveCache", "graph_curve", "job_curve", "job_graph",
           "default_cache_dir", "DEFAULT_CURVE_TIME_LIMIT", "DEFAULT_SOLVE_TIME_LIMIT", "problem_curve",
           "piper_problem", "onnx_curve", "llm_curve", "faster_of", "check_model_file",
           "check_max_replicas"]

#: version of the cached curves: 2 since ONNX jobs get the stage model and the stage curves' method is
#: named ``stage-dp-per-count``; 3 since an LLM job's curve takes the best micro-batch count (a cache of
#: an earlier version is recomputed, never misread); 4 since a Piper job's curve says its unit (s); 5 since
#: a reference-format workload that names its accelerator kind runs on the cluster's kind of that name
#: (a curve cached before could hold its times on another kind); 6 since an ONNX job's times are per sample
#: (a cache of 5 held them per run of its batch, batch_size times as long)
CURVE_FORMAT = 6
DEFAULT_CURVE_TIME_LIMIT = 120.0  # seconds for the one unpruned DP before falling back
DEFAULT_SOLVE_TIME_LIMIT = 10.0  # seconds per allocation in the per-count fallback
_REL = 1e-12  # a point is "strictly faster" than another by more than this relative margin


@dataclass(frozen=True)
class CurvePoint:
    """An efficient allocation: ``counts`` devices per cluster kind give ``time_per_sample`` with a
    placement that needs ``host_memory`` bytes of host memory, strictly less than any smaller allocation
    gives within that memory."""

    counts: tuple[int, ...]
    time_per_sample: float
    host_memory: float


@dataclass(frozen=True, eq=False)
class JobCurve:
    """A job's throughput curve over the cluster's kinds (see the module doc).

    ``values[c]`` is the time per sample with at most ``c[t]`` devices of kind ``t``, for every ``c`` up to
    ``limits`` (``inf``: no placement fits). ``points`` are the efficient (allocation, host memory)
    pairs, by total devices: an allocation may have two, a faster one and one holding less host memory.
    """

    kinds: tuple[str, ...]
    limits: tuple[int, ...]
    host: tuple[bool, ...]
    values: Mapping[tuple[int, ...], float]
    points: tuple[CurvePoint, ...]
    base_memory: float = 0.0
    unit: str = ""
    method: str = "dp-curve"
    exact: bool = True
    seconds: float = 0.0
    notes: tuple[str, ...] = ()

    def clip(self, counts: Sequence[int]) -> tuple[int, ...]:
        return tuple(min(int(c), m) for c, m in zip(counts, self.limits))

    def time_per_sample(self, counts: Sequence[int]) -> float:
        """Best time per sample on ``counts`` devices (host memory unconstrained)."""
        return self.values[self.clip(counts)]

    def best_within(self, counts: Sequence[int], host_memory: float = math.inf) -> CurvePoint | None:
        """The fastest efficient point that fits ``counts`` devices and ``host_memory`` bytes; ``None`` if
        none does (the job cannot run on that allocation)."""
        best = None
        for p in self.points:
            if p.host_memory <= host_memory * (1 + 1e-12) and all(a <= b for a, b in zip(p.counts, counts)):
                if best is None or p.time_per_sample < best.time_per_sample:
                    best = p
        return best

    @property
    def best(self) -> CurvePoint | None:
        """The fastest point (on the whole cluster, host memory unconstrained)."""
        return min(self.points, key=lambda p: p.time_per_sample, default=None)

    def to_dict(self) -> dict:
        return {
            "kinds": list(self.kinds), "limits": list(self.limits), "host": list(self.host),
            "values": [list(c) + [json_number(v)] for c, v in sorted(self.values.items())],
            "points": [{"counts": list(p.counts), "time_per_sample": p.time_per_sample,
                        "host_memory": p.host_memory} for p in self.points],
            "base_memory": self.base_memory, "unit": self.unit, "method": self.method, "exact": self.exact,
            "seconds": self.seconds, "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> JobCurve:
        T = len(d["kinds"])
        values = {tuple(int(x) for x in row[:T]): (math.inf if row[T] is None else float(row[T]))
                  for row in d["values"]}
        points = tuple(CurvePoint(tuple(int(x) for x in p["counts"]), float(p["time_per_sample"]),
                                  float(p["host_memory"])) for p in d["points"])
        return cls(tuple(d["kinds"]), tuple(int(x) for x in d["limits"]), tuple(bool(x) for x in d["host"]),
                   values, points, float(d["base_memory"]), d.get("unit", ""), d["method"], bool(d["exact"]),
                   float(d["seconds"]), tuple(d.get("notes", ())))


# --------------------------------------------------------------------------- the curve of a graph
def graph_curve(graph, cluster, *, kinds: Sequence[str] | None = None, base_memory: float = 0.0,
                unit: str | None = None, curve_time_limit: float | None = DEFAULT_CURVE_TIME_LIMIT,
                solve_time_limit: float | None = DEFAULT_SOLVE_TIME_LIMIT,
                max_ideals: int | None = None, force_fallback: bool = False, scale: float = 1.0) -> JobCurve:
    """The curve of ``graph`` for up to ``cluster``'s counts (a :class:`graphs.model.Cluster` whose kinds
    the graph has costs for; host kinds are those that pay no communication).

    ``kinds``: the shared cluster's kind names, in its order (default: ``cluster``'s); kinds the job cannot
    use get limit 0. ``force_fallback`` skips the one-run DP (tests compare the two methods). ``scale``:
    the curve's unit per unit of the graph's max-load (``1 / graph.batch_size`` for an ONNX graph, whose
    loads are per run of its batch: the curve is then per sample)."""
    from graphs.errors import ProblemTooLargeError
    from solvers import dp
    from solvers.base import SolveOptions

    t0 = time.perf_counter()
    own = [k.name for k in cluster.kinds]
    kinds = tuple(kinds) if kinds is not None else tuple(own)
    missing = [k for k in own if k not in kinds]
    if missing:
        raise InputError(f"the job's device kinds {missing} are not in the cluster ({', '.join(kinds)})")
    where = [kinds.index(k) for k in own]  # job kind -> cluster kind position
    limits = [0] * len(kinds)
    host = [False] * len(kinds)
    for k, pos in zip(cluster.kinds, where):
        limits[pos] = int(k.count)
        host[pos] = not k.pays_communication

    def full(c) -> tuple[int, ...]:
        out = [0] * len(kinds)
        for x, pos in zip(c, where):
            out[pos] = int(x)
        return tuple(out)

    notes: list[str] = []
    own_values: dict[tuple[int, ...], float] | None = None
    method, exact = "dp-curve", True
    if not force_fallback:
        raw = {} if max_ideals is None else {"max_ideals": int(max_ideals)}
        try:
            c = dp.curve(graph, cluster, SolveOptions(time_limit=curve_time_limit, raw=raw))
            own_values = {tuple(k): float(v) for k, v in c.values.items()}
        except ProblemTooLargeError as e:
            notes.append(f"one-run curve DP too expensive ({e}); per-allocation solves with auto instead")
    assignments: dict[tuple[int, ...], object] = {}
    if own_values is None:
        method = "per-count-auto"
        own_values, assignments, exact = _per_count(graph, cluster, solve_time_limit)
        if not exact:
            notes.append("some allocations were solved heuristically by auto (not proven optimal)")
    # efficient points, in the job's own kind space
    shape = [k.count + 1 for k in cluster.kinds]
    own_host = [not k.pays_communication for k in cluster.kinds]
    points: list[CurvePoint] = []
    for c in itertools.product(*(range(n) for n in shape)):
        v = own_values[c]
        if not math.isfinite(v) or not _efficient(own_values, c, v):
            continue
        mem = base_memory
        if any(x > 0 and h for x, h in zip(c, own_host)):
            a = assignments.get(c)
            if a is None:
                a, note = _placement(graph, cluster, c, v, solve_time_limit)
                if note:
                    notes.append(note)
            mem = base_memory + (_host_memory(graph, cluster, c, a) if a is not None
                                 else float(graph.memory.sum()))
        points.append(CurvePoint(full(c), v * scale, mem))
    points.sort(key=lambda p: (sum(p.counts), p.counts))
    values = {full(c): v * scale for c, v in own_values.items()}
    if unit is None:
        unit = str(graph.meta.get("unit", "")) if hasattr(graph, "meta") else ""
    return JobCurve(kinds, tuple(limits), tuple(host), values, tuple(points), float(base_memory), unit,
                    method, exact, time.perf_counter() - t0, tuple(notes))


def _efficient(values, c, v) -> bool:
    """Strictly faster than every allocation with one device fewer (hence than every smaller one)."""
    for t, x in enumerate(c):
        if x > 0:
            d = c[:t] + (x - 1,) + c[t + 1:]
            if not v < values[d] * (1 - _REL):
                return False
    return True


def _per_count(graph, cluster, time_limit):
    """One :func:`solvers.auto.solve` per allocation; values made monotone."""
    from solvers import auto
    from solvers.base import SolveOptions, Status
    from solvers.registry import checked

    shape = [k.count + 1 for k in cluster.kinds]
    values: dict[tuple[int, ...], float] = {}
    assignments: dict[tuple[int, ...], object] = {}
    exact = True
    for c in sorted(itertools.product(*(range(n) for n in shape)), key=sum):
        best = math.inf
        for t, x in enumerate(c):  # a job given more devices may leave some idle
            if x > 0:
                best = min(best, values[c[:t] + (x - 1,) + c[t + 1:]])
        if sum(c) > 0:
            sub = cluster.with_counts(c)
            sol = auto.solve(graph, sub, SolveOptions(time_limit=time_limit))
            sol = checked("auto", graph, sol, cluster=sub)
            if sol.interrupted:  # auto took a Ctrl-C and returned what it had: the command stops here
                raise KeyboardInterrupt
            if sol.status in (Status.OPTIMAL, Status.FEASIBLE) and sol.assignment is not None:
                exact = exact and sol.status is Status.OPTIMAL
                if sol.objective < best:
                    best = float(sol.objective)
                    assignments[c] = sol.assignment
            elif sol.status is not Status.INFEASIBLE:
                exact = False
        values[c] = best
    return values, assignments, exact


def _placement(graph, cluster, counts, value, time_limit):
    """The DP's placement on ``counts`` devices (for its host memory), its optimum the curve's ``value``
    (:func:`solvers.registry.check_curve_value`); a note when there is none within the time limit."""
    from solvers import dp
    from solvers.base import SolveOptions, Status
    from solvers.registry import check_curve_value, checked

    sub = cluster.with_counts(counts)
    sol = checked("dp", graph, dp.solve(graph, sub, SolveOptions(time_limit=time_limit)), cluster=sub)
    if sol.interrupted:
        raise KeyboardInterrupt  # the DP stopped for a Ctrl-C: the command stops, not the next solve
    if sol.status is not Status.OPTIMAL or sol.assignment is None:
        return None, (f"no exact placement for {counts} within the time limit: host memory taken as the "
                      f"whole model's")
    check_curve_value("dp", counts, value, sol)
    return sol.assignment, ""


def _host_memory(graph, cluster, counts, assignment) -> float:
    """Bytes held by the nodes the assignment puts on host-kind devices of the sub-cluster ``counts``."""
    import numpy as np

    kind_of = np.repeat(np.arange(len(counts)), counts)
    host = np.array([not k.pays_communication for k in cluster.kinds])
    on_host = host[kind_of[np.asarray(assignment, dtype=np.int64)]]
    return float(graph.memory[on_host].sum())


# --------------------------------------------------------------------------- jobs
def job_graph(job: JobSpec, cluster: ClusterSpec):
    """The job's graph (device kinds named as the cluster's), the largest cluster it may use (the kinds it
    has costs for, at the cluster's counts or its ``limit``) and the time unit."""
    graph, jc, unit, _ = _job_graph(job, cluster)
    return graph, jc, unit


def _reference_accelerator(job: JobSpec, own: str, accels: Sequence[str]) -> tuple[str | None, str]:
    """The cluster kind a reference-format workload's accelerator runs on, and a note (or ``""``).
    ``own``: the kind its file names (``accelerator`` when it names none), ``accels``: the cluster's
    accelerator kinds. A file costed for a named kind runs on the cluster's kind of that name; the job's
    ``accelerator`` overrides it (its times then stand for that kind's, said in the note)."""
    from graphs.reference import ACCELERATOR

    named = own != ACCELERATOR
    acc = job.accelerator
    if acc is not None:
        note = (f"its workload ({job.model}) is costed for {own}; it runs on {acc} as its \"accelerator\" "
                f"says, at {own}'s times" if named and acc != own else "")
        return acc, note
    if named:
        if own in accels:
            return own, ""
        has = f"accelerator kinds {', '.join(accels)}" if accels else "no accelerator kind"
        fix = (f"cost it for the cluster's kind (placement inspect MODEL --devices {accels[0]}:N,cpu:N -o "
               f"FILE) or give the job \"accelerator\": \"{accels[0]}\" to run these {own} times on it"
               if accels else "cost it for an accelerator kind the cluster has")
        raise InputError(f"job {job.name!r}: its workload is costed for {own} (the file's \"accelerator\"), "
                         f"and the cluster has no {own}, only {has}: {fix}", source=job.model)
    if len(accels) > 1:
        raise InputError(f"job {job.name!r}: the cluster has several accelerator kinds "
                         f"({', '.join(accels)}); say which one runs this reference-format workload with "
                         f"\"accelerator\"")
    return (accels[0] if accels else None), ""


def _job_graph(job: JobSpec, cluster: ClusterSpec):
    """:func:`job_graph`, and notes for the job's curve."""
    from graphs.model import Cluster

    limit = dict(job.limit or {})

    def cap(name, n):
        return min(n, limit[name]) if name in limit else n

    if job.is_onnx:
        from graphs.onnx_workload import onnx_workload

        devices = job_devices(job, cluster)
        w = onnx_workload(job.model, devices, costs=job.costs or "roofline",
                          batch_size=job.batch_size, training=bool(job.training),
                          optimizer=job.optimizer or "adam")
        return w.graph, w.cluster, str(w.graph.meta.get("unit", "ms")), ()

    from graphs.reference import read_workload

    w = read_workload(job.model)
    accels = [k for k, h in zip(cluster.kinds, cluster.host) if not h]
    hosts = [k for k, h in zip(cluster.kinds, cluster.host) if h]
    acc, note = _reference_accelerator(job, w.cluster.kinds[0].name, accels)
    # the workload's two kinds (accelerator, cpu: under the names its file gives them) to the cluster's
    mapping = dict(zip((k.name for k in w.cluster.kinds), (acc, hosts[0] if hosts else None)))
    names = tuple(mapping.get(k) or f"{k} (not in the cluster)" for k in w.graph.kinds)
    graph = dataclasses.replace(w.graph, kinds=names)
    counts = dict(zip(cluster.kinds, cluster.counts))
    kinds = []
    for k in w.cluster.kinds:  # the workload's own memory per accelerator: its costs are for that device
        name = mapping.get(k.name)
        if name is not None and cap(name, counts[name]) > 0:
            kinds.append(dataclasses.replace(k, name=name, count=cap(name, counts[name])))
    if not kinds:
        raise InputError(f"job {job.name!r}: the cluster has none of the workload's device kinds "
                         f"(accelerator, cpu) or its limit leaves it none")
    return graph, Cluster(tuple(kinds)), str(graph.meta.get("unit") or ""), (note,) if note else ()


def job_devices(job: JobSpec, cluster: ClusterSpec):
    """The devices an ONNX job may use: the cluster's kinds at their counts or the job's ``limit``,
    kinds left with none dropped (a :class:`graphs.devices.DeviceSet`)."""
    from graphs.devices import DeviceSet

    limit = dict(job.limit or {})
    kept = [(s, min(c, limit.get(s.name, c))) for s, c in zip(cluster.devices.specs, cluster.counts)]
    kept = [(s, c) for s, c in kept if c > 0]
    if not kept:
        raise InputError(f"job {job.name!r}: its limit leaves it no device")
    return DeviceSet(tuple(s for s, _ in kept), tuple(c for _, c in kept))


def check_model_file(job: JobSpec) -> None:
    """An :class:`InputError` naming the job and its model file when that file is not there (a job given
    by a measured table alone has none to check)."""
    if not job.model or os.path.isfile(job.model):
        return
    what = "no such file" if not os.path.exists(job.model) else "not a file"
    raise InputError(f"job {job.name!r} (jobs[{job.index}]): model: {what}", source=job.model)


def check_max_replicas(job: JobSpec, *, source: str | None = None, cache: CurveCache | None = None) -> None:
    """An :class:`InputError` naming the job list (``source``, default the job's own), the job and its
    field when the job gives ``max_replicas`` above 1 on a reference-format workload, which has one device
    per stage. The one check of it: the command runs it on every job before any curve, :func:`job_curve`
    before computing one. ``cache``: the :class:`CurveCache` whose decode of the model file the curve
    then uses (the file is read once)."""
    if job.max_replicas in (None, 1) or job.is_onnx or job.llm or not job.model:
        return
    if (cache if cache is not None else CurveCache()).piper_data(job.model) is not None:
        return
    raise InputError(f"jobs[{job.index}] ({job.name}): max_replicas: {job.max_replicas} needs an ONNX, "
                     f"Piper-format or LLM model; a reference-format workload ({job.model}) has one device "
                     f"per stage (give 1 or leave it out)", source=job.source if source is None else source)


def job_curve(job: JobSpec, cluster: ClusterSpec, *, cache: CurveCache | None = None,
              curve_time_limit: float | None = DEFAULT_CURVE_TIME_LIMIT,
              solve_time_limit: float | None = DEFAULT_SOLVE_TIME_LIMIT) -> JobCurve:
    """The job's curve on the shared cluster, from ``cache`` when it holds it."""
    cache = cache if cache is not None else CurveCache()
    check_model_file(job)
    key = {
        "format": CURVE_FORMAT, "model": os.path.abspath(job.model), "sha256": cache.file_hash(job.model),
        "cluster": [[s.name, c, h] for s, c, h in zip(cluster.devices.specs, cluster.counts, cluster.host)],
        "limit": dict(job.limit or {}), "accelerator": job.accelerator, "training": bool(job.training),
        "batch_size": job.batch_size, "optimizer": job.optimizer, "base_memory": job.host_memory,
        "max_replicas": job.max_replicas,
        "curve_time_limit": curve_time_limit, "solve_time_limit": solve_time_limit,
    }
    if job.is_onnx or job.llm:  # the cost model depends on the device figures (and the cost table)
        key["specs"] = [_spec_key(s) for s in cluster.devices.specs]
    if job.is_onnx:
        key["costs"] = job.costs or "roofline"
        if job.costs not in (None, "roofline", "profile"):
            key["costs_sha256"] = cache.file_hash(job.costs)
    if job.llm:
        key["context"] = job.context
    hit = cache.get(key)
    if hit is not None:
        return hit
    check_max_replicas(job, cache=cache)
    piper = None if job.is_onnx or job.llm else cache.piper_data(job.model)
    if job.llm:
        c = llm_curve(job, cluster, solve_time_limit=solve_time_limit)
    elif piper is not None:  # the stage model (replicas, variants): see problem_curve
        c = problem_curve(piper_problem(piper, job, cluster), kinds=cluster.kinds, unit="s",
                          base_memory=job.host_memory, time_limit=solve_time_limit)
    elif job.is_onnx and job.max_replicas != 1:
        c = onnx_curve(job, cluster, curve_time_limit=curve_time_limit, solve_time_limit=solve_time_limit)
    else:  # (max_replicas above 1 refused above)
        graph, jc, unit, notes = _job_graph(job, cluster)
        c = graph_curve(graph, jc, kinds=cluster.kinds, base_memory=job.host_memory, unit=unit,
                        curve_time_limit=curve_time_limit, solve_time_limit=solve_time_limit,
                        scale=1.0 / graph.batch_size)  # loads per run of the graph's batch -> per sample
        c = dataclasses.replace(c, notes=notes + c.notes)
    if not c.points:
        raise InputError(f"job {job.name!r} ({job.model}): no placement fits even the whole cluster "
                         f"({cluster.devices})")
    cache.put(key, c)
    return c


def _spec_key(spec) -> str:
    """A device kind's figures as a curve's cache key holds them: its fields but those it is not compared
    by (``name_origins``, where its operator names came from, which changes no cost)."""
    skip = {f.name for f in dataclasses.fields(spec) if not f.compare}
    return repr(sorted((k, repr(v)) for k, v in dataclasses.asdict(spec).items() if k not in skip))


def _piper_data(path: str):
    """The decoded JSON of a Piper-format workload at ``path``, ``None`` for any other file."""
    from graphs.jsonio import read_json
    from graphs.piper import is_piper

    data = read_json(path)
    return data if is_piper(data) else None


# --------------------------------------------------------------------------- the cache
def default_cache_dir() -> str:
    """``$PLACEMENT_CACHE``, else ``$XDG_CACHE_HOME/placement``, else ``~/.cache/placement``; curves go in
    its ``curves`` folder."""
    root = os.environ.get("PLACEMENT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "placement")
    return os.path.join(root, "curves")


class CurveCache:
    """Curves by key, in memory and (with ``directory``) as one JSON file per key. A file that cannot be
    read is ignored (and recomputed); one that cannot be written leaves the curve in memory only."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = None if directory is None else os.fspath(directory)
        self._memory: dict[str, JobCurve] = {}
        self._hashes: dict[tuple, str] = {}
        self._piper: dict[tuple, object] = {}
        self.hits = 0
        self.misses = 0

    def file_hash(self, path: str) -> str:
        """SHA-256 of a file's content, remembered per (path, size, mtime)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise InputError("no such file", source=path) from None
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", source=path) from None
        memo = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
        if memo not in self._hashes:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            self._hashes[memo] = h.hexdigest()
        return self._hashes[memo]

    def piper_data(self, path: str):
        """The decoded JSON of a Piper-format workload at ``path``, ``None`` for any other file; decoded
        once per content (:meth:`file_hash`), so :func:`check_max_replicas` and :func:`job_curve` read it
        once."""
        if not os.path.isfile(path):
            return _piper_data(path)  # its reader names the problem
        memo = (os.path.abspath(path), self.file_hash(path))
        if memo not in self._piper:
            self._piper[memo] = _piper_data(path)
        return self._piper[memo]

    @staticmethod
    def digest(key: Mapping) -> str:
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:32]

    def _path(self, digest: str) -> str | None:
        return None if self.directory is None else os.path.join(self.directory, f"{digest}.json")

    def get(self, key: Mapping) -> JobCurve | None:
        d = self.digest(key)
        if d in self._memory:
            self.hits += 1
            return self._memory[d]
        path = self._path(d)
        if path is not None and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                if doc.get("key") == json.loads(json.dumps(key, sort_keys=True, default=str)):
                    c = JobCurve.from_dict(doc["curve"])
                    self._memory[d] = c
                    self.hits += 1
                    return c
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                pass
        self.misses += 1
        return None

    def put(self, key: Mapping, curve: JobCurve) -> None:
        d = self.digest(key)
        self._memory[d] = curve
        path = self._path(d)
        if path is None:
            return
        from placement.export import write_json

        try:
            os.makedirs(self.directory, exist_ok=True)
            write_json(path, {"schema": "placement-curve", "version": CURVE_FORMAT,
                              "key": json.loads(json.dumps(key, sort_keys=True, default=str)),
                              "curve": curve.to_dict()})
        except OSError:
            pass


# --------------------------------------------------------------------------- stage-model curves
# A job's best time per sample under the stage model (:mod:`graphs.parallel`: data- and tensor-parallel
# stages, variants, memory by schedule) for every vector of devices per kind, from the exact DP
# (:func:`solvers.dp_stages.solve_problem`).
#
# **One run or one per allocation.** The DP's feasibility table ``g[J][s][c]`` (fewest devices of the last
# kind, given ``c`` devices of the others) answers every allocation at once, but only for one threshold
# ``τ`` on the stage times; each allocation's optimum is a different ``τ``, so one run would need a
# feasibility pass per candidate ``τ`` (there are thousands of stage-time steps) or a search per allocation
# over shared stage costs, which the DP's driver does not expose. Here the DP runs once per allocation,
# in order of total devices, each run bounded by the best value of the allocations one device smaller (a
# job given more devices may leave some idle, so that value is a valid plan's): a run that finds nothing
# below the bound proves the bound is the allocation's optimum. Values are memoised per run and curves
# cached per job by :func:`placement.cluster.curves.job_curve`.
#
# Piper-format jobs (``../shared/workloads/piper/FORMAT.md``) get this curve: the file's single kind is
# the cluster's accelerator kind (``accelerator`` when the cluster has several), with the file's memory,
# bandwidth and micro-batches and the cluster's count (or the job's ``limit``); they have no host kinds,
# so a point's host memory is the job's base memory. ONNX jobs get it through :func:`onnx_curve` and
# LLM model configs through :func:`llm_curve`, where a point's host memory also holds what its plan's
# stages on host kinds hold (per device, times their devices).


def problem_curve(problem: ParallelProblem, *, kinds: Sequence[str] | None = None, base_memory: float = 0.0,
                  unit: str = "", time_limit: float | None = None, host: Sequence[bool] | None = None,
                  scale: float = 1.0, skip: Callable[[tuple[int, ...]], bool] | None = None) -> JobCurve:
    """The curve of ``problem`` for every allocation up to its kinds' counts (see the section doc).
    ``kinds``: the shared cluster's kind names in its order (default: the problem's); ``time_limit``:
    seconds per allocation (an allocation stopped by it makes the curve inexact, said in ``notes``);
    ``host``: which of the problem's kinds are host CPU cores (default none); ``scale``: the curve's
    unit per unit of the problem's objective; ``skip(counts)`` (the problem's kinds' counts): an
    allocation not solved, which keeps the best of the allocations below it (a plan on fewer devices
    is a plan on more), for a caller whose other curve covers it (:func:`llm_curve`)."""
    curve, runs = _solved_curve(problem, kinds=kinds, base_memory=base_memory, unit=unit,
                                time_limit=time_limit, host=host, scale=scale, skip=skip)
    return dataclasses.replace(curve, notes=curve.notes + (f"{runs} stage-model dp runs",))


def _solved_curve(problem: ParallelProblem, *, kinds, base_memory, unit, time_limit, host, scale, skip
                  ) -> tuple[JobCurve, int]:
    """:func:`problem_curve` without its note, and the number of allocations it solved."""
    from solvers.base import Status
    from solvers.dp_stages import solve_problem
    from solvers.registry import checked

    t0 = time.perf_counter()
    own = [k.name for k in problem.kinds]
    kinds = tuple(kinds) if kinds is not None else tuple(own)
    missing = [k for k in own if k not in kinds]
    if missing:
        raise InputError(f"the job's device kinds {missing} are not in the cluster ({', '.join(kinds)})")
    own_host = tuple(bool(h) for h in host) if host is not None else (False,) * len(own)
    if len(own_host) != len(own):
        raise InputError(f"host: one flag per kind of the problem ({len(own)}), got {len(own_host)}")
    where = [kinds.index(k) for k in own]
    limits = [0] * len(kinds)
    flags = [False] * len(kinds)
    for k, pos, h in zip(problem.kinds, where, own_host):
        limits[pos] = int(k.count)
        flags[pos] = h

    def full(c) -> tuple[int, ...]:
        out = [0] * len(kinds)
        for x, pos in zip(c, where):
            out[pos] = int(x)
        return tuple(out)

    values: dict[tuple[int, ...], float] = {}
    memory: dict[tuple[int, ...], float] = {}  # host memory of the plan that gives values[c]
    exact, notes, runs = True, [], 0
    grid = itertools.product(*(range(k.count + 1) for k in problem.kinds))
    for c in sorted(grid, key=lambda c: (sum(c), c)):
        if sum(c) == 0:
            values[c], memory[c] = math.inf, float(base_memory)
            continue
        below = [c[:t] + (x - 1,) + c[t + 1:] for t, x in enumerate(c) if x > 0]
        prev = min(below, key=lambda b: (values[b], memory[b]))
        smaller = values[prev]
        if skip is not None and skip(c):
            values[c], memory[c] = smaller, memory[prev]
            continue
        sub = problem.with_counts(c)
        runs += 1
        r = solve_problem(sub, time_limit=time_limit,
                          upper_bound=smaller * (1 + 1e-9) if math.isfinite(smaller) else math.inf)
        r = checked("dp", sub, r)
        v = r.objective * scale if r.plan is not None else math.inf
        if r.status not in (Status.OPTIMAL, Status.INFEASIBLE):
            exact = False
            notes.append(f"{full(c)}: {r.message or r.status}")
        if v < smaller:
            values[c], memory[c] = v, float(base_memory) + _stage_host_memory(sub, r, own_host)
        else:
            values[c], memory[c] = smaller, memory[prev]
    points = []
    for c, v in values.items():
        if math.isfinite(v) and _efficient(values, c, v):
            points.append(CurvePoint(full(c), v, memory[c]))
    points.sort(key=lambda p: (sum(p.counts), p.counts))
    return JobCurve(kinds, tuple(limits), tuple(flags),
                    {full(c): v for c, v in values.items()}, tuple(points), float(base_memory), unit,
                    "stage-dp-per-count", exact, time.perf_counter() - t0, tuple(notes)), runs


def _stage_host_memory(problem: ParallelProblem, solution, host: Sequence[bool]) -> float:
    """Bytes the plan of ``solution`` holds on host kinds: each host stage's peak per device times its
    devices."""
    if not any(host):
        return 0.0
    from graphs.parallel import evaluate_plan

    ev = solution.evaluation if solution.evaluation is not None else evaluate_plan(problem, solution.plan)
    return float(sum(s.memory * s.devices for s in ev.stages if host[s.stage.kind]))


def onnx_curve(job: JobSpec, cluster: ClusterSpec, *,
               curve_time_limit: float | None = DEFAULT_CURVE_TIME_LIMIT,
               solve_time_limit: float | None = DEFAULT_SOLVE_TIME_LIMIT) -> JobCurve:
    """The curve of an ONNX job on the stage model (replicas up to the job's ``max_replicas``, tensor
    parallelism, variants; the problem of :func:`placement.stages.read_onnx` on the job's
    devices, front-end settings and default schedule), per allocation the faster of it and the
    one-device-per-stage curve of the same costed graph (:func:`faster_of`). Times are milliseconds per
    sample, as ``place`` prints them (a run of the model's batch takes ``batch_size`` times as long)."""
    from placement.stages import read_onnx

    devices = job_devices(job, cluster)
    frontend = {"devices": str(devices), "device_files": list(cluster.device_files) or None,
                "costs": job.costs or "roofline", "batch_size": job.batch_size,
                "training": bool(job.training), "optimizer": job.optimizer or "adam"}
    w = read_onnx(job.model, frontend, max_replicas=job.max_replicas)
    problem, graph, settings = w.problem, w.graph, w.settings
    stage = problem_curve(problem, kinds=cluster.kinds, base_memory=job.host_memory, unit="ms",
                          time_limit=solve_time_limit, host=[s.host for s in devices.specs],
                          scale=1e3)  # seconds per sample -> ms per sample
    one = graph_curve(graph, devices.cluster(), kinds=cluster.kinds, base_memory=job.host_memory,
                      unit="ms", curve_time_limit=curve_time_limit, solve_time_limit=solve_time_limit,
                      scale=1.0 / graph.batch_size)  # ms per run of the batch -> ms per sample
    return faster_of(stage, one, note=f"stage model at {settings['granularity']} granularity, "
                                      f"{problem.microbatches} micro-batches, {problem.schedule}")


def llm_curve(job: JobSpec, cluster: ClusterSpec, *,
              solve_time_limit: float | None = DEFAULT_SOLVE_TIME_LIMIT) -> JobCurve:
    """The curve of an LLM model config job: :func:`graphs.llm.decode_problem` (the problem of
    ``placement place config.json``) on the job's devices, decoding ``batch_size`` sequences (default 1)
    at ``context`` tokens (default that of ``place``), with the job's ``max_replicas``. A sample is one
    generated token (of any sequence); times are milliseconds per token. An LLM has no
    one-device-per-stage model, so this is the stage curve alone, per allocation the fastest over the
    micro-batch count, as ``place`` chooses it: every power of two up to the default (fewer, larger
    micro-batches read each stage's weights fewer times per token; more let more stages and replicas
    work at once)."""
    from graphs.devices import DeviceSet
    from graphs.llm import decode_problem, microbatch_counts, read_config
    from placement.inputs import DEFAULT_CONTEXT

    devices = job_devices(job, cluster)
    cfg = read_config(job.model)
    batch = job.batch_size or 1

    def problem(microbatches: int):
        return decode_problem(cfg, devices, batch=batch, context=job.context or DEFAULT_CONTEXT,
                              max_replicas=job.max_replicas, microbatches=microbatches)

    def curve(p) -> tuple[JobCurve, int]:
        # an allocation whose own default count is below p's: more micro-batches than its devices' default
        # leave stages idle and read the weights more often per token, so a smaller count's curve has it
        n = p.microbatches
        return _solved_curve(p, kinds=cluster.kinds, base_memory=job.host_memory, unit="ms",
                             time_limit=solve_time_limit, host=[s.host for s in devices.specs],
                             scale=1e3,  # seconds per token -> ms per token
                             skip=lambda c: n > microbatch_counts(batch, DeviceSet(devices.specs, c))[0])

    counts = microbatch_counts(batch, devices)  # the default first
    N = counts[0]
    solved = [curve(problem(n)) for n in counts]
    curves = [c for c, _ in solved]
    out = curves[0]
    for c in curves[1:]:
        out = faster_of(out, c)
    runs = sum(r for _, r in solved)
    fewer = sum(out.values[c] < curves[0].values[c] * (1 - _REL) for c in out.values)
    return dataclasses.replace(
        out, method="stage-dp-per-count, best micro-batch count",
        notes=tuple(n for c in curves for n in c.notes)
        + (f"{runs} stage-model dp runs over {len(counts)} micro-batch count(s) "
           f"({', '.join(map(str, counts))}); fewer than the default {N} faster at {fewer} of "
           f"{len(out.values)} allocations",))


def faster_of(a: JobCurve, b: JobCurve, *, note: str = "") -> JobCurve:
    """The curve whose value at every allocation is the smaller of ``a``'s and ``b``'s (two curves over
    the same kinds and limits). Its points are those of both that no other point dominates (no more
    devices of any kind, no more host memory, as fast), so :meth:`JobCurve.best_within` is never worse
    than either curve's under any host memory."""
    if (a.kinds, a.limits, a.host) != (b.kinds, b.limits, b.host):
        raise InputError(f"curves over different kinds or limits: {a.kinds} {a.limits} and "
                         f"{b.kinds} {b.limits}")
    values = {c: min(v, b.values[c]) for c, v in a.values.items()}
    kept: list[CurvePoint] = []
    for p in sorted(a.points + b.points, key=lambda p: (p.time_per_sample, sum(p.counts), p.host_memory)):
        if not any(q.time_per_sample <= p.time_per_sample * (1 + _REL)
                   and q.host_memory <= p.host_memory * (1 + _REL)
                   and all(x <= y for x, y in zip(q.counts, p.counts)) for q in kept):
            kept.append(p)
    kept.sort(key=lambda p: (sum(p.counts), p.counts, p.host_memory))
    faster = sum(a.values[c] < b.values[c] * (1 - _REL) for c in values)
    notes = a.notes + b.notes + (f"per allocation the faster of {a.method} and {b.method}"
                                 + (f" ({note})" if note else "")
                                 + f": {a.method} faster at {faster} of {len(values)} allocations",)
    return JobCurve(a.kinds, a.limits, a.host, values, tuple(kept), a.base_memory, a.unit or b.unit,
                    f"faster of {a.method}, {b.method}", a.exact and b.exact, a.seconds + b.seconds, notes)


def piper_problem(data, job, cluster) -> ParallelProblem:
    """The stage problem of a Piper-format job (decoded ``data``) on the shared ``cluster`` (a
    :class:`~placement.cluster.formats.ClusterSpec`), with the job's ``max_replicas``: see the section
    doc above :func:`problem_curve`."""
    from graphs.piper import parse_piper

    accels = [k for k, h in zip(cluster.kinds, cluster.host) if not h]
    acc = job.accelerator
    if acc is None and len(accels) > 1:
        raise InputError(f"job {job.name!r}: the cluster has several accelerator kinds "
                         f"({', '.join(accels)}); say which one runs this Piper-format workload with "
                         f"\"accelerator\"")
    if acc is None:
        if not accels:
            raise InputError(f"job {job.name!r}: the cluster has no accelerator for a Piper-format workload")
        acc = accels[0]
    count = dict(zip(cluster.kinds, cluster.counts))[acc]
    count = min(count, (job.limit or {}).get(acc, count))
    if count < 1:
        raise InputError(f"job {job.name!r}: its limit leaves it no {acc} device")
    p = parse_piper(data, source=job.model, devices=count, max_replicas=job.max_replicas)
    return p.with_options(kinds=(dataclasses.replace(p.kinds[0], name=acc),))
