"""The exact dynamic program over ideals: minimum max-load over contiguous placements.

A contiguous placement is a chain of ideals ``∅ = I0 ⊂ I1 ⊂ ... ⊂ Im = V`` of the item graph
(:mod:`graphs.contract`), stage ``Ij \\ Ij-1`` going to one device. With ``c`` the number of devices
used per kind,

    dp[I][c] = min over ideals J ⊂ I and kinds t with c_t >= 1 of max(dp[J][c - e_t], load_t(I \\ J))

and ``dp[∅][c] = 0`` (unused devices). The answer is ``dp[V][counts]``.

Many placements often share that optimum (a one-operator CPU stage between two accelerators costs
nothing when it is not the bottleneck). A second pass over the same lattice, with every stage's load
capped at the optimum ``M*``, picks among them lexicographically: fewest stages (devices used), then
the smallest sum of stage loads. Both are sums over stages, so that pass is an exact DP on
``(stages, sum)`` pairs; the max-load is unchanged.

Why it is fast where the reference is slow:

* compute, memory and unsupported-node counts of a stage are differences of per-ideal prefix sums;
* the walk from ``I`` reaches each sub-ideal ``J`` from one that is a single item larger, so the stage
  ``I \\ J`` grows one item at a time and its communication is updated from that item's nodes and
  their neighbours (:func:`_add_item`): a few bitset words per pair, not a pass over both borders;
* ``dp[J]`` is monotone in the device counts (a device may stay unused), and a state that is no better
  than a smaller one adds nothing a smaller one does not: only the *strict* states of ``J`` (two or three
  of 225 on Llama graphs over three kinds) are extended, and each finished row is closed upwards;
* pairs are never materialised: for each ``I`` the sub-ideals are walked down the lattice's Hasse
  edges, and the walk stops where a stage's compute already exceeds an upper bound on the optimum
  (from the same DP restricted to a few topological orders) or fits no device. Every pair that could
  belong to an optimal placement is still visited, so the answer stays exact; on the reference
  workloads only a small fraction of all ideal pairs is touched.

* with a proven lower bound (:mod:`solvers.bounds`) and prices per kind, :func:`run_dp` also drops the
  device-count states whose prefix or remainder cannot fit within the upper bound (each side's work
  counted over the kinds it has), and stops walking the sub-ideals of ``I`` once every state of ``I``
  has reached the lower bound (``auto`` does both);
* the walk is bound by memory, not arithmetic: what it reads of a sub-ideal sits in one record
  (:func:`_records`), and the threads' scratch rows are padded apart (shared cache lines made two
  threads slower than one).

The kernel is compiled with numba: the lattice walk is irregular, sequential work that numpy cannot
vectorise (see ``benchmarks/README.md`` for the measurements behind that choice).
A small lattice compiles only the per-ideal kernels and runs the tiny ones uncompiled (the comment
above :func:`_leaf`): the first run after installation pays for compiling
(``benchmarks/README_footprint.md``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numba import config, get_thread_id, njit, prange, set_num_threads

from graphs.contract import ClassGraph, contract
from graphs.errors import InfeasibleError, InputError, ProblemTooLargeError
from graphs.evaluate import evaluate
from graphs.ideals import IdealLattice, chain_ideals, enumerate_ideals, push_down
from graphs.model import Cluster, OpGraph
from graphs.order import topological_order
from graphs.parallel import usable_memory

from ._common import none_fits
from .base import BOUND_ROUND_OFF, Solution, SolveOptions, Status, check_bound

__all__ = ["solve", "curve", "Curve", "DPProblem", "prepare", "run_dp", "estimate", "Estimate",
           "DEFAULT_MAX_IDEALS", "model_mismatch", "mismatch_solution"]

DEFAULT_MAX_IDEALS = 3_000_000
_PAD = 128  # bytes between two threads' scratch rows (two cache lines)
_CHUNK_SECONDS = 0.5  # kernel calls are sized to about this, so limits and progress stay responsive
_MAX_CHUNK = 64  # ideals per kernel call at most


# --------------------------------------------------------------------------- preparation
@dataclass(frozen=True, eq=False)
class DPProblem:
    """Arrays the kernel works on, for one graph, cluster and item graph."""

    items: ClassGraph
    counts: np.ndarray  # [T] devices per kind
    caps: np.ndarray  # [T] memory capacity (inf = unlimited)
    item_compute: np.ndarray  # [T, C] (inf = unsupported)
    item_memory: np.ndarray  # [C]
    cn_class: np.ndarray  # [M] item of each communicating node
    cn_cost: np.ndarray  # [M, T] its comm cost per kind (0 where the kind pays none)
    cn_succ: np.ndarray  # [M, W] bitset of the items its output goes to (own item excluded)
    cn_node: np.ndarray  # [M] node index
    words: int
    strides: np.ndarray  # [T]
    digits: np.ndarray  # [S, T]


def prepare(graph: OpGraph, cluster: Cluster, *, items: ClassGraph | None = None) -> DPProblem:
    """Contract the graph and build the kernel's arrays; raises :class:`InfeasibleError` when some
    node fits on no device."""
    if items is None:
        items = contract(graph, cluster)
    compute, comm = graph.costs_for(cluster)
    T = len(cluster.kinds)
    C = items.num_classes
    counts = np.array([k.count for k in cluster.kinds], dtype=np.int64)
    caps = np.array([usable_memory(k.memory) for k in cluster.kinds])
    item_compute = items.class_sums(compute)
    item_memory = items.class_sums(graph.memory)
    _check_items_fit(graph, cluster, items, item_compute, item_memory, counts, caps)

    W = max(1, (C + 63) // 64)
    cls = items.node_class
    # successor items of every node, own item excluded
    s_it = cls[graph.dst]
    keep = s_it != cls[graph.src]
    e_src, e_it = graph.src[keep], s_it[keep]
    has_out = np.zeros(graph.num_nodes, bool)
    has_out[e_src] = True
    pays = comm.max(axis=0) > 0
    nodes = np.flatnonzero(has_out & pays)
    pos = np.full(graph.num_nodes, -1, np.int64)
    pos[nodes] = np.arange(nodes.size)
    succ = np.zeros((nodes.size, W), np.uint64)
    sel = pos[e_src] >= 0
    rows, its = pos[e_src[sel]], e_it[sel]
    np.bitwise_or.at(succ, (rows, its >> 6), np.left_shift(np.uint64(1), (its & 63).astype(np.uint64)))

    radix = counts + 1
    S = int(np.prod(radix))
    strides = np.ones(T, np.int64)
    for t in range(1, T):
        strides[t] = strides[t - 1] * radix[t - 1]
    digits = (np.arange(S)[:, None] // strides[None, :]) % radix[None, :]
    return DPProblem(
        items=items, counts=counts, caps=caps, item_compute=item_compute, item_memory=item_memory,
        cn_class=cls[nodes], cn_cost=np.ascontiguousarray(comm[:, nodes].T), cn_succ=succ, cn_node=nodes,
        words=W, strides=strides, digits=np.ascontiguousarray(digits.astype(np.int64)),
    )


def _check_items_fit(graph, cluster, items, item_compute, item_memory, counts, caps) -> None:
    usable = (counts[:, None] > 0) & np.isfinite(item_compute) & (item_memory[None, :] <= caps[:, None])
    bad = np.flatnonzero(~usable.any(axis=0))
    if bad.size == 0:
        return
    members = items.members()
    reasons = []
    for c in bad[:5]:
        # distinct ids: a stage problem's graph (graphs.parallel.to_opgraph) gives a node's tensors and
        # stand-ins its id
        ids = list(dict.fromkeys(str(graph.ids[u]) for u in members[c]))
        nodes = np.asarray(ids)
        label = ", ".join(ids[:4]) + (" ..." if len(ids) > 4 else "")
        why = []
        for t, k in enumerate(cluster.kinds):
            if counts[t] == 0:
                continue
            if not np.isfinite(item_compute[t, c]):
                why.append(f"not supported on {k.name}")
            elif item_memory[c] > caps[t]:
                why.append(f"needs {item_memory[c]:.6g} bytes but one {k.name} holds {caps[t]:.6g} bytes")
        group = f"node {label}" if nodes.size == 1 else f"nodes {label} (which must share a device)"
        reasons.append(f"{group}: {'; '.join(why) or 'no device'}")
    more = f" (and {bad.size - 5} more)" if bad.size > 5 else ""
    raise InfeasibleError("no device can hold " + " | ".join(reasons) + more)


# --------------------------------------------------------------------------- kernels
@njit(cache=True)
def _boundaries(bits, cn_class, cn_succ):
    """For every ideal X: the communicating nodes whose output crosses X's border
    (item in X with a successor outside, or item outside with a successor inside)."""
    N, W = bits.shape
    M = cn_class.shape[0]
    cnt = np.zeros(N + 1, np.int64)
    for pass_ in range(2):
        if pass_ == 1:
            for i in range(N):
                cnt[i + 1] += cnt[i]
            idx = np.empty(cnt[N], np.int64)
            fill = cnt[:N].copy()
        for i in range(N):
            for u in range(M):
                c = cn_class[u]
                inside = (bits[i, c >> 6] >> np.uint64(c & 63)) & np.uint64(1)
                cross = False
                for w in range(W):
                    if inside:
                        if cn_succ[u, w] & ~bits[i, w]:
                            cross = True
                            break
                    else:
                        if cn_succ[u, w] & bits[i, w]:
                            cross = True
                            break
                if cross:
                    if pass_ == 0:
                        cnt[i + 1] += 1
                    else:
                        idx[fill[i]] = u
                        fill[i] += 1
    return cnt, idx


@njit(cache=True)
def _prefix(parent, added, item_compute, item_memory):
    """Per-ideal sums of compute (unsupported counted apart), memory, and the ideal's size."""
    N = parent.shape[0]
    T = item_compute.shape[0]
    comp = np.zeros((N, T))
    unsup = np.zeros((N, T), np.int64)
    mem = np.zeros(N)
    size = np.zeros(N, np.int64)
    for i in range(1, N):
        p = parent[i]
        v = added[i]
        size[i] = size[p] + 1
        mem[i] = mem[p] + item_memory[v]
        for t in range(T):
            x = item_compute[t, v]
            if np.isfinite(x):
                comp[i, t] = comp[p, t] + x
                unsup[i, t] = unsup[p, t]
            else:
                comp[i, t] = comp[p, t]
                unsup[i, t] = unsup[p, t] + 1
    return comp, unsup, mem, size


@njit(cache=True, inline="always")
def _states_at(T):
    """Where a record's strict states begin (:func:`_records`): after compute and unsupported counts
    per kind (``2 T``), memory, the Hasse edge range (two) and the number of strict states, at
    ``_states_at(T) - 1``."""
    return 2 * T + 4


@njit(cache=True)
def _stage_fits(I, J, rec, counts, caps, ub, ok):
    """Can the stage ``I \\ J`` go on some device kind (supported, fits its memory, compute within
    ``ub``)? Fills ``ok[t]`` per kind; reads the per-ideal records of :func:`_records`. All three only
    get worse for smaller ``J``."""
    T = counts.shape[0]
    m = rec[I, 2 * T] - rec[J, 2 * T]
    any_ok = False
    for t in range(T):
        ok[t] = (counts[t] > 0 and rec[I, T + t] == rec[J, T + t] and m <= caps[t]
                 and rec[I, t] - rec[J, t] <= ub)
        any_ok = any_ok or ok[t]
    return any_ok


@njit(cache=True)
def _stage_comm(I, J, bits, cn_class, cn_cost, cn_succ, bd_ptr, bd_idx, in_bi, sbits, comm):
    """Communication per kind of the stage ``I \\ J`` into ``comm`` (``in_bi`` marks I's boundary): only
    nodes on the boundary of ``I`` or of ``J`` can cross it. Shared by both passes."""
    W = bits.shape[1]
    T = comm.shape[0]
    for w in range(W):
        sbits[w] = bits[I, w] & ~bits[J, w]
    for t in range(T):
        comm[t] = 0.0
    for side in range(2):
        a = bd_ptr[I] if side == 0 else bd_ptr[J]
        b = bd_ptr[I + 1] if side == 0 else bd_ptr[J + 1]
        for p in range(a, b):
            u = bd_idx[p]
            if side == 1 and in_bi[u]:
                continue
            c = cn_class[u]
            inside = (sbits[c >> 6] >> np.uint64(c & 63)) & np.uint64(1)
            cross = False
            for w in range(W):
                if inside:
                    if cn_succ[u, w] & ~sbits[w]:
                        cross = True
                        break
                else:
                    if cn_succ[u, w] & sbits[w]:
                        cross = True
                        break
            if cross:
                for t in range(T):
                    comm[t] += cn_cost[u, t]


@njit(cache=True)
def _add_item(x, sbits, cn_class, cn_cost, sw_ptr, sw_word, sw_mask, own_ptr, own_idx, pred_ptr, pred_idx, c):
    """Turn ``c``, the communication per kind of a stage ``S`` (``sbits``), into that of ``S + {x}``.
    Only two kinds of node can change what they pay: ``x``'s own nodes (they stop receiving into ``S``
    and send if some successor is outside ``S + {x}``) and the nodes whose output goes to ``x`` (inside
    ``S`` they may stop sending; outside it they now receive). A node's successor items are read as its
    few non-zero bitset words (``sw_*``), so the cost is a few word tests per such node instead of a
    pass over both borders."""
    T = c.shape[0]
    xw = x >> 6
    xbit = np.uint64(1) << np.uint64(x & 63)
    for q in range(own_ptr[x], own_ptr[x + 1]):
        u = own_idx[q]
        into = False
        leaves = False
        for r in range(sw_ptr[u], sw_ptr[u + 1]):
            w = sw_word[r]
            m = sw_mask[r]
            sw = sbits[w] | xbit if w == xw else sbits[w]
            if m & sbits[w]:
                into = True
            if m & ~sw:
                leaves = True
        f = (1.0 if leaves else 0.0) - (1.0 if into else 0.0)
        if f != 0.0:
            for t in range(T):
                c[t] += f * cn_cost[u, t]
    for q in range(pred_ptr[x], pred_ptr[x + 1]):
        u = pred_idx[q]
        cu = cn_class[u]
        if (sbits[cu >> 6] >> np.uint64(cu & 63)) & np.uint64(1):
            # u sent to x before; it still sends if another successor is outside the stage
            leaves = False
            for r in range(sw_ptr[u], sw_ptr[u + 1]):
                w = sw_word[r]
                sw = sbits[w] | xbit if w == xw else sbits[w]
                if sw_mask[r] & ~sw:
                    leaves = True
                    break
            if not leaves:
                for t in range(T):
                    c[t] -= cn_cost[u, t]
        else:
            # u now receives into the stage, unless it already did
            into = False
            for r in range(sw_ptr[u], sw_ptr[u + 1]):
                if sw_mask[r] & sbits[sw_word[r]]:
                    into = True
                    break
            if not into:
                for t in range(T):
                    c[t] += cn_cost[u, t]


@njit(cache=True)
def _strict_state(rec, dp, J, P, n, q):
    """The ``q``-th state the walk extends from ``J`` and its value: from ``J``'s record when it holds
    all ``n`` strict states, else (``n < 0``: more than it holds) state ``q`` of the table row."""
    if n >= 0:
        return int(rec[J, P + 2 * q]), rec[J, P + 2 * q + 1]
    return q, dp[J, q]


@njit(cache=True)
def _dp_ideal(I, bits, rec, counts, caps, strides, digits, cn_class, cn_cost, sw_ptr, sw_word,
              sw_mask, down, own_ptr, own_idx, pred_ptr, pred_idx, ub, alive,
              dp, ch_j, ch_t, stamp, queue, cq, cpar, citem, cdone, chain, sb, sbits, ok,
              eager, tally):
    """Fill ``dp[I]`` (all sub-ideals of ``I`` are done) in its states ``s`` with ``alive[I, s]`` (the
    others stay ``inf`` until :func:`_close_row`). ``stamp``, ``queue``, ``cq``,
    ``cpar``, ``citem``, ``cdone``, ``chain``, ``sbits`` and ``ok`` are scratch space. Returns the
    number of (J, I) pairs used.

    The walk goes down the Hasse edges from ``I``; every sub-ideal ``J`` it reaches is one item ``x``
    (``down[e, 1]``) short of the sub-ideal it was reached from (queue slot ``cpar``), so the stage
    ``I \\ J`` is that one's stage plus ``x``. Its communication (``cq``, per slot) is needed only when
    the compute-only bound lets the pair improve ``dp[I]``; it is then derived from the nearest slot up
    the discovery tree whose communication is known (``cdone``), by :func:`_add_item` per step, in time
    proportional to the added items' nodes and neighbours, not recomputed from the borders. With
    ``eager`` (most pairs pass that bound, as on multi-kind clusters) every slot's communication is
    derived when it is queued, which costs less than the test it saves. ``tally`` counts the pairs
    used and those that needed their communication, for the caller's choice of ``eager`` (in eager
    mode every pair counts as needing it, so that choice holds until the caller's tally is reset: one
    chunk of ideals)."""
    T = counts.shape[0]
    W = bits.shape[1]
    S = digits.shape[0]
    P = _states_at(T)  # rec (_records): compute, unsupported, memory, Hasse edges, strict states
    used = 0
    any_alive = False
    for s in range(S):
        if alive[I, s]:
            any_alive = True
            break
    if not any_alive:
        return 0
    stamp[I] = I
    queue[0] = I
    for t in range(T):
        cq[0, t] = 0.0
    if eager:
        for w in range(W):
            sb[0, w] = 0
    cdone[0] = True
    head, tail = 0, 1
    while head < tail:
        k = head
        J = queue[k]
        head += 1
        if J != I:
            if not _stage_fits(I, J, rec, counts, caps, ub, ok):
                continue  # every smaller J only makes the stage bigger
            used += 1
            tally[0] += 1
        for e in range(int(rec[J, 2 * T + 1]), int(rec[J, 2 * T + 2])):
            K = down[e, 0]
            if stamp[K] != I:
                stamp[K] = I
                queue[tail] = K
                cpar[tail] = k
                citem[tail] = down[e, 1]
                cdone[tail] = eager
                if eager:
                    # the slot's stage, from its parent's (a stream of writes, where bits[J] is a
                    # random read of a large table)
                    x = down[e, 1]
                    for w in range(W):
                        sb[tail, w] = sb[k, w]
                    sb[tail, x >> 6] |= np.uint64(1) << np.uint64(x & 63)
                    for t in range(T):
                        cq[tail, t] = cq[k, t]
                    _add_item(x, sb[k], cn_class, cn_cost, sw_ptr, sw_word, sw_mask, own_ptr,
                              own_idx, pred_ptr, pred_idx, cq[tail])
                tail += 1
        if J == I:
            continue
        # compute alone bounds the load from below: when no strict state of J can improve I even so, the
        # communication is not needed (it often is not: most pairs of a one-kind cluster end here)
        useful = eager
        for t in range(T):
            if useful:
                break
            if not ok[t]:
                continue
            lb = rec[I, t] - rec[J, t]
            st = strides[t]
            n = int(rec[J, P - 1])
            for q in range(n if n >= 0 else S):
                s0, prev = _strict_state(rec, dp, J, P, n, q)
                if digits[s0, t] == counts[t]:
                    continue
                s = s0 + st
                if alive[I, s] and lb < dp[I, s] and prev < dp[I, s]:
                    useful = True
                    break
            if useful:
                break
        if not useful:
            continue
        tally[1] += 1
        # the stage's communication, from the nearest slot above it whose communication is known
        n = 0
        j = k
        while not cdone[j]:
            chain[n] = j
            n += 1
            j = cpar[j]
        for r in range(n - 1, -1, -1):
            j = chain[r]
            pj = cpar[j]
            for t in range(T):
                cq[j, t] = cq[pj, t]
            for w in range(W):
                sbits[w] = bits[I, w] & ~bits[queue[pj], w]
            _add_item(citem[j], sbits, cn_class, cn_cost, sw_ptr, sw_word, sw_mask, own_ptr, own_idx,
                      pred_ptr, pred_idx, cq[j])
            cdone[j] = True
        improved = False
        # the same states as the test above, written out again: a helper that also returned the target
        # state measured 13% slower on Llama-8 (9x when numba did not inline it)
        for t in range(T):
            if not ok[t]:
                continue
            load = rec[I, t] - rec[J, t] + cq[k, t]
            if load > ub:
                continue
            st = strides[t]
            n = int(rec[J, P - 1])
            for q in range(n if n >= 0 else S):
                s0, prev = _strict_state(rec, dp, J, P, n, q)
                if digits[s0, t] == counts[t]:
                    continue
                s = s0 + st
                if not alive[I, s] or not prev < np.inf:
                    continue
                cand = prev if prev > load else load
                if cand < dp[I, s]:
                    dp[I, s] = cand
                    ch_j[I, s] = J
                    ch_t[I, s] = t
                    improved = True
        if improved:
            # dp[0] holds the floor (a proven lower bound on the optimum): states at the floor cannot
            # improve, and once every state of I is there the rest of the walk is useless
            settled = True
            for s in range(S):
                if alive[I, s] and dp[I, s] > dp[0, 0]:
                    settled = False
                    break
            if settled:
                break
    _close_row(I, dp, ch_j, ch_t, strides, digits, rec)
    return used


@njit(cache=True)
def _close_row(I, dp, ch_j, ch_t, strides, digits, rec):
    """Make ``dp[I]`` monotone (``dp[I][c] <= dp[I][c - e_k]``: a device may stay unused), copying the
    choices along, and record in ``rec[I]`` (:func:`_records`) its strict states: those better than
    every smaller one.

    The walk only extends strict states of a sub-ideal: a state ``c`` with ``dp[J][c] = dp[J][c - e_k]``
    gives the same candidates as ``c - e_k`` one device later, and the closure carries them up."""
    S, T = digits.shape
    R = rec.shape[1]
    P = _states_at(T)
    for t in range(T):
        st = strides[t]
        for s in range(S):
            if digits[s, t] > 0 and dp[I, s - st] < dp[I, s]:
                dp[I, s] = dp[I, s - st]
                ch_j[I, s] = ch_j[I, s - st]
                ch_t[I, s] = ch_t[I, s - st]
    n = 0
    for s in range(S):
        v = dp[I, s]
        if not v < np.inf:
            continue
        strict = True
        for t in range(T):
            if digits[s, t] > 0 and not v < dp[I, s - strides[t]]:
                strict = False
                break
        if strict:
            if P + 2 * n + 1 < R:
                rec[I, P + 2 * n] = s
                rec[I, P + 2 * n + 1] = v
            n += 1
    # more strict states than the row holds: the walk then extends every finite state (exact too), and
    # run_dp widens the records to the number kept here
    rec[I, P - 1] = n if P + 2 * n <= R else -n


@njit(cache=True)
def _eager(tally):
    """Derive every queued slot's communication up front when, so far, most pairs needed it."""
    return 2 * tally[1] > tally[0]


@njit(cache=True)
def _dp_chunk(lo, hi, bits, rec, counts, caps, strides, digits, cn_class, cn_cost, sw_ptr,
              sw_word, sw_mask, down, own_ptr, own_idx, pred_ptr, pred_idx, ub,
              alive, dp, ch_j, ch_t, stamp, queue, cq, cpar, citem, cdone,
              chain, sb):
    """Fill ``dp[I]`` for ideals ``lo <= I < hi``, one after another. Returns the pairs used.
    ``stamp``, ``queue``, ``cq``, ``cpar``, ``citem``, ``cdone``, ``chain`` and ``sb`` have one row per
    thread; the serial kernel uses row 0."""
    sbits = np.empty(bits.shape[1], np.uint64)
    ok = np.zeros(counts.shape[0], np.bool_)
    tally = np.zeros(2, np.int64)
    used = 0
    for I in range(lo, hi):
        used += _dp_ideal(I, bits, rec, counts, caps, strides, digits, cn_class, cn_cost,
                          sw_ptr, sw_word, sw_mask, down, own_ptr, own_idx,
                          pred_ptr, pred_idx, ub, alive, dp, ch_j, ch_t,
                          stamp[0], queue[0], cq[0], cpar[0], citem[0], cdone[0], chain[0], sb[0], sbits, ok,
                          _eager(tally), tally)
    return used


@njit(cache=True, parallel=True)
def _dp_chunk_parallel(lo, hi, bits, rec, counts, caps, strides, digits, cn_class, cn_cost,
                       sw_ptr, sw_word, sw_mask, down, own_ptr, own_idx, pred_ptr,
                       pred_idx, ub, alive, dp, ch_j, ch_t, stamp, queue,
                       cq, cpar, citem, cdone, chain, sb):
    """As :func:`_dp_chunk`, the ideals spread over threads: ``lo..hi`` must be ideals of one size
    (none is a sub-ideal of another), so every thread writes its own rows and reads finished ones."""
    nt = stamp.shape[0]
    # per-thread scratch written at every pair: rows padded to _PAD bytes, or the threads' rows share
    # cache lines and every write moves the line between cores (it made two threads slower than one)
    sbits = np.empty((nt, max(bits.shape[1], _PAD // 8)), np.uint64)
    ok = np.zeros((nt, max(counts.shape[0], _PAD)), np.bool_)
    tally = np.zeros((nt, _PAD // 8), np.int64)
    used = 0
    for k in prange(hi - lo):
        t = get_thread_id()
        used += _dp_ideal(lo + k, bits, rec, counts, caps, strides, digits, cn_class, cn_cost,
                          sw_ptr, sw_word, sw_mask, down, own_ptr, own_idx,
                          pred_ptr, pred_idx, ub, alive, dp, ch_j, ch_t,
                          stamp[t], queue[t], cq[t], cpar[t], citem[t], cdone[t], chain[t], sb[t], sbits[t],
                          ok[t], _eager(tally[t]), tally[t])
    return used


# Strict states a record holds to begin with (Llama-8 training over a100:4,t4:4,cpu:8: median 7, at most
# 13). When a chunk of ideals has more, the records grow to that many plus _STRICT_MARGIN (_widen): an
# ideal whose record overflows makes every pair below it read its whole table row, which took Llama-16
# training over the same devices (median 11, at most 19) from 30 s to 59 s; records that large from the
# start cost Llama-8 5-9% (their rows spread over more pages).
_STRICT_SLOTS = 14
_STRICT_MARGIN = 4


def _records(comp: np.ndarray, unsup: np.ndarray, mem: np.ndarray, down_ptr: np.ndarray, slots: int,
             floor: float) -> np.ndarray:
    """One row per ideal with what the walk reads of a sub-ideal, side by side, so that a pair costs a
    few cache lines instead of one per array (on Llama-16 the separate arrays no longer fit the cache):
    compute per kind, unsupported items per kind (counts, exact as floats), memory, the range of its
    Hasse edges in ``down``, then (filled by :func:`_close_row`) the number of strict states and up to
    ``slots`` (state, value) pairs, at least one (the empty ideal's); minus their number when there are
    more (the walk then reads the table, until :func:`_widen`)."""
    N, T = comp.shape
    P = _states_at(T)
    rec = np.zeros((N, P + 2 * max(1, slots)))
    rec[:, :T] = comp
    rec[:, T:2 * T] = unsup
    rec[:, 2 * T] = mem
    rec[:, 2 * T + 1] = down_ptr[:-1]
    rec[:, 2 * T + 2] = down_ptr[1:]
    rec[0, P - 1] = 1  # the empty ideal: state 0 at the floor
    rec[0, P] = 0
    rec[0, P + 1] = floor
    return rec


def _widen(rec: np.ndarray, dp: np.ndarray, ch_j: np.ndarray, ch_t: np.ndarray, digits: np.ndarray,
           strides: np.ndarray, spilled: np.ndarray) -> np.ndarray:
    """Records (:func:`_records`) with room for the strict states of the finished ideals ``spilled``
    (their records overflowed) and _STRICT_MARGIN more, those ideals' strict states recorded."""
    S, T = digits.shape
    P = _states_at(T)
    slots = min(S, int(-rec[spilled, P - 1].min()) + _STRICT_MARGIN)  # _close_row kept -count
    wide = np.zeros((rec.shape[0], P + 2 * slots))
    wide[:, :rec.shape[1]] = rec
    for I in spilled:
        _close_row(int(I), dp, ch_j, ch_t, strides, digits, wide)  # closed already: records only
    return wide


def _edge_items(lattice: IdealLattice) -> np.ndarray:
    """``item[e]``: the one item that the Hasse edge ``e`` (ideal -> immediate sub-ideal) removes
    (vectorised over edges, in blocks to bound the temporary bitsets)."""
    down_ptr, down_idx, bits = lattice.down_ptr, lattice.down_idx, lattice.bits
    E = down_idx.size
    src = np.repeat(np.arange(lattice.num_ideals, dtype=np.int64), np.diff(down_ptr))
    item = np.empty(E, np.int64)
    step = max(1, 4_000_000 // max(1, lattice.words))
    for lo in range(0, E, step):
        hi = min(E, lo + step)
        d = bits[src[lo:hi]] & ~bits[down_idx[lo:hi]]
        w = np.argmax(d != 0, axis=1)
        one = d[np.arange(hi - lo), w]  # a single set bit: a power of two, exact as a float
        item[lo:hi] = w * 64 + np.frexp(one.astype(np.float64))[1] - 1
    return item


def _item_nodes(prob: DPProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CSR lists, per item, of its communicating nodes (``own``) and of the communicating nodes of other
    items whose output it takes (``pred``), as indices into ``prob.cn_*``: what :func:`_add_item`
    visits when the item joins a stage."""
    C = prob.items.num_classes
    M = prob.cn_class.size
    own_ptr = np.zeros(C + 1, np.int64)
    np.cumsum(np.bincount(prob.cn_class, minlength=C), out=own_ptr[1:])
    own_idx = np.argsort(prob.cn_class, kind="stable").astype(np.int64)
    # unpack the successor bitsets: (node, item) pairs
    bitsu8 = prob.cn_succ.view(np.uint8).reshape(M, -1) if M else np.zeros((0, 8), np.uint8)
    flags = np.unpackbits(bitsu8, axis=1, bitorder="little")[:, :C] if M else np.zeros((0, C), np.uint8)
    u, x = np.nonzero(flags)
    order = np.argsort(x, kind="stable")
    pred_ptr = np.zeros(C + 1, np.int64)
    np.cumsum(np.bincount(x, minlength=C), out=pred_ptr[1:])
    return own_ptr, own_idx, pred_ptr, u[order].astype(np.int64)


def _sparse_words(succ: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-zero words of each row of a bitset array, CSR: ``(ptr, word index, word)``."""
    u, w = np.nonzero(succ)
    ptr = np.zeros(succ.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(u, minlength=succ.shape[0]), out=ptr[1:])
    return ptr, w.astype(np.int64), np.ascontiguousarray(succ[u, w])


# --------------------------------------------------------------------------- tie-break among optima
# Many contiguous placements often share the optimal max-load M*. Among them the DP returns one with the
# fewest stages (devices used) and then the smallest sum of stage loads.
# * Fewest stages costs nothing: the first pass's last row holds the optimum for every vector of
#   devices per kind, so the smallest device vectors c with dp[V][c] = M* are read off it; every chain
#   of max-load M* on such a c uses all of its k* devices (fewer would contradict the minimum).
# * Least sum of loads is a second pass over the same lattice, keeping only stages of load <= M* and
#   states that can end on such a c, minimising the sum (additive over stages, so an exact DP, where
#   (max-load, stages, sum) in one pass would not be: a max set by a later stage makes the earlier
#   tie-break values irrelevant). With k* fixed, the prefix and the rest of the graph must fit k* stages
#   of load <= M*, which confines the pass to a band of the lattice.
_TIE_ROUND_OFF = 1e-10  # relative: max-loads this close are equal (prefix-sum round-off)


@njit(cache=True)
def _out_comm(bits, cn_class, cn_cost, cn_succ, bd_ptr, bd_idx):
    """``out[X, t]``: the communication (at kind ``t``) of the nodes inside ideal ``X`` whose output
    leaves it. A stage ``I \\ J`` sends what leaves ``I`` from outside ``J`` and receives what leaves
    ``J`` into ``I``, so its communication is at least ``|out[I] - out[J]|``."""
    N = bits.shape[0]
    T = cn_cost.shape[1]
    out = np.zeros((N, T))
    for X in range(N):
        for p in range(bd_ptr[X], bd_ptr[X + 1]):
            u = bd_idx[p]
            c = cn_class[u]
            if (bits[X, c >> 6] >> np.uint64(c & 63)) & np.uint64(1):
                for t in range(T):
                    out[X, t] += cn_cost[u, t]
    return out


@njit(cache=True)
def _tie_ideal(I, bits, rec, counts, caps, strides, digits, cn_class, cn_cost, cn_succ,
               bd_ptr, bd_idx, down_ptr, down_idx, ub, best, rest, room, out, tot, ch_j, ch_t, stamp,
               queue, in_bi, sbits, ok, comm):
    """Fill ``tot[I]``, the least sum of stage loads over chains of ``I`` whose stages all have load
    <= ``ub`` (the optimal max-load), from finished sub-ideals. Only states that can lie on a chain to a
    fewest-device end state are filled: the prefix fits (``best``, the first pass's table, is <= ``ub``)
    and the work left after ``I`` at its cheapest (``rest[I]``) fits the stages that remain
    (``room[s]``; negative for states no end state covers). Returns the pairs used."""
    T = counts.shape[0]
    S = digits.shape[0]
    reachable = False
    for s in range(S):
        if best[I, s] <= ub and rest[I] <= room[s]:
            reachable = True
            break
    if not reachable:
        return 0
    used = 0
    for p in range(bd_ptr[I], bd_ptr[I + 1]):
        in_bi[bd_idx[p]] = True
    head = 0
    tail = push_down(I, I, down_ptr, down_idx, stamp, queue, np.int64(0))  # not a literal: one signature
    while head < tail:
        J = queue[head]
        head += 1
        if not _stage_fits(I, J, rec, counts, caps, ub, ok):
            continue
        used += 1
        tail = push_down(J, I, down_ptr, down_idx, stamp, queue, tail)
        # compute alone bounds the stage's load from below: skip the communication when no state
        # can improve even with that bound
        useful = False
        for t in range(T):
            if not ok[t]:
                continue
            lb = rec[I, t] - rec[J, t] + abs(out[I, t] - out[J, t])
            if lb > ub:
                continue
            st = strides[t]
            for s in range(S):
                if digits[s, t] == 0 or best[I, s] > ub or rest[I] > room[s]:
                    continue
                if tot[J, s - st] + lb < tot[I, s]:
                    useful = True
                    break
            if useful:
                break
        if not useful:
            continue
        _stage_comm(I, J, bits, cn_class, cn_cost, cn_succ, bd_ptr, bd_idx, in_bi, sbits, comm)
        for t in range(T):
            if not ok[t]:
                continue
            load = rec[I, t] - rec[J, t] + comm[t]
            if load > ub:
                continue
            st = strides[t]
            for s in range(S):
                if digits[s, t] == 0 or best[I, s] > ub or rest[I] > room[s]:
                    continue
                total = tot[J, s - st] + load
                if total < tot[I, s]:
                    tot[I, s] = total
                    ch_j[I, s] = J
                    ch_t[I, s] = t
    for p in range(bd_ptr[I], bd_ptr[I + 1]):
        in_bi[bd_idx[p]] = False
    return used


@njit(cache=True)
def _tie_chunk(lo, hi, bits, rec, counts, caps, strides, digits, cn_class, cn_cost, cn_succ,
               bd_ptr, bd_idx, down_ptr, down_idx, ub, best, rest, room, out, tot, ch_j, ch_t, stamp,
               queue, in_bi):
    """:func:`_tie_ideal` for ideals ``lo <= I < hi``, one after another."""
    sbits = np.empty(bits.shape[1], np.uint64)
    ok = np.zeros(counts.shape[0], np.bool_)
    comm = np.zeros(counts.shape[0])
    used = 0
    for I in range(lo, hi):
        used += _tie_ideal(I, bits, rec, counts, caps, strides, digits, cn_class, cn_cost,
                           cn_succ, bd_ptr, bd_idx, down_ptr, down_idx, ub, best, rest, room, out, tot,
                           ch_j, ch_t, stamp[0], queue[0], in_bi[0], sbits, ok, comm)
    return used


@njit(cache=True, parallel=True)
def _tie_chunk_parallel(lo, hi, bits, rec, counts, caps, strides, digits, cn_class, cn_cost,
                        cn_succ, bd_ptr, bd_idx, down_ptr, down_idx, ub, best, rest, room, out, tot,
                        ch_j, ch_t, stamp, queue, in_bi):
    """As :func:`_tie_chunk`, ideals of one size spread over threads (see :func:`_dp_chunk_parallel`)."""
    nt = stamp.shape[0]
    sbits = np.empty((nt, max(bits.shape[1], _PAD // 8)), np.uint64)  # padded: see _dp_chunk_parallel
    ok = np.zeros((nt, max(counts.shape[0], _PAD)), np.bool_)
    comm = np.zeros((nt, max(counts.shape[0], _PAD // 8)))
    used = 0
    for k in prange(hi - lo):
        t = get_thread_id()
        used += _tie_ideal(lo + k, bits, rec, counts, caps, strides, digits, cn_class, cn_cost,
                           cn_succ, bd_ptr, bd_idx, down_ptr, down_idx, ub, best, rest, room, out, tot,
                           ch_j, ch_t, stamp[t], queue[t], in_bi[t], sbits[t], ok[t],
                           comm[t, :counts.shape[0]])
    return used


@njit(cache=True)
def _walk_count(sample, rec, counts, caps, down_ptr, down_idx, ub, stamp, queue):
    """Number of (J, I) pairs the DP would use for each ideal I in ``sample`` (no loads computed)."""
    ok = np.zeros(counts.shape[0], np.bool_)
    total = 0
    for I in sample:
        head = 0
        tail = push_down(I, I, down_ptr, down_idx, stamp, queue, np.int64(0))  # not a literal: one signature
        while head < tail:
            J = queue[head]
            head += 1
            if _stage_fits(I, J, rec, counts, caps, ub, ok):
                total += 1
                tail = push_down(J, I, down_ptr, down_idx, stamp, queue, tail)
    return total


@njit(cache=True)
def _alive_states(alive, work, unplaced, prices, digits, counts, ub, prefix_states, rest_states):
    """Clear ``alive[I, s]`` where ideal ``I`` cannot fit the devices of state ``s`` (for ``s`` in
    ``prefix_states``), or the rest of the graph cannot fit the other ``counts - s`` (for ``s`` in
    ``rest_states``), within load ``ub`` by the priced-work test of :mod:`solvers.bounds`. ``work[I, y]``
    is the prefix sum of ``min_t prices[y, t] compute[t, i]`` over the kinds ``t`` that side may use,
    ``unplaced[I, y]`` the number of items no such kind can take. Every state on a chain of stage
    loads <= ``ub`` passes, so the DP restricted to these states stays exact."""
    N = work.shape[0]
    T = digits.shape[1]
    Y = prices.shape[0]
    full = N - 1
    for side in range(2):
        states = prefix_states if side == 0 else rest_states
        for s in states:
            for y in range(Y):
                have = 0.0
                for t in range(T):
                    d = digits[s, t] if side == 0 else counts[t] - digits[s, t]
                    have += prices[y, t] * d
                total = work[full, y]
                slack = 1e-9 * (total + ub * have)  # prefix-sum round-off
                for I in range(N):
                    if side == 0:
                        bad = unplaced[I, y] > 0 or work[I, y] > ub * have + slack
                    else:
                        bad = unplaced[full, y] > unplaced[I, y] or total - work[I, y] > ub * have + slack
                    if bad:
                        alive[I, s] = False


@njit(cache=True)
def _alive_memory(alive, mem, digits, counts, caps):
    """Clear ``alive[I, s]`` where ideal ``I`` cannot fit the memory of state ``s``'s devices or the rest
    of the graph that of the others."""
    N = mem.shape[0]
    S, T = digits.shape
    mem_total = mem[N - 1]
    slack = 1e-9 * mem_total
    for s in range(S):
        room = 0.0
        room_rest = 0.0
        for t in range(T):
            room += caps[t] * digits[s, t] if digits[s, t] > 0 else 0.0
            room_rest += caps[t] * (counts[t] - digits[s, t]) if counts[t] > digits[s, t] else 0.0
        for I in range(N):
            if mem[I] > room + slack or mem_total - mem[I] > room_rest + slack:
                alive[I, s] = False


# --------------------------------------------------------------------------- driver
@dataclass
class DPRun:
    """A finished (or stopped) DP over one lattice."""

    value: float  # dp[V][counts] (inf if no placement within the bound)
    stages: list[tuple[np.ndarray, int]]  # (items, kind) in pipeline order
    pairs: int
    complete: bool
    table: np.ndarray  # dp[N, S]
    interrupted: bool = False  # a Ctrl-C stopped it (the first pass, or the tie-break pass after it)
    threads: int = 1  # threads the run was allowed
    parallel_ideals: int = 0  # ideals solved by the multi-threaded kernel
    # "done", "fewest devices" (large lattice: no least-sum pass), "off", or why the tie-break pass stopped
    # ("time limit", "interrupted")
    tie_break: str = "off"
    slots: int = 0  # strict states a record held at the end (grown to what the ideals needed)


# Compiling a kernel takes a few tenths of a CPU second, paid on the first run after installation (the
# machine code is cached on disk for later runs), which on a small problem is most of a cold ``place``.
# So a small lattice compiles only what it needs (benchmarks/README_footprint.md):
# * a kernel that calls no other kernel runs as numba's pure-Python original (``py_func``, the very same
#   code) when its loops are at most _PYTHON_WORK steps: milliseconds, where compiling costs 0.1-0.3 s;
# * a table of at most _SMALL_LATTICE ideals is filled by calling the per-ideal kernel from Python, which
#   costs microseconds per ideal, so the chunk kernels (_dp_chunk, _tie_chunk) are compiled only for
#   larger lattices, and the multi-threaded ones only where threads are used (run_dp).
_PYTHON_WORK = 30_000
_SMALL_LATTICE = 2_000


def _leaf(kernel, work: int):
    """``kernel`` (one that calls no other kernel), or its pure-Python original when ``work`` (its loop
    steps) is small enough to run uncompiled faster than it compiles."""
    return getattr(kernel, "py_func", kernel) if work <= _PYTHON_WORK else kernel


def _ideal_by_ideal(kernel, lo: int, hi: int, head: tuple, rows: tuple, scratch: tuple) -> int:
    """What ``_dp_chunk`` / ``_tie_chunk`` do, the loop in Python: ``kernel(I, *head, *rows[.][0],
    *scratch)`` (:func:`_dp_ideal` or :func:`_tie_ideal`) for ideals ``lo <= I < hi``, with row 0 of
    each per-thread array in ``rows``. Returns the pairs used."""
    mine = tuple(r[0] for r in rows)
    used = 0
    for I in range(lo, hi):
        used += kernel(I, *head, *mine, *scratch)
    return used


def _sweep(N: int, layer_end: np.ndarray, nt: int, serial, parallel, deadline: float | None,
           progress, watch=None) -> tuple[int, int, bool, bool]:
    """Fill a table ideal by ideal (``serial(lo, hi)`` / ``parallel(lo, hi)`` return the pairs used) in
    chunks sized to about :data:`_CHUNK_SECONDS`; ``watch(pairs so far)`` returning true stops it as the
    deadline does. Returns (pairs, ideals done by the parallel kernel, complete, interrupted)."""
    pairs = 0
    parallel_ideals = 0
    lo, step = 1, 16
    while lo < N:
        hi = min(N, lo + step)
        t0 = time.perf_counter()
        try:
            if nt > 1 and layer_end[lo] - lo >= 4 * nt:
                hi = min(hi, int(layer_end[lo]))
                pairs += parallel(lo, hi)
                parallel_ideals += hi - lo
            else:
                pairs += serial(lo, hi)
            if progress is not None:
                progress(hi / N)
        except KeyboardInterrupt:  # Ctrl-C arrives between chunks: stop and report what we have
            return pairs, parallel_ideals, False, True
        dt = time.perf_counter() - t0
        lo = hi
        if lo < N and ((deadline is not None and time.perf_counter() > deadline)
                       or (watch is not None and watch(pairs))):
            return pairs, parallel_ideals, False, False
        # grow (at most 2x: later ideals are larger and cost more) or shrink chunks so that a call
        # takes about _CHUNK_SECONDS, and never much more than half the time left
        target = _CHUNK_SECONDS
        if deadline is not None:
            target = max(0.01, min(target, 0.5 * (deadline - time.perf_counter())))
        # capped: larger ideals cost far more than the small ones a chunk was sized on, and a call
        # costs only tens of microseconds
        step = max(1, min(_MAX_CHUNK, int(step * min(2.0, target / max(dt, 1e-6)))))
    return pairs, parallel_ideals, True, False


def _trace(prob: DPProblem, lattice: IdealLattice, ch_j, ch_t, full: int) -> list[tuple[np.ndarray, int]]:
    """The stages of the chain the choice tables record for the whole graph, in pipeline order."""
    stages: list[tuple[np.ndarray, int]] = []
    I, s = lattice.num_ideals - 1, full
    while I != 0:
        J, t = int(ch_j[I, s]), int(ch_t[I, s])
        items = np.setdiff1d(lattice.members(I), lattice.members(J), assume_unique=True)
        stages.append((items, t))
        s -= int(prob.strides[t])
        I = J
    stages.reverse()
    return stages


def _fewest_devices(prob: DPProblem, last_row: np.ndarray, ub: float) -> np.ndarray:
    """The end states of fewest devices: device vectors ``c`` (state numbers) with ``dp[V][c] <= ub``
    and the smallest number of devices among those."""
    fits = np.flatnonzero(last_row <= ub)
    used = prob.digits[fits].sum(axis=1)
    return fits[used == used.min()]


def _room(prob: DPProblem, lattice: IdealLattice, ends: np.ndarray,
          ub: float) -> tuple[np.ndarray, np.ndarray]:
    """For the tie-break pass: ``rest[I]``, the work after ideal ``I`` with every item at its cheapest
    kind, and ``room[s]``, the most work the stages after a state ``s`` can take at load ``ub``: a chain
    from ``(I, s)`` to an end state ``c >= s`` adds one stage per device of ``c - s``. States below no
    end state get -1 (unreachable)."""
    active = prob.counts > 0
    cheapest = np.where(active[:, None], prob.item_compute, np.inf).min(axis=0)
    cheapest = np.where(np.isfinite(cheapest), cheapest, 0.0)  # unsupported everywhere: prepare() refused
    work = np.zeros(lattice.num_ideals)
    if lattice.num_ideals > 1:
        work[1:] = cheapest[lattice.added[1:]]
        work = _leaf(_prefix_sum, lattice.num_ideals)(lattice.parent, work)
    total = work[-1]
    rest = total - work
    k = int(prob.digits[ends[0]].sum())  # every end state has the same number of devices
    below = (prob.digits[:, None, :] <= prob.digits[ends][None, :, :]).all(axis=2).any(axis=1)
    # slack for the prefix sums' round-off
    room = np.where(below, ub * (k - prob.digits.sum(axis=1)) + 1e-9 * (abs(total) + ub), -1.0)
    return rest, room


@njit(cache=True)
def _prefix_sum(parent, added_value):
    """``out[i] = out[parent[i]] + added_value[i]`` along the lattice's spanning tree."""
    out = added_value.copy()
    for i in range(1, parent.shape[0]):
        out[i] += out[parent[i]]
    return out


# Above this many ideals the tie-break keeps only its free part (fewest devices): its second pass (least
# sum of loads) costs 1.8-2.5x the first pass's time on GNMT and InceptionV3 (benchmarks/README.md).
TIE_BREAK_SUM_MAX_IDEALS = 5_000


def run_dp(prob: DPProblem, lattice: IdealLattice, *, ub: float = math.inf, deadline: float | None = None,
           progress=None, threads: int | None = None, tie_break: bool = False,
           prices: np.ndarray | None = None, floor: float = 0.0, watch=None) -> DPRun:
    """Run the DP over ``lattice`` keeping only stages whose load is at most ``ub``, on ``threads``
    threads (default: the cores other work leaves free, :func:`solvers._cpu.idle_cores`; ideals of one
    size are independent).

    ``tie_break``: among the placements of optimal max-load, return one with the fewest stages and
    then (up to :data:`TIE_BREAK_SUM_MAX_IDEALS` ideals) the smallest sum of stage loads (a second, exact
    pass; see :func:`_tie_ideal`). If that pass
    is stopped (time limit, Ctrl-C) the first pass's optimal placement is returned; ``DPRun.tie_break``
    says which.

    ``prices`` (``[Y, T]``, non-negative, e.g. the work LP's duals of :mod:`solvers.bounds`) with a
    finite ``ub`` drop the device-count states whose prefix or remainder cannot fit within ``ub``
    (:func:`_alive_states`). ``floor``, a proven lower bound on the optimum, is the load of the empty
    ideal: values below it are equivalent for the final max, so the answer is ``max(optimum, floor)``.

    ``watch``, if given, is called after every chunk of the first pass with the pairs used so far; when it
    returns true the run stops there (incomplete), as at the deadline: ``auto`` uses it to give up a run
    that its progress shows will not finish in time."""
    N = lattice.num_ideals
    S = prob.digits.shape[0]
    comp, unsup, mem, size = _leaf(_prefix, N * prob.counts.size)(lattice.parent, lattice.added,
                                                               prob.item_compute, prob.item_memory)
    alive = _states_within(prob, lattice, mem, ub, prices)
    # the strict states of each finished ideal (_close_row): the only ones the walk extends
    rec = _records(comp, unsup, mem, lattice.down_ptr, min(S, _STRICT_SLOTS), floor)
    # each Hasse edge's sub-ideal and the item it removes, side by side (one cache line for both)
    down = np.ascontiguousarray(np.stack([lattice.down_idx, _edge_items(lattice)], axis=1))
    own_ptr, own_idx, pred_ptr, pred_idx = _item_nodes(prob)
    sw_ptr, sw_word, sw_mask = _sparse_words(prob.cn_succ)
    nt = _thread_count(threads, N)
    dp = np.full((N, S), np.inf)
    dp[0, :] = floor
    # the choice tables: the sub-ideal and the kind of the last stage per state (narrow types: with the
    # table they are most of the DP's memory: 13 bytes a state, where two int64 tables made it 24)
    ch_j = np.full((N, S), -1, np.int32 if N < 2**31 else np.int64)
    ch_t = np.full((N, S), -1, np.int8 if prob.counts.size < 128 else np.int64)
    stamp = np.full((nt, N), -1, np.int64)
    queue = np.empty((nt, N), np.int64)
    cq = np.empty((nt, N, prob.counts.size))
    layer_end = np.searchsorted(size, size, side="right")  # first ideal of the next size
    if nt > 1:
        set_num_threads(nt)
    head = [lattice.bits, rec, prob.counts, prob.caps, prob.strides, prob.digits, prob.cn_class,
            prob.cn_cost, sw_ptr, sw_word, sw_mask, down, own_ptr,
            own_idx, pred_ptr, pred_idx, float(ub), alive, dp, ch_j, ch_t]
    rows = (stamp, queue, cq, np.empty((nt, N), np.int64), np.empty((nt, N), np.int64),
            np.zeros((nt, N), np.bool_), np.empty((nt, N), np.int64),
            np.empty((nt, N, lattice.words), np.uint64))
    scratch = (np.empty(lattice.words, np.uint64), np.zeros(prob.counts.size, np.bool_), False,
               np.zeros(2, np.int64))
    P = _states_at(prob.counts.size)  # a record's head (_records) ends with its number of strict states

    def widened(used: int, lo: int, hi: int) -> int:
        # after each chunk: records that overflowed get room (the kernels read head[1] from now on)
        nonlocal rec
        spilled = lo + np.flatnonzero(rec[lo:hi, P - 1] < 0)
        if spilled.size:
            rec = head[1] = _widen(rec, dp, ch_j, ch_t, prob.digits, prob.strides, spilled)
        return used

    pairs, parallel_ideals, complete, interrupted = _sweep(
        N, layer_end, nt, (lambda lo, hi: widened(_dp_chunk(lo, hi, *head, *rows), lo, hi))
        if N > _SMALL_LATTICE
        else (lambda lo, hi: widened(_ideal_by_ideal(_dp_ideal, lo, hi, head, rows, scratch), lo, hi)),
        lambda lo, hi: widened(_dp_chunk_parallel(lo, hi, *head, *rows), lo, hi), deadline, progress, watch)
    full = int(np.dot(prob.counts, prob.strides))
    value = float(dp[N - 1, full]) if complete else math.inf
    stages: list[tuple[np.ndarray, int]] = []
    tie = "off"
    if complete and math.isfinite(value):
        stages = _trace(prob, lattice, ch_j, ch_t, full)
        if tie_break:
            # one stage's load comes out of different prefix-sum differences depending on the pair, so
            # two chains of equal max-load can differ in the last bits: ties are up to that round-off
            tie_ub = value * (1 + _TIE_ROUND_OFF)
            ends = _fewest_devices(prob, dp[N - 1], tie_ub)
        if tie_break and N > TIE_BREAK_SUM_MAX_IDEALS:
            # the fewest devices come free from the first pass's table; the least-sum pass would cost
            # about as much again as the first pass on a large lattice, so it is skipped there
            stages = _trace(prob, lattice, ch_j, ch_t, int(ends[np.argmin(dp[N - 1, ends])]))
            tie = "fewest devices"
        elif tie_break:
            rest, room = _room(prob, lattice, ends, tie_ub)
            tot = np.full((N, S), np.inf)
            tot[0, :] = 0.0
            ch_j.fill(-1)
            ch_t.fill(-1)
            stamp.fill(-1)  # the first pass stamped with the same owners
            bd_ptr, bd_idx = _boundaries(lattice.bits, prob.cn_class, prob.cn_succ)
            in_bi = np.zeros((nt, prob.cn_class.size), np.bool_)
            out = _leaf(_out_comm, bd_idx.size * prob.counts.size)(
                lattice.bits, prob.cn_class, prob.cn_cost, prob.cn_succ, bd_ptr, bd_idx)
            thead = (lattice.bits, rec, prob.counts, prob.caps, prob.strides, prob.digits,
                     prob.cn_class, prob.cn_cost, prob.cn_succ, bd_ptr, bd_idx, lattice.down_ptr,
                     lattice.down_idx, tie_ub, dp, rest, room, out, tot, ch_j, ch_t)
            targs = (*thead, stamp, queue, in_bi)
            tscratch = (np.empty(lattice.words, np.uint64), np.zeros(prob.counts.size, np.bool_),
                        np.zeros(prob.counts.size))
            p2, par2, done, stopped = _sweep(
                N, layer_end, nt, (lambda lo, hi: _tie_chunk(lo, hi, *targs)) if N > _SMALL_LATTICE
                else (lambda lo, hi: _ideal_by_ideal(_tie_ideal, lo, hi, thead, (stamp, queue, in_bi),
                                                     tscratch)),
                lambda lo, hi: _tie_chunk_parallel(lo, hi, *targs), deadline, None)
            pairs += p2
            parallel_ideals += par2
            end = int(ends[np.argmin(tot[N - 1, ends])])
            if done and math.isfinite(tot[N - 1, end]):
                stages = _trace(prob, lattice, ch_j, ch_t, end)
                tie = "done"
            else:
                tie = "interrupted" if stopped else "time limit"
    # a Ctrl-C the tie-break pass took counts too: the optimum stands, and the caller must stop
    return DPRun(value, stages, pairs, complete, dp, interrupted or tie == "interrupted", nt, parallel_ideals,
                 tie, (rec.shape[1] - P) // 2)


def _thread_count(threads: int | None, N: int) -> int:
    """Threads :func:`run_dp` uses on a lattice of ``N`` ideals when allowed ``threads``."""
    if N < 20_000:
        return 1  # a small lattice is done before threads pay for themselves
    # numba's pool size is fixed at start-up (config); get_num_threads() is only the last setting
    if threads is None:  # the default: the cores other work leaves free now (solvers._cpu)
        from ._cpu import idle_cores

        threads = idle_cores()
    return max(1, min(int(threads), config.NUMBA_NUM_THREADS))


def _states_within(prob: DPProblem, lattice: IdealLattice, mem: np.ndarray, ub: float,
                   prices: np.ndarray | None) -> np.ndarray:
    """The ``alive`` mask of :func:`run_dp` (all states when there are no prices or no finite bound).

    A prefix on the devices of state ``s`` may use only the kinds ``s`` has, and the rest only the kinds
    left over: so the priced work of each side is taken over those kinds alone, once per set of kinds
    (a state with CPUs only then needs the CPUs' own time, not the accelerators'; on Llama graphs over
    a100, t4 and CPUs that removed the CPU-only states, a third of those alive)."""
    N, S = lattice.num_ideals, prob.digits.shape[0]
    if prices is None or not math.isfinite(ub):
        return np.ones((N, S), np.bool_)
    prices = np.atleast_2d(np.asarray(prices, dtype=np.float64))
    T = prob.counts.size
    usable = ((prob.counts[:, None] > 0) & np.isfinite(prob.item_compute)
              & (prob.item_memory[None, :] <= prob.caps[:, None]))
    priced = prices[:, :, None] * np.where(usable, prob.item_compute, 0.0)[None]  # [Y, T, C]
    bit = 1 << np.arange(T)
    kinds_of = (prob.digits > 0) @ bit  # the kinds a state's prefix may use, as a bit set
    kinds_rest = ((prob.counts[None, :] - prob.digits) > 0) @ bit
    alive = np.ones((N, S), np.bool_)
    for kinds in np.union1d(kinds_of, kinds_rest):
        mine = (kinds & bit) > 0
        cost = np.where((usable & mine[:, None])[None], priced, np.inf).min(axis=1)  # [Y, C]
        work, unplaced, _, _ = _leaf(_prefix, N * cost.shape[0])(lattice.parent, lattice.added, cost,
                                                                 prob.item_memory)
        _alive_states(alive, work, unplaced, prices, prob.digits, prob.counts, float(ub),
                      np.flatnonzero(kinds_of == kinds), np.flatnonzero(kinds_rest == kinds))
    _alive_memory(alive, mem, prob.digits, prob.counts, prob.caps)
    return alive


# Kernel cost per pair used, measured on the reference workloads (about 140 ns on the 2-core
# development machine); used only to estimate, with a safety factor.
SECONDS_PER_PAIR = 2.5e-7
# What each thread beyond the first adds: two threads ran 1.7-1.8x as fast as one (InceptionV3
# training, Llama-8 and Llama-16 training over a100:4,t4:4,cpu:8; benchmarks/README_llm.md)
_THREAD_GAIN = 0.7


@dataclass(frozen=True)
class Estimate:
    """What the exact DP over ``ideals`` would cost, before running it."""

    ideals: int
    pairs: float  # estimated pairs the pruned walk uses (or an upper bound: see estimate())
    seconds: float
    memory_bytes: float


def estimate(prob: DPProblem, lattice: IdealLattice, ub: float, *, sample: int = 300,
             seed: int = 0, seconds_per_pair: float | None = None,
             affordable: float | None = None, threads: int | None = None) -> Estimate:
    """Estimate the DP's pairs, time and memory by walking the sub-ideals of a random sample of ideals.
    The time is for :func:`run_dp` allowed ``threads`` (default: numba's thread count).

    ``affordable``: if even every pair of ideals (the most the walk can use) would take at most this many
    seconds, that upper bound is returned without sampling (on a small lattice the walk's kernel would
    take longer to compile than the DP takes to run)."""
    N = lattice.num_ideals
    # a given time per pair is taken as it is (a measurement); the default one gains from threads
    spp = seconds_per_pair or SECONDS_PER_PAIR / (1 + _THREAD_GAIN * (_thread_count(threads, N) - 1))
    S = prob.digits.shape[0]
    W = lattice.words
    avg_boundary = max(1, prob.cn_class.size // 4)
    # per state: the table (8 bytes), the two choice tables (4 + 1), the alive mask (1) and the tie-break
    # pass's sums (8; only on small lattices, counted anyway); per ideal: its bits, boundary, record (at
    # its first width: _widen grows it; on Llama-16 training over three kinds from 14 to 19 slots, 80 bytes)
    memory = N * (S * 22 + W * 8 + 8 * avg_boundary + 64 + 8 * (8 + 2 * min(S, _STRICT_SLOTS))) \
        + lattice.down_idx.size * 16
    all_pairs = N * (N - 1) / 2
    if affordable is not None and all_pairs * spp <= affordable:
        return Estimate(N, all_pairs, all_pairs * spp, float(memory))
    comp, unsup, mem, _ = _leaf(_prefix, N * prob.counts.size)(lattice.parent, lattice.added,
                                                            prob.item_compute, prob.item_memory)
    rng = np.random.default_rng(seed)
    ids = np.arange(N, dtype=np.int64) if N <= sample else np.sort(rng.choice(N, sample, replace=False))
    stamp = np.full(N, -1, np.int64)
    queue = np.empty(N, np.int64)
    rec = _records(comp, unsup, mem, lattice.down_ptr, 1, 0.0)  # the walk reads only the stage sums
    used = _walk_count(ids, rec, prob.counts, prob.caps, lattice.down_ptr, lattice.down_idx, float(ub),
                       stamp, queue)
    pairs = used * N / max(1, ids.size)
    return Estimate(N, pairs, pairs * spp, float(memory))


def stages_to_assignment(prob: DPProblem, cluster: Cluster, stages) -> np.ndarray:
    """Device number per node from DP stages (each kind's devices used in pipeline order)."""
    first = np.concatenate([[0], np.cumsum(prob.counts)[:-1]])
    nxt = np.zeros(prob.counts.size, np.int64)
    item_dev = np.full(prob.items.num_classes, -1, np.int64)
    for items, t in stages:
        item_dev[items] = first[t] + nxt[t]
        nxt[t] += 1
    return item_dev[prob.items.node_class]


def topological_orders(items: ClassGraph) -> list[np.ndarray]:
    """A few different topological orders of the item graph (depth-first and breadth-first)."""
    C = items.num_classes
    # items are numbered depth-first by contract()
    return [np.arange(C), topological_order(C, items.src, items.dst, policy="queue")]


def lower_bound(prob: DPProblem) -> float:
    """A quick lower bound: the largest item's cheapest compute, and the total cheapest work spread
    evenly (ignoring communication)."""
    active = prob.counts > 0
    best = np.where(active[:, None], prob.item_compute, np.inf).min(axis=0)
    speed = prob.counts[active].sum()
    return float(max(best.max(initial=0.0), best.sum() / max(1, speed)))


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Minimum max-load contiguous placement, exact. Among the placements of that max-load it returns
    one with the fewest stages (devices used), then, on lattices of up to
    :data:`TIE_BREAK_SUM_MAX_IDEALS` ideals, the smallest sum of stage loads.

    ``options.raw`` may hold ``max_ideals`` (default :data:`DEFAULT_MAX_IDEALS`),
    ``prune`` (default ``True``; ``False`` walks every ideal pair, for measurement) and ``tie_break``
    (default ``True``; ``False`` returns the first optimum found, skipping the second pass).
    """
    options = options or SolveOptions()
    if options.objective != "max-load":
        raise InputError(f"the dp solver minimises max-load; objective {options.objective!r} needs an "
                         f"integer program (solver='ip')")
    t_start = time.perf_counter()
    deadline = None if options.time_limit is None else t_start + options.time_limit
    max_ideals = int(options.raw.get("max_ideals", DEFAULT_MAX_IDEALS))
    try:
        prob = prepare(graph, cluster)
    except InfeasibleError as e:
        return Solution(None, math.inf, Status.INFEASIBLE, "dp", message=str(e),
                        time=time.perf_counter() - t_start)
    items = prob.items

    # Upper bound: the same DP over the prefixes of a few topological orders (cheap: O(C^2) pairs).
    best_chain, stop = None, ""
    for order in topological_orders(items):
        run = run_dp(prob, chain_ideals(items.num_classes, order))
        if run.complete and (best_chain is None or run.value < best_chain.value):
            best_chain = run
        if run.interrupted:  # Ctrl-C during an order's run: what the orders gave so far, no lattice
            stop = "interrupted"
            break
    stats = {"items": items.num_classes, "zero_cost_merged": items.merged_zero_cost,
             "chain_bound": None if best_chain is None else best_chain.value}
    run = None
    if not stop:
        try:
            lattice = enumerate_ideals(items.num_classes, items.src, items.dst, max_ideals=max_ideals,
                                       deadline=deadline)
        except ProblemTooLargeError as e:
            stop = f"{e}; the exact DP cannot run (solver='auto' coarsens instead)"
        else:
            ub = best_chain.value * (1 + 1e-9) if best_chain and math.isfinite(best_chain.value) else math.inf
            if not options.raw.get("prune", True):
                ub = math.inf
            run = run_dp(prob, lattice, ub=ub, deadline=deadline, progress=options.progress,
                         threads=options.threads, tie_break=bool(options.raw.get("tie_break", True)))
            stats.update(ideals=lattice.num_ideals, pairs_used=run.pairs, tie_break=run.tie_break,
                         threads=run.threads)
            stop = "interrupted" if run.interrupted else "time limit reached"
    elapsed = time.perf_counter() - t_start
    if run is None or not run.complete:
        lb = lower_bound(prob)
        if best_chain is not None and math.isfinite(best_chain.value):
            a = stages_to_assignment(prob, cluster, best_chain.stages)
            return Solution(a, best_chain.value, Status.FEASIBLE, "dp", bound=lb,
                            gap=(best_chain.value - lb) / best_chain.value if best_chain.value else 0.0,
                            time=elapsed, message=f"{stop}; best placement over a few topological orders "
                            f"returned (not proven optimal)", stats=stats)
        return Solution(None, math.inf, Status.STOPPED, "dp", bound=lb, time=elapsed,
                        message=f"{stop} before any placement was found", stats=stats)
    if not math.isfinite(run.value):
        return Solution(None, math.inf, Status.INFEASIBLE, "dp", time=elapsed, stats=stats,
                        message=none_fits(graph, cluster, "contiguous placement",
                                          memory_detail=" (every node fits somewhere, but not all together)"))
    a = stages_to_assignment(prob, cluster, run.stages)
    mismatch = model_mismatch(graph, cluster, a, run.value)
    if mismatch:
        return mismatch_solution("dp", graph, cluster, a, mismatch, lower_bound(prob), elapsed, stats)
    # a Ctrl-C in the tie-break pass: the optimum is proven all the same; the message tells the caller
    msg = ("interrupted in the tie-break pass: an optimum, ties among optima not broken" if run.interrupted
           else "")
    return Solution(a, run.value, Status.OPTIMAL, "dp", bound=run.value, gap=0.0, time=elapsed, stats=stats,
                    message=msg)


def model_mismatch(graph: OpGraph, cluster: Cluster, assignment: np.ndarray, value: float) -> str:
    """Why the evaluator disagrees with the DP's ``value`` of ``assignment`` ('' when it agrees). The DP
    models the evaluator exactly; a disagreement is a bug, and must never be reported as optimal."""
    ev = evaluate(graph, cluster, assignment)
    if not ev.valid:
        return "the DP's placement is invalid: " + "; ".join(ev.problems[:3])
    if abs(ev.max_load - value) > BOUND_ROUND_OFF * max(abs(value), 1e-12):
        return f"the DP's value {value:.9g} disagrees with the evaluator's {ev.max_load:.9g}"
    return ""


def mismatch_solution(solver: str, graph: OpGraph, cluster: Cluster, assignment: np.ndarray, reason: str,
                      bound: float, elapsed: float, stats: dict) -> Solution:
    """What a solver returns when its exact model and the evaluator disagree: the evaluator's value
    of the placement, the model-free ``bound`` and never ``optimal`` (``error`` if it is invalid)."""
    ev = evaluate(graph, cluster, assignment)
    stats = {**stats, "model_mismatch": reason}
    if not ev.valid:
        return Solution(None, math.inf, Status.ERROR, solver, time=elapsed, message=reason, stats=stats)
    checked = check_bound(bound, ev.max_load)
    return Solution(assignment, ev.max_load, Status.FEASIBLE, solver, bound=checked.bound, gap=checked.gap,
                    time=elapsed, message=reason + "; not claimed optimal", stats=stats)


@dataclass(frozen=True)
class Curve:
    """Best max-load for every allocation: ``values[counts]`` is the optimum when the job may use
    ``counts[t]`` devices of kind ``t`` (any ``counts`` up to the cluster's), ``inf`` if infeasible."""

    kinds: tuple[str, ...]
    values: dict[tuple[int, ...], float]
    time: float


def curve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Curve:
    """The whole throughput curve from **one** DP run: its table's last row holds the optimum for every
    vector of devices used per kind. Pruning is off (a bound for the full cluster would cut the stages
    that allocations with fewer devices need), so this costs one unpruned DP."""
    options = options or SolveOptions()
    t0 = time.perf_counter()
    kinds = tuple(k.name for k in cluster.kinds)
    try:
        prob = prepare(graph, cluster)
    except InfeasibleError:
        shape = [k.count + 1 for k in cluster.kinds]
        return Curve(kinds, {tuple(int(x) for x in c): math.inf for c in np.ndindex(*shape)},
                     time.perf_counter() - t0)
    items = prob.items
    max_ideals = int(options.raw.get("max_ideals", DEFAULT_MAX_IDEALS))
    lattice = enumerate_ideals(items.num_classes, items.src, items.dst, max_ideals=max_ideals)
    deadline = None if options.time_limit is None else t0 + options.time_limit
    run = run_dp(prob, lattice, ub=math.inf, deadline=deadline, progress=options.progress,
                 threads=options.threads)
    if run.interrupted:  # Ctrl-C: a curve has no best-so-far to give, and it is not "too expensive"
        raise KeyboardInterrupt
    if not run.complete:
        raise ProblemTooLargeError("the throughput curve's DP did not finish within the time limit")
    last = run.table[lattice.num_ideals - 1]
    values = {tuple(int(x) for x in prob.digits[s]): float(last[s]) for s in range(prob.digits.shape[0])}
    return Curve(kinds, values, time.perf_counter() - t0)
