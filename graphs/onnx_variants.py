"""The replicated model (:mod:`graphs.parallel`) of an ONNX model: every node's variants derived from
the model itself.

:func:`onnx_parallel_problem` starts from the pipeline-only problem of the costed operator graph
(:func:`graphs.parallel.from_opgraph` on the graph :func:`graphs.onnx_workload.build_opgraph` makes, so
the nodes, tensors and their times are exactly the one-device-per-stage placement's) and replaces each
node's variant by these, per device kind:

* **units**: seconds per sample. The graph's times are milliseconds per micro-batch (one run of the
  model at the front end's batch size ``b``, the value of a symbolic batch dimension; 1 when the
  model's batch is fixed, so a "sample" is then one run), so they are scaled by ``1e-3 / b``; ``N``
  micro-batches make a batch.
* **vanilla** (``t = 1``): time = forward + backward; ``A`` = the forward operators' output bytes (what
  the backward pass reads, stashed per micro-batch in flight); ``B`` = parameters + gradients of the
  trainable ones + optimizer state (:data:`graphs.training.OPTIMIZERS` tensors per trainable parameter);
  ``W`` = the trainable weights (the part of ``B`` a weight version copies); ``params`` = the gradient
  bytes the replicas all-reduce once per batch (divided by ``b``, because the model's resync term
  is per micro-batch and its times per sample). An inference graph has ``A = W = params = 0`` and
  ``B`` = parameters (one run in flight per stage holds nothing to stash for a backward pass).
* **recompute** (training): only the outputs that leave their layer (layer keys of
  :func:`graphs.onnx_workload.layer_keys`) are stashed; every other activation is recomputed in the
  backward pass, which costs one more forward pass (with ``t > 1`` its all-reduces too: the forward
  pass's are run again, as Megatron-LM's recomputation runs them). Keeping each layer's output rather
  than its input is the same count of tensors per stage, off by one at the stage's ends (the same size
  in a transformer). Only offered where it stashes less than vanilla.
* **tensor-parallel** (``t`` in 2, 4, 8 up to the kind's count and server size, on kinds that pay
  communication): in a layer with at least two weighted ``MatMul``/``Gemm`` operators (a transformer
  block), operators are split Megatron-style, found by following which tensors are split: a weighted
  matrix product reading a whole tensor is column-parallel (its output split; the backward pass
  all-reduces its input's gradient, once per input tensor; inference has no such all-reduce), one
  reading a split tensor is row-parallel (it all-reduces its output); every other operator reading a
  split tensor is split too (attention heads, bias, activation). A split tensor that leaves the layer
  is gathered (costed as an all-reduce).
  Split operators take ``launch + (time - launch) / t`` and ``1/t`` of their weights, gradients and
  optimizer state, and of their stash where their output stays split; the others run replicated on
  all ``t`` devices. An all-reduce of ``S`` bytes among ``t`` devices takes
  ``4 (t - 1) / t * S / bandwidth`` (the convention of the model's replica resync) over the kind's
  intra-server bandwidth (its host link when the kind has no topology figures). A split tensor that
  crosses a stage boundary (a stage cut inside a layer) pays a gather as a sync term. A node gets
  variants for each ``t`` that ``placement split`` can carry out on every operator of it
  (:meth:`SplitLayout.refusal`: the split axis of every split tensor followed through the layer, and
  ``t`` dividing it: 4 heads take ``t`` = 2 or 4, not 8, also behind a fused QKV projection, split part
  by part, as GPT-2's ``c_attn`` and ``nn.MultiheadAttention`` export; a ``Reshape`` whose target
  shape the model computes at run time (``Shape -> Slice/Gather -> Concat -> Reshape``, as TorchScript
  writes ``nn.MultiheadAttention`` and a ``view(b, s, heads, dh)`` with ``b, s = x.size()``, and dynamo
  writes ``nn.MultiheadAttention`` with a symbolic batch) is split where the front end folds that
  ``Shape`` (:attr:`graphs.onnx_loader.OnnxGraph.shape_nodes`: its input's shape is known at the
  model's input shape): the target is then a constant at that shape, and ``placement split`` writes
  each rank's with its share of the heads; a ``Softmax`` along the split axis, a ``Split`` along it
  that is not a fused projection's or a ``Reshape`` to a shape that stays unknown (a length known only
  at run time, after ``NonZero`` or ``Compress``) take none); operators outside
  such layers run replicated, so they take every ``t``. :func:`tensor_split` and :func:`split_layout`
  are the one place this rule lives: ``placement split`` and ``placement run``
  (:mod:`placement.tensor_parallel`) divide exactly the operators it marks, and refuse a stage with the
  same check.

``granularity="layer"`` first merges each layer key's operators (and their backward twins) into one node
(a much smaller graph for the exact DP); the variants are the sums of their operators'. A node's id is
its layer key at that granularity, else its operators' names joined by ``+``.

With ``max_replicas = 1``, ``tensor_parallel = False``, ``recompute = False`` and
``stash="once"`` (``A`` folded into ``B``: one micro-batch of activations, as the one-device-per-stage
memory model),
the problem is the one-device-per-stage one: the DP's optimum times ``1e3 * b`` is its max-load. With
``stash="schedule"`` (the default) memory is ``A*y + B`` by schedule; that agrees with it where
memory does not bind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .devices import DeviceSet
from .errors import InputError
from .model import OpGraph
from .onnx_loader import OnnxGraph, Op, Tensor
from .order import topological_order
from .parallel import ParallelGraph, ParallelProblem, Variant, from_opgraph
from .training import OPTIMIZERS

__all__ = ["TP_DEGREES", "TensorSplit", "tensor_split", "SplitRule", "SplitLayout", "split_layout",
           "onnx_parallel_problem", "stage_problem", "default_microbatches", "allreduce_time"]

#: tensor-parallel degrees offered (each capped by the kind's count and server size)
TP_DEGREES = (2, 4, 8)
_MATMULS = ("MatMul", "Gemm")


def allreduce_time(nbytes: float, t: int, bandwidth: float) -> float:
    """Seconds to all-reduce ``nbytes`` among ``t`` devices (the replica resync's convention)."""
    return 0.0 if t <= 1 or nbytes <= 0 else 4.0 * (t - 1) / t * nbytes / bandwidth


class TensorSplit:
    """Which operators a tensor-parallel split divides, and the bytes each one all-reduces (forward and
    backward) — see the module doc. ``out_split[i]``: operator ``i``'s output stays split;
    ``column[i]``/``row[i]``: operator ``i`` is a column-/row-parallel weighted matrix product (the
    others with ``split[i]`` read a split tensor and are divided alongside it). ``keys``: the layer key
    of every operator the split was found with. The cost model (:func:`onnx_parallel_problem`) and
    ``placement split`` (:mod:`placement.tensor_parallel`) both read this one analysis."""

    def __init__(self, n: int, keys: Sequence[str | None] | None = None) -> None:
        self.split = np.zeros(n, bool)
        self.out_split = np.zeros(n, bool)
        self.column = np.zeros(n, bool)
        self.row = np.zeros(n, bool)
        self.keys: tuple[str | None, ...] = tuple(keys) if keys is not None else (None,) * n
        self.allreduce = np.zeros(n)  # bytes per micro-batch, forward + backward
        self.backward_allreduce = np.zeros(n)  # the part the backward pass all-reduces (input gradients)
        self.blocks: list[str] = []

    def reads_split(self, producer: int, consumer: int) -> bool:
        """Does ``consumer`` read ``producer``'s output split: it stays split and both are in one layer
        (a split output read outside its layer is gathered first)."""
        return bool(self.out_split[producer]) and self.keys[producer] == self.keys[consumer]


def tensor_split(g: OnnxGraph, keys: Sequence[str | None]) -> TensorSplit:
    """The Megatron-style split of every layer with at least two weighted matrix products."""
    n = g.num_ops
    ts = TensorSplit(n, keys)
    weighted = np.array([op.op_type in _MATMULS and op.trainable_bytes > 0 for op in g.ops])
    count: dict[str, int] = {}
    for i in np.flatnonzero(weighted):
        if keys[i] is not None:
            count[keys[i]] = count.get(keys[i], 0) + 1
    ts.blocks = sorted(k for k, c in count.items() if c >= 2)
    if not ts.blocks:
        return ts
    blocks = set(ts.blocks)
    src, dst = np.asarray(g.src), np.asarray(g.dst)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        preds[b].append(a)
        succs[a].append(b)
    order = topological_order(n, src, dst)
    reduced_inputs: set[int] = set()  # producers whose output's gradient is already all-reduced
    for i in order.tolist():
        key = keys[i]
        if key not in blocks:
            continue
        op = g.ops[i]
        reads_split = any(ts.reads_split(p, i) for p in preds[i])
        ts.split[i] = True
        if weighted[i] and reads_split:  # row-parallel: all-reduce the output
            ts.row[i] = True
            ts.allreduce[i] += op.output_bytes
        elif weighted[i]:  # column-parallel: the backward pass all-reduces the input's gradient
            ts.column[i] = True
            ts.out_split[i] = True
            ins = [p for p in preds[i] if p not in reduced_inputs]
            reduced_inputs.update(ins)
            grads = sum(g.ops[p].output_bytes for p in ins) if preds[i] else \
                sum(t.nbytes or 0 for t in op.activations)
            ts.allreduce[i] += grads
            ts.backward_allreduce[i] += grads
        else:
            ts.split[i] = reads_split
            ts.out_split[i] = reads_split
        if ts.out_split[i] and (not succs[i] or any(keys[s] != key for s in succs[i])):
            ts.allreduce[i] += op.output_bytes  # gathered where it leaves the layer
    return ts


# --------------------------------------------------------------------------- the layout of a split
_UNARY = {"Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Neg", "Sqrt", "Exp", "Log", "Cast", "Identity",
          "Softplus", "Reciprocal", "Abs", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu",
          "Mish", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "ThresholdedRelu",
          "Softsign", "Dropout"}
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where", "Equal", "Less",
                "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "PRelu", "BitShift"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


class _NoSplit(Exception):
    """An operator's split cannot be followed (the message says why)."""


@dataclass(frozen=True)
class SplitRule:
    """How one split operator is divided: ``kind`` is ``column``, ``row`` or ``split``; ``actions`` the
    changes to make to its inputs (``("slice", slot, axis, size, parts)``: the whole input cut along
    ``axis``, rank ``r`` taking chunk ``r`` of each of its ``parts`` equal parts (1: one contiguous
    chunk; :func:`chunk`); ``("bias_once", slot)``; ``("reshape", slot, out_axis, in_axis, src, full,
    allowzero, shape)``; ``("expand", slot, pos, shape)``; ``("split_sizes", where, parts, size)``: a
    fused projection's ``Split`` of ``size`` into ``parts``, whose sizes (given as its second input,
    its ``split`` attribute, or ``equal`` parts) become ``size / (parts * t)``), ``out_axis`` the split
    axis of its outputs (``None`` for a row-parallel product: a partial sum) and ``out_parts`` the
    number of parts they are held in (:attr:`SplitLayout.parts`; ``None``: as its split input's)."""

    kind: str
    actions: tuple[tuple, ...]
    out_axis: int | None
    out_parts: int | None = None


@dataclass(frozen=True)
class SplitLayout:
    """The tensor-parallel split of a whole model: ``ts`` the analysis (:func:`tensor_split`), ``op_of``
    every operator's index by name, ``axis`` the split axis of every split tensor, ``rules`` how every
    split operator is divided and ``failed`` why the others' split cannot be followed (by operator
    index). ``parts``: the split tensors held in ``k > 1`` equal parts along their split axis, by name:
    rank ``r`` holds chunk ``r`` of each part (:func:`chunk`). A fused projection's (from its product to
    the ``Split`` or ``Reshape`` that takes its parts apart) are, and so is a tensor whose split axis a
    ``Reshape`` merged with an outer one (``[s, b, heads*dh]`` -> ``[s, b*heads, dh]``: ``b`` parts);
    every other split tensor is one part. :meth:`refusal` is the one check of whether a split can be
    carried out ``t`` ways."""

    ts: TensorSplit
    ops: tuple[Op, ...]
    op_of: Mapping[str, int]
    producer: Mapping[str, int]
    axis: Mapping[str, int]
    rules: Mapping[int, SplitRule]
    failed: Mapping[int, str]
    parts: Mapping[str, int] = field(default_factory=dict)
    #: the loader's :attr:`~graphs.onnx_loader.OnnxGraph.values`, :attr:`~graphs.onnx_loader.OnnxGraph.
    #: shape_nodes` and symbolic input dimensions (``dims``): the shapes the rules read were folded there
    values: Mapping[str, np.ndarray] = field(default_factory=dict)
    shape_nodes: frozenset[str] = frozenset()
    dims: Mapping[str, int] = field(default_factory=dict)

    def split_input(self, x: str, consumer: int) -> bool:
        """Does operator ``consumer`` read tensor ``x`` split?"""
        p = self.producer.get(x)
        return p is not None and self.ts.reads_split(p, consumer)

    def refusal(self, i: int, t: int) -> str | None:
        """Why operator ``i``'s split cannot be carried out ``t`` ways (``None``: it can, or the rule
        leaves it whole). Rank ``r`` holds chunk ``r`` of ``t`` equal chunks of every split tensor (of
        each of its parts, for a fused projection's), so each tensor it reads split, and each whole one
        its rule cuts, must have a known size along the split axis that ``t`` (times its parts) divides
        (a stage may start at any operator and cut what it receives), as must the split dimension a
        ``Reshape`` or ``Expand`` makes. The cost model offers ``t`` only
        where this is ``None`` for every operator, and ``placement split`` refuses a stage otherwise."""
        if t <= 1 or not self.ts.split[i]:
            return None
        rule = self.rules.get(i)
        if rule is None:
            return self.failed.get(i, "its split could not be followed")
        op = self.ops[i]
        for tns in op.inputs:
            if tns is not None and self.split_input(tns.name, i):
                a, k = self.axis[tns.name], self.parts.get(tns.name, 1)
                n = tns.shape[a] if tns.shape is not None and a < len(tns.shape) else None
                if n is None or n % (k * t):
                    return (f"it reads {tns.name!r} split into {t} equal chunks{_of_parts(k)} along axis "
                            f"{a}, whose size is {n}")
        for act in rule.actions:
            if act[0] == "slice" and (act[3] is None or act[3] % (act[4] * t)):
                name = op.inputs[act[1]].name
                return (f"it needs {name!r} cut into {t} equal chunks{_of_parts(act[4])} along axis "
                        f"{act[2]}, whose size is {act[3]}")
            if act[0] == "reshape" and act[5] % ((rule.out_parts or 1) * t):
                return (f"it makes a dimension of {act[5]} along the split axis, which does not divide into "
                        f"{t} equal chunks{_of_parts(rule.out_parts or 1)} (heads not a multiple of t?)")
            if act[0] == "expand" and act[3][act[2]] % t:
                return (f"it expands the split axis to {act[3][act[2]]}, which does not divide into {t} "
                        f"equal parts")
        return None

    def divisible(self, t: int) -> np.ndarray:
        """Per operator, whether its split can be carried out ``t`` ways (:meth:`refusal` is ``None``)."""
        return np.array([self.refusal(i, t) is None for i in range(len(self.ops))], bool)


def _of_parts(k: int) -> str:
    return f" of each of its {k} parts" if k > 1 else ""


def split_layout(g: OnnxGraph, keys: Sequence[str | None] | None = None) -> SplitLayout:
    """The split of the model ``g`` (layer keys ``keys``, by default :func:`graphs.onnx_workload.
    layer_keys`) as the cost model makes it (:func:`tensor_split`), with the layout of every split
    tensor: rank ``r`` of ``t`` holds chunk ``r`` of ``t`` equal contiguous chunks along one axis. The
    axis starts at a column-parallel product's last axis (its weight's columns) and is followed operator
    by operator through the layer (a ``Transpose`` or ``Gather`` moves it, a ``Reshape`` maps it to the
    output axis whose contiguous chunks are the same elements, so ``[b, s, hidden]`` -> ``[b, s, heads,
    dh]`` splits the heads). A tensor may be held in ``k`` equal **parts** along its split axis, rank
    ``r`` holding chunk ``r`` of each (``SplitLayout.parts``); a ``Reshape`` maps each part with what
    follows it (a block of the flat order) to blocks of its output, so ``[s, b, heads*dh]`` -> ``[s,
    b*heads, dh]`` gives ``b`` parts of ``heads`` and ``[b*heads, s, dh]`` -> ``[b, heads, s, dh]`` one
    again. A **fused projection** (a column-parallel product whose output is read only by a ``Split``
    into ``k`` equal parts along the split axis, or by a ``Reshape`` of its columns into ``[k,
    columns/k]`` whose ``k`` axis is then taken apart by ``Gather``, ``Slice`` or ``Split``, directly or
    through operators that each are the only reader of the one before and work elementwise on it, as
    the bias ``Add`` of a ``MatMul`` + ``Add`` export: QKV, ``k = 3``) is split part by part: rank
    ``r`` holds chunk ``r`` of each part of the product's columns (its weight's and bias's columns
    ``[c*h + r*h/t, c*h + (r+1)*h/t)`` for part ``c`` of width ``h``), the ``Split`` makes parts of
    ``h/t`` (the ``Reshape``, ``[.., k, h/t]``), and each part it makes is a split tensor as any other.
    An operator the rule splits but whose split cannot be followed (a ``Softmax`` or ``Concat`` along
    the split axis, a reduction or ``Gather`` over it, a ``Split`` along it that is not a fused
    projection's, a ``Reshape`` to a shape the front end could not fold to a constant, an operator type
    not known here) is in
    ``failed`` with the reason, as is every split operator reading what it makes (the reason names the
    operator where the split stopped)."""
    if keys is None:
        from .onnx_workload import layer_keys

        keys = layer_keys(g)
    ts = tensor_split(g, keys)
    producer = {t.name: i for i, op in enumerate(g.ops) for t in op.outputs}
    axis: dict[str, int] = {}
    rules: dict[int, SplitRule] = {}
    failed: dict[int, str] = {}
    root: dict[int, tuple[str, str]] = {}  # failed reading a failed split: where it first failed, why
    values = g.values
    fused = _fused_parts(g, ts, values) if ts.split.any() else {}
    parts: dict[str, int] = {}
    layout = SplitLayout(ts, tuple(g.ops), {op.name: i for i, op in enumerate(g.ops)}, producer, axis, rules,
                         failed, parts, values, g.shape_nodes, g.dims)
    if not ts.split.any():
        return layout
    order = topological_order(g.num_ops, np.asarray(g.src), np.asarray(g.dst))
    for i in order.tolist():
        if not ts.split[i]:
            continue
        op = g.ops[i]
        in_axes: list[int | None] = []
        in_parts: set[int] = set()
        try:
            for t in op.inputs:
                if t is not None and layout.split_input(t.name, i):
                    if t.name not in axis:  # named at the operator where the split stopped
                        p, why = root.get(producer[t.name], (g.ops[producer[t.name]].name,
                                                             failed.get(producer[t.name], "?")))
                        root[i] = (p, why)
                        raise _NoSplit(f"it reads {t.name!r}, whose split could not be followed (at {p!r}: "
                                       f"{why})")
                    in_axes.append(axis[t.name])
                    in_parts.add(parts.get(t.name, 1))
                else:
                    in_axes.append(None)
            kind = "column" if ts.column[i] else "row" if ts.row[i] else "split"
            if len(in_parts) > 1:
                raise _NoSplit(f"it reads split tensors held in different numbers of parts "
                               f"({sorted(in_parts)}) together")
            k = max(in_parts, default=1)
            if kind == "column":  # a fused projection's product holds its parts (found ahead)
                k = fused.get(op.outputs[0].name, 1)
            if k > 1 and op.op_type == "Split" and in_axes[0] is not None \
                    and _equal_parts(op, in_axes[0], values) == k:
                rule = _fused_split_rule(op, in_axes[0], k)
            else:
                rule = _with_parts(_rule(kind, op, in_axes, values, g.opset, k), k)
        except _NoSplit as e:
            failed[i] = str(e)
            continue
        rules[i] = rule
        if rule.out_axis is not None:
            for t in op.outputs:
                axis[t.name] = rule.out_axis
                if rule.out_parts and rule.out_parts > 1:
                    parts[t.name] = rule.out_parts
    return layout


def _equal_parts(op: Op, axis: int, values: Mapping[str, np.ndarray]) -> int:
    """The number of equal parts ``k > 1`` the ``Split`` ``op`` cuts its input into along ``axis``, or
    0 (another axis, unequal or unknown sizes)."""
    src = op.inputs[0].shape if op.inputs and op.inputs[0] is not None else None
    if src is None or axis >= len(src) or src[axis] is None:
        return 0
    ax = int(op.attrs.get("axis", 0))
    k, n = len(op.outputs), int(src[axis])
    if (ax + len(src) if ax < 0 else ax) != axis or k < 2:
        return 0
    if _has(op, 1):  # opset >= 13: the sizes as an input
        x = op.inputs[1].name
        if x not in values:
            return 0
        sizes = [int(v) for v in np.asarray(values[x]).reshape(-1)]
    elif op.attrs.get("split") is not None:
        sizes = [int(v) for v in op.attrs["split"]]  # type: ignore[union-attr]
    else:  # equal parts (``num_outputs`` at opset 18, the outputs' count before); ONNX rounds the last
        sizes = [n // k] * k if n % k == 0 else []
    return k if len(sizes) == k and all(v * k == n for v in sizes) else 0


def _fused_parts(g: OnnxGraph, ts: TensorSplit, values: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The fused projections (see :func:`split_layout`): the tensors from each column-parallel product
    to the ``Split`` of its output into ``k`` equal parts along the split axis, or to the ``Reshape``
    of its columns into ``[k, columns / k]`` whose ``k`` axis is taken apart
    (:func:`_reshaped_parts`), each mapped to ``k``."""
    readers: dict[str, set[int]] = {}
    for j, op in enumerate(g.ops):
        for t in op.inputs:
            if t is not None:
                readers.setdefault(t.name, set()).add(j)
    succs: dict[int, set[int]] = {}  # by edge too: a body's reads from the enclosing graph
    for a, b in zip(np.asarray(g.src).tolist(), np.asarray(g.dst).tolist()):
        succs.setdefault(a, set()).add(b)
    elementwise = _UNARY | _ELEMENTWISE
    parts: dict[str, int] = {}
    for i in np.flatnonzero(ts.column).tolist():
        op = g.ops[i]
        if len(op.outputs) != 1 or op.outputs[0].shape is None:
            continue
        shape = op.outputs[0].shape
        axis = len(shape) - 1  # a column-parallel product's columns
        chain, cur = [op.outputs[0].name], i
        while True:
            rd = readers.get(chain[-1], set())
            if len(rd) != 1 or succs.get(cur, set()) != rd:
                break
            (j,) = rd
            nxt = g.ops[j]
            if not ts.reads_split(cur, j) or nxt.domain:
                break
            if nxt.op_type in ("Split", "Reshape"):
                k = 0 if nxt.inputs[0].name != chain[-1] else _equal_parts(nxt, axis, values) \
                    if nxt.op_type == "Split" else _reshaped_parts(g, j, readers, values)
                if k:
                    parts.update((x, k) for x in chain)
                break
            if nxt.op_type not in elementwise or len(nxt.outputs) != 1 or nxt.outputs[0].shape != shape:
                break
            chain.append(nxt.outputs[0].name)
            cur = j
    return parts


def _reshaped_parts(g: OnnxGraph, j: int, readers: Mapping[str, set[int]],
                    values: Mapping[str, np.ndarray]) -> int:
    """``k`` where the ``Reshape`` ``g.ops[j]`` cuts its input's last axis (a product's columns) into
    ``[k, columns / k]`` and the ``k`` axis, followed through ``Transpose``, ``Unsqueeze`` and
    ``Squeeze`` (each its tensor's only reader), is read only by ``Gather``, ``Slice`` or ``Split``
    along it (``nn.MultiheadAttention``'s in-projection, exported by ``torch.onnx.export(...,
    dynamo=True)``: ``[s, b, 3E]`` -> ``[s, b, 3, E]``, then ``q, k, v`` selected); else 0."""
    op = g.ops[j]
    src, out = op.inputs[0].shape, op.outputs[0].shape
    if src is None or out is None or None in src or None in out:
        return 0
    outer = int(np.prod(src[:-1]))
    c = next((b for b in range(len(out)) if int(np.prod(out[:b])) == outer and out[b] > 1), None)
    if c is None or c + 1 >= len(out) or out[c] * int(np.prod(out[c + 1:])) != src[-1]:
        return 0
    x, ax = op.outputs[0].name, c
    while True:
        rd = [g.ops[q] for q in readers.get(x, ())]
        if not rd:
            return 0
        if all(_takes_apart(r, x, ax, values) for r in rd):
            return int(out[c])
        if len(rd) != 1 or rd[0].op_type not in ("Transpose", "Unsqueeze", "Squeeze") \
                or rd[0].inputs[0].name != x or len(rd[0].outputs) != 1:
            return 0
        try:
            ax = _rule("split", rd[0], [ax] + [None] * (len(rd[0].inputs) - 1), values, g.opset).out_axis
        except _NoSplit:
            return 0
        x = rd[0].outputs[0].name


def _takes_apart(op: Op, x: str, ax: int, values: Mapping[str, np.ndarray]) -> bool:
    """Does ``op`` read only its data input ``x`` along axis ``ax`` (a ``Gather``, ``Slice`` or
    ``Split`` along it)?"""
    if op.domain or not op.inputs or op.inputs[0].name != x or op.inputs[0].shape is None \
            or any(t is not None and t.name == x for t in op.inputs[1:]):
        return False
    R = len(op.inputs[0].shape)
    if op.op_type in ("Gather", "Split"):
        a = int(op.attrs.get("axis", 0))
        return (a + R if a < 0 else a) == ax
    if op.op_type == "Slice" and _has(op, 3) and op.inputs[3].name in values:
        axes = np.asarray(values[op.inputs[3].name]).reshape(-1).tolist()
        return [a + R if a < 0 else a for a in axes] == [ax]
    return False


def _with_parts(rule: SplitRule, k: int) -> SplitRule:
    """``rule`` for an operator whose split tensors are held in ``k`` parts (:attr:`SplitLayout.parts`):
    whole inputs it cuts along the split axis (weight columns, bias) are cut part by part, and its
    outputs are held in ``k`` parts unless the rule says otherwise (a ``Reshape``)."""
    out_parts = k if rule.out_parts is None else rule.out_parts
    acts = tuple(a[:4] + (k,) if a[0] == "slice" else a for a in rule.actions) if k > 1 else rule.actions
    return SplitRule(rule.kind, acts, rule.out_axis, out_parts)


def _fused_split_rule(op: Op, a: int | None, k: int) -> SplitRule:
    """The ``Split`` of a fused projection of ``k`` parts along the split axis ``a``: each rank's input
    holds its chunk of every part, so the sizes become ``size / (k * t)`` (each part it makes is split
    along ``a`` as usual)."""
    if a is None:
        raise _NoSplit("only its data input may be split")
    n = _shape(op.inputs[0])[a]
    where = "input" if _has(op, 1) else "attribute" if op.attrs.get("split") is not None else "equal"
    return SplitRule("split", (("split_sizes", where, k, n),), a, 1)


def _shape(t: Tensor | None) -> tuple:
    if t is None or t.shape is None:
        raise _NoSplit(f"the shape of {getattr(t, 'name', '?')!r} is unknown")
    return tuple(t.shape)


def _const(op: Op, slot: int, values: Mapping[str, np.ndarray], what: str) -> np.ndarray:
    x = op.inputs[slot].name if slot < len(op.inputs) and op.inputs[slot] is not None else ""
    if not x or x not in values:
        raise _NoSplit(f"its {what} ({x or 'absent'}) is not a constant of the model (computed at run time)")
    return np.asarray(values[x])


def _has(op: Op, slot: int) -> bool:
    return slot < len(op.inputs) and op.inputs[slot] is not None


def _rule(kind: str, op: Op, in_axes: list[int | None], values: Mapping[str, np.ndarray],
          opset: int, parts: int = 1) -> SplitRule:
    """How operator ``op`` is divided, given the split axis of each input it reads split (``None``:
    whole), held in ``parts`` parts. Raises :class:`_NoSplit`."""
    typ = op.op_type
    ins = op.inputs
    attrs = op.attrs
    split_in = [(k, a) for k, a in enumerate(in_axes) if a is not None]
    if op.domain:
        raise _NoSplit(f"operators of domain {op.domain!r} are not split here")
    if kind in ("column", "row"):
        return _matmul_rule(kind, op, in_axes)
    out = _shape(op.outputs[0]) if op.outputs else ()
    R = len(out)
    if typ in _UNARY or (typ == "Clip" and not any(a is not None for a in in_axes[1:])):
        if in_axes[0] is None:
            raise _NoSplit("its split input is not its data input")
        return SplitRule(kind, (), in_axes[0])
    if typ in _ELEMENTWISE:
        axes = {a + R - len(_shape(ins[k])) for k, a in split_in}
        if len(axes) != 1:
            raise _NoSplit(f"its inputs are split along different axes ({sorted(axes)})")
        (b,) = axes
        acts = []
        for k, t in enumerate(ins):
            if t is None or in_axes[k] is not None:
                continue
            s = _shape(t)
            j = b - (R - len(s))
            if j >= 0 and s[j] != 1:
                acts.append(("slice", k, j, s[j], 1))
        return SplitRule(kind, tuple(acts), b)
    a = in_axes[0]
    if a is None and typ not in ("MatMul", "Concat"):
        raise _NoSplit("only its data input may be split")
    if any(x is not None for x in in_axes[1:]) and typ not in ("MatMul", "Concat"):
        raise _NoSplit("an input other than its data is split")
    if typ == "Transpose":
        perm = list(attrs.get("perm") or reversed(range(R)))
        return SplitRule(kind, (), perm.index(a))
    if typ in ("Softmax", "LogSoftmax", "Hardmax"):
        ax = int(attrs.get("axis", -1 if opset >= 13 else 1))
        ax = ax + R if ax < 0 else ax
        if (a >= ax) if opset < 13 else (a == ax):
            raise _NoSplit(f"it normalises along the split axis {a}")
        return SplitRule(kind, (), a)
    if typ == "LayerNormalization":
        ax = int(attrs.get("axis", -1))
        ax = ax + R if ax < 0 else ax
        if a >= ax:
            raise _NoSplit(f"it normalises along the split axis {a}")
        return SplitRule(kind, (), a)
    if typ == "Reshape":
        src = _shape(ins[0])
        shape = _const(op, 1, values, "target shape")
        if None in src or None in out:
            raise _NoSplit("its shapes are not known")
        # a rank holds, in each block of a part and what follows it (m * inner elements, in C order), the
        # same chunk r of the block: so does the output's axis b whose (m_b * inner_b)-blocks are those,
        # with out[b] / m_b parts (the only such axis with m_b > 1)
        block = src[a] // parts * int(np.prod(src[a + 1:]))
        for b in range(R):
            inner_b = int(np.prod(out[b + 1:]))
            m_b = block // inner_b if block % inner_b == 0 else 0
            if m_b > 1 and out[b] % m_b == 0:
                break
        else:
            raise _NoSplit(f"no axis of its output {list(out)} holds the chunks of axis {a} of its input "
                           f"{list(src)}" + (f" held in {parts} parts" if parts > 1 else ""))
        allowzero = bool(attrs.get("allowzero", 0))
        v = shape.reshape(-1)
        if not allowzero and b < len(v) and v[b] == 0 and a != b:
            raise _NoSplit(f"its target shape copies dimension {b} of the input, which is not split")
        return SplitRule(kind, (("reshape", 1, b, a, tuple(int(x) for x in src), out[b], allowzero,
                                 tuple(int(x) for x in v)),), b, out[b] // m_b)
    if typ in ("Unsqueeze", "Squeeze"):
        axes = attrs.get("axes")
        if axes is None and _has(op, 1):
            axes = _const(op, 1, values, "axes").reshape(-1).tolist()
        src = _shape(ins[0])
        if typ == "Unsqueeze":
            norm = sorted(x + R if x < 0 else x for x in axes or ())
            kept = [j for j in range(R) if j not in norm]
            return SplitRule(kind, (), kept[a])
        if axes is None:
            norm = [j for j, d in enumerate(src) if d == 1]
        else:
            norm = [x + len(src) if x < 0 else x for x in axes]
        if a in norm:
            raise _NoSplit("it removes the split axis")
        return SplitRule(kind, (), a - sum(1 for j in norm if j < a))
    if typ == "Slice":
        if len(ins) < 3:
            raise _NoSplit("its starts and ends are attributes (opset < 10)")
        starts = _const(op, 1, values, "starts").reshape(-1)
        if _has(op, 3):
            axes = _const(op, 3, values, "axes").reshape(-1).tolist()
        else:
            axes = list(range(len(starts)))
        if a in [x + R if x < 0 else x for x in axes]:
            raise _NoSplit(f"it slices the split axis {a}")
        return SplitRule(kind, (), a)
    if typ == "Gather":
        ax = int(attrs.get("axis", 0))
        ax = ax + len(_shape(ins[0])) if ax < 0 else ax
        if ax == a:
            raise _NoSplit(f"it gathers along the split axis {a}")
        return SplitRule(kind, (), a if ax > a else a + len(_shape(ins[1])) - 1)
    if typ == "Concat":
        ax = int(attrs.get("axis", 0))
        ax = ax + R if ax < 0 else ax
        axes = {x for x in in_axes if x is not None}
        if len(axes) != 1:
            raise _NoSplit(f"its inputs are split along different axes ({sorted(axes)})")
        (b,) = axes
        if b == ax:
            raise _NoSplit(f"it concatenates along the split axis {b}")
        acts = [("slice", k, b, _shape(t)[b], 1) for k, t in enumerate(ins)
                if t is not None and in_axes[k] is None and _shape(t)[b] != 1]
        return SplitRule(kind, tuple(acts), b)
    if typ == "Expand":
        shape = _const(op, 1, values, "shape").reshape(-1)
        src = _shape(ins[0])
        b = a + R - len(src)
        pos = b - (R - len(shape))
        acts = []
        if pos >= 0 and shape[pos] != 1:
            if shape[pos] != src[a]:
                raise _NoSplit(f"it expands the split axis {a}")
            acts.append(("expand", 1, pos, tuple(int(x) for x in shape)))
        return SplitRule(kind, tuple(acts), b)
    if typ in _REDUCE:
        axes = attrs.get("axes")
        if axes is None and _has(op, 1):
            axes = _const(op, 1, values, "axes").reshape(-1).tolist()
        src = _shape(ins[0])
        if not axes:
            raise _NoSplit("it reduces over every axis")
        norm = [x + len(src) if x < 0 else x for x in axes]
        if a in norm:
            raise _NoSplit(f"it reduces over the split axis {a}")
        keep = attrs.get("keepdims", 1)
        return SplitRule(kind, (), a if keep else a - sum(1 for j in norm if j < a))
    if typ == "Split":
        ax = int(attrs.get("axis", 0))
        ax = ax + R if ax < 0 else ax
        if ax == a:
            raise _NoSplit(f"it splits its input along the split axis {a}, and not as a fused projection's "
                           f"Split (a column-parallel product's output read only by a Split into equal "
                           f"parts): a rank's chunk of the columns is not its chunk of each part")
        return SplitRule(kind, (), a)
    if typ == "MatMul":
        return _batched_matmul_rule(kind, op, in_axes)
    raise _NoSplit(f"split does not know how to divide a {typ}")


def _matmul_rule(kind: str, op: Op, in_axes: list[int | None]) -> SplitRule:
    """A weighted matrix product: column-parallel (its weight's columns) or row-parallel (its rows)."""
    if not (len(op.constant) > 1 and op.constant[1] and not op.constant[0]):
        raise _NoSplit("its weight is not its second input")
    if op.op_type == "MatMul":
        w = _shape(op.inputs[1])
        if len(w) != 2:
            raise _NoSplit(f"its weight has {len(w)} dimensions, not 2")
        if kind == "column":
            return SplitRule(kind, (("slice", 1, 1, w[1], 1),), len(_shape(op.outputs[0])) - 1)
        x = _shape(op.inputs[0])
        if in_axes[0] != len(x) - 1:
            raise _NoSplit(f"it reads its input split along axis {in_axes[0]}, not the contracted axis")
        return SplitRule(kind, (("slice", 1, 0, w[0], 1),), None)
    # Gemm: Y = alpha * A' B' + beta * C
    has_c = _has(op, 2)
    if has_c and not op.constant[2]:
        raise _NoSplit("its bias is not a constant")
    trans_a, trans_b = op.attrs.get("transA", 0), op.attrs.get("transB", 0)
    w = _shape(op.inputs[1])
    if kind == "column":
        acts = [("slice", 1, 0 if trans_b else 1, w[0 if trans_b else 1], 1)]
        n = w[0] if trans_b else w[1]
        if has_c:
            c = _shape(op.inputs[2])
            if c and c[-1] == n and n != 1:
                acts.append(("slice", 2, len(c) - 1, n, 1))
        return SplitRule(kind, tuple(acts), 1)
    if in_axes[0] != (0 if trans_a else 1):
        raise _NoSplit(f"it reads its input split along axis {in_axes[0]}, not the contracted axis")
    acts = [("slice", 1, 1 if trans_b else 0, w[1 if trans_b else 0], 1)]
    if has_c:
        acts.append(("bias_once", 2))
    return SplitRule(kind, tuple(acts), None)


def _batched_matmul_rule(kind: str, op: Op, in_axes: list[int | None]) -> SplitRule:
    """A product of two activations (attention): split along a batch axis, A's rows or B's columns."""
    A, B = _shape(op.inputs[0]), _shape(op.inputs[1])
    R = len(_shape(op.outputs[0]))
    if len(A) < 2 or len(B) < 2:
        raise _NoSplit("a product of vectors is not split here")
    outs = set()
    for k, (s, a) in enumerate(((A, in_axes[0]), (B, in_axes[1]))):
        if a is None:
            continue
        if a < len(s) - 2:
            outs.add(a + R - len(s))
        elif (k == 0 and a == len(s) - 2) or (k == 1 and a == len(s) - 1):
            outs.add(R - 2 if k == 0 else R - 1)
        else:
            raise _NoSplit("it contracts the split axis (a partial sum the rule does not all-reduce)")
    if len(outs) != 1:
        raise _NoSplit(f"its inputs are split along different axes ({sorted(outs)})")
    (b,) = outs
    acts = []
    if b < R - 2:  # a batch axis: a whole input that is not broadcast along it is sliced
        for k, s in enumerate((A, B)):
            if in_axes[k] is None:
                j = b - (R - len(s))
                if 0 <= j < len(s) - 2 and s[j] != 1:
                    acts.append(("slice", k, j, s[j], 1))
    return SplitRule(kind, tuple(acts), b)


def default_microbatches(devices: DeviceSet) -> int:
    """Micro-batches per batch when none are given: the smallest power of two >= the number of
    devices (every stage count and every power-of-two data-parallel degree fits)."""
    total = max(1, sum(devices.counts))
    return 1 << (total - 1).bit_length()


def _with_layer_classes(graph: OpGraph, keys: Sequence[str | None]) -> OpGraph:
    """``graph`` with each layer's operators (and backward twins) in one colocation class."""
    n_fwd = len(keys)
    labels: dict[str, int] = {}
    colo = np.empty(graph.num_nodes, np.int64)
    for i in range(graph.num_nodes):
        j = i % n_fwd
        k = keys[j] if keys[j] is not None else f"\0op{j}"
        colo[i] = labels.setdefault(k, len(labels))
    return OpGraph.build(names=graph.names, kinds=graph.kinds, compute=graph.compute, comm=graph.comm,
                         memory=graph.memory, edges=np.stack([graph.src, graph.dst], 1),
                         backward=graph.backward, colocation=colo, ids=graph.ids, source=graph.source,
                         meta=graph.meta)


def onnx_parallel_problem(g: OnnxGraph, graph: OpGraph, devices: DeviceSet, *,
                          microbatches: int | None = None,
                          schedule: str = "1f1b", max_replicas: int | None = None,
                          tensor_parallel: bool = True, recompute: bool = True, stash: str = "schedule",
                          granularity: str = "op") -> tuple[ParallelProblem, np.ndarray]:
    """The replicated problem of the loaded model ``g`` whose costed graph (forward, or forward and
    backward) is ``graph`` (from :func:`graphs.onnx_workload.build_opgraph`) on ``devices``; see the
    module doc. Returns the problem and the node of every operator of ``graph``."""
    if stash not in ("schedule", "once"):
        raise InputError(f"stash must be 'schedule' or 'once', got {stash!r}")
    if granularity not in ("op", "layer"):
        raise InputError(f"granularity must be 'op' or 'layer', got {granularity!r}")
    n = g.num_ops
    training = bool(graph.is_training)
    if graph.num_nodes != (2 * n if training else n):
        raise InputError(f"the graph has {graph.num_nodes} nodes, the model {n} operators", source=g.source)
    keys = graph.meta.get("layer") or (None,) * n
    cluster = devices.cluster()
    if granularity == "layer":
        graph = _with_layer_classes(graph, keys)
    N = microbatches or default_microbatches(devices)
    base, cls = from_opgraph(graph, cluster, microbatches=N)
    bg = base.graph
    K, C = len(cluster.kinds), bg.num_nodes
    batch = max(1, int(g.batch_size or 1))
    scale = 1e-3 / batch  # ms per micro-batch -> s per sample

    ops = g.ops
    out_bytes = np.array([op.output_bytes for op in ops], float)
    params = np.array([op.param_bytes for op in ops], float)
    train = np.array([op.trainable_bytes for op in ops], float) if training else np.zeros(n)
    opt_states = OPTIMIZERS[graph.meta.get("training", {}).get("optimizer", "adam")] if training else 0
    stash_b = out_bytes if training else np.zeros(n)
    # inference holds every operator's outputs at the batch size besides its weights, as the operator
    # graph counts them (graphs.onnx_workload.INFERENCE_MEMORY; a tensor-parallel split's counted whole)
    held_b = np.zeros(n) if training else out_bytes
    compute, _ = graph.costs_for(cluster)
    fwd = compute[:, :n]
    bwd = compute[:, n:] if training else np.zeros((K, n))
    item = cls[:n]  # node of every forward operator (its twin is in the same one)
    members = [np.flatnonzero(item == c) for c in range(C)]

    # recompute keeps only the outputs that leave their layer
    succ_keys: list[set] = [set() for _ in range(n)]
    for a, b in zip(np.asarray(g.src).tolist(), np.asarray(g.dst).tolist()):
        succ_keys[a].add(keys[b])
    keep = np.array([keys[i] is None or not succ_keys[i] <= {keys[i]} for i in range(n)])

    layout = split_layout(g, keys) if tensor_parallel else None
    ts = layout.ts if layout is not None else TensorSplit(n)
    kinds = cluster.kinds
    degrees: list[list[int]] = []
    for spec, kind in zip(devices.specs, kinds):
        top = min(kind.count, spec.server_size or kind.count)
        degrees.append([t for t in TP_DEGREES if t <= top] if ts.blocks and not spec.host else [])
    # t is offered at a node only where placement split can carry the split out (SplitLayout.refusal)
    divisible = {t: layout.divisible(t) for ds in degrees for t in ds} if layout is not None else {}

    # tensors of the base problem (same order as from_opgraph builds them), and their producing node
    producer = []
    for u in range(graph.num_nodes):
        cons = set(cls[graph.dst[graph.src == u]].tolist()) - {int(cls[u])}
        if cons:
            producer.append(u)
    tensors = [(int(bg.tensor_src[e]), bg.consumers(e).tolist(), bg.tensor_time[:, e] * scale)
               for e in range(bg.num_tensors)]
    gathered = {}  # node -> {tensor: bytes}: split outputs that may cross a stage boundary
    for e, u in enumerate(producer):  # a forward split output read only inside its layer
        if u < n and ts.out_split[u] and succ_keys[u] <= {keys[u]}:
            gathered.setdefault(int(bg.tensor_src[e]), {})[e] = out_bytes[u]

    base_time = {(v.node, v.kind): v.time for v in bg.variants}
    base_backward = {(v.node, v.kind): v.backward_time for v in bg.variants}
    variants: list[Variant] = []
    for c in range(C):
        m = members[c]
        for k in range(K):
            if (c, k) not in base_time:
                continue  # some operator of the node cannot run on this kind
            spec = devices.specs[k]
            launch = spec.launch * 1e3
            for t in [1] + degrees[k]:
                if t > 1 and not divisible[t][m].all():
                    continue
                sp = ts.split[m] if t > 1 else np.zeros(m.size, bool)
                div = np.where(sp, t, 1)  # weights of split operators
                div_out = np.where(sp & ts.out_split[m], t, 1)  # their outputs, where they stay split

                def split_time(x, sp=sp, t=t, launch=launch):
                    return np.where(sp, launch + np.maximum(x - launch, 0.0) / t, x)

                if t == 1:
                    time = base_time[(c, k)] * scale
                    b_time = base_backward[(c, k)] * scale
                    f_time = float(fwd[k, m].sum()) * scale
                    sync_out = {}
                else:
                    bw = spec.intra_bandwidth or spec.link_bandwidth
                    back = ts.backward_allreduce[m]
                    comm = sum(allreduce_time(x, t, bw) for x in ts.allreduce[m] - back) / batch
                    # the forward pass: its split operators and its all-reduces (row-parallel outputs)
                    f_time = float(split_time(fwd[k, m]).sum()) * scale + comm
                    # inference has no backward pass: neither its operators (a split one's launch) nor its
                    # all-reduces of input gradients
                    b_time = (float(split_time(bwd[k, m]).sum()) * scale
                              + sum(allreduce_time(x, t, bw) for x in back) / batch) if training else 0.0
                    time = f_time + b_time
                    sync_out = {e: allreduce_time(x, t, bw) / batch for e, x in gathered.get(c, {}).items()}
                a = float((stash_b[m] / div_out).sum())
                par = float((train[m] / div).sum())
                b = float((params[m] / div).sum()) + par * (1 + opt_states) + float(held_b[m].sum())
                if stash == "once":
                    a, b = 0.0, b + a
                b_time = min(b_time, time)  # the backward pass's part, kept apart (Variant.backward_time)
                variants.append(Variant(c, k, t, "vanilla", time, params=par / batch, a=a, b=b, w=par,
                                        sync_out=sync_out, backward_time=b_time))
                if recompute and training and stash == "schedule":
                    a_rc = float((stash_b[m] * keep[m] / div_out).sum())
                    if a_rc < a:
                        # the forward pass run again, before the backward pass that needs its outputs,
                        # all-reduces included (as Megatron-LM's recomputation repeats them)
                        variants.append(Variant(c, k, t, "activation recomp", time + f_time,
                                                params=par / batch, a=a_rc, b=b, w=par, sync_out=sync_out,
                                                backward_time=b_time + f_time))
    ids = []  # a node's layer key (one layer) or its operators' names
    for m in members:
        layer = {keys[i] for i in m.tolist()}
        ids.append(str(layer.pop()) if granularity == "layer" and len(layer) == 1 and None not in layer
                   else "+".join(ops[i].name for i in m.tolist()))
    pg = ParallelGraph.build(ids=ids, names=ids, num_kinds=K, edges=np.stack([bg.src, bg.dst], 1),
                             tensors=tensors, variants=variants, source=graph.source, tensor_edges=False)
    problem = ParallelProblem(pg, kinds, N, schedule, max_replicas=max_replicas)
    return problem, cls


def stage_problem(g: OnnxGraph, graph: OpGraph, devices: DeviceSet, *, granularity: str | None = None,
                  microbatches: int | None = None, schedule: str = "1f1b",
                  max_replicas: int | None = None,
                  tensor_parallel: bool = True) -> tuple[ParallelProblem, np.ndarray, str]:
    """:func:`onnx_parallel_problem` at the granularity given, or by default one node per layer where
    the model's names give layers and the layer nodes keep the splits (else one per operator);
    ``tensor_parallel=False`` offers no tensor-parallel variants (``t = 1`` everywhere). Returns the
    problem, the node of every operator of ``graph`` and the granularity used."""
    layers = len({k for k in graph.meta.get("layer") or () if k is not None})
    gran = granularity or ("layer" if layers > 1 else "op")

    def build(granularity):
        return onnx_parallel_problem(g, graph, devices, microbatches=microbatches, schedule=schedule,
                                     max_replicas=max_replicas, granularity=granularity,
                                     tensor_parallel=tensor_parallel)

    problem, cls = build(gran)
    if granularity is None and gran == "layer" and 2 * problem.graph.num_nodes < layers:
        # the layers' operators interleave, so merging them made cycles that merged most of the graph: a
        # layer node would hide the splits the operators allow, so the operators are the nodes
        gran = "op"
        problem, cls = build(gran)
    return problem, cls, gran
