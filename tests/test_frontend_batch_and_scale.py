"""The ONNX front end on a model whose input shape is fixed in the file, and on very large clusters.

A fixed leading dimension may be a batch or not (a sequence, a channel): a run of the model counts as
one sample and the output says so, a batch size equal to the leading dimension makes it the batch, any
other batch size re-batches the model as the serving sweep does (:mod:`graphs.onnx_batch`: the leading
dimension is taken as the batch, with a warning naming the input and its shape), and a model whose
outputs do not follow that dimension is refused. Naming the devices of a cluster is linear
in their number (it was quadratic: ``place --devices a100:100000`` took minutes), checked by counting
the Python lines run, not by a clock.
"""

from __future__ import annotations

import re
import sys

import pytest

from graphs.errors import InputError
from graphs.evaluate import evaluate
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.onnx_loader import load_onnx
from placement.cli import main
from tests.onnx_models import save


def mlp(batch, rows: int = 4, width: int = 256):
    """x [batch, width] -> ``rows`` x (MatMul, Relu) -> y [batch, width]; ``batch`` an int or a name."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    nodes, inits, cur = [], [], "x"
    for i in range(rows):
        inits.append(nh.from_array(np.full((width, width), 0.01, np.float32), f"w{i}"))
        out = "y" if i == rows - 1 else f"h{i}"
        nodes += [h.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  h.make_node("Relu", [f"m{i}"], [out], name=f"relu{i}")]
        cur = out
    graph = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, [batch, width])],
                         [h.make_tensor_value_info("y", T.FLOAT, [batch, width])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("fixed")
    return save(mlp(64), d / "fixed.onnx"), save(mlp("batch"), d / "symbolic.onnx")


# --------------------------------------------------------------------------- fixed input shape
def test_fixed_shape_is_per_run_and_says_so(models):
    fixed, _ = models
    g = load_onnx(fixed)
    assert g.batch_size == 1
    assert any("fixed shape" in w and "'x' [64, 256]" in w and "a run of the model counts as one sample" in w
               for w in g.warnings), g.warnings


def test_another_batch_size_rebatches_as_the_sweep_does(models):
    fixed, symbolic = models
    g = load_onnx(fixed, batch_size=8)
    assert g.batch_size == 8
    assert any("fixed shape" in w and "'x' [64, 256]" in w and "taken as the batch, at 8" in w
               for w in g.warnings), g.warnings
    same = load_onnx(symbolic, batch_size=8)  # the second method: the model written with a symbolic batch
    assert [op.output_bytes for op in g.ops] == [op.output_bytes for op in same.ops]
    assert [t.shape for t in g.outputs] == [(8, 256)]


def test_a_model_that_does_not_follow_its_leading_dimension_is_refused(tmp_path):
    # y = x^T x: [64, 256] -> [256, 256]; the output does not lead with the batch, whatever it is
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Transpose", ["x"], ["xt"], name="t", perm=[1, 0]),
                          h.make_node("MatMul", ["xt", "x"], ["y"], name="mm")], "gram",
                         [h.make_tensor_value_info("x", T.FLOAT, [64, 256])],
                         [h.make_tensor_value_info("y", T.FLOAT, [256, 256])])
    path = save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "gram.onnx")
    with pytest.raises(InputError, match=r"at batch size 8 output 'y' has shape \[256, 256\]"):
        load_onnx(path, batch_size=8)


def test_batch_size_equal_to_the_leading_dimension_is_the_batch(models):
    fixed, symbolic = models
    g = load_onnx(fixed, batch_size=64)
    assert g.batch_size == 64 and not g.warnings
    same = load_onnx(symbolic, batch_size=64)
    assert [op.output_bytes for op in g.ops] == [op.output_bytes for op in same.ops]


def _max_load(text: str) -> float:
    return float(re.search(r"max-load (\S+) ms per sample", text).group(1))


def test_cli_place_on_a_fixed_shape_model(models, capsys, tmp_path):
    fixed, symbolic = models
    out = tmp_path / "r.json"
    assert main(["place", fixed, "--devices", "a100:2", "--out", str(out)]) == 0
    text = capsys.readouterr()
    assert "fixed shape" in text.err and "'x' [64, 256]" in text.err
    assert "a run of the model counts as one sample" in text.err and "batch size 64 takes" in text.err
    assert "fixed input shape: a sample is one run of the model" in text.out
    assert main(["evaluate", fixed, str(out)]) == 0  # the recorded batch (1) re-scores it
    capsys.readouterr()

    # batch size 8 re-batches it, as --batch-size 8,16 (the sweep) does: the symbolic model's figures
    assert main(["place", fixed, "--devices", "a100:2", "--batch-size", "8"]) == 0
    at8 = capsys.readouterr()
    assert "'x' [64, 256]" in at8.err and "taken as the batch, at 8" in at8.err
    assert main(["place", symbolic, "--devices", "a100:2", "--batch-size", "8"]) == 0
    assert _max_load(at8.out) == pytest.approx(_max_load(capsys.readouterr().out), rel=1e-12)

    # batch size 64 on the fixed model is the symbolic model at batch 64: the same per-sample figures
    assert main(["place", fixed, "--devices", "a100:2", "--batch-size", "64"]) == 0
    at64 = capsys.readouterr()
    assert "fixed shape" not in at64.err
    assert main(["place", symbolic, "--devices", "a100:2", "--batch-size", "64"]) == 0
    assert _max_load(at64.out) == pytest.approx(_max_load(capsys.readouterr().out), rel=1e-12)


# --------------------------------------------------------------------------- large clusters
def _lines_run(fn) -> int:
    """Python lines executed by ``fn()`` (``sys.settrace`` line events): the work, not the time."""
    n = 0

    def tracer(frame, event, arg):
        nonlocal n
        n += event == "line"
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n


def test_evaluating_on_many_devices_is_linear_in_the_devices():
    graph = OpGraph.from_nodes([Node("a", {"gpu": 1.0}, memory=1.0, comm=0.1),
                                Node("b", {"gpu": 2.0}, memory=1.0)], edges=[("a", "b")])

    def work(devices: int) -> int:
        cluster = Cluster((DeviceKind("gpu", count=devices, memory=10.0),))
        return _lines_run(lambda: (evaluate(graph, cluster, [0, devices - 1]),
                                   [cluster.device_name(d) for d in range(devices)]))

    small, large = work(300), work(2400)
    assert large < 12 * small, (small, large)  # 8x the devices: about 8x the work (quadratic: ~60x)
    # and the names are the same as before: kind by kind, negative numbers from the end
    cluster = Cluster((DeviceKind("a100", count=2), DeviceKind("cpu", count=3, pays_communication=False)))
    names = [cluster.device_name(d) for d in range(cluster.num_devices)]
    assert names == ["a100:0", "a100:1", "cpu:0", "cpu:1", "cpu:2"]
    assert cluster.device_name(-1) == "cpu:2"
    with pytest.raises(IndexError):
        cluster.device_name(5)


def test_rebatching_warns_of_each_other_dimension_once(tmp_path):
    """A fixed-shape model with another symbolic dimension, re-batched: its warning is said once (the
    dimensions of the model as read and as re-batched were both warned of)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="r")], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [64, "seq", 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [64, "seq", 8])])
    path = save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "seq.onnx")
    g = load_onnx(path, batch_size=8)
    assert g.batch_size == 8
    assert sum("'seq'" in w and "taken as 1" in w for w in g.warnings) == 1, g.warnings
