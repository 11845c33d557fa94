"""Device placement for deep-learning operator graphs: the public library interface.

``place(graph, cluster, solver=...)`` returns a :class:`Placement`; ``evaluate(graph, cluster,
assignment)`` scores any assignment. Graphs and clusters come from :mod:`graphs`. ONNX models in
memory (``onnx.ModelProto``, ``onnx_ir.Model``) or on disk: ``place_model``, ``annotate``, ``split``
(:mod:`placement.inmemory`); an ``onnx_ir`` pass: :mod:`placement.passes`.
"""

from graphs.errors import CycleError, InfeasibleError, InputError, PlacementError, ProblemTooLargeError
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.reference import Workload, read_split, read_workload
from solvers.base import Solution, SolveOptions, Status

from .api import DEFAULT_SOLVER, Placement, evaluate, place
from .inmemory import annotate, place_model, split

__all__ = [
    "place", "evaluate", "place_model", "annotate", "split", "Placement", "DEFAULT_SOLVER", "SolveOptions",
    "Solution", "Status",
    "OpGraph", "Node", "Cluster", "DeviceKind", "Workload", "read_workload", "read_split",
    "PlacementError", "InputError", "CycleError", "InfeasibleError", "ProblemTooLargeError",
]
