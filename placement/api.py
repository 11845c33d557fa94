"""The library entry points a compiler pass calls: plain functions over plain data.

:func:`place` takes either problem: an operator graph with its cluster (the one-device-per-stage model)
or a stage-model :class:`~graphs.parallel.ParallelProblem` alone (replicas ``d``, tensor parallelism
``t``, a variant per node; a Piper file's ``read_piper(path).problem``), whose devices it carries:

    >>> from graphs import Cluster, DeviceKind, Node, OpGraph
    >>> from placement import place
    >>> g = OpGraph.from_nodes(
    ...     [Node("a", {"gpu": 2.0}, comm=0.5), Node("b", {"gpu": 2.0}, comm=0.5), Node("c", {"gpu": 2.0})],
    ...     [("a", "b"), ("b", "c")])
    >>> p = place(g, Cluster((DeviceKind("gpu", 2),)))  # exact DP, through the default 'auto'
    >>> p.status.value, p.max_load
    ('optimal', 4.5)
    >>> from graphs.parallel import from_opgraph
    >>> problem, _ = from_opgraph(g, Cluster((DeviceKind("gpu", 2),)))  # the same, as a stage problem
    >>> s = place(problem)
    >>> s.model, s.max_load, s.device_of("c")
    ('stages', 4.5, 'gpu:1')

:func:`evaluate` scores an assignment of the first (``evaluate(graph, cluster, assignment)``) or a plan
of the second (``evaluate(problem, plan)``, a sequence of :class:`~graphs.parallel.Stage`). Nothing here
prints or keeps global state; errors are :class:`graphs.errors.PlacementError` subclasses, and a wrong
kind of argument is a :class:`TypeError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from graphs.errors import InputError, NoPlacementError
from graphs.evaluate import Evaluation
from graphs.evaluate import evaluate as _evaluate
from graphs.model import Cluster, OpGraph
from graphs.parallel import (
    ParallelProblem,
    PlanEvaluation,
    Stage,
    evaluate_plan,
    stage_device_names,
    stage_device_numbers,
    stage_devices,
)
from solvers.base import Solution, SolveOptions, Status
from solvers.registry import solve

if TYPE_CHECKING:
    from graphs.parallel import StageEvaluation

__all__ = ["Placement", "place", "evaluate", "DEFAULT_SOLVER"]

DEFAULT_SOLVER = "auto"

#: the time fields of a stage's evaluation, scaled together to ``max_load``'s unit
_STAGE_TIMES = ("time_per_sample", "compute", "comm", "resync", "latency", "comm_in", "comm_out",
                "compute_backward")


@dataclass(frozen=True, eq=False)
class Placement:
    """A solver's answer together with its evaluation.

    A one-device-per-stage placement (``model == "one-device-per-stage"``) has ``graph``, ``cluster`` and
    ``evaluation``, the one evaluator's per-device loads; ``evaluation`` is ``None`` only when there is no
    placement (status ``infeasible``, or a limit hit before any was found; ``solution.message`` says).

    A stage plan (``model == "stages"``: replicas ``d``, tensor parallelism ``t``, a variant per node,
    memory by schedule; :func:`placement.place_model` by default, :func:`place` on a
    :class:`~graphs.parallel.ParallelProblem`) also has ``problem``, the stage model's problem it was
    solved on, and ``stage_evaluation``, the one evaluator's (:func:`graphs.parallel.evaluate_plan`)
    answer on it; ``evaluation`` is then ``None`` and ``stages`` lists the stages. Two kinds of stage plan:

    * of an operator graph (an ONNX model, :func:`placement.place_model`): ``graph`` and ``cluster`` are
      the operators' and ``node_of`` maps every operator of ``graph`` to the problem's node holding it;
      nodes are named by the operators' names and ``assignment`` is indexed by ``graph``'s operators;
    * of a problem alone (:func:`place` on a ParallelProblem, e.g. a Piper file's): ``graph``,
      ``cluster`` and ``node_of`` are ``None``; the nodes are the problem's, named by their ids
      (``problem.graph.ids``), ``assignment`` is indexed by the problem's nodes, and ``max_load`` is in
      the problem's own unit (a Piper file's: seconds per sample).
    """

    graph: OpGraph | None
    cluster: Cluster | None
    solution: Solution
    evaluation: Evaluation | None
    objective: str = "max-load"
    problem: ParallelProblem | None = None
    node_of: np.ndarray | None = None
    #: a stage problem's time unit in ``graph``'s (an ONNX model: seconds per sample -> ms per batch)
    time_scale: float = 1.0
    #: the front-end settings that rebuild the stage problem (granularity, devices, costs, ...)
    settings: Mapping = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.problem is None and (self.graph is None or self.cluster is None):
            raise TypeError("a one-device-per-stage Placement needs its graph and cluster (a stage plan "
                            "placed from its problem alone passes problem=)")

    def __repr__(self) -> str:
        # what a user printing a placement wants to see, not the graph's arrays
        value = "none" if self.assignment is None else f"{self.max_load:.6g}"
        return (f"Placement(model={self.model!r}, status={self.status.value!r}, max_load={value}, "
                f"stages={len(self.stages)}, solver={self.solution.solver!r})")

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

    @cached_property
    def stages(self) -> tuple[StageEvaluation, ...]:
        """The plan's stages in pipeline order, each with its ``stage`` (nodes, kind, ``d``, ``t``,
        variants) and its time per sample, memory and devices; ``()`` when there is no placement. Its
        times are in :attr:`max_load`'s unit, the largest ``time_per_sample`` being ``max_load`` (an ONNX
        model's: ms per run of its batch; the stage problem's evaluation, :attr:`stage_evaluation`, is in
        the problem's own unit, seconds per sample). A one-device-per-stage placement is the ``d = t = 1``
        case: one stage per device that holds nodes (in device order when the placement is not
        contiguous), its nodes ``graph``'s operators and its kind an index of ``cluster.kinds``; its time
        per sample is the device's load."""
        if self.problem is None:
            pe = None if self.evaluation is None else self.evaluation.plan
            if pe is None:
                return ()
            order = pe.stage_order or range(len(pe.stages))
            return tuple(pe.stages[i] for i in order)
        ev = self.stage_evaluation
        if ev is None:
            return ()
        if self.time_scale == 1.0:
            return ev.stages
        scale = self.time_scale
        return tuple(replace(s, **{f: getattr(s, f) * scale for f in _STAGE_TIMES}) for s in ev.stages)

    @property
    def bound(self) -> float | None:
        """The solver's proven lower bound on its objective (:attr:`objective`: the max-load, which is
        :attr:`max_load`; the latency, or split-max, for those objectives), in its unit; ``None`` when none
        was proven."""
        b = self.solution.bound
        if b is None:
            return None
        return b * self.time_scale if self.problem is not None else b

    @property
    def gap(self) -> float | None:
        """``(value - bound) / value`` of the solver's objective, as it reported it (``None``: no bound)."""
        return self.solution.gap

    @cached_property
    def _stage_devices(self) -> list[list[str]]:
        """Each stage's device names (``a100:0`` ..), kind by kind in stage order."""
        return stage_device_names(self.problem, [s.stage for s in self.stages])

    @cached_property
    def assignment(self) -> np.ndarray | None:
        """The device number of every node (devices numbered kind by kind, as
        :meth:`graphs.model.Cluster.devices`); ``None`` when there is no placement. For a stage plan,
        the first device of its stage (a stage holds ``t * d`` devices: :meth:`devices_of`), indexed by
        ``graph``'s operators, or by the problem's nodes when there is no operator graph."""
        if self.problem is None:
            return self.solution.assignment
        if self.stage_evaluation is None:
            return None
        plan = [s.stage for s in self.stages]
        dev = np.full(self.problem.graph.num_nodes, -1, np.int64)
        for st, numbers in zip(plan, stage_device_numbers(self.problem, plan)):
            dev[list(st.nodes)] = numbers[0]
        return dev if self.node_of is None else dev[self.node_of]

    @cached_property
    def latency(self):
        """The single-sample latency evaluation of a one-device-per-stage placement
        (:func:`graphs.latency.inference_latency`); ``None`` when there is no placement, for a stage plan
        (whose latency is its evaluation's), and for a training graph (the latency model is an inference
        model)."""
        if self.assignment is None or self.problem is not None:
            return None
        from graphs.latency import inference_latency

        return inference_latency(self.graph, self.cluster, self.assignment,
                                 subgraphs=self.solution.stats.get("subgraphs"))

    @property
    def max_load(self) -> float:
        """The evaluator's max-load of the placement, in the graph's time unit (``inf`` when there is
        none); for a stage plan, its time per sample scaled to that unit (``time_scale``; the problem's
        own unit when there is no operator graph)."""
        if self.problem is not None:
            ev = self.stage_evaluation
            return ev.objective * self.time_scale if ev is not None else float("inf")
        return self.evaluation.max_load if self.evaluation is not None else float("inf")

    @cached_property
    def _node_index(self) -> dict:
        """Problem node of every node id, for a stage plan without an operator graph."""
        return {x: u for u, x in enumerate(self.problem.graph.ids)}

    def _stage_of(self, node: str | int) -> int:
        if self.assignment is None:
            raise NoPlacementError(f"there is no placement (status {self.status.value}): "
                                   f"{self.solution.message or 'none found'}")
        if self.graph is None:
            try:
                u = self._node_index[node]
            except (KeyError, TypeError):
                raise KeyError(f"no node with id {node!r} (the problem's node ids: problem.graph.ids)") \
                    from None
        else:
            try:
                u = int(self.node_of[self.graph.names.index(node)])
            except ValueError:
                raise KeyError(f"no node called {node!r}") from None
        return next(i for i, s in enumerate(self.stages) if u in s.stage.nodes)

    def device_of(self, node: str | int) -> str:
        """Name of the device holding the node called ``node`` (an operator's name; a problem's node id
        when the plan has no operator graph); for a stage plan, its stage's devices (``a100:0-3``)."""
        if self.problem is not None:
            return stage_devices(self.problem, [s.stage for s in self.stages])[self._stage_of(node)]
        if self.assignment is None:
            raise NoPlacementError(f"there is no placement (status {self.status.value}): "
                                   f"{self.solution.message or 'none found'}")
        try:
            i = self.graph.names.index(node)
        except ValueError:  # as a stage plan's: a name the graph does not have is a missing key
            raise KeyError(f"no node called {node!r}") from None
        return self.cluster.device_name(int(self.assignment[i]))

    def devices_of(self, node: str | int) -> list[str]:
        """Every device that runs the node ``node`` (as :meth:`device_of` names it): one, or its stage's
        ``t * d``."""
        if self.problem is not None:
            return list(self._stage_devices[self._stage_of(node)])
        return [self.device_of(node)]


def _kind(x) -> str:
    return "None" if x is None else type(x).__name__


def _not_a_graph(fn: str, x) -> TypeError:
    """The error for a first argument that is neither an OpGraph nor a ParallelProblem."""
    hint = ""
    if hasattr(x, "problem") and isinstance(x.problem, ParallelProblem):
        hint = f"; a {_kind(x)}'s stage problem is its .problem: {fn}(w.problem, ...)"
    elif hasattr(x, "graph") and isinstance(x.graph, OpGraph) and hasattr(x, "cluster"):
        hint = f"; a {_kind(x)} holds both: {fn}(w.graph, w.cluster, ...)"
    elif isinstance(x, str):
        hint = ("; read a file first (placement.read_piper(path).problem, placement.read_workload(path)), "
                "or place an ONNX model with placement.place_model")
    return TypeError(f"{fn}() takes an OpGraph with its Cluster or a ParallelProblem, got {_kind(x)}{hint}")


def place(graph: OpGraph | ParallelProblem, cluster: Cluster | None = None, solver: str | None = None,
          options: SolveOptions | None = None) -> Placement:
    """Place a problem with the named solver and evaluate the result. The default,
    :data:`DEFAULT_SOLVER` (``auto``), runs the exact DP whenever it fits the limits and a labelled
    large-graph path otherwise (see :mod:`solvers.auto`).

    ``place(graph, cluster)``: an :class:`~graphs.model.OpGraph` on a :class:`~graphs.model.Cluster`,
    one device per stage. ``place(problem)``: a stage-model :class:`~graphs.parallel.ParallelProblem`
    (it carries its device kinds: no cluster), solved by :func:`solvers.registry.solve` in its stage
    form; the :class:`Placement` has ``model == "stages"``, no operator graph, and names nodes by the
    problem's ids. The solver and options are keywords or the third and fourth arguments."""
    options = options or SolveOptions()
    if not isinstance(options, SolveOptions):
        raise TypeError(f"options must be a SolveOptions, got {_kind(options)}")
    if solver is not None and not isinstance(solver, str):
        raise TypeError(f"solver must be a solver's name (a str), got {_kind(solver)}")
    if isinstance(graph, ParallelProblem):
        if cluster is not None:
            hint = f" (to name the solver: place(problem, solver={cluster!r}))" if isinstance(cluster, str) \
                else ""
            raise TypeError(f"place(problem): a ParallelProblem carries its device kinds (problem.kinds), "
                            f"so it takes no cluster; got {_kind(cluster)}{hint}")
        solution = solve(graph, solver=solver or DEFAULT_SOLVER, options=options)
        return Placement(None, None, solution, None, options.objective, problem=graph)
    if not isinstance(graph, OpGraph):
        raise _not_a_graph("place", graph)
    if not isinstance(cluster, Cluster):
        raise TypeError(f"place(graph, cluster): an OpGraph is placed on a Cluster, got {_kind(cluster)}")
    solution = solve(graph, cluster, solver=solver or DEFAULT_SOLVER, options=options)
    ev = None if solution.assignment is None else _evaluate(graph, cluster, solution.assignment)
    return Placement(graph, cluster, solution, ev, options.objective)


def evaluate(graph: OpGraph | ParallelProblem, cluster: Cluster | Iterable[Stage] | None = None,
             assignment: Iterable[int] | np.ndarray | None = None) -> Evaluation | PlanEvaluation:
    """Score any placement with the one evaluator of its model.

    ``evaluate(graph, cluster, assignment)``: loads, max-load, validity and contiguity of any
    assignment (device number per node) of an OpGraph on a Cluster (:func:`graphs.evaluate.evaluate`).

    ``evaluate(problem, plan)``: a ParallelProblem and a plan, a sequence of
    :class:`~graphs.parallel.Stage` in pipeline order (a solution's ``plan``); returns
    :func:`graphs.parallel.evaluate_plan`'s :class:`~graphs.parallel.PlanEvaluation` (time per sample,
    per-stage details, and every broken constraint in ``problems``). A stage whose fields are not
    node, kind and variant indices and degrees is an :class:`InputError`."""
    if isinstance(graph, ParallelProblem):
        plan = cluster
        if assignment is not None:
            raise TypeError("evaluate(problem, plan) takes two arguments: a ParallelProblem carries its "
                            "devices, and its plan says where every node goes")
        return evaluate_plan(graph, _checked_plan(plan))
    if not isinstance(graph, OpGraph):
        raise _not_a_graph("evaluate", graph)
    if not isinstance(cluster, Cluster):
        raise TypeError(f"evaluate(graph, cluster, assignment): an OpGraph is scored on a Cluster, got "
                        f"{_kind(cluster)}")
    if assignment is None:
        raise TypeError("evaluate(graph, cluster, assignment): give the assignment (a device number per "
                        "node)")
    return _evaluate(graph, cluster, assignment)


def _is_index(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _checked_plan(plan) -> list[Stage]:
    """``plan`` as a list of :class:`Stage`, or a TypeError / InputError naming what is wrong."""
    if plan is None:
        raise TypeError("evaluate(problem, plan): give the plan, a sequence of graphs.parallel.Stage")
    if isinstance(plan, Cluster):
        raise TypeError("evaluate(problem, plan): a ParallelProblem carries its devices; the second argument "
                        "is the plan (a sequence of graphs.parallel.Stage), not a Cluster")
    if isinstance(plan, Placement):
        raise TypeError("evaluate(problem, plan): the plan is a sequence of Stage; a Placement's is "
                        "[s.stage for s in p.stages]")
    if isinstance(plan, (str, bytes, Mapping)) or not isinstance(plan, Iterable):
        raise TypeError(f"evaluate(problem, plan): the plan is a sequence of graphs.parallel.Stage, got "
                        f"{_kind(plan)}")
    stages = list(plan)
    for i, st in enumerate(stages):
        if not isinstance(st, Stage):
            raise TypeError(f"evaluate(problem, plan): plan[{i}] is not a graphs.parallel.Stage "
                            f"(got {_kind(st)})")
        for what in ("nodes", "variants"):
            xs = getattr(st, what)
            if isinstance(xs, (str, bytes)) or not hasattr(xs, "__iter__") or \
                    not all(_is_index(x) for x in xs):
                raise InputError(f"plan[{i}]: {what} must be a sequence of indices (ints; node ids are "
                                 f"problem.graph.ids' positions), got {xs!r}")
        for what in ("kind", "d", "t"):
            if not _is_index(getattr(st, what)):
                raise InputError(f"plan[{i}]: {what} must be an integer, got {getattr(st, what)!r}")
    # numpy arrays and integers, as the checks above accept them, as the plain ints the evaluator reads
    return [Stage(tuple(int(x) for x in st.nodes), int(st.kind), int(st.d), int(st.t),
                  tuple(int(v) for v in st.variants)) for st in stages]
