"""Calibration: calibrated device kinds, the device file round trip, the benchmarks' models, the profile
fit on synthetic data and the CUDA-absent error. No test checks a timing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs.calibrate import (
    Calibration,
    _activation_unit,
    _chain,
    _conv_unit,
    _matmul_unit,
    _pool_unit,
    _Timer,
    calibrate,
    device_file_text,
    fit_profile,
    op_class,
    write_device_file,
)
from graphs.costs import op_bytes, op_flops, roofline_costs, roofline_time
from graphs.devices import PRESETS, DeviceSpec, parse_devices, preset, read_device_file
from graphs.errors import InputError
from graphs.onnx_loader import load_onnx, parse_model
from placement.cli import main
from tests.onnx_models import small_cnn, zoo


def _cal(**kw) -> Calibration:
    base = dict(kind="cpu", base="cpu", method="by hand", threads=1, conv_flops=400e9, matmul_flops=300e9,
                fp16_flops=None, bandwidth=5e9, launch=3e-6,
                bandwidth_curve=((1e4, 100e9), (1e6, 50e9), (1e8, 5e9)), other_flops=50e9, seconds=1.0,
                date="2026-01-01 00:00 UTC")
    base.update(kw)
    return Calibration(**base)


@pytest.fixture(scope="module")
def resnet():
    return load_onnx(zoo("resnet50"))


def test_presets_cost_exactly_as_the_plain_roofline(resnet):
    """Kinds without measured figures: max(FLOPs / peak, bytes / bandwidth) + launch, unchanged."""
    for spec in PRESETS.values():
        assert spec.conv_flops is None and spec.matmul_flops is None and spec.bandwidth_curve == ()
        for op in resnet.ops:
            f, known = op_flops(op)
            assert known
            want = max(f / spec.peak(), op_bytes(op) / spec.bandwidth) + spec.launch
            assert roofline_time(op, spec) == pytest.approx(want, rel=1e-12)


def test_bandwidth_curve_interpolates_on_log_size_and_is_flat_beyond():
    s = _cal().spec()
    assert s.bandwidth_at(1e4) == pytest.approx(100e9)
    assert s.bandwidth_at(1e5) == pytest.approx(75e9)  # halfway in log(bytes)
    assert s.bandwidth_at(1e6) == pytest.approx(50e9)
    assert s.bandwidth_at(10.0) == pytest.approx(100e9) and s.bandwidth_at(1e12) == pytest.approx(5e9)
    xs = np.logspace(3, 9, 50)
    assert all(a >= b for a, b in zip(map(s.bandwidth_at, xs), map(s.bandwidth_at, xs[1:])))
    assert s.flop_rate("Conv") == 400e9 and s.flop_rate("Gemm") == 300e9 and s.flop_rate("MaxPool") == 50e9
    assert s.flop_rate("Conv", half=True) == s.peak(True)  # measured rates are fp32 only


def test_written_file_reads_back_to_the_same_kind(tmp_path):
    cal = _cal(fp16_flops=900e9, conv_half_channels=12.5, conv_half_pixels=3.0)
    path = write_device_file(cal, tmp_path / "cpu.toml")
    text = open(path, encoding="utf-8").read()
    assert "2026-01-01" in text and "# measured fp32 FLOP/s of a large Conv" in text and "launch_us" in text
    specs, counts = read_device_file(path)
    got, want = specs["cpu"], cal.spec()
    assert counts == {}
    assert got.host and got.memory is None and got.efficiency == 1.0
    for key in ("fp32", "fp16", "mem_bandwidth", "launch", "conv_flops", "matmul_flops", "conv_half_channels",
                "conv_half_pixels"):
        assert getattr(got, key) == pytest.approx(getattr(want, key), rel=1e-5), key
    assert [b for b, _ in got.bandwidth_curve] == pytest.approx([b for b, _ in want.bandwidth_curve])
    rates = [r for _, r in want.bandwidth_curve]
    assert [r for _, r in got.bandwidth_curve] == pytest.approx(rates, rel=1e-3)


def test_calibrated_file_changes_costs_in_the_expected_direction(tmp_path):
    """Faster Conv and MatMul than the preset's peak: those ops get cheaper; a slower bandwidth for large
    operators: a large memory-bound op dearer; a larger overhead: a view op dearer."""
    g = parse_model(small_cnn(batch=64))
    pre = roofline_costs(g, parse_devices("cpu:1")).compute[0]
    fast = write_device_file(_cal(), tmp_path / "fast.toml")
    slow = write_device_file(_cal(bandwidth_curve=((1e3, 1e9), (1e9, 1e9)), launch=50e-6),
                             tmp_path / "slow.toml")
    cal = roofline_costs(g, parse_devices("cpu:1", [fast])).compute[0]
    cal_slow = roofline_costs(g, parse_devices("cpu:1", [slow])).compute[0]
    by_type = {op.op_type: i for i, op in enumerate(g.ops)}
    assert cal[by_type["Conv"]] < pre[by_type["Conv"]] / 1.5  # 400 GFLOP/s instead of 96
    assert cal[by_type["Gemm"]] - 0.003 < pre[by_type["Gemm"]] - 0.002  # without the overheads
    assert cal[by_type["Relu"]] < pre[by_type["Relu"]]  # small: ~100 GB/s from the curve instead of 20
    assert cal_slow[by_type["Relu"]] > pre[by_type["Relu"]] * 5  # 1 GB/s
    assert cal_slow[by_type["Flatten"]] == pytest.approx(0.05)  # only the overhead: 50 us instead of 2
    # the same file under another name leaves the preset alone
    specs, _ = read_device_file(fast)
    assert parse_devices("cpu:1").specs[0] == preset("cpu") and specs["cpu"] != preset("cpu")


@pytest.mark.parametrize("body, message", [
    ("conv_tflops = -1", r"devices\.cpu\.conv_tflops must be a number > 0, got -1"),
    ("bandwidth_curve = [[1, 2, 3]]", "bandwidth_curve must be a list"),
    ("bandwidth_curve = [[100, 1], [100, 2]]", "distinct sizes"),
    ("bandwidth_curve = [[0, 1]]", r"bandwidth_curve\[0\]\[0\] must be a number > 0, got 0"),
    ("matmul_tflops = \"fast\"", "must be a number"),
])
def test_bad_calibrated_fields_are_explained(tmp_path, body, message):
    f = tmp_path / "d.toml"
    f.write_text(f'[devices.cpu]\nbase = "cpu"\n{body}\n')
    with pytest.raises(InputError, match=message):
        read_device_file(f)


def test_benchmark_chains_keep_their_shape_and_run():
    import onnx
    import onnxruntime  # noqa: F401

    rng = np.random.default_rng(0)
    timer = _Timer("CPUExecutionProvider", 1, budget=0.0, cap=0.0, min_runs=1)
    f32 = np.float32
    cases = [(_activation_unit(4), (1, 4, 8, 8), f32), (_pool_unit(), (1, 4, 8, 8), f32),
             (_conv_unit(4, 3, rng), (1, 4, 8, 8), f32), (_conv_unit(4, 1, rng), (1, 4, 5, 5), f32),
             (_matmul_unit((8, 16, 8), rng), (3, 8), f32),
             (_matmul_unit((8, 8), rng, np.float16), (3, 8), np.float16)]
    for unit, shape, dt in cases:
        m = _chain(unit, shape, 3, dt)
        onnx.checker.check_model(m, full_check=True)
        x = rng.standard_normal(shape).astype(dt)
        (t,) = timer.run_times([m], x)
        assert t > 0
        assert timer.per_link(unit, shape, 1, 2, dt) >= 0


def test_cuda_absent_is_an_error_not_a_cpu_fallback(monkeypatch, capsys, tmp_path):
    import onnxruntime as ort

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    for kind in ("a100", "t4"):
        with pytest.raises(InputError, match="CUDA execution provider is not available.*Not falling back"):
            calibrate(kind)
    out = tmp_path / "x.toml"
    assert main(["calibrate", "a100", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot calibrate 'a100'")
    assert "onnxruntime-gpu" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "a1000"], "unknown device kind 'a1000'; did you mean a100"),
    (["calibrate", "cpu", "--threads", "0"], "--threads must be at least 1"),
    (["calibrate", "cpu", "-o", "x.json"], "ending in .toml"),
    (["calibrate", "a100", "--from-profile", "m.onnx"], "fits host kinds only"),
    (["calibrate", "cpu", "--from-profile", "missing.onnx"], "missing.onnx"),
])
def test_cli_usage_errors(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def _synthetic_times(g, conv, matmul, bw, launch, ridge) -> dict[str, float]:
    out = {}
    for op in g.ops:
        f, b = op_flops(op)[0], op_bytes(op)
        if f < ridge * b:
            t = b / bw
        elif op.op_type == "Conv":
            t = f / conv
        elif op.op_type in ("Gemm", "MatMul"):
            t = f / matmul
        else:
            t = f / conv
        out[op.name] = (t + launch) * 1e3
    return out


def test_fit_recovers_known_parameters_on_synthetic_profiles(resnet):
    cpu = preset("cpu")
    ridge = cpu.peak() / cpu.bandwidth
    times = _synthetic_times(resnet, 210e9, 150e9, 40e9, 4e-6, ridge)
    cal = fit_profile(resnet, "cpu", times)
    assert cal.conv_flops == pytest.approx(210e9, rel=1e-6)
    assert cal.bandwidth == pytest.approx(40e9, rel=1e-6)
    assert cal.launch == pytest.approx(4e-6, rel=1e-5)
    # ResNet's only Gemm (batch 1) is memory-bound: no MatMul rate to fit, so it takes the Conv rate
    assert cal.matmul_flops == pytest.approx(cal.conv_flops)
    # with 5% multiplicative noise the figures stay close
    rng = np.random.default_rng(3)
    noisy = {k: v * float(rng.uniform(0.95, 1.05)) for k, v in times.items()}
    cal = fit_profile(resnet, "cpu", noisy)
    assert cal.conv_flops == pytest.approx(210e9, rel=0.06)
    assert cal.bandwidth == pytest.approx(40e9, rel=0.15)
    # the fitted file reproduces the profile's total within the noise
    spec = cal.spec()
    pred = sum(roofline_time(op, spec) for op in resnet.ops) * 1e3
    assert pred == pytest.approx(sum(noisy.values()), rel=0.05)


def test_fit_separates_conv_and_matmul_rates(tmp_path):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    from tests.onnx_models import save

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i, c in enumerate((16, 32, 64)):  # convs of growing width, then MatMuls of growing width
        shape = (c, 16 if i == 0 else c // 2, 3, 3)
        w = nh.from_array(rng.standard_normal(shape).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(h.make_node("Conv", [x, w.name], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"))
        x = f"c{i}"
    nodes.append(h.make_node("Reshape", [x, "shp"], ["r"], name="reshape"))
    inits.append(nh.from_array(np.array([64, 1024], np.int64), "shp"))
    x = "r"
    for i, n in enumerate((256, 512, 1024)):
        w = nh.from_array(rng.standard_normal((1024 if i == 0 else n // 2, n)).astype(np.float32), f"m{i}")
        inits.append(w)
        nodes.append(h.make_node("MatMul", [x, w.name], [f"y{i}"], name=f"mm{i}"))
        x = f"y{i}"
    nodes.append(h.make_node("Relu", [x], ["out"], name="relu"))
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 16, 32, 32])],
                         [h.make_tensor_value_info("out", T.FLOAT, [64, 1024])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    g = load_onnx(save(model, tmp_path / "m.onnx"))
    cpu = preset("cpu")
    times = _synthetic_times(g, 300e9, 120e9, 25e9, 1e-6, cpu.peak() / cpu.bandwidth)
    cal = fit_profile(g, "cpu", times)
    assert cal.conv_flops == pytest.approx(300e9, rel=1e-6)
    assert cal.matmul_flops == pytest.approx(120e9, rel=1e-6)


def test_fit_needs_enough_operators():
    g = parse_model(small_cnn())
    with pytest.raises(InputError, match="too few profiled operators"):
        fit_profile(g, "cpu", {g.ops[0].name: 1.0})


def test_cli_from_profile_writes_a_readable_file(tmp_path, capsys):
    from tests.onnx_models import save

    model = save(small_cnn(batch=8), tmp_path / "cnn.onnx")
    out = tmp_path / "fit.toml"
    assert main(["calibrate", "cpu", "--from-profile", model, "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    specs, _ = read_device_file(out)
    s = specs["cpu"]
    assert s.host and s.conv_flops > 0 and s.matmul_flops > 0 and math.isfinite(s.mem_bandwidth)
    assert "fit to the profile of cnn.onnx" in out.read_text()


def test_op_classes():
    assert [op_class(t) for t in ("Conv", "Gemm", "MatMul", "Relu", "Add", "Concat", "BatchNormalization",
                                  "LayerNormalization", "Softmax", "MaxPool", "Foo")] == [
        "Conv", "MatMul/Gemm", "MatMul/Gemm", "element-wise", "element-wise", "element-wise",
        "normalisation", "normalisation", "normalisation", "other", "other"]


def test_device_file_text_says_fp16_was_not_measured():
    text = device_file_text(_cal())
    assert "fp16 not measured" in text and "bandwidth_curve = [[10000, 100]" in text


@pytest.mark.slow
def test_calibrate_cpu_end_to_end(tmp_path, capsys):
    """The real micro-benchmarks (a short budget): a file that reads back with positive figures."""
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "cpu", "--budget", "0.02", "-o", str(out)]) == 0
    s = read_device_file(out)[0]["cpu"]
    assert isinstance(s, DeviceSpec) and s.conv_flops > 0 and s.matmul_flops > 0
    assert len(s.bandwidth_curve) == 7
    assert s.launch >= 0
    assert s.depthwise is not None and all(r > 0 and c >= 0 for r, c in s.depthwise)


def test_cpu_clock_needs_one_host_thread(monkeypatch):
    import onnxruntime as ort

    from graphs.costs import measure_run_time

    with pytest.raises(InputError, match="clock must be one of"):
        calibrate("cpu", clock="sundial")
    with pytest.raises(InputError, match="host kind and one thread"):
        calibrate("cpu", clock="cpu", threads=2)
    both = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: both)
    with pytest.raises(InputError, match="host kind and one thread"):
        calibrate("a100", clock="cpu")
    with pytest.raises(InputError, match="threads = 1"):
        measure_run_time(parse_model(small_cnn()), threads=2, cpu_time=True)


def test_conv_curve_fit_recovers_known_sizes_and_rate():
    from graphs.calibrate import CONV_SHAPES, fit_conv_curve

    r, hm, hn = 200e9, 16.0, 8.0
    pts = []
    for c, side, k, groups in CONV_SHAPES:
        f = 2.0 * c * (c // groups) * k * k * side * side
        m, n = c / groups, side * side
        pts.append((f, m, n, f / (r * m / (m + hm) * n / (n + hn))))
    got = fit_conv_curve(pts)
    assert got[0] == pytest.approx(r, rel=1e-9) and got[1:] == (pytest.approx(hm), pytest.approx(hn))
    # no size effect in the data: no curve
    flat = [(f, m, n, f / r) for f, m, n, _ in pts]
    assert fit_conv_curve(flat) == (pytest.approx(r), 0.0, 0.0)


def test_conv_efficiency_curve_slows_narrow_convolutions(tmp_path):
    """With conv_half_channels = 4, the 4-channel Conv of small_cnn runs at half the large-Conv rate."""
    g = parse_model(small_cnn(batch=64))
    conv = next(op for op in g.ops if op.op_type == "Conv")
    flat = _cal(launch=0.0, bandwidth_curve=((1.0, 1e15), (2.0, 1e15))).spec()
    curved = _cal(launch=0.0, bandwidth_curve=((1.0, 1e15), (2.0, 1e15)), conv_half_channels=4.0).spec()
    assert roofline_time(conv, curved) == pytest.approx(2 * roofline_time(conv, flat))
    path = write_device_file(_cal(conv_half_channels=4.0, conv_half_pixels=2.5), tmp_path / "c.toml")
    s = read_device_file(path)[0]["cpu"]
    assert (s.conv_half_channels, s.conv_half_pixels) == (4.0, 2.5)
    assert s.flop_rate("Conv", conv_size=(4, 2.5)) == pytest.approx(400e9 / 4)
    assert s.flop_rate("Conv", conv_size=(4, 2.5), half=True) == s.peak(True)


def test_a_benchmark_the_provider_cannot_run_is_an_input_error():
    """E.g. a CUDA provider listed but no usable GPU: one typed error naming the benchmark."""
    timer = _Timer("CPUExecutionProvider", 1, budget=0.0, cap=0.0, min_runs=1)
    bad = _chain(_matmul_unit((8, 8), np.random.default_rng(0)), (3, 8), 2)
    bad.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(InputError, match="could not run a calibration benchmark.*NoSuchOp x2"):
        timer.run_times([bad], np.zeros((3, 8), np.float32))
