"""Allocation policies: how a set of jobs shares one heterogeneous cluster, decided from their curves.

Every policy maps the current jobs (:class:`JobState`: curve, work left, time since arrival) and the
cluster's :class:`Capacity` to one :class:`Allocation` per job: devices per kind and host memory held,
and the curve point the job runs (``None``: it waits). Devices are whole; every policy respects the
capacity of every kind and of host memory.

**Finish-time fairness** (Themis, NSDI 2020). A job's ideal finish time ``T_id`` is its work times its
time per sample on an equal ``1/N`` share of the cluster (every kind and host memory divided by ``N``,
the number of jobs contending; a fractional share is used by time-slicing whole allocations, so the
share's throughput is the concave envelope of the curve: a small LP, :func:`fair_share_time`). Under an
allocation held from now on, ``rho = (elapsed + remaining * time_per_sample) / T_id``.

* ``ftf`` minimises the maximum ``rho`` exactly (MILP over the curve points on HiGHS). When the jobs
  cannot all run at once, waiting is ranked by ``rho_wait = (elapsed + lease + remaining * share time) /
  T_id`` (wait one lease, then run on a fair share): the jobs that wait are the ones that can best
  afford to (lexicographically: the largest ``rho_wait`` among waiting jobs is minimised first, then
  the number of waiting jobs, then the maximum ``rho`` of the running ones), and the sum of ``rho``
  breaks the remaining ties, so no device that would help a running job is left idle.
* ``ftf`` with Themis's **fairness knob** ``f`` (``fairness``, in ``(0, 1]``): the leases of the paper.
  At each decision only the ``ceil(f * N)`` most unfair jobs (at least one; the highest ``rho_wait``,
  their ``rho`` if left out of this lease) bid, and an **auction** among them (:func:`auction`) gives
  them the allocation that maximises the product of their ``rho`` improvements ``rho_wait / rho``
  (Themis's Nash-welfare objective, as a sum of logs over the curve points: a MILP on HiGHS; a bidder
  that gets nothing improves by 1). What the bidders leave goes to the others (non-bidders and bidders
  that won nothing) by the exact ``ftf`` above among them, on the leftover capacity (work-conserving).
  ``f = 1``: every job bids. Themis's partial allocation, which withholds part of each winner's share to
  make bidding truthful, is not applied: the bids here are the jobs' own curves, not reports.
  ``fairness=None`` (the default here) is the exact ``ftf``; ``placement cluster simulate --policy ftf``
  runs the auction at ``f = 0.1``, the fairest measured (benchmarks/README_cluster.md).
* ``joint`` (Synergy's idea, OSDI 2022, taken further; ``sensitive`` is its old name, still accepted)
  chooses accelerator counts, host-core pipeline stages, CPU cores and host memory jointly: it maximises
  total normalised throughput (each job's throughput over
  its fair-share throughput) with CPU cores and host memory going wherever the curves say they help,
  subject to every job running at least as fast as under ``even`` (so it never drops below its
  even share unless that share gains it nothing); a vanishing penalty leaves useless devices
  free. The MILP is exact over each job's curve points (for a job with an input pipeline: its options,
  one per device vector and cache level, :mod:`~placement.cluster.inputs`, plus the exact point of its
  even share, so that every floor stays reachable); then the host cores and host memory left
  free go by marginal gain (Synergy's greedy step: repeatedly, to the job whose normalised throughput one
  more core, the free memory, or both raise the most, at its exact rate between options). ``status`` is
  the MILP's; the fill only adds throughput.
* ``even`` (called ``proportional`` before issue #26; that name is now Synergy's GPU-proportional
  allocation, :mod:`placement.cluster.synergy`): each accelerator kind split evenly (round robin in
  arrival order, up to each job's limit), host cores and host memory in proportion to the accelerators
  a job holds; a job that cannot
  run on its share waits (the last to arrive first) and the split is redone among the others.
* ``fifo``: in arrival order, each job takes its request (the job list's ``request``, else the smallest
  allocation within 10% of its best time per sample) when it fits what is left; one that does not fit
  waits and later jobs may still start. A request the job could not get or could not use is an
  :class:`~graphs.errors.InputError`, never clipped (:func:`fifo_request`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral

from graphs.errors import InputError

from .curves import CurvePoint, JobCurve

__all__ = ["POLICIES", "Capacity", "JobState", "Allocation", "Decision", "allocate", "fair_share_time",
           "default_request", "rho", "rho_wait", "KNEE", "ALIASES", "RENAMED", "check_policy",
           "check_fairness", "auction", "bidders", "fifo_request"]

POLICIES = ("ftf", "joint", "even", "fifo")
ALIASES = {"sensitive": "joint"}  # old names still accepted
# a name these policies no longer take: it means Synergy's GPU-proportional allocation everywhere now
RENAMED = {"proportional": "the even split of every accelerator kind is now policy 'even'; 'proportional' "
                           "is Synergy's GPU-proportional allocation (CPU and memory in proportion to GPUs "
                           "on each server, capped at that share): placement.cluster.synergy"}
KNEE = 0.10  # fifo's default request: the smallest allocation within this of the best time per sample
_TOL = 1e-9


@dataclass(frozen=True)
class Capacity:
    """What the jobs share: ``counts`` devices per kind (``host``: host CPU cores) and ``host_memory``
    bytes (``inf``: unlimited)."""

    kinds: tuple[str, ...]
    counts: tuple[int, ...]
    host: tuple[bool, ...]
    host_memory: float = math.inf

    @classmethod
    def of(cls, spec) -> Capacity:
        """From a :class:`~placement.cluster.formats.ClusterSpec`."""
        return cls(spec.kinds, spec.counts, spec.host, spec.host_memory)


@dataclass(frozen=True)
class JobState:
    """A job at a decision: its curve, total and remaining work (samples), time since arrival, the
    contention ``N`` its fair share is ``1/N`` of, its arrival order and its request (fifo)."""

    name: str
    curve: JobCurve
    samples: float
    remaining: float
    elapsed: float = 0.0
    contention: float = 1.0
    order: int = 0
    request: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Allocation:
    """What a job holds (``devices`` per kind, ``host_memory`` bytes) and the curve point it runs."""

    devices: tuple[int, ...]
    host_memory: float
    point: CurvePoint | None

    @property
    def running(self) -> bool:
        return self.point is not None

    @property
    def time_per_sample(self) -> float:
        return math.inf if self.point is None else self.point.time_per_sample

    @property
    def used(self) -> tuple[int, ...]:
        """Devices the job's placement uses (those it holds beyond them sit idle)."""
        return tuple(0 for _ in self.devices) if self.point is None else self.point.counts


@dataclass(frozen=True)
class Decision:
    """A policy's answer: one allocation per job (in the order given); ``status`` says whether an
    optimisation was proven optimal (``optimal``), stopped at a limit (``time limit``) or is a rule
    (``rule``); ``objective`` is the policy's own figure (max rho, normalised throughput)."""

    policy: str
    allocations: tuple[Allocation, ...]
    status: str = "rule"
    objective: float | None = None
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    stats: Mapping = field(default_factory=dict)


# --------------------------------------------------------------------------- the MILPs
def solve_or_stop(model, **kw):
    """:func:`solvers._milp.solve_mip` for the cluster's programs (``kw`` passed on). A search that took
    a Ctrl-C (:attr:`~solvers._milp.MipResult.interrupted`: with a solution or without, whatever its
    status, HiGHS returns what it had) stops the command here with ``KeyboardInterrupt``, as an
    interrupted curve DP does (:mod:`placement.cluster.curves`): a decision taken from it would let the
    simulation run on to its end as if no Ctrl-C had come."""
    from solvers._milp import solve_mip

    res = solve_mip(model, **kw)
    if res.interrupted:
        raise KeyboardInterrupt
    return res


# --------------------------------------------------------------------------- fairness
def fair_share_time(curve: JobCurve, capacity: Capacity, n: float) -> float:
    """Time per sample on an equal ``1/n`` share of the cluster, time-slicing whole allocations: the
    inverse of ``max sum(l_p / t_p)`` over ``l >= 0`` with ``sum(l) <= 1`` and ``sum(l_p * p) <= share``
    (devices per kind and host memory). ``inf`` when no point fits the cluster at all."""
    from solvers._milp import MilpModel

    n = max(1.0, float(n))
    pts = [p for p in curve.points if _fits(p.counts, p.host_memory, capacity.counts, capacity.host_memory)]
    if not pts:
        return math.inf
    if any(p.time_per_sample <= 0 for p in pts):
        return 0.0
    share = [c / n for c in capacity.counts]
    mem = capacity.host_memory / n
    # a point within the share on its own: the best such one is a lower bound the LP can only improve
    m = MilpModel()
    x = m.add_cols(len(pts), lb=0.0, ub=1.0, cost=[-1.0 / p.time_per_sample for p in pts])
    rows, cols, vals, hi = [], [], [], []
    r = 0
    for t in range(len(share)):
        for i, p in enumerate(pts):
            if p.counts[t]:
                rows.append(r)
                cols.append(x[i])
                vals.append(float(p.counts[t]))
        hi.append(share[t])
        r += 1
    for i in range(len(pts)):
        rows.append(r)
        cols.append(x[i])
        vals.append(1.0)
    hi.append(1.0)
    r += 1
    if math.isfinite(mem):
        for i, p in enumerate(pts):
            if p.host_memory:
                rows.append(r)
                cols.append(x[i])
                vals.append(p.host_memory / max(mem, 1.0))
        hi.append(mem / max(mem, 1.0))
        r += 1
    m.add_rows([-math.inf] * r, hi, rows, cols, vals)
    res = solve_or_stop(m, gap=1e-9)
    thr = -res.objective if res.x is not None else 0.0
    return 1.0 / thr if thr > 0 else math.inf


def rho(job: JobState, time_per_sample: float, ideal_time: float) -> float:
    """Finish-time fairness of ``job`` if it ran from now on at ``time_per_sample``."""
    if not math.isfinite(time_per_sample):
        return math.inf
    return (job.elapsed + job.remaining * time_per_sample) / ideal_time


def rho_wait(job: JobState, share_time: float, ideal_time: float, lease: float) -> float:
    """``rho`` of ``job`` if it waited one lease, then ran on its fair share (how ``ftf`` ranks waiting)."""
    return (job.elapsed + lease + job.remaining * share_time) / ideal_time


def _fits(counts, mem, cap_counts, cap_mem) -> bool:
    return all(a <= b for a, b in zip(counts, cap_counts)) and mem <= cap_mem * (1 + 1e-12)


# --------------------------------------------------------------------------- entry point
def allocate(policy: str, jobs: Sequence[JobState], capacity: Capacity, *, lease: float = 0.0,
             time_limit: float | None = None, share_times: Sequence[float] | None = None,
             fairness: float | None = None) -> Decision:
    """Allocate ``capacity`` among ``jobs`` with ``policy`` (one of :data:`POLICIES`).

    ``share_times``: each job's fair-share time per sample (:func:`fair_share_time` at its contention),
    when the caller has them; ``lease``: the re-allocation interval (``ftf``'s waiting estimate);
    ``time_limit``: seconds per MILP (``None``: none); ``fairness``: ``ftf`` only, Themis's knob ``f`` in
    ``(0, 1]`` (the fraction of most unfair jobs that bid in the auction, :func:`auction`; ``None``:
    no auction, max ``rho`` minimised exactly)."""
    policy = ALIASES.get(policy, policy)
    check_policy(policy)
    check_fairness(fairness, policy)
    for j in jobs:
        if any(p.time_per_sample <= 0 for p in j.curve.points):
            raise InputError(f"job {j.name!r}: its curve has a time per sample of 0 (a model without work)")
        if tuple(j.curve.kinds) != tuple(capacity.kinds):
            raise InputError(f"job {j.name!r}: its curve is over kinds {j.curve.kinds}, the cluster has "
                             f"{capacity.kinds}")
    t0 = time.perf_counter()
    if not jobs:
        return Decision(policy, (), "rule", None, 0.0)
    if share_times is None and policy in ("ftf", "joint"):
        share_times = [fair_share_time(j.curve, capacity, j.contention) for j in jobs]
    if policy == "even":
        d = Decision(policy, tuple(_even(jobs, capacity)), "rule")
    elif policy == "fifo":
        d = Decision(policy, tuple(_fifo(jobs, capacity)), "rule")
    elif policy == "ftf":
        d = _ftf(jobs, capacity, list(share_times), lease, time_limit, fairness)
    else:
        d = _sensitive(jobs, capacity, list(share_times), time_limit)
    _check_capacity(d.allocations, capacity)
    return Decision(d.policy, d.allocations, d.status, d.objective, time.perf_counter() - t0, d.notes,
                    d.stats)


def check_policy(policy: str) -> None:
    """An :class:`~graphs.errors.InputError` unless ``policy`` (aliases resolved) is one of
    :data:`POLICIES`; a renamed one says what it is called now."""
    if policy in RENAMED:
        raise InputError(f"policy {policy!r}: {RENAMED[policy]}")
    if policy not in POLICIES:
        raise InputError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")


def check_fairness(fairness: float | None, policy: str = "ftf", what: str = "the fairness knob f") -> None:
    """An :class:`~graphs.errors.InputError` unless ``fairness`` is ``None`` or a number in ``(0, 1]``
    (and the policy is ``ftf``, the one that holds the auction); ``what`` names it in the message."""
    if fairness is None:
        return
    if policy != "ftf":
        raise InputError(f"{what} applies to policy ftf (its auction), not {policy!r}")
    if isinstance(fairness, bool) or not isinstance(fairness, (int, float)) or not 0 < fairness <= 1:
        raise InputError(f"{what} must be a number in (0, 1] (the fraction of most unfair jobs that bid), "
                         f"got {fairness!r}")


def bidders(fairness: float, n: int) -> int:
    """How many of ``n`` jobs bid under knob ``fairness``: ``ceil(f * n)``, at least one."""
    return min(n, max(1, math.ceil(fairness * n - 1e-9)))


def _check_capacity(allocs: Sequence[Allocation], cap: Capacity) -> None:
    for t, n in enumerate(cap.counts):
        held = sum(a.devices[t] for a in allocs)
        if held > n:
            raise AssertionError(f"allocation holds {held} {cap.kinds[t]} devices, the cluster has {n}")
    mem = sum(a.host_memory for a in allocs)
    if mem > cap.host_memory * (1 + 1e-9) + 1e-6:
        raise AssertionError(f"allocation holds {mem} bytes of host memory, the cluster has "
                             f"{cap.host_memory}")


def _wait(cap: Capacity) -> Allocation:
    return Allocation(tuple(0 for _ in cap.counts), 0.0, None)


def _run(p: CurvePoint) -> Allocation:
    return Allocation(p.counts, p.host_memory, p)


# --------------------------------------------------------------------------- even
def _even(jobs: Sequence[JobState], cap: Capacity) -> list[Allocation]:
    active = sorted(range(len(jobs)), key=lambda i: (jobs[i].order, i))
    out = [_wait(cap) for _ in jobs]
    while active:
        shares = _even_shares([jobs[i] for i in active], cap)
        points = [jobs[i].curve.best_within(dev, mem) for i, (dev, mem) in zip(active, shares)]
        stuck = [k for k, p in enumerate(points) if p is None]
        if not stuck:
            for i, (dev, mem), p in zip(active, shares, points):
                out[i] = Allocation(dev, mem, p)
            break
        del active[stuck[-1]]  # the latest arrival among those that cannot run waits; split again
    return out


def _even_shares(jobs: Sequence[JobState], cap: Capacity) -> list[tuple[tuple[int, ...], float]]:
    """Accelerators round robin in the given order (up to each job's limit); host cores and host memory
    in proportion to the accelerators each job got (evenly when nobody got any)."""
    T = len(cap.counts)
    dev = [[0] * T for _ in jobs]
    accel = [t for t in range(T) if not cap.host[t]]
    hosts = [t for t in range(T) if cap.host[t]]
    for t in accel:
        _round_robin(dev, t, cap.counts[t], [j.curve.limits[t] for j in jobs])
    weight = [sum(d[t] for t in accel) for d in dev]
    total = sum(weight)
    if total == 0:
        weight = [1] * len(jobs)
        total = len(jobs)
    for t in hosts:
        _largest_remainder(dev, t, cap.counts[t], weight, [j.curve.limits[t] for j in jobs])
    mem = [cap.host_memory * w / total for w in weight]
    return [(tuple(d), m) for d, m in zip(dev, mem)]


def _round_robin(dev, t, count, limits) -> None:
    left = count
    while left > 0:
        moved = False
        for k in range(len(dev)):
            if left > 0 and dev[k][t] < limits[k]:
                dev[k][t] += 1
                left -= 1
                moved = True
        if not moved:
            return


def _largest_remainder(dev, t, count, weight, limits) -> None:
    total = sum(weight)
    exact = [count * w / total for w in weight]
    got = [min(int(math.floor(e)), lim) for e, lim in zip(exact, limits)]
    left = count - sum(got)
    order = sorted(range(len(dev)), key=lambda k: (-(exact[k] - math.floor(exact[k])), k))
    for k in order:
        if left <= 0:
            break
        if weight[k] > 0 and got[k] < limits[k]:
            got[k] += 1
            left -= 1
    for k in range(len(dev)):
        dev[k][t] = got[k]


# --------------------------------------------------------------------------- fifo
def default_request(curve: JobCurve, host_memory: float = math.inf) -> tuple[int, ...]:
    """The smallest allocation (fewest accelerators, then fewest host cores) whose time per sample is
    within :data:`KNEE` of the job's best, both within ``host_memory`` bytes (the cluster's: a point that
    needs more could never run). All zeros when no point fits."""
    fit = [p for p in curve.points if p.host_memory <= host_memory * (1 + 1e-12)]
    if not fit:
        return tuple(0 for _ in curve.kinds)
    best = min(p.time_per_sample for p in fit)
    ok = [p for p in fit if p.time_per_sample <= best * (1 + KNEE)]

    def size(p):
        acc = sum(c for c, h in zip(p.counts, curve.host) if not h)
        return (acc, sum(p.counts) - acc, p.counts)

    return min(ok, key=size).counts


def fifo_request(job, capacity: Capacity, *, default_may_wait: bool = True) -> tuple[int, ...]:
    """The devices ``job`` (a :class:`JobState` or a :class:`~placement.cluster.simulate.SimJob`: its
    ``name``, ``curve`` and ``request``) runs on under ``fifo``: its request, else
    :func:`default_request`. A request it could not get or could not use is an :class:`InputError`,
    never clipped: more of a kind than ``capacity`` has, more than its curve can use (the cluster it was
    computed for, the job's limit, or its throughput table's accelerators), or one on which it cannot run
    (too few devices for its memory within ``capacity``'s host memory). The request runs on its fastest
    point within both (:meth:`~placement.cluster.curves.JobCurve.best_within`), and the default request is
    the knee of the curve within ``capacity``'s host memory. The one check of
    :func:`allocate` and of :func:`~placement.cluster.simulate.simulate` and
    :func:`~placement.cluster.simulate.allocate_once` (before any decision). A default request (the job
    asked for nothing) on which the job cannot run is refused only with ``default_may_wait=False`` (the
    simulations' check of the whole trace); one decision leaves that job waiting."""
    kinds = capacity.kinds
    if job.request is None:
        req = tuple(int(x) for x in default_request(job.curve, capacity.host_memory))
        if default_may_wait:
            return req
    else:
        req = tuple(job.request)
        if len(req) != len(kinds) or any(isinstance(x, bool) or not isinstance(x, Integral) or x < 0
                                         for x in req):
            raise InputError(f"job {job.name!r}: its request {job.request!r} must be one non-negative "
                             f"whole count per kind of the cluster ({', '.join(kinds)})")
        req = tuple(int(x) for x in req)
        for k, r, n in zip(kinds, req, capacity.counts):
            if r > n:
                raise InputError(f"job {job.name!r}: its request {dict(zip(kinds, req))} asks for {r} {k}, "
                                 f"the cluster has {n}")
        if any(r > m for r, m in zip(req, job.curve.limits)):
            raise InputError(f"job {job.name!r}: its request {dict(zip(kinds, req))} asks for more than it "
                             f"can use ({dict(zip(kinds, job.curve.limits))}: the cluster, its limit, or "
                             f"its throughput table's accelerators)")
    if job.curve.best_within(req, capacity.host_memory) is None:
        what = "its request" if job.request is not None else "its default request (the knee of its curve)"
        raise InputError(f"job {job.name!r}: {what} {dict(zip(kinds, req))} cannot run it (too few devices "
                         f"for its memory within the cluster's host memory)")
    return req


def _fifo(jobs: Sequence[JobState], cap: Capacity) -> list[Allocation]:
    free = list(cap.counts)
    mem = cap.host_memory
    out = [_wait(cap) for _ in jobs]
    for i in sorted(range(len(jobs)), key=lambda i: (jobs[i].order, i)):
        j = jobs[i]
        req = fifo_request(j, cap)
        p = j.curve.best_within(req, cap.host_memory)
        if p is None:  # a default request it cannot run on: it waits
            continue
        if _fits(req, p.host_memory, free, mem):
            out[i] = Allocation(req, p.host_memory, p)
            free = [a - b for a, b in zip(free, req)]
            mem -= p.host_memory
    return out


# --------------------------------------------------------------------------- MILPs over curve points
def _options(job: JobState, cap: Capacity) -> list[CurvePoint]:
    return [p for p in job.curve.points if _fits(p.counts, p.host_memory, cap.counts, cap.host_memory)]


class _Choice:
    """One binary per (job, option) and one per job that may wait; one pick per job; capacity rows;
    optionally at most ``max_waiting`` waiting jobs. ``infeasible``: some job has nothing to pick."""

    def __init__(self, cap, options, may_wait, x_cost=None, w_cost=0.0, max_waiting=None):
        from solvers._milp import MilpModel

        n = len(options)
        self.infeasible = any(not options[j] and not may_wait[j] for j in range(n))
        self.m = MilpModel()
        self.x = [self.m.add_cols(len(o), lb=0, ub=1, integer=True,
                                  cost=0.0 if x_cost is None else x_cost[j]) for j, o in enumerate(options)]
        self.w = self.m.add_cols(n, lb=0, ub=[1.0 if f else 0.0 for f in may_wait], integer=True, cost=w_cost)
        rows, cols, vals = [], [], []
        for j, xs in enumerate(self.x):
            rows += [j] * (len(xs) + 1)
            cols += list(xs) + [int(self.w[j])]
            vals += [1.0] * (len(xs) + 1)
        self.m.add_rows([1.0] * n, [1.0] * n, rows, cols, vals)
        rows, cols, vals, hi = [], [], [], []
        r = 0
        for t, cnt in enumerate(cap.counts):
            for j, xs in enumerate(self.x):
                for k, p in enumerate(options[j]):
                    if p.counts[t]:
                        rows.append(r)
                        cols.append(int(xs[k]))
                        vals.append(float(p.counts[t]))
            hi.append(float(cnt))
            r += 1
        if math.isfinite(cap.host_memory):
            scale = max(cap.host_memory, 1.0)
            for j, xs in enumerate(self.x):
                for k, p in enumerate(options[j]):
                    if p.host_memory > 1e-9 * scale:  # HiGHS drops smaller coefficients anyway
                        rows.append(r)
                        cols.append(int(xs[k]))
                        vals.append(p.host_memory / scale)
            hi.append(cap.host_memory / scale)
            r += 1
        if max_waiting is not None and any(may_wait):
            rows += [r] * n
            cols += [int(w) for w in self.w]
            vals += [1.0] * n
            hi.append(float(max_waiting))
            r += 1
        self.m.add_rows([-math.inf] * r, hi, rows, cols, vals)

    def solve(self, time_limit, gap=1e-9, feasibility=False, start=None):
        """``(picks, proven)``: the option index per job (``None``: waits). With ``feasibility``,
        ``picks`` is ``None`` when the model is infeasible. ``start``: feasible picks to start from (so
        that a time limit still returns a selection)."""
        import numpy as np

        from solvers._milp import INFEASIBLE, OPTIMAL

        if self.infeasible:
            if feasibility:
                return None, True
            raise RuntimeError("allocation MILP: a job has no option")
        x0 = None
        if start is not None:
            x0 = np.zeros(self.m.num_cols)
            for j, k in enumerate(start):
                x0[self.w[j] if k is None else self.x[j][k]] = 1.0
        # HiGHS's presolve spends seconds on these set-partitioning models (thousands of binaries, a few
        # dozen rows) that its root LP solves in milliseconds
        res = solve_or_stop(self.m, gap=gap, time_limit=time_limit, start=x0,
                            raw={"abs_gap": 1e-10, "highs_options": {"presolve": "off"}})
        if res.x is None:
            if feasibility and res.status == INFEASIBLE:
                return None, True
            if feasibility:  # a limit before any solution: not proven either way; treat as infeasible
                return None, False
            raise RuntimeError(f"allocation MILP: {res.status} {res.message}")
        picks = []
        for xs in self.x:
            k = [i for i in range(len(xs)) if res.x[xs[i]] > 0.5]
            picks.append(k[0] if k else None)
        return picks, res.status == OPTIMAL


def _ftf(jobs, cap, share_times, lease, time_limit, fairness=None) -> Decision:
    able = [j for j in range(len(jobs)) if _options(jobs[j], cap) and math.isfinite(share_times[j])]
    if len(able) < len(jobs):  # a job that cannot run on this cluster at all waits, out of the problem
        d = (_ftf([jobs[j] for j in able], cap, [share_times[j] for j in able], lease, time_limit, fairness)
             if able else Decision("ftf", (), "optimal", None))
        allocs = [_wait(cap)] * len(jobs)
        for j, a in zip(able, d.allocations):
            allocs[j] = a
        return Decision("ftf", tuple(allocs), d.status, d.objective, stats=d.stats)
    if fairness is not None:
        return _ftf_auction(jobs, cap, share_times, lease, time_limit, fairness)
    n = len(jobs)
    ideal = [j.samples * s for j, s in zip(jobs, share_times)]
    options = [_options(j, cap) for j in jobs]
    rhos = [[rho(j, p.time_per_sample, ideal[i]) for p in options[i]] for i, j in enumerate(jobs)]
    waits = [rho_wait(j, share_times[i], ideal[i], lease) for i, j in enumerate(jobs)]
    big = 2.0 * max([r for rs in rhos for r in rs] + waits + [1.0]) + 1.0
    stats = {"milps": 0}

    dom = [_dominance(o) for o in options]
    # phase 1: the smallest max of rho (running) and big + rho_wait (waiting)
    z1, picks, ok1 = _bottleneck(cap, options, dom, rhos, [big + w for w in waits], None, time_limit, stats)
    if z1 < big:
        may_wait = [False] * n
        limit_wait, zmax, ok2 = 0, z1, True
    else:
        # phase 2: the jobs that may wait are those whose rho_wait is within the optimum; fewest of them
        # wait, then the max rho of the running ones is the smallest it can be
        may_wait = [big + waits[j] <= z1 * (1 + _TOL) for j in range(n)]
        least = [_minimal(dom[j], list(range(len(options[j])))) for j in range(n)]
        c = _Choice(cap, [[options[j][k] for k in least[j]] for j in range(n)], may_wait, w_cost=1.0)
        pos = [{k: i for i, k in enumerate(least[j])} for j in range(n)]
        start = [None if k is None or k not in pos[j] else pos[j][k] for j, k in enumerate(picks)]
        if any(k is not None and k not in pos[j] for j, k in enumerate(picks)):
            start = None
        got, ok = c.solve(time_limit, start=start)
        stats["milps"] += 1
        limit_wait = sum(1 for k in got if k is None)
        zmax, picks, ok2 = _bottleneck(cap, options, dom, rhos, [0.0 if f else None for f in may_wait],
                                       limit_wait, time_limit, stats)
        ok2 = ok2 and ok
    # phase 3: the smallest sum of rho among allocations that keep the max (and the number waiting)
    kept = [[k for k, r in enumerate(rhos[j]) if r <= zmax * (1 + _TOL)] for j in range(n)]
    c3 = _Choice(cap, [[options[j][k] for k in kept[j]] for j in range(n)], may_wait,
                 x_cost=[[rhos[j][k] for k in kept[j]] for j in range(n)], max_waiting=limit_wait)
    where = [{k: i for i, k in enumerate(kept[j])} for j in range(n)]
    picks3, ok3 = c3.solve(time_limit, gap=1e-6,
                           start=[None if k is None else where[j][k] for j, k in enumerate(picks)])
    stats["milps"] += 1
    allocs = [_run(options[j][kept[j][k]]) if k is not None else _wait(cap) for j, k in enumerate(picks3)]
    running = [rhos[j][kept[j][k]] for j, k in enumerate(picks3) if k is not None]
    stats.update(waiting=sum(1 for k in picks3 if k is None), phase1=z1 if z1 < big else math.inf)
    return Decision("ftf", tuple(allocs), "optimal" if ok1 and ok2 else "time limit",
                    max(running, default=None), stats=stats)


def auction(cap: Capacity, options: Sequence[Sequence[CurvePoint]], rho_old: Sequence[float],
            rho_new: Sequence[Sequence[float]], time_limit: float | None = None):
    """Themis's auction among the bidders: one option per bidder (or nothing) within ``cap``, maximising
    the product of the ``rho`` improvements ``rho_old[j] / rho_new[j][k]`` (a bidder that gets nothing
    improves by 1), as the sum of their logs over the discrete options (a MILP on HiGHS). Options that
    do not improve on ``rho_old`` are never worth taking and are left out; among allocations of equal
    product a vanishing charge per device leaves useless devices free (for the others).
    ``(picks, log_product, proven)``: the option index per bidder (``None``: nothing)."""
    n = len(options)
    keep = [[k for k, r in enumerate(rho_new[j]) if r < rho_old[j] * (1 - 1e-12)] for j in range(n)]
    gains = [[math.log(rho_old[j] / rho_new[j][k]) for k in keep[j]] for j in range(n)]
    if not any(keep):
        return [None] * n, 0.0, True
    eps = 1e-7 * min(g for gs in gains for g in gs)
    costs = [[-g + eps * _size(options[j][k], cap) / (1 + len(cap.counts)) for g, k in zip(gains[j], keep[j])]
             for j in range(n)]
    # every bidder's own best at once, when it fits, is the optimum (each term is at its largest)
    own = [min(range(len(keep[j])), key=lambda i, j=j: costs[j][i]) if keep[j] else None for j in range(n)]
    chosen = [options[j][keep[j][i]] for j, i in enumerate(own) if i is not None]
    used = [sum(p.counts[t] for p in chosen) for t in range(len(cap.counts))]
    if _fits(used, sum(p.host_memory for p in chosen), cap.counts, cap.host_memory):
        picks = [None if i is None else keep[j][i] for j, i in enumerate(own)]
        return picks, sum(gains[j][i] for j, i in enumerate(own) if i is not None), True
    c = _Choice(cap, [[options[j][k] for k in keep[j]] for j in range(n)], [True] * n, x_cost=costs)
    got, ok = c.solve(time_limit, gap=1e-9, start=[None] * n)
    picks = [None if k is None else keep[j][k] for j, k in enumerate(got)]
    total = sum(gains[j][keep[j].index(k)] for j, k in enumerate(picks) if k is not None)
    return picks, total, ok


def _ftf_auction(jobs, cap, share_times, lease, time_limit, fairness) -> Decision:
    """``ftf`` with Themis's knob (every job here can run on ``cap``): the :func:`bidders` jobs with the
    highest ``rho_wait`` (the most unfair if left out of this lease) bid; :func:`auction` gives them the
    allocation that maximises the product of their ``rho`` improvements over ``rho_wait``; what it
    leaves goes to the others (the non-bidders and the bidders that won nothing) by the exact ``ftf``
    (max ``rho`` among them minimised), so no device that would help some job is left idle."""
    n = len(jobs)
    ideal = [j.samples * s for j, s in zip(jobs, share_times)]
    options = [_options(j, cap) for j in jobs]
    waits = [rho_wait(j, share_times[i], ideal[i], lease) for i, j in enumerate(jobs)]
    ranked = sorted(range(n), key=lambda j: (-waits[j], jobs[j].order, j))
    bid = sorted(ranked[:bidders(fairness, n)])
    rhos = {j: [rho(jobs[j], p.time_per_sample, ideal[j]) for p in options[j]] for j in bid}
    picks, log_product, ok = auction(cap, [options[j] for j in bid], [waits[j] for j in bid],
                                     [rhos[j] for j in bid], time_limit)
    allocs = [_wait(cap)] * n
    for j, k in zip(bid, picks):
        if k is not None:
            allocs[j] = _run(options[j][k])
    counts = tuple(c - sum(a.devices[t] for a in allocs) for t, c in enumerate(cap.counts))
    mem = cap.host_memory - sum(a.host_memory for a in allocs)
    left = Capacity(cap.kinds, counts, cap.host, max(0.0, mem))
    others = [j for j in range(n) if not allocs[j].running]
    stats = {"milps": 1, "bidders": len(bid), "winners": sum(1 for k in picks if k is not None),
             "log_product": log_product}
    status = "optimal" if ok else "time limit"
    if others:
        d = _ftf([jobs[j] for j in others], left, [share_times[j] for j in others], lease, time_limit)
        for j, a in zip(others, d.allocations):
            allocs[j] = a
        stats["milps"] += d.stats.get("milps", 0)
        if d.status == "time limit":
            status = d.status
    stats["waiting"] = sum(1 for a in allocs if not a.running)
    running = [rho(jobs[j], a.time_per_sample, ideal[j]) for j, a in enumerate(allocs) if a.running]
    return Decision("ftf", tuple(allocs), status, max(running, default=None), stats=stats)


def _dominance(points: Sequence[CurvePoint]):
    """``d[q, p]``: point ``q`` needs no more of anything than ``p`` (devices and host memory)."""
    import numpy as np

    if not points:
        return np.zeros((0, 0), bool)
    c = np.array([p.counts for p in points], dtype=np.int64)
    m = np.array([p.host_memory for p in points])
    d = (c[:, None, :] <= c[None, :, :]).all(axis=2) & (m[:, None] <= m[None, :])
    np.fill_diagonal(d, False)
    return d


def _minimal(dom, allowed: list[int]) -> list[int]:
    """The allowed options no other allowed option dominates (enough for a feasibility question)."""
    import numpy as np

    if not allowed:
        return []
    a = np.asarray(allowed, dtype=np.int64)
    keep = ~dom[np.ix_(a, a)].any(axis=0)
    return a[keep].tolist()


def _bottleneck(cap, options, dom, costs, wait_costs, max_waiting, time_limit, stats):
    """The smallest ``z`` such that every job can take an option (or wait, where ``wait_costs[j]`` is not
    ``None``) of cost ``<= z`` within the capacity (and at most ``max_waiting`` jobs wait): a binary search
    over the candidate costs, each step a feasibility check (greedy first, else a MILP)."""
    n = len(options)
    cands = sorted({c for cs in costs for c in cs} | {w for w in wait_costs if w is not None})
    floor = max(min(list(costs[j]) + ([wait_costs[j]] if wait_costs[j] is not None else []), default=math.inf)
                for j in range(n))
    if not math.isfinite(floor):
        raise RuntimeError("ftf: a job that may not wait has no allocation that fits the cluster")
    lo = next(i for i, c in enumerate(cands) if c >= floor)
    hi = len(cands) - 1
    proven = True

    def feasible(z):
        nonlocal proven
        allowed = [_minimal(dom[j], [k for k, c in enumerate(costs[j]) if c <= z]) for j in range(n)]
        wait = [wait_costs[j] is not None and wait_costs[j] <= z for j in range(n)]
        g = _greedy(cap, options, allowed, wait, max_waiting)
        if g is not None:
            return g
        c = _Choice(cap, [[options[j][k] for k in allowed[j]] for j in range(n)], wait,
                    max_waiting=max_waiting)
        if c.infeasible:
            return None
        picks, ok = c.solve(time_limit, feasibility=True)
        stats["milps"] += 1
        proven = proven and ok
        if picks is None:
            return None
        return [allowed[j][k] if k is not None else None for j, k in enumerate(picks)]

    best = feasible(cands[hi])
    if best is None:
        raise RuntimeError("ftf: no allocation at all (a bug: waiting is always possible)")
    while lo < hi:
        mid = (lo + hi) // 2
        got = feasible(cands[mid])
        if got is None:
            lo = mid + 1
        else:
            hi, best = mid, got
    value = max((costs[j][k] if k is not None else wait_costs[j]) for j, k in enumerate(best))
    return value, best, proven


def _size(p: CurvePoint, cap: Capacity) -> float:
    s = sum(x / max(1, m) for x, m in zip(p.counts, cap.counts))
    if math.isfinite(cap.host_memory) and cap.host_memory > 0:
        s += p.host_memory / cap.host_memory
    return s


def _greedy(cap, options, allowed, wait, max_waiting):
    """A quick feasible selection: every job that may wait waits (up to ``max_waiting``; the others
    take their smallest allowed option); ``None`` when that does not fit (which proves nothing)."""
    free = list(cap.counts)
    mem = cap.host_memory
    waiting = 0
    picks = []
    for j in range(len(options)):
        if wait[j] and (max_waiting is None or waiting < max_waiting):
            picks.append(None)
            waiting += 1
            continue
        if not allowed[j]:
            return None
        k = min(allowed[j], key=lambda k: _size(options[j][k], cap))
        p = options[j][k]
        free = [a - b for a, b in zip(free, p.counts)]
        mem -= p.host_memory
        picks.append(k)
    if min(free, default=0) < 0 or mem < -1e-9 * (cap.host_memory if math.isfinite(cap.host_memory) else 1.0):
        return None
    return picks


def _sensitive(jobs, cap, share_times, time_limit) -> Decision:
    prop = _even(jobs, cap)
    n = len(jobs)
    options, gains = [], []
    for j, job in enumerate(jobs):
        floor = prop[j].time_per_sample
        opts = [p for p in _options(job, cap) if p.time_per_sample <= floor * (1 + 1e-12)]
        if prop[j].running and prop[j].point not in opts:  # its even-share point (an input pipeline's
            opts.append(prop[j].point)  # exact one may lie between options) keeps every floor reachable
        options.append(opts)
        gains.append([share_times[j] / p.time_per_sample for p in opts])
    # maximise normalised throughput; a vanishing charge per device (and per byte) keeps useless ones free
    eps = 1e-7 * min([g for gs in gains for g in gs] + [1.0])
    costs = [[-g + eps * _size(p, cap) for p, g in zip(options[j], gains[j])] for j in range(n)]
    c = _Choice(cap, options, [not prop[j].running for j in range(n)], x_cost=costs)
    start = [next(k for k, p in enumerate(options[j]) if p == prop[j].point) if prop[j].running else None
             for j in range(n)]
    picks, ok = c.solve(time_limit, gap=1e-7, start=start)
    allocs = [_run(options[j][k]) if k is not None else _wait(cap) for j, k in enumerate(picks)]
    milp = sum(gains[j][k] for j, k in enumerate(picks) if k is not None)
    allocs = _fill(jobs, cap, allocs, share_times)
    obj = sum(share_times[j] / a.time_per_sample for j, a in enumerate(allocs) if a.running)
    return Decision("joint", tuple(allocs), "optimal" if ok else "time limit", obj,
                    stats={"milps": 1, "waiting": sum(1 for k in picks if k is None), "milp_objective": milp,
                           "fill_gain": obj - milp})


def _fill(jobs, cap, allocs, share_times) -> list[Allocation]:
    """Host cores and host memory the chosen options leave free, given by marginal gain (Synergy's
    greedy step): repeatedly, the running job whose normalised throughput one more core, the free memory,
    or both raise the most takes them (the memory it actually uses), until nothing gains. Each job's
    time per sample comes from :meth:`JobCurve.best_within`, exact for input pipelines between options."""
    hosts = [t for t, h in enumerate(cap.host) if h]
    allocs = list(allocs)
    while True:
        free = [n - sum(a.devices[t] for a in allocs) for t, n in enumerate(cap.counts)]
        mem = cap.host_memory - sum(a.host_memory for a in allocs)
        best, pick = 0.0, None
        for j, a in enumerate(allocs):
            if not a.running:
                continue
            steps = [(t,) for t in hosts if free[t] > 0] + ([()] if mem > 0 else [])
            steps += [(t,) + ("mem",) for t in hosts if free[t] > 0 and mem > 0]
            for st in steps:
                dev = tuple(d + (1 if t in st else 0) for t, d in enumerate(a.devices))
                held = a.host_memory + (mem if (not st or "mem" in st) else 0.0)
                p = jobs[j].curve.best_within(dev, held)
                if p is None:
                    continue
                gain = share_times[j] * (1.0 / p.time_per_sample - 1.0 / a.time_per_sample)
                if gain > best * (1 + 1e-9) and gain > 1e-9 * share_times[j] / a.time_per_sample:
                    new_mem = a.host_memory + max(0.0, p.host_memory - a.host_memory)
                    best, pick = gain, (j, Allocation(dev if any(t in st for t in hosts) else a.devices,
                                                      min(new_mem, held), p))
        if pick is None:
            return allocs
        allocs[pick[0]] = pick[1]
