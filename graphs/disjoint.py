"""Disjoint sets over the integers ``0..n-1`` (union-find with path halving), where the caller says which
root a union keeps: the grouping passes (:mod:`graphs.coarsen`, :mod:`graphs.linearise`) use the roots
as group labels, so which one survives is part of their result."""

from __future__ import annotations

__all__ = ["DisjointSets"]


class DisjointSets:
    """Every integer of ``0..n-1`` in a set of its own, until :meth:`link` joins two sets."""

    __slots__ = ("parent",)

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        """The root of ``x``'s set."""
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def link(self, root: int, under: int) -> None:
        """Join the set whose root is ``root`` to the set whose root is ``under``, which stays the root."""
        self.parent[root] = under

    def roots(self) -> list[int]:
        """Each integer's root, in order."""
        return [self.find(x) for x in range(len(self.parent))]
