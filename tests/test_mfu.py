"""Compute utilisation (MFU): achieved over peak FLOP/s, per device and in total."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from graphs.mfu import compute_utilisation, node_flops
from graphs.onnx_workload import onnx_workload
from placement.api import place
from placement.cli import main
from tests.onnx_models import save, small_cnn


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    return save(small_cnn(), tmp_path_factory.mktemp("m") / "cnn.onnx")


def test_mfu_by_hand_and_never_above_one_with_roofline_costs(cnn_path):
    w = onnx_workload(cnn_path, "t4:2,cpu:2", batch_size=8)
    g, cl = w.graph, w.cluster
    p = place(g, cl)
    m = compute_utilisation(g, cl, p.assignment)
    flops = np.asarray(g.meta["flops"])
    peaks = g.meta["peak_flops"]
    period_s = p.max_load * 1e-3
    for d in m.devices:
        on = p.assignment == d.device
        assert d.flops == pytest.approx(flops[on].sum())
        assert d.mfu == pytest.approx(flops[on].sum() / peaks[d.kind][0] / period_s)
        # roofline time >= FLOPs / peak (efficiency 1), and the period >= every device's load
        assert 0 <= d.mfu <= 1 + 1e-12
    total_peak = sum(peaks[k.name][0] * k.count for k in cl.kinds)
    assert m.total == pytest.approx(flops.sum() / period_s / total_peak)
    assert m.flops == pytest.approx(flops.sum())


def test_measured_times_change_the_mfu(cnn_path, tmp_path):
    w = onnx_workload(cnn_path, "t4:1", batch_size=4)
    a = np.zeros(w.graph.num_nodes, np.int64)
    base = compute_utilisation(w.graph, w.cluster, a)
    # a cost table giving every operator twice its roofline time halves the achieved FLOP/s
    table = {"unit": "ms", "compute": {n: {"t4": 2 * float(w.graph.compute[0, i])}
                                       for i, n in enumerate(w.graph.names)}}
    (tmp_path / "t.json").write_text(json.dumps(table))
    w2 = onnx_workload(cnn_path, "t4:1", costs=str(tmp_path / "t.json"), batch_size=4)
    slow = compute_utilisation(w2.graph, w2.cluster, a)
    assert slow.total == pytest.approx(base.total / 2, rel=1e-9)
    assert slow.devices[0].mfu == pytest.approx(base.devices[0].mfu / 2, rel=1e-9)


def test_training_counts_backward_flops(cnn_path):
    w = onnx_workload(cnn_path, "t4:1", batch_size=2, training=True)
    f = node_flops(w.graph)
    nf = len(w.graph.meta["flops"])
    assert f.sum() == pytest.approx(3 * sum(w.graph.meta["flops"]))
    assert f[:nf].sum() == pytest.approx(sum(w.graph.meta["flops"]))


def test_reference_workloads_have_no_mfu(tmp_path):
    assert main(["example", str(tmp_path / "w.json"), "--layers", "2"]) == 0
    from placement.load import load_workload

    w = load_workload(str(tmp_path / "w.json"))
    assert compute_utilisation(w.graph, w.cluster, np.zeros(w.graph.num_nodes, np.int64)) is None


def test_place_and_show_print_and_write_mfu(cnn_path, tmp_path, capsys):
    out = tmp_path / "r.json"
    # a one-device-per-stage plan: show's simulator prints its MFU too (stage plans: the test below)
    assert main(["place", cnn_path, "--devices", "t4:1,cpu:1", "--max-replicas", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "compute utilisation (MFU" in text and "util" in text
    data = json.loads(out.read_text())
    cu = data["compute_utilisation"]
    assert 0 < cu["total"] <= 1 and {d["name"] for d in cu["devices"]} == {"t4:0", "cpu:0"}
    assert main(["show", str(out), "--no-draw"]) == 0
    assert "compute utilisation (MFU" in capsys.readouterr().out


def test_a_stage_plan_has_the_mfu_of_its_replicas(cnn_path, capsys):
    """Four replicas of the whole model (one stage, ``d = 4``, no cut to pay) each run a quarter of the
    samples: every device's MFU is that of the model alone on one device, a second method."""
    assert main(["place", cnn_path, "--devices", "a100:4", "--batch-size", "8", "--json"]) == 0
    stage = json.loads(capsys.readouterr().out)
    assert [s["dataParallelDegree"] for s in stage["stages"]] == [4]
    assert main(["place", cnn_path, "--devices", "a100:1", "--batch-size", "8", "--max-replicas", "1",
                 "--json"]) == 0
    one = json.loads(capsys.readouterr().out)["compute_utilisation"]
    cu = stage["compute_utilisation"]
    assert [d["name"] for d in cu["devices"]] == ["a100:0", "a100:1", "a100:2", "a100:3"]
    for d in cu["devices"]:
        assert d["mfu"] == pytest.approx(one["devices"][0]["mfu"], rel=1e-9)
    assert cu["total"] == pytest.approx(one["total"], rel=1e-9)
    assert main(["place", cnn_path, "--devices", "a100:4", "--batch-size", "8"]) == 0
    assert re.search(r"compute utilisation \(MFU.*a100:0-3 [\d.]+%", capsys.readouterr().out)


# --------------------------------------------------------------------------- calibrated kinds (issue #27)
def _calibrated_file(tmp_path, **kw) -> str:
    from graphs.calibrate import write_device_file
    from tests.test_calibrate import _cal

    return write_device_file(_cal(**kw), tmp_path / "cpu-calibrated.toml")


def test_calibrated_kind_mfu_uses_each_operator_class_rate_by_hand(tmp_path):
    """Conv at 400, Gemm at 300, everything else at 50 GFLOP/s (the file's rates): MFU by hand from the
    ONNX operators, independent of the front end's annotations; the catalog-peak formula would read
    above 100 % here (the bug of issue #27)."""
    from graphs.costs import op_flops, roofline_costs
    from graphs.devices import parse_devices
    from graphs.onnx_loader import load_onnx
    from tests.onnx_models import zoo

    path = zoo("resnet50")
    dev = _calibrated_file(tmp_path, launch=0.0)
    w = onnx_workload(path, "cpu:1", device_files=[dev])
    a = np.zeros(w.graph.num_nodes, np.int64)
    m = compute_utilisation(w.graph, w.cluster, a)
    g = load_onnx(path)
    rate = {"Conv": 400e9, "Gemm": 300e9, "MatMul": 300e9}
    peak_s = sum(op_flops(op)[0] / rate.get(op.op_type, 50e9) for op in g.ops)
    period_s = float(roofline_costs(g, parse_devices("cpu:1", [dev])).compute[0].sum()) * 1e-3
    assert m.devices[0].mfu == pytest.approx(peak_s / period_s, rel=1e-9)
    assert m.total == pytest.approx(peak_s / period_s, rel=1e-9)
    assert 0.3 < m.total <= 1.0 and m.capped == 0
    flops = sum(op_flops(op)[0] for op in g.ops)
    assert flops / 50e9 / period_s > 1.0  # at the fp32 ("other") rate alone it would exceed 100 %


def test_mfu_never_above_one_on_every_zoo_model_and_kind(tmp_path):
    """Every zoo model the onnx package ships, on every preset kind and a calibrated CPU (with own-rate
    operators), alone and split across two kinds, forward and training: MFU of every device and in
    total within [0, 1]."""
    import glob
    import os

    from graphs.devices import PRESETS
    from tests.onnx_models import zoo_dir

    dev = _calibrated_file(tmp_path, op_flops=(("LRN", 0.4e9), ("MaxPool", 5e9)), fp16_flops=900e9)
    kinds = ",".join(f"{k}:1" for k in PRESETS)
    paths = sorted(glob.glob(os.path.join(zoo_dir(), "light_*.onnx")))
    assert len(paths) >= 9
    for path in paths:
        for training in (False, True):
            w = onnx_workload(path, kinds, device_files=[dev], training=training)
            g, cl = w.graph, w.cluster
            n = cl.num_devices
            assignments = [np.full(g.num_nodes, d, np.int64) for d in range(n)]
            order = np.argsort(np.arange(g.num_nodes))
            half = np.where(order < g.num_nodes // 2, 0, n - 1)  # first kind and the (calibrated) cpu
            assignments.append(half.astype(np.int64))
            for a in assignments:
                m = compute_utilisation(g, cl, a)
                for d in m.devices:
                    assert 0 <= d.mfu <= 1 + 1e-9, (os.path.basename(path), training, d.name, d.mfu)
                    assert d.achieved <= d.peak_flops * (1 + 1e-9)
                assert 0 <= m.total <= 1 + 1e-9, (os.path.basename(path), training, m.total)


def test_costs_faster_than_the_peak_are_capped_and_counted(cnn_path, tmp_path):
    """A cost table claiming every operator takes 1 ns: faster than any peak, so each FLOP-bearing
    operator's peak time is its cost and the device's MFU is its busy share, 1 on one device."""
    w = onnx_workload(cnn_path, "cpu:1", batch_size=64)
    table = {"unit": "ms", "compute": {n: {"cpu": 1e-6} for n in w.graph.names}}
    (tmp_path / "t.json").write_text(json.dumps(table))
    w2 = onnx_workload(cnn_path, "cpu:1", costs=str(tmp_path / "t.json"), batch_size=64)
    m = compute_utilisation(w2.graph, w2.cluster, np.zeros(w2.graph.num_nodes, np.int64))
    with_flops = int((np.asarray(w2.graph.meta["flops"]) > 0).sum())
    assert m.capped == with_flops > 0
    assert m.devices[0].mfu == pytest.approx(with_flops / w2.graph.num_nodes)  # busy share of FLOP nodes
    assert m.as_dict()["operators_faster_than_peak"] == with_flops


def test_peak_rates_of_presets_and_calibrated_kinds(tmp_path):
    from graphs.devices import preset, read_device_file
    from graphs.mfu import peak_rates

    t4 = preset("t4")
    assert peak_rates(t4) == (t4.fp32, t4.fp16, t4.fp32, t4.fp32)
    spec = read_device_file(_calibrated_file(tmp_path, op_flops=(("LRN", 80e9),)))[0]["cpu"]
    assert peak_rates(spec) == (pytest.approx(80e9), spec.fp16, pytest.approx(400e9), pytest.approx(300e9))
