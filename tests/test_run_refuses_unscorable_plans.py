"""``placement run`` of a stage plan the evaluator cannot score (a data-parallel degree that does not
divide the micro-batches: :func:`graphs.parallel.evaluate_plan` returns no stages) crashed with
``ValueError: max() arg is an empty sequence``; it now gives show's clean ``the plan is not valid``
error (exit 2), and the prediction functions raise :class:`InputError` (no prediction) instead of
crashing."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from graphs.errors import InputError  # noqa: E402
from placement.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def placed(tmp_path_factory) -> tuple[str, str, dict]:
    """The example model and its stage plan (t4 with d = 2, then a100 with d = 2, 8 micro-batches)."""
    folder = tmp_path_factory.mktemp("placed")
    model, result = str(folder / "ex.onnx"), folder / "r.json"
    assert main(["example", model, "--layers", "2"]) == 0
    assert main(["place", model, "--devices", "a100:2,t4:2,cpu:1", "--out", str(result),
                 "--time-limit", "20"]) == 0
    data = json.loads(result.read_text())
    assert [s["dataParallelDegree"] for s in data["stages"]] == [2, 2]
    assert data["problem"]["microbatches"] == 8
    return model, str(result), data


def _three_microbatches(data: dict) -> dict:
    data["problem"]["microbatches"] = 3
    return data


def _three_replicas(data: dict) -> dict:
    data["stages"][0]["dataParallelDegree"] = 3
    for s in data["stages"]:  # derived from d: dropped with the edit (an edited list is refused)
        del s["devices"]
    return data


@pytest.mark.parametrize("edit, words", [
    (_three_microbatches, "stage 0: data-parallel degree 2 does not divide 3 micro-batches"),
    (_three_replicas, "stage 0: data-parallel degree 3 does not divide 8 micro-batches"),
])
def test_run_of_a_plan_that_cannot_be_scored_gives_shows_error(placed, tmp_path, capsys, edit, words):
    model, _, data = placed
    path = tmp_path / "e.json"
    path.write_text(json.dumps(edit(json.loads(json.dumps(data)))))
    capsys.readouterr()
    assert main(["show", str(path), "--workload", model, "--no-draw"]) == 2
    show = _errors(capsys.readouterr().err)
    assert len(show) == 1 and words in show[0]
    assert main(["run", model, str(path), "--samples", "4"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err
    assert _errors(out.err) == show  # both name the file


def _errors(err: str) -> list[str]:
    """The ``error:`` lines of ``err`` (a ``note:`` or ``warning:`` line may come first)."""
    return [x for x in err.splitlines() if x.startswith("error:")]


def test_the_prediction_of_a_plan_that_cannot_be_scored_is_refused_not_a_crash(placed):
    """The library's view: the re-scored prediction raises InputError naming the broken rule, and
    run's prediction of the file is none, saying why."""
    from placement.pipeline_run import rescored_stage_plan, stage_plan_prediction
    from placement.stages import plan_from_dict, workload_for_result

    model, path, data = placed
    bad = _three_microbatches(json.loads(json.dumps(data)))
    w = workload_for_result(bad, model, source=path)
    plan = plan_from_dict(w.problem, bad, source=path)
    with pytest.raises(InputError, match="does not divide 3 micro-batches"):
        rescored_stage_plan(bad, w.problem, plan, 4)
    pred, why, notes = stage_plan_prediction(bad, model, 4, 1, source=path)
    assert pred is None and notes == []
    assert "does not divide 3 micro-batches" in why
