"""Solvers by name: one list, with what each can do, and one :func:`solve` that runs any of them and
checks its answer against the one evaluator.

A solver has up to two forms:

* the **pipeline** form, ``solve(graph, cluster, options) -> Solution``, on the one-device-per-stage
  model of an :class:`~graphs.model.OpGraph` (the NeurIPS 2020 model, host CPUs included);
* the **stages** form, ``solve_stages(problem, options) -> Solution``, on the stage model of
  :mod:`graphs.parallel` (replicas ``d``, tensor-parallel degree ``t``, a variant per node, memory by
  schedule), of which the first is the ``d = t = 1``, one-variant case (:func:`graphs.parallel.from_opgraph`).

Either form takes either problem: an OpGraph solved in the stage form goes through ``from_opgraph``,
and a stage problem given to a solver with only the pipeline form goes through
:func:`graphs.parallel.to_opgraph` when it is exactly that model (refused by name when it is not).

Modules are imported on first use, so heavy dependencies (highspy, onnxruntime) load only when their
solver is asked for. The command line's ``--solver`` choices, its help and the benchmark suite's lists
all come from :data:`SOLVERS`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

from graphs.errors import InputError

from .base import BOUND_TOLERANCE_REL, CLOSED_GAP, OBJECTIVES, Solution, SolveOptions, Status, check_bound

__all__ = ["SolverInfo", "SOLVERS", "ALIASES", "get_solver", "solver_names", "solver_info", "solve",
           "checked", "check_curve_value", "UNLISTED", "canonical_name", "STAGE_SOLVERS", "bench_solvers",
           "RAW_OPTIONS", "prepare"]


@dataclass(frozen=True)
class SolverInfo:
    """What a solver is and can do. ``pipeline`` / ``stages``: ``"module:function"`` of its two forms
    (``None``: it has no such form). ``objectives``: those of its pipeline form (the stage form always
    minimises the time per sample, ``max-load``). ``exact``: it proves optimality and infeasibility (a
    limit aside); a solver that is not exact never answers ``infeasible``. ``contiguous``: its plans'
    stages are contiguous (nested ideals). ``honours``: the :class:`SolveOptions` fields it reads besides
    ``objective``, ``time_limit``, ``progress`` and ``raw``; another one set away from its default is
    refused, never ignored. ``bench``: the benchmark suite's tables that list it (:func:`bench_solvers`)."""

    name: str
    summary: str
    pipeline: str | None = None
    stages: str | None = None
    objectives: tuple[str, ...] = ("max-load",)
    exact: bool = False
    contiguous: bool = True
    honours: frozenset[str] = frozenset()
    stage_honours: frozenset[str] = frozenset()  # what its stage form reads, as ``honours``
    # the user-level keys of ``options.raw`` it reads (of :data:`RAW_OPTIONS`); another one given is refused
    raw_honours: frozenset[str] = frozenset()
    bench: tuple[str, ...] = ()  # the benchmark suite's tables it appears in: max-load, latency, tiny
    # the numba kernels its pipeline / stage form runs, compiled before its clock starts when it has a time
    # limit (solvers.kernels.warm: a module of kernels.SIGNATURES, or "module:kernel")
    kernels: tuple[str, ...] = ()
    stage_kernels: tuple[str, ...] = ()
    # its pipeline form stops at a limit of its own when none is given (auto's 300 s): its kernels are
    # compiled before that clock too
    own_time_limit: bool = False
    # its pipeline form calls SolveOptions.progress on the max-load objective (the command line's bar);
    # no other objective does
    progress: bool = False
    # its stage form calls SolveOptions.progress (the stage DP's passes, auto's steps on one bar)
    stage_progress: bool = False


_log = logging.getLogger("solvers")

#: logged (INFO, logger ``solvers``) as a solve starts compiling numba kernels (a cold cache)
COMPILING = ("compiling the solvers' kernels (numba; the first run after installing or updating, about a "
             "minute on 2 cores; later runs load them from the cache)")

#: the keys of ``SolveOptions.raw`` a user sets (the command line's ``--split``, ``--restarts``,
#: ``--memory-limit``), each read by the solvers that list it in ``raw_honours``: given to another solver
#: it is refused, never ignored. (Other raw keys are solvers' internal tuning.)
RAW_OPTIONS: dict[str, str] = {"split": "--split", "restarts": "--restarts", "memory_limit": "--memory-limit"}

_KNAPSACK = "solvers.dp_stages:_knapsack"
_IP_OPTIONS = frozenset({"gap", "threads", "seed", "backend", "warm_start", "subgraphs_per_device"})

#: every solver, in the order the command line lists them
SOLVERS: dict[str, SolverInfo] = {s.name: s for s in (
    SolverInfo("auto", "the exact DP when it fits the limits, a labelled large-graph path otherwise",
               "solvers.auto:solve", "solvers.auto_stages:solve_stages", OBJECTIVES, exact=True,
               honours=frozenset({"gap", "threads", "seed", "backend", "subgraphs_per_device"}),
               # the DP kernel's and the integer program's threads; the integer program's gap
               stage_honours=frozenset({"threads", "gap"}),
               raw_honours=frozenset({"memory_limit"}), kernels=("solvers.dp",),
               stage_kernels=("solvers.dp_stages", "solvers.dp"), own_time_limit=True, progress=True,
               stage_progress=True),
    SolverInfo("dp", "exact DP over the ideals of the graph", "solvers.dp:solve",
               "solvers.dp_stages:solve_stages", exact=True, honours=frozenset({"threads"}),
               stage_honours=frozenset({"threads"}),  # the pipeline kernel's, when it runs
               bench=("max-load", "tiny"), kernels=("solvers.dp",), stage_kernels=("solvers.dp_stages",),
               progress=True, stage_progress=True),
    SolverInfo("ip", "contiguous integer program (HiGHS); latency and split-max too", "solvers.ip:solve",
               "solvers.ip_stages:solve_stages", OBJECTIVES, exact=True, honours=_IP_OPTIONS,
               stage_honours=frozenset({"gap", "threads"}), bench=("max-load", "latency"), progress=True,
               stage_progress=True),
    SolverInfo("ip-noncontig", "non-contiguous integer program (HiGHS)", "solvers.ip:solve_noncontiguous",
               None, OBJECTIVES, exact=True, contiguous=False, honours=_IP_OPTIONS, bench=("max-load",),
               progress=True),
    SolverInfo("pipedream", "PipeDream's planner (a linearised graph, replicated stages)",
               "solvers.pipedream:solve", "solvers.pipedream_stages:solve_stages",
               bench=("max-load", "tiny"), kernels=("solvers.dp",), stage_kernels=(_KNAPSACK,),
               progress=True),
    SolverInfo("data-parallel", "pure data parallelism: one stage on every device of one kind", None,
               "solvers.pipedream_stages:solve_data_parallel", stage_kernels=(_KNAPSACK,)),
    SolverInfo("single", "the whole graph on one device", "solvers.single:solve",
               objectives=("max-load", "latency"), bench=("max-load", "latency", "tiny")),
    SolverInfo("expert", "a given split (--split), evaluated", "solvers.expert:solve",
               objectives=("max-load", "latency"), contiguous=False, bench=("max-load", "latency"),
               raw_honours=frozenset({"split"})),
    SolverInfo("local-search", "local search from random starts", "solvers.local_search:solve",
               contiguous=False, honours=frozenset({"seed", "warm_start"}), bench=("max-load", "tiny"),
               raw_honours=frozenset({"restarts"}), kernels=("solvers.local_search",)),
    SolverInfo("partition", "METIS graph partitioning", "solvers.partition:solve", contiguous=False,
               honours=frozenset({"seed"}), bench=("max-load", "tiny"), kernels=("solvers.local_search",)),
    SolverInfo("greedy-latency", "greedy list scheduling", "solvers.greedy:solve",
               objectives=("latency", "max-load"), contiguous=False, bench=("latency", "tiny")),
)}

#: solvers no command line lists, which their own callers run (:mod:`placement.serving`,
#: :mod:`placement.provision`), their answers held by :func:`checked` to the rules of the listed ones
UNLISTED: dict[str, SolverInfo] = {s.name: s for s in (
    SolverInfo("slo-ip", "the serving integer program: max-load under a latency limit, or the reverse",
               objectives=("max-load", "latency"), exact=True, contiguous=False),
)}

#: names of earlier releases, accepted with a note: the stage model's twins of one solver each
ALIASES: dict[str, str] = {"dp-replicated": "dp", "ip-replicated": "ip", "auto-replicated": "auto",
                           "pipedream-replicated": "pipedream"}

#: the solvers with a stage form
STAGE_SOLVERS: tuple[str, ...] = tuple(n for n, s in SOLVERS.items() if s.stages)


def solver_names() -> list[str]:
    return list(SOLVERS)


#: the benchmark tables' order: exact solvers first, then the baselines
_BENCH_ORDER = ("dp", "ip", "ip-noncontig", "pipedream", "partition", "local-search", "greedy-latency",
                "expert", "single")


def bench_solvers(table: str) -> tuple[str, ...]:
    """The solvers of the benchmark suite's ``table`` (``max-load``, ``latency`` or ``tiny``), in table
    order."""
    names = [n for n, s in SOLVERS.items() if table in s.bench]
    rank = {n: i for i, n in enumerate(_BENCH_ORDER)}
    return tuple(sorted(names, key=lambda n: rank.get(n, len(rank))))


def canonical_name(name: str) -> tuple[str, str]:
    """``(name, note)``: the solver ``name`` stands for (an alias resolved, with a note saying so);
    :class:`InputError` lists the choices for an unknown name."""
    if name in SOLVERS:
        return name, ""
    if name in ALIASES:
        new = ALIASES[name]
        return new, f"solver {name!r} is now {new!r} (one solver for both models); the old name goes " \
                    f"in the next release"
    raise InputError(f"unknown solver {name!r}; choose one of: {', '.join(SOLVERS)}")


def solver_info(name: str) -> SolverInfo:
    return SOLVERS[canonical_name(name)[0]]


def _load(target: str) -> Callable[..., Solution]:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def get_solver(name: str) -> Callable[..., Solution]:
    """The pipeline form ``solve(graph, cluster, options) -> Solution`` of ``name`` (unchecked: prefer
    :func:`solve`); :class:`InputError` lists the choices otherwise."""
    info = solver_info(name)
    if info.pipeline is None:
        raise InputError(f"the {info.name} solver places stage models only (replicas, variants): give it "
                         f"a stage-model problem")
    return _load(info.pipeline)


_DEFAULTS = SolveOptions()
#: the options a solver may not honour, named as a library caller sets them (the command line's
#: placement._flags.cli_words shows its flags instead)
_OPTION_NAMES = {f: f"options.{f}" for f in ("gap", "threads", "seed", "backend", "subgraphs_per_device")}
_OPTION_NAMES["warm_start"] = "a warm start"


def _refuse_unhonoured(info: SolverInfo, options: SolveOptions, stages: bool) -> None:
    honours = info.stage_honours if stages else info.honours
    if options.subgraphs_per_device != _DEFAULTS.subgraphs_per_device and options.objective != "latency":
        # only the latency model runs subgraphs one after another: any other objective would drop it
        raise InputError(f"options.subgraphs_per_device applies to the latency objective (how many subgraphs "
                         f"one accelerator runs in turn); this objective is {options.objective}")
    for f in _OPTION_NAMES:
        if f not in honours and getattr(options, f) != getattr(_DEFAULTS, f):
            where = " on the stage model (replicas)" if stages else ""
            reads = ", ".join(sorted(_OPTION_NAMES[x] for x in honours))
            said = f"it reads: {reads}" if reads else \
                f"it reads none of these options: {', '.join(_OPTION_NAMES.values())}"
            raise InputError(f"{_OPTION_NAMES[f]} does not apply to the {info.name} solver{where} ({said})")
    # the auto solver's stage form has no memory-hungry DP to limit: memory_limit is its pipeline form's
    raw_honours = info.raw_honours if not stages else info.raw_honours - {"memory_limit"}
    for key in RAW_OPTIONS:
        if key in options.raw and key not in raw_honours:
            readers = [n for n, s in SOLVERS.items() if key in s.raw_honours]
            raise InputError(f"options.raw[{key!r}] does not apply to the {info.name} solver"
                             f"{' on the stage model (replicas)' if stages else ''}: it is read by the "
                             f"{', '.join(readers)} solver{'s' if len(readers) > 1 else ''}")


def solve(graph, cluster=None, *, solver: str | None = None, options: SolveOptions | None = None,
          form: str | None = None) -> Solution:
    """Run ``solver`` (default ``auto``) and return its answer checked by the one evaluator.

    ``graph`` is an :class:`~graphs.model.OpGraph` with its ``cluster``, or a
    :class:`~graphs.parallel.ParallelProblem` (no cluster). ``form``: ``"pipeline"`` or ``"stages"``
    (default: the problem's own; an OpGraph solved in the stage form goes through
    :func:`graphs.parallel.from_opgraph` and comes back with both the plan and the assignment). A stage
    problem given to a solver of the one-device-per-stage model alone is placed through
    :func:`graphs.parallel.to_opgraph` when :func:`graphs.parallel.pipeline_misfit` (at the solver's
    contiguity) finds it is that model, and comes back with the plan.

    The wrapper refuses, with one :class:`InputError` naming it, an objective or option the solver cannot
    honour; re-evaluates every returned placement (an invalid one, or a value the evaluator disagrees
    with, is a bug and raises :class:`AssertionError`); keeps the bound at most the value; calls a
    solution ``optimal`` only when its gap is closed (at most :data:`~solvers.base.CLOSED_GAP`; a met
    ``--gap`` is ``feasible``, labelled within-gap in ``stats["path"]``); and never lets a solver that is
    not exact answer ``infeasible`` (its restricted family is empty: ``unknown``).

    Compiling numba kernels (an empty kernel cache: the first run after installing or updating) is not
    solving: with a time limit the solver's kernels (:attr:`SolverInfo.kernels`) are compiled before its
    clock starts (:func:`solvers.kernels.warm`); the solution's ``time`` leaves any compiling out and
    ``stats["compile_s"]`` says how long it took."""
    from graphs.parallel import ParallelProblem

    options = options or SolveOptions()
    name, note = canonical_name(solver or "auto")
    info = SOLVERS[name]
    is_stage_problem = isinstance(graph, ParallelProblem)
    if is_stage_problem and cluster is not None:
        raise TypeError("a stage-model problem carries its devices: pass no cluster")
    form = form or ("stages" if is_stage_problem else "pipeline")
    if form not in ("pipeline", "stages"):
        raise ValueError(f"form must be 'pipeline' or 'stages', got {form!r}")
    if form == "pipeline" and is_stage_problem:
        raise InputError("a stage-model problem is solved in the stage form")
    target = info.stages if form == "stages" else info.pipeline
    if is_stage_problem and target is None and info.pipeline is not None:
        # the one-device-per-stage model is the stage model's d = t = 1 case: a solver of that model
        # places a stage problem that is exactly it, through its graph (graphs.parallel.to_opgraph)
        return _solve_through_pipeline(info, graph, options, note)
    if target is None:
        have = "stage-model problems (replicas, variants)" if info.stages else \
            "the one-device-per-stage model"
        names = STAGE_SOLVERS if form == "stages" else [n for n, s in SOLVERS.items() if s.pipeline]
        raise InputError(f"the {name} solver solves {have} only; choose one of: {', '.join(names)}")
    if is_stage_problem and info.contiguous and not graph.contiguous:
        raise InputError(_pipelines_only(name), source=graph.graph.source)
    objectives = ("max-load",) if form == "stages" else info.objectives
    if options.objective not in objectives:
        raise InputError(f"the {name} solver does not support objective {options.objective!r}"
                         + (" on the stage model (replicas), which minimises the time per sample (max-load)"
                            if form == "stages" else f" (it supports: {', '.join(objectives)})"))
    _refuse_unhonoured(info, options, form == "stages")
    run = _load(target)
    kernels = _kernels_of(info, form, graph)
    with _compiling(bool(kernels)) as compile_s:
        _warm_before_the_clock(kernels, options, info.own_time_limit and form == "pipeline")
        warmed = compile_s()
        if form == "pipeline":
            sol = checked(name, graph, run(graph, cluster, options), cluster=cluster,
                          objective=options.objective)
        elif is_stage_problem:
            sol = checked(name, graph, run(graph, options))
        else:
            from graphs.parallel import from_opgraph

            from ._common import replicated_assignment

            problem, item_of = from_opgraph(graph, cluster)
            sol = checked(name, problem, run(problem, options))
            if sol.plan is not None:
                a = replicated_assignment(sol.plan, cluster, item_of, problem.graph.num_nodes)
                sol = dataclasses.replace(sol, assignment=a)
                sol = checked(name, graph, sol, cluster=cluster, objective=options.objective)
    return _named(sol, name, note, compile_s(), warmed)


def _pipelines_only(name: str) -> str:
    """Why a solver whose plans are pipelines does not take a stage problem built with
    ``contiguous=False``: that problem's plans include assignments that are not pipelines, sometimes
    better ones (or the only ones that fit), so the solver's optimum or infeasibility would not be the
    problem's."""
    free = [n for n, s in SOLVERS.items() if not s.contiguous and s.pipeline and n != "expert"]
    return (f"the {name} solver's plans are pipelines (stages that are nested ideals), and this stage-model "
            f"problem's stages need not be (contiguous=False): a plan that is not a pipeline may beat its "
            f"best, or fit where none of its plans does. Build the problem with contiguous=True, or, when it "
            f"is the one-device-per-stage model, choose one of: {', '.join(free)}")


def prepare(solver: str | None = None, form: str = "pipeline", *, threads: int | None = None) -> None:
    """Import ``solver``'s (default ``auto``) module of ``form`` (``"pipeline"`` or ``"stages"``) and
    load or compile its kernels, so that its first :func:`solve` spends nothing on either: for a caller
    whose own clock (a sweep's time limit) is about to start. ``threads``: those the solve will run on,
    as its ``SolveOptions.threads`` (``None``: numba's); on one thread the multi-threaded kernels are
    left out (:func:`_multi_threaded`), as the solve leaves them out."""
    info = solver_info(solver or "auto")
    target = info.stages if form == "stages" else info.pipeline
    if target is None:
        return
    _load(target)
    kernels = info.stage_kernels if form == "stages" else info.kernels
    if kernels:
        from .kernels import warm

        warm(kernels, load=True, parallel=_multi_threaded(threads))


def _multi_threaded(threads: int | None) -> bool:
    """Whether a solve held to ``threads`` threads (``SolveOptions.threads``; ``None``: numba's
    ``NUMBA_NUM_THREADS``) may run the multi-threaded kernels (``*_parallel``): more than one thread.
    The one rule of :func:`prepare` and :func:`_warm_before_the_clock` for leaving them out."""
    if threads is None:
        from numba import config

        threads = config.NUMBA_NUM_THREADS
    return threads > 1


def _kernels_of(info: SolverInfo, form: str, graph) -> tuple[str, ...]:
    """The kernel modules ``info``'s solve of ``form`` on ``graph`` (an OpGraph or a stage problem) runs:
    on a stage problem that is the one-device-per-stage model (an OpGraph's always is), the stage DP runs
    the pipeline DP's kernels (:mod:`solvers.dp_pipeline`)."""
    if form != "stages":
        return info.kernels
    kernels = info.stage_kernels
    if "solvers.dp_stages" in kernels:
        from graphs.parallel import ParallelProblem, is_pipeline_model

        if not isinstance(graph, ParallelProblem) or is_pipeline_model(graph):
            kernels = (*kernels, "solvers.dp")
    return kernels


def _warm_before_the_clock(kernels: tuple[str, ...], options: SolveOptions, own_limit: bool = False) -> None:
    """With a time limit (the options', or the solver's own when ``own_limit``), compile (a cold numba
    cache) or load (a warm one) the solve's kernels before its clock starts: the limit is the search's.
    Loading costs ~0.01 s a kernel, but the first load of a process sets up numba's code generator
    (~0.5 s), and a cold multi-threaded DP kernel compiles for 5-8 s: on the solver's clock either took
    most of a short limit. The multi-threaded kernels are left
    out when the solve is held to one thread (``threads=1``, or numba has one)."""
    if kernels and (options.time_limit is not None or own_limit):
        from .kernels import warm

        warm(kernels, load=True, parallel=_multi_threaded(options.threads))


def _named(sol: Solution, name: str, note: str, compiled: float, warmed: float) -> Solution:
    """The answer under the solver's registered name, an alias's note added, its time without the
    compiling that :func:`_warm_before_the_clock` missed (told apart in ``stats["compile_s"]``)."""
    if compiled > 0:
        sol = dataclasses.replace(sol, time=max(0.0, sol.time - (compiled - warmed)),
                                  stats={**(sol.stats or {}), "compile_s": compiled})
    if sol.solver != name:
        sol = dataclasses.replace(sol, solver=name)
    if note:
        sol = dataclasses.replace(sol, message=f"{sol.message}; {note}" if sol.message else note)
    return sol


def _solve_through_pipeline(info: SolverInfo, problem, options: SolveOptions, note: str) -> Solution:
    """A solver of the one-device-per-stage model on a stage ``problem`` that is that model
    (:func:`graphs.parallel.pipeline_misfit`, at the solver's contiguity): its pipeline form on
    :func:`graphs.parallel.to_opgraph`'s graph, checked there, and the placement turned into the
    problem's plan (:func:`graphs.parallel.plan_of_assignment`), checked by the stage evaluator. Anything
    else is refused by name: the misfit, an objective but the time per sample, the expert's split (it
    names an operator graph's nodes)."""
    from graphs.parallel import pipeline_misfit, plan_of_assignment, to_opgraph

    others = ", ".join(STAGE_SOLVERS)
    if info.name == "expert":
        raise InputError("the expert solver evaluates a split of an operator graph's nodes; a stage plan "
                         "is scored by graphs.parallel.evaluate_plan (placement evaluate on the command "
                         f"line); the solvers of stage-model problems: {others}")
    why = pipeline_misfit(problem, contiguous=info.contiguous)
    if why:
        raise InputError(f"the {info.name} solver places one device per stage, and this stage-model "
                         f"problem is not that model ({why}); choose one of: {others}",
                         source=problem.graph.source)
    if options.objective != "max-load":
        raise InputError(f"the {info.name} solver does not support objective {options.objective!r} on the "
                         "stage model (replicas), which minimises the time per sample (max-load)")
    _refuse_unhonoured(info, options, stages=False)
    graph, cluster = to_opgraph(problem, contiguous=info.contiguous)
    with _compiling(bool(info.kernels)) as compile_s:
        _warm_before_the_clock(info.kernels, options)
        warmed = compile_s()
        sol = checked(info.name, graph, _load(info.pipeline)(graph, cluster, options), cluster=cluster,
                      objective=options.objective)
        if sol.assignment is not None:
            plan = tuple(plan_of_assignment(problem, cluster, sol.assignment))
            sol = checked(info.name, problem, dataclasses.replace(sol, assignment=None, plan=plan))
    return _named(sol, info.name, note, compile_s(), warmed)


@contextlib.contextmanager
def _compiling(kernels: bool):
    """``spent()``: the seconds numba compiled in the block (:func:`solvers.kernels.compile_seconds`);
    watched where the solver runs kernels or numba is loaded already (importing it costs a second)."""
    if not kernels and "numba" not in sys.modules:
        yield lambda: 0.0
        return
    from .kernels import compile_seconds

    said: list[bool] = []

    def first() -> None:  # a library call waits as long as a command: the caller's logging may say so
        if not said:
            said.append(True)
            _log.info(COMPILING)

    with compile_seconds(first) as spent:
        yield spent
    if said:
        _log.info("compiled the solvers' kernels in %.1f s", spent())


def _honest(info: SolverInfo, sol: Solution, value: float) -> Solution:
    """The status, bound and gap the answer has proven, whatever the solver said."""
    status, message, stats = sol.status, sol.message, dict(sol.stats or {})
    if not sol.found:
        if status is Status.INFEASIBLE and not info.exact:
            status = Status.UNKNOWN  # a baseline's empty family proves nothing about the problem
            message = message or f"the {info.name} solver found no placement"
        if status is Status.FEASIBLE:  # 'feasible' with nothing in hand is not a placement
            status = Status.UNKNOWN
        return dataclasses.replace(sol, status=status, message=message, bound=None, gap=None)
    claimed = sol.bound
    if status is Status.OPTIMAL and claimed is None:
        claimed = value  # the solver claims a proof: the wrapper holds it to the evaluator's value
    cb = check_bound(claimed, value)
    bound, gap = cb.bound, cb.gap
    if sol.bound is not None and sol.gap is not None and sol.bound <= value:
        bound, gap = sol.bound, sol.gap  # the solver's own figures, where they hold
    if status is Status.OPTIMAL:
        if not info.exact:
            raise AssertionError(f"the {info.name} solver is not exact but answered optimal")
        # closed: at most CLOSED_GAP, plus the MIP solver's feasibility tolerance (the same number)
        if gap is None or gap > CLOSED_GAP + BOUND_TOLERANCE_REL:
            status = Status.FEASIBLE
            stats.setdefault("path", "within-gap")
            why = "within the requested gap, not proven optimal"
            why += f" (gap {gap:.3g})" if gap is not None else ""
            message = f"{message}; {why}" if message else why
    elif status is Status.INFEASIBLE:
        raise AssertionError(f"the {info.name} solver answered infeasible with a placement")
    return dataclasses.replace(sol, status=status, bound=bound, gap=gap, message=message, stats=stats)


#: how far a plan may exceed a limit it was held to (``latency_max``, ``max_load_max``): the solvers' own
#: relative tolerance on those rows (:func:`solvers.ip_stages.solve_problem`, :func:`solvers.slo_ip.solve`)
LIMIT_TOLERANCE_REL = 1e-9
LIMIT_TOLERANCE_ABS = 1e-12


def checked(solver: str, problem, solution: Solution, *, cluster=None, objective: str = "max-load",
            latency_max: float | None = None, max_load_max: float | None = None) -> Solution:
    """``solution``, the answer of ``solver`` (a name of :data:`SOLVERS` or :data:`UNLISTED`) to
    ``problem`` (an :class:`~graphs.model.OpGraph` on ``cluster``, or a
    :class:`~graphs.parallel.ParallelProblem`), held to the rules :func:`solve` holds every answer to (it
    runs them through here): its placement or plan re-evaluated by the one evaluator, its ``objective``
    the evaluator's, and its status, bound and gap the ones it has proven (:func:`_honest`). An invalid
    placement, a value the evaluator disagrees with, or a limit the plan breaks is a bug: it raises
    :class:`AssertionError`.

    ``objective``: what the solver minimised: ``"max-load"`` (the time per sample), ``"split-max"``, or
    ``"latency"`` (an OpGraph's: :func:`graphs.latency.latency`, on the solver's ``stats["subgraphs"]``
    where it chose them; a plan's: :attr:`graphs.parallel.PlanEvaluation.latency`). ``latency_max`` and
    ``max_load_max``: the limits the solver held its plans to (rows of its program), which the plan must
    meet (within :data:`LIMIT_TOLERANCE_REL`)."""
    from graphs.parallel import ParallelProblem

    info = UNLISTED.get(solver) or solver_info(solver)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    # the limits a plan could break (an infinite one holds every plan: nothing to measure for it)
    limits = {what: limit for what, limit in (("latency", latency_max), ("max-load", max_load_max))
              if limit is not None and math.isfinite(limit)}
    if isinstance(problem, ParallelProblem):
        if cluster is not None:
            raise TypeError("a stage-model problem carries its devices: pass no cluster")
        if objective == "split-max":
            raise ValueError("a stage plan has no split-max objective")
        return _checked_stages(info, problem, solution, objective, limits)
    return _checked_pipeline(info, problem, cluster, solution, objective, limits)


def check_curve_value(solver: str, counts, curve_value: float, solution: Solution) -> None:
    """A throughput curve's value at ``counts`` (a vector of devices per kind: :func:`solvers.dp.curve`,
    which keeps no placements) against ``solution``, ``solver``'s answer :func:`checked` on the
    sub-cluster of those counts: when that answer is proven optimal the two are one optimum, and a
    disagreement is a bug (:class:`AssertionError`)."""
    if solution.status is Status.OPTIMAL:
        _check_value(f"the throughput curve at {tuple(int(c) for c in counts)}", curve_value,
                     f"the {solver} solver's optimum there", solution.objective, abs_tol=1e-9)


def _check_value(who: str, said: float, judge: str, value: float, *, abs_tol: float) -> None:
    """``said`` must be ``value`` (within a relative 1e-6: summation order, a MIP solver's tolerance)."""
    if not math.isclose(said, value, rel_tol=1e-6, abs_tol=abs_tol):
        raise AssertionError(f"{who} says {said!r}, {judge} {value!r}")


def _check_limits(info: SolverInfo, measured: dict[str, float], limits: dict[str, float]) -> None:
    """The plan's ``measured`` latency and max-load within the (finite) ``limits`` it was held to."""
    for what, limit in limits.items():
        if measured[what] > limit * (1 + LIMIT_TOLERANCE_REL) + LIMIT_TOLERANCE_ABS:
            raise AssertionError(f"the {info.name} solver's plan has {what} {measured[what]!r}, above its "
                                 f"limit {limit!r}")


def _checked_pipeline(info: SolverInfo, graph, cluster, sol: Solution, objective: str,
                      limits: dict[str, float]) -> Solution:
    if sol.assignment is None:
        return _honest(info, sol, math.inf)
    from ._common import objective_value

    subgraphs = (sol.stats or {}).get("subgraphs")
    value, problems = objective_value(graph, cluster, sol.assignment, objective, subgraphs)
    if problems:
        raise AssertionError(f"the {info.name} solver returned an invalid placement: "
                             f"{'; '.join(problems[:3])}")
    if math.isfinite(sol.objective):
        _check_value(f"the {info.name} solver", sol.objective, "the evaluator", value, abs_tol=1e-9)
    if limits:
        from graphs.evaluate import evaluate
        from graphs.latency import latency

        _check_limits(info, {"latency": latency(graph, cluster, sol.assignment, subgraphs=subgraphs).total,
                             "max-load": evaluate(graph, cluster, sol.assignment).max_load}, limits)
    return _honest(info, dataclasses.replace(sol, objective=value), value)


def _checked_stages(info: SolverInfo, problem, sol: Solution, objective: str,
                    limits: dict[str, float]) -> Solution:
    from graphs.parallel import evaluate_plan

    if info.contiguous and not problem.contiguous and sol.status in (Status.OPTIMAL, Status.INFEASIBLE):
        # its search covers the pipelines alone (solve refuses such a problem; a caller of the solver's
        # function gets what that search proves of the problem: nothing)
        found = sol.plan is not None
        why = "the best pipeline, not proven optimal" if found else "no pipeline fits, which proves nothing"
        why += ": this problem's stages need not be nested ideals (contiguous=False)"
        sol = dataclasses.replace(sol, status=Status.FEASIBLE if found else Status.UNKNOWN, bound=None,
                                  gap=None, message=f"{sol.message}; {why}" if sol.message else why)
    if sol.plan is None:
        return _honest(info, sol, math.inf)
    ev = evaluate_plan(problem, sol.plan)
    if ev.problems:
        raise AssertionError(f"the {info.name} solver returned an invalid plan: "
                             f"{'; '.join(ev.problems[:3])}")
    value = ev.latency if objective == "latency" else ev.objective
    _check_value(f"the {info.name} solver", sol.objective, "the evaluator", value, abs_tol=1e-12)
    _check_limits(info, {"latency": ev.latency, "max-load": ev.objective}, limits)
    return _honest(info, dataclasses.replace(sol, objective=value, evaluation=ev), value)
