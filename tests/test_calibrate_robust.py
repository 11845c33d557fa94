"""Calibration on a busy machine: settling repeats, competing-load detection, --strict, honest fits, the
new benchmark models. Timings come from a fake clock except in the one slow end-to-end test."""

from __future__ import annotations

import types

import numpy as np
import pytest

import graphs.calibrate as gc
from graphs.calibrate import (
    Calibration,
    CalibrationDisturbed,
    Series,
    _chain,
    _competing,
    _conv_unit,
    _fan,
    _median_halfwidth,
    _op_node,
    _op_unit,
    _Timer,
    assess,
    calibrate,
    device_file_text,
    fit_profile,
    write_device_file,
)
from graphs.devices import preset, read_device_file
from graphs.errors import InputError
from graphs.onnx_loader import parse_model
from placement.cli import main
from tests.test_calibrate import _cal, _synthetic_times


# --------------------------------------------------------------------------- statistics by hand
def test_median_interval_is_the_order_statistics_by_hand():
    # n = 16: ranks floor(8 - 0.98 * 4) = 4 and ceil(8 + 3.92) = 12 of 1..16 -> 5 and 13: half-width 4
    assert _median_halfwidth(np.arange(1.0, 17.0)) == pytest.approx(4.0)
    # n = 100: ranks floor(50 - 9.8) = 40 and ceil(59.8) = 60 of 0..99 -> half-width 10
    assert _median_halfwidth(np.arange(100.0)) == pytest.approx(10.0)
    assert _median_halfwidth(np.ones(3)) == float("inf")  # too few to say


def test_competing_cores_from_two_samples_by_hand():
    # 1 s apart: the machine was busy 1.5 CPU-s, this process 0.4 of them, the hypervisor stole 0.1
    a, b = (10.0, 100.0, 5.0, 2.0), (11.0, 101.5, 5.1, 2.4)
    assert _competing(a, b) == pytest.approx(1.2)
    assert _competing(a, (10.1, 100.1, 5.0, 2.0)) is None  # shorter than the clock ticks can tell
    assert _competing(None, b) is None


# --------------------------------------------------------------------------- the timer, on a fake clock
class _FakeClock:
    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def module(self):
        return types.SimpleNamespace(perf_counter=lambda: self.wall, thread_time=lambda: self.cpu,
                                     sleep=lambda s: None)


class _FakeSession:
    """Each run takes ``cpu`` seconds of CPU time times the next noise factor, and ``ratio`` times that
    on the wall clock (the rest descheduled)."""

    def __init__(self, clock: _FakeClock, cpu: float, ratio: float, noise) -> None:
        self.clock, self.cpu_s, self.ratio, self.noise = clock, cpu, ratio, noise

    def run(self, _out, _feeds):
        c = self.cpu_s * next(self.noise)
        self.clock.cpu += c
        self.clock.wall += c * self.ratio


def _fake_timer(monkeypatch, durations, ratio, noise_factory, **kw):
    clock = _FakeClock()
    sessions = iter([_FakeSession(clock, d, ratio, noise_factory()) for d in durations])
    monkeypatch.setattr(gc, "time", clock.module())
    monkeypatch.setattr(gc, "_session", lambda *a: next(sessions))
    monkeypatch.setattr(gc, "_cpu_sample", lambda: None)
    return _Timer("CPUExecutionProvider", 1, **kw)


def _steady():
    k = 0
    while True:  # +-1 % alternately
        k += 1
        yield 1.01 if k % 2 else 0.99


def test_steady_runs_settle_and_the_cpu_clock_ignores_descheduling(monkeypatch):
    m = _chain(gc._add_unit((1,)), (1,), 2)
    timer = _fake_timer(monkeypatch, (1e-3, 3e-3), 1.5, _steady, budget=0.01, cap=1.0, clock="cpu")
    t1, t2 = timer.run_times([m, m], np.zeros(1, np.float32), "fake")
    assert (t1, t2) == (pytest.approx(1e-3, rel=0.011), pytest.approx(3e-3, rel=0.011))
    (s,) = timer.log
    assert s.name == "fake" and s.settled and s.halfwidth <= 0.03
    assert s.wall_over_cpu == pytest.approx(1.5) and s.competing is None
    # budget 0.01 s per session of 1.5 and 4.5 ms wall runs: at least 0.02 / 0.006 = 3.3 rounds; min 5
    assert 5 <= s.runs <= 8


def test_wall_clock_counts_the_descheduled_time(monkeypatch):
    m = _chain(gc._add_unit((1,)), (1,), 2)
    timer = _fake_timer(monkeypatch, (2e-3,), 1.5, _steady, budget=0.01, cap=1.0, clock="wall")
    (t,) = timer.run_times([m], np.zeros(1, np.float32))
    assert t == pytest.approx(3e-3, rel=0.011)


def test_noisy_runs_stop_at_the_cap_unsettled(monkeypatch):
    def noisy():
        rng = np.random.default_rng(0)
        while True:
            yield float(rng.uniform(0.5, 1.5))

    m = _chain(gc._add_unit((1,)), (1,), 2)
    timer = _fake_timer(monkeypatch, (1e-3, 3e-3), 1.0, noisy, budget=0.01, cap=0.05, tol=0.001,
                        clock="cpu")
    timer.run_times([m, m], np.zeros(1, np.float32))
    (s,) = timer.log
    assert not s.settled and s.halfwidth > 0.001
    # 0.1 s of 4 ms rounds (2 sessions x 0.05 s cap), checked every 4 rounds: about 25, at most 32
    assert 20 <= s.runs <= 32
    assert s.spread > 0.2  # uniform(0.5, 1.5): interquartile range 0.5 of a median 1


# --------------------------------------------------------------------------- assessing a calibration
def _series(n=4, *, settled=True, halfwidth=0.01, spread=0.02, ratio=1.0):
    return [Series(f"b{i}", 20, 0.5, settled, halfwidth, spread, ratio, None) for i in range(n)]


def test_quiet_machine_is_not_disturbed_and_the_bound_is_the_spread():
    d = assess(_series(), cpus=2, threads=1, clock="cpu", load_before=0.1, load_after=1.0,
               competing_before=0.05, competing_during=0.02)
    assert not d.disturbed and d.reasons == ()
    # max(halfwidth 0.01, spread 0.02, 0.5 x competing 0.05 / 1 other core = 0.025)
    assert d.bound == pytest.approx(0.025)
    assert d.line().startswith("calibration undisturbed: load 1.0 on 2 cores")


def test_competing_work_is_named_with_load_and_bound():
    d = assess(_series(), cpus=2, threads=1, clock="cpu", load_before=4.7, load_after=3.9,
               competing_before=1.3, competing_during=0.9)
    assert d.disturbed
    assert d.reasons == ("other work used 1.3 core(s) before and during the benchmarks",)
    assert d.bound == pytest.approx(0.5)  # 0.5 x min(1, 1.3 / 1)
    assert d.line() == ("calibration disturbed: load 4.7 on 2 cores; figures may be off by up to 50% "
                        "(other work used 1.3 core(s) before and during the benchmarks)")
    d = assess(_series(), cpus=8, threads=1, clock="cpu", load_before=0.3, load_after=1.5,
               competing_before=0.0, competing_during=1.4)
    assert d.reasons == ("other work used 1.4 core(s) during the benchmarks",)
    assert d.bound == pytest.approx(0.1)  # 0.5 x 1.4 / 7 other cores


def test_spread_unsettled_wall_clock_and_load_only():
    d = assess(_series(spread=0.08), cpus=2, threads=1, clock="cpu", load_before=0.0, load_after=1.0,
               competing_before=0.0, competing_during=0.0)
    assert d.reasons == ("repeats spread 8%",) and d.bound == pytest.approx(0.08)
    d = assess(_series(2) + _series(2, settled=False, halfwidth=0.2), cpus=2, threads=1, clock="cpu",
               load_before=0.0, load_after=1.0, competing_before=0.0, competing_during=0.0)
    assert d.reasons == ("2 of 4 benchmarks did not settle to 3% within their time cap",)
    assert d.bound == pytest.approx(0.02)  # unsettled half-widths are not a bound
    d = assess(_series(ratio=1.3), cpus=2, threads=1, clock="wall", load_before=0.0, load_after=1.0,
               competing_before=0.0, competing_during=0.0)
    assert d.bound == pytest.approx(0.3) and not d.disturbed
    # no /proc/stat: the load average beyond this run's thread decides
    d = assess(_series(), cpus=2, threads=1, clock="cpu", load_before=1.2, load_after=1.4,
               competing_before=None, competing_during=None)
    assert d.reasons == ("load average 1.2 beyond this run's 1 thread(s)",)


# --------------------------------------------------------------------------- --strict and the warning
def test_strict_refuses_a_busy_machine_before_benchmarking(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gc, "probe_machine", lambda seconds=0.5: (1.6, 3.2))
    monkeypatch.setattr(gc, "_Timer", None)  # a benchmark would fail loudly: none may run
    with pytest.raises(CalibrationDisturbed, match=r"calibration disturbed: load 3\.2 on \d+ cores") as e:
        calibrate("cpu", strict=True)
    assert e.value.disturbance.competing_before == 1.6
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "cpu", "--strict", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: calibration disturbed: load 3.2 on ")
    assert "figures may be off by up to" in err[0]
    assert "(--strict)" in err[0] and "without --strict" in err[0] and "strict=True" not in err[0]
    assert not out.exists()


def _disturbed():
    return assess(_series(), cpus=2, threads=1, clock="cpu", load_before=4.7, load_after=5.0,
                  competing_before=1.2, competing_during=1.5)


def test_a_disturbed_calibration_says_so_on_stderr_and_in_the_file(monkeypatch, capsys, tmp_path):
    cal = _cal(disturbance=_disturbed(), method="micro-benchmarks (CPUExecutionProvider, cpu clock)")
    monkeypatch.setattr(gc, "calibrate", lambda *a, **k: cal)
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "cpu", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    want = ("calibration disturbed: load 5.0 on 2 cores; figures may be off by up to 50% (other work used "
            "1.5 core(s) before and during the benchmarks)")
    assert captured.err.strip() == want
    text = out.read_text()
    assert f"# {want.upper()}" in text and want in text.split("description = ")[1]
    assert read_device_file(out)[0]["cpu"].conv_flops == pytest.approx(400e9)  # still a valid file


def test_an_undisturbed_calibration_prints_no_warning(monkeypatch, capsys, tmp_path):
    quiet = assess(_series(), cpus=2, threads=1, clock="cpu", load_before=0.1, load_after=1.0,
                   competing_before=0.0, competing_during=0.0)
    monkeypatch.setattr(gc, "calibrate", lambda *a, **k: _cal(disturbance=quiet))
    assert main(["calibrate", "cpu", "-o", str(tmp_path / "c.toml")]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "calibration undisturbed" in captured.out


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "cpu", "--budget", "0.5", "--cap", "0.1"], "--cap must be at least --budget"),
    (["calibrate", "cpu", "--tolerance", "2"], "--tolerance must be a fraction"),
    (["calibrate", "cpu", "--budget", "nan"], "--budget must be positive"),
])
def test_new_cli_usage_errors(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


@pytest.mark.slow
def test_a_competing_process_is_detected_end_to_end():
    """A real, short calibration while a process of ours burns a core: flagged as disturbed."""
    from benchmarks.bench_calibrate import Competitors

    with Competitors(1):
        cal = calibrate("cpu", budget=0.02, cap=0.05)
    d = cal.disturbance
    assert d.disturbed and d.competing_during is not None and d.competing_during >= 0.25
    assert d.bound > 0 and "calibration disturbed: load" in d.line()


# --------------------------------------------------------------------------- honest fits
def test_fit_names_the_rates_it_copied_on_a_model_without_conv():
    from graphs.transformer import bert

    g = parse_model(bert(1, hidden=128, heads=2, seq_len=64, vocab=500))
    cpu = preset("cpu")
    times = _synthetic_times(g, 300e9, 120e9, 25e9, 1e-6, cpu.peak() / cpu.bandwidth)
    cal = fit_profile(g, "cpu", times)
    assert cal.matmul_flops == pytest.approx(120e9, rel=1e-6) and cal.source("matmul") == "fitted"
    assert cal.source("conv") == "copied from MatMul/Gemm: no compute-bound Conv operator in the model"
    assert cal.conv_flops == cal.matmul_flops
    assert cal.source("other").startswith("copied from MatMul/Gemm: no compute-bound other")
    assert cal.copied() == ["conv", "other", "fp16"]
    text = device_file_text(cal)
    assert "# Not fitted: conv, other, fp16" in text
    conv_line = next(line for line in text.splitlines() if line.startswith("conv_tflops"))
    assert "NOT FITTED: copied from MatMul/Gemm: no compute-bound Conv operator" in conv_line
    assert "matmul_tflops" in text and "# fitted fp32 FLOP/s of MatMul" in text


def test_micro_benchmark_figures_are_measured():
    cal = _cal(fp16_flops=900e9, sources={"fp16": "measured"})
    assert cal.copied() == [] and cal.source("conv") == "measured"
    assert "NOT" not in device_file_text(cal)


def test_cli_from_profile_prints_which_rates_were_copied(monkeypatch, tmp_path, capsys):
    import graphs.costs
    from tests.onnx_models import save, small_cnn

    model = save(small_cnn(batch=64), tmp_path / "cnn.onnx")
    from graphs.onnx_loader import load_onnx

    g = load_onnx(model)
    cpu = preset("cpu")
    times = _synthetic_times(g, 300e9, 120e9, 25e9, 1e-6, cpu.peak() / cpu.bandwidth)
    monkeypatch.setattr(graphs.costs, "profile_ops", lambda *a, **k: times)
    out = tmp_path / "fit.toml"
    assert main(["calibrate", "cpu", "--from-profile", model, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {line.split("  ")[1].strip(): line for line in text.splitlines() if line.startswith("  ")}
    assert "300.0 GFLOP/s (fitted)" in rows["Conv, fp32"]
    # small_cnn's one Gemm is memory-bound at batch 64: nothing to fit a MatMul rate on
    want = "300.0 GFLOP/s (NOT FITTED: copied from Conv: no compute-bound MatMul/Gemm"
    assert want in rows["MatMul/Gemm, fp32"]
    assert "NOT FITTED" in rows["other arithmetic, fp32"]
    assert "copied, not fitted: matmul, other, fp16" in text
    assert "NOT FITTED: copied from Conv" in out.read_text()


# --------------------------------------------------------------------------- new benchmark models
def test_new_benchmark_models_are_valid_and_run():
    import onnx
    import onnxruntime  # noqa: F401

    rng = np.random.default_rng(0)
    timer = _Timer("CPUExecutionProvider", 1, budget=0.0, cap=0.0, min_runs=1)
    for op_type, attrs, shape in gc.OP_BENCHMARKS:
        if "strides" in attrs:
            k = attrs["kernel_shape"][0]
            out = tuple(shape[:2]) + tuple((s - k) // 2 + 1 for s in shape[2:])
            m = _fan(_op_node(op_type, attrs), shape, out, 2)
        else:
            m = _chain(_op_unit(op_type, attrs, shape), shape, 2)
        onnx.checker.check_model(m, full_check=True)
        (t,) = timer.run_times([m], rng.standard_normal(shape).astype(np.float32))
        assert t > 0, op_type
    for c, side, k, groups in gc.CONV_SHAPES[-1:]:
        m = _chain(_conv_unit(c, k, rng, groups), (1, c, side, side), 2)
        onnx.checker.check_model(m, full_check=True)
        assert {a.name: a for a in m.graph.node[0].attribute}["group"].i == groups
    for c, side, stride in gc.DEPTHWISE_SHAPES:
        m = (_chain(_conv_unit(c, 3, rng, c), (1, c, side, side), 2) if stride == 1 else
             gc._depthwise_fan(c, side, stride, 2, rng))
        onnx.checker.check_model(m, full_check=True)
        outs = timer.run_times([m], rng.standard_normal((1, c, side, side)).astype(np.float32))
        assert outs[0] > 0
        out = (side - 1) // stride + 1
        assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1, c, out, out]


def test_benchmark_flops_agree_with_the_cost_model():
    """The FLOPs an own-rate benchmark is credited with are what graphs.costs charges the same node."""
    from graphs.costs import op_flops

    for op_type, attrs, shape in gc.OP_BENCHMARKS:
        if "strides" in attrs:
            k = attrs["kernel_shape"][0]
            out = tuple(shape[:2]) + tuple((s - k) // 2 + 1 for s in shape[2:])
            m = _fan(_op_node(op_type, attrs), shape, out, 1)
        else:
            out = shape
            m = _chain(_op_unit(op_type, attrs, shape), shape, 1)
        (op,) = parse_model(m).ops
        want = gc._op_benchmark_flops(op_type, attrs, int(np.prod(out)))
        assert op_flops(op) == (pytest.approx(want), True), op_type


def test_depthwise_benchmark_flops_agree_with_the_cost_model():
    """The FLOPs a depthwise benchmark is credited with (19 per output: 2 x 9 and the bias) are what
    graphs.costs charges its node, and graphs.costs.depthwise recognises it (strided or not)."""
    from graphs.costs import depthwise, op_flops

    rng = np.random.default_rng(0)
    for c, side, stride in gc.DEPTHWISE_SHAPES:
        m = (_chain(_conv_unit(c, 3, rng, c), (1, c, side, side), 1) if stride == 1 else
             gc._depthwise_fan(c, side, stride, 1, rng))
        (op,) = parse_model(m).ops
        out = (side - 1) // stride + 1
        assert op_flops(op) == (pytest.approx(19.0 * c * out * out), True)
        assert depthwise(op) == (c, stride > 1)
    dense = parse_model(_chain(_conv_unit(8, 3, rng, 1), (1, 8, 6, 6), 1)).ops[0]
    grouped = parse_model(_chain(_conv_unit(8, 3, rng, 4), (1, 8, 6, 6), 1)).ops[0]  # 2 channels per group
    assert depthwise(dense) is None and depthwise(grouped) is None


def test_depthwise_fit_recovers_a_known_rate_and_channel_time():
    r, c = 5e9, 0.4e-6
    pts = [(19.0 * ch * ((s - 1) // st + 1) ** 2, ch, 0.0) for ch, s, st in gc.DEPTHWISE_SHAPES]
    pts = [(f, ch, f / r + ch * c) for f, ch, _ in pts]
    got = gc.fit_depthwise(pts)
    assert got == (pytest.approx(r, rel=1e-9), pytest.approx(c, rel=1e-9))
    # one point: no channel time can be told apart, the plain rate
    assert gc.fit_depthwise(pts[:1]) == (pytest.approx(pts[0][0] / pts[0][2]), 0.0)
    # no per-channel time in the data: none fitted
    assert gc.fit_depthwise([(f, ch, f / r) for f, ch, _ in pts]) == (pytest.approx(r), pytest.approx(0.0))
    with pytest.raises(InputError, match="at least one"):
        gc.fit_depthwise([])


def test_depthwise_conv_is_costed_by_its_own_figures_by_hand(tmp_path):
    """8 channels, 6x6, 3x3 depthwise: stride 1 -> 6x6 out, 19 x 288 = 5472 FLOPs, 5472 / 2e9 + 8 x 1 us
    = 10.736 us; stride 2 -> 3x3 out, 19 x 72 = 1368 FLOPs, 1368 / 1e9 + 8 x 2 us = 17.368 us. Dense and
    grouped convolutions keep the Conv rate; a file without depthwise figures keeps the Conv curve."""
    from graphs.costs import roofline_time

    rng = np.random.default_rng(0)
    flat = dict(launch=0.0, bandwidth_curve=((1.0, 1e18), (2.0, 1e18)))
    dw = ((2e9, 1e-6), (1e9, 2e-6))
    spec = _cal(depthwise=dw, **flat).spec()
    plain = _cal(**flat).spec()
    s1 = parse_model(_chain(_conv_unit(8, 3, rng, 8), (1, 8, 6, 6), 1)).ops[0]
    s2 = parse_model(gc._depthwise_fan(8, 6, 2, 1, rng)).ops[0]
    assert roofline_time(s1, spec) == pytest.approx(10.736e-6)
    assert roofline_time(s2, spec) == pytest.approx(17.368e-6)
    assert roofline_time(s1, plain) == pytest.approx(5472 / 400e9)  # the Conv rate, no curve in _cal
    for groups in (1, 4):
        op = parse_model(_chain(_conv_unit(8, 3, rng, groups), (1, 8, 6, 6), 1)).ops[0]
        assert roofline_time(op, spec) == roofline_time(op, plain)
    # the written file reads back to the same figures
    back = read_device_file(write_device_file(_cal(depthwise=dw), tmp_path / "d.toml"))[0]["cpu"]
    assert back.depthwise == ((pytest.approx(2e9), pytest.approx(1e-6)),
                              (pytest.approx(1e9), pytest.approx(2e-6)))
    assert preset("cpu").depthwise is None and _cal().spec().depthwise is None


@pytest.mark.parametrize("body, message", [
    ("depthwise_gflops = [1, 2]", "together"),
    ("depthwise_channel_us = [1, 2]", "together"),
    ("depthwise_gflops = [1]\ndepthwise_channel_us = [1, 2]", "depthwise_gflops must be a list of 2 numbers"),
    ("depthwise_gflops = [1, true]\ndepthwise_channel_us = [1, 2]",
     r"depthwise_gflops\[1\] must be a number"),
    ("depthwise_gflops = [0, 2]\ndepthwise_channel_us = [1, 2]",
     r"depthwise_gflops\[0\] must be a number > 0, got 0"),
    ("depthwise_gflops = [1, 2]\ndepthwise_channel_us = [-1, 2]",
     r"depthwise_channel_us\[0\] must be a number >= 0, got -1"),
])
def test_bad_depthwise_figures_are_explained(tmp_path, body, message):
    f = tmp_path / "bad.toml"
    f.write_text(f'[devices.cpu]\nbase = "cpu"\n{body}\n')
    with pytest.raises(InputError, match=message):
        read_device_file(f)


def test_own_rate_operators_round_trip_and_bad_values_are_explained(tmp_path):
    cal = _cal(op_flops=(("LRN", 0.5e9), ("MaxPool", 4e9)))
    path = write_device_file(cal, tmp_path / "c.toml")
    s = read_device_file(path)[0]["cpu"]
    assert dict(s.op_flops) == {"LRN": pytest.approx(0.5e9), "MaxPool": pytest.approx(4e9)}
    assert s.flop_rate("LRN") == pytest.approx(0.5e9) and s.flop_rate("Relu") == s.peak()
    assert s.flop_rate("LRN", half=True) == s.peak(True)
    for body, message in (("op_gflops = 3", "op_gflops must be a table"),
                          ("op_gflops = { LRN = -1 }", "op_gflops.LRN must be a number > 0, got -1")):
        f = tmp_path / "bad.toml"
        f.write_text(f'[devices.cpu]\nbase = "cpu"\n{body}\n')
        with pytest.raises(InputError, match=message):
            read_device_file(f)


def test_a_session_on_another_provider_than_asked_is_an_error(monkeypatch):
    import onnxruntime as ort

    class Fallback:
        def __init__(self, *a, **k):
            pass

        def get_providers(self):
            return ["CPUExecutionProvider"]

    monkeypatch.setattr(ort, "InferenceSession", Fallback)
    m = _chain(gc._add_unit((1,)), (1,), 2)
    with pytest.raises(InputError, match="did not start CUDAExecutionProvider.*not measuring a fallback"):
        gc._session(m, "CUDAExecutionProvider", 1)


def test_gpu_script_refuses_without_the_cuda_provider(capsys, tmp_path):
    from benchmarks.gpu_calibrate import main as gpu_main

    assert gpu_main(["h100", "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot calibrate 'h100'")
    assert "Not falling back to the CPU" in err[0]
    assert not (tmp_path / "out").exists()


def test_calibration_dataclass_defaults_keep_old_files_readable():
    cal = Calibration(kind="cpu", base="cpu", method="by hand", threads=1, conv_flops=1e11, matmul_flops=1e11,
                      fp16_flops=None, bandwidth=1e10, launch=1e-6)
    assert cal.disturbance is None and cal.op_flops == () and cal.copied() == ["fp16"]
