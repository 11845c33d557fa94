"""Replicated plans on the command line: ``placement place`` and ``placement evaluate`` on a Piper-format
workload (detected from the file), with the schedule, micro-batches and replication options.

    placement place bert32a100.json [--schedule 1f1b|gpipe|pipedream|2bw] [--microbatches N]
                    [--max-replicas D] [--max-devices K] [--device-memory BYTES] [--bandwidth B/S]
    placement evaluate bert32a100.json plan.json

The result JSON lists ``stages`` in pipeline order, each with ``nodes`` (the file's node ids),
``dataParallelDegree``, ``tensorParallelDegree``, ``TMPCids`` (node id -> variant id), ``kind``,
``devices``, ``time_per_sample``, ``memory`` and ``in_flight``; the top-level ``objective`` is the time
per sample (the largest stage's).
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter

from graphs.errors import InfeasibleError, InputError
from graphs.jsonio import read_json
from graphs.parallel import SCHEDULES, ParallelProblem, PlanEvaluation, Stage, evaluate_plan

__all__ = ["add_options", "refuse_options", "handles", "place", "evaluate", "result_dict", "plan_from_dict",
           "format_plan", "fmt_time", "TIME_UNITS", "load_problem", "no_plan", "solve_args",
           "refuse_serving"]


def add_options(p) -> None:
    """The replicated-model options of ``place`` and ``evaluate``."""
    g = p.add_argument_group("replicated stages (Piper-format workloads; ONNX training models, or ONNX "
                             "models with --max-replicas above 1)")
    g.add_argument("--schedule", default=None, choices=SCHEDULES,
                   help="pipeline schedule: sets micro-batches in flight and weight versions (default 1f1b; "
                        "a result being evaluated: its own)")
    g.add_argument("--microbatches", type=int, default=None, metavar="N",
                   help="micro-batches per batch (default: a Piper file's mbsInBatch; an ONNX model: the "
                        "smallest power of two >= the devices); d must divide it")
    g.add_argument("--max-replicas", type=int, default=None, metavar="D",
                   help="largest data-parallel degree per stage (1: pipeline only, today's placement; "
                        "an ONNX inference model takes the replicated model when D > 1)")
    g.add_argument("--max-devices", type=int, default=None, metavar="K",
                   help="Piper files: devices (default: maxDevices)")
    g.add_argument("--device-memory", type=float, default=None, metavar="BYTES",
                   help="memory per device (default: a Piper file's maxMemoryPerDevice, an ONNX model's "
                        "device kinds')")
    g.add_argument("--bandwidth", type=float, default=None, metavar="B/S",
                   help="Piper files: bytes per second per device (default: the file's bandwidth)")


def refuse_options(args) -> None:
    """Today's (pipeline-only) placement takes none of the replicated model's device options: one
    :class:`InputError` naming the option instead of ignoring it."""
    for name in ("max_devices", "device_memory", "bandwidth"):
        if getattr(args, name, None) is not None:
            raise InputError(f"--{name.replace('_', '-')} applies to replicated plans only (Piper-format "
                             f"workloads, ONNX training models, --max-replicas above 1); set a device "
                             f"kind's memory in a device file (--device-file) for today's placement")


def handles(path: str, args=None) -> bool:
    """Is ``path`` a Piper-format workload (read only when it is a .json file)? (ONNX models take the
    replicated model through :mod:`placement.onnx_replicated`.)"""
    from graphs.piper import is_piper

    if not str(path).lower().endswith(".json") or not os.path.isfile(path):
        return False
    try:
        return is_piper(read_json(path))
    except InputError:
        return False


def load_problem(args) -> ParallelProblem:
    from graphs.piper import parse_piper

    for name in ("microbatches", "max_replicas", "max_devices"):
        v = getattr(args, name, None)
        if v is not None and v < (0 if name == "max_devices" else 1):
            raise InputError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")
    return parse_piper(read_json(args.workload), source=args.workload, devices=args.max_devices,
                       memory=args.device_memory, microbatches=args.microbatches, bandwidth=args.bandwidth,
                       schedule=args.schedule or "1f1b", max_replicas=args.max_replicas)


def _status_words(r) -> str:
    """The status with what was proven: ``optimal``, or ``feasible, bound B, gap G``."""
    if r.bound is None or r.gap is None or str(r.status) == "optimal":
        return str(r.status)
    return f"{r.status}, bound {r.bound:.9g}, gap {r.gap:.3%}"


def result_dict(problem: ParallelProblem, ev: PlanEvaluation, *, status: str, solver: str,
                time: float | None = None, message: str = "", workload: str | None = None,
                bound: float | None = None) -> dict:
    g = problem.graph
    stages = []
    for s in ev.stages:
        st = s.stage
        stages.append({
            "nodes": [g.ids[u] for u in st.nodes],
            "dataParallelDegree": st.d,
            "tensorParallelDegree": st.t,
            "TMPCids": {str(g.ids[u]): g.variants[v].name for u, v in zip(st.nodes, st.variants)},
            "kind": problem.kinds[st.kind].name,
            "devices": s.devices,
            "time_per_sample": s.time_per_sample,
            "memory": {"weights": s.weights, "stash": s.stash, "peak": s.memory,
                       "capacity": None if math.isinf(s.capacity) else s.capacity},
            "in_flight": s.in_flight,
        })
    return {"format": "placement-replicated", "version": 1, "workload": workload, "solver": solver,
            "status": status, "message": message, "time": time, "bound": bound, "schedule": problem.schedule,
            "microbatches": problem.microbatches, "time_unit": "s", "objective": ev.objective,
            "valid": ev.valid,
            "problems": list(ev.problems), "stages": stages,
            # the cluster the plan is for, so that show can rebuild the problem
            "max_replicas": problem.max_replicas,
            "kinds": [{"name": k.name, "count": k.count, "memory": k.memory,
                       "bandwidth": None if math.isinf(k.bandwidth) else k.bandwidth,
                       "server_size": k.server_size, "intra_bandwidth": k.intra_bandwidth,
                       "inter_bandwidth": k.inter_bandwidth} for k in problem.kinds]}


def plan_from_dict(problem: ParallelProblem, data, *, source: str | None = None) -> list[Stage]:
    """The plan in a result JSON's ``stages``; :class:`InputError` names the stage and field at fault."""
    g = problem.graph
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise InputError("a plan needs a 'stages' list", source=source)
    index = {str(x): i for i, x in enumerate(g.ids)}
    kinds = {k.name: i for i, k in enumerate(problem.kinds)}
    plan = []
    for i, s in enumerate(data["stages"]):
        where = f"stages[{i}]"
        if not isinstance(s, dict):
            raise InputError(f"{where} must be an object", source=source)
        for f in ("nodes", "dataParallelDegree", "tensorParallelDegree", "TMPCids"):
            if f not in s:
                raise InputError(f"{where}: missing field {f!r}", source=source)
        d, t = s["dataParallelDegree"], s["tensorParallelDegree"]
        for name, v in (("dataParallelDegree", d), ("tensorParallelDegree", t)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{where}: {name} must be a positive integer, got {v!r}", source=source)
        if problem.microbatches % d:
            raise InputError(f"{where}: dataParallelDegree {d} does not divide the {problem.microbatches} "
                             f"micro-batches per batch (each replica takes an equal share)", source=source)
        kname = s.get("kind", problem.kinds[0].name)
        if kname not in kinds:
            raise InputError(f"{where}: unknown device kind {kname!r}", source=source)
        k = kinds[kname]
        nodes, variants = [], []
        tm = s["TMPCids"]
        if not isinstance(tm, dict) or not isinstance(s["nodes"], list):
            raise InputError(f"{where}: 'nodes' must be a list and 'TMPCids' an object", source=source)
        for x in s["nodes"]:
            if str(x) not in index:
                raise InputError(f"{where}: unknown node {x!r}", source=source)
            u = index[str(x)]
            vid = tm.get(str(x))
            if vid is None:
                raise InputError(f"{where}: TMPCids has no variant for node {x}", source=source)
            opts = [v for v in g.options.get((u, k, t), ()) if g.variants[v].name == vid]
            if not opts:
                raise InputError(f"{where}: node {x} has no variant {vid!r} for tensor-parallel degree {t}",
                                 source=source)
            nodes.append(u)
            variants.append(opts[0])
        plan.append(Stage(tuple(nodes), k, d, t, tuple(variants)))
    return plan


#: how printed times scale from the model's seconds per sample: a Piper file keeps its own unit (seconds:
#: its model adds bytes / (bytes/s) to ``timePerSample``), an ONNX model prints milliseconds, as its
#: pipeline-only table does. The result JSON always holds seconds (its ``time_unit``).
TIME_UNITS = {"s": 1.0, "ms": 1e3}


def fmt_time(x: float, unit: str = "s", digits: int = 6) -> str:
    """Seconds ``x`` in ``unit`` (no unit suffix)."""
    return f"{x * TIME_UNITS[unit]:.{digits}g}"


def format_plan(problem: ParallelProblem, ev: PlanEvaluation, unit: str = "s") -> str:
    """A per-stage table: kind, d, t, devices, variants used, memory per device (binary units) and
    in-flight micro-batches, time per sample in ``unit``."""
    from .report import human_bytes

    g = problem.graph
    head = ["stage", "kind", "d", "t", "devices", "nodes", "variants", "weights/device", "stash/device",
            "peak/device", "y", f"time/sample ({unit})"]
    rows = []
    for i, s in enumerate(ev.stages):
        st = s.stage
        used = Counter(g.variants[v].name for v in st.variants)
        rows.append([str(i), problem.kinds[st.kind].name, str(st.d), str(st.t), str(s.devices),
                     str(len(st.nodes)), ", ".join(f"{n} {c}" for n, c in sorted(used.items())),
                     human_bytes(s.weights), human_bytes(s.stash), human_bytes(s.memory), str(s.in_flight),
                     fmt_time(s.time_per_sample, unit)])
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def no_plan(args, r) -> int:
    """The solver returned no plan: a limit stopped it (one ``error:`` line, exit 1, nothing proven) or
    no plan fits (:class:`InfeasibleError`, which the command line prints the same way)."""
    from solvers.base import Status

    if r.status is Status.STOPPED:
        print(f"error: {args.workload}: no plan found (status stopped, nothing proven): {r.message}; a "
              f"larger --time-limit may find one", file=sys.stderr)
        return 1
    if r.status is not Status.INFEASIBLE:  # a baseline found none in its family: nothing proven
        print(f"error: {args.workload}: no plan found (status {r.status}, nothing proven): {r.message}; "
              f"an exact solver (auto, dp, ip) decides whether one exists", file=sys.stderr)
        return 1
    raise InfeasibleError(f"{args.workload}: {r.message}")


def _emit(args, data: dict, problem: ParallelProblem, ev: PlanEvaluation, summary: str,
          unit: str = "s") -> None:
    from .export import print_json, write_json

    if getattr(args, "out", None):
        write_json(args.out, data)
    if getattr(args, "json", False):
        print_json(data)
        return
    sys.stdout.write(format_plan(problem, ev, unit) + "\n\n" + summary + "\n")
    if getattr(args, "out", None):
        sys.stdout.write(f"result written to {args.out}\n")


def refuse_serving(args) -> None:
    """A latency target or a batch-size sweep is solved on the one-device-per-stage model only so far:
    with replicas it is one error naming the option, never a target silently dropped."""
    why = ("not supported on the stage model yet (Piper files, training graphs, --max-replicas above 1); "
           "an ONNX inference model with --max-replicas 1 takes it")
    if getattr(args, "latency_slo", None) is not None:
        raise InputError(f"--latency-slo: {why}")
    if isinstance(getattr(args, "batch_size", None), str):
        raise InputError(f"--batch-size {args.batch_size}: a sweep of batch sizes {why}; or give one "
                         f"batch size")


def solve_args(problem: ParallelProblem, args):
    """The answer of ``--solver`` (default ``auto``) on the stage-model ``problem``, through the one
    checked entry point (:func:`solvers.registry.solve`): every option is honoured or refused there."""
    from solvers.base import SolveOptions
    from solvers.registry import solve

    if getattr(args, "split", None) is not None or getattr(args, "memory_limit", None) is not None:
        raise InputError("--split and --memory-limit do not apply to stage-model plans (replicas)")
    options = SolveOptions(objective=getattr(args, "objective", None) or "max-load",
                           time_limit=args.time_limit, gap=getattr(args, "gap", 1e-4),
                           threads=getattr(args, "threads", None), seed=getattr(args, "seed", 0),
                           backend=getattr(args, "backend", "highs"),
                           subgraphs_per_device=getattr(args, "subgraphs_per_device", 1))
    return solve(problem, solver=args.solver or "auto", options=options)


def place(args) -> int:
    """``placement place`` on a Piper workload: the exact replicated DP (or a baseline)."""
    refuse_serving(args)
    problem = load_problem(args)
    r = solve_args(problem, args)
    if r.plan is None:
        return no_plan(args, r)
    data = result_dict(problem, r.evaluation, status=str(r.status), solver=r.solver, time=r.time,
                       message=r.message, workload=args.workload, bound=r.bound)
    devices = sum(s.devices for s in r.evaluation.stages)
    obj = fmt_time(r.objective, "s", 9)
    summary = (f"objective {obj} s per sample ({_status_words(r)}), {len(r.plan)} stages on {devices} "
               f"devices, schedule {problem.schedule}, {problem.microbatches} micro-batches, "
               f"solved in {r.time:.3g} s")
    _emit(args, data, problem, r.evaluation, summary)
    return 0


def _with_recorded(args, data):
    """``args`` with the settings a result file records filled in where the command line gives none."""
    import copy

    if not isinstance(data, dict) or data.get("format") != "placement-replicated":
        return args
    args = copy.copy(args)
    kinds = [k for k in data.get("kinds") or () if isinstance(k, dict)]
    recorded = {"max_devices": kinds[0].get("count") if len(kinds) == 1 else None,
                "device_memory": kinds[0].get("memory") if len(kinds) == 1 else None,
                "bandwidth": kinds[0].get("bandwidth") if len(kinds) == 1 else None,
                "microbatches": data.get("microbatches"), "max_replicas": data.get("max_replicas")}
    for name, value in recorded.items():
        if getattr(args, name, None) is None and value is not None:
            setattr(args, name, value)
    if getattr(args, "schedule", None) is None and data.get("schedule") in SCHEDULES:
        args.schedule = data["schedule"]
    return args


def evaluate(args) -> int:
    """``placement evaluate`` of a replicated plan (a result JSON's ``stages``) on a Piper workload: the
    settings the plan records (devices, memory, bandwidth, schedule, micro-batches, replica limit)
    rebuild the problem it was solved on, unless the command line gives them again."""
    data = read_json(args.split)
    args = _with_recorded(args, data)
    problem = load_problem(args)
    plan = plan_from_dict(problem, data, source=args.split)
    ev = evaluate_plan(problem, plan)
    data = result_dict(problem, ev, status="feasible" if ev.valid else "invalid", solver="given plan",
                       message=f"plan from {args.split}", workload=args.workload)
    obj = fmt_time(ev.objective, "s", 9)
    summary = f"objective {obj} s per sample" + ("" if ev.valid else " (INVALID)")
    if ev.problems:
        summary += "\n" + "\n".join(f"problem: {p}" for p in ev.problems)
    _emit(args, data, problem, ev, summary)
    return 0 if ev.valid else 1
