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
import sys
from collections import Counter

from graphs.errors import InfeasibleError, InputError
from graphs.jsonio import read_json
from graphs.parallel import SCHEDULES, ParallelProblem, PlanEvaluation, Stage, evaluate_plan

__all__ = ["add_options", "place", "evaluate", "result_dict", "plan_from_dict",
           "format_plan", "fmt_time", "TIME_UNITS", "load_problem", "no_plan", "solve_args",
           "refuse_serving", "is_stage_result", "read_stage_result", "plan_summary", "stage_devices",
           "stage_device_numbers",
           "RESULT_VERSION"]


def add_options(p) -> None:
    """The replicated-model options of ``place`` and ``evaluate``."""
    g = p.add_argument_group("stage plans: replicas, tensor parallelism, schedules (Piper-format workloads "
                             "and ONNX models; --max-replicas 1 gives one device per stage)")
    g.add_argument("--schedule", default=None, choices=SCHEDULES,
                   help="pipeline schedule: sets micro-batches in flight and weight versions (default 1f1b; "
                        "a result being evaluated: its own)")
    g.add_argument("--microbatches", type=int, default=None, metavar="N",
                   help="micro-batches per batch (default: a Piper file's mbsInBatch; an ONNX model: the "
                        "smallest power of two >= the devices); d must divide it")
    g.add_argument("--max-replicas", type=int, default=None, metavar="D",
                   help="largest data-parallel degree per stage (default: as many as the devices and "
                        "micro-batches allow; 1: one device per stage and its per-device table; an ONNX "
                        "model's --latency-slo takes the stage model only with D > 1)")
    g.add_argument("--max-devices", type=int, default=None, metavar="K",
                   help="Piper files: devices (default: maxDevices)")
    g.add_argument("--device-memory", type=float, default=None, metavar="BYTES",
                   help="memory per device (default: a Piper file's maxMemoryPerDevice, an ONNX model's "
                        "device kinds')")
    g.add_argument("--bandwidth", type=float, default=None, metavar="B/S",
                   help="Piper files: bytes per second per device (default: the file's bandwidth)")


def load_problem(args) -> ParallelProblem:
    from graphs.piper import parse_piper

    for name in ("microbatches", "max_replicas", "max_devices"):
        v = getattr(args, name, None)
        if v is not None and v < (0 if name == "max_devices" else 1):
            raise InputError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")
    return parse_piper(read_json(args.workload), source=args.workload, devices=args.max_devices,
                       memory=args.device_memory, microbatches=args.microbatches, bandwidth=args.bandwidth,
                       schedule=args.schedule or "1f1b", max_replicas=args.max_replicas)


#: the result file's schema version of a stage plan; version 1 was ``"format": "placement-replicated"``
#: with the problem's settings at the top level, and is still read (:func:`read_stage_result`)
RESULT_VERSION = 2


def result_dict(problem: ParallelProblem, ev: PlanEvaluation, *, status: str, solver: str,
                time: float | None = None, message: str = "", workload: str | None = None,
                bound: float | None = None, settings: dict | None = None,
                compile_s: float | None = None) -> dict:
    """The result file of a stage plan (``"schema": "placement-result", "version": 2``): times in
    seconds per sample (``time_unit``; ``compile_s``, when given, the seconds compiling the kernels took,
    not in ``solve_time_s``), the ``problem`` section that rebuilds the problem without flags (schedule,
    micro-batches, replica limit, device kinds, and ``settings``: an ONNX model's front-end settings),
    ``stages`` in pipeline order with the devices each uses, and ``devices``, one row per
    device derived from the stages (numbered kind by kind, as the stage table prints them)."""
    g = problem.graph
    numbers = stage_device_numbers(problem, [s.stage for s in ev.stages])
    stages, devices = [], []
    for i, s in enumerate(ev.stages):
        st = s.stage
        kname = problem.kinds[st.kind].name
        first = numbers[i][0] - sum(k.count for k in problem.kinds[:st.kind])
        ids = [f"{kname}:{first + j}" for j in range(s.devices)]
        stages.append({
            "nodes": [g.ids[u] for u in st.nodes],
            "dataParallelDegree": st.d,
            "tensorParallelDegree": st.t,
            "TMPCids": {str(g.ids[u]): g.variants[v].name for u, v in zip(st.nodes, st.variants)},
            "kind": kname,
            "devices": ids,
            "time_per_sample": s.time_per_sample,
            "compute": s.compute, "comm": s.comm, "resync": s.resync,
            "memory": {"weights": s.weights, "stash": s.stash, "peak": s.memory,
                       "capacity": None if math.isinf(s.capacity) else s.capacity},
            "in_flight": s.in_flight,
        })
        for j, name in enumerate(ids):  # replica r holds devices r*t .. r*t+t-1 (its tensor-parallel group)
            devices.append({"device": numbers[i][j], "name": name, "kind": kname, "stage": i,
                            "replica": j // st.t, "tp_rank": j % st.t})
    value = ev.objective if math.isfinite(ev.objective) else None
    gap = None
    if bound is not None and value and math.isfinite(bound):
        gap = max(0.0, (value - bound) / value)
    kinds = [{"name": k.name, "count": k.count, "memory": k.memory,
              "bandwidth": None if math.isinf(k.bandwidth) else k.bandwidth,
              "server_size": k.server_size, "intra_bandwidth": k.intra_bandwidth,
              "inter_bandwidth": k.inter_bandwidth} for k in problem.kinds]
    return {"schema": "placement-result", "version": RESULT_VERSION, "model": "stages",
            "workload": workload, "solver": solver, "status": status, "message": message,
            "solve_time_s": time, "time_unit": "s", "objective_name": "max-load", "objective": value,
            "max_load": value, "bound": bound, "gap": gap, "valid": ev.valid, "problems": list(ev.problems),
            # the evaluator reports stages that are not nested ideals as a problem
            "contiguous": bool(ev.stages) and not any("nested ideals" in x for x in ev.problems),
            "problem": {"schedule": problem.schedule, "microbatches": problem.microbatches,
                        "max_replicas": problem.max_replicas, "kinds": kinds, **(settings or {})},
            "stages": stages, "devices": devices, **({"compile_s": compile_s} if compile_s else {})}


def is_stage_result(data) -> bool:
    """Is ``data`` (a parsed result file) a stage plan: version 2 with ``"model": "stages"``, or a
    version-1 ``"format": "placement-replicated"`` file?"""
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        return False
    return data.get("format") == "placement-replicated" or (
        data.get("schema") == "placement-result" and data.get("model") == "stages")


def read_stage_result(data: dict) -> dict:
    """A stage plan's result file as one flat mapping, whichever version wrote it: the problem's
    settings at the top level (version 2 keeps them under ``problem``), ``stages`` as written, times in
    seconds per sample."""
    if data.get("format") == "placement-replicated":  # version 1: already flat, seconds
        return data
    flat = {k: v for k, v in data.items() if k != "problem"}
    flat.update(data.get("problem") or {})
    if data.get("time_unit") not in (None, "s"):
        raise InputError(f"time_unit {data.get('time_unit')!r}: a stage plan's times are seconds ('s')")
    return flat


def plan_from_dict(problem: ParallelProblem, data, *, source: str | None = None) -> list[Stage]:
    """The plan in a result JSON's ``stages``; :class:`InputError` names the stage and field at fault."""
    g = problem.graph
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise InputError("a plan needs a 'stages' list", source=source)
    data = read_stage_result(data)
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


def stage_device_numbers(problem: ParallelProblem, plan) -> list[range]:
    """Each stage's devices as cluster device numbers (numbered kind by kind, as
    :meth:`graphs.model.Cluster.devices` does), the kinds' devices taken in stage order."""
    start = [sum(k.count for k in problem.kinds[:i]) for i in range(len(problem.kinds))]
    nxt = [0] * len(problem.kinds)
    out = []
    for st in plan:
        first = start[st.kind] + nxt[st.kind]
        nxt[st.kind] += st.t * st.d
        out.append(range(first, first + st.t * st.d))
    return out


def stage_devices(problem: ParallelProblem, plan) -> list[str]:
    """Each stage's devices by name: ``a100:0-3`` for a stage on the first four A100s (``t * d``
    devices; :func:`stage_device_numbers`)."""
    out = []
    for st, numbers in zip(plan, stage_device_numbers(problem, plan)):
        name = problem.kinds[st.kind].name
        first = numbers[0] - sum(k.count for k in problem.kinds[:st.kind])
        n = len(numbers)
        out.append(f"{name}:{first}" if n == 1 else f"{name}:{first}-{first + n - 1}")
    return out


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


def _node_range(problem: ParallelProblem, nodes) -> str:
    names = problem.graph.names
    if not nodes:
        return ""
    first, last = names[nodes[0]], names[nodes[-1]]
    return first if len(nodes) == 1 else f"{first} .. {last}"


def format_plan(problem: ParallelProblem, ev: PlanEvaluation, unit: str = "s") -> str:
    """A per-stage table: its devices (``t * d`` of one kind), the degrees, its nodes (count and first ..
    last), the variants used, compute, communication and replica resync per sample, the time per sample
    (in ``unit``), peak memory per device against the device's, and the micro-batches in flight ``y``."""
    from .report import human_bytes

    head = ["stage", "devices", "d", "t", "#nodes", "variants", f"compute ({unit})", f"comm ({unit})",
            f"resync ({unit})", f"time/sample ({unit})", "memory / device", "y", "nodes (first .. last)"]
    rows = []
    names = stage_devices(problem, [s.stage for s in ev.stages])
    g = problem.graph
    for i, s in enumerate(ev.stages):
        st = s.stage
        used = Counter(g.variants[v].name for v in st.variants)
        rows.append([str(i), names[i], str(st.d), str(st.t), str(len(st.nodes)),
                     ", ".join(f"{n} {c}" for n, c in sorted(used.items())),
                     fmt_time(s.compute, unit), fmt_time(s.comm, unit), fmt_time(s.resync, unit),
                     fmt_time(s.time_per_sample, unit),
                     f"{human_bytes(s.memory)} / {human_bytes(_finite(s.capacity))}",
                     str(s.in_flight), _node_range(problem, st.nodes)])
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def plan_summary(problem: ParallelProblem, ev: PlanEvaluation, unit: str, *, result=None,
                 extra: str = "", sample: str = "sample") -> str:
    """The lines under the stage table, worded as the one-device-per-stage summary is: max-load per
    sample (with samples per second), status, solver, bound, gap and time of ``result`` (a
    :class:`~solvers.base.Solution`; ``None``: a given plan), then the devices used, the schedule and
    ``extra`` settings, and every broken constraint. ``sample``: what one sample is (an LLM's: a token).
    """
    rate = f" ({1 / ev.objective:,.6g} {sample}s/s)" if 0 < ev.objective < math.inf else ""
    parts = [f"max-load {fmt_time(ev.objective, unit, 9)} {unit} per {sample}{rate}"]
    if result is None:
        parts.append("status " + ("feasible (a given plan)" if ev.valid else "INVALID"))
    else:
        from .report import status_parts

        parts += status_parts(result, lambda b: fmt_time(b, unit, 9))
    used = sum(s.devices for s in ev.stages)
    total = sum(k.count for k in problem.kinds)
    lines = [", ".join(parts),
             f"{len(ev.stages)} stage(s) on {used} of {total} devices; schedule {problem.schedule}, "
             f"{problem.microbatches} micro-batches per batch" + (f", {extra}" if extra else "")]
    lines += [f"  problem: {x}" for x in ev.problems]
    if result is not None and result.message:
        lines.append(result.message)
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
    from . import _interrupt
    from .export import print_json, write_json

    with _interrupt.deferred():  # a Ctrl-C now lets the result be written and shown, then stops
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
    why = ("not supported on the stage model of this workload yet (Piper files, LLM configs, training "
           "graphs); an ONNX inference model takes it (with --max-replicas D > 1 on the stage model)")
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
                       message=r.message, workload=args.workload, bound=r.bound,
                       compile_s=(r.stats or {}).get("compile_s"))
    summary = plan_summary(problem, r.evaluation, "s", result=r)
    _emit(args, data, problem, r.evaluation, summary)
    return 0


def _with_recorded(args, data):
    """``args`` with the settings a result file records filled in where the command line gives none."""
    import copy

    if not is_stage_result(data):
        return args
    data = read_stage_result(data)
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
    summary = plan_summary(problem, ev, "s")
    _emit(args, data, problem, ev, summary)
    return 0 if ev.valid else 1
