"""The device catalog: what a kind of device can do, and how the command line names a cluster.

A :class:`DeviceSpec` holds the figures a cost model needs — peak FLOP/s (fp32 and fp16), memory
bandwidth and capacity, the host link's bandwidth and latency, and a per-operator launch overhead —
in SI units (FLOP/s, bytes/s, bytes, seconds). :data:`PRESETS` has one CPU core and common
accelerators with their vendors' published figures; user kinds come from a TOML or JSON file.

A cluster is written compactly as ``a100:4,cpu:8`` (kind, count; the count defaults to 1) and parsed
by :func:`parse_devices` into a :class:`DeviceSet`, which gives the :class:`~graphs.model.Cluster`
(kinds named like the specs, host CPU cores paying no communication) and the specs in cluster order.

User file (TOML or JSON), one table per kind; every key is optional when ``base`` names a preset::

    [devices.mygpu]
    base = "a100"            # start from a preset's figures
    fp32_tflops = 20.0       # peak FLOP/s, in TFLOP/s
    fp16_tflops = 300.0
    mem_bandwidth_gbs = 1600 # device memory bandwidth, GB/s (1e9 bytes/s)
    memory_gib = 40          # capacity in GiB; omit (or "unlimited") for none
    link_gbs = 32            # host link bandwidth, GB/s (one direction); inf or "unlimited" for none
    link_latency_us = 10     # host link latency, microseconds
    launch_us = 5            # per-operator launch overhead, microseconds
    efficiency = 0.7         # fraction of peak FLOP/s and bandwidth reached in practice (default 1)
    host = false             # true for host CPU cores: they pay no communication
    unsupported_ops = ["LRN"]  # operator types this kind cannot run
    price_per_hour = 2.5     # what one device costs per hour (optional; placement provision uses it)
    count = 2                # devices of this kind when the file alone names the cluster
    server_size = 8          # devices per server (replicated / tensor-parallel stages)
    nvlink_gbs = 300         # bandwidth among the devices of one server, GB/s per device
    network_gbs = 25         # bandwidth across servers, GB/s per device

Measured figures (written by ``placement calibrate``, see :mod:`graphs.calibrate`); all optional, and
a kind without them costs exactly as the plain roofline above. They are *achieved* rates, not scaled
by ``efficiency``::

    conv_tflops = 0.21       # achieved fp32 FLOP/s of a large Conv, TFLOP/s
    conv_half_channels = 12  # Conv efficiency by size: a convolution with M output channels (per group)
    conv_half_pixels = 16    # and N output pixels (batch x spatial) reaches conv_tflops x M / (M +
                             # conv_half_channels) x N / (N + conv_half_pixels); 0 = no such loss
    matmul_tflops = 0.19     # achieved fp32 FLOP/s of MatMul and Gemm, TFLOP/s
    bandwidth_curve = [[12288, 60.1], [201326592, 9.8]]
                             # achieved memory bandwidth by operator size: [bytes one operator reads
                             # and writes, GB/s] pairs, interpolated on log(bytes), flat beyond the ends
    op_gflops = { LRN = 0.3, MaxPool = 2.5 }
                             # achieved fp32 GFLOP/s of these operator types, instead of fp32_tflops
    depthwise_gflops = [7.3, 1.6]     # depthwise Conv (one input channel per group), stride 1 and
    depthwise_channel_us = [0.36, 0.45]  # strided: time = FLOPs / rate + channels x per-channel time,
                             # instead of the Conv curve (whose narrow end it is far beyond)
    view_us = 0.8            # a metadata-only operator (Reshape, Flatten, Squeeze, Unsqueeze): its whole
                             # time, microseconds, instead of launch_us (no data moves)
    transpose_gbs = 50       # a Transpose: launch + bytes / the lower of transpose_gbs and the bandwidth
    transpose_block_us = 0.012  # at its size, + one time per contiguous run it copies (runs = elements /
                             # the trailing dimensions the permutation keeps in place; none when the last
                             # axis moves)

Every figure is checked in the unit and under the key the file writes, before it is converted, and must
be finite: rates, bandwidths, memory_gib and the bandwidth curve's sizes > 0; times (``*_us``),
price_per_hour and conv_half_* >= 0; efficiency in (0, 1]; server_size an integer >= 1, count >= 0. An
error names the file, the section and the key: ``bad.toml: devices.cpu.launch_us must be a number >= 0,
got -5``.

An ``unsupported_ops`` entry or ``op_gflops`` key is an operator type, matched case-sensitively against
each operator's type (whatever its domain): a standard one, ONNX's (any domain or opset) or onnxruntime's
contrib types (FusedConv, FusedMatMul, FastGelu, SkipLayerNormalization, ...), or a custom operator's
own name (``MyPlugin`` of domain ``my.domain``: the ONNX front end loads such operators and costs them
conservatively). A typo of a standard type, the same but for case or one letter apart (``Matmul``,
``Softmaxx``, ``Tranpose``), is an error that names the entry and suggests the type, as it would leave
the kind running that operator without a word::

    bad.toml: devices.npu.unsupported_ops[0]: 'Matmul' is not an operator type; did you mean MatMul? ...

Any other name is taken as a custom operator's: it applies to operators of that name only. Whether a
model has one is known when the model is costed (:func:`graphs.costs.roofline_costs`, which the profile and
table cost models start from): a custom name that no operator of the model has is told then (logged at
each costing; the command line prints each warning once a command), naming the file and the entry (a
typo further from a standard type than one letter is no error, and this warning is what tells of it);
one the model has is not warned of. Where each name came from is the kind's own
:attr:`DeviceSpec.name_origins`, set when the file is read::

    warning: npu.toml: devices.npu.unsupported_ops[0]: 'MyPlugin' is not a standard operator type
    (ONNX's or onnxruntime's), and no operator of model.onnx has that type: it applies to custom
    operators of that name only, so to nothing here

A :class:`DeviceSpec` built in code follows the same rule (its ``unsupported_ops`` and ``op_flops``
names: :class:`InputError` for a typo; a custom name the model lacks is told at costing, naming the kind
and the field: ``device 'npu': unsupported_ops: 'MyPlugin' ...``).
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .errors import InputError
from .jsonio import json_error
from .model import Cluster, DeviceKind

__all__ = ["DeviceSpec", "DeviceSet", "PRESETS", "human_bytes", "parse_devices", "read_device_file", "preset",
           "CONV_TYPES", "MATMUL_TYPES"]

_T, _G, _GIB, _US = 1e12, 1e9, 2.0 ** 30, 1e-6
CONV_TYPES = frozenset({"Conv", "FusedConv"})  # operators costed at conv_flops when a kind has it
MATMUL_TYPES = frozenset({"MatMul", "Gemm", "FusedMatMul"})  # ... at matmul_flops


@dataclass(frozen=True)
class DeviceSpec:
    """One kind of device, in SI units. ``memory`` ``None`` = unlimited; ``host`` = a host CPU core
    (data already in host memory, so it pays no communication; its link figures are unused)."""

    name: str
    fp32: float  # peak FLOP/s
    fp16: float  # peak FLOP/s (tensor cores where the device has them)
    mem_bandwidth: float  # bytes/s
    memory: float | None  # bytes
    link_bandwidth: float  # bytes/s, host link, one direction
    link_latency: float  # s
    launch: float  # s per operator
    host: bool = False
    efficiency: float = 1.0
    unsupported_ops: frozenset[str] = field(default_factory=frozenset)
    description: str = ""
    price_per_hour: float | None = None  # user-set (no preset has one)
    conv_flops: float | None = None  # achieved fp32 FLOP/s of Conv (None: peak(); measured by calibrate)
    conv_half_channels: float = 0.0  # output channels at which a Conv's rate halves (0: no size effect)
    conv_half_pixels: float = 0.0  # output pixels at which a Conv's rate halves (0: no size effect)
    matmul_flops: float | None = None  # achieved fp32 FLOP/s of MatMul/Gemm (None: peak())
    # achieved bandwidth by operator size: ((bytes, bytes/s), ...) ascending in bytes; () = bandwidth
    bandwidth_curve: tuple[tuple[float, float], ...] = ()
    # achieved fp32 FLOP/s of operator types measured on their own (calibrate: LRN, pooling), which
    # replace fp32 for those types: ((op type, FLOP/s), ...); () = none
    op_flops: tuple[tuple[str, float], ...] = ()
    # depthwise Conv (one input channel per group): ((FLOP/s, seconds per channel) at stride 1, (the
    # same) strided), measured by calibrate; None: the Conv rate and curve
    depthwise: tuple[tuple[float, float], tuple[float, float]] | None = None
    # a metadata-only operator's whole time (s; VIEW_TYPES), measured by calibrate; None: launch
    view_time: float | None = None
    # Transpose: (bytes/s of its copy, seconds per contiguous run copied), measured by calibrate; None:
    # bytes at the bandwidth curve, like every other operator
    transpose: tuple[float, float] | None = None
    # topology, for replicated and tensor-parallel stages (graphs/parallel.py): devices per server, and
    # the bandwidth (bytes/s, one direction, per device) among devices of one server (NVLink-class) and
    # across servers (network); ``None``: unknown (the host link is used)
    server_size: int | None = None
    intra_bandwidth: float | None = None
    inter_bandwidth: float | None = None
    # where each operator name of ``unsupported_ops`` / ``op_flops`` came from, by (field, name): the
    # device file's entry ("npu.toml: devices.npu.unsupported_ops[0]", a base kind's where it inherits the
    # field), set by parse_device_table; empty for a kind built in code (custom_operator_names then names
    # the kind and the field). Provenance only: copies made with dataclasses.replace keep it (as
    # --device-memory's), and it takes no part in equality, hashing, repr or a cache key
    name_origins: Mapping[tuple[str, str], str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for key in ("fp32", "fp16", "mem_bandwidth", "link_bandwidth"):
            v = getattr(self, key)
            # a host's link may be unlimited (inf: it pays no transfer); an inf rate makes its work free
            finite = key != "link_bandwidth"
            if not (isinstance(v, (int, float)) and v > 0 and (math.isfinite(v) or not finite)):
                what = "a positive finite number" if finite else "a positive number"
                raise InputError(f"device {self.name!r}: {key} must be {what}, got {v!r}")
        for key in ("link_latency", "launch"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise InputError(f"device {self.name!r}: {key} must be a non-negative number, got {v!r}")
        if self.memory is not None and not (isinstance(self.memory, (int, float)) and self.memory > 0):
            raise InputError(f"device {self.name!r}: memory must be a positive number or unlimited, "
                             f"got {self.memory!r}")
        if self.price_per_hour is not None and not (isinstance(self.price_per_hour, (int, float))
                                                    and 0 <= self.price_per_hour < math.inf):
            raise InputError(f"device {self.name!r}: price_per_hour must be a non-negative number, got "
                             f"{self.price_per_hour!r}")
        if not (isinstance(self.efficiency, (int, float)) and 0 < self.efficiency <= 1):
            raise InputError(f"device {self.name!r}: efficiency must be in (0, 1], got {self.efficiency!r}")
        if isinstance(self.unsupported_ops, str):  # frozenset("LRN") would be {"L", "R", "N"}
            raise InputError(f"device {self.name!r}: unsupported_ops must be a collection of operator types, "
                             f"got the string {self.unsupported_ops!r}")
        object.__setattr__(self, "unsupported_ops", frozenset(self.unsupported_ops))
        if not isinstance(self.name_origins, Mapping):
            raise InputError(f"device {self.name!r}: name_origins must map (field, operator name) to where "
                             f"the name came from, got {self.name_origins!r}")
        object.__setattr__(self, "name_origins", dict(self.name_origins))  # the caller's, not shared
        # the one check of the names a kind gives, a file's (parse_device_table, which names the file's
        # field first) or a library caller's: a typo of a standard type is refused, a custom name accepted
        # (told at costing where the model has no operator of that name: custom_operator_names)
        for t in sorted(self.unsupported_ops, key=str):
            _operator_type(t, _code_where(self.name, "unsupported_ops"), source=None)
        for key in ("conv_half_channels", "conv_half_pixels"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and 0 <= v < math.inf):
                raise InputError(f"device {self.name!r}: {key} must be a non-negative number, got {v!r}")
        for key in ("conv_flops", "matmul_flops"):
            v = getattr(self, key)
            if v is not None and not (isinstance(v, (int, float)) and 0 < v < math.inf):
                raise InputError(f"device {self.name!r}: {key} must be a positive number, got {v!r}")
        curve = tuple(sorted((float(b), float(r)) for b, r in self.bandwidth_curve))
        if any(not (0 < b < math.inf and 0 < r < math.inf) for b, r in curve) or \
                len({b for b, _ in curve}) < len(curve):
            raise InputError(f"device {self.name!r}: bandwidth_curve must be [bytes, GB/s] pairs of positive "
                             f"numbers with distinct sizes")
        object.__setattr__(self, "bandwidth_curve", curve)
        rates = dict(self.op_flops)
        for t in sorted(rates, key=str):
            _operator_type(t, _code_where(self.name, "op_flops"), source=None)
        ops = tuple(sorted(rates.items()))
        if any(not (isinstance(r, (int, float)) and 0 < r < math.inf) for _, r in ops):
            raise InputError(f"device {self.name!r}: op_gflops must map operator types to positive numbers")
        object.__setattr__(self, "op_flops", ops)
        if self.depthwise is not None:
            dw = tuple(tuple(pair) for pair in self.depthwise)
            if len(dw) != 2 or any(len(p) != 2 or not all(isinstance(x, (int, float)) for x in p)
                                   or not (0 < p[0] < math.inf and 0 <= p[1] < math.inf) for p in dw):
                raise InputError(f"device {self.name!r}: depthwise_gflops and depthwise_channel_us must each "
                                 f"be two numbers (stride 1, strided): positive rates, non-negative times")
            object.__setattr__(self, "depthwise", dw)
        if self.view_time is not None and not (isinstance(self.view_time, (int, float))
                                               and 0 <= self.view_time < math.inf):
            raise InputError(f"device {self.name!r}: view_us must be a non-negative number, "
                             f"got {self.view_time!r}")
        if self.transpose is not None:
            tr = tuple(self.transpose)
            if len(tr) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in tr) \
                    or not (0 < tr[0] < math.inf and 0 <= tr[1] < math.inf):
                raise InputError(f"device {self.name!r}: transpose_gbs must be a positive number and "
                                 f"transpose_block_us a non-negative one")
            object.__setattr__(self, "transpose", (float(tr[0]), float(tr[1])))
        size = self.server_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise InputError(f"device {self.name!r}: server_size must be a positive integer, "
                             f"got {self.server_size!r}")
        for key in ("intra_bandwidth", "inter_bandwidth"):
            v = getattr(self, key)
            if v is not None and not (isinstance(v, (int, float)) and 0 < v < math.inf):
                raise InputError(f"device {self.name!r}: {key} must be a positive finite number, got {v!r}")

    def peak(self, half: bool = False) -> float:
        """Attainable FLOP/s: the fp16 or fp32 peak times the efficiency."""
        return (self.fp16 if half else self.fp32) * self.efficiency

    @property
    def bandwidth(self) -> float:
        """Attainable memory bandwidth, bytes/s."""
        return self.mem_bandwidth * self.efficiency

    def flop_rate(self, op_type: str, half: bool = False, conv_size: tuple[float, float] | None = None
                  ) -> float:
        """FLOP/s an operator of ``op_type`` reaches: the measured Conv or MatMul/Gemm rate for fp32
        operators of those types when the kind has one, else :meth:`peak`. ``conv_size``: a Conv's
        output channels per group and output pixels, which scale the Conv rate by the kind's
        efficiency curve (``conv_half_channels``, ``conv_half_pixels``)."""
        if not half:
            if op_type in CONV_TYPES and self.conv_flops is not None:
                if conv_size is None:
                    return self.conv_flops
                m, n = conv_size
                hm, hn = self.conv_half_channels, self.conv_half_pixels
                return self.conv_flops * (m / (m + hm) if m > 0 else 1.0) * (n / (n + hn) if n > 0 else 1.0)
            if op_type in MATMUL_TYPES and self.matmul_flops is not None:
                return self.matmul_flops
            for t, r in self.op_flops:
                if t == op_type:
                    return r
        return self.peak(half)

    def depthwise_time(self, flops: float, channels: float, strided: bool) -> float | None:
        """Seconds of arithmetic a depthwise Conv of ``flops`` over ``channels`` channels takes by the
        kind's depthwise figures (``FLOPs / rate + channels x per-channel time``, the strided pair when
        ``strided``), or ``None`` when it has none (the Conv rate applies)."""
        if self.depthwise is None:
            return None
        rate, per_channel = self.depthwise[1 if strided else 0]
        return flops / rate + channels * per_channel

    def bandwidth_at(self, nbytes: float) -> float:
        """Bytes/s an operator moving ``nbytes`` reaches: the measured curve interpolated on log(bytes)
        (flat beyond its ends) when the kind has one, else :attr:`bandwidth`."""
        curve = self.bandwidth_curve
        if not curve:
            return self.bandwidth
        if nbytes <= curve[0][0]:
            return curve[0][1]
        if nbytes >= curve[-1][0]:
            return curve[-1][1]
        for (b0, r0), (b1, r1) in zip(curve, curve[1:]):
            if nbytes <= b1:
                w = math.log(nbytes / b0) / math.log(b1 / b0)
                return r0 + w * (r1 - r0)
        return curve[-1][1]  # unreachable: nbytes < curve[-1][0]

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over the host link (latency + bytes / bandwidth); 0 for a host core
        and for nothing to move."""
        if self.host or nbytes <= 0:
            return 0.0
        return self.link_latency + nbytes / self.link_bandwidth


def _gpu(name, fp32, fp16, bw_gbs, mem_gib, link_gbs, description, server=(None, None, None)):
    size, intra_gbs, inter_gbs = server
    return DeviceSpec(name, fp32 * _T, fp16 * _T, bw_gbs * _G, mem_gib * _GIB, link_gbs * _G,
                      10 * _US, 5 * _US, description=description, server_size=size,
                      intra_bandwidth=None if intra_gbs is None else intra_gbs * _G,
                      inter_bandwidth=None if inter_gbs is None else inter_gbs * _G)


# Servers (devices per server, intra-server GB/s, inter-server GB/s; per device, one direction):
# DGX-1V: NVLink 2 (6 links x 25 GB/s), 4 x 100 Gb/s InfiniBand EDR for 8 GPUs;
# DGX A100: NVLink 3 (12 x 25 GB/s), one 200 Gb/s HDR port per GPU;
# DGX H100: NVLink 4 (18 x 25 GB/s), one 400 Gb/s NDR port per GPU;
# PCIe cloud servers (8 x T4 / 8 x L4, 100 Gb/s Ethernet): peers over PCIe, the network shared by 8.
_DGX1V, _DGXA100, _DGXH100 = (8, 150, 6.25), (8, 300, 25), (8, 450, 50)

# Vendors' published peak figures (dense, no sparsity). Host links: PCIe x16, one direction.
PRESETS: dict[str, DeviceSpec] = {p.name: p for p in (
    DeviceSpec("cpu", 96 * _G, 96 * _G, 20 * _G, None, math.inf, 0.0, 2 * _US, host=True,
               description="one host CPU core, nominal: 3 GHz x 32 FP32 FLOP/cycle (AVX2, 2 FMA units), "
                           "no native fp16, ~20 GB/s single-core memory bandwidth; host memory unlimited"),
    _gpu("v100", 15.7, 125, 900, 32, 16, "NVIDIA V100 SXM2 32GB: 15.7 TFLOP/s fp32, 125 fp16 tensor, "
         "900 GB/s HBM2, PCIe 3.0 x16", _DGX1V),
    _gpu("a100", 19.5, 312, 1555, 40, 32, "NVIDIA A100 SXM4 40GB: 19.5 TFLOP/s fp32, 312 fp16 tensor, "
         "1555 GB/s HBM2, PCIe 4.0 x16", _DGXA100),
    _gpu("a100-80gb", 19.5, 312, 2039, 80, 32, "NVIDIA A100 SXM4 80GB: 19.5 TFLOP/s fp32, 312 fp16 "
         "tensor, 2039 GB/s HBM2e, PCIe 4.0 x16", _DGXA100),
    _gpu("h100", 67, 989, 3350, 80, 64, "NVIDIA H100 SXM5 80GB: 67 TFLOP/s fp32, 989 fp16 tensor, "
         "3.35 TB/s HBM3, PCIe 5.0 x16", _DGXH100),
    _gpu("t4", 8.1, 65, 320, 16, 16, "NVIDIA T4 16GB: 8.1 TFLOP/s fp32, 65 fp16 tensor, 320 GB/s GDDR6, "
         "PCIe 3.0 x16", (8, 16, 1.5625)),
    _gpu("l4", 30.3, 121, 300, 24, 32, "NVIDIA L4 24GB: 30.3 TFLOP/s fp32, 121 fp16 tensor, "
         "300 GB/s GDDR6, PCIe 4.0 x16", (8, 32, 1.5625)),
)}


def preset(name: str) -> DeviceSpec:
    """The preset called ``name`` (case-insensitive); :class:`InputError` suggests close names."""
    return _lookup(name.strip().lower(), PRESETS)


def _lookup(name: str, catalog: Mapping[str, DeviceSpec]) -> DeviceSpec:
    if name in catalog:
        return catalog[name]
    close = difflib.get_close_matches(name, list(catalog), n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise InputError(f"unknown device kind {name!r}{hint} (known: {', '.join(sorted(catalog))}; define "
                     f"your own in a TOML/JSON device file)")


@dataclass(frozen=True)
class DeviceSet:
    """Device kinds with counts, in cluster order."""

    specs: tuple[DeviceSpec, ...]
    counts: tuple[int, ...]

    def cluster(self) -> Cluster:
        """The cluster: one :class:`DeviceKind` per spec, named like it; host cores pay no communication.
        The stage model's topology comes along: a host core resyncs replicas over its memory bandwidth,
        an accelerator without topology figures over its host link."""
        return Cluster(tuple(
            DeviceKind(s.name, c, s.memory, not s.host,
                       bandwidth=s.mem_bandwidth if s.host else s.link_bandwidth, server_size=s.server_size,
                       intra_bandwidth=s.intra_bandwidth, inter_bandwidth=s.inter_bandwidth)
            for s, c in zip(self.specs, self.counts)))

    def spec(self, name: str) -> DeviceSpec:
        return _lookup(name, {s.name: s for s in self.specs})

    def __str__(self) -> str:
        return ",".join(f"{s.name}:{c}" for s, c in zip(self.specs, self.counts))


# --------------------------------------------------------------------------- user files
# the rules a figure's number obeys, checked in the unit the file writes it in (before conversion)
_POS, _NONNEG, _FRACTION = "> 0", ">= 0", "in (0, 1]"
_KEYS = {  # file key -> (DeviceSpec field, scale to SI, rule of its number(s); None: not a plain number)
    "fp32_tflops": ("fp32", _T, _POS), "fp16_tflops": ("fp16", _T, _POS),
    "mem_bandwidth_gbs": ("mem_bandwidth", _G, _POS),
    "memory_gib": ("memory", _GIB, _POS), "link_gbs": ("link_bandwidth", _G, _POS),
    "link_latency_us": ("link_latency", _US, _NONNEG), "launch_us": ("launch", _US, _NONNEG),
    "efficiency": ("efficiency", 1.0, _FRACTION), "host": ("host", None, None),
    "unsupported_ops": ("unsupported_ops", None, None), "description": ("description", None, None),
    "price_per_hour": ("price_per_hour", 1.0, _NONNEG),
    "conv_tflops": ("conv_flops", _T, _POS), "matmul_tflops": ("matmul_flops", _T, _POS),
    "conv_half_channels": ("conv_half_channels", 1.0, _NONNEG),
    "conv_half_pixels": ("conv_half_pixels", 1.0, _NONNEG),
    "bandwidth_curve": ("bandwidth_curve", None, None), "op_gflops": ("op_flops", _G, _POS),
    "depthwise_gflops": ("depthwise", _G, _POS), "depthwise_channel_us": ("depthwise", _US, _NONNEG),
    "view_us": ("view_time", _US, _NONNEG),
    "transpose_gbs": ("transpose", _G, _POS), "transpose_block_us": ("transpose", _US, _NONNEG),
    "server_size": ("server_size", None, None),
    "nvlink_gbs": ("intra_bandwidth", _G, _POS), "network_gbs": ("inter_bandwidth", _G, _POS),
}
_OTHER_KEYS = ("base", "count")


def read_device_file(path: str | os.PathLike) -> tuple[dict[str, DeviceSpec], dict[str, int]]:
    """Read a TOML (``.toml``) or JSON device file: the kinds it defines and the counts it gives."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise InputError("no such device file", source=path) from None
    except OSError as e:
        raise InputError(f"cannot read device file: {e.strerror}", source=path) from None
    if path.lower().endswith(".toml"):
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise InputError("TOML device files need Python 3.11 or later; write the file as JSON",
                             source=path) from None
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"not a valid TOML device file: {e}", source=path) from None
    else:
        try:
            data = json.loads(raw.decode("utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(f"not a valid JSON device file: {json_error(e)}", source=path) from None
        except UnicodeDecodeError as e:
            raise InputError(f"not a valid JSON device file: not UTF-8 text ({e.reason})",
                             source=path) from None
    return parse_device_table(data, source=path)


def _key(name) -> str:
    """``name`` as a TOML key: bare when it can be, else quoted."""
    name = str(name)
    bare = name and all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    return name if bare else json.dumps(name)


def _shown(value) -> str:
    """A value as the file wrote it: ``true``, ``"fast"``, ``-5``, ``inf``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value, where: str, rule: str, *, source: str | None) -> float:
    """``value`` checked against ``rule`` (``> 0``, ``>= 0``, ``in (0, 1]``) in the file's own unit,
    finite; :class:`InputError` names ``where`` (``devices.cpu.launch_us``) and the value as written."""
    if not _is_number(value):
        raise InputError(f"{where} must be a number {rule}, got {_shown(value)}", source=source)
    if not math.isfinite(value):
        raise InputError(f"{where} must be a finite number {rule}, got {_shown(value)}", source=source)
    ok = value > 0 if rule == _POS else value >= 0 if rule == _NONNEG else 0 < value <= 1
    if not ok:
        raise InputError(f"{where} must be a number {rule}, got {_shown(value)}", source=source)
    return float(value)


@functools.cache
def _operator_types() -> frozenset[str]:
    """Every operator type onnx knows (all domains, all opsets) and onnxruntime's contrib types
    (com.microsoft: FusedConv, FusedMatMul, FastGelu, SkipLayerNormalization, ...), which the cost
    model prices too."""
    import onnx.defs
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
    names.update(s.name for s in ort_c.get_all_operator_schema())
    return frozenset(names | CONV_TYPES | MATMUL_TYPES)


def _code_where(kind: str, attr: str) -> str:
    """How :class:`DeviceSpec`'s check names its field ``attr`` of kind ``kind``."""
    return f"device {kind!r}: {attr}"


def _one_letter_apart(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` (case-folded, different) are one typo apart: a letter added, dropped, replaced
    by another letter, or two adjacent letters swapped. A digit or ``_`` added or changed is no typo (a
    custom ``Relu6`` or ``Gelu_`` is its own operator)."""
    if len(a) < len(b):
        a, b = b, a
    if len(a) - len(b) > 1:
        return False
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), len(b))
    if len(a) > len(b):  # a has one character more, at i
        return a[i].isalpha() and a[:i] + a[i + 1:] == b
    if not (a[i].isalpha() and b[i].isalpha()):
        return False
    return a[i + 1:] == b[i + 1:] or (a[i + 1:i + 2] == b[i:i + 1] and a[i:i + 1] == b[i + 1:i + 2]
                                      and a[i + 2:] == b[i + 2:])


def _near_misses(name: str) -> list[str]:
    """The standard operator types (:func:`_operator_types`) ``name`` is a typo of: the same but for case,
    or one letter apart (:func:`_one_letter_apart`)."""
    low = name.casefold()
    return sorted(t for t in _operator_types() if t.casefold() == low or _one_letter_apart(t.casefold(), low))


def _operator_type(name, where: str, *, source: str | None) -> bool:
    """Check an operator type a device kind names (``unsupported_ops``, ``op_gflops``); ``where`` names the
    field (``devices.npu.unsupported_ops[0]``, ``device 'npu': unsupported_ops``). True for a standard
    type: ONNX's (any domain or opset) or onnxruntime's contrib types. A typo of one (the same but for case,
    or one letter apart: 'Matmul', 'Softmaxx') is refused with :class:`InputError` suggesting it: it would
    leave the kind running that operator without a word. Any other name is a custom operator's (the ONNX
    front end loads those, from any domain): accepted, False; the cost model tells of it where a model has
    no operator of that name (:func:`custom_operator_names`)."""
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: an operator type is a non-empty name, got {_shown(name)}", source=source)
    if name in CONV_TYPES or name in MATMUL_TYPES or name in _operator_types():
        return True
    close = _near_misses(name)
    if close:
        which = "that standard type" if len(close) == 1 else "those standard types"
        raise InputError(f"{where}: {name!r} is not an operator type; did you mean {' or '.join(close)}? (a "
                         f"typo of {which}: the same but for case, or one letter apart; accepted: ONNX "
                         f"operator types of any domain and opset, onnxruntime's contrib types such as "
                         f"FusedConv, FusedMatMul and SkipLayerNormalization, and a custom operator's own "
                         f"name; names are case-sensitive)", source=source)
    return False


def _op_names(spec: DeviceSpec, attr: str) -> frozenset:
    return spec.unsupported_ops if attr == "unsupported_ops" else frozenset(t for t, _ in spec.op_flops)


def _name_origins(entry: dict, base: DeviceSpec | None, where: str, source: str | None
                  ) -> dict[tuple[str, str], str]:
    """Where a kind read from ``entry`` (named ``where``) of ``source`` got its operator names
    (:attr:`DeviceSpec.name_origins`): this entry's fields, or its ``base`` kind's where it inherits one (as
    that kind has them: a kind of this file read before it, a preset)."""
    out: dict[tuple[str, str], str] = {}
    for key in ("unsupported_ops", "op_gflops"):
        attr = _KEYS[key][0]
        if key in entry:
            at = f"{source + ': ' if source else ''}{where}.{_key(key)}"
            for i, t in enumerate(entry[key]):  # a list's entries by index, a table by the table
                out.setdefault((attr, t), f"{at}[{i}]" if attr == "unsupported_ops" else at)
        elif base is not None:
            out.update(((a, t), w) for (a, t), w in base.name_origins.items() if a == attr)
    return out


def custom_operator_names(spec: DeviceSpec) -> list[tuple[str, str, list[str]]]:
    """The custom operator names (not standard types: :func:`_operator_type`) kind ``spec`` gives in
    ``unsupported_ops`` and ``op_flops``, each as ``(where, name, like)``: ``where`` the entry it came from,
    a device file's (``npu.toml: devices.npu.unsupported_ops[0]``, a base kind's where it inherits the
    field: the spec's :attr:`DeviceSpec.name_origins`) when the kind was read from one, else the kind and
    field (``device 'npu': unsupported_ops``); ``like`` the standard types the name resembles (a typo
    further than one letter apart)."""
    out = []
    for attr in ("unsupported_ops", "op_flops"):
        names = _op_names(spec, attr)
        for t in sorted(names):
            if not (t in CONV_TYPES or t in MATMUL_TYPES or t in _operator_types()):
                like = difflib.get_close_matches(t, sorted(_operator_types()), n=3, cutoff=0.75)
                where = spec.name_origins.get((attr, t)) or _code_where(spec.name, attr)
                out.append((where, t, like))
    return out


def _numbers(value, where: str, rule: str, length: int, *, source: str | None) -> list[float]:
    """A list of ``length`` numbers, each checked against ``rule`` (``where[i]`` names the offender)."""
    if not isinstance(value, list) or len(value) != length:
        raise InputError(f"{where} must be a list of {length} numbers {rule}, got {_shown(value)}",
                         source=source)
    return [_number(x, f"{where}[{i}]", rule, source=source) for i, x in enumerate(value)]


def _figure(key: str, value, entry: dict, where: str, *, source: str | None):
    """The :class:`DeviceSpec` field value of file key ``key`` (``where`` names it: ``devices.cpu.key``),
    every number checked in the file's unit before it is converted to SI."""
    attr, scale, rule = _KEYS[key]
    section = where.rpartition(".")[0]
    if attr == "host":
        if not isinstance(value, bool):
            raise InputError(f"{where} must be true or false, got {_shown(value)}", source=source)
        return value
    if attr == "unsupported_ops":
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise InputError(f"{where} must be a list of operator types", source=source)
        for i, x in enumerate(value):  # a misspelt type would leave the kind running it without a word
            _operator_type(x, f"{where}[{i}]", source=source)
        return frozenset(value)
    if attr == "description":
        return str(value)
    if attr == "bandwidth_curve":
        if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
            raise InputError(f"{where} must be a list of [bytes, GB/s] pairs", source=source)
        curve = [tuple(_number(x, f"{where}[{i}][{j}]", _POS, source=source) for j, x in enumerate(p))
                 for i, p in enumerate(value)]
        sizes = [b for b, _ in curve]
        if len(set(sizes)) < len(sizes):
            raise InputError(f"{where}: each size (bytes) once; the pairs must have distinct sizes",
                             source=source)
        return tuple((b, r * _G) for b, r in curve)
    if attr == "op_flops":
        if not isinstance(value, dict):
            raise InputError(f"{where} must be a table of operator type = GFLOP/s", source=source)
        for t in value:
            _operator_type(t, where, source=source)
        return tuple((t, _number(r, f"{where}.{_key(t)}", rule, source=source) * scale)
                     for t, r in value.items())
    if attr in ("depthwise", "transpose"):  # two keys make one field
        keys = [k for k, (a, _, _) in _KEYS.items() if a == attr]
        if not all(k in entry for k in keys):
            raise InputError(f"{section}: give {' and '.join(keys)} together", source=source)
        if attr == "depthwise":  # [stride 1, strided] each
            rates, times = (_numbers(entry[k], f"{section}.{k}", _KEYS[k][2], 2, source=source) for k in keys)
            return tuple((r * _G, t * _US) for r, t in zip(rates, times))
        rate, block = (_number(entry[k], f"{section}.{k}", _KEYS[k][2], source=source) for k in keys)
        return rate * _G, block * _US
    if attr == "server_size":
        if not (_is_number(value) and isinstance(value, int) and value >= 1):
            raise InputError(f"{where} must be an integer >= 1, got {_shown(value)}", source=source)
        return value
    if attr == "memory" and (value is None or value == "unlimited"):
        return None
    if attr == "link_bandwidth" and (value == "unlimited" or _is_number(value) and value == math.inf):
        return math.inf  # a host's link, as the cpu preset's: its data is in host memory already
    return _number(value, where, rule, source=source) * scale


def parse_device_table(data, *, source: str | None = None) -> tuple[dict[str, DeviceSpec], dict[str, int]]:
    """Validate an already-decoded device document (see the module doc). Every figure is checked in the
    unit and under the key the file writes (``devices.cpu.launch_us must be a number >= 0, got -5``)."""
    prefix = ""
    if isinstance(data, dict) and isinstance(data.get("devices"), dict):
        data, prefix = data["devices"], "devices."
    if not isinstance(data, dict) or not data:
        raise InputError("a device file must map kind names to tables of figures, e.g. "
                         "[devices.mygpu] base = \"a100\" count = 2", source=source)
    specs: dict[str, DeviceSpec] = {}
    counts: dict[str, int] = {}
    for raw_name, entry in data.items():
        name = str(raw_name).strip().lower()
        where = prefix + _key(raw_name)
        if not name or any(c in name for c in ":,@ "):
            raise InputError(f"{where}: a kind name must be non-empty without ':', ',', '@' or spaces",
                             source=source)
        if not isinstance(entry, dict):
            raise InputError(f"{where}: expected a table of figures", source=source)
        unknown = sorted(set(entry) - set(_KEYS) - set(_OTHER_KEYS))
        if unknown:
            raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: "
                             f"{', '.join(list(_OTHER_KEYS) + list(_KEYS))}", source=source)
        fields: dict = {}
        if "base" in entry:
            try:
                base = _lookup(str(entry["base"]).lower(), {**PRESETS, **specs})
            except InputError as e:
                raise InputError(f"{where}.base: {e.detail}", source=source) from None
            fields.update({k: getattr(base, k) for k in base.__dataclass_fields__})
        else:
            missing = [k for k in ("fp32_tflops", "mem_bandwidth_gbs") if k not in entry]
            if missing:
                raise InputError(f"{where}: give {' and '.join(missing)} (or a 'base' preset to start "
                                 f"from)", source=source)
            fields.update(fp16=None, memory=None, link_bandwidth=math.inf, link_latency=0.0, launch=0.0,
                          host=False, efficiency=1.0, unsupported_ops=frozenset(), description="",
                          price_per_hour=None)
        fields["name"] = name
        for key, value in entry.items():
            if key not in _OTHER_KEYS:
                fields[_KEYS[key][0]] = _figure(key, value, entry, f"{where}.{_key(key)}", source=source)
        if fields.get("fp16") is None:
            fields["fp16"] = fields["fp32"]
        if not fields.get("host") and not math.isfinite(fields["link_bandwidth"]):
            given = f" ({where}.link_gbs is unlimited: only a host's link is)" if "link_gbs" in entry else ""
            raise InputError(f"{where}: an accelerator needs link_gbs (host link bandwidth){given}, or set "
                             f"host = true for a host CPU core", source=source)
        if "count" in entry:
            c = entry["count"]
            if not (_is_number(c) and isinstance(c, int) and c >= 0):
                raise InputError(f"{where}.count must be an integer >= 0, got {_shown(c)}", source=source)
            counts[name] = c
        fields["name_origins"] = _name_origins(entry, base if "base" in entry else None, where, source)
        try:
            specs[name] = DeviceSpec(**fields)
        except InputError as e:
            raise InputError(e.detail, source=source) from None
    return specs, counts


# --------------------------------------------------------------------------- the compact form
def parse_devices(spec: str | None, files: Iterable[str | os.PathLike] = ()) -> DeviceSet:
    """Parse ``a100:4,cpu:8`` into a :class:`DeviceSet`. Kinds come from the presets and from the
    device ``files`` (which may redefine a preset). ``spec`` may also be the path of a device file,
    whose ``count`` s then make the cluster; ``None`` uses the counts of the files."""
    if spec is not None and not isinstance(spec, str):  # a list would fail deep inside, untyped
        raise TypeError(f"devices takes a str such as 'a100:4,cpu:8' (or a device file's path), got "
                        f"{type(spec).__name__}")
    catalog = dict(PRESETS)
    file_counts: dict[str, int] = {}
    files = list(files)
    spec_file = None  # the device file given as the devices themselves
    if spec is not None and spec.strip().lower().endswith((".toml", ".json")) and "," not in spec:
        spec_file = spec.strip()
        files.append(spec_file)
        spec = None
    defined: dict[str, list[str]] = {}  # each file's kinds
    for f in files:
        specs, counts = read_device_file(f)
        catalog.update(specs)
        file_counts.update(counts)
        defined[os.fspath(f)] = list(specs)
    if spec is None:
        if not file_counts and files:
            # files of figures only (as placement calibrate writes): they define kinds but make no cluster
            named = [spec_file] if spec_file is not None else [os.fspath(f) for f in files]
            kinds = list(dict.fromkeys(k for f in named for k in defined[f]))  # never empty: a file has one
            one = len(named) == 1
            what = "the device file gives" if one else f"the device files {', '.join(named)} give"
            raise InputError(f"{what} the figures of kind{'' if len(kinds) == 1 else 's'} {', '.join(kinds)} "
                             f"but no counts (no 'count' in {'its' if one else 'their'} tables), so no "
                             f"devices: name the counts, e.g. devices='{kinds[0]}:2', and give the "
                             f"file{'' if one else 's'} for the figures (--device-file "
                             f"{' --device-file '.join(named)}), or add count = N to a kind's table",
                             source=named[0] if one else None)
        if not file_counts:
            raise InputError("no devices given: name them, e.g. devices='a100:4,cpu:8' (presets: "
                             f"{', '.join(PRESETS)}), or give a device file with counts")
        pairs = list(file_counts.items())
    else:
        pairs = []
        for part in spec.split(","):
            part = part.strip()
            if not part:
                raise InputError(f"devices {spec!r}: empty entry; write kind:count pairs separated by "
                                 f"commas, e.g. a100:4,cpu:8")
            name, sep, count = part.partition(":")
            name = name.strip().lower()
            if sep:
                try:
                    n = int(count)
                except ValueError:
                    n = -1
                if n < 0:
                    raise InputError(f"devices {spec!r}: count {count!r} of {name!r} is not a "
                                     f"non-negative integer")
            else:
                n = 1
            pairs.append((name, n))
    names = [n for n, _ in pairs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"devices: kind(s) listed twice: {', '.join(dup)}")
    specs = tuple(_lookup(n, catalog) for n, _ in pairs)
    ds = DeviceSet(specs, tuple(c for _, c in pairs))
    ds.cluster()  # validates: at least one device
    return ds


def human_bytes(x: float | None) -> str:
    """A byte count in binary units, as spec sheets give memory: ``40 GiB`` for an A100-40GB."""
    if x is None:
        return "unlimited"
    if not math.isfinite(x):
        return "inf"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1023.995 or unit == "TiB":  # what would print as 1024.00 is the next unit's 1
            if unit == "B":
                return f"{x:.0f} B"
            # whole numbers as such ("40 GiB"), also when the count went through a 6-digit message
            return f"{round(x)} {unit}" if abs(x - round(x)) < 0.005 else f"{x:.2f} {unit}"
        x /= 1024
    return f"{x:.2f} TiB"  # pragma: no cover
