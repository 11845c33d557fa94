"""What a model config's ``model_type`` decides (graphs/llm.py, ``read_config`` and ``_FAMILIES``;
docs/llm_serving.md, "Model configs"): ``tie_word_embeddings`` when the config leaves it out (Gemma's
configs do: tied) and whether the MLP is gated (three matrices) or has two (GPT-NeoX, Phi-2: up and
down). Counts by hand from the formula, cross-checked against the published parameter counts; an unknown
or missing ``model_type`` is read as before (gated, untied) with one message naming the assumptions: a
warning for an unknown one, INFO for none (a config written by hand, as the docs' examples)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re

import pytest

from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.llm import (
    _FAMILIES,
    config_from_onnx,
    decode_problem,
    layer_decode_step,
    layer_prefill_time,
    prefill_problem,
    read_config,
    read_mix,
)
from placement.cli import main
from tests.test_llm_config import LLAMA2_7B, _decoder_onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# google/gemma-2b's config.json (the keys that matter): no tie_word_embeddings, as transformers leaves out
# a value equal to GemmaConfig's default (true); hidden_act gelu, yet the MLP is gated
GEMMA_2B = {"architectures": ["GemmaForCausalLM"], "attention_bias": False, "head_dim": 256,
            "hidden_act": "gelu", "hidden_size": 2048, "intermediate_size": 16384,
            "max_position_embeddings": 8192, "model_type": "gemma", "num_attention_heads": 8,
            "num_hidden_layers": 18, "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_scaling": None,
            "rope_theta": 10000.0, "torch_dtype": "bfloat16", "vocab_size": 256000}
# EleutherAI/pythia-1.4b's config.json: GPT-NeoX, whose MLP is dense_h_to_4h and dense_4h_to_h
PYTHIA_1_4B = {"architectures": ["GPTNeoXForCausalLM"], "hidden_act": "gelu", "hidden_size": 2048,
               "intermediate_size": 8192, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
               "model_type": "gpt_neox", "num_attention_heads": 16, "num_hidden_layers": 24,
               "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
               "torch_dtype": "float16", "use_parallel_residual": True, "vocab_size": 50304}
# microsoft/phi-2's config.json: PhiForCausalLM, MLP fc1 and fc2
PHI_2 = {"architectures": ["PhiForCausalLM"], "hidden_act": "gelu_new", "hidden_size": 2560,
         "intermediate_size": 10240, "model_type": "phi", "num_attention_heads": 32, "num_hidden_layers": 32,
         "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": False,
         "tie_word_embeddings": False, "torch_dtype": "float16", "vocab_size": 51200}
# bigcode/starcoder2-3b's shape: MLP c_fc and c_proj, tied embeddings by Starcoder2Config's default
STARCODER2_3B = {"architectures": ["Starcoder2ForCausalLM"], "hidden_size": 3072, "intermediate_size": 12288,
                 "model_type": "starcoder2", "num_attention_heads": 24, "num_hidden_layers": 30,
                 "num_key_value_heads": 2, "sliding_window": 4096, "torch_dtype": "bfloat16",
                 "vocab_size": 49152}


def _warnings(caplog, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "graphs.llm" and r.levelno == level]


def test_gemma_without_the_key_is_tied_and_has_its_published_size(caplog):
    """Gemma-2B: 2,506,172,416 weights (the Hugging Face model's count), 1,981,884,416 of them outside
    the embedding (the Gemma report's Table 2). Read as untied (the old default), it had a second
    256000 x 2048 matrix: 3,030,460,416."""
    caplog.set_level(logging.WARNING, logger="graphs.llm")
    cfg = read_config(GEMMA_2B)
    assert cfg.tied_embeddings and cfg.gated_mlp
    # q, o: 2048 x 8 heads of 256; k, v: 2048 x 1 head of 256; gate, up, down: 2048 x 16384; two norms
    block = 2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 16384 + 2 * 2048
    assert cfg.block_params == block == 110_104_576
    assert 18 * block + 2048 == 1_981_884_416  # the blocks and the final norm: the report's figure, exactly
    assert cfg.params == 18 * block + 2048 + 256000 * 2048 == 2_506_172_416
    assert _warnings(caplog) == []  # a known family: nothing assumed
    # a key given is kept
    untied = read_config({**GEMMA_2B, "tie_word_embeddings": False})
    assert not untied.tied_embeddings and untied.params == 2_506_172_416 + 256000 * 2048
    assert read_config({**GEMMA_2B, "tie_word_embeddings": True}) == cfg


@pytest.mark.parametrize("model_type", ["gemma2", "gemma3_text", "cohere", "starcoder2"])
def test_the_families_tied_by_default(model_type):
    base = {**LLAMA2_7B, "model_type": model_type}
    assert read_config(base).tied_embeddings
    assert not read_config({**base, "tie_word_embeddings": False}).tied_embeddings


def test_pythia_has_a_two_matrix_mlp_and_its_published_size():
    """Pythia-1.4B (GPT-NeoX): 1,414,647,808 weights (its model card). The cost model counts the
    matrices, the embedding, the head and the norms' scales; what it leaves out is the biases (q, k, v,
    o, both MLP matrices and the layer norms'), 542,720 here, 0.04%. Counted gated (the old code), the MLP
    had a third matrix: 402,653,184 weights more, 28% too many."""
    cfg = read_config(PYTHIA_1_4B)
    assert not cfg.gated_mlp and cfg.mlp_matrices == 2 and not cfg.tied_embeddings
    block = 4 * 2048 * 2048 + 2 * 2048 * 8192 + 2 * 2048  # q, k, v, o; h_to_4h, 4h_to_h; two norms
    assert cfg.block_params == block == 50_335_744
    ours = 24 * block + 2 * 50304 * 2048 + 2048
    assert cfg.params == ours == 1_414_105_088
    biases = 24 * (3 * 2048 + 2048 + 8192 + 2048 + 2 * 2048) + 2048
    assert ours + biases == 1_414_647_808  # the published count, exactly
    assert cfg.params == pytest.approx(1_414_647_808, rel=5e-4)
    gated = dataclasses.replace(cfg, gated_mlp=True)
    assert gated.params - cfg.params == 24 * 2048 * 8192 == 402_653_184


def test_phi_2_has_a_two_matrix_mlp_and_its_published_size():
    """Phi-2: 2,779,683,840 weights (the Hugging Face model's count); ours leaves out the biases of q, k,
    v, dense, fc1, fc2, the final layer norm's and the LM head's, 791,040 (0.03%). Phi-2's block has one
    layer norm (scale and bias: 2 x 2560), as many values as the two norms' scales counted."""
    cfg = read_config(PHI_2)
    assert not cfg.gated_mlp
    block = 4 * 2560 * 2560 + 2 * 2560 * 10240 + 2 * 2560
    assert cfg.params == 32 * block + 2 * 51200 * 2560 + 2560 == 2_778_892_800
    biases = 32 * (4 * 2560 + 10240 + 2560) + 2560 + 51200
    assert cfg.params + biases == 2_779_683_840
    assert cfg.params == pytest.approx(2_779_683_840, rel=5e-4)


def test_starcoder2_two_matrices_and_tied():
    cfg = read_config(STARCODER2_3B)
    assert cfg.tied_embeddings and not cfg.gated_mlp
    block = 2 * 3072 * 3072 + 2 * 3072 * 256 + 2 * 3072 * 12288 + 2 * 3072
    assert cfg.params == 30 * block + 49152 * 3072 + 3072


@pytest.mark.parametrize("model_type, gated", sorted((k, f.gated) for k, f in _FAMILIES.items()))
def test_every_family_sets_the_mlp(model_type, gated):
    cfg = read_config({**LLAMA2_7B, "model_type": model_type})
    assert cfg.gated_mlp is gated
    assert cfg.block_params == 4 * 4096 * 4096 + (3 if gated else 2) * 4096 * 11008 + 2 * 4096


def test_two_matrix_times_and_memory_follow_the_weights():
    """Pythia-1.4B on one A100: the decode step reads the two-matrix block's weights and does 2 x them
    in FLOPs, the prefill the same per token; six matrix products a block, a launch each; the decode
    and prefill problems hold those weights."""
    cfg = read_config(PYTHIA_1_4B)
    spec = parse_devices("a100:1").specs[0]
    peak, bw, launch = spec.fp16, spec.mem_bandwidth, spec.launch
    block, width, kv = 50_335_744, 2048, 2 * 2048 * 2  # keys and values of 16 heads of 128, fp16
    batch, context = 8, 1000
    flops = 2 * block * batch + 4 * context * width * batch
    moved = block * 2 + batch * context * kv
    assert cfg.block_matmuls == 6
    assert layer_decode_step(cfg, spec, 1, batch, context) == pytest.approx(
        max(flops / peak, moved / bw) + 6 * launch, rel=1e-12)
    tokens = 4096
    flops = 2 * block * tokens + 2 * width * tokens * (tokens + 1)
    moved = block * 2 + tokens * kv
    assert layer_prefill_time(cfg, spec, 1, tokens) == pytest.approx(
        max(flops / peak, moved / bw) + 6 * launch, rel=1e-12)
    problem = decode_problem(cfg, parse_devices("a100:1"), batch=8, context=1000, microbatches=1)
    layer = problem.graph.variants[problem.graph.options[(1, 0, 1)][0]]
    assert layer.b == block * 2
    pre = prefill_problem(cfg, parse_devices("a100:1"), read_mix({"buckets": [{"input": 512, "output": 1,
                                                                                "weight": 1}]}))
    assert pre.graph.variants[pre.graph.options[(1, 0, 1)][0]].b == block * 2


def test_llama_2_is_unchanged_with_or_without_its_model_type():
    """Llama-2-7B: 6,738,415,616 weights (the Hugging Face model's count); the config without a
    model_type (as the docs' examples write it) is read as ``llama``'s, problems identical."""
    plain = read_config(LLAMA2_7B)
    llama = read_config({**LLAMA2_7B, "model_type": "llama"})
    assert llama == dataclasses.replace(plain, name="llama")
    assert plain.params == llama.params == 6_738_415_616
    assert plain.gated_mlp and not plain.tied_embeddings and plain.block_matmuls == 7
    ds = parse_devices("a100:2,t4:4")
    assert decode_problem(plain, ds, batch=8, context=512).graph.variants == \
        decode_problem(llama, ds, batch=8, context=512).graph.variants


def test_no_model_type_says_both_assumptions_at_info_level(caplog):
    """No model_type: a config written by hand (transformers always writes one), read in the documented
    layout; the assumptions are logged at INFO, not warned (the command line prints warnings only)."""
    caplog.set_level(logging.INFO, logger="graphs.llm")
    cfg = read_config(LLAMA2_7B)
    assert cfg.gated_mlp and not cfg.tied_embeddings
    assert _warnings(caplog) == []
    (w,) = _warnings(caplog, logging.INFO)
    assert w.startswith("model 'model': the config gives no model_type: assumed a gated MLP")
    assert "untied embeddings, as tie_word_embeddings is absent" in w and "32000 x 4096" in w
    assert "give tie_word_embeddings, and the model_type" in w and "two matrices: gpt_neox" in w


def test_an_unknown_model_type_warns_naming_what_is_assumed(caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="graphs.llm")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA2_7B, "model_type": "falcon"}))
    cfg = read_config(path)
    assert cfg.gated_mlp and not cfg.tied_embeddings
    (w,) = _warnings(caplog)
    assert w.startswith(f"{path}: model_type 'falcon' is not a family whose defaults are known: assumed a "
                        f"gated MLP")
    assert "tie_word_embeddings is absent" in w
    caplog.clear()
    # the key given: only the MLP is assumed
    assert read_config({**LLAMA2_7B, "model_type": "falcon", "tie_word_embeddings": True}).tied_embeddings
    (w,) = _warnings(caplog)
    assert "gated MLP" in w and "tie_word_embeddings" not in w
    caplog.clear()
    # a known family, or a config refused: no warning
    read_config({**LLAMA2_7B, "model_type": "mistral"})
    with pytest.raises(InputError):
        read_config({**LLAMA2_7B, "model_type": "falcon", "num_local_experts": 8})
    assert _warnings(caplog) == []


def test_model_type_must_be_a_string():
    with pytest.raises(InputError, match="model_type must be a string, got 3"):
        read_config({**LLAMA2_7B, "model_type": 3})


def test_the_command_line_prints_the_warning(tmp_path, capsys):
    path = tmp_path / "config.json"
    args = ["--devices", "a100:2", "--batch-size", "8", "--context", "512"]
    path.write_text(json.dumps({**LLAMA2_7B, "model_type": "falcon"}))
    assert main(["place", str(path)] + args) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {path}: model_type 'falcon' is not a family whose "
                                               f"defaults are known: assumed a gated MLP")
    for config in ({**LLAMA2_7B, "model_type": "llama"}, LLAMA2_7B):  # known, or none: no warning
        path.write_text(json.dumps(config))
        assert main(["place", str(path)] + args) == 0
        assert capsys.readouterr().err == ""


def test_an_onnx_decoder_with_two_mlp_matrices(tmp_path):
    """Two hidden x ffn matrices a layer (up, down) are a two-matrix MLP; three a gated one. With q and o
    of a width other than hidden the counts tie: the wider is the MLP."""
    pytest.importorskip("onnx")
    shape = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=256)
    two = config_from_onnx(_decoder_onnx(tmp_path / "two.onnx", gated=False, **shape))
    assert (two.intermediate, two.gated_mlp, two.heads) == (256, False, 4)
    gated = config_from_onnx(_decoder_onnx(tmp_path / "gated.onnx", **shape))
    assert (gated.intermediate, gated.gated_mlp) == (256, True)
    wide = dict(hidden=64, heads=4, kv_heads=1, head_dim=32, ffn=256)  # q: 64 x 128
    cfg = config_from_onnx(_decoder_onnx(tmp_path / "wide.onnx", gated=False, **wide))
    assert (cfg.intermediate, cfg.gated_mlp, cfg.heads, cfg.head_dim) == (256, False, 4, 32)


def test_the_families_are_documented():
    with open(os.path.join(ROOT, "docs", "llm_serving.md"), encoding="utf-8") as f:
        doc = f.read()
    section = doc[doc.index("## Model configs"):].split("\n## ")[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith(("gated", "two matrices")):
            for name in re.findall(r"`(\w+)`", cells[0]):
                rows[name] = (cells[1].startswith("gated"), cells[2] == "true")
    assert rows == {k: (f.gated, f.tied) for k, f in _FAMILIES.items()}
