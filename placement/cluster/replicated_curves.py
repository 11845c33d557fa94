"""Replication-aware throughput curves: a job's best time per sample under the replicated model
(:mod:`graphs.parallel`: data- and tensor-parallel stages, variants, memory by schedule) for every
vector of devices per kind, from the exact DP ``dp-replicated``.

**One run or one per allocation.** The DP's feasibility table ``g[J][s][c]`` (fewest devices of the last
kind, given ``c`` devices of the others) answers every allocation at once, but only for one threshold
``τ`` on the stage times; each allocation's optimum is a different ``τ``, so one run would need a
feasibility pass per candidate ``τ`` (there are thousands of stage-time steps) or a search per allocation
over shared stage costs, which the DP's driver does not expose. Here the DP runs once per allocation,
in order of total devices, each run bounded by the best value of the allocations one device smaller (a
job given more devices may leave some idle, so that value is a valid plan's): a run that finds nothing
below the bound proves the bound is the allocation's optimum. Values are memoised per run and curves
cached per job by :func:`placement.cluster.curves.job_curve`.

Piper-format jobs (``../shared/workloads/piper/FORMAT.md``) get this curve: the file's single kind is
the cluster's accelerator kind (``accelerator`` when the cluster has several), with the file's memory,
bandwidth and micro-batches and the cluster's count (or the job's ``limit``). The replicated model has
no host kinds, so a point's host memory is the job's base memory.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Sequence

from graphs.errors import InputError
from graphs.parallel import ParallelProblem

from .curves import CurvePoint, JobCurve, _efficient

__all__ = ["problem_curve", "piper_problem"]


def problem_curve(problem: ParallelProblem, *, kinds: Sequence[str] | None = None, base_memory: float = 0.0,
                  unit: str = "", time_limit: float | None = None) -> JobCurve:
    """The curve of ``problem`` for every allocation up to its kinds' counts (see the module doc).
    ``kinds``: the shared cluster's kind names in its order (default: the problem's); ``time_limit``:
    seconds per allocation (an allocation stopped by it makes the curve inexact, said in ``notes``)."""
    from solvers.base import Status
    from solvers.dp_replicated import solve_problem

    t0 = time.perf_counter()
    own = [k.name for k in problem.kinds]
    kinds = tuple(kinds) if kinds is not None else tuple(own)
    missing = [k for k in own if k not in kinds]
    if missing:
        raise InputError(f"the job's device kinds {missing} are not in the cluster ({', '.join(kinds)})")
    where = [kinds.index(k) for k in own]
    limits = [0] * len(kinds)
    for k, pos in zip(problem.kinds, where):
        limits[pos] = int(k.count)

    def full(c) -> tuple[int, ...]:
        out = [0] * len(kinds)
        for x, pos in zip(c, where):
            out[pos] = int(x)
        return tuple(out)

    values: dict[tuple[int, ...], float] = {}
    exact, notes, runs = True, [], 0
    grid = itertools.product(*(range(k.count + 1) for k in problem.kinds))
    for c in sorted(grid, key=lambda c: (sum(c), c)):
        smaller = min((values[c[:t] + (x - 1,) + c[t + 1:]] for t, x in enumerate(c) if x > 0),
                      default=math.inf)
        if sum(c) == 0:
            values[c] = math.inf
            continue
        sub = problem.with_options(kinds=tuple(dataclasses.replace(k, count=int(x))
                                               for k, x in zip(problem.kinds, c)))
        runs += 1
        r = solve_problem(sub, time_limit=time_limit,
                          upper_bound=smaller * (1 + 1e-9) if math.isfinite(smaller) else math.inf)
        v = r.objective if r.plan is not None else math.inf
        if r.status not in (Status.OPTIMAL, Status.INFEASIBLE):
            exact = False
            notes.append(f"{full(c)}: {r.message or r.status}")
        values[c] = min(v, smaller)
    points = []
    for c, v in values.items():
        if math.isfinite(v) and _efficient(values, c, v):
            points.append(CurvePoint(full(c), v, float(base_memory)))
    points.sort(key=lambda p: (sum(p.counts), p.counts))
    return JobCurve(kinds, tuple(limits), tuple(False for _ in kinds),
                    {full(c): v for c, v in values.items()}, tuple(points), float(base_memory), unit,
                    "dp-replicated-per-count", exact,
                    time.perf_counter() - t0, tuple(notes) + (f"{runs} dp-replicated runs",))


def piper_problem(data, job, cluster) -> ParallelProblem:
    """The replicated problem of a Piper-format job (decoded ``data``) on the shared ``cluster`` (a
    :class:`~placement.cluster.formats.ClusterSpec`): see the module doc."""
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
    p = parse_piper(data, source=job.model, devices=count)
    return p.with_options(kinds=(dataclasses.replace(p.kinds[0], name=acc),))
