"""The exact dynamic program for replicated pipelines (:mod:`graphs.parallel`): stages with
data-parallel degree ``d``, tensor-parallel degree ``t`` and a variant per node, several device kinds.

**Stage costs.** For every pair of nested ideals ``J ⊂ I`` (stage ``S = I \\ J``), kind ``k``, degree
``t`` every node of ``S`` supports and replica count ``d``, the best variants are a multiple-choice
knapsack: minimise ``sum time/d + resync`` subject to ``sum mem(y) <= capacity``, where ``y`` is the
stage's in-flight micro-batches. It is solved exactly (all-fastest when that fits; otherwise a Pareto
dynamic program over (memory, time) with bound pruning), never worse than Piper's greedy. Its optimum
only grows with ``y`` and an optimal choice at ``y`` stays optimal up to the largest ``y'`` at which it
still fits, so each (stage, k, t, d) is a short *step function* of ``y``: a few knapsacks, not one per
``y``.

**Search.** The objective (largest stage time) is one of the step values. For a threshold ``τ`` a
second DP decides whether some plan has every stage at most ``τ``:

    g[J][s][c] = fewest devices of the last kind that place the nodes outside ideal J, as stages of
                 cost <= τ, with data-parallel degrees summing to s and c devices used of the other kinds

(suffix DP, Piper's state plus devices per kind): a stage ``(I \\ J, k, t, d)`` ahead of a suffix with
``s - d`` holds ``y = ceil(s / d)`` micro-batches (``N / d`` under GPipe) and is allowed while its cost at
that ``y`` is ``<= τ``. A binary search over the sorted step values finds the smallest feasible ``τ``: the
optimum, proven.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit

from graphs.errors import InputError, ProblemTooLargeError
from graphs.ideals import IdealLattice, chain_ideals, enumerate_ideals, push_down
from graphs.order import topological_order
from graphs.parallel import (
    SCHEDULES,
    ParallelProblem,
    PlanEvaluation,
    Stage,
    evaluate_plan,
    is_pipeline_model,
    resync_bandwidth,
    usable_memory,
)

from .base import INTERRUPTED, ProgressTeller, Solution, SolveOptions, Status, stage_solution

__all__ = ["solve_problem", "solve_stages", "knapsack", "work_lower_bound"]

_INF = np.inf
_BIG = np.iinfo(np.int64).max // 4


# --------------------------------------------------------------------------- knapsack
@njit(cache=True, inline="always")
def _mem(a, b, w, y, sched):
    v = 1
    if sched == 2:
        v = y
    elif sched == 3:
        v = min(y, 2)
    return a * y + b + (v - 1) * w


def _workspace(n: int, states: int = 256) -> tuple:
    """Scratch arrays of the knapsack for up to ``n`` classes (the hot loops call it thousands of times a
    second, so it allocates nothing itself but what outgrows these). Rows, not views, of a few 2-D
    arrays: every array a numba function takes or slices costs it reference counting."""
    return (np.empty((9, n + 2)), np.empty((6, n + 2), np.int64), np.empty((2, states)),
            np.empty((2, states), np.int64), np.empty((2, states)), np.empty((3, states), np.int64))


_workspace_nb = njit(cache=True)(_workspace)


@njit(cache=True)
def _knapsack(ptr, cost, mem, cap, out):
    """Exact multiple-choice knapsack: class ``i`` has choices ``ptr[i]..ptr[i+1]`` (cost, mem); pick one
    per class, minimise total cost with total mem <= cap. Writes the chosen index per class to ``out``;
    returns the cost (inf if nothing fits)."""
    return _knapsack_ws(ptr, cost, mem, cap, out, _workspace_nb(ptr.shape[0] - 1, 256))


@njit(cache=True)
def _knapsack_ws(ptr, cost, mem, cap, out, ws):
    """:func:`_knapsack` with the scratch arrays of :func:`_workspace`."""
    n = ptr.shape[0] - 1
    tot_m = 0.0
    tot_c = 0.0
    for i in range(n):
        best = ptr[i]
        for j in range(ptr[i] + 1, ptr[i + 1]):
            if cost[j] < cost[best] or (cost[j] == cost[best] and mem[j] < mem[best]):
                best = j
        out[i] = best
        tot_m += mem[best]
        tot_c += cost[best]
    if tot_m <= cap:
        return tot_c
    # suffix minima for pruning: rows 0 and 1 of wf (memory, cost), the smallest-memory choice in row 0
    # of wi
    wf = ws[0]
    wi = ws[1]
    wf[0, n] = 0.0
    wf[1, n] = 0.0
    for i in range(n - 1, -1, -1):
        bm = ptr[i]
        bc = ptr[i]
        for j in range(ptr[i], ptr[i + 1]):
            if mem[j] < mem[bm] or (mem[j] == mem[bm] and cost[j] < cost[bm]):
                bm = j
            if cost[j] < cost[bc]:
                bc = j
        wi[0, i] = bm
        wf[0, i] = wf[0, i + 1] + mem[bm]
        wf[1, i] = wf[1, i + 1] + cost[bc]
    if wf[0, 0] > cap:
        return _INF
    # classes with two undominated choices at most: a 0/1 knapsack with the LP bound
    two = True
    for i in range(n):
        if ptr[i + 1] - ptr[i] <= 2:
            continue
        nd = 0
        for j in range(ptr[i], ptr[i + 1]):
            if not _dominated(j, ptr[i], ptr[i + 1], cost, mem):
                nd += 1
        if nd > 2:
            two = False
            break
    if two:
        return _knapsack01(ptr, cost, mem, cap, wf[0, 0], out, ws)
    return _pareto(ptr, cost, mem, cap, wi[0, :n].copy(), wf[0, :n + 1].copy(), wf[1, :n + 1].copy(), out)


@njit(cache=True, inline="always")
def _dominated(j, lo, hi, cost, mem):
    """Is choice j dominated by another of its class (no better in both, better in one, or an equal
    twin with a smaller index)?"""
    for i in range(lo, hi):
        if i == j:
            continue
        if cost[i] <= cost[j] and mem[i] <= mem[j]:
            if cost[i] < cost[j] or mem[i] < mem[j] or i < j:
                return True
    return False


@njit(cache=True)
def _knapsack01(ptr, cost, mem, cap, base_m, out, ws):
    """Classes of at most two undominated choices: start from the smallest-memory one (row 0 of the int
    workspace) and decide, item by item in decreasing time-saved-per-byte order, whether to upgrade; a
    Pareto list of (bytes used, time saved) states pruned by the LP (fractional) bound of the items left.

    Workspace rows: float 2 dm, 3 ds, 4 eff (per class), 5 w, 6 v, 7 cw, 8 cv (per item in order); int
    1 up (the upgrade choice per class), 2 items, 3 order, 4 gstart (group starts), 5 layer (state
    layers); states (w, v) and (parent, take); candidates (w, v) and (parent, take, sorted order)."""
    n = ptr.shape[0] - 1
    wf, wi, sf, si, cf, ci = ws
    m = 0
    base_c = 0.0
    for i in range(n):
        b = wi[0, i]
        base_c += cost[b]
        out[i] = b
        wi[1, i] = -1
        for j in range(ptr[i], ptr[i + 1]):
            if j != b and not _dominated(j, ptr[i], ptr[i + 1], cost, mem) and cost[j] < cost[b]:
                wi[1, i] = j
                wf[2, i] = mem[j] - mem[b]
                wf[3, i] = cost[b] - cost[j]
        if wi[1, i] >= 0:
            wi[2, m] = i
            m += 1
            wf[4, i] = wf[3, i] / wf[2, i] if wf[2, i] > 0 else _INF
    R = cap - base_m
    # efficiency order (decreasing), then size (increasing), then class order, so identical items are
    # adjacent: an insertion sort for the usual few items
    if m <= 64:
        for q in range(m):
            i = wi[2, q]
            e = wf[4, i]
            r = q - 1
            while r >= 0:
                x = wi[3, r]
                if wf[4, x] < e or (wf[4, x] == e and wf[2, x] > wf[2, i]):
                    wi[3, r + 1] = x
                    r -= 1
                else:
                    break
            wi[3, r + 1] = i
    else:
        its = wi[2, :m].copy()
        pre = np.argsort(wf[2][its], kind="mergesort")
        its = its[pre]
        wi[3, :m] = its[np.argsort(-wf[4][its], kind="mergesort")]
    wf[7, 0] = 0.0
    wf[8, 0] = 0.0
    for q in range(m):
        wf[5, q] = wf[2, wi[3, q]]
        wf[6, q] = wf[3, wi[3, q]]
        wf[7, q + 1] = wf[7, q] + wf[5, q]
        wf[8, q + 1] = wf[8, q] + wf[6, q]
    # greedy integral solution: a lower bound on the savings
    lb = 0.0
    used = 0.0
    for q in range(m):
        if used + wf[5, q] <= R:
            used += wf[5, q]
            lb += wf[6, q]
    # identical items form groups: decide how many of each group to upgrade
    ng = 0
    for q in range(m):
        if q == 0 or wf[5, q] != wf[5, q - 1] or wf[6, q] != wf[6, q - 1]:
            wi[4, ng] = q
            ng += 1
    wi[4, ng] = m
    size = sf.shape[1]
    sf[0, 0] = 0.0
    sf[1, 0] = 0.0
    si[0, 0] = -1
    si[1, 0] = 0
    wi[5, 0] = 0
    wi[5, 1] = 1
    for gi in range(ng):
        a = wi[4, gi]
        after = wi[4, gi + 1]
        cnt_g = after - a
        wq = wf[5, a]
        vq = wf[6, a]
        lo = wi[5, gi]
        hi = wi[5, gi + 1]
        need = (hi - lo) * (cnt_g + 1)
        if need > cf.shape[1]:
            cf = np.empty((2, 2 * need))
            ci = np.empty((3, 2 * need), np.int64)
        k = 0
        for p in range(lo, hi):
            for take in range(cnt_g + 1):
                nw = sf[0, p] + take * wq
                if nw > R:
                    break
                nv = sf[1, p] + take * vq
                # LP bound of the items after this group with the capacity left
                left = R - nw
                lo_b = after
                hi_b = m
                while lo_b < hi_b:  # largest b with cw[b] - cw[after] <= left
                    mid = (lo_b + hi_b + 1) // 2
                    if wf[7, mid] - wf[7, after] <= left:
                        lo_b = mid
                    else:
                        hi_b = mid - 1
                bnd = nv + wf[8, lo_b] - wf[8, after]
                if lo_b < m:
                    bnd += (left - (wf[7, lo_b] - wf[7, after])) * (
                        wf[6, lo_b] / wf[5, lo_b] if wf[5, lo_b] > 0 else _INF)
                if bnd < lb * (1 - 1e-12) - 1e-300:
                    continue
                cf[0, k] = nw
                cf[1, k] = nv
                ci[0, k] = p
                ci[1, k] = take
                k += 1
        # candidates by bytes used: they arrive nearly sorted, so an insertion sort when few
        if k <= 64:
            for r in range(k):
                x = cf[0, r]
                i = r - 1
                while i >= 0 and cf[0, ci[2, i]] > x:
                    ci[2, i + 1] = ci[2, i]
                    i -= 1
                ci[2, i + 1] = r
        else:
            ci[2, :k] = np.argsort(cf[0, :k])
        if hi + k > size:  # room for every candidate, grown here and not in the loop below (an array
            while hi + k > size:  # re-bound inside a hot loop costs reference counting per iteration)
                size *= 2
            sf2 = np.empty((2, size))
            si2 = np.empty((2, size), np.int64)
            sf2[:, :hi] = sf[:, :hi]
            si2[:, :hi] = si[:, :hi]
            sf = sf2
            si = si2
        start = hi
        best = -1.0
        for r_ in range(k):
            r = ci[2, r_]
            if cf[1, r] > best:
                best = cf[1, r]
                sf[0, start] = cf[0, r]
                sf[1, start] = cf[1, r]
                si[0, start] = ci[0, r]
                si[1, start] = ci[1, r]
                start += 1
        wi[5, gi + 2] = start
    lo = wi[5, ng]
    hi = wi[5, ng + 1]
    bp = lo
    for p in range(lo, hi):
        if sf[1, p] > sf[1, bp]:
            bp = p
    res = base_c - sf[1, bp]
    p = bp
    for gi in range(ng - 1, -1, -1):
        for q in range(wi[4, gi], wi[4, gi] + si[1, p]):
            out[wi[3, q]] = wi[1, wi[3, q]]
        p = si[0, p]
    return res


@njit(cache=True)
def _pareto(ptr, cost, mem, cap, minm, rem_m, rem_c, out):
    """General classes: a Pareto dynamic program over (memory, cost) with back-pointers, pruned by the
    capacity left and a greedy upper bound."""
    n = ptr.shape[0] - 1
    cur = minm.copy()
    used = rem_m[0]
    ub = 0.0
    for i in range(n):
        ub += cost[cur[i]]
    while True:
        bi = -1
        bj = -1
        br = -1.0
        for i in range(n):
            for j in range(ptr[i], ptr[i + 1]):
                dc = cost[cur[i]] - cost[j]
                dm = mem[j] - mem[cur[i]]
                if dc > 0 and used + dm <= cap:
                    r = dc / dm if dm > 0 else _INF
                    if r > br:
                        br = r
                        bi = i
                        bj = j
        if bi < 0:
            break
        used += mem[bj] - mem[cur[bi]]
        ub -= cost[cur[bi]] - cost[bj]
        cur[bi] = bj
    ub = ub * (1 + 1e-12) + 1e-300
    cap_states = 64
    s_mem = np.empty(cap_states)
    s_cost = np.empty(cap_states)
    s_par = np.empty(cap_states, np.int64)
    s_ch = np.empty(cap_states, np.int64)
    layer = np.zeros(n + 2, np.int64)
    s_mem[0] = 0.0
    s_cost[0] = 0.0
    s_par[0] = -1
    s_ch[0] = -1
    layer[1] = 1
    for i in range(n):
        lo = layer[i]
        hi = layer[i + 1]
        k = (hi - lo) * (ptr[i + 1] - ptr[i])
        c_mem = np.empty(k)
        c_cost = np.empty(k)
        c_par = np.empty(k, np.int64)
        c_ch = np.empty(k, np.int64)
        m = 0
        for p in range(lo, hi):
            for j in range(ptr[i], ptr[i + 1]):
                nm = s_mem[p] + mem[j]
                nc = s_cost[p] + cost[j]
                if nm + rem_m[i + 1] > cap or nc + rem_c[i + 1] > ub:
                    continue
                c_mem[m] = nm
                c_cost[m] = nc
                c_par[m] = p
                c_ch[m] = j
                m += 1
        order = np.argsort(c_mem[:m])
        start = hi
        best = _INF
        for q in range(m):
            r = order[q]
            if c_cost[r] < best:
                best = c_cost[r]
                if start >= cap_states:
                    cap_states *= 2
                    s_mem = _grow_f(s_mem, cap_states)
                    s_cost = _grow_f(s_cost, cap_states)
                    s_par = _grow_i(s_par, cap_states)
                    s_ch = _grow_i(s_ch, cap_states)
                s_mem[start] = c_mem[r]
                s_cost[start] = c_cost[r]
                s_par[start] = c_par[r]
                s_ch[start] = c_ch[r]
                start += 1
        layer[i + 2] = start
    lo = layer[n]
    hi = layer[n + 1]
    bp = lo
    for p in range(lo, hi):
        if s_cost[p] < s_cost[bp]:
            bp = p
    res = s_cost[bp]
    p = bp
    for i in range(n - 1, -1, -1):
        out[i] = s_ch[p]
        p = s_par[p]
    return res


@njit(cache=True)
def _grow_f(a, size):
    b = np.empty(size)
    b[:a.shape[0]] = a
    return b


@njit(cache=True)
def _grow_i(a, size):
    b = np.empty(size, np.int64)
    b[:a.shape[0]] = a
    return b


def knapsack(choices: list[list[tuple[float, float]]], cap: float) -> tuple[float, list[int]]:
    """Exact multiple-choice knapsack on ``choices[i] = [(cost, mem), ...]``: minimum total cost with
    total memory <= ``cap``, and the choice per class (``inf``, ``[]`` when nothing fits)."""
    ptr = np.cumsum([0] + [len(c) for c in choices]).astype(np.int64)
    flat = [x for c in choices for x in c]
    cost = np.array([x[0] for x in flat], float)
    mem = np.array([x[1] for x in flat], float)
    out = np.zeros(len(choices), np.int64)
    v = _knapsack(ptr, cost, mem, float(cap), out)
    if not math.isfinite(v):
        return math.inf, []
    return float(v), [int(out[i] - ptr[i]) for i in range(len(choices))]


# --------------------------------------------------------------------------- stage costs
@njit(cache=True, inline="always")
def _rest_ok(rest, devices_left, ub):
    """Can ``rest`` device-seconds per sample of other stages fit ``devices_left`` devices within ``ub``?"""
    if rest <= 1e-300:
        return True
    if devices_left <= 0:
        return False
    return rest <= ub * devices_left * (1 + 1e-9)


@njit(cache=True)
def _enumerate_pairs(out_i, out_j, cnt, I_lo, work, stamp, queue, down_ptr, down_idx, pre_mem, pre_uns,
                     pre_time, kt_ok, caps_kt, dmax_kt, ub, pre_work, total_devices, kt_t, kt_count, dvals):
    """Pairs J ⊂ I whose stage I \\ J could be used: some (kind, t) runs all its nodes, holds them at
    their smallest memory and, with the most replicas allowed, keeps their fastest time within ``ub``.
    All three only get worse for smaller J, so the walk down the lattice stops there. A pair is kept when,
    in addition, some (kind, t, d) keeps the stage within ``ub`` and leaves enough devices for the rest:
    every plan's largest stage time is at least the rest's work (device-seconds per sample) over the
    devices left.

    Resumable, so that the caller checks its deadline between calls: walks the ideals I from ``I_lo`` on,
    writing their pairs to ``out_i`` / ``out_j`` from ``cnt`` on, and returns ``(next I, count, False)``
    once the walks have visited more than ``work`` sub-ideals (whole walks: one I's pairs are never split
    between calls, so the pairs come in the same order however the calls are cut). When the output is
    full the walk of that I is undone (its stamps cleared) and ``(I, count before it, True)`` returned:
    grow the output and call again from there. ``stamp`` (``-1`` at first) and ``queue``: the walks'
    scratch, ``NI`` each, kept between calls."""
    NI = pre_mem.shape[0]
    KT = pre_mem.shape[1]
    cap = out_i.shape[0]
    visited = 0
    for I in range(I_lo, NI):
        if visited > work:
            return I, cnt, False
        cnt0 = cnt
        head = 0
        tail = push_down(I, I, down_ptr, down_idx, stamp, queue, np.int64(0))  # not a literal: one signature
        while head < tail:
            J = queue[head]
            head += 1
            fits = False
            for kt in range(KT):
                if (kt_ok[kt] and pre_uns[I, kt] == pre_uns[J, kt]
                        and pre_mem[I, kt] - pre_mem[J, kt] <= caps_kt[kt]
                        and (pre_time[I, kt] - pre_time[J, kt]) / dmax_kt[kt] <= ub):
                    fits = True
                    break
            if not fits:
                continue
            tail = push_down(J, I, down_ptr, down_idx, stamp, queue, tail)
            rest = pre_work[NI - 1] - (pre_work[I] - pre_work[J])
            useful = False
            for kt in range(KT):
                if (not kt_ok[kt] or pre_uns[I, kt] != pre_uns[J, kt]
                        or pre_mem[I, kt] - pre_mem[J, kt] > caps_kt[kt]):
                    continue
                for d in dvals:
                    td = kt_t[kt] * d
                    if td > kt_count[kt] or (pre_time[I, kt] - pre_time[J, kt]) / d > ub:
                        continue
                    if _rest_ok(rest, total_devices - td, ub):
                        useful = True
                        break
                if useful:
                    break
            if not useful:
                continue
            if cnt >= cap:  # full: undo this walk (every stamp it set is in the queue) for a redo
                for x in range(tail):
                    stamp[queue[x]] = -1
                return I, cnt0, True
            out_i[cnt] = I
            out_j[cnt] = J
            cnt += 1
        visited += tail
    return NI, cnt, False


@njit(cache=True)
def _order_by_j(pair_j, NI):
    """The stable order of the pairs by their first ideal J descending (a counting sort: ``NI`` keys)."""
    start = np.zeros(NI + 1, np.int64)
    for p in range(pair_j.shape[0]):
        start[NI - pair_j[p]] += 1
    for k in range(NI):
        start[k + 1] += start[k]
    order = np.empty(pair_j.shape[0], np.int64)
    for p in range(pair_j.shape[0]):
        k = NI - 1 - pair_j[p]
        order[start[k]] = p
        start[k] += 1
    return order


@njit(cache=True)
def _all_steps(start, pair_i, pair_j, bits, n, K, tvals, dvals, counts, caps, bw_res, opt_ptr, opt_var,
               same_params, v_time, v_params, v_a, v_b, v_w, sy_ptr, sy_tensor, sy_time, sy_dir,
               t_src, t_ptr, t_dst, t_time, sched, N, smax, ub, pre_work, total_devices,
               o_pair, o_k, o_t, o_d, o_step_ptr, o_yhi, o_cost, cnt, scnt, memo):
    """Append the (kind, t, d) step functions of the stages ``I \\ J`` of the pairs from ``start`` on to the
    output arrays (from ``cnt`` combos and ``scnt`` steps on); returns (next pair, combos, steps): the
    next pair is below ``len(pair_i)`` when the output arrays are full (that pair is to be redone).

    When each node's variants share one parameter size (Piper's files), a variant's cost is
    ``time / d`` plus a per-node constant, so the best variants at a given ``y`` are the same for every
    ``d``: the step function over ``y`` is computed once per (kind, t) and rescaled per ``d``. (One
    function for all pairs: the arrays a call would pass cost reference counting per pair.)"""
    ws = _workspace_nb(n, 256)
    T = tvals.shape[0]
    M = t_src.shape[0]
    inside = np.zeros(n, np.bool_)
    nodes = np.empty(n, np.int64)
    enter = np.zeros(M, np.bool_)
    leave = np.zeros(M, np.bool_)
    ylimit = N if sched == 1 else smax  # the largest y any d can see
    sh_yhi = np.empty(ylimit + 1, np.int64)
    sh_e = np.empty(ylimit + 1)
    V = opt_var.shape[0]  # the most choices a stage can have
    b_ptr = np.empty(n + 1, np.int64)
    b_chosen = np.empty(n, np.int64)
    b_vid = np.empty(V, np.int64)
    b_etime = np.empty(V)
    b_mem = np.empty(V)
    b_cost = np.empty(V)
    for pq in range(start, pair_i.shape[0]):
        I = pair_i[pq]
        J = pair_j[pq]
        rest = pre_work[-1] - (pre_work[I] - pre_work[J])
        cnt0 = cnt
        scnt0 = scnt
        ns = np.int64(0)  # not a literal: one signature of the step functions
        for u in range(n):
            inside[u] = (bits[I, u >> 6] >> np.uint64(u & 63)) & np.uint64(1) and not (
                (bits[J, u >> 6] >> np.uint64(u & 63)) & np.uint64(1))
            if inside[u]:
                nodes[ns] = u
                ns += 1
        for e in range(M):
            cin = 0
            for p in range(t_ptr[e], t_ptr[e + 1]):
                if inside[t_dst[p]]:
                    cin += 1
            if inside[t_src[e]]:
                leave[e] = cin < t_ptr[e + 1] - t_ptr[e]
                enter[e] = False
            else:
                enter[e] = cin > 0
                leave[e] = False
        for k in range(K):
            if counts[k] == 0:
                continue
            comm = 0.0
            for e in range(M):
                if enter[e] or leave[e]:
                    comm += t_time[k, e]
            for ti in range(T):
                t = tvals[ti]
                if t > counts[k]:
                    continue
                ok = True
                shared = True
                total = 0
                for q in range(ns):
                    key = (nodes[q] * K + k) * T + ti
                    c = opt_ptr[key + 1] - opt_ptr[key]
                    if c == 0:
                        ok = False
                        break
                    shared = shared and same_params[key]
                    total += c
                if not ok:
                    continue
                ptr = b_ptr[:ns + 1]  # views of buffers made once (an allocation costs more)
                ptr[0] = 0
                vid = b_vid[:total]
                etime = b_etime[:total]
                m = 0
                P = 0.0  # parameter bytes (shared case: the same for every choice)
                for q in range(ns):
                    key = (nodes[q] * K + k) * T + ti
                    P += v_params[opt_var[opt_ptr[key]]]
                    for p in range(opt_ptr[key], opt_ptr[key + 1]):
                        v = opt_var[p]
                        x = v_time[v]
                        for r in range(sy_ptr[v], sy_ptr[v + 1]):
                            e = sy_tensor[r]
                            if (sy_dir[r] == 0 and enter[e]) or (sy_dir[r] == 1 and leave[e]):
                                x += sy_time[r]
                        vid[m] = v
                        etime[m] = x
                        m += 1
                    ptr[q + 1] = m
                mem = b_mem[:total]
                chosen = b_chosen[:ns]
                nsh = 0
                if shared:
                    # one step function over y for all d: (last y, summed time of the best variants), over the
                    # y that the d passing the bounds can see
                    emin = 0.0
                    for q in range(ns):
                        be = _INF
                        for p in range(ptr[q], ptr[q + 1]):
                            if etime[p] < be:
                                be = etime[p]
                        emin += be
                    dlo = 0
                    dhi = 0
                    for di in range(dvals.shape[0]):
                        d = dvals[di]
                        if t * d > counts[k] or d > smax or not _rest_ok(rest, total_devices - t * d, ub):
                            continue
                        res = 4.0 * (d - 1) / d / N / bw_res[k, t * d] if d > 1 else 0.0
                        if (comm + emin) / d + res * P > ub:
                            continue
                        if dlo == 0:
                            dlo = d
                        dhi = d
                    if dlo == 0:
                        continue
                    if sched == 1:
                        y = N // dhi
                        ytop = N // dlo
                    else:
                        y = 1
                        ytop = (smax + dlo - 1) // dlo
                    # the fastest variants, when they fit over the whole range, are the one step (as
                    # _shared_steps would find it); else the step function, through the memo
                    tot_m = 0.0
                    tot_c = 0.0
                    for i in range(ns):
                        best = ptr[i]
                        mb = _mem(v_a[vid[best]], v_b[vid[best]], v_w[vid[best]], y, sched)
                        for j in range(ptr[i] + 1, ptr[i + 1]):
                            mj = _mem(v_a[vid[j]], v_b[vid[j]], v_w[vid[j]], y, sched)
                            if etime[j] < etime[best] or (etime[j] == etime[best] and mj < mb):
                                best = j
                                mb = mj
                        chosen[i] = best
                        tot_m += mb
                        tot_c += etime[best]
                    nsh = 0
                    if y <= ytop and tot_m <= caps[k]:
                        E, A, B, Wt = _chosen_sums(ns, ptr, chosen, vid, etime, v_a, v_b, v_w)
                        yhi = _last_fit(y, ytop, A, B, Wt, caps[k], sched)
                        if yhi >= ytop:
                            sh_yhi[0] = yhi
                            sh_e[0] = tot_c
                            nsh = 1
                    if nsh == 0:
                        nsh = _memo_steps(memo, ns, ptr, vid, etime, v_a, v_b, v_w, caps[k], sched, y, ytop,
                                          mem, chosen, sh_yhi, sh_e, ws)
                cost = b_cost[:total]
                for di in range(dvals.shape[0]):
                    d = dvals[di]
                    if t * d > counts[k] or d > smax or not _rest_ok(rest, total_devices - t * d, ub):
                        continue
                    bw = bw_res[k, t * d]
                    res = 4.0 * (d - 1) / d / N / bw if d > 1 else 0.0
                    if sched == 1:
                        y = N // d
                        ymax = y
                    else:
                        y = 1
                        ymax = (smax + d - 1) // d
                    first = scnt
                    if shared:
                        for j in range(nsh):
                            lo_y = 1 if j == 0 else sh_yhi[j - 1] + 1
                            if sched == 1 and lo_y > y:
                                break
                            if lo_y > ymax:
                                break
                            if sh_yhi[j] < y:
                                continue  # gpipe: only y = N / d matters
                            val = (comm + sh_e[j]) / d + res * P
                            if val > ub:
                                break
                            if scnt >= o_yhi.shape[0]:
                                return pq, cnt0, scnt0
                            o_yhi[scnt] = min(sh_yhi[j], ymax)
                            o_cost[scnt] = val
                            scnt += 1
                    else:
                        lb = comm / d
                        for p in range(total):
                            cost[p] = etime[p] / d + res * v_params[vid[p]]
                        for q in range(ns):
                            bc = _INF
                            for p in range(ptr[q], ptr[q + 1]):
                                if cost[p] < bc:
                                    bc = cost[p]
                            lb += bc
                        if lb > ub:
                            continue
                        while y <= ymax:
                            for p in range(total):
                                mem[p] = _mem(v_a[vid[p]], v_b[vid[p]], v_w[vid[p]], y, sched)
                            val = _knapsack_ws(ptr, cost, mem, caps[k], chosen, ws)
                            if not val < _INF:
                                break
                            val += comm / d
                            if val > ub:
                                break
                            E, A, B, Wt = _chosen_sums(ns, ptr, chosen, vid, etime, v_a, v_b, v_w)
                            yhi = _last_fit(y, ymax, A, B, Wt, caps[k], sched)
                            if scnt >= o_yhi.shape[0]:
                                return pq, cnt0, scnt0
                            o_yhi[scnt] = yhi
                            o_cost[scnt] = val
                            scnt += 1
                            y = yhi + 1
                    if scnt > first:
                        if cnt >= o_k.shape[0]:
                            return pq, cnt0, scnt0
                        o_k[cnt] = k
                        o_t[cnt] = t
                        o_d[cnt] = d
                        o_step_ptr[cnt + 1] = scnt
                        cnt += 1
        for c in range(cnt0, cnt):
            o_pair[c] = pq
    return pair_i.shape[0], cnt, scnt


@njit(cache=True, inline="always")
def _chosen_sums(ns, ptr, chosen, vid, etime, v_a, v_b, v_w):
    E = 0.0
    A = 0.0
    B = 0.0
    Wt = 0.0
    for q in range(ns):
        p = chosen[q]
        v = vid[p]
        E += etime[p]
        A += v_a[v]
        B += v_b[v]
        Wt += v_w[v]
    return E, A, B, Wt


@njit(cache=True, inline="always")
def _last_fit(y, ymax, A, B, Wt, cap, sched):
    """Largest y' in [y, ymax] at which memory A*y' + B (+ weight versions) still fits (it grows with y)."""
    lo = y
    hi = ymax
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _mem(A, B, Wt, mid, sched) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --------------------------------------------------------------------------- memo of step functions
# Stages with the same knapsack (identical layers: the same variants, in the same order, with the same
# boundary syncs) have the same step function over y; it is computed once. ``memo`` is a tuple of arrays:
# an open-addressing table of entry numbers, per entry its hash, instance (a float record in ``inst``),
# first y, last y covered and steps (in ``syhi``/``se``); counters (entries, instance floats and steps
# used, a full flag: Python grows the arrays between chunks, hits, misses, and whether the memo is on);
# the id of each variant's memory terms, and a scratch record.
_M_E, _M_I, _M_S, _M_FULL, _M_HIT, _M_MISS, _M_ON = 0, 1, 2, 3, 4, 5, 6  # entries of memo[_M_COUNTS]
_M_COUNTS = 10
_MEMO_ENTRIES = 1 << 14  # the most entries a memo starts with (it grows)


def _new_memo(entries: int, floats: int, steps: int, on: bool, cid: np.ndarray, scratch: int) -> tuple:
    size = 1 << max(4, int(2 * entries - 1).bit_length())
    memo = (np.full(size, -1, np.int64), np.empty(entries, np.int64), np.empty(entries + 1, np.int64),
            np.empty(floats), np.empty(entries, np.int64), np.empty(entries, np.int64),
            np.empty(entries, np.int64), np.empty(entries, np.int64), np.empty(steps, np.int64),
            np.empty(steps), np.zeros(7, np.int64), cid, np.empty(scratch))
    memo[_M_COUNTS][_M_ON] = on
    return memo


def _grow_memo(memo: tuple, steps: int) -> tuple:
    """The memo with at least half of each array free, and room for one more record and ``steps`` steps
    (the most one stage can have)."""
    table, hsh, iptr, inst, y0, ycov, s0, s1, syhi, se, n, cid, rec = memo
    ent = hsh.size
    while n[_M_E] * 2 >= ent:
        ent *= 2
    if ent != hsh.size:  # the table is rebuilt at the new size
        table = _new_memo(ent, 0, 0, True, cid, 0)[0]
        _rehash(table, hsh, n[_M_E])
        more = ent - hsh.size
        hsh, iptr, y0, ycov, s0, s1 = (_doubled(a, n[_M_E] + (a is iptr), more)
                                       for a in (hsh, iptr, y0, ycov, s0, s1))
    size = inst.size
    while n[_M_I] * 2 >= size or size - n[_M_I] < rec.size:
        size *= 2
    inst = _doubled(inst, n[_M_I], size - inst.size)
    size = syhi.size
    while n[_M_S] * 2 >= size or size - n[_M_S] < steps:
        size *= 2
    syhi, se = _doubled(syhi, n[_M_S], size - syhi.size), _doubled(se, n[_M_S], size - se.size)
    n[_M_FULL] = 0
    return table, hsh, iptr, inst, y0, ycov, s0, s1, syhi, se, n, cid, rec


@njit(cache=True)
def _rehash(table, hsh, count):
    mask = table.shape[0] - 1
    for e in range(count):
        slot = hsh[e] & mask
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = e


@njit(cache=True)
def _shared_steps(ns, ptr, vid, etime, v_a, v_b, v_w, cap, sched, y, ytop, mem, chosen, sh_yhi, sh_e, ws):
    """The step function over y in [y, ytop] of the knapsack with times ``etime`` (the same for every d):
    (number of steps, whether it ended because nothing fits any more)."""
    total = ptr[ns]
    nsh = 0
    while y <= ytop:
        for p in range(total):
            mem[p] = _mem(v_a[vid[p]], v_b[vid[p]], v_w[vid[p]], y, sched)
        val = _knapsack_ws(ptr, etime, mem, cap, chosen, ws)
        if not val < _INF:
            return nsh, True
        E, A, B, Wt = _chosen_sums(ns, ptr, chosen, vid, etime, v_a, v_b, v_w)
        yhi = _last_fit(y, ytop, A, B, Wt, cap, sched)
        sh_yhi[nsh] = yhi
        sh_e[nsh] = val
        nsh += 1
        y = yhi + 1
    return nsh, False


@njit(cache=True)
def _memo_steps(memo, ns, ptr, vid, etime, v_a, v_b, v_w, cap, sched, y, ytop, mem, chosen, sh_yhi, sh_e,
                ws):
    """:func:`_shared_steps` through the memo: a stage whose knapsack (times, memory terms, class sizes,
    capacity) equals one solved before from the same first y, as far as ``ytop`` or to its end, reuses its
    steps. The sequence from a given y is deterministic, so the steps are the ones it would compute (the
    last may reach past ``ytop``; the caller clips at each d's largest y)."""
    table, hsh, iptr, inst, m_y0, m_ycov, m_s0, m_s1, syhi, se, cnt, cid, rec = memo
    if not cnt[_M_ON]:
        return _shared_steps(ns, ptr, vid, etime, v_a, v_b, v_w, cap, sched, y, ytop, mem, chosen, sh_yhi,
                             sh_e, ws)[0]
    total = ptr[ns]
    # the instance as a record: capacity, class sizes, and per choice its time and the id of its memory
    # terms (variants with equal A, B and W share an id)
    size = 2 + ns + 2 * total
    rec[0] = cap
    rec[1] = ns
    w = 2
    for q in range(ns):
        rec[w] = ptr[q + 1] - ptr[q]
        w += 1
    for p in range(total):
        rec[w] = etime[p]
        rec[w + 1] = cid[vid[p]]
        w += 2
    bits = rec.view(np.uint64)
    h = np.uint64(14695981039346656037)
    for i in range(size):
        h = (h ^ bits[i]) * np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
    hv = np.int64(h >> np.uint64(1))
    mask = table.shape[0] - 1
    slot = hv & mask
    found = -1
    while table[slot] >= 0:
        e = table[slot]
        if hsh[e] == hv and iptr[e + 1] - iptr[e] == size:
            same = True
            b = iptr[e]
            for i in range(size):
                if inst[b + i] != rec[i]:
                    same = False
                    break
            if same:
                found = e
                break
        slot = (slot + 1) & mask
    if found >= 0 and m_y0[found] == y and ytop <= m_ycov[found]:
        cnt[_M_HIT] += 1
        nsh = m_s1[found] - m_s0[found]
        for j in range(nsh):
            sh_yhi[j] = syhi[m_s0[found] + j]
            sh_e[j] = se[m_s0[found] + j]
        return nsh
    cnt[_M_MISS] += 1
    nsh, ended = _shared_steps(ns, ptr, vid, etime, v_a, v_b, v_w, cap, sched, y, ytop, mem, chosen,
                               sh_yhi, sh_e, ws)
    e = found
    if e < 0:
        e = cnt[_M_E]
        if 2 * (e + 1) > table.shape[0] or e >= hsh.shape[0] or cnt[_M_I] + size > inst.shape[0]:
            cnt[_M_FULL] = 1
            return nsh
    if cnt[_M_S] + nsh > syhi.shape[0]:
        cnt[_M_FULL] = 1
        return nsh
    if found < 0:
        b = cnt[_M_I]
        inst[b:b + size] = rec[:size]
        iptr[e] = b
        iptr[e + 1] = b + size
        cnt[_M_I] = b + size
        hsh[e] = hv
        table[slot] = e
        cnt[_M_E] = e + 1
    m_y0[e] = y
    m_ycov[e] = _BIG if ended else ytop
    b = cnt[_M_S]
    syhi[b:b + nsh] = sh_yhi[:nsh]
    se[b:b + nsh] = sh_e[:nsh]
    m_s0[e] = b
    m_s1[e] = b + nsh
    cnt[_M_S] = b + nsh
    return nsh



# --------------------------------------------------------------------------- feasibility DP
@njit(cache=True, inline="always")
def _reach(q, tau, step_ptr, yhi, cost, c_d, sched, smax):
    """Largest s (sum of d from this stage on) at which combo q's stage costs at most tau (0: none)."""
    Y = 0
    for p in range(step_ptr[q], step_ptr[q + 1]):
        if cost[p] <= tau:
            Y = yhi[p]
        else:
            break
    if Y == 0:
        return 0
    if sched == 1:
        return smax
    return min(smax, c_d[q] * Y)


@njit(cache=True)
def _feasible(tau, NI, smax, C1, last, strides, digits, counts, c_pair_i, c_pair_j, c_k, c_t, c_d,
              step_ptr, yhi, cost, sched, g):
    """Fill g[J, s, c] (fewest devices of the last kind) for threshold ``tau``. Returns True when the
    whole graph can be placed."""
    g[:, :, :] = _BIG
    g[NI - 1, 0, 0] = 0
    W = smax + 1
    gf = g.reshape(NI * W * C1)
    # the range of s at which each ideal's suffix is reachable at all (empty: lo > hi)
    s_lo = np.full(NI, smax + 1, np.int64)
    s_hi = np.full(NI, -1, np.int64)
    s_lo[NI - 1] = 0
    s_hi[NI - 1] = 0
    for q in range(c_k.shape[0]):  # combos sorted by J descending, so g[I] is final when used
        I = c_pair_i[q]
        if s_lo[I] > s_hi[I]:
            continue
        d = c_d[q]
        first = max(d, s_lo[I] + d)
        if first > smax:
            continue
        # _reach, written out: a call with array arguments costs reference counting per combo
        Y = 0
        for p in range(step_ptr[q], step_ptr[q + 1]):
            if cost[p] <= tau:
                Y = yhi[p]
            else:
                break
        if Y == 0:
            continue
        stop = smax if sched == 1 else min(smax, d * Y)
        stop = min(stop, s_hi[I] + d)
        if stop < first:
            continue
        J = c_pair_j[q]
        k = c_k[q]
        td = c_t[q] * d
        # flat offsets of g[I, s - d] and g[J, s] (row views would cost reference counting per row)
        if k == last:
            for s in range(first, stop + 1):
                src = (I * W + s - d) * C1
                dst = (J * W + s) * C1
                for c in range(C1):
                    x = gf[src + c] + td
                    if x < gf[dst + c]:
                        gf[dst + c] = x
        else:
            sh = td * strides[k]
            for s in range(first, stop + 1):
                src = (I * W + s - d) * C1 - sh
                dst = (J * W + s) * C1
                for c in range(sh, C1):
                    if digits[c, k] < td:
                        continue
                    x = gf[src + c]
                    if x < gf[dst + c]:
                        gf[dst + c] = x
        if first < s_lo[J]:
            s_lo[J] = first
        if stop > s_hi[J]:
            s_hi[J] = stop
    for s in range(1, smax + 1):
        for c in range(C1):
            if g[0, s, c] <= counts[last]:
                return True
    return False


@njit(cache=True)
def _feasible1(tau, NI, smax, count, c_pair_i, c_pair_j, c_t, c_d, step_ptr, yhi, cost, sched, g):
    """:func:`_feasible` for one device kind: ``g[J, s]`` is C-contiguous, so the inner loop is a plain
    shifted minimum the compiler vectorises."""
    g[:, :] = _BIG
    g[NI - 1, 0] = 0
    W = smax + 1
    gf = g.reshape(NI * W)
    s_lo = np.full(NI, smax + 1, np.int64)
    s_hi = np.full(NI, -1, np.int64)
    s_lo[NI - 1] = 0
    s_hi[NI - 1] = 0
    for q in range(c_pair_i.shape[0]):
        I = c_pair_i[q]
        if s_lo[I] > s_hi[I]:
            continue
        d = c_d[q]
        first = max(d, s_lo[I] + d)
        if first > smax:
            continue
        # _reach, written out: a call with array arguments costs reference counting per combo
        Y = 0
        for p in range(step_ptr[q], step_ptr[q + 1]):
            if cost[p] <= tau:
                Y = yhi[p]
            else:
                break
        if Y == 0:
            continue
        stop = smax if sched == 1 else min(smax, d * Y)
        stop = min(stop, s_hi[I] + d)
        if stop < first:
            continue
        J = c_pair_j[q]
        td = c_t[q] * d
        if stop - first < 32:  # flat offsets, not row views: a view per combo costs reference counting
            src = I * W - d
            dst = J * W
            for s in range(first, stop + 1):
                gf[dst + s] = min(gf[dst + s], gf[src + s] + td)
        else:  # long ranges: slices indexed from 0, a loop the compiler vectorises
            a = g[I, first - d:stop + 1 - d]
            b = g[J, first:stop + 1]
            for s in range(stop + 1 - first):
                x = a[s] + td
                if x < b[s]:
                    b[s] = x
        if first < s_lo[J]:
            s_lo[J] = first
        if stop > s_hi[J]:
            s_hi[J] = stop
    for s in range(1, smax + 1):
        if g[0, s] <= count:
            return True
    return False


@njit(cache=True)
def _trace(tau, NI, smax, C1, last, strides, counts, c_pair_i, c_pair_j, c_k, c_t, c_d, step_ptr, yhi, cost,
           sched, g, j_lo, j_hi):
    """The combos of a plan found by the last :func:`_feasible` run, in pipeline order, with the s each
    stage starts at. ``j_lo[J]:j_hi[J]`` are the combos whose stage starts at ideal J."""
    out = np.empty((NI, 2), np.int64)
    s0 = -1
    c0 = -1
    for s in range(1, smax + 1):
        for c in range(C1):
            if s0 < 0 and g[0, s, c] <= counts[last]:
                s0 = s
                c0 = c
    J = 0
    s = s0
    c = c0
    m = 0
    while J != NI - 1:
        found = -1
        for q in range(j_lo[J], j_hi[J]):
            d = c_d[q]
            if d > s or _reach(q, tau, step_ptr, yhi, cost, c_d, sched, smax) < s:
                continue
            k = c_k[q]
            td = c_t[q] * d
            I = c_pair_i[q]
            if k == last:
                if g[I, s - d, c] + td == g[J, s, c]:
                    found = q
                    break
            else:
                digit = (c // strides[k]) % (counts[k] + 1)
                if digit >= td and g[I, s - d, c - td * strides[k]] == g[J, s, c]:
                    found = q
                    break
        if found < 0:
            return out[:0]
        out[m, 0] = found
        out[m, 1] = s
        m += 1
        if c_k[found] != last:
            c -= c_t[found] * c_d[found] * strides[c_k[found]]
        s -= c_d[found]
        J = c_pair_i[found]
    return out[:m]


# --------------------------------------------------------------------------- driver
def _arrays(problem: ParallelProblem):
    g = problem.graph
    K = len(problem.kinds)
    tvals = sorted({v.t for v in g.variants})
    T = len(tvals)
    n = g.num_nodes
    opt_ptr = np.zeros(n * K * T + 1, np.int64)
    same_params = np.ones(n * K * T, np.bool_)
    opt_var: list[int] = []
    for u in range(n):
        for k in range(K):
            for ti, t in enumerate(tvals):
                vids = g.options.get((u, k, t), ())
                opt_var.extend(vids)
                opt_ptr[(u * K + k) * T + ti + 1] = len(opt_var)
                same_params[(u * K + k) * T + ti] = len({g.variants[v].params for v in vids}) <= 1
    vs = g.variants
    sy_ptr = [0]
    sy_tensor, sy_time, sy_dir = [], [], []
    for v in vs:
        for e, x in v.sync_in.items():
            sy_tensor.append(e)
            sy_time.append(x)
            sy_dir.append(0)
        for e, x in v.sync_out.items():
            sy_tensor.append(e)
            sy_time.append(x)
            sy_dir.append(1)
        sy_ptr.append(len(sy_tensor))
    cid: dict[tuple, float] = {}
    total = sum(k.count for k in problem.kinds)
    bw_res = np.ones((K, total + 1))
    for k, kind in enumerate(problem.kinds):
        for m in range(1, total + 1):
            bw_res[k, m] = resync_bandwidth(kind, m)
    return dict(
        tvals=np.array(tvals, np.int64), opt_ptr=opt_ptr, same_params=same_params,
        opt_var=np.array(opt_var, np.int64),
        v_time=np.array([v.time for v in vs]), v_params=np.array([v.params for v in vs]),
        v_a=np.array([v.a for v in vs]), v_b=np.array([v.b for v in vs]), v_w=np.array([v.w for v in vs]),
        v_cid=np.array([cid.setdefault((v.a, v.b, v.w), float(len(cid))) for v in vs]),
        sy_ptr=np.array(sy_ptr, np.int64), sy_tensor=np.array(sy_tensor, np.int64),
        sy_time=np.array(sy_time, float), sy_dir=np.array(sy_dir, np.int64), bw_res=bw_res)


def _node_minmem(problem: ParallelProblem, tvals, dvals):
    """Per (kind, t) and node: smallest memory at y = 1 and fastest time (inf: unsupported); whether the
    (kind, t) is usable, its kind's capacity and the largest d it allows."""
    g = problem.graph
    K, T, n = len(problem.kinds), len(tvals), g.num_nodes
    mm = np.full((K * T, n), np.inf)
    mt = np.full((K * T, n), np.inf)
    for (u, k, t), vids in g.options.items():
        ti = int(np.searchsorted(tvals, t))
        mm[k * T + ti, u] = min(g.variants[v].a + g.variants[v].b for v in vids)
        mt[k * T + ti, u] = min(g.variants[v].time for v in vids)
    dmax = np.array([max([int(d) for d in dvals if d * tvals[ti] <= problem.kinds[k].count], default=0)
                     for k in range(K) for ti in range(T)], np.int64)
    ok = dmax > 0
    caps = np.array([usable_memory(problem.kinds[k].capacity) for k in range(K) for _ in range(T)])
    return mm, ok, caps, mt, np.maximum(dmax, 1).astype(float)


def _no_plan_reason(problem: ParallelProblem, mm: np.ndarray, kt_ok: np.ndarray, caps_kt: np.ndarray, tvals,
                    no_stage: bool, upper_bound: float) -> str:
    """Why the stage DP found no plan (``mm``: per (kind, t) and node, the smallest memory per device at one
    micro-batch in flight, ``inf`` where no variant runs; ``no_stage``: not one stage option exists;
    ``upper_bound``: the bound on every stage, said where finite): the nodes no device kind present runs,
    else the nodes that fit no device even alone, else :func:`_memory_shortfall`."""
    g = problem.graph
    usable = np.where(kt_ok[:, None], mm, np.inf)
    runs = np.isfinite(usable).any(axis=0) if mm.shape[0] else np.zeros(g.num_nodes, bool)
    if not runs.all():  # no memory makes these runnable: memory is not why
        return _unrunnable(problem, mm, np.flatnonzero(~runs), len(tvals))
    limited = "memory and counts" if np.isfinite(caps_kt[kt_ok]).any() else "counts"
    why = "no stage fits a device's memory" if no_stage else f"no plan fits the devices' {limited}"
    # the nodes that fit nowhere even alone, at their smallest variant and one micro-batch
    bad = np.flatnonzero(~(np.isfinite(usable) & (usable <= caps_kt[:, None])).any(axis=0))
    if bad.size:
        smallest = usable.min(axis=0)
        shown = ", ".join(f"{g.ids[u]} ({smallest[u]:.4g} bytes)" for u in bad[:5])
        largest = caps_kt[np.isfinite(usable[:, bad]).any(axis=1)].max(initial=0)  # of the kinds running them
        why += (f": node(s) {shown}{' ...' if bad.size > 5 else ''} fit no device even alone "
                f"(largest memory {largest:.4g} bytes)")
    elif mm.shape[0] and g.num_nodes:  # (no node, or no variant at all: nothing to say of memory)
        why += f": {_memory_shortfall(problem, mm, kt_ok, caps_kt, tvals)}"
    return why + (f" with every stage at most {upper_bound:g}" if math.isfinite(upper_bound) else "")


def _unrunnable(problem: ParallelProblem, mm: np.ndarray, bad: np.ndarray, T: int) -> str:
    """The nodes ``bad`` that no kind present runs (no variant, or only at a tensor-parallel degree above
    the kind's count), grouped by why, as the one-device-per-stage model names them."""
    g = problem.graph
    groups: dict[str, list[str]] = {}
    for u in bad:
        why = []
        for k, kind in enumerate(problem.kinds):
            rows = mm[k * T:(k + 1) * T, u]
            why.append(f"not supported on {kind.name}" if not np.isfinite(rows).any() else
                       f"only tensor-parallel on {kind.name}, wider than its {kind.count} device(s)")
        groups.setdefault("; ".join(why) or "no device", []).append(str(g.ids[u]))
    parts = []
    for why, ids in groups.items():
        more = f" (and {len(ids) - 5} more)" if len(ids) > 5 else ""
        parts.append(f"node(s) {', '.join(ids[:5])}{more}: {why}")
    return "no device can hold " + " | ".join(parts)


def _memory_shortfall(problem: ParallelProblem, mm: np.ndarray, kt_ok: np.ndarray, caps_kt: np.ndarray,
                      tvals) -> str:
    """Why no plan fits when every node fits some device alone (``mm``: per (kind, t) and node, the
    smallest memory per device at one micro-batch in flight): the least memory all nodes need together
    against what all devices hold, else (no usable kind's memory limited) the kinds and counts, else the
    node whose smallest memory is the largest."""
    g = problem.graph
    usable = np.where(kt_ok[:, None], mm, np.inf)
    t_of = np.tile(np.asarray(tvals, float), len(problem.kinds))[:, None]
    need = float((usable * t_of).min(axis=0).sum())  # a t-way stage holds the node on t devices
    have = float(sum(k.count * k.capacity for k in problem.kinds))
    if need > have * (1 + 1e-12):
        return (f"every node at its smallest variant with one micro-batch in flight needs {need:.4g} bytes "
                f"in all, the {sum(k.count for k in problem.kinds)} device(s) hold {have:.4g} bytes")
    if not np.isfinite(caps_kt[kt_ok]).any():  # memory binds nothing: the kinds and counts are why
        return (f"every node runs on some device and no device's memory is limited, but no split into stages "
                f"fits: a stage runs on one device kind, and the {sum(k.count for k in problem.kinds)} "
                f"device(s) bound the stages and replicas")
    smallest = usable.min(axis=0)
    u = int(np.argmax(smallest))
    kt = int(np.argmin(usable[:, u]))
    kind = problem.kinds[kt // len(tvals)]
    of = (f"of one {kind.name}'s {kind.capacity:.4g} bytes" if math.isfinite(kind.capacity)
          else f"on a {kind.name}, whose memory is not limited")
    return (f"every node fits a device alone (the largest, {g.ids[u]}, needs {smallest[u]:.4g} bytes {of}), "
            f"but no split into stages fits: under {problem.schedule} a stage holds several of the "
            f"{problem.microbatches} micro-batches in flight, and the devices bound the stages and replicas")


def solve_problem(problem: ParallelProblem, *, time_limit: float | None = None, max_ideals: int = 3_000_000,
                  max_steps: int = 50_000_000, upper_bound: float = math.inf,
                  kernel: str = "auto", threads: int | None = None, progress=None) -> Solution:
    """The optimal plan of ``problem`` (proven), or an infeasible / limit status.

    ``kernel``: ``"auto"`` runs the one-device-per-stage pipeline kernel (:mod:`solvers.dp`, through
    :func:`solvers.dp_pipeline.solve_pipeline`) when the problem is exactly that model
    (:func:`graphs.parallel.pipeline_misfit` is ``''``), else the stage kernel; ``"stage"`` always runs
    the stage kernel; ``"pipeline"`` the pipeline kernel (an :class:`~graphs.errors.InputError` when the
    problem is not that model). ``stats["kernel"]`` says which ran. ``time_limit``, ``max_ideals`` and
    ``upper_bound`` hold for both; ``max_steps`` (stage options) only for the stage kernel, ``threads``
    (``None``: its default) only for the pipeline kernel. ``progress``: called with a fraction in [0, 1],
    non-decreasing, between kernel calls (the pipeline kernel's: its ideals done; the stage kernel's:
    :class:`_Meter`), and with 1 when the search ends (``optimal`` or ``infeasible``).

    The stage kernel: a first pass over the prefixes of one topological order (a chain of ideals, cheap)
    gives a plan whose value bounds the optimum; the full pass then skips every stage option above it."""
    if kernel not in ("auto", "stage", "pipeline"):
        raise InputError(f"unknown dp kernel {kernel!r}; choose one of: auto, stage, pipeline")
    meter = None if progress is None else _Meter(progress, time_limit)
    if kernel == "pipeline" or (kernel == "auto" and is_pipeline_model(problem)):
        from .dp_pipeline import solve_pipeline

        sol = solve_pipeline(problem, time_limit=time_limit, max_ideals=max_ideals, upper_bound=upper_bound,
                             threads=threads, progress=None if meter is None else meter.tell)
    else:
        sol = _solve_stage_kernel(problem, time_limit, max_ideals, max_steps, upper_bound, meter)
        sol.stats["kernel"] = "stage"
    if meter is not None and sol.status in (Status.OPTIMAL, Status.INFEASIBLE):
        meter.tell(1.0)
    return sol


#: the restricted passes' part of the stage kernel's bar: each of the (at most) three, in order, ends at
#: one third of it (they take a few percent of the solve: 0.7 s of 15 s on a 235-operator training graph)
_RESTRICTED_SHARE = 0.05
#: the phases of a pass and their default weights: the candidate stages' walk, their costs, the search (a
#: 235-operator training graph on 2 kinds spends 0.2%, 90% and 8% of its full pass in them, GNMT 12%, 80%
#: and 1%; on 3 kinds the search takes 68%)
_PHASES = ("walk", "costs", "search")
_WEIGHTS = (0.1, 0.8, 0.1)
_TICK_S = 0.05  # the least time between two reports (a fraction of 1 is always reported)


class _Meter(ProgressTeller):
    """The stage kernel's progress, reported to ``progress`` (non-decreasing, at most every
    :data:`_TICK_S`, between kernel calls, never inside one).

    The fraction counts the work of the full pass over the lattice, in each phase's own units: the ideals
    whose candidate stages have been walked (``walk``), the candidate stages whose costs are computed
    (``costs``) and the threshold search's halvings of its interval of candidate values (``search``: each
    feasibility run halves it at least; the first run, at the largest value, counts as one). The phases
    are weighted by their time share: ``walk`` by :data:`_WEIGHTS`, ``costs`` and ``search`` split the
    rest as they did in the last restricted pass when it took at least 20 ms (the same kernels on a
    smaller lattice: the share of the search grows with the device kinds, not with the lattice), else by
    :data:`_WEIGHTS`. The restricted passes take the first :data:`_RESTRICTED_SHARE`. Under a time limit
    the fraction is at least the part of the limit spent: the search ends by then."""

    def __init__(self, progress, time_limit: float | None = None) -> None:
        super().__init__(progress, time_limit, _TICK_S)
        self.lo, self.hi = 0.0, 1.0
        self.weights = _WEIGHTS
        self.phase_s = {x: 0.0 for x in _PHASES}

    def restricted(self, index: int) -> None:
        """The ``index``-th restricted pass (0: 16 prefixes, 1: 40, 2: the chain) starts."""
        self.tell(_RESTRICTED_SHARE * index / 3)
        self.lo, self.hi = _RESTRICTED_SHARE * index / 3, _RESTRICTED_SHARE * (index + 1) / 3

    def full(self) -> None:
        """The full pass starts: its phases weighted as the class doc says."""
        self.tell(_RESTRICTED_SHARE)
        self.lo, self.hi = _RESTRICTED_SHARE, 1.0
        costs, search = self.phase_s["costs"], self.phase_s["search"]
        if costs + search >= 0.02:
            rest = 1.0 - _WEIGHTS[0]
            self.weights = (_WEIGHTS[0], rest * costs / (costs + search), rest * search / (costs + search))

    def timed(self, phase_s: dict) -> None:
        """A pass ended, with these seconds spent in each phase."""
        self.phase_s = dict(phase_s)

    def at(self, phase: str, done: float) -> None:
        """The pass has done the fraction ``done`` of ``phase``."""
        i = _PHASES.index(phase)
        f = sum(self.weights[:i]) + self.weights[i] * min(1.0, max(0.0, done))
        self.tell(self.lo + (self.hi - self.lo) * f)


def _solve_stage_kernel(problem: ParallelProblem, time_limit: float | None, max_ideals: int, max_steps: int,
                        upper_bound: float, meter: _Meter | None = None) -> Solution:
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    g = problem.graph
    upper_bound = min(upper_bound, _one_stage_bound(problem))
    order = topological_order(g.num_nodes, g.src, g.dst)
    best: Solution | None = None  # the best plan of a restricted pass (a bound, not proven)
    data = _node_data(problem)  # shared by every pass

    def restricted(lattice, index: int) -> None:
        # a bound only: the plan is built (variants re-chosen, evaluated) if a limit makes it the answer
        nonlocal best, upper_bound
        if meter is not None:
            meter.restricted(index)
        r = _run(problem, lattice, upper_bound, deadline, max_steps, t0, data, build=False, meter=meter)
        if math.isfinite(r.objective) and (best is None or r.objective < best.objective):
            best = r
            upper_bound = min(upper_bound, r.objective * (1 + 1e-9))

    def fallback(why: str) -> Solution:
        if best is None:
            return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                                  f"{why}; no plan found", {})
        stats = dict(best.stats or {})
        plan, ev = (best.plan, best.evaluation) if best.plan is not None else stats["build"]()
        stats.pop("build", None)
        # the restricted pass's optimum bounds the full problem from above, not from below
        stats["chain_value"] = stats.pop("lower_bound", best.objective)
        if ev.problems:  # the evaluator is the judge, as in _run
            raise AssertionError(f"the stage DP produced an invalid plan: {ev.problems}")
        return stage_solution("dp", plan, ev, ev.objective, Status.FEASIBLE, time.perf_counter() - t0,
                              f"{why}; the best plan over one topological order is returned (not proven "
                              "optimal)", stats, bound=min(ev.objective, _work_lower_bound(problem, data)))

    try:  # a Ctrl-C in a later pass: the restricted passes' plan, said so (Solution.interrupted)
        if g.num_nodes > 24:  # a coarse chain first: few stages to choose from, so cheap, and a bound
            restricted(_sub_chain(g.num_nodes, order, 16), 0)
            if g.num_nodes > 64:
                restricted(_sub_chain(g.num_nodes, order, 40), 1)
        try:  # nearly a chain already (layer graphs): the chain pass would cost as much as the full one
            lattice = enumerate_ideals(g.num_nodes, g.src, g.dst,
                                       max_ideals=min(max_ideals, 2 * g.num_nodes + 2), deadline=deadline)
        except ProblemTooLargeError:
            restricted(chain_ideals(g.num_nodes, order), 2)
            try:
                lattice = enumerate_ideals(g.num_nodes, g.src, g.dst, max_ideals=max_ideals,
                                           deadline=deadline)
            except ProblemTooLargeError as e:
                return fallback(str(e))
        if meter is not None:
            meter.full()
        full = _run(problem, lattice, upper_bound, deadline, max_steps, t0, data, meter=meter)
    except KeyboardInterrupt:
        if best is None:
            raise
        return fallback(INTERRUPTED)
    if full.plan is None and best is not None:
        # only a limit can get here: the restricted passes' plans are plans of the full lattice
        return fallback(full.message)
    if full.stats is not None and best is not None:
        full.stats["chain_bound"] = best.objective
    return full


def _sub_chain(n: int, order: np.ndarray, m: int) -> IdealLattice:
    """About ``m`` evenly spaced prefixes of a topological order (and the empty and full sets), as a
    chain lattice whose ideals differ by several nodes (``added`` is -1)."""
    full = chain_ideals(n, order)
    keep = np.unique(np.linspace(0, n, min(m, n) + 1).round().astype(np.int64))
    N = keep.size
    return IdealLattice(num_items=n, bits=full.bits[keep].copy(), parent=np.arange(-1, N - 1, dtype=np.int64),
                        added=np.concatenate([[-1], np.full(N - 1, -1, np.int64)]),
                        down_ptr=np.concatenate([[0], np.arange(N, dtype=np.int64)]),
                        down_idx=np.arange(0, N - 1, dtype=np.int64))


def work_lower_bound(problem: ParallelProblem) -> float:
    """A lower bound on every plan's time per sample, proven whatever a solve did: the nodes' least
    device-seconds over all devices (:func:`_work_lower_bound`)."""
    return _work_lower_bound(problem, _node_data(problem))


def _work_lower_bound(problem: ParallelProblem, data: dict) -> float:
    """A lower bound on every plan's time per sample: a stage of ``t * d`` devices takes at least the
    sum of its variants' ``time / d``, so the largest stage is at least the nodes' least device-seconds
    (``t`` times the fastest time) over all devices."""
    total = sum(k.count for k in problem.kinds)
    return float(data["work"].sum()) / max(1, total)


def _one_stage_bound(problem: ParallelProblem) -> float:
    """The best plan with the whole graph in one stage (every kind, t, and the largest d): a cheap upper
    bound that prunes the chain pass (often the optimum when replication pays)."""
    g = problem.graph
    nodes = list(range(g.num_nodes))
    best = math.inf
    for k, kind in enumerate(problem.kinds):
        for t in g.degrees(k):
            if any((u, k, t) not in g.options for u in nodes):
                continue
            ds = [d for d in problem.replica_degrees() if t * d <= kind.count]
            if not ds:
                continue
            d = ds[-1]
            from graphs.parallel import in_flight

            y = in_flight(problem.schedule, d, d, problem.microbatches)
            vs = _best_variants(problem, nodes, k, t, d, y)
            if len(vs) != len(nodes):
                continue
            ev = evaluate_plan(problem, [Stage(tuple(nodes), k, d, t, tuple(vs))])
            if ev.valid:
                best = min(best, ev.objective * (1 + 1e-9))
    return best


def _node_data(problem: ParallelProblem) -> dict:
    """What every pass over a lattice needs of the problem: the flat arrays of the variants, per (kind, t)
    and node the smallest memory and fastest time, and each node's least work."""
    K = len(problem.kinds)
    dvals = np.array(problem.replica_degrees(), np.int64)
    arr = _arrays(problem)
    mm, kt_ok, caps_kt, mt, dmax_kt = _node_minmem(problem, arr["tvals"], dvals)
    # work of a node: its fewest device-seconds per sample over kinds and t (t * fastest time)
    work = np.where(np.isfinite(mt), mt * np.repeat(arr["tvals"][None, :], K, axis=0).reshape(-1)[:, None],
                    np.inf).min(axis=0, initial=np.inf)
    work = np.where(np.isfinite(work), work, 0.0)
    # repeated nodes (the same variants and syncs: identical layers) make repeated stage knapsacks, which
    # the memo of step functions then solves once; without them it would only cost its hashing
    g = problem.graph
    content: dict[int, list] = {}
    for (u, k, t), vids in sorted(g.options.items()):
        content.setdefault(u, []).append((k, t, tuple(
            (v.time, v.params, v.a, v.b, v.w, tuple(sorted(v.sync_in.values())),
             tuple(sorted(v.sync_out.values()))) for v in (g.variants[i] for i in vids))))
    repeated = g.num_nodes - len({tuple(c) for c in content.values()})
    return dict(arr=arr, dvals=dvals, mm=mm, kt_ok=kt_ok, caps_kt=caps_kt, mt=mt, dmax_kt=dmax_kt, work=work,
                repeated=4 * repeated >= g.num_nodes)


@njit(cache=True)
def _prefix_sums(parent, added, mm, mt, fin, work, pre_mem, pre_time, pre_uns, pre_work):
    """Per-ideal sums along the lattice's parent links (each ideal adds one node to its parent)."""
    for i in range(1, parent.shape[0]):
        p = parent[i]
        v = added[i]
        for kt in range(mm.shape[0]):
            if fin[kt, v]:
                pre_mem[i, kt] = pre_mem[p, kt] + mm[kt, v]
                pre_time[i, kt] = pre_time[p, kt] + mt[kt, v]
                pre_uns[i, kt] = pre_uns[p, kt]
            else:
                pre_mem[i, kt] = pre_mem[p, kt] + 0.0
                pre_time[i, kt] = pre_time[p, kt] + 0.0
                pre_uns[i, kt] = pre_uns[p, kt] + 1
        pre_work[i] = pre_work[p] + work[v]


def _run(problem: ParallelProblem, lattice, upper_bound: float, deadline, max_steps: int,
         t0: float, data: dict | None = None, build: bool = True, meter: _Meter | None = None) -> Solution:
    """One pass over ``lattice``. With ``build`` False an optimal pass returns no plan, its value in the
    DP's own costs as the objective and ``stats["build"]``, which builds and evaluates the plan.
    ``meter``: told each phase's progress between kernel calls, and each phase's seconds at the end."""
    g = problem.graph
    n = g.num_nodes
    K = len(problem.kinds)
    N = problem.microbatches
    sched = SCHEDULES.index(problem.schedule)
    counts = np.array([k.count for k in problem.kinds], np.int64)
    caps = np.array([usable_memory(k.capacity) for k in problem.kinds])
    smax = int(min(N, counts.sum()))
    data = data or _node_data(problem)
    arr, dvals, work = data["arr"], data["dvals"], data["work"]
    mm, kt_ok, caps_kt, mt, dmax_kt = (data[x] for x in ("mm", "kt_ok", "caps_kt", "mt", "dmax_kt"))
    NI = lattice.num_ideals
    bits = lattice.bits
    # per-ideal sums of each node's smallest memory, fastest time and unsupported count, per (kind, t)
    KT = mm.shape[0]
    pre_mem = np.zeros((NI, KT))
    pre_time = np.zeros((NI, KT))
    pre_uns = np.zeros((NI, KT), np.int64)
    pre_work = np.zeros(NI)
    fin = np.isfinite(mm)
    if NI > 1 and (lattice.added[1:] >= 0).all():
        _prefix_sums(lattice.parent, lattice.added, mm, mt, fin, work, pre_mem, pre_time, pre_uns, pre_work)
    else:
        for i in range(1, NI):
            p, v = lattice.parent[i], lattice.added[i]
            if v < 0:  # a coarse chain: the ideal's own members
                v = lattice.members(i)
                pre_mem[i] = np.where(fin[:, v], mm[:, v], 0.0).sum(axis=1)
                pre_time[i] = np.where(fin[:, v], mt[:, v], 0.0).sum(axis=1)
                pre_uns[i] = (~fin[:, v]).sum(axis=1)
                pre_work[i] = work[v].sum()
                continue
            pre_mem[i] = pre_mem[p] + np.where(fin[:, v], mm[:, v], 0.0)
            pre_time[i] = pre_time[p] + np.where(fin[:, v], mt[:, v], 0.0)
            pre_uns[i] = pre_uns[p] + ~fin[:, v]
            pre_work[i] = pre_work[p] + work[v]
    total_devices = int(counts.sum())
    kt_t = np.tile(arr["tvals"], K)
    kt_count = np.repeat(counts, len(arr["tvals"]))
    # the pairs' budget: max_steps, and what the time left allows (about 5 million pairs a second)
    limit = max_steps
    if deadline is not None:
        left = deadline - time.perf_counter()
        if left <= 0:
            return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                                    "time limit reached")
        limit = int(min(limit, left * 5e6))
    walk = (lattice.down_ptr, lattice.down_idx, pre_mem, pre_uns, pre_time, kt_ok, caps_kt, dmax_kt,
            float(upper_bound), pre_work, total_devices, kt_t, kt_count, dvals)
    # one pass over the ideals, in calls of about _CALL_S seconds each with the deadline checked between
    pair_i = np.empty(min(_PAIRS_START, limit + 1), np.int64)  # grown as needed, to limit + 1 at most
    pair_j = np.empty(pair_i.size, np.int64)
    stamp = np.full(NI, -1, np.int64)
    queue = np.empty(NI, np.int64)
    npairs = I = 0
    work = _PAIRS_START  # sub-ideals a call visits: adjusted to the rate measured
    phase_s = dict.fromkeys(_PHASES, 0.0)  # each phase's seconds, for the meter's weights
    t_phase = time.perf_counter()
    while I < NI:
        if deadline is not None and time.perf_counter() > deadline:
            return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                                  "time limit reached while listing the candidate stages")
        t1 = time.perf_counter()
        I, npairs, full = _enumerate_pairs(pair_i, pair_j, npairs, I, work, stamp, queue, *walk)
        work = _next_work(work, time.perf_counter() - t1)
        if meter is not None:
            meter.at("walk", I / NI)
        if full:
            if pair_i.size > limit:  # the output holds limit + 1 pairs at most
                return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                                      f"more than {limit:,} candidate stages; the exact DP would not fit the "
                                      f"{'time limit' if limit < max_steps else 'budget'}")
            more = min(pair_i.size, limit + 1 - pair_i.size)
            pair_i, pair_j = _doubled(pair_i, npairs, more), _doubled(pair_j, npairs, more)
    if npairs > limit:
        return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                              f"more than {limit:,} candidate stages; the exact DP would not fit the "
                              f"{'time limit' if limit < max_steps else 'budget'}")
    t1 = time.perf_counter()
    phase_s["walk"], t_phase = t1 - t_phase, t1
    # stages ordered by their first ideal J descending, as the feasibility DP needs
    o = _order_by_j(pair_j[:npairs], NI)
    pair_i, pair_j = pair_i[o], pair_j[o]

    size = 1 << 16
    o_pair = np.empty(size, np.int64)
    o_k = np.empty(size, np.int64)
    o_t = np.empty(size, np.int64)
    o_d = np.empty(size, np.int64)
    o_sp = np.zeros(size + 1, np.int64)
    o_yhi = np.empty(size, np.int64)
    o_cost = np.empty(size)
    cnt = scnt = 0
    start = 0
    chunk = 4096
    ent = max(1, min(npairs * K * len(arr["tvals"]), _MEMO_ENTRIES))
    memo = _new_memo(ent, 32 * ent, 8 * ent, data["repeated"], arr["v_cid"],
                     2 + n + 2 * arr["opt_var"].size)
    while start < npairs:
        if deadline is not None and time.perf_counter() > deadline:
            return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                                    "time limit reached while computing stage costs")
        stop = min(npairs, start + chunk)
        t1 = time.perf_counter()
        nxt, cnt, scnt = _all_steps(
            start, pair_i[:stop], pair_j[:stop], bits, n, K, arr["tvals"], dvals, counts, caps, arr["bw_res"],
            arr["opt_ptr"], arr["opt_var"], arr["same_params"], arr["v_time"], arr["v_params"], arr["v_a"],
            arr["v_b"], arr["v_w"], arr["sy_ptr"], arr["sy_tensor"], arr["sy_time"], arr["sy_dir"],
            g.tensor_src, g.tensor_ptr, g.tensor_dst, g.tensor_time, sched, N, smax, upper_bound, pre_work,
            total_devices, o_pair, o_k, o_t, o_d, o_sp, o_yhi, o_cost, cnt, scnt, memo)
        if nxt > start:  # pairs a call computes: toward _CALL_S seconds, the deadline checked between
            chunk = _next_work(nxt - start, time.perf_counter() - t1, 16, 4096)
        if memo[_M_COUNTS][_M_FULL]:
            memo = _grow_memo(memo, smax + N + 2)
        if nxt < stop:  # output full: grow and redo that pair
            if max(o_k.size, o_yhi.size) * 2 > max_steps:
                return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                                        f"more than {max_steps:,} stage options; the exact DP would not "
                                        f"fit the budget")
            o_pair, o_k, o_t, o_d = (_doubled(a, cnt) for a in (o_pair, o_k, o_t, o_d))
            o_sp = _doubled(o_sp, cnt + 1, o_sp.size - 1)
            o_yhi, o_cost = (_doubled(a, scnt) for a in (o_yhi, o_cost))
        start = nxt
        if meter is not None:
            meter.at("costs", start / npairs)
    pairs = npairs
    c_k, c_t, c_d = o_k[:cnt], o_t[:cnt], o_d[:cnt]
    step_ptr = o_sp[:cnt + 1]
    yhi, cost = o_yhi[:scnt], o_cost[:scnt]
    c_pair_i = pair_i[o_pair[:cnt]]
    c_pair_j = pair_j[o_pair[:cnt]]

    last = K - 1
    radix = counts[:last] + 1
    C1 = int(np.prod(radix)) if last else 1
    strides = np.ones(K, np.int64)
    for k in range(1, last):
        strides[k] = strides[k - 1] * radix[k - 1]
    digits = np.zeros((C1, K), np.int64)
    for k in range(last):
        digits[:, k] = (np.arange(C1) // strides[k]) % radix[k]
    gt = np.empty((NI, smax + 1, C1), np.int64)
    j_lo = np.searchsorted(-c_pair_j, -np.arange(NI), side="left")
    j_hi = np.searchsorted(-c_pair_j, -np.arange(NI), side="right")
    stats = {"ideals": NI, "pairs": pairs, "stage_options": cnt, "steps": scnt, "dp_runs": 0,
             "knapsack_memo_hits": int(memo[_M_COUNTS][_M_HIT]),
             "knapsack_memo_misses": int(memo[_M_COUNTS][_M_MISS])}

    def feasible(tau: float) -> bool:
        stats["dp_runs"] += 1
        if C1 == 1:
            return bool(_feasible1(tau, NI, smax, int(counts[last]), c_pair_i, c_pair_j, c_t, c_d, step_ptr,
                                   yhi, cost, sched, gt.reshape(NI, smax + 1)))
        return bool(_feasible(tau, NI, smax, C1, last, strides, digits, counts, c_pair_i, c_pair_j, c_k, c_t,
                              c_d, step_ptr, yhi, cost, sched, gt))

    def trace(tau: float) -> tuple[np.ndarray, float]:
        """The combos and s of a plan in the table of the last feasible run, and its value in the DP's
        own costs (each stage's step at its in-flight count): the search narrows on that value, and only
        the final plan is built and evaluated."""
        raw = _trace(tau, NI, smax, C1, last, strides, counts, c_pair_i, c_pair_j, c_k, c_t, c_d, step_ptr,
                     yhi, cost, sched, gt, j_lo, j_hi)
        if raw.shape[0] == 0:
            raise AssertionError("the stage DP: no plan could be traced back from a feasible table")
        value = 0.0
        for q, s in raw:
            d = int(c_d[q])
            y = N // d if problem.schedule == "gpipe" else -(-int(s) // d)
            a, b = int(step_ptr[q]), int(step_ptr[q + 1])
            value = max(value, float(cost[a + int(np.searchsorted(yhi[a:b], y, side="left"))]))
        return raw, value

    def build_plan(raw: np.ndarray) -> tuple[list[Stage], PlanEvaluation]:
        plan = _stages(problem, bits, [(int(c_pair_j[q]), int(c_pair_i[q]), int(c_k[q]), int(c_t[q]),
                                        int(c_d[q]), int(s)) for q, s in raw])
        return plan, evaluate_plan(problem, plan)

    cands = np.unique(cost)
    t1 = time.perf_counter()
    phase_s["costs"], t_phase = t1 - t_phase, t1
    if deadline is not None and time.perf_counter() > deadline:
        return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                              "time limit reached before the search over the stage costs", stats)
    t1 = time.perf_counter()
    if cands.size == 0 or not feasible(float(cands[-1])):
        why = _no_plan_reason(problem, mm, kt_ok, caps_kt, arr["tvals"], cands.size == 0, upper_bound)
        return stage_solution("dp", None, None, math.inf, Status.INFEASIBLE, time.perf_counter() - t0, why,
                                stats)
    run_s = time.perf_counter() - t1  # the longest feasibility run (and its trace) so far
    best_raw, best_value = trace(float(cands[-1]))
    # every plan's largest stage is at least the total work over all devices
    lo = int(np.searchsorted(cands, _work_lower_bound(problem, data) * (1 - 1e-9), side="left"))
    hi = int(np.searchsorted(cands, best_value * (1 + 1e-12), side="right")) - 1
    lo = min(lo, max(hi, 0))
    hi = max(hi, 0)
    halvings = math.log2(hi - lo + 1)  # the most feasibility runs the bisection needs, the first aside

    def searched() -> None:
        if meter is not None:
            meter.at("search", (1 + halvings - math.log2(hi - lo + 1)) / (1 + halvings))

    searched()
    while lo < hi:
        # a run that would end past the deadline is not started (the longest so far: its estimate)
        if deadline is not None and time.perf_counter() + run_s > deadline:
            best_plan, best_ev = build_plan(best_raw)
            elapsed = time.perf_counter() - t0
            # cands[lo] bounds the optimum over this lattice: the problem's when it is the full one
            return stage_solution("dp", best_plan, best_ev, best_ev.objective, Status.FEASIBLE, elapsed,
                                  f"time limit reached; best plan so far, optimum >= {cands[lo]:.9g}",
                                  stats, bound=float(cands[lo]) if build else None)
        mid = (lo + hi) // 2
        t1 = time.perf_counter()
        if feasible(float(cands[mid])):
            raw, value = trace(float(cands[mid]))
            if value < best_value:
                best_raw, best_value = raw, value
            hi = min(mid, int(np.searchsorted(cands, value * (1 + 1e-12), side="right")) - 1)
            hi = max(hi, lo)
        else:
            lo = mid + 1
        run_s = max(run_s, time.perf_counter() - t1)
        searched()
    stats["lower_bound"] = float(cands[lo])
    if meter is not None:
        phase_s["search"] = time.perf_counter() - t_phase
        meter.timed(phase_s)
    if not build:
        stats["build"] = lambda: build_plan(best_raw)
        return stage_solution("dp", None, None, best_value, Status.OPTIMAL, time.perf_counter() - t0, "",
                              stats)
    best_plan, best_ev = build_plan(best_raw)
    elapsed = time.perf_counter() - t0
    if best_ev.problems:  # the evaluator is the judge; a disagreement is a bug worth reporting loudly
        raise AssertionError(f"the stage DP produced an invalid plan: {best_ev.problems}")
    if not best_ev.objective <= best_value * (1 + 1e-9):  # the DP's costs and the evaluator must agree
        raise AssertionError(f"the stage DP: plan evaluates to {best_ev.objective!r}, the DP's costs say "
                             f"{best_value!r}")
    return stage_solution("dp", best_plan, best_ev, best_ev.objective, Status.OPTIMAL, elapsed, "", stats,
                          bound=best_ev.objective)


#: about how long one call of a kernel run in pieces takes: the deadline is checked between calls
_CALL_S = 0.02
#: the candidate stages' first output size (it grows), and the sub-ideals the first call of their walk visits
_PAIRS_START = 1 << 16


def _next_work(work: int, took: float, lo: int = 1 << 10, hi: int = 1 << 26) -> int:
    """The work for the next call of a kernel run in pieces, after ``work`` took ``took`` seconds: scaled
    toward :data:`_CALL_S` a call (at most doubled, within ``lo`` .. ``hi``)."""
    if took <= 0:
        return min(hi, 2 * work)
    return int(max(lo, min(hi, 2 * work, work * _CALL_S / took)))


def _doubled(a: np.ndarray, used: int, extra: int | None = None) -> np.ndarray:
    """``a`` with ``extra`` (default: its size) more slots, its first ``used`` entries kept."""
    b = np.empty(a.size + (a.size if extra is None else extra), a.dtype)
    b[:used] = a[:used]
    return b


def _stages(problem, bits, raw) -> list[Stage]:
    """Stages from ``(J, I, kind, t, d, s)`` tuples, the variants re-chosen (exactly) at each stage's
    actual in-flight count."""
    from graphs.parallel import in_flight

    g = problem.graph
    plan = []
    n = g.num_nodes
    for J, I, k, t, d, s in raw:
        nodes = [u for u in range(n) if (int(bits[I, u >> 6]) >> (u & 63)) & 1
                 and not (int(bits[J, u >> 6]) >> (u & 63)) & 1]
        y = in_flight(problem.schedule, d, s, problem.microbatches)
        plan.append(Stage(tuple(nodes), k, d, t, tuple(_best_variants(problem, nodes, k, t, d, y))))
    return plan


def _best_variants(problem: ParallelProblem, nodes: list[int], k: int, t: int, d: int, y: int) -> list[int]:
    """Exact best variants of a stage at in-flight ``y`` (the same knapsack as the DP's)."""
    g = problem.graph
    inside = np.zeros(g.num_nodes, bool)
    inside[nodes] = True
    from graphs.parallel import _crossing, weight_versions

    enter, leave = _crossing(g, inside)
    kind = problem.kinds[k]
    N = problem.microbatches
    res = 4.0 * (d - 1) / d / N / resync_bandwidth(kind, t * d) if d > 1 else 0.0
    ver = weight_versions(problem.schedule, y)
    choices, vids = [], []
    for u in nodes:
        opts = g.options[(u, k, t)]
        row = []
        for vi in opts:
            v = g.variants[vi]
            x = v.time + sum(x for e, x in v.sync_in.items() if enter[e]) + \
                sum(x for e, x in v.sync_out.items() if leave[e])
            row.append((x / d + res * v.params, v.a * y + v.b + (ver - 1) * v.w))
        choices.append(row)
        vids.append(opts)
    _, pick = knapsack(choices, usable_memory(kind.capacity))
    return [vids[i][j] for i, j in enumerate(pick)]


# --------------------------------------------------------------------------- the registry's form
def solve_stages(problem: ParallelProblem, options: SolveOptions | None = None) -> Solution:
    """The registry's stage form (:func:`solvers.registry.solve`): ``options.time_limit``,
    ``options.threads`` (the pipeline kernel's), ``options.progress``, and ``options.raw``'s
    ``max_ideals``, ``max_steps`` and ``kernel`` (``auto``, ``stage`` or ``pipeline``; see
    :func:`solve_problem`)."""
    options = options or SolveOptions()
    kw = {k: int(options.raw[k]) for k in ("max_ideals", "max_steps") if k in options.raw}
    kernel = str(options.raw.get("kernel", "auto"))
    return solve_problem(problem, time_limit=options.time_limit, kernel=kernel, threads=options.threads,
                         progress=options.progress, **kw)
