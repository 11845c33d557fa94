"""What every solver shares: one status vocabulary, one options type, one result type.

Every solver is a function ``solve(graph, cluster, options) -> Solution``. A solver that stops at a
limit returns its best placement with status ``FEASIBLE``, its bound and gap; it never says ``OPTIMAL``
unless it proved it. ``INFEASIBLE`` is a status too, with the reason in ``message``. ``STOPPED``: a
limit (time, budget) stopped the search before any placement was found, so nothing is known either
way. ``UNKNOWN``: a method that searches a restricted family of placements (a baseline) found none in
it; that proves nothing about the problem.

A solution of the pipeline model (an :class:`~graphs.model.OpGraph` on a :class:`~graphs.model.Cluster`)
carries an ``assignment`` (device per operator); one of the stage model (:mod:`graphs.parallel`) carries
a ``plan`` (stages with degrees and variants) and its ``evaluation``. :func:`solvers.registry.solve` is
the one entry point that checks either against the one evaluator.
"""

from __future__ import annotations

import enum
import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphs.errors import InputError

__all__ = ["Status", "SolveOptions", "Solution", "OBJECTIVES", "CheckedBound", "check_bound",
           "IP_MIN_SECONDS", "CLOSED_GAP", "stage_solution", "BACKENDS", "DEFAULT_BACKEND", "ProgressTeller"]

#: the integer programs' backends (:mod:`solvers._milp`) and the one used unless another is asked for
BACKENDS = ("highs", "pulp")
DEFAULT_BACKEND = "highs"

OBJECTIVES = ("max-load", "split-max", "latency")


class Status(str, enum.Enum):
    OPTIMAL = "optimal"  # proven optimal: the gap is closed (at most CLOSED_GAP)
    FEASIBLE = "feasible"  # a valid placement; a limit stopped the search or the method is a heuristic
    INFEASIBLE = "infeasible"  # proven: no placement satisfies the constraints
    STOPPED = "stopped"  # a limit stopped the search before any placement was found: nothing proven
    UNKNOWN = "unknown"  # a restricted method (a baseline) found no placement: nothing proven
    INVALID = "invalid"  # a given plan (placement evaluate) that breaks a constraint: its problems say which
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SolveOptions:
    """The options of every solver. Each field's type and range are checked when the options are made;
    :func:`solvers.registry.solve` then refuses, with an :class:`~graphs.errors.InputError` naming it,
    an objective the solver does not support and any other field set away from its default that the
    solver does not read (:attr:`~solvers.registry.SolverInfo.honours`): nothing is silently ignored.

    ``objective``: ``"max-load"`` (pipelined throughput, the default), ``"split-max"`` (training: max
    forward load + max backward load) or ``"latency"`` (one sample end to end); a solver that does not
    support the objective raises :class:`~graphs.errors.InputError`. ``subgraphs_per_device``: for
    latency, how many contiguous subgraphs one accelerator may run one after another. ``backend``: the
    MIP backend of the integer programs (``"highs"`` or ``"pulp"``). ``warm_start``: an assignment a
    solver may start from. ``time_limit`` in seconds, at least 0 (``None``: the solver's default, none or
    ``auto``'s :data:`~solvers.auto.DEFAULT_TIME_LIMIT`; ``inf``: none; ``0``: stop at once with what the
    first step gives); ``gap``: relative optimality gap (at least 0) at which an IP may stop;
    ``threads``: solver threads, at least 1 (``None``: the solver's default);
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
    backend: str = DEFAULT_BACKEND
    warm_start: Any = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # checked here, naming the field, rather than failing (or being ignored) inside a solver; the
        # errors are place_model's: TypeError for a wrong type, InputError for a bad value
        t = self.time_limit
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, numbers.Real):
                raise TypeError(f"SolveOptions(time_limit=...) takes a number of seconds or None, got "
                                f"{type(t).__name__}")
            if not t >= 0:  # NaN too
                raise InputError(f"SolveOptions(time_limit={t!r}): the time limit must be a non-negative "
                                 f"number of seconds (0: stop at once; inf: none)")
        if self.threads is not None:
            if isinstance(self.threads, bool) or not isinstance(self.threads, numbers.Integral):
                raise TypeError(f"SolveOptions(threads=...) takes an integer or None, got "
                                f"{type(self.threads).__name__}")
            if self.threads < 1:
                raise InputError(f"SolveOptions(threads={self.threads!r}): at least 1 thread (None: the "
                                 f"solver's default)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise TypeError(f"SolveOptions(seed=...) takes an integer, got {type(self.seed).__name__}")
        if self.progress is not None and not callable(self.progress):
            raise TypeError(f"SolveOptions(progress=...) takes a callable of a fraction in [0, 1] or None, "
                            f"got {type(self.progress).__name__}")
        if isinstance(self.gap, bool) or not isinstance(self.gap, numbers.Real):
            raise TypeError(f"SolveOptions(gap=...) takes a number, got {type(self.gap).__name__}")
        if not 0 <= self.gap <= 1:  # NaN too; (value - bound) / value is at most 1
            raise InputError(f"SolveOptions(gap={self.gap!r}): the relative gap must be a number from 0 "
                             f"to 1")


#: the words every answer whose search took a Ctrl-C says (a sweep's ``stopped`` starts with them,
#: :attr:`Solution.interrupted` reads them), defined once for every solver and command
INTERRUPTED = "interrupted (Ctrl-C)"


@dataclass(frozen=True, eq=False)
class Solution:
    """A solver's answer: ``assignment[u]`` is the device number of node ``u`` (see ``Cluster``); for
    the stage model, ``plan`` (stages in pipeline order, :class:`graphs.parallel.Stage`) and its
    ``evaluation`` (:class:`graphs.parallel.PlanEvaluation`). A stage-model plan solved for an
    :class:`~graphs.model.OpGraph` carries both: the plan and the device of every operator.

    ``objective`` is the solver's value of its objective on that assignment; ``bound`` a proven lower
    bound (``None`` when unknown), ``gap`` = (objective - bound) / objective. ``stats`` holds
    solver-specific counters (ideals, pairs visited, nodes explored...), plain JSON-able values.
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
    plan: tuple | None = None
    evaluation: Any = None

    @property
    def found(self) -> bool:
        """Is there a placement (an assignment or a plan)?"""
        return self.assignment is not None or self.plan is not None

    @property
    def interrupted(self) -> bool:
        """Did a Ctrl-C stop the search? The solvers (the DP, HiGHS, the starts) take the
        ``KeyboardInterrupt``, return what they have and say "interrupted" in ``message``; it is not
        raised again, so a caller with more to do must stop on this."""
        return "interrupted" in (self.message or "")


def time_left(deadline: float | None) -> float | None:
    """Seconds from now to ``deadline`` (a :func:`time.perf_counter` time), at least 0; ``None``: no
    deadline."""
    return None if deadline is None else max(0.0, deadline - time.perf_counter())


def relative_gap(value: float | None, bound: float | None) -> float | None:
    """The relative gap ``(value - bound) / value`` of a plan's ``value`` over a proven lower ``bound``:
    at least 0 (a bound is never above a plan, tolerances aside), 0 for a value of 0, and ``None`` where
    either is unknown or not finite."""
    if value is None or bound is None or not math.isfinite(value) or not math.isfinite(bound):
        return None
    return max(0.0, (value - bound) / value) if value > 0 else 0.0


def stage_solution(solver: str, plan, evaluation, objective: float, status: Status, time: float,
                   message: str = "", stats: Mapping[str, Any] | None = None, *,
                   bound: float | None = None) -> Solution:
    """A :class:`Solution` of the stage model: ``plan`` and its ``evaluation`` (``None`` for none)."""
    gap = relative_gap(objective, bound)
    return Solution(None, objective, status, solver, bound=bound, gap=gap, time=time, message=message,
                    stats=dict(stats or {}), plan=None if plan is None else tuple(plan),
                    evaluation=evaluation)


#: a relative gap at most this (plus a MIP solver's tolerance, :data:`BOUND_TOLERANCE_REL`) is closed:
#: only then is a solution ``optimal`` (a requested ``--gap`` that is met is ``feasible``, within-gap)
CLOSED_GAP = 1e-9

# relative round-off between two evaluations of one placement (summation order)
BOUND_ROUND_OFF = 1e-9
# how far a MIP solver's bound may exceed the evaluated objective and still be the same number: its
# feasibility tolerances (about 1e-7 absolute on a row, 1e-6 on integrality) let the model's loads
# come out that much lower than the evaluator's
BOUND_TOLERANCE_REL = 1e-6
BOUND_TOLERANCE_ABS = 1e-7
# HiGHS's root processing (cut separation) checks neither its time limit nor a cancel: an integer
# program started with less time than this overran a 0.6 s limit by 2-3 s on InceptionV3's replicated
# MILP (16k columns). The large-graph paths only start their refining IP with at least this much left.
IP_MIN_SECONDS = 5.0


@dataclass(frozen=True)
class CheckedBound:
    """A lower bound judged against the evaluator's objective of the placement it comes with.

    ``consistent`` is ``False`` when the claimed bound exceeded the objective by more than a MIP solver's
    tolerances (:data:`BOUND_TOLERANCE_REL`, :data:`BOUND_TOLERANCE_ABS`):
    the model that produced it disagrees with the evaluator, so the claimed bound proves nothing and
    ``bound`` is the fallback instead. ``gap`` = (objective - bound) / objective, ``None`` with no bound.
    """

    bound: float | None
    gap: float | None
    consistent: bool
    claimed: float | None


def check_bound(claimed: float | None, value: float, fallback: float | None = None) -> CheckedBound:
    """Judge a solver's ``claimed`` lower bound against ``value``, the evaluator's objective of its
    placement. A bound at most a MIP solver's tolerance above ``value`` is clamped to it; one further
    above is not trusted (a model mismatch must never read as a closed gap) and ``fallback`` (a bound
    that does not depend on that model, or ``None``) is used instead."""
    consistent = True
    bound = None if claimed is None or math.isnan(claimed) or claimed == -math.inf else float(claimed)
    if bound is not None and math.isfinite(value) and \
            bound > value + BOUND_TOLERANCE_REL * abs(value) + BOUND_TOLERANCE_ABS:
        consistent = False
        bound = None
    if fallback is not None and (bound is None or fallback > bound):
        bound = fallback
    if bound is not None and math.isfinite(value):
        bound = min(bound, value)
    return CheckedBound(bound, relative_gap(value, bound), consistent, claimed)


class ProgressTeller:
    """Tells a solver's ``progress`` callable (:attr:`SolveOptions.progress`; ``None``: nothing to tell)
    its fraction done: never below the last told, nor, under ``time_limit`` seconds from now, below the
    part of the limit spent (the search ends by then); at most every ``every`` seconds (1 is always
    told)."""

    def __init__(self, progress, time_limit: float | None = None, every: float = 0.0) -> None:
        self.progress = progress
        self.t0 = time.perf_counter()
        self.limit = time_limit
        self.every = every
        self.last = 0.0
        self.told = -math.inf

    def tell(self, f: float) -> None:
        if self.progress is None:
            return
        now = time.perf_counter()
        if self.limit is not None and f < 1.0:
            f = max(f, min(1.0, (now - self.t0) / self.limit) if self.limit > 0 else 1.0)
        if f <= self.last or (now - self.told < self.every and f < 1.0):
            return
        self.last, self.told = f, now
        self.progress(min(1.0, f))
