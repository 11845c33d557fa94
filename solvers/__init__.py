"""Placement solvers. Each is ``solve(graph, cluster, options) -> Solution``."""

from .base import Solution, SolveOptions, Status

__all__ = ["Solution", "SolveOptions", "Status"]
