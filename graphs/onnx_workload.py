"""The ONNX front end end to end: model file + devices + cost model -> a :class:`Workload`.

:func:`onnx_workload` loads the model (:mod:`graphs.onnx_loader`), parses the devices
(:mod:`graphs.devices`), costs every operator (:mod:`graphs.costs`), builds the :class:`OpGraph`
(times in milliseconds, memory in bytes: for inference each operator's parameters and its outputs
at the batch size, a conservative working set in which no tensor is freed while its stage runs) and,
for training, adds the backward pass (:mod:`graphs.training`: parameters, optimizer state and the
stashed activations). The graph's ``meta`` keeps per-node annotations (operator
type, FLOPs, output bytes, parameter bytes) and the time each stage took.

:func:`reference_document` writes a graph in the reference JSON format (one accelerator kind and the
host CPU), with the annotations as extra node fields that the reference reader ignores;
:func:`describe` is the text ``placement inspect`` prints.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping

import numpy as np

from .costs import Costs, compute_costs, half_precision, op_flops
from .devices import DeviceSet, human_bytes, parse_devices
from .errors import InputError
from .mfu import peak_rates
from .model import Cluster, OpGraph
from .onnx_loader import OnnxGraph, load_onnx, parse_model
from .reference import Workload
from .training import derive_training

__all__ = ["DEFAULT_DEVICES", "onnx_workload", "prepare_onnx", "graph_workload", "build_opgraph",
           "reference_document", "describe"]

#: the cluster used when none is given
DEFAULT_DEVICES = "a100:4,cpu:1"


def onnx_workload(path: str | os.PathLike, devices: str | DeviceSet | None = None, costs: str = "roofline",
                  batch_size: int | None = None, training: bool = False, optimizer: str = "adam", *,
                  dims: Mapping[str, int] | None = None, device_files: Iterable[str] = (),
                  backward_factor: float = 2.0, model=None) -> Workload:
    """Load, cost and (for ``training``) differentiate an ONNX model; see the module doc.

    ``devices``: a :class:`DeviceSet` or its compact form (``"a100:4,cpu:8"``, default
    :data:`DEFAULT_DEVICES`); ``costs``: ``"roofline"``, ``"profile"`` or a JSON cost table's path.
    ``model``: the ``onnx.ModelProto`` of ``path`` where the caller has read it already (not read again).
    """
    return prepare_onnx(path, devices, costs, batch_size, training, optimizer, dims=dims,
                        device_files=device_files, backward_factor=backward_factor, model=model)[1]


def prepare_onnx(path: str | os.PathLike, devices: str | DeviceSet | None = None, costs: str = "roofline",
                 batch_size: int | None = None, training: bool = False, optimizer: str = "adam", *,
                 dims: Mapping[str, int] | None = None, device_files: Iterable[str] = (),
                 backward_factor: float = 2.0, model=None) -> tuple[OnnxGraph, Workload]:
    """:func:`onnx_workload`, also returning the loaded :class:`OnnxGraph` (shapes, parameters)."""
    t0 = time.perf_counter()
    ds = devices if isinstance(devices, DeviceSet) else parse_devices(devices or DEFAULT_DEVICES,
                                                                      device_files)
    if model is None:
        g = load_onnx(path, batch_size=batch_size, dims=dims)
    else:  # a model with external weights is costly to read twice
        external = any(t.data_location == 1 for t in model.graph.initializer)
        g = parse_model(model, source=os.fspath(path), batch_size=batch_size, dims=dims,
                        external_data=external)
    return g, graph_workload(g, ds, costs, training, optimizer, backward_factor=backward_factor, t0=t0)


def graph_workload(g: OnnxGraph, devices: DeviceSet, costs: str = "roofline", training: bool = False,
                   optimizer: str = "adam", *, backward_factor: float = 2.0,
                   t0: float | None = None) -> Workload:
    """The costed :class:`Workload` of a loaded model (:func:`prepare_onnx` after loading; an
    in-memory model parsed with :func:`graphs.onnx_loader.parse_model` goes through here too)."""
    t1 = time.perf_counter()
    t0 = t1 if t0 is None else t0
    c = compute_costs(g, devices, costs or "roofline")
    t2 = time.perf_counter()
    graph = build_opgraph(g, c, training=training, optimizer=optimizer, backward_factor=backward_factor,
                          devices=str(devices))
    t3 = time.perf_counter()
    graph.meta["timings"] = {"load_s": t1 - t0, "costs_s": t2 - t1, "build_s": t3 - t2}
    graph.meta["peak_flops"] = {s.name: peak_rates(s) for s in devices.specs}  # for MFU (graphs.mfu)
    return Workload(graph, devices.cluster())


def _name_parts(op) -> list[str]:
    """The operator's hierarchy, outermost first: the exporter's module path where it records one
    (``torch.onnx``'s name scopes), else the components of the first hierarchical name among the
    operator's own, its outputs' and its parameters' (``inception_3a/1x1_w_0`` -> ``["inception_3a",
    "1x1_w_0"]``). An index stays with its container (``/blocks.0/ln2`` -> ``["blocks.0", "ln2"]``):
    ``blocks.0`` and ``blocks.1`` are two layers, not one called ``blocks``."""
    if op.scope:
        return list(op.scope) + [op.name]
    for name in [op.name] + [t.name for t in op.outputs] + [t.name for t in op.params]:
        parts: list[str] = []
        for p in name.replace(".", "/").split("/"):
            if not p:
                continue
            if p.isdigit() and parts:
                parts[-1] = f"{parts[-1]}.{p}"
            else:
                parts.append(p)
        if len(parts) >= 2:
            return parts
    return []


def _keys_at(parts: list[list[str]], members: list[int], depth: int, keys: list[str | None]) -> None:
    """Layer keys of ``members``: descend while they share one component, or into the component that
    holds most of them (a model wrapper such as ``model`` around ``model.layers.0``..., beside a small
    ``lm_head``); the components at the depth where they divide are the layers."""
    deeper = [i for i in members if len(parts[i]) > depth + 1]
    groups: dict[str, list[int]] = {}
    for i in deeper:
        groups.setdefault(parts[i][depth], []).append(i)
    if not groups:
        return
    big = max(groups, key=lambda k: len(groups[k]))
    splits_below = len({parts[i][depth + 1] for i in groups[big] if len(parts[i]) > depth + 2}) > 1
    if (len(groups) == 1 or 2 * len(groups[big]) > len(members)) and splits_below:
        for k, g in groups.items():
            if k != big:
                for i in g:
                    keys[i] = _key(parts[i], depth)
        _keys_at(parts, groups[big], depth + 1, keys)
        return
    for i in deeper:
        keys[i] = _key(parts[i], depth)


def _key(parts: list[str], depth: int) -> str:
    """The name of the layer at ``depth``: an exporter's module path is already whole
    (``model.layers.0`` inside ``model``), a name's components are joined (``gpu_0/res2_0``)."""
    if depth and parts[depth].startswith(parts[depth - 1] + "."):
        return parts[depth]
    return "/".join(parts[:depth + 1])


def layer_keys(g: OnnxGraph) -> tuple[str | None, ...]:
    """The layer of every operator: the component of its hierarchy (:func:`_name_parts`) at the depth
    where the operators divide (``gpu_0/res2_0/conv`` -> ``gpu_0/res2_0``); an operator without one (an
    activation, say) joins the layer of a predecessor that has one. ``None`` everywhere when the names
    show no layers."""
    parts = [_name_parts(op) for op in g.ops]
    keys: list[str | None] = [None] * len(parts)
    _keys_at(parts, [i for i, p in enumerate(parts) if p], 0, keys)
    if len({k for k in keys if k is not None}) <= 1:
        return (None,) * len(keys)  # one common prefix says nothing about layers
    preds: list[list[int]] = [[] for _ in keys]
    for a, b in zip(np.asarray(g.src).tolist(), np.asarray(g.dst).tolist()):
        preds[b].append(a)
    for i in np.argsort([op.position for op in g.ops], kind="stable").tolist():  # file order
        if keys[i] is None:
            keys[i] = next((keys[p] for p in preds[i] if keys[p] is not None), None)
    return tuple(keys)


#: what an inference graph's memory per operator counts (``meta["memory_model"]``)
INFERENCE_MEMORY = "parameters + outputs"


def build_opgraph(g: OnnxGraph, costs: Costs, *, training: bool = False, optimizer: str = "adam",
                  backward_factor: float = 2.0, devices: str = "") -> OpGraph:
    """The :class:`OpGraph` of a loaded model with the given cost rows (and its backward pass)."""
    ops = g.ops
    params = np.array([op.param_bytes for op in ops], dtype=np.float64)
    outputs = np.array([op.output_bytes for op in ops], dtype=np.float64)
    meta = {
        "format": "onnx", "unit": "ms", "costs": costs.model, "devices": devices,
        "batch_size": g.batch_size, "per_run": g.per_run, "parameters": g.parameters,
        "opset": g.opset,
        "op_type": tuple(op.op_type for op in ops),
        "flops": tuple(op_flops(op)[0] for op in ops),
        "half": tuple(half_precision(op) for op in ops),
        "output_bytes": tuple(op.output_bytes for op in ops),
        "param_bytes": tuple(int(b) for b in params),
        "layer": layer_keys(g),
        "warnings": tuple(g.warnings) + tuple(costs.warnings),
    }
    if costs.measured is not None:  # what a result records to score the plan on these times again
        meta["measured"] = costs.measured
    if not training:  # the one memory model of inference, for every command and batch size
        meta["memory_model"] = INFERENCE_MEMORY
    graph = OpGraph.build(names=g.names, kinds=costs.kinds, compute=costs.compute, comm=costs.comm,
                          memory=params if training else params + outputs,
                          edges=np.stack([g.src, g.dst], axis=1), source=g.source, meta=meta)
    if not training:
        return graph
    return derive_training(
        graph, param_bytes=params,
        trainable_bytes=np.array([op.trainable_bytes for op in ops], dtype=np.float64),
        activation_bytes=outputs,
        backward_compute=costs.backward, backward_factor=backward_factor, optimizer=optimizer)


# --------------------------------------------------------------------------- reference format
def reference_document(graph: OpGraph, cluster: Cluster, *, annotate: bool = True) -> dict:
    """The graph and cluster in the reference JSON format: the cluster's one communication-paying kind
    is the accelerator, its host kind the CPU. Node ids are node indices; ``name`` (and, with
    ``annotate``, ``opType``, ``flops``, ``outputBytes``, ``paramBytes``) are extra fields; top-level
    ``batch_size`` is the samples of one run the times are for (:attr:`OpGraph.batch_size`)."""
    accel = [k for k in cluster.kinds if k.pays_communication]
    host = [k for k in cluster.kinds if not k.pays_communication]
    if len(accel) > 1 or len(host) > 1:
        raise InputError(f"the reference format has one accelerator kind and one CPU kind; this cluster "
                         f"has {', '.join(k.name for k in cluster.kinds)}: keep at most one of each")
    a = accel[0] if accel else None
    h = host[0] if host else None
    ia = graph.kind_index(a.name) if a else None
    ih = graph.kind_index(h.name) if h else None
    meta = graph.meta
    n = graph.num_nodes
    nodes = []
    for i in range(n):
        fpga = float(graph.compute[ia, i]) if ia is not None else math.inf
        cpu = float(graph.compute[ih, i]) if ih is not None else 0.0
        nd = {"id": i, "name": graph.names[i], "supportedOnFpga": int(math.isfinite(fpga)),
              "cpuLatency": cpu if math.isfinite(cpu) else 1e30,
              "fpgaLatency": fpga if math.isfinite(fpga) else 0.0, "size": float(graph.memory[i])}
        if graph.is_training:
            nd["isBackwardNode"] = int(graph.backward[i])
            nd["colorClass"] = int(graph.colocation[i])
        if annotate and "op_type" in meta:
            j = i % len(meta["op_type"])  # a backward twin repeats its forward node's annotations
            nd.update(opType=meta["op_type"][j], flops=meta["flops"][j], outputBytes=meta["output_bytes"][j],
                      paramBytes=meta["param_bytes"][j])
        nodes.append(nd)
    comm_row = graph.comm[ia] if ia is not None else np.zeros(n)
    edges = [{"sourceId": int(s), "destId": int(d), "cost": float(comm_row[s])}
             for s, d in zip(graph.src.tolist(), graph.dst.tolist())]
    return {
        "maxSizePerFPGA": a.memory if a is not None and a.memory is not None else 1e30,
        "maxFPGAs": a.count if a else 0, "maxCPUs": h.count if h else 0,
        "nodes": nodes, "edges": edges,
        "source": graph.source, "unit": meta.get("unit", "ms"), "costModel": meta.get("costs"),
        "accelerator": a.name if a else None, "cpu": h.name if h else None,
        # the times are per run of this batch: the reader gives the graph it again (graphs.reference)
        "batch_size": graph.batch_size,
    }


# --------------------------------------------------------------------------- inspect
def describe(g: OnnxGraph, graph: OpGraph | None = None, *, top: int = 8, show_warnings: bool = True) -> str:
    """A summary of a loaded model: operators by type, parameters, FLOPs, largest tensors, warnings,
    and (given the costed graph) the compute time per device kind."""
    flops = [op_flops(op)[0] for op in g.ops]
    batch = "fixed input shape: figures per run" if g.per_run else f"batch {g.batch_size}"
    lines = [f"model: {g.source or g.graph_name}  (opset {g.opset}"
             + (f", {g.producer}" if g.producer else "") + f", {batch})"]
    ins = ", ".join(f"{t.name} {list(t.shape) if t.shape is not None else '?'} {t.dtype}" for t in g.inputs)
    lines.append(f"inputs: {ins}")
    lines.append(f"operators: {g.num_ops}, edges: {len(g.src)}")
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in g.op_types().most_common()))
    size = human_bytes(g.parameter_bytes)
    lines.append(f"parameters: {g.parameters:,} ({g.parameters / 1e6:.2f} M, {size}), "
                 f"trainable {g.trainable_parameters:,}")
    if g.shared:  # what the count and the memory do with them (OnnxGraph's doc)
        n, most = len(g.shared), max(r for _, r in g.shared.values())
        elements = sum(e for e, _ in g.shared.values())
        lines.append(f"  shared: {n} tensor{'s' if n > 1 else ''} ({elements:,} parameters) read by "
                     f"{'2' if most == 2 else f'2 to {most}'} operators each (tied weights, or equal "
                     f"tensors the exporter stored once): counted once here, in the memory of every "
                     f"operator that reads {'them' if n > 1 else 'it'}")
    training = graph is not None and graph.is_training
    lines.append(f"FLOPs: {sum(flops) / 1e9:.3f} G per run" + (" (the forward pass)" if training else ""))
    heavy = sorted(range(g.num_ops), key=lambda i: -flops[i])[:top]
    lines.append("heaviest operators:")
    lines += [f"  {g.ops[i].name:<32} {g.ops[i].op_type:<20} {flops[i] / 1e9:9.3f} GFLOPs" for i in heavy]
    tensors = sorted(((t.nbytes or 0, t, op) for op in g.ops for t in op.outputs), key=lambda x: -x[0])
    lines.append("largest tensors:")
    lines += [f"  {t.name:<32} {str(list(t.shape)):<24} {t.dtype:<8} {human_bytes(nb):>10}  from {op.name}"
              for nb, t, op in tensors[:top]]
    if graph is not None:
        what = ", forward and backward" if training else ""
        lines.append(f"compute per device kind ({graph.meta.get('costs')}, ms per run{what}):")
        for t, k in enumerate(graph.kinds):
            row = graph.compute[t]
            fin = np.isfinite(row)
            extra = f", {int((~fin).sum())} op(s) unsupported" if not fin.all() else ""
            lines.append(f"  {k:<10} total {row[fin].sum():.4f} ms{extra}")
    if show_warnings:
        warns = list(g.warnings) + ([w for w in graph.meta.get("warnings", ()) if w not in g.warnings]
                                    if graph is not None else [])
        lines += [f"warning: {w}" for w in warns]
    return "\n".join(lines)
