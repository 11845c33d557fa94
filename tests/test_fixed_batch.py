"""A model exported with a fixed batch (no symbolic batch dimension): its leading dimension may be a
batch or a sequence (a sequence-first transformer), which the file does not say, so without a batch
size a run of the model counts as one sample, and the warning and the summary say so and how to take the
leading dimension as the batch. Given that batch size, the command line, ``place_model`` and
``place_module`` give one per-sample figure for one model, that of the same model exported with a
symbolic batch and placed at that batch size (the second method).

The reviewer's model: six (Linear 512 -> 2048, GELU, Linear 2048 -> 512) blocks at batch 32 on three
T4s, where the command line printed the time of a run of 32 samples as ``ms per sample`` (32x off
``place_module``'s ``time_per_sample``) while warning that its figures were per run. A review of that
fix found the leading dimension taken as the batch by default made a sequence-first model's figures
up to 128x too fast: the leading dimension is the batch only when the batch size says so.
"""

from __future__ import annotations

import json
import re

import pytest

from graphs.onnx_loader import load_onnx
from placement.cli import main
from tests.onnx_models import save

BATCH = 32
DEVICES = "t4:3"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The reviewer's module, its example input, and its ONNX exports with a fixed and a symbolic batch."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0, then "
                                                "'.[torch]')")
    torch.manual_seed(0)
    nn = torch.nn
    m = nn.Sequential(*[nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))
                        for _ in range(6)]).eval()
    x = torch.randn(BATCH, 512)
    d = tmp_path_factory.mktemp("fixed_batch")
    return m, x, _export(m, x, d / "fixed.onnx"), _export(m, x, d / "symbolic.onnx", {0: "batch"})


def _export(m, x, path, batch=None) -> str:
    """The reviewer's ``torch.onnx.export`` (TorchScript, its default opset: one Gelu node, as
    ``place_module`` costs it), with a symbolic ``batch`` dimension where given."""
    import warnings

    import torch

    axes = {"input": batch, "output": batch} if batch else None
    with warnings.catch_warnings():  # the exporter's deprecation warning
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), str(path), dynamo=False, input_names=["input"], output_names=["output"],
                          dynamic_axes=axes)
    return str(path)


def _place(capsys, tmp_path, model, *args) -> tuple[dict, str, str]:
    out = tmp_path / "r.json"
    assert main(["place", model, "--devices", DEVICES, "--time-limit", "30", "--out", str(out), *args]) == 0
    text = capsys.readouterr()
    return json.loads(out.read_text()), text.out, text.err


def _summary(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("max-load"))


def test_without_a_batch_size_a_run_is_one_sample_and_the_warning_says_how_to_take_the_batch(exported):
    _, _, fixed, _ = exported
    g = load_onnx(fixed)
    assert g.fixed_shape and g.batch_size == 1 and g.per_run
    assert any("a run of the model counts as one sample, its figures per run" in w
               and f"batch size {BATCH} takes their leading dimension as the batch" in w
               for w in g.warnings), g.warnings
    g = load_onnx(fixed, batch_size=BATCH)
    assert g.batch_size == BATCH and not g.per_run


def test_a_sequence_first_model_is_not_taken_as_a_batch_of_its_sequence(tmp_path):
    """Input and output [128, 1, 64] (sequence, batch, width): the leading 128 is no batch. Taking it as
    one divided every per-sample figure by 128; a run is one sample unless the batch size says so."""
    import numpy as np
    from onnx import helper as h
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    m = _model([("x", [128, 1, 64])], [("y", [128, 1, 64])],
               [h.make_node("MatMul", ["x", "w"], ["y"], name="mm")])
    m.graph.initializer.append(w)
    g = load_onnx(save(m, tmp_path / "seq_first.onnx"))
    assert g.batch_size == 1 and g.per_run
    assert any("it may be a sequence" in x for x in g.warnings), g.warnings


def test_one_device_per_stage_cli_library_and_torch_agree_per_sample(exported, capsys, tmp_path):
    from placement import place_model
    from placement.torch import place_module

    m, x, fixed, symbolic = exported
    doc, out, err = _place(capsys, tmp_path, fixed, "--max-replicas", "1", "--batch-size", str(BATCH))
    line = _summary(out)
    assert "a run of the model counts as one sample" not in err and "a sample is one run" not in out
    assert f"ms per batch of {BATCH} (" in line and " ms per sample, " in line and "samples/s" in line
    assert doc["frontend"]["batch_size"] == BATCH and doc["time_unit"] == "ms"
    per_run = doc["max_load"]
    for stage in doc["stages"]:  # the file's per-sample and per-batch times say which is which
        assert stage["batch_size"] == BATCH
        assert stage["time_per_sample"] == pytest.approx(stage["time_per_batch"] / BATCH, rel=1e-12)
    assert doc["compute_utilisation"]["batch_size"] == BATCH

    # the second method: the same model exported with a symbolic batch, placed at batch size 32
    sym, sym_out, _ = _place(capsys, tmp_path, symbolic, "--max-replicas", "1", "--batch-size", str(BATCH))
    assert sym["max_load"] == pytest.approx(per_run, rel=1e-12)
    assert _summary(sym_out).split(", status")[0] == line.split(", status")[0]

    lib = place_model(fixed, devices=DEVICES, max_replicas=1, batch_size=BATCH)
    assert lib.graph.batch_size == BATCH and lib.max_load == pytest.approx(per_run, rel=1e-12)

    tp = place_module(m, (x,), devices=DEVICES, split_points="children")
    assert tp.batch_size == BATCH
    assert tp.time_per_run == pytest.approx(per_run, rel=1e-9)
    assert tp.time_per_sample == pytest.approx(per_run / BATCH, rel=1e-9)
    rate = float(re.search(r"([\d,.]+) samples/s", line).group(1).replace(",", ""))
    assert rate == pytest.approx(1e3 / tp.time_per_sample, rel=1e-5)  # printed to 6 digits


def test_stage_plan_cli_and_library_agree_with_the_symbolic_export(exported, capsys, tmp_path):
    from placement import place_model

    _, _, fixed, symbolic = exported
    doc, out, _ = _place(capsys, tmp_path, fixed, "--batch-size", str(BATCH))
    sym, sym_out, _ = _place(capsys, tmp_path, symbolic, "--batch-size", str(BATCH))
    assert doc["model"] == "stages" and doc["problem"]["batch_size"] == BATCH
    assert doc["max_load"] == pytest.approx(sym["max_load"], rel=1e-12)  # s per sample, the stage unit
    assert f"a micro-batch is one run at batch size {BATCH}" in out
    assert "a sample is one run of the model" not in out
    assert _summary(out).split(", status")[0] == _summary(sym_out).split(", status")[0]

    # ms per run of the batch: the stage plan's s/sample x 1e3 x 32
    lib = place_model(fixed, devices=DEVICES, batch_size=BATCH)
    assert lib.model == "stages" and lib.graph.batch_size == BATCH
    assert lib.max_load == pytest.approx(doc["max_load"] * 1e3 * BATCH, rel=1e-9)


@pytest.mark.parametrize("given", [[], ["--batch-size", "1"]], ids=["no batch size", "batch size 1"])
def test_a_run_counts_as_one_sample_and_says_so(exported, capsys, tmp_path, given):
    from placement.torch import place_module

    m, x, fixed, _ = exported
    doc, out, err = _place(capsys, tmp_path, fixed, "--max-replicas", "1", *given)
    assert "a run of the model counts as one sample, its figures per run" in err
    assert "fixed input shape: a sample is one run of the model" in _summary(out)
    assert doc["frontend"]["batch_size"] == 1
    tp = place_module(m, (x,), devices=DEVICES, split_points="children")
    assert doc["max_load"] == pytest.approx(tp.time_per_run, rel=1e-9)  # the run, not a sample of it


# --------------------------------------------------------------------------- no batch to take
def _model(inputs, outputs, nodes):
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph(nodes, "m", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in outputs])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_no_common_leading_dimension_is_a_run_and_says_why(tmp_path):
    from onnx import helper as h

    # y = x^T x: the output does not lead with the inputs' 64
    gram = _model([("x", [64, 256])], [("y", [256, 256])],
                  [h.make_node("Transpose", ["x"], ["xt"], name="t", perm=[1, 0]),
                   h.make_node("MatMul", ["xt", "x"], ["y"], name="mm")])
    g = load_onnx(save(gram, tmp_path / "gram.onnx"))
    assert g.batch_size == 1 and g.per_run
    assert any("a run of the model counts as one sample" in w and "outputs do not all lead" in w
               for w in g.warnings), g.warnings

    # inputs leading with 8 and 1: which is the batch the file does not say
    mixed = _model([("a", [8, 16]), ("b", [1, 16])], [("y", [8, 16])],
                   [h.make_node("Add", ["a", "b"], ["y"], name="add")])
    g = load_onnx(save(mixed, tmp_path / "mixed.onnx"))
    assert g.batch_size == 1 and g.per_run
    assert any("leading dimensions differ" in w for w in g.warnings), g.warnings


def test_a_leading_dimension_of_1_is_batch_1_without_a_warning(tmp_path):
    from onnx import helper as h

    one = _model([("x", [1, 16])], [("y", [1, 16])], [h.make_node("Relu", ["x"], ["y"], name="relu")])
    g = load_onnx(save(one, tmp_path / "one.onnx"))
    assert g.batch_size == 1 and not g.per_run and not g.warnings
