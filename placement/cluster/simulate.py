"""Jobs over time on a shared cluster: arrivals, completions and leases, each followed by a re-allocation.

:func:`simulate` replays a trace: each job arrives with an amount of work (samples) and runs, while it
holds an allocation, at the time per sample of the curve point it runs. The policy re-allocates at every
arrival, every completion and, with a ``lease``, every ``lease`` time units; re-allocation is free (no
checkpoint or restart cost is modelled). Work is conserved: a job's samples are consumed at its current
rate between decisions and it completes exactly when they run out.

Per job it reports the finish time, the job completion time (JCT = finish - arrival) and the finish-time
fairness ``rho = JCT / T_id``, with ``T_id`` the job's time alone on a ``1/N`` share of the cluster, ``N``
the average number of jobs present during its life (Themis's definition); overall the average JCT, the
makespan (last finish - first arrival), the maximum ``rho`` and the utilisation (device time used by the
jobs' placements over device time available during the makespan, per kind; ``utilisation`` itself over
the accelerator kinds). :func:`allocate_once` is the one-decision counterpart (``placement cluster
JOBS.json``): all jobs present, the allocation held until each finishes, nothing re-allocated.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from graphs.errors import InfeasibleError, InputError

from .curves import JobCurve
from .formats import GB, duration_scale, json_number
from .policies import (
    ALIASES,
    Allocation,
    Capacity,
    JobState,
    allocate,
    check_fairness,
    check_policy,
    fair_share_time,
    fifo_request,
)

__all__ = ["SimJob", "Segment", "JobOutcome", "SimResult", "simulate", "allocate_once", "plot_allocations",
           "BOUND_NOTE", "ONE_SHOT_CONTENTION_NOTE", "utilisation_over_makespan"]


@dataclass(frozen=True)
class SimJob:
    """A job of a trace: its curve, work (samples), arrival time and (fifo) request."""

    name: str
    curve: JobCurve
    samples: float
    arrival: float = 0.0
    request: tuple[int, ...] | None = None
    model: str = ""


@dataclass(frozen=True)
class Segment:
    """``[start, end)`` with one allocation per job (``None``: the job is not present)."""

    start: float
    end: float
    allocations: tuple[Allocation | None, ...]


@dataclass(frozen=True)
class JobOutcome:
    name: str
    arrival: float
    samples: float
    finish: float  # inf: never finishes (allocate_once: it waits)
    ideal_time: float  # T_id
    contention: float  # the N of its fair share
    allocation: Allocation  # the first allocation it ran on (allocate_once: the only one; simulate: see
    # SimResult.segments for the others)
    done: float  # samples completed (== samples unless it never finishes)

    @property
    def jct(self) -> float:
        return self.finish - self.arrival

    @property
    def rho(self) -> float:
        return self.jct / self.ideal_time if self.ideal_time > 0 else math.inf


def utilisation_over_makespan(result) -> float | None:
    """A result's (:class:`SimResult`) ``utilisation`` where every job runs, the one figure a comparison
    of policies shows for each; ``None`` (the table's ``-``, the JSON's ``null``) where some job never
    runs: there is no makespan then, and its ``utilisation`` is over its allocated span, another span."""
    return result.utilisation if math.isfinite(result.makespan) else None


#: what a result with ``bound`` set is (Synergy-OPT's), said beside its rows in the table and the JSON
BOUND_NOTE = ("a bound, not a schedule: Synergy-OPT's LP relaxation (the cluster's CPU cores and memory "
              "as one pool, each job time-sharing its options at a fractional rate) gives every job its LP "
              "rate; its times, finishes and rho are an idealised bound that no allocation on the servers "
              "need reach")


#: the contention ``N`` of a one-shot allocation's ``rho`` (``mode == "allocation"``), said in its table and
#: JSON: every job, not the average over each job's life that a simulation (and docs/clusters.md) uses
ONE_SHOT_CONTENTION_NOTE = ("rho's N is the number of jobs, all present at the one decision (the contention "
                            "at its time), not the average number present over each job's life as in "
                            "simulate")


@dataclass(frozen=True)
class SimResult:
    policy: str
    capacity: Capacity
    jobs: tuple[JobOutcome, ...]
    segments: tuple[Segment, ...]
    lease: float | None = None
    decisions: int = 0
    solve_seconds: float = 0.0
    unit: str = ""
    mode: str = "simulation"
    statuses: tuple[str, ...] = ()
    stats: Mapping = field(default_factory=dict)  # simulator-specific figures (rounds, MILPs, bounds)
    bound: bool = False  # an idealised bound, not a schedule (Synergy-OPT: see BOUND_NOTE)

    @property
    def avg_jct(self) -> float:
        return sum(j.jct for j in self.jobs) / len(self.jobs)

    @property
    def makespan(self) -> float:
        return max(j.finish for j in self.jobs) - min(j.arrival for j in self.jobs)

    @property
    def max_rho(self) -> float:
        return max(j.rho for j in self.jobs)

    @property
    def allocated_span(self) -> float:
        """From the first allocation to the last finish of a job that ran: the span utilisation is
        measured over when some job never runs (then the makespan is infinite)."""
        if not self.segments:
            return 0.0
        return self.segments[-1].end - self.segments[0].start

    def _span(self) -> float:
        span = self.makespan
        return span if math.isfinite(span) else self.allocated_span

    def utilisation_per_kind(self, *, held: bool = False) -> dict[str, float]:
        span = self._span()
        out = {}
        for t, (k, n) in enumerate(zip(self.capacity.kinds, self.capacity.counts)):
            if n == 0 or not math.isfinite(span) or span <= 0:
                out[k] = math.nan if n == 0 else 0.0
                continue
            busy = sum((s.end - s.start) * sum((a.devices if held else a.used)[t] for a in s.allocations
                                               if a is not None) for s in self.segments)
            out[k] = busy / (n * span)
        return out

    @property
    def utilisation(self) -> float:
        """Used device time over available device time on the accelerator kinds (host kinds when the
        cluster has no accelerator: none, or only kinds of count 0), over the makespan (over
        :attr:`allocated_span` when some job never runs)."""
        span = self._span()
        have = [t for t, n in enumerate(self.capacity.counts) if n > 0]
        ks = [t for t in have if not self.capacity.host[t]] or have
        total = sum(self.capacity.counts[t] for t in ks) * span
        if not math.isfinite(span) or total <= 0:
            return 0.0
        busy = sum((s.end - s.start) * sum(a.used[t] for a in s.allocations if a is not None for t in ks)
                   for s in self.segments)
        return busy / total

    def _utilisation_figures(self) -> dict:
        return {"utilisation": self.utilisation,
                "utilisation_per_kind": {k: json_number(v) for k, v in self.utilisation_per_kind().items()},
                "held_per_kind": {k: json_number(v) for k, v in self.utilisation_per_kind(held=True).items()}}

    def summary(self) -> dict:
        """The figures under the job rows. The utilisation is over the makespan
        (:func:`utilisation_over_makespan`): ``null`` where some job never runs, whose figures "while the
        allocation holds" (over :attr:`allocated_span`, as its own table line says) are given apart,
        under that name."""
        figures = self._utilisation_figures()
        if utilisation_over_makespan(self) is None:
            held = {"span": json_number(self.allocated_span), **figures}
            figures = {k: None if k == "utilisation" else dict.fromkeys(v) for k, v in figures.items()}
            figures["while_allocation_holds"] = held
        return {"max_rho": json_number(self.max_rho), "avg_jct": json_number(self.avg_jct),
                "makespan": json_number(self.makespan), **figures,
                "waiting": sum(1 for j in self.jobs if not math.isfinite(j.finish)),
                "decisions": self.decisions, "solve_seconds": self.solve_seconds,
                # how many decisions ended with each solver status ("time limit": some allocation MILP
                # stopped at --time-limit, its answer not proven optimal; "rule": no MILP)
                "statuses": dict(Counter(self.statuses)),
                **({"stats": dict(self.stats)} if self.stats else {})}

    def to_dict(self, curves: Sequence[JobCurve] | None = None, models: Sequence[str] | None = None) -> dict:
        """The result as JSON. In a simulation each job's ``allocation``, ``used``, ``host_memory_gb`` and
        ``time_per_sample`` are its first allocation's (it may be re-allocated later); ``mean_used`` and
        the ``timeline`` give what it used over its life; ``summary.statuses`` counts the decisions by
        solver status (``"time limit"``: not proven optimal). ``bound`` is true for a bound that is not a
        schedule (Synergy-OPT), whose ``bound_note`` says so; a one-shot allocation has a
        ``contention_note`` (:data:`ONE_SHOT_CONTENTION_NOTE`: its ``rho``'s ``N`` is every job)."""
        kinds = self.capacity.kinds

        def counts(c):
            return {k: int(x) for k, x in zip(kinds, c)}

        jobs = []
        for i, j in enumerate(self.jobs):
            a = j.allocation
            d = {"name": j.name, "arrival": j.arrival, "samples": j.samples,
                 "allocation": counts(a.devices), "used": counts(a.used),
                 "host_memory_gb": a.host_memory / GB, "time_per_sample": json_number(a.time_per_sample),
                 "finish_time": json_number(j.finish), "jct": json_number(j.jct), "rho": json_number(j.rho),
                 "ideal_time": json_number(j.ideal_time), "contention": j.contention}
            if self.mode == "simulation" and math.isfinite(j.jct) and j.jct > 0:
                # devices its placements used, averaged over its life (waiting included)
                d["mean_used"] = {k: sum((s.end - s.start) * s.allocations[i].used[t] for s in self.segments
                                         if s.allocations[i] is not None) / j.jct
                                  for t, k in enumerate(kinds)}
            if models is not None:
                d["model"] = models[i]
            rates = getattr(getattr(curves[i], "rate", None), "breakdown", None) if curves else None
            if rates is not None and a.running:  # which of its input pipeline's rates binds (per ms)
                d["input_rates"] = {k: json_number(v) for k, v in rates(a.devices, a.host_memory).items()}
            if curves is not None:
                c = curves[i]
                d["curve"] = {"method": c.method, "exact": c.exact, "seconds": c.seconds,
                              "points": len(c.points), "notes": list(c.notes)}
            jobs.append(d)
        doc = {"schema": "placement-cluster", "version": 1, "mode": self.mode, "policy": self.policy,
               "bound": self.bound, **({"bound_note": BOUND_NOTE} if self.bound else {}),
               **({"contention_note": ONE_SHOT_CONTENTION_NOTE} if self.mode == "allocation" else {}),
               "cluster": {"kinds": list(kinds), "counts": list(self.capacity.counts),
                           "host_memory_gb": json_number(self.capacity.host_memory / GB)},
               "unit": self.unit, "lease": self.lease, "jobs": jobs, "summary": self.summary()}
        if self.mode == "simulation":
            doc["timeline"] = [{"start": s.start, "end": s.end,
                                "jobs": {self.jobs[i].name: counts(a.used)
                                         for i, a in enumerate(s.allocations) if a is not None and a.running}}
                               for s in self.segments]
        return doc


class _Shares:
    """Fair-share times per (job, contention), computed once."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self.memo: dict[tuple[int, float], float] = {}

    def __call__(self, i: int, curve: JobCurve, n: float) -> float:
        key = (i, round(n, 3))
        if key not in self.memo:
            self.memo[key] = fair_share_time(curve, self.capacity, key[1])
        return self.memo[key]


def _check_jobs(jobs: Sequence[SimJob], capacity: Capacity, policy: str) -> None:
    policy = ALIASES.get(policy, policy)
    check_policy(policy)
    if not jobs:
        raise InputError("no jobs")
    for j in jobs:
        if not any(all(a <= b for a, b in zip(p.counts, capacity.counts))
                   and p.host_memory <= capacity.host_memory for p in j.curve.points):
            raise InfeasibleError(f"job {j.name!r} cannot run even on the whole cluster (devices or host "
                                  f"memory)")
        if policy == "fifo":  # fifo runs a job on its request: one it cannot get or use is refused
            fifo_request(j, capacity, default_may_wait=False)


def simulate(jobs: Sequence[SimJob], capacity: Capacity, policy: str, *, lease: float | None = None,
             time_limit: float | None = None, progress=None, fairness: float | None = None) -> SimResult:
    """Replay ``jobs`` on ``capacity`` under ``policy`` (see the module doc); ``time_limit`` bounds each
    MILP; ``progress`` is called with the fraction of jobs completed; ``fairness``: ``ftf``'s knob (the
    fraction of most unfair jobs that bid in each decision's auction; ``None``: max ``rho`` minimised
    exactly, :func:`~placement.cluster.policies.allocate`)."""
    policy = ALIASES.get(policy, policy)
    _check_jobs(jobs, capacity, policy)
    check_fairness(fairness, policy)
    if lease is not None and not (lease > 0 and math.isfinite(lease)):
        # inf would make ftf's "waits one lease" infinite; no periodic re-allocation is lease=None
        raise InputError(f"lease must be a positive finite number, got {lease} (None: no periodic "
                         f"re-allocation)")
    n = len(jobs)
    order = sorted(range(n), key=lambda i: (jobs[i].arrival, i))
    rank = {i: r for r, i in enumerate(order)}
    pending = deque(order)
    active: list[int] = []
    remaining = [float(j.samples) for j in jobs]
    finish = [math.inf] * n
    area = [0.0] * n  # integral of the number of jobs present, over each job's life so far
    first: list[Allocation | None] = [None] * n
    shares = _Shares(capacity)
    segments: list[Segment] = []
    t = jobs[order[0]].arrival
    next_lease = t + lease if lease else math.inf
    decisions, solve_s = 0, 0.0
    statuses: list[str] = []
    done = 0
    while pending or active:
        while pending and jobs[pending[0]].arrival <= t:
            active.append(pending.popleft())
        if not active:
            t = jobs[pending[0]].arrival
            continue
        states, share_times = [], []
        for i in active:
            el = t - jobs[i].arrival
            nc = area[i] / el if el > 0 else float(len(active))
            states.append(JobState(jobs[i].name, jobs[i].curve, jobs[i].samples, remaining[i], el, nc,
                                   rank[i], jobs[i].request))
            share_times.append(shares(i, jobs[i].curve, nc))
        d = allocate(policy, states, capacity, lease=lease or 0.0, time_limit=time_limit,
                     share_times=share_times, fairness=fairness)
        decisions += 1
        solve_s += d.seconds
        statuses.append(d.status)
        alloc = dict(zip(active, d.allocations))
        t_arr = jobs[pending[0]].arrival if pending else math.inf
        ends = {i: t + remaining[i] * a.time_per_sample for i, a in alloc.items() if a.running}
        while next_lease <= t:
            next_lease += lease
        t_next = min([t_arr, next_lease] + list(ends.values()))
        if not ends and not pending:
            raise InfeasibleError(f"policy {policy!r} leaves every job waiting at time {t:g} with no arrival "
                                  f"to come")
        if not math.isfinite(t_next):
            raise AssertionError("no next event")
        dt = t_next - t
        for i in active:
            area[i] += len(active) * dt
            a = alloc[i]
            if a.running:
                if first[i] is None:
                    first[i] = a
                if ends[i] <= t_next * (1 + 1e-12) + 1e-12:
                    remaining[i] = 0.0
                else:
                    remaining[i] -= dt / a.time_per_sample
        seg = [None] * n
        for i in active:
            seg[i] = alloc[i]
        segments.append(Segment(t, t_next, tuple(seg)))
        t = t_next
        for i in [i for i in active if remaining[i] <= 0.0]:
            finish[i] = t
            active.remove(i)
            done += 1
            if progress is not None:
                progress(done / n)
    outcomes = []
    for i, j in enumerate(jobs):
        life = finish[i] - j.arrival
        nc = area[i] / life if life > 0 else 1.0
        st = fair_share_time(j.curve, capacity, nc)
        outcomes.append(JobOutcome(j.name, j.arrival, j.samples, finish[i], j.samples * st, nc,
                                   first[i] or Allocation(tuple(0 for _ in capacity.kinds), 0.0, None),
                                   j.samples - remaining[i]))
    return SimResult(policy, capacity, tuple(outcomes), tuple(segments), lease, decisions, solve_s,
                     jobs[0].curve.unit, "simulation", tuple(statuses),
                     {"fairness": fairness} if fairness is not None else {})


def allocate_once(jobs: Sequence[SimJob], capacity: Capacity, policy: str, *,
                  time_limit: float | None = None, fairness: float | None = None) -> SimResult:
    """One allocation for all ``jobs`` at the time the last one arrives, held until each finishes (a job
    that waits never finishes: finish ``inf``). ``rho`` uses ``N = len(jobs)``, the jobs present at the
    decision, not the average over each job's life that :func:`simulate` uses: that average depends on
    the finishes the allocation gives, which would make the allocation's objective circular
    (:data:`ONE_SHOT_CONTENTION_NOTE`, said in the result's table and JSON)."""
    policy = ALIASES.get(policy, policy)
    _check_jobs(jobs, capacity, policy)
    n = len(jobs)
    now = max(j.arrival for j in jobs)
    order = sorted(range(n), key=lambda i: (jobs[i].arrival, i))
    rank = {i: r for r, i in enumerate(order)}
    share_times = [fair_share_time(j.curve, capacity, n) for j in jobs]
    states = [JobState(j.name, j.curve, j.samples, j.samples, now - j.arrival, float(n), rank[i], j.request)
              for i, j in enumerate(jobs)]
    d = allocate(policy, states, capacity, time_limit=time_limit, share_times=share_times, fairness=fairness)
    outcomes, ends = [], []
    for j, a, st in zip(jobs, d.allocations, share_times):
        fin = now + j.samples * a.time_per_sample
        ends.append(fin)
        outcomes.append(JobOutcome(j.name, j.arrival, j.samples, fin, j.samples * st, float(n), a,
                                   j.samples if a.running else 0.0))
    # segments: the allocation holds until each job finishes
    cuts = sorted({now} | {e for e in ends if math.isfinite(e)})
    segments = []
    for s, e in zip(cuts, cuts[1:]):
        segments.append(Segment(s, e, tuple(a if end >= e else None for a, end in zip(d.allocations, ends))))
    return SimResult(policy, capacity, tuple(outcomes), tuple(segments), None, 1, d.seconds,
                     jobs[0].curve.unit, "allocation", (d.status,),
                     {"fairness": fairness} if fairness is not None else {})


def plot_allocations(result: SimResult, path: str, *, title: str | None = None) -> str:
    """Stacked areas of the devices each job's placement uses over time, one panel per device kind (and
    one for host memory when it is limited). Needs matplotlib (:class:`placement.draw.PlotsUnavailable`
    otherwise)."""
    from placement.draw import PlotsUnavailable

    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotsUnavailable("drawing the allocation plot needs matplotlib, which is not installed: "
                               "pip install 'placement[plots]' (or pip install matplotlib)") from None
    cap = result.capacity
    panels = [t for t, c in enumerate(cap.counts) if c > 0]
    mem = math.isfinite(cap.host_memory)
    names = [j.name for j in result.jobs]
    legend = len(names) <= 20
    # the legend below the panels, in columns as wide as the longest name (7 pt text, about 4.2 pt a
    # character, and its colour patch) that fit the figure's 10 in: in the top right corner it overlapped
    # a long title (a Synergy bound's, or one with long job names). Constrained layout keeps the title,
    # the panels and the legend apart, the figure taller by the legend's rows.
    ncol = max(1, min(len(names), int(680 // (4.2 * max(map(len, names), default=1) + 30))))
    rows = -(-len(names) // ncol) if legend else 0
    fig = Figure(figsize=(10, 2.2 * (len(panels) + mem) + 0.8 + 0.16 * rows), layout="constrained")
    axes = fig.subplots(len(panels) + mem, 1, sharex=True, squeeze=False)[:, 0]
    import matplotlib

    cmap = matplotlib.colormaps.get_cmap("tab20")
    # a step per segment; zeros across the gaps between segments (nobody present)
    scale, unit = duration_scale(result.unit, result.makespan)
    steps: list[tuple[float, Segment | None]] = []
    for s in result.segments:
        if steps and s.start > steps[-1][0]:
            steps += [(steps[-1][0], None), (s.start, None)]
        steps += [(s.start, s), (s.end, s)]
    xs = [x / scale for x, _ in steps]

    def series(get):
        return [[get(s.allocations[i]) if s is not None and s.allocations[i] is not None
                 and s.allocations[i].running else 0.0 for _, s in steps] for i in range(len(names))]

    for ax, t in zip(axes, panels):
        ax.stackplot(xs, series(lambda a, t=t: a.used[t]), colors=[cmap(i % 20) for i in range(len(names))],
                     linewidth=0)
        ax.set_ylim(0, cap.counts[t])
        ax.set_ylabel(f"{cap.kinds[t]}\n(of {cap.counts[t]})")
    if mem:
        ax = axes[-1]
        ax.stackplot(xs, series(lambda a: a.host_memory / GB),
                     colors=[cmap(i % 20) for i in range(len(names))], linewidth=0)
        ax.set_ylim(0, cap.host_memory / GB)
        ax.set_ylabel("host memory\nGB")
    axes[-1].set_xlabel(f"time ({unit})" if unit else "time")
    jct = f"{result.avg_jct / scale:.4g}" + (f" {unit}" if unit else "")
    what = " (a bound, not a schedule)" if result.bound else ""
    fig.suptitle(title or f"{result.policy}{what}: devices used per job over time (avg JCT {jct}, max rho "
                          f"{result.max_rho:.3g})", fontsize=10)
    if legend:
        from matplotlib.patches import Patch

        fig.legend([Patch(color=cmap(i % 20)) for i in range(len(names))], names, loc="outside lower center",
                   fontsize=7, ncol=ncol)
    fig.savefig(path, dpi=110)
    return path
