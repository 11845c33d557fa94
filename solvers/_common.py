"""Pieces the baselines share: turning an assignment into an honest :class:`Solution`.

A baseline's reported objective is always the evaluator's value of its placement (never a number
the baseline computed on its own), so every baseline is judged by the same model.
"""

from __future__ import annotations

import math
import time

import numpy as np

from graphs.errors import InputError
from graphs.evaluate import evaluate, split_max
from graphs.model import Cluster, OpGraph

from .base import Solution, SolveOptions, Status

__all__ = ["objective_value", "finish", "no_placement", "require_objective"]


def require_objective(name: str, options: SolveOptions, supported: tuple[str, ...]) -> None:
    """Raise :class:`InputError` unless ``options.objective`` is one the solver ``name`` handles."""
    if options.objective not in supported:
        raise InputError(f"the {name} solver does not support objective {options.objective!r} "
                         f"(it supports: {', '.join(supported)})")


def objective_value(graph: OpGraph, cluster: Cluster, assignment, objective: str,
                    subgraphs=None) -> tuple[float, tuple[str, ...]]:
    """The evaluator's value of ``assignment`` for ``objective`` and the list of validity problems
    (``subgraphs``: the latency model's contiguous pieces, where a solver chose them)."""
    ev = evaluate(graph, cluster, assignment)
    if objective == "latency":
        from graphs.latency import latency  # the latency model

        lat = latency(graph, cluster, assignment, subgraphs=subgraphs)
        return lat.total, tuple(dict.fromkeys(ev.problems + lat.problems))
    if objective == "split-max":
        return split_max(graph, cluster, assignment), ev.problems
    return ev.max_load, ev.problems


def finish(name: str, graph: OpGraph, cluster: Cluster, assignment: np.ndarray, options: SolveOptions,
           t_start: float, *, message: str = "", stats: dict | None = None) -> Solution:
    """A FEASIBLE solution carrying the evaluator's objective of ``assignment`` (a heuristic proves
    nothing, so it never claims OPTIMAL). Invalid placements are a bug of the baseline: they raise."""
    a = np.asarray(assignment, dtype=np.int64)
    value, problems = objective_value(graph, cluster, a, options.objective)
    if problems:
        raise AssertionError(f"{name} produced an invalid placement: {'; '.join(problems[:3])}")
    return Solution(a, value, Status.FEASIBLE, name, time=time.perf_counter() - t_start,
                    message=message, stats=dict(stats or {}))


#: what a pipeline (one device per stage) must keep, besides memory
PIPELINE_RULE = ("each node runs only on the kinds that have a cost for it, and the devices holding nodes "
                 "must form a pipeline (every edge to the same or a later device)")


def none_fits(graph: OpGraph, cluster: Cluster, what: str, rule: str = PIPELINE_RULE,
              memory_detail: str = "") -> str:
    """Why no ``what`` (``"contiguous placement"``, ...) of ``graph`` exists, proven: the devices' memory
    where some kind has a limit and some node needs memory (``memory_detail`` added); otherwise not
    memory at all but ``rule``, what such placements must keep (the kinds that can run each node,
    contiguity, a subgraph per accelerator)."""
    limited = any(k.memory is not None and math.isfinite(k.memory) for k in cluster.kinds)
    if limited and bool(np.any(graph.memory > 0)):
        return f"no {what} fits the devices' memory{memory_detail}"
    return f"no {what} exists on these devices (none has a memory limit): {rule}"


def no_placement(name: str, t_start: float, message: str, *, status: Status = Status.INFEASIBLE,
                 stats: dict | None = None) -> Solution:
    """No placement: ``status`` says why (INFEASIBLE within the baseline's own family of placements,
    or FEASIBLE with no assignment when a limit stopped it first)."""
    return Solution(None, math.inf, status, name, time=time.perf_counter() - t_start, message=message,
                    stats=dict(stats or {}))


def replicated_assignment(plan, cluster: Cluster, item_of: np.ndarray, num_nodes: int) -> np.ndarray:
    """The device of every operator for a plan of :func:`graphs.parallel.from_opgraph`'s problem (the
    registry's form of the replicated solvers): each stage's nodes on the next ``t * d`` devices of its
    kind, named by the first of them; ``item_of`` maps operators to the problem's nodes."""
    first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]])
    nxt = np.zeros(len(cluster.kinds), np.int64)
    node_dev = np.full(num_nodes, -1, np.int64)
    for st in plan:
        node_dev[list(st.nodes)] = first[st.kind] + nxt[st.kind]
        nxt[st.kind] += st.d * st.t
    return node_dev[item_of]
