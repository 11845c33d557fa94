"""A stage plan lists its stages in pipeline order (the evaluator's model: a list against the data flow
is not nested ideals). ``split`` cut a list in reverse all the same, naming the t4 stage's file
``stage0_t4...`` while calling it stage 1, and ``run`` lined the prediction of stage ``k`` up with
the ``k``-th sub-model: the t4 row showed the a100 stage's figure. Both now refuse such a list, naming
its stages in the order the data flows, whether or not the result records enough to be scored."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from placement.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def placed(tmp_path_factory) -> tuple[str, dict]:
    """The example model and its stage plan (t4 with d = 2, then a100 with d = 2)."""
    folder = tmp_path_factory.mktemp("placed")
    model, result = str(folder / "ex.onnx"), folder / "r.json"
    assert main(["example", model, "--layers", "2"]) == 0
    assert main(["place", model, "--devices", "a100:2,t4:2,cpu:1", "--out", str(result),
                 "--time-limit", "20"]) == 0
    data = json.loads(result.read_text())
    assert [s["kind"] for s in data["stages"]] == ["t4", "a100"]
    return model, data


@pytest.mark.parametrize("scored", [True, False], ids=["scored", "recorded too little to score"])
def test_a_stage_list_out_of_pipeline_order_is_refused_by_split_and_run(placed, tmp_path, capsys, scored):
    model, data = placed
    data = json.loads(json.dumps(data))
    data["stages"].reverse()
    if not scored:  # the problem cannot be rebuilt: nothing but the split itself reads the order
        del data["problem"]["devices"]
    path = tmp_path / "reversed.json"
    path.write_text(json.dumps(data))
    want = (f"error: {path}: the stages are not listed in pipeline order: the data flows stages[1] "
            f"(t4:0-1) -> stages[0] (a100:0-1); a stage plan lists its 'stages' in pipeline order, each "
            f"after every stage it receives from")
    capsys.readouterr()
    assert main(["split", model, str(path), "--out-dir", str(tmp_path / "s")]) == 2
    assert capsys.readouterr().err.strip() == want
    assert not (tmp_path / "s").exists()
    assert main(["run", model, str(path), "--samples", "2"]) == 2
    out = capsys.readouterr()
    assert out.err.strip() == want and out.out == ""


def test_each_file_of_a_stage_plan_is_the_stage_of_its_number(placed, tmp_path, capsys):
    model, data = placed
    data = json.loads(json.dumps(data))
    del data["problem"]["devices"]  # cut unchecked, as listed
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert main(["split", model, str(path), "--out-dir", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "stage0_t4_0-1.onnx: stage 0," in out and "stage1_a100_0-1.onnx: stage 1," in out
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert [(s["file"], s["stage"]) for s in manifest["submodels"]] == [("stage0_t4_0-1.onnx", 0),
                                                                       ("stage1_a100_0-1.onnx", 1)]
