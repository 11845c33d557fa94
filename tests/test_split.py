"""ONNX export of a placement: annotated model, per-stage sub-models, verification by execution."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from graphs.errors import InputError  # noqa: E402
from graphs.onnx_loader import load_onnx  # noqa: E402
from placement.cli import main  # noqa: E402
from placement.onnx_export import (  # noqa: E402
    annotate,
    read_annotations,
    read_split_manifest,
    split_model,
    verify_split,
    write_split,
)

ZOO = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def zoo(name: str) -> str:
    path = os.path.join(ZOO, f"light_{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not shipped with this onnx")
    return path


@pytest.fixture(scope="module")
def transformer_path(tmp_path_factory):
    from graphs.transformer import transformer_model

    path = tmp_path_factory.mktemp("tf") / "transformer.onnx"
    onnx.save_model(transformer_model(layers=2, hidden=32, heads=4, seq_len=8, vocab=100), str(path))
    return str(path)


def chunk_result(path: str, stages: int, *, order=None) -> dict:
    """A result placing the model's operators (as the front end names them, in its topological order)
    in ``stages`` contiguous chunks of equal operator count, one per CPU."""
    names = list(load_onnx(path).names)
    bounds = np.linspace(0, len(names), stages + 1).round().astype(int)
    order = list(range(stages)) if order is None else order
    devices = [{"device": k, "name": f"cpu{k}", "kind": "cpu", "stage": order[k],
                "nodes": names[bounds[k]:bounds[k + 1]], "load": 1.0} for k in range(stages)]
    return {"schema": "placement-result", "version": 1, "source": path, "contiguous": True,
            "stage_order": [f"cpu{k}" for k in range(stages)], "devices": devices}


def check_split(model, result, tmp_path, *, tolerance=1e-4):
    split = split_model(model, result)
    manifest = write_split(split, tmp_path / "stages")
    manifest, models = read_split_manifest(tmp_path / "stages")
    for m in models:
        onnx.checker.check_model(m, full_check=True)
    # every tensor flows forward in run order; every sub-model input is a model input or a flow
    produced = {f["tensor"]: f["from"] for f in manifest["flows"]}
    for f in manifest["flows"]:
        assert all(t == "output" or f["from"] == "input" or t > f["from"] for t in f["to"])
    for s in manifest["submodels"]:
        for x in s["inputs"]:
            assert x in produced and (produced[x] == "input" or produced[x] < s["index"])
    rep = verify_split(model, models, manifest, tolerance=tolerance)
    assert rep.ok, (rep.max_abs_diff, rep.cut_max_abs_diff)
    assert rep.worst <= 1e-4
    return split, manifest, rep


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_squeezenet_split_verifies(tmp_path, stages):
    path = zoo("squeezenet")
    model = onnx.load(path)
    split, manifest, rep = check_split(model, chunk_result(path, stages), tmp_path)
    assert len(manifest["submodels"]) == stages
    assert rep.materialized > 0  # its weights are generated: random ones were substituted
    assert rep.cut_max_abs_diff  # the cut tensors were compared too


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_resnet50_split_verifies(tmp_path, stages):
    path = zoo("resnet50")
    split, manifest, rep = check_split(onnx.load(path), chunk_result(path, stages), tmp_path)
    assert len(manifest["submodels"]) == stages


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_transformer_split_verifies(tmp_path, transformer_path, stages):
    split, manifest, rep = check_split(onnx.load(transformer_path), chunk_result(transformer_path, stages),
                                       tmp_path)
    assert len(manifest["submodels"]) == stages
    assert manifest["inputs"] == ["input_ids"]


def test_transformer_with_generated_weights(tmp_path):
    from graphs.transformer import transformer_model

    path = str(tmp_path / "gen.onnx")
    onnx.save_model(transformer_model(layers=1, hidden=16, heads=2, seq_len=4, vocab=50, weights="generated"),
                    path)
    _, _, rep = check_split(onnx.load(path), chunk_result(path, 3), tmp_path)
    assert rep.materialized > 0


def test_non_contiguous_placement_is_cut_until_acyclic(tmp_path):
    path = zoo("squeezenet")
    names = list(load_onnx(path).names)
    # alternate blocks of 8 operators between two CPUs: the devices feed each other back and forth
    devices = [{"device": k, "name": f"cpu{k}", "kind": "cpu", "stage": None,
                "nodes": [nm for i, nm in enumerate(names) if (i // 8) % 2 == k]} for k in range(2)]
    result = {"schema": "placement-result", "contiguous": False, "devices": devices}
    split, manifest, _ = check_split(onnx.load(path), result, tmp_path)
    assert len(manifest["submodels"]) > 2
    assert {s["device"] for s in manifest["submodels"]} == {"cpu0", "cpu1"}
    assert split.notes and "not contiguous" in split.notes[0]
    assert not manifest["contiguous"]


def test_a_stage_order_against_the_data_flow_is_cut_too(tmp_path):
    path = zoo("squeezenet")
    result = chunk_result(path, 2, order=[1, 0])  # claims the second half runs first
    _, manifest, _ = check_split(onnx.load(path), result, tmp_path)
    assert [s["device"] for s in manifest["submodels"]] == ["cpu0", "cpu1"]


def test_annotated_model_passes_the_checker_and_round_trips(tmp_path):
    path = zoo("squeezenet")
    model = onnx.load(path)
    result = chunk_result(path, 3)
    annotated = annotate(model, result)
    out = tmp_path / "placed.onnx"
    onnx.save_model(annotated, str(out))
    back = onnx.load(str(out))
    onnx.checker.check_model(back, full_check=True)
    ann = read_annotations(back)
    for d in result["devices"]:
        for nm in d["nodes"]:
            assert ann[nm]["device"] == d["name"] and ann[nm]["stage"] == str(d["stage"])
            assert "constant" not in ann[nm]
    folded = [a for a in ann.values() if a.get("constant") == "true"]
    assert folded  # the weight generators are annotated with the stage that uses them
    meta = {p.key: p.value for p in back.metadata_props}
    summary = json.loads(meta["placement.result"])
    assert [d["name"] for d in summary["devices"]] == ["cpu0", "cpu1", "cpu2"]
    # annotating again replaces, never duplicates
    again = annotate(back, result)
    node = again.graph.node[0]
    assert len([p for p in node.metadata_props if p.key == "placement.device"]) == 1


def test_result_for_another_model_is_refused():
    path = zoo("squeezenet")
    result = chunk_result(path, 2)
    result["devices"][0]["nodes"].append("not_an_op")
    with pytest.raises(InputError, match="not in the model"):
        split_model(onnx.load(path), result)
    result = chunk_result(path, 2)
    del result["devices"][1]["nodes"][0]
    with pytest.raises(InputError, match="not placed"):
        split_model(onnx.load(path), result)


def test_training_result_uses_the_forward_nodes(tmp_path, transformer_path):
    result = chunk_result(transformer_path, 2)
    for d in result["devices"]:
        d["nodes"] = d["nodes"] + [nm + "_grad" for nm in d["nodes"]]
    check_split(onnx.load(transformer_path), result, tmp_path)


def test_cli_split_verify(tmp_path, capsys):
    path = zoo("squeezenet")
    res = tmp_path / "r.json"
    res.write_text(json.dumps(chunk_result(path, 2)))
    out_dir = tmp_path / "st"
    assert main(["split", path, str(res), "--out-dir", str(out_dir), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "verify: OK" in text
    assert (out_dir / "manifest.json").exists() and (out_dir / "light_squeezenet.placed.onnx").exists()
    assert sorted(p.name for p in out_dir.glob("stage*.onnx")) == ["stage0_cpu0.onnx", "stage1_cpu1.onnx"]
    assert main(["split", path, str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
