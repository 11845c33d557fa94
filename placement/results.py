"""Result files: the one schema ``placement place --out`` writes (``"schema": "placement-result",
"version": 2``), written and read here, for both forms of the one model: a stage plan (``"model":
"stages"``, :func:`stage_result_dict`) and one device per stage (``"model": "one-device-per-stage"``,
:func:`result_dict`). Both list ``stages`` in pipeline order with the devices each uses, and
``devices``, one row per device derived from the stages; ``time_unit`` declares the unit of every time
in the file. docs/formats.md describes the fields; version-1 files (stage plans as ``"format":
"placement-replicated"``, one-device-per-stage plans without ``model``, ``time_unit`` and ``stages``)
are read the same.

The one-device-per-stage form::

    {"schema", "version", "model", "time_unit", "solver", "status", "objective", "max_load", "bound", "gap",
     "solve_time_s", "message", "valid", "problems", "contiguous",
     "stage_order": [device names in pipeline order],
     "stages": [{"devices": [name], "kind", "dataParallelDegree": 1, "tensorParallelDegree": 1,
                 "nodes": [ids], "time_per_sample": load / batch_size, "time_per_batch": load,
                 "batch_size", "memory": {"peak", "capacity"}}],
     "devices": [{"device", "name", "kind", "stage", "nodes": [node names], "node_ids": [...],
                  "compute", "comm_in", "comm_out", "load", "memory", "capacity", "utilisation"}],
     "stats": {...},
     # ONNX inputs: the front-end options the workload was built with
     "frontend": {"devices", "costs", "batch_size", "training", "optimizer"},
     "objective_name": "max-load" | "split-max" | "latency", "latency": single-sample latency,
     "compute_utilisation": {"total", "batch_size", "flops_per_sample", "period_ms" (per sample),
                             "flops_per_batch", "batch_period_ms", ..., "devices": [{"name", "kind", "mfu",
                             ...}]} or null,
     # reference fields, when the cluster has the reference's kinds (accelerator, cpu):
     "maxLoad", "totalLatency", "fpgas": [{"load", "nodes": [ids]}], "cpus": [{"load", "nodes": [ids]}]}

For ``--objective latency`` the reference fields follow its latency format instead: ``totalLatency``
and one ``fpgas`` entry ``{"nodes"}`` per accelerator subgraph (``cpus``: all host nodes).

``utilisation`` = load / max-load (busy time); ``compute_utilisation`` (ONNX inputs, a stage plan's
too) = achieved over peak FLOP/s per device and in total (MFU, :mod:`graphs.mfu`), its FLOPs and
period per sample and per batch. A stage plan's ``memory`` per stage: :func:`_stage_memory`.
Infinite numbers (no placement) are written as ``null``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from graphs.errors import InputError
from graphs.jsonio import shown
from graphs.model import Cluster, OpGraph
from graphs.parallel import (
    SCHEDULES,
    ParallelProblem,
    PlanEvaluation,
    stage_device_names,
    stage_device_numbers,
    weight_versions,
)
from solvers.base import relative_gap

if TYPE_CHECKING:
    from .api import Placement

__all__ = ["SCHEMA_VERSION", "result_dict", "stage_result_dict", "no_plan_result", "source_path",
           "is_stage_result", "read_stage_result", "check_problem_section", "check_stage_devices",
           "check_stage_plan_file",
           "read_result", "checked_result", "assignment_from_result",
           "recorded_input_shape"]

SCHEMA_VERSION = 2  # 2: ``model``, ``time_unit`` and ``stages``; version-1 files read the same


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _id(x):
    return x.item() if hasattr(x, "item") else x


def source_path(source: str | None, result_path: str | os.PathLike | None) -> str | None:
    """The workload's path as a result file stores it: relative to the result file's folder (so that the
    two can move together and be read from any working directory), absolute when there is no result
    file or no relative path (another drive)."""
    if not source:
        return source
    full = os.path.abspath(source)
    if result_path is None:
        return full
    try:
        return os.path.relpath(full, os.path.dirname(os.path.abspath(os.fspath(result_path))))
    except ValueError:
        return full


def no_plan_result(model: str, proven: bool, message: str = "") -> dict:
    """The result file of a command that found no plan: no stages and no devices, ``infeasible`` only
    when it is proven that none exists (``proven``), else ``unknown``; ``model``: the model searched
    (``"stages"``, ``"one-device-per-stage"``)."""
    return {"schema": "placement-result", "version": SCHEMA_VERSION, "model": model,
            "status": "infeasible" if proven else "unknown", "message": message, "stages": [],
            "devices": []}


def _header(model: str, *, time_unit: str, workload: str | None, solver: str, status: str, message: str,
            solve_time_s: float | None, objective_name: str, objective, max_load, bound, gap) -> dict:
    """The fields every result file starts with, whichever model placed it (docs/formats.md)."""
    return {"schema": "placement-result", "version": SCHEMA_VERSION, "model": model, "time_unit": time_unit,
            "workload": workload, "solver": solver, "status": status, "message": message,
            "solve_time_s": solve_time_s, "objective_name": objective_name, "objective": objective,
            "max_load": max_load, "bound": bound, "gap": gap}


def result_dict(p: Placement, *, result_path: str | os.PathLike | None = None) -> dict:
    """The result file's content for a placement; ``result_path`` is where it will be written (the
    workload's path is stored relative to it, see :func:`source_path`)."""
    from graphs.mfu import compute_utilisation  # here: reading a result needs neither
    from graphs.reference import reference_kinds

    sol, ev, g, cl = p.solution, p.evaluation, p.graph, p.cluster
    out = _header(
        "one-device-per-stage",
        # milliseconds for an ONNX model; a reference workload's times are in its own unit ("t")
        time_unit=g.meta.get("unit") or "t",
        # the workload's path relative to the file, as a stage plan's (version-2 files before this called
        # it source, which readers still take)
        workload=source_path(g.source, result_path), solver=sol.solver, status=sol.status.value,
        message=sol.message, solve_time_s=round(sol.time, 6), objective_name=p.objective,
        objective=_num(sol.objective), max_load=_num(p.max_load), bound=_num(sol.bound), gap=_num(sol.gap))
    out["stats"] = {k: (_num(v) if isinstance(v, float) else v) for k, v in sol.stats.items()}
    if g.meta.get("format") == "onnx":  # how the model was read and costed, so tools can redo it
        training = g.meta.get("training")
        from graphs.costs import recorded_costs

        out["frontend"] = {"devices": g.meta.get("devices"),
                           "costs": recorded_costs(g.meta.get("costs"), g.meta),
                           "batch_size": g.meta.get("batch_size"), "training": bool(training),
                           "optimizer": training.get("optimizer") if isinstance(training, dict) else None}
    if ev is None:
        out.update(valid=False, problems=[sol.message or "no placement"], contiguous=False, devices=[])
        return out
    stage = {d: i for i, d in enumerate(ev.stage_order or ())}
    devices = []
    for d in ev.devices:
        devices.append({
            "device": d.device, "name": d.name, "kind": d.kind, "stage": stage.get(d.device),
            "nodes": [g.names[u] for u in d.nodes], "node_ids": [_id(g.ids[u]) for u in d.nodes],
            "compute": d.compute, "comm_in": d.comm_in, "comm_out": d.comm_out, "load": _num(d.load),
            "memory": d.memory, "capacity": d.capacity,
            "utilisation": (_num(d.load / p.max_load)
                            if p.max_load > 0 and math.isfinite(p.max_load) else None),
        })
    # the stages the devices make: one device each (d = t = 1), in pipeline order, as a stage plan lists
    # them; a device outside the pipeline order (a host) follows
    order = list(ev.stage_order or ()) + sorted(d.device for d in ev.devices if d.device not in stage)
    by_number = {d.device: d for d in ev.devices}
    # a device's load is per batch of the graph's batch size; a stage's time is per sample, as a stage
    # plan writes it, so that one field means one thing in both forms
    batch = g.batch_size  # the times are per run of this batch (an ONNX model's), else per sample
    stages = [{"devices": [by_number[u].name], "kind": by_number[u].kind, "dataParallelDegree": 1,
               "tensorParallelDegree": 1, "nodes": [_id(g.ids[x]) for x in by_number[u].nodes],
               "time_per_sample": _num(by_number[u].load / batch), "time_per_batch": _num(by_number[u].load),
               "batch_size": batch,
               "memory": {"peak": by_number[u].memory, "capacity": by_number[u].capacity}}
              for u in order if u in by_number and len(by_number[u].nodes)]
    out.update(
        valid=ev.valid, problems=list(ev.problems), contiguous=ev.contiguous,
        stage_order=[cl.device_name(d) for d in ev.stage_order] if ev.stage_order else None,
        stages=stages, devices=devices,
    )
    lat = p.latency
    out["latency"] = None if lat is None else _num(lat.total)  # none for a training graph
    mfu = compute_utilisation(g, cl, p.assignment)
    out["compute_utilisation"] = None if mfu is None else mfu.as_dict()
    ref = reference_kinds(g, cl)  # a reference-format workload's kinds, whatever names its file gives them
    if ref is not None:
        if p.objective == "latency":
            # the reference latency evaluator's format: one fpgas entry per accelerator subgraph
            from graphs.latency import reference_latency_fields

            out.update(reference_latency_fields(g, cl, lat))
            out["maxLoad"] = _num(p.max_load)
        else:
            out["maxLoad"] = _num(p.max_load)
            if lat is not None:
                out["totalLatency"] = _num(lat.total)
            for key, kind in ref.items():
                out[key] = [{"load": _num(d.load), "nodes": [_id(g.ids[u]) for u in d.nodes]}
                            for d in ev.devices if d.kind == kind]
    return out


# --------------------------------------------------------------------------- stage plans
def stage_result_dict(problem: ParallelProblem, ev: PlanEvaluation, *, status: str, solver: str,
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
    plan = [s.stage for s in ev.stages]
    numbers, names = stage_device_numbers(problem, plan), stage_device_names(problem, plan)
    stages, devices = [], []
    for i, s in enumerate(ev.stages):
        st = s.stage
        kname = problem.kinds[st.kind].name
        ids = names[i]
        stages.append({
            "nodes": [g.ids[u] for u in st.nodes],
            "dataParallelDegree": st.d,
            "tensorParallelDegree": st.t,
            "TMPCids": {str(g.ids[u]): g.variants[v].name for u, v in zip(st.nodes, st.variants)},
            "kind": kname,
            "devices": ids,
            "time_per_sample": s.time_per_sample,
            "compute": s.compute, "comm": s.comm, "resync": s.resync,
            "memory": _stage_memory(problem.schedule, s),
            "in_flight": s.in_flight,
        })
        for j, name in enumerate(ids):  # replica r holds devices r*t .. r*t+t-1 (its tensor-parallel group)
            devices.append({"device": numbers[i][j], "name": name, "kind": kname, "stage": i,
                            "replica": j // st.t, "tp_rank": j % st.t})
    value = ev.objective if math.isfinite(ev.objective) else None
    gap = relative_gap(value, bound)
    kinds = [{"name": k.name, "count": k.count, "memory": k.memory,
              "bandwidth": None if math.isinf(k.bandwidth) else k.bandwidth,
              "server_size": k.server_size, "intra_bandwidth": k.intra_bandwidth,
              "inter_bandwidth": k.inter_bandwidth} for k in problem.kinds]
    return {**_header("stages", time_unit="s", workload=workload, solver=solver, status=status,
                      message=message, solve_time_s=time, objective_name="max-load", objective=value,
                      max_load=value, bound=bound, gap=gap),
            # one sample's time end to end in seconds, as the stage model's latency is (a micro-batch of b
            # samples takes b times it)
            "latency": ev.latency if math.isfinite(ev.latency) else None,
            "valid": ev.valid, "problems": list(ev.problems),
            # the evaluator reports stages that are not nested ideals as a problem
            "contiguous": bool(ev.stages) and not any("nested ideals" in x for x in ev.problems),
            "problem": {"schedule": problem.schedule, "microbatches": problem.microbatches,
                        "max_replicas": problem.max_replicas, "kinds": kinds, **(settings or {})},
            "stages": stages, "devices": devices, **({"compile_s": compile_s} if compile_s else {})}


def _stage_memory(schedule: str, s) -> dict:
    """A stage's ``memory`` per device in bytes (docs/formats.md), its peak in parts, each named for
    what it is: ``fixed`` (the stage model's ``B``: one copy of the parameters, and in training their
    gradients and optimiser state; in inference the outputs held too), ``stash`` (``A * y``),
    ``trainable_weights`` (``W``: the weights training updates, part of ``fixed``; 0 for inference,
    which updates none) and ``weight_versions`` (the copies of them the schedule keeps), so that
    ``peak = fixed + stash + (weight_versions - 1) * trainable_weights``. (Files of earlier releases
    wrote ``weights`` = ``trainable_weights * weight_versions``, 0 for inference.)"""
    versions = weight_versions(schedule, s.in_flight)
    w = s.weights / versions  # the evaluator's weights are W times the versions kept
    return {"fixed": s.memory - s.stash - (versions - 1) * w, "stash": s.stash, "trainable_weights": w,
            "weight_versions": versions, "peak": s.memory,
            "capacity": None if math.isinf(s.capacity) else s.capacity}


def is_stage_result(data) -> bool:
    """Is ``data`` (a parsed result file) a stage plan: version 2 with ``"model": "stages"``, or a
    version-1 ``"format": "placement-replicated"`` file?"""
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        return False
    return data.get("format") == "placement-replicated" or (
        data.get("schema") == "placement-result" and data.get("model") == "stages")


def read_stage_result(data: dict, *, source: str | None = None) -> dict:
    """A stage plan's result file (read from ``source``, which an error names) as one flat mapping,
    whichever version wrote it: the problem's settings at the top level (version 2 keeps them under
    ``problem``; its readers check its fields: :func:`check_problem_section` for an ONNX model's or a
    Piper file's plan), ``stages`` as written, times in seconds per sample."""
    if data.get("format") == "placement-replicated":  # version 1: already flat, seconds
        return data
    if data.get("problem") is not None and not isinstance(data["problem"], dict):
        raise InputError(_NOT_AN_OBJECT + shown(data["problem"]), source=source)
    flat = {k: v for k, v in data.items() if k != "problem"}
    if isinstance(flat.get("devices"), list):  # the plan's per-device rows, not the device spec recorded
        del flat["devices"]
    flat.update(data.get("problem") or {})
    if data.get("time_unit") not in (None, "s"):
        raise InputError(f"time_unit {data.get('time_unit')!r}: a stage plan's times are seconds ('s')",
                         source=source)
    return flat


_NOT_AN_OBJECT = "problem: must be an object (the settings that rebuild the problem), got "


def _int(v, least: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf


def _text(v) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _dims_ok(v) -> bool:
    return isinstance(v, dict) and all(_text(k) and _int(x) for k, x in v.items())


#: what each field of an ONNX model's or a Piper file's stage plan's ``problem`` section
#: (:func:`stage_result_dict`: the problem's own fields, then an ONNX model's front-end settings) must be
#: where it is not ``null`` (not recorded: the default), in the words of the error
_PROBLEM_FIELDS = {
    "schedule": (lambda v: v in SCHEDULES, f"one of {', '.join(SCHEDULES)}"),
    "microbatches": (_int, "a positive integer"),
    "max_replicas": (_int, "a positive integer"),
    "kinds": (lambda v: isinstance(v, list) and bool(v), "a non-empty list of device kinds"),
    "devices": (_text, "a device spec such as \"a100:4,cpu:1\""),
    "device_files": (lambda v: isinstance(v, list) and all(_text(f) for f in v), "a list of file paths"),
    "costs": (lambda v: _text(v) or isinstance(v, dict), "a cost model's name, a cost table's path or the "
              "measurements recorded"),
    "batch_size": (_int, "a positive integer (the samples in one run of the model)"),
    "training": (lambda v: isinstance(v, bool), "true or false"),
    "optimizer": (_text, "an optimizer's name"),
    "dims": (_dims_ok, "an object of symbolic input dimensions, each a positive integer"),
    "granularity": (_text, "a granularity (\"layer\" or \"op\")"),
}
#: the fields an LLM config's decode plan (and its goodput objective) adds, which its own reader
#: (placement/cli/llm.py) reads and checks: not refused as unknown here
_LLM_PROBLEM_FIELDS = ("context", "memory_context", "model", "params", "objective", "requests", "ttft_slo_ms",
                       "tpot_slo_ms", "prefill_devices")
#: the fields of each entry of ``problem.kinds`` and what they must be where not ``null``
_KIND_FIELDS = {
    "name": (_text, "a device kind's name"),
    "count": (lambda v: _int(v, 0), "a non-negative integer (a provision's kinds not bought: 0)"),
    "memory": (_positive, "a positive number of bytes"),
    "bandwidth": (_positive, "a positive number of bytes per second"),
    "server_size": (_int, "a positive integer"),
    "intra_bandwidth": (_positive, "a positive number of bytes per second"),
    "inter_bandwidth": (_positive, "a positive number of bytes per second"),
}


def _field_error(where: str, value, rule: tuple) -> InputError | None:
    ok, words = rule
    if value is None or ok(value):
        return None
    return InputError(f"{where}: must be {words}, got {shown(value)}")


def check_problem_section(problem, source: str | None = None) -> None:
    """The ``problem`` section of an ONNX model's or a Piper file's stage plan (version 2; ``None``: none
    recorded), whose fields rebuild the problem the plan was solved on (:func:`placement.stages.load`):
    each a value of its kind (:data:`_PROBLEM_FIELDS`; ``null``: not recorded), every entry of ``kinds``
    an object of :data:`_KIND_FIELDS`, and no other field (an LLM config's, :data:`_LLM_PROBLEM_FIELDS`,
    are its reader's). Else an :class:`InputError` naming the file ``source`` and the field
    (``problem.batch_size: must be a positive integer ..., got "4"``), before any reader takes the value
    (and names the model or a flag for it). Every command that reads such a plan (``evaluate``,
    ``show``, ``split``, ``run``) checks it so."""
    if problem is None:
        return
    if not isinstance(problem, dict):
        raise InputError(_NOT_AN_OBJECT + shown(problem), source=source)
    _check_fields({k: v for k, v in problem.items() if k not in _LLM_PROBLEM_FIELDS}, _PROBLEM_FIELDS,
                  "problem", "a stage plan's problem section", source)
    for i, kind in enumerate(problem.get("kinds") or ()):
        if not isinstance(kind, dict):
            raise InputError(f"problem.kinds[{i}]: must be an object (a device kind), got {shown(kind)}",
                             source=source)
        _check_fields(kind, _KIND_FIELDS, f"problem.kinds[{i}]", "a device kind", source)
        if not _text(kind.get("name")):
            raise InputError(f"problem.kinds[{i}].name: missing: a device kind needs its name", source=source)


def _check_fields(section: dict, rules: dict, where: str, what: str, source: str | None) -> None:
    """Every key of ``section`` (named ``where`` in messages) is one of ``rules``, its value passing its
    rule: an :class:`InputError` naming the first that is not."""
    for key, value in section.items():
        rule = rules.get(key)
        if rule is None:
            raise InputError(f"{where}.{key}: not a field of {what} (it holds {', '.join(rules)})",
                             source=source)
        e = _field_error(f"{where}.{key}", value, rule)
        if e is not None:
            raise InputError(e.detail, source=source)


def check_stage_devices(stages, *, source: str | None = None, kinds=None, default_kind: str | None = None
                        ) -> None:
    """A stage plan's ``stages[i].devices``, where the file lists them, are the devices the stage takes:
    the next ``d * t`` of its kind, numbered kind by kind in stage order
    (:func:`graphs.parallel.stage_device_names`), the devices the evaluator scores the plan on and the
    ones ``evaluate``, ``show``, ``split`` and ``run`` name. The list is derived from each stage's
    ``kind``, ``dataParallelDegree`` and ``tensorParallelDegree``, not a choice: one edited by hand
    (another device, two stages on one device, the stages' devices swapped, a count left behind by an
    edit of ``d`` or ``t``) is an :class:`InputError` naming the file ``source`` and
    ``stages[i].devices`` and the devices the stage takes; a stage without the list is numbered so.
    ``kinds``: the device kinds' names the problem has (``None``: not known); ``default_kind``: a
    stage's kind where it gives none (the problem's first). A stage whose fields its reader refuses (not
    an object, a degree that is not a positive integer, a kind not in ``kinds``) ends the check: the
    reader names it."""
    if not isinstance(stages, list):
        return
    taken: dict[str, int] = {}
    for i, s in enumerate(stages):
        if not isinstance(s, dict):
            return
        d, t = s.get("dataParallelDegree", 1), s.get("tensorParallelDegree", 1)
        kind = s.get("kind", default_kind)
        if not (_int(d) and _int(t) and isinstance(kind, str)) or kinds is not None and kind not in kinds:
            return
        first = taken.get(kind, 0)
        taken[kind] = first + d * t
        want = [f"{kind}:{first + j}" for j in range(d * t)]
        listed = s.get("devices")
        if not isinstance(listed, list) or listed == want:
            continue  # none listed (or version 1's count per stage): numbered so
        names = ", ".join(map(str, listed)) if listed else "no device"
        raise InputError(f"stages[{i}].devices lists {names}, but the stage takes {', '.join(want)}: each "
                         f"stage takes the next dataParallelDegree x tensorParallelDegree devices of its "
                         f"kind, numbered kind by kind in stage order (the devices evaluate scores the plan "
                         f"on and split and run cut it for); the list follows from kind and the degrees and "
                         f"is not a choice: write {', '.join(want)}, or drop 'devices'", source=source)


def check_stage_plan_file(data, source: str | None = None) -> None:
    """The checks of an ONNX model's or a Piper file's stage plan (``data``, read from ``source``) before
    any of its fields is used: its ``problem`` section (:func:`check_problem_section`) and its stages'
    ``devices`` (:func:`check_stage_devices`, against the kinds it records): the one check of every
    command that reads such a plan (``evaluate`` and ``show`` where they rebuild its problem,
    :func:`placement.stages.workload_for_result`; ``split`` and ``run`` before they cut it). Anything
    else passes (a one-device-per-stage result and an LLM config's plan are checked by their readers)."""
    if not is_stage_result(data):
        return
    if data.get("format") != "placement-replicated":  # version 2 (version 1's settings are not checked)
        check_problem_section(data.get("problem"), source)
    flat = read_stage_result(data, source=source)
    kinds = [k.get("name") for k in flat.get("kinds") or () if isinstance(k, dict)]
    kinds = [k for k in kinds if isinstance(k, str)]
    check_stage_devices(data["stages"], source=source, kinds=kinds or None,
                        default_kind=kinds[0] if kinds else None)


# --------------------------------------------------------------------------- reading one device per stage
def read_result(path: str | os.PathLike) -> dict:
    """Read a result file written by ``placement place --out`` (schema ``placement-result``)."""
    from graphs.jsonio import read_json

    path = os.fspath(path)
    return checked_result(read_json(path), path)


def checked_result(data, path: str) -> dict:
    """``data``, the JSON read from ``path``, when it is a one-device-per-stage result with a placement
    (:func:`read_result`'s checks); else an :class:`InputError` naming the file and what is wrong."""
    if not isinstance(data, dict) or data.get("schema") != "placement-result":
        raise InputError("not a placement result (expected a JSON object with \"schema\": "
                         "\"placement-result\", as written by placement place --out)", source=path)
    if data.get("model") == "stages" or data.get("format") == "placement-replicated":
        raise InputError("a stage plan (stages with replicas): it is read by placement show, split and run "
                         "on the command line, not as a one-device-per-stage result", source=path)
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices:
        raise InputError(f"the result holds no placement (status {data.get('status')!r}: "
                         f"{data.get('message') or 'no devices'})", source=path)
    for i, d in enumerate(devices):
        if not (isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("nodes"), list)):
            raise InputError(f"devices[{i}] needs a 'name' and a 'nodes' list", source=path)
    return data


def assignment_from_result(data: dict, graph: OpGraph, cluster: Cluster, *, source: str | None = None
                           ) -> np.ndarray:
    """The assignment (device number per node of ``graph``) a result file describes: its devices by
    name (``gpu:0``...), their nodes by name. Raises :class:`InputError` listing what does not match."""
    dev_number = {cluster.device_name(d): d for d in range(cluster.num_devices)}
    # older result files name devices "gpu0" (kind and index run together) where now "gpu:0"
    for d, (t, i) in enumerate(cluster.devices()):
        if not cluster.kinds[t].name[-1:].isdigit():
            dev_number.setdefault(f"{cluster.kinds[t].name}{i}", d)
    index = {name: i for i, name in enumerate(graph.names)}
    a = np.full(graph.num_nodes, -1, np.int64)
    unknown_dev, unknown_node, twice = [], [], []
    kind_of = cluster.device_kind()
    for j, d in enumerate(data["devices"]):
        if d["name"] not in dev_number:
            unknown_dev.append(d["name"])
            continue
        kind = cluster.kinds[kind_of[dev_number[d["name"]]]].name
        if d.get("kind") is not None and d["kind"] != kind:
            raise InputError(f"devices[{j}].kind is {d['kind']!r}, but {d['name']} is of kind {kind!r}: a "
                             f"device's kind is not a choice", source=source)
        for name in d["nodes"]:
            i = index.get(str(name))
            if i is None:
                unknown_node.append(str(name))
            elif a[i] >= 0:
                twice.append(str(name))
            else:
                a[i] = dev_number[d["name"]]
    problems = []
    if unknown_dev:  # the cluster by its current names (the older spellings above are only accepted)
        names = [cluster.device_name(d) for d in range(cluster.num_devices)]
        problems.append(f"device(s) {', '.join(unknown_dev[:5])} not in the cluster "
                        f"({', '.join(names[:8])}{' ...' if len(names) > 8 else ''})")
    if unknown_node:
        problems.append(f"{len(unknown_node)} node(s) not in the graph: {', '.join(unknown_node[:5])}"
                        f"{' ...' if len(unknown_node) > 5 else ''}")
    if twice:
        problems.append(f"node(s) placed twice: {', '.join(twice[:5])}")
    missing = np.flatnonzero(a < 0)
    if missing.size and not unknown_dev:
        more = " ..." if missing.size > 5 else ""
        problems.append(f"{missing.size} node(s) of the graph are not placed: "
                        f"{', '.join(graph.names[i] for i in missing[:5])}{more}")
    if problems:
        raise InputError("the result does not match the workload: " + "; ".join(problems)
                         + " (was it computed for another model, device set or --training setting?)",
                         source=source)
    _stages_agree(data, graph, cluster, a, source)
    return a


def _stages_agree(data: dict, graph: OpGraph, cluster: Cluster, a: np.ndarray, source: str | None) -> None:
    """A one-device-per-stage result lists its placement twice: ``devices[]`` (read above) and
    ``stages[]`` (a stage per used device, its nodes by id or name). A hand edit of one list alone would
    be silently ignored or silently used: the two must agree, node for node; and each stage is one device
    of its kind, d = t = 1 (:func:`check_one_device_stage`), which no edit changes."""
    stages = data.get("stages")
    if not isinstance(stages, list):
        return
    by_id = {str(x): i for i, x in enumerate(graph.ids)}
    by_name = {str(x): i for i, x in enumerate(graph.names)}
    # stages[] lists nodes by the ids of the graph placed, which devices[] names beside them: on another
    # graph of the same model (the ONNX model of a graph `inspect -o` wrote, whose ids are integers) a
    # stage's node is read by the name its own file gives it
    alias = {str(i): str(n) for dev in data.get("devices") or () if isinstance(dev, dict)
             and isinstance(dev.get("node_ids"), list) and isinstance(dev.get("nodes"), list)
             for i, n in zip(dev["node_ids"], dev["nodes"])}
    names = [cluster.device_name(d) for d in range(cluster.num_devices)]
    kinds = {names[d]: cluster.kinds[t].name for d, (t, _) in enumerate(cluster.devices())}
    listed = np.zeros(graph.num_nodes, bool)
    fix = "edit both lists, or drop 'stages' (the placement is read from devices[])"
    for k, st in enumerate(stages):
        devs = st.get("devices") if isinstance(st, dict) else None
        if not (isinstance(devs, list) and isinstance(st.get("nodes"), list)):
            return  # not a one-device-per-stage listing: nothing to compare
        check_one_device_stage(k, st, kinds, source)
        for x in st["nodes"]:
            i = by_id.get(str(x), by_name.get(str(x)))
            if i is None and str(x) in alias:
                i = by_name.get(alias[str(x)])
            if i is None or names[a[i]] != str(devs[0]):
                where = "is not in the graph" if i is None else f"is on {names[a[i]]} in devices[]"
                raise InputError(f"stages[{k}] lists node {x!r} on {devs[0]}, but it {where}: {fix}",
                                 source=source)
            listed[i] = True
    if stages and not listed.all():
        i = int(np.flatnonzero(~listed)[0])
        raise InputError(f"devices[] puts node {graph.names[i]!r} on {names[a[i]]}, which no stage lists: "
                         f"{fix}", source=source)


def check_one_device_stage(k: int, st: dict, kinds: dict[str, str], source: str | None) -> None:
    """``stages[k]`` of a one-device-per-stage result is one device (``devices`` one name, d = t = 1) of
    its ``kind``: an edit of these fields is refused, since the plan is scored from devices[] alone."""
    why = "a one-device-per-stage result runs each stage on one device"
    again = "a plan with replicas is a stage plan (placement place without --max-replicas 1)"
    if len(st["devices"]) != 1:
        raise InputError(f"stages[{k}].devices lists {len(st['devices'])} devices: {why}; {again}",
                         source=source)
    for key in ("dataParallelDegree", "tensorParallelDegree"):
        v = st.get(key, 1)
        if isinstance(v, bool) or v != 1:
            raise InputError(f"stages[{k}].{key} is {v!r}, not 1: {why} (d = t = 1); {again}", source=source)
    dev, kind = str(st["devices"][0]), st.get("kind")
    if kind is not None and dev in kinds and kind != kinds[dev]:
        raise InputError(f"stages[{k}].kind is {kind!r}, but its device {dev} is of kind {kinds[dev]!r}: a "
                         f"stage's kind is its device's", source=source)


def recorded_input_shape(result: Mapping) -> tuple[int | None, dict[str, int] | None]:
    """The batch size and the other symbolic input dimensions a result was placed at: its ``frontend``
    settings (one device per stage) or its ``problem`` (a stage plan). ``(None, None)`` for a result
    that records no front end (older or hand-written ones); a batch size ``None`` where it records none."""
    section = "frontend" if result.get("frontend") else "problem"
    rec = result.get(section)
    if not isinstance(rec, Mapping) or "batch_size" not in rec:
        return None, None
    b = rec.get("batch_size")
    batch = b if _int(b) else None
    e = _field_error(f"{section}.dims", rec.get("dims"), _PROBLEM_FIELDS["dims"])
    if e is not None:  # a mapping given to the library (a result file's commands check it on reading)
        raise e
    return batch, dict(rec.get("dims") or {})
