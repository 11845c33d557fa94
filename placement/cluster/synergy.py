"""Synergy as Synergy does it: a base scheduler picks the jobs and their GPUs, then CPU and memory per server.

Synergy (OSDI 2022) keeps each job's GPU demand fixed. Every round (``round_length``, Synergy's 300 s
lease) a **base scheduler** orders the jobs present and admits them in that order while GPUs are free
(a job that does not fit is skipped, later ones may still start):

* ``fifo``: by arrival;
* ``las``: least attained service first (GPU time received so far);
* ``srtf``: shortest remaining time first (remaining work at the GPU-proportional rate);
* ``ftf``: Themis's finish-time fairness, the most unfair first: ``rho_est = (elapsed + remaining *
  t_prop) / T_id`` with ``T_id = samples * t_prop * max(1, N * g / G)`` (the job's time alone on ``1/N``
  of the cluster's ``G`` GPUs, time-sliced when that is less than its ``g``). ``fairness`` is Themis's
  knob ``f``: the ``ceil(f * n)`` most unfair jobs bid first (in ``rho_est`` order), the others follow by
  arrival.

Admitted jobs that ran in the previous round keep their servers; the others are placed best-fit (the
server with the fewest free GPUs that holds all of the job's GPUs), else spread over the servers with
the most free GPUs. Then CPU cores and host memory go to the jobs, **server by server**, a job's share
coming from the servers that hold its GPUs:

* ``proportional`` (Synergy's ``+fair``): each job holds ``g / G_s`` of server ``s``'s cores (rounded
  down to whole cores) and memory, and runs at its rate there, capped at that share;
* ``tune`` (Synergy-TUNE): per server, the CPU cores and memory are split among the server's jobs to
  maximise their total normalised throughput (each job's rate over its GPU-proportional rate), no job
  below its GPU-proportional rate. Each job picks one of its profiled options (whole cores, the memory
  levels of its throughput table or curve, and its proportional share); a vanishing charge per core and
  byte leaves resources that help nobody free. The split is exact (a multiple-choice knapsack over cores
  and memory, on HiGHS; when every job's fastest option fits at once, that is the answer without a
  solve). Synergy's own TUNE is a greedy toward this goal (jobs that gain take from jobs that do not
  lose below their share); the tests compare ours with a brute force over all splits. A job whose GPUs
  span servers keeps its proportional share on each of them;
* ``opt`` (Synergy-OPT): the LP relaxation of the same problem over the whole cluster as one pool of
  cores and memory, each job a convex combination (time-sharing) of its options: an upper bound on
  TUNE's total normalised throughput in every round (reported beside it; simulating it runs each job at
  its fractional LP rate, an idealised bound, not a schedule: its result has ``bound`` set, and the
  command line's table and JSON say so).

Per job it reports finish time, JCT and Themis's ``rho = JCT / T_id``, ``T_id`` the job's time alone on
``1/N`` of the cluster, ``N`` the average number of jobs present over its life (exactly as
:func:`placement.cluster.simulate.simulate`). A job finishing inside a round leaves its resources idle
until the next round starts, as in Synergy's simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from graphs.errors import InfeasibleError, InputError

from .curves import CurvePoint, JobCurve
from .formats import ClusterSpec, ServerSpec
from .policies import Allocation, Capacity, fair_share_time, solve_or_stop
from .simulate import JobOutcome, Segment, SimResult

__all__ = ["BASES", "ALLOCATIONS", "DEFAULT_ROUND", "GpuJob", "Option", "Menu", "job_menu", "tune_server",
           "opt_bound", "simulate_rounds", "allocate_rounds_once",
           "gpu_demand", "unfit_for_synergy"]

BASES = ("fifo", "las", "srtf", "ftf")
ALLOCATIONS = ("proportional", "tune", "opt")
DEFAULT_ROUND = 300e3  # Synergy's round, in ms (the unit of table jobs)
_TOL = 1e-9


@dataclass(frozen=True)
class GpuJob:
    """A job as Synergy sees it: its curve, work (samples), arrival and fixed GPU demand."""

    name: str
    curve: JobCurve
    samples: float
    arrival: float
    gpus: int
    model: str = ""


@dataclass(frozen=True)
class Option:
    """One way to run a job at its GPUs on one server: the host cores and memory it uses, its rate
    (samples per time unit) and the curve point behind it."""

    cores: int
    memory: float
    rate: float
    point: CurvePoint


@dataclass(frozen=True)
class Menu:
    """A job's options on one server at ``gpus`` GPUs there: ``share`` (cores, memory) is its
    GPU-proportional share, ``prop`` the option it runs on that share (``None``: the share cannot run it),
    ``options`` the Pareto-efficient options at least as fast as ``prop`` that fit the server."""

    gpus: int
    share: tuple[int, float]
    prop: Option | None
    options: tuple[Option, ...]


def unfit_for_synergy(kinds: Sequence[str], host: Sequence[bool], counts: Sequence[int] | None = None) -> str:
    """Why Synergy's allocation cannot run on a cluster of ``kinds`` (``host``: which are host CPU cores,
    not accelerators; ``counts``: the devices of each, where given), or ``""`` when it can: it needs
    exactly one accelerator kind (its GPUs), with at least one device (a kind of count 0 is none)."""
    counts = [1] * len(kinds) if counts is None else counts
    accel = [k for k, h, c in zip(kinds, host, counts) if not h and c > 0]
    if len(accel) == 1:
        return ""
    empty = [k for k, h, c in zip(kinds, host, counts) if not h and c <= 0]
    has = f"{len(accel)} ({', '.join(accel)})" if accel else \
        "none" + (f" with devices ({', '.join(f'{k}: 0' for k in empty)})" if empty else "")
    return (f"Synergy's allocation (proportional, tune, opt) needs a cluster with exactly one accelerator "
            f"kind (its GPUs); this one has {has}, host CPU cores not counted")


def _kinds(capacity: Capacity) -> tuple[int, int | None]:
    why = unfit_for_synergy(capacity.kinds, capacity.host, capacity.counts)
    if why:
        raise InputError(why)
    accel = [t for t, h in enumerate(capacity.host) if not h]
    hosts = [t for t, h in enumerate(capacity.host) if h]
    return accel[0], (hosts[0] if hosts else None)


def gpu_demand(curve: JobCurve, request: Sequence[int] | None, acc: int,
               host_memory: float = math.inf) -> int:
    """A job's fixed GPU demand: its ``request``'s accelerators, else those of its default request under
    ``fifo`` (:func:`~placement.cluster.policies.default_request`): the fewest accelerators of any
    efficient point reaching its best time per sample within 10%, both within ``host_memory`` bytes (the
    cluster's; the command passes it), so a point needing more memory than the cluster has never sets
    the demand (a throughput table: its own count). A job no point of which fits that memory keeps the
    knee of its whole curve (it cannot run on any share; the simulation says so)."""
    if request is not None and request[acc] > 0:
        return int(request[acc])
    from .policies import default_request

    knee = default_request(curve, host_memory)
    if not any(knee):
        knee = default_request(curve)
    return max(1, int(knee[acc]))


def _counts(T: int, acc: int, host: int | None, gpus: int, cores: int) -> tuple[int, ...]:
    c = [0] * T
    c[acc] = gpus
    if host is not None:
        c[host] = cores
    return tuple(c)


def job_menu(curve: JobCurve, gpus: int, server: ServerSpec, acc: int, host: int | None) -> Menu:
    """The job's menu on ``server`` with ``gpus`` of its GPUs there (see :class:`Menu`)."""
    G = server.counts[acc]
    cores = (gpus * server.counts[host]) // G if host is not None else 0
    mem = server.host_memory * gpus / G
    T = len(curve.kinds)
    p = curve.best_within(_counts(T, acc, host, gpus, cores), mem)
    prop = None if p is None else Option(p.counts[host] if host is not None else 0, p.host_memory,
                                         1.0 / p.time_per_sample, p)
    if prop is None:
        return Menu(gpus, (cores, mem), None, ())
    cap_c = server.counts[host] if host is not None else 0
    opts = [prop]
    for q in curve.points:
        if q.counts[acc] > gpus or any(x for t, x in enumerate(q.counts) if t not in (acc, host)):
            continue
        qc = q.counts[host] if host is not None else 0
        if qc <= cap_c and q.host_memory <= server.host_memory * (1 + 1e-12) \
                and 1.0 / q.time_per_sample >= prop.rate * (1 - _TOL):
            opts.append(Option(qc, q.host_memory, 1.0 / q.time_per_sample, q))
    return Menu(gpus, (cores, mem), prop, tuple(_pareto(opts)))


def _pareto(opts: list[Option]) -> list[Option]:
    """Options no other one dominates (no more cores, no more memory, at least as fast)."""
    opts = sorted(opts, key=lambda o: (-o.rate, o.cores, o.memory))
    kept: list[Option] = []
    for o in opts:
        if not any(k.cores <= o.cores and k.memory <= o.memory * (1 + 1e-12) for k in kept):
            kept.append(o)
    return kept


# --------------------------------------------------------------------------- one server: TUNE
def _choice_and_capacity_rows(mod, menus, xs, cores: float, memory: float, scale_c: float,
                              scale_m: float) -> None:
    """The rows TUNE's program and OPT's LP share: one option per job (columns ``xs[j]``), and the
    options' cores and memory (scaled) within ``cores`` and ``memory`` (``inf``: memory unbounded)."""
    rows, cols, vals = [], [], []
    for j, x in enumerate(xs):
        rows += [j] * len(x)
        cols += list(x)
        vals += [1.0] * len(x)
    n = len(menus)
    mod.add_rows([1.0] * n, [1.0] * n, rows, cols, vals)
    rows, cols, vals = [], [], []
    for m, x in zip(menus, xs):
        for o, c in zip(m.options, x):
            if o.cores:
                rows.append(0)
                cols.append(int(c))
                vals.append(o.cores / scale_c)
            if o.memory and math.isfinite(memory):
                rows.append(1)
                cols.append(int(c))
                vals.append(o.memory / scale_m)
    mod.add_rows([-math.inf] * 2, [cores / scale_c, memory / scale_m if math.isfinite(memory) else math.inf],
                 rows, cols, vals)


def tune_server(menus: Sequence[Menu], cores: float, memory: float, *,
                time_limit: float | None = None, statuses: list | None = None) -> tuple[list[Option], float]:
    """Synergy-TUNE on one server: one option per job (``menus``), within ``cores`` and ``memory``, every
    job at least at its proportional rate, the total normalised throughput ``sum(rate / prop rate)``
    maximal (ties: the fewest resources). Returns the picks and that total; ``statuses``, when given,
    gets ``"optimal"`` or ``"time limit"`` (the MILP stopped at ``time_limit``, picks not proven best)."""
    if not menus:
        return [], 0.0
    best = [max(m.options, key=lambda o: (o.rate, -o.cores, -o.memory)) for m in menus]
    if _fits(best, cores, memory):  # everyone gets their fastest option
        if statuses is not None:
            statuses.append("optimal")
        return best, _value(menus, best)
    from solvers._milp import OPTIMAL, MilpModel

    scale_m = memory if math.isfinite(memory) and memory > 0 else 1.0
    scale_c = cores if cores > 0 else 1.0
    eps = 1e-7
    mod = MilpModel()
    xs = [mod.add_cols(len(m.options), lb=0, ub=1, integer=True,
                       cost=[-(o.rate / m.prop.rate) + eps * (o.cores / scale_c + o.memory / scale_m)
                             for o in m.options]) for m in menus]
    _choice_and_capacity_rows(mod, menus, xs, cores, memory, scale_c, scale_m)
    start = np.zeros(mod.num_cols)
    for m, x in zip(menus, xs):
        start[x[m.options.index(m.prop)]] = 1.0
    res = solve_or_stop(mod, gap=1e-9, time_limit=time_limit, start=start,
                        raw={"abs_gap": 1e-10, "highs_options": {"presolve": "off"}})
    if statuses is not None:
        statuses.append("optimal" if res.status == OPTIMAL else "time limit")
    if res.x is None:  # the proportional picks always fit; keep them if the solver gave nothing
        picks = [m.prop for m in menus]
    else:
        picks = [m.options[int(np.argmax([res.x[c] for c in x]))] for m, x in zip(menus, xs)]
    return picks, _value(menus, picks)


def _fits(picks: Sequence[Option], cores: float, memory: float) -> bool:
    return (sum(o.cores for o in picks) <= cores + _TOL
            and sum(o.memory for o in picks) <= memory * (1 + 1e-12) + 1e-6)


def _value(menus: Sequence[Menu], picks: Sequence[Option]) -> float:
    return sum(o.rate / m.prop.rate for m, o in zip(menus, picks))


# --------------------------------------------------------------------------- the cluster: OPT
def opt_bound(menus: Sequence[Menu], cores: float, memory: float) -> tuple[float, list[float]]:
    """Synergy-OPT: the LP over all jobs' options with the cluster's cores and memory as one pool, each
    job a convex combination of its options, none below its proportional rate. Returns the total
    normalised throughput (an upper bound on :func:`tune_server`'s, server by server) and each job's
    fractional rate."""
    from solvers._milp import MilpModel

    if not menus:
        return 0.0, []
    scale_m = memory if math.isfinite(memory) and memory > 0 else 1.0
    scale_c = cores if cores > 0 else 1.0
    mod = MilpModel()
    xs = [mod.add_cols(len(m.options), lb=0.0, ub=1.0, cost=[-(o.rate / m.prop.rate) for o in m.options])
          for m in menus]
    _choice_and_capacity_rows(mod, menus, xs, cores, memory, scale_c, scale_m)
    res = solve_or_stop(mod, gap=1e-9, raw={"highs_options": {"presolve": "off"}})
    if res.x is None:
        raise RuntimeError(f"Synergy-OPT LP: {res.status} {res.message}")
    rates = [float(sum(res.x[c] * o.rate for o, c in zip(m.options, x))) for m, x in zip(menus, xs)]
    return -float(res.objective), rates


# --------------------------------------------------------------------------- the simulation
class _Cluster:
    """Servers, kinds and each job's menus per (server, GPUs there), computed once."""

    def __init__(self, jobs: Sequence[GpuJob], spec: ClusterSpec) -> None:
        self.capacity = Capacity.of(spec)
        self.acc, self.host = _kinds(self.capacity)
        self.servers = spec.server_list
        self.jobs = jobs
        self.memo: dict[tuple[int, int, int], Menu] = {}
        gpus = sum(s.counts[self.acc] for s in self.servers)
        for j in jobs:
            if j.gpus > gpus:
                raise InfeasibleError(f"job {j.name!r} needs {j.gpus} GPUs, the cluster has {gpus}")
        # each job's GPU-proportional rate: on the largest server that holds all its GPUs, else (a job
        # larger than any server must span) on its GPUs' share of the whole cluster's cores and memory
        self.prop_rate: list[float] = []
        T = len(self.capacity.kinds)
        for i, j in enumerate(jobs):
            fit = [s for s, sv in enumerate(self.servers) if sv.counts[self.acc] >= j.gpus]
            if fit:
                s = max(fit, key=lambda s: (self.servers[s].counts[self.acc], -s))
                p = self.menu(i, s, j.gpus).prop
                rate = None if p is None else p.rate
            else:
                cores = (j.gpus * self.capacity.counts[self.host]) // gpus if self.host is not None else 0
                q = j.curve.best_within(_counts(T, self.acc, self.host, j.gpus, cores),
                                        self.capacity.host_memory * j.gpus / gpus)
                rate = None if q is None else 1.0 / q.time_per_sample
            if rate is None:
                raise InfeasibleError(f"job {j.name!r} cannot run on its GPU-proportional share "
                                      f"({j.gpus} GPU(s) with their cores and memory)")
            self.prop_rate.append(rate)

    def menu(self, i: int, s: int, g: int) -> Menu:
        key = (i, s, g)
        if key not in self.memo:
            self.memo[key] = job_menu(self.jobs[i].curve, g, self.servers[s], self.acc, self.host)
        return self.memo[key]


def _place(g: int, free: list[int]) -> list[tuple[int, int]] | None:
    """Best fit on one server, else spread over the servers with the most free GPUs."""
    fit = [s for s, f in enumerate(free) if f >= g]
    if fit:
        s = min(fit, key=lambda s: (free[s], s))
        return [(s, g)]
    if sum(free) < g:
        return None
    out, left = [], g
    for s in sorted(range(len(free)), key=lambda s: (-free[s], s)):
        take = min(left, free[s])
        if take:
            out.append((s, take))
            left -= take
        if not left:
            break
    return out


def _admit(ranked: Sequence[int], jobs: Sequence[GpuJob], servers: Sequence[ServerSpec], acc: int,
           placed: dict[int, list[tuple[int, int]]]) -> dict[int, list[tuple[int, int]]]:
    """One round's GPUs: in ``ranked`` order each job is admitted while the cluster has GPUs for it (one
    that does not fit is skipped). Jobs ``placed`` last round on one server keep it; one that spanned
    servers moves onto a single server when one has room for all its GPUs; the others are placed
    best-fit (:func:`_place`). Returns ``{job: [(server, GPUs there), ...]}``."""
    free_total = sum(s.counts[acc] for s in servers)
    admitted = []
    for i in ranked:
        if jobs[i].gpus <= free_total:
            admitted.append(i)
            free_total -= jobs[i].gpus
    free = [s.counts[acc] for s in servers]
    now: dict[int, list[tuple[int, int]]] = {}
    keep = set(admitted) & set(placed)
    for i in admitted:
        if i in keep and len(placed[i]) == 1:
            now[i] = placed[i]
            for s, g in now[i]:
                free[s] -= g
    for i in admitted:  # a job that spans servers moves onto one when one has room for all its GPUs
        if i in keep and len(placed[i]) > 1:
            fit = [s for s, f in enumerate(free) if f >= jobs[i].gpus]
            now[i] = [(min(fit, key=lambda s: (free[s], s)), jobs[i].gpus)] if fit else placed[i]
            for s, g in now[i]:
                free[s] -= g
    for i in admitted:
        if i not in keep:
            where = _place(jobs[i].gpus, free)
            if where is None:
                raise AssertionError("admitted job does not fit")
            now[i] = where
            for s, g in where:
                free[s] -= g
    return now


def simulate_rounds(jobs: Sequence[GpuJob], cluster: ClusterSpec, allocation: str = "tune", *,
                    base: str = "fifo", round_length: float = DEFAULT_ROUND, fairness: float = 1.0,
                    time_limit: float | None = None,
                    progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Replay ``jobs`` on ``cluster`` (its ``servers``) in rounds of ``round_length``: ``base`` picks the
    jobs and their GPUs, ``allocation`` (``proportional``, ``tune``, ``opt``) their cores and memory (see
    the module doc). ``progress(done, total)`` is called at each completion. The result's ``stats`` hold
    the rounds, the server splits TUNE solved (each distinct set of jobs on a server once) and, for
    ``tune``, the mean ratio of TUNE's total normalised throughput to OPT's bound over the rounds where
    some job has more than one option."""
    if not (round_length > 0 and math.isfinite(round_length)):
        raise InputError(f"the round (lease) must be a positive finite number, got {round_length}")
    _check_args(jobs, allocation, base, fairness)
    cl = _Cluster(jobs, cluster)
    acc = cl.acc
    servers = cl.servers
    S = len(servers)
    T = len(cl.capacity.kinds)
    G = sum(s.counts[acc] for s in servers)
    n = len(jobs)
    order = sorted(range(n), key=lambda i: (jobs[i].arrival, i))
    nxt = 0
    remaining = [float(j.samples) for j in jobs]
    attained = [0.0] * n
    finish = [math.inf] * n
    first: list[Allocation | None] = [None] * n
    placed: dict[int, list[tuple[int, int]]] = {}
    active: list[int] = []
    R = float(round_length)
    t = math.ceil(jobs[order[0]].arrival / R - 1e-12) * R
    segments: list[Segment] = []
    tune_memo: dict[tuple, tuple] = {}
    stats = {"rounds": 0, "server_splits": 0, "tune_over_opt": [], "opt_over_prop": []}
    statuses: list[str] = []  # per round: did some server's TUNE MILP stop at time_limit
    t_prop = [1.0 / r for r in cl.prop_rate]
    done = 0
    while done < n:
        while nxt < n and jobs[order[nxt]].arrival <= t + 1e-9:
            active.append(order[nxt])
            nxt += 1
        if not active:
            t = math.ceil(jobs[order[nxt]].arrival / R - 1e-12) * R
            continue
        stats["rounds"] += 1
        ranked = _rank(base, active, jobs, remaining, attained, t, t_prop, G, fairness)
        placed = _admit(ranked, jobs, servers, acc, placed)
        rates, allocs, limited = _allocate(allocation, cl, placed, tune_memo, stats, time_limit, T)
        statuses.append("time limit" if limited else "optimal")
        # advance one round; jobs finishing inside it leave their resources idle until the next one
        ends = []
        for i in placed:
            r = rates[i]
            if first[i] is None:
                first[i] = allocs[i]
            if remaining[i] <= r * R * (1 + 1e-12):
                dt = remaining[i] / r
                ends.append((t + dt, i))
                attained[i] += jobs[i].gpus * dt
                remaining[i] = 0.0
            else:
                remaining[i] -= r * R
                attained[i] += jobs[i].gpus * R
        ends.sort()
        start = t
        present = {i: allocs.get(i, _WAIT[T]) for i in active}
        for e, i in ends + [(t + R, None)]:
            if e > start:
                seg = [None] * n
                for k, a in present.items():
                    seg[k] = a
                _append(segments, Segment(start, e, tuple(seg)))
                start = e
            if i is not None:
                finish[i] = e
                del present[i]
                active.remove(i)
                placed.pop(i, None)
                done += 1
                if progress is not None:
                    progress(done, n)
        t += R
    contention = _contention([j.arrival for j in jobs], finish)
    outcomes = []
    for i, j in enumerate(jobs):
        st = fair_share_time(j.curve, cl.capacity, contention[i])
        outcomes.append(JobOutcome(j.name, j.arrival, j.samples, finish[i], j.samples * st, contention[i],
                                   first[i] or _WAIT[T], j.samples - remaining[i]))
    ratio = stats.pop("tune_over_opt")
    gain = stats.pop("opt_over_prop")
    stats["tune_over_opt_mean"] = float(np.mean(ratio)) if ratio else None
    stats["tune_over_opt_min"] = float(np.min(ratio)) if ratio else None
    stats["tune_over_opt_max"] = float(np.max(ratio)) if ratio else None
    stats["opt_over_prop_mean"] = float(np.mean(gain)) if gain else None
    stats.update(base=base, allocation=allocation, round=R, servers=S, fairness=fairness)
    return SimResult(f"{base}+{allocation}", cl.capacity, tuple(outcomes), tuple(segments), R,
                     stats["rounds"], 0.0, jobs[0].curve.unit or "ms", "simulation", tuple(statuses), stats,
                     bound=allocation == "opt")


def _check_args(jobs, allocation: str, base: str, fairness: float) -> None:
    if allocation not in ALLOCATIONS:
        raise InputError(f"unknown allocation {allocation!r}; choose one of: {', '.join(ALLOCATIONS)}")
    if base not in BASES:
        raise InputError(f"unknown base scheduler {base!r}; choose one of: {', '.join(BASES)}")
    if not 0 < fairness <= 1:
        raise InputError(f"the fairness knob f must be in (0, 1], got {fairness}")
    if not jobs:
        raise InputError("no jobs")


def allocate_rounds_once(jobs: Sequence[GpuJob], cluster: ClusterSpec, allocation: str = "proportional", *,
                         base: str = "fifo", fairness: float = 1.0,
                         time_limit: float | None = None) -> SimResult:
    """One round of Synergy's allocation for all ``jobs`` at the time the last one arrives, held until
    each finishes (the one-shot ``placement cluster JOBS.json --policy proportional|tune|opt``): ``base``
    ranks the jobs (nothing received yet), they are admitted while GPUs are free and placed on the
    servers, and ``allocation`` gives them cores and memory exactly as a round of
    :func:`simulate_rounds` does. A job not admitted waits (finish ``inf``). ``rho`` uses ``N =
    len(jobs)``, as :func:`placement.cluster.simulate.allocate_once`."""
    _check_args(jobs, allocation, base, fairness)
    cl = _Cluster(jobs, cluster)
    T = len(cl.capacity.kinds)
    G = sum(s.counts[cl.acc] for s in cl.servers)
    n = len(jobs)
    now = max(j.arrival for j in jobs)
    ranked = _rank(base, list(range(n)), jobs, [float(j.samples) for j in jobs], [0.0] * n, now,
                   [1.0 / r for r in cl.prop_rate], G, fairness)
    placed = _admit(ranked, jobs, cl.servers, cl.acc, {})
    stats = {"rounds": 1, "server_splits": 0, "tune_over_opt": [], "opt_over_prop": []}
    rates, allocs, limited = _allocate(allocation, cl, placed, {}, stats, time_limit, T)
    status = "time limit" if limited else "optimal"
    outcomes, ends, held = [], [], []
    for i, j in enumerate(jobs):
        a = allocs.get(i, _WAIT[T])
        fin = now + j.samples / rates[i] if i in rates else math.inf
        ends.append(fin)
        held.append(a)
        st = fair_share_time(j.curve, cl.capacity, n)
        outcomes.append(JobOutcome(j.name, j.arrival, j.samples, fin, j.samples * st, float(n), a,
                                   j.samples if i in rates else 0.0))
    cuts = sorted({now} | {e for e in ends if math.isfinite(e)})
    segments = tuple(Segment(s, e, tuple(a if end >= e else None for a, end in zip(held, ends)))
                     for s, e in zip(cuts, cuts[1:]))
    ratio = stats.pop("tune_over_opt")
    stats.pop("opt_over_prop")
    stats["tune_over_opt"] = ratio[0] if ratio else None
    stats.update(base=base, allocation=allocation, servers=len(cl.servers), fairness=fairness)
    return SimResult(f"{base}+{allocation}", cl.capacity, tuple(outcomes), segments, None, 1, 0.0,
                     jobs[0].curve.unit or "ms", "allocation", (status,), stats, bound=allocation == "opt")


class _WaitAlloc(dict):
    def __missing__(self, T):
        a = Allocation(tuple([0] * T), 0.0, None)
        self[T] = a
        return a


_WAIT = _WaitAlloc()


def _append(segments: list[Segment], seg: Segment) -> None:
    """Merge with the previous segment when nothing changed between them."""
    if segments and segments[-1].end == seg.start and segments[-1].allocations == seg.allocations:
        segments[-1] = Segment(segments[-1].start, seg.end, seg.allocations)
    else:
        segments.append(seg)


def _rank(base, active, jobs, remaining, attained, t, t_prop, G, fairness) -> list[int]:
    if base == "fifo":
        return sorted(active, key=lambda i: (jobs[i].arrival, i))
    if base == "las":
        return sorted(active, key=lambda i: (attained[i], jobs[i].arrival, i))
    if base == "srtf":
        return sorted(active, key=lambda i: (remaining[i] * t_prop[i], jobs[i].arrival, i))
    N = len(active)

    def rho_est(i):
        ideal = jobs[i].samples * t_prop[i] * max(1.0, N * jobs[i].gpus / G)
        return (t - jobs[i].arrival + remaining[i] * t_prop[i]) / ideal

    by_rho = sorted(active, key=lambda i: (-rho_est(i), jobs[i].arrival, i))
    k = math.ceil(fairness * len(active) - 1e-12)
    bidders = by_rho[:k]
    rest = sorted(by_rho[k:], key=lambda i: (jobs[i].arrival, i))
    return bidders + rest


def _allocate(allocation, cl: _Cluster, placed, tune_memo, stats, time_limit, T):
    """Cores and memory for the placed jobs: ``{job: rate}``, ``{job: Allocation}`` and whether some server's
    TUNE MILP stopped at ``time_limit`` (its picks not proven best)."""
    acc, host = cl.acc, cl.host
    rates: dict[int, float] = {}
    allocs: dict[int, Allocation] = {}
    spanning = {i for i, w in placed.items() if len(w) > 1}
    by_server: dict[int, list[int]] = {}
    for i, w in placed.items():
        if i not in spanning:
            by_server.setdefault(w[0][0], []).append(i)

    def held(i, cores, mem, rate):
        """A fractional (LP) allocation shown as the job's share, running at ``rate``."""
        dev = _counts(T, acc, host, cl.jobs[i].gpus, int(round(cores)))
        return Allocation(dev, float(mem), CurvePoint(dev, 1.0 / rate, float(mem)))

    for i in spanning:  # its proportional share on every server it spans, run as one pool
        ms = [cl.menu(i, s, g) for s, g in placed[i]]
        cores = sum(m.share[0] for m in ms)
        mem = sum(m.share[1] for m in ms)
        p = cl.jobs[i].curve.best_within(_counts(T, acc, host, cl.jobs[i].gpus, cores), mem)
        if p is None:
            raise InfeasibleError(f"job {cl.jobs[i].name!r} cannot run on the proportional shares of the "
                                  f"servers its GPUs span")
        rates[i] = 1.0 / p.time_per_sample
        allocs[i] = Allocation(_counts(T, acc, host, cl.jobs[i].gpus, cores), float(mem), p)
    menus_all, ids_all = [], []
    free_c = [s.counts[host] if host is not None else 0 for s in cl.servers]
    free_m = [s.host_memory for s in cl.servers]
    for i in spanning:
        for (s, g) in placed[i]:
            m = cl.menu(i, s, g)
            free_c[s] -= m.share[0]
            free_m[s] -= m.share[1]
    tune_total = 0.0
    limited = False  # some server's TUNE MILP stopped at time_limit (picks not proven best)
    for s, ids in sorted(by_server.items()):  # a canonical order: OPT's cached rates follow it
        ids = sorted(ids)
        ms = [cl.menu(i, s, placed[i][0][1]) for i in ids]
        if allocation == "proportional":
            for i, m in zip(ids, ms):
                rates[i] = m.prop.rate
                allocs[i] = Allocation(_counts(T, acc, host, cl.jobs[i].gpus, m.share[0]), float(m.share[1]),
                                       m.prop.point)
            continue
        menus_all += ms
        ids_all += ids
        if allocation == "tune":
            key = (s, tuple((i, placed[i][0][1]) for i in ids), free_c[s], free_m[s])
            if key not in tune_memo:
                said: list[str] = []
                picks, val = tune_server(ms, free_c[s], free_m[s], time_limit=time_limit, statuses=said)
                stats["server_splits"] += 1
                tune_memo[key] = (dict(zip(ids, picks)), val, "time limit" in said)
            picks, val, stopped = tune_memo[key]
            limited = limited or stopped
            tune_total += val
            for i in ids:
                o = picks[i]
                rates[i] = o.rate
                allocs[i] = Allocation(_counts(T, acc, host, cl.jobs[i].gpus, o.cores), float(o.memory),
                                       o.point)
    if allocation in ("tune", "opt") and menus_all and any(len(m.options) > 1 for m in menus_all):
        key = ("opt", tuple(sorted((i, tuple(w)) for i, w in placed.items())))
        if key not in tune_memo:
            tune_memo[key] = opt_bound(menus_all, sum(free_c), sum(free_m))
        bound, lp_rates = tune_memo[key]
        prop_total = float(len(menus_all))
        if allocation == "tune":
            stats["tune_over_opt"].append(tune_total / bound if bound > 0 else 1.0)
        stats["opt_over_prop"].append(bound / prop_total)
        if allocation == "opt":
            for i, m, r in zip(ids_all, menus_all, lp_rates):
                rates[i] = r
                allocs[i] = held(i, m.share[0], m.share[1], r)
    elif allocation == "opt":
        for i, m in zip(ids_all, menus_all):
            rates[i] = m.prop.rate
            allocs[i] = Allocation(_counts(T, acc, host, cl.jobs[i].gpus, m.share[0]), float(m.share[1]),
                                   m.prop.point)
    return rates, allocs, limited


def _contention(arrival: Sequence[float], finish: Sequence[float]) -> list[float]:
    """Each job's average number of jobs present over its life (itself included)."""
    a = np.asarray(arrival, float)
    f = np.asarray(finish, float)
    times = np.unique(np.concatenate([a, f]))
    # jobs present on [times[k], times[k+1])
    n_at = np.searchsorted(np.sort(a), times, side="right") - np.searchsorted(np.sort(f), times, side="right")
    F = np.concatenate([[0.0], np.cumsum(n_at[:-1] * np.diff(times))])
    life = f - a
    area = np.interp(f, times, F) - np.interp(a, times, F)
    return [float(x / L) if L > 0 else 1.0 for x, L in zip(area, life)]
