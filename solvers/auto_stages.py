"""``auto`` on the stage model (:mod:`graphs.parallel`): the exact DP when its work fits, otherwise
the DP on a coarsened graph, refined by the contiguous MILP; every answer labelled for what it is.

0. **One device per stage.** The ``d = t = 1``, first-variant restriction of the problem is the
   one-device-per-stage pipeline model, which the pipeline DP (:mod:`solvers.dp`) solves far faster
   than the stage DP solves the problem (:func:`solvers.dp_pipeline.solve_restriction`, for at most
   ``pipeline_time`` seconds and :data:`PIPELINE_SHARE` of the time left). Its plan, scored on the
   problem and kept only when valid, is the first plan: every later step must beat it, and the exact
   DP skips every stage above it. The restriction's optimum bounds the problem's from above only, so
   it proves nothing (label ``heuristic`` while it stands). Not run where the exact DP runs that
   kernel itself (the problem is the pipeline model), where its time is under
   :data:`PIPELINE_MIN_SECONDS`, or with ``pipeline=False``.
1. **Exact.** When the graph has at most ``max_ideals`` ideals, the exact DP (``dp``) runs on it (within the
   time limit); if it proves its plan, that is the answer: label ``exact``, status ``optimal``.
2. **Coarsened.** Otherwise (or when the DP stopped at a limit, time left) chains of nodes are merged
   (:func:`graphs.coarsen.merge_stage_chains`), halving the target size until the coarse graph's
   ideals fit, and the DP solves the coarse problem. Its plan, mapped back, is optimal among the plans
   that keep every merged chain in one stage: label ``exact-on-coarsened``, status ``feasible``.
3. **Refined.** The MILP (``ip``) then starts from the best plan so far on the original graph
   (when its model has at most ``max_ip_columns`` columns), for at most ``ip_time`` seconds or the time
   left; under a time limit only with at least :data:`solvers.base.IP_MIN_SECONDS` left (HiGHS's root
   phases ignore a shorter limit). A plan it proves optimal is ``exact`` / ``optimal``; a better plan it
   does not prove is ``heuristic`` (with its bound and gap); otherwise the coarse plan stands, with the
   MILP's bound.
4. When nothing above gives a plan, PipeDream's planner (``pipedream``): ``heuristic``.

A Ctrl-C that a step takes (it returns its best and says "interrupted") ends the search there: the
best plan so far is the answer, and its message says so.

``progress`` (:attr:`solvers.base.SolveOptions.progress`) draws the steps on one bar (:class:`_Bar`).

The result's ``stats["label"]`` holds the label, ``stats["path"]`` the steps taken.
"""

from __future__ import annotations

import dataclasses
import math
import time

from graphs.coarsen import merge_stage_chains
from graphs.errors import ProblemTooLargeError
from graphs.ideals import enumerate_ideals
from graphs.parallel import ParallelProblem, is_pipeline_model

from . import dp_pipeline, dp_stages, ip_stages, pipedream_stages
from .base import (
    INTERRUPTED,
    IP_MIN_SECONDS,
    ProgressTeller,
    Solution,
    SolveOptions,
    Status,
    relative_gap,
    stage_solution,
    time_left,
)

__all__ = ["solve_problem", "solve_stages", "LABELS"]

LABELS = ("exact", "exact-on-coarsened", "heuristic")
#: the share of the time left the one-device-per-stage step may take (the exact DP, coarsening and the
#: integer program get the rest): a 24-layer training graph's 699 operators on 16 devices need about 2 s
#: on 2 busy cores, where the operator refinement gets 10
PIPELINE_SHARE = 0.3
#: under a time limit the step runs only when its share is at least this: with less, on a graph the
#: stage DP cannot finish either, it ends at its few topological orders and only takes the DP's time
#: (GNMT at a 1 s limit: its share gave 76.8 where the stage search finds 53.5)
PIPELINE_MIN_SECONDS = 0.5
#: the exact DP skips stages above the one-device-per-stage plan's value times this (round-off)
_UB_SLACK = 1 + 1e-9


#: each step's part of the bar still left when it starts, where no time limit sets it: step 0 is
#: bounded by ``pipeline_time`` and usually quick, the exact DP the bulk of the work
_SHARE_PIPELINE = 0.1
_SHARE_DP = 0.9  # the exact DP: the rest is the integer program's, when the DP stops short of a proof
_SHARE_COARSE = 0.5


class _Bar(ProgressTeller):
    """``auto``'s steps on one bar: each step, as it starts, gets a share of the bar still left (the
    ``_SHARE_*`` shares; step 0's and the integer program's, under a time limit, the part of the time
    left they may take), which its own
    fraction fills (the DPs and the integer program report theirs; PipeDream's planner none: the bar
    holds while it runs). A step that ends short of its share jumps the bar to the share's end, and the
    search's end to 1. Under a time limit the bar is at least the part of it spent: the search ends by
    then. Never decreasing."""

    def __init__(self, progress, time_limit: float | None = None) -> None:
        super().__init__(progress, time_limit)
        self.end = 0.0

    def step(self, share: float):
        """A step starts with ``share`` (in [0, 1]) of the bar left; the callback of its progress
        (``None`` without a bar)."""
        if self.progress is None:
            return None
        self.tell(self.end)
        lo = self.end
        self.end = hi = lo + min(1.0, max(0.0, share)) * (1.0 - lo)
        return lambda x: self.tell(lo + (hi - lo) * x)


def _time_share(seconds: float, deadline: float | None, otherwise: float) -> float:
    """A step's share of the bar left: the part of the time left that its ``seconds`` are, under a time
    limit; ``otherwise`` without one."""
    if deadline is None:
        return otherwise
    left = time_left(deadline)
    return 1.0 if left <= 0 else min(1.0, seconds / left)


def _ideals_fit(problem: ParallelProblem, limit: int, deadline: float | None = None) -> bool | None:
    """Whether the graph has at most ``limit`` ideals; ``None`` when the ``deadline`` passed first."""
    g = problem.graph
    try:
        enumerate_ideals(g.num_nodes, g.src, g.dst, max_ideals=limit, deadline=deadline)
    except ProblemTooLargeError:
        return None if deadline is not None and time.perf_counter() > deadline else False
    return True


def solve_problem(problem: ParallelProblem, *, time_limit: float | None = None, max_ideals: int = 20_000,
                  max_ip_columns: int = 200_000, ip_time: float = 10.0,
                  refine: bool = True, pipeline: bool = True, pipeline_time: float = 10.0,
                  threads: int | None = None, gap: float = 1e-6, progress=None) -> Solution:
    """The best plan the steps of the module doc find within ``time_limit``; ``stats["label"]`` says
    whether it is ``exact``, ``exact-on-coarsened`` or ``heuristic``. ``threads``: the DP's pipeline
    kernel's and the integer program's (``None``: their own defaults). ``pipeline``: run step 0, for at
    most ``pipeline_time`` seconds (its share of a time limit, when less). ``progress``: a callable
    taking a fraction in [0, 1], the steps on one bar (:class:`_Bar`), 1 once the search ends (not
    after a Ctrl-C)."""
    bar = _Bar(progress, time_limit)
    sol = _search(problem, bar, time_limit, max_ideals, max_ip_columns, ip_time, refine, pipeline,
                  pipeline_time, threads, gap)
    if not sol.interrupted:
        try:
            bar.tell(1.0)
        except KeyboardInterrupt:  # the search is over: its answer stands, said interrupted for the caller
            sol = dataclasses.replace(sol, message=f"{sol.message}; interrupted (Ctrl-C) as it ended"
                                      if sol.message else "interrupted (Ctrl-C) as it ended")
    return sol


def _unless_interrupted(best: Solution | None, solve) -> Solution:
    """``solve()``, or, where a Ctrl-C it let through (the stage DP before a plan of its own, or the
    progress bar as the step starts) comes after an earlier step found ``best``, an answer of no plan
    said interrupted: the plan in hand is kept and nothing runs after it. Without ``best`` the Ctrl-C
    goes on up."""
    try:
        return solve()
    except KeyboardInterrupt:
        if best is None:
            raise
        return stage_solution("dp", None, None, math.inf, Status.STOPPED, 0.0, INTERRUPTED)


def _search(problem: ParallelProblem, bar: _Bar, time_limit, max_ideals, max_ip_columns, ip_time, refine,
            pipeline, pipeline_time, threads, gap) -> Solution:
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    path: list[str] = []
    best: Solution | None = None
    label = "heuristic"
    n = problem.graph.num_nodes

    # lower bounds proven on the problem itself (never a coarse pass's: that bounds the coarse plans),
    # each with what proved it: the exact step's DP, the MILP's dual bound
    proven: list[tuple[float, str]] = []
    stopped: list[str] = []  # why the exact steps did not prove a plan, for the message

    def done(r: Solution, label: str, status: Status, message: str, extra=None, bound=None) -> Solution:
        stats = dict(r.stats or {})
        stats.update(extra or {})
        stats["label"], stats["path"] = label, path
        if status is Status.OPTIMAL:
            bound = r.objective
        return stage_solution("auto", r.plan, r.evaluation, r.objective, status, time.perf_counter() - t0,
                              message, stats, bound=bound)

    def limited() -> str:
        return " at the time limit" if deadline is not None and time_left(deadline) <= 0 else ""

    def out_of_time() -> bool:
        return deadline is not None and time_left(deadline) <= 0

    fits = _ideals_fit(problem, max_ideals, deadline)
    interrupted = False  # a step took a Ctrl-C (``took``: its answer): nothing runs after it
    took: Solution | None = None
    seed: Solution | None = None  # the one-device-per-stage step's plan
    extra: dict = {}
    # without a limit too, as the integer program's ip_time: a wide graph's lattice can hold millions of
    # ideals, which the pipeline DP would otherwise walk before the search proper starts
    share = pipeline_time if deadline is None else min(pipeline_time, PIPELINE_SHARE * time_left(deadline))
    pipeline = pipeline and share >= PIPELINE_MIN_SECONDS
    if pipeline and not (fits and is_pipeline_model(problem)):
        path.append("pipeline d=t=1")
        tick = bar.step(_time_share(share, deadline, _SHARE_PIPELINE))
        s = dp_pipeline.solve_restriction(problem, time_limit=share, threads=threads, progress=tick)
        interrupted, took = s.interrupted, s
        extra["pipeline"] = {"objective": s.objective if s.plan is not None else None,
                             "restriction": (s.stats or {}).get("restriction"), "message": s.message,
                             "time": s.time}
        if s.plan is not None:
            best = seed = s  # a restriction's optimum: an upper bound only (label "heuristic")
        if interrupted:
            stopped.append("the one-device-per-stage DP was interrupted (Ctrl-C)")
    if fits and not interrupted:
        path.append("dp")
        bounded = {} if best is None else {"upper_bound": best.objective * _UB_SLACK}
        r = _unless_interrupted(best, lambda: dp_stages.solve_problem(  # its bar's step in the try too
            problem, time_limit=time_left(deadline), threads=threads, **bounded,
            progress=bar.step(_SHARE_DP)))
        if r.status is Status.OPTIMAL or (r.status is Status.INFEASIBLE and best is None):
            return done(r, "exact", r.status, r.message, extra)
        if r.interrupted and (best is None or (r.plan is not None and r.objective < best.objective)):
            # a Ctrl-C the DP took, its plan kept: nothing runs after it
            return done(r, "heuristic", Status.FEASIBLE, r.message, {**extra, "bound": r.bound},
                        bound=r.bound)
        if r.interrupted:  # the one-device-per-stage plan is the better: it stands, and nothing runs after
            interrupted, took = True, r
            if r.bound is not None and r.plan is not None:
                proven.append((r.bound, "the DP's"))
            stopped.append("the exact DP was interrupted (Ctrl-C)")
        elif r.status is Status.INFEASIBLE:
            # no plan at most the one-device-per-stage plan's value, which the evaluator finds valid: the
            # two models differ by round-off, and the plan stands, unproven
            stopped.append("the exact DP found no plan at most the one-device-per-stage plan's value")
        else:
            if r.bound is not None and r.plan is not None:
                proven.append((r.bound, "the DP's"))
            stopped.append(f"the exact DP stopped{limited() or ' at a limit'}")
        if r.plan is not None and (best is None or r.objective < best.objective):
            best, label = r, "heuristic"  # the DP's restricted pass: a plan, not proven
    elif not interrupted:
        why = ("the time limit passed while counting the ideals" if fits is None
               else f"more than {max_ideals:,} ideals")
        stopped.append(f"the exact DP was not run ({why})")
    # coarsen, halving the target, until the coarse ideals fit (while there is time left: a coarse DP
    # given none finds nothing, and merging and counting would only spend time past the limit)
    target = n
    while (best is None or label == "heuristic") and target > 1 and not out_of_time() and not interrupted:
        target = max(1, target // 2)
        co = merge_stage_chains(problem, target)
        m = co.problem.graph.num_nodes
        if m == n:
            break  # no chain edge can be merged
        fits = _ideals_fit(co.problem, max_ideals, deadline)
        if fits is None:
            break  # the time limit passed
        if not fits:
            if m > target:
                break  # every mergeable chain is merged and the ideals still do not fit
            continue
        path.append(f"dp on {m} merged nodes")
        r = _unless_interrupted(best, lambda co=co: dp_stages.solve_problem(
            co.problem, time_limit=time_left(deadline), threads=threads, progress=bar.step(_SHARE_COARSE)))
        if r.interrupted:  # the plan in hand stands, and nothing runs after it
            interrupted, took = True, r
            stopped.append("the coarsened DP was interrupted (Ctrl-C)")
        if r.plan is not None:
            rr = ip_stages._evaluated(problem, co.expand(r.plan), r)
            if best is None or rr.objective < best.objective:
                best = rr
                label = "exact-on-coarsened" if r.status is Status.OPTIMAL else "heuristic"
        break
    if refine and not interrupted and (deadline is None or time_left(deadline) > IP_MIN_SECONDS):
        model_cols = ip_stages.model_columns(problem)
        if model_cols <= max_ip_columns:
            path.append("ip")
            limit = ip_time if deadline is None else min(ip_time, time_left(deadline))
            ir = _unless_interrupted(best, lambda: ip_stages.solve_problem(  # its bar's step in the try too
                problem, time_limit=limit, threads=threads, gap=gap,
                warm_start=best.plan if best is not None else None,
                progress=bar.step(1.0 if best is not None else _time_share(limit, deadline, _SHARE_COARSE))))
            extra.update(bound=(ir.stats or {}).get("bound"), gap=(ir.stats or {}).get("gap"))
            if ir.status in (Status.OPTIMAL, Status.INFEASIBLE):
                return done(ir, "exact", ir.status, ir.message, extra)
            if extra["bound"] is not None and ir.plan is not None:
                proven.append((extra["bound"], "the integer program's"))
            # a Ctrl-C the program took (it returns its best): said, and nothing runs after it
            interrupted, took = ir.interrupted, ir
            stopped.append("the integer program was interrupted (Ctrl-C)" if interrupted
                           else f"the integer program stopped{limited() or ' at its limit'}")
            if ir.plan is not None and (best is None or ir.objective < best.objective * (1 - 1e-12)):
                best, label = ir, "heuristic"
        else:
            path.append(f"ip skipped ({model_cols:,} columns > {max_ip_columns:,})")
            stopped.append(f"the integer program was not run ({model_cols:,} columns)")
    elif refine and not interrupted:
        stopped.append(f"the integer program was not started (under {IP_MIN_SECONDS:g} s left)")
    if best is None and interrupted:
        return done(took, "heuristic", Status.STOPPED, took.message, extra)
    if best is None:
        path.append("pipedream")
        bar.step(_SHARE_COARSE)  # no ticks
        r = pipedream_stages.solve_problem(problem, time_limit=time_left(deadline))
        if r.plan is None and (deadline is None or time_left(deadline) > 0):
            # PipeDream's family of plans is narrow: the DP's chain passes find one where it finds none
            path.append("dp")
            r = dp_stages.solve_problem(problem, time_limit=time_left(deadline), threads=threads,
                                        progress=bar.step(1.0))
            if r.status in (Status.OPTIMAL, Status.INFEASIBLE):
                return done(r, "exact", r.status, r.message)
        if r.plan is None:
            # nothing proven: a limit or a restricted planner stopped every step short of a plan
            status = Status.STOPPED if r.status is Status.STOPPED else Status.UNKNOWN
            return done(r, "heuristic", status, r.message)
        best, label = r, "heuristic"
    msg = {"exact-on-coarsened": "optimal among plans that keep each merged chain in one stage",
           "heuristic": "not proven optimal"}[label]
    if best is seed:  # no later step beat the one-device-per-stage plan
        proven_there = (best.stats or {}).get("restriction") == "optimal"
        msg += (": the one-device-per-stage optimum (d = t = 1, first variants), which bounds the optimum "
                "from above only" if proven_there else ": a one-device-per-stage plan (d = t = 1)")
    # every plan's largest stage takes at least the total work over all devices: proven without a search
    proven.append((dp_stages.work_lower_bound(problem), "total work over all devices"))
    value, what = max(proven)
    bound = min(value, best.objective)  # a bound is never above a plan's value (tolerances aside)
    gap = relative_gap(best.objective, bound)
    why = f" ({'; '.join(stopped)})" if stopped else ""
    msg += f"{why}; bound {bound:.9g} s per sample ({what})" + (f", gap {gap:.3%}" if gap is not None else "")
    return done(best, label, Status.FEASIBLE, msg, {**extra, "bound": bound, "gap": gap,
                                                     "bound_from": what}, bound=bound)


def solve_stages(problem: ParallelProblem, options: SolveOptions | None = None) -> Solution:
    """The registry's stage form (:func:`solvers.registry.solve`): ``options.time_limit``,
    ``threads`` and ``progress``, and ``options.raw``'s ``max_ideals``, ``max_ip_columns``, ``ip_time``,
    ``refine``, ``pipeline`` and ``pipeline_time``."""
    options = options or SolveOptions()
    kw = {k: options.raw[k] for k in ("max_ideals", "max_ip_columns", "ip_time", "refine", "pipeline",
                                      "pipeline_time")
          if k in options.raw}
    if options.gap != SolveOptions().gap:  # a --gap given: the integer program's (else its own 1e-6)
        kw["gap"] = options.gap
    return solve_problem(problem, time_limit=options.time_limit, threads=options.threads,
                         progress=options.progress, **kw)
