"""A tensor several operators read: the parameter count holds it once, the memory of every operator that
reads it holds it (graphs.onnx_loader.OnnxGraph's doc).

TorchScript's ``torch.onnx`` exporter stores a parameter equal to an earlier one once and reads it
through an ``Identity`` node (the identical layers of an untrained ``nn.TransformerEncoder``, a module
applied twice); the front end folded that ``Identity`` into a tensor of its own name and counted it
again, so the legacy export of a 2-layer encoder read 99,968 parameters where its file stores 49,792,
and a model whose one block runs twice counted the block's weight twice (1,584, against the dynamo
export's 1,328 of the same model). The expected counts below are hand counts of the tensors the file
stores, or a direct read of the file's initializers, never the loader's own output."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _save(tmp_path, name, nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(m, path)
    return path


def _weight(name, shape, seed):
    return nh.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


# --------------------------------------------------------------------------- hand-built models
@pytest.mark.parametrize("via_identity", [False, True])
def test_one_weight_two_readers_counts_once_and_each_reader_holds_it(tmp_path, via_identity):
    """W [8, 8] read by two MatMuls, the second directly or through an Identity (TorchScript's way):
    64 parameters either way (the old count through the Identity: 128), 256 bytes in each reader."""
    from graphs.onnx_loader import load_onnx

    second = "W_alias" if via_identity else "W"
    nodes = ([h.make_node("Identity", ["W"], ["W_alias"], name="alias")] if via_identity else []) + [
        h.make_node("MatMul", ["x", "W"], ["y1"], name="mm1"),
        h.make_node("Relu", ["y1"], ["r"], name="relu"),
        h.make_node("MatMul", ["r", second], ["y"], name="mm2"),
    ]
    path = _save(tmp_path, "tied", nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 8])], [_weight("W", (8, 8), 0)])
    g = load_onnx(path)
    assert g.names == ("mm1", "relu", "mm2")  # the Identity is folded
    assert g.parameters == 64 and g.trainable_parameters == 64
    assert g.parameter_bytes == 256
    assert [op.param_bytes for op in g.ops] == [256, 0, 256]  # each reader holds the weight
    assert dict(g.shared) == {"W": (64, 2)}


def test_an_operator_reading_one_tensor_under_two_names_holds_it_once(tmp_path):
    """Sum(x, W, Identity(W)): one operator, one stored tensor of 256 bytes (was 512)."""
    from graphs.onnx_loader import load_onnx

    nodes = [h.make_node("Identity", ["W"], ["W_alias"], name="alias"),
             h.make_node("Sum", ["x", "W", "W_alias"], ["y"], name="sum")]
    path = _save(tmp_path, "twice", nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 8, 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 8, 8])], [_weight("W", (8, 8), 1)])
    g = load_onnx(path)
    assert g.names == ("sum",)
    assert g.ops[0].param_bytes == 256 and g.ops[0].trainable_bytes == 256
    assert g.parameters == 64 and not g.shared  # one reader


def test_an_identity_a_second_shape_inference_turns_into_a_constant_stays_the_same_tensor(tmp_path):
    """A Reshape target computed through a Mod (which shape inference does not follow) makes the loader
    infer again with its folded values as Constant nodes, the Identity of the small bias among them:
    the bias (8 elements, read by two Adds) still counts once: 64 + 8 parameters, not 64 + 16."""
    from graphs.onnx_loader import load_onnx

    nodes = [
        h.make_node("Identity", ["b"], ["b_alias"], name="alias"),
        h.make_node("Mod", ["shape", "big"], ["target"], name="mod"),
        h.make_node("MatMul", ["x", "W"], ["y1"], name="mm"),
        h.make_node("Add", ["y1", "b"], ["y2"], name="add1"),
        h.make_node("Reshape", ["y2", "target"], ["y3"], name="reshape"),
        h.make_node("Add", ["y3", "b_alias"], ["y"], name="add2"),
    ]
    ints = [nh.from_array(np.array(v, np.int64), k) for k, v in (("shape", [8, 8]), ("big", [100]))]
    inits = [_weight("W", (8, 8), 2), _weight("b", (8,), 3), *ints]
    path = _save(tmp_path, "refold", nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, [8, 8])], inits)
    g = load_onnx(path, batch_size=2)
    assert g.ops[g.index("reshape")].outputs[0].shape == (8, 8)  # known from the second inference
    assert g.parameters == 72 and g.parameter_bytes == 288
    assert g.shared == {"b": (8, 2)}
    assert g.ops[g.index("add2")].param_bytes == 32


@pytest.mark.parametrize("via_identity", [False, True])
def test_training_a_weight_read_by_a_forward_operator_and_an_unrelated_one(tmp_path, via_identity):
    """W [8, 8] read by MatMul(x, W) and by Add(z, W) on another input: in training each reader's
    forward node holds W (256 bytes) and its output, its backward twin W's gradient and Adam's two
    states (3 x 256); the model counts W once (64 parameters, 64 trainable), with or without an
    Identity between the Add and W."""
    from graphs.onnx_workload import prepare_onnx

    second = "W_alias" if via_identity else "W"
    nodes = ([h.make_node("Identity", ["W"], ["W_alias"], name="alias")] if via_identity else []) + [
        h.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
        h.make_node("Add", ["z", second], ["w"], name="add"),
    ]
    path = _save(tmp_path, "branches", nodes,
                 [h.make_tensor_value_info("x", T.FLOAT, ["N", 8]),
                  h.make_tensor_value_info("z", T.FLOAT, ["N", 8, 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 8]),
                  h.make_tensor_value_info("w", T.FLOAT, ["N", 8, 8])],
                 [_weight("W", (8, 8), 4)])
    g, w = prepare_onnx(path, "a100:2", training=True, optimizer="adam")
    assert g.parameters == 64 and g.trainable_parameters == 64 and g.shared == {"W": (64, 2)}
    graph = w.graph
    assert graph.meta["parameters"] == 64
    memory = dict(zip(graph.names, graph.memory.tolist()))
    assert memory["mm"] == 256 + 8 * 4  # W, and the stashed output y [1, 8]
    assert memory["add"] == 256 + 8 * 8 * 4  # W, and w [1, 8, 8]
    assert memory["mm_grad"] == memory["add_grad"] == 256 * 3


def test_inspect_says_what_it_did_with_a_shared_tensor(tmp_path, capsys):
    from placement.cli import main

    nodes = [h.make_node("Identity", ["W"], ["W_alias"], name="alias"),
             h.make_node("MatMul", ["x", "W"], ["y1"], name="mm1"),
             h.make_node("MatMul", ["y1", "W_alias"], ["y"], name="mm2")]
    path = _save(tmp_path, "tied", nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 8])], [_weight("W", (8, 8), 5)])
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "parameters: 64 (0.00 M, 256 B), trainable 64" in out
    assert ("  shared: 1 tensor (64 parameters) read by 2 operators each (tied weights, or equal tensors the "
            "exporter stored once): counted once here, in the memory of every operator that reads it") in out


# --------------------------------------------------------------------------- real torch.onnx exports
def _exports(tmp_path_factory, model, example, name):
    """The legacy (TorchScript) and dynamo exports of ``model``: {"legacy": path, "dynamo": path}."""
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")
    from tests.torch_models import export_onnx

    d = tmp_path_factory.mktemp(name)
    return {k: export_onnx(model, str(d / f"{name}_{k}.onnx"), example, dynamo=k == "dynamo")
            for k in ("legacy", "dynamo")}


def _stored_float_elements(path) -> int:
    """The elements of the file's floating-point tensors of more than one element (initializers and
    Constant nodes), read from the file itself."""
    m = onnx.load(path, load_external_data=False)
    tensors = list(m.graph.initializer) + [a.t for n in m.graph.node if n.op_type == "Constant"
                                           for a in n.attribute if a.name == "value"]
    floats = (T.FLOAT, T.FLOAT16, T.BFLOAT16, T.DOUBLE)
    return sum(int(np.prod(t.dims)) for t in tensors if t.data_type in floats and np.prod(t.dims) > 1)


def _randomise(model, seed=1):
    """Every parameter drawn afresh, so that no two are equal and no exporter merges any (only a
    parameter the model itself reads twice is one tensor)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def _block_twice():
    """Embedding(32, 16) -> Linear(16, 16) -> ReLU -> LayerNorm -> the same Linear again -> ReLU -> the
    embedding's transpose (a tied LM head), on [batch, 5] token ids."""
    import torch
    from torch import nn

    class BlockTwice(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.block, self.norm = nn.Embedding(32, 16), nn.Linear(16, 16), nn.LayerNorm(16)

        def forward(self, idx):
            x = torch.relu(self.block(self.emb(idx)))
            x = torch.relu(self.block(self.norm(x)))
            return nn.functional.linear(x, self.emb.weight)

    torch.manual_seed(0)
    return _randomise(BlockTwice().eval())


@pytest.fixture(scope="module")
def block_twice(tmp_path_factory):
    import torch

    return _exports(tmp_path_factory, _block_twice(), torch.randint(0, 32, (4, 5)), "block_twice")


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_a_block_applied_twice_counts_its_weight_once(block_twice, exporter):
    """Both exporters store the block's weight once (transposed for its MatMul; TorchScript reads it the
    second time through an Identity) and the LM head's transposed copy of the embedding beside it: by
    hand 32*16 (embedding) + 16*16 (block weight) + 16 (block bias) + 2*16 (norm) + 16*32 (the head's
    copy) = 1,328 parameters (the torch module has 816: it ties the head to the embedding). The two
    MatMuls that read the block weight each hold its 1,024 bytes."""
    from graphs.onnx_loader import load_onnx

    g = load_onnx(block_twice[exporter])
    assert g.parameters == 32 * 16 + 16 * 16 + 16 + 2 * 16 + 16 * 32 == 1328
    assert g.trainable_parameters == 1328 and g.parameter_bytes == 4 * 1328
    assert g.parameters == _stored_float_elements(block_twice[exporter])
    assert sorted(g.shared.values()) == [(16, 2), (256, 2)]  # the block's weight and bias, read twice
    readers = [op for op in g.ops if any(t.shape == (16, 16) for t in op.params)]
    assert [op.op_type for op in readers] == ["MatMul", "MatMul"]
    assert [sum(t.nbytes for t in op.params if t.shape == (16, 16)) for op in readers] == [1024, 1024]


def test_both_exports_of_a_block_applied_twice_agree_operator_by_operator(block_twice):
    from graphs.onnx_loader import load_onnx

    legacy, dynamo = (load_onnx(block_twice[k]) for k in ("legacy", "dynamo"))
    assert legacy.parameters == dynamo.parameters
    held = [sorted((op.op_type, op.param_elements) for op in g.ops if op.param_elements)
            for g in (legacy, dynamo)]
    assert held[0] == held[1]  # the operators that hold parameters, and how many each


def _encoder(randomise: bool):
    """torch's 2-layer nn.TransformerEncoder (width 64, 4 heads, FFN 256): it clones its layer, so an
    untrained one has two identical layers."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, dropout=0.0)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    return _randomise(enc) if randomise else enc


#: by hand, per layer: in_proj 3*64*64 + 3*64, out_proj 64*64 + 64, linear1 64*256 + 256,
#: linear2 256*64 + 64, two LayerNorms 4*64
ENCODER_PARAMETERS = 2 * (3 * 64 * 64 + 3 * 64 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64 + 4 * 64)


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    import torch

    x = torch.randn(4, 16, 64)
    return {"random": _exports(tmp_path_factory, _encoder(True), x, "enc_random"),
            "fresh": _exports(tmp_path_factory, _encoder(False), x, "enc_fresh")}


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_an_encoder_with_distinct_weights_has_the_hand_count_from_both_exporters(encoders, exporter):
    from graphs.onnx_loader import load_onnx

    assert ENCODER_PARAMETERS == 99_968
    g = load_onnx(encoders["random"][exporter])
    assert g.parameters == ENCODER_PARAMETERS == g.trainable_parameters
    assert not g.shared


@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_an_untrained_encoder_counts_what_its_file_stores(encoders, exporter):
    """The untrained encoder's two layers are equal: TorchScript stores the second layer's tensors once
    (read through Identity nodes), the dynamo exporter its small ones; either count is the file's
    float tensors, each once (legacy: 49,792, where the loader read 99,968), below the module's
    99,968."""
    from graphs.onnx_loader import load_onnx

    path = encoders["fresh"][exporter]
    g = load_onnx(path)
    assert g.parameters == _stored_float_elements(path) < ENCODER_PARAMETERS
    if exporter == "legacy":  # one layer's four matrices, stored once
        assert g.parameters < ENCODER_PARAMETERS // 2 + 1024
        assert sum(e for e, _ in g.shared.values()) == g.parameters  # every tensor read by both layers
