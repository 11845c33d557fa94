"""Pipeline simulation, event by event: what a placement or a replicated stage plan does with a stream of
micro-batches.

**The engine** (:func:`run_actions`). As ``torch.distributed.pipelining`` writes a schedule, every lane
(a device; with overlap one engine of a device) has an ordered list of :class:`Action` s (forward or
backward of micro-batch ``m``, or a part of one, or a stage's parameter all-reduce), and the actions
wait for one another across lanes (the data dependencies). A lane runs its actions one at a time in
its order; an action starts as soon as the lane's previous action and everything it waits for have
finished, and an action on several lanes (the all-reduce of a stage's replicas) is a collective that
starts when all of them reach it. The two simulations below only build action lists and read their
reports from the engine's timeline.

**One device per stage** (:func:`simulate`, :func:`simulate_costs`). Each used device is one pipeline
stage (stages numbered in the evaluator's stage order). For one micro-batch a stage runs a **forward
task** (its forward nodes) and, in training, a **backward task**; each task is three parts on the
device: *receive* (the ``comm_in`` of the task's inputs), *compute* and *send* (the ``comm_out`` of its
outputs). The parts cost exactly what :mod:`graphs.evaluate` charges, split by phase: a sent tensor
belongs to the phase of the node that produces it, a received one to the phase of the first node on the
receiving device that reads it. So a stage's forward plus backward task per micro-batch is its
**load**, and the dependencies between tasks are the graph's edges between devices (a task waits for
the *send* of every task it receives from; a stage's backward waits for its own forward).

Schedules (the order in which a device runs its tasks):

``stream``
    inference: every stage runs micro-batch 0, 1, 2, ... as soon as its inputs arrive.
``gpipe``
    training: every stage runs all forwards, then all backwards (micro-batches in order), then the
    pipeline is flushed.
``1f1b``
    training (PipeDream-flush / Megatron's non-interleaved schedule): stage ``s`` of ``S`` runs
    ``min(S - s - 1, M)`` warm-up forwards, then alternates one forward and one backward, then drains
    the remaining backwards.

Without overlap a device does one thing at a time (receive, compute, send in sequence: one lane), which
is the max-load model: the steady-state time per sample of ``stream`` and ``1f1b`` is the max-load; that
of ``gpipe`` can be more (up to the largest forward plus the largest backward stage time: its two
phases are separated, so their bottlenecks add when they sit on different stages).

With ``overlap=True`` each device has three engines (three lanes) working at once, each in the
schedule's order: one receives, one computes, one sends (a full-duplex link with its own copy engines,
as on GPUs). That only removes waits, so it is never slower; in ``stream`` a stage's time per sample
drops to ``max(comm_in, compute, comm_out)`` (in ``1f1b`` the in-flight limit can keep a round trip of
transfers on the critical path).

Reported (:class:`Simulation`): the makespan of ``M`` micro-batches (one batch, flushed at the end),
time per sample and throughput of that batch, the steady-state time per sample (the period the
schedule settles into as ``M`` grows: the cycle time of its timed event graph, see
:func:`steady_period`), the single-sample latency (one micro-batch alone), the bubble fraction (idle
share of the stages' time), each stage's utilisation (busy time / wall time: the "GPU utilisation")
and, in training, the peak number of micro-batches whose activations a stage holds at once (forward
compute started, backward compute not finished) and the bytes that takes when stash sizes are known.
A placement whose devices cannot be ordered as a pipeline (a cycle between devices: not contiguous)
raises :class:`~graphs.errors.InputError` saying which devices form the cycle.

**Replicated stage plans** (:func:`simulate_plan`, a plan of :mod:`graphs.parallel`): every replica of
every stage is a lane running its micro-batches under the plan's schedule, batch after batch.

*Work.* A micro-batch is ``b`` samples (``samples_per_microbatch``: 1 for a Piper file, whose
micro-batch is its unit of samples; an ONNX model's batch size, a micro-batch being one run of the
model; an LLM's sequences per micro-batch, one token each), and the evaluator's terms are per sample.
Replica ``r`` of stage ``i`` (``d_i`` replicas) runs the micro-batches ``m`` with ``m mod d_i = r``
(round robin; ``d_i`` divides ``N``). Per micro-batch it is busy ``b * d_i * (compute + comm)`` of the
evaluator's per-sample terms (the stage's whole compute, crossing tensors and sync terms: a replica
does all of it for the micro-batches it takes), one action per task, not split into parts: a forward
(``forward_fraction`` of it, a third by default; all of it for inference) and a backward (the rest).
After its last backward of a batch, each replica joins the stage's parameter all-reduce: a collective
that lasts ``b * N * resync`` (the evaluator's per-sample resync, paid once per batch).

*Dependencies.* A stage's forward of ``m`` waits for the forward of ``m`` of every earlier stage that
sends it a tensor; its backward of ``m`` waits for its own forward of ``m`` and for the backward of
``m`` of every later stage it sends a tensor to (the gradient coming back).

*Schedules* (each replica's action order; ``y_i = ceil(s_i / d_i)``, ``s_i`` the sum of ``d`` from
stage ``i`` on, is PipeDream's number of micro-batches admitted per replica):

* ``gpipe``: per batch, the forwards of all its micro-batches, then their backwards, then the
  all-reduce; the next batch starts after it (a flush);
* ``1f1b`` (PipeDream-Flush): per batch, ``y_i`` forwards, then one backward and one forward
  alternately, then the remaining backwards, then the all-reduce (a flush); at ``d = 1`` this is the
  one-device-per-stage ``1f1b`` order (``y_i = S - i``);
* ``pipedream``, ``2bw``: the same one-forward-one-backward order run continuously across batches (no
  flush: the next batch's forwards proceed on stashed or double-buffered weights), the all-reduce
  after each batch's last backward;
* ``stream`` (inference, forwards only): each replica's forwards in order, batch after batch, no
  backward, no all-reduce, nothing stashed (one micro-batch in flight while it runs).

*Measured* (:class:`ReplicatedSimulation`). The makespan of ``batches`` batches (``batches * N * b``
samples) and the time per sample over them; the *period* (the spacing of the slowest stage's
all-reduces over the later batches, per sample: what the schedule sustains, flushes and fill included);
each replica's busy time per sample in a batch, whose maximum is the *bottleneck*, which is exactly the
evaluator's time per sample (the model counts no bubble); the bubble (the share of the period the
bottleneck device idles); the *latency* of one micro-batch alone in the pipeline (each replica takes it
whole, a stage starts when the stages sending to it are done; no all-reduce), which for stages in a
chain is the evaluator's latency times ``b`` (``model_latency``) and below it where stages run side by
side. For memory, each
replica's peak number of micro-batches in flight (forwards started minus backwards finished, counted
along its action order), with which the evaluator's formula (``A*y + B`` plus the schedule's extra
weight versions) gives its peak bytes.

Under every schedule the bottleneck and each stage's peak ``y`` (so its peak memory) are the
evaluator's. The period is never below the bottleneck: it adds the flush's fill and drain under
``gpipe`` and ``1f1b``, and under ``pipedream`` and ``2bw`` it equals the bottleneck unless the ``y_i``
micro-batches a replica may hold do not cover their round trip through the later stages (Piper's
in-flight count assumes they do; with unequal stages and a per-batch all-reduce they sometimes do not,
and the simulation shows by how much).

Nothing here prints.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from graphs.errors import InputError
from graphs.evaluate import check_assignment
from graphs.evaluate import evaluate as _evaluate
from graphs.model import Cluster, OpGraph
from graphs.parallel import SCHEDULES as _PARALLEL_SCHEDULES
from graphs.parallel import (
    ParallelProblem,
    Stage,
    evaluate_plan,
    in_flight,
    stage_memory,
    weight_versions,
)

__all__ = ["SCHEDULES", "Action", "Timeline", "run_actions", "StageCosts", "Task", "StageReport",
           "Simulation", "stage_costs", "simulate", "simulate_costs", "steady_period", "default_schedule",
           "stash_bytes_of", "PLAN_SCHEDULES", "ReplicaReport", "ReplicaTask", "StageSimulation",
           "ReplicatedSimulation", "simulate_plan", "stage_links", "default_batches"]

SCHEDULES = ("stream", "gpipe", "1f1b")
FORWARD, BACKWARD = "F", "B"
RECV, COMPUTE, SEND = "recv", "compute", "send"


# --------------------------------------------------------------------------- the engine
class Action(NamedTuple):
    """One entry of a lane's action list, named the way ``torch.distributed.pipelining`` names a
    schedule's actions (``F0``, ``B0``...): of stage ``stage``, ``kind`` ``"F"`` (forward), ``"B"``
    (backward) or ``"R"`` (the stage's parameter all-reduce), ``index`` the micro-batch (for ``"R"``
    the batch), ``part`` the part of a task split in three (``"recv"``, ``"compute"``, ``"send"``) or
    ``""`` for a whole task."""

    stage: int
    kind: str
    index: int
    part: str = ""

    def __str__(self) -> str:  # "1F0": stage 1's forward of micro-batch 0; "1F0.send": its send
        return f"{self.stage}{self.kind}{self.index}" + (f".{self.part}" if self.part else "")


@dataclass(frozen=True, eq=False)
class Timeline:
    """What :func:`run_actions` returns: every action's start and finish."""

    start: dict[Action, float]
    finish: dict[Action, float]

    @property
    def makespan(self) -> float:
        return max(self.finish.values(), default=0.0)


def run_actions(lanes: Mapping[Hashable, Sequence[Action]], duration: Mapping[Action, float],
                after: Mapping[Action, Sequence[Action]]) -> Timeline:
    """Run action lists event by event. ``lanes``: per lane (a device, or one engine of a device), the
    actions it runs, one at a time, in that order; an action on several lanes is a **collective** (an
    all-reduce): it starts when every one of them has reached it and occupies them all while it runs.
    ``duration``: every action's; ``after``: per action, the actions (on any lane) whose finish it
    waits for (the data dependencies). So an action starts at the moment its lanes' previous actions
    and all its dependencies have finished, and ends ``duration`` later. :class:`InputError` when the
    lists deadlock (actions wait on each other) or a dependency is on no lane."""
    index: dict[Action, int] = {}
    acts: list[Action] = []
    for seq in lanes.values():
        for a in seq:
            if a not in index:
                index[a] = len(acts)
                acts.append(a)
    T = len(acts)
    waits = [0] * T
    dependents: list[list[int]] = [[] for _ in range(T)]
    for seq in lanes.values():
        for a, b in zip(seq, seq[1:]):
            dependents[index[a]].append(index[b])
            waits[index[b]] += 1
    for b, deps in after.items():
        j = index[b]
        for a in deps:
            i = index.get(a)
            if i is None:
                raise InputError(f"action {b} waits for {a}, which no lane runs")
            dependents[i].append(j)
            waits[j] += 1
    dur = [float(duration[a]) for a in acts]
    start = [0.0] * T
    finish = [0.0] * T
    # events: (finish time, action); popped in time order, so an action whose last wait ends while
    # the clock reads `now` starts at `now`, the latest finish among what it waited for
    events: list[tuple[float, int]] = []
    for i in range(T):
        if not waits[i]:
            finish[i] = dur[i]
            events.append((finish[i], i))
    heapq.heapify(events)
    done = 0
    while events:
        now, i = heapq.heappop(events)
        done += 1
        for j in dependents[i]:
            waits[j] -= 1
            if not waits[j]:
                start[j] = now
                finish[j] = now + dur[j]
                heapq.heappush(events, (finish[j], j))
    if done < T:
        raise InputError(f"the schedule deadlocks: {T - done} action(s) wait on each other")
    return Timeline(dict(zip(acts, start)), dict(zip(acts, finish)))


# --------------------------------------------------------------------------- per-stage costs
@dataclass(frozen=True)
class StageCosts:
    """One stage's costs per micro-batch, split by phase, and whom it exchanges data with.

    ``deps``: ``(phase, source stage, phase of this stage)`` triples: this stage's task of that phase
    receives from the source stage's task of that phase (stage numbers are positions in the stage
    order)."""

    stage: int
    device: int
    name: str
    kind: str
    compute_f: float
    compute_b: float
    comm_in_f: float
    comm_in_b: float
    comm_out_f: float
    comm_out_b: float
    stash_bytes: float | None = None  # bytes stashed per micro-batch (training), None = unknown
    deps: tuple[tuple[str, int, str], ...] = ()

    @property
    def forward(self) -> float:
        return self.comm_in_f + self.compute_f + self.comm_out_f

    @property
    def backward(self) -> float:
        return self.comm_in_b + self.compute_b + self.comm_out_b

    @property
    def load(self) -> float:
        return self.forward + self.backward

    @property
    def compute(self) -> float:
        return self.compute_f + self.compute_b

    @property
    def comm(self) -> float:
        return self.comm_in_f + self.comm_in_b + self.comm_out_f + self.comm_out_b


def stash_bytes_of(graph: OpGraph) -> np.ndarray | None:
    """Bytes each node stashes per micro-batch for its backward pass, when the graph says (the ONNX
    front end's ``meta["output_bytes"]`` of the forward nodes of a training graph), else ``None``."""
    out = graph.meta.get("stash_bytes")
    if out is not None and len(out) == graph.num_nodes:
        return np.asarray(out, dtype=np.float64)
    ob = graph.meta.get("output_bytes")
    if not graph.is_training or ob is None:
        return None
    fwd = np.flatnonzero(~graph.backward)
    if len(ob) != len(fwd):
        return None
    s = np.zeros(graph.num_nodes)
    s[fwd] = np.asarray(ob, dtype=np.float64)
    return s


def stage_costs(graph: OpGraph, cluster: Cluster, assignment, *, stash_bytes=None) -> tuple[StageCosts, ...]:
    """The per-stage, per-phase costs of a placement, in stage order (used devices only).

    The phases' costs add up to the evaluator's compute, ``comm_in`` and ``comm_out`` of every device.
    ``stash_bytes``: per-node bytes stashed for the backward pass (default :func:`stash_bytes_of`).
    Raises :class:`InputError` when the placement cannot run as a pipeline (its devices depend on one
    another in a cycle, or a colocation class is split)."""
    a = check_assignment(graph, cluster, assignment)
    ev = _evaluate(graph, cluster, a)
    order = _pipeline_order(graph, cluster, a, ev)
    stage_of = {d: i for i, d in enumerate(order)}
    compute_c, comm_c = graph.costs_for(cluster)
    dkind = cluster.device_kind()
    n = graph.num_nodes
    node_compute = compute_c[dkind[a], np.arange(n)]
    bwd = graph.backward
    if stash_bytes is None:
        stash = stash_bytes_of(graph)
    else:
        stash = np.asarray(stash_bytes, dtype=np.float64).reshape(-1)
        if stash.shape != (n,):
            raise InputError(f"stash_bytes needs one value per node ({n}), got {stash.shape[0]}",
                             source=graph.source)

    s, d = graph.src, graph.dst
    cross = a[s] != a[d]
    cs, cd = s[cross], d[cross]
    # receiving phase of (node u, device r): forward if any forward reader of u sits on r
    recv_phase: dict[tuple[int, int], str] = {}
    for u, v in zip(cs.tolist(), cd.tolist()):
        key = (u, int(a[v]))
        ph = BACKWARD if bwd[v] else FORWARD
        if recv_phase.get(key) != FORWARD:
            recv_phase[key] = ph
    D = cluster.num_devices
    out_cost = {FORWARD: np.zeros(D), BACKWARD: np.zeros(D)}
    in_cost = {FORWARD: np.zeros(D), BACKWARD: np.zeros(D)}
    for u in np.unique(cs).tolist():
        out_cost[BACKWARD if bwd[u] else FORWARD][a[u]] += comm_c[dkind[a[u]], u]
    deps: dict[int, set] = {dev: set() for dev in order}
    for (u, r), ph in recv_phase.items():
        in_cost[ph][r] += comm_c[dkind[r], u]
        deps[r].add((BACKWARD if bwd[u] else FORWARD, stage_of[int(a[u])], ph))

    stages = []
    for dev in order:
        on = a == dev
        sb = None if stash is None else float(stash[on & ~bwd].sum())
        stages.append(StageCosts(
            stage=stage_of[dev], device=int(dev), name=cluster.device_name(int(dev)),
            kind=cluster.kinds[int(dkind[dev])].name,
            compute_f=float(node_compute[on & ~bwd].sum()), compute_b=float(node_compute[on & bwd].sum()),
            comm_in_f=float(in_cost[FORWARD][dev]), comm_in_b=float(in_cost[BACKWARD][dev]),
            comm_out_f=float(out_cost[FORWARD][dev]), comm_out_b=float(out_cost[BACKWARD][dev]),
            stash_bytes=sb if graph.is_training else None, deps=tuple(sorted(deps[dev]))))
    return tuple(stages)


def _pipeline_order(graph: OpGraph, cluster: Cluster, a: np.ndarray, ev) -> list[int]:
    """Used devices in an order in which every (phase, device) task only waits for earlier ones."""
    used = sorted(set(a.tolist()))
    if any("colocation class" in p for p in ev.problems):
        raise InputError("cannot simulate: a colocation class is split across devices "
                         f"({next(p for p in ev.problems if 'colocation class' in p)})", source=graph.source)
    if any(not math.isfinite(dl.load) for dl in ev.devices if len(dl.nodes)):
        bad = next(p for p in ev.problems if "not supported" in p) if ev.problems else "infinite load"
        raise InputError(f"cannot simulate: {bad}", source=graph.source)
    if ev.stage_order is not None:
        return list(ev.stage_order)
    # not contiguous: name a cycle between devices
    s, d = graph.src, graph.dst
    fwd = ~graph.backward[s] & ~graph.backward[d] & (a[s] != a[d])
    succ: dict[int, set] = {u: set() for u in used}
    for x, y in zip(a[s[fwd]].tolist(), a[d[fwd]].tolist()):
        succ[x].add(y)
    cycle = _find_cycle(succ)
    names = " -> ".join(cluster.device_name(x) for x in cycle + cycle[:1]) if cycle else "(unknown)"
    raise InputError(f"cannot simulate a pipeline: the placement is not contiguous; its devices feed one "
                     f"another in a cycle ({names}), so no device order lets every micro-batch flow "
                     f"forward. Place with the DP (contiguous) or split such a device into several "
                     f"stages", source=graph.source)


def _find_cycle(succ: dict[int, set]) -> list[int]:
    color: dict[int, int] = {}
    stack_path: list[int] = []

    def dfs(u):
        color[u] = 1
        stack_path.append(u)
        for v in sorted(succ.get(u, ())):
            if color.get(v) == 1:
                return stack_path[stack_path.index(v):]
            if v not in color:
                r = dfs(v)
                if r:
                    return r
        stack_path.pop()
        color[u] = 2
        return None

    for u in sorted(succ):
        if u not in color:
            r = dfs(u)
            if r:
                return list(r)
    return []


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Task:
    """One part of one stage's work on one micro-batch, as scheduled."""

    stage: int
    phase: str  # "F" or "B"
    microbatch: int
    part: str  # "recv", "compute" or "send"
    engine: str  # "main" (no overlap: everything) or, with overlap, "recv", "compute" or "send"
    start: float
    finish: float

    @property
    def duration(self) -> float:
        return self.finish - self.start


@dataclass(frozen=True)
class StageReport:
    """A stage's share of the simulated schedule."""

    stage: int
    name: str
    kind: str
    load: float  # per micro-batch, as the evaluator counts it
    busy: float  # time the device is occupied (no overlap: compute + comm; overlap: its compute engine)
    compute: float  # time it computes
    utilisation: float  # busy / makespan
    compute_utilisation: float  # compute / makespan
    peak_stashed: int | None  # training: most micro-batches whose activations it holds at once
    peak_stash_bytes: float | None  # peak_stashed x stash bytes per micro-batch (None: unknown)


@dataclass(frozen=True, eq=False)
class Simulation:
    """A simulated pipeline schedule (see the module doc); times in the graph's unit."""

    schedule: str
    microbatches: int
    overlap: bool
    tasks: tuple[Task, ...]
    stages: tuple[StageReport, ...]
    makespan: float
    time_per_sample: float  # makespan / microbatches (the batch, fill and drain included)
    steady_time_per_sample: float  # the period of the steady state (many micro-batches)
    latency: float  # one micro-batch alone, end to end
    bubble_fraction: float  # 1 - sum(busy) / (stages * makespan)
    max_load: float  # the evaluator's objective (the largest stage load)

    @property
    def throughput(self) -> float:
        """Micro-batches per time unit over the batch (micro-batches / makespan): samples where a
        micro-batch is one sample; an ONNX model's micro-batch is one run of its batch."""
        return self.microbatches / self.makespan if self.makespan > 0 else math.inf

    @property
    def steady_throughput(self) -> float:
        return 1.0 / self.steady_time_per_sample if self.steady_time_per_sample > 0 else math.inf

    def summary(self, samples_per_microbatch: int = 1) -> dict:
        """Plain numbers for JSON output. ``samples_per_microbatch``: samples in one micro-batch (an ONNX
        model's batch size: a micro-batch is one run of it), so that ``time_per_sample`` and
        ``throughput`` are per sample, as a stage plan's simulation gives them; ``time_per_microbatch``
        and ``steady_time_per_microbatch`` are per run, and ``latency`` (also as
        ``latency_per_microbatch``, the stage plan's key), ``max_load`` and each stage's ``load`` are per
        micro-batch. ``throughput`` and ``steady_throughput`` are samples per time unit (``placement show
        --json`` adds them per second, ``samples_per_s`` and ``steady_samples_per_s``, where the unit is
        known)."""
        def num(x):
            return x if x is None or math.isfinite(x) else None

        b = int(samples_per_microbatch)
        return {
            "schedule": self.schedule, "microbatches": self.microbatches, "overlap": self.overlap,
            "samples_per_microbatch": b, "makespan": self.makespan,
            "time_per_sample": self.time_per_sample / b, "throughput": num(self.throughput * b),
            "steady_time_per_sample": self.steady_time_per_sample / b,
            "steady_throughput": num(self.steady_throughput * b),
            "time_per_microbatch": self.time_per_sample,
            "steady_time_per_microbatch": self.steady_time_per_sample, "latency": self.latency,
            "latency_per_microbatch": num(self.latency),
            "bubble_fraction": self.bubble_fraction, "max_load": self.max_load,
            "stages": [{"stage": r.stage, "name": r.name, "kind": r.kind, "load": r.load, "busy": r.busy,
                        "compute": r.compute, "utilisation": r.utilisation,
                        "compute_utilisation": r.compute_utilisation, "peak_stashed": r.peak_stashed,
                        "peak_stash_bytes": r.peak_stash_bytes} for r in self.stages],
        }


# --------------------------------------------------------------------------- entry points
def default_schedule(training: bool) -> str:
    return "1f1b" if training else "stream"


def simulate(graph: OpGraph, cluster: Cluster, assignment, *, schedule: str | None = None,
             microbatches: int = 8, overlap: bool = False, stash_bytes=None) -> Simulation:
    """Simulate the placement ``assignment`` of ``graph`` on ``cluster`` (see the module doc).
    ``schedule``: ``stream`` (default for inference), ``gpipe`` or ``1f1b`` (default for training)."""
    stages = stage_costs(graph, cluster, assignment, stash_bytes=stash_bytes)
    return simulate_costs(stages, schedule=schedule or default_schedule(graph.is_training),
                          microbatches=microbatches, overlap=overlap)


def simulate_costs(stages: Sequence[StageCosts], *, schedule: str = "stream", microbatches: int = 8,
                   overlap: bool = False) -> Simulation:
    """Simulate given per-stage costs (in stage order; ``deps`` say who feeds whom)."""
    if schedule not in SCHEDULES:
        raise InputError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, (int, np.integer)) or microbatches < 1:
        raise InputError(f"the number of micro-batches must be a positive integer, got {microbatches!r}")
    stages = tuple(stages)
    if not stages:
        raise InputError("nothing to simulate: the placement uses no device")
    training = any(st.compute_b > 0 or st.comm_in_b > 0 or st.comm_out_b > 0 for st in stages)
    if schedule == "stream" and training:
        raise InputError("the 'stream' schedule is for inference; this placement has a backward pass "
                         "(choose gpipe or 1f1b)")
    M = int(microbatches)
    tasks, makespan = _run(stages, schedule, M, overlap)
    steady = steady_period(stages, schedule, overlap)
    latency = _run(stages, schedule, 1, overlap)[1]

    reports = []
    busy_total = 0.0
    by_stage: dict[int, list[Task]] = {st.stage: [] for st in stages}
    for t in tasks:  # one pass (a scan of every task per stage grew as stages x tasks)
        by_stage[t.stage].append(t)
    for st in stages:
        mine = by_stage[st.stage]
        comp = sum(t.duration for t in mine if t.part == COMPUTE)
        busy = comp if overlap else sum(t.duration for t in mine)
        busy_total += busy
        peak = _peak_stashed(mine) if schedule != "stream" else None
        reports.append(StageReport(
            stage=st.stage, name=st.name, kind=st.kind, load=st.load, busy=busy, compute=comp,
            utilisation=busy / makespan if makespan > 0 else 0.0,
            compute_utilisation=comp / makespan if makespan > 0 else 0.0,
            peak_stashed=peak,
            peak_stash_bytes=(None if peak is None or st.stash_bytes is None else peak * st.stash_bytes)))
    bubble = 1.0 - busy_total / (len(stages) * makespan) if makespan > 0 else 0.0
    return Simulation(schedule=schedule, microbatches=M, overlap=overlap, tasks=tuple(tasks),
                      stages=tuple(reports), makespan=makespan, time_per_sample=makespan / M,
                      steady_time_per_sample=steady, latency=latency, bubble_fraction=bubble,
                      max_load=max(st.load for st in stages))


def _peak_stashed(tasks: list[Task]) -> int:
    """Most micro-batches held at once: from the start of their forward compute to the end of their
    backward compute."""
    events = []
    for t in tasks:
        if t.part != COMPUTE:
            continue
        if t.phase == FORWARD:
            events.append((t.start, 1))
        else:
            events.append((t.finish, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # a release at the same instant comes first
    cur = peak = 0
    for _, dlt in events:
        cur += dlt
        peak = max(peak, cur)
    return peak


# --------------------------------------------------------------------------- the pipeline's action lists
def _device_order(schedule: str, S: int, s: int, M: int, training: bool) -> list[tuple[str, int]]:
    """(phase, micro-batch) in the order stage ``s`` of ``S`` runs them (1F1B admits ``S - s``
    micro-batches before its first backward)."""
    if not training:
        return [(FORWARD, m) for m in range(M)]
    return _flushed_order(schedule, list(range(M)), S - s)


def _engine_of(part: str, overlap: bool) -> str:
    return part if overlap else "main"


def _run(stages: tuple[StageCosts, ...], schedule: str, M: int, overlap: bool) -> tuple[list[Task], float]:
    """The action lists of the schedule (one lane per device, or per engine with overlap), run by
    :func:`run_actions`; return the tasks with their times (in stage, then schedule order) and the
    makespan."""
    S = len(stages)
    training = schedule != "stream"
    phases = (FORWARD, BACKWARD) if training else (FORWARD,)
    lanes: dict[tuple[int, str], list[Action]] = {}
    duration: dict[Action, float] = {}
    for st in stages:
        for ph, m in _device_order(schedule, S, st.stage, M, training):
            for part in (RECV, COMPUTE, SEND):
                act = Action(st.stage, ph, m, part)
                lanes.setdefault((st.stage, _engine_of(part, overlap)), []).append(act)
                duration[act] = _duration(st, ph, part)
    after: dict[Action, list[Action]] = {}
    for st in stages:
        for ph in phases:
            for m in range(M):
                r, c, snd = (Action(st.stage, ph, m, p) for p in (RECV, COMPUTE, SEND))
                after[c] = [r]
                after[snd] = [c]
                after[r] = waits = []
                if ph == BACKWARD:
                    waits.append(Action(st.stage, FORWARD, m, COMPUTE))
                for src_ph, src, my_ph in st.deps:
                    if my_ph == ph and src_ph in phases:
                        waits.append(Action(src, src_ph, m, SEND))
    try:
        tl = run_actions(lanes, duration, after)
    except InputError as e:  # stage costs in a valid stage order cannot deadlock
        raise RuntimeError(f"pipeline simulation deadlocked (the schedule contradicts the data flow): "
                           f"{e}") from e
    tasks = [Task(a.stage, a.kind, a.index, a.part, _engine_of(a.part, overlap), tl.start[a], tl.finish[a])
             for a in duration]
    return tasks, tl.makespan


def _duration(st: StageCosts, phase: str, part: str) -> float:
    f = phase == FORWARD
    if part == RECV:
        return st.comm_in_f if f else st.comm_in_b
    if part == COMPUTE:
        return st.compute_f if f else st.compute_b
    return st.comm_out_f if f else st.comm_out_b


# --------------------------------------------------------------------------- the steady state
def steady_period(stages: Sequence[StageCosts], schedule: str, overlap: bool = False) -> float:
    """The time per sample of the schedule's steady state (infinitely many micro-batches): the cycle
    time of its timed event graph, i.e. the largest ratio (work on a cycle) / (micro-batches in flight
    on it) over the cycles formed by data dependencies and each engine's periodic order. ``gpipe``
    separates its phases: its limit is the largest ``forward rate + backward time`` along the backward
data flow (see :func:`_gpipe_limit`)."""
    stages = tuple(stages)
    if schedule == "gpipe":
        return _gpipe_limit(stages, overlap)
    return _cycle_time(stages, (FORWARD, BACKWARD) if schedule == "1f1b" else (FORWARD,), overlap)


def _gpipe_limit(stages: tuple[StageCosts, ...], overlap: bool) -> float:
    """``lim makespan(M) / M`` of GPipe. A stage's forwards run at the pace of its slowest forward
    ancestor, ``rate(u) = max busy_F(w)`` over the stages ``w`` whose forward feeds ``u``'s (``u``
    included); its backwards start when its forwards are done and run at its own backward time, and a
    stage's backward waits for every backward that feeds it. So the limit is the largest
    ``rate(u) + busy_B(v)`` over pairs where ``u``'s backward feeds ``v``'s (``u = v`` included)."""
    def busy(st, ph):
        parts = [_duration(st, ph, p) for p in (RECV, COMPUTE, SEND)]
        return max(parts) if overlap else sum(parts)

    S = len(stages)
    feeds = {FORWARD: [[s] for s in range(S)], BACKWARD: [[s] for s in range(S)]}  # predecessors
    for st in stages:
        for src_ph, src, my_ph in st.deps:
            if src_ph == my_ph:
                feeds[my_ph][st.stage].append(src)

    def closure(ph):  # anc[v] = stages whose phase-ph work feeds v's, v included
        anc = [set(feeds[ph][v]) for v in range(S)]
        changed = True
        while changed:
            changed = False
            for v in range(S):
                new = set().union(*(anc[u] for u in anc[v]))
                if new - anc[v]:
                    anc[v] |= new
                    changed = True
        return anc

    anc_f, anc_b = closure(FORWARD), closure(BACKWARD)
    rate = [max(busy(stages[w], FORWARD) for w in anc_f[u]) for u in range(S)]
    return max(rate[u] + busy(stages[v], BACKWARD) for v in range(S) for u in anc_b[v])


def _cycle_time(stages: tuple[StageCosts, ...], phases: tuple[str, ...], overlap: bool) -> float:
    S = len(stages)
    node: dict[tuple, int] = {}
    weight: list[float] = []
    for st in stages:
        for ph in phases:
            for part in (RECV, COMPUTE, SEND):
                node[(st.stage, ph, part)] = len(weight)
                weight.append(_duration(st, ph, part))
    edges: list[tuple[int, int, int]] = []  # (from, to, tokens): to(m) >= from(m - tokens) + weight[from]
    for st in stages:
        for ph in phases:
            edges.append((node[(st.stage, ph, RECV)], node[(st.stage, ph, COMPUTE)], 0))
            edges.append((node[(st.stage, ph, COMPUTE)], node[(st.stage, ph, SEND)], 0))
            for src_ph, src, my_ph in st.deps:
                if my_ph == ph and src_ph in phases:
                    edges.append((node[(src, src_ph, SEND)], node[(st.stage, ph, RECV)], 0))
        if len(phases) == 2:
            edges.append((node[(st.stage, FORWARD, COMPUTE)], node[(st.stage, BACKWARD, RECV)], 0))
        # one period of each engine: stream F(p); 1F1B F(p + warm-up), B(p)
        warm = S - st.stage - 1
        period = [(FORWARD, warm), (BACKWARD, 0)] if len(phases) == 2 else [(phases[0], 0)]
        seqs: dict[str, list[tuple[int, int]]] = {}
        for ph, off in period:
            for part in (RECV, COMPUTE, SEND):
                seqs.setdefault(_engine_of(part, overlap), []).append((node[(st.stage, ph, part)], off))
        for seq in seqs.values():
            for (a, oa), (b, ob) in zip(seq, seq[1:]):
                edges.append((a, b, ob - oa))
            (a, oa), (b, ob) = seq[-1], seq[0]
            edges.append((a, b, ob + 1 - oa))
    e = np.array(edges, dtype=np.float64).reshape(-1, 3)
    src, dst, tok = e[:, 0].astype(np.int64), e[:, 1].astype(np.int64), e[:, 2]
    w = np.asarray(weight)[src]
    V = len(weight)

    def positive_cycle(lam: float) -> bool:
        cost = w - lam * tok
        dist = np.zeros(V)
        tol = 1e-12 * (1.0 + float(np.abs(cost).sum()))
        for _ in range(V + 1):
            cand = np.full(V, -np.inf)
            np.maximum.at(cand, dst, dist[src] + cost)
            new = np.maximum(dist, cand)
            if not (new > dist + tol).any():
                return False
            dist = new
        return True

    # lower bound: the busiest engine (its own cycle); usually the answer
    busy: dict[tuple[int, str], float] = {}
    for (stg, _ph, part), i in node.items():
        k = (stg, _engine_of(part, overlap))
        busy[k] = busy.get(k, 0.0) + weight[i]
    lo = max(busy.values(), default=0.0)
    if not positive_cycle(lo * (1 + 1e-12)):
        return lo
    hi = float(sum(weight)) + 1.0
    if positive_cycle(hi):
        raise RuntimeError("the schedule deadlocks: a dependency cycle holds no micro-batch")
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if positive_cycle(mid):
            lo = mid
        else:
            hi = mid
    return hi


# --------------------------------------------------------------------------- replicated stage plans
#: a stage plan's schedules: the training schedules of :mod:`graphs.parallel` and inference's ``stream``
#: (every replica runs its forwards one after the other, batch after batch, nothing to flush or
#: all-reduce)
PLAN_SCHEDULES = _PARALLEL_SCHEDULES + ("stream",)
_FLUSH = ("gpipe", "1f1b")


@dataclass(frozen=True)
class ReplicaReport:
    """One replica's share of a simulated stage plan."""

    stage: int
    replica: int
    busy_per_sample: float  # busy time in one batch / N
    peak_in_flight: int
    peak_memory: float  # bytes, the evaluator's formula at the simulated peak in flight


@dataclass(frozen=True)
class ReplicaTask:
    """One task of a replica's action list as simulated: ``kind`` ``"F"`` (forward), ``"B"``
    (backward) or ``"R"`` (the stage's parameter all-reduce of batch ``index``); ``index`` is the
    micro-batch (numbered across batches) for ``F`` and ``B``."""

    stage: int
    replica: int
    kind: str
    index: int
    start: float
    duration: float


@dataclass(frozen=True)
class StageSimulation:
    """A stage of a simulated plan: its busiest replica's figures beside the evaluator's (``model_*``)."""

    stage: int
    kind: str
    d: int
    t: int
    busy_per_sample: float  # its busiest replica's
    peak_in_flight: int
    weight_versions: int  # the schedule's versions at the simulated peak in flight
    peak_memory: float
    model_time_per_sample: float  # the evaluator's
    model_in_flight: int
    model_memory: float
    capacity: float  # bytes per device of its kind (inf: unlimited)


@dataclass(frozen=True, eq=False)
class ReplicatedSimulation:
    """A simulated stage plan (see the module doc); times in the problem's unit (seconds). ``*_per_sample``
    figures are per sample; ``makespan``, ``latency``, ``model_latency`` and the tasks' times are
    absolute, a micro-batch being ``samples_per_microbatch`` samples."""

    schedule: str
    microbatches: int
    batches: int
    makespan: float  # of batches * N micro-batches (batches * N * samples_per_microbatch samples)
    time_per_sample: float  # makespan / (batches * N * samples_per_microbatch)
    period_per_sample: float  # batch-to-batch time of the last batches / (N * samples_per_microbatch)
    bottleneck_per_sample: float  # the busiest replica's busy time per sample
    bubble_fraction: float  # 1 - bottleneck / period
    model_time_per_sample: float  # the evaluator's objective
    stages: tuple[StageSimulation, ...]
    replicas: tuple[ReplicaReport, ...]
    tasks: tuple[ReplicaTask, ...] = ()  # every replica's tasks in the order it runs them
    samples_per_microbatch: int = 1
    #: one micro-batch alone in the pipeline, end to end (its forwards, and in training its backwards;
    #: each replica takes it whole; stages that no link orders run side by side; no all-reduce)
    latency: float = math.nan
    #: the evaluator's latency of one micro-batch: its per-sample latency (the stages one after another)
    #: times ``samples_per_microbatch``
    model_latency: float = math.nan
    #: streamed with every micro-batch's state held between its runs (an LLM's decode: its KV caches;
    #: :func:`simulate_plan`'s ``resident``)
    resident: bool = False

    @property
    def samples(self) -> int:
        """Samples simulated: ``batches * N * samples_per_microbatch``."""
        return self.batches * self.microbatches * self.samples_per_microbatch

    @property
    def throughput(self) -> float:
        """Samples per second over the run (samples / makespan)."""
        return self.samples / self.makespan if self.makespan > 0 else math.inf

    def summary(self) -> dict:
        """Plain numbers for JSON output, in seconds: per sample and per micro-batch
        (``samples_per_microbatch`` samples) over the run (``time_per_sample``, ``time_per_microbatch``)
        and in steady state (``steady_time_per_sample``, the same as ``period_per_sample``, and
        ``steady_time_per_microbatch``), samples per second for both, as a one-device-per-stage
        simulation's ``placement show --json`` gives them."""
        def num(x):
            return x if math.isfinite(x) else None

        b = self.samples_per_microbatch
        period = self.period_per_sample
        return {
            "schedule": self.schedule, "resident": self.resident, "microbatches": self.microbatches,
            "batches": self.batches,
            "samples_per_microbatch": b, "samples": self.samples,
            "makespan": self.makespan, "time_per_sample": self.time_per_sample,
            "time_per_microbatch": self.time_per_sample * b,
            "steady_time_per_sample": period, "steady_time_per_microbatch": period * b,
            "samples_per_s": num(self.throughput),
            "steady_samples_per_s": num(1.0 / period) if period > 0 else None,
            "period_per_sample": period, "bottleneck_per_sample": self.bottleneck_per_sample,
            "bubble_fraction": self.bubble_fraction, "model_time_per_sample": self.model_time_per_sample,
            "latency_per_microbatch": num(self.latency),
            "model_latency_per_microbatch": num(self.model_latency),
            "stages": [{"stage": s.stage, "kind": s.kind, "d": s.d, "t": s.t,
                        "busy_per_sample": s.busy_per_sample,
                        "model_time_per_sample": s.model_time_per_sample,
                        "peak_in_flight": s.peak_in_flight, "model_in_flight": s.model_in_flight,
                        "weight_versions": s.weight_versions,
                        "peak_memory": s.peak_memory, "model_memory": s.model_memory,
                        "capacity": None if math.isinf(s.capacity) else s.capacity} for s in self.stages],
        }


def stage_links(problem: ParallelProblem, plan: Sequence[Stage]) -> list[tuple[int, int]]:
    """``(i, j)`` pairs, ``i < j``: stages ``i`` and ``j`` exchange a tensor. Either way round: in a
    training graph from an ONNX model a later stage's backward operators send gradients to an earlier
    stage's, and that is the same forward-then-gradient link as the forward tensor the other way."""
    g = problem.graph
    stage_of = np.full(g.num_nodes, -1, np.int64)
    for i, st in enumerate(plan):
        stage_of[list(st.nodes)] = i
    links = set()
    for e in range(g.num_tensors):
        a = int(stage_of[g.tensor_src[e]])
        for v in g.consumers(e).tolist():
            b = int(stage_of[v])
            if a != b:
                links.add((min(a, b), max(a, b)))
    return sorted(links)


def _replica_order(schedule: str, mbs: list[int], y: int, N: int, d: int) -> list[tuple[str, int]]:
    """One replica's task order over its micro-batches ``mbs`` (all batches): ``("F", m)``,
    ``("B", m)`` and ``("R", batch)`` for the all-reduce after a batch."""
    out: list[tuple[str, int]] = []
    per = N // d
    if schedule in _FLUSH:
        for b in range(0, len(mbs), per):
            chunk = mbs[b:b + per]
            out += _flushed_order(schedule, chunk, y)
            out.append(("R", chunk[0] // N))
        return out
    for kind, m in _one_f_one_b(mbs, y):
        out.append((kind, m))
        if kind == "B" and (m // d) % per == per - 1:  # the replica's last micro-batch of its batch
            out.append(("R", m // N))
    return out


def _flushed_order(schedule: str, mbs: list[int], y: int) -> list[tuple[str, int]]:
    """One flushed batch of micro-batches ``mbs`` on one device: under ``gpipe`` every forward then
    every backward, else 1F1B with ``y`` forwards admitted."""
    if schedule == "gpipe":
        return [(FORWARD, m) for m in mbs] + [(BACKWARD, m) for m in mbs]
    return _one_f_one_b(mbs, y)


def _one_f_one_b(mbs: list[int], y: int) -> list[tuple[str, int]]:
    """1F1B over ``mbs``: ``y`` forwards admitted, then one backward and one forward alternately, then
    the remaining backwards."""
    w = min(y, len(mbs))
    out = [("F", m) for m in mbs[:w]]
    for k, m in enumerate(mbs):
        out.append(("B", m))
        if w + k < len(mbs):
            out.append(("F", mbs[w + k]))
    return out


def default_batches(problem: ParallelProblem, plan: Sequence[Stage], schedule: str) -> int:
    """Batches to simulate: three under a flush (every batch after the first is alike), otherwise
    enough for the micro-batches admitted ahead (``sum of s_i``) to settle, twice over."""
    if schedule in _FLUSH:
        return 3
    if schedule == "stream":
        return 6
    s = np.cumsum([st.d for st in plan][::-1]).sum()
    return int(min(64, 4 + math.ceil(2 * s / problem.microbatches)))


def simulate_plan(problem: ParallelProblem, plan: Sequence[Stage], *, schedule: str | None = None,
                  batches: int | None = None, forward_fraction: float = 1 / 3,
                  samples_per_microbatch: int = 1, resident: bool = False) -> ReplicatedSimulation:
    """Simulate ``plan`` (stages in pipeline order) for ``batches`` batches (default
    :func:`default_batches`) of the problem's ``N`` micro-batches under ``schedule`` (default: the
    problem's; the model's memory and time are the evaluator's under that schedule). A micro-batch is
    ``samples_per_microbatch`` of the problem's samples (its times are per sample): an ONNX model's batch
    size (one run of the model), an LLM's sequences per micro-batch (one token each), 1 for a Piper file.
    ``resident`` (``stream`` only): a micro-batch's state stays on each replica between its runs, as an
    LLM's decode keeps every sequence's KV cache for the sequence's life: a replica holds every
    micro-batch it serves (``N / d``, the evaluator's ``gpipe`` memory, which the decode problem is sized
    by), not only the one it runs. :class:`InputError` when the plan is invalid."""
    spm = samples_per_microbatch
    if isinstance(spm, bool) or not isinstance(spm, (int, np.integer)) or spm < 1:
        raise InputError(f"samples per micro-batch must be a positive integer, got {spm!r}")
    spm = int(spm)
    schedule = schedule or problem.schedule
    if schedule not in PLAN_SCHEDULES:
        raise InputError(f"unknown schedule {schedule!r}; choose one of: {', '.join(PLAN_SCHEDULES)}")
    if batches is None:
        batches = default_batches(problem, plan, schedule)
    if batches < 2:
        raise InputError(f"simulate at least 2 batches, got {batches}")
    if not 0 < forward_fraction <= 1:  # 1: inference, the forwards only
        raise InputError(f"the forward fraction must lie in (0, 1], got {forward_fraction}")
    stream = schedule == "stream"
    if resident and not stream:
        raise InputError(f"micro-batches held between their runs (an LLM's decode) stream through the "
                         f"stages; the {schedule} schedule holds what it stashes")
    if stream:
        if forward_fraction != 1:
            raise InputError("the stream schedule is an inference plan's: forwards only")
        schedule = problem.schedule  # memory: nothing stashed, so the schedule's formula is the weights
    problem = problem.with_options(schedule=schedule)
    # a plan over memory under this schedule is still simulated (its stages say so); anything else
    # wrong with it is an error
    loose = problem.with_options(kinds=tuple(replace(k, memory=None) for k in problem.kinds))
    bad = evaluate_plan(loose, plan).problems
    if bad:
        raise InputError("the plan is not valid: " + "; ".join(bad))
    ev = evaluate_plan(problem, plan)
    N = problem.microbatches
    S = len(plan)
    links = stage_links(problem, plan)
    preds = [[a for a, b in links if b == i] for i in range(S)]
    succs = [[b for a, b in links if a == i] for i in range(S)]
    suffix = np.cumsum([st.d for st in plan][::-1])[::-1]
    total = batches * N

    # per replica its action list; a stage's all-reduce of a batch is one action on all its replicas
    lanes: dict[tuple[int, int], list[Action]] = {}
    duration: dict[Action, float] = {}
    alone = []  # per stage: (forward, backward) of one micro-batch on one replica
    for i, (st, se) in enumerate(zip(plan, ev.stages)):
        work = (se.compute + se.comm) * st.d * spm  # a replica takes a micro-batch (spm samples) whole
        fw, bw = work * forward_fraction, work * (1 - forward_fraction)
        alone.append((fw, bw))
        y = in_flight(schedule, st.d, int(suffix[i]), N)
        for r in range(st.d):
            mbs = list(range(r, total, st.d))
            seq = lanes[(i, r)] = [Action(i, kind, x)
                                   for kind, x in ([("F", m) for m in mbs] if stream
                                                   else _replica_order(schedule, mbs, y, N, st.d))]
            for act in seq:
                duration[act] = fw if act.kind == "F" else bw if act.kind == "B" else se.resync * N * spm
    after: dict[Action, list[Action]] = {}
    for act in duration:
        i, kind, x = act.stage, act.kind, act.index
        if kind == "F":
            after[act] = [Action(j, "F", x) for j in preds[i]]
        elif kind == "B":
            after[act] = [Action(i, "F", x)] + [Action(j, "B", x) for j in succs[i]]
    tl = run_actions(lanes, duration, after)
    finish = tl.finish

    # per replica: busy time per batch and the peak in flight
    replicas = []
    for (i, r), seq in lanes.items():
        st = plan[i]
        busy = sum(duration[act] for act in seq) / batches / N / spm
        # in flight after each task, in the order the replica runs them: forwards started minus
        # backwards finished (zero-length tasks counted too)
        cur = peak = 0
        for act in seq:
            cur += 1 if act.kind == "F" else -1 if act.kind == "B" else 0
            peak = max(peak, cur)
        if stream:  # a forward holds its micro-batch only while it runs: nothing waits for a backward
            # unless its state stays: then every micro-batch the replica serves (a decode's KV caches)
            peak = len({m % N for m in range(r, total, st.d)}) if resident else min(peak, 1)
        a, b, w = _sums(problem, st)
        replicas.append(ReplicaReport(i, r, busy, peak, stage_memory(schedule, peak, a, b, w)[2]))
    stages = []
    for i, (st, se) in enumerate(zip(plan, ev.stages)):
        mine = [x for x in replicas if x.stage == i]
        stages.append(StageSimulation(i, problem.kinds[st.kind].name, st.d, st.t,
                                      max(x.busy_per_sample for x in mine),
                                      max(x.peak_in_flight for x in mine),
                                      weight_versions(schedule, max(x.peak_in_flight for x in mine)),
                                      max(x.peak_memory for x in mine),
                                      se.time_per_sample, se.in_flight, se.memory, se.capacity))
    # the period: between its all-reduces of two batches each replica runs exactly the tasks of as many
    # batches (a batch's worth of forwards and backwards, shifted by its warm-up), so the spacing of a
    # stage's all-reduces is never below its busy time; the slowest stage's spacing is the period
    if (schedule in _FLUSH and not stream) or batches < 4:  # every batch after the first is alike
        lo, hi = 0, batches - 1
    else:  # the later half, before the last batch (which drains without followers)
        lo, hi = (batches - 2) // 2, batches - 2

    def batch_end(i, b):  # a stage's all-reduce of batch b; streaming, its forward of the batch's last
        return finish[Action(i, "F", b * N + N - 1) if stream else Action(i, "R", b)]

    period = max((batch_end(i, hi) - batch_end(i, lo)) / (hi - lo) / N / spm for i in range(S))
    makespan = tl.makespan
    bottleneck = max(s.busy_per_sample for s in stages)
    bubble = max(0.0, 1.0 - bottleneck / period) if period > 0 else 0.0
    tasks = tuple(ReplicaTask(i, r, act.kind, act.index, tl.start[act], duration[act])
                  for (i, r), seq in lanes.items() for act in seq)
    # one micro-batch alone: forwards in pipeline order (a stage after the stages that send to it),
    # then backwards in reverse (after its forward and the later stages it sends to)
    f_end = [0.0] * S
    for i in range(S):
        f_end[i] = max((f_end[j] for j in preds[i]), default=0.0) + alone[i][0]
    b_end = list(f_end)
    for i in reversed(range(S)):  # inference: backwards of no time
        b_end[i] = max([f_end[i]] + [b_end[j] for j in succs[i]]) + alone[i][1]
    return ReplicatedSimulation("stream" if stream else schedule, N, batches, makespan,
                                makespan / total / spm, period, bottleneck, bubble, ev.objective,
                                tuple(stages), tuple(replicas), tasks, spm, max(b_end, default=0.0),
                                ev.latency * spm, resident)


def _sums(problem: ParallelProblem, st: Stage) -> tuple[float, float, float]:
    vs = [problem.graph.variants[v] for v in st.variants]
    return sum(v.a for v in vs), sum(v.b for v in vs), sum(v.w for v in vs)


# --------------------------------------------------------------------------- result files
