"""Device placement for deep-learning operator graphs: the public library interface.

``place(graph, cluster, solver=...)`` returns a :class:`Placement`; ``evaluate(graph, cluster,
assignment)`` scores any assignment. Graphs and clusters come from :mod:`graphs`.
"""

from graphs.errors import CycleError, InfeasibleError, InputError, PlacementError, ProblemTooLargeError
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.reference import Workload, read_split, read_workload
from solvers.base import Solution, SolveOptions, Status

from .api import DEFAULT_SOLVER, Placement, evaluate, place

__all__ = [
    "place", "evaluate", "Placement", "DEFAULT_SOLVER", "SolveOptions", "Solution", "Status",
    "OpGraph", "Node", "Cluster", "DeviceKind", "Workload", "read_workload", "read_split",
    "PlacementError", "InputError", "CycleError", "InfeasibleError", "ProblemTooLargeError",
]
