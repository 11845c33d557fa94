"""Placement solvers. Each is ``solve(graph, cluster, options) -> Solution``; see :mod:`solvers.registry`."""

from .base import Solution, SolveOptions, Status
from .registry import get_solver, solver_names

__all__ = ["Solution", "SolveOptions", "Status", "get_solver", "solver_names"]
