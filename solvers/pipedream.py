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

Steps 2 and 3 are :func:`graphs.linearise.linearise`, which the stage form
(:mod:`solvers.pipedream_stages`) uses too; here its ``regroup`` step is the class drag and the
contraction, and its walk follows the items' forward edges.

Every placement it returns is contiguous, so it is never better than the ``dp`` optimum.

The reference also drops, before step 2, the edges leaving the input and zero-size layers that
PipeDream's profiler would not see, named by the reference's numbering of class parts: the forward part
of class ``c`` is ``c``, the backward part is ``max class + rank of c`` (rank from 1 among the sorted
classes). This is **off by default**: the planner treats every graph alike, whatever its file is
called. Two options turn it on:

* ``options.raw["reference_quirk"]``: ``"bert24"`` or ``"gnmt"`` drops the parts the reference drops
  for those layer graphs (:data:`REFERENCE_IGNORED`), to reproduce its published values;
* ``options.raw["ignore_parts"]``: any list of such part numbers (overrides the above).

**Why not the stage form's rule.** The stage form leaves out, always, the out-edges of the inputs
that compute nothing and hold nothing (:func:`graphs.linearise.idle_sources`). Here that rule (on class
parts: no edge from another part, zero compute on every kind, zero memory) is not the default because
it is not the reference's rule either, and measured on the reference workloads it reproduces no more
published values than dropping nothing: it gives BERT-24 inference 17.7899 (published 17.7899;
without it 82.2999), but BERT-24 training 41.7458 (the DP optimum; published 187.914, reproduced
without it) and GNMT inference 90.4423 (published 33.0311: the reference also drops layers that are no
inputs, e.g. node 46, zero compute but 512 KiB); GNMT training stays 294.905, and the other
reference workloads have no idle input. The stage form needs the rule for Piper's files (BERT's mask,
read by every layer, would otherwise make the whole graph one component) and has no published values
to match; here the published values are what the options above are for, and no one rule reproduces
them all.

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

import numpy as np

from graphs.contract import ClassGraph, contract
from graphs.errors import InfeasibleError, InputError
from graphs.ideals import chain_ideals
from graphs.linearise import idle_sources, linearise
from graphs.model import Cluster, OpGraph

from ._common import finish, no_placement, require_objective
from .base import Solution, SolveOptions, Status
from .dp import prepare, run_dp, stages_to_assignment

__all__ = ["solve", "linearised_items", "REFERENCE_IGNORED"]

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


def linearised_items(graph: OpGraph, cluster: Cluster, *, ignore_parts=()) -> tuple[ClassGraph, np.ndarray]:
    """Steps 1–3: ``(items, order)``, the item graph after merging biconnected components (items refer
    to the nodes of ``graph``) and the items in walk order, by :func:`graphs.linearise.linearise` over
    the class parts (the out-edges of the ``ignore_parts`` left out of the merge).

    Items readied together in the walk are taken largest colocation class first (the smallest class of
    each item counts; nodes without a class count before every class): the reference numbers contracted
    nodes by colocation class, and this tie-break reproduces its walk."""
    part, part_class, number = _class_parts(graph)
    P = part_class.size
    cls_of_part = np.unique(part_class, return_inverse=True)[1].reshape(-1)
    unseen = np.isin(number, np.asarray(ignore_parts, dtype=np.int64)) if len(ignore_parts) else None
    items: ClassGraph | None = None

    def regroup(label: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # a merged part drags its whole colocation class along: union the classes of each group
        nonlocal items
        croot = list(range(int(cls_of_part.max()) + 1 if P else 0))

        def cfind(x: int) -> int:
            while croot[x] != x:
                croot[x] = croot[croot[x]]
                x = croot[x]
            return x

        first_class: dict[int, int] = {}
        for p in range(P):
            g = int(label[p])
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
        # step 3: contract again (colocation, cycles, zero-cost leaves); the walk follows the items'
        # forward edges
        items = contract(merged, cluster)
        part_item = np.zeros(P, np.int64)
        part_item[part] = items.node_class
        return part_item, items.src, items.dst

    _, order = linearise(P, part[graph.src], part[graph.dst], unseen=unseen, regroup=regroup,
                         rank=cls_of_part, highest_first=True)
    assert items is not None
    return items, order


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """PipeDream-style placement (see the module doc). ``options.raw["reference_quirk"]`` (``"bert24"``
    or ``"gnmt"``) or ``options.raw["ignore_parts"]`` name class parts whose out-edges are ignored
    before the biconnected-component step; by default none are."""
    options = options or SolveOptions()
    require_objective("pipedream", options, ("max-load",))
    t0 = time.perf_counter()
    deadline = None if options.time_limit is None else t0 + options.time_limit
    ignored = _ignored_parts(options)
    items, order = linearised_items(graph, cluster, ignore_parts=ignored)
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
    return finish("pipedream", graph, cluster, a, options, t0, stats=stats,
                  message="" if ignored else _idle_inputs_note(graph))


def _idle_inputs_note(graph: OpGraph) -> str:
    """A note when input nodes that compute and hold nothing feed several nodes: their out-edges join
    what they feed into one biconnected component, so the layers they feed share a stage here, where
    the reference's published values leave such nodes out (module doc); empty when there are none."""
    idle = (graph.compute == 0).all(axis=0) & (graph.memory == 0)
    fan_out = np.bincount(graph.src, minlength=graph.num_nodes)
    many = idle_sources(graph.num_nodes, graph.dst, idle) & (fan_out > 1)
    if not many.any():
        return ""
    first = np.flatnonzero(many)[:3]
    names = ", ".join(f"{graph.ids[u]} (feeds {fan_out[u]})" for u in first)
    names += ", ..." if many.sum() > 3 else ""
    return (f"note: input node(s) that compute and hold nothing feed several nodes: {names}; the "
            f"biconnected-component merge then puts what they feed in one group. PipeDream's profiler would "
            f"not see them, and the reference's published values on BERT-24 and GNMT leave such nodes out "
            f"(docs/solvers.md: reference_quirk)")
