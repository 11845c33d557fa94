"""Compute utilisation (MFU): achieved over peak FLOP/s, per device and in total."""

from __future__ import annotations

import json

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
    assert main(["place", cnn_path, "--devices", "t4:1,cpu:1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "compute utilisation (MFU" in text and "util" in text
    data = json.loads(out.read_text())
    cu = data["compute_utilisation"]
    assert 0 < cu["total"] <= 1 and {d["name"] for d in cu["devices"]} == {"t4:0", "cpu:0"}
    assert main(["show", str(out), "--no-draw"]) == 0
    assert "compute utilisation (MFU" in capsys.readouterr().out
