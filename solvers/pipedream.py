"""Baseline: PipeDream-style planning — contract biconnected components, linearise, run the same DP.

The procedure (``shared/workloads/FORMAT.md``, "The PipeDream-style baseline"):

1. contract every colocation class into a forward part and a backward part (*class parts*);
2. view the graph of class parts as undirected, find its biconnected components (sets of edges) and
   merge, per component, every part that is the tail of one of its edges; parts merged this way
   drag their whole colocation class along (forward and backward share a device);
3. contract again (colocation, cycles, zero-cost leaves: :func:`graphs.contract.contract`) and
   linearise the item graph: walk it in topological order, always taking the most recently readied
   item next (a stack);
4. run the exact DP over the prefixes of that walk (:func:`solvers.dp.run_dp` on
   :func:`graphs.ideals.chain_ideals`), with the true communication of the original graph, and
   evaluate the placement on the original graph.

Every placement it returns is contiguous, so it is never better than the ``dp`` optimum.

The reference also drops, before step 2, the edges leaving the input and zero-size layers that
PipeDream's profiler would not see, named by the reference's numbering of class parts: the forward part
of class ``c`` is ``c``, the backward part is ``max class + rank of c`` (rank from 1 among the sorted
classes). This is **off by default**: the planner treats every graph alike, whatever its file is
called. Two options turn it on:

* ``options.raw["reference_quirk"]``: ``"bert24"`` or ``"gnmt"`` drops the parts the reference drops
  for those layer graphs (:data:`REFERENCE_IGNORED`), to reproduce its published values;
* ``options.raw["ignore_parts"]``: any list of such part numbers (overrides the above).

The numbering matters for the training graphs: there, part 37 of BERT-24 is the backward part of
class 5, not node 37 (``node4grad``, whose part is 36), so the reference keeps the backward input node
that feeds every layer, the whole backward pass becomes one biconnected component and most layers fuse
into one stage. That is how the reference's training values (e.g. 187.914 for BERT-24, against a DP
optimum of 41.75) come about; ``reference_quirk="bert24"`` reproduces them, and
``ignore_parts=(4, 36)`` drops the intended node instead (BERT-24 training: 41.75).
"""

from __future__ import annotations

import math
import time

import networkx as nx
import numpy as np

from graphs.contract import ClassGraph, contract
from graphs.errors import InfeasibleError, InputError
from graphs.ideals import chain_ideals
from graphs.model import Cluster, OpGraph
from graphs.order import topological_order

from ._common import finish, no_placement, require_objective
from .base import Solution, SolveOptions, Status
from .dp import prepare, run_dp, stages_to_assignment

__all__ = ["solve", "pipedream_items", "linear_order", "REFERENCE_IGNORED"]

# reference workload family -> class parts whose out-edges the reference ignores before step 2
REFERENCE_IGNORED: dict[str, tuple[int, ...]] = {
    "bert24": (4, 37),
    "gnmt": (2, 40, 46, 100, 137, 142),
}


# --------------------------------------------------------------------------- class parts
def _class_parts(graph: OpGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(part, part_class, part_number)``: the class part of every node, the colocation key of every
    part (a class ``c >= 0``, or ``-1 - u`` for a node ``u`` without one) and every part's number in the
    reference's scheme (-1 for parts of nodes without a class)."""
    key_class = np.where(graph.colocation >= 0, graph.colocation, -1 - np.arange(graph.num_nodes))
    keys = np.stack([key_class, graph.backward.astype(np.int64)], axis=1)
    uniq, part = np.unique(keys, axis=0, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    part_class = uniq[:, 0]
    classes = np.unique(graph.colocation[graph.colocation >= 0])
    top = int(classes.max()) if classes.size else -1
    rank = np.searchsorted(classes, part_class) + 1
    number = np.where(part_class < 0, -1, np.where(uniq[:, 1] == 1, top + rank, part_class))
    return part, part_class, number


def _ignored_parts(options: SolveOptions) -> tuple[int, ...]:
    """The class parts whose out-edges are dropped: only what the options ask for (never inferred
    from the graph or its file name)."""
    if "ignore_parts" in options.raw:
        return tuple(int(x) for x in options.raw["ignore_parts"])
    quirk = options.raw.get("reference_quirk")
    if quirk is None:
        return ()
    if quirk not in REFERENCE_IGNORED:
        raise InputError(f"unknown PipeDream reference_quirk {quirk!r}; choose one of: "
                         f"{', '.join(REFERENCE_IGNORED)}")
    return REFERENCE_IGNORED[quirk]


def pipedream_items(graph: OpGraph, cluster: Cluster, *, ignore_parts=()) -> ClassGraph:
    """Steps 1–3 but the walk: the item graph after merging biconnected components (items refer to
    the nodes of ``graph``)."""
    part, part_class, number = _class_parts(graph)
    P = part_class.size
    ps, pd = part[graph.src], part[graph.dst]
    keep = ps != pd
    if ignore_parts:
        keep &= ~np.isin(number[ps], np.asarray(ignore_parts, dtype=np.int64))
    pairs = np.unique(np.stack([ps[keep], pd[keep]], axis=1), axis=0) if keep.any() else np.zeros((0, 2), int)
    tails: dict[frozenset, list[int]] = {}
    for a, b in pairs.tolist():
        tails.setdefault(frozenset((a, b)), []).append(a)
    und = nx.Graph()
    und.add_edges_from(tuple(e) for e in tails)

    # union-find over parts: the tails of every biconnected component become one
    root = list(range(P))

    def find(x: int) -> int:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    def union(x: int, y: int) -> None:
        x, y = find(x), find(y)
        if x != y:
            root[max(x, y)] = min(x, y)

    for comp in nx.biconnected_component_edges(und):
        ts = [t for e in comp for t in tails[frozenset(e)]]
        for t in ts[1:]:
            union(ts[0], t)
    # a merged part drags its whole colocation class along: union the classes of each group
    cls_of_part = np.unique(part_class, return_inverse=True)[1].reshape(-1)
    croot = list(range(int(cls_of_part.max()) + 1 if P else 0))

    def cfind(x: int) -> int:
        while croot[x] != x:
            croot[x] = croot[croot[x]]
            x = croot[x]
        return x

    first_class: dict[int, int] = {}
    for p in range(P):
        g = find(p)
        c = int(cls_of_part[p])
        if g in first_class:
            a, b = cfind(first_class[g]), cfind(c)
            if a != b:
                croot[max(a, b)] = min(a, b)
        else:
            first_class[g] = c
    node_group = np.array([cfind(int(cls_of_part[p])) for p in part.tolist()], dtype=np.int64)
    merged = OpGraph.build(
        names=graph.names, ids=graph.ids, kinds=graph.kinds, compute=graph.compute, comm=graph.comm,
        memory=graph.memory, edges=np.stack([graph.src, graph.dst], axis=1), backward=graph.backward,
        colocation=node_group, source=graph.source, meta=graph.meta)
    return contract(merged, cluster)


def linear_order(items: ClassGraph) -> np.ndarray:
    """A topological order of the items that always continues with the most recently readied item.

    Items readied together are pushed in ascending order of their smallest colocation class (nodes
    without one count after every class, by index), so the largest is taken first: the reference
    numbers contracted nodes by colocation class, and this tie-break reproduces its walk."""
    C = items.num_classes
    g = items.graph
    top = int(g.colocation.max()) + 1 if g.num_nodes else 0
    label = np.where(g.colocation >= 0, g.colocation, top + np.arange(g.num_nodes))
    first_node = np.full(C, np.iinfo(np.int64).max)
    np.minimum.at(first_node, items.node_class, label)
    return topological_order(C, items.src, items.dst, key=first_node)


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """PipeDream-style placement (see the module doc). ``options.raw["reference_quirk"]`` (``"bert24"``
    or ``"gnmt"``) or ``options.raw["ignore_parts"]`` name class parts whose out-edges are ignored
    before the biconnected-component step; by default none are."""
    options = options or SolveOptions()
    require_objective("pipedream", options, ("max-load",))
    t0 = time.perf_counter()
    deadline = None if options.time_limit is None else t0 + options.time_limit
    ignored = _ignored_parts(options)
    items = pipedream_items(graph, cluster, ignore_parts=ignored)
    order = linear_order(items)
    stats = {"items": items.num_classes, "ignored_parts": list(ignored)}
    try:
        prob = prepare(graph, cluster, items=items)
    except InfeasibleError as e:
        return no_placement("pipedream", t0, f"after merging biconnected components, {e}", stats=stats)
    run = run_dp(prob, chain_ideals(items.num_classes, order), deadline=deadline, progress=options.progress)
    if run.interrupted:  # the DP took a Ctrl-C (it returns what it has): the word makes callers stop
        return no_placement("pipedream", t0, "interrupted (Ctrl-C) before the DP finished",
                            status=Status.STOPPED, stats=stats)
    if not run.complete:
        return no_placement("pipedream", t0, "time limit reached before the DP finished",
                            status=Status.FEASIBLE, stats=stats)
    if not math.isfinite(run.value):
        return no_placement("pipedream", t0, "no split of the linearised graph fits the devices' memory",
                            stats=stats)
    a = stages_to_assignment(prob, cluster, run.stages)
    return finish("pipedream", graph, cluster, a, options, t0, stats=stats)
