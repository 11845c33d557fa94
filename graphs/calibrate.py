"""Calibrate a device kind to the machine in front of you: measured figures for the roofline model.

Two ways, both returning a :class:`Calibration` that :func:`device_file_text` writes as a TOML device
file (read back by :func:`graphs.devices.read_device_file`, overriding the preset of the same name):

:func:`calibrate`
    Micro-benchmarks this module generates and runs in onnxruntime, on the CPU for a host kind and
    through the CUDA execution provider for an accelerator kind (never a silent CPU fallback: without
    that provider it raises :class:`~graphs.errors.InputError`). Each benchmark is a chain of ``k``
    identical operators (the output of one feeds the next) timed as a whole-model run for two chain
    lengths; the difference divided by the number of extra operators is the time of one operator
    *inside* a model, with the per-run overheads (session call, copies in and out) cancelled:

    * per-operator overhead (``launch``): a chain of ``Add`` on one-element tensors;
    * memory bandwidth by size (``bandwidth_curve``): chains of BatchNormalization -> Relu -> residual
      Add from 4 Ki to 16 Mi elements (bytes as :func:`graphs.costs.op_bytes` counts them), minus the
      overhead; the largest is the kind's ``mem_bandwidth``;
    * metadata-only operators (``view_time``): a chain of Reshapes (each output aliases its input);
    * Transpose (``transpose``): pairs of a permutation and its inverse that copy runs of 1 to 3136
      contiguous elements, in the caches; :func:`fit_transpose` fits a copy rate and a time per run (a
      kernel that copies short runs starts one copy per run);
    * Conv (``conv_flops``, ``conv_half_channels``, ``conv_half_pixels``): 3x3 and 1x1 convolutions
      that keep their shape, at the channel counts and image sizes of ImageNet CNNs, at few channels
      or few pixels, and grouped; :func:`fit_conv_curve` fits the rate of a large
      convolution and the sizes at which the efficiency halves (a convolution is a matrix product of
      M = output channels by N = output pixels: narrow ones run the kernel below its peak);
    * depthwise Conv (``depthwise``): 3x3, one channel per group, at stride 1 (chained) and 2 (fanned
      out); :func:`fit_depthwise` fits a rate and a time per channel for each (such a kernel runs
      channel by channel: one matrix row per group, far beyond the narrow end of the Conv curve);
    * MatMul (``matmul_flops``): transformer-sized products (128 and 512 rows, width 768 and 1024, a
      768 -> 3072 -> 768 MLP pair), the same way; fp16 too where the provider runs it (``fp16``);
    * operators whose kernels run far from the other-arithmetic rate (``op_flops``): LRN, MaxPool and
      AveragePool (stride 1 chained, stride 2 fanned out from one input), BatchNormalization,
      LayerNormalization, Softmax; the stride-1 MaxPool is also the other-arithmetic rate.

    Session settings are those of :func:`graphs.costs.measure_run_time` (graph optimisations off,
    sequential, ``threads`` intra-op threads), so the figures describe the runs the profile cost model
    and the benchmarks measure. The two sessions of a benchmark alternate, and repeat until the 95 %
    interval of the figure is within ``tolerance`` (after ``budget`` seconds, at most ``cap``). Both
    clocks are recorded; the figures use the calling thread's CPU time for one host thread
    (``clock="auto"``, or ``"cpu"``: time spent descheduled by other processes does not count) and the
    wall clock otherwise. Competing work is measured before and during (:func:`assess`):
    :attr:`Calibration.disturbance` says whether, and how far, it may have moved the figures, and
    ``strict`` refuses a disturbed calibration (:class:`CalibrationDisturbed`).

:func:`fit_profile`
    Non-negative least squares (:func:`scipy.optimize.nnls`) of per-operator profile times of one model
    against its operators' FLOPs (Conv, MatMul/Gemm, other arithmetic) and bytes (memory-bound
    operators), plus a constant per operator: the rates, bandwidth and overhead that explain that
    model's profile, to cost other models with.

The library never prints; it measures and returns.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .devices import CONV_TYPES, MATMUL_TYPES, DeviceSpec, preset
from .errors import InputError, PlacementError

__all__ = ["Calibration", "Disturbance", "CalibrationDisturbed", "Series", "calibrate", "assess",
           "probe_machine", "fit_profile", "fit_conv_curve", "device_file_text", "write_device_file",
           "provider_for", "op_class", "OP_CLASSES", "FIGURES", "CONV_SHAPES", "OP_BENCHMARKS",
           "DEPTHWISE_SHAPES", "fit_depthwise", "TRANSPOSE_SHAPES", "fit_transpose"]

_G, _T, _US = 1e9, 1e12, 1e-6

# operator classes the benchmarks and the fit report errors by
OP_CLASSES = ("Conv", "MatMul/Gemm", "element-wise", "normalisation", "other")
_NORM = frozenset({"BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
                   "LpNormalization", "MeanVarianceNormalization", "SkipLayerNormalization",
                   "SimplifiedLayerNormalization", "RMSNormalization", "LRN", "Softmax", "LogSoftmax"})


def op_class(op_type: str) -> str:
    """The class an operator type's error is reported under: Conv, MatMul/Gemm, element-wise (pointwise
    arithmetic, activations, sums, data movement), normalisation (batch/layer norms, softmax, LRN),
    other (pooling, reductions, unknown)."""
    from .costs import _MOVE, _PER_ELEMENT, _SUM_INPUTS, _VIEW

    if op_type in CONV_TYPES:
        return "Conv"
    if op_type in MATMUL_TYPES:
        return "MatMul/Gemm"
    if op_type in _NORM:
        return "normalisation"
    if op_type in _PER_ELEMENT or op_type in _SUM_INPUTS or op_type in _MOVE or op_type in _VIEW:
        return "element-wise"
    return "other"


@dataclass(frozen=True)
class Calibration:
    """Measured (or fitted) figures of one device kind, in SI units (FLOP/s, bytes/s, seconds).

    ``fp16_flops`` is ``None`` when fp16 was not measured (the provider has no fp16 MatMul, or a fit).
    ``bandwidth`` is the large-operator bandwidth; ``bandwidth_curve`` the (bytes, bytes/s) points;
    ``op_flops`` the rates of operator types measured on their own (LRN, pooling).
    ``sources`` says where a figure did not come from its own measurement (figure name -> how it was
    obtained, e.g. ``"copied from MatMul/Gemm: no Conv in the model"``); a figure it does not name was
    measured (micro-benchmarks) or fitted to operators of its class (a fit).
    ``disturbance`` is what competing work did to the micro-benchmarks (``None`` for a fit).
    ``points`` keeps every benchmark's raw figures for reports; ``method`` says how they were obtained.
    """

    kind: str
    base: str
    method: str  # "micro-benchmarks (<provider>)" or "fit to <model>"
    threads: int
    conv_flops: float
    matmul_flops: float
    fp16_flops: float | None
    bandwidth: float
    launch: float
    bandwidth_curve: tuple[tuple[float, float], ...] = ()
    other_flops: float | None = None  # other arithmetic operators' rate (MaxPool benchmark, or the fit)
    conv_half_channels: float = 0.0  # Conv efficiency curve (see graphs.devices); 0 = none
    conv_half_pixels: float = 0.0
    op_flops: tuple[tuple[str, float], ...] = ()
    # depthwise Conv: ((FLOP/s, seconds per channel) at stride 1, (the same) strided); None: not measured
    depthwise: tuple[tuple[float, float], tuple[float, float]] | None = None
    view_time: float | None = None  # a metadata-only operator's time (s); None: not measured
    transpose: tuple[float, float] | None = None  # (bytes/s, s per run); None: not measured
    seconds: float = 0.0
    date: str = ""
    points: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    disturbance: Disturbance | None = None

    def spec(self, base: DeviceSpec | None = None) -> DeviceSpec:
        """``base`` (default: the preset named :attr:`base`) with the measured figures: what the written
        file defines."""
        base = base or preset(self.base)
        fp32 = self.other_flops or max(self.conv_flops, self.matmul_flops)
        return replace(base, name=self.kind, fp32=fp32, fp16=self.fp16_flops or fp32,
                       mem_bandwidth=self.bandwidth, launch=self.launch, efficiency=1.0,
                       conv_flops=self.conv_flops, conv_half_channels=self.conv_half_channels,
                       conv_half_pixels=self.conv_half_pixels, matmul_flops=self.matmul_flops,
                       bandwidth_curve=self.bandwidth_curve, op_flops=self.op_flops,
                       depthwise=self.depthwise if self.depthwise is not None else base.depthwise,
                       view_time=self.view_time if self.view_time is not None else base.view_time,
                       transpose=self.transpose if self.transpose is not None else base.transpose)

    def source(self, figure: str) -> str:
        """How ``figure`` (``conv``, ``matmul``, ``other``, ``bandwidth``, ``launch``, ``fp16``) was
        obtained: ``"measured"`` (micro-benchmarks), ``"fitted"`` (to operators of its class) or why not."""
        if figure in self.sources:
            return self.sources[figure]
        if figure == "fp16" and self.fp16_flops is None:
            return "not measured: same as the other-arithmetic rate"
        return "fitted" if self.method.startswith("fit") else "measured"

    def copied(self) -> list[str]:
        """The figures that were not measured or fitted on their own (see :attr:`sources`)."""
        return [k for k in FIGURES if self.source(k) not in ("measured", "fitted")]

    def at_bound(self, figure: str) -> bool:
        """Did the fit leave ``figure`` (``launch``: the per-operator overhead) at its lower bound, 0,
        where the profile does not determine it (the other figures explain the times without it)?"""
        return figure in self.points.get("at_bound", ())

    def unsettled(self, figure: str) -> tuple[int, int]:
        """``(not settled, benchmarks)``: how many of the micro-benchmarks behind ``figure`` stopped at
        their time cap before their 95 % interval reached the tolerance, of how many. ``figure``: one of
        :data:`FIGURES` (``bandwidth``: the largest size's), ``bandwidth_curve``, ``view``,
        ``transpose``, ``ops`` (own-rate operators) or ``depthwise``; ``(0, 0)`` when not benchmarked
        (a fit)."""
        count, names = self.points.get("settling", {}).get(figure, (0, ()))
        return len(names), int(count)


FIGURES = ("conv", "matmul", "other", "bandwidth", "launch", "fp16")  # Calibration.source's names


# --------------------------------------------------------------------------- providers
def provider_for(spec: DeviceSpec) -> str:
    """The onnxruntime execution provider that measures ``spec``: the CPU for a host kind, CUDA for an
    accelerator. :class:`InputError` when onnxruntime or that provider is missing (no fallback)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise InputError("calibrate needs onnxruntime (pip install onnxruntime)") from None
    if spec.host:
        return "CPUExecutionProvider"
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise InputError(
            f"cannot calibrate {spec.name!r}: it is an accelerator kind and onnxruntime's CUDA execution "
            f"provider is not available here (installed providers: {', '.join(available)}; install "
            f"onnxruntime-gpu on a machine with an NVIDIA GPU). Not falling back to the CPU; calibrate "
            f"the host with 'placement calibrate cpu'")
    return "CUDAExecutionProvider"


def _session(model, provider: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as measure_run_time
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=[provider])
    if sess.get_providers()[:1] != [provider]:  # onnxruntime falls back to the CPU when CUDA cannot start
        raise InputError(f"onnxruntime did not start {provider} (the session runs on "
                         f"{', '.join(sess.get_providers())}): not measuring a fallback; check the GPU and "
                         f"the CUDA libraries onnxruntime-gpu needs")
    return sess


# --------------------------------------------------------------------------- benchmark models
def _chain(unit: Callable[[str, str, int], tuple[list, list]], shape: Sequence[int], k: int,
           dtype=np.float32):
    """A model whose input ``x`` of ``shape`` goes through ``k`` copies of ``unit`` (each maps a tensor
    of that shape to one of the same shape): ``unit(inp, out, i) -> (nodes, initializers)``."""
    import onnx
    from onnx import helper as h

    et = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes, inits = [], []
    prev = "x"
    for i in range(k):
        out = "y" if i == k - 1 else f"t{i}"
        n, w = unit(prev, out, i)
        nodes += n
        inits += w
        prev = out
    graph = h.make_graph(nodes, "calibrate", [h.make_tensor_value_info("x", et, list(shape))],
                         [h.make_tensor_value_info("y", et, list(shape))], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _add_unit(shape, dtype=np.float32):
    from onnx import numpy_helper as nh

    c = nh.from_array(np.full(shape, 1e-3, dtype), "c")  # one constant shared by the chain

    def unit(inp, out, i):
        from onnx import helper as h

        return [h.make_node("Add", [inp, "c"], [out])], ([c] if i == 0 else [])
    return unit


def _activation_unit(channels: int):
    """BatchNormalization -> Relu -> residual Add of the link's input: the memory-bound operators between
    the convolutions of a CNN, each reading what the previous one wrote."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    one, zero = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    params = [nh.from_array(v, n) for v, n in ((one * 0.5, "s"), (zero, "b"), (zero, "m"), (one, "v"))]

    def unit(inp, out, i):
        return [h.make_node("BatchNormalization", [inp, "s", "b", "m", "v"], [f"n{i}"]),
                h.make_node("Relu", [f"n{i}"], [f"r{i}"]),
                h.make_node("Add", [f"r{i}", inp], [out])], (params if i == 0 else [])
    return unit


def _op_node(op_type: str, attrs: Mapping, params: Sequence[str] = ()):
    """``node(inp, out, i) -> NodeProto``: one operator of ``op_type`` with ``attrs``, reading ``inp``
    and then the initializers named ``params``."""
    from onnx import helper as h

    def node(inp, out, i):
        return h.make_node(op_type, [inp, *params], [out], **attrs)
    return node


def _op_params(op_type: str, shape: Sequence[int]) -> list:
    """The constant inputs a benchmark operator needs (a BatchNormalization's per-channel statistics,
    a LayerNormalization's scale and bias), as initializers."""
    from onnx import numpy_helper as nh

    if op_type == "BatchNormalization":
        one, zero = np.ones(shape[1], np.float32), np.zeros(shape[1], np.float32)
        return [nh.from_array(v, n) for v, n in ((one * 0.5, "s"), (zero, "b"), (zero, "m"), (one, "v"))]
    if op_type == "LayerNormalization":
        w = shape[-1]
        return [nh.from_array(np.ones(w, np.float32), "s"), nh.from_array(np.zeros(w, np.float32), "b")]
    return []


def _op_unit(op_type: str, attrs: Mapping, shape: Sequence[int] = ()):
    """A chain link of one shape-keeping operator (LRN, stride-1 padded pooling, normalisations)."""
    params = _op_params(op_type, shape)
    node = _op_node(op_type, attrs, [p.name for p in params])

    def unit(inp, out, i):
        return [node(inp, out, i)], (params if i == 0 else [])
    return unit


def _pool_unit():
    return _op_unit("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})


def _fan(node, in_shape: Sequence[int], out_shape: Sequence[int], k: int):
    """A model whose input ``x`` of ``in_shape`` feeds ``k`` copies of ``node`` (``node(inp, out, i)``),
    each an output of ``out_shape``: for operators whose output shape differs from their input's."""
    import onnx
    from onnx import helper as h

    et = onnx.TensorProto.FLOAT
    nodes = [node("x", f"y{i}", i) for i in range(k)]
    graph = h.make_graph(nodes, "calibrate", [h.make_tensor_value_info("x", et, list(in_shape))],
                         [h.make_tensor_value_info(f"y{i}", et, list(out_shape)) for i in range(k)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _conv_unit(channels: int, kernel: int, rng, groups: int = 1):
    from onnx import helper as h
    from onnx import numpy_helper as nh

    per_group = channels // groups
    scale = 1.0 / math.sqrt(per_group * kernel * kernel)  # keeps activations O(1) along the chain
    pad = kernel // 2

    def unit(inp, out, i):
        w = nh.from_array((rng.standard_normal((channels, per_group, kernel, kernel)) * scale)
                          .astype(np.float32), f"w{i}")
        b = nh.from_array(np.zeros(channels, np.float32), f"b{i}")
        return [h.make_node("Conv", [inp, w.name, b.name], [out], kernel_shape=[kernel, kernel],
                            pads=[pad] * 4, group=groups)], [w, b]
    return unit


def _depthwise_fan(channels: int, side: int, stride: int, k: int, rng):
    """``k`` depthwise 3x3 convolutions of ``stride`` (padding 1), each with its own weights, all reading
    the model input [1, channels, side, side]: strided ones change the shape, so they are fanned out."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    out = (side + 2 - 3) // stride + 1
    inits = []

    def node(inp, y, i):
        w = nh.from_array((rng.standard_normal((channels, 1, 3, 3)) / 3.0).astype(np.float32), f"w{i}")
        b = nh.from_array(np.zeros(channels, np.float32), f"b{i}")
        inits.extend([w, b])
        return h.make_node("Conv", [inp, w.name, b.name], [y], kernel_shape=[3, 3], pads=[1] * 4,
                           strides=[stride, stride], group=channels)
    model = _fan(node, (1, channels, side, side), (1, channels, out, out), k)
    model.graph.initializer.extend(inits)
    return model


def _reshape_unit(shape: Sequence[int], other: Sequence[int]):
    """A chain link of two Reshapes, ``shape`` -> ``other`` -> ``shape``: metadata-only operators."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    dims = [nh.from_array(np.array(v, np.int64), n) for v, n in ((list(other), "s_b"), (list(shape), "s_a"))]

    def unit(inp, out, i):
        return [h.make_node("Reshape", [inp, "s_b"], [f"v{i}"]),
                h.make_node("Reshape", [f"v{i}", "s_a"], [out])], (dims if i == 0 else [])
    return unit


def _transpose_unit(perm: Sequence[int]):
    """A chain link of a Transpose by ``perm`` and one by its inverse (the link keeps its shape)."""
    from onnx import helper as h

    inv = [list(perm).index(d) for d in range(len(perm))]

    def unit(inp, out, i):
        return [h.make_node("Transpose", [inp], [f"p{i}"], perm=list(perm)),
                h.make_node("Transpose", [f"p{i}"], [out], perm=inv)], []
    return unit


def _matmul_unit(widths: Sequence[int], rng, dtype=np.float32):
    """A chain link of MatMuls through ``widths`` (first = last): e.g. (768, 3072, 768) is an MLP pair."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    def unit(inp, out, i):
        nodes, inits = [], []
        cur = inp
        for j, (a, b) in enumerate(zip(widths, widths[1:])):
            w = nh.from_array((rng.standard_normal((a, b)) / math.sqrt(a)).astype(dtype), f"w{i}_{j}")
            nxt = out if j == len(widths) - 2 else f"m{i}_{j}"
            nodes.append(h.make_node("MatMul", [cur, w.name], [nxt]))
            inits.append(w)
            cur = nxt
        return nodes, inits
    return unit


# --------------------------------------------------------------------------- timing
CLOCKS = ("auto", "wall", "cpu")
SETTLE_TOLERANCE = 0.03  # a benchmark's figure is settled when its 95 % interval is within +-3 %
COMPETING_LIMIT = 0.25  # cores of other work (before or during) that make a calibration disturbed
# how much of the figures competing work holding every other core can take away (shared caches and memory
# bandwidth, which neither clock sees): 0.5 is above the slowdown measured on this project's 2-core
# machine (about 30 %, benchmarks/README_calibrate.md)
CONTENTION_SLOWDOWN = 0.5
SPREAD_LIMIT = 0.05  # median interquartile range of the repeats, over the median, that does too
UNSETTLED_LIMIT = 0.25  # share of benchmarks that hit the time cap before settling that does too


@dataclass(frozen=True)
class Series:
    """One benchmark's timed runs (every session it alternates between): how steady they were."""

    name: str
    runs: int  # timed runs of each session
    seconds: float  # wall time of all its timed runs
    settled: bool  # the figure's 95 % interval reached the tolerance before the cap
    halfwidth: float  # that interval's half-width relative to the figure
    spread: float  # interquartile range over the median of the timed clock, median over its sessions
    wall_over_cpu: float  # median wall time over median thread CPU time (1: never descheduled)
    competing: float | None  # cores other processes kept busy meanwhile (None: not measurable here)


def _median_halfwidth(ts: np.ndarray) -> float:
    """Half the width of the distribution-free 95 % confidence interval of the median of ``ts`` (the
    order statistics at n/2 -+ 0.98 sqrt(n))."""
    n = ts.size
    if n < 4:
        return math.inf
    x = np.sort(ts)
    lo = max(0, math.floor(n / 2 - 0.98 * math.sqrt(n)))
    hi = min(n - 1, math.ceil(n / 2 + 0.98 * math.sqrt(n)))
    return float(x[hi] - x[lo]) / 2


def _figure(times: Sequence[np.ndarray]) -> tuple[float, float]:
    """The figure a benchmark measures (the median of one session, or the last session's median minus
    the first's) and the half-width of its 95 % interval."""
    meds = [float(np.median(t)) for t in times]
    hws = [_median_halfwidth(t) for t in times]
    if len(times) == 1:
        return meds[0], hws[0]
    return meds[-1] - meds[0], math.hypot(hws[0], hws[-1])


def _cpu_sample() -> tuple[float, float, float, float] | None:
    """(wall s, busy CPU-seconds of the whole machine, stolen CPU-seconds, this process's CPU-seconds)
    from ``/proc/stat``; ``None`` where there is none (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 8:
        return None
    v = [int(x) for x in first[1:]]
    tick = float(os.sysconf("SC_CLK_TCK"))
    busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / tick  # user, nice, system, irq, softirq
    steal = (v[7] if len(v) > 7 else 0) / tick
    return time.perf_counter(), busy, steal, time.process_time()


def _competing(a, b) -> float | None:
    """Cores that processes other than this one kept busy (or the hypervisor stole) between two
    :func:`_cpu_sample` s; ``None`` when unknown or too short to tell (clock ticks are 10 ms)."""
    if a is None or b is None or b[0] - a[0] < 0.2:
        return None
    dt = b[0] - a[0]
    others = (b[1] - a[1]) - (b[3] - a[3])
    return max(0.0, others + (b[2] - a[2])) / dt


@dataclass(frozen=True)
class _Timer:
    provider: str
    threads: int
    budget: float  # at least this many seconds of timed runs per session (after warm-up)
    cap: float = math.inf  # at most this many (unless min_runs needs more)
    tol: float = SETTLE_TOLERANCE
    min_runs: int = 5
    max_runs: int = 20000
    clock: str = "wall"  # or "cpu": the calling thread's CPU time (one CPU thread only)
    log: list = field(default_factory=list, compare=False)  # a Series per benchmark

    def run_times(self, models: Sequence, feed: np.ndarray, name: str | None = None) -> list[float]:
        """Median seconds of one whole-model run of each model, on the timer's clock. Runs alternate
        between the models (in turn forwards and backwards) so that a change of load on a shared
        machine hits them alike, and repeat until the figure (:func:`_figure`) is known within ``tol``
        and ``budget`` has passed, or ``cap`` has: the record goes to :attr:`log`."""
        feeds = {"x": feed}
        try:
            sessions = [_session(m, self.provider, self.threads) for m in models]
            for s in sessions:
                for _ in range(2):
                    s.run(None, feeds)
        except Exception as e:  # onnxruntime raises its own types; a provider that cannot run the model
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise InputError(f"onnxruntime could not run a calibration benchmark ({model_name(models[0])}) "
                             f"with {self.provider}: {msg}") from None
        k = len(sessions)
        wall = np.zeros((k, 64))
        cpu = np.zeros((k, 64))
        n = 0
        t_start = time.perf_counter()
        sample0 = _cpu_sample()
        t_min, t_cap = t_start + self.budget * k, t_start + self.cap * k
        settled, hw_rel = False, math.inf
        while True:
            if n >= self.min_runs and n % 4 == 0:
                now = time.perf_counter()
                chosen = cpu if self.clock == "cpu" else wall
                fig, hw = _figure([chosen[j, :n] for j in range(k)])
                hw_rel = hw / abs(fig) if fig else math.inf
                settled = hw_rel <= self.tol
                if (settled and now >= t_min) or now >= t_cap or n >= self.max_runs:
                    break
            if n == wall.shape[1]:
                wall, cpu = np.pad(wall, ((0, 0), (0, n))), np.pad(cpu, ((0, 0), (0, n)))
            order = range(k) if n % 2 == 0 else range(k - 1, -1, -1)
            for j in order:
                c0, w0 = time.thread_time(), time.perf_counter()
                sessions[j].run(None, feeds)
                w1, c1 = time.perf_counter(), time.thread_time()
                wall[j, n], cpu[j, n] = w1 - w0, c1 - c0
            n += 1
        wall, cpu = wall[:, :n], cpu[:, :n]
        chosen = cpu if self.clock == "cpu" else wall
        meds = [float(np.median(t)) for t in chosen]
        spread = float(np.median([(np.percentile(t, 75) - np.percentile(t, 25)) / max(np.median(t), 1e-12)
                                  for t in chosen]))
        ratio = float(np.median([np.median(w) / max(np.median(c), 1e-12) for w, c in zip(wall, cpu)]))
        self.log.append(Series(name or model_name(models[0]), n, time.perf_counter() - t_start, settled,
                               hw_rel, spread, ratio, _competing(sample0, _cpu_sample())))
        return meds

    def per_link(self, unit, shape, k1: int, k2: int, dtype=np.float32, name: str | None = None) -> float:
        """Seconds one chain link adds to a model run (difference of two chain lengths)."""
        rng = np.random.default_rng(0)
        feed = rng.standard_normal(shape).astype(dtype)
        t1, t2 = self.run_times([_chain(unit, shape, k1, dtype), _chain(unit, shape, k2, dtype)], feed, name)
        return max(t2 - t1, 0.0) / (k2 - k1)

    def per_copy(self, node, in_shape, out_shape, k1: int, k2: int, name: str | None = None) -> float:
        """Seconds one more copy of ``node`` (reading the model input) adds to a model run: for operators
        that change their input's shape (strided pooling), which cannot be chained."""
        rng = np.random.default_rng(0)
        feed = rng.standard_normal(in_shape).astype(np.float32)
        t1, t2 = self.run_times([_fan(node, in_shape, out_shape, k1), _fan(node, in_shape, out_shape, k2)],
                                feed, name)
        return max(t2 - t1, 0.0) / (k2 - k1)


def model_name(model) -> str:
    """What a benchmark model runs: its first operator type and how many operators."""
    nodes = model.graph.node
    return f"{nodes[0].op_type} x{len(nodes)}" if nodes else "empty model"


@dataclass(frozen=True)
class Disturbance:
    """What other work on the machine did to a calibration, and whether its figures can be trusted.

    ``competing_*``: cores other processes kept busy (or the hypervisor stole) in the half second
    before and during the benchmarks (``/proc/stat``; ``None`` where unavailable); ``load_*``: the
    1-minute load average; ``spread``: the median over benchmarks of the repeats' interquartile range
    over their median; ``wall_over_cpu``: median wall time over thread CPU time of a run (1 = never
    descheduled); ``bound``: how far the figures may be off, as a fraction (see :func:`assess`)."""

    cpus: int
    threads: int
    clock: str
    load_before: float | None
    load_after: float | None
    competing_before: float | None
    competing_during: float | None
    spread: float
    wall_over_cpu: float
    unsettled: int
    benchmarks: int
    bound: float
    reasons: tuple[str, ...]

    @property
    def disturbed(self) -> bool:
        return bool(self.reasons)

    @property
    def load(self) -> float | None:
        """The higher load average of before and after (the figure the warning quotes)."""
        loads = [x for x in (self.load_before, self.load_after) if x is not None]
        return max(loads) if loads else None

    def line(self) -> str:
        """One line: ``calibration disturbed: load 4.7 on 2 cores; figures may be off by up to 30%
        (...)``, or ``calibration undisturbed: ...``."""
        load = f"load {self.load:.1f}" if self.load is not None else "load unknown"
        if not self.disturbed:
            return (f"calibration undisturbed: {load} on {self.cpus} cores, repeats spread "
                    f"{self.spread:.0%}, figures within about {self.bound:.0%}")
        return (f"calibration disturbed: {load} on {self.cpus} cores; figures may be off by up to "
                f"{self.bound:.0%} ({'; '.join(self.reasons)})")

    def as_dict(self) -> dict:
        return {"disturbed": self.disturbed, "line": self.line(), "cpus": self.cpus, "threads": self.threads,
                "clock": self.clock, "load_before": self.load_before, "load_after": self.load_after,
                "competing_before": self.competing_before, "competing_during": self.competing_during,
                "spread": self.spread, "wall_over_cpu": self.wall_over_cpu, "unsettled": self.unsettled,
                "benchmarks": self.benchmarks, "bound": self.bound, "reasons": list(self.reasons)}


class CalibrationDisturbed(PlacementError):
    """``strict`` calibration refused: other work on the machine would skew the figures. ``disturbance``
    says how."""

    def __init__(self, disturbance: Disturbance, when: str) -> None:
        self.disturbance = disturbance
        super().__init__(f"{disturbance.line()}; refusing to calibrate {when} (strict=True): run it "
                         f"when the machine is idle, or without strict=True to write the figures with this "
                         f"warning")


def assess(series: Sequence[Series], *, cpus: int, threads: int, clock: str, load_before: float | None,
           load_after: float | None, competing_before: float | None,
           competing_during: float | None) -> Disturbance:
    """Whether a calibration was disturbed, and by how much its figures may be off.

    Disturbed when other work kept at least :data:`COMPETING_LIMIT` cores busy before or during the
    benchmarks (where ``/proc/stat`` cannot tell: when the load average beyond this run's own threads
    reached 0.5), when the repeats spread by more than :data:`SPREAD_LIMIT`, or when more than
    :data:`UNSETTLED_LIMIT` of the benchmarks hit their time cap before settling.

    The bound is the largest of: the relative 95 % half-width of the least certain settled figure; the
    repeats' median spread (a figure is a median: how far the load moved it is of the order of the
    range it moved the runs in); with the wall clock, the 90th
    percentile of wall over CPU time less 1 (the time spent descheduled); and the share of the
    machine's other cores that the competing work held, ``competing / (cpus - threads)`` capped at 1,
    times :data:`CONTENTION_SLOWDOWN` (competing work on other cores shares the caches and the memory
    bandwidth, which neither clock sees)."""
    reasons = []
    known = [c for c in (competing_before, competing_during) if c is not None]
    competing = max(known) if known else None
    if competing is not None:
        if competing >= COMPETING_LIMIT:
            when = ("before and during" if all(c >= COMPETING_LIMIT for c in known) and len(known) == 2
                    else "before" if competing_before is not None and competing_before >= COMPETING_LIMIT
                    else "during")
            reasons.append(f"other work used {competing:.1f} core(s) {when} the benchmarks")
    else:
        loads = [x for x in (load_before, None if load_after is None else load_after - threads)
                 if x is not None]
        if loads and max(loads) >= 0.5:
            reasons.append(f"load average {max(loads):.1f} beyond this run's {threads} thread(s)")
    spreads = np.array([s.spread for s in series]) if series else np.zeros(1)
    spread = float(np.median(spreads))
    if spread > SPREAD_LIMIT:
        reasons.append(f"repeats spread {spread:.0%}")
    unsettled = sum(not s.settled for s in series)
    if series and unsettled > UNSETTLED_LIMIT * len(series):
        reasons.append(f"{unsettled} of {len(series)} benchmarks did not settle to "
                       f"{SETTLE_TOLERANCE:.0%} within their time cap")
    ratios = np.array([s.wall_over_cpu for s in series]) if series else np.ones(1)
    hws = [s.halfwidth for s in series if s.settled and math.isfinite(s.halfwidth)]
    bound = max([max(hws, default=0.0), spread]
                + ([float(np.percentile(ratios, 90)) - 1.0] if clock == "wall" else [])
                + ([CONTENTION_SLOWDOWN * min(1.0, competing / max(1, cpus - threads))]
                   if competing is not None else []))
    return Disturbance(cpus=cpus, threads=threads, clock=clock, load_before=load_before,
                       load_after=load_after,
                       competing_before=competing_before, competing_during=competing_during, spread=spread,
                       wall_over_cpu=float(np.median(ratios)), unsettled=unsettled, benchmarks=len(series),
                       bound=max(bound, 0.0), reasons=tuple(reasons))


def probe_machine(seconds: float = 0.5) -> tuple[float | None, float | None]:
    """(cores other processes kept busy over the next ``seconds``, 1-minute load average): what
    :func:`calibrate` checks before it starts."""
    a = _cpu_sample()
    time.sleep(seconds)
    return _competing(a, _cpu_sample()), _loadavg()


# shapes of the benchmarks: ImageNet-CNN convolutions (channels, image side, kernel, groups) and
# transformer products (rows, widths through the link)
CONV_SHAPES = ((64, 56, 3, 1), (128, 28, 3, 1), (256, 14, 3, 1), (512, 7, 3, 1), (128, 56, 1, 1),
               (256, 28, 1, 1), (512, 14, 1, 1), (1024, 7, 1, 1),
               # few channels or few pixels: where a convolution's efficiency falls
               (16, 56, 3, 1), (32, 28, 3, 1), (64, 7, 3, 1), (32, 56, 1, 1), (128, 7, 1, 1),
               # grouped (ShuffleNet's 1x1 group convolutions)
               (240, 28, 1, 3))
# depthwise 3x3 convolutions (one channel per group: MobileNet, ShuffleNet), (channels, input side, stride):
# costed on their own (DeviceSpec.depthwise), not by the Conv curve; stride 1 chained, strided fanned out
DEPTHWISE_SHAPES = ((120, 28, 1), (240, 14, 1), (544, 7, 1), (112, 56, 2), (272, 14, 2))
# Transposes (input shape, permutation), each timed with its inverse: ShuffleNet's channel shuffle with
# contiguous runs of 49 to 3136 elements at two sizes, a head split (runs of 32) and two that move the last
# axis (element-wise copies, no runs)
TRANSPOSE_SHAPES = (((1, 4, 136, 7, 7), (0, 2, 1, 3, 4)), ((1, 4, 8, 28, 28), (0, 2, 1, 3, 4)),
                    ((1, 4, 544, 7, 7), (0, 2, 1, 3, 4)), ((1, 4, 8, 56, 56), (0, 2, 1, 3, 4)),
                    ((1, 256, 8, 32), (0, 2, 1, 3)), ((1, 16, 96, 64), (0, 1, 3, 2)),
                    ((1, 32, 28, 28), (0, 2, 3, 1)))
VIEW_SHAPE = ((1, 112, 56, 56), (1, 4, 28, 56, 56))  # the Reshape benchmark: a channel shuffle's first
MATMUL_SHAPES = ((128, (768, 768)), (128, (768, 3072, 768)), (512, (1024, 1024)))
ELEMENTWISE_SIZES = tuple(4 ** e for e in range(6, 13))  # 4 Ki .. 16 Mi elements
_CHANNELS = 64  # element-wise benchmarks run on [1, 64, side, side]
# operators with a rate of their own (graphs.devices.DeviceSpec.op_flops), whose kernels run far from
# the other-arithmetic rate: (op type, attributes, input shape); strided ones are fanned out, not chained
OP_BENCHMARKS = (("LRN", {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, (1, 64, 56, 56)),
                 ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 64, 56, 56)),
                 ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]}, (1, 64, 56, 56)),
                 ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 64, 28, 28)),
                 ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 128, 28, 28)),
                 ("BatchNormalization", {}, (1, 64, 56, 56)), ("BatchNormalization", {}, (1, 256, 14, 14)),
                 ("LayerNormalization", {"axis": -1}, (128, 768)),
                 ("Softmax", {"axis": -1}, (12, 128, 128)))


def calibrate(kind: str, *, threads: int = 1, budget: float = 0.25, cap: float | None = None,
              clock: str = "auto", tolerance: float = SETTLE_TOLERANCE, strict: bool = False,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure the preset ``kind`` on this machine (see the module doc). ``threads``: intra-op threads
    (the calibrated kind then stands for that many cores); ``budget``: at least this many seconds of
    timed runs per benchmark session (each benchmark runs two), and then on until the figure settles
    within ``tolerance`` (relative 95 % interval) or ``cap`` seconds (default 4 x budget) have passed;
    ``clock``: ``"wall"`` (what a run takes on this machine as loaded now), ``"cpu"`` (the calling
    thread's CPU time, which other processes on a shared machine do not inflate; host kinds with one
    thread only) or ``"auto"`` (the CPU clock where it can be used, else the wall clock).

    Competing work is measured before (half a second) and during the benchmarks, and
    :attr:`Calibration.disturbance` says whether it skewed the figures (:func:`assess`); with
    ``strict`` a disturbed calibration raises :class:`CalibrationDisturbed` instead (before the
    benchmarks when the machine is already busy). ``progress`` is told each benchmark's name."""
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be a positive integer, got {threads!r}")
    if clock not in CLOCKS:
        raise InputError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    if not (budget > 0 and math.isfinite(budget)):
        raise InputError(f"budget must be a positive number of seconds, got {budget!r}")
    cap = 4 * budget if cap is None else cap
    if not cap >= budget:
        raise InputError(f"the time cap ({cap!r} s) must be at least the budget ({budget!r} s)")
    if not 0 < tolerance < 1:
        raise InputError(f"tolerance must be a fraction in (0, 1), got {tolerance!r}")
    base = preset(kind)
    provider = provider_for(base)
    if clock == "cpu" and (threads != 1 or not base.host):
        raise InputError("the cpu clock measures the calling thread: it needs a host kind and one thread "
                         "(use the wall clock otherwise)")
    if clock == "auto":
        clock = "cpu" if base.host and threads == 1 else "wall"
    t_start = time.perf_counter()
    cpus = os.cpu_count() or 1
    competing_before, load_before = probe_machine(0.5)
    if strict:
        early = assess([], cpus=cpus, threads=threads, clock=clock, load_before=load_before, load_after=None,
                       competing_before=competing_before, competing_during=None)
        if early.disturbed:
            raise CalibrationDisturbed(early, "before the benchmarks")
    sample0 = _cpu_sample()
    timer = _Timer(provider, threads, budget, cap=cap, tol=tolerance, clock=clock)
    say = progress or (lambda _msg: None)
    points: dict = {"provider": provider, "load_before": load_before, "cpus": cpus, "clock": clock,
                    "tolerance": tolerance, "budget_s": budget, "cap_s": cap}

    settling: dict[str, list] = {}  # figure -> [benchmarks, names of those that did not settle]

    def settled_since(figure: str, start: int, stop: int | None = None) -> None:
        series = timer.log[start:stop]
        settling[figure] = [len(series), [s.name for s in series if not s.settled]]

    say("per-operator overhead")
    launch = timer.per_link(_add_unit((1,)), (1,), 4, 104, name="launch: Add x100, 1 element")
    points["launch_s"] = launch
    settled_since("launch", 0)

    curve = []
    start = len(timer.log)
    points["elementwise"] = []
    for n in ELEMENTWISE_SIZES:
        say(f"element-wise BatchNormalization, Relu, Add: {n} elements")
        # bytes as graphs.costs.op_bytes counts them: BN and Relu read and write n floats, Add reads 2n
        nbytes = 4.0 * 7 * n + 16 * _CHANNELS
        k = 1 if n >= 4 ** 11 else 4 if n >= 4 ** 9 else 16
        side = int(math.isqrt(n // _CHANNELS))
        shape = (1, _CHANNELS, side, side)
        t = timer.per_link(_activation_unit(_CHANNELS), shape, 1, 1 + k, name=f"element-wise {n}")
        work = max(t - 3 * launch, 1e-9)
        curve.append((nbytes / 3, nbytes / work))  # per operator: a third of the link's traffic
        points["elementwise"].append({"elements": n, "bytes": nbytes, "seconds": t})
    bandwidth = curve[-1][1]
    settled_since("bandwidth_curve", start)
    settled_since("bandwidth", len(timer.log) - 1)  # the largest size's

    start = len(timer.log)

    say("metadata-only operators: Reshape")
    view = timer.per_link(_reshape_unit(*VIEW_SHAPE), VIEW_SHAPE[0], 2, 52, name="view: Reshape x100") / 2
    points["view_s"] = view
    settled_since("view", start)

    start = len(timer.log)
    points["transpose"] = []
    for shape, perm in TRANSPOSE_SHAPES:
        say(f"Transpose {'x'.join(map(str, shape))} by {list(perm)}")
        t = timer.per_link(_transpose_unit(perm), shape, 1, 9, name=f"Transpose {shape} {list(perm)}") / 2
        nbytes, runs = _transpose_figures(shape, perm)
        points["transpose"].append({"shape": list(shape), "perm": list(perm), "bytes": nbytes, "runs": runs,
                                    "seconds": t})
    transpose = fit_transpose([(p["bytes"], p["runs"], max(p["seconds"] - launch, 1e-9))
                               for p in points["transpose"]])
    settled_since("transpose", start)

    start = len(timer.log)
    points["ops"] = []
    per_type: dict[str, list[float]] = {}
    for op_type, attrs, in_shape in OP_BENCHMARKS:
        k = attrs.get("kernel_shape")
        strides = attrs.get("strides", [1, 1])
        label = (f"{op_type} {k[0]}x{k[1]} stride {strides[0]}" if k else
                 f"{op_type} size {attrs['size']}" if op_type == "LRN" else op_type)
        label += f", {'x'.join(map(str, in_shape))}"
        say(label)
        out_shape = tuple(in_shape)
        if k:  # pooling
            pads = attrs.get("pads", [0, 0, 0, 0])
            out_shape = tuple(in_shape[:2]) + tuple((in_shape[2 + d] + pads[d] + pads[d + 2] - k[d])
                                                    // strides[d] + 1 for d in range(2))
        flops = _op_benchmark_flops(op_type, attrs, math.prod(out_shape))
        if out_shape == tuple(in_shape):
            t = timer.per_link(_op_unit(op_type, attrs, in_shape), in_shape, 1, 5, name=label)
        else:
            t = timer.per_copy(_op_node(op_type, attrs), in_shape, out_shape, 1, 5, name=label)
        work = max(t - launch, 1e-9)
        points["ops"].append({"op_type": op_type, "attrs": dict(attrs), "input": list(in_shape),
                              "flops": flops, "seconds": t})
        acc = per_type.setdefault(op_type, [0.0, 0.0])
        acc[0] += flops
        acc[1] += work
    op_rates = tuple((op, f / t) for op, (f, t) in sorted(per_type.items()))
    # other arithmetic: the stride-1 MaxPool (pooling-like work at the same intensity)
    pool1 = next(p for p in points["ops"] if p["op_type"] == "MaxPool")
    other = pool1["flops"] / max(pool1["seconds"] - launch, 1e-9)
    settled_since("ops", start)
    at = start + points["ops"].index(pool1)  # one series per operator benchmark, in order
    settled_since("other", at, at + 1)
    points["maxpool"] = {"elements": pool1["flops"] / 9.0, "flops": pool1["flops"],
                         "seconds": pool1["seconds"]}

    rng = np.random.default_rng(0)
    start = len(timer.log)
    points["conv"] = []
    for c, side, kern, groups in CONV_SHAPES:
        say(f"Conv {kern}x{kern}, {c} channels{f', {groups} groups' if groups > 1 else ''}, {side}x{side}")
        shape = (1, c, side, side)
        flops = 2.0 * c * (c // groups) * kern * kern * side * side + c * side * side
        extra = int(min(16, max(2, 2e8 // flops)))  # small convolutions: more links to time
        t = timer.per_link(_conv_unit(c, kern, rng, groups), shape, 1, 1 + extra,
                           name=f"Conv {kern}x{kern} c{c} g{groups} {side}x{side}")
        points["conv"].append({"channels": c, "side": side, "kernel": kern, "groups": groups, "flops": flops,
                               "seconds": t})
    conv_rate, half_m, half_n = fit_conv_curve([(p["flops"], p["channels"] / p["groups"], p["side"] ** 2,
                                                 max(p["seconds"] - launch, 1e-9)) for p in points["conv"]])
    settled_since("conv", start)

    start = len(timer.log)
    points["depthwise"] = []
    for c, side, stride in DEPTHWISE_SHAPES:
        say(f"depthwise Conv 3x3, {c} channels, {side}x{side}, stride {stride}")
        out = (side - 1) // stride + 1
        flops = 19.0 * c * out * out  # 2 x 9 per output, plus the bias (as graphs.costs counts it)
        name = f"depthwise Conv 3x3 c{c} {side}x{side} stride {stride}"
        if stride == 1:
            t = timer.per_link(_conv_unit(c, 3, rng, c), (1, c, side, side), 1, 5, name=name)
        else:
            feed = np.random.default_rng(0).standard_normal((1, c, side, side)).astype(np.float32)
            t1, t2 = timer.run_times([_depthwise_fan(c, side, stride, 1, rng),
                                      _depthwise_fan(c, side, stride, 5, rng)], feed, name)
            t = max(t2 - t1, 0.0) / 4
        points["depthwise"].append({"channels": c, "side": side, "stride": stride, "flops": flops,
                                    "seconds": t})
    dw = tuple(fit_depthwise([(p["flops"], p["channels"], max(p["seconds"] - launch, 1e-9))
                              for p in points["depthwise"] if (p["stride"] > 1) == strided])
               for strided in (False, True))
    settled_since("depthwise", start)

    def matmuls(dtype) -> tuple[float, list]:
        tot_f = tot_t = 0.0
        pts = []
        for rows, widths in MATMUL_SHAPES:
            say(f"MatMul {np.dtype(dtype).name}, {rows} rows, widths {widths}")
            t = timer.per_link(_matmul_unit(widths, rng, dtype), (rows, widths[0]), 1, 3, dtype,
                               name=f"MatMul {np.dtype(dtype).name} {rows}x{widths}")
            flops = sum(2.0 * rows * a * b for a, b in zip(widths, widths[1:]))
            tot_f, tot_t = tot_f + flops, tot_t + max(t - launch * (len(widths) - 1), 1e-9)
            pts.append({"rows": rows, "widths": list(widths), "flops": flops, "seconds": t})
        return tot_f / tot_t, pts

    start = len(timer.log)
    matmul_flops, points["matmul"] = matmuls(np.float32)
    settled_since("matmul", start)
    fp16 = None
    start = len(timer.log)
    try:
        fp16, points["matmul_fp16"] = matmuls(np.float16)
        settled_since("fp16", start)
    except InputError as e:  # the provider has no fp16 MatMul kernel: fp16 stays unmeasured
        points["fp16_error"] = str(e)[:200]
    points["settling"] = settling
    load_after = _loadavg()
    points["load_after"] = load_after
    dist = assess(timer.log, cpus=cpus, threads=threads, clock=clock, load_before=load_before,
                  load_after=load_after, competing_before=competing_before,
                  competing_during=_competing(sample0, _cpu_sample()))
    points["series"] = [s.__dict__ for s in timer.log]
    if strict and dist.disturbed:
        raise CalibrationDisturbed(dist, "with these figures")
    sources = {"fp16": "measured" if fp16 is not None else "not measured: same as fp32"}
    return Calibration(kind=base.name, base=base.name,
                       method=f"micro-benchmarks ({provider}, {clock} clock)",
                       threads=threads, conv_flops=conv_rate, conv_half_channels=half_m,
                       conv_half_pixels=half_n, matmul_flops=matmul_flops,
                       fp16_flops=fp16, bandwidth=bandwidth, launch=launch, other_flops=other,
                       bandwidth_curve=tuple(curve), op_flops=op_rates, depthwise=dw,
                       view_time=view, transpose=transpose, seconds=time.perf_counter() - t_start,
                       date=_now(), points=points, sources=sources, disturbance=dist)


def _op_benchmark_flops(op_type: str, attrs: Mapping, out_elements: int) -> float:
    """FLOPs of one operator benchmark as graphs.costs.op_flops counts them."""
    from .costs import _PER_ELEMENT

    if op_type == "LRN":
        return float(out_elements * (2 * int(attrs["size"]) + 6))
    if "kernel_shape" in attrs:  # pooling: kernel elements per output
        return float(out_elements * math.prod(attrs["kernel_shape"]))
    return float(out_elements * _PER_ELEMENT[op_type])


_HALF_GRID = (0.0,) + tuple(float(x) for x in np.geomspace(0.5, 512, 41))


def fit_conv_curve(points: Sequence[tuple[float, float, float, float]]) -> tuple[float, float, float]:
    """The Conv rate ``r`` and half-efficiency sizes ``(hm, hn)`` that best explain ``points`` of
    (FLOPs, output channels M, output pixels N, seconds) by time = FLOPs / (r M / (M + hm) N / (N + hn)),
    in relative error: ``hm``, ``hn`` on a grid (0 and 0.5 .. 512), ``r`` by least squares for each."""
    f, m, n, t = (np.array(x, dtype=float) for x in zip(*points))
    best = (math.inf, 0.0, 0.0, 0.0)
    for hm in _HALF_GRID:
        for hn in _HALF_GRID:
            a = f * (m + hm) / m * (n + hn) / n / t  # predicted time x rate, relative to the measured time
            inv = float(a.sum() / (a * a).sum())  # 1 / rate minimising sum((a / rate - 1)^2)
            err = float(((a * inv - 1.0) ** 2).sum())
            if err < best[0] - 1e-12:
                best = (err, 1.0 / inv, hm, hn)
    return best[1], best[2], best[3]


def fit_depthwise(points: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """The rate ``r`` (FLOP/s) and per-channel time ``c`` (s) that best explain ``points`` of (FLOPs,
    channels, seconds) by time = FLOPs / r + channels x c, in relative error (non-negative least squares
    on time / measured = 1). With one point, or a fit that gives the FLOPs no time: ``c`` = 0 and ``r``
    the plain rate that fits best."""
    from scipy.optimize import nnls

    if not points:
        raise InputError("fit_depthwise needs at least one (FLOPs, channels, seconds) point")
    f, ch, t = (np.array(x, dtype=float) for x in zip(*points))
    if len(points) >= 2:
        coef, _ = nnls(np.stack([f / t, ch / t], axis=1), np.ones_like(t))
        if coef[0] > 0:
            return float(1.0 / coef[0]), float(coef[1])
    a = f / t  # FLOPs alone: 1 / r minimising sum((f / (r t) - 1)^2)
    return float((a * a).sum() / a.sum()), 0.0


def _transpose_figures(shape: Sequence[int], perm: Sequence[int]) -> tuple[float, int]:
    """Bytes and contiguous runs of one fp32 Transpose of ``shape`` by ``perm`` (as graphs.costs counts)."""
    from .costs import op_bytes, transpose_runs
    from .onnx_loader import parse_model

    op = parse_model(_chain(_transpose_unit(perm), shape, 1)).ops[0]
    return op_bytes(op), int(transpose_runs(op) or 0)


def fit_transpose(points: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """The copy rate ``r`` (bytes/s) and time per run ``c`` (s) that best explain ``points`` of (bytes,
    contiguous runs, seconds) by time = bytes / r + runs x c, in relative error (non-negative least squares
    on time / measured = 1). With one point, no runs, or a fit that gives the bytes no time: ``c`` = 0 and
    ``r`` the plain rate that fits best."""
    from scipy.optimize import nnls

    if not points:
        raise InputError("fit_transpose needs at least one (bytes, runs, seconds) point")
    b, runs, t = (np.array(x, dtype=float) for x in zip(*points))
    if len(points) >= 2 and runs.any():
        coef, _ = nnls(np.stack([b / t, runs / t], axis=1), np.ones_like(t))
        if coef[0] > 0:
            return float(1.0 / coef[0]), float(coef[1])
    a = b / t  # bytes alone: 1 / r minimising sum((a / r - 1)^2)
    return float((a * a).sum() / a.sum()), 0.0


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# --------------------------------------------------------------------------- fit to a profile
def fit_profile(g, kind: str, measured: Mapping[str, float] | None = None, *, threads: int = 1,
                repeats: int = 10) -> Calibration:
    """Fit ``kind``'s Conv, MatMul/Gemm and other-arithmetic rates, bandwidth and per-operator overhead
    to the per-operator times ``measured`` (ms by node name; default: profiled now with
    :func:`graphs.costs.profile_ops`) of the :class:`~graphs.onnx_loader.OnnxGraph` ``g``.

    Model, linear in the unknowns: time = FLOPs / rate(class) for the operators whose arithmetic
    intensity (FLOPs per byte) is at least the preset's ridge point (peak / bandwidth), in three classes
    (Conv, MatMul/Gemm, other), bytes / bandwidth for the rest (a batch-1 Gemm, element-wise operators),
    plus one overhead per operator; solved by non-negative least squares on the times in seconds. A
    compute class the model has no operator of takes the fastest fitted rate (the same arithmetic units
    run it), or the preset's peak when none was fitted; the bandwidth likewise keeps the preset's.
    Such figures are named in :attr:`Calibration.sources` (``"copied from ...: why"``), so that the
    printout and the file do not present them as fitted. An overhead the fit leaves at its lower bound,
    0, stays 0 (the rates were fitted with it) and is marked so (:meth:`Calibration.at_bound`)."""
    from scipy.optimize import nnls

    from .costs import op_bytes, op_flops, profile_ops

    base = preset(kind)
    ridge = base.peak() / base.bandwidth
    t_start = time.perf_counter()
    if measured is None:  # (a model whose weights' file is missing is an InputError naming it: read_model)
        measured = profile_ops(g, repeats=repeats, threads=threads)
    rows, times, used = [], [], []
    for op in g.ops:
        if op.name not in measured or op.subgraphs:
            continue
        flops, _known = op_flops(op)
        nbytes = op_bytes(op)
        col = np.zeros(5)  # conv FLOPs, matmul FLOPs, other FLOPs, bytes, 1
        if flops < ridge * nbytes:
            col[3] = nbytes
        elif op.op_type in CONV_TYPES:
            col[0] = flops
        elif op.op_type in MATMUL_TYPES:
            col[1] = flops
        else:
            col[2] = flops
        col[4] = 1.0
        rows.append(col)
        times.append(measured[op.name] * 1e-3)
        used.append(op)
    if len(rows) < 3:
        raise InputError("too few profiled operators to fit (need 3 or more)", source=g.source)
    a, y = np.array(rows), np.array(times)
    present = [j for j in range(5) if a[:, j].any()]
    scale = a[:, present].max(axis=0)  # columns of order 1 for a well-conditioned solve
    coef, _res = nnls(a[:, present] / scale, y)
    full = np.zeros(5)
    full[present] = coef / scale

    pred = a @ full
    names = ("conv", "matmul", "other", "bandwidth", "overhead")
    points = {"operators": len(used), "profiled_ms": float(y.sum() * 1e3),
              "fitted_ms": float(pred.sum() * 1e3), "classes_in_model": [names[j] for j in present],
              "operators_by_class": {names[j]: int((a[:, j] > 0).sum()) for j in range(4)}}
    label = {0: "Conv", 1: "MatMul/Gemm", 2: "other arithmetic"}
    fitted = {j: 1.0 / full[j] for j in range(3) if full[j] > 0}
    sources: dict[str, str] = {}
    rates = {}
    fastest = max(fitted, key=fitted.get) if fitted else None
    for j in range(3):
        if j in fitted:
            rates[j] = fitted[j]
            continue
        count = points["operators_by_class"][names[j]]
        why = (f"no compute-bound {label[j]} operator in the model" if count == 0 else
               f"the fit gave the FLOPs of its {count} {label[j]} operator(s) no time")
        if fastest is not None:
            rates[j] = fitted[fastest]
            sources[names[j]] = f"copied from {label[fastest]}: {why}"
        else:
            rates[j] = base.peak()
            sources[names[j]] = f"preset peak: {why}, and no other class was fitted"
    if full[3] > 0:
        bandwidth = 1.0 / full[3]
    else:
        bandwidth = base.bandwidth
        count = points["operators_by_class"]["bandwidth"]
        sources["bandwidth"] = ("preset: no memory-bound operator in the model" if count == 0 else
                                f"preset: the fit gave the bytes of its {count} memory-bound operator(s) no "
                                f"time")
    sources["fp16"] = "not measured (a fit): same as the other-arithmetic rate"
    if full[4] == 0:  # nnls stopped at the bound: the times would take a negative overhead, or any small one
        points["at_bound"] = ["launch"]
    return Calibration(kind=base.name, base=base.name,
                       method=f"fit to the profile of {os.path.basename(g.source or 'a model')}",
                       threads=threads, conv_flops=rates[0], matmul_flops=rates[1], fp16_flops=None,
                       bandwidth=bandwidth, launch=float(full[4]), other_flops=rates[2],
                       seconds=time.perf_counter() - t_start, date=_now(), points=points, sources=sources)


# --------------------------------------------------------------------------- the device file
def device_file_text(cal: Calibration) -> str:
    """A TOML device file defining ``cal.kind`` with the figures, the date and what each one means; a
    disturbed calibration's warning line and every copied figure are written where a reader sees them
    (the head, the key's own comment, the description)."""
    spec = cal.spec()
    lines = [
        f"# Device kind {cal.kind!r} calibrated on this machine by 'placement calibrate', {cal.date}.",
        f"# Method: {cal.method}; {cal.threads} intra-op thread(s); took {cal.seconds:.1f} s.",
        "# Use it with: placement place MODEL.onnx --devices "
        f"{cal.kind}:1 --device-file THIS.toml --costs roofline",
        "# Figures are achieved rates (not spec-sheet peaks), so efficiency is 1.",
    ]
    d = cal.disturbance
    if d is not None:
        lines.append(f"# {d.line().upper() if d.disturbed else d.line()}")
        lines.append(f"# Load average {_num(d.load_before)} before, {_num(d.load_after)} after, on {d.cpus} "
                     f"CPU(s); other work used {_num(d.competing_before)} core(s) before and "
                     f"{_num(d.competing_during)} during; repeats spread {d.spread:.1%} (median); "
                     f"{d.benchmarks - d.unsettled} of {d.benchmarks} benchmarks settled to "
                     f"{cal.points.get('tolerance', SETTLE_TOLERANCE):.0%}.")
    elif cal.points.get("load_before") is not None:
        lines.append(f"# Load average {cal.points['load_before']:.2f} before, "
                     f"{cal.points.get('load_after') or 0:.2f} after, on {cal.points.get('cpus')} CPU(s): "
                     f"other work on the machine slows the figures down.")
    copied = cal.copied()
    verb = "fitted" if cal.method.startswith("fit") else "measured"
    if copied:
        lines.append(f"# Not {verb}: {', '.join(copied)} (see each key's comment).")

    def how(figure: str, what: str) -> str:
        src = cal.source(figure)
        return f"{src} {what}" if src in ("measured", "fitted") else f"{what}; NOT {verb.upper()}: {src}"

    lines += [
        "",
        f"[devices.{cal.kind}]",
        f'base = "{cal.base}"  # everything not below (memory, host link, host flag) comes from the preset',
        f"fp32_tflops = {spec.fp32 / _T:.6g}  # "
        + how("other", "fp32 FLOP/s of arithmetic other than Conv and MatMul/Gemm"),
    ]
    if cal.fp16_flops is not None:
        lines.append(f"fp16_tflops = {cal.fp16_flops / _T:.6g}  # achieved fp16 MatMul FLOP/s "
                     f"(half-precision operators)")
    else:
        lines.append(f"fp16_tflops = {spec.fp16 / _T:.6g}  # fp16 not measured (no fp16 MatMul kernel "
                     f"on this provider, or a fit): same as fp32")
    lines += [
        f"conv_tflops = {cal.conv_flops / _T:.6g}  # " + how("conv", "fp32 FLOP/s of a large Conv"),
        f"conv_half_channels = {cal.conv_half_channels:.4g}  # a Conv with M output channels (per group) "
        "and N",
        f"conv_half_pixels = {cal.conv_half_pixels:.4g}  # output pixels reaches conv_tflops x M / (M + "
        f"{cal.conv_half_channels:.4g}) x N / (N + {cal.conv_half_pixels:.4g})",
        f"matmul_tflops = {cal.matmul_flops / _T:.6g}  # " + how("matmul", "fp32 FLOP/s of MatMul and Gemm"),
        f"mem_bandwidth_gbs = {cal.bandwidth / _G:.6g}  # "
        + how("bandwidth", "memory bandwidth of large operators, GB/s"),
        f"launch_us = {cal.launch / _US:.6g}  # time every operator adds to a run besides its work, "
        "microseconds" + ("; at the fit's lower bound (0): not determined by this profile"
                          if cal.at_bound("launch") else ""),
        "efficiency = 1.0",
    ]
    if cal.op_flops:
        rates = ", ".join(f"{op} = {r / _G:.4g}" for op, r in cal.op_flops)
        lines += ["# measured fp32 GFLOP/s of operator types whose kernels run far from fp32_tflops",
                  f"op_gflops = {{ {rates} }}"]
    if cal.depthwise is not None:
        (r1, c1), (r2, c2) = cal.depthwise
        lines += ["# depthwise Conv (one input channel per group), [stride 1, strided]: time = FLOPs /",
                  "# depthwise_gflops + channels x depthwise_channel_us (not conv_tflops and its curve)",
                  f"depthwise_gflops = [{r1 / _G:.4g}, {r2 / _G:.4g}]",
                  f"depthwise_channel_us = [{c1 / _US:.4g}, {c2 / _US:.4g}]"]
    if cal.view_time is not None:
        lines.append(f"view_us = {cal.view_time / _US:.4g}  # measured time of a metadata-only operator "
                     f"(Reshape, Flatten, Squeeze, Unsqueeze), instead of launch_us")
    if cal.transpose is not None:
        rate, per_run = cal.transpose
        lines += ["# Transpose: time = launch_us + bytes / the lower of transpose_gbs and the bandwidth at",
                  "# its size + transpose_block_us x its contiguous runs (none when the last axis moves)",
                  f"transpose_gbs = {rate / _G:.4g}",
                  f"transpose_block_us = {per_run / _US:.4g}"]
    if cal.bandwidth_curve:
        pts = ", ".join(f"[{b:.0f}, {r / _G:.4g}]" for b, r in cal.bandwidth_curve)
        lines += ["# achieved bandwidth by operator size: [bytes one operator reads and writes, GB/s];",
                  "# interpolated on log(bytes), flat beyond the ends (small operators run from cache)",
                  f"bandwidth_curve = [{pts}]"]
    lines.append(f'description = "{_toml_escape(_describe(cal))}"')
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f}"


def _describe(cal: Calibration) -> str:
    text = (f"{cal.kind} calibrated {cal.date} ({cal.method}, {cal.threads} thread(s)): Conv "
            f"{cal.conv_flops / _G:.1f} GFLOP/s, MatMul {cal.matmul_flops / _G:.1f} GFLOP/s, "
            f"{cal.bandwidth / _G:.1f} GB/s, {cal.launch / _US:.2f} us per operator"
            + (" (at the fit's lower bound)" if cal.at_bound("launch") else ""))
    if cal.copied():
        verb = "fitted" if cal.method.startswith("fit") else "measured"
        text += f"; copied, not {verb}: {', '.join(cal.copied())}"
    if cal.disturbance is not None and cal.disturbance.disturbed:
        text += f"; {cal.disturbance.line()}"
    return text


def _toml_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def write_device_file(cal: Calibration, path: str | os.PathLike) -> str:
    """Write :func:`device_file_text` to ``path`` atomically; returns the path."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # as for every output
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(device_file_text(cal))
        os.replace(tmp, path)
    except OSError as e:
        raise InputError(f"cannot write device file: {e.strerror}", source=path) from None
    return path
