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

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from graphs.evaluate import Evaluation
from graphs.evaluate import evaluate as _evaluate
from graphs.model import Cluster, OpGraph
from solvers.base import Solution, SolveOptions, Status
from solvers.registry import solve

if TYPE_CHECKING:
    from graphs.parallel import ParallelProblem, PlanEvaluation, StageEvaluation

__all__ = ["Placement", "place", "evaluate", "DEFAULT_SOLVER"]

DEFAULT_SOLVER = "auto"


@dataclass(frozen=True, eq=False)
class Placement:
    """A solver's answer together with its evaluation.

    A one-device-per-stage placement (``model == "one-device-per-stage"``) has ``evaluation``, the one
    evaluator's per-device loads; it is ``None`` only when there is no placement (status
    ``infeasible``, or a limit hit before any was found; ``solution.message`` says).

    A stage plan (``model == "stages"``: replicas ``d``, tensor parallelism ``t``, a variant per node,
    memory by schedule; :func:`placement.place_model` by default) also has ``problem``, the stage
    model's problem it was solved on, and ``stage_evaluation``, the one evaluator's
    (:func:`graphs.parallel.evaluate_plan`) answer on it; ``evaluation`` is then ``None``, ``stages`` lists
    the stages and ``node_of`` maps every node of ``graph`` to the problem's node holding it.
    """

    graph: OpGraph
    cluster: Cluster
    solution: Solution
    evaluation: Evaluation | None
    objective: str = "max-load"
    problem: ParallelProblem | None = None
    node_of: np.ndarray | None = None
    #: a stage problem's time unit in ``graph``'s (an ONNX model: seconds per sample -> ms per batch)
    time_scale: float = 1.0
    #: the front-end settings that rebuild the stage problem (granularity, devices, costs, ...)
    settings: Mapping = field(default_factory=dict)

    @property
    def model(self) -> str:
        return "one-device-per-stage" if self.problem is None else "stages"

    @property
    def status(self) -> Status:
        return self.solution.status

    @property
    def stage_evaluation(self) -> PlanEvaluation | None:
        """The stage plan's evaluation (``None`` for a one-device-per-stage placement or no plan)."""
        return self.solution.evaluation if self.problem is not None else None

    @property
    def stages(self) -> tuple[StageEvaluation, ...]:
        """A stage plan's stages in pipeline order (each with its ``stage``: nodes, kind, ``d``, ``t``,
        variants; and its time per sample, memory, devices); ``()`` for a one-device-per-stage
        placement (its devices are ``evaluation.devices``)."""
        ev = self.stage_evaluation
        return ev.stages if ev is not None else ()

    @cached_property
    def _stage_devices(self) -> list[list[str]]:
        """Each stage's device names (``a100:0`` ..), kind by kind in stage order."""
        plan = [s.stage for s in self.stages]
        nxt = [0] * len(self.problem.kinds)
        out = []
        for st in plan:
            name = self.problem.kinds[st.kind].name
            out.append([f"{name}:{nxt[st.kind] + j}" for j in range(st.t * st.d)])
            nxt[st.kind] += st.t * st.d
        return out

    @cached_property
    def assignment(self) -> np.ndarray | None:
        """The device number of every node; for a stage plan, the first device of its stage (a stage
        holds ``t * d`` devices: :meth:`devices_of`)."""
        if self.problem is None:
            return self.solution.assignment
        if self.stage_evaluation is None:
            return None
        first = np.concatenate([[0], np.cumsum([k.count for k in self.problem.kinds])[:-1]])
        nxt = np.zeros(len(self.problem.kinds), np.int64)
        dev = np.full(self.problem.graph.num_nodes, -1, np.int64)
        for s in self.stages:
            st = s.stage
            dev[list(st.nodes)] = first[st.kind] + nxt[st.kind]
            nxt[st.kind] += st.t * st.d
        return dev[self.node_of]

    @cached_property
    def latency(self):
        """The single-sample latency evaluation of a one-device-per-stage placement
        (:func:`graphs.latency.latency`); ``None`` when there is no placement, and for a stage plan
        (whose latency the stage model does not define)."""
        if self.assignment is None or self.problem is not None:
            return None
        from graphs.latency import latency

        return latency(self.graph, self.cluster, self.assignment,
                       subgraphs=self.solution.stats.get("subgraphs"))

    @property
    def max_load(self) -> float:
        """The evaluator's max-load of the placement, in the graph's time unit (``inf`` when there is
        none); for a stage plan, its time per sample scaled to that unit (``time_scale``)."""
        if self.problem is not None:
            ev = self.stage_evaluation
            return ev.objective * self.time_scale if ev is not None else float("inf")
        return self.evaluation.max_load if self.evaluation is not None else float("inf")

    def _stage_of(self, node: str) -> int:
        if self.assignment is None:
            raise ValueError("there is no placement")
        try:
            u = int(self.node_of[self.graph.names.index(node)])
        except ValueError:
            raise KeyError(f"no node called {node!r}") from None
        return next(i for i, s in enumerate(self.stages) if u in s.stage.nodes)

    def device_of(self, node: str) -> str:
        """Name of the device holding the node called ``node``; for a stage plan, its stage's devices
        (``a100:0-3``)."""
        if self.problem is not None:
            names = self._stage_devices[self._stage_of(node)]
            return names[0] if len(names) == 1 else f"{names[0]}-{names[-1].rpartition(':')[2]}"
        if self.assignment is None:
            raise ValueError("there is no placement")
        i = self.graph.names.index(node)
        return self.cluster.device_name(int(self.assignment[i]))

    def devices_of(self, node: str) -> list[str]:
        """Every device that runs the node called ``node``: one, or its stage's ``t * d``."""
        if self.problem is not None:
            return list(self._stage_devices[self._stage_of(node)])
        return [self.device_of(node)]


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
