"""Operator graphs: the model, its formats and the structures solvers work on."""

import logging

from .errors import (
    CycleError,
    InfeasibleError,
    InputError,
    NoPlacementError,
    PlacementError,
    ProblemTooLargeError,
)
from .model import Cluster, DeviceKind, Node, OpGraph
from .reference import Workload, read_split, read_workload

__all__ = [
    "PlacementError", "InputError", "CycleError", "InfeasibleError", "ProblemTooLargeError",
    "NoPlacementError",
    "Cluster", "DeviceKind", "Node", "OpGraph", "Workload", "read_workload", "read_split",
]

# a library logs its warnings (the "graphs.onnx" logger) but never prints them: without this, a caller that
# configured no logging would get them on stderr from logging's last-resort handler. The command line
# attaches its own handler; a caller's own logging configuration sees them as usual.
logging.getLogger("graphs").addHandler(logging.NullHandler())
