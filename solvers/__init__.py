"""Placement solvers. Each is ``solve(graph, cluster, options) -> Solution``; see :mod:`solvers.registry`."""

import logging

from .base import Solution, SolveOptions, Status
from .registry import get_solver, solver_names

__all__ = ["Solution", "SolveOptions", "Status", "get_solver", "solver_names"]

# the library logs (a cold kernel cache's compile, at INFO) and never prints: the caller's logging decides
logging.getLogger("solvers").addHandler(logging.NullHandler())
