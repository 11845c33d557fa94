"""Throughput under a latency target, and latency under a throughput target: one integer program.

The *serving domain*: inference placements where every accelerator runs **one** convex subgraph (its
nodes, as in the latency model of :mod:`graphs.latency` with one subgraph per device) and host nodes go
to any host core. Every placement the DP returns (contiguous) and every placement the latency IP returns
with one subgraph per device lies in it. On it, :func:`solve` minimises

* ``"max-load"`` (the evaluator's, :mod:`graphs.evaluate`: per-core loads on hosts) subject to
  latency <= ``latency_max``, or
* ``"latency"`` (:func:`graphs.latency.latency`) subject to max-load <= ``max_load_max``.

The program is the latency IP's (:mod:`solvers.latency_ip`, one slot per accelerator) plus a max-load
column ``z``: ``z >= F[s] - S[s]`` for every accelerator (its compute plus communication, the evaluator's
load when the slot is the device), and host classes assigned to cores ``y[c, k]`` (``sum_k y[c, k]`` =
the class's host place) with ``z >= `` every core's compute, cores ordered by load (symmetry). The
latency column gets the bound ``latency_max`` and, being then a valid horizon, the big-M of the
conditional time constraints. What the solver proves is what is reported: ``optimal`` only when HiGHS
closed the gap and the evaluators agree with the program; otherwise ``feasible`` with the proven bound.
Minimising latency, that bound is at least :func:`solvers.latency_ip.latency_bound` for one subgraph
per accelerator (``stats["path_bound"]``), which counts the transfers that memory and colocation force.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from graphs.errors import InfeasibleError, InputError, PlacementError
from graphs.evaluate import evaluate
from graphs.latency import latency
from graphs.model import Cluster, OpGraph

from . import _milp
from .base import INTERRUPTED, Solution, SolveOptions, Status, time_left
from .latency_ip import _candidates, _horizon, _LatencyModel, latency_bound

__all__ = ["solve", "in_domain", "dp_start", "MINIMISE"]

MINIMISE = ("max-load", "latency")
DP_START_IDEALS = 200_000  # the DP start's lattice cap (beyond it the DP returns a plan, nothing proven)


def in_domain(graph: OpGraph, cluster: Cluster, assignment) -> bool:
    """Whether a placement is in the serving domain: valid, every accelerator one convex subgraph."""
    ev = latency(graph, cluster, assignment)
    return ev.valid and max(ev.subgraphs_per_device().values(), default=0) <= 1 and math.isfinite(ev.total)


class _ServingModel(_LatencyModel):
    """The latency program with one slot per accelerator, a max-load column and host cores."""

    def __init__(self, graph: OpGraph, cluster: Cluster, horizon: float, symmetry: bool = True):
        super().__init__(graph, cluster, 1, horizon, symmetry=symmetry)
        m, x, C, cls = self.m, self.x, self.C, self.cls
        compute_c, _ = graph.costs_for(cluster)
        T = compute_c.shape[0]
        comp = np.zeros((T, C))
        for t in range(T):
            np.add.at(comp[t], cls, np.where(np.isfinite(compute_c[t]), compute_c[t], 0.0))
        self.comp = comp
        z = m.add_cols(1, lb=0, ub=np.inf)[0]
        self.z = z
        for p in self.slot_ids:  # z >= F - S
            m.add_rows([0.0], [np.inf], [0, 0, 0], [z, self.F[p], self.St[p]], [1.0, -1.0, 1.0])
        first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]])
        self.first = first
        self.cores: dict[int, np.ndarray] = {}  # host kind -> y [C, count]
        for p in self.host_ids:
            d = self.places[p][0]
            t = int(self.dkind[d])
            if t in self.host_place_of_kind:
                k = cluster.kinds[t].count
                y = m.add_cols(C * k, lb=0, ub=1, integer=True).reshape(C, k)
                self.cores[t] = y
                r = np.arange(C)
                # sum_k y[c, k] = x[c, p]
                m.add_rows(np.zeros(C), np.zeros(C), np.concatenate([r] * (k + 1)),
                           np.concatenate([y[:, j] for j in range(k)] + [x[:, p]]),
                           np.concatenate([np.ones(C)] * k + [-np.ones(C)]))
                for j in range(k):  # z >= core load
                    m.add_rows([0.0], [np.inf], np.zeros(C + 1, np.int64), np.concatenate([[z], y[:, j]]),
                               np.concatenate([[1.0], -comp[t]]))
                if symmetry:
                    for j in range(k - 1):  # identical cores, ordered by load
                        m.add_rows([0.0], [np.inf], np.zeros(2 * C, np.int64),
                                   np.concatenate([y[:, j], y[:, j + 1]]),
                                   np.concatenate([comp[t], -comp[t]]))
            else:  # one place per host core (its memory binds)
                m.add_rows([0.0], [np.inf], np.zeros(C + 1, np.int64), np.concatenate([[z], x[:, p]]),
                           np.concatenate([[1.0], -comp[t]]))

    def serving_start(self, a: np.ndarray, sub: np.ndarray) -> np.ndarray | None:
        v = self.start_vector(a, sub)
        if v is None:
            return None
        item_dev = np.full(self.C, -1, np.int64)
        item_dev[self.cls] = a
        for t, y in self.cores.items():
            k = y.shape[1]
            core = item_dev - self.first[t]
            on = (core >= 0) & (core < k) & (self.dkind[np.clip(item_dev, 0, None)] == t)
            loads = np.array([self.comp[t][on & (core == j)].sum() for j in range(k)])
            rank = np.empty(k, np.int64)
            rank[np.argsort(-loads, kind="stable")] = np.arange(k)  # heaviest core first
            Y = np.zeros((self.C, k))
            Y[np.flatnonzero(on), rank[core[on]]] = 1.0
            v[y.ravel()] = Y.ravel()
        v[self.z] = evaluate(self.graph, self.cluster, a).max_load
        return v

    def serving_decode(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, sub = self.decode(v)
        item_dev = np.full(self.C, -1, np.int64)
        item_dev[self.cls] = a
        for t, y in self.cores.items():
            p = self.host_place_of_kind[t]
            on = np.argmax(v[self.x], axis=1) == p
            item_dev[on] = self.first[t] + np.argmax(v[y[on]], axis=1)
        return item_dev[self.cls], sub


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None, *,
          minimise: str = "max-load", latency_max: float = math.inf,
          max_load_max: float = math.inf, stop: Callable[[], bool] | None = None,
          dp: Solution | None = None) -> Solution:
    """The best serving-domain placement for ``minimise`` under the other measure's limit (see the
    module doc). ``stats`` hold ``max_load``, ``latency`` and ``subgraphs`` of the returned placement;
    status ``infeasible`` when no placement meets the limit (proven).

    ``stop`` (a callable, e.g. "was Ctrl-C pressed"), when it returns true after the starts, skips the
    integer program: the best start is returned as ``feasible`` (nothing proven), or ``stopped``
    without one. A Ctrl-C that one of the starts (the DP, the local search) swallowed counts too.

    ``dp``: the DP start (:func:`dp_start`) the caller already ran on this graph and cluster: it is
    the start instead of a run of its own (also where ``options.raw["dp_warm_start"]`` is false), and
    a Ctrl-C it took (:attr:`~solvers.base.Solution.interrupted`) counts as above.

    Times are scaled so that the all-in-sequence latency bound is :data:`_SCALE` inside the program:
    the solver's absolute feasibility tolerances (1e-7 per row, adding up along paths) would otherwise
    be visible on models whose times are fractions of a millisecond."""
    options = options or SolveOptions()
    if minimise not in MINIMISE:
        raise InputError(f"minimise must be one of {', '.join(MINIMISE)}, got {minimise!r}")
    if graph.is_training:
        raise InputError("latency targets are for inference graphs; this graph has backward nodes")
    h = _horizon(graph, cluster, 1)
    scale = _SCALE / h if math.isfinite(h) and h > 0 else 1.0
    g = dataclasses.replace(graph, compute=graph.compute * scale, comm=graph.comm * scale)
    sol = _solve(g, cluster, options, minimise, latency_max * scale, max_load_max * scale, stop, dp)
    if sol.assignment is None:
        msg = sol.message
        if sol.status == Status.INFEASIBLE and "has " in msg:  # the limit as the caller gave it
            what = (f"latency <= {latency_max:.6g}" if minimise == "max-load" else
                    f"max-load <= {max_load_max:.6g}")
            msg = f"no placement (one subgraph per accelerator) has {what}"
        return dataclasses.replace(sol, bound=None if sol.bound is None else sol.bound / scale, message=msg)
    load = evaluate(graph, cluster, sol.assignment).max_load
    lat = latency(graph, cluster, sol.assignment).total
    value = load if minimise == "max-load" else lat
    stats = dict(sol.stats, max_load=load, latency=lat, latency_max=latency_max, max_load_max=max_load_max,
                 scale=scale)
    if "path_bound" in stats:  # in the caller's units, as the bound
        stats["path_bound"] = stats["path_bound"] / scale
    # the bound back in the caller's units, never above the value by the rounding of the scaling
    bound = None if sol.bound is None else min(sol.bound / scale, value)
    return dataclasses.replace(sol, objective=value, bound=bound, stats=stats)


_SCALE = 1000.0


def _solve(graph: OpGraph, cluster: Cluster, options: SolveOptions, minimise: str, latency_max: float,
           max_load_max: float, stop: Callable[[], bool] | None = None,
           dp: Solution | None = None) -> Solution:
    t_start = time.perf_counter()
    deadline = None if options.time_limit is None else t_start + options.time_limit
    stats: dict = {"minimise": minimise, "latency_max": latency_max, "max_load_max": max_load_max}
    lat_tol = latency_max * (1 + 1e-9) + 1e-12
    load_tol = max_load_max * (1 + 1e-9) + 1e-12

    def measure(a):
        ev = latency(graph, cluster, a)
        if not ev.valid or max(ev.subgraphs_per_device().values(), default=0) > 1:
            return None
        return evaluate(graph, cluster, a).max_load, ev

    best = None  # (value, name, assignment, max-load, latency evaluation)
    for name, a in _starts(graph, cluster, options, deadline, stats, dp):
        r = measure(a)
        if r is None or r[1].total > lat_tol or r[0] > load_tol:
            continue
        value = r[0] if minimise == "max-load" else r[1].total
        if best is None or value < best[0]:
            best = (value, name, a, r[0], r[1])
    if stats.get("interrupted") or (stop is not None and stop()):
        # Ctrl-C (or the caller's stop) during the starts: no integer program; nothing is proven
        elapsed = time.perf_counter() - t_start
        why = INTERRUPTED if stats.get("interrupted") else "stopped"
        stats["stopped"] = why
        if best is None:
            return Solution(None, math.inf, Status.STOPPED, "slo-ip", time=elapsed, stats=stats,
                            message=f"{why} before any placement was found")
        stats.update(max_load=best[3], latency=best[4].total, subgraphs=[int(s) for s in best[4].subgraph],
                     returned=best[1])
        return Solution(np.asarray(best[2], np.int64), best[0], Status.FEASIBLE, "slo-ip", time=elapsed,
                        stats=stats, message=f"{why}: best start ({best[1]}) returned, not proven optimal")
    # the big-M horizon: a latency some optimal placement does not exceed (every placement's latency is
    # under the all-in-sequence bound; under the limit; for latency, under the best start's)
    horizon = min(_horizon(graph, cluster, 1), latency_max)
    if not math.isfinite(horizon):
        return Solution(None, math.inf, Status.INFEASIBLE, "slo-ip", time=time.perf_counter() - t_start,
                        stats=stats, message="no device can run some node")
    if minimise == "latency" and best is not None:
        horizon = min(horizon, best[4].total)
    horizon = horizon * (1 + 1e-6) + 1e-9
    try:
        model = _ServingModel(graph, cluster, horizon, symmetry=bool(options.raw.get("symmetry", True)))
    except InfeasibleError as e:
        return Solution(None, math.inf, Status.INFEASIBLE, "slo-ip", message=str(e),
                        time=time.perf_counter() - t_start, stats=stats)
    m = model.m
    if math.isfinite(latency_max):
        m.tighten([model.T], ub=latency_max)
    if math.isfinite(max_load_max):
        m.tighten([model.z], ub=max_load_max)
    if minimise == "max-load":
        m.set_cost([model.T], 0.0)
        m.set_cost([model.z], 1.0)
    start = None
    if best is not None and options.raw.get("warm_start", True) is not False:
        start = model.serving_start(best[2], best[4].subgraph)
        if start is not None and m.check(start):
            start = None
        stats["warm_start"] = best[1] if start is not None else f"{best[1]} (rejected)"
    left = time_left(deadline)
    res = _milp.solve_mip(m, backend=options.backend, time_limit=left, gap=options.gap,
                          threads=options.threads, start=start, raw=options.raw)
    stats.update(res.stats)
    stats["mip_status"] = res.status
    elapsed = time.perf_counter() - t_start
    if res.status == _milp.INFEASIBLE:
        what = (f"latency <= {latency_max:.6g}" if minimise == "max-load" else
                f"max-load <= {max_load_max:.6g}")
        return Solution(None, math.inf, Status.INFEASIBLE, "slo-ip", time=elapsed, stats=stats,
                        message=f"no placement (one subgraph per accelerator) has {what}")
    chosen = None
    if res.x is not None:
        a, _ = model.serving_decode(res.x)
        r = measure(a)
        if r is not None and r[1].total <= lat_tol and r[0] <= load_tol:
            chosen = (a, r[0], r[1])
        else:
            stats["decode_problem"] = "decoded placement outside the limits or the domain"
    if chosen is None and best is not None:
        chosen = (best[2], best[3], best[4])
        stats["returned"] = "warm start"
    if chosen is None:
        # a limit before any placement: "stopped" (nothing found, nothing proven)
        status = Status.ERROR if res.status == _milp.ERROR else Status.STOPPED
        return Solution(None, math.inf, status, "slo-ip", bound=res.bound, time=elapsed, stats=stats,
                        message=(res.message or "no placement found") + "; no placement found")
    a, load, lev = chosen
    value = load if minimise == "max-load" else lev.total
    fallback = None
    if minimise == "latency":
        # the path bound for one subgraph per accelerator: the domain here (the max-load limit only
        # narrows it further)
        fallback = stats["path_bound"] = latency_bound(graph, cluster, subgraphs_per_device=1)
    # the one rule of every integer program: a bound above the evaluated value is a model mismatch (never
    # a closed gap), and "optimal" only within the requested gap of the evaluator's value
    verdict = _milp.judge(res, value, fallback, options.gap, what=minimise,
                          kept="the path bound")
    if verdict.mismatch is not None:
        stats["bound_mismatch"] = verdict.mismatch
    stats.update(max_load=load, latency=lev.total, subgraphs=[int(s) for s in lev.subgraph])
    return Solution(np.asarray(a, np.int64), value, Status.OPTIMAL if verdict.proven else Status.FEASIBLE,
                    "slo-ip", bound=verdict.bound, gap=verdict.gap, time=elapsed, message=verdict.message,
                    stats=stats)


def _starts(graph: OpGraph, cluster: Cluster, options: SolveOptions, deadline, stats,
            dp: Solution | None = None):
    """The latency IP's starts, with the DP's throughput placement always among them (it is quick, and
    under a loose latency limit it is what the max-load program has to beat): ``dp``, the caller's run
    of :func:`dp_start`, else a run here. After a Ctrl-C the caller's DP took, the DP's plan only (the
    other starts take seconds on a large model)."""
    if dp is None or not dp.interrupted:
        yield from _candidates(graph, cluster, dataclasses.replace(
            options, raw={**options.raw, "dp_warm_start": False}), deadline, stats)
    if dp is None and options.raw.get("dp_warm_start", True):
        dp = dp_start(graph, cluster, None if deadline is None else deadline - time.perf_counter(),
                      threads=options.threads)
    if dp is None:
        return
    stats["dp_status"] = dp.message if dp.status == Status.ERROR else dp.status.value
    if dp.interrupted:  # Ctrl-C during the DP (it stops and returns what it has)
        stats["interrupted"] = True
    if dp.assignment is not None:
        yield "dp", np.asarray(dp.assignment, np.int64)


def dp_start(graph: OpGraph, cluster: Cluster, left: float | None, *, threads: int | None = None) -> Solution:
    """The exact DP's max-load placement as a start of the serving program (:func:`solve`, and
    :func:`placement.serving.best_under_latency`, which may take it as the answer): a share of the
    ``left`` seconds (``None``: no limit), 0.3 of them but at least 0.5 s, and never more than ``left``;
    the lattice capped at :data:`DP_START_IDEALS` (beyond it the DP returns a plan and proves nothing).
    A Ctrl-C during it stops it with what it has (:attr:`~solvers.base.Solution.interrupted`). A
    problem the DP does not take (:class:`~graphs.errors.PlacementError`): status ``error``, no
    placement, ``message`` "skipped: ..."."""
    from . import dp

    share = None if left is None else min(max(0.0, left), max(0.5, 0.3 * left))
    try:
        return dp.solve(graph, cluster, SolveOptions(time_limit=share, threads=threads,
                                                     raw={"max_ideals": DP_START_IDEALS}))
    except PlacementError as e:
        return Solution(None, math.inf, Status.ERROR, "dp", message=f"skipped: {e}")


def lowest_latency(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """The serving domain's smallest latency (no throughput limit)."""
    return solve(graph, cluster, options, minimise="latency")
