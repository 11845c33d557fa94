"""Cost models: per-operator compute time on every device kind, and the cost of moving its output.

All times are in **milliseconds**. Three models, chosen by name (:func:`compute_costs`, ``--costs``):

``roofline``
    FLOPs and bytes of every operator from its shapes (:func:`op_flops`, :func:`op_bytes`);
    time = max(FLOPs / peak, bytes / memory bandwidth) + launch overhead, with the fp16 peak for
    half-precision operators. A calibrated kind (``placement calibrate``) replaces the peak by its
    measured Conv and MatMul/Gemm rates for those operators, a depthwise convolution's arithmetic by its
    depthwise figures (:meth:`DeviceSpec.depthwise_time`) and the bandwidth by its measured
    bandwidth at the operator's size (:meth:`DeviceSpec.flop_rate`, :meth:`DeviceSpec.bandwidth_at`);
    with its memory-bound figures, a Transpose costs its bytes at its own copy rate plus a time per
    contiguous run it copies (:func:`transpose_runs`) and a metadata-only operator (:data:`VIEW_TYPES`)
    its measured time.
    An operator without a formula (unknown type, or shapes the formula needs
    are unknown) is charged conservatively: :data:`UNKNOWN_FLOPS_PER_ELEMENT` FLOPs per element in and
    out plus a dense product over its weights, and FLOP time *plus* memory time. Control-flow
    operators cost their bodies (``If``: the dearer branch; ``Loop``/``Scan``: the body times its trip
    count).
``profile``
    Measured on this machine with onnxruntime's profiler (one intra-op thread, graph optimisations off
    so that every kernel keeps its node's name; warm-up runs, then the median of repeats). Measured
    times are the costs of the host CPU kinds; accelerator kinds keep roofline estimates.
a JSON cost table (a path)
    ``{"unit": "ms", "compute": {node: {kind: time or null}}, "backward": {...}, "comm": {...}}``:
    measurements brought in from real devices. ``null`` = the kind cannot run the node; missing entries
    fall back to the roofline estimate (with a warning). ``backward`` times (training) are optional.
    ``"batch_size"`` (optional): the batch size the times were measured at, the only one they are used
    at (another is an error); a table without it is used as given at any batch size (a warning above 1).

Communication is always ``latency + output bytes / link bandwidth`` of the kind (0 for host kinds)
unless a table gives it. Operators a kind lists as unsupported cost ``inf`` there. A custom (non-standard)
operator name a kind gives in ``unsupported_ops`` or ``op_gflops`` that no operator of the model has
(bodies included) applies to nothing: that is logged as a warning, at each costing, naming the device
file's entry it came from (a kind built in code: the kind and the field), and kept in the roofline and
profile models' :attr:`Costs.warnings`; a name the model has is not warned of.

FLOP counts are our own formulas: onnx-tool's counter agrees on the operators that dominate
(convolutions, matrix products) but reads weights that the model-zoo files generate at run time, does its
own shape inference and cannot cost control flow (see ``benchmarks/README_onnx.md``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .devices import CONV_TYPES, DeviceSet, DeviceSpec, custom_operator_names
from .errors import InputError
from .jsonio import json_error
from .onnx_loader import OnnxGraph, Op
from .reference import batch_size_field

__all__ = ["Costs", "COST_MODELS", "compute_costs", "roofline_costs", "profile_costs", "table_costs",
           "op_flops", "op_bytes", "half_precision", "depthwise", "transpose_runs", "roofline_time",
           "profile_ops", "measure_run_time", "VIEW_TYPES", "NO_HOST_PROFILE"]

log = logging.getLogger("graphs.onnx")

COST_MODELS = ("roofline", "profile")  # or the path of a JSON cost table
#: the model name of profile costs on devices without a host kind: the roofline model's costs, which a
#: result records as ``roofline`` (:func:`recorded_costs`)
NO_HOST_PROFILE = "roofline (profile: no CPU kind)"
_MS = 1e3


@dataclass(frozen=True, eq=False)
class Costs:
    """Cost rows for every op of an :class:`OnnxGraph`, one row per device kind, in milliseconds.
    ``backward`` holds given backward times (``nan`` where not given) or is ``None``."""

    kinds: tuple[str, ...]
    compute: np.ndarray  # [K, n]
    comm: np.ndarray  # [K, n]
    backward: np.ndarray | None
    model: str
    warnings: tuple[str, ...] = ()
    #: the ``profile`` model's measurements (op name -> ms), which :func:`recorded_costs` keeps in a
    #: result so that the plan is scored again on what was measured, not on a new measurement
    measured: Mapping[str, float] | None = None


# --------------------------------------------------------------------------- FLOPs and bytes
_PER_ELEMENT = {  # FLOPs per output element
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "LeakyRelu", "PRelu", "Max", "Min",
                     "Clip", "Sign", "Floor", "Ceil", "Round", "Equal", "Less", "Greater", "LessOrEqual",
                     "GreaterOrEqual", "And", "Or", "Xor", "Not", "Where", "Mod", "BitShift",
                     "ThresholdedRelu", "IsNaN", "IsInf", "Reciprocal", "BitwiseAnd", "BitwiseOr",
                     "BitwiseXor", "BitwiseNot", "Shrink", "Cast", "CastLike"), 1.0),
    **dict.fromkeys(("Exp", "Log", "Tanh", "Sigmoid", "Erf", "Softplus", "Softsign", "Elu", "Selu", "Celu",
                     "Sqrt", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
                     "Atanh", "HardSigmoid", "HardSwish", "Pow"), 4.0),
    **dict.fromkeys(("Gelu", "FastGelu", "BiasGelu", "Mish", "QuickGelu"), 8.0),
    "BatchNormalization": 2.0,
    **dict.fromkeys(("LayerNormalization", "InstanceNormalization", "GroupNormalization",
                     "MeanVarianceNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                     "RMSNormalization"), 8.0),
    "LpNormalization": 3.0,
    **dict.fromkeys(("Softmax", "LogSoftmax", "Hardmax"), 6.0),
    **dict.fromkeys(("Resize", "Upsample"), 4.0),
    **dict.fromkeys(("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"), 2.0),
    "Dropout": 0.0,
}
_SUM_INPUTS = ("Sum", "Mean")  # (inputs - 1) FLOPs per element
_REDUCE = {"ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1, "ReduceProd": 1, "ReduceL1": 1,
           "ReduceL2": 2, "ReduceSumSquare": 2, "ReduceLogSum": 1, "ReduceLogSumExp": 2, "ArgMax": 1,
           "ArgMin": 1, "GlobalAveragePool": 1, "GlobalMaxPool": 1, "GlobalLpPool": 2, "CumSum": 1,
           "NonZero": 1, "Unique": 1}
# no arithmetic, data moved (bytes in + out)
_MOVE = frozenset({"Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
                   "Scatter", "ScatterElements", "ScatterND", "Pad", "Expand", "Tile", "DepthToSpace",
                   "SpaceToDepth", "Compress", "OneHot", "Range", "Trilu", "ReverseSequence", "Col2Im",
                   "ConstantOfShape", "EyeLike", "SplitToSequence", "ConcatFromSequence", "SequenceAt",
                   "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceEmpty", "SequenceLength",
                   "CenterCropPad", "ImageDecoder", "GridSample", "AffineGrid", "TopK", "NonMaxSuppression"})
# views and bookkeeping: no arithmetic, nothing moved
_VIEW = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Dropout",
                   "Constant", "Optional", "OptionalGetElement", "OptionalHasElement"})
# metadata-only kernels (the output aliases the input): a calibrated kind's view_us is their whole time
VIEW_TYPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
_CONTROL = frozenset({"If", "Loop", "Scan"})
_GATHER = frozenset({"Gather", "GatherElements", "GatherND"})
UNKNOWN_FLOPS_PER_ELEMENT = 16.0  # conservative: an unknown operator is charged like a heavy pointwise op


def _elems(t) -> int:
    return (t.elements or 0) if t is not None else 0


def _shape(t):
    return t.shape if t is not None and t.known else None


def _conv(op: Op):
    w, y = _shape(op.inputs[1] if len(op.inputs) > 1 else None), op.outputs[0] if op.outputs else None
    if w is None or y is None or not y.known:
        return None
    bias = len(op.inputs) > 2 and op.inputs[2] is not None
    return 2.0 * y.elements * math.prod(w[1:]) + (y.elements if bias else 0)


def _conv_transpose(op: Op):
    x, w = _shape(op.inputs[0]), _shape(op.inputs[1] if len(op.inputs) > 1 else None)
    if x is None or w is None:
        return None
    return 2.0 * math.prod(x) * math.prod(w[1:])


def _gemm(op: Op):
    a, y = _shape(op.inputs[0]), op.outputs[0] if op.outputs else None
    if a is None or len(a) != 2 or y is None or not y.known:
        return None
    k = a[0] if op.attrs.get("transA", 0) else a[1]
    c = len(op.inputs) > 2 and op.inputs[2] is not None
    return 2.0 * y.elements * k + (y.elements if c else 0)


def _matmul(op: Op):
    a, y = _shape(op.inputs[0]), op.outputs[0] if op.outputs else None
    if a is None or not a or y is None or not y.known:
        return None
    return 2.0 * y.elements * a[-1]


def _einsum(op: Op):
    eq = str(op.attrs.get("equation", "")).replace(" ", "")
    lhs = eq.split("->")[0].split(",")
    if len(lhs) != len(op.inputs) or any("." in t for t in lhs):
        return None
    size: dict[str, int] = {}
    for term, t in zip(lhs, op.inputs):
        s = _shape(t)
        if s is None or len(s) != len(term):
            return None
        for ch, d in zip(term, s):
            size[ch] = max(size.get(ch, 1), d)
    return 2.0 * math.prod(size.values()) if len(lhs) > 1 else float(math.prod(size.values()))


def _pool(op: Op):
    y = op.outputs[0] if op.outputs else None
    k = op.attrs.get("kernel_shape")
    if y is None or not y.known or not k:
        return None
    return float(y.elements * math.prod(k))


def _lrn(op: Op):
    y = op.outputs[0] if op.outputs else None
    if y is None or not y.known:
        return None
    return float(y.elements * (2 * int(op.attrs.get("size", 5)) + 6))


def _rnn(op: Op):
    x, w, r = (_shape(op.inputs[i]) if len(op.inputs) > i else None for i in range(3))
    if x is None or w is None or r is None or len(x) != 3:
        return None
    seq, batch = (x[1], x[0]) if op.attrs.get("layout", 0) else (x[0], x[1])
    dirs, gh, inp = w
    hidden = r[2]
    return float(seq * batch * dirs * (2 * gh * (inp + hidden) + 4 * gh))


def _attention(op: Op):
    """Attention. com.microsoft's (input, weights[, bias]): its QKV projection plus scores and context;
    every other domain's (ONNX's opset-23 ``Attention``, torch's ``scaled_dot_product_attention``
    through the torch front end) takes the projected query, key and value: :func:`_sdpa`."""
    if op.domain != "com.microsoft":
        return _sdpa(op)
    x, w = _shape(op.inputs[0]), _shape(op.inputs[1] if len(op.inputs) > 1 else None)
    if x is None or w is None or len(x) != 3:
        return None
    b, s, h = x
    return 2.0 * b * s * h * w[1] + 4.0 * b * s * s * h


def _sdpa(op: Op):
    """Scaled dot-product attention of q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] (ONNX's 4-D form,
    torch's; with fewer key/value heads than query heads, each query head still reads Tk keys), or ONNX's
    3-D form [B, T, heads * d] (attributes ``q_num_heads``, ``kv_num_heads``); ONNX's past key (input 4)
    lengthens Tk. With S = B * Hq * Tq * Tk scores: 2 S d (Q K^T) + 2 S dv (weights times V) + Softmax's
    FLOPs per element (:data:`_PER_ELEMENT`) on S, what the product, Softmax and product written out cost.
    A causal or other mask does not reduce it: the math kernels (torch's CPU one included) compute the
    whole score matrix, and a written-out attention is costed whole too."""
    q, k, v = (_shape(op.inputs[i]) if len(op.inputs) > i else None for i in range(3))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) or len(q) < 2:
        return None
    hq, hkv = op.attrs.get("q_num_heads"), op.attrs.get("kv_num_heads")
    if len(q) == 3 and hq is not None:  # ONNX's 3-D form: heads packed into the last dimension
        if not (isinstance(hq, int) and isinstance(hkv, int) and hq > 0 and hkv > 0
                and q[2] % hq == 0 and v[2] % hkv == 0):
            return None
        rows, d, tk, dv = q[0] * q[1] * hq, q[2] // hq, k[1], v[2] // hkv
    else:
        rows, d, tk, dv = math.prod(q[:-1]), q[-1], k[-2], v[-1]
    past = op.inputs[4] if len(op.inputs) > 4 else None
    if past is not None:
        p = _shape(past)
        if p is None or len(p) != 4:
            return None
        tk += p[2]
    scores = float(rows * tk)
    return 2.0 * scores * d + 2.0 * scores * dv + _PER_ELEMENT["Softmax"] * scores


def _qlinear_conv(op: Op):
    # QLinearConv inputs: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, (bias)
    w, y = _shape(op.inputs[3] if len(op.inputs) > 3 else None), op.outputs[0] if op.outputs else None
    if w is None or y is None or not y.known:
        return None
    return 2.0 * y.elements * math.prod(w[1:])


_FORMULAS = {
    "Conv": _conv, "ConvInteger": _conv, "QLinearConv": _qlinear_conv, "ConvTranspose": _conv_transpose,
    "Gemm": _gemm, "MatMul": _matmul, "MatMulInteger": _matmul, "FusedMatMul": _matmul, "Einsum": _einsum,
    "MaxPool": _pool, "AveragePool": _pool, "LpPool": _pool, "LRN": _lrn,
    "RNN": _rnn, "GRU": _rnn, "LSTM": _rnn, "Attention": _attention,
}


def op_flops(op: Op) -> tuple[float, bool]:
    """FLOPs of one run of ``op`` and whether a formula (rather than the conservative estimate) gave
    them. Control-flow operators: their bodies'."""
    t = op.op_type
    if t in _CONTROL and op.subgraphs:
        return _body_sum(op, lambda b: op_flops(b)[0]), all(
            op_flops(b)[1] for s in op.subgraphs for b in s.ops)
    y = op.outputs[0] if op.outputs else None
    f = None
    if t in _FORMULAS:
        f = _FORMULAS[t](op)
    elif t in _PER_ELEMENT and y is not None and y.known:
        f = _PER_ELEMENT[t] * y.elements
    elif t in _SUM_INPUTS and y is not None and y.known:
        f = float(max(1, len([x for x in op.inputs if x is not None]) - 1) * y.elements)
    elif t in _REDUCE and op.inputs and op.inputs[0] is not None and op.inputs[0].known:
        f = float(_REDUCE[t] * op.inputs[0].elements)
    elif t in _MOVE or t in _VIEW:
        f = 0.0
    if f is not None:
        return float(f), True
    return _conservative_flops(op), False


def _conservative_flops(op: Op) -> float:
    acts = sum(_elems(x) for x in op.activations)
    outs = sum(_elems(y) for y in op.outputs) or op.output_bytes / 4
    y = op.outputs[0] if op.outputs else None
    rows = (y.elements // max(1, y.shape[-1])) if y is not None and y.known and y.shape else 1
    return UNKNOWN_FLOPS_PER_ELEMENT * (acts + outs) + 2.0 * op.param_elements * max(1, rows)


def op_bytes(op: Op) -> float:
    """Bytes one run of ``op`` reads and writes: activations in, parameters, outputs (views: 0)."""
    if op.op_type in _VIEW:
        return 0.0
    if op.op_type in _CONTROL and op.subgraphs:
        return _body_sum(op, op_bytes)
    ins = sum(x.nbytes or 0 for x in op.activations)
    outs = max(sum(y.nbytes or 0 for y in op.outputs), op.output_bytes)
    params = op.param_bytes
    if op.op_type in _GATHER:  # a lookup reads the rows it returns, not its whole table (embeddings)
        params = min(params, outs)
    return float(ins + params + outs)


def _body_sum(op: Op, f) -> float:
    parts = [s.repeat * sum(f(b) for b in s.ops) for s in op.subgraphs]
    if not parts:
        return 0.0
    return max(parts) if op.op_type == "If" else sum(parts)


def _conv_size(op: Op) -> tuple[float, float] | None:
    """A convolution's output channels per group and output pixels (batch x spatial): the sizes its
    efficiency depends on (the M and N of the matrix product it becomes)."""
    y = op.outputs[0] if op.outputs else None
    if y is None or not y.known or len(y.shape) < 3 or not y.shape[1]:
        return None
    group = op.attrs.get("group", 1)
    group = group if isinstance(group, int) and group > 0 else 1
    return y.shape[1] / group, y.elements / y.shape[1]


def depthwise(op: Op) -> tuple[int, bool] | None:
    """A depthwise convolution's channels (groups, one input channel each) and whether it is strided;
    ``None`` for any other operator (or unknown weight shape)."""
    if op.op_type not in CONV_TYPES:
        return None
    w = _shape(op.inputs[1] if len(op.inputs) > 1 else None)
    group = op.attrs.get("group", 1)
    if w is None or len(w) < 3 or w[1] != 1 or not isinstance(group, int) or group < 2:
        return None
    strides = op.attrs.get("strides") or [1]
    return group, any(int(s) > 1 for s in strides)


def transpose_runs(op: Op) -> int | None:
    """The contiguous runs a Transpose copies: its elements over the product of the trailing dimensions
    the permutation keeps in place (size-1 dimensions dropped); 1 when it only moves size-1 dimensions (one
    block copy); 0 when the last dimension moves (an element-wise, tiled copy: no run to start). ``None``
    for any other operator or an unknown input shape."""
    if op.op_type != "Transpose":
        return None
    x = _shape(op.inputs[0] if op.inputs else None)
    if x is None:
        return None
    perm = op.attrs.get("perm")
    perm = list(range(len(x)))[::-1] if not perm else [int(p) for p in perm]
    if sorted(perm) != list(range(len(x))):
        return None
    keep = [d for d in range(len(x)) if x[d] != 1]  # input axes that are not size 1, renumbered
    rank = {d: i for i, d in enumerate(keep)}
    reduced = [rank[p] for p in perm if p in rank]
    n = math.prod(x)
    if n == 0:
        return 0
    if reduced == sorted(reduced):
        return 1
    run = 1
    for i in range(len(reduced) - 1, -1, -1):
        if reduced[i] != i:
            break
        run *= x[keep[i]]
    return 0 if run == 1 else n // run


def half_precision(op: Op) -> bool:
    """Whether ``op`` computes in half precision (its output is fp16/bf16): it runs at the fp16 peak."""
    y = op.outputs[0] if op.outputs else None
    return y is not None and y.dtype in ("float16", "bfloat16")


_half = half_precision


def roofline_time(op: Op, spec: DeviceSpec) -> float:
    """Seconds ``op`` takes on ``spec`` by the roofline model (``inf`` if the kind cannot run it)."""
    if op.op_type in spec.unsupported_ops:
        return math.inf
    if op.op_type in _CONTROL and op.subgraphs:
        return spec.launch + _body_sum(op, lambda b: roofline_time(b, spec))
    if op.op_type in VIEW_TYPES and spec.view_time is not None:  # the kind's measured metadata-only time
        return spec.view_time
    flops, known = op_flops(op)
    nbytes = op_bytes(op)
    runs = transpose_runs(op) if spec.transpose is not None else None
    if runs is not None:  # the kind's Transpose figures: its copy rate (memory's beyond the caches), per run
        rate, per_run = spec.transpose
        return nbytes / min(rate, spec.bandwidth_at(nbytes)) + runs * per_run + spec.launch
    # the kind's measured Conv / MatMul rates and size-dependent bandwidth when it has them (calibrated
    # kinds); otherwise exactly peak and bandwidth
    dw = depthwise(op) if spec.depthwise is not None and not _half(op) else None
    if dw is not None:  # the kind's depthwise figures: per-channel time plus FLOPs at the depthwise rate
        t_flops = spec.depthwise_time(flops, *dw)
    else:
        t_flops = flops / spec.flop_rate(op.op_type, _half(op),
                                         _conv_size(op) if op.op_type in CONV_TYPES else None)
    t_bytes = nbytes / spec.bandwidth_at(nbytes)
    if not known:  # conservative: no overlap of arithmetic and memory traffic
        return t_flops + t_bytes + spec.launch
    return max(t_flops, t_bytes) + spec.launch


def _unsupported(op: Op, spec: DeviceSpec) -> bool:
    return op.op_type in spec.unsupported_ops or any(
        _unsupported(b, spec) for s in op.subgraphs for b in s.ops)


# --------------------------------------------------------------------------- the models
def _comm_rows(g: OnnxGraph, devices: DeviceSet) -> np.ndarray:
    out = np.array([op.output_bytes for op in g.ops], dtype=np.float64)
    return np.array([[s.transfer_time(b) * _MS for b in out] for s in devices.specs]).reshape(
        len(devices.specs), g.num_ops)


def roofline_costs(g: OnnxGraph, devices: DeviceSet) -> Costs:
    """Roofline compute and link communication for every op on every kind of ``devices``."""
    K, n = len(devices.specs), g.num_ops
    compute = np.empty((K, n))
    for t, spec in enumerate(devices.specs):
        for i, op in enumerate(g.ops):
            compute[t, i] = math.inf if _unsupported(op, spec) else roofline_time(op, spec) * _MS
    warnings = []
    unknown = sorted({op.op_type for op in g.ops if not op_flops(op)[1]})
    if unknown:
        warnings.append(f"no FLOP formula (or unknown sizes) for {', '.join(unknown)}: costed conservatively "
                        f"({UNKNOWN_FLOPS_PER_ELEMENT:g} FLOPs per input and output element, plus a dense "
                        f"product over any weights, with no overlap of arithmetic and memory traffic)")
    for w in warnings:
        log.warning("%s%s", f"{g.source}: " if g.source else "", w)
    # a custom operator name a kind gives that no operator of the model has: each named by its device
    # file's entry (which says what it is about; no model prefix), logged at every costing (the library
    # keeps no record of what it told: a command that costs one model more than once prints each
    # distinct warning once, placement.cli.serving._warnings_as_lines)
    for w in _unmatched_custom_names(g, devices):
        log.warning("%s", w)
        warnings.append(w)
    return Costs(tuple(s.name for s in devices.specs), compute, _comm_rows(g, devices), None, "roofline",
                 tuple(warnings))


def _op_types(ops) -> set[str]:
    """The operator types of ``ops`` and of their control-flow bodies, as the kinds' names are matched
    against them (:func:`roofline_time`, :func:`_unsupported`)."""
    return {op.op_type for op in ops} | {t for op in ops for s in op.subgraphs for t in _op_types(s.ops)}


def _unmatched_custom_names(g: OnnxGraph, devices: DeviceSet) -> list[str]:
    """A warning for each custom (non-standard) operator name a kind of ``devices`` gives in
    ``unsupported_ops`` or ``op_flops`` that no operator of ``g`` has (it changes nothing there: a typo
    further than one letter from a standard type is told only so), naming where the name came from (a
    device file's entry, else the kind and field: :func:`graphs.devices.custom_operator_names`); once for
    kinds that share it (a base kind's). A name the model has: no word."""
    types = _op_types(g.ops)
    model = g.source or "the model"
    out: list[str] = []
    for spec in devices.specs:
        for where, name, like in custom_operator_names(spec):
            if name in types:
                continue
            hint = f" (if a standard type was meant: {' or '.join(like)})" if like else ""
            w = (f"{where}: {name!r} is not a standard operator type (ONNX's or onnxruntime's), and no "
                 f"operator of {model} has that type: it applies to custom operators of that name only, so "
                 f"to nothing here{hint}")
            if w not in out:
                out.append(w)
    return out


def compute_costs(g: OnnxGraph, devices: DeviceSet, model: str | Mapping = "roofline", **options) -> Costs:
    """Costs by the named model: ``roofline``, ``profile`` or the path of a JSON cost table; or, as a
    result file records a profiled placement (:func:`recorded_costs`), ``{"model": "profile",
    "measured": {op name: ms}}``: the profile model on those measurements, nothing measured again."""
    if isinstance(model, Mapping):
        return profile_costs(g, devices, measured=_recorded_measurements(model))
    if model in ("roofline", NO_HOST_PROFILE):  # the second: as older one-device-per-stage results record it
        return roofline_costs(g, devices)
    if model == "profile":
        return profile_costs(g, devices, **options)
    if model.lower().endswith(".json") or os.path.exists(model):
        return table_costs(g, devices, model)
    raise InputError(f"unknown cost model {model!r}; choose roofline, profile, or give a JSON cost table "
                     f"(a path ending in .json)")


def recorded_costs(option: str | Mapping | None, meta: Mapping) -> str | dict:
    """What a result records of the cost model of a graph built with ``option`` (``meta``: the graph's
    :attr:`OpGraph.meta`): the profile model with its measurements (a new measurement would score the
    plan on other times); ``roofline`` for profile costs that fell back to it (no host kind: nothing was
    measured); else the option as given (``roofline`` when none)."""
    measured = meta.get("measured")
    if measured is not None:
        return {"model": "profile", "measured": dict(measured)}
    if meta.get("costs") == NO_HOST_PROFILE or option == NO_HOST_PROFILE:
        return "roofline"
    if isinstance(option, Mapping):
        return dict(option)
    return option or "roofline"


def _recorded_measurements(model: Mapping) -> dict[str, float]:
    """The measurements of a recorded profile (:func:`recorded_costs`), checked."""
    measured = model.get("measured")
    if model.get("model") != "profile" or not isinstance(measured, Mapping) or not all(
            isinstance(k, str) and not isinstance(v, bool) and isinstance(v, (int, float)) and v >= 0
            and math.isfinite(v) for k, v in measured.items()):
        raise InputError('a recorded cost model must be {"model": "profile", "measured": {op name: '
                         'milliseconds}}, as placement place writes it')
    return {k: float(v) for k, v in measured.items()}


# --------------------------------------------------------------------------- table
_UNITS = {"ms": 1.0, "us": 1e-3, "s": 1e3}


def table_costs(g: OnnxGraph, devices: DeviceSet, path: str | os.PathLike) -> Costs:
    """Costs from a JSON table (see the module doc); missing entries take the roofline estimate."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise InputError("no such cost table", source=path) from None
    except json.JSONDecodeError as e:
        raise InputError(f"not a valid JSON cost table: {json_error(e)}", source=path) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not a valid JSON cost table: not UTF-8 text ({e.reason})", source=path) from None
    return parse_cost_table(g, devices, data, source=path)


def _table_batch(data: dict, batch: int, source: str | None) -> list[str]:
    """A table's times are one run's at the batch size it was measured at (its ``"batch_size"``), and
    are used at that batch only: the model at another ``batch`` is an :class:`InputError` naming both. A
    table that gives none is used as given at any batch, with a warning where ``batch`` is not 1 (the
    returned list)."""
    b = batch_size_field(data, "the batch size the table's times were measured at", source)
    if b is None:
        return [] if batch == 1 else [
            f'cost table gives no "batch_size": its times are used as given at batch size {batch}, '
            f'unscaled (give the batch size it was measured at, "batch_size": N, to have that checked)']
    if b != batch:
        raise InputError(f"the table's times were measured at batch size {b} and the model is placed at "
                         f"batch size {batch}: place it at batch size {b} (--batch-size {b}), or measure "
                         f"the table at {batch}", source=source)
    return []


def parse_cost_table(g: OnnxGraph, devices: DeviceSet, data, *, source: str | None = None) -> Costs:
    if not isinstance(data, dict) or not isinstance(data.get("compute"), dict):
        raise InputError('a cost table must be an object with a "compute" map: {"unit": "ms", "compute": '
                         '{node name: {device kind: time}}}', source=source)
    unit = data.get("unit", "ms")
    if unit not in _UNITS:
        raise InputError(f"unit {unit!r} is not one of {', '.join(_UNITS)}", source=source)
    scale = _UNITS[unit]
    warnings: list[str] = _table_batch(data, g.batch_size, source)
    base = roofline_costs(g, devices)
    kinds = base.kinds
    index = {op.name: i for i, op in enumerate(g.ops)}

    def fill(section: str, rows: np.ndarray, allow_null: bool) -> int:
        table = data.get(section)
        if table is None:
            return 0
        if not isinstance(table, dict):
            raise InputError(f"{section!r} must map node names to {{kind: time}} objects", source=source)
        unknown_nodes = [k for k in table if k not in index]
        if unknown_nodes:
            warnings.append(f"cost table {section!r}: {len(unknown_nodes)} node name(s) not in the model "
                            f"ignored: {', '.join(unknown_nodes[:5])}")
        filled = 0
        foreign: set[str] = set()
        for name, entry in table.items():
            if name not in index:
                continue
            if not isinstance(entry, dict):
                raise InputError(f"{section}[{name!r}] must be an object {{kind: time}}", source=source)
            for kind, v in entry.items():
                if kind not in kinds:
                    foreign.add(kind)
                    continue
                if v is None and allow_null:
                    val = math.inf
                elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or math.isinf(v):
                    raise InputError(f"{section}[{name!r}][{kind!r}] must be a non-negative number"
                                     f"{' or null' if allow_null else ''}, got {v!r}", source=source)
                else:
                    val = float(v) * scale
                rows[kinds.index(kind), index[name]] = val
                filled += 1
        if foreign:
            warnings.append(f"cost table {section!r}: device kind(s) {', '.join(sorted(foreign))} not in "
                            f"the cluster ignored")
        return filled

    compute = np.full_like(base.compute, np.nan)
    fill("compute", compute, True)
    missing = int(np.isnan(compute).sum())
    if missing:
        warnings.append(f"cost table gives no time for {missing} of {compute.size} (node, kind) pairs: "
                        f"they take the roofline estimate")
        compute = np.where(np.isnan(compute), base.compute, compute)
    comm = np.full_like(base.comm, np.nan)
    fill("comm", comm, False)
    comm = np.where(np.isnan(comm), base.comm, comm)
    backward = None
    if "backward" in data:
        backward = np.full_like(base.compute, np.nan)
        fill("backward", backward, True)
    for w in warnings:
        log.warning("%s%s", f"{source}: " if source else "", w)
    return Costs(kinds, compute, comm, backward, f"table {os.path.basename(source or '')}".strip(),
                 tuple(warnings))


# --------------------------------------------------------------------------- profile
def _session(model_bytes: bytes, *, threads: int, profile_dir: str | None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if profile_dir is not None:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "profile")
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def _runnable(g: OnnxGraph):
    """The model with weights, its top-level nodes renamed to the graph's op names (bodies' nodes get
    names no top-level op has), serialised, and random feeds for its inputs."""
    from .onnx_loader import read_model, stable_names

    if g.source is None:
        raise InputError("profiling needs the model file (this graph was not loaded from a path)")
    model = read_model(g.source, load_external_data=True)
    for node, name in zip(model.graph.node, stable_names(model.graph.node)):
        node.name = name
        _rename_bodies(node, name)
    rng = np.random.default_rng(0)
    feeds = {}
    for t in g.inputs:
        if not t.known:
            raise InputError(f"cannot profile: input {t.name!r} has an unknown shape {t.shape}",
                             source=g.source)
        dt = np.dtype(t.dtype) if t.dtype not in ("unknown", "string") else np.float32
        if dt.kind == "f":
            feeds[t.name] = rng.standard_normal(t.shape).astype(dt)
        else:
            feeds[t.name] = np.zeros(t.shape, dtype=dt)  # zeros are valid indices and masks
    return model.SerializeToString(), feeds


def _rename_bodies(node, prefix: str) -> None:
    for a in node.attribute:
        graphs = [a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []
        for sg in graphs:
            for k, n in enumerate(sg.node):
                n.name = f"{prefix}/{a.name}/{k}"
                _rename_bodies(n, n.name)


def profile_ops(g: OnnxGraph, *, warmup: int = 3, repeats: int = 10, threads: int = 1) -> dict[str, float]:
    """Median time (ms) of every top-level op over ``repeats`` profiled runs after ``warmup`` runs, by
    onnxruntime's profiler on this CPU. Ops that produce no kernel event are missing from the result."""
    model_bytes, feeds = _runnable(g)
    with tempfile.TemporaryDirectory(prefix="placement-profile-") as tmp:
        try:
            sess = _session(model_bytes, threads=threads, profile_dir=tmp)
            for _ in range(warmup + repeats):
                sess.run(None, feeds)
            path = sess.end_profiling()
        except Exception as e:
            raise InputError(f"onnxruntime could not run the model for profiling: {str(e)[:300]}",
                             source=g.source) from None
        with open(path, encoding="utf-8") as f:
            events = json.load(f)
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")[-repeats:]
    names = {op.name for op in g.ops}
    per_run: list[dict[str, float]] = [dict() for _ in runs]
    starts = [r[0] for r in runs]
    import bisect

    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        name = e["name"][: -len("_kernel_time")]
        if name not in names:
            continue
        k = bisect.bisect_right(starts, e["ts"]) - 1
        if k < 0 or e["ts"] > runs[k][1]:
            continue  # a warm-up run
        per_run[k][name] = per_run[k].get(name, 0.0) + e["dur"] * 1e-3  # us -> ms
    out = {}
    for name in names:
        vals = [r[name] for r in per_run if name in r]
        if vals:
            out[name] = float(np.median(vals))
    return out


def measure_run_time(g: OnnxGraph, *, warmup: int = 3, repeats: int = 10, threads: int = 1,
                     cpu_time: bool = False) -> float:
    """Median wall time (ms) of one whole-model run, same session settings as :func:`profile_ops`
    without the profiler. ``cpu_time`` (one thread only): the calling thread's CPU time instead, which
    other processes on a shared machine do not inflate (onnxruntime runs a one-thread session in the
    caller's thread)."""
    import time

    if cpu_time and threads != 1:
        raise InputError("CPU-time measurement needs threads = 1 (the work must run in the calling thread)")
    clock = time.thread_time if cpu_time else time.perf_counter
    model_bytes, feeds = _runnable(g)
    sess = _session(model_bytes, threads=threads, profile_dir=None)
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(repeats):
        t0 = clock()
        sess.run(None, feeds)
        times.append((clock() - t0) * _MS)
    return float(np.median(times))


def profile_costs(g: OnnxGraph, devices: DeviceSet, *, warmup: int = 3, repeats: int = 10,
                  threads: int = 1, measured: Mapping[str, float] | None = None) -> Costs:
    """Measured CPU times for the host kinds, roofline for the others (``measured``: times already
    taken by :func:`profile_ops`)."""
    base = roofline_costs(g, devices)
    warnings = list(base.warnings)
    hosts = [t for t, s in enumerate(devices.specs) if s.host]
    if not hosts:
        # said now, not only kept: a run that asked to measure must not pass for a measured one
        warning = ("profile costs measure this machine's CPU, but the devices have no host CPU kind: "
                   "every kind keeps its roofline estimate (the costs are the roofline model's)")
        log.warning("%s%s", f"{g.source}: " if g.source else "", warning)
        return Costs(base.kinds, base.compute, base.comm, None, NO_HOST_PROFILE,
                     (*warnings, warning))
    if measured is None:
        measured = profile_ops(g, warmup=warmup, repeats=repeats, threads=threads)
    compute = base.compute.copy()
    missing = [op.name for op in g.ops if op.name not in measured]
    for t in hosts:
        for i, op in enumerate(g.ops):
            if op.name in measured and math.isfinite(compute[t, i]):
                compute[t, i] = measured[op.name]
    if missing:
        warnings.append(f"the profiler reported no kernel for {len(missing)} op(s) "
                        f"({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}): they keep the "
                        f"roofline estimate")
    if len(hosts) < len(devices.specs):
        warnings.append("profile costs are this machine's CPU times; accelerator kinds use the roofline "
                        "model (bring accelerator measurements in with a JSON cost table)")
    for w in warnings[len(base.warnings):]:
        log.warning("%s%s", f"{g.source}: " if g.source else "", w)
    return Costs(base.kinds, compute, base.comm, None, "profile", tuple(warnings),
                 {k: float(v) for k, v in measured.items()})
