"""What every solver shares: one status vocabulary, one options type, one result type.

Every solver is a function ``solve(graph, cluster, options) -> Solution``. A solver that stops at a
limit returns its best placement with status ``FEASIBLE``, its bound and gap; it never says ``OPTIMAL``
unless it proved it. ``INFEASIBLE`` is a status too, with the reason in ``message``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Status", "SolveOptions", "Solution", "OBJECTIVES"]

OBJECTIVES = ("max-load", "split-max", "latency")


class Status(str, enum.Enum):
    OPTIMAL = "optimal"  # proven optimal (within the requested gap for an IP)
    FEASIBLE = "feasible"  # a valid placement; a limit stopped the search or the method is a heuristic
    INFEASIBLE = "infeasible"  # proven: no placement satisfies the constraints
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SolveOptions:
    """Options every solver understands (each ignores what does not apply to it).

    ``objective``: ``"max-load"`` (pipelined throughput, the default), ``"split-max"`` (training: max
    forward load + max backward load) or ``"latency"`` (one sample end to end); a solver that does not
    support the objective raises :class:`~graphs.errors.InputError`. ``subgraphs_per_device``: for
    latency, how many contiguous subgraphs one accelerator may run one after another. ``backend``: the
    MIP backend of the integer programs (``"highs"`` or ``"pulp"``). ``warm_start``: an assignment a
    solver may start from. ``time_limit`` in seconds (``None``: none); ``gap``: relative optimality gap
    at which an IP may stop; ``threads``: solver threads (``None``: the solver's default);
    ``seed`` for randomised methods;
    ``progress``: a callable taking a fraction in [0, 1] (called from the solving thread);
    ``raw``: solver-specific options, passed through untouched.
    """

    objective: str = "max-load"
    time_limit: float | None = None
    gap: float = 1e-4
    threads: int | None = None
    seed: int = 0
    progress: Any = None
    subgraphs_per_device: int = 1
    backend: str = "highs"
    warm_start: Any = None
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Solution:
    """A solver's answer: ``assignment[u]`` is the device number of node ``u`` (see ``Cluster``).

    ``objective`` is the solver's value of its objective on that assignment; ``bound`` a proven lower
    bound (``None`` when unknown), ``gap`` = (objective - bound) / objective. ``stats`` holds
    solver-specific counters (ideals, pairs visited, nodes explored...).
    """

    assignment: np.ndarray | None
    objective: float
    status: Status
    solver: str
    bound: float | None = None
    gap: float | None = None
    time: float = 0.0
    message: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)
