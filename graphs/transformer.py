"""Build transformer ONNX graphs: a BERT-style encoder or a GPT-style decoder, any depth and width.

The graphs look like exported ones: token embedding (``Gather``) plus learned position embeddings,
then per layer attention with separate Q, K and V projections (``MatMul`` + bias ``Add``), heads split
with ``Reshape``/``Transpose``, scaled scores, ``Softmax`` (with a causal mask in the decoder), the
context projection, and an MLP (``MatMul``, ``Gelu``, ``MatMul``), each block with a residual ``Add``
and ``LayerNormalization`` (after the block in the encoder, before it in the decoder). The decoder ends
with a final layer norm and a language-model head. Input ``input_ids`` is ``int64 [batch, seq_len]``
with a symbolic batch (``batch``); the output is the last hidden state (encoder) or the logits
(decoder). Opset 20 (``Gelu``); the models pass ``onnx.checker`` and run in onnxruntime.

``weights="random"`` stores every weight as an initializer (normal, std 0.02); ``"generated"`` stores
none: each weight is a ``ConstantOfShape`` node, as in the ONNX model-zoo test files, so a BERT-base
graph is a few hundred kilobytes. Node names follow ``layer{i}/attn/q_proj`` etc.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["transformer_model", "bert", "gpt"]

OPSET = 20


def transformer_model(*, layers: int = 2, hidden: int = 64, heads: int = 4, ffn: int | None = None,
                      vocab: int = 1000, seq_len: int = 16, decoder: bool = False, weights: str = "random",
                      seed: int = 0, name: str | None = None):
    """A transformer encoder (``decoder=False``) or decoder as an ``onnx.ModelProto``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if layers < 1 or hidden < 1 or heads < 1 or vocab < 1 or seq_len < 1:
        raise ValueError("layers, hidden, heads, vocab and seq_len must be positive")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if weights not in ("random", "generated"):
        raise ValueError("weights must be 'random' or 'generated'")
    ffn = ffn or 4 * hidden
    dh = hidden // heads
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = []

    def const(nm: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), nm))
        return nm

    def weight(nm: str, shape, fill: float | None = None) -> str:
        """A parameter: an initializer, or a ConstantOfShape generator."""
        if weights == "random":
            v = (np.full(shape, fill, np.float32) if fill is not None
                 else (rng.standard_normal(shape) * 0.02).astype(np.float32))
            return const(nm, v)
        shp = const(nm + "__shape", np.array(shape, dtype=np.int64))
        value = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.02 if fill is None else fill])
        nodes.append(helper.make_node("ConstantOfShape", [shp], [nm], value=value))
        return nm

    def node(op: str, inputs, nm: str, **attrs) -> str:
        nodes.append(helper.make_node(op, list(inputs), [nm], name=nm, **attrs))
        return nm

    def linear(x: str, nm: str, n_in: int, n_out: int) -> str:
        y = node("MatMul", [x, weight(nm + ".weight", [n_in, n_out])], nm)
        return node("Add", [y, weight(nm + ".bias", [n_out], 0.0)], nm + "/bias")

    def layer_norm(x: str, nm: str) -> str:
        return node("LayerNormalization", [x, weight(nm + ".weight", [hidden], 1.0),
                                           weight(nm + ".bias", [hidden], 0.0)], nm, axis=-1, epsilon=1e-5)

    split_shape = const("split_heads_shape", np.array([0, 0, heads, dh], dtype=np.int64))
    merge_shape = const("merge_heads_shape", np.array([0, 0, hidden], dtype=np.int64))
    scale = const("attn_scale", np.array(1.0 / math.sqrt(dh), dtype=np.float32))
    mask = None
    if decoder:
        causal = np.triu(np.full((seq_len, seq_len), -1e4, np.float32), k=1)
        mask = const("causal_mask", causal)

    def attention(x: str, p: str) -> str:
        q = node("Transpose", [node("Reshape", [linear(x, f"{p}/q_proj", hidden, hidden), split_shape],
                                    f"{p}/q_split")], f"{p}/q_heads", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, f"{p}/k_proj", hidden, hidden), split_shape],
                                    f"{p}/k_split")], f"{p}/k_heads", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, f"{p}/v_proj", hidden, hidden), split_shape],
                                    f"{p}/v_split")], f"{p}/v_heads", perm=[0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [q, k], f"{p}/scores"), scale], f"{p}/scale")
        if mask is not None:
            s = node("Add", [s, mask], f"{p}/causal_mask")
        a = node("Softmax", [s], f"{p}/softmax", axis=-1)
        c = node("MatMul", [a, v], f"{p}/context")
        c = node("Reshape", [node("Transpose", [c], f"{p}/context_t", perm=[0, 2, 1, 3]), merge_shape],
                 f"{p}/merge_heads")
        return linear(c, f"{p}/out_proj", hidden, hidden)

    def mlp(x: str, p: str) -> str:
        h = node("Gelu", [linear(x, f"{p}/fc1", hidden, ffn)], f"{p}/gelu")
        return linear(h, f"{p}/fc2", ffn, hidden)

    x = node("Gather", [weight("embeddings.word", [vocab, hidden]), "input_ids"], "embeddings/word")
    x = node("Add", [x, weight("embeddings.position", [seq_len, hidden])], "embeddings/position")
    if not decoder:
        x = layer_norm(x, "embeddings/norm")
    for i in range(layers):
        p = f"layer{i}"
        if decoder:  # pre-LN (GPT-2)
            x = node("Add", [x, attention(layer_norm(x, f"{p}/norm1"), f"{p}/attn")], f"{p}/attn_residual")
            x = node("Add", [x, mlp(layer_norm(x, f"{p}/norm2"), f"{p}/mlp")], f"{p}/mlp_residual")
        else:  # post-LN (BERT)
            x = layer_norm(node("Add", [x, attention(x, f"{p}/attn")], f"{p}/attn_residual"), f"{p}/norm1")
            x = layer_norm(node("Add", [x, mlp(x, f"{p}/mlp")], f"{p}/mlp_residual"), f"{p}/norm2")
    if decoder:
        x = layer_norm(x, "final_norm")
        out, width = node("MatMul", [x, weight("lm_head.weight", [hidden, vocab])], "lm_head"), vocab
    else:
        out, width = x, hidden
    graph = helper.make_graph(
        nodes, name or (f"gpt_l{layers}_h{hidden}" if decoder else f"bert_l{layers}_h{hidden}"),
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq_len])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", seq_len, width])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="placement.graphs.transformer")
    model.ir_version = min(model.ir_version, 10)  # readable by onnxruntime releases of the last years
    onnx.checker.check_model(model)
    return model


def bert(layers: int = 12, *, hidden: int = 768, heads: int = 12, seq_len: int = 128, vocab: int = 30522,
         weights: str = "generated", **kw):
    """A BERT-base-shaped encoder (defaults: 12 layers, width 768, 12 heads, sequence 128)."""
    return transformer_model(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab,
                             weights=weights, **kw)


def gpt(layers: int = 12, *, hidden: int = 768, heads: int = 12, seq_len: int = 128, vocab: int = 50257,
        weights: str = "generated", **kw):
    """A GPT-2-small-shaped decoder (defaults: 12 layers, width 768, 12 heads, sequence 128)."""
    return transformer_model(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab,
                             decoder=True, weights=weights, **kw)
