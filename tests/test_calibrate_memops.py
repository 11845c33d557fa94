"""Memory-bound operators (issue #27): a Transpose by its bytes and the contiguous runs it copies, a
metadata-only operator by its measured time, the benchmarks that measure them, the device-file keys, and
files without those keys costing exactly as before."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphs.calibrate as gc
from graphs.calibrate import _chain, fit_transpose, write_device_file
from graphs.costs import VIEW_TYPES, op_bytes, roofline_time, transpose_runs
from graphs.devices import preset, read_device_file
from graphs.errors import InputError
from graphs.onnx_loader import load_onnx, parse_model
from tests.onnx_models import zoo
from tests.test_calibrate import _cal

_FLAT = dict(launch=1e-6, bandwidth_curve=((1.0, 100e9), (2.0, 100e9)))  # 100 GB/s at every size


def _transpose(shape, perm):
    return parse_model(_chain(gc._transpose_unit(perm), shape, 1)).ops[0]


@pytest.mark.parametrize("shape, perm, runs", [
    ((1, 4, 136, 7, 7), (0, 2, 1, 3, 4), 4 * 136),  # channel shuffle: runs of 7 x 7
    ((1, 128, 12, 64), (0, 2, 1, 3), 128 * 12),  # head split: runs of 64
    ((1, 12, 128, 64), (0, 1, 3, 2), 0),  # the last axis moves: element-wise
    ((1, 64, 56, 56), (0, 2, 3, 1), 0),  # NCHW -> NHWC
    ((1, 8, 1, 5), (0, 2, 1, 3), 1),  # only a size-1 axis moves: one block copy
    ((3, 1, 4, 6), (1, 0, 3, 2), 0),
    ((2, 3, 5), (1, 0, 2), 6),
])
def test_transpose_runs_by_hand(shape, perm, runs):
    assert transpose_runs(_transpose(shape, perm)) == runs


def test_transpose_runs_of_other_operators_and_the_default_permutation():
    reshape = parse_model(_chain(gc._reshape_unit((1, 8, 4, 4), (1, 2, 4, 4, 4)), (1, 8, 4, 4), 1)).ops[0]
    assert transpose_runs(reshape) is None
    op = _transpose((2, 3, 4), (2, 1, 0))
    op.attrs.pop("perm")  # no perm: the axes reversed, so the last axis moves
    assert transpose_runs(op) == 0


def test_a_transpose_is_costed_by_its_bytes_and_runs_by_hand():
    """(1, 4, 34, 14, 14): 26 656 floats, 213 248 bytes in and out, 136 runs of 196. At 20 GB/s (below
    the curve's 100), 10 ns per run and 1 us launch: 1 + 10.6624 + 1.36 = 13.0224 us. Twice the channels
    (426 496 bytes, 272 runs): 1 + 21.3248 + 2.72 = 25.0448 us. The same bytes in runs of 49 (544 runs):
    1 + 10.6624 + 5.44 = 17.1024 us. Without the figures: 1 + 2.13248 = 3.13248 us (bytes at the curve)."""
    spec = _cal(transpose=(20e9, 10e-9), **_FLAT).spec()
    plain = _cal(**_FLAT).spec()
    shuffle = (0, 2, 1, 3, 4)
    small, large = _transpose((1, 4, 34, 14, 14), shuffle), _transpose((1, 4, 68, 14, 14), shuffle)
    short = _transpose((1, 4, 136, 7, 7), (0, 2, 1, 3, 4))
    assert op_bytes(small) == 213248 and op_bytes(short) == 213248
    assert roofline_time(small, spec) == pytest.approx(13.0224e-6)
    assert roofline_time(large, spec) == pytest.approx(25.0448e-6)
    assert roofline_time(short, spec) == pytest.approx(17.1024e-6)
    assert roofline_time(small, plain) == pytest.approx(3.13248e-6)
    # an element-wise transpose (the last axis moves) pays no runs: 1 us + 2 x 4 x 98 304 bytes / 20 GB/s
    elementwise = _transpose((1, 12, 128, 64), (0, 1, 3, 2))
    assert roofline_time(elementwise, spec) == pytest.approx(1e-6 + 786432 / 20e9)
    # beyond the caches the memory's bandwidth limits it: 5 GB/s from 400 kB, 1 + 426 496 / 5e9 s + 2.72
    slow = _cal(transpose=(20e9, 10e-9), launch=1e-6, bandwidth_curve=((1e5, 100e9), (4e5, 5e9))).spec()
    assert roofline_time(large, slow) == pytest.approx(1e-6 + 426496 / 5e9 + 2.72e-6)
    assert roofline_time(small, slow) == pytest.approx(roofline_time(small, spec))  # 48 GB/s there: 20


def test_a_reshape_costs_its_measured_constant_at_every_size():
    spec = _cal(view_time=0.7e-6, **_FLAT).spec()
    plain = _cal(**_FLAT).spec()
    for shape, other in (((1, 1024, 1, 1), (1, 1024)), ((1, 112, 56, 56), (1, 4, 28, 56, 56))):
        op = parse_model(_chain(gc._reshape_unit(shape, other), shape, 1)).ops[0]
        assert op.op_type == "Reshape"
        assert roofline_time(op, spec) == pytest.approx(0.7e-6)  # not free, and not its bytes
        assert roofline_time(op, plain) == pytest.approx(1e-6)  # the launch, as before
    assert VIEW_TYPES == {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}


@pytest.mark.parametrize("name", ["shufflenet", "inception_v2"])
def test_a_file_without_the_new_keys_costs_every_operator_as_before(tmp_path, name):
    """The old rules by hand for the operators the figures touch (a Transpose: launch + bytes at the
    curve; a view: the launch), and every other operator exactly the cost with the figures."""
    g = load_onnx(zoo(name))
    cal = _cal(view_time=0.7e-6, transpose=(20e9, 10e-9))
    new = read_device_file(write_device_file(cal, tmp_path / "new.toml"))[0]["cpu"]
    text = (tmp_path / "new.toml").read_text()
    assert "view_us" in text and "transpose_gbs" in text and "transpose_block_us" in text
    new_keys = ("view_us", "transpose_gbs", "transpose_block_us")
    old_text = "\n".join(line for line in text.splitlines() if line.split("=")[0].strip() not in new_keys)
    (tmp_path / "old.toml").write_text(old_text + "\n")
    old = read_device_file(tmp_path / "old.toml")[0]["cpu"]
    assert old.view_time is None and old.transpose is None
    touched = 0
    for op in g.ops:
        if op.op_type == "Transpose":
            b = op_bytes(op)
            assert roofline_time(op, old) == pytest.approx(b / old.bandwidth_at(b) + old.launch, rel=1e-12)
            touched += 1
        elif op.op_type in VIEW_TYPES:
            assert roofline_time(op, old) == pytest.approx(old.launch, rel=1e-12)
            touched += 1
        else:
            assert roofline_time(op, old) == roofline_time(op, new)
    assert touched > 0
    assert preset("cpu").view_time is None and preset("cpu").transpose is None


def test_the_new_figures_round_trip_and_bad_values_are_explained(tmp_path):
    cal = _cal(view_time=0.69e-6, transpose=(51.2e9, 12.04e-9))
    s = read_device_file(write_device_file(cal, tmp_path / "c.toml"))[0]["cpu"]
    assert s.view_time == pytest.approx(0.69e-6)
    assert s.transpose == (pytest.approx(51.2e9), pytest.approx(12.04e-9))
    for body, message in (("view_us = -1", "view_us must be a number >= 0, got -1"),
                          ("transpose_gbs = 50", "together"),
                          ("transpose_block_us = 0.01", "together"),
                          ("transpose_gbs = 0\ntranspose_block_us = 0.01",
                           "transpose_gbs must be a number > 0, got 0"),
                          ("transpose_gbs = 50\ntranspose_block_us = -1",
                           "transpose_block_us must be a number >= 0, got -1"),
                          ("transpose_gbs = true\ntranspose_block_us = 0.01",
                           "transpose_gbs must be a number > 0, got true")):
        f = tmp_path / "bad.toml"
        f.write_text(f'[devices.cpu]\nbase = "cpu"\n{body}\n')
        with pytest.raises(InputError, match=message):
            read_device_file(f)


def test_fit_transpose_recovers_a_known_rate_and_run_time():
    r, c = 50e9, 15e-9
    sizes = ((2e5, 32), (8.5e5, 2176), (2e5, 544), (8e5, 0))
    pts = [(b, runs, b / r + runs * c) for b, runs in sizes]
    assert fit_transpose(pts) == (pytest.approx(r, rel=1e-9), pytest.approx(c, rel=1e-9))
    assert fit_transpose([(b, 0, b / r) for b, _, _ in pts]) == (pytest.approx(r), 0.0)
    assert fit_transpose(pts[:1]) == (pytest.approx(pts[0][0] / pts[0][2]), 0.0)
    with pytest.raises(InputError, match="at least one"):
        fit_transpose([])


def test_the_benchmark_links_keep_the_data_and_count_as_the_cost_model_does():
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    links = [(gc._reshape_unit(*gc.VIEW_SHAPE), gc.VIEW_SHAPE[0])] + [
        (gc._transpose_unit(perm), shape) for shape, perm in gc.TRANSPOSE_SHAPES]
    for unit, shape in links:
        m = _chain(unit, shape, 3)
        onnx.checker.check_model(m, full_check=True)
        x = rng.standard_normal(shape).astype(np.float32)
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, x)  # a permutation and its inverse, a reshape and back
    for shape, perm in gc.TRANSPOSE_SHAPES:
        nbytes, runs = gc._transpose_figures(shape, perm)
        assert nbytes == 8 * math.prod(shape)
        kept = 1  # trailing axes the permutation leaves in place, by hand from the perm
        for i in range(len(perm) - 1, -1, -1):
            if perm[i] != i:
                break
            kept *= shape[i]
        assert runs == (0 if kept == 1 else math.prod(shape) // kept)
    assert {r for s, p in gc.TRANSPOSE_SHAPES for r in [gc._transpose_figures(s, p)[1]]} >= {0, 32, 544, 2176}


def test_calibration_without_the_new_figures_keeps_the_base_kind():
    assert _cal().spec().view_time is None and _cal().spec().transpose is None
    text = gc.device_file_text(_cal())
    assert "view_us" not in text and "transpose_gbs" not in text
