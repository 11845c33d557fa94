"""The replicated pipeline model: stages with data-parallel and tensor-parallel degrees and per-node
variants (vanilla, activation recomputation, tensor-parallel splits), memory by pipeline schedule.

This generalises the Piper model (``shared/workloads/piper/FORMAT.md``) to several device kinds.

**Graph.** Nodes (already contracted: a node is an *item*, its whole colocation class) form a DAG
(``src -> dst``); a plan's stages are differences of nested ideals of that DAG. Communication is carried
by *tensors*: tensor ``e`` is produced by node ``tensor_src[e]`` and consumed by one or more nodes; a
stage pays ``tensor_time[k, e]`` seconds per sample (forward activation plus backward gradient, on a
device of kind ``k``) once when ``e`` leaves it (produced inside, some consumer outside) and once when
``e`` enters it (produced outside, some consumer inside). A Piper edge is a tensor with one consumer
(``2 * bytes / bandwidth``); a reference-format node's output is one tensor to all its successors.

**Variants.** For each node, kind ``k`` and tensor-parallel degree ``t`` a node has zero or more variants
(none: it cannot run on ``k`` split ``t`` ways). A variant has ``time`` (seconds per sample, forward
plus backward, on ``t`` devices of kind ``k``), ``params`` (weight bytes per device, resynchronised
across replicas), memory ``a`` (bytes per micro-batch in flight), ``b`` (bytes independent of the
schedule: one copy of the weights, gradients, optimiser state, workspace) and ``w`` (the weight bytes
inside ``b``, copied once per extra weight version), and sync terms: ``sync_in[e]`` seconds added to
tensor ``e`` when it enters the node's stage, ``sync_out[e]`` when it leaves it (tensor parallelism's
extra traffic, Piper's ``syncTimeFw``/``syncTimeBw``).

**Stage.** Node set ``S`` on kind ``k`` with degrees ``t`` and ``d`` (``t * d`` devices) and one variant
per node. With ``N`` micro-batches per batch, per sample:

    comm     = sum of the crossing tensors' times + sync terms of the chosen variants at crossing tensors
    resync_v = 4 * (d - 1) * params_v / d / N / resync bandwidth
    TPS      = comm / d + sum_v resync_v + sum_v time_v / d

The resync bandwidth of kind ``k`` is its intra-server bandwidth when the stage's ``t * d`` devices fit
in one server (``server_size``), otherwise its inter-server bandwidth (both default to ``bandwidth``).

**Schedule** (memory per device of stage ``i``, ``s_i`` the sum of ``d`` over stages ``i..last``):

* ``1f1b`` (Piper, PipeDream-Flush): ``y = ceil(s_i / d_i)`` micro-batches in flight, one weight version:
  ``A*y + B``;
* ``gpipe``: every micro-batch of the replica's share of the batch in flight, ``y = N / d_i``: ``A*y + B``;
* ``pipedream`` (asynchronous, weight stashing): ``y`` as 1F1B and one weight version per in-flight
  micro-batch: ``A*y + B + (y - 1) * W``;
* ``2bw`` (PipeDream-2BW): ``y`` as 1F1B and two weight versions (one when ``y = 1``):
  ``A*y + B + (min(y, 2) - 1) * W``.

Constraints: stages in pipeline order are nested ideals (every edge goes to the same or a later stage),
every node in exactly one stage, ``sum t*d`` of the stages of a kind <= that kind's count,
``sum d <= N``, ``d`` divides ``N``, ``d <= max_replicas``, memory per device <= the kind's memory.
The objective is the largest stage TPS.

**Latency** (one sample end to end, no pipelining; what a latency target bounds): a micro-batch visits
the stages in pipeline order and one replica of each takes it whole, so

    latency_S = sum_v time_v + comm        (not divided by d; no resync: once per batch, off its path)
    latency   = sum over the stages of latency_S

in seconds per sample like the TPS (a micro-batch of ``b`` samples takes ``b * latency``). Replicas
(``d``) add throughput, never speed; tensor parallelism (``t``) shortens a stage through its variants'
times, and pays its sync terms. With ``d = t = 1`` and one accelerator per stage this is the latency
model of :mod:`graphs.latency` for a pipeline whose stages run one after another (each crossing tensor
paid by the stage it leaves and by the one it enters, as there); where two stages could run side by
side (branches of the graph) or a host stage's nodes on separate cores, it counts them one after
another, so there it is larger than that model's value for the same placement (conservative).

With ``d = t = 1``, ``a = w = params = 0`` and one variant per node and kind this is exactly the
throughput model of :mod:`graphs.evaluate`, which is this evaluator on :func:`operator_problem` (the
operators as nodes, their colocation classes, any assignment a plan); :func:`from_opgraph` gives the
same model on the contracted graph (items as nodes), which the solvers take. Conversely
:func:`pipeline_misfit` says whether a stage problem is exactly that model, and :func:`to_opgraph` turns
one that is into an :class:`~graphs.model.OpGraph` (what the stage DP hands the pipeline kernel). A kind
that pays no communication (host CPUs) has no tensor times. Problems built with ``contiguous=False`` take
stages in any order; the evaluation reports whether they are nested ideals in some order.

:func:`evaluate_plan` is the one evaluator every solver's plan is checked against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from .errors import CycleError, InputError
from .model import Cluster, DeviceKind, OpGraph

__all__ = ["SCHEDULES", "Variant", "ParallelGraph", "ParallelProblem", "Stage",
           "StageEvaluation", "PlanEvaluation", "evaluate_plan", "in_flight", "weight_versions",
           "stage_memory", "resync_bandwidth", "from_opgraph", "operator_problem", "pipeline_misfit",
           "is_pipeline_model", "to_opgraph", "plan_of_assignment", "latency_lower_bound",
           "work_lower_bound", "MEMORY_RTOL", "usable_memory", "stage_device_numbers",
           "stage_device_names", "stage_devices"]

SCHEDULES = ("1f1b", "gpipe", "pipedream", "2bw")
#: a device holds what is at most its memory times ``1 + MEMORY_RTOL``: the slack the evaluator allows
#: for summation order, so that a device filled exactly, summed in another order, still fits
MEMORY_RTOL = 1e-9


def usable_memory(capacity: float | None) -> float:
    """What a device of ``capacity`` bytes (``None``: unlimited) may hold by the evaluator's rule: the
    capacity with :data:`MEMORY_RTOL`'s slack. Every solver's memory check uses this, so none rules out
    a placement the evaluator accepts."""
    return math.inf if capacity is None else float(capacity) * (1 + MEMORY_RTOL)


@dataclass(frozen=True)
class Variant:
    """One way to run a node on ``t`` devices of kind ``kind`` (see the module doc)."""

    node: int
    kind: int
    t: int
    name: str
    time: float
    params: float = 0.0
    a: float = 0.0
    b: float = 0.0
    w: float = 0.0
    sync_in: Mapping[int, float] = field(default_factory=dict)  # tensor -> seconds
    sync_out: Mapping[int, float] = field(default_factory=dict)
    #: the part of ``time`` spent in the backward pass (training), kept apart so the split-max objective
    #: (max forward load + max backward load) needs no guess
    backward_time: float = 0.0


@dataclass(frozen=True, eq=False)
class ParallelGraph:
    """Nodes, DAG edges, tensors and variants (see the module doc). Build with :meth:`build`."""

    ids: tuple
    names: tuple[str, ...]
    src: np.ndarray  # [E] DAG edges
    dst: np.ndarray
    tensor_src: np.ndarray  # [M]
    tensor_ptr: np.ndarray  # [M+1] consumers of tensor e: tensor_dst[tensor_ptr[e]:tensor_ptr[e+1]]
    tensor_dst: np.ndarray
    tensor_time: np.ndarray  # [K, M] seconds per sample, paid by each side
    variants: tuple[Variant, ...]
    options: Mapping[tuple[int, int, int], tuple[int, ...]]  # (node, kind, t) -> variant indices
    source: str | None = None
    #: [n] colocation class of every node (-1: none): the nodes of a class must share a stage. A solver's
    #: problem has none (its nodes are items already, :func:`from_opgraph`); the operator-level problem
    #: of :func:`operator_problem` keeps a training graph's forward/backward twins together with them.
    colocation: np.ndarray | None = None

    @classmethod
    def build(cls, *, ids: Sequence, names: Sequence[str] | None, num_kinds: int, edges,
              tensors: Sequence[tuple[int, Sequence[int], Sequence[float]]], variants: Sequence[Variant],
              source: str | None = None, tensor_edges: bool = True, colocation=None) -> ParallelGraph:
        """Validate and index. ``tensors``: ``(producer, consumers, time per kind)``; DAG ``edges`` are
        ``(src, dst)`` pairs, plus the tensors' producer -> consumer pairs when ``tensor_edges`` (a training
        graph's gradients flow against the order, so :func:`from_opgraph` passes ``False``)."""
        from .order import find_cycle, topological_order

        n = len(ids)
        names = tuple(str(x) for x in (names if names is not None else ids))
        t_src, t_ptr, t_dst = [], [0], []
        times = np.zeros((num_kinds, len(tensors)))
        pairs = [tuple(map(int, e)) for e in edges]
        for e, (u, cons, tm) in enumerate(tensors):
            cons = sorted({int(v) for v in cons})
            if not 0 <= u < n or any(not 0 <= v < n for v in cons) or u in cons or not cons:
                raise InputError(f"tensor {e}: bad producer {u} or consumers {cons}", source=source)
            t_src.append(int(u))
            t_dst.extend(cons)
            t_ptr.append(len(t_dst))
            times[:, e] = tm
            if tensor_edges:
                pairs.extend((int(u), v) for v in cons)
        if not np.isfinite(times).all() or (times < 0).any():
            raise InputError("a tensor's time is negative or not finite", source=source)
        e = np.array(pairs, np.int64).reshape(-1, 2)
        e = np.unique(e, axis=0) if pairs else np.zeros((0, 2), np.int64)
        if e.size and ((e < 0) | (e >= n)).any():
            raise InputError("an edge refers to a node out of range", source=source)
        if e.size and (e[:, 0] == e[:, 1]).any():
            raise InputError(f"node {ids[int(e[e[:, 0] == e[:, 1]][0, 0])]} has an edge to itself",
                             source=source)
        order = topological_order(n, e[:, 0], e[:, 1], partial=True)
        if order.size < n:  # named along one cycle, as an operator graph's is
            cycle = find_cycle(n, e[:, 0], e[:, 1], set(order.tolist()))
            raise CycleError([ids[i] for i in cycle], source=source)
        opts: dict[tuple[int, int, int], list[int]] = {}
        for i, v in enumerate(variants):
            where = f"node {ids[v.node]}, variant {v.name!r}" if 0 <= v.node < n else f"variant {i}"
            if not 0 <= v.node < n or not 0 <= v.kind < num_kinds or v.t < 1:
                raise InputError(f"{where}: bad node, kind or degree", source=source)
            for what in ("time", "params", "a", "b", "w"):
                x = getattr(v, what)
                if not (isinstance(x, (int, float)) and math.isfinite(x) and x >= 0):
                    raise InputError(f"{where}: {what} must be a finite number >= 0, got {x!r}",
                                     source=source)
            bt = v.backward_time
            if not (isinstance(bt, (int, float)) and 0 <= bt <= v.time * (1 + 1e-12)):
                raise InputError(f"{where}: backward_time must be within 0..time, got {v.backward_time!r}",
                                 source=source)
            if v.w > v.b * (1 + 1e-12):
                raise InputError(f"{where}: weight bytes {v.w} exceed memory B {v.b}", source=source)
            for side, d in (("sync_in", v.sync_in), ("sync_out", v.sync_out)):
                for te, x in d.items():
                    if not 0 <= te < len(tensors) or not (math.isfinite(x) and x >= 0):
                        raise InputError(f"{where}: bad {side} entry {te}: {x!r}", source=source)
            opts.setdefault((v.node, v.kind, v.t), []).append(i)

        def ro(a):
            a = np.ascontiguousarray(a)
            a.setflags(write=False)
            return a

        colo = None
        if colocation is not None:
            colo = np.asarray(colocation, np.int64).reshape(-1)
            if colo.shape != (n,):
                raise InputError(f"{colo.size} colocation labels for {n} nodes", source=source)
            colo = ro(colo) if (colo >= 0).any() else None
        return cls(tuple(ids), names, ro(e[:, 0]), ro(e[:, 1]), ro(np.array(t_src, np.int64)),
                   ro(np.array(t_ptr, np.int64)), ro(np.array(t_dst, np.int64)), ro(times),
                   tuple(variants), {k: tuple(v) for k, v in opts.items()}, source, colo)

    @property
    def num_nodes(self) -> int:
        return len(self.ids)

    @property
    def num_tensors(self) -> int:
        return int(self.tensor_src.size)

    def degrees(self, kind: int) -> list[int]:
        """Tensor-parallel degrees some node can use on ``kind``."""
        return sorted({t for (_, k, t) in self.options if k == kind})

    def consumers(self, e: int) -> np.ndarray:
        return self.tensor_dst[self.tensor_ptr[e]:self.tensor_ptr[e + 1]]

    @cached_property
    def variant_arrays(self) -> dict[str, np.ndarray]:
        """The variants' fields as arrays (``node``, ``kind``, ``t``, ``time``, ``backward_time``,
        ``params``, ``a``, ``b``, ``w``) and ``synced``, the variants with sync terms: what the evaluator
        sums per stage."""
        vs = self.variants
        out = {f: np.array([getattr(v, f) for v in vs], np.int64 if f in ("node", "kind", "t") else float)
               for f in ("node", "kind", "t", "time", "backward_time", "params", "a", "b", "w")}
        out["synced"] = np.array([bool(v.sync_in or v.sync_out) for v in vs], bool)
        for a in out.values():
            a.setflags(write=False)
        return out


@dataclass(frozen=True, eq=False)
class ParallelProblem:
    """A graph, its device kinds (the graph's kind index ``k`` is ``kinds[k]``), ``microbatches`` ``N``
    per batch, the ``schedule`` and the largest data-parallel degree allowed."""

    graph: ParallelGraph
    kinds: tuple[DeviceKind, ...]
    microbatches: int
    schedule: str = "1f1b"
    max_replicas: int | None = None
    #: stages must be nested ideals in plan order (a pipeline); ``False``: any assignment of nodes to
    #: stages is a plan, and the evaluation says whether it is contiguous
    contiguous: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(self.kinds))
        if self.schedule not in SCHEDULES:
            raise InputError(f"unknown schedule {self.schedule!r}; choose one of: {', '.join(SCHEDULES)}")
        N = self.microbatches
        if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1:
            raise InputError(f"micro-batches per batch must be a positive integer, got {N!r}")
        R = self.max_replicas
        if R is not None and (isinstance(R, bool) or not isinstance(R, (int, np.integer)) or R < 1):
            raise InputError(f"max replicas must be a positive integer or None, got {R!r}")
        names = [k.name for k in self.kinds]
        if len(set(names)) != len(names):
            raise InputError(f"device kinds listed twice: {names}")
        if self.graph.tensor_time.shape[0] != len(self.kinds):
            raise InputError(f"the graph has costs for {self.graph.tensor_time.shape[0]} device kinds, "
                             f"the cluster has {len(self.kinds)}")
        for k, kind in enumerate(self.kinds):
            if not isinstance(kind, DeviceKind):
                raise InputError(f"device kind {k}: expected a DeviceKind, got {type(kind).__name__}")
            if not kind.pays_communication and self.graph.tensor_time[k].any():
                raise InputError(f"device kind {kind.name!r} pays no communication (host memory), but the "
                                 f"graph gives its tensors transfer times", source=self.graph.source)

    def with_options(self, **changes) -> ParallelProblem:
        return replace(self, **changes)

    def with_counts(self, counts) -> ParallelProblem:
        """This problem with ``counts[k]`` devices of kind ``k`` (everything else as it is)."""
        return replace(self, kinds=tuple(replace(k, count=int(c)) for k, c in zip(self.kinds, counts)))

    def replica_degrees(self) -> list[int]:
        """Allowed ``d``: divisors of ``N`` up to ``max_replicas`` and the number of devices."""
        top = min(self.microbatches, sum(k.count for k in self.kinds), self.max_replicas or self.microbatches)
        return [d for d in range(1, top + 1) if self.microbatches % d == 0]


# --------------------------------------------------------------------------- model pieces
def in_flight(schedule: str, d: int, s: int, N: int) -> int:
    """Micro-batches a replica of a stage holds in flight: ``s`` is the sum of ``d`` from this stage on."""
    if schedule == "gpipe":
        return N // d
    return -(-s // d)


def weight_versions(schedule: str, y: int) -> int:
    if schedule == "pipedream":
        return y
    if schedule == "2bw":
        return min(y, 2)
    return 1


def stage_memory(schedule: str, y: int, a: float, b: float, w: float) -> tuple[float, float, float]:
    """``(weights, stash, peak)`` bytes per device for summed ``A``, ``B``, ``W`` of a stage's variants:
    weights = ``W`` times the versions kept, stash = ``A*y``, peak = ``A*y + B + (versions-1)*W``."""
    v = weight_versions(schedule, y)
    return w * v, a * y, a * y + b + (v - 1) * w


def resync_bandwidth(kind: DeviceKind, devices: int) -> float:
    """Bandwidth of the parameter resync among a stage's ``devices`` devices of ``kind``."""
    fits = kind.server_size is None or devices <= kind.server_size
    bw = kind.intra_bandwidth if fits else kind.inter_bandwidth
    return kind.bandwidth if bw is None else bw


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: ``nodes`` (node indices) on ``kind`` (index) with degrees ``d``, ``t`` and
    ``variants[i]`` (index into the graph's variants) for ``nodes[i]``."""

    nodes: tuple[int, ...]
    kind: int
    d: int
    t: int
    variants: tuple[int, ...]


@dataclass(frozen=True)
class StageEvaluation:
    stage: Stage
    time_per_sample: float
    compute: float  # sum of times / d
    comm: float  # (tensor and sync times) / d
    resync: float
    in_flight: int
    weights: float
    stash: float
    memory: float  # peak per device
    capacity: float
    devices: int
    #: one sample's time through this stage on one replica (seconds per sample): its variants' time plus
    #: its crossing tensors and sync terms, not divided by ``d`` (a replica takes a micro-batch alone) and
    #: without the resync (once per batch, off a sample's path); ``t`` helps through the variants' time
    latency: float = 0.0
    #: ``comm`` as received (tensors entering the stage, their sync terms) and sent (leaving), ``/ d``
    comm_in: float = 0.0
    comm_out: float = 0.0
    #: the backward pass's part of ``compute`` (:attr:`Variant.backward_time`), ``/ d``
    compute_backward: float = 0.0


@dataclass(frozen=True)
class PlanEvaluation:
    """``objective``: the time per sample (the largest stage's). ``latency``: one sample's time end to
    end (seconds per sample, the unit of ``objective``): the sum over the stages, in pipeline order, of
    :attr:`StageEvaluation.latency`; a micro-batch of ``b`` samples takes ``b * latency`` seconds
    (``inf`` when the plan cannot be scored). ``contiguous``: the stages can be put in an order in which
    every edge stays in a stage or goes to a later one (they are then nested ideals); ``stage_order``
    is such an order (stage indices; ``None`` when there is none or a colocation class is split)."""

    objective: float
    stages: tuple[StageEvaluation, ...]
    problems: tuple[str, ...]
    latency: float = math.inf
    contiguous: bool = True
    stage_order: tuple[int, ...] | None = None

    @property
    def valid(self) -> bool:
        return not self.problems


def _crossing(g: ParallelGraph, inside: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tensors entering and leaving the node set ``inside`` (bool mask)."""
    src_in = inside[g.tensor_src]
    cons_in = np.add.reduceat(inside[g.tensor_dst].astype(np.int64), g.tensor_ptr[:-1]) if g.num_tensors \
        else np.zeros(0, np.int64)
    n_cons = np.diff(g.tensor_ptr)
    enter = ~src_in & (cons_in > 0)
    leave = src_in & (cons_in < n_cons)
    return enter, leave


def _stage_order(g: ParallelGraph, stage_of: np.ndarray, count: int) -> list[int] | None:
    """Stages in an order every edge respects (Kahn's, first-in first-out from the lowest index), or
    ``None`` when their quotient graph has a cycle."""
    ss, dd = stage_of[g.src], stage_of[g.dst]
    keep = ss != dd
    pairs = np.unique(np.stack([ss[keep], dd[keep]], 1), axis=0) if keep.any() else np.zeros((0, 2), int)
    indeg = [0] * count
    succ: list[list[int]] = [[] for _ in range(count)]
    for x, y in pairs.tolist():
        succ[x].append(y)
        indeg[y] += 1
    ready = [u for u in range(count) if indeg[u] == 0]
    order = []
    while ready:
        u = ready.pop(0)
        order.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return order if len(order) == count else None


def _few(lines: list[str], what: str) -> list[str]:
    return lines if len(lines) <= 10 else lines[:10] + [f"... and {len(lines) - 10} more {what}"]


def _fastest(problem: ParallelProblem, present) -> tuple[np.ndarray, np.ndarray]:
    """Per node: its least time over the variants on kinds in ``present`` (any ``t``), and its least
    ``t * time`` (the device-seconds it needs at least)."""
    g = problem.graph
    lat = np.full(g.num_nodes, math.inf)
    work = np.full(g.num_nodes, math.inf)
    for v in g.variants:
        if present[v.kind] and v.t <= problem.kinds[v.kind].count:
            lat[v.node] = min(lat[v.node], v.time)
            work[v.node] = min(work[v.node], v.t * v.time)
    return lat, work


def latency_lower_bound(problem: ParallelProblem) -> float:
    """No plan's latency (seconds per sample) is below this: every node's fastest variant on a kind with
    devices, no communication."""
    lat, _ = _fastest(problem, [k.count > 0 for k in problem.kinds])
    return float(lat.sum())


def work_lower_bound(problem: ParallelProblem) -> float:
    """No plan's time per sample is below this: a stage of ``t * d`` devices takes at least its variants'
    time over ``d``, so the devices' time per sample covers every node's least ``t * time``."""
    devices = sum(k.count for k in problem.kinds)
    if devices == 0:
        return math.inf
    _, work = _fastest(problem, [k.count > 0 for k in problem.kinds])
    return float(work.sum()) / devices


def evaluate_plan(problem: ParallelProblem, plan: Sequence[Stage], *,
                  labels: Sequence[str] | None = None) -> PlanEvaluation:
    """Time per sample, per-stage details and every broken constraint of ``plan`` (stages in pipeline
    order). An invalid plan still gets numbers where they can be computed: a node without a variant
    for its stage's kind and degree (variant index ``-1``), or given one that is not its own for that
    kind and degree, makes that stage's time ``inf``.
    ``labels`` name the stages in messages (default ``stage i``; the one-device-per-stage view names
    devices)."""
    g, kinds, N, sched = problem.graph, problem.kinds, problem.microbatches, problem.schedule
    n = g.num_nodes
    va = g.variant_arrays
    nv = len(g.variants)
    label = [f"stage {i}" for i in range(len(plan))] if labels is None else [str(x) for x in labels]
    problems: list[str] = []
    limits: list[str] = []  # broken limits that leave the plan scorable (its stages are evaluated)
    stage_of = np.full(n, -1, np.int64)
    for i, st in enumerate(plan):
        if len(st.nodes) == 0:
            problems.append(f"{label[i]} is empty")
        if len(st.variants) != len(st.nodes):
            problems.append(f"{label[i]}: {len(st.variants)} variants for {len(st.nodes)} nodes")
        nodes = np.asarray(st.nodes, np.int64)
        bad = (nodes < 0) | (nodes >= n)
        if bad.any():
            problems.append(f"{label[i]}: node index {int(nodes[bad][0])} out of range")
            nodes = nodes[~bad]
        uniq, count = np.unique(nodes, return_counts=True)
        clash = uniq[(count > 1) | (stage_of[uniq] >= 0)]  # listed twice here, or in an earlier stage
        if clash.size:
            u = int(clash[0])
            problems.append(f"node {g.ids[u]} is in {label[stage_of[u]] if stage_of[u] >= 0 else label[i]} "
                            f"and {label[i]}")
        stage_of[uniq[stage_of[uniq] < 0]] = i
        if not 0 <= st.kind < len(kinds):
            problems.append(f"{label[i]}: no device kind {st.kind}")
        if st.d < 1 or st.t < 1:
            problems.append(f"{label[i]}: degrees d={st.d}, t={st.t} must be >= 1")
        elif N % st.d:
            problems.append(f"{label[i]}: data-parallel degree {st.d} does not divide {N} micro-batches")
        if problem.max_replicas is not None and st.d > problem.max_replicas:
            limits.append(f"{label[i]}: data-parallel degree {st.d} exceeds the maximum "
                          f"{problem.max_replicas}")
    missing = np.flatnonzero(stage_of < 0)
    if missing.size:
        problems.append(f"{missing.size} node(s) in no stage, e.g. {g.ids[int(missing[0])]}")
    if problems:
        return PlanEvaluation(math.inf, (), tuple(problems + limits), contiguous=False)
    problems += limits
    order = None
    split = False
    if g.colocation is not None:
        has = g.colocation >= 0
        labels_c, first = np.unique(g.colocation[has], return_index=True)
        home = np.full(int(labels_c.max()) + 1 if labels_c.size else 0, -1, np.int64)
        home[labels_c] = stage_of[np.flatnonzero(has)[first]]
        off = has & (home[np.where(has, g.colocation, 0)] != stage_of)
        if off.any():
            split = True
            for c in np.unique(g.colocation[off])[:10].tolist():
                members = np.flatnonzero(g.colocation == c)
                where = ", ".join(f"{g.ids[u]}@{label[stage_of[u]]}" for u in members[:6])
                problems.append(f"colocation class {c} is split across stages: {where}")
    if not split:
        back = stage_of[g.src] > stage_of[g.dst]
        if not back.any():
            order = list(range(len(plan)))  # the plan's own order is a pipeline
        else:
            order = _stage_order(g, stage_of, len(plan))
            if problem.contiguous:
                j = int(np.flatnonzero(back)[0])
                problems.append(f"edge {g.ids[g.src[j]]} -> {g.ids[g.dst[j]]} goes from "
                                f"{label[stage_of[g.src[j]]]} back to {label[stage_of[g.dst[j]]]}: the "
                                f"stages are not nested ideals")
    used = np.zeros(len(kinds), np.int64)
    sum_d = 0
    for st in plan:
        used[st.kind] += st.t * st.d
        sum_d += st.d
    for k, kind in enumerate(kinds):
        if used[k] > kind.count:
            problems.append(f"the plan uses {used[k]} {kind.name} devices, there are {kind.count}")
    if sum_d > N:
        problems.append(f"the data-parallel degrees sum to {sum_d} > {N} micro-batches")

    # in flight: the replicas from a stage to the pipeline's end; the pipeline's order where the stages
    # have one (a non-contiguous problem's plan may list them in another), else the plan's own
    rank = order if order is not None else range(len(plan))
    suffix = np.zeros(len(plan), np.int64)
    suffix[list(rank)] = np.cumsum([plan[i].d for i in rank][::-1])[::-1]
    out = []
    unsupported: list[str] = []
    for i, st in enumerate(plan):
        kind = kinds[st.kind]
        nodes = np.asarray(st.nodes, np.int64)
        vi = np.asarray(st.variants, np.int64)
        inside = np.zeros(n, bool)
        inside[nodes] = True
        enter, leave = _crossing(g, inside)
        comm_in = float(g.tensor_time[st.kind, enter].sum())
        comm_out = float(g.tensor_time[st.kind, leave].sum())
        known = (vi >= 0) & (vi < nv)
        safe = np.where(known, vi, 0)
        fits = known & (va["node"][safe] == nodes) & (va["kind"][safe] == st.kind) & (va["t"][safe] == st.t)
        lacking = False
        for j in np.flatnonzero(~fits).tolist():
            u = int(nodes[j])
            if (u, st.kind, st.t) not in g.options:
                lacking = True
                where = label[i] if st.t == 1 else f"{label[i]} split {st.t} ways"
                unsupported.append(f"node {g.ids[u]} is not supported on {where}")
            elif known[j]:
                v = g.variants[int(vi[j])]
                lacking = True  # no time of its own: the stage is not scored (inf), never a part left out
                if v.node != u:
                    problems.append(f"{label[i]}: node {g.ids[u]} is given variant {int(vi[j])} "
                                    f"({v.name!r}), which is node {g.ids[v.node]}'s")
                else:
                    problems.append(f"{label[i]}: node {g.ids[u]} uses its variant {v.name!r} for kind "
                                    f"{kinds[v.kind].name} and t={v.t}, not {kind.name} and t={st.t}")
            else:
                lacking = True
                problems.append(f"{label[i]}: node {g.ids[u]} has no variant chosen"
                                + (f" (variant index {int(vi[j])} is out of range)" if vi[j] >= 0 else ""))
        take = safe[fits]
        time = float(va["time"][take].sum()) + (math.inf if lacking else 0.0)
        t_bwd = float(va["backward_time"][take].sum())
        params = float(va["params"][take].sum())
        a = float(va["a"][take].sum())
        b = float(va["b"][take].sum())
        w = float(va["w"][take].sum())
        for x in take[va["synced"][take]].tolist():
            v = g.variants[x]
            comm_in += sum(t for e, t in v.sync_in.items() if enter[e])
            comm_out += sum(t for e, t in v.sync_out.items() if leave[e])
        comm = comm_in + comm_out
        devices = st.t * st.d
        resync = 4.0 * (st.d - 1) * params / st.d / N / resync_bandwidth(kind, devices) if st.d > 1 else 0.0
        tps = comm / st.d + resync + time / st.d
        y = in_flight(sched, st.d, int(suffix[i]), N)
        weights, stash, peak = stage_memory(sched, y, a, b, w)
        cap = kind.capacity
        if peak > usable_memory(cap):
            flight = f" ({y} micro-batches in flight)" if a else ""
            problems.append(f"{label[i]} needs {peak:.6g} bytes per {kind.name} device{flight} but its "
                            f"capacity is {cap:.6g}")
        out.append(StageEvaluation(st, tps, time / st.d, comm / st.d, resync, y, weights, stash, peak, cap,
                                   devices, time + comm, comm_in / st.d, comm_out / st.d, t_bwd / st.d))
    problems[:0] = _few(unsupported, "unsupported nodes")
    objective = max((s.time_per_sample for s in out), default=0.0)
    return PlanEvaluation(objective, tuple(out), tuple(problems), float(sum(s.latency for s in out)),
                          order is not None, None if order is None else tuple(order))


# ---------------------------------------------------------------------- a plan's devices
def stage_device_numbers(problem: ParallelProblem, plan) -> list[range]:
    """Each stage's devices as cluster device numbers (numbered kind by kind, as
    :meth:`graphs.model.Cluster.devices` does), the kinds' devices taken in stage order."""
    start = [sum(k.count for k in problem.kinds[:i]) for i in range(len(problem.kinds))]
    nxt = [0] * len(problem.kinds)
    out = []
    for st in plan:
        first = start[st.kind] + nxt[st.kind]
        nxt[st.kind] += st.t * st.d
        out.append(range(first, first + st.t * st.d))
    return out


def stage_device_names(problem: ParallelProblem, plan) -> list[list[str]]:
    """Each stage's devices by name, numbered within their kind (``a100:2``) as
    :func:`stage_device_numbers` takes them: what a result file's stages list. A plan that takes more
    devices of a kind than there are gets the numbers after the last (``a100:3`` of 2), not another
    kind's names."""
    out = []
    for st, numbers in zip(plan, stage_device_numbers(problem, plan)):
        first = numbers[0] - sum(k.count for k in problem.kinds[:st.kind])
        out.append([f"{problem.kinds[st.kind].name}:{first + j}" for j in range(len(numbers))])
    return out


def stage_devices(problem: ParallelProblem, plan) -> list[str]:
    """Each stage's devices in a few characters: ``a100:0-3`` for a stage on the first four A100s (``t *
    d`` devices; :func:`stage_device_names`)."""
    return [names[0] if len(names) == 1 else f"{names[0]}-{names[-1].rsplit(':', 1)[1]}"
            for names in stage_device_names(problem, plan)]



# ------------------------------------------------------------ from the one-device-per-stage model
def _output_tensors(graph, cls: np.ndarray, comm: np.ndarray) -> list[tuple[int, list[int], np.ndarray]]:
    """One tensor per operator whose output reaches another node (``cls``: the node of every operator):
    the reference communication, paid once by the sender and once by each receiving stage."""
    ptr, idx = graph.successors_csr()
    tensors = []
    for u in range(graph.num_nodes):
        cons = set(cls[idx[ptr[u]:ptr[u + 1]]].tolist()) - {int(cls[u])}
        if cons:
            tensors.append((int(cls[u]), sorted(cons), comm[:, u]))
    return tensors


def from_opgraph(graph, cluster, *, microbatches: int | None = None) -> tuple[ParallelProblem, np.ndarray]:
    """The pipeline-only problem of an :class:`~graphs.model.OpGraph` on a :class:`~graphs.model.Cluster`
    (no parameter sizes, so no replication: ``max_replicas = 1``): one variant per item and kind that
    runs it, ``B`` = the item's memory, ``A = 0``, the reference communication as tensors. Returns the
    problem and the item of every node."""
    from .contract import contract

    items = contract(graph, cluster)  # the zero-cost merge keeps the optimum (d = t = 1)
    cls = items.node_class
    C = items.num_classes
    compute, comm = graph.costs_for(cluster)
    item_compute = items.class_sums(compute)
    item_backward = items.class_sums(np.where(graph.backward, compute, 0.0))
    item_memory = items.class_sums(graph.memory)
    members = items.members()
    ids = [graph.ids[int(m[0])] if m.size == 1 else "+".join(str(graph.ids[int(u)]) for u in m[:3])
           + ("+..." if m.size > 3 else "") for m in members]
    variants = []
    K = len(cluster.kinds)
    for c in range(C):
        for k in range(K):
            x = float(item_compute[k, c])
            if np.isfinite(x):
                variants.append(Variant(c, k, 1, "vanilla", x, b=float(item_memory[c]),
                                        backward_time=min(float(item_backward[k, c]), x)))
    g = ParallelGraph.build(ids=ids, names=ids, num_kinds=K, edges=np.stack([items.src, items.dst], 1),
                            tensors=_output_tensors(graph, cls, comm), variants=variants, source=graph.source,
                            tensor_edges=False)
    N = microbatches or max(1, cluster.num_devices)
    return ParallelProblem(g, cluster.kinds, N, "1f1b", max_replicas=1), cls


def operator_problem(graph, cluster) -> tuple[ParallelProblem, np.ndarray]:
    """The one-device-per-stage model of an :class:`~graphs.model.OpGraph` on a
    :class:`~graphs.model.Cluster` as a stage problem whose nodes are the graph's operators, nothing
    contracted: one variant per operator and kind that runs it (``B`` its memory, its backward pass's
    time kept apart), its colocation classes, the pipeline order of the forward edges (a backward
    operator without a forward twin orders by its mirrored edges), and any assignment a plan
    (``contiguous = False``: the evaluation says whether it is one). :func:`graphs.evaluate.evaluate`
    is this problem's evaluation, one stage per device. Returns the problem and ``variant[k, u]``, the
    variant of operator ``u`` on kind ``k`` (``-1``: the kind cannot run it)."""
    key = tuple((k.name, bool(k.pays_communication)) for k in cluster.kinds)
    cache = graph.__dict__.setdefault("_operator_graphs", {})  # the graph is immutable: built once per kinds
    if key not in cache:
        cache[key] = _operator_graph(graph, cluster)
    g, var = cache[key]
    return ParallelProblem(g, cluster.kinds, max(1, cluster.num_devices), "1f1b", max_replicas=1,
                           contiguous=False), var


def _operator_graph(graph, cluster) -> tuple[ParallelGraph, np.ndarray]:
    from .contract import colocation_items, order_edges

    n = graph.num_nodes
    compute, comm = graph.costs_for(cluster)
    K = len(cluster.kinds)
    var = np.full((K, n), -1, np.int64)
    variants = []
    bwd = graph.backward
    for u in range(n):
        for k in range(K):
            x = float(compute[k, u])
            if np.isfinite(x):
                var[k, u] = len(variants)
                variants.append(Variant(u, k, 1, "vanilla", x, b=float(graph.memory[u]),
                                        backward_time=x if bwd[u] else 0.0))
    # the pipeline order between operators, by the rule that orders items (colocation classes)
    order = np.stack(order_edges(graph, colocation_items(graph)[0]), 1)
    g = ParallelGraph.build(ids=graph.ids, names=graph.names, num_kinds=K, edges=order,
                            tensors=_output_tensors(graph, np.arange(n), comm), variants=variants,
                            source=graph.source, tensor_edges=False, colocation=graph.colocation)
    var.setflags(write=False)
    return g, var


# ------------------------------------------------------------ back to the one-device-per-stage model
def pipeline_misfit(problem: ParallelProblem, *, contiguous: bool = True) -> str:
    """Why ``problem`` is not exactly the one-device-per-stage pipeline model of :mod:`graphs.evaluate`
    (``''`` when it is): then :func:`to_opgraph` gives an :class:`~graphs.model.OpGraph` and
    :class:`~graphs.model.Cluster` whose contiguous placements are this problem's plans, one device per
    stage, at the same values (``d = t = 1`` stages of one variant each).

    ``contiguous=False`` asks for the model of placements that need not be contiguous: the problem must
    then allow any assignment (``problem.contiguous`` false), and every placement of the graph is a plan.

    It is when: stages must be nested ideals (``contiguous``; need not be, for ``contiguous=False``); no
    colocation classes; every variant has
    ``t = 1``, ``a = 0``, ``w = 0`` and no sync terms (memory ``b`` whatever the schedule or the
    micro-batches in flight; ``params`` only cost a resync at ``d > 1``); each node has at most one variant
    per kind, at least one in all, and the same ``b`` on every kind (a node's memory); the only allowed
    data-parallel degree is 1 (:meth:`ParallelProblem.replica_degrees`); ``N`` is at least the number of
    devices (so ``sum d <= N`` never cuts a plan of one device per stage); and there are a node and a
    device. Any tensors fit (several per producer too): each is one communicating node of the
    :class:`~graphs.model.OpGraph`, paid once by its producer's device and once by every other device
    holding one of its consumers, as a stage pays it."""
    g = problem.graph
    if g.colocation is not None:
        return "the nodes have colocation classes"
    if g.num_nodes == 0:
        return "the graph has no nodes"
    devices = sum(k.count for k in problem.kinds)
    if devices < 1:
        return "there are no devices"
    if problem.replica_degrees() != [1]:
        return f"data-parallel degrees {problem.replica_degrees()} are allowed, not only 1"
    if problem.microbatches < devices:
        return f"{problem.microbatches} micro-batches bound the stages below the {devices} devices"
    va = g.variant_arrays
    if len(g.variants):
        if (va["t"] != 1).any():
            return "some variant is tensor-parallel (t > 1)"
        if (va["a"] != 0).any() or (va["w"] != 0).any():
            return "some variant's memory depends on the micro-batches in flight or weight versions (a, w)"
        if va["synced"].any():
            return "some variant has sync terms"
    if any(len(v) != 1 for v in g.options.values()):
        return "some node has two variants for one kind"
    b: dict[int, float] = {}
    for (u, _, _), (v,) in g.options.items():
        if b.setdefault(u, g.variants[v].b) != g.variants[v].b:
            return f"node {g.ids[u]}'s memory b differs between kinds"
    if len(b) != g.num_nodes:
        return "some node has no variant"
    if contiguous and not problem.contiguous:
        return "the stages need not be nested ideals (contiguous=False)"
    if not contiguous and problem.contiguous:
        return "the stages must be nested ideals (contiguous=True), and these placements need not be"
    return ""


def is_pipeline_model(problem: ParallelProblem) -> bool:
    """Whether ``problem`` is exactly the one-device-per-stage pipeline model (:func:`pipeline_misfit`)."""
    return not pipeline_misfit(problem)


def to_opgraph(problem: ParallelProblem, *, contiguous: bool = True) -> tuple[OpGraph, Cluster]:
    """The :class:`~graphs.model.OpGraph` and :class:`~graphs.model.Cluster` of a problem that is the
    pipeline model (:func:`pipeline_misfit` with ``contiguous`` is ``''``; raises :class:`InputError`
    otherwise).

    Node ``c < n`` of the graph is the problem's node ``c`` (forward; compute its variant's time on each
    kind, ``inf`` where it has none; memory its ``b``; no communication), with the problem's DAG edges
    between them, which alone order the pipeline. Each tensor ``e`` is a backward node ``n + e``
    colocated with its producer (no compute or memory, communication ``tensor_time[:, e]``) with an edge
    to a backward stand-in of each consumer (colocated with it, no costs). Backward edges order nothing,
    so the placements' items are the problem's nodes and their contiguity is the problem's; the graph's
    evaluation charges each tensor as the stage model does. The cluster has the problem's kinds."""
    why = pipeline_misfit(problem, contiguous=contiguous)
    if why:
        raise InputError(f"not the one-device-per-stage pipeline model: {why}", source=problem.graph.source)
    g = problem.graph
    n, M, K = g.num_nodes, g.num_tensors, len(problem.kinds)
    consumers = np.unique(g.tensor_dst)
    stand_in = np.full(n, -1, np.int64)
    stand_in[consumers] = n + M + np.arange(consumers.size)
    total = n + M + consumers.size
    compute = np.zeros((K, total))
    compute[:, :n] = np.inf
    for (u, k, _), (v,) in g.options.items():
        compute[k, u] = g.variants[v].time
    comm = np.zeros((K, total))
    comm[:, n:n + M] = g.tensor_time
    memory = np.zeros(total)
    for (u, _, _), (v,) in g.options.items():
        memory[u] = g.variants[v].b  # the same on every kind (pipeline_misfit)
    edges = [np.stack([g.src, g.dst], 1),
             np.stack([n + np.repeat(np.arange(M), np.diff(g.tensor_ptr)), stand_in[g.tensor_dst]], 1)]
    colocation = np.concatenate([np.arange(n), g.tensor_src, consumers])
    backward = np.arange(total) >= n
    names = [f"v{u}" for u in range(n)] + [f"t{e}" for e in range(M)] + [f"r{u}" for u in consumers.tolist()]
    # ids: the problem's node each graph node belongs to (a tensor to its producer, a stand-in to its
    # consumer), so that what the pipeline solvers say of a node names the problem's node
    ids = [g.ids[u] for u in np.concatenate([np.arange(n), g.tensor_src, consumers]).tolist()]
    graph = OpGraph.build(names=names, ids=ids, kinds=[k.name for k in problem.kinds], compute=compute,
                          comm=comm, memory=memory, edges=np.concatenate(edges), backward=backward,
                          colocation=colocation, source=g.source)
    return graph, Cluster(problem.kinds)


def plan_of_assignment(problem: ParallelProblem, cluster: Cluster, device_of: np.ndarray) -> list[Stage]:
    """The stage plan of a placement of :func:`to_opgraph`'s graph (``device_of``: the device of every
    node of the problem, the graph's first ``n`` nodes): one ``d = t = 1`` stage per used device, each
    node on its only variant for that device's kind, the stages in a pipeline order (Kahn's over the
    problem's DAG edges; any order when the placement is not contiguous, which the evaluation reports)."""
    g = problem.graph
    device_of = np.asarray(device_of, np.int64)[:g.num_nodes]
    used, stage_of = np.unique(device_of, return_inverse=True)
    order = _stage_order(g, stage_of.astype(np.int64), used.size) or list(range(used.size))
    dkind = cluster.device_kind()
    plan = []
    for i in order:
        nodes = np.flatnonzero(stage_of == i).tolist()
        k = int(dkind[used[i]])
        plan.append(Stage(tuple(nodes), k, 1, 1, tuple(g.options.get((u, k, 1), (-1,))[0] for u in nodes)))
    return plan
