"""Layers read from real exporter output: ``torch.onnx``'s dynamo exporter records each operator's
module path (``pkg.torch.onnx.name_scopes``), the TorchScript one puts it in the node names
(``/blocks.0/ln2/...``). Either way ``blocks.0`` and ``blocks.1`` are two layers: before, both were
read as one layer ``blocks``, and a Llama-style model's 16 decoder layers as one ``model/layers``."""

from __future__ import annotations

import collections
import json

import pytest

pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")


def _export(tmp_path, model, example, name, dynamo=True):
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")
    from tests.torch_models import export_onnx

    return export_onnx(model, str(tmp_path / name), example, dynamic_batch=False, dynamo=dynamo)


@pytest.fixture(scope="module")
def gpt_exports(tmp_path_factory):
    from tests.torch_models import gpt, tokens

    d = tmp_path_factory.mktemp("gpt")
    return {dyn: _export(d, gpt(layers=4), tokens(2), f"gpt_{dyn}.onnx", dynamo=dyn) for dyn in (True, False)}


@pytest.mark.parametrize("dynamo", [True, False])
def test_gpt_blocks_are_separate_layers(gpt_exports, dynamo):
    from graphs.onnx_loader import load_onnx
    from graphs.onnx_workload import layer_keys

    keys = collections.Counter(layer_keys(load_onnx(gpt_exports[dynamo])))
    blocks = sorted(k for k in keys if "blocks" in k)
    assert blocks == [f"blocks.{i}" for i in range(4)], keys
    assert len({keys[b] for b in blocks}) == 1  # four identical blocks, the same operator count
    assert None not in keys


def test_the_dynamo_export_records_module_paths(gpt_exports):
    import onnx

    from graphs.onnx_loader import module_scope

    m = onnx.load(gpt_exports[True])
    scopes = [module_scope(n) for n in m.graph.node]
    assert sum(1 for s in scopes if s) > len(scopes) // 2
    assert any(s[:1] == ("blocks.2",) for s in scopes)


def test_the_default_training_plan_is_no_worse_than_pipeline_only(gpt_exports, capsys):
    """Item 8 of the one-model issue: with the blocks visible, the default plan (replicas) on
    ``a100:8,t4:8`` is no worse than ``--max-replicas 1`` (one device per stage)."""
    from placement.cli import main

    path = gpt_exports[True]
    base = ["place", path, "--training", "--devices", "a100:8,t4:8", "--json"]
    assert main(base) == 0
    stages = json.loads(capsys.readouterr().out)
    assert main(base + ["--max-replicas", "1"]) == 0
    pipeline = json.loads(capsys.readouterr().out)
    assert main(base + ["--granularity", "layer"]) == 0
    layers = json.loads(capsys.readouterr().out)
    assert layers["problem"]["granularity"] == "layer"
    # the default solves the layer nodes, then the operators, and keeps the better: never a loss
    assert stages["problem"]["granularity"] in ("layer", "op") and "operator granularity" in stages["message"]
    assert stages["objective"] <= layers["objective"] * (1 + 1e-12)
    assert stages["objective"] * 1e3 <= pipeline["max_load"] * (1 + 1e-9)  # seconds vs ms per sample


@pytest.mark.slow
def test_a_sixteen_layer_llama_export_keeps_its_layers(tmp_path, capsys):
    """A ``torch.onnx`` (dynamo) export of a 16-layer Llama-style decoder, wrapped as Hugging Face's
    are: at least 16 layer nodes, and a default training plan no worse than pure data parallelism."""
    from graphs.onnx_loader import load_onnx
    from graphs.onnx_workload import layer_keys
    from placement.cli import main
    from tests.torch_models import llama, tokens

    path = _export(tmp_path, llama(layers=16), tokens(2, 16, 256), "llama16.onnx")
    keys = set(layer_keys(load_onnx(path)))
    assert {f"model.layers.{i}" for i in range(16)} <= keys
    base = ["place", path, "--training", "--devices", "a100:4,t4:4,cpu:8", "--json"]
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["problem"]["granularity"] in ("layer", "op")  # op only when the operators do better
    assert main(base + ["--solver", "data-parallel"]) == 0
    dp = json.loads(capsys.readouterr().out)
    assert default["objective"] <= dp["objective"] * (1 + 1e-12)
