"""Latency local search: improve a latency placement by local moves, every candidate scored by the one
latency evaluator (:func:`graphs.latency.latency`).

The domain is the latency IP's (:func:`in_domain`): the evaluator finds the placement valid and it runs
at most ``q`` subgraphs on every accelerator (``q = 1``: one convex subgraph per accelerator).

Items are the blocks of :func:`solvers.greedy.blocks` (colocation classes, cycles between them fused),
laid out in a topological order that keeps each accelerator's items together: a topological order of the
placement's *tasks* (one per accelerator, one per host item), each task's items in the blocks' own order.
A placement then reads as *runs*, maximal stretches of that order on one device, and the moves are:

* **push** a boundary between two consecutive runs by ``s`` items, either way. When that overfills a
  device's memory, the overflow passes on to the next run in the same direction (past the last run, to
  an unused accelerator), so the cut points move together and memory holds;
* **split** a run: its first or last ``s`` items to an unused accelerator (one per kind: identical devices
  are interchangeable); **move** a whole run to an unused accelerator of another kind;
* **item**: one item to a device that holds one of its neighbours, or to a host.

``s`` runs over 1, 2, 3, 4, 6, 8, 12, 16, ... up to the run's length, so a round tries near and far cut
points. Moves are grouped (the pushes at one boundary, the splits of one run, the moves of one item); a
group is evaluated whole and its best candidate taken if it lowers the latency (by more than round-off:
a relative 1e-9). Pushes go first; splits and item moves only when no push helps. The search stops at a
local optimum, at the deadline, after ``max_evaluations`` or on Ctrl-C, and returns the best placement
seen: never worse than the start.

With ``q = 1`` candidates are evaluated with every accelerator node in subgraph 0, which is the same
verdict and latency as the default convex pieces (:func:`in_domain` on them) and about 4x faster: when
the pieces are one per device the two inputs are identical, and when some device needs two pieces, a
path leaves and re-enters it, so one subgraph there is a cycle and the evaluator calls it invalid. The
returned placement is checked with :func:`in_domain` itself.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from graphs.latency import LatencyEvaluation, host_kinds, latency
from graphs.model import Cluster, OpGraph
from graphs.order import topological_order

__all__ = ["SearchResult", "improve", "in_domain", "tolerance"]


def in_domain(ev: LatencyEvaluation, subgraphs_per_device: int) -> bool:
    """Whether an evaluated placement is one the latency IP may return: valid, and at most
    ``subgraphs_per_device`` subgraphs on every accelerator."""
    return ev.valid and max(ev.subgraphs_per_device().values(), default=0) <= subgraphs_per_device


@dataclass(frozen=True, eq=False)
class SearchResult:
    """What :func:`improve` found: the best placement, its latency and how the search went."""

    assignment: np.ndarray
    latency: float
    start_latency: float
    evaluations: int
    moves: int  # improving moves taken
    seconds: float
    stopped: str  # "local optimum", "time limit", "evaluations", "interrupted" or "invalid start"


def tolerance(value: float) -> float:
    """How much lower a latency must be to count as better (not round-off of the same schedule)."""
    return 1e-9 * max(1.0, abs(value))


class _Stop(Exception):
    """The deadline or the evaluation budget is spent."""


def _sizes(length: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ... below ``length``, and ``length``."""
    out, p = [], 1
    while p < length:
        out.append(p)
        if 2 <= p and p * 3 // 2 < length:
            out.append(p * 3 // 2)
        p *= 2
    return out + [length] if length > 0 else out


@dataclass(frozen=True)
class _Run:
    start: int  # positions in the layout order
    end: int
    dev: int


class _Search:
    def __init__(self, graph: OpGraph, cluster: Cluster, a: np.ndarray, q: int, deadline: float | None,
                 max_evaluations: int | None):
        self.graph, self.cluster, self.q = graph, cluster, q
        self.deadline, self.max_evaluations = deadline, max_evaluations
        self.evaluations = 0
        self.moves = 0
        from .greedy import blocks  # scipy's graph routines: imported when a search runs

        n = graph.num_nodes
        self.block, self.B, self.border = blocks(graph)
        self.bpos = np.empty(self.B, np.int64)
        self.bpos[self.border] = np.arange(self.B)
        self.first_node = np.full(self.B, n, np.int64)
        np.minimum.at(self.first_node, self.block, np.arange(n))
        self.bmem = np.bincount(self.block, weights=graph.memory, minlength=self.B)
        compute_c, _ = graph.costs_for(cluster)
        T = compute_c.shape[0]
        unsup = np.zeros((T, self.B), bool)
        for t in range(T):
            np.logical_or.at(unsup[t], self.block, ~np.isfinite(compute_c[t]))
        self.bsup = ~unsup
        self.dkind = cluster.device_kind()
        self.D = int(self.dkind.size)
        hosts = host_kinds(cluster)
        self.host_dev = hosts[self.dkind]
        self.caps = np.array([math.inf if cluster.kinds[t].memory is None else float(cluster.kinds[t].memory)
                              for t in self.dkind.tolist()])
        first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]]).astype(np.int64)
        self.host_reps = [int(first[t]) for t, k in enumerate(cluster.kinds)
                          if k.count > 0 and hosts[t]]
        be = self.block[graph.src] != self.block[graph.dst]
        pairs = np.unique(np.stack([self.block[graph.src][be], self.block[graph.dst][be]], axis=1), axis=0) \
            if be.any() else np.zeros((0, 2), np.int64)
        self.bs, self.bt = pairs[:, 0], pairs[:, 1]
        nb_src = np.concatenate([self.bs, self.bt])
        nb_dst = np.concatenate([self.bt, self.bs])
        o = np.argsort(nb_src, kind="stable")
        self.nb_ptr = np.concatenate([[0], np.cumsum(np.bincount(nb_src, minlength=self.B))])
        self.nb_idx = nb_dst[o]
        self.zeros = np.zeros(n, np.int64)
        self.a = np.asarray(a, np.int64).copy()
        self.value = self.score(self.a, count=False)
        self._layout()

    # ------------------------------------------------------------------ scoring
    def score(self, a: np.ndarray, *, count: bool = True) -> float:
        if count:
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise _Stop("time limit")
            if self.max_evaluations is not None and self.evaluations >= self.max_evaluations:
                raise _Stop("evaluations")
            self.evaluations += 1
        if self.q == 1:
            ev = latency(self.graph, self.cluster, a, subgraphs=self.zeros)
            return ev.total if ev.valid else math.inf
        ev = latency(self.graph, self.cluster, a)
        return ev.total if in_domain(ev, self.q) else math.inf

    # ------------------------------------------------------------------ layout of the current placement
    def _layout(self) -> None:
        """The order, runs, prefix sums and device memory of the current placement ``self.a``."""
        a, B, D = self.a, self.B, self.D
        bd = a[self.first_node]
        task = np.where(self.host_dev[bd], D + np.arange(B), bd)
        ts, tt = task[self.bs], task[self.bt]
        keep = ts != tt
        tfirst = np.full(D + B, B, np.int64)  # a task's first block in the blocks' order
        np.minimum.at(tfirst, task, self.bpos)
        torder = topological_order(D + B, ts[keep], tt[keep], key=-tfirst)
        if torder is None:  # the tasks depend on each other in a cycle (q > 1): the blocks' order
            order = self.border
        else:
            rank = np.empty(D + B, np.int64)
            rank[torder] = np.arange(D + B)
            order = np.lexsort((self.bpos, rank[task]))
        self.order = order
        pos = np.empty(B, np.int64)
        pos[order] = np.arange(B)
        self.node_order = np.argsort(pos[self.block], kind="stable")
        self.nptr = np.concatenate([[0], np.cumsum(np.bincount(self.block, minlength=B)[order])])
        self.P = np.concatenate([[0.0], np.cumsum(self.bmem[order])])
        self.U = np.concatenate([np.zeros((self.bsup.shape[0], 1), np.int64),
                                 np.cumsum(~self.bsup[:, order], axis=1)], axis=1)
        self.mem = np.bincount(a, weights=self.graph.memory, minlength=D)
        devs = bd[order]
        cuts = np.flatnonzero(devs[1:] != devs[:-1]) + 1
        starts = np.concatenate([[0], cuts]).tolist()
        ends = np.concatenate([cuts, [B]]).tolist()
        self.runs = [_Run(s, e, int(devs[s])) for s, e in zip(starts, ends)] if B else []

    def nodes(self, lo: int, hi: int) -> np.ndarray:
        return self.node_order[self.nptr[lo]:self.nptr[hi]]

    def supported(self, lo: int, hi: int, dev: int) -> bool:
        t = int(self.dkind[dev])
        return bool(self.U[t, hi] == self.U[t, lo])

    def unused(self, a: np.ndarray, kind_first: int | None = None) -> list[int]:
        """One unused accelerator per kind (the first of each), ``kind_first``'s kind first."""
        used = np.bincount(a, minlength=self.D) > 0
        out, seen = [], set()
        for d in range(self.D):
            t = int(self.dkind[d])
            if not used[d] and not self.host_dev[d] and t not in seen:
                seen.add(t)
                out.append(d)
        if kind_first is not None:
            out.sort(key=lambda d: self.dkind[d] != self.dkind[kind_first])
        return out

    # ------------------------------------------------------------------ moves
    def push(self, b: int, s: int, forward: bool) -> np.ndarray | None:
        """Boundary ``b`` (between runs ``b`` and ``b + 1``) moved by ``s`` items: forward, the last ``s``
        of run ``b`` join run ``b + 1``; backward, the first ``s`` of run ``b + 1`` join run ``b``. A
        device over its memory passes its far end on in the same direction."""
        runs, P = self.runs, self.P
        a = self.a.copy()
        mem = self.mem.copy()
        if forward:
            lo, hi, src, k = runs[b].end - s, runs[b].end, runs[b].dev, b + 1
        else:
            lo, hi, src, k = runs[b + 1].start, runs[b + 1].start + s, runs[b + 1].dev, b
        for _ in range(len(runs) + self.D):
            if 0 <= k < len(runs):
                dst = runs[k].dev
                if dst == src:
                    return None
            else:
                fresh = [d for d in self.unused(a, src) if self.supported(lo, hi, d)]
                if not fresh:
                    return None
                dst = fresh[0]
            if not self.supported(lo, hi, dst):
                return None
            a[self.nodes(lo, hi)] = dst
            w = P[hi] - P[lo]
            mem[src] -= w
            mem[dst] += w
            over = mem[dst] - self.caps[dst]
            if over <= 0:
                return a
            if not 0 <= k < len(runs):
                return None  # a fresh device too small for what overflows
            if forward:  # run k now spans [lo, end): its last items move on
                end = runs[k].end
                x = int(np.searchsorted(P, P[end] - over, side="right")) - 1
                lo, hi = max(lo, min(x, end - 1)), end
                k += 1
            else:  # run k spans [start, hi): its first items move on
                start = runs[k].start
                x = int(np.searchsorted(P, P[start] + over, side="left"))
                lo, hi = start, min(hi, max(x, start + 1))
                k -= 1
            src = dst
        return None

    def push_group(self, b: int) -> list[np.ndarray]:
        runs = self.runs
        out = []
        lengths = (runs[b].end - runs[b].start, runs[b + 1].end - runs[b + 1].start)
        for forward, length in zip((True, False), lengths):
            for s in _sizes(length):
                a = self.push(b, s, forward)
                if a is not None:
                    out.append(a)
        return out

    def split_group(self, r: int) -> list[np.ndarray]:
        run = self.runs[r]
        out = []
        length = run.end - run.start
        for e in self.unused(self.a, run.dev):
            if self.host_dev[run.dev] or self.dkind[e] != self.dkind[run.dev]:
                if self.supported(run.start, run.end, e) and self.mem[run.dev] <= self.caps[e]:
                    a = self.a.copy()
                    a[self.nodes(run.start, run.end)] = e
                    out.append(a)
            for s in _sizes(length)[:-1]:
                for lo, hi in ((run.end - s, run.end), (run.start, run.start + s)):
                    if self.supported(lo, hi, e) and self.P[hi] - self.P[lo] <= self.caps[e]:
                        a = self.a.copy()
                        a[self.nodes(lo, hi)] = e
                        out.append(a)
        return out

    def item_group(self, i: int) -> list[np.ndarray]:
        """Moves of the item at layout position ``i``."""
        b = int(self.order[i])
        cur = int(self.a[self.first_node[b]])
        targets = {int(self.a[self.first_node[c]]) for c in self.nb_idx[self.nb_ptr[b]:self.nb_ptr[b + 1]]}
        targets.update(self.host_reps)
        out = []
        w = self.bmem[b]
        for d in sorted(targets):
            if d == cur or not self.supported(i, i + 1, d) or self.mem[d] + w > self.caps[d]:
                continue
            a = self.a.copy()
            a[self.nodes(i, i + 1)] = d
            out.append(a)
        return out

    # ------------------------------------------------------------------ the search
    def _round(self, groups, count) -> bool:
        """Evaluate group after group (``groups(i)`` for the current layout, ``count()`` of them), taking
        each group's best candidate when it improves. Whether anything improved."""
        improved = False
        i = 0
        while i < count():
            best, best_a = self.value - tolerance(self.value), None
            for a in groups(i):
                v = self.score(a)
                if v < best:
                    best, best_a = v, a
            if best_a is not None:
                self.a, self.value = best_a, best
                self.moves += 1
                improved = True
                self._layout()
            i += 1
        return improved

    def run(self) -> None:
        while True:
            if self._round(self.push_group, lambda: len(self.runs) - 1):
                continue
            if self._round(self.split_group, lambda: len(self.runs)):
                continue
            if self._round(self.item_group, lambda: self.B):
                continue
            return


def improve(graph: OpGraph, cluster: Cluster, assignment, *, subgraphs_per_device: int = 1,
            time_limit: float | None = None, deadline: float | None = None,
            max_evaluations: int | None = None) -> SearchResult:
    """Improve a latency placement by local moves (see the module doc) until a local optimum, the time
    limit (seconds from now) or ``deadline`` (a ``time.perf_counter()`` value), ``max_evaluations``
    evaluator calls, or Ctrl-C. Returns the best placement seen, never worse than ``assignment``; a start
    outside the domain (:func:`in_domain`) is returned unchanged."""
    t0 = time.perf_counter()
    q = int(subgraphs_per_device)
    a0 = np.asarray(assignment, np.int64)
    ev0 = latency(graph, cluster, a0)
    if not in_domain(ev0, q):
        return SearchResult(a0.copy(), math.inf, math.inf, 0, 0, time.perf_counter() - t0, "invalid start")
    if time_limit is not None:
        deadline = t0 + time_limit if deadline is None else min(deadline, t0 + time_limit)
    search = None
    stopped = "local optimum"
    try:
        search = _Search(graph, cluster, a0, q, deadline, max_evaluations)
        search.run()
    except _Stop as e:
        stopped = str(e)
    except KeyboardInterrupt:  # Ctrl-C: stop and return the best so far, as the other starts do
        stopped = "interrupted"
    best_a, evaluations, moves = a0, 0, 0
    if search is not None:
        evaluations, moves = search.evaluations, search.moves
        if search.value < ev0.total:
            best_a = search.a
    ev = latency(graph, cluster, best_a)
    if not in_domain(ev, q) or not ev.total <= ev0.total:  # the fast scoring agrees; kept as a guard
        best_a, ev = a0, ev0
    return SearchResult(best_a.copy(), ev.total, ev0.total, evaluations, moves, time.perf_counter() - t0,
                        stopped)
