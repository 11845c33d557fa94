"""Baseline: a given split (a human expert's, say), evaluated.

The split is a file naming the cluster's devices (``{"devices": {"a100:0": [nodes], "cpu:0": [...]}}``)
or in the reference result format (``{"fpgas": [{"nodes": [ids]}, ...], "cpus": [...]}``), see
:func:`graphs.reference.parse_split`; its path comes in ``options.raw["split"]``. Backward nodes the
split does not list go where their colocated forward node is, so the split of an inference graph also
places the matching training graph.

A split that breaks a constraint (a node on a device that cannot run it, memory over a capacity, a
colocation class cut) is rejected with :class:`~graphs.errors.InputError` listing every problem.
"""

from __future__ import annotations

import time

from graphs.errors import InputError
from graphs.evaluate import evaluate
from graphs.model import Cluster, OpGraph
from graphs.reference import read_split

from ._common import finish, require_objective
from .base import Solution, SolveOptions

__all__ = ["solve"]


def solve(graph: OpGraph, cluster: Cluster, options: SolveOptions | None = None) -> Solution:
    """Evaluate the split named by ``options.raw["split"]`` (a path)."""
    options = options or SolveOptions()
    require_objective("expert", options, ("max-load", "latency"))
    t0 = time.perf_counter()
    path = options.raw.get("split")
    if not path:
        raise InputError("the expert solver evaluates a given split: pass its path as options.raw['split']")
    assignment = read_split(path, graph, cluster)
    ev = evaluate(graph, cluster, assignment)
    if not ev.valid:
        raise InputError("the split is not a valid placement: " + "; ".join(ev.problems), source=str(path))
    return finish("expert", graph, cluster, assignment, options, t0,
                  message=f"split read from {path}" + ("" if ev.contiguous else " (not contiguous)"),
                  stats={"contiguous": ev.contiguous})
