"""Device placement for deep-learning operator graphs: the public library interface.

``place(graph, cluster, solver=...)`` returns a :class:`Placement`; ``evaluate(graph, cluster,
assignment)`` scores any assignment. ``place(problem)`` solves a stage-model :class:`ParallelProblem`
(``read_piper(path).problem`` for a Piper-format file) and ``evaluate(problem, plan)`` scores a plan
(a sequence of :class:`Stage`). Graphs and clusters come from :mod:`graphs`. ONNX models in
memory (``onnx.ModelProto``, ``onnx_ir.Model``) or on disk: ``place_model``, ``annotate``, ``split``
(:mod:`placement.inmemory`); an ``onnx_ir`` pass: :mod:`placement.passes`.

The names load on first use, so that ``import placement`` and ``placement --help`` stay quick.
"""

from __future__ import annotations

import importlib
import logging

__version__ = "0.1.0"

# as graphs' loggers: warnings go to the caller's logging configuration, never to stderr by default
logging.getLogger("placement").addHandler(logging.NullHandler())

_HOME = {
    "place": "placement.api", "evaluate": "placement.api", "Placement": "placement.api",
    "DEFAULT_SOLVER": "placement.api",
    "SolveOptions": "solvers.base", "Solution": "solvers.base", "Status": "solvers.base",
    "OpGraph": "graphs.model", "Node": "graphs.model", "Cluster": "graphs.model",
    "DeviceKind": "graphs.model", "ParallelProblem": "graphs.parallel", "Stage": "graphs.parallel",
    "read_piper": "placement.stages",
    "Workload": "graphs.reference", "read_workload": "graphs.reference", "read_split": "graphs.reference",
    "PlacementError": "graphs.errors", "InputError": "graphs.errors", "CycleError": "graphs.errors",
    "InfeasibleError": "graphs.errors", "ProblemTooLargeError": "graphs.errors",
    "place_model": "placement.inmemory", "annotate": "placement.inmemory", "split": "placement.inmemory",
}

__all__ = [
    "place", "evaluate", "place_model", "annotate", "split", "Placement", "DEFAULT_SOLVER", "SolveOptions",
    "Solution", "Status",
    "OpGraph", "Node", "Cluster", "DeviceKind", "ParallelProblem", "Stage", "Workload", "read_workload",
    "read_split", "read_piper",
    "PlacementError", "InputError", "CycleError", "InfeasibleError", "ProblemTooLargeError",
]


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'placement' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
