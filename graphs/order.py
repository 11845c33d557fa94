"""Topological orders of a DAG given as edge arrays (Kahn's algorithm with a choice of tie-break)."""

from __future__ import annotations

import numpy as np

__all__ = ["topological_order", "find_cycle"]


def topological_order(n: int, src, dst, *, policy: str = "stack", rng: np.random.Generator | None = None,
                      partial: bool = False, key=None) -> np.ndarray | None:
    """Nodes ``0..n-1`` in a topological order of the edges ``src[i] -> dst[i]``; when the graph has a
    cycle, ``None`` (or, with ``partial``, the nodes that could be ordered: none on or behind a cycle).
    Among ready nodes, ``policy`` takes the most recently readied (``"stack"``: depth-first), the
    earliest readied (``"queue"``: breadth-first) or a random one (``"random"``, drawn from ``rng``).
    With ``key`` (a number per node; ``"stack"`` only), the nodes readied together are stacked in
    ascending order of their key, so the largest is taken first."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    indeg = np.bincount(dst, minlength=n).tolist()
    o = np.argsort(src, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).tolist()
    succ = dst[o].tolist()
    ready = [u for u in range(n) if indeg[u] == 0]
    keyed = key is not None
    if keyed:
        key = np.asarray(key).tolist()
        ready.sort(key=key.__getitem__)
    elif policy == "stack":
        ready.reverse()  # pop() then takes the smallest index first
    out = []
    head = 0
    while head < len(ready) if policy == "queue" else ready:
        if policy == "queue":
            u = ready[head]
            head += 1
        elif policy == "random":
            k = int(rng.integers(len(ready)))
            ready[k], ready[-1] = ready[-1], ready[k]
            u = ready.pop()
        else:
            u = ready.pop()
        out.append(u)
        readied = []
        for v in succ[ptr[u]:ptr[u + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                readied.append(v)
        ready.extend(sorted(readied, key=key.__getitem__) if keyed else readied)
    return np.array(out, dtype=np.int64) if len(out) == n or partial else None


def find_cycle(n: int, src: np.ndarray, dst: np.ndarray, done: set) -> list[int]:
    """One cycle among the nodes Kahn's algorithm could not order: each of them has a predecessor
    that is not ordered either, so walking predecessors must come back to a node already seen."""
    pred: dict[int, int] = {}
    for a, b in zip(src.tolist(), dst.tolist()):
        if a not in done and b not in done:
            pred.setdefault(b, a)
    u = next(i for i in range(n) if i not in done)
    seen: dict[int, int] = {}
    path: list[int] = []
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = pred[u]
    return path[seen[u]:][::-1]
