"""The stage DP's fast path: a stage problem that is exactly the one-device-per-stage pipeline model
(:func:`graphs.parallel.pipeline_misfit` is ``''``) is solved by the pipeline kernel of
:mod:`solvers.dp` on its :func:`graphs.parallel.to_opgraph` graph, and the placement is turned back into a
stage plan, which :func:`graphs.parallel.evaluate_plan` (the one evaluator) scores.

:func:`solvers.dp_stages.solve_problem` dispatches here by itself (``kernel="auto"``), as networkx's
``shortest_path`` picks its unweighted kernel; ``stats["kernel"]`` says which kernel ran.

Any other stage problem contains the one-device-per-stage plans of its ``d = t = 1``, first-variant
*restriction* (:func:`pipeline_restriction`); :func:`solve_restriction` solves that with the same kernel and
scores the plan on the problem itself: a plan and an upper bound on its optimum, never a proof of it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from graphs.parallel import (
    ParallelGraph,
    ParallelProblem,
    Stage,
    Variant,
    evaluate_plan,
    in_flight,
    pipeline_misfit,
    plan_of_assignment,
    stage_memory,
    to_opgraph,
)

from . import dp
from .base import BOUND_ROUND_OFF, Solution, SolveOptions, Status, stage_solution

__all__ = ["solve_pipeline", "pipeline_restriction", "solve_restriction"]


def solve_pipeline(problem: ParallelProblem, *, time_limit: float | None = None,
                   max_ideals: int = dp.DEFAULT_MAX_IDEALS, upper_bound: float = math.inf,
                   threads: int | None = None, tie_break: bool = True, progress=None) -> Solution:
    """The optimal plan of a pipeline-model ``problem`` by the pipeline kernel (:func:`solvers.dp.solve`),
    with the statuses and bounds of :func:`solvers.dp_stages.solve_problem`: ``optimal`` (proven),
    ``feasible`` (a limit stopped the search: the best plan over a few topological orders, a lower
    bound), ``infeasible`` (no plan fits the devices, or none has every stage at most ``upper_bound``)
    or ``stopped`` (a limit, before any plan at most ``upper_bound`` was found). ``time_limit`` and
    ``max_ideals`` bound the search as there; ``threads``: the kernel's threads (``None``: its default).
    ``tie_break=False``: any optimum (the kernel's pass that picks the fewest devices, then the least sum
    of loads, among the optima skipped: a third of the time on a 699-node lattice). ``progress``: the
    kernel's (:attr:`solvers.base.SolveOptions.progress`: the lattice's ideals done).
    Raises :class:`~graphs.errors.InputError` when the problem is not the pipeline model, and
    :class:`AssertionError` when the evaluator disagrees with the kernel's value (a bug)."""
    t0 = time.perf_counter()
    graph, cluster = to_opgraph(problem)
    left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
    sol = dp.solve(graph, cluster, SolveOptions(time_limit=left, threads=threads, progress=progress,
                                                raw={"max_ideals": int(max_ideals), "tie_break": tie_break}))
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


def pipeline_restriction(problem: ParallelProblem, *,
                         flight: int = 1) -> tuple[ParallelProblem, np.ndarray] | str:
    """The one-device-per-stage pipeline model (:func:`graphs.parallel.pipeline_misfit` ``''``) of the
    ``d = t = 1`` stages of ``problem`` that run each node on its first ``t = 1`` variant of the stage's
    kind, or why there is none (a string). Returns the problem and ``variant[j]``, the variant of
    ``problem`` that its variant ``j`` stands for.

    A node's time is its variant's plus all its sync terms (paid in the problem only where the tensor
    crosses a stage: counted always, so the value is never below the problem's), and its memory the
    variant's peak with ``flight`` micro-batches in flight (:func:`graphs.parallel.stage_memory`), the
    largest over its kinds (the model has one memory per node). Under 1F1B a ``d = 1`` stage holds as
    many micro-batches as there are stages from it on, so ``flight = 1`` can admit plans the problem
    refuses, and the number of devices (``N`` under GPipe) cannot: score the plans on ``problem``."""
    g = problem.graph
    devices = sum(k.count for k in problem.kinds)
    if g.colocation is not None:
        return "the nodes have colocation classes"
    if problem.microbatches < devices:
        return f"{problem.microbatches} micro-batches bound the stages below the {devices} devices"
    chosen: list[int] = []
    variants: list[Variant] = []
    memory = np.full(g.num_nodes, -np.inf)
    for (u, k, t), opts in sorted(g.options.items()):
        if t == 1 and problem.kinds[k].count > 0:
            v = g.variants[opts[0]]
            time = v.time + sum(v.sync_in.values()) + sum(v.sync_out.values())
            chosen.append(opts[0])
            variants.append(Variant(u, k, 1, v.name, time, backward_time=min(v.backward_time, time)))
            memory[u] = max(memory[u], stage_memory(problem.schedule, flight, v.a, v.b, v.w)[2])
    if not np.isfinite(memory).all():
        u = int(np.flatnonzero(~np.isfinite(memory))[0])
        return f"node {g.ids[u]} has no t = 1 variant on a kind with devices"
    variants = [Variant(v.node, v.kind, 1, v.name, v.time, b=float(memory[v.node]),
                        backward_time=v.backward_time) for v in variants]
    tensors = [(int(g.tensor_src[e]), g.consumers(e).tolist(), g.tensor_time[:, e])
               for e in range(g.num_tensors)]
    rg = ParallelGraph.build(ids=g.ids, names=g.names, num_kinds=len(problem.kinds),
                             edges=np.stack([g.src, g.dst], 1), tensors=tensors, variants=variants,
                             source=g.source, tensor_edges=False)
    restricted = ParallelProblem(rg, problem.kinds, problem.microbatches, problem.schedule, max_replicas=1)
    why = pipeline_misfit(restricted)  # what is left: no nodes, no devices
    return why if why else (restricted, np.array(chosen, np.int64))


def _most_in_flight(problem: ParallelProblem) -> int:
    """The most micro-batches a ``d = 1`` stage can hold: one per stage from it on (at most ``N`` and the
    devices), every micro-batch under GPipe."""
    N = problem.microbatches
    return in_flight(problem.schedule, 1, min(N, sum(k.count for k in problem.kinds)), N)


def solve_restriction(problem: ParallelProblem, *, time_limit: float | None = None,
                      max_ideals: int = dp.DEFAULT_MAX_IDEALS, threads: int | None = None,
                      progress=None) -> Solution:
    """A plan of ``problem`` from the optimum of its ``d = t = 1`` restriction (:func:`pipeline_restriction`)
    by the pipeline kernel, scored by :func:`graphs.parallel.evaluate_plan` on ``problem`` and returned
    only when valid: first with one micro-batch in flight per stage, and, when that plan does not fit
    the memory the schedule needs, with the most a stage can hold (:func:`_most_in_flight`), where
    every plan fits. Status ``feasible`` with a plan (whether the restriction's optimum was proven says
    ``stats["restriction"]``: a bound from above on the problem's optimum, never from below), else
    ``stopped`` (the message says why: the restriction does not apply, a limit, no valid plan). A
    Ctrl-C is taken: the plan so far (or none) with "interrupted" in the message. ``progress``: the
    kernel's fraction of its ideals done, the second solve (more micro-batches in flight), when it runs,
    on the second half of the bar."""
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    stats: dict = {"kernel": "pipeline"}

    def answer(plan, ev, why: str) -> Solution:
        if plan is None:
            return stage_solution("dp", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0, why,
                                  stats)
        return stage_solution("dp", plan, ev, ev.objective, Status.FEASIBLE, time.perf_counter() - t0, why,
                              stats)

    flights = [1]
    most = _most_in_flight(problem)
    va = problem.graph.variant_arrays
    stashes = problem.schedule in ("pipedream", "2bw") and (va["w"] > 0).any()
    if most > 1 and ((va["a"] > 0).any() or stashes):
        flights.append(most)  # the memory depends on the micro-batches in flight
    why = ""
    try:
        for flight in flights:
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return answer(None, None, f"{why + '; ' if why else ''}time limit reached")
            made = pipeline_restriction(problem, flight=flight)
            if isinstance(made, str):
                return answer(None, None, f"the d = t = 1 restriction does not apply: {made}")
            restricted, chosen = made
            left = None if deadline is None else deadline - time.perf_counter()
            # any optimum: the tie-break costs a third of the time, and the optimum it picks (fewest
            # stages) differs only in the micro-batches its stages hold, which the scoring checks
            part = None
            if progress is not None:
                i = flights.index(flight)
                part = _part(progress, i / len(flights), (i + 1) / len(flights))
            r = solve_pipeline(restricted, time_limit=left, max_ideals=max_ideals, threads=threads,
                               tie_break=False, progress=part)
            stats.update(restriction=r.status.value, flight=flight)
            if r.plan is not None:
                plan = [Stage(st.nodes, st.kind, 1, 1, tuple(int(chosen[v]) for v in st.variants))
                        for st in r.plan]
                ev = evaluate_plan(problem, plan)
                if ev.valid:
                    return answer(plan, ev, r.message)
                why = f"its plan with {flight} micro-batch(es) in flight does not fit: {ev.problems[0]}"
            else:
                why = r.message or f"no plan ({r.status.value})"
                if r.status is Status.INFEASIBLE:
                    break  # more micro-batches in flight only need more memory
            if r.interrupted:
                return answer(None, None, why if "interrupted" in why else f"interrupted; {why}")
    except KeyboardInterrupt:  # Ctrl-C outside the kernel's sweep (building the restriction, contracting)
        return answer(None, None, "interrupted (Ctrl-C) in the d = t = 1 restriction")
    return answer(None, None, why)


def _part(progress, lo: float, hi: float):
    """``progress`` of a part of the work, drawn from ``lo`` to ``hi`` of the bar."""
    return lambda x: progress(lo + (hi - lo) * x)
