"""The in-memory ONNX API and the onnx_ir passes give exactly the placement of the file path."""

import json
import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx_ir.passes.common import RemoveUnusedNodesPass, TopologicalSortPass

import placement
from graphs.errors import InputError
from graphs.onnx_workload import onnx_workload
from graphs.transformer import transformer_model
from placement.inmemory import placement_result
from placement.onnx_export import annotate as annotate_proto
from placement.onnx_export import read_annotations, split_model, verify_split
from placement.passes import PlacementPass, SplitPass, SplitResult
from placement.results import result_dict
from solvers.base import SolveOptions
from tests.onnx_models import control_flow_model, small_cnn

MODELS = {
    "cnn": lambda: small_cnn(),
    "decoder": lambda: transformer_model(layers=2, hidden=64, decoder=True),
    "encoder-generated": lambda: transformer_model(layers=2, hidden=64, weights="generated"),
    "control-flow": control_flow_model,
}
CASES = [("cnn", "a100:2,cpu:1", False), ("decoder", "t4:3", False), ("decoder", "a100:2,cpu:1", True),
         ("encoder-generated", "cpu:3", False), ("control-flow", "a100:1,cpu:2", False)]


def _by_path(tmp_path, model, devices, training, **kw):
    """The file's one-device-per-stage placement (the front end and :func:`placement.place`)."""
    path = os.path.join(tmp_path, "m.onnx")
    onnx.save(model, path)
    w = onnx_workload(path, devices, training=training, **kw)
    return path, placement.place(w.graph, w.cluster)


def _file_plan(path, devices, training) -> dict:
    """What ``placement place`` writes for the file: its default, the stage plan."""
    from placement.cli import main

    out = path + ".json"
    args = ["place", path, "--devices", devices, "--out", out]
    assert main(args + (["--training"] if training else [])) == 0
    with open(out) as f:
        return json.load(f)


def _same(a, b):
    assert a.graph.names == b.graph.names
    assert a.status == b.status
    assert np.array_equal(a.assignment, b.assignment)
    assert a.max_load == b.max_load
    assert np.array_equal(a.graph.compute, b.graph.compute)
    assert np.array_equal(a.graph.memory, b.graph.memory)


STAGE_KEYS = ("nodes", "operators", "kind", "devices", "dataParallelDegree", "tensorParallelDegree",
              "TMPCids", "time_per_sample")


def _same_plan(p, data):
    """``p`` (a stage plan of :func:`placement.place_model`) is the plan the file gives."""
    assert p.model == "stages"
    mine = placement_result(p)
    assert mine["status"] == data["status"] and mine["objective"] == data["objective"]
    assert [{k: s[k] for k in STAGE_KEYS} for s in mine["stages"]] == \
        [{k: s[k] for k in STAGE_KEYS} for s in data["stages"]]
    assert mine["problem"] == data["problem"]


@pytest.mark.parametrize("name,devices,training", CASES)
def test_proto_ir_path_and_pass_give_the_file_placement(tmp_path, name, devices, training, capsys):
    model = MODELS[name]()
    path, ref = _by_path(tmp_path, model, devices, training)
    plan = _file_plan(path, devices, training)
    capsys.readouterr()
    _same_plan(placement.place_model(model, devices, training=training), plan)
    _same(placement.place_model(model, devices, training=training, max_replicas=1), ref)
    _same(placement.place_model(path, devices, training=training, max_replicas=1), ref)
    irm = ir.serde.deserialize_model(model)
    _same_plan(placement.place_model(irm, devices, training=training), plan)
    _same(placement.place_model(irm, devices, training=training, max_replicas=1), ref)
    p = PlacementPass(devices=devices, training=training, max_replicas=1)
    result = p(irm)
    assert result.modified and result.model is irm
    _same(p.placement, ref)
    # the pass annotated what annotate() writes into a proto, node for node
    expected = read_annotations(annotate_proto(model, result_dict(ref)))
    assert read_annotations(ir.serde.serialize_model(irm)) == expected
    staged = PlacementPass(devices=devices, training=training)
    staged(irm)
    _same_plan(staged.placement, plan)
    expected = read_annotations(annotate_proto(model, plan))
    assert read_annotations(ir.serde.serialize_model(irm)) == expected
    assert capsys.readouterr().out == ""


def test_batch_size_costs_table_and_options_pass_through(tmp_path):
    model = transformer_model(layers=1, hidden=32, decoder=True)
    _, ref = _by_path(tmp_path, model, "t4:2", False, batch_size=4)
    _same(placement.place_model(model, "t4:2", batch_size=4, max_replicas=1), ref)
    names = ref.graph.names
    table = {"unit": "ms", "compute": {n: {"t4": 1.0} for n in names}}
    p = placement.place_model(model, "t4:2", costs=table)
    assert np.all(p.graph.compute == 1.0)


def test_annotate_returns_the_type_it_was_given_and_leaves_the_input_alone():
    model = transformer_model(layers=2, hidden=64, decoder=True)
    p = placement.place_model(model, "t4:3", max_replicas=1)
    expected = read_annotations(annotate_proto(model, result_dict(p)))
    out = placement.annotate(model, p)
    assert isinstance(out, onnx.ModelProto) and out is not model
    assert read_annotations(out) == expected and read_annotations(model) == {}
    irm = ir.serde.deserialize_model(model)
    out_ir = placement.annotate(irm, p)
    assert isinstance(out_ir, ir.Model) and out_ir is not irm
    assert read_annotations(ir.serde.serialize_model(out_ir)) == expected
    assert all(not n.metadata_props for n in irm.graph)
    stages = {int(a["stage"]) for a in expected.values()}
    assert len(stages) == 3


def _check_runs(model, stages, manifest):
    protos = [s if isinstance(s, onnx.ModelProto) else ir.serde.serialize_model(s) for s in stages]
    rep = verify_split(model, protos, manifest)
    assert rep.ok, rep.max_abs_diff
    return rep


def test_split_in_memory_matches_the_file_split_and_runs():
    model = transformer_model(layers=2, hidden=64, decoder=True)
    p = placement.place_model(model, "t4:3", max_replicas=1)
    ref = split_model(model, result_dict(p))
    stages, manifest = placement.split(model, p)
    assert manifest == ref.manifest()
    assert all(isinstance(s, onnx.ModelProto) for s in stages) and len(stages) == 3
    assert [s.SerializeToString() for s in stages] == [s.model.SerializeToString() for s in ref.submodels]
    _check_runs(model, stages, manifest)
    # the onnx_ir route: the same manifest, stages that share the original weights
    irm = ir.serde.deserialize_model(model)
    ir_stages, ir_manifest = placement.split(irm, p)
    assert ir_manifest == manifest
    weights = {v.name: v.const_value for v in irm.graph.initializers.values()}
    shared = 0
    for s in ir_stages:
        assert isinstance(s, ir.Model)
        for name, v in s.graph.initializers.items():
            if v.const_value.size > 4096:
                assert v.const_value is weights[name]
                shared += 1
    assert shared >= 6  # the embeddings, every projection of both layers and the head
    _check_runs(model, ir_stages, ir_manifest)


def test_external_data_already_in_memory_is_used_as_is(tmp_path):
    model = transformer_model(layers=2, hidden=64, decoder=True)
    path = os.path.join(tmp_path, "ext.onnx")
    copy = onnx.ModelProto.FromString(model.SerializeToString())  # saving externalises the proto it saves
    onnx.save(copy, path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
              size_threshold=1024)
    w = onnx_workload(path, "t4:3")
    ref = placement.place(w.graph, w.cluster)
    loaded = onnx.load(path)  # weights read into the proto
    lazy = ir.load(path)  # weights left in the file, read on demand
    _same(placement.place_model(loaded, "t4:3", max_replicas=1), ref)
    _same(placement.place_model(lazy, "t4:3", max_replicas=1), ref)
    stages, manifest = placement.split(lazy, ref)
    # the stages refer to the weights file like the model does; loading them is up to the caller
    assert any(isinstance(v.const_value, ir.ExternalTensor)
               for s in stages for v in s.graph.initializers.values())
    _check_runs(model, [ir.external_data.load_to_model(s) for s in stages], manifest)


def test_pass_manager_composes_with_the_ir_passes_and_split_reads_the_annotations():
    model = transformer_model(layers=2, hidden=64, decoder=True)
    irm = ir.serde.deserialize_model(model)
    split = SplitPass()
    place = PlacementPass(devices="t4:3", max_replicas=1)
    result = ir.passes.PassManager([RemoveUnusedNodesPass(), TopologicalSortPass(), place, split])(irm)
    assert result.modified and result.model is irm
    assert len(split.stages) == 3 == len(split.manifest["submodels"])
    assert split.manifest == split_model(model, result_dict(place.placement)).manifest()
    _check_runs(model, split.stages, split.manifest)
    # called alone, the split pass returns its stages in the result
    alone = SplitPass(place.placement)(irm)
    assert isinstance(alone, SplitResult) and not alone.modified and alone.model is irm
    assert alone.manifest == split.manifest


def test_nothing_prints_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = transformer_model(layers=1, hidden=32, decoder=True)
    irm = ir.serde.deserialize_model(model)
    p = placement.place_model(irm, "t4:2")
    placement.annotate(irm, p)
    placement.split(irm, p)
    PlacementPass(devices="t4:2")(irm)
    SplitPass()(irm)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert os.listdir(tmp_path) == []


def test_bad_inputs_raise_input_errors():
    with pytest.raises(InputError, match="onnx.ModelProto, an onnx_ir.Model or a path"):
        placement.place_model(42, "t4:2")
    model = small_cnn()
    with pytest.raises(InputError, match="carries no placement"):
        placement.split(model)
    with pytest.raises(InputError, match="no such file"):
        placement.place_model("/nonexistent/model.onnx")
    other = placement.place_model(transformer_model(layers=1, hidden=32), "t4:2")
    with pytest.raises(InputError, match="does not match the model"):
        placement.annotate(model, other)


def test_in_memory_api_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, placement, placement.passes\n"
            "from tests.onnx_models import small_cnn\n"
            "placement.split(small_cnn(), placement.place_model(small_cnn(), 't4:2'))\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    root = os.path.join(os.path.dirname(__file__), "..")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, timeout=120)


# --------------------------------------------------------------------------- stage plans (the default)
def test_the_default_is_the_stage_model_with_replicas_where_they_pay():
    """On eight A100s a model that fits one is best served by eight replicas: no plan can do better
    than its one-device time shared by eight devices (every device is busy all the time), and one
    stage with ``d = 8`` reaches it (inference: no gradients to resync)."""
    model = small_cnn()
    alone = placement.place_model(model, "a100:1", max_replicas=1).max_load
    p = placement.place_model(model, "a100:8")
    assert p.model == "stages" and p.status.value == "optimal" and p.evaluation is None
    assert p.max_load == pytest.approx(alone / 8, rel=1e-12)
    assert [(s.stage.d, s.stage.t, s.devices) for s in p.stages] == [(8, 1, 8)]
    assert p.device_of("conv") == "a100:0-7" and p.devices_of("conv") == [f"a100:{i}" for i in range(8)]
    assert p.latency is None and p.assignment.tolist() == [0] * p.graph.num_nodes
    one = placement.place_model(model, "a100:8", max_replicas=1)
    assert one.model == "one-device-per-stage" and one.max_load > p.max_load * 1.5


def test_layer_nodes_are_never_a_loss():
    """The README's decoder on ``t4:3``: layer nodes alone give 0.1617 ms per sample, worse than one
    device per stage (0.1372), because a layer node cannot be cut; the default refines to the operators
    and keeps their plan, which beats both."""
    model = transformer_model(layers=2, hidden=64, decoder=True)
    layers = placement.place_model(model, "t4:3", granularity="layer")
    one = placement.place_model(model, "t4:3", max_replicas=1)
    p = placement.place_model(model, "t4:3")
    assert layers.settings["granularity"] == "layer" and layers.max_load > one.max_load
    assert p.settings["granularity"] == "op" and "operator granularity" in p.solution.message
    assert p.max_load < one.max_load and p.max_load < layers.max_load
    assert p.status.value == "optimal"


def test_a_stage_plan_annotates_splits_and_runs():
    model = transformer_model(layers=2, hidden=64, decoder=True)
    p = placement.place_model(model, "t4:3")
    result = placement_result(p)
    devices = [s["devices"] for s in result["stages"]]
    annotated = placement.annotate(model, p)
    marks = read_annotations(annotated)
    for i, s in enumerate(result["stages"]):
        want = devices[i][0] if len(devices[i]) == 1 else f"{devices[i][0]}-{devices[i][-1].split(':')[1]}"
        for op in s["operators"]:
            assert marks[op]["stage"] == str(i) and marks[op]["device"] == want and marks[op]["kind"] == "t4"
    stages, manifest = placement.split(model, p)
    # t = 1: each replica one device
    assert [e["replica_devices"] for e in manifest["submodels"]] == [[[d] for d in ds] for ds in devices]
    degrees = [s["dataParallelDegree"] for s in result["stages"]]
    assert [e["replicas"] for e in manifest["submodels"]] == degrees
    _check_runs(model, stages, manifest)
    # the annotations alone give the same split (what SplitPass reads after PlacementPass)
    again, manifest2 = placement.split(annotated)
    assert manifest2 == manifest
    irm = ir.serde.deserialize_model(model)
    place, split = PlacementPass(devices="t4:3"), SplitPass()
    ir.passes.PassManager([place, split])(irm)
    assert place.placement.model == "stages" and split.manifest == manifest
    _check_runs(model, split.stages, split.manifest)


@pytest.mark.parametrize("kw,message", [
    ({"max_replicas": 0}, "max_replicas must be a positive integer"),
    ({"microbatches": -1}, "microbatches must be a positive integer"),
    ({"max_replicas": 1, "schedule": "gpipe"}, "schedule is a stage-model option; max_replicas=1"),
    ({"solver": "single", "granularity": "op"}, "granularity is a stage-model option; the single solver"),
    ({"max_replicas": 2, "options": SolveOptions(objective="latency")}, "objective 'latency'"),
])
def test_stage_options_are_honoured_or_refused(kw, message):
    with pytest.raises(InputError, match=message):
        placement.place_model(small_cnn(), "t4:2", **kw)


def test_what_only_one_device_per_stage_solves_keeps_that_placement(capfd):
    p = placement.place_model(small_cnn(), "t4:2", options=SolveOptions(objective="latency"))
    assert p.model == "one-device-per-stage" and p.objective == "latency" and p.latency is not None
    q = placement.place_model(small_cnn(), "t4:2", solver="local-search")
    assert q.model == "one-device-per-stage"
    out = capfd.readouterr()
    assert out.out == "" and out.err == ""  # HiGHS's banner included
