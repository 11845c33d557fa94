"""Solvers by name. Modules are imported on first use, so heavy dependencies (highspy, onnxruntime)
load only when their solver is asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from graphs.errors import InputError

from .base import Solution

__all__ = ["SOLVERS", "get_solver", "solver_names"]

# name -> "module:function"; every function is solve(graph, cluster, options) -> Solution
SOLVERS: dict[str, str] = {
    "auto": "solvers.auto:solve",
    "auto-replicated": "solvers.auto_replicated:solve",
    "dp": "solvers.dp:solve",
    "dp-replicated": "solvers.dp_replicated:solve",
    "pipedream": "solvers.pipedream:solve",
    "pipedream-replicated": "solvers.pipedream_replicated:solve",
    "single": "solvers.single:solve",
    "expert": "solvers.expert:solve",
    "local-search": "solvers.local_search:solve",
    "partition": "solvers.partition:solve",
    "greedy-latency": "solvers.greedy:solve",
    "ip": "solvers.ip:solve",
    "ip-noncontig": "solvers.ip:solve_noncontiguous",
    "ip-replicated": "solvers.ip_replicated:solve",
}


def solver_names() -> list[str]:
    return list(SOLVERS)


def get_solver(name: str) -> Callable[..., Solution]:
    """The solve function registered as ``name``; :class:`InputError` lists the choices otherwise."""
    try:
        target = SOLVERS[name]
    except KeyError:
        raise InputError(f"unknown solver {name!r}; choose one of: {', '.join(SOLVERS)}") from None
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)
