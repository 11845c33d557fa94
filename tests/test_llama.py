"""The Llama-style decoder builder: valid ONNX whose onnxruntime output equals a numpy Llama forward
(RMSNorm, rotary embeddings, grouped-query attention, SwiGLU), causal, and loads in the front end."""

import numpy as np
import pytest

from graphs.onnx_loader import parse_model
from graphs.transformer import gpt, llama, llama_model

SMALL = dict(layers=2, hidden=32, heads=4, kv_heads=2, ffn=40, vocab=50, seq_len=8)


def _run(model, ids, positions=None):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    if positions is None:
        positions = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int64), ids.shape).copy()
    (out,) = sess.run(None, {"input_ids": ids, "position_ids": positions})
    return out


def _reference(model, ids, *, layers, hidden, heads, kv_heads, eps=1e-6, theta=10000.0):
    """A plain numpy Llama forward written from the architecture, reading the model's weights."""
    from onnx import numpy_helper

    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    dh = hidden // heads
    seq = ids.shape[1]

    def rms(x, name):
        return w[name + ".weight"] * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)

    inv = 1.0 / theta ** (np.arange(0, dh, 2) / dh)
    ang = np.arange(seq)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x):  # [b, h, s, dh]
        rot = np.concatenate([-x[..., dh // 2:], x[..., :dh // 2]], -1)
        return x * cos + rot * sin

    x = w["embed_tokens.weight"][ids]
    b = ids.shape[0]
    causal = np.triu(np.full((seq, seq), -np.inf), 1)
    for i in range(layers):
        p = f"layer{i}"
        h = rms(x, f"{p}/input_norm")
        q = (h @ w[f"{p}/attn/q_proj.weight"]).reshape(b, seq, heads, dh).transpose(0, 2, 1, 3)
        k = (h @ w[f"{p}/attn/k_proj.weight"]).reshape(b, seq, kv_heads, dh).transpose(0, 2, 1, 3)
        v = (h @ w[f"{p}/attn/v_proj.weight"]).reshape(b, seq, kv_heads, dh).transpose(0, 2, 1, 3)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh) + causal
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        c = (a @ v).transpose(0, 2, 1, 3).reshape(b, seq, hidden)
        x = x + c @ w[f"{p}/attn/o_proj.weight"]
        h = rms(x, f"{p}/post_attention_norm")
        g = h @ w[f"{p}/mlp/gate_proj.weight"]
        x = x + (g / (1 + np.exp(-g)) * (h @ w[f"{p}/mlp/up_proj.weight"])) @ w[f"{p}/mlp/down_proj.weight"]
    return rms(x, "final_norm") @ w["lm_head.weight"]


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_matches_numpy_llama_forward(kv_heads):
    import onnx

    cfg = {**SMALL, "kv_heads": kv_heads}
    m = llama_model(**cfg, seed=3)
    onnx.checker.check_model(m, full_check=True)
    ids = np.random.default_rng(0).integers(0, 50, (3, 8))
    out = _run(m, ids)
    assert out.shape == (3, 8, 50)
    want = _reference(m, ids, layers=2, hidden=32, heads=4, kv_heads=kv_heads)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_causal_and_rotary_uses_positions():
    m = llama_model(**SMALL)
    a = np.arange(8, dtype=np.int64)[None] % 50
    b = a.copy()
    b[0, -1] = 49  # change the last token: earlier positions must not see it
    ya, yb = _run(m, a), _run(m, b)
    np.testing.assert_allclose(ya[0, :-1], yb[0, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(ya[0, -1], yb[0, -1])
    # rotary embeddings see relative positions: a uniform shift changes nothing, a gap does
    shifted = _run(m, a, positions=np.arange(8, dtype=np.int64)[None] + 5)
    np.testing.assert_allclose(ya, shifted, rtol=1e-4, atol=1e-5)
    gap = _run(m, a, positions=np.array([[0, 1, 2, 3, 10, 11, 12, 13]], dtype=np.int64))
    np.testing.assert_allclose(ya[0, :4], gap[0, :4], rtol=1e-4, atol=1e-5)
    assert not np.allclose(ya[0, 4:], gap[0, 4:], rtol=1e-4, atol=1e-5)


def test_structure_and_parameter_count():
    layers, hidden, heads, kv, ffn, vocab, seq = 3, 32, 4, 2, 40, 50, 8
    g = parse_model(llama_model(layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn=ffn, vocab=vocab,
                                seq_len=seq), batch_size=2)
    kv_width = kv * hidden // heads
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_width + 3 * hidden * ffn + 2 * hidden
    constants = seq * seq + hidden // heads // 2  # causal mask, rotary frequencies
    assert g.parameters == vocab * hidden + layers * per_layer + hidden + hidden * vocab + constants
    types = g.op_types()
    assert types["Softmax"] == layers and types["Sigmoid"] == layers
    assert types["ReduceMean"] == 2 * layers + 1 and types["Neg"] == 2 * layers
    assert types["Expand"] == 2 * layers and types["Cos"] == 1 and types["Sin"] == 1
    assert types["MatMul"] == layers * (7 + 2) + 2  # q k v o gate up down + 2 attention; rotary, head
    assert "LayerNormalization" not in types
    assert types["Add"] == layers * 7 + 1  # residuals, eps, rotary, mask; final eps
    names = set(g.names)
    assert {"layer0/attn/k_repeat/expand", "layer0/attn/q_rope/rotate_half", "layer0/mlp/silu",
            "rotary/cos_heads", "final_norm"} <= names
    by_name = dict(zip(g.names, g.ops))
    assert by_name["layer0/attn/k_proj"].outputs[0].shape == (2, seq, kv_width)
    assert by_name["layer0/attn/k_repeat/repeat"].outputs[0].shape == (2, heads, seq, hidden // heads)
    assert g.ops[-1].outputs[0].shape == (2, seq, vocab)


def test_sixteen_layer_preset_is_about_a_thousand_operators():
    g = parse_model(llama(16), batch_size=1)
    assert 950 <= g.num_ops <= 1050
    assert 0.8e9 < g.parameters < 0.9e9  # TinyLlama widths, 16 of its 22 layers
    assert parse_model(llama(32), batch_size=1).num_ops == 2 * g.num_ops - 18  # shared prologue, epilogue
    assert parse_model(gpt(16), batch_size=1).num_ops == 484


@pytest.mark.parametrize("training", [False, True])
def test_places_as_a_workload(training):
    from graphs.devices import parse_devices
    from graphs.evaluate import evaluate
    from graphs.onnx_workload import graph_workload
    from solvers.registry import get_solver

    g = parse_model(llama_model(**SMALL), batch_size=1)
    w = graph_workload(g, parse_devices("a100:2,cpu:2"), training=training)
    assert w.graph.num_nodes == g.num_ops * (2 if training else 1)
    sol = get_solver("dp")(w.graph, w.cluster)
    assert sol.status.value == "optimal"
    assert evaluate(w.graph, w.cluster, sol.assignment).max_load == pytest.approx(sol.objective)


@pytest.mark.parametrize("kw", [dict(hidden=30, heads=4), dict(heads=4, kv_heads=3), dict(hidden=12, heads=4),
                                dict(layers=0), dict(weights="zeros")])
def test_bad_configurations(kw):
    with pytest.raises(ValueError):
        llama_model(**kw)
