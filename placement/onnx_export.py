"""A placement applied to its ONNX model: annotated nodes, one sub-model per stage, and a check by
execution that the stages compute what the model computes.

* :func:`annotate` returns the model with every node's ``metadata_props`` set (``placement.device``,
  ``placement.kind``, ``placement.stage``; folded constants also get ``placement.constant = "true"``)
  and the placement's summary in the model's ``metadata_props`` (``placement.result``), so that a
  compiler pass can read it; :func:`read_annotations` reads it back. Unnamed nodes are given the
  stable names the ONNX front end uses (``<OpType>_<position>``).
* :func:`split_model` cuts the model into **sub-models**, each with the cut tensors as its inputs and
  outputs, and a manifest saying which tensor flows from which sub-model to which. A contiguous
  placement gives one sub-model per stage. A placement that is not contiguous (its devices feed one
  another in a cycle, so no stage order exists) is cut further: a device's operators are grouped by
  how many times the data has left and re-entered that device on the way to them, which makes the
  sub-models' dependencies acyclic; the manifest says which device each one runs on.
* Operators the front end folded (``Constant``, weight generators such as ``ConstantOfShape`` and
  everything computed from constants only, and a ``Shape`` whose input's shape is known with what is
  computed from it: :func:`front_end_graph`) are not placed: each sub-model gets its own copy of those
  it needs. A folded ``Shape`` whose input the sub-model does not have (a stage cut between them) is
  replaced by its value at the input shape the result was placed at; where the model has symbolic input
  dimensions, the sub-model's manifest entry says which values they held (``shapes_at``) and a note
  that it runs at that shape only, and :func:`verify_split` and ``placement run`` refuse other input
  shapes by name (:func:`check_shapes_at`). A tensor-parallel stage writes its ranks' targets likewise.
* A stage plan's stage of tensor-parallel degree ``t > 1`` (:func:`split_stages`) is split ``t`` ways
  by :mod:`placement.tensor_parallel`: ``t`` rank models holding ``1/t`` of the split operators'
  weights, each cut into segments at the all-reduces and all-gathers, which the manifest entry's
  ``tensor_parallel`` lists; the operators split are those the cost model splits.
* :func:`verify_split` runs the model and the sub-models in sequence with onnxruntime on random inputs
  (with random weights substituted for generated ones, so that the check is not run on constant
  fills; a tensor-parallel rank gets its chunk of them) and returns the largest absolute difference of
  every output (a tensor-parallel stage's ranks run one after another, their collectives in between).

Results are read as written by ``placement place --out``: ``devices[*].nodes`` name the operators (the
ONNX node names); backward nodes of a training result are ignored (the sub-models are forward).
Nothing here prints; problems raise :class:`~graphs.errors.InputError`.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from graphs.errors import InputError
from graphs.onnx_loader import node_reads as _node_reads

__all__ = ["StagePlan", "SubModel", "Split", "node_placement", "replica_plan", "device_result",
           "split_stages", "annotate", "read_annotations", "plan_split",
           "split_model", "write_split", "read_split_manifest", "generated_weights", "materialize",
           "random_feeds", "verify_split", "VerifyReport", "session", "front_end_graph", "check_shapes_at"]

KEY_DEVICE, KEY_KIND, KEY_STAGE, KEY_CONSTANT, KEY_RESULT = (
    "placement.device", "placement.kind", "placement.stage", "placement.constant", "placement.result")
MANIFEST = "manifest.json"
#: 2: ``replica_devices`` lists each replica's devices, one per rank (1 listed rank 0's device of each
#: replica, the ranks' in ``tensor_parallel.rank_devices``); :func:`read_split_manifest` reads both
MANIFEST_VERSION = 2
GRAD_SUFFIX = "_grad"


# --------------------------------------------------------------------------- which node goes where
@dataclass(frozen=True)
class StagePlan:
    """Where every node of a model runs: ``device``/``stage`` per placed node name; ``constant`` holds
    the folded nodes (not placed), ``names`` the stable name of every node in file order."""

    names: tuple[str, ...]
    device: Mapping[str, str]
    kind: Mapping[str, str]
    stage: Mapping[str, int | None]
    constant: frozenset[str]
    contiguous: bool
    #: the output of every folded ``Shape`` node that is not placed (the front end folds one whose input's
    #: shape is known, :attr:`graphs.onnx_loader.OnnxGraph.shape_nodes`) and its value at ``dims``
    shapes: Mapping[str, np.ndarray] = field(default_factory=dict)
    #: the symbolic input dimensions (name -> value) those values hold
    dims: Mapping[str, int] = field(default_factory=dict)


def _stable_names(nodes) -> list[str]:
    from graphs.onnx_loader import stable_names

    return stable_names(nodes)


def _constant_nodes(graph) -> set[int]:
    """Indices of nodes computed from constants only (what the front end folds)."""
    const = {t.name for t in graph.initializer} | {t.name for t in graph.sparse_initializer}
    real_inputs = {i.name for i in graph.input} - const
    out: set[int] = set()
    for i, n in enumerate(graph.node):  # file order is topological in a valid model
        reads = _node_reads(n)
        if all(x in const for x in reads) and not (set(reads) & real_inputs) and n.op_type not in (
                "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"):
            out.add(i)
            const.update(x for x in n.output if x)
    return out


def front_end_graph(model, result: Mapping | None = None):
    """The model as the front end loads it (:func:`graphs.onnx_loader.parse_model`): at the batch size
    and symbolic dimensions ``result`` records where the model has a symbolic batch, else at its own
    shape (as it was placed). Its warnings are not logged: they were when it was placed."""
    import logging

    from graphs.onnx_batch import has_symbolic_batch
    from graphs.onnx_loader import parse_model

    from .results import recorded_input_shape

    batch, dims = recorded_input_shape(result) if result is not None else (None, None)
    log = logging.getLogger("graphs.onnx")

    def quiet(record: logging.LogRecord) -> bool:
        return False

    log.addFilter(quiet)
    try:
        return parse_model(model, batch_size=batch if has_symbolic_batch(model) else None, dims=dims or None)
    finally:
        log.removeFilter(quiet)


def node_placement(model, result: Mapping, *, source: str | None = None, graph=None) -> StagePlan:
    """Map the result's device node lists onto the model's nodes (by stable name); ``source``: the
    result's file, which an error names. A node the front end folds because it computes from a known
    shape (``graph``: :func:`front_end_graph`, loaded here when some node is not placed) needs no
    place."""
    g = model.graph
    names = _stable_names(g.node)
    constant_idx = _constant_nodes(g)
    known = set(names)
    device, kind, stage = {}, {}, {}
    unknown = []
    for d in result["devices"]:
        for nm in d["nodes"]:
            nm = str(nm)
            if nm not in known:
                if nm.endswith(GRAD_SUFFIX) or GRAD_SUFFIX in nm:
                    continue  # a backward twin of a training result
                unknown.append(nm)
                continue
            device[nm] = d["name"]
            kind[nm] = d.get("kind", "")
            stage[nm] = d.get("stage")
    missing = [nm for i, nm in enumerate(names) if i not in constant_idx and nm not in device]
    shapes: dict[str, np.ndarray] = {}
    if missing:
        graph = front_end_graph(model, result) if graph is None else graph
        missing = [nm for nm in missing if nm not in graph.shape_nodes]
        constant_idx |= {i for i, nm in enumerate(names) if nm in graph.shape_nodes}
        shapes = {n.output[0]: np.asarray(graph.values[n.output[0]]) for n, nm in zip(g.node, names)
                  if n.op_type == "Shape" and nm in graph.shape_nodes and nm not in device}
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"{len(unknown)} placed node(s) are not in the model ({', '.join(unknown[:5])}"
                         f"{' ...' if len(unknown) > 5 else ''})")
        if missing:
            parts.append(f"{len(missing)} operator(s) of the model are not placed ({', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''})")
        raise InputError("the result does not match the model: " + "; ".join(parts)
                         + " (was the result computed for this model?)", source=source)
    constant = frozenset(names[i] for i in constant_idx if names[i] not in device)
    contiguous = bool(result.get("contiguous", True)) and all(s is not None for s in stage.values())
    return StagePlan(tuple(names), device, kind, stage, constant, contiguous, shapes,
                     dict(graph.dims) if shapes else {})


# --------------------------------------------------------------------------- stage plans (replicas)
def replica_plan(data: Mapping) -> list[dict]:
    """The stages of a stage plan's result (validated): ``[{"nodes", "d", "t", "kind", "devices"}]`` in
    pipeline order. A stage's ``nodes`` are its ``operators`` where the result lists them (an ONNX
    result's nodes may be layer keys, its operators are the model's node names), else its ``nodes``;
    ``devices`` name its ``d * t`` devices (replica ``r`` holds devices ``r*t`` .. ``r*t+t-1``, its
    tensor-parallel ranks): the result's own where it lists them, else numbered per kind across the
    stages in pipeline order (``kind:index``)."""
    stages = data.get("stages") if isinstance(data, Mapping) else None
    if not isinstance(stages, list) or not stages:
        raise InputError("a stage plan needs a non-empty 'stages' list")
    from .results import check_stage_plan_file

    check_stage_plan_file(data)  # its problem section and devices lists, as evaluate reads them
    out, nxt = [], {}
    for i, s in enumerate(stages):
        where = f"stages[{i}]"
        if not isinstance(s, Mapping) or not isinstance(s.get("nodes"), list) or not s["nodes"]:
            raise InputError(f"{where} needs a non-empty 'nodes' list")
        d, t = s.get("dataParallelDegree", 1), s.get("tensorParallelDegree", 1)
        for name, v in (("dataParallelDegree", d), ("tensorParallelDegree", t)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{where}: {name} must be a positive integer, got {v!r}")
        ops = s.get("operators")
        names = ops if isinstance(ops, list) and ops else s["nodes"]
        kind = str(s.get("kind") or "cpu")
        given = s.get("devices")
        if isinstance(given, list) and len(given) == d * t and all(isinstance(x, str) for x in given):
            devices = list(given)
        else:
            devices = [f"{kind}:{nxt.get(kind, 0) + r}" for r in range(d * t)]
        nxt[kind] = nxt.get(kind, 0) + d * t
        out.append({"nodes": [str(x) for x in names], "d": d, "t": t, "kind": kind, "devices": devices})
    return out


def _group_name(devices: list[str]) -> str:
    """``a100:0-3`` for ``a100:0`` .. ``a100:3`` (as the stage table names a stage's devices)."""
    if len(devices) == 1:
        return devices[0]
    kind, _, first = devices[0].rpartition(":")
    _, _, last = devices[-1].rpartition(":")
    numbers = [x.rpartition(":") for x in devices]
    if first.isdigit() and last.isdigit() and all(k == kind for k, _, _ in numbers) and \
            [n for _, _, n in numbers] == [str(j) for j in range(int(first), int(last) + 1)]:
        return f"{kind}:{first}-{last}"
    return ",".join(devices)


def device_result(data: Mapping) -> dict:
    """A stage plan's result as a placement result with one row per stage (named by its devices,
    ``a100:0-3``), as :func:`split_model` and :func:`annotate` read it."""
    from .results import recorded_input_shape

    devices = [{"device": i, "name": _group_name(s["devices"]), "kind": s["kind"], "stage": i,
                "nodes": s["nodes"]} for i, s in enumerate(replica_plan(data))]
    out = {"schema": "placement-result", "version": 1, "contiguous": True,
           "stage_order": [d["name"] for d in devices], "devices": devices}
    batch, dims = recorded_input_shape(data)
    if dims is not None:  # the input shape the plan was made at, as a one-device-per-stage result says it
        out["frontend"] = {"batch_size": batch, "dims": dims}
    return out


def split_stages(model, data: Mapping, *, source: str | None = None) -> Split:
    """:func:`split_model` of a stage plan: one sub-model per stage, listing each replica's devices, one
    per tensor-parallel rank (``Split.replica_devices``; the manifest's ``replicas`` and
    ``replica_devices``). A stage of
    tensor-parallel degree ``t > 1`` is split ``t`` ways (:mod:`placement.tensor_parallel`): its
    :class:`SubModel` has ``tp`` set, and its ``model`` is ``tp.ranks`` (rank by segment). The result
    lists its stages in pipeline order, and sub-model ``k`` is the ``k``-th stage it lists: stages whose
    data flows against the order they are listed in (or leaves a stage and comes back to it) raise
    :class:`InputError` naming them."""
    import dataclasses

    stages = replica_plan(data)
    graph = front_end_graph(model, data) if any(s["t"] > 1 for s in stages) else None
    split = split_model(model, device_result(data), source=source, graph=graph)
    _refuse_out_of_order(split, stages, source)
    if graph is not None:
        from .tensor_parallel import split_layout, tensor_parallel_stage

        layout = split_layout(model, graph)
        subs, notes = [], list(split.notes)
        for s in split.submodels:
            t = stages[s.stage]["t"]
            if t > 1:
                tp = tensor_parallel_stage(model, s, t, layout, stage=s.stage)
                if tp.shapes_at and not s.shapes_at:
                    notes.append(_shapes_note(f"stage {s.stage}", tp.shapes_at))
                s = dataclasses.replace(s, model=tp.ranks, tp=tp, shapes_at=s.shapes_at or tp.shapes_at)
                if not tp.split_operators:
                    notes.append(f"stage {s.stage} has tensor-parallel degree {t} but the split rule "
                                 f"divides none of its operators (no layer with two weighted matrix "
                                 f"products): each of its {t} ranks runs the whole stage")
            subs.append(s)
        split = dataclasses.replace(split, submodels=tuple(subs), notes=tuple(notes))
    reps = []
    for s in split.submodels:
        st = stages[s.stage]
        reps.append(tuple(tuple(st["devices"][q * st["t"]:(q + 1) * st["t"]]) for q in range(st["d"])))
    return dataclasses.replace(split, replica_devices=tuple(reps))


def _refuse_out_of_order(split: Split, stages: list[dict], source: str | None) -> None:
    """A stage plan's cut runs its stages in the order its data flows through them (:func:`plan_split`),
    which must be the order the result lists them in: the stage plan's order, by which ``split``
    numbers its files and ``run`` lines its prediction up with its rows."""
    order = [s.stage for s in split.submodels]
    if all(a < b for a, b in zip(order, order[1:])):
        return
    name = {k: f"stages[{k}] ({_group_name(st['devices'])})" for k, st in enumerate(stages)}
    again = [k for k in dict.fromkeys(order) if order.count(k) > 1]
    if again:
        raise InputError(f"{name[again[0]]} is not one stage of a pipeline: the data leaves it and comes "
                         f"back ({order.count(again[0])} parts); a stage's nodes must take the data from "
                         f"the stages listed before it and pass it on to those listed after", source=source)
    flow = " -> ".join(name[k] for k in order)
    raise InputError(f"the stages are not listed in pipeline order: the data flows {flow}; a stage plan "
                     f"lists its 'stages' in pipeline order, each after every stage it receives from",
                     source=source)


# --------------------------------------------------------------------------- annotation
def annotate(model, result: Mapping):
    """A copy of ``model`` with the placement in its nodes' ``metadata_props`` (see the module doc). A
    stage plan's node is annotated with its stage's devices (``a100:0-3``), and the summary lists the
    stages (kind, degrees, devices). The summary also records the input shape the plan was placed at
    (``frontend``: ``batch_size`` and ``dims``, where the result records them), which a split from the
    annotations needs: a stage holding values computed from the model's shapes holds them at that shape."""
    from .results import is_stage_result, recorded_input_shape

    batch, dims = recorded_input_shape(result)
    stage_rows = None
    if is_stage_result(result):
        stage_rows = [{"kind": s.get("kind"), "dataParallelDegree": s.get("dataParallelDegree", 1),
                       "tensorParallelDegree": s.get("tensorParallelDegree", 1), "devices": r["devices"]}
                      for s, r in zip(result["stages"], replica_plan(result))]
        result = {**{k: result.get(k) for k in ("solver", "status", "objective", "max_load", "time_unit")},
                  **device_result(result)}
    plan = node_placement(model, result)
    m = type(model)()
    m.CopyFrom(model)
    consumers = _consumers(m.graph, plan.names)
    first_user = _constant_owner(m.graph, plan, consumers)
    for node, name in zip(m.graph.node, plan.names):
        node.name = name
        _drop_props(node.metadata_props)
        if name in plan.device:
            dev, stg, const = plan.device[name], plan.stage[name], False
        else:
            (dev, stg), const = first_user.get(name, (None, None)), True
        if dev is not None:
            _prop(node.metadata_props, KEY_DEVICE, dev)
            kinds = {d["name"]: d.get("kind", "") for d in result["devices"]}
            _prop(node.metadata_props, KEY_KIND, kinds.get(dev, ""))
        if stg is not None:
            _prop(node.metadata_props, KEY_STAGE, str(stg))
        if const:
            _prop(node.metadata_props, KEY_CONSTANT, "true")
    summary = {k: result.get(k) for k in ("solver", "status", "objective", "max_load", "contiguous",
                                          "stage_order")}
    summary["workload"] = result.get("workload") or result.get("source")  # source: older files' name
    summary["devices"] = [{k: d.get(k) for k in ("name", "kind", "stage", "load", "memory")}
                          for d in result["devices"]]
    if stage_rows is not None:
        summary.update(model="stages", time_unit=result.get("time_unit"), stages=stage_rows)
    if dims is not None:  # a result that records no input shape (older or hand-written): nothing to carry
        summary["frontend"] = {"batch_size": batch, "dims": dims}
    _drop_props(m.metadata_props, KEY_RESULT)
    _prop(m.metadata_props, KEY_RESULT, json.dumps(summary))
    return m


def _drop_props(props, key: str | None = None) -> None:
    def ours(k: str) -> bool:
        return k.startswith("placement.") if key is None else k == key

    keep = [(p.key, p.value) for p in props if not ours(p.key)]
    del props[:]
    for k, v in keep:
        _prop(props, k, v)


def _prop(props, key: str, value: str) -> None:
    e = props.add()
    e.key, e.value = key, value


def read_annotations(model) -> dict[str, dict[str, str]]:
    """``{node name: {"device", "kind", "stage", "constant"}}`` for every annotated node."""
    out = {}
    short = {KEY_DEVICE: "device", KEY_KIND: "kind", KEY_STAGE: "stage", KEY_CONSTANT: "constant"}
    for node in model.graph.node:
        props = {short[p.key]: p.value for p in node.metadata_props if p.key in short}
        if props:
            out[node.name] = props
    return out


def _consumers(graph, names) -> dict[str, list[int]]:
    """tensor name -> indices of the nodes reading it."""
    out: dict[str, list[int]] = {}
    for i, n in enumerate(graph.node):
        for x in set(_node_reads(n)):
            out.setdefault(x, []).append(i)
    return out


def _constant_owner(graph, plan: StagePlan, consumers) -> dict[str, tuple[str, int | None]]:
    """For a folded node: the device and stage of the earliest-stage placed node that (through other
    folded nodes) reads it."""
    owner: dict[str, tuple[str, int | None]] = {}
    for i in reversed(range(len(graph.node))):
        name = plan.names[i]
        if name not in plan.constant:
            continue
        best = None
        for x in graph.node[i].output:
            for j in consumers.get(x, ()):
                nm = plan.names[j]
                cand = (plan.device[nm], plan.stage[nm]) if nm in plan.device else owner.get(nm)
                if cand is not None and (best is None or (cand[1] or 0) < (best[1] or 0)):
                    best = cand
        if best is not None:
            owner[name] = best
    return owner


# --------------------------------------------------------------------------- splitting
@dataclass(frozen=True)
class SubModel:
    """One sub-model: its index in run order, the device it runs on, its model, and the tensors it
    takes and gives."""

    index: int
    device: str
    kind: str
    stage: int | None
    part: int  # 0 unless a non-contiguous device was cut into several sub-models
    model: object  # onnx.ModelProto
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[str, ...]  # placed nodes (folded constants it copies are not listed)
    #: a tensor-parallel stage's ranks (then ``model`` is ``tp.ranks``: rank by segment); ``None``: t = 1
    tp: object = None
    #: the symbolic input dimensions (name -> value) at which it holds values computed from the model's
    #: shapes (a folded ``Shape`` it replaced by its value); ``None``: none, it runs at any
    shapes_at: Mapping[str, int] | None = None

    @property
    def label(self) -> str:
        return f"{self.device}" + (f"/{self.part}" if self.part else "")


@dataclass(frozen=True)
class Split:
    """The sub-models in run order and the flow of tensors between them."""

    submodels: tuple[SubModel, ...]
    inputs: tuple[str, ...]  # the model's inputs
    outputs: tuple[str, ...]  # the model's outputs
    flows: tuple[dict, ...]  # {"tensor", "from": index or "input", "to": [index or "output"]}
    contiguous: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: per sub-model, per replica (a stage plan's ``d``), its devices in rank order (``t`` each); ``None``:
    #: one device per sub-model
    replica_devices: tuple[tuple[tuple[str, ...], ...], ...] | None = None

    def manifest(self, files: list | None = None) -> dict:
        """The manifest (see :func:`write_split`); ``files``: each sub-model's file name, for a
        tensor-parallel one its file names rank by segment."""
        subs = []
        for k, s in enumerate(self.submodels):
            entry = {"index": s.index, "device": s.device, "kind": s.kind, "stage": s.stage, "part": s.part,
                     "inputs": list(s.inputs), "outputs": list(s.outputs), "nodes": len(s.nodes)}
            if files is not None and s.tp is None:
                entry["file"] = files[k]
            if self.replica_devices is not None:
                entry["replicas"] = len(self.replica_devices[k])
                entry["replica_devices"] = [list(devices) for devices in self.replica_devices[k]]
            if s.tp is not None:
                entry["tensor_parallel"] = s.tp.manifest(files[k] if files is not None else None)
            if s.shapes_at:
                entry["shapes_at"] = dict(s.shapes_at)
            subs.append(entry)
        out = {"schema": "placement-split", "version": MANIFEST_VERSION, "contiguous": self.contiguous,
               "inputs": list(self.inputs), "outputs": list(self.outputs), "submodels": subs,
               "flows": list(self.flows), "notes": list(self.notes)}
        if self.replica_devices is not None:
            out["replicated"] = True
        return out


def plan_split(model, plan: StagePlan) -> list[tuple[str, int, list[int]]]:
    """Group the placed nodes into sub-models: ``[(device, part, node indices)]`` in run order."""
    g = model.graph
    placed = [i for i, nm in enumerate(plan.names) if nm in plan.device]
    producer = {}
    for i, n in enumerate(g.node):
        for x in n.output:
            if x:
                producer[x] = i
    if plan.contiguous:
        order = {}
        for i in placed:
            nm = plan.names[i]
            order.setdefault((plan.stage[nm], plan.device[nm]), []).append(i)
        groups = [(dev, 0, idx) for (_, dev), idx in sorted(order.items(), key=lambda kv: kv[0][0])]
        if _acyclic(g, plan, groups, producer):
            return groups
    # not contiguous (or the stage order contradicts the model's data flow): cut each device where the
    # data has left it and come back
    level: dict[int, int] = {}
    for i in placed:  # file order is topological
        dev = plan.device[plan.names[i]]
        lv = 0
        for x in _node_reads(g.node[i]):
            j = _placed_source(x, producer, plan, g)
            for p in j:
                pl = level[p] + (plan.device[plan.names[p]] != dev)
                lv = max(lv, pl)
        level[i] = lv
    buckets: dict[tuple[int, str], list[int]] = {}
    for i in placed:
        buckets.setdefault((level[i], plan.device[plan.names[i]]), []).append(i)
    parts: dict[str, int] = {}
    groups = []
    for (_lv, dev), idx in sorted(buckets.items()):
        groups.append((dev, parts.get(dev, 0), idx))
        parts[dev] = parts.get(dev, 0) + 1
    return groups


def _placed_source(x: str, producer, plan: StagePlan, g, _memo=None) -> list[int]:
    """The placed nodes a tensor comes from (through folded nodes: none, they are constants)."""
    i = producer.get(x)
    if i is None or plan.names[i] not in plan.device:
        return []
    return [i]


def _acyclic(g, plan: StagePlan, groups, producer) -> bool:
    """True when every tensor flows from an earlier group to a later one (or within one)."""
    group_of = {}
    for k, (_, _, idx) in enumerate(groups):
        for i in idx:
            group_of[i] = k
    for k, (_, _, idx) in enumerate(groups):
        for i in idx:
            for x in _node_reads(g.node[i]):
                for p in _placed_source(x, producer, plan, g):
                    if group_of[p] > k:
                        return False
    return True


def split_model(model, result: Mapping, *, source: str | None = None, graph=None) -> Split:
    """Cut ``model`` into sub-models as the placement ``result`` says (see the module doc); a stage
    plan's result gives one sub-model per stage with its replicas (:func:`split_stages`). ``source``:
    the result's file, which an error naming a mismatch with the model names; ``graph``: the model as
    the front end loaded it (:func:`front_end_graph`), where the caller has it."""
    import onnx

    from .results import is_stage_result

    if is_stage_result(result):
        return split_stages(model, result, source=source)
    plan = node_placement(model, result, source=source, graph=graph)
    from onnx import numpy_helper

    g = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # shape inference is a help, not a requirement
        inferred = model
    vinfo = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        vinfo[v.name] = v
    inits = {t.name: t for t in g.initializer}
    sparse = {t.name: t for t in g.sparse_initializer}
    model_inputs = [i.name for i in g.input if i.name not in inits and i.name not in sparse]
    model_outputs = [o.name for o in g.output]
    producer = {x: i for i, n in enumerate(g.node) for x in n.output if x}
    groups = plan_split(model, plan)
    kinds = {d["name"]: d.get("kind", "") for d in result["devices"]}
    stage_of_dev = {d["name"]: d.get("stage") for d in result["devices"]}

    group_of: dict[int, int] = {}
    for k, (_, _, idx) in enumerate(groups):
        for i in idx:
            group_of[i] = k
    # the folded nodes each group needs (transitively), in file order
    const_idx = {i for i, nm in enumerate(plan.names) if nm in plan.constant}

    def constants_for(idx: list[int]) -> list[int]:
        need, stack = set(), [x for i in idx for x in _node_reads(g.node[i])]
        while stack:
            x = stack.pop()
            j = producer.get(x)
            if j is not None and j in const_idx and j not in need:
                need.add(j)
                stack.extend(_node_reads(g.node[j]))
        return sorted(need)

    # which tensors cross between groups
    produced_by_group: dict[str, int] = {}
    for k, (_, _, idx) in enumerate(groups):
        for i in idx:
            for x in g.node[i].output:
                if x:
                    produced_by_group[x] = k
    readers: dict[str, set] = {}
    for k, (_, _, idx) in enumerate(groups):
        for i in idx:
            for x in _node_reads(g.node[i]):
                src = produced_by_group.get(x)
                if x in model_inputs or (src is not None and src != k):
                    readers.setdefault(x, set()).add(k)
    for x in model_outputs:
        if x in produced_by_group:
            readers.setdefault(x, set()).add("output")
    # a model output that is also a model input, or a constant, is handled by the last sub-model
    unknown_types = []

    def value_info(name: str):
        v = vinfo.get(name)
        if v is not None and v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            out = onnx.ValueInfoProto()
            out.CopyFrom(v)
            return out
        if v is not None and v.type.WhichOneof("value") is not None:
            out = onnx.ValueInfoProto()
            out.CopyFrom(v)
            return out
        unknown_types.append(name)
        return onnx.helper.make_empty_tensor_value_info(name)

    subs = []
    for k, (dev, part, idx) in enumerate(groups):
        consts = constants_for(idx)
        keep = sorted(set(idx) | set(consts))
        made = {x for i in idx for x in g.node[i].output if x}
        valued = {}  # folded Shape nodes whose input this sub-model has not: their value instead
        for i in consts:
            n = g.node[i]
            if n.op_type == "Shape" and n.output[0] in plan.shapes:
                if n.input[0] in model_inputs:  # fed anyway: its shape is read at run time, as the model's
                    readers.setdefault(n.input[0], set()).add(k)
                elif n.input[0] not in made and k not in readers.get(n.input[0], ()):
                    value = numpy_helper.from_array(plan.shapes[n.output[0]])
                    valued[i] = onnx.helper.make_node("Constant", [], [n.output[0]], value=value)
        nodes = [valued.get(i, g.node[i]) for i in keep]
        sub_inputs = [x for x in _ordered_reads(nodes, g) if x in readers and k in readers[x]]
        # a sub-model's inputs: tensors it reads that come from outside it
        sub_outputs = [x for i in idx for x in g.node[i].output
                       if x and x in readers and (readers[x] - {k})]
        used_inits = {x for n in nodes for x in _node_reads(n)}
        sg = onnx.helper.make_graph(
            nodes=[_named(n, plan.names[i]) for n, i in zip(nodes, keep)],
            name=f"{g.name or 'model'}_{dev}" + (f"_{part}" if part else ""),
            inputs=[value_info(x) for x in sub_inputs],
            outputs=[value_info(x) for x in sub_outputs],
            initializer=[inits[x] for x in inits if x in used_inits],
        )
        sg.sparse_initializer.extend(sparse[x] for x in sparse if x in used_inits)
        if model.ir_version < 4:  # before IR 4 every initializer must also be a graph input
            sg.input.extend(value_info(t.name) if t.name in vinfo else
                            onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                            for t in sg.initializer)
        m = onnx.helper.make_model(sg, opset_imports=list(model.opset_import))
        m.ir_version = model.ir_version
        m.functions.extend(model.functions)
        m.producer_name = "placement split"
        _prop(m.metadata_props, KEY_DEVICE, dev)
        if stage_of_dev.get(dev) is not None:
            _prop(m.metadata_props, KEY_STAGE, str(stage_of_dev[dev]))
        subs.append(SubModel(k, dev, kinds.get(dev, ""), stage_of_dev.get(dev), part, m, tuple(sub_inputs),
                             tuple(sub_outputs), tuple(plan.names[i] for i in idx),
                             shapes_at=dict(plan.dims) if valued and plan.dims else None))
    if unknown_types:
        raise InputError(f"cannot type the cut tensor(s) {', '.join(sorted(set(unknown_types))[:5])}: ONNX "
                         f"shape inference gave no type for them")
    missing_out = [x for x in model_outputs if x not in produced_by_group and x not in model_inputs
                   and producer.get(x) not in const_idx]
    if missing_out:
        raise InputError(f"model output(s) {', '.join(missing_out)} are produced by no placed operator")
    flows = []
    for x, who in readers.items():
        src = "input" if x in model_inputs else produced_by_group[x]
        to = sorted((w for w in who if w != "output"), key=int) + (["output"] if "output" in who else [])
        flows.append({"tensor": x, "from": src, "to": to})
    flows.sort(key=lambda f: (-1 if f["from"] == "input" else f["from"], f["tensor"]))
    notes = [_shapes_note(f"sub-model {s.index} ({s.label})", s.shapes_at) for s in subs if s.shapes_at]
    devs = [s.device for s in subs]
    cut = sorted({d for d in devs if devs.count(d) > 1})
    if cut:
        notes.append(f"the placement is not contiguous: device(s) {', '.join(cut)} were cut into several "
                     f"sub-models so that the sub-models' dependencies are acyclic")
    return Split(tuple(subs), tuple(model_inputs), tuple(model_outputs), tuple(flows), not cut, tuple(notes))


def _shapes_note(what: str, dims: Mapping[str, int]) -> str:
    at = ", ".join(f"{d}={v}" for d, v in dims.items())
    return (f"{what} holds values computed from the model's shapes at {at} (the input shape it was placed "
            f"at): it runs at that shape only")


def _named(node, name: str):
    import onnx

    n = onnx.NodeProto()
    n.CopyFrom(node)
    n.name = name
    return n


def _ordered_reads(nodes, g) -> list[str]:
    seen, out = set(), []
    for n in nodes:
        for x in _node_reads(n):
            if x not in seen:
                seen.add(x)
                out.append(x)
    return out


def write_split(split: Split, out_dir: str | os.PathLike, *, prefix: str = "stage") -> dict:
    """Write every sub-model (``<prefix><k>_<device>.onnx``; a tensor-parallel stage's rank ``r``
    segment ``j`` as ``<prefix><k>_<device>_rank<r>_seg<j>.onnx``) and ``manifest.json`` into
    ``out_dir``; return the manifest."""
    import onnx

    from .export import write_json

    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    files: list = []
    for s in split.submodels:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in s.label)
        if s.tp is None:
            fname = f"{prefix}{s.index}_{safe}.onnx"
            onnx.save_model(s.model, os.path.join(out_dir, fname))
            files.append(fname)
            continue
        names = []
        for r, segs in enumerate(s.tp.ranks):
            names.append([f"{prefix}{s.index}_{safe}_rank{r}_seg{j}.onnx" for j in range(len(segs))])
            for m, fname in zip(segs, names[-1]):
                onnx.save_model(m, os.path.join(out_dir, fname))
        files.append(names)
    manifest = split.manifest(files)
    write_json(os.path.join(out_dir, MANIFEST), manifest)
    return manifest


def read_split_manifest(out_dir: str | os.PathLike) -> tuple[dict, list]:
    """The manifest and the sub-models (``onnx.ModelProto``; for a tensor-parallel stage, its models
    rank by segment) of a folder written by :func:`write_split`."""
    import onnx

    path = os.path.join(os.fspath(out_dir), MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise InputError("no manifest.json here: not a folder written by placement split",
                         source=os.fspath(out_dir)) from None
    manifest = _current_manifest(manifest, path)

    def load(f):
        return onnx.load(os.path.join(os.fspath(out_dir), f))

    models = [tuple(tuple(load(seg["files"][r]) for seg in s["tensor_parallel"]["segments"])
                    for r in range(s["tensor_parallel"]["degree"]))
              if s.get("tensor_parallel") else load(s["file"]) for s in manifest["submodels"]]
    return manifest, models


def _current_manifest(manifest: dict, source: str) -> dict:
    """``manifest`` as this version writes it: a version 1 manifest's ``replica_devices`` (each replica's
    rank 0) become each replica's devices, from its ``tensor_parallel.rank_devices`` where it has them."""
    version = manifest.get("version")
    if version == MANIFEST_VERSION:
        return manifest
    if version != 1:
        raise InputError(f"manifest version {version!r} is not one this placement reads (1 or "
                         f"{MANIFEST_VERSION})", source=source)
    subs = []
    for s in manifest["submodels"]:
        s = dict(s)
        tp = s.get("tensor_parallel")
        ranks = tp.get("rank_devices") if tp else None
        if ranks is not None:
            s["tensor_parallel"] = {k: v for k, v in tp.items() if k != "rank_devices"}
            s["replica_devices"] = [list(r) for r in ranks]
        elif "replica_devices" in s:
            s["replica_devices"] = [[d] for d in s["replica_devices"]]
        subs.append(s)
    return {**manifest, "version": MANIFEST_VERSION, "submodels": subs}


# --------------------------------------------------------------------------- running
def generated_weights(model, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for the weights a model generates instead of storing (outputs of
    ``ConstantOfShape`` nodes whose shape is an initializer): scaled by fan-in for the weights of
    convolutions and matrix products, positive where a normalisation needs it (variances, scales)."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list[tuple[str, int, object]]] = {}
    for n in g.node:
        for slot, x in enumerate(n.input):
            consumers.setdefault(x, []).append((n.op_type, slot, n))
    out = {}
    for n in g.node:
        if n.op_type != "ConstantOfShape" or not n.input or n.input[0] not in inits:
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]).reshape(-1))
        dtype = np.float32
        for a in n.attribute:
            if a.name == "value":
                dtype = numpy_helper.to_array(a.t).dtype
        if not np.issubdtype(dtype, np.floating):
            continue
        rng = np.random.default_rng([seed, zlib.crc32(n.output[0].encode())])  # stable across runs
        uses = consumers.get(n.output[0], [])
        out[n.output[0]] = _random_weight(shape, uses, rng).astype(dtype)
    return out


def _random_weight(shape, uses, rng) -> np.ndarray:
    positive = any(op in ("BatchNormalization", "InstanceNormalization", "LayerNormalization")
                   and slot in (1, 4) for op, slot, _ in uses)
    if positive:
        return rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    if len(shape) >= 2:
        fan_in = int(np.prod(shape[1:]))
        for op, slot, node in uses:
            if op == "Gemm" and slot == 1:
                tb = next((a.i for a in node.attribute if a.name == "transB"), 0)
                fan_in = shape[1] if tb else shape[0]
            elif op == "MatMul" and slot == 1:
                fan_in = shape[-2]
        return rng.standard_normal(shape, dtype=np.float32) / np.float32(math.sqrt(max(fan_in, 1)))
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)


def materialize(model, weights: Mapping[str, np.ndarray]):
    """A copy of ``model`` in which the nodes that generate the given tensors are replaced by
    initializers holding ``weights`` (tensors this model does not generate are ignored)."""
    from onnx import numpy_helper

    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    keep = []
    added = []
    for n in g.node:
        outs = [x for x in n.output if x]
        if outs and all(x in weights for x in outs):
            added.extend(outs)
            continue
        keep.append(n)
    if not added:
        return m
    del g.node[:]
    g.node.extend(keep)
    for x in added:
        g.initializer.append(numpy_helper.from_array(np.asarray(weights[x]), x))
    return m


def session(model, *, threads: int = 1, optimize: bool = True):
    """An onnxruntime CPU session for ``model`` (a ModelProto or serialised bytes)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


_ORT_NUMPY = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_, "tensor(int16)": np.int16}


def random_feeds(model, sess=None, *, seed: int = 0, dims: Mapping[str, int] | None = None,
                 batch_size: int = 1) -> dict[str, np.ndarray]:
    """Random inputs for a model: normal floats; integers in a range every ``Gather`` reading them
    accepts as indices (else 0..1); symbolic dimensions from ``dims``, a leading one = ``batch_size``,
    others 1."""
    from onnx import numpy_helper

    sess = sess or session(model)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    vinfo = {v.name: v for v in list(g.value_info) + list(g.input)}
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = []
        for k, d in enumerate(i.shape):
            if isinstance(d, int) and d >= 0:
                shape.append(d)
            elif dims and isinstance(d, str) and d in dims:
                shape.append(int(dims[d]))
            else:
                shape.append(batch_size if k == 0 else 1)
        dt = _ORT_NUMPY.get(i.type)
        if dt is None:
            raise InputError(f"cannot make a random input for {i.name!r} of type {i.type}")
        if np.issubdtype(dt, np.floating):
            feeds[i.name] = rng.standard_normal(shape).astype(dt)
        elif dt is np.bool_:
            feeds[i.name] = np.ones(shape, dtype=dt)
        else:
            high = 2
            bounds = []
            for n in g.node:
                if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == i.name:
                    data = n.input[0]
                    if data in inits:
                        bounds.append(int(numpy_helper.to_array(inits[data]).shape[0]))
                    elif data in vinfo:
                        d0 = vinfo[data].type.tensor_type.shape.dim
                        if d0 and d0[0].HasField("dim_value"):
                            bounds.append(int(d0[0].dim_value))
            if bounds:
                high = max(1, min(bounds))
            feeds[i.name] = rng.integers(0, high, size=shape).astype(dt)
    return feeds


def check_shapes_at(model, manifest: Mapping, feeds: Mapping[str, np.ndarray]) -> None:
    """Raise :class:`InputError` where ``feeds`` (the whole model's inputs) give a symbolic input
    dimension another value than a sub-model of ``manifest`` holds the model's shapes at (its
    ``shapes_at``: it replaced a folded ``Shape`` by its value, or wrote a rank's target shape from one)."""
    fed: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name in feeds and vi.type.HasField("tensor_type"):
            for k, d in enumerate(vi.type.tensor_type.shape.dim):
                if d.dim_param and k < np.ndim(feeds[vi.name]):
                    fed.setdefault(d.dim_param, int(np.shape(feeds[vi.name])[k]))
    for s in manifest["submodels"]:
        at = s.get("shapes_at") or {}
        other = {d: v for d, v in at.items() if d in fed and fed[d] != v}
        if other:
            was = ", ".join(f"{d}={v}" for d, v in at.items())
            now = ", ".join(f"{d}={fed[d]}" for d in other)
            raise InputError(f"sub-model {s['index']} ({s['device']}) holds values computed from the model's "
                             f"shapes at {was} (a Shape the front end folded at the placed input shape), "
                             f"so it runs at that shape only, not at {now}: run or verify at the batch size "
                             f"and dimensions the result was placed at")


@dataclass(frozen=True)
class VerifyReport:
    """Largest absolute difference of every model output between the whole model and its stages, and
    of every cut tensor (whose check is relative: ``tolerance`` times the tensor's largest magnitude,
    at least 1, since onnxruntime may fuse operators differently on either side of a cut)."""

    max_abs_diff: Mapping[str, float]
    max_abs_value: Mapping[str, float]
    tolerance: float
    materialized: int  # generated weights replaced by random values
    cut_max_abs_diff: Mapping[str, float] = field(default_factory=dict)
    cut_max_abs_value: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (all(d <= self.tolerance for d in self.max_abs_diff.values())
                and all(d <= self.tolerance * max(1.0, self.cut_max_abs_value.get(x, 0.0))
                        for x, d in self.cut_max_abs_diff.items()))

    @property
    def worst(self) -> float:
        return max(self.max_abs_diff.values(), default=0.0)


def run_split(models, manifest: dict, feeds: Mapping[str, np.ndarray], *, sessions=None,
              keep: list[str] = ()) -> dict:
    """Run the sub-models in order on ``feeds``; return every model output (and the tensors ``keep``)."""
    env = dict(feeds)
    for k, (m, s) in enumerate(zip(models, manifest["submodels"])):
        sess = sessions[k] if sessions is not None else session(m)
        names = [o.name for o in sess.get_outputs()]
        vals = sess.run(names, {x: env[x] for x in s["inputs"]})
        env.update(zip(names, vals))
    return {x: env[x] for x in list(manifest["outputs"]) + list(keep)}


def _weights_as_inputs(model, weights: Mapping[str, np.ndarray]):
    """A copy of ``model`` in which the nodes that generate the given tensors are removed and the tensors
    become graph inputs (fed at run time), and the names of those inputs. Unlike :func:`materialize`,
    neither the model nor onnxruntime's session copies the weights: a CPU session reads the arrays it is
    fed in place."""
    from onnx import helper

    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    keep, added = [], []
    for n in g.node:
        outs = [x for x in n.output if x]
        if outs and all(x in weights for x in outs):
            added.extend(outs)
        else:
            keep.append(n)
    if added:
        del g.node[:]
        g.node.extend(keep)
        for x in added:
            w = np.asarray(weights[x])
            g.input.append(helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(w.dtype),
                                                         list(w.shape)))
    return m, added


def _stage_outputs(part, s: Mapping) -> list:
    """The value infos of a sub-model's outputs (``part``: its model and weights, for a tensor-parallel
    stage rank by segment; the types of those a collective makes are its inputs')."""
    from onnx import helper

    if not s.get("tensor_parallel"):
        return list(part[0].graph.output)
    types = {v.name: v.type for segs in part[:1] for m, _ in segs for v in m.graph.output}
    for c in s["tensor_parallel"]["collectives"]:
        if c["input"] in types:
            types.setdefault(c["output"], types[c["input"]])
    out = []
    for x in s["outputs"]:
        if x in types:
            tt = types[x].tensor_type
            out.append(helper.make_tensor_value_info(x, tt.elem_type, [None] * len(tt.shape.dim)))
    return out


class _InputsBut:
    """A session's inputs without some (for :func:`random_feeds`: the weights, which are fed as given)."""

    def __init__(self, sess, skip):
        self.sess, self.skip = sess, skip

    def get_inputs(self):
        return [i for i in self.sess.get_inputs() if i.name not in self.skip]


def verify_split(model, models, manifest: dict, *, tolerance: float = 1e-4, seed: int = 0,
                 optimize: bool = True, dims: Mapping[str, int] | None = None,
                 batch_size: int = 1) -> VerifyReport:
    """Run ``model`` and its sub-models ``models`` (as listed in ``manifest``) on the same random
    inputs, with the same random values for generated weights, and compare every output.

    Memory: the generated weights exist once, as arrays fed to the sessions (not as initializers copied
    into each model and each session), and one session is alive at a time."""
    from .tensor_parallel import rank_weights, run_stage

    weights = generated_weights(model, seed=seed)
    whole, whole_weights = _weights_as_inputs(model, weights)
    parts = []
    for m, s in zip(models, manifest["submodels"]):
        tp = s.get("tensor_parallel")
        parts.append([[_weights_as_inputs(seg, rank_weights(weights, tp, r)) for seg in segs]
                      for r, segs in enumerate(m)] if tp else _weights_as_inputs(m, weights))
    # the cut tensors become extra outputs of the whole model, so that they are compared too (a model
    # output can hide differences: a softmax over many classes is nearly uniform on random weights)
    outputs = set(manifest["outputs"])
    cut = {}
    for part, s in zip(parts, manifest["submodels"]):
        for v in _stage_outputs(part, s):
            if v.name not in outputs and v.name not in cut:
                cut[v.name] = v
    whole.graph.output.extend(cut.values())
    try:
        sess = session(whole, optimize=optimize)
    except Exception as e:
        raise InputError(f"onnxruntime cannot run the model: {str(e)[:300]}") from None
    feeds = random_feeds(whole, _InputsBut(sess, weights), seed=seed, dims=dims, batch_size=batch_size)
    check_shapes_at(model, manifest, feeds)
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(names, {**feeds, **{x: weights[x] for x in whole_weights}})))
    del sess, whole
    env = dict(feeds)

    def run(m, own, w, what, feeds):
        try:
            sess = session(m, optimize=optimize)
        except Exception as e:
            raise InputError(f"onnxruntime cannot run sub-model {what}: {str(e)[:300]}") from None
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, {**feeds, **{x: w[x] for x in own}})))

    for s, part in zip(manifest["submodels"], parts):
        what = f"{s['index']} ({s['device']})"
        tp = s.get("tensor_parallel")
        if not tp:
            env.update(run(*part, weights, what, {x: env[x] for x in s["inputs"]}))
            continue
        rw = [rank_weights(weights, tp, r) for r in range(tp["degree"])]

        def segment(r, j, feeds, part=part, rw=rw, what=what):
            return run(*part[r][j], rw[r], f"{what} rank {r} segment {j}", feeds)

        out = run_stage(segment, tp, {x: env[x] for x in s["inputs"]})
        env.update({x: out[x] for x in s["outputs"]})
        del rw
    got = {x: env[x] for x in list(manifest["outputs"]) + list(cut)}
    diff, mag = {}, {}
    for x in list(manifest["outputs"]) + list(cut):
        a, b = np.asarray(ref[x]), np.asarray(got[x])
        if a.shape != b.shape:
            diff[x] = math.inf
        elif a.size == 0:
            diff[x] = 0.0
        elif np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_:
            diff[x] = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        else:
            diff[x] = 0.0 if np.array_equal(a, b) else math.inf
        numeric = a.size and np.issubdtype(a.dtype, np.number)
        mag[x] = float(np.max(np.abs(a.astype(np.float64)))) if numeric else 0.0
    outs = set(manifest["outputs"])
    def part(d, inside):
        return {x: v for x, v in d.items() if (x in outs) == inside}

    return VerifyReport(part(diff, True), part(mag, True), tolerance, len(weights), part(diff, False),
                        part(mag, False))
