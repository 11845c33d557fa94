"""The stage DP's fast path: a stage problem that is exactly the one-device-per-stage pipeline model
(:func:`graphs.parallel.pipeline_misfit` is ``''``) is solved by the pipeline kernel of
:mod:`solvers.dp` on its :func:`graphs.parallel.to_opgraph` graph, and the placement is turned back into a
stage plan, which :func:`graphs.parallel.evaluate_plan` (the one evaluator) scores.

:func:`solvers.dp_stages.solve_problem` dispatches here by itself (``kernel="auto"``), as networkx's
``shortest_path`` picks its unweighted kernel; ``stats["kernel"]`` says which kernel ran.
"""

from __future__ import annotations

import math
import time

from graphs.parallel import ParallelProblem, evaluate_plan, plan_of_assignment, to_opgraph

from . import dp
from .base import BOUND_ROUND_OFF, Solution, SolveOptions, Status, stage_solution

__all__ = ["solve_pipeline"]


def solve_pipeline(problem: ParallelProblem, *, time_limit: float | None = None,
                   max_ideals: int = dp.DEFAULT_MAX_IDEALS, upper_bound: float = math.inf,
                   threads: int | None = None) -> Solution:
    """The optimal plan of a pipeline-model ``problem`` by the pipeline kernel (:func:`solvers.dp.solve`),
    with the statuses and bounds of :func:`solvers.dp_stages.solve_problem`: ``optimal`` (proven),
    ``feasible`` (a limit stopped the search: the best plan over a few topological orders, a lower
    bound), ``infeasible`` (no plan fits the devices, or none has every stage at most ``upper_bound``)
    or ``stopped`` (a limit, before any plan at most ``upper_bound`` was found). ``time_limit`` and
    ``max_ideals`` bound the search as there; ``threads``: the kernel's threads (``None``: its default).
    Raises :class:`~graphs.errors.InputError` when the problem is not the pipeline model, and
    :class:`AssertionError` when the evaluator disagrees with the kernel's value (a bug)."""
    t0 = time.perf_counter()
    graph, cluster = to_opgraph(problem)
    left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
    sol = dp.solve(graph, cluster, SolveOptions(time_limit=left, threads=threads,
                                                raw={"max_ideals": int(max_ideals)}))
    stats = {**(sol.stats or {}), "kernel": "pipeline"}
    if sol.assignment is None:
        return stage_solution("dp", None, None, math.inf, sol.status, time.perf_counter() - t0, sol.message,
                              stats, bound=sol.bound if sol.status == Status.STOPPED else None)
    plan = plan_of_assignment(problem, cluster, sol.assignment)
    ev = evaluate_plan(problem, plan)
    if ev.problems:  # the evaluator is the judge
        raise AssertionError(f"dp (pipeline kernel) produced an invalid plan: {ev.problems}")
    if abs(ev.objective - sol.objective) > BOUND_ROUND_OFF * max(abs(sol.objective), 1e-12):
        raise AssertionError(f"dp (pipeline kernel): plan evaluates to {ev.objective!r}, the kernel says "
                             f"{sol.objective!r}")
    elapsed = time.perf_counter() - t0
    if sol.status == Status.OPTIMAL:
        if not ev.objective <= upper_bound:
            return stage_solution("dp", None, None, math.inf, Status.INFEASIBLE, elapsed,
                                  f"no plan has every stage at most {upper_bound:g}", stats)
        return stage_solution("dp", plan, ev, ev.objective, Status.OPTIMAL, elapsed, "", stats,
                              bound=ev.objective)
    if not ev.objective <= upper_bound:  # the stage kernel keeps no plan above the bound either
        return stage_solution("dp", None, None, math.inf, Status.STOPPED, elapsed,
                              f"{sol.message}; no plan with every stage at most {upper_bound:g} found", stats,
                              bound=sol.bound)
    bound = None if sol.bound is None else min(ev.objective, sol.bound)
    return stage_solution("dp", plan, ev, ev.objective, sol.status, elapsed, sol.message, stats, bound=bound)
