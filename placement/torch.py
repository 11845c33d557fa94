"""PyTorch front end: place an ``nn.Module`` and hand the plan to ``torch.distributed.pipelining``.

    >>> from placement.torch import place_module, split_spec
    >>> tp = place_module(model, (tokens,), devices="a100:4")                    # doctest: +SKIP
    >>> pipe = torch.distributed.pipelining.pipeline(model, (tokens_mb,),
    ...                                              split_spec=split_spec(tp))  # doctest: +SKIP

**The operator graph.** :func:`place_module` exports the module with ``torch.export`` and makes one
operator per ``call_function`` node of the exported graph, in the graph's (execution) order: an edge
wherever a node reads another's output; shapes, element types and so output bytes from each node's
``meta["val"]``; the parameters and buffers a node reads (the exported program's placeholders, named by
their state-dict names) are its weights, trainable when they are parameters that require grad. ATen
operators are costed by the same roofline model as ONNX operators (:mod:`graphs.costs`) through their
ONNX counterparts (``aten.linear``/``matmul``/``bmm`` -> ``MatMul``, ``addmm`` -> ``Gemm``,
``convolution`` -> ``Conv``, ``scaled_dot_product_attention`` and its fused kernels -> ``Attention``,
views -> ``Reshape``, ...); an operator without one is costed conservatively
with a warning in ``graph.meta["warnings"]``. Training adds the backward pass as for ONNX.

**Snapping to module boundaries.** ``pipeline(module, mb_args, split_spec={fqn: SplitPoint.BEGINNING})``
cuts the traced graph, in execution order, where the named submodules begin. So a stage boundary can
only sit where a submodule begins: the *split points* are the submodules whose operators form one run
of the execution order (called once), each at the position of its first operator (of several
submodules starting there, the outermost); ``split_points=`` can restrict them to given names, or to
``"children"`` (the root's direct children, what a DeepSpeed ``PipelineModule`` cuts at). The split
points cut the operators into *segments*. The plan is made in two solves with the same solver:

1. the operator graph as it is (``TorchPlacement.unsnapped``: what a free cut could reach, and with an
   exact solver a lower bound for any plan);
2. the graph with every segment forced onto one device (:func:`graphs.coarsen.merge_by_key`), so
   that every stage is a union of segments: with the exact DP, the best plan among those cut at split
   points. Its stages are numbered in execution order (the device of the first operator is stage 0, and
   so on). If a device's segments are not one run of that order (possible only where segments exchange
   no data), each segment is moved to the latest stage of the segments before it, which keeps every
   edge pointing forward (the plan is then marked ``feasible``).

The snapped plan is evaluated by the same evaluator as every plan (``TorchPlacement.placement``); its
max-load is the planned time per run of the example inputs.

:func:`split_spec` gives the ``{fqn: SplitPoint.BEGINNING}`` dict of the snapped plan (one stage per
used device, in pipeline order); :func:`layer_partition` the layer indices per stage of a sequential
model (DeepSpeed ``PipelineModule``-style), with ``parts`` boundaries. With ``max_replicas`` the stage
model may replicate a stage (``TorchPlacement.stage_replicas``); the spec carries the stage boundaries
only.

Needs torch (the ``[torch]`` extra). Nothing here prints; problems raise
:class:`~graphs.errors.InputError`, but a time limit or a proven infeasibility is a status, as
:func:`placement.place_model` returns it: the :class:`TorchPlacement` then has no stages, its
``status`` and ``placement.solution.message`` say why, and :func:`split_spec` and
:func:`layer_partition` refuse it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from graphs.errors import InputError

from .api import Placement, place
from .inmemory import ArgumentTypeError

if TYPE_CHECKING:
    import torch

    from graphs.devices import DeviceSet
    from graphs.onnx_loader import OnnxGraph
    from solvers.base import SolveOptions

__all__ = ["TorchPlacement", "place_module", "operator_graph", "split_spec", "layer_partition",
           "in_execution_order"]

# ATen operator -> the ONNX operator the roofline model costs it as
_VIEWS = ("view", "_unsafe_view", "reshape", "transpose", "t", "permute", "unsqueeze", "squeeze", "expand",
          "getitem", "split", "split_with_sizes", "chunk", "unbind", "slice", "select", "alias", "detach",
          "flatten", "unflatten", "view_as", "expand_as", "narrow", "as_strided", "lift_fresh_copy",
          "dropout",
          "_assert_tensor_metadata", "sym_size", "size")
_ONNX_TYPE = {
    **dict.fromkeys(_VIEWS, "Reshape"),
    **dict.fromkeys(("linear", "matmul", "mm", "bmm"), "MatMul"),
    "addmm": "Gemm", "baddbmm": "MatMul", "convolution": "Conv", "conv1d": "Conv", "conv2d": "Conv",
    "conv3d": "Conv", "embedding": "Gather", "index_select": "Gather", "gather": "GatherElements",
    "layer_norm": "LayerNormalization", "native_layer_norm": "LayerNormalization",
    "rms_norm": "RMSNormalization",
    "group_norm": "GroupNormalization", "batch_norm": "BatchNormalization",
    "_native_batch_norm_legit_no_training": "BatchNormalization", "softmax": "Softmax", "_softmax": "Softmax",
    "log_softmax": "LogSoftmax", "_log_softmax": "LogSoftmax",
    "add": "Add", "add_": "Add", "sub": "Sub", "rsub": "Sub", "mul": "Mul", "mul_": "Mul", "div": "Div",
    "neg": "Neg", "abs": "Abs", "relu": "Relu", "relu_": "Relu", "leaky_relu": "LeakyRelu", "clamp": "Clip",
    "maximum": "Max", "minimum": "Min", "where": "Where", "masked_fill": "Where", "eq": "Equal", "lt": "Less",
    "gt": "Greater", "le": "LessOrEqual", "ge": "GreaterOrEqual", "logical_not": "Not", "bitwise_not": "Not",
    "to": "Cast", "_to_copy": "Cast", "type_as": "Cast",
    "exp": "Exp", "log": "Log", "tanh": "Tanh", "sigmoid": "Sigmoid", "silu": "HardSwish", "erf": "Erf",
    "sqrt": "Sqrt", "rsqrt": "Sqrt", "pow": "Pow", "sin": "Sin", "cos": "Cos", "gelu": "Gelu",
    "mean": "ReduceMean", "sum": "ReduceSum", "amax": "ReduceMax", "max": "ReduceMax", "argmax": "ArgMax",
    "cat": "Concat", "stack": "Concat", "contiguous": "Identity", "clone": "Concat", "copy": "Concat",
    "pad": "Pad", "constant_pad_nd": "Pad", "repeat": "Tile", "index": "Gather",
    "arange": "Range", "ones": "ConstantOfShape", "zeros": "ConstantOfShape", "full": "ConstantOfShape",
    "ones_like": "ConstantOfShape", "zeros_like": "ConstantOfShape", "full_like": "ConstantOfShape",
    "empty": "ConstantOfShape", "tril": "Trilu", "triu": "Trilu", "cumsum": "CumSum",
    "max_pool2d": "MaxPool", "avg_pool2d": "AveragePool", "adaptive_avg_pool2d": "GlobalAveragePool",
    # (query, key, value, ...) in [batch, heads, length, head size], as ONNX's 4-D Attention: costed by its
    # formula (graphs.costs); the fused kernels too, should an exported graph name one
    **dict.fromkeys(("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
                     "_scaled_dot_product_cudnn_attention",
                     "_scaled_dot_product_fused_attention_overrideable"), "Attention"),
}


_RANDOM = frozenset({"rand", "randn", "randint", "rand_like", "randn_like", "bernoulli", "normal", "dropout",
                     "native_dropout", "multinomial"})


@dataclass(frozen=True, eq=False)
class TorchPlacement:
    """A module's plan. ``placement``: the snapped plan (evaluated on the operator graph; what
    :func:`split_spec` describes); ``unsnapped``: the free plan of the same graph. ``modules[i]``: the
    innermost module FQN of operator ``i`` (``""``: the root); ``split_points``: ``{operator index:
    module FQN}`` where a stage may begin; ``stage_starts``: the module FQN each stage after the first
    begins at, in pipeline order; ``stage_devices``: the device of each stage. Without a plan (status
    ``stopped`` or ``infeasible``) the stage fields are empty, ``time_per_run`` is ``inf`` and ``notes``
    says why."""

    placement: Placement
    unsnapped: Placement
    modules: tuple[str, ...]
    split_points: Mapping[int, str]
    stage_starts: tuple[str, ...]
    stage_devices: tuple[str, ...]
    stage_of_op: tuple[int, ...]
    batch_size: int
    children: tuple[str, ...] = ()  # the root's direct children in call order (sequential models)
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: each stage's data-parallel replicas (a stage plan: ``max_replicas`` above 1); ``()``: one device each
    stage_replicas: tuple[int, ...] = ()

    def __repr__(self) -> str:
        # the plan in a line, not the operator graph's arrays
        return (f"TorchPlacement(status={self.status.value!r}, stages={self.num_stages}, "
                f"stage_starts={list(self.stage_starts)!r}, stage_devices={list(self.stage_devices)!r}, "
                f"time_per_sample={self.time_per_sample:.6g} ms)")

    @property
    def status(self):
        """The snapped plan's status (:class:`solvers.base.Status`)."""
        return self.placement.status

    @property
    def num_stages(self) -> int:
        return len(self.stage_devices)

    @property
    def time_per_run(self) -> float:
        """The snapped plan's max-load: planned milliseconds per run of the example inputs."""
        return self.placement.max_load

    @property
    def time_per_sample(self) -> float:
        """Planned milliseconds per sample (per run / the example batch)."""
        return self.placement.max_load / max(1, self.batch_size)


def _torch():
    import torch  # absolute: the real torch, not this module

    return torch


def _opname(target) -> str:
    name = getattr(target, "_opname", None) or getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _tensor(name: str, val):
    from graphs.onnx_loader import Tensor

    torch = _torch()
    if not isinstance(val, torch.Tensor):
        return None
    shape = tuple(int(d) if isinstance(d, int) else None for d in val.shape)
    dtype = str(val.dtype).replace("torch.", "")
    return Tensor(name, shape, dtype if dtype != "bool" else "bool", int(val.element_size()))


def _flat_nodes(args) -> list:
    torch = _torch()
    out = []
    for a in args:
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_flat_nodes(a))
        elif isinstance(a, dict):
            out.extend(_flat_nodes(list(a.values())))
    return out


def operator_graph(exported: torch.export.ExportedProgram, *,
                   source: str = "torch.export") -> tuple[OnnxGraph, tuple[str, ...]]:
    """The :class:`graphs.onnx_loader.OnnxGraph` of an exported program (see the module doc) and the
    innermost module FQN of each operator."""
    from graphs.onnx_loader import OnnxGraph, Op

    torch = _torch()
    sig = exported.graph_signature
    weights = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
               **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
    trainable_names = set()
    state = dict(exported.state_dict)
    for ph, fqn in sig.inputs_to_parameters.items():
        p = state.get(fqn)
        if p is None or getattr(p, "requires_grad", True):
            trainable_names.add(ph)
    nodes = list(exported.graph.nodes)
    # nodes computed from constants only (a causal mask, position ids; buffers count as constants, trainable
    # parameters do not) are folded, as the ONNX front end folds them: they become constant inputs of the
    # operators reading them
    folded: set = set()
    for n in nodes:
        if n.op == "call_function" and _opname(n.target) not in _RANDOM and all(
                a in folded or (a.name in weights and a.name not in sig.inputs_to_parameters)
                for a in _flat_nodes(list(n.args) + list(n.kwargs.values()))):
            folded.add(n)
    ops_fx = [n for n in nodes if n.op == "call_function" and n not in folded]
    index = {n: i for i, n in enumerate(ops_fx)}
    readers: dict = {}
    for n in ops_fx:
        for a in _flat_nodes(list(n.args) + list(n.kwargs.values())):
            readers.setdefault(a, set()).add(n)
    out_node = next(n for n in nodes if n.op == "output")
    graph_outputs = set(_flat_nodes(out_node.args))
    ops, src, dst, modules, warnings = [], [], [], [], []
    for i, n in enumerate(ops_fx):
        val = n.meta.get("val")
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        outputs = tuple(t for k, v in enumerate(vals) if (t := _tensor(f"{n.name}:{k}", v)) is not None)
        inputs, constant, params, trainable = [], [], [], []
        for a in _flat_nodes(list(n.args) + list(n.kwargs.values())):
            t = _tensor(weights.get(a.name, a.name), a.meta.get("val"))
            if a in folded:
                t = _tensor(a.name, a.meta.get("val"))
                inputs.append(t)
                constant.append(True)
                if t is not None:
                    params.append(t)
                    trainable.append(False)
            elif a.op == "placeholder" and a.name in weights:
                inputs.append(t)
                constant.append(True)
                if t is not None:
                    params.append(t)
                    trainable.append(a.name in trainable_names)
            else:
                inputs.append(t)
                constant.append(False)
                if a in index:
                    src.append(index[a])
                    dst.append(i)
        used = bool(readers.get(n)) or n in graph_outputs
        out_bytes = sum(t.nbytes or 0 for t in outputs) if used else 0
        name = _opname(n.target)
        op_type = _ONNX_TYPE.get(name, f"aten.{name}")
        attrs = {}
        if op_type == "Gemm":  # addmm(bias, a, b): the formula reads (a, b, bias)
            inputs = inputs[1:3] + inputs[:1]
            constant = constant[1:3] + constant[:1]
        if op_type in ("MaxPool", "AveragePool") and len(n.args) > 1:
            k = n.args[1]
            attrs["kernel_shape"] = list(k) if isinstance(k, (list, tuple)) else [k, k]
        ops.append(Op(n.name, op_type, "aten", i, tuple(inputs), tuple(constant), outputs, attrs,
                      tuple(params), tuple(trainable), (), int(out_bytes)))
        stack = n.meta.get("nn_module_stack") or {}
        modules.append(_fqn(list(stack.values())[-1][0]) if stack else "")
    if not ops:
        raise InputError("the exported module has no operators", source=source)
    counted = {t.name: (t, tr) for op in ops for t, tr in zip(op.params, op.trainable)
               if t.is_float and (t.elements or 0) > 1}
    user_inputs = [n for n in nodes if n.op == "placeholder" and n.name not in weights]
    ins = tuple(t for n in user_inputs if (t := _tensor(n.name, n.meta.get("val"))) is not None)
    outs = tuple(t for n in _flat_nodes(out_node.args)
                 if (t := _tensor(n.name, n.meta.get("val"))) is not None)
    batch = next((t.shape[0] for t in ins if t.shape and t.shape[0]), 1)
    g = OnnxGraph(
        ops=tuple(ops), src=np.asarray(src, np.int64), dst=np.asarray(dst, np.int64), inputs=ins,
        outputs=outs, batch_size=int(batch), dims={}, opset=0, source=source, warnings=tuple(warnings),
        parameters=sum(t.elements or 0 for t, _ in counted.values()),
        parameter_bytes=sum(t.nbytes or 0 for t, _ in counted.values()),
        trainable_parameters=sum(t.elements or 0 for t, tr in counted.values() if tr),
        producer=f"torch.export {torch.__version__}", graph_name=source)
    return g, tuple(modules)


def _fqn(path: str) -> str:
    """``nn_module_stack`` paths are FQNs (``blocks.0.attn``); older releases wrote ``L['self'].x``."""
    for prefix in ("L['self'].", "L__self__."):
        if path.startswith(prefix):
            path = path[len(prefix):]
    return "" if path in ("L['self']", "L__self__") else path


def _module_runs(modules: Sequence[str]) -> dict[str, list[int]]:
    """Every module FQN (and its ancestors) -> the operator positions under it."""
    runs: dict[str, list[int]] = {}
    for i, m in enumerate(modules):
        if not m:
            continue
        parts = m.split(".")
        for k in range(1, len(parts) + 1):
            runs.setdefault(".".join(parts[:k]), []).append(i)
    return runs


def _split_points(modules: Sequence[str], allowed, real: set[str]) -> dict[int, str]:
    """Operator position -> the outermost allowed module FQN beginning there, for modules whose operators
    form one run of the order (see the module doc)."""
    points: dict[int, str] = {}
    for fqn, pos in _module_runs(modules).items():
        if fqn not in real or (allowed is not None and fqn not in allowed):
            continue
        if pos[-1] - pos[0] + 1 != len(pos) or pos[0] == 0:
            continue  # not one run (called twice, interleaved), or at the very start: no cut there
        p = pos[0]
        if p not in points or fqn.count(".") < points[p].count("."):
            points[p] = fqn
    return points


#: torch loggers that report on stderr (their own handlers) an export failure the exception carries too: a
#: bad example shape (a fake-tensor traceback), data-dependent control flow (a symbolic-shapes warning),
#: an error torch's export database classifies (the exporter's own log)
_EXPORTER_LOGGERS = ("torch._subclasses.fake_tensor", "torch.fx.experimental.symbolic_shapes",
                     "torch.export._trace")


class _HeldStream:
    """A stand-in for ``sys.stdout``/``sys.stderr`` while an export runs: what torch's own code writes
    from the exporting thread is dropped; other threads' writes, and the module's own (its ``print``
    in ``forward``), go to the stream it stands for. Anything else is the stream's."""

    def __init__(self, stream, thread: int) -> None:
        self._stream, self._thread, self.held = stream, thread, True

    def write(self, text: str) -> int:
        # a print's write is called from the print's caller: that frame says whose print it is (past the
        # writes of other held streams, where two threads export at once)
        if self.held and threading.get_ident() == self._thread:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code is _HeldStream.write.__code__:
                frame = frame.f_back
            caller = (frame.f_globals.get("__name__") if frame is not None else None) or ""
            if caller == "torch" or caller.startswith("torch."):
                return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _unheld(stream):
    """The stream a :class:`_HeldStream` stands for, past those no longer holding anything."""
    while isinstance(stream, _HeldStream) and not stream.held:
        stream = stream._stream
    return stream


@contextlib.contextmanager
def _exporter_logs_held():
    """While ``torch.export`` runs in this thread, drop what :data:`_EXPORTER_LOGGERS` log from it, and
    what torch prints from it on stdout or stderr: a bad example shape is logged there as a traceback
    (``E... fake_tensor.py ... failed while attempting to run meta``), data-dependent control flow
    (``if x.sum() > 0:``) as a symbolic-shapes warning followed by the partial graph, printed twice; the
    export then raises, and :func:`place_module` raises that as an :class:`InputError`. A library call
    prints nothing; other threads' records and writes pass, and everything is as it was on exit (the
    loggers' levels are never touched)."""
    thread = threading.get_ident()

    def other_threads(record: logging.LogRecord) -> bool:
        return record.thread != thread

    loggers = [logging.getLogger(name) for name in _EXPORTER_LOGGERS]
    for lg in loggers:
        lg.addFilter(other_threads)
    held = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None:  # (None: no console, nothing printed anyway)
            held.append((name, _HeldStream(stream, thread)))
            setattr(sys, name, held[-1][1])
    try:
        yield
    finally:
        # a stream replaced in the meantime (by another thread) is left to whoever replaced it; ours then
        # passes everything through
        for name, stream in held:
            stream.held = False
            if getattr(sys, name) is stream:
                setattr(sys, name, _unheld(stream))
        for lg in loggers:
            lg.removeFilter(other_threads)


def _check_examples(example_args, example_kwargs, torch) -> None:
    """Refuse example inputs :func:`place_module` cannot pass to the module as they are: ``example_args``
    a tuple (or other sequence) of positional inputs, not one tensor (it was read as its rows: one row is
    silently a smaller input), a str or a mapping; ``example_kwargs`` a mapping by name, or ``None``."""
    if isinstance(example_args, torch.Tensor):
        raise ArgumentTypeError("place_module(example_args=...) takes a tuple of the module's positional "
                                "inputs, got a Tensor: give (x,) for one input")
    if isinstance(example_args, (str, bytes, Mapping)) or not isinstance(example_args, Iterable):
        hint = " (inputs by name go in example_kwargs)" if isinstance(example_args, Mapping) else ""
        raise ArgumentTypeError(f"place_module(example_args=...) takes a tuple of the module's positional "
                                f"inputs, got {type(example_args).__name__}{hint}")
    if example_kwargs is not None and not (isinstance(example_kwargs, Mapping)
                                           and all(isinstance(k, str) for k in example_kwargs)):
        raise ArgumentTypeError(f"place_module(example_kwargs=...) takes a mapping of the module's keyword "
                                f"inputs by name, or None, got {type(example_kwargs).__name__}")


def place_module(module: torch.nn.Module, example_args: Sequence, example_kwargs: Mapping | None = None,
                 devices: str | DeviceSet | None = None, *,
                 training: bool = False, costs: str | Mapping = "roofline", solver: str | None = None,
                 options: SolveOptions | None = None, optimizer: str = "adam",
                 split_points: Iterable[str] | str | None = None,
                 strict: bool = False, backward_factor: float = 2.0, max_replicas: int = 1,
                 schedule: str | None = None, microbatches: int | None = None) -> TorchPlacement:
    """Export ``module`` on the example inputs, build and cost its operator graph, place it and snap the
    stages to module boundaries (see the module doc). ``devices``, ``costs`` (``"roofline"``, a JSON
    table's path or the table as a mapping), ``solver`` and ``options`` are those of
    :func:`placement.place_model`; ``split_points``: the module FQNs stages may begin at, a sequence of str
    (default: every submodule that can), or ``"children"``; any other str is refused (one name goes in a
    list).

    ``max_replicas`` above 1 (or ``None``: as many as the devices allow) solves the stage model: each
    stage, still cut at split points, may run ``d`` data-parallel replicas (``stage_replicas``), with
    memory by ``schedule`` (default ``1f1b``) over ``microbatches``; no tensor parallelism or
    recomputation (``split_spec`` cannot express them). The default stays one device per stage:
    ``pipeline()`` runs one device per stage, and replicas need a data-parallel group per stage around
    it.

    A bad argument is an :class:`InputError` naming it, before the export (one of the wrong type is an
    :class:`~placement.inmemory.ArgumentTypeError`, also a ``TypeError``); so is a module that
    ``torch.export`` cannot export (data-dependent control flow, say), with nothing printed. A time limit
    or a proven infeasibility is a status, not an error: the result then has no stages (see
    :class:`TorchPlacement`)."""
    from graphs.coarsen import merge_by_key
    from graphs.costs import parse_cost_table
    from graphs.evaluate import evaluate
    from graphs.onnx_workload import build_opgraph, graph_workload
    from graphs.reference import Workload

    from .inmemory import check_flag, check_place_model_args, device_set

    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise ArgumentTypeError(f"place_module(module=...) takes a torch.nn.Module, got "
                                f"{type(module).__name__}")
    _check_examples(example_args, example_kwargs, torch)
    ds = device_set(devices, "place_module")
    # place_model's checks: nothing given here is ignored (microbatches=0 is no "default")
    costs = check_place_model_args(
        "place_module", training=training, costs=costs, solver=solver, options=options, optimizer=optimizer,
        backward_factor=backward_factor, max_replicas=max_replicas, schedule=schedule,
        microbatches=microbatches)["costs"]
    check_flag(strict, "strict", "place_module")
    if costs == "profile":
        raise InputError("the 'profile' cost model runs ONNX models; for a torch module use 'roofline' or a "
                         "cost table")
    by_children = isinstance(split_points, str) and split_points == "children"
    named = None if split_points is None or by_children else _names(split_points)  # before the export
    source = f"torch:{type(module).__name__}"
    try:
        with _exporter_logs_held():
            ep = torch.export.export(module, tuple(example_args), kwargs=dict(example_kwargs or {}),
                                     strict=strict)
    except Exception as e:  # the exporter's errors are many and untyped
        raise InputError(f"torch.export failed: {type(e).__name__}: {str(e).strip()[:400]}",
                         source=source) from None
    g, modules = operator_graph(ep, source=source)
    if isinstance(costs, Mapping):
        table = parse_cost_table(g, ds, dict(costs), source="cost table")
        w = Workload(build_opgraph(g, table, training=training, optimizer=optimizer,
                                   backward_factor=backward_factor, devices=str(ds)), ds.cluster())
    else:
        w = graph_workload(g, ds, costs, training, optimizer, backward_factor=backward_factor)
    graph, cluster = w.graph, w.cluster
    graph.meta["module"] = modules
    real = {name for name, _ in module.named_modules() if name}
    children = tuple(name for name, _ in module.named_children())
    if by_children:
        allowed = set(children)
    elif named is None:
        allowed = None
    else:
        allowed = set(named)
        unknown = sorted(allowed - real)
        if unknown:
            raise InputError(f"split point(s) {', '.join(unknown[:5])} name no submodule of the module",
                             source=source)
    points = _split_points(modules, allowed, real)
    n_fwd = len(modules)
    segment = np.cumsum([1 if i in points else 0 for i in range(n_fwd)])
    if max_replicas != 1 or schedule is not None or microbatches is not None:
        return _place_stages(g, graph, ds, modules, points, segment, children, source, solver=solver,
                             options=options, max_replicas=max_replicas, schedule=schedule,
                             microbatches=microbatches)
    unsnapped = place(graph, cluster, solver, options)
    if unsnapped.solution.interrupted:  # a Ctrl-C: the second solve does not start
        return _no_plan(_not_sought(unsnapped), unsnapped, modules, points, g.batch_size, children)
    keys = [int(s) for s in segment] + [None] * (graph.num_nodes - n_fwd)
    coarse = place(merge_by_key(graph, keys), cluster, solver, options)
    if coarse.assignment is None:  # a status (stopped, infeasible), as place_model returns it
        return _no_plan(coarse, unsnapped, modules, points, g.batch_size, children)
    a = np.array(coarse.assignment, dtype=np.int64)
    fwd, moved = in_execution_order(a[:n_fwd], segment)
    notes = []
    sol = coarse.solution
    if moved:
        notes.append("a device's segments were not one run of the execution order; the later ones were moved "
                     "to the latest stage before them")
        a = _with_backward(graph, a, fwd)
    ev = evaluate(graph, cluster, a)
    if notes:
        from solvers._common import objective_value
        from solvers.base import Status

        value, _ = objective_value(graph, cluster, a, coarse.objective)  # the moved plan, on the objective
        sol = _replace(sol, assignment=a, objective=value, status=Status.FEASIBLE, bound=None, gap=None)
    snap_note = (f"a plan cut at module boundaries ({len(points)} split points): its status is among those "
                 f"plans; the free cut's {coarse.objective} is {unsnapped.solution.objective:.6g} "
                 f"({unsnapped.status.value})")
    sol = _replace(sol, message="; ".join(filter(None, [sol.message, snap_note])))
    snapped = Placement(graph, cluster, sol, ev, coarse.objective)
    stage_of_op, stage_starts, stage_devices = _stages(a[:n_fwd], points, cluster, n_fwd)
    return TorchPlacement(snapped, unsnapped, modules, points, stage_starts, stage_devices, stage_of_op,
                          g.batch_size, children, tuple(notes))


def _not_sought(free: Placement) -> Placement:
    """The placement cut at module boundaries that a Ctrl-C during the free solve (``free``, said
    interrupted) left unsought: no plan, status stopped, said interrupted."""
    import math

    from solvers.base import Status

    sol = dataclasses.replace(free.solution, assignment=None, plan=None, evaluation=None,
                              objective=math.inf, status=Status.STOPPED, bound=None, gap=None,
                              message="interrupted (Ctrl-C) during the free cut's solve: the plan cut at "
                                      "module boundaries was not sought")
    return dataclasses.replace(free, solution=sol, evaluation=None)


def _no_plan(snapped: Placement, unsnapped: Placement, modules, points, batch_size: int,
             children) -> TorchPlacement:
    """The :class:`TorchPlacement` of a solve that found no plan cut at module boundaries: no stages,
    the snapped solve's status and message (``time_per_run`` is ``inf``; :func:`split_spec` and
    :func:`layer_partition` refuse it)."""
    note = f"no placement cut at module boundaries: {snapped.solution.message or snapped.status.value}"
    return TorchPlacement(snapped, unsnapped, modules, points, (), (), (), batch_size, children, (note,))


def _names(split_points) -> list[str]:
    """``split_points`` as module FQNs: a sequence of str. A str other than ``"children"`` is refused
    rather than read as its characters (one name goes in a list); another type, or a name that is no
    str, is an :class:`~placement.inmemory.ArgumentTypeError`."""
    if isinstance(split_points, str):
        raise InputError(f"split_points={split_points!r}: give a list of module FQNs (one split point: "
                         f"[{split_points!r}]), or 'children'")
    if isinstance(split_points, (bytes, Mapping)) or not isinstance(split_points, Iterable):
        raise ArgumentTypeError(f"split_points takes module FQNs (a sequence of str), 'children' or None, "
                                f"got {type(split_points).__name__}")
    names = list(split_points)
    bad = [x for x in names if not isinstance(x, str)]
    if bad:
        raise ArgumentTypeError(f"split_points takes module FQNs (str), got {bad[0]!r} "
                                f"({type(bad[0]).__name__})")
    return names


def _torch_placement(tp, fn: str) -> TorchPlacement:
    if not isinstance(tp, TorchPlacement):
        raise TypeError(f"{fn}(tp) takes place_module's TorchPlacement, got {type(tp).__name__}")
    if not tp.stage_devices:  # no plan: an empty spec would read as one stage
        raise InputError(f"{fn}(tp): there is no plan to apply (status {tp.status.value!r}: "
                         f"{tp.placement.solution.message or 'no placement'})")
    return tp


def _place_stages(g, graph, ds, modules, points, segment, children, source, *, solver, options, max_replicas,
                  schedule, microbatches) -> TorchPlacement:
    """:func:`place_module` in the stage model (replicas per stage; see its doc)."""

    from graphs.onnx_variants import onnx_parallel_problem
    from graphs.parallel import Stage, evaluate_plan, stage_devices
    from solvers.base import SolveOptions, Status
    from solvers.registry import solve

    options = options or SolveOptions()  # (max_replicas: checked by place_module)
    cluster, n_fwd = ds.cluster(), len(modules)
    batch = max(1, int(g.batch_size or 1))

    def build(keys):
        gr = dataclasses.replace(graph, meta={**graph.meta, "layer": keys})
        return onnx_parallel_problem(g, gr, ds, microbatches=microbatches, schedule=schedule or "1f1b",
                                     max_replicas=max_replicas, tensor_parallel=False, recompute=False,
                                     granularity="layer")

    def placement(problem, node_of, sol):
        return Placement(graph, cluster, sol, None, options.objective, problem=problem, node_of=node_of,
                         time_scale=1e3 * batch, settings={"granularity": "module boundaries"})

    free, free_cls = build((None,) * n_fwd)
    unsnapped = placement(free, free_cls, solve(free, solver=solver or "auto", options=options))
    if unsnapped.solution.interrupted:  # a Ctrl-C: the second solve does not start
        return _no_plan(_not_sought(unsnapped), unsnapped, modules, points, g.batch_size, children)
    problem, cls = build(tuple(f"segment {int(s)}" for s in segment))
    sol = solve(problem, solver=solver or "auto", options=options)
    if sol.plan is None:  # a status (stopped, infeasible), as place_model returns it
        return _no_plan(placement(problem, cls, sol), unsnapped, modules, points, g.batch_size, children)
    plan = list(sol.plan)
    stage_of_node = {u: i for i, st in enumerate(plan) for u in st.nodes}
    order = np.array([stage_of_node[int(cls[i])] for i in range(n_fwd)], dtype=np.int64)
    fwd, moved = in_execution_order(order, segment)
    labels = list(dict.fromkeys(fwd.tolist()))  # the stages in execution order
    notes = []
    if moved or labels != sorted(labels):
        # torch cuts in execution order: the stages in that order, each keeping its kind and degrees and
        # taking the segments moved into it, re-evaluated (memory in flight depends on the position)
        if moved:
            notes.append("a stage's segments were not one run of the execution order; the later ones were "
                         "moved to the latest stage before them")
        else:
            notes.append("the stages run in another order than the plan's (independent branches): the plan "
                         "re-evaluated in execution order")
        pg = problem.graph
        variant = {(v.node, v.kind, v.t): j for j, v in enumerate(pg.variants) if v.name == "vanilla"}
        stages = []
        for k in labels:
            ns = sorted({int(cls[i]) for i in range(n_fwd) if fwd[i] == k})
            st = plan[k]
            chosen = tuple(variant[(u, st.kind, st.t)] for u in ns)
            stages.append(Stage(tuple(ns), st.kind, st.d, st.t, chosen))
        plan = stages
        ev = evaluate_plan(problem, plan)
        if not ev.valid:
            raise InputError(f"no placement cut at module boundaries in execution order: "
                             f"{'; '.join(ev.problems[:3])}", source=source)
        sol = dataclasses.replace(sol, plan=tuple(plan), evaluation=ev, objective=ev.objective,
                                  status=Status.FEASIBLE, bound=None, gap=None)
        fwd = np.array([labels.index(int(x)) for x in fwd], dtype=np.int64)
    free_value = unsnapped.max_load
    snap_note = (f"a plan cut at module boundaries ({len(points)} split points): its status is among those "
                 f"plans; the free cut's time per run is {free_value:.6g} ({unsnapped.status.value})")
    sol = dataclasses.replace(sol, message="; ".join(filter(None, [sol.message, snap_note])))
    snapped = placement(problem, cls, sol)
    starts = tuple(points[i] for i in range(1, n_fwd) if fwd[i] != fwd[i - 1])
    return TorchPlacement(snapped, unsnapped, modules, points, starts,
                          tuple(stage_devices(problem, plan)), tuple(int(x) for x in fwd), g.batch_size,
                          children, tuple(notes), tuple(st.d for st in plan))


def in_execution_order(a_fwd: Sequence[int] | np.ndarray,
                       segment: Sequence[int] | np.ndarray) -> tuple[np.ndarray, bool]:
    """Stages in execution order: devices are ranked by their first operator; a device whose segments
    are not one run of that order (possible only where segments exchange no data) has the later ones
    moved to the latest stage before them, which keeps every edge pointing forward. Returns the
    assignment of the operators and whether any moved."""
    a_fwd = np.asarray(a_fwd, dtype=np.int64)
    first: dict[int, int] = {}
    for d in a_fwd.tolist():
        first.setdefault(d, len(first))
    seg_stage = np.zeros(int(segment[-1]) + 1, dtype=np.int64)
    seg_stage[np.asarray(segment)] = [first[d] for d in a_fwd.tolist()]
    mono = np.maximum.accumulate(seg_stage)
    if np.array_equal(mono, seg_stage):
        return a_fwd, False
    by_stage = np.array([d for d, _ in sorted(first.items(), key=lambda kv: kv[1])], dtype=np.int64)
    return by_stage[mono[np.asarray(segment)]], True


def _replace(sol, **kw):
    from dataclasses import replace

    return replace(sol, **kw)


def _with_backward(graph, a, fwd):
    """``fwd`` for the forward nodes; backward twins follow their forward node (colocation)."""
    out = a.copy()
    n = len(fwd)
    out[:n] = fwd
    for i in range(n, graph.num_nodes):
        out[i] = fwd[i % n]
    return out


def _stages(a_fwd, points, cluster, n):
    """Stage index per operator (in execution order), the module FQN each later stage begins at, and the
    device of each stage."""
    stage_of_op, starts, devices = [], [], []
    prev = None
    for i in range(n):
        d = int(a_fwd[i])
        if d != prev:
            if prev is not None:
                if i not in points:  # cannot happen: segments share a device
                    raise InputError(f"internal: a stage begins at operator {i}, which is no split point")
                starts.append(points[i])
            devices.append(cluster.device_name(d))
            prev = d
        stage_of_op.append(len(devices) - 1)
    return tuple(stage_of_op), tuple(starts), tuple(devices)


def split_spec(tp: TorchPlacement) -> dict:
    """``{module FQN: SplitPoint.BEGINNING}`` for ``torch.distributed.pipelining.pipeline(...,
    split_spec=...)``: the snapped plan's stage boundaries (``tp.num_stages`` stages)."""
    from torch.distributed.pipelining import SplitPoint

    return {fqn: SplitPoint.BEGINNING for fqn in _torch_placement(tp, "split_spec").stage_starts}


def layer_partition(tp: TorchPlacement) -> dict:
    """A DeepSpeed ``PipelineModule``-style partition of a sequential model (an ``nn.Sequential``, or a
    module whose direct children run one after the other): ``{"stages": [[layer indices] per stage],
    "parts": [boundaries], "layers": [child names]}`` (stage ``s`` holds layers ``parts[s]`` to
    ``parts[s + 1] - 1``). Every stage must begin at a direct child: place with
    ``split_points="children"``."""
    children = list(_torch_placement(tp, "layer_partition").children)
    inner = [s for s in tp.stage_starts if s not in children]
    if inner:
        raise InputError(f"stage(s) begin inside a layer ({', '.join(inner[:3])}): place the module with "
                         f"split_points='children' for a layer partition")
    runs = _module_runs(tp.modules)
    stage_of_child = {}
    for c in children:
        pos = runs.get(c)
        if pos:
            stage_of_child[c] = tp.stage_of_op[pos[0]]
    firsts = sorted((runs[c][0], c) for c in stage_of_child)
    layers = [c for _, c in firsts]
    if layers != [c for c in children if c in stage_of_child]:
        raise InputError("the module's children do not run in the order they are declared: not a sequential "
                         "model")
    stages: list[list[int]] = [[] for _ in range(tp.num_stages)]
    for k, c in enumerate(layers):
        stages[stage_of_child[c]].append(k)
    parts = [0]
    for s in stages[:-1]:
        parts.append(parts[-1] + len(s))
    parts.append(len(layers))
    return {"stages": stages, "parts": parts, "layers": layers}


