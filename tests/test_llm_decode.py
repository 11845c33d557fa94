"""LLM decoding on the stage model (graphs/llm.py, placement/cli/llm.py): sizes against published
figures and hand computation, the objective against the roofline by hand, two exact solvers against
each other, the command line."""

from __future__ import annotations

import json

import pytest

from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.llm import LLMConfig, decode_problem, read_config
from graphs.parallel import Stage, evaluate_plan
from placement.cli import main

LLAMA2_7B = {"_name_or_path": "meta-llama/Llama-2-7b-hf", "hidden_size": 4096, "intermediate_size": 11008,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
             "vocab_size": 32000, "torch_dtype": "float16", "tie_word_embeddings": False}
LLAMA2_70B = dict(LLAMA2_7B, _name_or_path="meta-llama/Llama-2-70b-hf", hidden_size=8192,
                  intermediate_size=28672, num_attention_heads=64, num_hidden_layers=80,
                  num_key_value_heads=8)


def test_sizes_are_the_published_ones():
    small = read_config(LLAMA2_7B)
    assert small.params == 6_738_415_616  # the parameter count of the published checkpoint
    assert small.kv_bytes_per_token == 2 * 32 * 128 * 2  # keys and values, 32 heads of 128, fp16
    big = read_config(LLAMA2_70B)
    assert round(big.params / 1e9, 2) == 68.98  # "70B": 68.98e9 weights
    assert big.kv_bytes_per_token == 2 * 8 * 128 * 2  # grouped-query attention: 8 key/value heads


@pytest.mark.parametrize("change, words", [
    ({"num_hidden_layers": None}, "num_hidden_layers"),
    ({"hidden_size": 4095}, "not a multiple"),
    ({"torch_dtype": "float13"}, "torch_dtype"),
    ({"num_key_value_heads": 3}, "key/value heads"),
    ({"vocab_size": "many"}, "vocab_size"),
])
def test_bad_configs_name_the_field(change, words):
    cfg = {k: v for k, v in {**LLAMA2_7B, **change}.items() if v is not None}
    with pytest.raises(InputError, match=words):
        read_config(cfg)


def test_one_device_decoding_is_the_roofline_by_hand():
    """Two layers on one A100, one sequence of 8 tokens: every step reads all its weights (memory-bound),
    so the time per token is the bytes over the bandwidth plus the launches, worked out here."""
    cfg = LLMConfig("tiny", layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1000)
    ds = parse_devices("a100:1")
    spec = ds.specs[0]
    problem = decode_problem(cfg, ds, batch=1, context=8, microbatches=1)
    plan = [Stage(tuple(range(4)), 0, 1, 1, tuple(problem.graph.options[(u, 0, 1)][0] for u in range(4)))]
    ev = evaluate_plan(problem, plan)
    assert ev.valid
    bw, launch = spec.mem_bandwidth, spec.launch
    block = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256  # q, o; k, v (2 heads of 64); MLP; norms
    kv = 2 * 2 * 64 * 2 * 8  # one sequence's cache of 8 tokens in one layer
    embed = launch + 256 * 2 / bw
    layer = (block * 2 + kv) / bw + 7 * launch
    head = (1000 * 256 * 2 + 256 * 2) / bw + launch
    assert ev.objective == pytest.approx(embed + 2 * layer + head, rel=1e-12)
    # memory: the weights (the head keeps its own copy of the matrix) and the one sequence's cache
    assert ev.stages[0].memory == pytest.approx(1000 * 256 * 2 * 2 + 2 * block * 2 + 256 * 2 + 2 * kv)


def test_the_kv_cache_sets_what_fits_and_replicas_share_the_sequences():
    cfg = read_config(LLAMA2_7B)
    ds = parse_devices("a100:2")
    big = decode_problem(cfg, ds, batch=64, context=4096, microbatches=2)
    # 64 sequences x 4096 tokens x 0.5 MiB = 128 GiB of cache: more than two A100s hold
    from solvers.registry import solve

    assert str(solve(big).status) == "infeasible"
    p = decode_problem(cfg, ds, batch=8, context=1024, microbatches=2)
    r = solve(p)
    assert str(r.status) == "optimal"
    for s in r.evaluation.stages:
        layers = sum(1 for u in s.stage.nodes if p.graph.ids[u].startswith("layer"))
        # gpipe: a replica holds N / d micro-batches of 4 sequences each, i.e. 8 / d sequences
        cache = layers * (8 // s.stage.d) * 1024 * cfg.kv_bytes_per_token / s.stage.t
        assert s.stash == pytest.approx(cache, rel=1e-12)


def test_the_dp_and_the_milp_agree_on_small_decoding_problems():
    from solvers.registry import solve

    cfg = LLMConfig("small", layers=6, hidden=512, heads=8, kv_heads=4, intermediate=1024, vocab=2000)
    for devices in ("a100:2,t4:2", "l4:4", "a100:1,t4:2,cpu:2"):
        p = decode_problem(cfg, parse_devices(devices), batch=16, context=256)
        dp, ip = solve(p, solver="dp"), solve(p, solver="ip")
        assert str(dp.status) == str(ip.status) == "optimal"
        assert dp.objective == pytest.approx(ip.objective, rel=1e-6), devices


def test_place_and_evaluate_a_model_config(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    out = tmp_path / "plan.json"
    args = ["place", str(path), "--devices", "a100:2,t4:4", "--batch-size", "32", "--context", "1024"]
    assert main(args + ["--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tokens/s" in text and "per token" in text and "32 sequences at 1024 tokens" in text
    doc = json.loads(out.read_text())
    assert doc["model"] == "stages" and doc["problem"]["context"] == 1024
    assert main(["evaluate", str(path), str(out), "--json"]) == 0  # no flags: the recorded settings
    assert json.loads(capsys.readouterr().out)["objective"] == doc["objective"]
    for bad in (["--training"], ["--batch-size", "auto"], ["--latency-slo", "5"]):
        assert main(args + bad) == 2
        assert capsys.readouterr().err.startswith("error:")


def test_max_replicas_1_on_a_model_config_caps_d_and_says_so(tmp_path, capsys):
    """--max-replicas 1 gave a stage on a100:0-1 (t = 2) in the stage table while its help promised 'one
    device per stage and its per-device table', and goodput plans said 'schedule gpipe' under a help
    saying the default is 1f1b. A model config has no one-device-per-stage model: D caps d only (a
    tensor-parallel stage still spans t devices), and the help and the summary say so, as they say that
    decoding runs GPipe."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    out = tmp_path / "plan.json"
    assert main(["place", str(path), "--devices", "a100:2", "--max-replicas", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "replicas d <= 1 per stage (--max-replicas 1; tensor-parallel stages may still span t devices)" \
        in text
    doc = json.loads(out.read_text())
    assert doc["problem"]["max_replicas"] == 1 and doc["problem"]["schedule"] == "gpipe"
    # batch 1 is one micro-batch, so one stage (sum d <= N = 1); at t = 2 each A100 reads half of the
    # 13.5 GB of weights per token, about half the time of t = 1 (the all-reduces of one token are small)
    assert [(s["dataParallelDegree"], s["tensorParallelDegree"]) for s in doc["stages"]] == [(1, 2)]
    assert main(["place", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "on a Piper file or an LLM model config D caps d only" in help_text
    assert "an LLM model config always decodes under gpipe" in help_text
    assert main(["place", str(path), "--devices", "a100:2", "--schedule", "1f1b"]) == 2
    assert "--schedule does not apply to a model config" in capsys.readouterr().err


def test_show_simulates_a_decode_plan_with_the_memory_place_sized_it_by(tmp_path, capsys):
    """docs/serving.md's llama2-7b on a100:2,t4:4, 32 sequences at 1,024 tokens: place sizes the plan
    under gpipe (decoding holds every micro-batch's KV cache at once: y = N/d = 4), while show simulated
    the decode streaming with one micro-batch held (y = 1): 9.91 GiB on the A100s against the plan's
    14.04 GiB. Now show holds every micro-batch a replica serves, as the decode does, and its peak is
    the plan's, which is by hand per stage: each layer's weights and the KV cache of the N/d
    micro-batches of 4 sequences at 1,024 tokens, plus the embedding and the head where the stage has
    them."""
    path = tmp_path / "llama2-7b.json"
    path.write_text(json.dumps(LLAMA2_7B))
    out = tmp_path / "plan.json"
    # 8 micro-batches (the default count, a pipeline of several stages; place would choose 1 here)
    assert main(["place", str(path), "--devices", "a100:2,t4:4", "--batch-size", "32", "--context", "1024",
                 "--microbatches", "8", "--out", str(out)]) == 0
    placed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert main(["show", str(out), "--no-draw", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    N = sim["microbatches"]
    assert N == 8 and sim["samples_per_microbatch"] == 32 // N
    block = 2 * (4 * 4096 ** 2 + 3 * 4096 * 11008 + 2 * 4096)  # q, k, v, o, the gated MLP, two norms; fp16
    kv = 2 * 32 * 128 * 2  # keys and values of 32 heads of 128 per token and layer, fp16
    embed, head = 2 * 32000 * 4096, 2 * (32000 * 4096 + 4096)
    assert len(sim["stages"]) == len(doc["stages"]) > 1
    for s, st in zip(sim["stages"], doc["stages"]):
        d, t = st["dataParallelDegree"], st["tensorParallelDegree"]
        assert s["peak_in_flight"] == s["model_in_flight"] == N // d
        layers = sum(str(x).startswith("layer") for x in st["nodes"])
        hand = layers * (N // d * 4 * 1024 * kv / min(t, 32) + block / t) \
            + embed * ("embed" in st["nodes"]) + head * ("head" in st["nodes"])
        assert s["peak_memory"] == pytest.approx(s["model_memory"], rel=1e-12)
        assert s["peak_memory"] == pytest.approx(hand, rel=1e-12)
    assert sim["resident"] is True
    assert main(["show", str(out), "--no-draw"]) == 0
    text = capsys.readouterr().out
    assert "schedule stream (every micro-batch's state held between its runs, as the plan's gpipe memory" \
        in text
    assert main(["show", str(out), "--no-draw", "--schedule", "gpipe"]) == 2
    assert "every micro-batch's KV cache stays held" in capsys.readouterr().err
    assert "gpipe: every micro-batch's KV cache held at once" in placed


def test_the_summary_of_one_sequence_says_one_sequence(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    assert main(["place", str(path), "--devices", "a100:2", "--batch-size", "1", "--context", "512"]) == 0
    text = capsys.readouterr().out
    assert "1 sequence at 512 tokens" in text and "1 sequences" not in text


SMALL = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 8,
         "num_key_value_heads": 8, "intermediate_size": 2816, "vocab_size": 32000, "torch_dtype": "float16"}


@pytest.mark.parametrize("devices, counts", [("a100:1,cpu:5", (8, 4, 2, 1)), ("a100:2,t4:2", (4, 2, 1))])
def test_place_chooses_the_micro_batch_count(devices, counts, tmp_path, capsys):
    """Without --microbatches the decode problem took the default count (a power of two at least the
    devices: 8 for 6 devices), so adding idle host cores to one A100 made the "optimal" plan 6x slower
    per token (8 micro-batches of one sequence each read the weights 8 times). The count is now chosen:
    the answer equals the best of --microbatches N for every N the search tries, the powers of two up to
    the default (each solved on its own, a second method), and is optimal over them."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(SMALL))
    base = ["place", str(cfg), "--devices", devices, "--batch-size", "8", "--context", "1024", "--json"]
    assert main(base) == 0
    chosen = json.loads(capsys.readouterr().out)
    each = {}
    for n in counts:
        assert main(base + ["--microbatches", str(n)]) == 0
        each[n] = json.loads(capsys.readouterr().out)["objective"]
    assert chosen["status"] == "optimal"
    assert chosen["objective"] == pytest.approx(min(each.values()), rel=1e-12)
    assert f"the most tokens/s of the counts {', '.join(map(str, counts))}" in chosen["message"]
    if devices.startswith("a100:1,"):  # idle host cores take nothing away: the A100 alone
        assert main(["place", str(cfg), "--devices", "a100:1", "--batch-size", "8", "--context", "1024",
                     "--json"]) == 0
        alone = json.loads(capsys.readouterr().out)["objective"]
        assert alone == pytest.approx(chosen["objective"], rel=1e-12) and max(each.values()) > 2 * alone
