"""A value given for the model's batch dimension by name (``--dim batch=2``, ``dims={"batch": 2}``) is the
batch size: a sample is one of the 2, as with ``--batch-size 2``. Before, the run of 2 counted as one sample
(half the samples/s of ``--batch-size 2``, a summary line the only hint), the result recorded batch size 1
with the dimension beside it, and split could not rebuild the problem from that result."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("onnx")

from graphs.errors import InputError  # noqa: E402
from placement.cli import main  # noqa: E402


def _mlp(path, inputs, hidden=64):
    """A two-MatMul model; ``inputs``: the input's shape (names are symbolic dimensions); the last is the
    feature width, 32."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((32, hidden)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, 8)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    out = list(inputs[:-1]) + [8]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(inputs))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], [w1, w2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _samples_per_s(out: str) -> float:
    m = re.search(r"max-load ([0-9.e-]+) ms per sample \(([0-9,.]+) samples/s", out)
    assert m, out
    return float(m.group(2).replace(",", ""))


def test_cli_dim_batch_is_the_batch_size(tmp_path, capsys):
    model = _mlp(tmp_path / "m.onnx", ["batch", 32])
    by_size, by_dim = str(tmp_path / "size.json"), str(tmp_path / "dim.json")
    assert main(["place", model, "--devices", "t4:2", "--batch-size", "2", "--out", by_size]) == 0
    size_out = capsys.readouterr().out
    assert main(["place", model, "--devices", "t4:2", "--dim", "batch=2", "--out", by_dim]) == 0
    dim_out = capsys.readouterr().out
    # the second method: --batch-size 2's per-sample figure (before: half of it)
    assert _samples_per_s(dim_out) == _samples_per_s(size_out)
    assert "a micro-batch is one run at batch size 2" in dim_out and "fixed input shape" not in dim_out
    problem = json.load(open(by_dim))["problem"]
    assert problem["batch_size"] == 2  # was 1, with dims {"batch": 2} beside it
    # split rebuilds the problem from the result (before: 'both set the batch', the plan left unchecked)
    assert main(["split", model, by_dim, "--out-dir", str(tmp_path / "parts")]) == 0
    err = capsys.readouterr().err
    assert "could not be rebuilt" not in err and "both set the batch" not in err
    # given with a different --batch-size it is still refused, in one message
    assert main(["place", model, "--devices", "t4:2", "--dim", "batch=2", "--batch-size", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "'batch' = 2 (dims / --dim) and batch size 4" in err


def test_library_dims_batch_is_the_batch_size(tmp_path):
    from placement.inmemory import place_model

    model = _mlp(tmp_path / "m.onnx", ["batch", 32])
    by_dim = place_model(model, "t4:2", dims={"batch": 2})
    by_size = place_model(model, "t4:2", batch_size=2)
    assert by_dim.max_load == pytest.approx(by_size.max_load)
    assert by_dim.graph.batch_size == 2  # (before: 1, and twice by_size's max-load: the run of 2 per sample)


def _dims_of(path):
    import onnx

    g = onnx.load(path).graph
    return [d.dim_param or d.dim_value for d in g.input[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("dynamo", [False, True])
def test_torch_export_batch_dimension(tmp_path, dynamo):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")
    import torch

    from graphs.onnx_loader import load_onnx
    from tests.torch_models import export_onnx

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    path = export_onnx(net, tmp_path / "net.onnx", torch.randn(2, 8), dynamo=dynamo)
    assert _dims_of(path) == ["batch", 8]  # the name both exporters give it (Dim("batch") / dynamic_axes)
    by_dim, by_size = load_onnx(path, dims={"batch": 3}), load_onnx(path, batch_size=3)
    assert by_dim.batch_size == by_size.batch_size == 3 and not by_dim.fixed_shape
    assert [t.shape for t in by_dim.inputs] == [t.shape for t in by_size.inputs] == [(3, 8)]


def test_unnamed_leading_dimension(tmp_path):
    """An exporter's own names (``s0`` for the batch, ``s1`` for a sequence): the leading one is the batch,
    the other is not."""
    import onnx

    from graphs.onnx_batch import batch_dim_names
    from graphs.onnx_loader import load_onnx

    path = _mlp(tmp_path / "s.onnx", ["s0", "s1", 32])
    assert batch_dim_names(onnx.load(path)) == {"s0"}
    g = load_onnx(path, dims={"s0": 2, "s1": 5})
    assert g.batch_size == 2 and g.inputs[0].shape == (2, 5, 32)
    g = load_onnx(path, dims={"s1": 5})  # the sequence alone: batch 1
    assert g.batch_size == 1 and g.inputs[0].shape == (1, 5, 32)
    with pytest.raises(InputError, match="both set the batch"):
        load_onnx(path, dims={"s0": 2}, batch_size=4)


def test_sequence_first_leading_dimension_is_not_the_batch(tmp_path):
    """``[seq, batch, features]``: the leading ``seq`` is a sequence where a dimension is named like a
    batch; a value for it is not a batch size."""
    from graphs.onnx_loader import load_onnx

    path = _mlp(tmp_path / "t.onnx", ["seq", "batch", 32])
    g = load_onnx(path, dims={"seq": 7, "batch": 2})
    assert g.batch_size == 2 and g.inputs[0].shape == (7, 2, 32)


def test_two_batch_dimensions_that_differ(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from graphs.onnx_loader import load_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["bs", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r"),
                           helper.make_node("Relu", ["z"], ["w"], name="r2")], "two", [x, z],
                          [y, helper.make_tensor_value_info("w", TensorProto.FLOAT, ["bs", 4])])
    path = str(tmp_path / "two.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert np.isfinite(load_onnx(path, dims={"batch": 2, "bs": 2}).batch_size)
    with pytest.raises(InputError, match=r"'batch' = 2, 'bs' = 3 .* are all the model's batch dimension"):
        load_onnx(path, dims={"batch": 2, "bs": 3})
