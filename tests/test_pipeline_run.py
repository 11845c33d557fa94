"""A real pipelined run: stages in worker processes, outputs compared with the whole model."""

from __future__ import annotations

import json

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from placement.cli import main  # noqa: E402
from placement.onnx_export import (  # noqa: E402
    generated_weights,
    materialize,
    random_feeds,
    session,
    split_model,
)
from placement.pipeline_run import predicted_time_per_sample, run_pipeline  # noqa: E402
from tests.test_split import chunk_result, zoo  # noqa: E402


def test_two_stage_run_completes_and_matches():
    path = zoo("squeezenet")
    model = onnx.load(path)
    result = chunk_result(path, 2)
    split = split_model(model, result)
    weights = generated_weights(model)
    whole = materialize(model, weights)
    parts = [materialize(s.model, weights) for s in split.submodels]
    sess = session(whole)
    feeds = [random_feeds(whole, sess, seed=i) for i in range(3)]
    names = [o.name for o in sess.get_outputs()]
    reference = [dict(zip(names, sess.run(names, f))) for f in feeds]
    run = run_pipeline(parts, split.manifest(), feeds, samples=7, reference=reference, timeout=240)
    assert run.samples == 7 and run.workers == 2 and run.replicas == (1, 1)
    assert run.wall_s > 0 and len(run.busy_s) == 2 and all(b > 0 for (b,) in run.busy_s)
    assert run.taken == ((7,), (7,))  # one worker per stage runs every timed sample
    assert max(run.max_abs_diff.values()) <= 1e-4
    assert all(0 < u <= 1.0 + 1e-6 for u in run.utilisation)


def test_prediction_is_the_streaming_simulation_of_the_result():
    result = {"devices": [
        {"device": 0, "name": "cpu0", "kind": "cpu", "stage": 0, "nodes": ["a"], "compute": 2.0,
         "comm_in": 0.0, "comm_out": 0.0},
        {"device": 1, "name": "cpu1", "kind": "cpu", "stage": 1, "nodes": ["b"], "compute": 3.0,
         "comm_in": 0.0, "comm_out": 0.0}]}
    p = predicted_time_per_sample(result, 10)
    assert p.steady_time_per_sample == pytest.approx(3.0)
    assert p.makespan == pytest.approx(2.0 + 10 * 3.0)
    assert p.time_per_sample == pytest.approx(3.2)


def test_cli_run(tmp_path, capsys):
    path = zoo("squeezenet")
    res = tmp_path / "r.json"
    res.write_text(json.dumps(chunk_result(path, 2)))
    assert main(["run", str(res), path, "--samples", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["samples"] == 4 and doc["stages"] == 2
    assert doc["measured_ms_per_sample"] > 0 and len(doc["measured_stage_ms"]) == 2
    assert max(doc["max_abs_diff"].values()) <= 1e-4
    assert main(["run", str(res), path, "--samples", "0"]) == 2
