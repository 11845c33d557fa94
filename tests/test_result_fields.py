"""Result fields that say what they hold: ``compute_utilisation`` per sample and per batch, a stage's
``memory`` in named parts (docs/formats.md), the keys both forms of ``show --json`` carry
(docs/cli.md), ``evaluate`` of a split-max result, and ``show``'s words for a stage over capacity. Every
expected value comes from a hand computation or a second method (the model at batch 1, the stage
model's memory formula, the result file's own max-load)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from graphs.onnx_workload import onnx_workload
from placement.cli import main
from tests.onnx_models import save, small_cnn

# small_cnn by hand: Conv 4x3x3x3 + bias 4, Gemm 64x10 + bias 10: 762 float parameters
PARAM_BYTES = 4 * (4 * 3 * 3 * 3 + 4 + 64 * 10 + 10)
# its outputs per sample: conv and relu [4, 8, 8], pool and flatten [4, 4, 4], fc and softmax [10]
OUTPUT_BYTES_PER_SAMPLE = 4 * (2 * 4 * 8 * 8 + 2 * 4 * 4 * 4 + 2 * 10)


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    return save(small_cnn(), tmp_path_factory.mktemp("m") / "cnn.onnx")


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------------ compute_utilisation
@pytest.mark.parametrize("extra", [[], ["--max-replicas", "1"]], ids=["stages", "one-device-per-stage"])
def test_compute_utilisation_is_per_sample_with_the_batch_beside_it(cnn_path, capsys, extra):
    """At batch 8 the FLOPs per sample are the model's at batch 1 (second method: its FLOP counts at
    batch 1), the period per sample is the plan's max-load per sample, and the batch's are 8 times
    them; the achieved FLOP/s is either's FLOPs over its period."""
    per_sample = sum(onnx_workload(cnn_path, "a100:1", batch_size=1).graph.meta["flops"])
    data = _json(capsys, ["place", cnn_path, "--devices", "a100:2", "--batch-size", "8", "--json", *extra])
    cu = data["compute_utilisation"]
    # a stage plan's max-load is seconds per sample; one device per stage: ms per run of the batch
    period_ms = data["max_load"] * 1e3 if data["model"] == "stages" else data["max_load"] / 8
    assert cu["batch_size"] == 8
    assert cu["flops_per_sample"] == pytest.approx(per_sample, rel=1e-12)
    assert cu["flops_per_batch"] == pytest.approx(8 * per_sample, rel=1e-12)
    assert cu["period_ms"] == pytest.approx(period_ms, rel=1e-12)
    assert cu["batch_period_ms"] == pytest.approx(8 * period_ms, rel=1e-12)
    assert cu["achieved_flops_per_s"] == pytest.approx(per_sample / (period_ms * 1e-3), rel=1e-9)
    assert sum(d["flops_per_sample"] for d in cu["devices"]) == pytest.approx(per_sample, rel=1e-12)
    assert sum(d["flops_per_batch"] for d in cu["devices"]) == pytest.approx(8 * per_sample, rel=1e-12)
    assert "one batch of batch_size samples" in cu["definition"] and "period_ms" in cu["definition"]


# ------------------------------------------------------------------------------ a stage's memory
def test_an_inference_stage_records_its_parameters_and_outputs_held(cnn_path, capsys):
    """One stage on one A100 at batch 8 holds every parameter and every operator's output (the
    inference memory model): by hand 3,048 + 8 x 2,640 bytes; nothing is stashed and no weight
    version is kept, since inference updates no weight."""
    data = _json(capsys, ["place", cnn_path, "--devices", "a100:1", "--batch-size", "8", "--json"])
    (stage,) = data["stages"]
    held = PARAM_BYTES + 8 * OUTPUT_BYTES_PER_SAMPLE
    assert held == 3048 + 8 * 2640
    # a second method: the operator graph's memory (parameters + outputs for inference)
    assert float(onnx_workload(cnn_path, "a100:1", batch_size=8).graph.memory.sum()) == held
    assert stage["memory"] == {"fixed": held, "stash": 0.0, "trainable_weights": 0.0, "weight_versions": 1,
                               "peak": held, "capacity": stage["memory"]["capacity"]}
    assert "weights" not in stage["memory"]


def test_a_training_stage_records_its_trainable_weights_and_stash(cnn_path, capsys):
    """Training on one A100 at batch 8 with Adam: the fixed part is the weights, their gradients and
    Adam's two states (4 x 3,048 bytes), one micro-batch's outputs are stashed (8 x 2,640 bytes), and
    the trainable weights are the parameters' 3,048 bytes (inspect: 762 parameters, all trainable)."""
    data = _json(capsys, ["place", cnn_path, "--devices", "a100:1", "--batch-size", "8", "--training",
                          "--json"])
    (stage,) = data["stages"]
    mem = stage["memory"]
    assert stage["in_flight"] == 1
    assert mem["trainable_weights"] == PARAM_BYTES and mem["weight_versions"] == 1
    assert mem["fixed"] == 4 * PARAM_BYTES
    assert mem["stash"] == 8 * OUTPUT_BYTES_PER_SAMPLE
    assert mem["peak"] == 4 * PARAM_BYTES + 8 * OUTPUT_BYTES_PER_SAMPLE


def test_weight_versions_add_trainable_weights_to_the_peak(tmp_path):
    """PipeDream keeps one weight version per micro-batch in flight. The tiny Piper file of
    tests/test_api_problem.py with parameterSize 10: on (2, 2) replicas stage 0 has ``y = ceil(4 / 2)
    = 2`` in flight, so peak = A*y + B + (y - 1) W = 2*2 + 60 + 10 = 74; stage 1 ``y = 1``: 2 + 60."""
    from graphs.parallel import Stage, evaluate_plan
    from placement import read_piper
    from placement.results import stage_result_dict
    from tests.test_api_problem import _tiny_piper

    doc = _tiny_piper()
    for node in doc["nodes"]:
        node["TMPCs"]["1"][0]["parameterSize"] = 10.0
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(doc))
    problem = read_piper(str(path)).problem
    problem = dataclasses.replace(problem, schedule="pipedream")
    g = problem.graph
    plan = [Stage((u,), 0, 2, 1, (g.options[(u, 0, 1)][0],)) for u in (0, 1)]
    ev = evaluate_plan(problem, plan)
    assert ev.valid
    mems = [s["memory"] for s in stage_result_dict(problem, ev, status="feasible", solver="hand")["stages"]]
    assert [(m["fixed"], m["stash"], m["trainable_weights"], m["weight_versions"], m["peak"]) for m in mems] \
        == [(60.0, 4.0, 10.0, 2, 74.0), (60.0, 2.0, 10.0, 1, 62.0)]


# ------------------------------------------------------------------------------ show --json
COMMON = {"schedule", "microbatches", "samples_per_microbatch", "makespan", "time_per_sample",
          "time_per_microbatch", "steady_time_per_sample", "steady_time_per_microbatch", "samples_per_s",
          "steady_samples_per_s", "latency_per_microbatch", "bubble_fraction", "stages"}


@pytest.mark.parametrize("extra", [[], ["--max-replicas", "1"]], ids=["stages", "one-device-per-stage"])
def test_show_json_carries_the_same_keys_in_both_forms(cnn_path, tmp_path, capsys, extra):
    """Both forms give the times per sample and per micro-batch (one run of the batch: 8 samples) and
    samples per second; the streamed steady state is the plan's max-load (the result file's, a second
    method: per sample in seconds for a stage plan, per batch in ms with one device per stage)."""
    out = tmp_path / "r.json"
    assert main(["place", cnn_path, "--devices", "a100:2,t4:1", "--batch-size", "8", "-o", str(out),
                 *extra]) == 0
    capsys.readouterr()
    result = json.loads(out.read_text())
    doc = _json(capsys, ["show", str(out), "--json", "--no-draw"])
    sim = doc["simulation"]
    assert COMMON <= set(sim), COMMON - set(sim)
    assert doc["batch_size"] == 8 and sim["samples_per_microbatch"] == 8
    per_s = {"ms": 1e3, "s": 1.0}[doc["time_unit"]]
    assert sim["time_per_microbatch"] == pytest.approx(8 * sim["time_per_sample"], rel=1e-12)
    assert sim["steady_time_per_microbatch"] == pytest.approx(8 * sim["steady_time_per_sample"], rel=1e-12)
    assert sim["samples_per_s"] == pytest.approx(per_s / sim["time_per_sample"], rel=1e-9)
    assert sim["steady_samples_per_s"] == pytest.approx(per_s / sim["steady_time_per_sample"], rel=1e-9)
    steady = sim["steady_time_per_sample" if result["model"] == "stages" else "steady_time_per_microbatch"]
    assert steady == pytest.approx(result["max_load"], rel=1e-9)
    for row in sim["stages"]:
        assert {"stage", "kind", "devices", "d", "t"} <= set(row)


# ------------------------------------------------------------------------------ evaluate, show words
def test_evaluate_scores_a_split_max_result_on_split_max(cnn_path, tmp_path, capsys):
    """A split-max result re-scored: by hand on t4:0 = {conv, conv_grad}, cpu:0 = the rest (a host
    pays no communication), the t4's forward load is conv's compute and its send, its backward load
    conv_grad's compute and relu_grad's gradient received; split-max = max forward + max backward,
    here above the max-load (the busiest device's sum)."""
    out = tmp_path / "s.json"
    assert main(["place", cnn_path, "--devices", "t4:1,cpu:1", "--training", "--objective", "split-max",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["objective_name"] == "split-max"
    g = onnx_workload(cnn_path, "t4:1,cpu:1", batch_size=1, training=True).graph
    i = {n: k for k, n in enumerate(g.names)}
    on_t4 = ["conv", "conv_grad"]
    data["devices"] = [{"name": "t4:0", "nodes": on_t4},
                       {"name": "cpu:0", "nodes": [n for n in g.names if n not in on_t4]}]
    out.write_text(json.dumps(data))
    c, m = g.compute, g.comm  # kind 0 is t4, kind 1 cpu
    fwd = [c[0, i["conv"]] + m[0, i["conv"]],
           sum(c[1, i[n]] for n in ("relu", "pool", "flatten", "fc", "softmax"))]
    bwd = [c[0, i["conv_grad"]] + m[0, i["relu_grad"]],
           sum(c[1, i[n + "_grad"]] for n in ("relu", "pool", "flatten", "fc", "softmax"))]
    split, max_load = max(fwd) + max(bwd), max(f + b for f, b in zip(fwd, bwd))
    assert split > max_load * (1 + 1e-6)
    doc = _json(capsys, ["evaluate", cnn_path, str(out), "--json"])
    assert doc["objective_name"] == "split-max"
    assert doc["objective"] == pytest.approx(split, rel=1e-9)
    assert doc["max_load"] == pytest.approx(max_load, rel=1e-9)
    assert main(["evaluate", cnn_path, str(out)]) == 0
    assert f"split-max {split:.6g} ms, max-load {max_load:.6g} ms" in capsys.readouterr().out


def test_show_says_a_stage_over_capacity_in_plain_words(tmp_path, capsys):
    """The tiny Piper file with block's A = 30: 1F1B keeps one micro-batch in flight on it (30 + 60 =
    90 of 100 bytes), GPipe two (2 x 30 + 60 = 120 bytes): show under GPipe names the stage over its
    kind's capacity, in words that need no article before a kind's name (no 'a accelerator')."""
    from tests.test_api_problem import _tiny_piper

    doc = _tiny_piper()
    doc["nodes"][1]["TMPCs"]["1"][0]["memoryUsageA"] = 30.0
    path, out = tmp_path / "tiny.json", tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert main(["place", str(path), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["show", str(out), "--schedule", "gpipe", "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "stage 1 does NOT fit under gpipe: 120 B per device, over the 100 B each accelerator device " \
           "holds" in text
    assert "a accelerator" not in text
