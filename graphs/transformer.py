"""Build transformer ONNX graphs: a BERT-style encoder, a GPT-style or a Llama-style decoder, any size.

The graphs look like exported ones: token embedding (``Gather``) plus learned position embeddings,
then per layer attention with separate Q, K and V projections (``MatMul`` + bias ``Add``), heads split
with ``Reshape``/``Transpose``, scaled scores, ``Softmax`` (with a causal mask in the decoder), the
context projection, and an MLP (``MatMul``, ``Gelu``, ``MatMul``), each block with a residual ``Add``
and ``LayerNormalization`` (after the block in the encoder, before it in the decoder). The decoder ends
with a final layer norm and a language-model head. Input ``input_ids`` is ``int64 [batch, seq_len]``
with a symbolic batch (``batch``); the output is the last hidden state (encoder) or the logits
(decoder). Opset 20 (``Gelu``); the models pass ``onnx.checker`` and run in onnxruntime.

:func:`llama_model` builds a Llama-style decoder the way ``torch.onnx`` exports one: RMSNorm written
out, rotary position embeddings (tables from a ``position_ids`` input, shared by every layer),
grouped-query attention, a SwiGLU MLP; :func:`llama` has TinyLlama's widths (16 layers: about 1,000
operators, 0.85 B parameters).

``weights="random"`` stores every weight as an initializer (normal, std 0.02); ``"generated"`` stores
none: each weight is a ``ConstantOfShape`` node, as in the ONNX model-zoo test files, so a BERT-base
graph is a few hundred kilobytes. Node names follow ``layer{i}/attn/q_proj`` etc.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["transformer_model", "bert", "gpt", "llama_model", "llama"]

OPSET = 20


class _Builder:
    """Collects nodes and initializers; ``weight`` makes a parameter per the ``weights`` mode."""

    def __init__(self, weights: str, seed: int):
        if weights not in ("random", "generated"):
            raise ValueError("weights must be 'random' or 'generated'")
        self.weights = weights
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def const(self, nm: str, value) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(value), nm))
        return nm

    def weight(self, nm: str, shape, fill: float | None = None) -> str:
        """A parameter: an initializer, or a ConstantOfShape generator."""
        from onnx import TensorProto, helper

        if self.weights == "random":
            v = (np.full(shape, fill, np.float32) if fill is not None
                 else (self.rng.standard_normal(shape) * 0.02).astype(np.float32))
            return self.const(nm, v)
        shp = self.const(nm + "__shape", np.array(shape, dtype=np.int64))
        value = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.02 if fill is None else fill])
        self.nodes.append(helper.make_node("ConstantOfShape", [shp], [nm], value=value))
        return nm

    def node(self, op: str, inputs, nm: str, **attrs) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, list(inputs), [nm], name=nm, **attrs))
        return nm

    def model(self, graph_name: str, seq_len: int, out: str, width: int, extra_inputs=()):
        """The checked ``ModelProto``: inputs ``input_ids [batch, seq_len]`` and ``extra_inputs`` (int64,
        same shape), output ``out``."""
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes, graph_name,
            [helper.make_tensor_value_info(x, TensorProto.INT64, ["batch", seq_len])
             for x in ("input_ids", *extra_inputs)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", seq_len, width])],
            initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="placement.graphs.transformer")
        model.ir_version = min(model.ir_version, 10)  # readable by onnxruntime releases of the last years
        onnx.checker.check_model(model)
        return model


def transformer_model(*, layers: int = 2, hidden: int = 64, heads: int = 4, ffn: int | None = None,
                      vocab: int = 1000, seq_len: int = 16, decoder: bool = False, weights: str = "random",
                      seed: int = 0, name: str | None = None):
    """A transformer encoder (``decoder=False``) or decoder as an ``onnx.ModelProto``."""
    if layers < 1 or hidden < 1 or heads < 1 or vocab < 1 or seq_len < 1:
        raise ValueError("layers, hidden, heads, vocab and seq_len must be positive")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    b = _Builder(weights, seed)
    const, weight, node = b.const, b.weight, b.node
    ffn = ffn or 4 * hidden
    dh = hidden // heads

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
    return b.model(name or (f"gpt_l{layers}_h{hidden}" if decoder else f"bert_l{layers}_h{hidden}"),
                   seq_len, out, width)


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


def llama_model(*, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int | None = None,
                ffn: int | None = None, vocab: int = 1000, seq_len: int = 16, rope_theta: float = 10000.0,
                eps: float = 1e-6, weights: str = "random", seed: int = 0, name: str | None = None):
    """A Llama-style decoder as an ``onnx.ModelProto``, shaped like a ``torch.onnx`` export of one.

    Token embedding (``Gather``, no position embedding); rotary position embeddings computed once
    (inverse frequencies times positions, ``Cos``/``Sin``) and applied to queries and keys in every layer
    (``rotate_half``: two ``Slice``, ``Neg``, ``Concat``); grouped-query attention with ``kv_heads``
    key/value heads (default ``heads``) repeated to ``heads`` by ``Unsqueeze``/``Expand``/``Reshape``;
    bias-free projections; RMSNorm written out (``Pow``, ``ReduceMean``, ``Add``, ``Sqrt``,
    ``Reciprocal``, ``Mul``, ``Mul``) before attention and before the MLP; a SwiGLU MLP
    (``down(silu(gate(x)) * up(x))``, SiLU as ``Sigmoid`` times its input); a final RMSNorm and the
    language-model head. About 60 operators per layer; ``ffn`` defaults to Llama's 8/3 of ``hidden``
    rounded up to a multiple of 256.
    """
    kv_heads = kv_heads or heads
    if min(layers, hidden, heads, kv_heads, vocab, seq_len) < 1:
        raise ValueError("layers, hidden, heads, kv_heads, vocab and seq_len must be positive")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    dh = hidden // heads
    if dh % 2:
        raise ValueError(f"the head size hidden / heads ({dh}) must be even for rotary embeddings")
    ffn = ffn or 256 * -(-(8 * hidden // 3) // 256)
    b = _Builder(weights, seed)
    const, weight, node = b.const, b.weight, b.node
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731

    def linear(x: str, nm: str, n_in: int, n_out: int) -> str:
        return node("MatMul", [x, weight(nm + ".weight", [n_in, n_out])], nm)

    two = const("rms_pow", np.array(2.0, np.float32))
    epsilon = const("rms_eps", np.array(eps, np.float32))
    last_axis = const("rms_axes", i64(-1))

    def rms_norm(x: str, nm: str) -> str:
        var = node("ReduceMean", [node("Pow", [x, two], f"{nm}/pow"), last_axis], f"{nm}/mean", keepdims=1)
        inv = node("Reciprocal", [node("Sqrt", [node("Add", [var, epsilon], f"{nm}/add_eps")], f"{nm}/sqrt")],
                   f"{nm}/rsqrt")
        return node("Mul", [weight(nm + ".weight", [hidden], 1.0), node("Mul", [x, inv], f"{nm}/normed")], nm)

    # rotary tables [1, seq, dh], shared by every layer
    head_axis = const("head_axis", i64(1))
    inv_freq = 1.0 / rope_theta ** (np.arange(0, dh, 2, dtype=np.float64) / dh)
    # positions are a graph input, as in exports for generation, so the tables are not constant-folded
    positions = node("Unsqueeze", [node("Cast", ["position_ids"], "rotary/positions_f", to=1), head_axis],
                     "rotary/positions")
    inv_freq = const("rotary.inv_freq", inv_freq.astype(np.float32).reshape(dh // 2, 1))
    freqs = node("MatMul", [inv_freq, positions], "rotary/freqs")
    freqs = node("Transpose", [freqs], "rotary/freqs_t", perm=[0, 2, 1])
    emb = node("Concat", [freqs, freqs], "rotary/emb", axis=-1)
    # [batch, 1, seq, dh]: unsqueezed once and shared by every layer, as an exporter's common
    # subexpression elimination leaves it
    cos = node("Unsqueeze", [node("Cos", [emb], "rotary/cos"), head_axis], "rotary/cos_heads")
    sin = node("Unsqueeze", [node("Sin", [emb], "rotary/sin"), head_axis], "rotary/sin_heads")
    rep_axis = const("repeat_axis", i64(2))
    half_lo, half_hi, half_end = const("rope_lo", i64(0)), const("rope_mid", i64(dh // 2)), \
        const("rope_end", i64(dh))
    minus1 = const("rope_axis", i64(-1))
    q_shape, kv_shape = const("q_shape", i64(0, 0, heads, dh)), const("kv_shape", i64(0, 0, kv_heads, dh))
    rep = heads // kv_heads
    expand_shape = const("repeat_kv_shape", i64(1, 1, rep, 1, 1))
    rep_shape = const("repeated_kv_shape", i64(0, heads, seq_len, dh))
    merge_shape = const("merge_heads_shape", i64(0, 0, hidden))
    scale = const("attn_scale", np.array(1.0 / math.sqrt(dh), dtype=np.float32))
    mask = const("causal_mask", np.triu(np.full((seq_len, seq_len), -1e4, np.float32), k=1))

    def rotary(x: str, p: str) -> str:
        x1 = node("Slice", [x, half_lo, half_hi, minus1], f"{p}/slice_lo")
        x2 = node("Slice", [x, half_hi, half_end, minus1], f"{p}/slice_hi")
        rot = node("Concat", [node("Neg", [x2], f"{p}/neg"), x1], f"{p}/rotate_half", axis=-1)
        return node("Add", [node("Mul", [x, cos], f"{p}/mul_cos"), node("Mul", [rot, sin], f"{p}/mul_sin")],
                    f"{p}/rotary")

    def heads_of(x: str, shape: str, p: str) -> str:
        return node("Transpose", [node("Reshape", [x, shape], f"{p}_split")], f"{p}_heads", perm=[0, 2, 1, 3])

    def repeat_kv(x: str, p: str) -> str:
        e = node("Expand", [node("Unsqueeze", [x, rep_axis], f"{p}/unsqueeze"), expand_shape], f"{p}/expand")
        return node("Reshape", [e, rep_shape], f"{p}/repeat")

    def attention(x: str, p: str) -> str:
        q = heads_of(linear(x, f"{p}/q_proj", hidden, hidden), q_shape, f"{p}/q")
        k = heads_of(linear(x, f"{p}/k_proj", hidden, kv_heads * dh), kv_shape, f"{p}/k")
        v = heads_of(linear(x, f"{p}/v_proj", hidden, kv_heads * dh), kv_shape, f"{p}/v")
        q, k = rotary(q, f"{p}/q_rope"), rotary(k, f"{p}/k_rope")
        k, v = repeat_kv(k, f"{p}/k_repeat"), repeat_kv(v, f"{p}/v_repeat")
        kt = node("Transpose", [k], f"{p}/k_t", perm=[0, 1, 3, 2])
        s = node("Mul", [node("MatMul", [q, kt], f"{p}/scores"), scale], f"{p}/scale")
        a = node("Softmax", [node("Add", [s, mask], f"{p}/causal_mask")], f"{p}/softmax", axis=-1)
        c = node("Transpose", [node("MatMul", [a, v], f"{p}/context")], f"{p}/context_t", perm=[0, 2, 1, 3])
        return linear(node("Reshape", [c, merge_shape], f"{p}/merge_heads"), f"{p}/o_proj", hidden, hidden)

    def mlp(x: str, p: str) -> str:
        gate = linear(x, f"{p}/gate_proj", hidden, ffn)
        silu = node("Mul", [gate, node("Sigmoid", [gate], f"{p}/sigmoid")], f"{p}/silu")
        h = node("Mul", [silu, linear(x, f"{p}/up_proj", hidden, ffn)], f"{p}/gated")
        return linear(h, f"{p}/down_proj", ffn, hidden)

    x = node("Gather", [weight("embed_tokens.weight", [vocab, hidden]), "input_ids"], "embed_tokens")
    for i in range(layers):
        p = f"layer{i}"
        x = node("Add", [x, attention(rms_norm(x, f"{p}/input_norm"), f"{p}/attn")], f"{p}/attn_residual")
        x = node("Add", [x, mlp(rms_norm(x, f"{p}/post_attention_norm"), f"{p}/mlp")], f"{p}/mlp_residual")
    out = linear(rms_norm(x, "final_norm"), "lm_head", hidden, vocab)
    return b.model(name or f"llama_l{layers}_h{hidden}", seq_len, out, vocab, extra_inputs=("position_ids",))


def llama(layers: int = 16, *, hidden: int = 2048, heads: int = 32, kv_heads: int = 8, ffn: int = 5632,
          seq_len: int = 512, vocab: int = 32000, weights: str = "generated", **kw):
    """A Llama-style decoder of about a billion parameters at 16 layers (TinyLlama's widths: 2048,
    32 query heads, 8 key/value heads, MLP 5632, vocabulary 32000; sequence 512)."""
    return llama_model(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, seq_len=seq_len,
                       vocab=vocab, weights=weights, **kw)
