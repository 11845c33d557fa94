"""Result files: our JSON schema (with the reference's fields beside it) and atomic writing.

Schema (``"schema": "placement-result", "version": 2``; ``source`` is the workload's path relative to the
result file's folder, or absolute when the result is not written to a file). This is the
one-device-per-stage form (``"model": "one-device-per-stage"``); a stage plan with replicas
(``"model": "stages"``) is written by :func:`placement.stages.result_dict`. Both list ``stages`` in
pipeline order with the devices each uses, and ``devices``, one row per device; version 1 was this
without ``model``, ``time_unit`` and ``stages``, and is read the same::

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
     "compute_utilisation": {"total", "period_ms", ..., "devices": [{"name", "kind", "mfu", ...}]} or null,
     # reference fields, when the cluster has the reference's kinds (accelerator, cpu):
     "maxLoad", "totalLatency", "fpgas": [{"load", "nodes": [ids]}], "cpus": [{"load", "nodes": [ids]}]}

For ``--objective latency`` the reference fields follow its latency format instead: ``totalLatency``
and one ``fpgas`` entry ``{"nodes"}`` per accelerator subgraph (``cpus``: all host nodes).

``utilisation`` = load / max-load (busy time); ``compute_utilisation`` (ONNX inputs) = achieved over
peak FLOP/s per device and in total (MFU, :mod:`graphs.mfu`). Infinite numbers (no placement) are
written as ``null``.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys

from graphs.mfu import compute_utilisation
from graphs.reference import ACCELERATOR, CPU

from .api import Placement

__all__ = ["result_dict", "no_plan_result", "write_json", "print_json", "source_path", "SCHEMA_VERSION"]

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


def result_dict(p: Placement, *, result_path: str | os.PathLike | None = None) -> dict:
    """The result file's content for a placement; ``result_path`` is where it will be written (the
    workload's path is stored relative to it, see :func:`source_path`)."""
    sol, ev, g, cl = p.solution, p.evaluation, p.graph, p.cluster
    out = {
        "schema": "placement-result",
        "version": SCHEMA_VERSION,
        "model": "one-device-per-stage",
        # milliseconds for an ONNX model; a reference workload's times are in its own unit ("t")
        "time_unit": g.meta.get("unit") or "t",
        "source": source_path(g.source, result_path),
        "solver": sol.solver,
        "status": sol.status.value,
        "objective": _num(sol.objective),
        "max_load": _num(p.max_load),
        "bound": _num(sol.bound),
        "gap": _num(sol.gap),
        "solve_time_s": round(sol.time, 6),
        "message": sol.message,
        "stats": {k: (_num(v) if isinstance(v, float) else v) for k, v in sol.stats.items()},
    }
    if g.meta.get("format") == "onnx":  # how the model was read and costed, so tools can redo it
        training = g.meta.get("training")
        out["frontend"] = {"devices": g.meta.get("devices"), "costs": g.meta.get("costs"),
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
    out["objective_name"] = p.objective
    out["latency"] = None if lat is None else _num(lat.total)  # none for a training graph
    mfu = compute_utilisation(g, cl, p.assignment)
    out["compute_utilisation"] = None if mfu is None else mfu.as_dict()
    kinds = {k.name for k in cl.kinds}
    if kinds <= {ACCELERATOR, CPU}:
        if p.objective == "latency":
            # the reference latency evaluator's format: one fpgas entry per accelerator subgraph
            from graphs.latency import reference_latency_fields

            out.update(reference_latency_fields(g, cl, lat))
            out["maxLoad"] = _num(p.max_load)
        else:
            out["maxLoad"] = _num(p.max_load)
            if lat is not None:
                out["totalLatency"] = _num(lat.total)
            for key, kind in (("fpgas", ACCELERATOR), ("cpus", CPU)):
                out[key] = [{"load": _num(d.load), "nodes": [_id(g.ids[u]) for u in d.nodes]}
                            for d in ev.devices if d.kind == kind]
    return out


def print_json(data: dict, out=None) -> None:
    """Print ``data`` as the JSON document of a ``--json`` run (indented one space, a final newline) to
    ``out`` (default: standard output)."""
    out = out or sys.stdout
    json.dump(data, out, indent=1)
    out.write("\n")


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as JSON atomically: a temporary file in the same folder, then a rename, so a
    crash or Ctrl-C never leaves a half-written result. The file gets the usual permissions (0666 less
    the umask), like every other file the tool writes. A missing folder is created, as for every
    output of the command line; a folder that cannot be written raises :class:`InputError`."""
    from graphs.errors import InputError

    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot write there ({e.strerror or e})", source=path) from None
    for _ in range(100):
        tmp = os.path.join(folder, f".tmp-{secrets.token_hex(6)}.json")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise InputError(f"cannot write there ({e.strerror or e})", source=path) from None
    else:  # pragma: no cover
        raise FileExistsError(f"no free temporary name in {folder}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
