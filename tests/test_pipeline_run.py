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
from placement.pipeline_run import predicted_stage_plan, predicted_time_per_sample, run_pipeline  # noqa: E402
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
    assert doc["measured_ms_per_sample"] > 0 and len(doc["measured_stage_ms_per_batch"]) == 2
    assert doc["batch_size"] == 1  # the result records no batch size: one sample per run
    assert max(doc["max_abs_diff"].values()) <= 1e-4
    # one report for both plan forms: a one-device-per-stage plan is the d = t = 1 case
    assert doc["replicas"] == [1, 1] and doc["tensor_parallel"] == [1, 1] and doc["workers"] == 2
    assert doc["replica_samples"] == [[4], [4]] and len(doc["utilisation"]) == 2
    assert main(["run", str(res), path, "--samples", "4"]) == 0
    head = capsys.readouterr().out.splitlines()[1].split()
    assert head[:4] == ["stage", "devices", "replicas", "t"], head
    assert main(["run", str(res), path, "--samples", "0"]) == 2


# ------------------------------------------------------------------ batch size and prediction of `run`
@pytest.fixture(scope="module")
def gpt_path(tmp_path_factory) -> str:
    from graphs.transformer import gpt

    path = tmp_path_factory.mktemp("gpt") / "gpt.onnx"
    onnx.save(gpt(2, hidden=32, heads=2, seq_len=8, vocab=50, weights="random"), str(path))  # batch symbolic
    return str(path)


def _place(path: str, out, *args: str) -> dict:
    assert main(["place", path, "--devices", "cpu:2", "--time-limit", "5", "--out", str(out), *args]) == 0
    return json.loads(out.read_text())


def test_run_feeds_the_batch_size_the_result_records_and_predicts_per_sample(gpt_path, tmp_path, capsys,
                                                                              monkeypatch):
    """A one-device-per-stage result placed at batch 3: run feeds batch 3 without --batch-size (it fed 1),
    and its samples/s are 3 x runs / time, the prediction's from the result's own per-batch loads."""
    import placement.onnx_export as ox

    res = _place(gpt_path, tmp_path / "r.json", "--batch-size", "3", "--max-replicas", "1")
    capsys.readouterr()
    fed = []
    real = ox.random_feeds
    monkeypatch.setattr(ox, "random_feeds", lambda *a, **kw: fed.append(kw["batch_size"]) or real(*a, **kw))
    n = 3  # runs: batches of 3 samples
    assert main(["run", gpt_path, str(tmp_path / "r.json"), "--samples", str(3 * n), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert fed and set(fed) == {3}
    assert (doc["batch_size"], doc["batches"], doc["samples"]) == (3, n, 3 * n)
    # a chain of stages streaming n batches fed at once: the sum of the loads, then the busiest per batch
    loads = [d["load"] for d in sorted((d for d in res["devices"] if d["nodes"]), key=lambda d: d["stage"])]
    makespan = sum(loads) + (n - 1) * max(loads)
    assert doc["predicted_steady_ms_per_batch"] == pytest.approx(res["max_load"])
    assert doc["predicted_steady_samples_per_s"] == pytest.approx(3 * 1e3 / res["max_load"])
    assert doc["predicted_steady_ms_per_sample"] == pytest.approx(res["max_load"] / 3)
    assert doc["predicted_samples_per_s"] == pytest.approx(3 * n * 1e3 / makespan)
    assert doc["measured_samples_per_s"] == pytest.approx(3 * n / doc["wall_s"])
    assert doc["measured_ms_per_batch"] == pytest.approx(1e3 * doc["wall_s"] / n)
    assert main(["run", gpt_path, str(tmp_path / "r.json"), "--samples", str(3 * n)]) == 0
    text = capsys.readouterr().out
    assert f"{n} batches of 3 samples ({3 * n} samples)" in text
    assert f"steady state {res['max_load']:.3f} ms per batch of 3" in text
    assert f"{3 * 1e3 / res['max_load']:.2f} samples/s" in text


def test_run_refuses_another_batch_size_than_the_result_was_placed_at(gpt_path, tmp_path, capsys):
    _place(gpt_path, tmp_path / "r.json", "--batch-size", "3", "--max-replicas", "1")
    capsys.readouterr()
    assert main(["run", gpt_path, str(tmp_path / "r.json"), "--batch-size", "1"]) == 2
    err = capsys.readouterr().err
    assert "placed at batch size 3" in err and "--batch-size 1" in err
    assert main(["run", gpt_path, str(tmp_path / "r.json"), "--dim", "batch=2"]) == 2
    assert "--dim batch=2" in capsys.readouterr().err


def test_run_of_a_stage_plan_prints_the_stage_evaluators_prediction(gpt_path, tmp_path, capsys):
    """A stage plan (replicas) at batch 2: run printed no prediction at all."""
    res = _place(gpt_path, tmp_path / "s.json", "--batch-size", "2", "--granularity", "layer")
    assert res["model"] == "stages" and res["time_unit"] == "s"
    capsys.readouterr()
    assert main(["run", gpt_path, str(tmp_path / "s.json"), "--samples", "4"]) == 0
    text = capsys.readouterr().out
    rate = 1 / res["max_load"]  # the plan's time per sample, in seconds
    assert "2 batches of 2 samples (4 samples)" in text
    assert f"steady state {2e3 * res['max_load']:.3f} ms per batch of 2" in text
    assert f"{rate:.2f} samples/s" in text and "stage evaluator" in text
    assert main(["run", gpt_path, str(tmp_path / "s.json"), "--samples", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch_size"] == 2 and doc["predicted_steady_samples_per_s"] == pytest.approx(rate)
    stage_ms = [2e3 * s["time_per_sample"] for s in res["stages"]]
    assert doc["predicted_stage_ms_per_batch"] == pytest.approx(stage_ms)


def test_stage_plan_prediction_deals_runs_to_replicas_round_robin():
    # stage 0: 1 s per sample with its 2 replicas side by side (each takes 2 s a run), stage 1: 0.6 s.
    # By hand, runs 0..3: stage 0 ends at 2, 2, 4, 4 s; stage 1 at 2.6, 3.2, 4.6, 5.2 s
    plan = {"time_unit": "s", "stages": [{"dataParallelDegree": 2, "time_per_sample": 1.0},
                                         {"dataParallelDegree": 1, "time_per_sample": 0.6}]}
    p = predicted_stage_plan(plan, 4)
    assert p.makespan == pytest.approx(5200.0) and p.time_per_sample == pytest.approx(1300.0)
    assert p.steady_time_per_sample == pytest.approx(1000.0)
    assert p.stage_loads == pytest.approx((1000.0, 600.0))
    assert predicted_stage_plan(plan, 4, batch_size=3).makespan == pytest.approx(3 * 5200.0)
