"""What a model config's keys do (graphs/llm.py, ``read_config``; docs/llm_serving.md, "Model configs"):
``head_dim`` sets the attention's width and the KV cache, ``dtype`` counts as ``torch_dtype``, booleans
are JSON booleans, keys whose cost is not modelled (mixture of experts, latent attention, quantization)
are refused by name, a sliding window is exact up to the window and refused past it. Sizes by hand."""

from __future__ import annotations

import json
import os
import re

import pytest

from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.llm import (
    LLMConfig,
    config_from_onnx,
    decode_problem,
    layer_decode_step,
    layer_prefill_time,
    prefill_problem,
    read_config,
    read_mix,
)
from placement.cli import main

LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
             "torch_dtype": "float16"}
# Qwen3-0.6B's config.json (the keys that matter): 16 heads of 128 over a hidden size of 1024
QWEN3_06B = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128,
             "hidden_size": 1024, "intermediate_size": 3072, "model_type": "qwen3", "num_attention_heads": 16,
             "num_hidden_layers": 28, "num_key_value_heads": 8, "rope_scaling": None, "rope_theta": 1000000,
             "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
             "use_sliding_window": False, "vocab_size": 151936}
MIXTRAL = {**LLAMA2_7B, "architectures": ["MixtralForCausalLM"], "intermediate_size": 14336,
           "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
           "torch_dtype": "bfloat16"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_head_dim_sets_the_attention_width_and_the_kv_cache():
    cfg = read_config(QWEN3_06B)
    assert (cfg.head_dim, cfg.attention_width) == (128, 16 * 128)
    assert cfg.kv_bytes_per_token == 2 * 8 * 128 * 2  # keys and values, 8 heads of 128, bf16: 4096
    # q: 1024 x 2048, o: 2048 x 1024, k and v: 1024 x 1024 each, MLP 3 x 1024 x 3072, two norms
    block = 2 * 1024 * 2048 + 2 * 1024 * 1024 + 3 * 1024 * 3072 + 2 * 1024
    assert cfg.block_params == block == 15_730_688
    # 28 blocks, the embedding (tied: one copy) and the final norm; the published 0.6B (0.44B without
    # the embedding) less the q/k norms' 28 x 2 x 128 weights
    assert cfg.params == 28 * block + 151936 * 1024 + 1024 == 596_042_752


def test_a_head_dim_that_is_not_hidden_over_heads_gives_the_published_size():
    """Mistral-NeMo-12B: hidden 5120, 32 heads of 128 (not 160), 8 key/value heads: 12.2B weights."""
    nemo = {"hidden_size": 5120, "head_dim": 128, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_hidden_layers": 40, "num_key_value_heads": 8, "vocab_size": 131072,
            "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    cfg = read_config(nemo)
    block = 2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 14336 + 2 * 5120
    assert cfg.params == 40 * block + 2 * 131072 * 5120 + 5120 == 12_247_782_400


def test_head_dim_equal_to_hidden_over_heads_or_null_changes_nothing():
    base = read_config(LLAMA2_7B)
    assert base.head_dim == 128
    assert read_config({**LLAMA2_7B, "head_dim": 128}) == base
    assert read_config({**LLAMA2_7B, "head_dim": None}) == base
    assert read_config({**LLAMA2_7B, "num_key_value_heads": None}) == base  # null: the attention heads
    # the keys listed as negligible change nothing either
    assert read_config({**LLAMA2_7B, "attention_bias": True, "mlp_bias": True,
                        "rope_scaling": {"type": "linear", "factor": 2.0}}) == base


def test_decode_and_prefill_times_use_the_attention_width():
    """One Qwen3-0.6B block on one A100: the decode step (memory-bound) reads the weights and each
    sequence's cache at 4096 bytes a token; the prefill of 4096 tokens (compute-bound) counts the causal
    attention at 2 x 2048 x I (I + 1) FLOPs, 2048 = 16 heads x 128."""
    cfg = read_config(QWEN3_06B)
    spec = parse_devices("a100:1").specs[0]
    peak, bw, launch = spec.fp16, spec.mem_bandwidth, spec.launch
    block = 15_730_688
    batch, context = 8, 1000
    flops = 2 * block * batch + 4 * context * 2048 * batch
    moved = block * 2 + batch * context * 4096
    assert layer_decode_step(cfg, spec, 1, batch, context) == pytest.approx(
        max(flops / peak, moved / bw) + 7 * launch, rel=1e-12)
    tokens = 4096
    flops = 2 * block * tokens + 2 * 2048 * tokens * (tokens + 1)
    moved = block * 2 + tokens * 4096
    assert flops / peak > moved / bw  # compute-bound: the attention's width shows
    assert layer_prefill_time(cfg, spec, 1, tokens) == pytest.approx(flops / peak + 7 * launch, rel=1e-12)
    # the decode problem's KV memory: 8 sequences of 1000 tokens, 4096 bytes each, in one micro-batch
    problem = decode_problem(cfg, parse_devices("a100:1"), batch=8, context=1000, microbatches=1)
    layer = problem.graph.variants[problem.graph.options[(1, 0, 1)][0]]
    assert layer.a == 8 * 1000 * 4096 and layer.b == block * 2


@pytest.mark.parametrize("change, key", [
    ({"num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts = 8, num_experts_per_tok = 2"),
    ({"num_experts": 64, "moe_intermediate_size": 1408}, "num_experts = 64, moe_intermediate_size = 1408"),
    ({"n_routed_experts": 256, "n_shared_experts": 1}, "n_routed_experts = 256, n_shared_experts = 1"),
])
def test_mixture_of_experts_is_refused_by_name(change, key):
    with pytest.raises(InputError, match="mixture-of-experts models are not modelled") as e:
        read_config({**LLAMA2_7B, **change})
    assert key in str(e.value)
    # null or 0: a dense model
    dense = read_config({**LLAMA2_7B, **{k: None for k in change}})
    assert dense == read_config({**LLAMA2_7B, **{k: 0 for k in change}}) == read_config(LLAMA2_7B)


@pytest.mark.parametrize("change, words", [
    ({"kv_lora_rank": 512}, "multi-head latent attention .* kv_lora_rank = 512"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "quantized weights are not modelled"),
])
def test_other_unmodelled_keys_are_refused_by_name(change, words):
    with pytest.raises(InputError, match=words):
        read_config({**LLAMA2_7B, **change})


def test_mixtral_on_the_command_line_is_refused(tmp_path, capsys):
    """Mixtral-8x7B was placed 'optimal' on one 40 GB A100 with 7.24 B parameters (it has 46.7 B)."""
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(MIXTRAL))
    assert main(["place", str(path), "--devices", "a100:1", "--batch-size", "8", "--context", "1024"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: mixture-of-experts models are not modelled") and \
        "num_local_experts = 8" in err


@pytest.mark.parametrize("key", ["tie_word_embeddings", "use_sliding_window"])
@pytest.mark.parametrize("value", ["false", "true", 0, 1])
def test_booleans_are_json_booleans(key, value):
    with pytest.raises(InputError, match=f"{key} must be true or false .* got {value!r}"):
        read_config({**LLAMA2_7B, key: value})


def test_tie_word_embeddings():
    untied, tied = read_config({**LLAMA2_7B, "tie_word_embeddings": False}), \
        read_config({**LLAMA2_7B, "tie_word_embeddings": True})
    assert untied.params - tied.params == 32000 * 4096  # one vocabulary x hidden matrix less
    # absent, and no model_type to take the default from: untied (with a warning,
    # tests/test_llm_config_families.py)
    assert read_config(LLAMA2_7B) == untied


def test_dtype_and_torch_dtype():
    no_torch = {k: v for k, v in LLAMA2_7B.items() if k != "torch_dtype"}
    assert read_config({**no_torch, "dtype": "float32"}).dtype_bytes == 4  # the newer transformers' key
    assert read_config({**no_torch, "dtype": "bfloat16"}).dtype_bytes == 2
    assert read_config({**LLAMA2_7B, "torch_dtype": "float32"}).dtype_bytes == 4
    assert read_config(no_torch).dtype_bytes == 2  # neither: float16
    assert read_config({**LLAMA2_7B, "dtype": "float16"}).dtype_bytes == 2  # both, the same
    with pytest.raises(InputError, match="dtype 'float32' and torch_dtype 'float16' differ"):
        read_config({**LLAMA2_7B, "dtype": "float32"})
    with pytest.raises(InputError, match="^dtype 'float13' is not one of"):
        read_config({**no_torch, "dtype": "float13"})


def test_a_missing_key_names_the_file_once(tmp_path, capsys):
    path = tmp_path / "c1.json"
    path.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
                                "vocab_size": 32000}))
    assert main(["place", str(path), "--devices", "a100:2", "--batch-size", "8", "--context", "512"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {path}: the model config has no 'intermediate_size'"
    # a field LLMConfig refuses, too
    path.write_text(json.dumps({**LLAMA2_7B, "num_key_value_heads": 3}))
    with pytest.raises(InputError) as e:
        read_config(path)
    assert str(e.value).count(str(path)) == 1 and "key/value heads" in str(e.value)


def test_a_sliding_window_is_exact_up_to_it_and_refused_past_it():
    """Mistral-7B-v0.1 slides over 4096 tokens: up to 4096 every token is attended to, as without the
    window; past it the cache it keeps is not modelled. Qwen2's configs carry a window they do not use
    (``use_sliding_window: false``)."""
    mistral = {**LLAMA2_7B, "intermediate_size": 14336, "num_key_value_heads": 8, "sliding_window": 4096}
    cfg = read_config(mistral)
    assert cfg.sliding_window == 4096
    full = read_config({**mistral, "sliding_window": None})
    ds = parse_devices("a100:2")
    a = decode_problem(cfg, ds, batch=4, context=4096)
    b = decode_problem(full, ds, batch=4, context=4096)
    assert a.graph.variants == b.graph.variants
    with pytest.raises(InputError, match="a context of 4097 tokens is past its sliding_window of 4096"):
        decode_problem(cfg, ds, batch=4, context=1024, memory_context=4097)
    with pytest.raises(InputError, match="a prompt of 5000 tokens is past its sliding_window of 4096"):
        prefill_problem(cfg, ds, read_mix({"buckets": [{"input": 5000, "output": 1, "weight": 1}]}))
    assert read_config({**mistral, "use_sliding_window": False}).sliding_window is None
    decode_problem(read_config({**mistral, "use_sliding_window": False}), ds, batch=4, context=8192)


def _decoder_onnx(path, *, hidden, heads, kv_heads, head_dim, ffn, layers=2, vocab=100, gated=True) -> str:
    """A decoder's graph as an exporter writes its parts: past key/value inputs, the token embedding
    gathered by the ids, and per layer q, k, v, o and the MLP's matrices (gated: gate, up, down; else up
    and down; only their shapes are read); an LM head of its own."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def matrix(name, a, b):
        return numpy_helper.from_array(np.zeros((a, b), np.float16), name)

    inits = [matrix("embed", vocab, hidden), matrix("lm_head", hidden, vocab)]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    for i in range(layers):
        q, kv = heads * head_dim, kv_heads * head_dim
        inits += [matrix(f"l{i}.q", hidden, q), matrix(f"l{i}.k", hidden, kv), matrix(f"l{i}.v", hidden, kv),
                  matrix(f"l{i}.o", q, hidden)] + ([matrix(f"l{i}.gate", hidden, ffn)] if gated else []) \
            + [matrix(f"l{i}.up", hidden, ffn), matrix(f"l{i}.down", ffn, hidden)]
        inputs += [helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT16,
                                                 ["batch", kv_heads, "past", head_dim])
                   for kind in ("key", "value")]
    node = helper.make_node("Gather", ["embed", "input_ids"], ["h"])
    out = helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["batch", "seq", hidden])
    onnx.save(helper.make_model(helper.make_graph([node], "decoder", inputs, [out], inits)), str(path))
    return str(path)


@pytest.mark.parametrize("shape", [
    dict(hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=96),  # q and o hidden x hidden (Llama)
    dict(hidden=64, heads=4, kv_heads=1, head_dim=32, ffn=96),  # q 64 x 128 (as Qwen3)
    dict(hidden=64, heads=2, kv_heads=2, head_dim=48, ffn=160),  # q, k, v 64 x 96, no grouping
])
def test_an_onnx_decoder_reads_its_heads_from_the_projections(tmp_path, shape):
    pytest.importorskip("onnx")
    cfg = config_from_onnx(_decoder_onnx(tmp_path / "decoder.onnx", **shape))
    assert cfg == LLMConfig("decoder", layers=2, hidden=64, heads=shape["heads"], kv_heads=shape["kv_heads"],
                            intermediate=shape["ffn"], vocab=100, head_dim=shape["head_dim"])


def test_the_keys_refused_and_ignored_are_documented():
    from graphs.llm import _NEGLIGIBLE, _UNMODELLED

    with open(os.path.join(ROOT, "docs", "llm_serving.md"), encoding="utf-8") as f:
        doc = f.read()
    section = doc[doc.index("## Model configs"):]
    section = section.split("\n## ")[0]
    read = {"head_dim", "dtype", "torch_dtype", "num_key_value_heads", "tie_word_embeddings",
            "sliding_window", "use_sliding_window", "model_type"}
    keys = set(_UNMODELLED) | set(_NEGLIGIBLE) | read
    assert sorted(keys - set(re.findall(r"`(\w+)`", section))) == []
