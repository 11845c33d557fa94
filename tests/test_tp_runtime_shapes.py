"""Tensor parallelism through heads Reshapes whose target shape the model computes at run time
(``Shape -> Slice/Gather -> Concat(with the heads and head size) -> Reshape``): the front end folds a
``Shape`` whose input's shape is known once the symbolic dimensions are fixed (graphs/onnx_loader.py), so
the split rule (graphs/onnx_variants.py, ``SplitLayout.refusal``) reads the target as a constant, and
``placement split`` writes each rank's target with its heads. Exports of torch's own modules and of a
hand-written attention, by the TorchScript exporter and by the dynamo one with a symbolic batch; every
split is run by onnxruntime rank by rank and compared with the whole model (verify_split), and the
folded values with the ones onnxruntime computes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch", reason="exports torch modules with torch.onnx.export")

from graphs.errors import InputError  # noqa: E402
from graphs.onnx_loader import load_onnx, parse_model  # noqa: E402
from graphs.onnx_variants import split_layout  # noqa: E402
from placement.onnx_export import split_stages, verify_split  # noqa: E402
from tests.test_tensor_parallel import stage_plan  # noqa: E402
from tests.test_tensor_parallel_offer import check_offers  # noqa: E402
from tests.test_tp_multihead import _block  # noqa: E402

E, S, B = 32, 8, 2  # embedding, sequence, batch of the hand-written models


def _export(module, path, *, dynamo: bool = False, batch: bool = False, example=None) -> str:
    """``torch.onnx.export`` of ``module`` on ``[B, S, E]`` (or ``example``): TorchScript at opset 17 or
    dynamo; ``batch``: a symbolic batch (``dynamic_axes`` / ``dynamic_shapes``)."""
    import warnings

    x = torch.randn(B, S, E) if example is None else example
    with warnings.catch_warnings():  # the exporters' deprecation and tracer warnings
        warnings.simplefilter("ignore")
        if dynamo:
            pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
            shapes = ({0: torch.export.Dim("batch")},) if batch else None
            torch.onnx.export(module, (x,), str(path), dynamo=True, input_names=["x"], output_names=["y"],
                              dynamic_shapes=shapes, verbose=False)
        else:
            axes = {"x": {0: "batch"}, "y": {0: "batch"}} if batch else None
            torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"],
                              output_names=["y"], dynamic_axes=axes)
    return str(path)


def _hand_written(heads: int = 4):
    """Two pre-norm blocks of a hand-written attention as HuggingFace writes it: ``bsz, q_len, _ =
    hidden.size()`` then ``q.view(bsz, q_len, heads, head_dim)``; separate q, k, v and output
    projections; every parameter random."""
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(E, E) for _ in range(4))

        def forward(self, h):
            b, s, _ = h.size()
            q, k, v = (p(h).view(b, s, heads, E // heads).transpose(1, 2) for p in (self.q, self.k, self.v))
            a = torch.softmax(q @ k.transpose(-1, -2) / (E // heads) ** 0.5, -1) @ v
            return self.o(a.transpose(1, 2).reshape(b, s, E))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.attn = nn.LayerNorm(E), Attention()

        def forward(self, x):
            return x + self.attn(self.ln(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(2))

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    return _random(Model())


def _encoder():
    """Two ``nn.TransformerEncoderLayer`` (4 heads of 8, batch first, no dropout)."""
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.TransformerEncoderLayer(E, 4, dim_feedforward=64, batch_first=True,
                                                                   dropout=0.0) for _ in range(2))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    return _random(Encoder())


def _random(m):
    """``m`` in eval mode with every parameter random (torch's zero biases would hide their slicing)."""
    torch.manual_seed(0)
    m.eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return m


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """The TorchScript exports, by name: ``mha`` (tests/test_tp_multihead's block: LayerNorm,
    ``nn.MultiheadAttention`` of 4 heads of 16, an MLP; 2 heads: ``mha2``) at a fixed shape, ``hand``
    (:func:`_hand_written`) with a symbolic batch, ``encoder`` (:func:`_encoder`) at a fixed shape."""
    d = tmp_path_factory.mktemp("runtime-shapes")
    x64 = torch.randn(B, S, 64)
    return {"mha": _export(_block(4), d / "mha.onnx", example=x64),
            "mha2": _export(_block(2), d / "mha2.onnx", example=x64),
            "hand": _export(_hand_written(), d / "hand.onnx", batch=True),
            "encoder": _export(_encoder(), d / "encoder.onnx")}


def _verify(model, plan, batch_size: int = 1):
    split = split_stages(model, plan)
    manifest = split.manifest()
    rep = verify_split(model, [s.model for s in split.submodels], manifest, batch_size=batch_size)
    assert rep.ok and rep.worst <= 1e-5, rep.max_abs_diff
    return split, manifest


def _collectives(manifest, k: int = 0) -> list[str]:
    return [c["op"] for c in manifest["submodels"][k]["tensor_parallel"]["collectives"]]


def _ort_values(path: str, names: list[str], batch: int = B) -> dict[str, np.ndarray]:
    """The tensors ``names`` of the model at ``path`` as onnxruntime computes them on a random input."""
    model = onnx.load(path)
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(x) for x in names)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, S, sess.get_inputs()[0].shape[2]), np.float32)
    return dict(zip(names, sess.run(names, {"x": x})))


def test_the_front_end_folds_the_shapes_torchscript_computes_for_multihead_attention(exports):
    """nn.MultiheadAttention (TorchScript, fixed shape): the fused q/k/v product is unflattened by a
    Reshape to ``Concat(Shape(qkv)[:-1], [3, 64])`` and the scale is ``Sqrt(Cast(Shape(q)[-1:]))``: both
    Shapes are folded (not operators), the target shape and the scale's operand are the values
    onnxruntime computes, and the Reshape's output shape, which ONNX shape inference could not follow
    through the exporter's Mod, is known once inferred again with them."""
    path = exports["mha"]
    g = load_onnx(path)
    assert {"/attn/Shape", "/attn/Shape_1", "/attn/Concat", "/attn/Cast"} <= g.shape_nodes
    assert not {"/attn/Shape", "/attn/Shape_1"} & set(g.names)
    want = _ort_values(path, ["/attn/Concat_output_0", "/attn/Cast_output_0", "/attn/Shape_output_0"])
    for x, v in want.items():
        assert np.array_equal(g.values[x], v), x
    assert g.values["/attn/Concat_output_0"].tolist() == [S, B, 3, 64]
    (unflatten,) = [op for op in g.ops if op.name == "/attn/Reshape_2"]
    assert unflatten.outputs[0].shape == (S, B, 3, 64) and not unflatten.sizes_estimated


@pytest.mark.parametrize("t", [2, 4])
def test_torchscript_multihead_attention_splits_t_ways_and_matches_the_model(exports, t):
    """4 heads: t = 2 and 4 split (q, k and v part by part behind the run-time unflatten) and the ranks
    combined match the model; one all-reduce (the output projection). A fixed shape: nothing of it is
    tied to a batch size."""
    model = onnx.load(exports["mha"])
    _, manifest = _verify(model, stage_plan(model, [], [t]))
    assert _collectives(manifest) == ["allreduce"] and "shapes_at" not in manifest["submodels"][0]


def test_torchscript_multihead_attention_offers_what_its_heads_allow(exports):
    """The cost model (operator nodes) offers the attention's head-holding operators 2 and 4 with 4
    heads (each split and verified), 2 only with 2 heads, and the splitter refuses the rest by name
    (tests/test_tensor_parallel_offer.check_offers); the first Reshape to ``[s, b*heads, dh]`` is where
    8 ways are refused."""
    for name, degrees in (("mha", {1, 2, 4}), ("mha2", {1, 2})):
        path = exports[name]
        layout = split_layout(load_onnx(path))
        first = next(i for i, op in enumerate(layout.ops) if layout.refusal(i, 8))
        assert layout.ops[first].name == "/attn/Reshape_3"
        assert "along the split axis" in layout.refusal(first, 8)
        held = {op.name for i, op in enumerate(layout.ops) if layout.refusal(i, 8) or layout.refusal(i, 4)}
        check_offers(path, {n: degrees for n in held}, granularity="op")


def test_the_hand_written_attention_splits_at_the_placed_batch(exports):
    """``q.view(bsz, q_len, heads, head_dim)`` with ``bsz, q_len = hidden.size()`` and a symbolic batch
    (TorchScript): the target is ``Concat(Shape(h)[0], Shape(h)[1], 4, 8)``, folded at the batch the
    result was placed at (3): t = 2 and 4 match the model at batch 3, the manifest says the ranks hold
    shapes at ``batch = 3``, and a check at another batch is refused by name. The blocks offer 2 and 4."""
    path = exports["hand"]
    model = onnx.load(path)
    g = load_onnx(path, batch_size=3)
    target = next(op.inputs[1].name for op in g.ops if op.name == "/blocks.0/attn/Reshape")
    assert g.values[target].tolist() == [3, S, 4, 8]
    assert np.array_equal(g.values[target], _ort_values(path, [target], batch=3)[target])
    for t in (2, 4):
        plan = {**stage_plan(model, [], [t]), "problem": {"batch_size": 3, "dims": {}}}
        split, manifest = _verify(model, plan, batch_size=3)
        assert _collectives(manifest) == ["allreduce"] * 2
        assert manifest["submodels"][0]["shapes_at"] == {"batch": 3}
        assert any("shapes at batch=3" in note for note in manifest["notes"])
        with pytest.raises(InputError, match=r"sub-model 0 .* at batch=3 .*not at batch=2"):
            verify_split(model, [s.model for s in split.submodels], manifest, batch_size=2)
    check_offers(path, {"blocks.0": {1, 2, 4}, "blocks.1": {1, 2, 4}})


def test_a_stage_without_the_shapes_input_holds_its_value(exports):
    """Stage 0 is block 0's LayerNorm and q, k, v projections; stage 1 (t = 1, then t = 2) starts at the
    heads Reshapes and does not receive the LayerNorm output block 0's Shapes read: it holds their
    value instead (its manifest entry says at which batch; block 1's Shapes, whose input it has, stay),
    and matches the model; the whole model in one stage keeps reading the shapes at run time, so it
    runs at another batch."""
    path = exports["hand"]
    model = onnx.load(path)
    names = list(parse_model(model).names)
    first = [n for n in names if n.startswith(("/blocks.0/ln/", "/blocks.0/attn/q/", "/blocks.0/attn/k/",
                                               "/blocks.0/attn/v/"))]
    assert len(first) == 7  # LayerNorm, 3 x (MatMul, bias Add)
    for t in (1, 2):
        plan = stage_plan(model, [], [1])  # one stage of every operator, cut in two by hand
        stage = plan["stages"][0]
        plan["stages"] = [{**stage, "nodes": first},
                          {**stage, "nodes": [n for n in names if n not in first], "tensorParallelDegree": t}]
        split, manifest = _verify(model, plan)
        assert manifest["submodels"][1]["shapes_at"] == {"batch": 1}
        assert "shapes_at" not in manifest["submodels"][0]
        if t == 1:  # block 1's Shapes read its own LayerNorm, at hand: they stay
            kinds = {n.name: n.op_type for n in split.submodels[1].model.graph.node}
            assert [kinds[f"/blocks.{b}/attn/Shape{s}"] for b in "01" for s in ("", "_1")] == \
                ["Constant", "Constant", "Shape", "Shape"]
    _verify(model, stage_plan(model, [], [1]), batch_size=3)


@pytest.fixture(scope="module")
def dynamo_mha(tmp_path_factory):
    """tests/test_tp_multihead's block (4 heads) exported by dynamo with a symbolic batch: its k is
    transposed through ``Reshape(Concat(Shape(k)[:-2], Shape(k)[-1:], Shape(k)[-2:-1]))``, the heads read
    from the shape at run time."""
    d = tmp_path_factory.mktemp("dynamo-mha")
    return _export(_block(4), d / "mha.onnx", dynamo=True, batch=True, example=torch.randn(B, S, 64))


def test_dynamo_multihead_attention_with_a_symbolic_batch_splits_at_the_placed_batch(dynamo_mha):
    """The Shape the dynamo exporter reads k's heads and the batch from is folded at the placed batch
    (3): t = 2 and 4 match the model there, refused 8 ways at the heads Reshape; t = 1 keeps the Shape
    (it runs at batch 2 too)."""
    model = onnx.load(dynamo_mha)
    g = load_onnx(dynamo_mha, batch_size=3)
    shapes = [op for op in model.graph.node if op.op_type == "Shape"]
    assert shapes and all(op.name in g.shape_nodes for op in shapes)
    for t in (2, 4):
        plan = {**stage_plan(model, [], [t]), "problem": {"batch_size": 3, "dims": {}}}
        _, manifest = _verify(model, plan, batch_size=3)
        assert _collectives(manifest) == ["allreduce"]
        assert manifest["submodels"][0]["shapes_at"] == {"batch": 3}
    with pytest.raises(InputError, match=r"tensor-parallel degree 8\): operator '\w+' \(Reshape\).*heads"):
        split_stages(model, stage_plan(model, [], [8]))
    _, manifest = _verify(model, stage_plan(model, [], [1]), batch_size=2)
    assert "shapes_at" not in manifest["submodels"][0]


@pytest.mark.parametrize("t", [2, 4])
def test_torchscript_transformer_encoder_layers_split_and_match(exports, t):
    """Two nn.TransformerEncoderLayer (TorchScript, fixed shape): each layer's attention and
    feed-forward split t ways, two all-reduces per layer; the cost model offers each layer 1, 2, 4."""
    model = onnx.load(exports["encoder"])
    _, manifest = _verify(model, stage_plan(model, [], [t]))
    assert _collectives(manifest) == ["allreduce"] * 4
    if t == 2:
        check_offers(exports["encoder"], {"layers.0": {1, 2, 4}, "layers.1": {1, 2, 4}})


def _unknown_length_model():
    """``x [2, 8, 32]`` with its positions filtered by ``Compress(x, keep, axis=1)`` (a length known only
    at run time), then an attention layer ``l0`` whose heads Reshape reads ``Shape(xc)[:2]`` and an MLP
    ``l1`` (32 -> 64 -> 32)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n) for n, s in
             (("wq", (32, 32)), ("wk", (32, 32)), ("wv", (32, 32)), ("wo", (32, 32)), ("w1", (32, 64)),
              ("w2", (64, 32)))]
    inits += [nh.from_array(np.array([4, 8], np.int64), "heads"),
              nh.from_array(np.array([32], np.int64), "e")]
    nodes = [h.make_node("Compress", ["x", "keep"], ["xc"], name="compress", axis=1),
             h.make_node("Shape", ["xc"], ["bs"], name="l0/shape", end=2),
             h.make_node("Concat", ["bs", "heads"], ["heads_shape"], name="l0/heads_shape", axis=0),
             h.make_node("Concat", ["bs", "e"], ["merge_shape"], name="l0/merge_shape", axis=0)]
    for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [h.make_node("MatMul", ["xc", f"w{p}"], [p], name=f"l0/{p}"),
                  h.make_node("Reshape", [p, "heads_shape"], [f"{p}4"], name=f"l0/{p}_heads"),
                  h.make_node("Transpose", [f"{p}4"], [f"{p}t"], name=f"l0/{p}_t", perm=perm)]
    nodes += [h.make_node("MatMul", ["qt", "kt"], ["scores"], name="l0/scores"),
              h.make_node("Softmax", ["scores"], ["probs"], name="l0/softmax", axis=-1),
              h.make_node("MatMul", ["probs", "vt"], ["ctx"], name="l0/context"),
              h.make_node("Transpose", ["ctx"], ["ctx_t"], name="l0/context_t", perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ctx_t", "merge_shape"], ["merged"], name="l0/merge"),
              h.make_node("MatMul", ["merged", "wo"], ["attn"], name="l0/out"),
              h.make_node("Add", ["xc", "attn"], ["r0"], name="l0/residual"),
              h.make_node("MatMul", ["r0", "w1"], ["f1"], name="l1/fc1"),
              h.make_node("Relu", ["f1"], ["a1"], name="l1/relu"),
              h.make_node("MatMul", ["a1", "w2"], ["y"], name="l1/fc2")]
    graph = h.make_graph(nodes, "unknown_length", [h.make_tensor_value_info("x", T.FLOAT, [2, 8, 32]),
                                                   h.make_tensor_value_info("keep", T.BOOL, [8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, None, 32])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_heads_shape_that_stays_unknown_is_refused_by_name(tmp_path):
    """``Compress`` leaves the length unknown: the Shape reading it stays an operator, the heads Reshape's
    target is computed at run time and the split is refused there by name (the cost model offers ``l0``
    no degree); the MLP ``l1`` splits every way and matches the model."""
    model = _unknown_length_model()
    path = str(tmp_path / "unknown.onnx")
    onnx.save(model, path)
    g = load_onnx(path)
    assert "l0/shape" in g.names and not g.shape_nodes
    layout = split_layout(g)
    reason = layout.refusal(g.names.index("l0/q_heads"), 2)
    assert "target shape (heads_shape) is not a constant of the model (computed at run time)" in reason
    with pytest.raises(InputError, match=r"'l0/q_heads' \(Reshape\).*computed at run time"):
        split_stages(model, stage_plan(model, [], [2]))
    check_offers(path, {"l0": {1}, "l1": {1, 2, 4, 8}})
