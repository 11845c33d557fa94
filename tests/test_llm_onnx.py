"""An LLM read from an ONNX decoder exported with its KV cache (``past_key_values.N.key``/``.value``, the
layout of optimum and onnxruntime-genai), checked on ``torch.onnx`` exports: the shape read back is the
module's, and the decode plan is the one its ``config.json`` gives."""

import json
import os

import onnx
import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0, then '.[torch]')")

from graphs.errors import InputError  # noqa: E402
from graphs.llm import LLMConfig, config_from_onnx, is_onnx_decoder  # noqa: E402
from placement.cli import main  # noqa: E402
from tests.torch_models import export_decoder, llama_with_cache  # noqa: E402

SHAPE = {"vocab": 256, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn": 344, "layers": 3}


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    return export_decoder(llama_with_cache(**SHAPE), tmp_path_factory.mktemp("dec") / "decoder.onnx")


def test_the_shape_is_read_from_the_export(decoder):
    assert is_onnx_decoder(decoder)
    assert config_from_onnx(decoder) == LLMConfig("decoder", layers=3, hidden=128, heads=4, kv_heads=2,
                                                  intermediate=344, vocab=256, dtype_bytes=4,
                                                  tied_embeddings=False)


def test_the_decode_plan_is_the_configs(decoder, tmp_path, capsys):
    """The same model as a ``config.json`` (Hugging Face's fields) gives the same plan and value."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 3, "hidden_size": 128, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "intermediate_size": 344, "vocab_size": 256,
                                  "torch_dtype": "float32", "_name_or_path": "decoder"}))
    args = ["--devices", "a100:1,t4:2", "--batch-size", "8", "--context", "512", "--json"]
    assert main(["place", decoder] + args) == 0
    onnx_plan = json.loads(capsys.readouterr().out)
    assert main(["place", str(config)] + args) == 0
    config_plan = json.loads(capsys.readouterr().out)
    assert onnx_plan["objective"] == config_plan["objective"] and onnx_plan["status"] == "optimal"
    assert [s["nodes"] for s in onnx_plan["stages"]] == [s["nodes"] for s in config_plan["stages"]]
    # evaluate re-scores the plan from the decoder and what the plan records
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(onnx_plan))
    assert main(["evaluate", decoder, str(plan), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["objective"] == pytest.approx(onnx_plan["objective"], rel=1e-12)


def test_a_head_that_reuses_the_embedding_is_tied(decoder, tmp_path):
    m = onnx.load(decoder)
    g = m.graph
    vocab, hidden = SHAPE["vocab"], SHAPE["hidden"]
    head = next(t for t in g.initializer if list(t.dims) == [hidden, vocab])
    g.initializer.remove(head)
    g.node.insert(0, onnx.helper.make_node("Transpose", ["embed_tokens.weight"], [head.name], perm=[1, 0]))
    path = tmp_path / "tied.onnx"
    onnx.save(m, path)
    assert config_from_onnx(path).tied_embeddings


def test_what_is_not_a_decoder_is_said(decoder, tmp_path, capsys):
    from graphs.transformer import transformer_model

    plain = tmp_path / "plain.onnx"
    onnx.save(transformer_model(layers=1, hidden=32), plain)
    assert not is_onnx_decoder(plain)
    assert main(["place", str(plain), "--context", "512"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no past key/value inputs" in err[0]
    with pytest.raises(InputError, match="no past key/value inputs"):
        config_from_onnx(plain)
    # a layer without its value input
    m = onnx.load(decoder)
    m.graph.input.remove(next(v for v in m.graph.input if v.name == "past_key_values.1.value"))
    broken = tmp_path / "broken.onnx"
    onnx.save(m, broken)
    with pytest.raises(InputError, match="every layer 0..2 needs a key and a value"):
        config_from_onnx(broken)
    # key/value heads left symbolic
    m = onnx.load(decoder)
    for v in m.graph.input:
        if v.name.startswith("past_key_values."):
            v.type.tensor_type.shape.dim[1].dim_param = "heads"
    loose = tmp_path / "loose.onnx"
    onnx.save(m, loose)
    with pytest.raises(InputError, match="kv_heads and head_dim fixed"):
        config_from_onnx(loose)
    with pytest.raises(InputError, match="no such file"):
        config_from_onnx(os.path.join(tmp_path, "missing.onnx"))
