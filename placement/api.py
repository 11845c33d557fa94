"""The library entry points a compiler pass calls: plain functions over plain data.

    >>> from graphs import Cluster, DeviceKind, Node, OpGraph
    >>> from placement import place
    >>> g = OpGraph.from_nodes(
    ...     [Node("a", {"gpu": 2.0}, comm=0.5), Node("b", {"gpu": 2.0}, comm=0.5), Node("c", {"gpu": 2.0})],
    ...     [("a", "b"), ("b", "c")])
    >>> p = place(g, Cluster((DeviceKind("gpu", 2),)))  # exact DP, through the default 'auto'
    >>> p.status.value, p.max_load
    ('optimal', 4.5)

Nothing here prints or keeps global state; errors are :class:`graphs.errors.PlacementError` subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from graphs.evaluate import Evaluation
from graphs.evaluate import evaluate as _evaluate
from graphs.model import Cluster, OpGraph
from solvers.base import Solution, SolveOptions, Status
from solvers.registry import solve

__all__ = ["Placement", "place", "evaluate", "DEFAULT_SOLVER"]

DEFAULT_SOLVER = "auto"


@dataclass(frozen=True, eq=False)
class Placement:
    """A solver's answer together with its evaluation. ``evaluation`` is ``None`` only when there is no
    placement (status ``infeasible``, or a limit hit before any was found; ``solution.message`` says)."""

    graph: OpGraph
    cluster: Cluster
    solution: Solution
    evaluation: Evaluation | None
    objective: str = "max-load"

    @property
    def status(self) -> Status:
        return self.solution.status

    @property
    def assignment(self) -> np.ndarray | None:
        return self.solution.assignment

    @cached_property
    def latency(self):
        """The single-sample latency evaluation of the placement (:func:`graphs.latency.latency`), or
        ``None`` when there is no placement."""
        if self.assignment is None:
            return None
        from graphs.latency import latency

        return latency(self.graph, self.cluster, self.assignment,
                       subgraphs=self.solution.stats.get("subgraphs"))

    @property
    def max_load(self) -> float:
        """The evaluator's max-load of the placement (``inf`` when there is none)."""
        return self.evaluation.max_load if self.evaluation is not None else float("inf")

    def device_of(self, node: str) -> str:
        """Name of the device holding the node called ``node``."""
        if self.assignment is None:
            raise ValueError("there is no placement")
        i = self.graph.names.index(node)
        return self.cluster.device_name(int(self.assignment[i]))


def place(graph: OpGraph, cluster: Cluster, solver: str | None = None,
          options: SolveOptions | None = None) -> Placement:
    """Place ``graph`` on ``cluster`` with the named solver and evaluate the result. The default,
    :data:`DEFAULT_SOLVER` (``auto``), runs the exact DP whenever it fits the limits and a labelled
    large-graph path otherwise (see :mod:`solvers.auto`)."""
    options = options or SolveOptions()
    solution = solve(graph, cluster, solver=solver or DEFAULT_SOLVER, options=options)
    ev = None if solution.assignment is None else _evaluate(graph, cluster, solution.assignment)
    return Placement(graph, cluster, solution, ev, options.objective)


def evaluate(graph: OpGraph, cluster: Cluster, assignment) -> Evaluation:
    """Loads, max-load, validity and contiguity of any assignment (device number per node)."""
    return _evaluate(graph, cluster, assignment)
