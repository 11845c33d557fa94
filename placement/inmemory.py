"""Placement of a model held in memory: an ``onnx.ModelProto``, an ``onnx_ir.Model`` or a path.

    >>> import placement
    >>> p = placement.place_model(model_proto, devices="a100:2,cpu:1")  # doctest: +SKIP
    >>> annotated = placement.annotate(model_proto, p)                   # doctest: +SKIP
    >>> stages, manifest = placement.split(model_proto, p)               # doctest: +SKIP

:func:`place_model` runs the same front end as a file (:func:`graphs.onnx_workload.onnx_workload`:
parse, cost, differentiate for training) on the model object, then :func:`placement.api.place`; the
result is the placement the file gives. :func:`annotate` and :func:`split` apply a placement the way
``placement split`` does (:mod:`placement.onnx_export`), and give back what they were given: a
``ModelProto`` for a ``ModelProto`` (or a path), an ``onnx_ir.Model`` for an ``onnx_ir.Model``.

Nothing is read from or written to disk, except the file a path names (read with its external data)
and a JSON cost table named by ``costs``. Weights already in memory are used as they are:

* a ``ModelProto`` is parsed directly (the front end copies only small tensors, for shape inference);
* an ``onnx_ir.Model`` is serialised *without* the data of its large initializers (they are written
  as references to a placeholder, their shapes and types are what the front end reads), and the stage
  models :func:`split` gives back share the ``onnx_ir`` tensors of the original model, not copies;
  weights an ``onnx_ir`` model keeps in an external file stay there, unread.

Nothing here prints or imports torch; errors are :class:`graphs.errors.PlacementError` subclasses.
"""

from __future__ import annotations

import json
import math
import os
import reprlib
from collections.abc import Mapping
from contextlib import contextmanager
from numbers import Real
from typing import TYPE_CHECKING

from graphs.errors import InputError
from solvers.base import SolveOptions

from .api import Placement, place

if TYPE_CHECKING:
    import onnx
    import onnx_ir

    from graphs.devices import DeviceSet

    from .onnx_export import Split

    #: what the functions here take as a model: in memory, or the path of an ONNX file
    ModelLike = onnx.ModelProto | onnx_ir.Model | str | os.PathLike

__all__ = ["place_model", "annotate", "annotate_ir", "split", "split_parts", "model_proto",
           "placement_result", "result_from_annotations"]

# an initializer of more elements than this keeps only its shape and type in the proto the front end
# reads from an onnx_ir model (the front end itself keeps data only up to this size: see
# graphs.onnx_loader._KEEP_DATA)
_LIGHT_ELEMENTS = 4096
# the placeholder location of those initializers; the split restores the original tensors
_IN_MEMORY = "placement:in-memory"


class ArgumentTypeError(InputError, TypeError):
    """An argument of the wrong type, named: an :class:`InputError` (so a ``PlacementError``, as every
    bad input) that is also the ``TypeError`` Python raises for a wrong type, so that ``except
    TypeError`` keeps catching what the library documents as one (``devices``, ``training``,
    ``options``)."""


def _shown(value) -> str:
    """``repr(value)``, shortened: a tensor or a long list is named in a message, not printed whole."""
    return reprlib.repr(value)


def _is_ir(model) -> bool:
    mod = type(model).__module__ or ""
    if not mod.startswith("onnx_ir"):
        return False
    import onnx_ir as ir

    return isinstance(model, ir.Model)


def _is_proto(model) -> bool:
    import onnx

    return isinstance(model, onnx.ModelProto)


def _read(path, *, load_external_data: bool):
    from graphs.onnx_loader import read_model

    return read_model(path, load_external_data=load_external_data)


@contextmanager
def _light_initializers(model):
    """While open: the large initializers of an ``onnx_ir`` model replaced by placeholders (shape and
    type, no data), so that serialising the model copies no weights. Restored on exit."""
    import onnx_ir as ir

    swapped = []
    try:
        for v in model.graph.initializers.values():
            t = v.const_value
            if t is None or isinstance(t, ir.ExternalTensor) or t.size <= _LIGHT_ELEMENTS:
                continue
            stub = ir.ExternalTensor(_IN_MEMORY, offset=0, length=t.nbytes, dtype=t.dtype, shape=t.shape,
                                     name=v.name, base_dir="")
            swapped.append((v, t))
            v.const_value = stub
        yield
    finally:
        for v, t in swapped:
            v.const_value = t


def model_proto(model: ModelLike, *, light: bool = True) -> tuple[onnx.ModelProto, str | None]:
    """The ``onnx.ModelProto`` of a model given as a proto (itself), a path (read; with ``light``
    without its external data) or an ``onnx_ir.Model`` (serialised; with ``light`` its large
    initializers become shape-only placeholders). Returns ``(proto, source)``."""
    if _is_proto(model):
        return model, None
    if isinstance(model, (str, os.PathLike)):
        return _read(model, load_external_data=not light), os.fspath(model)
    if _is_ir(model):
        import onnx_ir as ir

        if not light:
            return ir.serde.serialize_model(model), None
        with _light_initializers(model):
            return ir.serde.serialize_model(model), None
    raise InputError(f"expected an onnx.ModelProto, an onnx_ir.Model or a path, got {type(model).__name__}")


def place_model(model: ModelLike, devices: str | DeviceSet | None = None, *, training: bool = False,
                costs: str | Mapping = "roofline",
                batch_size: int | None = None, solver: str | None = None,
                options: SolveOptions | None = None, optimizer: str = "adam",
                dims: Mapping[str, int] | None = None, backward_factor: float = 2.0,
                max_replicas: int | None = None, schedule: str | None = None,
                microbatches: int | None = None, granularity: str | None = None,
                tensor_parallel: bool = True) -> Placement:
    """Place an ONNX model on ``devices`` (``"a100:4,cpu:8"`` or a :class:`graphs.devices.DeviceSet`;
    default :data:`graphs.onnx_workload.DEFAULT_DEVICES`). ``costs``: ``"roofline"``, ``"profile"``, a
    JSON cost table's path, or the table itself as a mapping. The other arguments are those of
    :func:`graphs.onnx_workload.onnx_workload` and :func:`placement.api.place`.

    As ``placement place model.onnx`` does, it solves the stage model (replicas up to ``max_replicas``
    per stage, default as many as the devices allow; tensor parallelism; recompute; memory by
    ``schedule``, default ``1f1b``, over ``microbatches``; one node per layer or per operator,
    ``granularity``) and returns a stage plan (``Placement.model == "stages"``). ``max_replicas=1``, a
    solver without a stage form, or an objective other than max-load gives the one-device-per-stage
    placement instead; such an objective with ``max_replicas`` above 1, and stage options
    (``schedule``, ``microbatches``, ``granularity``) with ``max_replicas=1``, are an
    :class:`InputError`. ``tensor_parallel=False`` keeps every stage at tensor-parallel degree ``t = 1``
    (replicas only), as :func:`placement.torch.place_module` does: what an ``onnx_ir`` model's split
    (:func:`split`, :class:`placement.passes.SplitPass`) can cut (the one-device-per-stage placement
    has ``t = 1`` anyway).

    A bad argument is an :class:`InputError` naming it, before any work; one of the wrong type is an
    :class:`ArgumentTypeError`, also a ``TypeError``."""
    from graphs.costs import parse_cost_table
    from graphs.onnx_loader import parse_model
    from graphs.onnx_workload import graph_workload

    if not (_is_proto(model) or _is_ir(model) or isinstance(model, (str, os.PathLike))):
        raise ArgumentTypeError(f"place_model(model=...) takes an onnx.ModelProto, an onnx_ir.Model or a "
                                f"path, got {type(model).__name__}")
    ds = device_set(devices, "place_model")
    costs = check_place_model_args(
        "place_model", training=training, costs=costs, batch_size=batch_size, solver=solver,
        options=options, optimizer=optimizer, dims=dims, backward_factor=backward_factor,
        max_replicas=max_replicas, schedule=schedule, microbatches=microbatches, granularity=granularity,
        tensor_parallel=tensor_parallel)["costs"]
    options = options or SolveOptions()
    # (tensor_parallel=False holds in the one-device-per-stage placement too: every stage has t = 1)
    stages = _stage_model(max_replicas, solver, options, schedule=schedule, microbatches=microbatches,
                          granularity=granularity)
    proto, source = model_proto(model)
    external = any(t.data_location == 1 for t in proto.graph.initializer)
    g = parse_model(proto, source=source, batch_size=batch_size, dims=dims, external_data=external)
    if isinstance(costs, Mapping):
        table = parse_cost_table(g, ds, dict(costs), source="cost table")
        w = _with_costs(g, ds, table, training, optimizer, backward_factor)
    else:
        w = graph_workload(g, ds, costs, training, optimizer, backward_factor=backward_factor)
    import dataclasses

    if not stages:
        p = place(w.graph, w.cluster, solver, options)
        # the symbolic dimensions it was placed at, which the graph does not keep: its result records
        # them (placement_result) as the command line's does, so that a split holds values at them
        return dataclasses.replace(p, settings={"dims": dict(dims)}) if dims else p

    from graphs.costs import recorded_costs
    from solvers.registry import solve

    from .stages import onnx_workload, solve_refined

    # what was used: a profile's measurements, or roofline where a profile had no host kind to measure
    settings = {"devices": str(ds), "costs": recorded_costs(costs, w.graph.meta) if isinstance(costs, str)
                else "cost table",
                "batch_size": g.batch_size, "training": bool(training),
                "optimizer": optimizer if training else None, "dims": dict(dims) if dims else None,
                "device_files": None}
    sw = onnx_workload(g, w.graph, ds, schedule=schedule, max_replicas=max_replicas, granularity=granularity,
                       microbatches=microbatches, settings=settings, tensor_parallel=tensor_parallel)

    def solve_one(pr, time_limit):
        return solve(pr, solver=solver or "auto", options=dataclasses.replace(options, time_limit=time_limit))

    sw, sol = solve_refined(sw, solve_one, options.time_limit)
    batch = max(1, int(g.batch_size or 1))
    return Placement(w.graph, w.cluster, sol, None, options.objective, problem=sw.problem, node_of=sw.node_of,
                     time_scale=1e3 * batch, settings=dict(sw.settings))


def device_set(devices: str | DeviceSet | None, fn: str) -> DeviceSet:
    """``devices`` as :func:`place_model` and :func:`placement.torch.place_module` take it (a str such as
    ``"a100:4,cpu:8"``, a :class:`graphs.devices.DeviceSet`, or ``None`` for the default) as a
    ``DeviceSet``; any other type is an :class:`ArgumentTypeError` (a ``TypeError``) and an empty str an
    :class:`InputError`, naming ``fn``'s ``devices``."""
    from graphs.devices import DeviceSet, parse_devices
    from graphs.onnx_workload import DEFAULT_DEVICES

    if isinstance(devices, DeviceSet):
        return devices
    if devices is not None and not isinstance(devices, str):
        raise ArgumentTypeError(f"{fn}(devices=...) takes a str such as 'a100:4,cpu:8', a DeviceSet or None, "
                                f"got {type(devices).__name__}")
    if isinstance(devices, str) and not devices.strip():
        raise InputError(f"{fn}(devices=''): name the devices ('a100:4,cpu:8'), or leave devices out for "
                         f"the default")
    return parse_devices(devices or DEFAULT_DEVICES)


def check_place_model_args(fn: str, **args: object) -> dict:
    """Check the keyword arguments of :func:`place_model` given in ``args`` (all but ``devices``), naming
    each as ``fn``'s: a wrong type is an :class:`ArgumentTypeError`, a bad value an :class:`InputError`.
    Returns ``args`` with a cost table's path as a str. Whether the options fit together (stage options
    with ``max_replicas=1``, say) is :func:`place_model`'s own check, when it runs."""
    options = args.get("options")
    if options is not None and not isinstance(options, SolveOptions):
        raise ArgumentTypeError(f"{fn}(options=...) takes a SolveOptions, got {type(options).__name__}")
    if "training" in args or "optimizer" in args or "backward_factor" in args:
        check_training(args.get("training", False), args.get("optimizer", "adam"),
                       args.get("backward_factor", 2.0), fn)
    if "tensor_parallel" in args:
        check_flag(args["tensor_parallel"], "tensor_parallel", fn)
    if "costs" in args:
        args["costs"] = check_costs(args["costs"], fn)
    for name, what in (("solver", "a solver's name such as 'dp'"), ("schedule", "a schedule such as '1f1b'"),
                       ("granularity", "'op' or 'layer'")):
        if name in args:
            check_name(args[name], name, what, fn)
    if "dims" in args:
        check_dims(args["dims"], fn)
    check_counts(**{k: args[k] for k in ("batch_size", "max_replicas", "microbatches") if k in args})
    return args


def check_flag(value: bool, name: str, fn: str) -> None:
    """Refuse, naming it as ``fn``'s, a flag that is not a bool (``"no"`` would read as true)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{fn}({name}=...) takes a bool, got {type(value).__name__}")


def check_costs(costs: str | os.PathLike | Mapping | None, fn: str) -> str | Mapping:
    """``costs`` as :func:`place_model` takes it: a cost model's name (``"roofline"``, ``"profile"``), a
    JSON cost table's path (a path object becomes its str) or the table as a mapping; ``None`` is
    ``"roofline"``, the default. Anything else is refused, naming ``fn``'s ``costs`` (a name is checked
    where the costs are computed, with the list of models)."""
    if costs is None:  # as graphs.onnx_workload reads it: the default
        return "roofline"
    if isinstance(costs, os.PathLike):
        costs = os.fspath(costs)
    if isinstance(costs, Mapping) or isinstance(costs, str) and costs.strip():
        return costs
    error = InputError if isinstance(costs, str) else ArgumentTypeError
    raise error(f"{fn}(costs={_shown(costs)}): expected 'roofline', 'profile', a cost table's path or a "
                f"mapping")


def check_name(value: str | None, name: str, what: str, fn: str) -> None:
    """Refuse, naming it as ``fn``'s, a ``name`` option (``solver``, ``schedule``, ...) that is neither
    ``None`` (the default) nor a non-empty str; ``what`` says what it names. An empty str was read as
    the default."""
    if value is None:
        return
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{fn}({name}={_shown(value)}): expected {what}, or None for the default")
    if not value.strip():
        raise InputError(f"{fn}({name}={value!r}): give {what}, or leave {name} out for the default")


def check_dims(dims: Mapping[str, int] | None, fn: str) -> None:
    """Refuse, naming ``fn``'s ``dims``, what is not a mapping of dimension names (str) to positive
    integers (``None``: none given)."""
    if dims is None:
        return
    if not isinstance(dims, Mapping):
        raise ArgumentTypeError(f"{fn}(dims={_shown(dims)}): expected a mapping of dimension names to "
                                f"sizes, such as {{'batch': 8}}")
    for k, v in dims.items():
        if not isinstance(k, str):
            raise ArgumentTypeError(f"{fn}(dims=...): a dimension's name is a str, got {k!r} "
                                    f"({type(k).__name__})")
        if isinstance(v, bool) or not isinstance(v, int):
            raise ArgumentTypeError(f"{fn}(dims=...): dimension {k!r} must be a positive integer, got "
                                    f"{_shown(v)} ({type(v).__name__})")
        if v < 1:
            raise InputError(f"{fn}(dims=...): dimension {k!r} must be a positive integer, got {v}")


def check_training(training: bool, optimizer: str, backward_factor: float, fn: str) -> None:
    """Refuse, naming it as ``fn``'s, a ``training`` that is not a bool, an ``optimizer`` that is not a
    str, a ``backward_factor`` that is not a finite non-negative number (backward time over forward
    time), and an ``optimizer`` or ``backward_factor`` given without training (they would be ignored)."""
    check_flag(training, "training", fn)
    if not isinstance(optimizer, str):
        raise ArgumentTypeError(f"{fn}(optimizer={_shown(optimizer)}): expected an optimizer's name such as "
                                f"'adam'")
    if isinstance(backward_factor, bool) or not isinstance(backward_factor, Real):
        raise ArgumentTypeError(f"{fn}(backward_factor={_shown(backward_factor)}): expected a number, the "
                                f"backward time over the forward time (default 2.0)")
    if not (backward_factor >= 0 and math.isfinite(backward_factor)):
        raise InputError(f"{fn}(backward_factor={backward_factor!r}): expected a finite non-negative number, "
                         f"the backward time over the forward time (default 2.0)")
    if not training and (optimizer != "adam" or backward_factor != 2.0):
        what = "optimizer" if optimizer != "adam" else "backward_factor"
        raise InputError(f"{fn}({what}=...) applies to training: add training=True")


def check_counts(**counts: int | None) -> None:
    """Refuse, naming it, a count (``max_replicas``, ``microbatches``, ``batch_size``) given as anything
    but a positive integer (``None``: not given); 0 is not read as "the default", nor ``True`` as 1."""
    for name, v in counts.items():
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise ArgumentTypeError(f"{name} must be a positive integer, got {_shown(v)}")
        if v < 1:
            raise InputError(f"{name} must be a positive integer, got {v!r}")


def _stage_model(max_replicas, solver, options: SolveOptions, **stage_options) -> bool:
    """Does :func:`place_model` solve the stage model? The command line's rule,
    :func:`placement.inputs.takes_stage_model` (its errors in this function's parameters):
    ``max_replicas=1``, a solver without a stage form or an objective only one device per stage takes
    keep that placement, and such an objective with ``max_replicas`` above 1 is an :class:`InputError`;
    so is a stage-model option (``schedule``, ``microbatches``, ``granularity``) given where that
    placement runs, naming it."""
    from types import SimpleNamespace

    from .inputs import takes_stage_model

    check_counts(max_replicas=max_replicas, microbatches=stage_options["microbatches"])
    args = SimpleNamespace(workload="model.onnx", max_replicas=max_replicas, solver=solver,
                           objective=options.objective, training=False)
    if takes_stage_model(args, library=True):
        return True
    given = [k for k, v in stage_options.items() if v is not None]
    if given:
        why = ("max_replicas=1" if max_replicas == 1 else f"objective {options.objective!r}"
               if options.objective != "max-load" else f"the {solver} solver")
        raise InputError(f"{given[0]} is a stage-model option; {why} gives the one-device-per-stage "
                         f"placement, which does not take it")
    return False


def _with_costs(g, ds, table, training, optimizer, backward_factor):
    """The workload of ``g`` with given cost rows (an in-memory cost table)."""
    from graphs.onnx_workload import build_opgraph
    from graphs.reference import Workload

    graph = build_opgraph(g, table, training=training, optimizer=optimizer, backward_factor=backward_factor,
                          devices=str(ds))
    return Workload(graph, ds.cluster())


def placement_result(placement: Placement | Mapping | str | os.PathLike) -> dict:
    """The result document of a placement (as ``placement place --out`` writes it: a stage plan's
    with its ``stages`` and each stage's ``operators``); a mapping (a result already) is returned as
    is, and a path is read as such a result file."""
    if isinstance(placement, (str, os.PathLike)):  # a result file, as placement place --out writes it
        from graphs.jsonio import read_json

        from .results import is_stage_result

        data = read_json(placement)
        if not (is_stage_result(data) or isinstance(data, dict) and data.get("schema") == "placement-result"):
            raise InputError("placement: not a placement result file (expected a JSON object with "
                             "\"schema\": \"placement-result\", as placement place --out writes)",
                             source=os.fspath(placement))
        return _checked_result(data)
    if isinstance(placement, Mapping):
        return _checked_result(dict(placement))
    if not isinstance(placement, Placement):
        raise TypeError(f"placement: expected a Placement or a result mapping, got "
                        f"{type(placement).__name__} (or give a result file's path)")
    if placement.problem is not None:
        from .stages import stage_result

        return stage_result(placement)
    from .results import result_dict

    result = result_dict(placement)
    if not result.get("devices"):
        raise InputError(f"there is no placement to apply (status {result.get('status')!r}: "
                         f"{result.get('message') or 'no devices'})")
    if isinstance(result.get("frontend"), dict):  # the dims place_model was given, as the command line's
        dims = placement.settings.get("dims")
        result["frontend"]["dims"] = dict(dims) if dims else None
    return result


def _checked_result(data: dict) -> dict:
    """A result mapping given as ``placement``: a stage plan (its ``stages`` are checked where they are
    read) or a one-device-per-stage result with a non-empty ``devices`` list of ``{"name", "nodes"}``
    (as the command line's result files are checked), else an :class:`InputError` naming what is
    missing."""
    from .results import is_stage_result

    if is_stage_result(data):
        return data
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices:
        if "status" in data:
            raise InputError(f"placement: the result mapping holds no placement (status {data['status']!r}: "
                             f"{data.get('message') or 'no devices'})")
        raise InputError("placement: the result mapping has neither a 'devices' list nor a stage plan's "
                         "'stages' (give a Placement, placement_result(p) or a result file's content)")
    for i, d in enumerate(devices):
        if not (isinstance(d, Mapping) and isinstance(d.get("name"), str)
                and isinstance(d.get("nodes"), list)):
            raise InputError(f"placement: devices[{i}] of the result mapping needs a 'name' and a 'nodes' "
                             f"list")
    # its stages are one device each, d = t = 1, as the command line checks a result file read back: an
    # edited degree would be ignored by what applies devices[]
    from .results import check_one_device_stage

    kinds = {d["name"]: d["kind"] for d in devices if isinstance(d.get("kind"), str)}
    for k, st in enumerate(data.get("stages") or ()):
        if isinstance(st, Mapping) and isinstance(st.get("devices"), list):
            try:
                check_one_device_stage(k, dict(st), kinds, None)
            except InputError as e:
                raise InputError(f"placement: {e}") from None
    return data


def _of_operators(placement):
    """``placement``, refused by name when it is a stage plan of a problem alone (no operators to put in
    a model: :func:`placement.place` on a Piper file's problem, say)."""
    if isinstance(placement, Placement) and placement.graph is None:
        raise InputError("this placement was solved on a stage problem alone (placement.place(problem)): "
                         "it names no ONNX operators; place the model with placement.place_model to "
                         "annotate or split it")
    return placement


def annotate(model: ModelLike,
             placement: Placement | Mapping | str | os.PathLike) -> onnx.ModelProto | onnx_ir.Model:
    """The model with every node's placement in its metadata (``placement.device``, ``placement.kind``,
    ``placement.stage``; see :func:`placement.onnx_export.annotate`) and the summary, which also records
    the input shape it was placed at (``frontend``: batch size and symbolic dimensions, what
    :func:`split` from the annotations needs): a new ``ModelProto`` for a
    ``ModelProto``, a clone (sharing the weights) for an ``onnx_ir.Model``; for a path, the model read
    from it as a ``ModelProto`` (weights in external files stay references to those files)."""
    result = placement_result(_of_operators(placement))
    if _is_ir(model):
        out = model.clone()
        annotate_ir(out, result)
        return out
    proto, _ = model_proto(model)
    from .onnx_export import annotate as annotate_proto

    return annotate_proto(proto, result)


def annotate_ir(model: onnx_ir.Model, result: Mapping) -> None:
    """Annotate an ``onnx_ir.Model`` in place: the node metadata and the model's summary that
    :func:`annotate` writes (unnamed nodes get their stable names)."""
    proto, _ = model_proto(model)
    from .onnx_export import annotate as annotate_proto

    done = annotate_proto(proto, result)
    nodes = list(model.graph)
    if len(nodes) != len(done.graph.node):  # serialisation keeps the node list: a broken invariant
        raise InputError("the model changed while it was annotated")
    for node, pn in zip(nodes, done.graph.node):
        node.name = pn.name
        for k in [k for k in node.metadata_props if k.startswith("placement.")]:
            del node.metadata_props[k]
        for p in pn.metadata_props:
            if p.key.startswith("placement."):
                node.metadata_props[p.key] = p.value
    for p in done.metadata_props:
        if p.key.startswith("placement."):
            model.metadata_props[p.key] = p.value


def result_from_annotations(model: ModelLike) -> dict:
    """A result document rebuilt from an annotated model (``ModelProto`` or ``onnx_ir.Model``): which
    node runs where, from the node metadata :func:`annotate` wrote, and the input shape (batch size,
    symbolic dimensions) it was placed at, from the summary (``frontend``; annotations written before it
    was recorded have none: :func:`split_parts` refuses them where the split depends on it); enough for
    :func:`split`."""
    from .onnx_export import KEY_CONSTANT, KEY_DEVICE, KEY_RESULT, KEY_STAGE

    if _is_ir(model):
        props = dict(model.metadata_props)
        nodes = [(n.name, dict(n.metadata_props)) for n in model.graph]
    else:
        proto, _ = model_proto(model)
        props = {p.key: p.value for p in proto.metadata_props}
        nodes = [(n.name, {p.key: p.value for p in n.metadata_props}) for n in proto.graph.node]
    if KEY_RESULT not in props:
        raise InputError("the model carries no placement (no 'placement.result' metadata): run the "
                         "placement pass or placement.annotate first")
    summary = json.loads(props[KEY_RESULT])
    if summary.get("model") == "stages":  # a stage plan: each stage's operators, by their stage
        stages = [dict(s, nodes=[]) for s in summary.get("stages") or ()]
        for name, meta in nodes:
            st = meta.get(KEY_STAGE)
            if st is None or meta.get(KEY_CONSTANT) == "true":
                continue
            if not st.isdigit() or int(st) >= len(stages):
                raise InputError(f"node {name!r} is annotated with stage {st!r}, which the placement summary "
                                 f"does not list")
            stages[int(st)]["nodes"].append(name)
        return dict(summary, schema="placement-result", stages=stages)
    devices = [dict(d, nodes=[]) for d in summary.get("devices", [])]
    by_name = {d["name"]: d for d in devices}
    for name, meta in nodes:
        dev = meta.get(KEY_DEVICE)
        if dev is None or meta.get(KEY_CONSTANT) == "true":
            continue
        if dev not in by_name:
            raise InputError(f"node {name!r} is annotated with device {dev!r}, which the placement summary "
                             f"does not list")
        by_name[dev]["nodes"].append(name)
    return dict(summary, devices=devices)


def split(model: ModelLike,
          placement: Placement | Mapping | str | os.PathLike | None = None) -> tuple[list, dict]:
    """Cut the model into one sub-model per stage (see :func:`placement.onnx_export.split_model`);
    returns ``(sub-models in run order, manifest)``, both in memory. The sub-models are
    ``onnx_ir.Model`` s sharing the original weights for an ``onnx_ir.Model``, ``ModelProto`` s
    otherwise; a tensor-parallel stage's entry is its rank models, rank by segment (``ModelProto`` s
    only: an ``onnx_ir.Model`` with such a stage is refused). Without ``placement`` the model's own
    annotations (:func:`annotate`) say where nodes go. ``placement``: a :class:`Placement`, a result
    mapping or the path of a result file (``placement place --out``)."""
    s = split_parts(model, placement)
    return [sm.model for sm in s.submodels], s.manifest()


def split_parts(model: ModelLike, placement: Placement | Mapping | str | os.PathLike | None = None) -> Split:
    """:func:`split`, returning the :class:`placement.onnx_export.Split` (sub-models with their device,
    stage, inputs and outputs; the manifest is ``.manifest()``)."""
    from dataclasses import replace

    from .onnx_export import split_model

    result = result_from_annotations(model) if placement is None else \
        placement_result(_of_operators(placement))
    if not _is_ir(model):
        proto = model if _is_proto(model) else _read(model, load_external_data=True)
        return _shape_recorded(split_model(proto, result), result, placement)
    import onnx_ir as ir

    tp = [i for i, st in enumerate(result.get("stages") or ()) if st.get("tensorParallelDegree", 1) != 1]
    if tp:  # its weights are placeholders here, and a tensor-parallel split slices them
        raise InputError(f"stage {tp[0]} is tensor-parallel: an onnx_ir model's split keeps whole stages "
                         f"only; place it with tensor_parallel=False (place_model, PlacementPass), or "
                         f"split the ModelProto (placement.onnx_export.split_model) or use placement split")
    proto, _ = model_proto(model)  # large weights as placeholders, restored below
    s = split_model(proto, result)
    tensors = {v.name: v.const_value for v in model.graph.initializers.values()}
    subs = []
    for sm in s.submodels:
        m = ir.serde.deserialize_model(sm.model)
        for name, v in m.graph.initializers.items():
            if tensors.get(name) is not None:  # placeholders and external references included
                v.const_value = tensors[name]
        subs.append(replace(sm, model=m))
    return _shape_recorded(replace(s, submodels=tuple(subs)), result, placement)


def _shape_recorded(s: Split, result: Mapping, placement) -> Split:
    """``s``, unless it was cut from annotations that do not record the input shape the model was placed
    at (a summary without ``frontend``: an older one, or one :func:`placement.onnx_export.annotate` wrote
    alone) and a sub-model holds values computed from the model's shapes: those would be at the model's
    default shape (batch 1), which need not be the one it was placed at, so the split is refused,
    naming the sub-model and the way out."""
    from .results import recorded_input_shape

    if placement is not None or recorded_input_shape(result)[1] is not None:
        return s
    held = [sm for sm in s.submodels if sm.shapes_at]
    if not held:  # no value depends on the shape: the cut is the same at any
        return s
    at = ", ".join(f"{d}={v}" for d, v in held[0].shapes_at.items())
    raise InputError(f"the model's placement annotations do not record the input shape it was placed at "
                     f"(its 'placement.result' summary has no 'frontend'), and sub-model {held[0].index} "
                     f"({held[0].label}) would hold values computed from the model's shapes at {at}, which "
                     f"need not be that shape: annotate the model again (PlacementPass, placement.annotate), "
                     f"or split with the placement itself (placement.split(model, placement), "
                     f"SplitPass(placement): a Placement or the result file placement place --out wrote)")
