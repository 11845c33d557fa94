"""What a command was given (placement/inputs.py), decided in one place: each kind of workload file
and result file, the model each takes, and the errors of a misread one."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from graphs.errors import InputError
from placement.inputs import holds_stage_plan, model_for, result_json, workload_kind
from tests.instances import WORKLOADS


def _write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_each_kind_of_workload(tmp_path):
    from tests.onnx_models import save, small_cnn

    onnx = save(small_cnn(), str(tmp_path / "cnn.onnx"))
    assert workload_kind(onnx) == "onnx"
    llm = _write(tmp_path, "config.json", {"num_hidden_layers": 2, "hidden_size": 64})
    assert workload_kind(llm) == "llm"
    assert workload_kind(_write(tmp_path, "other.json", {"nodes": []})) == "graph"
    assert workload_kind(str(tmp_path / "missing.json")) == "graph"  # its reader names the problem
    (tmp_path / "bad.json").write_text("{ not json")
    assert workload_kind(str(tmp_path / "bad.json")) == "graph"
    assert workload_kind("model.pb") == "graph"
    # an ONNX model asked to decode that is no decoder with a KV cache: one error naming why
    with pytest.raises(InputError, match="past key/value"):
        workload_kind(onnx, SimpleNamespace(context=128))


@pytest.mark.skipif(not os.path.isdir(os.path.join(WORKLOADS, "piper")),
                    reason=f"the shared workloads are not at {WORKLOADS}")
def test_the_shared_formats_are_recognised():
    assert workload_kind(os.path.join(WORKLOADS, "piper", "gnmt.json")) == "piper"
    assert workload_kind(os.path.join(WORKLOADS, "helix", "single24.json")) == "helix"
    ref = os.path.join(WORKLOADS, "throughput-inputs", "LayerGraphs", "gnmt_training.json")
    assert workload_kind(ref) == "graph"


def test_the_model_each_kind_takes(tmp_path):
    args = SimpleNamespace(workload="m.onnx", max_replicas=None, solver=None, objective="max-load",
                           latency_slo=None, batch_size=None, split=None, memory_limit=None, training=False)
    assert model_for("onnx", args) == "stages"  # replicas by default
    assert model_for("onnx", SimpleNamespace(**{**vars(args), "max_replicas": 1})) == "pipeline"
    assert model_for("onnx", SimpleNamespace(**{**vars(args), "solver": "local-search"})) == "pipeline"
    assert model_for("onnx", SimpleNamespace(**{**vars(args), "objective": "latency"})) == "pipeline"
    with pytest.raises(InputError, match="--objective latency"):  # asked for both: refused, never dropped
        model_for("onnx", SimpleNamespace(**{**vars(args), "objective": "latency", "max_replicas": 2}))
    assert model_for("piper", args) == "stages"
    assert model_for("graph", args) == "pipeline"
    assert model_for("helix", args) == "helix" and model_for("llm", args) == "llm"


def test_stage_plans_are_told_from_placements(tmp_path):
    stage = _write(tmp_path, "s.json", {"schema": "placement-result", "version": 2, "model": "stages",
                                        "stages": [{"nodes": ["a"], "kind": "a100", "dataParallelDegree": 1,
                                                    "tensorParallelDegree": 1}]})
    old = _write(tmp_path, "v1.json", {"format": "placement-replicated", "version": 1, "stages": []})
    one = _write(tmp_path, "p.json", {"schema": "placement-result", "version": 1, "devices": []})
    assert holds_stage_plan(result_json(stage)) and holds_stage_plan(result_json(old))
    assert not holds_stage_plan(result_json(one)) and not holds_stage_plan(None)
    assert not holds_stage_plan(stage)  # a path is not a result's JSON
