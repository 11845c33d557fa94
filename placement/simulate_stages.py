"""Simulation of a replicated plan (:mod:`graphs.parallel`): every replica of every stage as a device
running its micro-batches under the plan's schedule, batch after batch, event by event.

**Work.** A micro-batch is the model's unit of samples. Replica ``r`` of stage ``i`` (``d_i`` replicas)
runs the micro-batches ``m`` with ``m mod d_i = r`` (round robin; ``d_i`` divides ``N``). Per micro-batch
it is busy ``d_i * (compute + comm)`` of the evaluator's per-sample terms (the stage's whole compute,
crossing tensors and sync terms: a replica does all of it for the micro-batches it takes), split into a
forward task (``forward_fraction`` of it, a third by default; all of it for inference) and a backward
task (the rest). After its
last backward of a batch, each replica joins the stage's parameter all-reduce: a collective that starts
when every replica of the stage has reached it and lasts ``N * resync`` (the evaluator's per-sample
resync, paid once per batch).

**Dependencies.** A stage's forward of ``m`` waits for the forward of ``m`` of every earlier stage that
sends it a tensor; its backward of ``m`` waits for its own forward of ``m`` and for the backward of ``m``
of every later stage it sends a tensor to (the gradient coming back).

**Schedules** (each replica runs its tasks in this order; ``y_i = ceil(s_i / d_i)``, ``s_i`` the sum of
``d`` from stage ``i`` on, is PipeDream's number of micro-batches admitted per replica):

* ``gpipe``: per batch, the forwards of all its micro-batches, then their backwards, then the
  all-reduce; the next batch starts after it (a flush);
* ``1f1b`` (PipeDream-Flush): per batch, ``y_i`` forwards, then one backward and one forward alternately,
  then the remaining backwards, then the all-reduce (a flush);
* ``pipedream``, ``2bw``: the same one-forward-one-backward order run continuously across batches (no
  flush: the next batch's forwards proceed on stashed or double-buffered weights), the all-reduce after
  each batch's last backward;
* ``stream`` (inference, forwards only): each replica's forwards in order, batch after batch, no
  backward, no all-reduce, nothing stashed (one micro-batch in flight while it runs).

**Measured.** The makespan of ``batches`` batches and the time per sample over them; the *period*
(the spacing of the slowest stage's all-reduces over the later batches, per sample: what the schedule
sustains, flushes and fill included); each replica's busy time per sample in a batch, whose maximum
is the *bottleneck*, which is exactly the evaluator's time per sample (the model counts no bubble);
the bubble (the share of the period the bottleneck device idles). For memory, each replica's peak
number of micro-batches in flight (forward started, backward not finished), with which the
evaluator's formula (``A*y + B`` plus the schedule's extra weight versions) gives its peak bytes.

Under every schedule the bottleneck and each stage's peak ``y`` (so its peak memory) are the
evaluator's. The period is never below the bottleneck: it adds the flush's fill and drain under
``gpipe`` and ``1f1b``, and under ``pipedream`` and ``2bw`` it equals the bottleneck unless the ``y_i``
micro-batches a replica may hold do not cover their round trip through the later stages (Piper's
in-flight count assumes they do; with unequal stages and a per-batch all-reduce they sometimes do not,
and the simulation shows by how much).

Nothing here prints.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from graphs.errors import InputError
from graphs.parallel import (
    SCHEDULES,
    ParallelProblem,
    Stage,
    evaluate_plan,
    in_flight,
    stage_memory,
    weight_versions,
)

__all__ = ["ReplicaReport", "ReplicaTask", "StageSimulation", "ReplicatedSimulation", "simulate_plan",
           "stage_links", "default_batches"]

FLUSH = ("gpipe", "1f1b")
#: an inference plan's schedule: every replica runs its forwards one after the other, batch after batch,
#: with nothing to flush or all-reduce
STREAM = "stream"


@dataclass(frozen=True)
class ReplicaReport:
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
    schedule: str
    microbatches: int
    batches: int
    makespan: float
    time_per_sample: float  # makespan / (batches * N)
    period_per_sample: float  # batch-to-batch time of the last batches / N
    bottleneck_per_sample: float  # the busiest replica's busy time per sample
    bubble_fraction: float  # 1 - bottleneck / period
    model_time_per_sample: float  # the evaluator's objective
    stages: tuple[StageSimulation, ...]
    replicas: tuple[ReplicaReport, ...]
    tasks: tuple[ReplicaTask, ...] = ()  # every replica's tasks in the order it runs them

    def summary(self) -> dict:
        return {
            "schedule": self.schedule, "microbatches": self.microbatches, "batches": self.batches,
            "makespan": self.makespan, "time_per_sample": self.time_per_sample,
            "period_per_sample": self.period_per_sample, "bottleneck_per_sample": self.bottleneck_per_sample,
            "bubble_fraction": self.bubble_fraction, "model_time_per_sample": self.model_time_per_sample,
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


def _order(schedule: str, mbs: list[int], y: int, N: int, d: int) -> list[tuple[str, int]]:
    """One replica's task order over its micro-batches ``mbs`` (all batches): ``("F", m)``,
    ``("B", m)`` and ``("R", batch)`` for the all-reduce after a batch."""
    out: list[tuple[str, int]] = []
    per = N // d
    if schedule in FLUSH:
        for b in range(0, len(mbs), per):
            chunk = mbs[b:b + per]
            if schedule == "gpipe":
                out += [("F", m) for m in chunk] + [("B", m) for m in chunk]
            else:
                out += _one_f_one_b(chunk, y)
            out.append(("R", chunk[0] // N))
        return out
    for kind, m in _one_f_one_b(mbs, y):
        out.append((kind, m))
        if kind == "B" and (m // d) % per == per - 1:  # the replica's last micro-batch of its batch
            out.append(("R", m // N))
    return out


def _one_f_one_b(mbs: list[int], y: int) -> list[tuple[str, int]]:
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
    if schedule in FLUSH:
        return 3
    if schedule == STREAM:
        return 6
    s = np.cumsum([st.d for st in plan][::-1]).sum()
    return int(min(64, 4 + math.ceil(2 * s / problem.microbatches)))


def simulate_plan(problem: ParallelProblem, plan: Sequence[Stage], *, schedule: str | None = None,
                  batches: int | None = None, forward_fraction: float = 1 / 3) -> ReplicatedSimulation:
    """Simulate ``plan`` (stages in pipeline order) for ``batches`` batches (default
    :func:`default_batches`) of the problem's ``N`` micro-batches under ``schedule`` (default: the
    problem's; the model's memory and time are the evaluator's under that schedule). :class:`InputError`
    when the plan is invalid."""
    schedule = schedule or problem.schedule
    if schedule not in SCHEDULES + (STREAM,):
        raise InputError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES + (STREAM,))}")
    if batches is None:
        batches = default_batches(problem, plan, schedule)
    if batches < 2:
        raise InputError(f"simulate at least 2 batches, got {batches}")
    if not 0 < forward_fraction <= 1:  # 1: inference, the forwards only
        raise InputError(f"the forward fraction must lie in (0, 1], got {forward_fraction}")
    stream = schedule == STREAM
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

    # task ids: (stage, kind, index) -> node number; a collective is one node for all replicas
    dur: list[float] = []
    node_of: dict[tuple[int, str, int], int] = {}
    kind_of: list[str] = []
    seqs: list[list[int]] = []  # per replica, its node sequence
    rep_index: list[tuple[int, int]] = []
    for i, (st, se) in enumerate(zip(plan, ev.stages)):
        work = (se.compute + se.comm) * st.d
        fw, bw = work * forward_fraction, work * (1 - forward_fraction)
        y = in_flight(schedule, st.d, int(suffix[i]), N)
        for r in range(st.d):
            mbs = list(range(r, total, st.d))
            seq = []
            for kind, x in ([("F", m) for m in mbs] if stream else _order(schedule, mbs, y, N, st.d)):
                key = (i, kind, x)
                if key not in node_of:
                    node_of[key] = len(dur)
                    dur.append(fw if kind == "F" else bw if kind == "B" else se.resync * N)
                    kind_of.append(kind)
                seq.append(node_of[key])
            seqs.append(seq)
            rep_index.append((i, r))
    V = len(dur)
    pred: list[list[int]] = [[] for _ in range(V)]
    for seq in seqs:
        for a, b in zip(seq, seq[1:]):
            pred[b].append(a)
    for (i, kind, x), v in node_of.items():
        if kind == "F":
            pred[v].extend(node_of[(j, "F", x)] for j in preds[i])
        elif kind == "B":
            pred[v].append(node_of[(i, "F", x)])
            pred[v].extend(node_of[(j, "B", x)] for j in succs[i])
    start, finish = _longest_paths(pred, dur)

    # per replica: busy time per batch and the peak in flight
    replicas = []
    for (i, r), seq in zip(rep_index, seqs):
        st = plan[i]
        busy = sum(dur[v] for v in seq) / batches / N
        # in flight after each task, in the order the replica runs them: forwards started minus
        # backwards finished (zero-length tasks counted too)
        cur = peak = 0
        for v in seq:
            kind = kind_of[v]
            cur += 1 if kind == "F" else -1 if kind == "B" else 0
            peak = max(peak, cur)
        if stream:  # a forward holds its micro-batch only while it runs: nothing waits for a backward
            peak = min(peak, 1)
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
    if (schedule in FLUSH and not stream) or batches < 4:  # every batch after the first is alike
        lo, hi = 0, batches - 1
    else:  # the later half, before the last batch (which drains without followers)
        lo, hi = (batches - 2) // 2, batches - 2

    def batch_end(i, b):  # a stage's all-reduce of batch b; streaming, its forward of the batch's last
        return finish[node_of[(i, "F", b * N + N - 1)] if stream else node_of[(i, "R", b)]]

    period = max((batch_end(i, hi) - batch_end(i, lo)) / (hi - lo) / N for i in range(S))
    makespan = float(max(finish, default=0.0))
    bottleneck = max(s.busy_per_sample for s in stages)
    bubble = max(0.0, 1.0 - bottleneck / period) if period > 0 else 0.0
    key_of = {v: k for k, v in node_of.items()}
    tasks = tuple(ReplicaTask(i, r, key_of[v][1], key_of[v][2], start[v], dur[v])
                  for (i, r), seq in zip(rep_index, seqs) for v in seq)
    return ReplicatedSimulation(STREAM if stream else schedule, N, batches, makespan, makespan / total,
                                period, bottleneck, bubble, ev.objective, tuple(stages), tuple(replicas),
                                tasks)


def _sums(problem: ParallelProblem, st: Stage) -> tuple[float, float, float]:
    vs = [problem.graph.variants[v] for v in st.variants]
    return sum(v.a for v in vs), sum(v.b for v in vs), sum(v.w for v in vs)


def _longest_paths(pred: list[list[int]], dur: list[float]) -> tuple[list[float], list[float]]:
    """Earliest start and finish of every task of the precedence graph (Kahn's order); a cycle is a
    deadlock of the schedule, reported as an error."""
    V = len(dur)
    succ: list[list[int]] = [[] for _ in range(V)]
    indeg = [0] * V
    for v, ps in enumerate(pred):
        indeg[v] = len(ps)
        for u in ps:
            succ[u].append(v)
    start = [0.0] * V
    finish = [0.0] * V
    q = deque(v for v in range(V) if indeg[v] == 0)
    done = 0
    while q:
        u = q.popleft()
        done += 1
        finish[u] = start[u] + dur[u]
        for v in succ[u]:
            if finish[u] > start[v]:
                start[v] = finish[u]
            indeg[v] -= 1
            if indeg[v] == 0:
                q.append(v)
    if done < V:
        raise InputError(f"the schedule deadlocks: {V - done} task(s) wait on each other")
    return start, finish
