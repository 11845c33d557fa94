"""Stage plans of ONNX models on the command line: ``placement place model.onnx`` solves the stage model
(:mod:`graphs.onnx_variants`: data-parallel and tensor-parallel stages, activation recomputation, memory
by schedule) for inference and training alike; ``placement evaluate model.onnx plan.json`` re-scores
such a plan.

    placement place model.onnx [--training] --devices a100:8,v100:8 [--schedule 1f1b|gpipe|pipedream|2bw]
                    [--microbatches N] [--max-replicas D] [--granularity layer|op] [--device-memory BYTES]

``--max-replicas 1``, a solver without a stage form, or an option only the one-device-per-stage
placement solves (:func:`_one_device_per_stage_only`) keeps that placement and its output. A batch-size
sweep or ``--latency-slo`` with ``--max-replicas`` above 1 runs on the stage model
(:mod:`placement.serving_stages`; without ``--max-replicas``: one device per stage, as before). The result
is the stage plan of :mod:`placement.stages` (schema version 2: ``stages`` with ``nodes`` — layer
keys, or operator names at ``--granularity op`` —, degrees, ``TMPCids``, memory and in-flight
micro-batches), plus each stage's ``operators`` (forward and backward) and, in its ``problem`` section,
the granularity and front-end settings, so that ``evaluate`` rebuilds the same problem. The JSON's times
are seconds per sample (``time_unit``); the printed table and summary show milliseconds per sample.
"""

from __future__ import annotations

import os

from graphs.errors import InputError, PlacementError
from graphs.jsonio import read_json
from graphs.parallel import ParallelProblem, evaluate_plan

__all__ = ["add_options", "takes_stage_model", "serving", "load_problem", "problem_for_result", "place",
           "evaluate", "stage_result"]



def add_options(p) -> None:
    """The ONNX replicated options (the schedule and degrees are :mod:`placement.stages`'s)."""
    p.add_argument("--granularity", choices=("layer", "op"), default=None,
                   help="ONNX stage plans: one node per layer or per operator (default: layers where "
                   "the model's names give them, then operators within max(10 s, 3x the layer solve) "
                   "and --time-limit, keeping the faster plan)")


def _is_onnx(path: str) -> bool:
    return str(path).lower().endswith(".onnx")


def _stage_solver(name: str | None) -> bool:
    """Has ``--solver`` a stage form (:data:`solvers.registry.STAGE_SOLVERS`)? An unknown name is left
    to the registry's error."""
    from solvers.registry import ALIASES, STAGE_SOLVERS

    return name is None or ALIASES.get(name, name) in STAGE_SOLVERS


def _one_device_per_stage_only(args, library: bool = False) -> str | None:
    """The option (its flag, or with ``library`` its :func:`placement.place_model` parameter) of ``args``
    that only the one-device-per-stage placement solves so far, or ``None``: a latency objective or
    target, a batch-size sweep, a given split or a memory limit."""
    objective = getattr(args, "objective", None) or "max-load"
    if objective != "max-load":
        return f"objective {objective!r}" if library else f"--objective {objective}"
    if getattr(args, "latency_slo", None) is not None:
        return "--latency-slo"
    if isinstance(getattr(args, "batch_size", None), str):
        return f"--batch-size {args.batch_size}"
    for flag in ("split", "memory_limit"):
        if getattr(args, flag, None) is not None:
            return "--" + flag.replace("_", "-")
    return None


def takes_stage_model(args, *, library: bool = False) -> bool:
    """Does ``place`` solve the stage model (replicas, tensor parallelism, schedule-aware memory) on this
    ONNX model? It does by default, for training and inference alike, when the solver has a stage form
    (:data:`solvers.registry.STAGE_SOLVERS`). ``--max-replicas 1`` asks for the one-device-per-stage
    placement, as does an option only that placement solves so far (see
    :func:`_one_device_per_stage_only`); that option together with ``--max-replicas`` above 1 is an
    :class:`InputError` naming it, except a batch-size sweep and ``--latency-slo`` (:func:`serving`),
    which the stage model takes then (:mod:`placement.serving_stages`). ``library``: the rule of
    :func:`placement.place_model`, its errors naming its parameters rather than flags."""
    mr = getattr(args, "max_replicas", None)
    if not _is_onnx(args.workload) or mr == 1 or not _stage_solver(getattr(args, "solver", None)):
        return False
    flag = _one_device_per_stage_only(args, library)
    if flag is None:
        return True
    if mr is None and not serving_default(args):
        return False
    if serving(args):  # the stage model's sweep and latency target (placement.serving_stages)
        import copy

        rest = copy.copy(args)
        rest.latency_slo, rest.batch_size = None, None
        flag = _one_device_per_stage_only(rest)
        if flag is None:
            return True
    if mr is None:  # an option only one device per stage takes: that placement, as asked
        return False
    if library:
        raise InputError(f"{flag}: the stage model (max_replicas={mr}) minimises the time per sample "
                         f"(max-load) and does not take it yet; without max_replicas, or with "
                         f"max_replicas=1, the one-device-per-stage placement solves it")
    raise InputError(f"{flag}: the stage model (--max-replicas {mr}) minimises the time per sample "
                     f"(max-load) and does not take it yet; without --max-replicas, or with "
                     f"--max-replicas 1, the one-device-per-stage placement solves it")


def serving(args) -> bool:
    """A batch-size sweep (``--batch-size auto`` or a list) or a latency target (``--latency-slo``)?
    With ``--max-replicas`` above 1 the stage model takes them (:mod:`placement.serving_stages`)."""
    return (getattr(args, "latency_slo", None) is not None
            or isinstance(getattr(args, "batch_size", None), str))


def serving_default(args) -> bool:
    """Does a serving command without ``--max-replicas`` take the stage model? For inference, yes: without
    a latency target a plan with replicas is never slower than one device per stage (the stage model at
    operator granularity holds every such plan, and layer nodes are refined). With ``--latency-slo``
    (``place`` and ``provision``), where the stage answer is not proven the one-device-per-stage search
    also runs in the time left and the better answer is kept
    (``placement.serving_cli._one_device_per_stage_too`` and
    ``_one_device_per_stage_provision_too``): a stage plan's latency runs its stages one after another,
    a one-device-per-stage plan's lets independent branches overlap."""
    return not getattr(args, "training", False)


def load_problem(args, frontend: dict, saved: dict | None = None) -> tuple[ParallelProblem, object, dict]:
    """The problem of ``args`` (settings ``saved`` in a plan take precedence where the command line
    gives none); returns it, the loaded graph's node of every operator, and the settings used."""
    problem, graph_cls, settings, _ = _load(args, frontend, saved)
    return problem, graph_cls, settings


def _load(args, frontend: dict, saved: dict | None = None):
    """:func:`load_problem`, also returning the builder of the problem at operator granularity when the
    default chose layers (``None`` otherwise): :func:`solve_refined` may refine to it."""
    from graphs.devices import DeviceSet, parse_devices
    from graphs.onnx_variants import onnx_parallel_problem, stage_problem
    from graphs.onnx_workload import DEFAULT_DEVICES, prepare_onnx

    from .export import source_path

    saved = saved or {}
    for name in ("max_devices", "bandwidth"):
        if getattr(args, name, None) is not None:
            raise InputError(f"--{name.replace('_', '-')} is for Piper-format workloads; name an ONNX "
                             f"model's devices with --devices")
    for name in ("microbatches", "max_replicas"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            raise InputError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")
    fe = {k: v for k, v in frontend.items() if v is not None}
    for k in ("devices", "costs", "batch_size", "optimizer", "training", "dims"):
        if k not in fe and saved.get(k) is not None:
            fe[k] = saved[k]
    if "device_files" not in fe and saved.get("device_files"):
        # stored relative to the result file (as a one-device-per-stage result stores them)
        base = os.path.dirname(os.path.abspath(saved["_path"])) if saved.get("_path") else ""
        fe["device_files"] = [os.path.join(base, f) for f in saved["device_files"]]
    files = fe.get("device_files") or ()
    ds = parse_devices(fe.pop("devices", None) or DEFAULT_DEVICES, fe.pop("device_files", None) or ())
    mem = getattr(args, "device_memory", None)
    if mem is not None:
        if not mem > 0:
            raise InputError(f"--device-memory must be positive, got {mem}")
        import dataclasses

        ds = DeviceSet(tuple(s if s.host else dataclasses.replace(s, memory=float(mem)) for s in ds.specs),
                       ds.counts)
    og, w = prepare_onnx(args.workload, ds, **fe)
    schedule = args.schedule or saved.get("schedule") or "1f1b"
    given = args.granularity or saved.get("granularity")
    microbatches = args.microbatches or saved.get("microbatches")
    problem, cls, gran = stage_problem(og, w.graph, ds, schedule=schedule, max_replicas=args.max_replicas,
                                       granularity=given, microbatches=microbatches)
    finer = None
    if given is None and gran == "layer":
        def finer():
            return onnx_parallel_problem(og, w.graph, ds, microbatches=microbatches, schedule=schedule,
                                         max_replicas=args.max_replicas, granularity="op")
    out = getattr(args, "out", None)
    settings = {"granularity": gran, "devices": str(ds), "costs": fe.get("costs") or "roofline",
                "batch_size": og.batch_size, "training": bool(w.graph.is_training),
                "optimizer": w.graph.meta.get("training", {}).get("optimizer"),
                "dims": fe.get("dims") or None,
                "device_files": [source_path(f, out) for f in files] or None}
    return problem, (w.graph, cls), settings, finer


#: the operator-granularity refinement's time: at least this many seconds, or this many times the
#: layer solve's, within what the time limit leaves
REFINE_MIN_S, REFINE_FACTOR = 10.0, 3.0


def refine_budget(spent: float, left: float | None) -> float:
    """Seconds for the operator-granularity solve after a layer solve that took ``spent``, with ``left``
    seconds of the time limit remaining (``None``: no limit)."""
    budget = max(REFINE_MIN_S, REFINE_FACTOR * spent)
    return budget if left is None else min(budget, left)


def solve_refined(problem: ParallelProblem, cls, granularity: str, finer, solve_one,
                  time_limit: float | None):
    """Solve ``problem`` (``solve_one(problem, time_limit) -> Solution``); where the default chose
    layer nodes (``finer`` builds the operator-granularity problem) also solve the operators as nodes,
    within :data:`REFINE_MIN_S` / :data:`REFINE_FACTOR` and the time left, and keep the better plan:
    layer nodes are a choice that makes the solve quick, never a loss (a layer node cannot be split
    between stages, nor its operators' variants chosen one by one). Returns ``(problem, cls,
    granularity, solution)`` of the plan kept; its message says what the refinement found."""
    import dataclasses
    import time

    t0 = time.perf_counter()
    sol = solve_one(problem, time_limit)
    if finer is None:
        return problem, cls, granularity, sol
    compiled = [(sol.stats or {}).get("compile_s", 0.0)]  # a cold kernel cache: not solve time
    spent = time.perf_counter() - t0 - compiled[0]
    budget = refine_budget(spent, None if time_limit is None else time_limit - spent)

    def noted(s, note):  # the time of both solves, and of their compiling
        stats = {**(s.stats or {}), "compile_s": sum(compiled)} if sum(compiled) else s.stats
        return dataclasses.replace(s, message=f"{s.message}; {note}" if s.message else note,
                                   time=time.perf_counter() - t0 - sum(compiled), stats=stats)

    if budget < 0.5:
        return problem, cls, granularity, noted(sol, "operator granularity not tried: no time left")
    try:
        fine, fine_cls = finer()
        fsol = solve_one(fine, budget)
        compiled.append((fsol.stats or {}).get("compile_s", 0.0))
    except KeyboardInterrupt:
        if sol.plan is None:
            raise
        return problem, cls, granularity, noted(sol, "operator granularity interrupted: the layer plan")
    except PlacementError as e:  # the refinement is a second chance, not a requirement
        if sol.plan is None:
            raise
        return problem, cls, granularity, noted(sol, f"operator granularity not solved ({e})")
    if fsol.plan is not None and (sol.plan is None or fsol.objective < sol.objective):
        what = "no layer plan" if sol.plan is None else \
            f"{100 * (1 - fsol.objective / sol.objective):.3g}% faster than the layer plan"
        return fine, fine_cls, "op", noted(fsol, f"operator granularity: {what}")
    if sol.plan is None and fsol.status is not sol.status:
        # nothing at layer granularity proves nothing about the operators'
        return fine, fine_cls, "op", noted(fsol, f"layer granularity: {sol.status.value}")
    same = "as fast" if fsol.plan is not None and fsol.objective == sol.objective else "no faster"
    return problem, cls, granularity, noted(sol, f"operator granularity {fsol.status.value}, {same}")


def problem_for_result(data: dict, workload: str, *, schedule: str | None = None,
                       microbatches: int | None = None, source: str | None = None) -> ParallelProblem:
    """The problem a replicated result of an ONNX model was solved on, rebuilt from the settings it
    records (devices, costs, batch size, training, granularity, schedule, micro-batches, replica limit,
    and each kind's memory, which ``--device-memory`` may have set); ``schedule`` and ``microbatches``
    override the result's."""
    import dataclasses
    from types import SimpleNamespace

    from .stages import read_stage_result

    data = read_stage_result(data)
    for key in ("devices", "granularity"):
        if not data.get(key):
            raise InputError(f"the result does not record its {key!r}; was it written by placement place on "
                             f"an ONNX model?", source=source)
    mr = data.get("max_replicas")
    args = SimpleNamespace(workload=workload, max_devices=None, bandwidth=None, device_memory=None,
                           microbatches=microbatches or data.get("microbatches"),
                           max_replicas=mr, granularity=data["granularity"],
                           schedule=schedule or data.get("schedule") or "1f1b")
    saved = {**{k: v for k, v in data.items() if k != "schedule"}, "_path": source}
    problem, _, _ = load_problem(args, {}, saved=saved)
    memory = {k.get("name"): k.get("memory") for k in data.get("kinds") or () if isinstance(k, dict)}
    kinds = tuple(dataclasses.replace(k, memory=memory[k.name]) if k.name in memory else k
                  for k in problem.kinds)
    return problem.with_options(kinds=kinds)


def _with_operators(data: dict, problem: ParallelProblem, graph_cls, settings: dict) -> dict:
    graph, cls = graph_cls
    index = {str(x): i for i, x in enumerate(problem.graph.ids)}
    members: dict[int, list[str]] = {}
    for u, c in enumerate(cls.tolist()):
        members.setdefault(c, []).append(graph.names[u])
    for st in data["stages"]:
        st["operators"] = [op for x in st["nodes"] for op in members.get(index[str(x)], [])]
    data["problem"].update(settings)
    return data


def _result(problem: ParallelProblem, r, graph_cls, settings: dict, workload) -> tuple[dict, object]:
    """The result document of the answer ``r`` (a stage plan) and its MFU."""
    from .stages import result_dict

    data = result_dict(problem, r.evaluation, status=str(r.status), solver=r.solver, time=r.time,
                       message=r.message, workload=workload, bound=r.bound,
                       compile_s=(r.stats or {}).get("compile_s"))
    data = _with_operators(data, problem, graph_cls, settings)
    mfu = _utilisation(problem, r.evaluation, graph_cls, settings)
    data["compute_utilisation"] = None if mfu is None else mfu.as_dict()
    return data, mfu


def stage_result(p) -> dict:
    """The result document of a stage plan (a :class:`placement.api.Placement` of the stage model, as
    :func:`placement.place_model` gives), as ``placement place --out`` writes it."""
    r = p.solution
    if r.plan is None:
        raise InputError(f"there is no placement to apply (status {r.status.value!r}: "
                         f"{r.message or 'no plan'})")
    data, _ = _result(p.problem, r, (p.graph, p.node_of), dict(p.settings), p.graph.source)
    return data


def place(args, frontend: dict) -> int:
    """``placement place`` of an ONNX model in the replicated model: the exact replicated DP (or another
    of :data:`solvers.registry.STAGE_SOLVERS`)."""
    import copy

    from .stages import _emit, no_plan, plan_summary, solve_args

    if serving(args):
        # one batch size here; the command line sends a sweep or a latency target to
        # placement.serving_cli.run_place_stages, never dropped
        raise InputError("--batch-size auto/LIST and --latency-slo: placement.serving_cli.run_place_stages "
                         "takes them on the stage model")
    problem, (graph, cls), settings, finer = _load(args, frontend)

    def solve_one(pr, time_limit):
        a = copy.copy(args)
        a.time_limit = time_limit
        return solve_args(pr, a)

    problem, cls, settings["granularity"], r = solve_refined(problem, cls, settings["granularity"], finer,
                                                             solve_one, args.time_limit)
    graph_cls = (graph, cls)
    if r.plan is None:
        return no_plan(args, r)
    data, mfu = _result(problem, r, graph_cls, settings, args.workload)
    summary = plan_summary(problem, r.evaluation, "ms", result=r,
                           extra=f"{settings['granularity']} granularity")
    summary += _mfu_line(problem, r.evaluation, mfu)
    _emit(args, data, problem, r.evaluation, summary, "ms")
    return 0


def _utilisation(problem: ParallelProblem, ev, graph_cls, settings: dict):
    """MFU of the plan (:func:`graphs.mfu.stage_utilisation`): the operators of each stage, one run of
    the model's batch every ``batch`` samples' time, since the graph's FLOPs and times are per run."""
    import numpy as np

    from graphs.mfu import stage_utilisation
    from graphs.model import Cluster

    graph, cls = graph_cls
    if not ev.stages or not (0 < ev.objective < float("inf")):
        return None
    cluster = Cluster(problem.kinds)
    stages = [(s.stage.kind, np.isin(cls, list(s.stage.nodes)), s.devices) for s in ev.stages]
    period_ms = ev.objective * 1e3 * int(settings.get("batch_size") or 1)
    return stage_utilisation(graph, cluster, stages, period_ms)


def _mfu_line(problem: ParallelProblem, ev, mfu) -> str:
    """The MFU line under the stage table: the plan's total and each stage's (its devices alike)."""
    if mfu is None:
        return ""
    from graphs.mfu import pct as _pct

    from .stages import stage_device_numbers, stage_devices

    plan = [s.stage for s in ev.stages]
    parts = [f"{name} {_pct(mfu.devices[numbers[0]].mfu)}"  # a stage's devices have one MFU
             for name, numbers in zip(stage_devices(problem, plan), stage_device_numbers(problem, plan))]
    return (f"\ncompute utilisation (MFU: achieved / peak FLOP/s, not busy time): total {_pct(mfu.total)} "
            f"({mfu.achieved / 1e12:.4g} of {mfu.peak_flops / 1e12:.4g} TFLOP/s); " + ", ".join(parts))


def evaluate(args, frontend: dict) -> int:
    """``placement evaluate model.onnx plan.json`` of a replicated plan: the plan's own settings
    (devices, granularity, schedule, micro-batches) rebuild the problem unless the command line
    overrides them."""
    from .stages import _emit, plan_from_dict, plan_summary, read_stage_result, result_dict

    data = read_json(args.split)
    saved = {**read_stage_result(data), "_path": args.split}
    problem, graph_cls, settings = load_problem(args, frontend, saved=saved)
    plan = plan_from_dict(problem, data, source=args.split)
    ev = evaluate_plan(problem, plan)
    out = result_dict(problem, ev, status="feasible" if ev.valid else "invalid", solver="given plan",
                      message=f"plan from {args.split}", workload=args.workload)
    out = _with_operators(out, problem, graph_cls, settings)
    summary = plan_summary(problem, ev, "ms", extra=f"{settings['granularity']} granularity")
    mfu = _utilisation(problem, ev, graph_cls, settings) if ev.valid else None
    out["compute_utilisation"] = None if mfu is None else mfu.as_dict()
    summary += _mfu_line(problem, ev, mfu)
    _emit(args, out, problem, ev, summary, "ms")
    return 0 if ev.valid else 1
