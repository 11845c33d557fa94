"""Serving on the stage model (replicas ``d``, tensor parallelism ``t``, variants: :mod:`graphs.parallel`)
for ONNX inference models: the batch-size sweep and the latency target of ``placement place`` and the
cheapest devices of ``placement provision``, with ``--max-replicas D`` (``D > 1``). A replica of the
whole model is a plan too.

* **Units.** The stage model's objective is seconds per sample (:mod:`graphs.onnx_variants`: one run of
  the model at batch ``b`` is a micro-batch), so a plan serves ``1 / objective`` samples/s; a batch of
  ``b`` samples leaves every ``1e3 b objective`` ms (the ``max-load ms/batch`` of the
  one-device-per-stage sweep) and takes ``1e3 b latency`` ms end to end, ``latency`` being the one
  evaluator's (:attr:`graphs.parallel.PlanEvaluation.latency`: one replica of each stage, in pipeline
  order; ``d`` does not shorten it, ``t`` does).
* **Batch size** (:func:`sweep`): at each batch size the exact stage optimum (``--solver``, default
  ``auto``), as the one-device-per-stage sweep does (``auto``: 1, 2, 4, ... while samples/s improve by
  more than 1%, or until no plan fits). Memory per node is inference's one model: its parameters plus
  its outputs at that batch size (:data:`graphs.onnx_workload.INFERENCE_MEMORY`).
* **Latency target** (:func:`best_plan` with ``latency``): the stage optimum when its own latency meets
  the target (then the answer is proven: no plan serves more). Otherwise the best of a family of plans
  that meet it (one stage holding the whole model on each kind and tensor-parallel degree with the
  most replicas that fit, and the stage optima with ``d`` capped at each allowed degree) warm-starts the
  stage integer program with the latency as a row (:func:`solvers.ip_stages.solve_problem`,
  ``latency_max``; exact), within the time left: proven when it closes (or no plan meets the target),
  else the better plan with its bound, **not proven** (one as fast as the unconstrained optimum is
  proven after all).
  A target below a lower bound on every plan's latency (each node's fastest variant on an available
  kind, no communication) is proven unreachable.
* **Ctrl-C** (:func:`sweep`): a solve that takes it returns what it had ("interrupted",
  :attr:`solvers.base.Solution.interrupted`), or (the stage DP before any plan) lets it through; either
  way the search at that batch size ends with the best plan in hand (the layer plan when the operators'
  search is cut), not proven, and the sweep ends there ("interrupted (Ctrl-C): ... not tried").
* **Provision** (:func:`provision`): allocations (devices per kind, at most the available) cheapest
  first; an allocation is the available problem with fewer devices (its micro-batches, replica limit
  and variants unchanged), so a plan on an allocation is a plan on any larger one. One is skipped
  without a solve when the work bound rules it out (every node's least ``t``-device work on its kinds,
  over the allocation's devices, exceeds the time per sample the target allows) or when an allocation
  holding it was proven short of the target. The first allocation whose plan meets the target is the
  answer, proven cheapest when every allocation before it was proven short (solved exactly, or skipped
  by a bound) and its own plan is proven (always, without a latency target, once the DP is exact).
  A Ctrl-C that an allocation's search takes ends the provisioning with what it found (that
  allocation's plan too, where it meets the target), ``stopped`` "interrupted".
* **Frontier** (:func:`frontier_points`, :func:`exact_frontier`) and :func:`lowest_latency`: a Ctrl-C
  that a solve takes, or that a step lets through, ends them with the points found so far (said
  interrupted), or the least latency found, not proven.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from graphs.errors import InputError
from graphs.parallel import (
    ParallelProblem,
    PlanEvaluation,
    Stage,
    evaluate_plan,
    latency_lower_bound,
    work_lower_bound,
)
from solvers.base import INTERRUPTED

from .clock import Clock
from .inputs import check_counts
from .serving import AUTO_MAX_BATCH

__all__ = ["StagePoint", "stage_problem", "best_plan", "sweep", "provision", "frontier_points",
           "exact_frontier",
           "latency_lower_bound", "work_lower_bound"]

_REL = 1e-12


@dataclass(frozen=True, eq=False)
class StagePoint:
    """One stage plan at one batch size and what it serves (a :class:`placement.serving.Point`).
    ``proven``: no plan of the stage model serves more samples/s under what was asked (the target, if
    any); ``how``: how it was found."""

    batch_size: int
    problem: ParallelProblem
    evaluation: PlanEvaluation
    status: str
    solver: str
    proven: bool
    how: str
    time: float | None = None
    bound: float | None = None
    message: str = ""
    graph_cls: object = None
    settings: dict | None = None
    #: a proven point of the stage model's frontier at its batch size: no plan serves as many samples/s
    #: with less latency, or more with as little (:func:`exact_frontier`)
    frontier: bool = False

    @property
    def samples_per_s(self) -> float:
        x = self.evaluation.objective
        return 1.0 / x if x > 0 else math.inf

    @property
    def max_load(self) -> float:
        """Milliseconds per batch of ``batch_size`` samples (the pipeline's period)."""
        return self.evaluation.objective * 1e3 * self.batch_size

    @property
    def latency_ms(self) -> float:
        """One batch end to end, milliseconds."""
        return self.evaluation.latency * 1e3 * self.batch_size

    def utilisation(self):
        """The plan's MFU (:func:`placement.stages.workload_result`'s), ``None`` without operators."""
        from .stages import _utilisation

        if self.graph_cls is None or not self.evaluation.valid:
            return None
        return _utilisation(self.problem, self.evaluation, self.graph_cls,
                            self.settings or {"batch_size": self.batch_size})

    model = "stages"

    def on_frontier(self, beside_stages: bool = True) -> bool:
        """Proven a point of the stage model's frontier (:func:`exact_frontier`)."""
        return self.frontier

    def proof(self, beside_stages: bool = True) -> str:
        """What is proven of the point."""
        if self.frontier:
            return "frontier point of the stage model, proven"
        return f"throughput proven ({self.how})" if self.proven else f"not proven ({self.how})"

    def plan_words(self) -> str:
        """The stages' kinds and degrees, as a frontier table's plan column shows them."""
        return ", ".join(f"{self.problem.kinds[s.stage.kind].name}x{s.stage.d}"
                         + (f" t{s.stage.t}" if s.stage.t > 1 else "") for s in self.evaluation.stages)

    def result(self, workload: str | None = None) -> dict:
        """The result file of the plan (:func:`placement.stages.workload_result`, each stage's operators
        and the front end's settings), ``workload`` the model it names."""
        from .stages import StageWorkload, workload_result

        graph, node_of = self.graph_cls if self.graph_cls is not None else (None, None)
        w = StageWorkload(self.problem, settings=self.settings or {}, graph=graph, node_of=node_of)
        data, _ = workload_result(w, self.evaluation, status=self.status, solver=self.solver, time=self.time,
                                  message=self.message, workload=workload, bound=self.bound)
        data.setdefault("compute_utilisation", None)  # no operators: no MFU
        return data


# ------------------------------------------------------------------------------------ the problem
def stage_problem(path: str, frontend: dict, batch_size: int, *, microbatches: int | None = None,
                  schedule: str | None = None, max_replicas: int | None = None,
                  granularity: str | None = None, device_memory: float | None = None,
                  paths: dict | None = None):
    """The stage problem of the ONNX model ``path`` at ``batch_size`` (a batch fixed in the file made
    symbolic first, :func:`graphs.onnx_loader.batchable_path`, as the one-device-per-stage sweep does):
    ``(problem, graph_cls, settings)`` of :func:`placement.stages.read_onnx` (its problem, ``(graph,
    node_of)`` and settings), and a fourth item: where the default chose layer nodes, a function giving
    the same triple at operator granularity (built once, on first call), else ``None`` (see
    :func:`best_refined`). ``paths``: a dict kept across batch sizes (the symbolic copy is looked up
    once)."""
    from graphs.onnx_loader import batchable_path

    from .stages import read_onnx

    paths = {} if paths is None else paths
    if path not in paths:
        paths[path] = batchable_path(path)
    fe = {k: v for k, v in frontend.items() if k != "batch_size"}
    fe["batch_size"] = batch_size
    fe["training"] = False
    w = read_onnx(paths[path], fe, schedule=schedule, max_replicas=max_replicas, granularity=granularity,
                  microbatches=microbatches, device_memory=device_memory)
    out = w.problem, w.graph_cls, dict(w.settings)
    if w.finer is None:
        return (*out, None)
    built: list = []

    def fine():
        if not built:
            f = w.refined()
            built.append((f.problem, f.graph_cls, dict(f.settings)))
        return built[0]

    return (*out, fine)


# ------------------------------------------------------------------------------- one batch size
def _one_stage_plans(problem: ParallelProblem) -> list[list[Stage]]:
    """The whole model as one stage on each kind and tensor-parallel degree, with the most replicas that
    fit, each node's fastest variant (its latency: the least of that kind and degree)."""
    g = problem.graph
    out = []
    degrees = problem.replica_degrees()
    for k, kind in enumerate(problem.kinds):
        for t in sorted(g.degrees(k)):
            if t > kind.count:
                continue
            variants = []
            for u in range(g.num_nodes):
                opts = g.options.get((u, k, t))
                if not opts:
                    break
                variants.append(min(opts, key=lambda v: (g.variants[v].time, g.variants[v].b)))
            else:
                ds = [d for d in degrees if t * d <= kind.count]
                if ds:
                    out.append([Stage(tuple(range(g.num_nodes)), k, max(ds), t, tuple(variants))])
    return out


def best_plan(problem: ParallelProblem, args, *, latency: float | None = None,
              time_limit: float | None = None, solver: str | None = None,
              batch_size: int = 1) -> tuple[StagePoint | None, dict]:
    """The most samples/s of the stage ``problem`` (with one sample's latency at most ``latency``
    seconds per sample, if given; see the module doc), ``problem`` being the model at ``batch_size``.
    Returns ``(answer, why)``: ``answer`` the :class:`StagePoint` found (``None`` when no plan was found)
    and ``why`` the reason there is none, with ``proven_none`` in it when none exists."""
    ans, why, _ = _best_plan(problem, args, latency=latency, time_limit=time_limit, solver=solver,
                             batch_size=batch_size)
    return ans, why




def _best_plan(problem: ParallelProblem, args, *, latency: float | None = None,
               time_limit: float | None = None, solver: str | None = None, batch_size: int = 1):
    """:func:`best_plan` and a third item: the seconds its search took on its own clock (each solve's,
    :func:`solvers.registry.solve`, which loads and compiles kernels before its clock starts, and the
    work between solves), which its time limit bounds and its answer's ``time`` reports.

    A Ctrl-C that a solve took (it returned what it had, :attr:`solvers.base.Solution.interrupted`) or
    let through (the stage DP, before it had a plan) ends the search: no solve runs after it, the best
    plan in hand is the answer (not proven unless it was before), and ``why`` has ``interrupted``."""
    hit = [False]
    ans, why, spent = _search(problem, args, latency, time_limit, solver, hit, batch_size)
    if hit[0]:
        why = dict(why, interrupted=True, proven_none=bool(why.get("proven_none")))
        if INTERRUPTED not in why.get("message", ""):
            why["message"] = f"{INTERRUPTED}: {why['message']}" if why.get("message") else INTERRUPTED
        if ans is not None and "interrupted" not in ans.message:
            ans = dataclasses.replace(ans, message=f"{ans.message}; {INTERRUPTED}" if ans.message
                                      else INTERRUPTED)
    return ans, why, spent


def _search(problem: ParallelProblem, args, latency: float | None, time_limit: float | None,
            solver: str | None, hit: list[bool], batch_size: int):
    """:func:`_best_plan`'s search; ``hit[0]`` set when a Ctrl-C ended it."""
    from solvers.base import Status, stage_solution

    from .stages import solve_args

    t0 = time.perf_counter()
    a = SimpleNamespace(**vars(args))
    a.time_limit = time_limit if time_limit is not None else getattr(args, "time_limit", None)
    a.solver = solver or getattr(args, "solver", None)
    off = [0.0]  # seconds the solves spent off their own clocks (loading and compiling kernels)

    def solved(p: ParallelProblem):
        s0 = time.perf_counter()
        try:
            s = solve_args(p, a)
        except KeyboardInterrupt:  # the stage DP lets it through when it has no plan to give
            hit[0] = True
            return stage_solution(a.solver or "auto", None, None, math.inf, Status.STOPPED,
                                  time.perf_counter() - s0, f"{INTERRUPTED} before any plan was found")
        hit[0] = hit[0] or s.interrupted
        if s.time is not None:
            off[0] += max(0.0, time.perf_counter() - s0 - s.time)
        return s

    def own() -> float:
        return time.perf_counter() - t0 - off[0]

    def answer(ev: PlanEvaluation, status: str, name: str, proven: bool, how: str, spent: float | None,
               bound: float | None, message: str | None) -> StagePoint:
        return StagePoint(batch_size, problem, ev, status, name, proven, how, spent, bound, message or "")

    if latency is not None:
        low = latency_lower_bound(problem)
        if low > latency * (1 + _REL):
            return None, {"proven_none": True, "lowest": low,
                          "message": "no plan meets the latency target (a bound proves it)"}, own()
    r = solved(problem)
    if r.plan is None:
        proven = r.status is Status.INFEASIBLE
        why = {"proven_none": proven, "message": r.message or str(r.status), "status": str(r.status)}
        return None, why, own()
    ev = r.evaluation
    exact = r.status is Status.OPTIMAL
    optimum = {"optimum": ev.objective, "optimum_proven": exact}  # the most samples/s, whatever the latency
    if latency is None or ev.latency <= latency * (1 + _REL):
        how = "stage optimum" + ("" if latency is None else ", its latency meets the target")
        return answer(ev, str(r.status), r.solver, exact, how, r.time, r.bound, r.message), optimum, own()
    # the throughput optimum misses the target: the best of a family of plans that meet it (not proven)
    cands: list[tuple[PlanEvaluation, str, str]] = []
    for plan in _one_stage_plans(problem):
        e = evaluate_plan(problem, plan)
        if e.valid:
            cands.append((e, "one stage", "data-parallel"))
    degrees = problem.replica_degrees()
    limit = a.time_limit
    for d in degrees[:-1]:  # the last is the optimum's own cap
        if hit[0]:
            break
        if limit is not None and not math.isinf(limit):  # the time limit is the whole search's
            a.time_limit = limit - own()
            if a.time_limit < 0.05:
                break
        s = solved(problem.with_options(max_replicas=d))
        if s.plan is not None:
            cands.append((s.evaluation, f"stage optimum with d <= {d}", s.solver))
    a.time_limit = limit
    meets = [c for c in cands if c[0].latency <= latency * (1 + _REL)]
    best_meet = min(meets, key=lambda c: c[0].objective) if meets else None
    if hit[0]:
        optimum["ip"] = f"the integer program under the target not tried: {INTERRUPTED}"
        under = None
    else:
        under = _under_target(problem, a, latency, best_meet, own(), ev.objective if exact else None,
                              optimum, hit, batch_size)
    if under is not None:
        ans, why = under
        spent = own()
        if ans is not None:
            ans = dataclasses.replace(ans, time=spent)
        return ans, why, spent
    if not meets:
        lows = [c[0].latency for c in cands]
        return None, {"proven_none": False, "lowest": latency_lower_bound(problem),
                      "lowest_found": min(lows) if lows else None, **optimum,
                      "message": "no plan found meets the latency target (not proven: the throughput "
                                 "optimum misses it, and so does every plan tried)"}, own()
    e, how, name = min(meets, key=lambda c: (c[0].objective, c[0].latency))
    if exact and e.objective <= ev.objective * (1 + 1e-9):
        # as fast as the proven optimum: no plan serves more, under the target or not
        how += ", as fast as the stage optimum"
        msg = f"the throughput optimum's own plan misses the target, this one ({how}) {_AS_FAST_PROVEN}"
        spent = own()
        return answer(e, "optimal", r.solver, True, how, spent, ev.objective, msg), optimum, spent
    msg = (f"not proven best under the target: the throughput optimum ({1 / ev.objective:,.6g} samples/s"
           f"{', proven' if exact else ''}) misses it; the best of one-stage plans and stage optima with d "
           f"capped ({how})" + (f"; {optimum['ip']}" if optimum.get("ip") else ""))
    # the optimum without the target bounds the time per sample under it (when proven)
    spent = own()
    ans = answer(e, "feasible", name, False, how, spent, ev.objective if exact else None, msg)
    return ans, optimum, spent


#: what a proven answer under a latency target says; where a refinement leaves it unproven for the stage
#: model (the other granularity's search did not close its gap), :func:`unproven_words` says where it holds
_UNDER_TARGET_PROVEN = ("the most samples/s under the latency target (the stage integer program with the "
                        "latency as a constraint, proven)")
_AS_FAST_PROVEN = "serves as much and meets it: proven"


def unproven_words(message: str, nodes: str) -> str:
    """``message`` of an answer proven among ``nodes`` plans only (its status not optimal: a gap is
    shown) without the word "proven" for the whole: the best found, within the gap shown, and where the
    proof held."""
    return (message or "").replace(
        _UNDER_TARGET_PROVEN, f"the best found under the latency target, within the gap shown (the stage "
                              f"integer program with the latency as a constraint closed its gap among "
                              f"{nodes} only)").replace(
        _AS_FAST_PROVEN, f"serves as much and meets it: the best found, within the gap shown (as fast as "
                         f"the optimum among {nodes} only)")


#: the stage integer program under a latency target runs on models of at most this many columns
IP_COLUMNS = 200_000


def _ip(problem: ParallelProblem, **kw):
    """:func:`solvers.ip_stages.solve_problem`'s answer checked as the registry checks every solver's
    (:func:`solvers.registry.checked`: on the objective and the limits it was given)."""
    from solvers import ip_stages
    from solvers.registry import checked

    return checked("ip", problem, ip_stages.solve_problem(problem, **kw),
                   objective=kw.get("objective", "max-load"), latency_max=kw.get("latency_max"),
                   max_load_max=kw.get("max_load_max"))


def _solve_ip(problem: ParallelProblem, **kw):
    """:func:`_ip`, with a Ctrl-C it lets through (building the program, between HiGHS's callbacks)
    taken as one it took: a solution said "interrupted" (:attr:`solvers.base.Solution.interrupted`), no
    plan."""
    from solvers.base import Status, stage_solution

    t0 = time.perf_counter()
    try:
        return _ip(problem, **kw)
    except KeyboardInterrupt:
        return stage_solution("ip", None, None, math.inf, Status.STOPPED, time.perf_counter() - t0,
                              f"{INTERRUPTED} before any plan was found")


def _under_target(problem: ParallelProblem, a, latency: float, cand, spent: float, unconstrained,
                  optimum: dict, hit: list[bool], batch_size: int):
    """The stage integer program with the latency as a row (:func:`solvers.ip_stages.solve_problem`,
    ``latency_max``; exact), warm-started from the best candidate ``cand`` that meets the target, within
    the time left (no limit: max(10 s, 3x what the search took), as a granularity refinement). Returns
    ``(answer, why)`` as :func:`best_plan` when it proves something (the optimum under the target, or
    that no plan meets it) or finds a plan better than ``cand`` (then with its bound, the larger of the
    program's and the ``unconstrained`` optimum's), else ``None``: the family's answer stands, with the
    reason in ``optimum["ip"]``. A Ctrl-C the program took sets ``hit[0]``: its plan, where better than
    ``cand``, is the answer (not proven), else ``cand``'s stands."""
    from solvers import ip_stages
    from solvers.base import CLOSED_GAP, IP_MIN_SECONDS, Status

    from .stages import refine_budget

    cols = ip_stages.model_columns(problem)
    left = None if a.time_limit is None or math.isinf(a.time_limit) else a.time_limit - spent
    if cols > IP_COLUMNS:
        optimum["ip"] = f"the integer program under the target skipped ({cols:,} columns > {IP_COLUMNS:,})"
        return None
    if left is not None and left < IP_MIN_SECONDS:
        optimum["ip"] = "the integer program under the target not tried: no time left"
        return None
    limit = refine_budget(spent, left)
    try:
        r = _ip(problem, time_limit=limit, gap=CLOSED_GAP, latency_max=latency,
                warm_start=None if cand is None else [s.stage for s in cand[0].stages],
                threads=getattr(a, "threads", None))
    except KeyboardInterrupt:  # between HiGHS's callbacks (building the model): nothing found
        hit[0] = True
        optimum["ip"] = f"the integer program under the target: {INTERRUPTED}"
        return None
    hit[0] = hit[0] or r.interrupted
    if r.status is Status.INFEASIBLE and cand is None:
        return None, {**optimum, "proven_none": True, "lowest": latency_lower_bound(problem),
                      "message": "no plan meets the latency target (the integer program under the target "
                                 "is infeasible)"}
    if r.plan is None or (cand is not None and r.status is not Status.OPTIMAL
                          and r.objective >= cand[0].objective * (1 - 1e-12)):
        optimum["ip"] = f"the integer program under the target ({limit:.3g} s): {r.message or r.status}"
        return None
    ev = r.evaluation
    if r.status is Status.OPTIMAL:
        return StagePoint(batch_size, problem, ev, "optimal", "ip", True, "integer program under the target",
                          r.time, ev.objective, _UNDER_TARGET_PROVEN), optimum
    bounds = [b for b in (r.bound, unconstrained) if b is not None and b <= ev.objective]
    how = f"integer program under the target ({'interrupted' if r.interrupted else 'limit'})"
    msg = ("not proven best under the target: the integer program under it stopped "
           + ("by a Ctrl-C" if r.interrupted else f"at its limit ({limit:.3g} s)") + f": {r.message}")
    return StagePoint(batch_size, problem, ev, "feasible", "ip", False, how, r.time,
                      max(bounds) if bounds else None, msg), optimum


def best_refined(problem: ParallelProblem, args, fine: Callable[[], ParallelProblem] | None = None, *,
                 latency: float | None = None, time_limit: float | None = None,
                 batch_size: int = 1) -> tuple[StagePoint | None, dict, bool]:
    """:func:`best_plan` on ``problem``; where its nodes are layers (``fine`` gives the problem with
    operators as nodes), :func:`best_plan` on the operators too, within the time
    :class:`placement.stages.Refinement` gives (from the layer search's own clock, as
    :func:`placement.stages.solve_refined`), and the better answer kept (more samples/s; layer nodes make
    the solve quick, never a loss: a layer cannot be split between stages). Returns ``(answer, why,
    refined)``: ``refined`` is true when the operators' answer was kept; the answer's ``time`` is both
    searches' own. The answer is proven only as far as both were: "no plan serves more" needs the
    operators' answer when it was not tried. ``batch_size``: the models' batch size (the answer's)."""
    from .stages import REFINE_LEAST_S, Refinement

    ans, why, spent = _best_plan(problem, args, latency=latency, time_limit=time_limit, batch_size=batch_size)
    if fine is None:
        return ans, why, False
    times = [spent]
    ref = Refinement(spent, time_limit)

    def noted(a: StagePoint, note: str, *changes: dict) -> StagePoint:
        a = dataclasses.replace(a, message=f"{a.message}; {note}" if a.message else note, time=sum(times))
        for c in changes:
            a = dataclasses.replace(a, **c)
        return a

    def worded(a: StagePoint, nodes: str) -> StagePoint:
        # the solvers' words on a bound that is not the answer's: it held among `nodes`-node plans only;
        # so did a proof, when the other granularity's search leaves the answer unproven
        m = bound_words(a.message, a.bound, f"{nodes}-node plans")
        return dataclasses.replace(a, message=m if a.proven else unproven_words(m, f"{nodes}-node plans"))

    def layer_only(why_not: str, **more):
        # the layer answer alone: proven no more for the stage model (operator plans were not searched)
        if ans is None:
            return None, dict(why, proven_none=False, **more), False
        a = noted(ans, f"operator granularity {why_not}", proof_fields(ans.status, False))
        return worded(a, "layer"), dict(why, optimum_proven=False, **more), False

    if why.get("interrupted"):  # a Ctrl-C ended the layer search: no operator search after it
        return layer_only(f"not tried: {INTERRUPTED}")
    budget, built = ref.budget, ""
    try:
        if ref.tried:
            t_fine = time.perf_counter()
            fproblem = fine()
            if time_limit is not None and not math.isinf(time_limit):
                # building the operator-node problem is on the time limit too (a large model: seconds)
                took = time.perf_counter() - t_fine
                budget = max(0.0, min(budget, time_limit - spent - took))
                built = f" (building it took {took:.3g} s)"
        if budget < REFINE_LEAST_S:
            return layer_only(f"not tried: no time left{built}")
        fans, fwhy, fspent = _best_plan(fproblem, args, latency=latency, time_limit=budget,
                                        batch_size=batch_size)
    except KeyboardInterrupt:  # while building the operator problem or between its solves: the layer answer
        return layer_only(f"{INTERRUPTED}: the layer plan", interrupted=True)
    times.append(fspent)
    if fwhy.get("interrupted"):
        why = dict(why, interrupted=True)
    both = {  # what holds for the stage model at both granularities
        "proven_none": bool(why.get("proven_none")) and bool(fwhy.get("proven_none")),
        "optimum_proven": bool(why.get("optimum_proven")) and bool(fwhy.get("optimum_proven")),
    }
    opts = [w["optimum"] for w in (why, fwhy) if w.get("optimum") is not None]
    if opts:
        both["optimum"] = min(opts)
    lows = [w["lowest"] for w in (why, fwhy) if w.get("lowest") is not None]
    if lows:
        both["lowest"] = min(lows)
    faster, what = ref.verdict(None if ans is None else ans.evaluation.objective,
                               None if fans is None else fans.evaluation.objective)
    if fwhy.get("interrupted"):
        what = f"{INTERRUPTED} before a plan" if fans is None else f"{what} (its search {INTERRUPTED})"
    # a bound on the stage model holds at both granularities: the lesser of the two (a granularity proven
    # to have no plan needs none); kept whether or not the answer is proven, as the answer's bound
    bound = _both_bound((ans, why), (fans, fwhy))
    if faster:
        proven = fans.proven and (ans is None and bool(why.get("proven_none")) or ans is not None
                                  and ans.proven)
        changes = {"how": fans.how + ", operator nodes"}
        fans = noted(fans, f"operator granularity: {what}", changes, proof_fields(fans.status, proven, bound))
        return worded(fans, "operator"), dict(fwhy, **both), True
    if ans is None:
        msg = fwhy.get("message") or why.get("message", "no plan")
        return None, dict(why, **both, message=msg), False
    proven = ans.proven and (fans.proven if fans is not None else bool(fwhy.get("proven_none")))
    # the layer plan's "stage optimum" is the optimum over layer nodes: say so first (read as the stage
    # model's, it was wrong where the operators' optimum is faster but misses the latency target), and
    # what the operators gave (under the target, where there is one)
    under = "" if latency is None else " under the target"
    how = {"how": f"over layer nodes, {ans.how}; over operator nodes{under}, {what}"}
    if fans is not None and not fans.proven:
        what += f" (its search {fans.status}, not proven)"
    ans = noted(ans, f"operator granularity: {what}", proof_fields(ans.status, proven, bound), how)
    return worded(ans, "layer"), dict(why, **both), False


def _both_bound(*answers) -> float | None:
    """The stage model's bound (seconds per sample) from each granularity's ``(answer, why)``: the least
    of their answers' bounds, a granularity proven to have no plan (under the target) adding none;
    ``None`` where one has neither (what it could serve is not bounded)."""
    parts = []
    for a, why in answers:
        if a is None:
            if not why.get("proven_none"):
                return None
        elif a.bound is None:
            return None
        else:
            parts.append(a.bound)
    return min(parts) if parts else None


_BOUND_TEXT = re.compile(r"\bbound ([-+.0-9eE]+|inf) s per sample")


def bound_words(message: str, bound: float | None, where: str) -> str:
    """``message`` with each solver's ``bound X s per sample`` that is not ``bound`` (the answer's, which
    the summary and the result file give) said to hold among ``where`` only: a layer-node search's bound
    is no bound on operator-node plans, and the answer's bound is the lesser of both granularities'."""
    def one(m):
        try:
            x = float(m.group(1))
        except ValueError:
            return m.group(0)
        if bound is not None and math.isclose(x, bound, rel_tol=1e-8, abs_tol=0.0):
            return m.group(0)
        return f"{m.group(0)} among {where} only"

    return _BOUND_TEXT.sub(one, message or "")


def proof_fields(status: str, proven: bool, bound: float | None = None) -> dict:
    """An answer's (or a :class:`StagePoint`'s) ``proven``, ``status`` and ``bound`` once a refinement
    has said how far its proof reaches: an unproven one is not ``optimal`` and keeps only ``bound``, one
    that holds at both granularities (:func:`_both_bound`; its own held at its own granularity only)."""
    if proven:
        return {"proven": True}
    return {"proven": False, "status": "feasible" if status == "optimal" else status, "bound": bound}


def frontier_points(problem: ParallelProblem, args, batch_size: int, graph_cls=None, settings=None,
                    time_limit: float | None = None, *, exact: bool = True, max_points: int = 50,
                    report: dict | None = None, on_point: Callable | None = None) -> list[StagePoint]:
    """Stage plans for a frontier at one batch size: the stage optimum (its throughput proven when the
    solver is exact: the frontier's throughput end), the optima with ``d`` capped at each smaller
    allowed degree, and one stage holding the whole model on each kind and tensor-parallel degree (most
    replicas); then, with ``exact`` and where the stage integer program is small enough
    (:data:`IP_COLUMNS`), the proven frontier of :func:`exact_frontier` from the stage optimum on,
    within the time left (no limit: max(10 s, 3x the time the family took)). The caller keeps the
    non-dominated ones. ``report`` (a dict) receives ``complete`` (the exact frontier reached its
    low-latency end: every frontier point is among the points), ``note`` (how far it got),
    ``interrupted`` (a Ctrl-C, taken by a solve or let through, ended it: the points so far are
    returned, nothing runs after it) and, when the exact solver proves that no plan exists, ``none``:
    why (then ``complete`` and no point); ``on_point`` is called with each point as it is found."""
    from solvers.base import Status

    from .stages import solve_args

    t0 = time.perf_counter()
    report = {} if report is None else report
    report.setdefault("complete", False)
    report.setdefault("interrupted", False)
    a = SimpleNamespace(**vars(args))
    a.time_limit = time_limit
    a.solver = getattr(args, "solver", None)
    out: list[StagePoint] = []
    degrees = problem.replica_degrees()
    best = None  # the stage optimum's time per sample, when proven
    hit = False  # a Ctrl-C ended the solves: the one-stage plans (no solve) are still added
    for d in reversed(degrees):
        try:
            r = solve_args(problem.with_options(max_replicas=d), a)
        except KeyboardInterrupt:  # the stage DP lets it through before it has a plan
            hit = True
            break
        hit = r.interrupted
        if r.plan is None:
            if d == degrees[-1] and r.status is Status.INFEASIBLE:  # the whole model: proven none at all
                why = r.message or "no plan fits"
                report.update(complete=True, note=why, none=why)
                return out
            if hit:
                break
            continue
        top = d == degrees[-1]
        how = "stage optimum" if top else f"stage optimum with d <= {d}"
        if top and r.status is Status.OPTIMAL:
            best = r.evaluation.objective
        # a capped optimum as fast as the proven optimum has its throughput proven too
        proven = best is not None and r.evaluation.objective <= best * (1 + 1e-9)
        out.append(StagePoint(batch_size, problem, r.evaluation, "optimal" if proven else "feasible",
                              r.solver, proven, how, r.time, best if proven else None,
                              r.message or "", graph_cls, settings))
        if on_point is not None:
            on_point(out[-1])
        if hit:  # its plan is kept; no solve runs after it
            break
    for plan in _one_stage_plans(problem):
        e = evaluate_plan(problem, plan)
        if e.valid:
            proven = best is not None and e.objective <= best * (1 + 1e-9)
            out.append(StagePoint(batch_size, problem, e, "optimal" if proven else "feasible",
                                  "data-parallel", proven, "one stage", None, best if proven else None, "",
                                  graph_cls, settings))
            if on_point is not None:
                on_point(out[-1])
    if hit:
        report["interrupted"], report["note"] = True, f"exact frontier not tried: {INTERRUPTED}"
        return out
    top = next((p for p in out if p.how == "stage optimum"), None)
    if not exact or top is None:
        report["note"] = "exact frontier not tried" + ("" if exact else " (not asked)")
        return out
    from solvers import ip_stages

    from .stages import refine_budget

    cols = ip_stages.model_columns(problem)
    if cols > IP_COLUMNS:
        report["note"] = f"exact frontier skipped: its integer program has {cols:,} columns > {IP_COLUMNS:,}"
        return out
    spent = time.perf_counter() - t0
    budget = refine_budget(spent, None if time_limit is None else time_limit - spent)
    pts, complete, note = exact_frontier(problem, top, batch_size, graph_cls, settings, time_limit=budget,
                                         starts=[p.evaluation for p in out], on_point=on_point,
                                         max_points=max_points,
                                         threads=getattr(args, "threads", None))
    report["complete"], report["note"] = complete, note
    report["interrupted"] = note.endswith(INTERRUPTED)
    return out + pts


#: the exact frontier's resolution in latency: the next point has a latency at least this much (relative,
#: or an absolute second) below the last one's, so that HiGHS's feasibility tolerance (1e-9 on a model
#: in units of the largest time) never reads the last point as the next
FRONTIER_STEP_REL = 1e-6
FRONTIER_STEP_ABS = 1e-12


def _among_layer_plans(p: StagePoint) -> StagePoint:
    """The stage point ``p`` of a layer-node problem: an exact frontier point there is one among the
    layer-node plans only (operator nodes could do better), not of the stage model."""
    if p.frontier:
        return dataclasses.replace(p, frontier=False, how="frontier point of the layer-node plans")
    return p


def _unproven(p: StagePoint) -> StagePoint:
    """The stage point ``p`` with its throughput no longer claimed proven (nor its frontier point:
    :func:`_among_layer_plans`)."""
    p = _among_layer_plans(p)
    return dataclasses.replace(p, **proof_fields(p.status, False)) if p.proven else p


def refined_frontier_points(problem: ParallelProblem, graph_cls, settings, fine, args, batch_size: int, *,
                            deadline: float | None, stopped: Callable[[], bool], on_point: Callable,
                            out: list, reports: dict | None = None) -> tuple[list[StagePoint], bool]:
    """The stage plans of one batch size of the frontier (:func:`frontier_points`), refined where the
    problem has layer nodes (``fine()``: the operator-node problem, its graph and settings, of
    :func:`stage_problem`): a layer point's proof holds among layer plans only, so the operator nodes'
    points are solved in the time :func:`placement.stages.refine_budget` leaves and the points of both
    kept, each proven only where that holds for the stage model. Each point is appended to ``out`` and
    told to ``on_point`` as it is found (a Ctrl-C keeps them: ``out`` is changed in one step);
    ``reports[batch_size]`` receives whether the exact frontier is complete and a note. ``stopped()``:
    a Ctrl-C was taken, nothing more starts. Returns the points and whether a Ctrl-C that a solve took
    ended the search (nothing runs after it)."""
    left = None if deadline is None else max(0.05, deadline - time.perf_counter())
    t0 = time.perf_counter()
    start = len(out)  # kept as found: a Ctrl-C during the exact frontier or the refinement keeps them

    def point(p, layers=fine is not None) -> None:
        out.append(_unproven(p) if layers else p)  # with layer nodes: proven among layer plans only
        on_point(out[-1])

    report: dict = {}
    pts = frontier_points(problem, args, batch_size, graph_cls, settings, time_limit=left,
                          max_points=args.max_points, report=report, on_point=point)
    if reports is not None:
        reports[batch_size] = report if fine is None else \
            dict(report, complete=False, layers_complete=bool(report.get("complete")))
    if report.get("interrupted"):
        return pts, True
    cut = False  # the operators' search took a Ctrl-C
    fpts: list = []
    if fine is not None and not stopped():  # layer nodes, then the operators (never a loss)
        from .stages import refine_budget

        now = time.perf_counter()
        budget = refine_budget(now - t0, None if deadline is None else deadline - now)
        if budget >= 0.05:
            fp, fcls, fset = fine()
            each = budget / len(fp.replica_degrees())  # frontier_points solves once per degree
            freport: dict = {}
            fpts = [dataclasses.replace(p, how=p.how + ", operator nodes") for p in
                    frontier_points(fp, args, batch_size, fcls, fset, time_limit=each,
                                    max_points=args.max_points, report=freport)]
            if reports is not None and freport.get("complete"):
                reports[batch_size] = freport  # operator nodes hold every layer plan: the whole frontier
            cut = bool(freport.get("interrupted"))
            if cut and reports is not None:
                was = reports[batch_size]
                reports[batch_size] = dict(was, note=f"{was.get('note')}; operator nodes: {freport['note']}")
        both = pts + fpts
        # an exact point at operator granularity is a frontier point of the stage model (every layer
        # plan is an operator plan); a layer point's proof holds among layer plans only
        pts = [_among_layer_plans(p) for p in pts]
        keep = {id(p) for p in fpts if p.frontier}
        if any(p.proven for p in pts) and any(p.proven for p in fpts):
            top = min(p.evaluation.objective for p in both)  # the optimum at both granularities
            keep |= {id(p) for p in pts + fpts if p.evaluation.objective <= top * (1 + 1e-9)}
        pts = [p if id(p) in keep else _unproven(p) for p in pts + fpts]
        out[start:] = pts  # one step: a Ctrl-C sees the old points or the new
        for p in fpts:
            on_point(next(q for q in pts if q.evaluation is p.evaluation))
    return pts, cut


def exact_frontier(problem: ParallelProblem, top: StagePoint, batch_size: int, graph_cls=None,
                   settings=None, *, time_limit: float | None = None, starts=(), threads: int | None = None,
                   max_points: int = 50, on_point: Callable | None = None
                   ) -> tuple[list[StagePoint], bool, str]:
    """The stage model's frontier at one batch size, point by point from its throughput end (``top``:
    the stage optimum), by the stage integer program (:func:`solvers.ip_stages.solve_problem`, exact):
    at a time per sample ``T`` (first the optimum's), the least latency ``A`` among plans no slower than
    ``T``; then the least time per sample ``T`` among plans with a latency below ``A`` (by
    :data:`FRONTIER_STEP_REL`); until no plan has a lower latency (proven: the frontier is complete) or
    the time runs out. A point is proven (``frontier=True``) when both of its solves were, and ``T`` was
    (the optimum's, for the first). ``starts``: evaluations of known plans, warm starts where they
    meet a solve's limit; ``max_points``: at most this many points. Returns ``(points, complete,
    note)``. A Ctrl-C in a solve ends it with the points so far (the interrupted solve's plan among
    them, not proven, where it has one), ``note`` ending in :data:`INTERRUPTED`."""
    from solvers import ip_stages
    from solvers.base import CLOSED_GAP, IP_MIN_SECONDS, Status

    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    starts = [e for e in starts if e is not None and e.valid]
    # HiGHS's root processing ignores its limit (IP_MIN_SECONDS was measured on 16k columns): a small
    # program may start with less time left
    least = min(IP_MIN_SECONDS, max(0.2, ip_stages.model_columns(problem) / 3000))

    def left() -> float | None:
        return None if deadline is None else deadline - time.perf_counter()

    def warm(time_cap: float = math.inf, latency_cap: float = math.inf):
        """The best known plan within both caps for the solve they belong to (a warm start), or ``None``:
        the least latency under a time cap, the least time under a latency cap."""
        ok = [e for e in starts if e.objective <= time_cap * (1 + 1e-9) and e.latency <= latency_cap]
        key = (lambda e: (e.latency, e.objective)) if math.isfinite(time_cap) else \
            (lambda e: (e.objective, e.latency))
        return None if not ok else [s.stage for s in min(ok, key=key).stages]

    def stopped(r=None) -> tuple[list[StagePoint], bool, str]:
        if r is not None and r.interrupted:
            why = INTERRUPTED
        else:
            why = "its time limit" if r is None else (r.message or str(r.status))
        return points, False, f"exact frontier stopped after {len(points)} point(s): {why}"

    def run(**kw):
        r = _solve_ip(problem, time_limit=left(), gap=CLOSED_GAP, threads=threads, **kw)
        if r.evaluation is not None:
            starts.append(r.evaluation)
        return r

    cap, cap_proven = top.evaluation.objective, top.proven
    points: list[StagePoint] = []
    while True:
        rest = left()
        if rest is not None and rest < least:
            return stopped()
        q = run(objective="latency", max_load_max=cap, warm_start=warm(time_cap=cap))
        if q.evaluation is None:
            return stopped(q)
        proven = cap_proven and q.status is Status.OPTIMAL
        e = q.evaluation
        why = "by a Ctrl-C" if q.interrupted else "at its limit"
        how = "frontier point" + ("" if proven else f" (not proven: a solve stopped {why})")
        pt = StagePoint(batch_size, problem, e, "optimal" if proven else "feasible", "ip", proven, how,
                        q.time, e.objective if proven else None, q.message or "", graph_cls, settings,
                        frontier=proven)
        points.append(pt)
        if on_point is not None:
            on_point(pt)
        if q.interrupted:
            return stopped(q)
        if len(points) >= max_points:
            return points, False, f"exact frontier stopped at {len(points)} point(s) (--max-points)"
        below = e.latency - max(FRONTIER_STEP_REL * e.latency, FRONTIER_STEP_ABS)
        if below < 0:
            return points, True, f"exact frontier complete: {len(points)} point(s), the last at latency 0"
        rest = left()
        if rest is not None and rest < least:
            return stopped()
        r = run(latency_max=below, warm_start=warm(latency_cap=below))
        if r.status is Status.INFEASIBLE:
            return points, True, (f"exact frontier complete: {len(points)} point(s); no plan has a latency "
                                  f"below the last (proven)")
        if r.evaluation is None or r.interrupted:
            return stopped(r)
        cap, cap_proven = r.evaluation.objective, r.status is Status.OPTIMAL


def sweep(path: str, frontend: dict, batch_sizes, args, *, latency_slo: float | None = None,
          max_batch: int = AUTO_MAX_BATCH, on_point: Callable | None = None):
    """The stage model's best plan at each batch size (``None``: auto, as the one-device-per-stage sweep:
    :func:`placement.serving.sweep_batches`), as a :class:`placement.serving.Sweep`."""
    from .serving import Sweep, sweep_batches, unproven_sizes

    paths: dict = {}
    first_why: dict = {}
    proven_none: list[bool] = []  # per batch size without a plan: whether its search proved none
    # the command's clock (place's --time-limit, from its start), or the time limit from here
    clock = getattr(args, "clock", None) or Clock(getattr(args, "time_limit", None))
    halt: list[str] = []  # a Ctrl-C that cut a size's search short: the sweep ends there

    def point_at(b: int):
        try:
            return searched_at(b)
        except KeyboardInterrupt:  # outside a solve (reading the model, between solves): no plan here
            halt.append(INTERRUPTED)
            proven_none.append(False)
            return None, INTERRUPTED, None

    def searched_at(b: int):
        problem, graph_cls, settings, fine = stage_problem(
            path, frontend, b, microbatches=args.microbatches, schedule=args.schedule,
            max_replicas=args.max_replicas, granularity=args.granularity,
            device_memory=getattr(args, "device_memory", None), paths=paths)
        lat = None if latency_slo is None else latency_slo / (1e3 * b)
        # the stage solver's kernels loaded (once), off the clock where numba compiles them
        limit = clock.for_solve(getattr(args, "solver", None), "stages",
                                threads=getattr(args, "threads", None))
        ans, why, refined = best_refined(problem, args, fine and (lambda f=fine: f()[0]), latency=lat,
                                         time_limit=limit, batch_size=b)
        if why.get("interrupted"):  # its best so far is the size's answer; no size after it is tried
            halt.append(INTERRUPTED)
        if refined:
            problem, graph_cls, settings = fine()
        if ans is None:
            if not first_why:
                first_why.update(why, batch=b)
            proven_none.append(bool(why.get("proven_none")))
            return None, why.get("message", "no plan"), None
        return dataclasses.replace(ans, graph_cls=graph_cls, settings=settings), "", None

    points, best, stopped = sweep_batches(point_at, batch_sizes, max_batch=max_batch, on_point=on_point,
                                          clock=clock, halted=lambda: halt[0] if halt else "")
    lowest = None
    lowest_proven = False
    if best is None and latency_slo is not None and first_why.get("lowest") is not None:
        lowest = first_why["lowest"] * 1e3 * first_why["batch"]
        lowest_proven = bool(first_why.get("proven_none"))
    return Sweep(points, best, stopped, latency_slo, lowest, lowest_proven,
                 best is None and (all(proven_none) or lowest_proven), unproven_sizes(points, proven_none))


# ------------------------------------------------------------------------------------ provision
def provision(problem: ParallelProblem, prices, target: float, args, *, latency_slo: float | None = None,
              batch_size: int = 1, deadline: float | None = None, stop: Callable[[], bool] | None = None,
              max_solves: int = 200, fine: Callable | None = None):
    """The cheapest allocation of ``problem``'s devices serving ``target`` samples/s (with one batch's
    latency at most ``latency_slo`` ms, if given) on the stage model; see the module doc. Returns a
    :class:`placement.provision.Provision` whose ``solution`` is a :class:`StagePoint` (``cluster``
    ``None``) and ``stage_problem`` the allocation's problem. ``fine``: where ``problem``'s nodes are
    layers, the operator-granularity ``(problem, graph_cls, settings)`` of :func:`stage_problem`; each
    allocation is then refined (:func:`best_refined`)."""
    from .provision import (
        SEARCH_MARGIN_S,
        Allocation,
        Provision,
        Tried,
        _efficient,
        _most_found,
        cheapest_first,
        used_counts,
    )

    prices = np.asarray(prices, dtype=np.float64)
    kinds = tuple(k.name for k in problem.kinds)
    avail = [k.count for k in problem.kinds]
    allocs = [c for c in itertools.product(*(range(n + 1) for n in avail)) if sum(c) > 0]
    order = sorted(allocs, key=lambda c: (float(np.dot(c, prices)), sum(c)))
    need = 1.0 / target  # seconds per sample at most
    lat = None if latency_slo is None else latency_slo / (1e3 * batch_size)

    clock = Clock.until(deadline, stop, margin=SEARCH_MARGIN_S)
    blocked = False  # some allocation has plans, none under the latency target

    def rule_out(c) -> bool:
        return work_lower_bound(problem.with_counts(c)) > need * (1 + _REL)

    def solve_at(c, time_limit) -> Tried:
        nonlocal blocked
        sub = problem.with_counts(c)
        ans, why, refined = best_refined(sub, args, fine and (lambda c=c: fine()[0].with_counts(c)),
                                         latency=lat, time_limit=time_limit, batch_size=batch_size)
        if why.get("interrupted"):  # its answer (if any) stands; the search ends after it
            clock.took = True
        # the most this allocation serves, whatever the latency, is short of the target
        short = bool(why.get("optimum_proven")) and 1.0 / why["optimum"] < target * (1 - _REL)
        if ans is None:
            blocked = blocked or (lat is not None and (why.get("optimum") is not None
                                                       or why.get("lowest") is not None))
            none = bool(why.get("proven_none"))
            # proven none without a latency target: no plan at all
            return Tried(short=short or (none and lat is None), proven=none, no_plan=none and lat is None)
        ev = ans.evaluation
        used = used_counts(len(c), (s.stage.kind for s in ev.stages for _ in range(s.stage.d * s.stage.t)))
        a = Allocation(c, float(np.dot(c, prices)), ev.objective * 1e3 * batch_size,
                       1.0 / ev.objective if ev.objective > 0 else math.inf, ans.proven, used)
        point = None
        if a.samples_per_s >= target * (1 - _REL):
            point = ans
            if refined:  # the operators' map and settings, for the result file
                _, fcls, fset = fine()
                point = dataclasses.replace(ans, graph_cls=fcls, settings=fset)
        return Tried(a, point, short=short)

    found = cheapest_first(order, target, rule_out, solve_at, clock, max_solves)
    tried, best, best_pt, stopped = list(found.tried), found.best, found.answer, found.stopped
    eff = _efficient(tried, prices)
    proven = found.proven
    top = _most_found(eff, tried, proven)
    lowest = None
    if blocked and best is None and not eff and not clock.halted():  # the latency target is what is not met
        t = clock.left()
        limit = LOWEST_LATENCY_S if t is None else min(t, LOWEST_LATENCY_S)
        try:
            lowest = lowest_latency(problem, batch_size, limit, finer=None if fine is None else fine()[0])
        except KeyboardInterrupt:  # building the operator-node problem: no least latency to tell
            lowest = None
            stopped = "interrupted"
        if lowest is not None and lowest.interrupted:  # what it found is said; nothing runs after it
            stopped = "interrupted"
    pv = Provision(kinds, target, latency_slo, best, best_pt, None, tuple(eff), proven,
                   top, found.solves, stopped, lowest_latency=lowest, model="stages",
                   no_plan=found.no_plan and best is None)
    return pv, (best_pt.problem if best_pt is not None else None)


#: seconds at most for the least latency of an unmeetable target's message
LOWEST_LATENCY_S = 10.0


def lowest_latency(problem: ParallelProblem, batch_size: int = 1, time_limit: float | None = None, *,
                   finer: ParallelProblem | None = None):
    """The least latency of one batch (ms) over every plan of ``problem``, as a
    :class:`solvers.base.Solution` (``objective`` the least found, ``bound`` what is proven, both ms;
    ``optimal`` when they meet): the stage integer program with the latency as its objective
    (:func:`solvers.ip_stages.solve_problem`) where it is small enough (:data:`IP_COLUMNS`), else only
    the bound of :func:`latency_lower_bound`. ``finer``: the same model at operator granularity, whose
    plans include ``problem``'s: solved instead where it is small enough, else only its bound holds. A
    Ctrl-C in the program ends it with what it had, said interrupted
    (:attr:`solvers.base.Solution.interrupted`; not ``optimal``)."""
    from solvers import ip_stages
    from solvers.base import CLOSED_GAP, Status, stage_solution

    ms = 1e3 * batch_size
    if finer is not None:
        if ip_stages.model_columns(finer) <= IP_COLUMNS:
            return lowest_latency(finer, batch_size, time_limit)
        low = latency_lower_bound(finer) * ms  # operator plans may be faster than layer plans
        ans = lowest_latency(problem, batch_size, time_limit)
        if ans.status is Status.OPTIMAL:
            ans = dataclasses.replace(ans, status=Status.FEASIBLE, bound=min(low, ans.objective),
                                      message="least among layer-node plans")
        elif ans.bound is not None:
            ans = dataclasses.replace(ans, bound=min(low, ans.bound))
        return ans
    low = latency_lower_bound(problem) * ms
    if ip_stages.model_columns(problem) > IP_COLUMNS or (time_limit is not None and time_limit < 0.2):
        return stage_solution("bound", None, None, math.inf, Status.STOPPED, 0.0,
                              "the least latency's bound only", bound=low)
    r = _solve_ip(problem, objective="latency", time_limit=time_limit, gap=CLOSED_GAP)
    if r.evaluation is None:
        return stage_solution("ip", None, None, math.inf, r.status, r.time, r.message, bound=low)
    proven = r.bound  # seconds per sample, what the program proved
    bound = low if proven is None else max(low, proven * ms)
    value = r.evaluation.latency * ms
    return stage_solution("ip", r.plan, r.evaluation, value, r.status, r.time, r.message,
                          bound=value if r.status is Status.OPTIMAL else min(bound, value))


def check_stage_args(args, what: str) -> None:
    """The stage options of a serving command: positive, and no training."""
    check_counts(args)
    if getattr(args, "training", None):
        raise InputError(f"{what} maximises inference throughput: drop --training")
