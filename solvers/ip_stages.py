"""The contiguous integer program for replicated pipelines (:mod:`graphs.parallel`), on HiGHS.

The domain is the exact stage DP's (``dp``): stages are differences of nested ideals, each on one
device kind with a tensor-parallel degree ``t``, a data-parallel degree ``d`` and one variant per node;
so the two optima are equal, and every plan is checked by :func:`graphs.parallel.evaluate_plan`.

**Formulation** (the ideal-chain formulation of :mod:`solvers.ip`, plus configurations). ``P`` stage
slots, ``P = min(nodes, devices, N)`` (each stage holds a node, uses a device and has ``d >= 1``):

* ``z[u, p]`` (binary): node ``u`` is in the first ``p + 1`` stages; monotone in ``p``, down-closed along
  every edge, ``z[u, P-1] = 1``. Stage membership is ``x[u, p] = z[u, p] - z[u, p-1]``;
* ``c[p, o]`` (binary): stage ``p`` runs configuration ``o = (kind, t, d)`` (``t * d`` at most the kind's
  count, ``d`` an allowed degree); at most one per stage, used stages first and never empty; per kind
  ``sum t*d*c <= count``;
* ``w[v, p]`` (binary): node ``v.node`` is in stage ``p`` with variant ``v``; ``sum_v w[v, p] = x[u, p]``
  and a variant of ``(kind, t)`` only where the stage's configuration has that kind and ``t``;
* ``enter[e, p] >= x[c, p] - x[src, p]`` and ``leave[e, p] >= x[src, p] - x[c, p]`` for every consumer
  ``c`` of tensor ``e``; a variant's sync term on ``e`` is paid through ``sy >= w + enter - 1`` (or
  ``leave``): lower bounds the minimisation keeps tight where it matters;
* time, per stage and configuration (big-M on ``c[p, o]``): ``d * L >= comm_kind + sum (time_v + d *
  resync_o * params_v) w[v, p] + sync``, i.e. ``L >=`` the stage's time per sample;
* memory: ``s[p] = s[p+1] + sum_o d_o c[p, o]`` is the sum of ``d`` from stage ``p`` on (``s[0] <= N``).
  Under 1F1B, PipeDream and 2BW the in-flight count is one-hot: ``Y[p, j]`` (binary, ``j = 1..smax``),
  ``y[p] = sum j Y[p, j]`` with ``d_o * y[p] >= s[p]`` when ``c[p, o]`` (so ``y = ceil(s / d)`` at the
  optimum: a larger ``y`` only costs memory); then for each ``j`` and kind ``sum_v mem_v(j) w[v, p] <=
  capacity`` when ``Y[p, j]`` (big-M), ``mem_v(j) = a*j + b + (versions(j) - 1) * w``: linear in ``w``
  because ``j`` is fixed in each row. Under GPipe ``y = N / d`` is fixed by the configuration, so the
  memory rows are per configuration.

The formulation is exact for the model (no restriction); its size grows with nodes × variants × stage
slots, so it is meant for small and coarsened graphs (``auto`` hands it those) and as a bound
provider under a time limit.

**Statuses.** ``optimal`` only when HiGHS closed the requested gap; on a limit the best plan (the MIP's
or the warm start's, whichever the evaluator scores better) with the solver's bound and the gap:
``feasible``. ``infeasible`` when HiGHS proves it. ``warm_start``: a plan (list of
:class:`~graphs.parallel.Stage`), or ``"dp"`` / ``"pipedream"`` to start from that solver's plan on
the stage model (the names of earlier releases, ``"dp-replicated"`` / ``"pipedream-replicated"``,
too).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from graphs.errors import InputError
from graphs.parallel import (
    ParallelProblem,
    Stage,
    evaluate_plan,
    in_flight,
    latency_lower_bound,
    resync_bandwidth,
    weight_versions,
)

from . import _milp
from .base import Solution, SolveOptions, Status, stage_solution

__all__ = ["solve_problem", "solve_stages", "build_model"]


@dataclass
class _Layout:
    """Column indices of the model's variables."""

    P: int
    configs: list[tuple[int, int, int]]
    L: int
    z: np.ndarray  # [n, P]
    c: np.ndarray  # [P, O]
    w: np.ndarray  # [V, P]
    enter: np.ndarray  # [M, P]
    leave: np.ndarray  # [M, P]
    sync: list[tuple[int, int, int, int]]  # (variant, tensor, 0 in / 1 out, column block start)
    s: np.ndarray  # [P]
    Y: np.ndarray | None  # [P, ymax]
    ymax: int
    lower_bound: float  # L's lower bound (see _lower_bound)
    lat: np.ndarray | None = None  # [P] stage latencies, with a latency target
    #: seconds -> the model's time unit: every time coefficient, ``L`` and ``lat`` are in ``scale * s``
    scale: float = 1.0


def _mem(problem: ParallelProblem, v, y: int) -> float:
    return v.a * y + v.b + (weight_versions(problem.schedule, y) - 1) * v.w


def _lower_bound(problem: ParallelProblem, configs) -> float:
    """A bound every plan's largest stage time meets (the LP relaxation alone sees none): a stage of
    ``t * d`` devices takes at least ``t * sum time`` device-seconds per sample, so the largest stage is
    at least the least total work over all devices; and each node's stage at least its fastest time over
    the most replicas its (kind, t) allows."""
    g = problem.graph
    total = sum(k.count for k in problem.kinds)
    dmax: dict[tuple[int, int], int] = {}
    for k, t, d in configs:
        dmax[(k, t)] = max(dmax.get((k, t), 0), d)
    work, alone = 0.0, 0.0
    for u in range(g.num_nodes):
        opts = [(vi, k, t) for (k, t) in dmax for vi in g.options.get((u, k, t), ())]
        if not opts or total == 0:
            return 0.0  # infeasible: the rows say so
        work += min(g.variants[vi].time * t for vi, _, t in opts)
        alone = max(alone, min(g.variants[vi].time / dmax[(k, t)] for vi, k, t in opts))
    return max(work / total, alone) * (1 - 1e-9)


def build_model(problem: ParallelProblem, latency_max: float | None = None, *,
                objective: str = "max-load",
                max_load_max: float | None = None) -> tuple[_milp.MilpModel, _Layout]:
    """The MILP of ``problem`` (see the module doc) and where its variables are; with ``latency_max``
    (seconds per sample, :attr:`graphs.parallel.PlanEvaluation.latency`'s unit) the plan's latency at
    most that. ``objective="latency"`` minimises the latency instead of the time per sample, which
    ``max_load_max`` then caps (seconds per sample; ``None``: no cap)."""
    if objective not in ("max-load", "latency"):
        raise ValueError(f"objective must be 'max-load' or 'latency', got {objective!r}")
    g = problem.graph
    n, M, K = g.num_nodes, g.num_tensors, len(problem.kinds)
    N = problem.microbatches
    counts = [k.count for k in problem.kinds]
    total = sum(counts)
    P = max(1, min(n, total, N))
    degrees = problem.replica_degrees()
    configs = [(k, t, d) for k in range(K) for t in g.degrees(k) for d in degrees if t * d <= counts[k]]
    O = len(configs)
    V = len(g.variants)
    gpipe = problem.schedule == "gpipe"
    smax = max(1, min(N, total))

    m = _milp.MilpModel()
    # times in units of the largest one: HiGHS's feasibility tolerances are absolute (1e-9), and a model
    # in seconds (1e-4 s per sample is common) would read them as 1e-5 relative
    ref = max([float(v.time) for v in g.variants] + [float(g.tensor_time.max(initial=0.0))])
    S = 1.0 / ref if ref > 0 and math.isfinite(ref) else 1.0
    lb = _lower_bound(problem, configs)
    L = int(m.add_cols(1, lb=lb * S, ub=math.inf, cost=1.0)[0])
    z = m.add_cols(n * P, integer=True).reshape(n, P)
    m.tighten(z[:, P - 1], lb=1.0)
    c = m.add_cols(P * O, integer=True).reshape(P, O)
    w = m.add_cols(V * P, integer=True).reshape(V, P)
    enter = m.add_cols(M * P).reshape(M, P)
    leave = m.add_cols(M * P).reshape(M, P)
    sync = []
    for vi, v in enumerate(g.variants):
        for side, terms in ((0, v.sync_in), (1, v.sync_out)):
            for e in terms:
                sync.append((vi, int(e), side, int(m.add_cols(P)[0])))
    s = m.add_cols(P, lb=0.0, ub=float(N))
    Y = None if gpipe else m.add_cols(P * smax, integer=True).reshape(P, smax)
    lay = _Layout(P, configs, L, z, c, w, enter, leave, sync, s, Y, smax, lb, scale=S)

    def rows(lo, hi, entries):
        """Add rows from a list of per-row [(col, val), ...]."""
        if not entries:
            return
        r = np.concatenate([np.full(len(x), i) for i, x in enumerate(entries)]).astype(np.int64)
        cols = np.array([cv[0] for x in entries for cv in x], np.int64)
        vals = np.array([cv[1] for x in entries for cv in x], float)
        m.add_rows(np.broadcast_to(np.asarray(lo, float), (len(entries),)),
                   np.broadcast_to(np.asarray(hi, float), (len(entries),)), r, cols, vals)

    def xs(u, p, sign=1.0):
        """Stage membership x[u, p] as (col, val) pairs."""
        out = [(z[u, p], sign)]
        if p > 0:
            out.append((z[u, p - 1], -sign))
        return out

    inf = math.inf
    # chain of nested ideals: monotone, down-closed
    rows(-inf, 0.0, [[(z[u, p], 1.0), (z[u, p + 1], -1.0)] for u in range(n) for p in range(P - 1)])
    rows(-inf, 0.0, [[(z[int(b), p], 1.0), (z[int(a), p], -1.0)] for a, b in zip(g.src, g.dst)
                     for p in range(P)])
    # variants: one per member node; kind and t as the stage's configuration
    var_of = [[] for _ in range(n)]
    for vi, v in enumerate(g.variants):
        var_of[v.node].append(vi)
    rows(0.0, 0.0, [[(w[vi, p], 1.0) for vi in var_of[u]] + xs(u, p, -1.0)
                    for u in range(n) for p in range(P)])
    by_kt: dict[tuple[int, int], list[int]] = {}
    for oi, (k, t, _) in enumerate(configs):
        by_kt.setdefault((k, t), []).append(oi)
    rows(-inf, 0.0, [[(w[vi, p], 1.0) for vi in vids] + [(c[p, oi], -1.0) for oi in by_kt.get((k, t), [])]
                     for (u, k, t), vids in g.options.items() for p in range(P)])
    # stage slots: one configuration, used slots first, never empty
    rows(-inf, 1.0, [[(c[p, oi], 1.0) for oi in range(O)] for p in range(P)])
    rows(0.0, inf, [[(c[p, oi], 1.0) for oi in range(O)] + [(c[p + 1, oi], -1.0) for oi in range(O)]
                    for p in range(P - 1)])
    rows(0.0, inf, [[cv for u in range(n) for cv in xs(u, p)] + [(c[p, oi], -1.0) for oi in range(O)]
                    for p in range(P)])
    # devices per kind
    for k in range(K):
        ent = [(c[p, oi], float(t * d)) for p in range(P) for oi, (kk, t, d) in enumerate(configs) if kk == k]
        rows(-inf, float(counts[k]), [ent] if ent else [])
    # s[p] = s[p+1] + sum d c[p]
    rows(0.0, 0.0, [[(s[p], 1.0)] + ([(s[p + 1], -1.0)] if p + 1 < P else [])
                    + [(c[p, oi], -float(d)) for oi, (_, _, d) in enumerate(configs)] for p in range(P)])
    # crossing tensors
    ent_rows, leave_rows = [], []
    for e in range(M):
        a = int(g.tensor_src[e])
        for cons in g.consumers(e):
            for p in range(P):
                ent_rows.append([(enter[e, p], 1.0)] + xs(int(cons), p, -1.0) + xs(a, p, 1.0))
                leave_rows.append([(leave[e, p], 1.0)] + xs(a, p, -1.0) + xs(int(cons), p, 1.0))
    rows(0.0, inf, ent_rows)
    rows(0.0, inf, leave_rows)
    sy_rows = []
    for vi, e, side, col in sync:
        for p in range(P):
            sy_rows.append([(col + p, 1.0), (w[vi, p], -1.0), ((enter if side == 0 else leave)[e, p], -1.0)])
    rows(-1.0, inf, sy_rows)
    sync_of: dict[int, list[tuple[int, float, int]]] = {}
    for vi, e, side, col in sync:
        v = g.variants[vi]
        sync_of.setdefault(vi, []).append((col, (v.sync_in if side == 0 else v.sync_out)[e] * S, e))
    # time per sample, per stage and configuration
    tt = g.tensor_time * S
    t_rows, t_lo = [], []
    for oi, (k, t, d) in enumerate(configs):
        kind = problem.kinds[k]
        res = 4.0 * (d - 1) / d / N / resync_bandwidth(kind, t * d) if d > 1 else 0.0
        vids = [vi for (u, kk, tq), vv in g.options.items() if kk == k and tq == t for vi in vv]
        big = 2.0 * float(tt[k].sum())
        per_node: dict[int, float] = {}
        for vi in vids:
            v = g.variants[vi]
            x = v.time + d * res * v.params + sum(v.sync_in.values()) + sum(v.sync_out.values())
            per_node[v.node] = max(per_node.get(v.node, 0.0), x * S)
        big += sum(per_node.values())
        for p in range(P):
            ent = [(L, float(d)), (c[p, oi], -big)]
            ent += _crossing_terms(lay, tt[k], p)
            for vi in vids:
                v = g.variants[vi]
                coef = (v.time + d * res * v.params) * S
                if coef:
                    ent.append((w[vi, p], -coef))
                for col, x, _ in sync_of.get(vi, []):
                    if x:
                        ent.append((col + p, -float(x)))
            t_rows.append(ent)
            t_lo.append(-big)
    rows(np.array(t_lo), inf, t_rows)
    if latency_max is not None or objective == "latency":
        _latency_rows(problem, lay, m, rows, sync_of, latency_max)
    if objective == "latency":
        m.set_cost([L], 0.0)
        m.set_cost(lay.lat, 1.0)
        if max_load_max is not None:
            # the warm start's L is its time per sample plus 1e-9 (see _encode): the cap admits it
            m.tighten([L], ub=float(max_load_max) * (1 + 2e-9) * S)
    # memory by schedule
    if gpipe:
        m_rows, m_hi = [], []
        for oi, (k, t, d) in enumerate(configs):
            cap = problem.kinds[k].capacity
            if not math.isfinite(cap):
                continue
            y = N // d
            mem = {vi: _mem(problem, g.variants[vi], y) for (u, kk, tq), vv in g.options.items()
                   if kk == k and tq == t for vi in vv}
            _memory_rows(g, w, mem, cap, [c[p, oi] for p in range(P)], m_rows, m_hi)
        rows(-inf, np.array(m_hi), m_rows)
    else:
        # one-hot in-flight count, used slots only
        rows(0.0, 0.0, [[(Y[p, j], 1.0) for j in range(smax)] + [(c[p, oi], -1.0) for oi in range(O)]
                        for p in range(P)])
        rows(-float(N), inf, [[(Y[p, j], float(d * (j + 1))) for j in range(smax)]
                              + [(s[p], -1.0), (c[p, oi], -float(N))]
                              for p in range(P) for oi, (_, _, d) in enumerate(configs)])
        m_rows, m_hi = [], []
        for k in range(K):
            cap = problem.kinds[k].capacity
            if not math.isfinite(cap):
                continue
            vids = [vi for (u, kk, tq), vv in g.options.items() if kk == k for vi in vv]
            for j in range(1, smax + 1):
                mem = {vi: _mem(problem, g.variants[vi], j) for vi in vids}
                _memory_rows(g, w, mem, cap, [Y[p, j - 1] for p in range(P)], m_rows, m_hi)
        rows(-inf, np.array(m_hi) if m_hi else 0.0, m_rows)
    return m, lay


def _crossing_terms(lay: _Layout, times: np.ndarray, p: int) -> list[tuple[int, float]]:
    """``-(time of tensor e) * (enter[e, p] + leave[e, p])`` for every tensor that costs anything at the
    slot's kind (``times``: its row of ``tensor_time``): what stage slot ``p`` pays for crossing tensors."""
    paid = np.flatnonzero(times > 0).tolist()
    return ([(lay.enter[e, p], -float(times[e])) for e in paid]
            + [(lay.leave[e, p], -float(times[e])) for e in paid])


def _latency_rows(problem: ParallelProblem, lay: _Layout, m, rows, sync_of: dict,
                  latency_max: float | None) -> None:
    """One sample's latency at most ``latency_max`` (``None``: the columns and their rows only, for the
    latency objective): per stage slot ``p`` a column ``lat[p]`` at least its
    variants' time plus its crossing tensors (at the slot's kind: big-M on the kind's configurations)
    and sync terms, not divided by ``d`` (:func:`graphs.parallel.evaluate_plan`'s ``latency``), and their
    sum at most the target. ``enter``/``leave`` have lower bounds only, which these rows and the time rows
    push down to the crossings, so a feasible point's latency bounds its plan's from above: the rows
    cut no plan off and admit none above the target."""
    g = problem.graph
    P = lay.P
    S = lay.scale
    tt = g.tensor_time * S
    lat = m.add_cols(P, lb=0.0, ub=math.inf)
    lay.lat = lat
    per_node: dict[int, float] = {}
    for v in g.variants:
        x = v.time + sum(v.sync_in.values()) + sum(v.sync_out.values())
        per_node[v.node] = max(per_node.get(v.node, 0.0), x * S)
    work = sum(per_node.values())
    l_rows, l_lo = [], []
    for k in range(len(problem.kinds)):
        ons = [oi for oi, (kk, _, _) in enumerate(lay.configs) if kk == k]
        if not ons:
            continue
        big = 2.0 * float(tt[k].sum()) + work
        for p in range(P):
            ent = [(int(lat[p]), 1.0)] + [(lay.c[p, oi], -big) for oi in ons]
            ent += _crossing_terms(lay, tt[k], p)
            for vi, v in enumerate(g.variants):
                if v.kind != k:
                    continue  # zero in a slot of kind k
                if v.time:
                    ent.append((lay.w[vi, p], -float(v.time) * S))
                for col, x, _ in sync_of.get(vi, []):
                    if x:
                        ent.append((col + p, -float(x)))
            l_rows.append(ent)
            l_lo.append(-big)
    rows(np.array(l_lo), math.inf, l_rows)
    if latency_max is not None:
        rows(-math.inf, float(latency_max) * S, [[(int(lat[p]), 1.0) for p in range(P)]])


def _memory_rows(g, w, mem: dict, cap: float, on, m_rows: list, m_hi: list) -> None:
    """Append the big-M memory rows of one case (a configuration, or an in-flight count): in every
    stage slot ``p`` the chosen variants (columns ``w[vi, p]``) use ``mem[vi]`` each and must fit ``cap``
    when the column ``on[p]`` is 1. ``big`` is what the heaviest variant of every node could exceed
    ``cap`` by; no rows when that cannot happen."""
    worst: dict[int, float] = {}
    for vi, x in mem.items():
        worst[g.variants[vi].node] = max(worst.get(g.variants[vi].node, 0.0), x)
    big = max(0.0, sum(worst.values()) - cap)
    if big == 0.0:
        return
    for p, col in enumerate(on):
        m_rows.append([(w[vi, p], x) for vi, x in mem.items() if x] + [(col, big)])
        m_hi.append(cap + big)


def _encode(problem: ParallelProblem, lay: _Layout, plan: Sequence[Stage], ev, ncols: int):
    """The column values of ``plan`` (a valid plan with at most ``P`` stages, ``ev`` its evaluation),
    ``None`` if it does not fit the slots or a configuration."""
    g = problem.graph
    if len(plan) > lay.P:
        return None
    x = np.zeros(ncols)
    stage_of = np.zeros(g.num_nodes, np.int64)
    cfg = {o: i for i, o in enumerate(lay.configs)}
    for p, st in enumerate(plan):
        stage_of[list(st.nodes)] = p
        oi = cfg.get((st.kind, st.t, st.d))
        if oi is None:
            return None
        x[lay.c[p, oi]] = 1.0
        for vi in st.variants:
            x[lay.w[vi, p]] = 1.0
    P = lay.P
    for p in range(P):
        x[lay.z[:, p]] = (stage_of <= p).astype(float)
    member = np.zeros((g.num_nodes, P))
    member[np.arange(g.num_nodes), stage_of] = 1.0
    for e in range(g.num_tensors):
        a = int(g.tensor_src[e])
        cons = g.consumers(e)
        x[lay.enter[e]] = np.clip((member[cons] - member[a]).max(axis=0), 0.0, 1.0)
        x[lay.leave[e]] = np.clip((member[a] - member[cons]).max(axis=0), 0.0, 1.0)
    for vi, e, side, col in lay.sync:
        src = lay.enter if side == 0 else lay.leave
        x[col:col + P] = np.clip(x[lay.w[vi]] + x[src[e]] - 1.0, 0.0, 1.0)
    suffix = np.cumsum([st.d for st in plan][::-1])[::-1]
    for p, st in enumerate(plan):
        x[lay.s[p]] = float(suffix[p])
        if lay.Y is not None:
            y = in_flight(problem.schedule, st.d, int(suffix[p]), problem.microbatches)
            if y > lay.ymax:
                return None
            x[lay.Y[p, y - 1]] = 1.0
    x[lay.L] = ev.objective * (1 + 1e-9) * lay.scale
    if lay.lat is not None:
        for p, se in enumerate(ev.stages):
            x[lay.lat[p]] = se.latency * lay.scale
    return x


def _decode(problem: ParallelProblem, lay: _Layout, x: np.ndarray) -> list[Stage]:
    g = problem.graph
    var_of: list[list[int]] = [[] for _ in range(g.num_nodes)]
    for vi, v in enumerate(g.variants):
        var_of[v.node].append(vi)
    plan = []
    for p in range(lay.P):
        cv = x[lay.c[p]]
        if cv.size == 0 or cv.max() < 0.5:
            continue
        k, t, d = lay.configs[int(cv.argmax())]
        nodes, vs = [], []
        for u in range(g.num_nodes):
            vids = var_of[u]
            vals = x[lay.w[vids, p]]
            if vals.max(initial=0.0) > 0.5:
                nodes.append(u)
                vs.append(vids[int(vals.argmax())])
        if nodes:
            plan.append(Stage(tuple(nodes), k, d, t, tuple(vs)))
    return plan


def _warm(problem: ParallelProblem, warm_start, time_limit):
    """The warm start's plan (or ``None``) and a note."""
    if warm_start is None:
        return None, ""
    if isinstance(warm_start, str):
        from .registry import ALIASES

        name = ALIASES.get(warm_start, warm_start)
        if name == "dp":
            from .dp_stages import solve_problem as run
        elif name == "pipedream":
            from .pipedream_stages import solve_problem as run
        else:
            raise InputError(f"unknown warm start {warm_start!r}; give a plan, 'dp' or 'pipedream'")
        r = run(problem, time_limit=time_limit)
        return r.plan, f"warm start from {name}"
    return list(warm_start), "warm start from the given plan"


def solve_problem(problem: ParallelProblem, *, time_limit: float | None = None, gap: float = 1e-6,
                  warm_start: Sequence[Stage] | str | None = None, threads: int | None = None,
                  raw=None, latency_max: float | None = None, objective: str = "max-load",
                  max_load_max: float | None = None,
                  progress: Callable[[float], None] | None = None) -> Solution:
    """Solve ``problem`` by the contiguous MILP (see the module doc). ``gap`` is HiGHS's relative gap:
    ``optimal`` means proven within it (plus the solver's tolerance, ``BOUND_TOLERANCE_REL``).
    ``latency_max``: only plans whose latency (:attr:`graphs.parallel.PlanEvaluation.latency`, seconds per
    sample) is at most it; ``optimal`` then means the most samples/s under that target, and
    ``infeasible`` that no plan meets it.

    ``objective="latency"``: the least latency instead, among plans whose time per sample is at most
    ``max_load_max`` (if given); the solution's ``objective`` and ``bound`` are then latencies (seconds
    per sample), ``optimal`` means no such plan has a lower latency, and ``infeasible`` that there is no
    such plan. With both limits, a plan meets each within a relative ``1e-9``.

    ``progress``: a callable taking the fraction of the integer program's search done
    (:func:`solvers._milp.solve_mip`'s), 1 once it ends (not after a Ctrl-C); the warm start reports
    none."""
    t0 = time.perf_counter()
    if latency_max is not None and not (latency_max >= 0):
        raise InputError(f"latency_max must be a number >= 0, got {latency_max!r}")
    if objective not in ("max-load", "latency"):
        raise InputError(f"objective must be 'max-load' or 'latency', got {objective!r}")
    if max_load_max is not None and (objective != "latency" or not (max_load_max >= 0)):
        raise InputError("max_load_max (a number >= 0) caps the time per sample of the latency objective")
    by_latency = objective == "latency"

    def meets(ev) -> bool:
        return ((latency_max is None or ev.latency <= latency_max * (1 + 1e-9))
                and (max_load_max is None or ev.objective <= max_load_max * (1 + 1e-9)))

    def value(ev) -> float:
        return ev.latency if by_latency else ev.objective

    plan0, note = _warm(problem, warm_start, None if time_limit is None else time_limit * 0.3)
    ev0 = None
    if plan0 is not None:
        ev0 = evaluate_plan(problem, plan0)
        if not ev0.valid:
            raise InputError(f"the warm-start plan is not valid: {'; '.join(ev0.problems)}")
        if not meets(ev0):
            plan0, ev0, note = None, None, f"{note} dropped: it misses the latency target or time cap"
    model, lay = build_model(problem, latency_max, objective=objective, max_load_max=max_load_max)
    start = None
    stats: dict = {"stage_slots": lay.P, "configs": len(lay.configs)}
    if ev0 is not None:
        start = _encode(problem, lay, plan0, ev0, model.num_cols)
        if start is not None and model.check(start):
            stats["warm_start_rejected"] = model.check(start)[0]
            start = None
        stats["warm_start"] = value(ev0) if start is not None else None
    left = None if time_limit is None else max(0.01, time_limit - (time.perf_counter() - t0))
    raw = dict(raw or {})
    # the big-M time rows turn HiGHS's feasibility tolerance (1e-6 absolute) into an error on L of that
    # size, tighter tolerances keep the bound within the relative gap asked for
    # size; presolve is off because HiGHS 1.16's presolve proved wrong optima (bounds above a plan the
    # model admits) on small random instances of this model, found by tests/test_ip_stages.py
    raw["highs_options"] = {"mip_feasibility_tolerance": 1e-9, "primal_feasibility_tolerance": 1e-9,
                            "presolve": "off", **dict(raw.get("highs_options", {}))}
    r = _milp.solve_mip(model, time_limit=left, gap=gap, threads=threads, start=start, raw=raw,
                        progress=progress)
    stats.update(r.stats)
    elapsed = time.perf_counter() - t0
    if r.status == _milp.INFEASIBLE:
        what = "memory and counts" + ("" if latency_max is None else " within the latency target") \
            + ("" if max_load_max is None else " within the time per sample cap")
        return stage_solution("ip", None, None, math.inf, Status.INFEASIBLE, elapsed,
                              f"no plan fits the devices' {what} (the integer program is infeasible)", stats)
    plan, ev = None, None
    if r.x is not None:
        plan = _decode(problem, lay, r.x)
        ev = evaluate_plan(problem, plan)
        if not ev.valid or not meets(ev):
            stats["mip_plan_rejected"] = ev.problems[0] if ev.problems else \
                f"latency {ev.latency!r} or time per sample {ev.objective!r} above its limit"
            plan, ev = None, None
    if ev0 is not None and (ev is None or value(ev0) < value(ev)):
        plan, ev = plan0, ev0
    if plan is None:
        # a limit before any plan: stopped, nothing proven (an error, or a plan the evaluator rejected: error)
        failed = r.status == _milp.ERROR or "mip_plan_rejected" in stats
        return stage_solution("ip", None, None, math.inf, Status.ERROR if failed else Status.STOPPED, elapsed,
                                r.message or "no plan found", stats)
    fallback = latency_lower_bound(problem) if by_latency else lay.lower_bound
    # the one rule of every integer program (the program's bound in seconds, as the evaluator's value)
    scaled = dataclasses.replace(r, bound=None if r.bound is None else r.bound / lay.scale)
    v = _milp.judge(scaled, value(ev), fallback, gap, what="latency" if by_latency else "time per sample",
                    kept="the model-free bound")
    stats["bound"], stats["gap"] = v.bound, v.gap
    if v.mismatch is not None:
        stats["bound_mismatch"] = v.mismatch
    if v.proven:
        # a Ctrl-C HiGHS took as it ended is still said, so that the caller's work ends there
        said = "; ".join(x for x in (r.message if r.interrupted else "", note) if x)
        return stage_solution("ip", plan, ev, value(ev), Status.OPTIMAL, elapsed, said, stats,
                              bound=v.bound)
    msg = v.message or "not proven optimal"
    if v.gap is not None:
        msg += f"; bound {v.bound:.9g} s per sample, gap {v.gap:.3%}"
    return stage_solution("ip", plan, ev, value(ev), Status.FEASIBLE, elapsed,
                          msg + (f"; {note}" if note else ""), stats, bound=v.bound)


def model_columns(problem: ParallelProblem) -> int:
    """How many columns :func:`build_model` would make (to decide whether to run the MILP at all)."""
    g = problem.graph
    n, M, K = g.num_nodes, g.num_tensors, len(problem.kinds)
    counts = [k.count for k in problem.kinds]
    total = sum(counts)
    P = max(1, min(n, total, problem.microbatches))
    degrees = problem.replica_degrees()
    O = sum(1 for k in range(K) for t in g.degrees(k) for d in degrees if t * d <= counts[k])
    nsync = sum(len(v.sync_in) + len(v.sync_out) for v in g.variants)
    smax = 0 if problem.schedule == "gpipe" else max(1, min(problem.microbatches, total))
    return 1 + P * (n + O + len(g.variants) + 2 * M + nsync + 1 + smax)


def _evaluated(problem: ParallelProblem, plan: list[Stage], like: Solution) -> Solution:
    """``plan`` judged by the evaluator (it must be valid), with ``like``'s time and stats."""
    ev = evaluate_plan(problem, plan)
    if not ev.valid:  # the evaluator is the judge; a disagreement is a bug worth reporting loudly
        raise AssertionError(f"an invalid plan: {ev.problems}")
    return stage_solution("ip", plan, ev, ev.objective, Status.FEASIBLE, like.time, like.message,
                            dict(like.stats or {}))


def solve_stages(problem: ParallelProblem, options: SolveOptions | None = None) -> Solution:
    """The registry's stage form (:func:`solvers.registry.solve`): the MILP warm-started from PipeDream's
    planner (``options.raw["warm_start"]``: another start, or ``None`` for none), with ``options``'
    time limit, gap, threads and progress."""
    options = options or SolveOptions()
    return solve_problem(problem, time_limit=options.time_limit, gap=options.gap, threads=options.threads,
                         warm_start=options.raw.get("warm_start", "pipedream"), raw=options.raw,
                         progress=options.progress)
