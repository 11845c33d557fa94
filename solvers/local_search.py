"""Baseline: local search — random restarts, then best single-item moves until none improves.

Items are the colocation classes (a node without one is an item of its own); a placement puts every
item on one device of any kind that runs it. From a random start, each step makes the single move
(one item to another device) that lowers the objective most, until no move lowers it. The objective
is lexicographic: memory over capacity first (so a start that does not fit is pushed towards one
that does), then the max-load, then the sum of squared loads (which lets the search walk along
plateaus of equal max-load instead of stopping on them). Restarts keep the best valid placement.

The search is not restricted to contiguous placements, so it may beat the contiguous ``dp`` optimum;
it can never beat the non-contiguous optimum. Unlike the reference's local search (accelerators only,
memory ignored), it uses every device and respects memory.

Options: ``options.seed`` seeds the starts; ``options.raw["restarts"]`` (default 10) is the number of
random starts; ``options.warm_start`` (an assignment), if given, is searched from first;
``options.time_limit`` stops between steps (the best placement so far is returned).

Each candidate move is priced incrementally in O((|item| + |its predecessors|) x devices): only the
moved nodes and the nodes feeding them change what they pay. The kernel is compiled with numba.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from graphs.contract import colocation_items
from graphs.evaluate import check_assignment
from graphs.model import Cluster, OpGraph
from graphs.parallel import usable_memory

from ._common import finish, no_placement, require_objective
from .base import Solution, SolveOptions, Status

__all__ = ["solve", "MoveProblem", "move_problem", "descend", "DEFAULT_RESTARTS"]

DEFAULT_RESTARTS = 10
_STEPS_PER_CALL = 64  # descent steps per kernel call, so that time limits are checked often


@dataclass(frozen=True, eq=False)
class MoveProblem:
    """Arrays the move kernel works on (items = colocation classes)."""

    node_item: np.ndarray  # [n]
    num_items: int
    dkind: np.ndarray  # [D] kind of each device
    caps: np.ndarray  # [D] memory capacity (inf = unlimited)
    item_compute: np.ndarray  # [T, C] (inf = unsupported)
    item_memory: np.ndarray  # [C]
    node_comm: np.ndarray  # [n, T] cost of a node's output per kind (0 for kinds that pay none)
    succ_ptr: np.ndarray  # successors of node u: succ_idx[succ_ptr[u]:succ_ptr[u+1]]
    succ_idx: np.ndarray
    touch_ptr: np.ndarray  # nodes whose payments change when item x moves:
    touch_node: np.ndarray  # touch_node[touch_ptr[x]:touch_ptr[x+1]], with
    touch_succ: np.ndarray  # how many of their successors are in x and
    touch_member: np.ndarray  # whether they are in x themselves
    allowed: np.ndarray  # [C, D] bool: the device's kind runs the item


def move_problem(graph: OpGraph, cluster: Cluster) -> MoveProblem:
    """Build the move kernel's arrays for ``graph`` on ``cluster``."""
    cls, C = colocation_items(graph)
    n = graph.num_nodes
    compute, comm = graph.costs_for(cluster)
    T = len(cluster.kinds)
    dkind = cluster.device_kind()
    caps = np.array([usable_memory(cluster.kinds[t].memory) for t in dkind.tolist()])
    item_compute = np.zeros((T, C))
    for t in range(T):
        np.add.at(item_compute[t], cls, compute[t])
    item_memory = np.bincount(cls, weights=graph.memory, minlength=C) if n else np.zeros(C)
    allowed = np.isfinite(item_compute[dkind]).T.copy()  # [C, D]

    order = np.argsort(graph.src, kind="stable")
    succ_ptr = np.concatenate([[0], np.cumsum(np.bincount(graph.src, minlength=n))]).astype(np.int64)
    succ_idx = graph.dst[order].astype(np.int64)

    # touch lists: for every item x, its member nodes and every node with a successor in x
    touch: dict[tuple[int, int], list[int]] = {}
    for u in range(n):
        touch[(int(cls[u]), u)] = [0, 1]
    for s, d in zip(graph.src.tolist(), graph.dst.tolist()):
        key = (int(cls[d]), s)
        entry = touch.setdefault(key, [0, 0])
        entry[0] += 1
    keys = sorted(touch)
    touch_item = np.array([k[0] for k in keys], dtype=np.int64)
    touch_node = np.array([k[1] for k in keys], dtype=np.int64)
    touch_succ = np.array([touch[k][0] for k in keys], dtype=np.int64)
    touch_member = np.array([touch[k][1] for k in keys], dtype=np.bool_)
    touch_ptr = np.concatenate([[0], np.cumsum(np.bincount(touch_item, minlength=C))]).astype(np.int64)
    return MoveProblem(
        node_item=cls, num_items=C, dkind=dkind.astype(np.int64), caps=caps, item_compute=item_compute,
        item_memory=item_memory, node_comm=np.ascontiguousarray(comm.T), succ_ptr=succ_ptr,
        succ_idx=succ_idx, touch_ptr=touch_ptr, touch_node=touch_node, touch_succ=touch_succ,
        touch_member=touch_member, allowed=allowed)


# --------------------------------------------------------------------------- kernels
@njit(cache=True)
def _pay(u, du, cnt, dkind, node_comm, out):
    """Add what node ``u`` (on device ``du``, with ``cnt[d]`` successors on each device) makes every
    device pay to ``out`` (sign +1) — the evaluator's rule."""
    D = cnt.shape[0]
    sends = False
    for d in range(D):
        if d != du and cnt[d] > 0:
            sends = True
            out[d] += node_comm[u, dkind[d]]
    if sends:
        out[du] += node_comm[u, dkind[du]]


@njit(cache=True)
def _unpay(u, du, cnt, dkind, node_comm, out):
    D = cnt.shape[0]
    sends = False
    for d in range(D):
        if d != du and cnt[d] > 0:
            sends = True
            out[d] -= node_comm[u, dkind[d]]
    if sends:
        out[du] -= node_comm[u, dkind[du]]


@njit(cache=True)
def _state(item_dev, node_item, dkind, caps, item_compute, item_memory, node_comm, succ_ptr, succ_idx):
    """Successor counts per (node, device), loads and memory of a placement of items."""
    n = node_item.shape[0]
    D = dkind.shape[0]
    C = item_dev.shape[0]
    cnt = np.zeros((n, D), np.int64)
    for u in range(n):
        for p in range(succ_ptr[u], succ_ptr[u + 1]):
            cnt[u, item_dev[node_item[succ_idx[p]]]] += 1
    load = np.zeros(D)
    mem = np.zeros(D)
    for x in range(C):
        d = item_dev[x]
        load[d] += item_compute[dkind[d], x]
        mem[d] += item_memory[x]
    for u in range(n):
        _pay(u, item_dev[node_item[u]], cnt[u], dkind, node_comm, load)
    return cnt, load, mem


@njit(cache=True)
def _overflow(mem, caps):
    s = 0.0
    for d in range(mem.shape[0]):
        if mem[d] > caps[d]:
            s += mem[d] - caps[d]
    return s


@njit(cache=True)
def _descend(item_dev, node_item, dkind, caps, item_compute, item_memory, node_comm, succ_ptr, succ_idx,
             touch_ptr, touch_node, touch_succ, touch_member, allowed, cnt, load, mem, max_steps,
             repair_only):
    """Up to ``max_steps`` best-improvement moves; returns (steps made, stopped at a local optimum).
    ``repair_only``: consider only moves that lower the memory overflow (a repair pass)."""
    C = item_dev.shape[0]
    D = dkind.shape[0]
    delta = np.zeros(D)
    newc = np.zeros(D, np.int64)
    steps = 0
    while steps < max_steps:
        cur_over = _overflow(mem, caps)
        cur_max = 0.0
        cur_sq = 0.0
        for d in range(D):
            cur_max = max(cur_max, load[d])
            cur_sq += load[d] * load[d]
        best_over, best_max, best_sq = cur_over, cur_max, cur_sq
        best_x, best_b = -1, -1
        for x in range(C):
            a = item_dev[x]
            for b in range(D):
                if b == a or not allowed[x, b]:
                    continue
                # memory first: cheap, and decides repair moves
                ma = mem[a] - item_memory[x]
                mb = mem[b] + item_memory[x]
                over = cur_over
                over -= max(0.0, mem[a] - caps[a]) + max(0.0, mem[b] - caps[b])
                over += max(0.0, ma - caps[a]) + max(0.0, mb - caps[b])
                if over < 0.0:
                    over = 0.0
                if repair_only and not over < cur_over - 1e-9 * (1.0 + cur_over):
                    continue
                if over > best_over + 1e-9 * (1.0 + best_over):
                    continue
                for d in range(D):
                    delta[d] = 0.0
                delta[a] -= item_compute[dkind[a], x]
                delta[b] += item_compute[dkind[b], x]
                for p in range(touch_ptr[x], touch_ptr[x + 1]):
                    u = touch_node[p]
                    du = item_dev[node_item[u]]
                    _unpay(u, du, cnt[u], dkind, node_comm, delta)
                    for d in range(D):
                        newc[d] = cnt[u, d]
                    newc[a] -= touch_succ[p]
                    newc[b] += touch_succ[p]
                    _pay(u, b if touch_member[p] else du, newc, dkind, node_comm, delta)
                mx = 0.0
                sq = 0.0
                for d in range(D):
                    v = load[d] + delta[d]
                    mx = max(mx, v)
                    sq += v * v
                better = False
                if over < best_over - 1e-9 * (1.0 + best_over):
                    better = True
                elif over <= best_over + 1e-9 * (1.0 + best_over):
                    if mx < best_max - 1e-9 * best_max:
                        better = True
                    elif mx <= best_max + 1e-9 * best_max and sq < best_sq - 1e-9 * best_sq:
                        better = True
                if better:
                    best_over, best_max, best_sq = over, mx, sq
                    best_x, best_b = x, b
        if best_x < 0:
            return steps, True
        # apply the move
        x, a, b = best_x, item_dev[best_x], best_b
        load[a] -= item_compute[dkind[a], x]
        load[b] += item_compute[dkind[b], x]
        mem[a] -= item_memory[x]
        mem[b] += item_memory[x]
        for p in range(touch_ptr[x], touch_ptr[x + 1]):
            u = touch_node[p]
            du = item_dev[node_item[u]]
            _unpay(u, du, cnt[u], dkind, node_comm, load)
            cnt[u, a] -= touch_succ[p]
            cnt[u, b] += touch_succ[p]
            _pay(u, b if touch_member[p] else du, cnt[u], dkind, node_comm, load)
        item_dev[x] = b
        steps += 1
    return steps, False


def descend(prob: MoveProblem, item_dev: np.ndarray, *, deadline: float | None = None,
            repair_only: bool = False) -> tuple[np.ndarray, bool]:
    """Improve ``item_dev`` (device per item) by best single-item moves; returns it and whether a local
    optimum was reached (``False``: the deadline stopped it)."""
    item_dev = np.ascontiguousarray(item_dev, dtype=np.int64).copy()
    cnt, load, mem = _state(item_dev, prob.node_item, prob.dkind, prob.caps, prob.item_compute,
                            prob.item_memory, prob.node_comm, prob.succ_ptr, prob.succ_idx)
    while True:
        _, done = _descend(item_dev, prob.node_item, prob.dkind, prob.caps, prob.item_compute,
                           prob.item_memory, prob.node_comm, prob.succ_ptr, prob.succ_idx, prob.touch_ptr,
                           prob.touch_node, prob.touch_succ, prob.touch_member, prob.allowed, cnt, load,
                           mem, _STEPS_PER_CALL, repair_only)
        if done:
            return item_dev, True
        if deadline is not None and time.perf_counter() > deadline:
            return item_dev, False


def overflow(prob: MoveProblem, item_dev: np.ndarray) -> float:
    """Total memory over capacity of a placement of items."""
    mem = np.zeros(prob.dkind.size)
    np.add.at(mem, item_dev, prob.item_memory)
    return float(np.maximum(mem - prob.caps, 0.0).sum())


def random_start(prob: MoveProblem, rng: np.random.Generator) -> np.ndarray:
    """Every item on a device drawn uniformly among those whose kind runs it."""
    C, D = prob.allowed.shape
    r = rng.random((C, D)) * prob.allowed
    return np.argmax(r, axis=1).astype(np.int64)


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Best placement over ``options.raw["restarts"]`` seeded local searches (see the module doc)."""
    options = options or SolveOptions()
    require_objective("local-search", options, ("max-load",))
    t0 = time.perf_counter()
    deadline = None if options.time_limit is None else t0 + options.time_limit
    restarts = int(options.raw.get("restarts", DEFAULT_RESTARTS))
    prob = move_problem(graph, cluster)
    unplaceable = np.flatnonzero(~prob.allowed.any(axis=1))
    if unplaceable.size:
        nodes = [graph.ids[u] for u in np.flatnonzero(np.isin(prob.node_item, unplaceable))[:5]]
        return no_placement("local-search", t0, f"no device kind runs node(s) {nodes}")
    rng = np.random.default_rng(options.seed)
    starts: list[np.ndarray] = []
    if options.warm_start is not None:
        a = check_assignment(graph, cluster, options.warm_start)
        item_dev = np.zeros(prob.num_items, np.int64)
        item_dev[prob.node_item] = a
        starts.append(item_dev)
    best, best_load, runs, stopped = None, math.inf, 0, False
    for r in range(restarts + len(starts)):
        if deadline is not None and time.perf_counter() > deadline and best is not None:
            stopped = True
            break
        start = starts[r] if r < len(starts) else random_start(prob, rng)
        item_dev, done = descend(prob, start, deadline=deadline)
        runs += 1
        if overflow(prob, item_dev) <= 0.0:
            a = item_dev[prob.node_item]
            cnt, load, _ = _state(item_dev, prob.node_item, prob.dkind, prob.caps, prob.item_compute,
                                  prob.item_memory, prob.node_comm, prob.succ_ptr, prob.succ_idx)
            del cnt
            if load.max() < best_load:
                best, best_load = a, float(load.max())
        if not done:
            stopped = True
            break
    stats = {"restarts": runs, "items": prob.num_items}
    if best is None:
        return no_placement("local-search", t0, "no start led to a placement that fits the devices' memory",
                            status=Status.FEASIBLE, stats=stats)
    msg = "time limit reached; best placement so far" if stopped else f"best of {runs} local searches"
    return finish("local-search", graph, cluster, best, options, t0, message=msg, stats=stats)
