"""The transformer graph builder: valid ONNX, runs in onnxruntime, configurable, loads in the front end."""

import numpy as np
import pytest

from graphs.onnx_loader import parse_model
from graphs.transformer import bert, gpt, transformer_model


def _params(layers, hidden, ffn, vocab, seq, decoder):
    attention = 4 * (hidden * hidden + hidden)  # q, k, v, out projections
    mlp = (hidden * ffn + ffn) + (ffn * hidden + hidden)
    per_layer = attention + mlp + 2 * 2 * hidden  # two layer norms
    emb = vocab * hidden + seq * hidden
    head = 2 * hidden + hidden * vocab if decoder else 2 * hidden  # final norm + LM head / embedding norm
    mask = seq * seq if decoder else 0  # the causal mask is a constant tensor too
    return emb + layers * per_layer + head + mask


@pytest.mark.parametrize("decoder", [False, True])
def test_checker_onnxruntime_and_output_shape(decoder):
    import onnx
    import onnxruntime as ort

    m = transformer_model(layers=2, hidden=32, heads=4, vocab=50, seq_len=8, decoder=decoder)
    onnx.checker.check_model(m, full_check=True)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = np.arange(3 * 8, dtype=np.int64).reshape(3, 8) % 50
    (out,) = sess.run(None, {"input_ids": ids})
    assert out.shape == (3, 8, 50 if decoder else 32) and np.isfinite(out).all()


def test_decoder_is_causal():
    import onnxruntime as ort

    m = transformer_model(layers=2, hidden=32, heads=4, vocab=50, seq_len=8, decoder=True)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    a = np.arange(8, dtype=np.int64)[None] % 50
    b = a.copy()
    b[0, -1] = 49  # change the last token: earlier positions must not see it
    (ya,), (yb,) = sess.run(None, {"input_ids": a}), sess.run(None, {"input_ids": b})
    np.testing.assert_allclose(ya[0, :-1], yb[0, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(ya[0, -1], yb[0, -1])


@pytest.mark.parametrize("layers, hidden, heads, ffn, decoder", [
    (1, 16, 2, None, False), (3, 48, 6, 100, False), (2, 32, 4, None, True)])
def test_structure_and_parameter_count(layers, hidden, heads, ffn, decoder):
    vocab, seq = 40, 6
    m = transformer_model(layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=vocab, seq_len=seq,
                          decoder=decoder)
    g = parse_model(m, batch_size=2)
    ffn = ffn or 4 * hidden
    assert g.parameters == _params(layers, hidden, ffn, vocab, seq, decoder)
    types = g.op_types()
    assert types["Softmax"] == layers and types["Gelu"] == layers
    assert types["LayerNormalization"] == (2 * layers + 1)
    assert types["MatMul"] == layers * (6 + 2) + (1 if decoder else 0)  # q k v out fc1 fc2 + 2 attention
    names = set(g.names)
    assert {"layer0/attn/q_proj", "layer0/attn/k_proj", "layer0/attn/v_proj", "layer0/attn/softmax",
            "layer0/mlp/fc1", "embeddings/word"} <= names
    assert ("layer0/attn/causal_mask" in names) == decoder
    out = g.ops[-1].outputs[0]
    assert out.shape == (2, seq, vocab if decoder else hidden)


def test_generated_weights_fold_like_initializers():
    small = dict(layers=2, hidden=32, heads=4, vocab=50, seq_len=8)
    rnd = parse_model(transformer_model(**small), batch_size=2)
    gen = parse_model(transformer_model(weights="generated", **small), batch_size=2)
    assert gen.names == rnd.names and gen.parameters == rnd.parameters
    assert [op.output_bytes for op in gen.ops] == [op.output_bytes for op in rnd.ops]


def test_bert_and_gpt_presets_are_base_sized():
    b = parse_model(bert(), batch_size=1)
    assert 108e6 < b.parameters < 110e6  # BERT-base without token types and pooler
    assert b.ops[0].outputs[0].shape == (1, 128, 768)
    g = parse_model(gpt(layers=2), batch_size=1)
    assert g.ops[-1].outputs[0].shape == (1, 128, 50257)


@pytest.mark.parametrize("kw", [dict(hidden=30, heads=4), dict(layers=0), dict(weights="zeros")])
def test_bad_configurations(kw):
    with pytest.raises(ValueError):
        transformer_model(**kw)
