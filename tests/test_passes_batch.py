"""The onnx_ir pass pipeline (PlacementPass, then SplitPass from the annotations) cuts the model at the
input shape it was placed at, as placement.split(model, placement) does, whatever the options.

From a new-user review: ``PlacementPass(batch_size=4)`` then ``SplitPass()`` built stages at batch 1
(the annotations' summary did not record the batch size), which failed in onnxruntime at batch 4
(``Reshape ... requested shape:{16,64}``) under a manifest note saying batch=1 was "the input shape it
was placed at". Every reference here is a second method: the whole model run in onnxruntime, or
``placement.split`` given the Placement itself."""

import json

import numpy as np
import onnx_ir as ir
import pytest

import placement
from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.transformer import transformer_model
from placement.inmemory import placement_result
from placement.onnx_export import KEY_RESULT
from placement.passes import PlacementPass, SplitPass
from placement.results import recorded_input_shape
from solvers.base import SolveOptions

ort = pytest.importorskip("onnxruntime")

BATCH, SEQ, HIDDEN = 4, 16, 64


def _encoder():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(HIDDEN, 4, 256, batch_first=True, dropout=0.0)
    return torch, torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A 2-layer ``nn.TransformerEncoder`` exported by torch.onnx (TorchScript exporter) with a symbolic
    batch: its attention reshapes read the batch from ``Shape`` nodes the front end folds."""
    from tests.torch_models import export_onnx

    torch, enc = _encoder()
    path = tmp_path_factory.mktemp("enc") / "enc.onnx"
    return export_onnx(enc, path, torch.randn(BATCH, SEQ, HIDDEN))


@pytest.fixture(scope="module")
def encoder_seq(tmp_path_factory):
    """The same encoder with a symbolic ``seq`` dimension too (placed with ``dims``)."""
    import warnings

    torch, enc = _encoder()
    path = str(tmp_path_factory.mktemp("enc") / "enc_seq.onnx")
    axes = {"input": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(enc, (torch.randn(BATCH, SEQ, HIDDEN),), path, dynamo=False, input_names=["input"],
                          output_names=["output"], dynamic_axes=axes, opset_version=17)
    return path


def _pipeline(path, devices="t4:3", **options):
    """PlacementPass then SplitPass (from the annotations) on the model read as an onnx_ir model."""
    model = ir.load(path)
    place, split = PlacementPass(devices, **options), SplitPass()
    ir.passes.PassManager([place, split])(model)
    return model, place, split


def _run_stages(stages, feeds):
    """The stage models chained in onnxruntime; every tensor they produce, by name."""
    vals = dict(feeds)
    for st in stages:
        proto = ir.serde.serialize_model(st) if isinstance(st, ir.Model) else st
        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = sess.run(None, {i.name: vals[i.name] for i in sess.get_inputs()})
        vals.update({o.name: v for o, v in zip(sess.get_outputs(), outs)})
    return vals


def _runs_like_the_model(path, stages, batch=BATCH, seq=SEQ):
    x = np.random.default_rng(0).standard_normal((batch, seq, HIDDEN)).astype(np.float32)
    whole = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    got = _run_stages(stages, {"input": x})["output"]
    np.testing.assert_allclose(got, whole, atol=1e-4, rtol=1e-4)


def _serialised(stages) -> list[bytes]:
    return [ir.serde.serialize_model(s).SerializeToString() for s in stages]


def test_the_pass_pipeline_cuts_and_runs_at_the_batch_it_was_placed_at(encoder):
    model, place, split = _pipeline(encoder, batch_size=BATCH, tensor_parallel=False)
    held = [s for s in split.manifest["submodels"] if s.get("shapes_at")]
    assert held, "the case needs a stage holding values computed from the model's shapes"
    assert all(s["shapes_at"] == {"batch": BATCH} for s in held)
    assert split.manifest["notes"] and all(f"batch={BATCH} (the input shape it was placed at)" in n
                                           for n in split.manifest["notes"])
    _runs_like_the_model(encoder, split.stages)
    # the annotations say it
    assert json.loads(model.metadata_props[KEY_RESULT])["frontend"] == {"batch_size": BATCH, "dims": {}}


TABLE = {"unit": "ms", "batch_size": BATCH, "compute": {}}  # roofline everywhere, measured at batch 4
# every option of PlacementPass (place_model's), each as it changes the placement the split applies
OPTIONS = {
    "batch_size": {},
    "costs-table": {"costs": TABLE},
    "devices-mixed": {"devices": "a100:2,cpu:1"},
    "devices-DeviceSet": {"devices": parse_devices("t4:2,a100:1")},
    "training": {"training": True, "optimizer": "sgd", "backward_factor": 3.0},
    "max_replicas=1": {"max_replicas": 1, "tensor_parallel": None},
    "max_replicas=2": {"max_replicas": 2},
    "schedule+microbatches": {"schedule": "gpipe", "microbatches": 4},
    "granularity-layer": {"granularity": "layer", "devices": "cpu:3"},
    "solver-dp": {"solver": "dp", "tensor_parallel": None},
    "objective-latency": {"options": SolveOptions(objective="latency"), "tensor_parallel": None},
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_split_pass_cuts_what_placement_split_cuts_for_every_option(encoder, name):
    options = {"tensor_parallel": False, "batch_size": BATCH, **OPTIONS[name]}
    devices = options.pop("devices", "t4:3")
    options = {k: v for k, v in options.items() if v is not None}
    model, place, split = _pipeline(encoder, devices, **options)
    subs, manifest = placement.split(model, place.placement)
    assert split.manifest == manifest
    assert _serialised(split.stages) == _serialised(subs)
    _runs_like_the_model(encoder, split.stages)


@pytest.mark.parametrize("max_replicas", [None, 1])
def test_dims_survive_into_the_split_of_both_placements(encoder_seq, max_replicas):
    """``dims`` (a symbolic dimension other than the batch): the stage plan's annotations dropped it, and
    the one-device-per-stage placement's result did not record it at all (placement.split cut at
    seq=1, where the command line's result file records it)."""
    kw = {"tensor_parallel": False} if max_replicas is None else {"max_replicas": 1}
    model, place, split = _pipeline(encoder_seq, batch_size=BATCH, dims={"seq": SEQ}, **kw)
    at = {"batch": BATCH, "seq": SEQ}
    assert recorded_input_shape(placement_result(place.placement)) == (BATCH, {"seq": SEQ})
    for manifest, stages in ((split.manifest, split.stages), placement.split(model, place.placement)[::-1]):
        held = [s["shapes_at"] for s in manifest["submodels"] if s.get("shapes_at")]
        assert held and all(h == at for h in held)
        _runs_like_the_model(encoder_seq, stages)


def _strip_input_shape(model: ir.Model) -> None:
    """The annotations as written before the summary recorded the input shape."""
    summary = json.loads(model.metadata_props[KEY_RESULT])
    del summary["frontend"]
    model.metadata_props[KEY_RESULT] = json.dumps(summary)


@pytest.mark.parametrize("max_replicas", [None, 1])
def test_old_annotations_without_the_input_shape_are_refused_where_the_split_needs_it(encoder, max_replicas):
    kw = {"tensor_parallel": False} if max_replicas is None else {"max_replicas": 1}
    model, place, _ = _pipeline(encoder, batch_size=BATCH, **kw)
    _strip_input_shape(model)
    with pytest.raises(InputError, match=r"do not record the input shape it was placed at .* sub-model 1 "):
        SplitPass()(model)
    with pytest.raises(InputError, match="annotate the model again"):
        placement.split(ir.serde.serialize_model(model))
    # the placement itself still splits it
    assert SplitPass(place.placement)(model).manifest == placement.split(model, place.placement)[1]


def test_old_annotations_split_as_before_where_no_stage_depends_on_the_shape(encoder):
    from tests.onnx_models import small_cnn

    cases = [(ir.load(encoder), "cpu:3", {"granularity": "layer", "tensor_parallel": False}),  # layer cuts
             (ir.serde.deserialize_model(small_cnn()), "t4:3", {"max_replicas": 1})]  # symbolic batch "N"
    for model, devices, kw in cases:
        place = PlacementPass(devices, batch_size=BATCH, **kw)
        place(model)
        expected = placement.split(model, place.placement)
        assert len(expected[0]) > 1 and not any(s.get("shapes_at") for s in expected[1]["submodels"])
        _strip_input_shape(model)
        got = SplitPass()(model)
        assert got.manifest == expected[1]
        assert _serialised(got.stages) == _serialised(expected[0])


def test_a_tensor_parallel_stage_is_cut_alike_from_the_annotations_and_refused_alike_on_onnx_ir():
    """``tensor_parallel``: a ModelProto's annotations cut its tensor-parallel stage as the placement
    does; an onnx_ir model's split refuses it from either."""
    proto = transformer_model(layers=2, hidden=64, decoder=True)
    result = placement_result(placement.place_model(proto, "t4:3", batch_size=BATCH, tensor_parallel=False))
    k = max(range(len(result["stages"])), key=lambda i: result["stages"][i]["dataParallelDegree"])
    assert result["stages"][k]["dataParallelDegree"] == 2
    result["stages"][k].update(dataParallelDegree=1, tensorParallelDegree=2)
    annotated = placement.annotate(proto, result)
    assert json.loads({p.key: p.value for p in annotated.metadata_props}[KEY_RESULT])["frontend"] == \
        {"batch_size": BATCH, "dims": {}}
    subs, manifest = placement.split(annotated, result)
    assert "tensor_parallel" in manifest["submodels"][k]
    subs2, manifest2 = placement.split(annotated)
    assert manifest2 == manifest

    def serialised(models):  # a tensor-parallel stage's entry: its rank models, rank by segment
        return [[[m.SerializeToString() for m in rank] for rank in s] if isinstance(s, tuple)
                else s.SerializeToString() for s in models]

    assert serialised(subs2) == serialised(subs)
    irm = ir.serde.deserialize_model(proto)
    with pytest.raises(InputError, match=f"stage {k} is tensor-parallel"):
        placement.split(irm, result)
    with pytest.raises(InputError, match=f"stage {k} is tensor-parallel"):
        SplitPass()(ir.serde.deserialize_model(annotated))


@pytest.mark.parametrize("max_replicas", ["1", "2"])
def test_the_command_lines_annotated_model_splits_at_the_batch_it_was_placed_at(encoder, tmp_path, capsys,
                                                                               max_replicas):
    """``placement split MODEL RESULT --annotated A.onnx`` writes the summary through
    :func:`placement.onnx_export.annotate`, which recorded no input shape: ``placement.split(A.onnx)`` from
    those annotations was refused (a stage holds values computed from the shape). The whole model run in
    onnxruntime is the reference."""
    from placement.cli import main

    result, annotated = tmp_path / "r.json", tmp_path / "a.onnx"
    assert main(["place", encoder, "--devices", "t4:3", "--batch-size", str(BATCH), "--max-replicas",
                 max_replicas, "--out", str(result)]) == 0
    assert main(["split", encoder, str(result), "--out-dir", str(tmp_path / "parts"), "--annotated",
                 str(annotated)]) == 0
    capsys.readouterr()
    summary = json.loads({p.key: p.value for p in __import__("onnx").load(str(annotated)).metadata_props}
                         [KEY_RESULT])
    assert summary["frontend"] == {"batch_size": BATCH, "dims": {}}
    stages, manifest = placement.split(str(annotated))
    assert any(s.get("shapes_at") == {"batch": BATCH} for s in manifest["submodels"])
    _runs_like_the_model(encoder, stages)
