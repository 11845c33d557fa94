"""The ideals (down-closed item sets) of a DAG and the lattice they form.

A contiguous placement is a chain of nested ideals ``∅ = I0 ⊂ I1 ⊂ ... ⊂ Ik = V``: device ``j`` gets
``Ij \\ Ij-1``. :func:`enumerate_ideals` lists every ideal once, in order of size, as a bitset, together
with the *Hasse* edges of the lattice (``I -> I \\ {v}`` for every maximal ``v`` of ``I``), which lets a
solver walk from an ideal down to all of its sub-ideals without testing every pair.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from .errors import ProblemTooLargeError

__all__ = ["IdealLattice", "enumerate_ideals", "chain_ideals", "count_ideal_pairs", "push_down"]


@dataclass(frozen=True, eq=False)
class IdealLattice:
    """Ideals of a DAG on ``num_items`` items, numbered so that a sub-ideal comes before its
    super-ideals (ideal 0 is empty, the last one is everything).

    ``bits[i]`` is ideal ``i`` as ``words`` little-endian uint64 words; ``parent[i]`` and ``added[i]``
    say that ideal ``i`` is ideal ``parent[i]`` plus item ``added[i]``; the immediate sub-ideals of
    ideal ``i`` are ``down_idx[down_ptr[i]:down_ptr[i+1]]``.
    """

    num_items: int
    bits: np.ndarray  # [N, W] uint64
    parent: np.ndarray  # [N] int64 (-1 for the empty ideal)
    added: np.ndarray  # [N] int64 (-1 for the empty ideal)
    down_ptr: np.ndarray  # [N+1] int64
    down_idx: np.ndarray  # [E] int64

    @property
    def num_ideals(self) -> int:
        return int(self.bits.shape[0])

    @property
    def words(self) -> int:
        return int(self.bits.shape[1])

    def members(self, i: int) -> np.ndarray:
        """Items of ideal ``i``."""
        b = np.unpackbits(self.bits[i].view(np.uint8), bitorder="little")[: self.num_items]
        return np.flatnonzero(b)


def _words(num_items: int) -> int:
    return max(1, (num_items + 63) // 64)


def _to_array(ints: list[int], num_items: int) -> np.ndarray:
    W = _words(num_items)
    buf = b"".join(x.to_bytes(8 * W, "little") for x in ints)
    return np.frombuffer(buf, dtype=np.uint64).reshape(len(ints), W).copy()


def enumerate_ideals(num_items: int, src: np.ndarray, dst: np.ndarray, *,
                     max_ideals: int = 5_000_000, deadline: float | None = None) -> IdealLattice:
    """All ideals of the DAG ``(src, dst)`` on items ``0..num_items-1``.

    Raises :class:`ProblemTooLargeError` as soon as more than ``max_ideals`` are found, or when the
    ``time.perf_counter()`` ``deadline`` passes first.
    """
    C = num_items
    preds = [0] * C
    succs: list[list[int]] = [[] for _ in range(C)]
    for a, b in zip(np.asarray(src).tolist(), np.asarray(dst).tolist()):
        preds[b] |= 1 << a
        succs[a].append(b)

    ideals = [0]
    index = {0: 0}
    parent = [-1]
    added = [-1]
    frontier = [[c for c in range(C) if preds[c] == 0]]  # items that can be added to each ideal
    down_from: list[int] = []  # Hasse edges (super, sub)
    down_to: list[int] = []
    i = 0
    while i < len(ideals):
        ideal = ideals[i]
        cand = frontier[i]
        for v in cand:
            bigger = ideal | (1 << v)
            j = index.get(bigger)
            if j is None:
                j = len(ideals)
                if j & 4095 == 0 and deadline is not None and time.perf_counter() > deadline:
                    raise ProblemTooLargeError(
                        f"enumerating the ideals ran out of time after {j:,} of them")
                if j >= max_ideals:
                    raise ProblemTooLargeError(
                        f"the graph has more than {max_ideals:,} ideals (contiguous splits); the exact DP "
                        f"over all of them would not fit the budget")
                index[bigger] = j
                ideals.append(bigger)
                parent.append(i)
                added.append(v)
                nxt = [w for w in cand if w != v]
                nxt.extend(w for w in succs[v] if preds[w] & ~bigger == 0)
                frontier.append(nxt)
            down_from.append(j)
            down_to.append(i)
        frontier[i] = None  # free as we go
        i += 1

    N = len(ideals)
    down_from_a = np.array(down_from, dtype=np.int64)
    order = np.argsort(down_from_a, kind="stable")
    down_ptr = np.zeros(N + 1, np.int64)
    np.add.at(down_ptr, down_from_a + 1, 1)
    return IdealLattice(
        num_items=C,
        bits=_to_array(ideals, C),
        parent=np.array(parent, dtype=np.int64),
        added=np.array(added, dtype=np.int64),
        down_ptr=np.cumsum(down_ptr),
        down_idx=np.array(down_to, dtype=np.int64)[order],
    )


def chain_ideals(num_items: int, order: np.ndarray) -> IdealLattice:
    """The ideals that are prefixes of one topological ``order``: a chain, each below the next."""
    C = num_items
    ints = [0]
    acc = 0
    for v in np.asarray(order).tolist():
        acc |= 1 << v
        ints.append(acc)
    N = C + 1
    return IdealLattice(
        num_items=C,
        bits=_to_array(ints, C),
        parent=np.arange(-1, N - 1, dtype=np.int64),
        added=np.concatenate([[-1], np.asarray(order, dtype=np.int64)]),
        down_ptr=np.concatenate([[0], np.arange(N, dtype=np.int64)]),
        down_idx=np.arange(0, N - 1, dtype=np.int64),
    )


@njit(cache=True)
def push_down(j, owner, down_ptr, down_idx, stamp, queue, tail):
    """Append the immediate sub-ideals of ideal ``j`` not yet stamped ``owner`` to ``queue[tail:]``,
    stamping them; return the new tail. The building block of every walk down the lattice."""
    for p in range(down_ptr[j], down_ptr[j + 1]):
        k = down_idx[p]
        if stamp[k] != owner:
            stamp[k] = owner
            queue[tail] = k
            tail += 1
    return tail


@njit(cache=True)
def _count_pairs(down_ptr, down_idx):
    N = down_ptr.shape[0] - 1
    stamp = np.full(N, -1, np.int64)
    queue = np.empty(N, np.int64)
    total = 0
    for i in range(N):
        stamp[i] = i
        queue[0] = i
        head, tail = 0, 1
        while head < tail:
            j = queue[head]
            head += 1
            tail = push_down(j, i, down_ptr, down_idx, stamp, queue, tail)
        total += tail
    return total


def count_ideal_pairs(lattice: IdealLattice) -> int:
    """Number of pairs ``J ⊆ I`` of ideals (``J = I`` included), by walking the lattice down from
    every ideal: the work the exact DP would do without pruning."""
    return int(_count_pairs(lattice.down_ptr, lattice.down_idx))
