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
    * memory bandwidth by size (``bandwidth_curve``): chains of ``Add(x, c)`` from 4 Ki to 16 Mi
      elements (12 bytes per element: two reads, one write), minus the overhead; the largest is the
      kind's ``mem_bandwidth``;
    * Conv (``conv_flops``, ``conv_half_channels``, ``conv_half_pixels``): 3x3 and 1x1 convolutions
      that keep their shape, at the channel counts and image sizes of ImageNet CNNs and at few channels
      or few pixels; :func:`fit_conv_curve` fits the rate of a large convolution and the sizes at which
      the efficiency halves (a convolution is a matrix product of M = output channels by N = output
      pixels: narrow ones run the kernel below its peak);
    * MatMul (``matmul_flops``): transformer-sized products (128 and 512 rows, width 768 and 1024, a
      768 -> 3072 -> 768 MLP pair), the same way; fp16 too where the provider runs it (``fp16``).

    Session settings are those of :func:`graphs.costs.measure_run_time` (graph optimisations off,
    sequential, ``threads`` intra-op threads), so the figures describe the runs the profile cost model
    and the benchmarks measure. Runs are timed by the wall clock (what they take on this machine as it
    is loaded now), or by the calling thread's CPU time (``clock="cpu"``, one thread), which other
    processes on a shared machine do not inflate; either way the median of alternating runs.

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
from .errors import InputError

__all__ = ["Calibration", "calibrate", "fit_profile", "fit_conv_curve", "device_file_text",
           "write_device_file", "provider_for", "op_class", "OP_CLASSES"]

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
    ``bandwidth`` is the large-operator bandwidth; ``bandwidth_curve`` the (bytes, bytes/s) points.
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
    seconds: float = 0.0
    date: str = ""
    points: dict = field(default_factory=dict)

    def spec(self, base: DeviceSpec | None = None) -> DeviceSpec:
        """``base`` (default: the preset named :attr:`base`) with the measured figures: what the written
        file defines."""
        base = base or preset(self.base)
        fp32 = self.other_flops or max(self.conv_flops, self.matmul_flops)
        return replace(base, name=self.kind, fp32=fp32, fp16=self.fp16_flops or fp32,
                       mem_bandwidth=self.bandwidth, launch=self.launch, efficiency=1.0,
                       conv_flops=self.conv_flops, conv_half_channels=self.conv_half_channels,
                       conv_half_pixels=self.conv_half_pixels, matmul_flops=self.matmul_flops,
                       bandwidth_curve=self.bandwidth_curve)


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
    return ort.InferenceSession(model.SerializeToString(), so, providers=[provider])


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


def _pool_unit():
    from onnx import helper as h

    def unit(inp, out, i):
        return [h.make_node("MaxPool", [inp], [out], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], []
    return unit


def _conv_unit(channels: int, kernel: int, rng):
    from onnx import helper as h
    from onnx import numpy_helper as nh

    scale = 1.0 / math.sqrt(channels * kernel * kernel)  # keeps activations O(1) along the chain
    pad = kernel // 2

    def unit(inp, out, i):
        w = nh.from_array((rng.standard_normal((channels, channels, kernel, kernel)) * scale)
                          .astype(np.float32), f"w{i}")
        b = nh.from_array(np.zeros(channels, np.float32), f"b{i}")
        return [h.make_node("Conv", [inp, w.name, b.name], [out], kernel_shape=[kernel, kernel],
                            pads=[pad] * 4)], [w, b]
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
CLOCKS = ("wall", "cpu")


@dataclass(frozen=True)
class _Timer:
    provider: str
    threads: int
    budget: float  # seconds of runs per session (after warm-up)
    min_runs: int = 5
    max_runs: int = 200
    clock: str = "wall"  # or "cpu": the calling thread's CPU time (one CPU thread only)

    def run_times(self, models: Sequence, feed: np.ndarray) -> list[float]:
        """Median seconds of one whole-model run of each model; runs alternate between the models so
        that a change of load on a shared machine hits them alike."""
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
        times: list[list[float]] = [[] for _ in sessions]
        clock = time.thread_time if self.clock == "cpu" else time.perf_counter
        t_end = time.perf_counter() + self.budget * len(sessions)
        while True:
            n = len(times[0])
            if n >= self.max_runs or (n >= self.min_runs and time.perf_counter() >= t_end):
                break
            for s, ts in zip(sessions, times):
                t0 = clock()
                s.run(None, feeds)
                ts.append(clock() - t0)
        return [float(np.median(ts)) for ts in times]

    def per_link(self, unit, shape, k1: int, k2: int, dtype=np.float32) -> float:
        """Seconds one chain link adds to a model run (difference of two chain lengths)."""
        rng = np.random.default_rng(0)
        feed = rng.standard_normal(shape).astype(dtype)
        t1, t2 = self.run_times([_chain(unit, shape, k1, dtype), _chain(unit, shape, k2, dtype)], feed)
        return max(t2 - t1, 0.0) / (k2 - k1)


def model_name(model) -> str:
    """What a benchmark model runs: its first operator type and how many operators."""
    nodes = model.graph.node
    return f"{nodes[0].op_type} x{len(nodes)}" if nodes else "empty model"


# shapes of the benchmarks: ImageNet-CNN convolutions (channels, image side, kernel) and transformer
# products (rows, widths through the link)
CONV_SHAPES = ((64, 56, 3), (128, 28, 3), (256, 14, 3), (512, 7, 3), (128, 56, 1), (256, 28, 1),
               (512, 14, 1), (1024, 7, 1),
               # few channels or few pixels: where a convolution's efficiency falls
               (16, 56, 3), (32, 28, 3), (64, 7, 3), (32, 56, 1), (128, 7, 1))
MATMUL_SHAPES = ((128, (768, 768)), (128, (768, 3072, 768)), (512, (1024, 1024)))
ELEMENTWISE_SIZES = tuple(4 ** e for e in range(6, 13))  # 4 Ki .. 16 Mi elements
_CHANNELS = 64  # element-wise benchmarks run on [1, 64, side, side]


def calibrate(kind: str, *, threads: int = 1, budget: float = 0.25, clock: str = "wall",
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure the preset ``kind`` on this machine (see the module doc). ``threads``: intra-op threads
    (the calibrated kind then stands for that many cores); ``budget``: seconds of timed runs per
    benchmark session (each benchmark runs two); ``clock``: ``"wall"`` (what a run takes on this
    machine as loaded now) or ``"cpu"`` (the calling thread's CPU time, which other processes on a
    shared machine do not inflate; host kinds with one thread only); ``progress`` is told each
    benchmark's name."""
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be a positive integer, got {threads!r}")
    if clock not in CLOCKS:
        raise InputError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    base = preset(kind)
    provider = provider_for(base)
    if clock == "cpu" and (threads != 1 or not base.host):
        raise InputError("the cpu clock measures the calling thread: it needs a host kind and one thread "
                         "(use the wall clock otherwise)")
    t_start = time.perf_counter()
    timer = _Timer(provider, threads, budget, clock=clock)
    say = progress or (lambda _msg: None)
    points: dict = {"provider": provider, "load_before": _loadavg(), "cpus": os.cpu_count()}

    say("per-operator overhead")
    launch = timer.per_link(_add_unit((1,)), (1,), 4, 104)
    points["launch_s"] = launch

    curve = []
    points["elementwise"] = []
    for n in ELEMENTWISE_SIZES:
        say(f"element-wise BatchNormalization, Relu, Add: {n} elements")
        # bytes as graphs.costs.op_bytes counts them: BN and Relu read and write n floats, Add reads 2n
        nbytes = 4.0 * 7 * n + 16 * _CHANNELS
        k = 1 if n >= 4 ** 11 else 4 if n >= 4 ** 9 else 16
        side = int(math.isqrt(n // _CHANNELS))
        shape = (1, _CHANNELS, side, side)
        t = timer.per_link(_activation_unit(_CHANNELS), shape, 1, 1 + k)
        work = max(t - 3 * launch, 1e-9)
        curve.append((nbytes / 3, nbytes / work))  # per operator: a third of the link's traffic
        points["elementwise"].append({"elements": n, "bytes": nbytes, "seconds": t})
    bandwidth = curve[-1][1]

    say("MaxPool 3x3")
    n = _CHANNELS * 56 * 56
    t = timer.per_link(_pool_unit(), (1, _CHANNELS, 56, 56), 1, 5)
    other = 9.0 * n / max(t - launch, 1e-9)  # 9 FLOPs per output element, as graphs.costs counts pooling
    points["maxpool"] = {"elements": n, "flops": 9.0 * n, "seconds": t}

    rng = np.random.default_rng(0)
    points["conv"] = []
    for c, side, kern in CONV_SHAPES:
        say(f"Conv {kern}x{kern}, {c} channels, {side}x{side}")
        shape = (1, c, side, side)
        flops = 2.0 * c * c * kern * kern * side * side + c * side * side
        extra = int(min(16, max(2, 2e8 // flops)))  # small convolutions: more links to time
        t = timer.per_link(_conv_unit(c, kern, rng), shape, 1, 1 + extra)
        points["conv"].append({"channels": c, "side": side, "kernel": kern, "flops": flops, "seconds": t})
    conv_rate, half_m, half_n = fit_conv_curve([(p["flops"], p["channels"], p["side"] ** 2,
                                                 max(p["seconds"] - launch, 1e-9)) for p in points["conv"]])

    def matmuls(dtype) -> tuple[float, list]:
        tot_f = tot_t = 0.0
        pts = []
        for rows, widths in MATMUL_SHAPES:
            say(f"MatMul {np.dtype(dtype).name}, {rows} rows, widths {widths}")
            t = timer.per_link(_matmul_unit(widths, rng, dtype), (rows, widths[0]), 1, 3, dtype)
            flops = sum(2.0 * rows * a * b for a, b in zip(widths, widths[1:]))
            tot_f, tot_t = tot_f + flops, tot_t + max(t - launch * (len(widths) - 1), 1e-9)
            pts.append({"rows": rows, "widths": list(widths), "flops": flops, "seconds": t})
        return tot_f / tot_t, pts

    matmul_flops, points["matmul"] = matmuls(np.float32)
    fp16 = None
    try:
        fp16, points["matmul_fp16"] = matmuls(np.float16)
    except Exception as e:  # the provider has no fp16 MatMul kernel: fp16 stays unmeasured
        points["fp16_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    points["load_after"] = _loadavg()
    return Calibration(kind=base.name, base=base.name,
                       method=f"micro-benchmarks ({provider}, {clock} clock)",
                       threads=threads, conv_flops=conv_rate, conv_half_channels=half_m,
                       conv_half_pixels=half_n, matmul_flops=matmul_flops,
                       fp16_flops=fp16, bandwidth=bandwidth, launch=launch, other_flops=other,
                       bandwidth_curve=tuple(curve), seconds=time.perf_counter() - t_start,
                       date=_now(), points=points)


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
    run it), or the preset's peak when none was fitted; the bandwidth likewise keeps the preset's."""
    from scipy.optimize import nnls

    from .costs import op_bytes, op_flops, profile_ops

    base = preset(kind)
    ridge = base.peak() / base.bandwidth
    t_start = time.perf_counter()
    if measured is None:
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

    def rate(j: int, fallback: float) -> float:
        return 1.0 / full[j] if full[j] > 0 else fallback

    pred = a @ full
    points = {"operators": len(used), "profiled_ms": float(y.sum() * 1e3),
              "fitted_ms": float(pred.sum() * 1e3), "classes_in_model": [
                  ("conv", "matmul", "other_flops", "bytes", "overhead")[j] for j in present]}
    fitted = [1.0 / full[j] for j in range(3) if full[j] > 0]
    fastest = max(fitted) if fitted else base.peak()
    conv, matmul, other = rate(0, fastest), rate(1, fastest), rate(2, fastest)
    return Calibration(kind=base.name, base=base.name,
                       method=f"fit to the profile of {os.path.basename(g.source or 'a model')}",
                       threads=threads, conv_flops=conv, matmul_flops=matmul, fp16_flops=None,
                       bandwidth=rate(3, base.bandwidth), launch=float(full[4]), other_flops=other,
                       seconds=time.perf_counter() - t_start, date=_now(), points=points)


# --------------------------------------------------------------------------- the device file
def device_file_text(cal: Calibration) -> str:
    """A TOML device file defining ``cal.kind`` with the figures, the date and what each one means."""
    spec = cal.spec()
    lines = [
        f"# Device kind {cal.kind!r} calibrated on this machine by 'placement calibrate', {cal.date}.",
        f"# Method: {cal.method}; {cal.threads} intra-op thread(s); took {cal.seconds:.1f} s.",
        "# Use it with: placement place MODEL.onnx --devices "
        f"{cal.kind}:1 --device-file THIS.toml --costs roofline",
        "# Figures are achieved rates (not spec-sheet peaks), so efficiency is 1.",
    ]
    if cal.points.get("load_before") is not None:
        lines.append(f"# Load average {cal.points['load_before']:.2f} before, "
                     f"{cal.points.get('load_after') or 0:.2f} after, on {cal.points.get('cpus')} CPU(s): "
                     f"other work on the machine slows the figures down.")
    lines += [
        "",
        f"[devices.{cal.kind}]",
        f'base = "{cal.base}"  # everything not below (memory, host link, host flag) comes from the preset',
        f"fp32_tflops = {spec.fp32 / _T:.6g}  # fp32 FLOP/s of arithmetic other than Conv and MatMul/Gemm",
    ]
    if cal.fp16_flops is not None:
        lines.append(f"fp16_tflops = {cal.fp16_flops / _T:.6g}  # achieved fp16 MatMul FLOP/s "
                     f"(half-precision operators)")
    else:
        lines.append(f"fp16_tflops = {spec.fp16 / _T:.6g}  # fp16 not measured (no fp16 MatMul kernel "
                     f"on this provider, or a fit): same as fp32")
    lines += [
        f"conv_tflops = {cal.conv_flops / _T:.6g}  # achieved fp32 FLOP/s of a large Conv",
        f"conv_half_channels = {cal.conv_half_channels:.4g}  # a Conv with M output channels (per group) "
        "and N",
        f"conv_half_pixels = {cal.conv_half_pixels:.4g}  # output pixels reaches conv_tflops x M / (M + "
        f"{cal.conv_half_channels:.4g}) x N / (N + {cal.conv_half_pixels:.4g})",
        f"matmul_tflops = {cal.matmul_flops / _T:.6g}  # achieved fp32 FLOP/s of MatMul and Gemm",
        f"mem_bandwidth_gbs = {cal.bandwidth / _G:.6g}  # achieved memory bandwidth of large operators, GB/s",
        f"launch_us = {cal.launch / _US:.6g}  # time every operator adds to a run besides its work, "
        "microseconds",
        "efficiency = 1.0",
    ]
    if cal.bandwidth_curve:
        pts = ", ".join(f"[{b:.0f}, {r / _G:.4g}]" for b, r in cal.bandwidth_curve)
        lines += ["# achieved bandwidth by operator size: [bytes one operator reads and writes, GB/s];",
                  "# interpolated on log(bytes), flat beyond the ends (small operators run from cache)",
                  f"bandwidth_curve = [{pts}]"]
    lines.append(f'description = "{_toml_escape(_describe(cal))}"')
    return "\n".join(lines) + "\n"


def _describe(cal: Calibration) -> str:
    return (f"{cal.kind} calibrated {cal.date} ({cal.method}, {cal.threads} thread(s)): Conv "
            f"{cal.conv_flops / _G:.1f} GFLOP/s, MatMul {cal.matmul_flops / _G:.1f} GFLOP/s, "
            f"{cal.bandwidth / _G:.1f} GB/s, {cal.launch / _US:.2f} us per operator")


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
