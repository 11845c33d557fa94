"""Throughput integer programs: minimum max-load placements, contiguous or not, on HiGHS (or PuLP).

Both programs use the evaluator's model (:mod:`graphs.evaluate`) exactly: per-kind compute, unsupported
nodes, memory capacities, colocation classes, any number of device kinds, and communication paid once
per node by the sender and once by each other device that receives it.

**Contiguous** (``ip``): the DP's domain, so the two optima are equal. Items are the DP's
(:func:`graphs.contract.contract`); the pipeline has one *stage* per device, stage ``p`` holds the items
of ideal ``p`` minus ideal ``p - 1``. Variables: ``z[c, p]`` (binary) = item ``c`` is in the first
``p + 1`` stages, monotone in ``p`` and down-closed along every item edge (a chain of nested ideals);
``k[p, t]`` (binary) = stage ``p`` is a device of kind ``t``, at most ``count[t]`` stages per kind, used
stages first and never empty; ``x[c, p, t]`` (continuous, integral once ``z`` and ``k`` are) = item ``c``
is in stage ``p`` of kind ``t``. Communication of node ``u`` at stage ``p``: ``out >= x[u's item] -
s[v's item]`` and ``in >= x[v's item] - s[u's item]`` for each item ``v`` that ``u`` feeds (``s`` =
stage membership). Every stage's load is at most ``L``; minimise ``L``.

**Non-contiguous** (``ip-noncontig``): the same with ``x[c, d]`` (binary) per colocation class and
device, no ideal constraints; its optimum is at most the contiguous one. Devices of one kind are
interchangeable; ordering them by the smallest item each holds (symmetry breaking) is available
(``raw["symmetry"] = True``) but off by default: HiGHS's own symmetry detection does better without
it (at 30 s, gaps on GNMT inference 1.6% instead of 4.9%, GNMT training 0.9% instead of 3.0%; see
``benchmarks/README_ip.md``).

``objective="split-max"`` (training) minimises max forward load + max backward load instead: a node's
compute and communication count in its own pass (see :func:`split_loads`).

Both start from the best of ``options.warm_start``, a few greedy chains and the DP's placement (optimal
for the contiguous program, so the solver only has to prove it). The non-contiguous one also starts
from the baselines it is compared with: the partitioner and best single-item moves from it, the
local-search baseline's seeded restarts (the baseline's own first ones), and moves from the best
contiguous start, so that it is never worse than them when it has the time to run them.

With a start of max-load ``U`` the contiguous program fixes, before solving, every stage variable that
no placement of max-load ``<= U`` can set otherwise: an item can sit in the first ``p + 1`` stages only
if the work of all its ancestors fits in ``p + 1`` stages of load ``U``, and after them only if its
descendants' work fits in the other stages. That confines each item
to a few stages around where its ancestors' work puts it, which the LP relaxation cannot see on its
own (fractional stages smear every item over all of them), and is what lets HiGHS prove the layer
graphs optimal.

Both report what the MIP solver proved: status, objective (the evaluator's value of the returned
placement), best bound and gap; a limit never yields ``optimal``, and the start is returned if the
solver found nothing better. ``options.raw``: ``log`` (print the solver log), ``warm_start``
(``False`` to start cold), ``dp_warm_start`` (``False``: no DP start), ``fixing`` (``False``: no bound
fixing), ``symmetry`` (``False`` to skip symmetry breaking; the non-contiguous program's default is
``False``), ``local_search`` (``False``: none),
``local_search_s`` (at most this many seconds for the baselines, default 60, and
``local_search_share`` of the time left, default 0.4), ``local_search_restarts`` (default 20),
``dp_time_share`` (fraction of the time left the DP start may use, default 0.3), ``highs_options``
(passed to HiGHS), ``pulp_solver`` (e.g. ``"GUROBI"``, ``"CPLEX_PY"``; default the bundled CBC).
"""

from __future__ import annotations

import math
import time

import numpy as np

from graphs.contract import ClassGraph, colocation_items, contract
from graphs.errors import InfeasibleError, InputError
from graphs.evaluate import evaluate, split_loads, split_max  # re-exported: split-max is the IP's
from graphs.model import Cluster, OpGraph

from . import _milp
from .base import Solution, SolveOptions, Status, time_left

__all__ = ["solve", "solve_noncontiguous", "split_loads", "split_max"]


# --------------------------------------------------------------------------- shared helpers
def _objective_value(graph, cluster, a, objective: str) -> float:
    if objective == "split-max":
        return split_max(graph, cluster, a)
    return evaluate(graph, cluster, a).max_load


def _check_objective(options: SolveOptions, solver: str) -> None:
    if options.objective not in ("max-load", "split-max", "latency"):
        raise InputError(f"unknown objective {options.objective!r}; the {solver} solver supports max-load, "
                         f"split-max and latency")
    if options.backend not in _milp.BACKENDS:
        raise InputError(f"unknown MIP backend {options.backend!r}; choose one of: "
                         f"{', '.join(_milp.BACKENDS)}")


def _comm_pairs(graph: OpGraph, comm_c: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(u, item)`` pairs: node ``u`` pays communication and feeds ``item`` (not its own)."""
    s, d = graph.src, graph.dst
    keep = (cls[s] != cls[d]) & (comm_c[:, s].max(axis=0) > 0)
    if not keep.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = np.unique(np.stack([s[keep], cls[d[keep]]], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def _item_arrays(graph: OpGraph, cluster: Cluster, cls: np.ndarray, C: int):
    """Per item and kind: compute (total, forward, backward; inf = unsupported) and memory."""
    compute_c, comm_c = graph.costs_for(cluster)
    bwd = graph.backward[None, :]

    def sums(v):
        out = np.zeros((v.shape[0], C))
        for t in range(v.shape[0]):
            np.add.at(out[t], cls, v[t])
        return out

    comp = sums(compute_c)
    comp_f = sums(np.where(bwd, 0.0, compute_c))
    comp_b = sums(np.where(bwd, compute_c, 0.0))
    mem = np.bincount(cls, weights=graph.memory, minlength=C)
    return comp, comp_f, comp_b, mem, comm_c


def _check_fit(graph, cluster, cls, C, comp, mem) -> None:
    counts = np.array([k.count for k in cluster.kinds])
    caps = np.array([math.inf if k.memory is None else k.memory for k in cluster.kinds])
    ok = (counts[:, None] > 0) & np.isfinite(comp) & (mem[None, :] <= caps[:, None])
    bad = np.flatnonzero(~ok.any(axis=0))
    if bad.size:
        shown = []
        for c in bad[:5]:
            nodes = np.flatnonzero(cls == c)
            shown.append(", ".join(str(graph.ids[u]) for u in nodes[:4]) + (" ..." if nodes.size > 4 else ""))
        raise InfeasibleError("no device can hold (unsupported everywhere or too large for every device's "
                              "memory): " + " | ".join(shown) + (f" (and {bad.size - 5} more)"
                                                                  if bad.size > 5 else ""))


def _dp_warm_start(graph, cluster, options: SolveOptions, deadline, stats):
    """The DP's placement (optimal among contiguous ones) within part of the time limit, or ``None``
    when there is too little time for it (its first call also loads compiled code) or it does not fit."""
    from graphs.errors import PlacementError

    from . import dp

    left = time_left(deadline)
    if not options.raw.get("dp_warm_start", True) or (left is not None and left < 5.0):
        return None
    share = float(options.raw.get("dp_time_share", 0.3))
    try:
        sol = dp.solve(graph, cluster, SolveOptions(time_limit=None if left is None else share * left))
    except PlacementError as e:
        stats["dp_status"] = f"skipped: {e}"
        return None
    stats["dp_status"] = sol.status.value
    stats["dp_time_s"] = sol.time
    if "interrupted" in sol.message:  # the DP takes Ctrl-C as "stop and return what you have"
        stats["interrupted"] = True
    return None if sol.assignment is None else np.asarray(sol.assignment, np.int64)


def greedy_chains(graph: OpGraph, cluster: Cluster, items: ClassGraph | None = None) -> list[np.ndarray]:
    """Cheap contiguous placements: walk the items in topological order and fill devices one after
    another up to a target compute (several targets and device orders). Valid ones only."""
    if items is None:
        items = contract(graph, cluster)
    C = items.num_classes
    compute_c, _ = graph.costs_for(cluster)
    comp = items.class_sums(compute_c)
    mem = items.class_sums(graph.memory)
    dkind = cluster.device_kind()
    D = cluster.num_devices
    caps = [math.inf if k.memory is None else k.memory for k in cluster.kinds]
    active = [t for t, k in enumerate(cluster.kinds) if k.count > 0]
    wmin = np.where(np.isfinite(comp[active]), comp[active], np.inf).min(axis=0)
    if not np.isfinite(wmin).all():
        return []
    total = float(wmin.sum())
    orders = [list(range(D)), sorted(range(D), key=lambda d: (-int(dkind[d]), d))]
    found: list[np.ndarray] = []
    seen = set()
    for order in orders:
        for frac in (1.0, 1.05, 1.15, 1.3, 1.6, 2.0, math.inf):
            target = total / max(1, D) * frac
            item_dev = np.full(C, -1, np.int64)
            pos, load, used = 0, 0.0, 0.0
            for c in range(C):
                while pos < D:
                    d = order[pos]
                    t = int(dkind[d])
                    fits = math.isfinite(comp[t, c]) and used + mem[c] <= caps[t]
                    if fits and (load == 0.0 or load + comp[t, c] <= target):
                        item_dev[c] = d
                        load += comp[t, c]
                        used += mem[c]
                        break
                    pos += 1
                    load, used = 0.0, 0.0
                if pos >= D:
                    break
            if (item_dev < 0).any():
                continue
            a = item_dev[items.node_class]
            key = a.tobytes()
            if key in seen or not evaluate(graph, cluster, a).valid:
                continue
            seen.add(key)
            found.append(a)
    return found


def _static_bound(graph: OpGraph, cluster: Cluster, objective: str) -> float:
    """A lower bound on max-load any placement has: the largest colocation class at its cheapest kind,
    and all the work at its cheapest kind spread evenly over every device (0 for split-max)."""
    if objective == "split-max":
        return 0.0
    cls, C = colocation_items(graph)
    compute_c, _ = graph.costs_for(cluster)
    active = [t for t, k in enumerate(cluster.kinds) if k.count > 0]
    comp = np.zeros((len(active), C))
    for i, t in enumerate(active):
        np.add.at(comp[i], cls, compute_c[t])
    wmin = np.where(np.isfinite(comp), comp, np.inf).min(axis=0)
    if not np.isfinite(wmin).all():
        return 0.0
    return float(max(wmin.max(initial=0.0), wmin.sum() / cluster.num_devices))


def _result(graph, cluster, options, res: _milp.MipResult, assignment, solver: str, t_start: float,
            stats: dict, warm_value: float | None, model_value: float | None,
            static_bound: float | None = None) -> Solution:
    """Turn a MIP result into a Solution, judged by the evaluator, with an honest status."""
    elapsed = time.perf_counter() - t_start
    stats = dict(stats)
    stats.update(res.stats)
    stats["mip_status"] = res.status
    if warm_value is not None:
        stats["warm_start_value"] = warm_value
    if res.status == _milp.INFEASIBLE:
        return Solution(None, math.inf, Status.INFEASIBLE, solver, time=elapsed, stats=stats,
                        message="no placement satisfies the constraints (the integer program is infeasible)")
    if assignment is None:
        status = Status.ERROR if res.status == _milp.ERROR else Status.STOPPED
        return Solution(None, math.inf, status, solver, bound=res.bound, time=elapsed, stats=stats,
                        message=(res.message or "no placement found") + "; no placement found")
    value = _objective_value(graph, cluster, assignment, options.objective)
    if model_value is not None:
        stats["model_objective"] = model_value
    verdict = _milp.judge(res, value, static_bound, options.gap, what="objective",
                          kept="the model-free bound")
    bound, gap, proven, msg = verdict.bound, verdict.gap, verdict.proven, verdict.message
    if verdict.mismatch is not None:
        stats["bound_mismatch"] = verdict.mismatch
    status = Status.OPTIMAL if proven else Status.FEASIBLE
    if res.status == _milp.ERROR:
        msg = res.message
    return Solution(np.asarray(assignment, np.int64), value, status, solver, bound=bound, gap=gap,
                    time=elapsed, message=msg, stats=stats)


# --------------------------------------------------------------------------- contiguous
class _ContigModel:
    """The contiguous (ideal-chain) program on DP items; see the module doc."""

    def __init__(self, graph: OpGraph, cluster: Cluster, items: ClassGraph, objective: str,
                 symmetry: bool = True) -> None:
        self.graph, self.cluster, self.items, self.objective = graph, cluster, items, objective
        cls, C = items.node_class, items.num_classes
        comp, comp_f, comp_b, mem, comm_c = _item_arrays(graph, cluster, cls, C)
        _check_fit(graph, cluster, cls, C, comp, mem)
        kinds = [t for t, k in enumerate(cluster.kinds) if k.count > 0]
        T = len(kinds)
        P = sum(cluster.kinds[t].count for t in kinds)
        self.kinds, self.P, self.C = kinds, P, C
        m = _milp.MilpModel()
        self.m = m
        # z[c, p]: item c within the first p+1 stages (z[c, P-1] = 1)
        z = m.add_cols(C * P, lb=0, ub=1, integer=True).reshape(C, P)
        m.add_rows(np.ones(C), np.ones(C), np.arange(C), z[:, P - 1], 1.0)  # fix last column
        self.z = z
        # k[p, t]: stage p is a device of kind kinds[t]
        k = m.add_cols(P * T, lb=0, ub=1, integer=True).reshape(P, T)
        self.k = k
        # x[c, p, t]: item c in stage p of kind t (integral when z and k are)
        ub_x = np.ones((C, P, T))
        for j, t in enumerate(kinds):
            cap = cluster.kinds[t].memory
            bad = ~np.isfinite(comp[t]) | ((mem > cap) if cap is not None else np.zeros(C, bool))
            ub_x[bad, :, j] = 0.0
        x = m.add_cols(C * P * T, lb=0, ub=ub_x.ravel()).reshape(C, P, T)
        self.x = x

        def s_terms(c_idx, p):
            """Coefficient lists for s[c, p] = z[c, p] - z[c, p-1], for arrays of items c."""
            c_idx = np.asarray(c_idx)
            if p == 0:
                return [z[c_idx, 0]], [np.ones(c_idx.size)]
            return [z[c_idx, p], z[c_idx, p - 1]], [np.ones(c_idx.size), -np.ones(c_idx.size)]

        allc = np.arange(C)
        # monotone chain and ideals
        if P > 1:
            r = np.arange(C * (P - 1))
            zz = z[:, :-1].ravel()
            zn = z[:, 1:].ravel()
            m.add_rows(np.full(r.size, -np.inf), np.zeros(r.size), np.concatenate([r, r]),
                       np.concatenate([zz, zn]), np.concatenate([np.ones(r.size), -np.ones(r.size)]))
        es, ed = items.src, items.dst
        if es.size:
            E = es.size
            r = np.arange(E * (P - 1))
            # z[dst, p] - z[src, p] <= 0 for p < P-1
            m.add_rows(np.full(r.size, -np.inf), np.zeros(r.size), np.concatenate([r, r]),
                       np.concatenate([z[ed, :-1].ravel(), z[es, :-1].ravel()]),
                       np.concatenate([np.ones(r.size), -np.ones(r.size)]))
        # sum_t x[c, p, t] = s[c, p]
        for p in range(P):
            cols = [x[:, p, :].ravel()]
            rows = [np.repeat(allc, T)]
            vals = [np.ones(C * T)]
            sc, sv = s_terms(allc, p)
            for cc, vv in zip(sc, sv):
                cols.append(cc)
                rows.append(allc)
                vals.append(-vv)
            m.add_rows(np.zeros(C), np.zeros(C), np.concatenate(rows), np.concatenate(cols),
                       np.concatenate(vals))
        # x[c, p, t] <= k[p, t]
        xr = x.ravel()
        kk = np.broadcast_to(k[None, :, :], (C, P, T)).ravel()
        r = np.arange(xr.size)
        m.add_rows(np.full(r.size, -np.inf), np.zeros(r.size), np.concatenate([r, r]),
                   np.concatenate([xr, kk]), np.concatenate([np.ones(r.size), -np.ones(r.size)]))
        # one kind per stage, count per kind
        m.add_rows(np.full(P, -np.inf), np.ones(P), np.repeat(np.arange(P), T), k.ravel(), 1.0)
        m.add_rows(np.full(T, -np.inf), np.array([cluster.kinds[t].count for t in kinds], float),
                   np.tile(np.arange(T), P), k.ravel(), 1.0)
        # a used stage is not empty: sum_c s[c, p] - sum_t k[p, t] >= 0
        for p in range(P):
            sc, sv = s_terms(allc, p)
            cols = list(sc) + [k[p]]
            vals = list(sv) + [-np.ones(T)]
            m.add_rows([0.0], [np.inf], np.zeros(sum(c.size for c in cols), np.int64), np.concatenate(cols),
                       np.concatenate(vals))
        if symmetry and P > 1:
            # used stages first
            rows = np.concatenate([np.repeat(np.arange(P - 1), T), np.repeat(np.arange(P - 1), T)])
            cols = np.concatenate([k[1:].ravel(), k[:-1].ravel()])
            vals = np.concatenate([np.ones((P - 1) * T), -np.ones((P - 1) * T)])
            m.add_rows(np.full(P - 1, -np.inf), np.zeros(P - 1), rows, cols, vals)
        # memory: sum_c mem[c] x[c, p, t] <= cap[t] k[p, t]
        for j, t in enumerate(kinds):
            cap = cluster.kinds[t].memory
            if cap is None or mem.sum() <= cap:
                continue
            for p in range(P):
                m.add_rows([-np.inf], [0.0], np.zeros(C + 1, np.int64),
                           np.concatenate([x[:, p, j], [k[p, j]]]), np.concatenate([mem, [-cap]]))

        # communication variables
        pu, pv = _comm_pairs(graph, comm_c, cls)
        self.pu, self.pv = pu, pv
        nodes = np.unique(pu)
        self.comm_nodes = nodes
        pos = {int(u): i for i, u in enumerate(nodes.tolist())}
        pair_node = np.array([pos[int(u)] for u in pu.tolist()], dtype=np.int64)
        N = nodes.size
        self.out = {}
        self.inn = {}
        for j, t in enumerate(kinds):
            cost_t = comm_c[t, nodes] if N else np.zeros(0)
            if N == 0 or not (cost_t > 0).any():
                continue
            out = m.add_cols(N * P, lb=0, ub=1).reshape(N, P)
            inn = m.add_cols(N * P, lb=0, ub=1).reshape(N, P)
            self.out[j], self.inn[j] = out, inn
            Q = pu.size
            qi = np.arange(Q)
            cu, cv = cls[pu], pv
            for p in range(P):
                # out[u, p] - x[cu, p, t] + s[cv, p] >= 0
                sc, sv = s_terms(cv, p)
                rows = [qi, qi] + [qi] * len(sc)
                cols = [out[pair_node, p], x[cu, p, j]] + list(sc)
                vals = [np.ones(Q), -np.ones(Q)] + list(sv)
                m.add_rows(np.zeros(Q), np.full(Q, np.inf), np.concatenate(rows), np.concatenate(cols),
                           np.concatenate(vals))
                # in[u, p] - x[cv, p, t] + s[cu, p] >= 0
                sc, sv = s_terms(cu, p)
                rows = [qi, qi] + [qi] * len(sc)
                cols = [inn[pair_node, p], x[cv, p, j]] + list(sc)
                vals = [np.ones(Q), -np.ones(Q)] + list(sv)
                m.add_rows(np.zeros(Q), np.full(Q, np.inf), np.concatenate(rows), np.concatenate(cols),
                           np.concatenate(vals))

        # loads
        bwd_node = graph.backward[nodes] if N else np.zeros(0, bool)
        passes = [("all", comp, np.ones(N, bool))] if objective != "split-max" else \
            [("fwd", comp_f, ~bwd_node), ("bwd", comp_b, bwd_node)]
        self.L = {}
        lb_L = 0.0
        for name, cmat, node_mask in passes:
            cheapest = np.where(np.isfinite(cmat[kinds]), cmat[kinds], np.inf).min(axis=0)
            lbv = float(cheapest.max(initial=0.0)) if objective != "split-max" else 0.0
            lb_L = max(lb_L, lbv)
            L = m.add_cols(1, lb=lbv, ub=np.inf, cost=1.0)[0]
            self.L[name] = L
            for j, t in enumerate(kinds):
                cvec = np.where(np.isfinite(cmat[t]), cmat[t], 0.0)
                cost_t = comm_c[t, nodes] * node_mask if N else np.zeros(0)
                agg_cols, agg_vals = [], []
                for p in range(P):
                    cols = [x[:, p, j]]
                    vals = [cvec]
                    if j in self.out:
                        cols += [self.out[j][:, p], self.inn[j][:, p]]
                        vals += [cost_t, cost_t]
                    agg_cols += cols
                    agg_vals += vals
                    cols = cols + [np.array([L])]
                    vals = vals + [np.array([-1.0])]
                    cc = np.concatenate(cols)
                    m.add_rows([-np.inf], [0.0], np.zeros(cc.size, np.int64), cc, np.concatenate(vals))
                # at most count[t] stages have kind t: their loads add up to at most count[t] * L
                cc = np.concatenate(agg_cols + [np.array([L])])
                vv = np.concatenate(agg_vals + [np.array([-float(cluster.kinds[t].count)])])
                m.add_rows([-np.inf], [0.0], np.zeros(cc.size, np.int64), cc, vv)
            # every item's compute on the kind it gets is at most L
            if objective != "split-max":
                cc = [x[:, :, j].ravel() for j in range(T)] + [np.full(C, L)]
                vv = [np.repeat(np.where(np.isfinite(cmat[t]), cmat[t], 0.0), P) for t in kinds]
                rr = [np.repeat(allc, P) for _ in range(T)] + [allc]
                m.add_rows(np.full(C, -np.inf), np.zeros(C), np.concatenate(rr), np.concatenate(cc),
                           np.concatenate(vv + [-np.ones(C)]))
        self.comp, self.comm_c, self.mem = comp, comm_c, mem

    def fix_by_bound(self, U: float) -> int:
        """Fix stage variables that no placement with max-load at most ``U`` can set otherwise:
        item ``c`` can be in the first ``p + 1`` stages only if all its ancestors' work fits in ``p + 1``
        stages of load ``U``, and after them only if all its descendants' work fits in the remaining
        ``P - 1 - p`` stages (work counted at each item's cheapest kind). Returns how many were fixed."""
        C, P = self.C, self.P
        wmin = np.where(np.isfinite(self.comp[self.kinds]), self.comp[self.kinds], np.inf).min(axis=0)
        anc = _closure_weights(C, self.items.src, self.items.dst, wmin)
        desc = _closure_weights(C, self.items.dst, self.items.src, wmin)
        p = np.arange(P)[None, :]
        tol = 1e-9 * max(1.0, U)
        zero = anc[:, None] > (p + 1) * U + tol  # cannot be within the first p+1 stages
        one = desc[:, None] > (P - 1 - p) * U + tol  # cannot be after them
        self.m.tighten(self.z[zero], ub=0.0)
        self.m.tighten(self.z[one], lb=1.0)
        return int(zero.sum() + one.sum())

    # ---------------------------------------------------------------- warm start and decoding
    def start_vector(self, a: np.ndarray) -> np.ndarray | None:
        """The model's variables for a contiguous assignment (``None`` if it does not fit the items)."""
        cls, C, P = self.items.node_class, self.C, self.P
        item_dev = np.full(C, -1, np.int64)
        item_dev[cls] = a
        if (item_dev[cls] != a).any():
            return None
        ev = evaluate(self.graph, self.cluster, a)
        if not (ev.valid and ev.contiguous) or ev.stage_order is None:
            return None
        dkind = self.cluster.device_kind()
        order = list(ev.stage_order)
        if len(order) > P:
            return None
        stage_of_dev = {d: p for p, d in enumerate(order)}
        stage = np.array([stage_of_dev[int(d)] for d in item_dev.tolist()], dtype=np.int64)
        # the item graph's edges must respect the stages (they do when the evaluator's order does)
        if (stage[self.items.src] > stage[self.items.dst]).any():
            return None
        kind_pos = {t: j for j, t in enumerate(self.kinds)}
        v = np.zeros(self.m.num_cols)
        v[self.z.ravel()] = (stage[:, None] <= np.arange(P)[None, :]).ravel()
        for p, d in enumerate(order):
            v[self.k[p, kind_pos[int(dkind[d])]]] = 1.0
        s_mem = stage[:, None] == np.arange(P)[None, :]  # [C, P]
        for p, d in enumerate(order):
            j = kind_pos[int(dkind[d])]
            v[self.x[:, p, j]] = s_mem[:, p]
        pu, pv = self.pu, self.pv
        cls_u = cls[pu]
        pos = np.searchsorted(self.comm_nodes, pu)
        for j in self.out:
            xk = np.zeros((C, P))
            for p, d in enumerate(order):
                if kind_pos[int(dkind[d])] == j:
                    xk[:, p] = s_mem[:, p]
            o = np.zeros((self.comm_nodes.size, P))
            i = np.zeros((self.comm_nodes.size, P))
            np.maximum.at(o, pos, np.clip(xk[cls_u] - s_mem[pv], 0, 1))
            np.maximum.at(i, pos, np.clip(xk[pv] - s_mem[cls_u], 0, 1))
            v[self.out[j].ravel()] = o.ravel()
            v[self.inn[j].ravel()] = i.ravel()
        self._set_objective_vars(v, a)
        return v

    def _set_objective_vars(self, v: np.ndarray, a: np.ndarray) -> None:
        if self.objective == "split-max":
            f, b = split_loads(self.graph, self.cluster, a)
            v[self.L["fwd"]] = f.max(initial=0.0) * (1 + 1e-9) + 1e-12
            v[self.L["bwd"]] = b.max(initial=0.0) * (1 + 1e-9) + 1e-12
        else:
            v[self.L["all"]] = evaluate(self.graph, self.cluster, a).max_load * (1 + 1e-9) + 1e-12

    def decode(self, v: np.ndarray) -> np.ndarray:
        """Device number per node from a solution vector (each kind's devices in pipeline order)."""
        z = v[self.z] > 0.5
        stage = np.argmax(z, axis=1)  # first stage p with z[c, p] = 1
        kind_of_stage = np.argmax(v[self.k], axis=1)
        first = np.concatenate([[0], np.cumsum([k.count for k in self.cluster.kinds])[:-1]])
        used = np.zeros(len(self.cluster.kinds), np.int64)
        dev_of_stage = np.full(self.P, -1, np.int64)
        for p in range(self.P):
            if not (stage == p).any():
                continue
            t = self.kinds[int(kind_of_stage[p])]
            dev_of_stage[p] = first[t] + used[t]
            used[t] += 1
        return dev_of_stage[stage][self.items.node_class]


def _closure_weights(C: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> np.ndarray:
    """For every item, the total weight of itself and all its ancestors along ``src -> dst`` edges
    (items are numbered so that this direction or its reverse is topological)."""
    preds: list[list[int]] = [[] for _ in range(C)]
    for a, b in zip(src.tolist(), dst.tolist()):
        preds[b].append(a)
    order = list(range(C)) if (src < dst).all() else list(range(C - 1, -1, -1))
    sets = [0] * C
    for c in order:
        acc = 1 << c
        for a in preds[c]:
            acc |= sets[a]
        sets[c] = acc
    W = max(1, (C + 63) // 64)
    buf = b"".join(x.to_bytes(8 * W, "little") for x in sets)
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8).reshape(C, 8 * W), axis=1,
                         bitorder="little")[:, :C].astype(bool)
    return bits @ np.where(np.isfinite(w), w, 0.0)


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Contiguous throughput IP (``--solver ip``): same domain and optimum as the DP."""
    return _solve(graph, cluster, options, "ip", contiguous=True)


def _solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None, solver: str, *,
           contiguous: bool) -> Solution:
    """Both throughput programs: the latency objective goes to :mod:`solvers.latency_ip`; otherwise the
    contiguous (``_ContigModel``) or free (``_FreeModel``) model, driven by :func:`_drive`."""
    options = options or SolveOptions()
    _check_objective(options, solver)
    if options.objective == "latency":
        from .latency_ip import solve as solve_latency

        return solve_latency(graph, cluster, options, solver=solver)
    if options.objective == "split-max" and not graph.is_training:
        raise InputError("objective split-max is for training graphs (forward + backward); this graph has "
                         "no backward nodes")
    t_start = time.perf_counter()
    deadline = None if options.time_limit is None else t_start + options.time_limit
    try:
        items = contract(graph, cluster)
        if contiguous:
            model = _ContigModel(graph, cluster, items, options.objective,
                                 symmetry=bool(options.raw.get("symmetry", True)))
        else:
            model = _FreeModel(graph, cluster, options.objective,
                               symmetry=bool(options.raw.get("symmetry", False)))
    except InfeasibleError as e:
        return Solution(None, math.inf, Status.INFEASIBLE, solver, message=str(e),
                        time=time.perf_counter() - t_start)
    stats = ({"items": items.num_classes, "stages": model.P} if contiguous
             else {"items": model.C, "devices": model.D})
    stats["objective"] = options.objective
    return _drive(graph, cluster, options, model, solver, t_start, deadline, stats, items, contiguous)


class _Heuristics:
    """Non-contiguous starts from the baselines for the non-contiguous program, whose LP bound proves
    little on big graphs, so that these decide what it returns there: the partitioner
    (:mod:`solvers.partition`) and best single-item moves from it, the local-search baseline's own
    seeded random restarts (its first ``DEFAULT_RESTARTS`` are the baseline's, so given the time the
    program starts from at least what the baseline returns), and best moves from a contiguous start."""

    def __init__(self, graph, cluster, options, stats) -> None:
        from . import local_search

        self.ls = local_search
        self.graph, self.cluster, self.options, self.stats = graph, cluster, options, stats
        self.prob = local_search.move_problem(graph, cluster)
        self.found: list[tuple[str, np.ndarray]] = []

    def _budget(self, deadline, share: float) -> float:
        left = time_left(deadline)
        budget = float(self.options.raw.get("local_search_s", 60.0))
        return budget if left is None else min(budget, share * left)

    def _descend(self, name: str, a: np.ndarray, stop: float) -> None:
        # a descent under way finishes its current batch of moves after the stop
        item_dev = np.zeros(self.prob.num_items, np.int64)
        item_dev[self.prob.node_item] = a
        item_dev, _ = self.ls.descend(self.prob, item_dev, deadline=stop)
        if self.ls.overflow(self.prob, item_dev) <= 0.0:
            self.found.append((name, item_dev[self.prob.node_item]))

    def baselines(self, deadline) -> None:
        """The partitioner, moves from it, and the local-search restarts, within a share of the time
        left (``raw["local_search_share"]``, default 0.4)."""
        from graphs.errors import PlacementError

        from . import partition

        t0 = time.perf_counter()
        stop = t0 + self._budget(deadline, float(self.options.raw.get("local_search_share", 0.4)))
        seed = self.options.seed
        try:
            part = partition.solve(self.graph, self.cluster, SolveOptions(seed=seed))
        except PlacementError:
            part = None
        if part is not None and part.assignment is not None:
            a = np.asarray(part.assignment, np.int64)
            self.found.append(("partition", a))
            self._descend("partition+moves", a, stop)
        rng = np.random.default_rng(seed)
        restarts = int(self.options.raw.get("local_search_restarts", 2 * self.ls.DEFAULT_RESTARTS))
        runs = 0
        while runs < restarts and time.perf_counter() < stop:
            self._descend("local-search", self.ls.random_start(self.prob, rng)[self.prob.node_item], stop)
            runs += 1
        self.stats["local_search_restarts"] = runs
        self.stats["heuristics_s"] = time.perf_counter() - t0

    def moves_from(self, name: str, a: np.ndarray, deadline) -> None:
        """Best single-item moves from ``a`` within 15% of the time left."""
        t0 = time.perf_counter()
        self._descend(name + "+moves", a, t0 + self._budget(deadline, 0.15))
        self.stats["heuristics_s"] = self.stats.get("heuristics_s", 0.0) + time.perf_counter() - t0


def _warm_start(graph, cluster, options, deadline, model, stats, items, contiguous=True):
    """The best valid start among options.warm_start, greedy chains, the DP and (non-contiguous) the
    baselines (:class:`_Heuristics`) and best moves from the best of the others: ``(vector, value,
    assignment)``, all ``None`` when there is none (or ``raw["warm_start"]`` is ``False``)."""
    if options.raw.get("warm_start", True) is False:
        return None, None, None
    cand = []
    if options.warm_start is not None:
        a = np.asarray(options.warm_start)
        if a.shape != (graph.num_nodes,):
            raise InputError(f"the warm start has shape {a.shape}; expected one device per node "
                             f"({graph.num_nodes},)")
        cand.append(("given", a.astype(np.int64)))
    cand += [("greedy", a) for a in greedy_chains(graph, cluster, items)]
    heur = None
    if not contiguous and options.raw.get("local_search", True):
        heur = _Heuristics(graph, cluster, options, stats)
        if heur.prob.allowed.any(axis=1).all():
            heur.baselines(deadline)  # before the DP, which may use its whole share and finish nothing
        else:
            heur = None
    if options.warm_start is None:
        a = _dp_warm_start(graph, cluster, options, deadline, stats)
        if a is not None:
            cand.append(("dp", a))
    best = None

    def consider(name, a):
        nonlocal best
        ev = evaluate(graph, cluster, a)
        if not ev.valid:
            stats.setdefault("warm_start_rejected", []).append(name)
            return
        # the baselines optimise max-load; under split-max their placements are candidates all the same
        value = _objective_value(graph, cluster, a, options.objective)
        if best is None or value < best[1] - 1e-12 or (name == "given" and value <= best[1]):
            best = (name, value, a)
        stats[f"warm_{name}"] = min(value, stats.get(f"warm_{name}", math.inf))

    for name, a in cand:
        consider(name, a)
    if heur is not None:
        if best is not None:
            heur.moves_from(best[0], best[2], deadline)
        for name, a in heur.found:
            consider(name, a)
    if best is None:
        return None, None, None
    v = model.start_vector(best[2])
    if v is None:
        stats.setdefault("warm_start_rejected", []).append(best[0])
        return None, None, None
    stats["warm_start"] = best[0]
    return v, best[1], best[2]


def _drive(graph, cluster, options, model, solver, t_start, deadline, stats, items, contiguous):
    """Warm start, bound fixing, MIP, decoding and the honest result, shared by both programs."""
    start, warm_value, warm_a = _warm_start(graph, cluster, options, deadline, model, stats, items,
                                            contiguous)
    fixing = options.raw.get("fixing", True)
    if contiguous and start is not None and options.objective == "max-load" and fixing:
        stats["fixed_by_bound"] = model.fix_by_bound(warm_value * (1 + 1e-9))
    left = time_left(deadline)
    if stats.get("interrupted") and warm_a is not None:
        res = _milp.MipResult(_milp.TIME_LIMIT, None, math.inf, None, 0.0,
                              "interrupted (Ctrl-C) before the integer program ran; warm start returned")
    elif left is not None and warm_a is not None and left < max(0.05, 0.02 * options.time_limit):
        res = _milp.MipResult(_milp.TIME_LIMIT, None, math.inf, None, 0.0,
                              "time limit reached before the integer program could run; warm start returned")
    else:
        # progress on max-load only, as the registry says (SolverInfo.progress) and the command line reads
        res = _milp.solve_mip(model.m, backend=options.backend, time_limit=left, gap=options.gap,
                              threads=options.threads, start=start, raw=options.raw,
                              seed=options.seed,
                              progress=options.progress if options.objective == "max-load" else None)
    a = model.decode(res.x) if res.x is not None else None
    if a is not None:
        ev = evaluate(graph, cluster, a)
        if not ev.valid or (contiguous and not ev.contiguous):  # cannot happen for a feasible MIP point
            stats["decode_problem"] = "; ".join(ev.problems) or "not contiguous"
            a = None
    model_value = None if res.x is None else float(sum(res.x[L] for L in model.L.values()))
    if a is None and warm_a is not None and res.status != _milp.INFEASIBLE:
        a = warm_a
        stats["returned"] = "warm start"
    elif a is not None and warm_a is not None and warm_value is not None:
        # never return worse than the start (a MIP incumbent can only be better, up to round-off)
        if _objective_value(graph, cluster, a, options.objective) > warm_value:
            a = warm_a
            stats["returned"] = "warm start"
    lb = _static_bound(graph, cluster, options.objective)
    if a is None and res.status != _milp.INFEASIBLE and (res.bound is None or res.bound < lb):
        res.bound = lb
    return _result(graph, cluster, options, res, a, solver, t_start, stats, warm_value, model_value, lb)


# --------------------------------------------------------------------------- non-contiguous
class _FreeModel:
    """The non-contiguous program on colocation classes; see the module doc."""

    def __init__(self, graph: OpGraph, cluster: Cluster, objective: str, symmetry: bool = True) -> None:
        self.graph, self.cluster, self.objective = graph, cluster, objective
        cls, C = colocation_items(graph)
        self.cls, self.C = cls, C
        comp, comp_f, comp_b, mem, comm_c = _item_arrays(graph, cluster, cls, C)
        _check_fit(graph, cluster, cls, C, comp, mem)
        dkind = cluster.device_kind()
        D = cluster.num_devices
        self.D, self.dkind = D, dkind
        m = _milp.MilpModel()
        self.m = m
        ub = np.ones((C, D))
        for d in range(D):
            t = int(dkind[d])
            cap = cluster.kinds[t].memory
            bad = ~np.isfinite(comp[t]) | ((mem > cap) if cap is not None else np.zeros(C, bool))
            ub[bad, d] = 0.0
        x = m.add_cols(C * D, lb=0, ub=ub.ravel(), integer=True).reshape(C, D)
        self.x = x
        m.add_rows(np.ones(C), np.ones(C), np.repeat(np.arange(C), D), x.ravel(), 1.0)
        for d in range(D):
            cap = cluster.kinds[int(dkind[d])].memory
            if cap is not None and mem.sum() > cap:
                m.add_rows([-np.inf], [cap], np.zeros(C, np.int64), x[:, d], mem)
        self.y = {}
        if symmetry:
            # devices of one kind ordered by their smallest item: x[c, d] <= sum_{c' < c} x[c', d-1]
            for d in range(1, D):
                if dkind[d] != dkind[d - 1]:
                    continue
                y = m.add_cols(C, lb=0, ub=C)  # y[c] = sum_{c' <= c} x[c', d-1]
                self.y[d - 1] = y
                r = np.arange(C)
                rows = np.concatenate([r, r, r[1:]])
                cols = np.concatenate([y, x[:, d - 1], y[:-1]])
                vals = np.concatenate([np.ones(C), -np.ones(C), -np.ones(C - 1)])
                m.add_rows(np.zeros(C), np.zeros(C), rows, cols, vals)
                m.add_rows([0.0], [0.0], [0], [x[0, d]], [1.0])
                if C > 1:
                    r = np.arange(C - 1)
                    m.add_rows(np.full(C - 1, -np.inf), np.zeros(C - 1), np.concatenate([r, r]),
                               np.concatenate([x[1:, d], y[:-1]]),
                               np.concatenate([np.ones(C - 1), -np.ones(C - 1)]))
        pu, pv = _comm_pairs(graph, comm_c, cls)
        nodes = np.unique(pu)
        self.pu, self.pv, self.comm_nodes = pu, pv, nodes
        pair_node = np.searchsorted(nodes, pu)
        N, Q = nodes.size, pu.size
        qi = np.arange(Q)
        self.out, self.inn = {}, {}
        for d in range(D):
            t = int(dkind[d])
            if N == 0 or not (comm_c[t, nodes] > 0).any():
                continue
            out = m.add_cols(N, lb=0, ub=1)
            inn = m.add_cols(N, lb=0, ub=1)
            self.out[d], self.inn[d] = out, inn
            cu, cv = cls[pu], pv
            m.add_rows(np.zeros(Q), np.full(Q, np.inf), np.concatenate([qi, qi, qi]),
                       np.concatenate([out[pair_node], x[cu, d], x[cv, d]]),
                       np.concatenate([np.ones(Q), -np.ones(Q), np.ones(Q)]))
            m.add_rows(np.zeros(Q), np.full(Q, np.inf), np.concatenate([qi, qi, qi]),
                       np.concatenate([inn[pair_node], x[cv, d], x[cu, d]]),
                       np.concatenate([np.ones(Q), -np.ones(Q), np.ones(Q)]))
        bwd_node = graph.backward[nodes] if N else np.zeros(0, bool)
        passes = [("all", comp, np.ones(N, bool))] if objective != "split-max" else \
            [("fwd", comp_f, ~bwd_node), ("bwd", comp_b, bwd_node)]
        self.L = {}
        for name, cmat, node_mask in passes:
            kinds_used = sorted({int(t) for t in dkind})
            cheapest = np.where(np.isfinite(cmat[kinds_used]), cmat[kinds_used], np.inf).min(axis=0)
            lbv = float(cheapest.max(initial=0.0)) if objective != "split-max" else 0.0
            L = m.add_cols(1, lb=lbv, ub=np.inf, cost=1.0)[0]
            self.L[name] = L
            for d in range(D):
                t = int(dkind[d])
                cvec = np.where(np.isfinite(cmat[t]), cmat[t], 0.0)
                cols, vals = [x[:, d]], [cvec]
                if d in self.out:
                    cost_t = comm_c[t, nodes] * node_mask
                    cols += [self.out[d], self.inn[d]]
                    vals += [cost_t, cost_t]
                cols.append(np.array([L]))
                vals.append(np.array([-1.0]))
                cc = np.concatenate(cols)
                m.add_rows([-np.inf], [0.0], np.zeros(cc.size, np.int64), cc, np.concatenate(vals))

    def canonical(self, a: np.ndarray) -> np.ndarray | None:
        """Rename devices within each kind so that they are ordered by their smallest item (unused last),
        as the symmetry breaking requires; ``None`` if ``a`` splits a colocation class."""
        item_dev = np.full(self.C, -1, np.int64)
        item_dev[self.cls] = a
        if (item_dev[self.cls] != a).any():
            return None
        new = item_dev.copy()
        for t in range(len(self.cluster.kinds)):
            devs = np.flatnonzero(self.dkind == t)
            if devs.size == 0:
                continue
            first_item = [int(np.flatnonzero(item_dev == d)[0]) if (item_dev == d).any() else 1 << 60
                          for d in devs]
            order = devs[np.argsort(first_item, kind="stable")]
            remap = {int(old): int(devs[i]) for i, old in enumerate(order)}
            sel = np.isin(item_dev, devs)
            new[sel] = [remap[int(d)] for d in item_dev[sel]]
        return new

    def start_vector(self, a: np.ndarray) -> np.ndarray | None:
        item_dev = self.canonical(a)
        if item_dev is None:
            return None
        a = item_dev[self.cls]
        ev = evaluate(self.graph, self.cluster, a)
        if not ev.valid:
            return None
        C, D = self.C, self.D
        v = np.zeros(self.m.num_cols)
        X = np.zeros((C, D))
        X[np.arange(C), item_dev] = 1.0
        v[self.x.ravel()] = X.ravel()
        for d, y in self.y.items():
            v[y] = np.cumsum(X[:, d])
        pos = np.searchsorted(self.comm_nodes, self.pu)
        cu, cv = self.cls[self.pu], self.pv
        for d in self.out:
            o = np.zeros(self.comm_nodes.size)
            i = np.zeros(self.comm_nodes.size)
            np.maximum.at(o, pos, np.clip(X[cu, d] - X[cv, d], 0, 1))
            np.maximum.at(i, pos, np.clip(X[cv, d] - X[cu, d], 0, 1))
            v[self.out[d]] = o
            v[self.inn[d]] = i
        if self.objective == "split-max":
            f, b = split_loads(self.graph, self.cluster, a)
            v[self.L["fwd"]] = f.max(initial=0.0) * (1 + 1e-9) + 1e-12
            v[self.L["bwd"]] = b.max(initial=0.0) * (1 + 1e-9) + 1e-12
        else:
            v[self.L["all"]] = ev.max_load * (1 + 1e-9) + 1e-12
        return v

    def decode(self, v: np.ndarray) -> np.ndarray:
        return np.argmax(v[self.x], axis=1)[self.cls]


def solve_noncontiguous(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Non-contiguous throughput IP (``--solver ip-noncontig``): any valid assignment; its optimum is at
    most the contiguous one."""
    return _solve(graph, cluster, options, "ip-noncontig", contiguous=False)
