"""Operator graphs: the model, its formats and the structures solvers work on."""

from .errors import CycleError, InfeasibleError, InputError, PlacementError, ProblemTooLargeError
from .model import Cluster, DeviceKind, Node, OpGraph
from .reference import Workload, read_split, read_workload

__all__ = [
    "PlacementError", "InputError", "CycleError", "InfeasibleError", "ProblemTooLargeError",
    "Cluster", "DeviceKind", "Node", "OpGraph", "Workload", "read_workload", "read_split",
]
