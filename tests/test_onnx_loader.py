"""The ONNX loader: zoo models, hand-checked sizes, constant folding, control flow, bad files; and the
front end end to end (workload, DP placement, command line)."""

import json
import logging
import os
import re

import numpy as np
import pytest

from graphs.errors import CycleError, InputError
from graphs.model import Cluster, DeviceKind
from graphs.onnx_loader import load_onnx, parse_model, stable_names
from tests.onnx_models import control_flow_model, save, small_cnn, zoo

# operators after constant folding; parameters: every floating-point constant an operator reads, and
# the trainable ones (without BatchNormalization's running statistics)
ZOO = {
    #  name           ops   parameters    trainable     published figure (trainable)
    "resnet50": (176, 25_610_152, 25_557_032),  # ResNet-50: 25.6 M (25,557,032 in torchvision)
    "vgg19": (46, 143_667_240, 143_667_240),  # VGG-19: 143,667,240 (torchvision)
    "bvlc_alexnet": (24, 60_965_224, 60_965_224),  # BVLC AlexNet: 60,965,224 (~61 M)
    "squeezenet": (66, 1_235_496, 1_235_496),  # SqueezeNet 1.1: 1,235,496 (torchvision)
    "densenet121": (668, 8_146_152, 8_062_504),  # DenseNet-121 (Caffe, BN + Scale): 8,062,504 (Keras)
    "inception_v1": (143, 6_998_552, 6_998_552),  # GoogLeNet without auxiliary heads: ~7.0 M
    "inception_v2": (371, 11_234_792, 11_214_888),  # BN-Inception: ~11.2 M
    "shufflenet": (203, 1_420_152, 1_393_320),
    "zfnet512": (22, 87_250_536, 87_250_536),
}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_loads_with_expected_operators_and_parameters(name):
    ops, params, trainable = ZOO[name]
    g = load_onnx(zoo(name))
    assert g.num_ops == ops
    assert g.parameters == params
    assert g.trainable_parameters == trainable
    assert g.warnings == ()
    assert not any(op.op_type in ("ConstantOfShape", "Constant") for op in g.ops)  # folded
    assert all(op.output_bytes > 0 for op in g.ops)
    assert len(set(g.names)) == g.num_ops


def test_resnet50_is_25_6_million_parameters_and_4_1_gmacs():
    from graphs.costs import op_flops

    g = load_onnx(zoo("resnet50"))
    assert round(g.trainable_parameters / 1e6, 1) == 25.6
    macs = sum(op_flops(op)[0] for op in g.ops if op.op_type in ("Conv", "Gemm")) / 2
    assert 4.0e9 < macs < 4.2e9


def test_sizes_params_and_edges_checked_by_hand(tmp_path):
    g = load_onnx(save(small_cnn(), tmp_path / "cnn.onnx"), batch_size=2)
    assert g.names == ("conv", "relu", "pool", "flatten", "fc", "softmax")  # Constant* folded away
    by = {op.name: op for op in g.ops}
    # outputs: conv [2,4,8,8] f32, pool [2,4,4,4], flatten [2,64], fc [2,10]
    assert by["conv"].outputs[0].shape == (2, 4, 8, 8)
    assert by["conv"].output_bytes == 2 * 4 * 8 * 8 * 4
    assert by["relu"].output_bytes == 2048
    assert by["pool"].output_bytes == 2 * 4 * 4 * 4 * 4
    assert by["flatten"].output_bytes == 512
    assert by["fc"].output_bytes == 2 * 10 * 4
    assert by["softmax"].output_bytes == 80  # a graph output
    # parameters: conv 4*3*3*3 + 4; fc weight from ConstantOfShape [64,10], bias from a Constant node
    assert by["conv"].param_bytes == (108 + 4) * 4
    assert [p.name for p in by["fc"].params] == ["fc.w", "fc.b"]
    assert by["fc"].param_bytes == (640 + 10) * 4
    assert g.parameters == 108 + 4 + 640 + 10
    assert by["relu"].params == ()
    assert list(zip(g.src.tolist(), g.dst.tolist())) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert g.inputs[0].shape == (2, 3, 8, 8)


def test_batch_size_scales_activations_not_parameters(tmp_path):
    path = save(small_cnn(), tmp_path / "cnn.onnx")
    g1, g8 = load_onnx(path), load_onnx(path, batch_size=8)
    assert g1.batch_size == 1 and g8.batch_size == 8
    assert [op.output_bytes * 8 for op in g1.ops] == [op.output_bytes for op in g8.ops]
    assert g1.parameters == g8.parameters


def test_fixed_batch_model_is_rebatched_for_another_batch_size():
    # the file's batch is fixed: batch size 4 makes its leading dimension the batch (as the serving sweep
    # does), said in a warning naming the input and its shape, never ignored
    g4 = load_onnx(zoo("squeezenet"), batch_size=4)
    assert g4.batch_size == 4 and g4.ops[0].outputs[0].shape[0] == 4
    assert any("'data_0' [1, 3, 224, 224]" in w and "taken as the batch, at 4" in w for w in g4.warnings)
    g = load_onnx(zoo("squeezenet"))
    assert g.ops[0].outputs[0].shape[0] == 1 and g.batch_size == 1 and g.fixed_shape
    assert not g.warnings  # a leading 1: one run is one sample, nothing to warn about


def test_other_symbolic_dims_come_from_dims_or_default_to_one_with_a_warning():
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", 8])])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    g = parse_model(m, batch_size=3, dims={"seq": 5})
    assert g.ops[0].outputs[0].shape == (3, 5, 8) and g.warnings == ()
    g = parse_model(m, batch_size=3)
    assert g.ops[0].outputs[0].shape == (3, 1, 8)
    assert any("'seq'" in w for w in g.warnings)
    with pytest.raises(InputError, match="positive integer"):
        parse_model(m, batch_size=0)


def test_unnamed_and_duplicate_nodes_get_stable_unique_names():
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Relu", ["a"], ["b"], name="act"),
             h.make_node("Relu", ["b"], ["c"], name="act"), h.make_node("Relu", ["c"], ["d"], name="Relu_0")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                         [h.make_tensor_value_info("d", T.FLOAT, [2])])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    names = parse_model(m).names
    assert names == ("Relu_0_1", "act", "act_1", "Relu_0")
    assert stable_names(m.graph.node) == list(names)  # the same every time


def test_unsorted_nodes_are_ordered_topologically():
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", ["a"], ["b"], name="second"),
             h.make_node("Relu", ["x"], ["a"], name="first")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                         [h.make_tensor_value_info("b", T.FLOAT, [2])])
    g = parse_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    assert g.names == ("first", "second") and g.src.tolist() == [0] and g.dst.tolist() == [1]


def test_constant_only_subgraphs_are_folded_into_their_consumer():
    g = load_onnx(zoo("densenet121"))  # BN scale vectors go through Unsqueeze before the Mul
    assert "Unsqueeze" not in g.op_types()
    mul = next(op for op in g.ops if op.op_type == "Mul")
    assert mul.params and mul.params[0].shape == (64, 1, 1)


def test_external_data_is_not_read(tmp_path):
    import onnx

    path = str(tmp_path / "cnn.onnx")
    onnx.save(small_cnn(), path, save_as_external_data=True, size_threshold=100, location="cnn.weights")
    os.remove(tmp_path / "cnn.weights")  # the conv weights are there: the loader must not need them
    g = load_onnx(path, batch_size=2)
    assert g.external_data and g.warnings == ()
    assert g.parameters == 108 + 4 + 640 + 10
    assert g.ops[0].output_bytes == 2048


def test_external_small_shape_tensors_are_read_but_a_missing_file_is_only_a_warning(tmp_path):
    import onnx

    path = str(tmp_path / "cnn.onnx")
    onnx.save(small_cnn(), path, save_as_external_data=True, size_threshold=0, location="cnn.weights")
    g = load_onnx(path, batch_size=2)  # fc.w's shape [64, 10] is an external int64 tensor
    assert g.parameters == 108 + 4 + 640 + 10 and g.warnings == ()
    os.remove(tmp_path / "cnn.weights")
    g = load_onnx(path, batch_size=2)
    assert g.num_ops == 6 and any("could not determine" in w for w in g.warnings)


def test_control_flow_operators_stay_single_nodes_costed_from_their_bodies(tmp_path):
    from graphs.costs import op_flops

    g = load_onnx(save(control_flow_model(), tmp_path / "cf.onnx"), batch_size=2)
    assert g.names == ("proj", "branch", "loop", "scan", "final")
    by = {op.name: op for op in g.ops}
    # the bodies read W2 from the outer scope: it is the control-flow operators' parameter
    assert "W2" in [p.name for p in by["branch"].params]
    assert "W2" in [p.name for p in by["loop"].params]
    assert by["loop"].subgraphs[0].repeat == 5
    assert by["scan"].subgraphs[0].repeat == 2  # rows of the loop's [2, 32] output
    mm = 2 * 2 * 32 * 32  # [2,32] x [32,32]
    assert op_flops(by["branch"]) == (mm, True)  # the dearer branch
    assert op_flops(by["loop"]) == (5 * mm, True)
    assert op_flops(by["scan"]) == (2 * 32, True)
    assert by["loop"].output_bytes == 2 * 32 * 4
    assert g.parameters == 64 * 32 + 32 * 32 + 32


def test_unknown_operators_warn_and_get_a_conservative_cost_not_a_crash(tmp_path, caplog):
    from onnx import TensorProto as T
    from onnx import helper as h

    from graphs.costs import roofline_costs
    from graphs.devices import parse_devices

    nodes = [h.make_node("Relu", ["x"], ["a"], name="relu"),
             h.make_node("MyFancyOp", ["a"], ["b"], name="fancy", domain="com.example"),
             h.make_node("Relu", ["b"], ["c"], name="relu2")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 256])],
                         [h.make_tensor_value_info("c", T.FLOAT, None)])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])
    with caplog.at_level(logging.WARNING, logger="graphs.onnx"):
        g = parse_model(m)
    assert any("MyFancyOp (com.example)" in w for w in g.warnings)
    fancy = g.ops[1]
    assert fancy.output_bytes == 4 * 256 * 4  # estimated from its input
    c = roofline_costs(g, parse_devices("a100:1,cpu:1"))
    assert np.isfinite(c.compute).all() and (c.compute[:, 1] > c.compute[:, 0]).all()
    assert any("MyFancyOp" in w for w in c.warnings)


# --------------------------------------------------------------------------- bad files
def test_missing_empty_directory_and_garbage_files_raise_clear_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_onnx(tmp_path / "nope.onnx")
    with pytest.raises(InputError, match="directory"):
        load_onnx(tmp_path)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        load_onnx(tmp_path / "empty.onnx")
    (tmp_path / "garbage.onnx").write_bytes(b"\xff\xfe this is not a protobuf \x00\x01" * 10)
    with pytest.raises(InputError, match="not (a valid )?(an )?ONNX model"):
        load_onnx(tmp_path / "garbage.onnx")
    (tmp_path / "text.onnx").write_text("hello world, not a model")
    with pytest.raises(InputError):
        load_onnx(tmp_path / "text.onnx")


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.999])
def test_truncated_file_raises_a_clear_error(tmp_path, fraction):
    data = open(zoo("resnet50"), "rb").read()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(InputError) as e:
        load_onnx(path)
    assert str(path) in str(e.value)


def test_dangling_tensor_and_cycle_are_reported():
    from onnx import TensorProto as T
    from onnx import helper as h

    def model(nodes):
        graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                             [h.make_tensor_value_info("y", T.FLOAT, [2])])
        return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])

    with pytest.raises(InputError, match="'ghost'.*truncated"):
        parse_model(model([h.make_node("Add", ["x", "ghost"], ["y"], name="add")]))
    with pytest.raises(InputError, match="nothing to place"):
        parse_model(model([h.make_node("Constant", [], ["y"], name="c", value_floats=[1.0, 2.0])]))
    with pytest.raises(CycleError):
        parse_model(model([h.make_node("Add", ["x", "b"], ["a"], name="p"),
                           h.make_node("Relu", ["a"], ["b"], name="q"),
                           h.make_node("Relu", ["a"], ["y"], name="r")]))


# --------------------------------------------------------------------------- end to end
E2E_CLUSTERS = ["a100:4", "cpu:2,a100:2,t4:2"]


@pytest.mark.parametrize("name", ["resnet50", "vgg19", "squeezenet", "bvlc_alexnet"])
@pytest.mark.parametrize("devices", E2E_CLUSTERS)
def test_zoo_models_placed_with_the_dp(name, devices):
    from graphs.onnx_workload import onnx_workload
    from placement import place
    from placement.results import result_dict

    w = onnx_workload(zoo(name), devices)
    assert [k.name for k in w.cluster.kinds] == [d.split(":")[0] for d in devices.split(",")]
    p = place(w.graph, w.cluster, "dp")
    assert p.status.value == "optimal"
    assert p.evaluation.valid and p.evaluation.contiguous
    doc = result_dict(p)
    placed = [nm for d in doc["devices"] for nm in d["nodes"]]
    assert sorted(placed) == sorted(load_onnx(zoo(name)).names)  # every operator, by its ONNX name
    # more devices never hurt: the DP on one accelerator is no better
    one = place(w.graph, Cluster((DeviceKind("a100", 1, w.cluster.kind("a100").memory),)))
    assert p.max_load <= one.max_load + 1e-9


def test_training_workload_has_twins_and_optimizer_memory(tmp_path):
    from graphs.onnx_workload import onnx_workload
    from placement import place

    path = save(small_cnn(), tmp_path / "cnn.onnx")
    inf = onnx_workload(path, "a100:2,cpu:1", batch_size=2)
    sgd = onnx_workload(path, "a100:2,cpu:1", batch_size=2, training=True, optimizer="sgd")
    adam = onnx_workload(path, "a100:2,cpu:1", batch_size=2, training=True, optimizer="adam")
    n = inf.graph.num_nodes
    assert sgd.graph.num_nodes == 2 * n and sgd.graph.backward.sum() == n
    assert sgd.graph.names[n] == "conv_grad"
    # conv: forward holds its weights + stashed output; the twin the gradients (+ Adam's two moments)
    assert sgd.graph.memory[0] == 448 + 2048
    assert sgd.graph.memory[n] == 448 and adam.graph.memory[n] == 3 * 448
    np.testing.assert_allclose(sgd.graph.compute[:, n:], 2 * inf.graph.compute)
    p = place(adam.graph, adam.cluster)
    assert p.evaluation.valid


def test_cli_place_and_inspect(tmp_path, capsys):
    from graphs.reference import read_workload
    from placement.cli import main

    out = tmp_path / "result.json"
    assert main(["place", zoo("squeezenet"), "--devices", "a100:2,cpu:1", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "n0 .. " in text  # per-stage first/last operator names
    doc = json.loads(out.read_text())  # a stage plan (replicas by default): its stages list the operators
    assert sum(len(s["operators"]) for s in doc["stages"]) == 66 and "n0" in doc["stages"][0]["operators"]

    ref = tmp_path / "squeezenet.json"
    assert main(["inspect", zoo("squeezenet"), "--devices", "t4:2,cpu:4", "-o", str(ref)]) == 0
    text = capsys.readouterr().out
    assert "parameters: 1,235,496" in text and "largest tensors" in text and "FLOPs" in text
    w = read_workload(ref)  # the reference reader takes the annotated graph
    assert w.graph.num_nodes == 66 and w.cluster.kind("t4").count == 2  # the kind inspect -o names
    assert json.loads(ref.read_text())["nodes"][0]["opType"] == "Conv"
    # and the placer takes it too
    assert main(["place", str(ref)]) == 0
    capsys.readouterr()


def test_cli_training_and_bad_inputs(tmp_path, capsys):
    from placement.cli import main

    path = save(small_cnn(), tmp_path / "cnn.onnx")
    assert main(["place", path, "--devices", "a100:2", "--training", "--optimizer", "adam",
                 "--batch-size", "4", "--max-replicas", "1", "--json"]) == 0  # pipeline only
    doc = json.loads(capsys.readouterr().out)
    assert any("conv_grad" in d["nodes"] for d in doc["devices"])
    assert main(["place", path, "--devices", "a100:2", "--training", "--batch-size", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # replicated stages by default
    assert any("conv_grad" in s["operators"] for s in doc["stages"])
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    assert main(["place", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "bad.onnx" in err
    assert main(["place", path, "--devices", "z100:2"]) == 2
    assert "unknown device kind 'z100'" in capsys.readouterr().err
    assert main(["place", path, "--costs", "magic"]) == 2
    assert "unknown cost model" in capsys.readouterr().err
    assert main(["place", path, "--dim", "seq"]) == 2
    assert "NAME=N" in capsys.readouterr().err
    assert main(["place", path, "--dim", "seq=8", "--devices", "cpu:2", "--batch-size", "3"]) == 0
    assert re.search(r"cpu:(1|0-1)\b", capsys.readouterr().out)  # both cores: a stage each, or replicas
