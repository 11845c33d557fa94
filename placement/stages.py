"""Stage plans: the stage model (replicas ``d``, tensor parallelism ``t``, a variant per node, memory by
schedule) of a Piper-format workload, an ONNX model or an LLM config, on the command line and for the
serving, cluster and library callers. Every command is load, solve, emit:

* **load**: a reader gives a :class:`StageWorkload`: the problem, the map back to the model's operators
  (an ONNX model), the front-end settings a result records, and, where the default chose layer nodes,
  the operator-granularity problem the solve may refine to. :func:`read_piper` and :func:`read_onnx`
  (:func:`onnx_workload` for a graph already loaded) are the readers; :func:`load` is the command
  line's, and with the settings a result file records it rebuilds the problem that result was solved
  on (:func:`problem_for_result`);
* **solve**: :func:`solve_refined` runs ``--solver`` through the one checked entry point
  (:func:`solvers.registry.solve`, via :func:`solve_args`), and refines layer nodes to operators when
  there is time;
* **emit**: the result file (:func:`workload_result`, :func:`result_dict`: ``"schema":
  "placement-result", "version": 2``), the stage table (:func:`format_plan`) and the summary
  (:func:`plan_summary`).

    placement place bert32a100.json [--schedule 1f1b|gpipe|pipedream|2bw] [--microbatches N]
                    [--max-replicas D] [--max-devices K] [--device-memory BYTES] [--bandwidth B/S]
    placement place model.onnx [--training] --devices a100:8,v100:8 [--granularity layer|op] [...]
    placement evaluate WORKLOAD plan.json

The result JSON lists ``stages`` in pipeline order, each with ``nodes`` (the file's node ids, an ONNX
model's layer keys or operator names), ``dataParallelDegree``, ``tensorParallelDegree``, ``TMPCids``
(node id -> variant id), ``kind``, ``devices``, ``time_per_sample``, ``memory`` and ``in_flight`` (an
ONNX model's stages also their ``operators``); the top-level ``objective`` is the time per sample (the
largest stage's), in seconds (``time_unit``). The table prints a Piper file's times in its own unit
(seconds) and an ONNX model's or an LLM's in milliseconds.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from graphs.errors import InfeasibleError, InputError, PlacementError
from graphs.jsonio import read_json
from graphs.parallel import (
    SCHEDULES,
    ParallelProblem,
    PlanEvaluation,
    Stage,
    evaluate_plan,
    stage_device_numbers,
    stage_devices,
)
from solvers.base import Status, relative_gap

from .inputs import check_counts
from .results import (
    check_stage_devices,
    check_stage_plan_file,
    is_stage_result,
    read_stage_result,
    stage_result_dict,
)

__all__ = ["StageWorkload", "add_options", "load", "read_piper", "read_onnx", "onnx_workload",
           "problem_for_result", "workload_for_result", "solve_refined", "refine_budget", "Refinement",
           "place", "evaluate",
           "workload_result", "stage_result", "plan_from_dict", "format_plan", "fmt_time",
           "TIME_UNITS", "no_plan", "solve_args", "refuse_serving",
           "plan_summary"]


def add_options(p) -> None:
    """The stage-model options of ``place`` and ``evaluate``."""
    g = p.add_argument_group("stage plans: replicas, tensor parallelism, schedules (Piper-format workloads, "
                             "ONNX models and LLM model configs; an ONNX model's --max-replicas 1 gives one "
                             "device per stage)")
    g.add_argument("--schedule", default=None, choices=SCHEDULES,
                   help="pipeline schedule: sets micro-batches in flight and weight versions (default 1f1b; "
                        "a result being evaluated: its own; an LLM model config always decodes under gpipe, "
                        "every micro-batch's KV cache held at once, and takes no --schedule)")
    g.add_argument("--microbatches", type=int, default=None, metavar="N",
                   help="micro-batches per batch (default: a Piper file's mbsInBatch; an ONNX model: the "
                        "smallest power of two >= the devices; an LLM model config: the largest power of "
                        "two dividing --batch-size up to that, with --objective goodput each one tried); d "
                        "must divide it")
    g.add_argument("--max-replicas", type=int, default=None, metavar="D",
                   help="largest data-parallel degree per stage (default: as many as the devices and "
                        "micro-batches allow; 1 on an ONNX model: one device per stage and its per-device "
                        "table; on a Piper file or an LLM model config D caps d only, so with 1 a "
                        "tensor-parallel stage still spans t devices, in the stage table; with an ONNX "
                        "model's --latency-slo the default also tries one device per stage and keeps the "
                        "better, a D above 1 keeps to the stage model)")
    g.add_argument("--max-devices", type=int, default=None, metavar="K",
                   help="Piper files: devices (default: maxDevices)")
    g.add_argument("--device-memory", type=float, default=None, metavar="BYTES",
                   help="memory per device: a Piper file's devices, an ONNX model's accelerators (host "
                        "CPUs keep theirs) (default: the file's maxMemoryPerDevice, the device kinds')")
    g.add_argument("--bandwidth", type=float, default=None, metavar="B/S",
                   help="Piper files: bytes per second per device (default: the file's bandwidth)")
    g.add_argument("--granularity", choices=("layer", "op"), default=None,
                   help="ONNX stage plans: one node per layer or per operator (default: layers where "
                   "the model's names give them, then operators within max(10 s, 3x the layer solve) "
                   "and --time-limit, keeping the faster plan)")


# ------------------------------------------------------------------------------------------ load
@dataclass(frozen=True)
class StageWorkload:
    """A stage problem as a reader gives it. ``unit``: how its times print (``"s"``: a Piper file's own
    unit; ``"ms"``); ``sample``: what one sample is (an LLM's: a token); ``settings``: the front end's
    settings, which a result records in its ``problem`` section and :func:`load` reads back; ``extra``:
    the summary's words for them (formatted with ``settings``). An ONNX model's: ``graph``, its operator
    graph, and ``node_of``, each operator's node in ``problem``; ``finer``: where the default chose
    layer nodes, the builder of the operator-granularity ``(problem, node_of)``."""

    problem: ParallelProblem
    source: str | None = None
    unit: str = "s"
    sample: str = "sample"
    settings: Mapping = field(default_factory=dict)
    extra: str = ""
    graph: object = None
    node_of: np.ndarray | None = None
    finer: Callable[[], tuple[ParallelProblem, np.ndarray]] | None = None

    @property
    def graph_cls(self) -> tuple:
        """``(graph, node_of)``: the operators and the node of each (``(None, None)`` without them)."""
        return self.graph, self.node_of

    def words(self) -> str:
        """The summary's words for the settings (``extra`` formatted)."""
        return self.extra.format(**self.settings)

    @property
    def latency_batch(self) -> int | None:
        """An ONNX model's inference plan: the samples of one run of its batch, whose latency the summary
        gives as one-device-per-stage placements' do; ``None`` for training (a Piper file) and an LLM."""
        if self.graph is None or self.sample != "sample" or self.settings.get("training") is not False:
            return None
        return int(self.settings.get("batch_size") or 1)

    def refined(self) -> StageWorkload:
        """The same workload at operator granularity (:attr:`finer` built)."""
        problem, node_of = self.finer()
        return dataclasses.replace(self, problem=problem, node_of=node_of, finer=None,
                                   settings={**self.settings, "granularity": "op"})


def read_piper(path: str, *, schedule: str | None = None, **overrides) -> StageWorkload:
    """A Piper-format workload (:func:`graphs.piper.parse_piper`): ``schedule`` (default 1f1b), and the
    keywords of ``parse_piper`` that override the file's devices, memory, bandwidths, server size and
    micro-batches, or set the replica limit (``None``: the file's)."""
    from graphs.piper import parse_piper

    problem = parse_piper(read_json(path), source=path, schedule=schedule or "1f1b", **overrides)
    return StageWorkload(problem, source=str(path))


def onnx_workload(og, graph, devices, *, schedule: str | None = None, max_replicas: int | None = None,
                  granularity: str | None = None, microbatches: int | None = None,
                  settings: Mapping | None = None, source: str | None = None,
                  tensor_parallel: bool = True) -> StageWorkload:
    """The stage workload of a loaded ONNX model: ``og`` its :class:`~graphs.onnx_loader.OnnxGraph`,
    ``graph`` its costed operator graph on the :class:`~graphs.devices.DeviceSet` ``devices``
    (:func:`graphs.onnx_variants.stage_problem`: layer nodes where the names give layers, unless
    ``granularity`` says; ``tensor_parallel=False``: no tensor-parallel stages). ``settings``: the front
    end's, recorded in the result."""
    from graphs.onnx_variants import onnx_parallel_problem, stage_problem

    schedule = schedule or "1f1b"
    problem, node_of, gran = stage_problem(og, graph, devices, schedule=schedule, max_replicas=max_replicas,
                                           granularity=granularity, microbatches=microbatches,
                                           tensor_parallel=tensor_parallel)
    finer = None
    if granularity is None and gran == "layer":
        def finer():
            return onnx_parallel_problem(og, graph, devices, microbatches=microbatches, schedule=schedule,
                                         max_replicas=max_replicas, granularity="op",
                                         tensor_parallel=tensor_parallel)
    settings = {**(settings or {}), "granularity": gran}
    b = graph.batch_size  # a micro-batch is one run of the model at its batch size
    extra = "{granularity} granularity" + (f", a micro-batch is one run at batch size {b}" if b > 1 else
                                           ", fixed input shape: a sample is one run of the model"
                                           if graph.meta.get("per_run") else "")
    return StageWorkload(problem, source=source, unit="ms", settings=settings,
                         extra=extra, graph=graph, node_of=node_of, finer=finer)


def read_onnx(path: str, frontend: Mapping | None = None, *, schedule: str | None = None,
              max_replicas: int | None = None, granularity: str | None = None,
              microbatches: int | None = None, device_memory: float | None = None,
              out: str | None = None, model=None) -> StageWorkload:
    """The stage workload of the ONNX model at ``path``. ``frontend``: the front end's options
    (``devices``, ``device_files``, ``costs``, ``batch_size``, ``dims``, ``training``, ``optimizer``;
    missing or ``None``: the default); ``device_memory``: every accelerator kind's memory; ``out``: the
    result file the device files' paths are recorded relative to; ``model``: the model's
    ``onnx.ModelProto`` where the caller has read it already (not read again)."""
    from graphs.costs import recorded_costs
    from graphs.devices import DeviceSet, parse_devices
    from graphs.onnx_workload import DEFAULT_DEVICES, prepare_onnx

    from .results import source_path

    fe = {k: v for k, v in (frontend or {}).items() if v is not None}
    files = fe.pop("device_files", None) or ()
    ds = parse_devices(fe.pop("devices", None) or DEFAULT_DEVICES, files)
    if device_memory is not None:
        if not device_memory > 0:
            raise InputError(f"--device-memory must be positive, got {device_memory}")
        ds = DeviceSet(tuple(s if s.host else dataclasses.replace(s, memory=float(device_memory))
                             for s in ds.specs), ds.counts)
    og, w = prepare_onnx(path, ds, **fe, model=model)
    settings = {"devices": str(ds), "costs": recorded_costs(fe.get("costs"), w.graph.meta),
                "batch_size": og.batch_size,
                "training": bool(w.graph.is_training),
                "optimizer": w.graph.meta.get("training", {}).get("optimizer"),
                "dims": fe.get("dims") or None,
                "device_files": [source_path(f, out) for f in files] or None}
    return onnx_workload(og, w.graph, ds, schedule=schedule, max_replicas=max_replicas,
                         granularity=granularity, microbatches=microbatches, settings=settings,
                         source=str(path))


_ONNX_FLAGS = {"devices": "--devices", "device_files": "--device-file", "costs": "--costs",
               "batch_size": "--batch-size", "dims": "--dim", "training": "--training",
               "optimizer": "--optimizer"}


def load(args, frontend: Mapping | None = None, saved: Mapping | None = None, *, model=None) -> StageWorkload:
    """The stage workload of ``args.workload`` (a Piper-format file, else an ONNX model) with the
    command line's options; ``frontend``: the ONNX front end's (:data:`_ONNX_FLAGS`, which a Piper file
    refuses, naming them). ``saved``: the settings a result file records (:func:`read_stage_result`,
    and ``_path``, the file's path): they rebuild the problem that result was solved on wherever the
    command line gives none (schedule, micro-batches, replica limit, each kind's count, memory and
    bandwidth, and an ONNX model's front-end settings and granularity). ``model``: an ONNX model's
    ``onnx.ModelProto`` where the caller has read it already."""
    saved = saved or {}
    check_counts(args)
    schedule = getattr(args, "schedule", None) or saved.get("schedule")
    microbatches = getattr(args, "microbatches", None) or saved.get("microbatches")
    max_replicas = getattr(args, "max_replicas", None) or saved.get("max_replicas")
    memory = getattr(args, "device_memory", None)
    for name, v in (("--device-memory", memory), ("--bandwidth", getattr(args, "bandwidth", None))):
        if v is not None and not v > 0:  # NaN too; a usage error, not an infeasible problem
            raise InputError(f"{name} must be a positive number, got {v:g}")
    kinds = [k for k in saved.get("kinds") or () if isinstance(k, dict)]
    if not str(args.workload).lower().endswith(".onnx"):  # a Piper-format workload
        flags = [_ONNX_FLAGS[k] for k, v in (frontend or {}).items() if v not in (None, False)]
        if getattr(args, "granularity", None) is not None:
            flags.append("--granularity")
        if flags:
            # the Piper file's own device options, where this command takes them (show does not)
            how = " (set those with --max-devices, --device-memory and --bandwidth)" \
                if hasattr(args, "max_devices") else ""
            raise InputError(f"{', '.join(flags)}: {'applies' if len(flags) == 1 else 'apply'} to ONNX "
                             f"models only; a Piper-format workload gives its nodes' costs, its batch and "
                             f"its devices itself{how}", source=args.workload)
        devices = getattr(args, "max_devices", None)
        if devices is not None and devices < 1:  # named by its flag, not by the file's maxDevices
            raise InputError(f"--max-devices must be a positive integer, got {devices}")
        overrides = {"devices": devices, "memory": memory, "bandwidth": getattr(args, "bandwidth", None)}
        if len(kinds) == 1:  # a Piper file's one kind, as the result records it
            k = kinds[0]
            recorded = {"devices": k.get("count"), "memory": k.get("memory"), "bandwidth": k.get("bandwidth"),
                        "server_size": k.get("server_size"), "intra_bandwidth": k.get("intra_bandwidth"),
                        "inter_bandwidth": k.get("inter_bandwidth")}
            overrides = {**recorded, **{f: v for f, v in overrides.items() if v is not None}}
        return read_piper(args.workload, schedule=schedule, microbatches=microbatches,
                          max_replicas=max_replicas, **overrides)
    for name in ("max_devices", "bandwidth"):
        if getattr(args, name, None) is not None:
            raise InputError(f"--{name.replace('_', '-')} is for Piper-format workloads; name an ONNX "
                             f"model's devices with --devices")
    fe = {k: v for k, v in (frontend or {}).items() if v is not None}
    own_devices = bool(fe.get("devices") or fe.get("device_files"))  # given again: not the recorded ones
    if saved and not own_devices and not saved.get("devices") and not saved.get("device_files"):
        # a result's plan is for its devices: the default set would score it on others
        raise InputError("the result does not record its 'devices'; pass them with --devices",
                         source=saved.get("_path"))
    for k in ("devices", "costs", "batch_size", "optimizer", "training", "dims"):
        if k not in fe and saved.get(k) is not None:
            fe[k] = saved[k]
    if "device_files" not in fe and saved.get("device_files"):
        # stored relative to the result file (as a one-device-per-stage result stores them)
        base = os.path.dirname(os.path.abspath(saved["_path"])) if saved.get("_path") else ""
        fe["device_files"] = [os.path.join(base, f) for f in saved["device_files"]]
    w = read_onnx(args.workload, fe, schedule=schedule, max_replicas=max_replicas,
                  granularity=getattr(args, "granularity", None) or saved.get("granularity"),
                  microbatches=microbatches, device_memory=memory, out=getattr(args, "out", None),
                  model=model)
    recorded = {k.get("name"): k.get("memory") for k in kinds if k.get("memory") is not None}
    if memory is None and recorded and not own_devices:  # each kind's memory as recorded (--device-memory)
        problem = w.problem.with_options(kinds=tuple(
            dataclasses.replace(k, memory=recorded[k.name]) if k.name in recorded else k
            for k in w.problem.kinds))
        w = dataclasses.replace(w, problem=problem)
    return w


def problem_for_result(data: dict, workload: str, *, schedule: str | None = None,
                       microbatches: int | None = None, source: str | None = None,
                       frontend: Mapping | None = None) -> ParallelProblem:
    """The problem the stage-plan result ``data`` was solved on, for its Piper-format workload or ONNX
    model ``workload``, rebuilt from the settings the result records (:func:`load`); ``schedule``,
    ``microbatches`` and the ONNX front-end options ``frontend`` (``None``: not given; a Piper file
    refuses them) override the result's."""
    return workload_for_result(data, workload, schedule=schedule, microbatches=microbatches, source=source,
                               frontend=frontend).problem


def workload_for_result(data: dict, workload: str, *, schedule: str | None = None,
                        microbatches: int | None = None, source: str | None = None,
                        frontend: Mapping | None = None, model=None) -> StageWorkload:
    """:func:`problem_for_result`'s workload, its front-end ``settings`` included (an ONNX model's
    ``batch_size``: the samples in one run of the model, a micro-batch); ``model``: the ONNX model's
    ``onnx.ModelProto`` where the caller has read it already (not read again)."""
    from types import SimpleNamespace

    check_stage_plan_file(data, source)  # each field read below checked first, named by the file's field
    flat = read_stage_result(data, source=source)
    if str(workload).lower().endswith(".onnx"):
        for key in ("devices", "granularity"):
            if not flat.get(key):
                raise InputError(f"the result does not record its {key!r}; was it written by placement "
                                 f"place on an ONNX model?", source=source)
    else:
        from graphs.piper import is_piper

        if not is_piper(read_json(workload)):
            raise InputError("a stage plan is rebuilt from its Piper-format workload or ONNX model",
                             source=workload)
        kinds = flat.get("kinds") or [{}]
        if not isinstance(kinds, list) or len(kinds) != 1 or not isinstance(kinds[0], dict):
            raise InputError("'kinds' must list the one device kind of a Piper workload", source=source)
    args = SimpleNamespace(workload=workload, schedule=schedule, microbatches=microbatches)
    return load(args, frontend or {}, saved={**flat, "_path": source}, model=model)


# ----------------------------------------------------------------------------------------- solve
#: the operator-granularity refinement's time: at least this many seconds, or this many times the
#: layer solve's, within what the time limit leaves
REFINE_MIN_S, REFINE_FACTOR = 10.0, 3.0
#: with less than this left for it the refinement is not tried ("no time left"): building the
#: operator-granularity problem is on no solve's clock, and a solve of the larger problem this short
#: seldom beats the layer plan (a plan and a latency-target search alike)
REFINE_LEAST_S = 0.5
# an operator plan this little faster than the layer plan (relative) is the same plan up to round-off
# (summation order): the layer plan stays, not "2.22e-14% faster"
SAME_REL = 1e-9


def refine_budget(spent: float, left: float | None) -> float:
    """Seconds for the operator-granularity solve after a layer solve that took ``spent``, with ``left``
    seconds of the time limit remaining (``None``: no limit)."""
    budget = max(REFINE_MIN_S, REFINE_FACTOR * spent)
    return budget if left is None else min(budget, left)


@dataclass(frozen=True)
class Refinement:
    """The rule of refining a layer-granularity solve to operators, one for :func:`solve_refined` and
    :func:`placement.serving_stages.best_refined`: the refinement's ``budget`` (:func:`refine_budget`)
    from the layer solve's ``spent`` seconds on its own clock (:func:`solvers.registry.solve` loads and
    compiles kernels before that clock starts; the first load of a process is about 0.5 s, half of a
    1 s limit, and no part of the search the limit bounds) and the ``time_limit``; ``tried``: whether
    that is time enough (:data:`REFINE_LEAST_S`); and :meth:`verdict` on the two plans."""

    spent: float
    time_limit: float | None

    @property
    def budget(self) -> float:
        return refine_budget(self.spent, None if self.time_limit is None else self.time_limit - self.spent)

    @property
    def tried(self) -> bool:
        return self.budget >= REFINE_LEAST_S

    @staticmethod
    def verdict(layer: float | None, fine: float | None) -> tuple[bool, str]:
        """``(faster, what)`` of the operators' plan (time per sample ``fine``) against the layer plan's
        (``layer``; ``None``: no plan): ``faster`` beyond round-off (:data:`SAME_REL`) or where there is
        no layer plan, and ``what`` says so: "no layer plan", "X% faster than the layer plan", "as
        fast" (within round-off), "no faster" or "no plan" (the operators found none)."""
        if fine is not None and (layer is None or fine < layer * (1 - SAME_REL)):
            return True, "no layer plan" if layer is None else \
                f"{100 * (1 - fine / layer):.3g}% faster than the layer plan"
        if fine is None:
            return False, "no plan"
        return False, "as fast" if fine <= layer * (1 + SAME_REL) else "no faster"


def solve_refined(w: StageWorkload, solve_one, time_limit: float | None, *, deadline: float | None = None):
    """Solve ``w.problem`` (``solve_one(problem, time_limit) -> Solution``); where the default chose
    layer nodes (``w.finer``) also solve the operators as nodes, within the time :class:`Refinement`
    gives, and keep the better plan: layer nodes are a choice that makes the solve quick, never a loss
    (a layer node cannot be split between stages, nor its operators' variants chosen one by one).
    ``deadline`` (``time.perf_counter()``'s clock; the command line's, :class:`placement.clock.
    Clock`): the refinement also ends by then, building its problem and loading kernels counted
    (numba compiling them not). Returns ``(workload, solution)`` of the plan kept (the workload at
    operator granularity when that plan is kept); its message says what the refinement found."""
    import time

    t0 = time.perf_counter()
    sol = solve_one(w.problem, time_limit)
    if w.finer is None:
        return w, sol
    # each solve's own clock (solvers.registry.solve: loading and compiling its kernels are not on it)
    # is what the limit bounds
    times = [_solve_time(sol, t0)]
    compiled = [(sol.stats or {}).get("compile_s", 0.0)]
    ref = Refinement(times[0], time_limit)

    def noted(s, note):  # the time of both solves, and of their compiling
        stats = {**(s.stats or {}), "compile_s": sum(compiled)} if sum(compiled) else s.stats
        return dataclasses.replace(s, message=f"{s.message}; {note}" if s.message else note,
                                   time=sum(times), stats=stats)

    if sol.interrupted:  # the layer solve took a Ctrl-C and returned what it had: nothing more runs
        if sol.plan is None:
            raise KeyboardInterrupt
        return w, noted(_over_layers(sol), "operator granularity not tried: interrupted")
    if not ref.tried:
        return w, noted(_over_layers(sol), "operator granularity not tried: no time left")
    budget = ref.budget
    left = None if time_limit is None else time_limit - times[0]  # the user's limit, on the solves' clock
    try:
        t1 = time.perf_counter()
        fine = w.refined()
        if deadline is not None:  # the command's clock: the wall time since the first solve counts
            left = deadline + sum(compiled) - time.perf_counter()
            budget = min(budget, left)
            if budget < REFINE_LEAST_S:
                return w, noted(_over_layers(sol), "operator granularity not tried: no time left")
        fsol = solve_one(fine.problem, budget)
        times.append(_solve_time(fsol, t1))
        compiled.append((fsol.stats or {}).get("compile_s", 0.0))
    except KeyboardInterrupt:
        if sol.plan is None:
            raise
        return w, noted(_over_layers(sol), "operator granularity interrupted: the layer plan")
    except PlacementError as e:  # the refinement is a second chance, not a requirement
        if sol.plan is None:
            raise
        return w, noted(_over_layers(sol), f"operator granularity not solved ({e})")
    given = f"operator granularity (given {budget:.3g} s)"  # its own limit, which a status names
    if fsol.status is not Status.OPTIMAL and (left is None or budget < left - 1e-9):
        # stopped at the refinement's own budget, not at the user's limit: the status says which
        fsol = dataclasses.replace(fsol, stats={**(fsol.stats or {}),
                                                "stopped_by": f"the operator refinement's {budget:.3g} s"})
    faster, what = ref.verdict(None if sol.plan is None else sol.objective,
                               None if fsol.plan is None else fsol.objective)
    if faster:
        return fine, noted(fsol, f"{given}: {what}")
    if sol.plan is None and fsol.status is not sol.status:
        # nothing at layer granularity proves nothing about the operators'
        return fine, noted(fsol, f"layer granularity: {sol.status.value}")
    if fsol.status is Status.OPTIMAL and sol.plan is not None and what == "as fast":
        # the operators' optimum is no faster: the layer plan is optimal over the operators too
        bound = min(fsol.objective if fsol.bound is None else fsol.bound, sol.objective)
        return w, noted(dataclasses.replace(sol, status=Status.OPTIMAL, bound=bound, gap=0.0),
                        f"{given} optimal, {what}")
    if sol.plan is None and fsol.status is Status.INFEASIBLE:  # proven over the operators
        return w, noted(sol, f"{given} {fsol.status.value}, {what}")
    return w, noted(_over_layers(sol, fsol), f"{given} {fsol.status.value}, {what}")


def _over_layers(sol, fine=None):
    """The layer solve's answer as an answer to the model (whose nodes are the operators; layer nodes are
    the default's quick first step): optimal over layer nodes is a plan, not a proof (the operators,
    split between stages, may do better), and no plan over layer nodes proves none over operators. The
    bound is the operator solve's (``fine``), the only one that bounds the operators' optimum."""
    status = sol.status
    if status is Status.OPTIMAL:
        status = Status.FEASIBLE
    elif status is Status.INFEASIBLE:
        status = Status.STOPPED
    bound = None
    if fine is not None and fine.bound is not None and math.isfinite(fine.bound):
        bound = min(fine.bound, sol.objective) if sol.plan is not None else fine.bound
    gap = relative_gap(sol.objective, bound) if sol.plan is not None else None
    said = {Status.OPTIMAL: "optimal over layer nodes", Status.INFEASIBLE: "no plan over layer nodes"}
    message = sol.message
    if sol.status in said:
        message = f"{said[sol.status]} ({message})" if message else said[sol.status]
    return dataclasses.replace(sol, status=status, bound=bound, gap=gap, message=message)


def _solve_time(sol, since: float) -> float:
    """The seconds ``sol`` says its solve took (its own clock), else the wall time ``since`` then."""
    import time

    t = getattr(sol, "time", None)
    return float(t) if t is not None else time.perf_counter() - since


def refuse_serving(args) -> None:
    """A latency target or a batch-size sweep is solved on the one-device-per-stage model only so far:
    with replicas it is one error naming the option, never a target silently dropped."""
    why = ("not supported on the stage model of this workload yet (Piper files, LLM configs, training "
           "graphs); an ONNX inference model takes it")
    if getattr(args, "latency_slo", None) is not None:
        raise InputError(f"--latency-slo: {why}")
    if isinstance(getattr(args, "batch_size", None), str):
        raise InputError(f"--batch-size {args.batch_size}: a sweep of batch sizes {why}; or give one "
                         f"batch size")


def solve_args(problem: ParallelProblem, args, progress=None):
    """The answer of ``--solver`` (default ``auto``) on the stage-model ``problem``, through the one
    checked entry point (:func:`solvers.registry.solve`): every option is honoured or refused there.
    ``progress``: :attr:`solvers.base.SolveOptions.progress` (a bar, where the solver reports progress)."""
    from solvers.base import DEFAULT_BACKEND, SolveOptions
    from solvers.registry import solve

    if getattr(args, "split", None) is not None or getattr(args, "memory_limit", None) is not None:
        raise InputError("--split and --memory-limit do not apply to stage-model plans (replicas)")
    options = SolveOptions(objective=getattr(args, "objective", None) or "max-load",
                           time_limit=args.time_limit, gap=getattr(args, "gap", 1e-4),
                           threads=getattr(args, "threads", None), seed=getattr(args, "seed", 0),
                           backend=getattr(args, "backend", DEFAULT_BACKEND),
                           subgraphs_per_device=getattr(args, "subgraphs_per_device", 1), progress=progress,
                           raw={} if getattr(args, "restarts", None) is None else {"restarts": args.restarts})
    return solve(problem, solver=args.solver or "auto", options=options)


# ------------------------------------------------------------------------------------------ emit
def workload_result(w: StageWorkload, ev: PlanEvaluation, **kw) -> tuple[dict, object]:
    """The result document of the plan evaluated as ``ev`` on ``w``
    (:func:`placement.results.stage_result_dict` with ``kw``, the workload's settings and, for an ONNX
    model, each stage's ``operators`` and the plan's ``compute_utilisation``) and its MFU (``None``
    without operators)."""
    data = stage_result_dict(w.problem, ev, workload=kw.pop("workload", w.source), settings=dict(w.settings),
                             **kw)
    if w.graph is None:
        return data, None
    members: dict[int, list[str]] = {}
    for u, c in enumerate(np.asarray(w.node_of).tolist()):
        members.setdefault(c, []).append(w.graph.names[u])
    index = {str(x): i for i, x in enumerate(w.problem.graph.ids)}
    for st in data["stages"]:
        st["operators"] = [op for x in st["nodes"] for op in members.get(index[str(x)], [])]
    mfu = _utilisation(w.problem, ev, w.graph_cls, w.settings) if ev.valid else None
    data["compute_utilisation"] = None if mfu is None else mfu.as_dict()
    return data, mfu


def _answer_fields(r) -> dict:
    """The result fields of a solver's answer ``r`` (a :class:`~solvers.base.Solution`)."""
    return {"status": str(r.status), "solver": r.solver, "time": r.time, "message": r.message,
            "bound": r.bound, "compile_s": (r.stats or {}).get("compile_s")}


def stage_result(p) -> dict:
    """The result document of a stage plan (a :class:`placement.api.Placement` of the stage model, as
    :func:`placement.place_model` or :func:`placement.place` on a problem gives), as ``placement place
    --out`` writes it (each stage's ``operators`` only where the plan has an operator graph)."""
    r = p.solution
    if r.plan is None:
        raise InputError(f"there is no placement to apply (status {r.status.value!r}: "
                         f"{r.message or 'no plan'})")
    source = p.problem.graph.source if p.graph is None else p.graph.source  # a problem alone: its own
    w = StageWorkload(p.problem, source=source, settings=dict(p.settings), graph=p.graph, node_of=p.node_of)
    data, _ = workload_result(w, r.evaluation, **_answer_fields(r))
    return data


def place(args, w: StageWorkload) -> int:
    """``placement place`` on the stage workload ``w`` (:func:`load`, or an LLM config's): solve it with
    ``--solver`` (default ``auto``), refined to operators where that is faster (:func:`solve_refined`),
    write the result and print the stage table. ``args.clock``: the command's ``--time-limit``
    (:class:`placement.clock.Clock`, started by :mod:`placement.cli`). A progress bar on stderr
    (a terminal, or ``--progress``) where the solver reports progress
    (:attr:`solvers.registry.SolverInfo.stage_progress`): one per solve, the operator refinement's
    labelled so."""
    from solvers.registry import solver_info

    from .outputs import Progress

    labels = ["placing layer nodes", "placing operators"] if w.finer is not None else ["placing"]
    reports = solver_info(args.solver or "auto").stage_progress

    def solve_one(problem, time_limit):
        a = copy.copy(args)
        a.time_limit = time_limit
        bar = Progress(labels.pop(0) if labels else "placing",
                       enabled=True if getattr(args, "progress", False) else None)
        try:
            return solve_args(problem, a, progress=bar if reports and bar.enabled else None)
        finally:
            bar.done()

    clock = args.clock
    limit = clock.for_solve(args.solver, "stages", threads=getattr(args, "threads", None))
    w, r = solve_refined(w, solve_one, limit, deadline=clock.deadline())
    return emit_answer(args, w, clock.credited(r))


def emit_answer(args, w: StageWorkload, r) -> int:
    """``place``'s output of the answer ``r`` (a :class:`solvers.base.Solution`) to the stage workload
    ``w``: the result written and the stage table and summary printed (:func:`no_plan` without a plan).
    Returns the exit code."""
    clock = args.clock
    if r.plan is None and r.interrupted:  # a Ctrl-C before any plan: the command was interrupted (130)
        raise KeyboardInterrupt
    if r.interrupted:  # the first Ctrl-C kept this plan: later ones change nothing (exit 0, it is written)
        from . import _interrupt

        _interrupt.stopping()
    if r.plan is None:
        return no_plan(args, r, clock.words())
    data, mfu = workload_result(w, r.evaluation, workload=_recorded_path(args), **_answer_fields(r))
    summary = plan_summary(w.problem, r.evaluation, w.unit, result=r, extra=w.words(), sample=w.sample,
                           latency_batch=w.latency_batch)
    summary += _flush_line(w, r.evaluation)
    summary += _mfu_line(w.problem, r.evaluation, mfu)
    summary += f"\n{clock.words()}" if clock.words() else ""
    _emit(args, data, w.problem, r.evaluation, summary, w.unit, w.sample)
    return 0


def _flush_line(w: StageWorkload, ev: PlanEvaluation) -> str:
    """A training pipeline under a flushing schedule: its time per sample (the model's objective, as
    Piper's) is the steady state, which each batch's fill and drain add to. Said, so that the samples/s
    is not read as what a run sustains; ``placement show`` simulates the flush."""
    forwards_only = w.sample == "token" or w.settings.get("training") is False  # no flush to pay
    if forwards_only or w.problem.schedule not in ("1f1b", "gpipe") or len(ev.stages) < 2:
        return ""
    return (f"\nthe time per sample is the pipeline's steady state: each batch of {w.problem.microbatches} "
            f"micro-batches under {w.problem.schedule} also fills and drains it (placement show simulates "
            f"that)")


def _recorded_path(args) -> str | None:
    """The workload's path as the result file records it: relative to the result file (``--out``), so
    that ``show`` finds it from any folder; absolute without one."""
    from .results import source_path

    return source_path(args.workload, getattr(args, "out", None))


def evaluate(args, frontend: Mapping | None = None, *,
             on_value: Callable[[float], None] | None = None) -> int:
    """``placement evaluate WORKLOAD plan.json`` of a stage plan (a result JSON's ``stages``) on a
    Piper-format workload or an ONNX model: the settings the plan records rebuild the problem it was
    solved on (:func:`load`), unless the command line gives them again. ``on_value``: told the plan's
    time per sample (seconds) once it is printed."""
    data = read_json(args.split)
    check_stage_plan_file(data, args.split)  # before any of its fields is read
    saved = ({**read_stage_result(data, source=args.split), "_path": args.split} if is_stage_result(data)
             else {})
    given, placed = getattr(args, "granularity", None), saved.get("granularity")
    if given is not None and placed is not None and given != placed:
        # a plan's nodes are those of the granularity it was placed at: another one has other nodes
        raise InputError(f"--granularity {given}: the plan was placed at {placed} granularity (its nodes are "
                         f"{'operators' if placed == 'op' else 'layers'}); evaluate scores it at that "
                         f"granularity: drop --granularity", source=args.split)
    w = load(args, frontend, saved=saved)
    plan = plan_from_dict(w.problem, data, source=args.split)
    ev = evaluate_plan(w.problem, plan)
    out, mfu = workload_result(w, ev, status="feasible" if ev.valid else "invalid", solver="given plan",
                               message=f"plan from {args.split}", workload=_recorded_path(args))
    summary = plan_summary(w.problem, ev, w.unit, extra=w.words(), sample=w.sample,
                           latency_batch=w.latency_batch)
    summary += _mfu_line(w.problem, ev, mfu)
    _emit(args, out, w.problem, ev, summary, w.unit, w.sample)
    if on_value is not None:
        on_value(ev.objective)
    return 0 if ev.valid else 1


def _utilisation(problem: ParallelProblem, ev, graph_cls, settings: dict):
    """MFU of the plan (:func:`graphs.mfu.stage_utilisation`): the operators of each stage, one run of
    the model's batch every ``batch`` samples' time, since the graph's FLOPs and times are per run."""
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

    plan = [s.stage for s in ev.stages]
    parts = [f"{name} {_pct(mfu.devices[numbers[0]].mfu)}"  # a stage's devices have one MFU
             for name, numbers in zip(stage_devices(problem, plan), stage_device_numbers(problem, plan))]
    return (f"\ncompute utilisation (MFU: achieved / peak FLOP/s, not busy time): total {_pct(mfu.total)} "
            f"({mfu.achieved / 1e12:.4g} of {mfu.peak_flops / 1e12:.4g} TFLOP/s); " + ", ".join(parts))


#: the result file's schema version of a stage plan; version 1 was ``"format": "placement-replicated"``
#: with the problem's settings at the top level, and is still read (:func:`read_stage_result`)
def plan_from_dict(problem: ParallelProblem, data, *, source: str | None = None) -> list[Stage]:
    """The plan in a result JSON's ``stages``; :class:`InputError` names the stage and field at fault."""
    g = problem.graph
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise InputError("a plan needs a 'stages' list", source=source)
    data = read_stage_result(data, source=source)
    index = {str(x): i for i, x in enumerate(g.ids)}
    kinds = {k.name: i for i, k in enumerate(problem.kinds)}
    # each stage's devices, where listed, are those the numbering gives it: the one reading of every
    # command (evaluate, show, split, run), a list edited by hand refused by name
    check_stage_devices(data["stages"], source=source, kinds=kinds, default_kind=problem.kinds[0].name)
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
        kname = s.get("kind", problem.kinds[0].name)
        if kname not in kinds:
            raise InputError(f"{where}: unknown device kind {kname!r}: the plan does not match the devices "
                             f"({_OTHER_MODEL})", source=source)
        k = kinds[kname]
        nodes, variants = [], []
        tm = s["TMPCids"]
        if not isinstance(tm, dict) or not isinstance(s["nodes"], list):
            raise InputError(f"{where}: 'nodes' must be a list and 'TMPCids' an object", source=source)
        for x in s["nodes"]:
            if str(x) not in index:
                raise InputError(f"{where}: unknown node {x!r}: the plan does not match the workload "
                                 f"({_OTHER_MODEL})", source=source)
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
    placed = {u for st in plan for u in st.nodes}
    if len(placed) < g.num_nodes:
        missing = [str(g.ids[u]) for u in range(g.num_nodes) if u not in placed]
        raise InputError(f"the plan does not match the workload: {len(missing)} of its node(s) are in no "
                         f"stage: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                         f"({_OTHER_MODEL})",
                         source=source)
    return plan


_OTHER_MODEL = "was it computed for another model, device set or --training setting?"


#: how printed times scale from the model's seconds per sample: a Piper file keeps its own unit (seconds:
#: its model adds bytes / (bytes/s) to ``timePerSample``), an ONNX model prints milliseconds, as its
#: pipeline-only table does. The result JSON always holds seconds (its ``time_unit``).
TIME_UNITS = {"s": 1.0, "ms": 1e3}


def fmt_time(x: float, unit: str = "s", digits: int = 6) -> str:
    """Seconds ``x`` in ``unit`` (no unit suffix)."""
    return f"{x * TIME_UNITS[unit]:.{digits}g}"


def _device_use(problem: ParallelProblem, ev: PlanEvaluation) -> tuple[int, int, list[str]]:
    """Devices the plan uses (``t * d`` per stage: more than there are, in a plan that breaks the count),
    the devices there are, and the idle ones by name (``t4:2``: each kind's devices taken in stage
    order, as :func:`stage_devices` names them)."""
    used = [0] * len(problem.kinds)
    for s in ev.stages:
        used[s.stage.kind] += s.devices
    idle = [f"{k.name}:{i}" for k, n in zip(problem.kinds, used) for i in range(n, k.count)]
    return sum(used), sum(k.count for k in problem.kinds), idle


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


def _node_range(problem: ParallelProblem, nodes) -> str:
    names = problem.graph.names
    if not nodes:
        return ""
    first, last = names[nodes[0]], names[nodes[-1]]
    return first if len(nodes) == 1 else f"{first} .. {last}"


def format_plan(problem: ParallelProblem, ev: PlanEvaluation, unit: str = "s", sample: str = "sample") -> str:
    """The plan's table (:func:`placement.report.format_rows`, the one table of every plan): per stage
    its devices (``t * d`` of one kind), the degrees, its nodes, the variants used, compute,
    communication and replica resync per sample, its load (time per sample, in ``unit``), peak memory
    per device against the device's, and the micro-batches in flight ``y``; the heads say the figures
    are per ``sample`` (an LLM decode's: per token). Stages are numbered as in the plan, as its
    evaluation's messages name them."""
    from .report import TableRow, format_rows

    names = stage_devices(problem, [s.stage for s in ev.stages])
    g = problem.graph
    scale = TIME_UNITS[unit]
    rows = []
    for i, s in enumerate(ev.stages):
        st = s.stage
        used = Counter(g.variants[v].name for v in st.variants)
        rows.append(TableRow(i, names[i], st.d, st.t, len(st.nodes),
                             s.compute * scale, s.comm_in * scale, s.comm_out * scale, s.resync * scale,
                             s.time_per_sample * scale, s.memory, _finite(s.capacity),
                             _node_range(problem, st.nodes),
                             ", ".join(f"{n} {c}" for n, c in sorted(used.items())), s.in_flight))
    return format_rows(rows, f"{unit}/{sample}")


def plan_summary(problem: ParallelProblem, ev: PlanEvaluation, unit: str, *, result=None,
                 extra: str = "", sample: str = "sample", latency_batch: int | None = None) -> str:
    """The lines under the stage table, worded as the one-device-per-stage summary is: max-load per
    sample (with samples per second), status, solver, bound, gap and time of ``result`` (a
    :class:`~solvers.base.Solution`; ``None``: a given plan), then the devices used, the schedule and
    ``extra`` settings, and every broken constraint. ``sample``: what one sample is (an LLM's: a token).
    ``latency_batch``: also one batch's latency, the batch being that many samples (an ONNX model's
    inference plan: :attr:`StageWorkload.latency_batch`), as the stage model counts it: a replica of each
    stage takes the batch whole, the stages one after another."""
    rate = f" ({1 / ev.objective:,.6g} {sample}s/s)" if 0 < ev.objective < math.inf else ""
    parts = [f"max-load {fmt_time(ev.objective, unit, 9)} {unit} per {sample}{rate}"]
    if latency_batch is not None and math.isfinite(ev.latency):
        what = "one sample" if latency_batch == 1 else f"one batch of {latency_batch} samples"
        parts.append(f"latency {fmt_time(ev.latency * latency_batch, unit, 9)} {unit} ({what}, the stages "
                     f"one after another)")
    if result is None:
        parts.append("status " + ("feasible (a given plan)" if ev.valid else "INVALID"))
    else:
        from ._flags import cli_words
        from .report import in_cli_units, status_parts

        parts += status_parts(result, lambda b: fmt_time(b, unit, 9))
    from .report import devices_words

    # a plan that breaks the model's rules has no evaluated stages: its devices are not counted as idle
    use = devices_words(len(ev.stages), *_device_use(problem, ev)) if ev.stages or not ev.problems else \
        "the plan cannot be scored (its problems below)"
    lines = [", ".join(parts),
             f"{use}; schedule {problem.schedule}, "
             f"{problem.microbatches} micro-batch{'es' * (problem.microbatches != 1)} per batch"
             + (f", {extra}" if extra else "")]
    lines += [f"  problem: {x}" for x in ev.problems]
    if result is not None and result.message:
        # one summary, one unit: the solver's seconds per sample in the table's unit, bytes in binary units
        lines.append(in_cli_units(cli_words(result.message), None if unit == "s" else
                                  lambda t: f"{fmt_time(t, unit, 9)} {unit}"))
    return "\n".join(lines)


def no_plan(args, r, timing: str = "") -> int:
    """The solver returned no plan: a limit stopped it (one ``error:`` line, exit 1, nothing proven; with
    ``timing``, what the limit covered: :meth:`placement.clock.Clock.words`) or no plan fits
    (:class:`InfeasibleError`, which the command line prints the same way). ``--out`` still gets its
    file (:func:`placement.results.no_plan_result`: ``infeasible`` where proven, else ``unknown``, the
    reason in ``message``), ``--json`` prints it."""
    from solvers.base import Status

    from .export import emit
    from .results import no_plan_result

    data = no_plan_result("stages", r.status is Status.INFEASIBLE, r.message or "")
    data["workload"] = _recorded_path(args)
    emit(args, data, lambda: "")  # the file and --json; the error line below says why there is no plan
    if r.status is Status.STOPPED:
        print(f"error: {args.workload}: no plan found (status stopped, nothing proven): {r.message}; a "
              f"larger --time-limit may find one" + (f" ({timing})" if timing else ""), file=sys.stderr)
        return 1
    if r.status is not Status.INFEASIBLE:  # a baseline found none in its family: nothing proven
        print(f"error: {args.workload}: no plan found (status {r.status}, nothing proven): {r.message}; "
              f"an exact solver (auto, dp, ip) decides whether one exists", file=sys.stderr)
        return 1
    raise InfeasibleError(f"{args.workload}: {r.message}")


def _emit(args, data: dict, problem: ParallelProblem, ev: PlanEvaluation, summary: str,
          unit: str = "s", sample: str = "sample") -> None:
    """Write and print a stage plan's result through the one output path (:func:`placement.export.emit`),
    its text the plan's table (times per ``sample``) and ``summary``."""
    from .export import emit

    emit(args, data, lambda: (format_plan(problem, ev, unit, sample) + "\n\n" if ev.stages else "") + summary)
