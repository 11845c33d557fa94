"""LLM serving on the stage model (graphs/llm.py ServingModel, placement/goodput.py): prefill and
decode times by hand, TTFT / TPOT / goodput by hand on one device, the search against a brute force over
batch sizes and every plan, bad request mixes and targets, the command line."""

from __future__ import annotations

import argparse
import itertools
import json
import math

import numpy as np
import pytest

from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.llm import LLMConfig, ServingModel, chain_plans, prefill_node_time, read_mix
from graphs.parallel import Stage, evaluate_plan
from placement.cli import main
from placement.goodput import goodput_search

TINY = LLMConfig("tiny", layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1000)
BLOCK = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256  # q, o; k, v (2 heads of 64); MLP; norms
KV = 2 * 2 * 64 * 2  # bytes of one token's keys and values in one layer


def _one_stage(problem):
    g = problem.graph
    n = g.num_nodes
    return [Stage(tuple(range(n)), 0, 1, 1, tuple(g.options[(u, 0, 1)][0] for u in range(n)))]


def _by_hand(batch):
    """Prefill of a 4096-token prompt and the decode step of ``batch`` sequences at 4101 tokens (the mean
    context of a 4096 + 10 request: 4096 + 10 / 2) through the tiny model on one A100, by the roofline."""
    spec = parse_devices("a100:1").specs[0]
    peak, bw, launch = spec.fp16, spec.mem_bandwidth, spec.launch
    s = 4096
    flops = 2 * BLOCK * s + 2 * 256 * s * (s + 1)  # the weights per token, causal attention's square
    layer_prefill = max(flops / peak, (2 * BLOCK + s * KV) / bw) + 7 * launch
    assert flops / peak > (2 * BLOCK + s * KV) / bw  # compute-bound
    head_w = 1000 * 256 * 2 + 256 * 2
    prefill = (launch + s * 256 * 2 / bw) + 2 * layer_prefill + (head_w / bw + launch)
    m, c = batch, 4101
    layer_step = max((2 * BLOCK * m + 4 * c * 256 * m) / peak, (2 * BLOCK + m * c * KV) / bw) + 7 * launch
    assert (2 * BLOCK * m + 4 * c * 256 * m) / peak < (2 * BLOCK + m * c * KV) / bw  # bandwidth-bound
    step = (launch + m * 256 * 2 / bw) + 2 * layer_step + max(2 * 1000 * 256 * m / peak, head_w / bw) + launch
    return prefill, step


MIX1 = {"buckets": [{"input": 4096, "output": 10, "weight": 1}]}


@pytest.mark.parametrize("batch, ttft, tpot, limit", [
    (64, 1.5, 4.0, "TTFT target"),  # multiples of the prefill and of the full batch's TPOT
    (64, None, 1.25, "TPOT target"),
    (1, None, None, "KV slots"),
])
def test_ttft_tpot_and_goodput_by_hand_on_one_device(batch, ttft, tpot, limit):
    P, T0 = _by_hand(batch)
    mix = read_mix(MIX1)
    assert (mix.decode_context, mix.memory_context, mix.decode_steps) == (4101, 4106, 9)
    sm = ServingModel(TINY, parse_devices("a100:1"), mix, ttft=None if ttft is None else ttft * P,
                      tpot=None if tpot is None else tpot * T0)
    problem = sm.problem(batch, microbatches=1)
    plan = _one_stage(problem)
    ev = evaluate_plan(problem, plan)
    # memory: the KV cache of the batch at the longest request, 4096 + 10 tokens, in two layers
    assert ev.stages[0].stash == pytest.approx(2 * batch * 4106 * KV, rel=1e-12)
    sv = sm.evaluate(problem, plan, batch)
    assert sv.buckets[0].prefill == pytest.approx(P, rel=1e-12)
    assert sv.tpot_full == pytest.approx(T0, rel=1e-12)
    assert sv.limit == limit
    # one bucket on one device: the prefill bottleneck S is the prefill P, E[S] = P, E[S^2] = P^2
    if limit == "TTFT target":  # lam P^2 / (2 (1 - lam P)) = 0.5 P  ->  lam = 0.5 / P
        lam = 0.5 / P
    elif limit == "TPOT target":  # T0 / (1 - lam P) = 1.25 T0  ->  lam = 0.2 / P
        lam = 0.2 / P
    else:  # lam (P + 9 T0 / (1 - lam P)) = 1: the smaller root of P^2 lam^2 - (2P + 9 T0) lam + 1
        b = 2 * P + 9 * T0
        lam = (b - math.sqrt(b * b - 4 * P * P)) / (2 * P * P)
    assert sv.rate == pytest.approx(lam, rel=1e-9)
    assert sv.goodput == pytest.approx(lam, rel=1e-9) and sv.attainment == 1.0
    wait = lam * P * P / (2 * (1 - lam * P))
    assert sv.wait == pytest.approx(wait, rel=1e-9)
    # slots held P + 9 TPOT, load u = lam hold / batch: at the KV-slot limit (batch 1) u = 1 and the slot
    # queue is critical (an infinite mean wait); at 64 slots (about 32 servers: J = 2 at lam P = 1 / 2) u is
    # at most a quarter and the wait nil
    u = lam * (P + 9 * T0 / (1 - lam * P)) / batch
    if batch == 1:
        assert u == pytest.approx(1, rel=1e-9)
        assert math.isinf(sv.slot_wait) and math.isinf(sv.buckets[0].ttft)
    else:
        assert u < 0.25 and sv.slot_wait < 1e-10 * P
        assert sv.buckets[0].ttft == pytest.approx(wait + P, rel=1e-9)
    assert sv.tpot == pytest.approx(T0 / (1 - lam * P), rel=1e-9)
    assert sv.slots == pytest.approx(lam * (P + 9 * sv.tpot), rel=1e-9) and sv.slots <= batch * (1 + 1e-9)


def test_targets_nothing_can_meet_give_zero_goodput():
    P, T0 = _by_hand(64)
    mix = read_mix(MIX1)
    problem = ServingModel(TINY, parse_devices("a100:1"), mix).problem(64, microbatches=1)
    for ttft, tpot, words in ((None, 0.9 * T0, "TPOT target unreachable"), (0.9 * P, None, "TTFT target")):
        sv = ServingModel(TINY, parse_devices("a100:1"), mix, ttft=ttft, tpot=tpot).evaluate(
            problem, _one_stage(problem), 64)
        assert sv.goodput == 0 and words in sv.limit


def test_prefill_at_one_token_is_the_decode_step_of_one_sequence():
    from graphs.llm import layer_decode_step, layer_prefill_time

    for spec in parse_devices("a100:1,t4:2,l4:2").specs:
        for t in (1, 2):
            one = layer_decode_step(TINY, spec, t, 1, 1)
            assert layer_prefill_time(TINY, spec, t, 1) == pytest.approx(one, rel=1e-12)


# ------------------------------------------------------------------ brute force over batches and plans
def _all_plans(problem):
    """Every plan of the chain, written independently of chain_plans: cut points, then a kind and
    degrees per segment."""
    g, n, N = problem.graph, problem.graph.num_nodes, problem.microbatches
    counts = [k.count for k in problem.kinds]
    opts = [(k, t, d) for k in range(len(counts)) for t in (1, 2, 4, 8) for d in range(1, N + 1)
            if N % d == 0 and t * d <= counts[k]]
    for cuts_n in range(n):
        for cuts in itertools.combinations(range(1, n), cuts_n):
            bounds = (0, *cuts, n)
            segs = [range(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
            for choice in itertools.product(opts, repeat=len(segs)):
                if sum(d for _, _, d in choice) > N:
                    continue
                used = [0] * len(counts)
                for k, t, d in choice:
                    used[k] += t * d
                if any(u > c for u, c in zip(used, counts)):
                    continue
                if any((u, k, t) not in g.options for seg, (k, t, _) in zip(segs, choice) for u in seg):
                    continue
                yield [Stage(tuple(seg), k, d, t, tuple(g.options[(u, k, t)][0] for u in seg))
                       for seg, (k, t, d) in zip(segs, choice)]


def _brute_goodput(cfg, devices, mix, problem, plan, batch, ttft, tpot):
    """The serving model's goodput of one plan from its definitions, maximised over a dense grid of
    arrival rates (a lower bound on the supremum, within one grid step of it)."""
    ev = evaluate_plan(problem, plan)
    if not ev.valid:
        return None
    shares = np.array([b.weight for b in mix.buckets])
    shares /= shares.sum()
    n = problem.graph.num_nodes
    P = np.zeros(len(shares))
    S = np.zeros(len(shares))
    Q = np.zeros(len(shares))  # sum over the stages of p_i / d_i
    for st in plan:
        spec = devices.specs[st.kind]
        link = 0.0 if spec.host else cfg.hidden * cfg.dtype_bytes / spec.link_bandwidth
        crossings = (min(st.nodes) > 0) + (max(st.nodes) < n - 1)
        p = np.array([sum(prefill_node_time(cfg, spec, st.t, u, b.input) for u in st.nodes)
                      + b.input * link * crossings for b in mix.buckets])
        P += p
        S = np.maximum(S, p / st.d)
        Q += p / st.d
    N = problem.microbatches
    m = batch / N
    t0 = max(sum(m * s.stage.d * s.time_per_sample for s in ev.stages), batch * ev.objective)
    C = np.maximum(S, Q - (N - 1) / N * t0)  # a lone prefill's stall of the ring
    D = sum(q * (b.output - 1) for q, b in zip(shares, mix.buckets))
    a, e2, g = shares @ S, shares @ S ** 2, shares @ P
    lam = np.linspace(0, 1 / a, 400_001)[1:-1]
    rho = lam * a
    wait = lam * e2 / (2 * (1 - rho))
    stall = 1 - (1 - rho) * np.exp(-lam * (shares @ (C - S)))
    tp = t0 / (1 - stall)
    hold = g + D * tp
    u = lam * hold / batch
    k = np.maximum(1.0, batch / (1 + lam * (shares @ C) / (1 - stall)))  # servers: slots in steps of J

    uc = np.minimum(u, 1 - 1e-12)

    def erlang_c(x, n):  # the explicit sum: A^n / n! n / (n - A) over sum_{i<n} A^i / i! + that, A = x n
        A = x * n
        top = A ** n / math.factorial(n) / (1 - x)
        return top / (sum(A ** i / math.factorial(i) for i in range(n)) + top)

    lo = np.floor(k).astype(int)
    f = k - lo
    c = np.zeros_like(u)
    for n in np.unique(lo):  # each server count on the rates that have it only
        at = lo == n
        x = uc[at]
        c[at] = (1 - f[at]) * erlang_c(x, int(n)) + f[at] * erlang_c(x, int(n) + 1)
    wait = wait + np.where(u < 1, c * hold / (batch * (1 - uc)), np.inf)
    ok = (u <= 1) & (tp <= tpot)
    met = sum(q * (wait + p <= ttft) for q, p in zip(shares, P))
    return float(np.max(lam * met * ok)), float(lam[1] - lam[0])


@pytest.mark.parametrize("largest", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_the_search_is_the_brute_force_over_batch_sizes_and_every_plan(largest):
    """goodput_search over the batch sizes 1..largest equals the brute force over every batch size,
    micro-batch count and plan. The cost is the brute force's 400,000-rate grid on each plan (84 plans
    up to batch 4, 168 up to 8); batch 4 already has all three micro-batch counts (1, 2, 4), so the
    default run stops there and the slow run goes to 8 (the default run's size before, about 13 s on 2
    cores)."""
    from solvers.registry import solve

    devices = parse_devices("a100:1,t4:2")
    mix = read_mix({"buckets": [{"input": 64, "output": 200, "weight": 3},
                                {"input": 3000, "output": 20, "weight": 1}]})
    ttft, tpot = 2.5e-4, 3.2e-4
    sm = ServingModel(TINY, devices, mix, ttft=ttft, tpot=tpot)
    batches = list(range(1, largest + 1))
    search = goodput_search(sm, batches, solve)
    assert search.exhaustive and search.best is not None
    best, step = 0.0, 0.0
    for b in batches:
        for n in (1, 2, 4):  # the micro-batch counts: powers of two dividing the batch, up to 4 devices'
            if b % n:
                continue
            p = sm.problem(b, microbatches=n)
            plans = list(_all_plans(p))
            assert len(plans) == len(chain_plans(p, 10 ** 6))
            for plan in plans:
                r = _brute_goodput(TINY, devices, mix, p, plan, b, ttft, tpot)
                if r is not None and r[0] > best:
                    best, step = r
    ours = search.best.serving.goodput
    assert best > 0
    assert best * (1 - 1e-12) <= ours <= best + 2 * step * 1.0 + 1e-9
    # the goodput plan is re-scored by the one evaluator, and the DP's plan is no better
    assert evaluate_plan(search.best.problem, search.best.plan).valid
    for pt in search.points:
        dp = sm.evaluate(pt.problem, pt.result.plan, pt.batch)
        assert dp.goodput <= pt.serving.goodput * (1 + 1e-12)


def test_the_best_batch_trades_tpot_against_capacity():
    """With a tight TPOT target the largest batch is not the best: its full batch's step is too slow."""
    from solvers.registry import solve

    devices = parse_devices("t4:2")
    mix = read_mix({"buckets": [{"input": 128, "output": 64, "weight": 1}]})
    loose = goodput_search(ServingModel(TINY, devices, mix, ttft=0.01, tpot=1.0), [1, 4, 16, 64], solve)
    assert loose.best.batch == 64
    t_full = {pt.batch: pt.serving.tpot_full for pt in loose.points}
    tight = goodput_search(ServingModel(TINY, devices, mix, ttft=0.01, tpot=1.2 * t_full[16]),
                           [1, 4, 16, 64], solve)
    assert tight.best.batch == 16
    gp = {pt.batch: pt.serving.goodput for pt in tight.points}
    assert gp[64] < gp[16] < {pt.batch: pt.serving.goodput for pt in loose.points}[16] * (1 + 1e-12)


# ------------------------------------------------------------------------------- bad input, the CLI
@pytest.mark.parametrize("mix, words", [
    ({"buckets": [{"input": 10, "weight": 1}]}, "bucket 0 has no 'output'"),
    ({"buckets": [{"input": 10, "output": 5, "weight": 1}, {"input": 0, "output": 5, "weight": 1}]},
     "bucket 1: 'input' must be a positive integer"),
    ({"buckets": [{"input": 10, "output": 5, "weight": -2}]}, "'weight' must be a positive number"),
    ({"buckets": []}, "non-empty list"),
    ({"requests": []}, "needs a 'buckets' list"),
    ({"buckets": [{"input": 10, "output": 5, "weight": 1, "prio": 2}]}, "unknown field 'prio'"),
])
def test_bad_mixes_name_the_file_and_field(tmp_path, mix, words):
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(mix))
    with pytest.raises(InputError, match=words) as e:
        read_mix(path)
    assert str(e.value).startswith(str(path))


def test_negative_targets_are_refused():
    mix = read_mix(MIX1)
    with pytest.raises(InputError, match="TTFT target must be a positive"):
        ServingModel(TINY, parse_devices("a100:1"), mix, ttft=-1.0)


LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
             "torch_dtype": "float16"}


@pytest.fixture
def files(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA2_7B))
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"buckets": [{"input": 256, "output": 128, "weight": 5},
                                           {"input": 4096, "output": 256, "weight": 1}]}))
    return cfg, mix


def test_place_goodput_and_evaluate_it(tmp_path, capsys, files):
    cfg, mix = files
    out = tmp_path / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:2,t4:2", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "4,16",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "goodput req/s" in text and "TTFT ms" in text and "proven:" in text and "<- best" in text
    doc = json.loads(out.read_text())
    g = doc["goodput"]
    assert g["goodput_rps"] > 0 and g["batch_size"] in (4, 16) and len(g["buckets"]) == 2
    assert doc["problem"]["objective"] == "goodput" and doc["problem"]["memory_context"] == 4352
    assert main(["evaluate", str(cfg), str(out), "--json"]) == 0  # the recorded mix and targets
    again = json.loads(capsys.readouterr().out)
    assert again["goodput"]["goodput_rps"] == pytest.approx(g["goodput_rps"], rel=1e-12)
    assert again["objective"] == pytest.approx(doc["objective"], rel=1e-12)


@pytest.mark.parametrize("extra, words", [
    (["--ttft-slo", "-5"], "--ttft-slo must be a positive number"),
    (["--tpot-slo", "nan"], "--tpot-slo must be a positive number"),
    (["--requests", "MISSING"], "no such file"),
    (["--requests", "BAD"], "bucket 0 has no 'weight'"),
    (["--context", "100"], "--context does not apply"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, files, extra, words):
    cfg, mix = files
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"buckets": [{"input": 1, "output": 1}]}))
    names = {"MISSING": str(tmp_path / "missing.json"), "BAD": str(bad)}
    extra = [names.get(x, x) for x in extra]
    args = ["place", str(cfg), "--devices", "a100:2", "--objective", "goodput", "--requests", str(mix)]
    if "--requests" in extra:
        args = args[:-2]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and words in err and len(err.strip().splitlines()) == 1


def test_cli_refuses_goodput_options_where_they_do_not_apply(tmp_path, capsys, files):
    cfg, mix = files
    assert main(["place", str(cfg), "--devices", "a100:2", "--objective", "goodput"]) == 2
    assert "needs --requests" in capsys.readouterr().err
    assert main(["place", str(cfg), "--devices", "a100:2", "--requests", str(mix)]) == 2
    assert "applies with --objective goodput" in capsys.readouterr().err
    piper = tmp_path / "w.json"
    piper.write_text(json.dumps({"nodes": [{"id": 0, "cpuLatency": 1, "fpgaLatency": 1, "size": 1}],
                                 "edges": [], "maxFPGAs": 1, "maxCPUs": 1, "maxSizePerFPGA": 1}))
    assert main(["place", str(piper), "--objective", "goodput"]) == 2
    assert "to an LLM: a model config" in capsys.readouterr().err


def test_goodput_without_both_targets_is_refused(tmp_path, capsys, files):
    """Without --ttft-slo / --tpot-slo the goodput was the rate at which the KV slots run out: TTFT
    5.865e+17 ms, 'meets yes', '100.0% meet no targets', exit 0. Goodput counts the requests meeting both
    targets (docs/serving.md), so a missing one is one error line naming it, exit 2."""
    cfg, mix = files
    base = ["place", str(cfg), "--devices", "a100:2", "--objective", "goodput", "--requests", str(mix),
            "--batch-size", "8"]
    for extra, missing in (([], "--ttft-slo MS and --tpot-slo MS"), (["--tpot-slo", "40"], "--ttft-slo MS"),
                           (["--ttft-slo", "300"], "--tpot-slo MS")):
        assert main(base + extra) == 2
        out = capsys.readouterr()
        assert out.err.startswith(f"error: --objective goodput needs {missing}:"), out.err
        assert len(out.err.strip().splitlines()) == 1 and out.out == ""
    # a goodput result that records no targets (as the old code wrote one): evaluate names the option
    plan = tmp_path / "plan.json"
    assert main(base + ["--ttft-slo", "300", "--tpot-slo", "40", "--out", str(plan)]) == 0
    capsys.readouterr()
    doc = json.loads(plan.read_text())
    doc["problem"]["ttft_slo_ms"] = None
    plan.write_text(json.dumps(doc))
    assert main(["evaluate", str(cfg), str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --objective goodput needs --ttft-slo MS (the result records none)"), err
    assert main(["evaluate", str(cfg), str(plan), "--ttft-slo", "300"]) == 0  # given again: re-scored
    capsys.readouterr()
    # provision's instances are scored by the same goodput
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"prices": {"a100": 3.0}}))
    assert main(["provision", str(cfg), "--requests", str(mix), "--available", "a100:2", "--prices",
                 str(prices), "--target-throughput", "1", "--ttft-slo", "300"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: placement provision of a model config needs --tpot-slo MS:"), err


TINY_CONFIG = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
               "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "float16"}  # TINY


@pytest.mark.parametrize("ttft_x, tpot_x, target", [
    (10.0, 0.5, "TPOT"),  # multiples of the prefill P and of batch 1's decode step T0 (by hand)
    (0.5, 10.0, "TTFT"),
    (0.5, 0.5, "both"),
])
def test_targets_no_plan_meets_exit_1_with_the_least_figures(tmp_path, capsys, ttft_x, tpot_x, target):
    """Impossible targets printed 'goodput 0 requests/s at 0 requests/s arriving (0.0% meet ...)' and a
    plan, exit 0. Now: exit 1, one error line naming the target no plan meets and the least TPOT / TTFT
    (here, on one A100, every plan is the whole model on it: the least TPOT is batch 1's decode step T0,
    the least TTFT the prefill P, both by hand), and a result file of no plan."""
    P, T0 = _by_hand(1)
    cfg, mix, out = tmp_path / "tiny.json", tmp_path / "mix.json", tmp_path / "none.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    mix.write_text(json.dumps(MIX1))
    ttft_ms, tpot_ms = ttft_x * P * 1e3, tpot_x * T0 * 1e3
    args = ["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
            "--ttft-slo", repr(ttft_ms), "--tpot-slo", repr(tpot_ms), "--batch-size", "1,4"]
    assert main(args + ["--out", str(out)]) == 1
    res = capsys.readouterr()
    err = res.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: infeasible: no plan meets "), err
    tpot_words = f"the least TPOT of any plan is {T0 * 1e3:.4g} ms"
    ttft_words = f"the least TTFT of any plan is {P * 1e3:.4g} ms"
    head = {"TPOT": f"the TPOT target of {tpot_ms:.4g} ms at",
            "TTFT": f"the TTFT target of {ttft_ms:.4g} ms at",
            "both": f"either the TPOT target of {tpot_ms:.4g} ms or the TTFT target of {ttft_ms:.4g} ms at"}
    assert head[target] in err
    assert (tpot_words in err) == (target != "TTFT") and (ttft_words in err) == (target != "TPOT")
    assert "goodput 0" not in res.out and "<- best" not in res.out and "TTFT ms" not in res.out
    doc = json.loads(out.read_text())
    assert doc["status"] == "infeasible" and doc["stages"] == [] and doc["devices"] == []
    assert doc["message"] in err
    g = doc["goodput"]
    assert g["goodput_rps"] == 0 and g["least_proven"] is True
    assert g["least_tpot_s"] == pytest.approx(T0, rel=1e-9)
    assert g["least_ttft_s"] == pytest.approx(P, rel=1e-9)
    assert [x["batch_size"] for x in g["sweep"]] == [1, 4]
    assert main(["evaluate", str(cfg), str(out)]) == 2  # a result of no plan: nothing to evaluate
    assert "holds no plan (status infeasible" in capsys.readouterr().err
    assert main(args + ["--json"]) == 1  # the same result on stdout
    res = capsys.readouterr()
    assert json.loads(res.out)["status"] == "infeasible" and res.err.strip() == err


def test_no_plan_fits_writes_a_result_of_no_plan(tmp_path, capsys):
    """A batch whose KV cache fits no device (65,536 sequences of 4,106 tokens of the tiny model: 2 layers
    x 512 bytes a token, 275 GB, over an A100's 40 GiB) was one error line and no result file."""
    cfg, mix, out = tmp_path / "tiny.json", tmp_path / "mix.json", tmp_path / "none.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    mix.write_text(json.dumps(MIX1))
    assert 65536 * 4106 * 2 * KV > 40 * 2 ** 30
    assert main(["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
                 "--ttft-slo", "1000", "--tpot-slo", "100", "--batch-size", "65536", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: infeasible: ") and "no plan fits" in err
    doc = json.loads(out.read_text())
    assert doc["status"] == "infeasible" and doc["stages"] == [] and "least_tpot_s" not in doc["goodput"]


def test_targets_missed_words():
    """Which target no plan meets, and the least figures: proven where every plan was scored."""
    from types import SimpleNamespace

    from placement.goodput import targets_missed

    model = SimpleNamespace(ttft=0.01, tpot=0.002, mix=SimpleNamespace(decode_steps=9))
    assert targets_missed(model, 0.003, 0.005, True) == (
        "no plan meets the TPOT target of 2 ms at any batch size and micro-batch count tried: the least "
        "TPOT of any plan is 3 ms (a full batch's decode step, no load)", True, True)
    why, proven, least = targets_missed(model, 0.001, 0.02, False)
    assert why.startswith("no plan found meets the TTFT target of 10 ms at any batch size and micro-batch "
                          "count tried (not proven infeasible): the least TTFT found is 20 ms")
    assert not proven and not least
    # each target met by some plan, not both by one
    why = targets_missed(model, 0.001, 0.005, True).words
    assert "the TTFT target of 10 ms and the TPOT target of 2 ms together" in why
    assert why.endswith("but not on one plan")
    # every request one token long: no decode step, the TPOT target binds nothing
    one = SimpleNamespace(ttft=0.01, tpot=0.002, mix=SimpleNamespace(decode_steps=0))
    assert targets_missed(one, 0.003, 0.02, True).words.startswith("no plan meets the TTFT target of 10 ms")


def test_targets_missed_with_disaggregated_pools_proves_nothing_of_the_ttft():
    """--disaggregate: every decode plan scored ("exhaustive") said "infeasible: no plan meets the TTFT
    target ...: the least TTFT of any plan", but a split's prefill pool is scored with the prefill DP's
    plan per micro-batch count only: a prefill plan of shorter TTFT may meet the target. Where the TTFT
    decides it is now "no plan found ... (not proven infeasible)" and "the least TTFT found"; the TPOT
    (the decode pool's alone) still proves it."""
    from types import SimpleNamespace

    from placement.goodput import targets_missed

    model = SimpleNamespace(ttft=0.01, tpot=0.002, mix=SimpleNamespace(decode_steps=9))

    def missed(tpot, ttft):
        return targets_missed(model, tpot, ttft, True, prefill_exhaustive=False)

    assert missed(0.001, 0.02) == (
        "no plan found meets the TTFT target of 10 ms at any batch size and micro-batch count tried (not "
        "proven infeasible): the least TTFT found is 20 ms (the shortest prompt's prefill alone, no "
        "queueing)", False, False)
    assert missed(0.001, 0.005) == (
        "no plan found meets the TTFT target of 10 ms and the TPOT target of 2 ms together at any batch size "
        "and micro-batch count tried (not proven infeasible): the least TPOT of any plan is 1 ms (a full "
        "batch's decode step, no load) and the least TTFT found is 5 ms (the shortest prompt's prefill "
        "alone, no queueing), but not on one plan", False, False)
    assert missed(0.003, 0.005) == (
        "no plan meets the TPOT target of 2 ms at any batch size and micro-batch count tried: the least "
        "TPOT of any plan is 3 ms (a full batch's decode step, no load)", True, False)
    assert missed(0.003, 0.02) == (
        "no plan meets the TPOT target of 2 ms at any batch size and micro-batch count tried: the least "
        "TPOT of any plan is 3 ms (a full batch's decode step, no load); and the least TTFT found is 20 ms "
        "(the shortest prompt's prefill alone, no queueing), over the TTFT target of 10 ms too", True, False)


@pytest.mark.parametrize("target", ["TTFT", "TPOT"])
def test_disaggregated_targets_missed_end_to_end(tmp_path, capsys, target):
    """``place --disaggregate`` on an A100 and a T4 with a target below what the A100 reaches alone (the
    least of any layout: the prefill P and batch 1's decode step T0 on it, by hand). The TTFT missed was
    "infeasible", "the least TTFT of any plan", least_proven: the prefill pools' plans are the prefill
    DP's only, so now "no plan found ... (not proven infeasible)", status unknown. The TPOT missed is
    still proven: every decode plan was scored and no prefill plan changes a decode step."""
    P, T0 = _by_hand(1)
    cfg, mix, out = tmp_path / "tiny.json", tmp_path / "mix.json", tmp_path / "none.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    mix.write_text(json.dumps(MIX1))
    ttft_ms, tpot_ms = (0.5 * P * 1e3, 1e6) if target == "TTFT" else (1e6, 0.5 * T0 * 1e3)
    assert main(["place", str(cfg), "--devices", "a100:1,t4:1", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", repr(ttft_ms), "--tpot-slo", repr(tpot_ms), "--batch-size", "1,4",
                 "--disaggregate", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    doc = json.loads(out.read_text())
    g = doc["goodput"]
    assert g["least_ttft_s"] == pytest.approx(P, rel=1e-9)
    assert g["least_tpot_s"] == pytest.approx(T0, rel=1e-9)
    assert g["least_proven"] is False and len(err.splitlines()) == 1
    tried = "at any batch size and micro-batch count tried"
    if target == "TTFT":
        assert err == (f"error: no plan found meets the TTFT target of {ttft_ms:.4g} ms {tried} (not proven "
                       f"infeasible): the least TTFT found is {P * 1e3:.4g} ms (the shortest prompt's "
                       f"prefill alone, no queueing)")
        assert doc["status"] == "unknown"
    else:
        assert err == (f"error: infeasible: no plan meets the TPOT target of {tpot_ms:.4g} ms {tried}: the "
                       f"least TPOT of any plan is {T0 * 1e3:.4g} ms (a full batch's decode step, no load)")
        assert doc["status"] == "infeasible"


def test_the_least_ttft_is_over_every_way_a_plan_was_served():
    """A disaggregated split scores each decode plan with every prefill plan and kept the one of most
    goodput (max by goodput: the first on a tie); when every goodput was 0 the least TTFT came from the
    first prefill plan's scores alone, overstating it. ``score`` now gives every pairing's evaluation:
    each counts towards the least TPOT and TTFT, the one of most goodput is the plan's."""
    from types import SimpleNamespace

    from solvers.registry import solve

    def ev(goodput, prefill, tpot=0.004):
        return SimpleNamespace(valid=True, goodput=goodput, tpot_full=tpot,
                               buckets=(SimpleNamespace(prefill=prefill),))

    model = ServingModel(TINY, parse_devices("a100:1"), read_mix(MIX1), ttft=0.01, tpot=0.01)
    pairings = {"zero": [ev(0.0, 0.3), ev(0.0, 0.1), ev(0.0, 0.2)],
                "some": [ev(1.0, 0.3), ev(2.0, 0.2, 0.003)]}
    for name, scored in pairings.items():  # one batch, one micro-batch count, the DP's plan alone
        search = goodput_search(model, [1], solve, exhaustive_limit=0,
                                score=lambda p, plan, b, e, scored=scored: scored)
        assert search.least_ttft == pytest.approx(0.1 if name == "zero" else 0.2)
        assert search.least_tpot == pytest.approx(0.004 if name == "zero" else 0.003)
        assert search.points[0].serving is (scored[0] if name == "zero" else scored[1])


# ------------------------------------------------------------------------------- disaggregated pools
def test_disaggregated_goodput_by_hand():
    """Prefill on one T4, decode on one A100, one bucket: TTFT is the prefill pool's M/G/1 wait plus the
    prefill, TPOT the decode pool's full batch (no prefill stalls it), and the slots hold each request
    for the KV transfer and its decode steps."""
    from graphs.llm import disaggregated_goodput, kv_transfer_time, prefill_problem

    mix = read_mix({"buckets": [{"input": 512, "output": 33, "weight": 1}]})
    pre_ds, dec_ds = parse_devices("t4:1"), parse_devices("a100:1")
    t4 = pre_ds.specs[0]
    P = sum(prefill_node_time(TINY, t4, 1, u, 512) for u in range(4))
    pp = prefill_problem(TINY, pre_ds, mix, microbatches=1)
    assert evaluate_plan(pp, _one_stage(pp)).objective == pytest.approx(P, rel=1e-12)  # one request's
    for ttft_x, limit, B in ((100.0, "KV slots", 8), (1.5, "TTFT target", 64)):
        dec = ServingModel(TINY, dec_ds, mix, ttft=ttft_x * P, tpot=1.0)
        problem = dec.problem(B, microbatches=1)
        ev = evaluate_plan(problem, _one_stage(problem))
        T0 = B * ev.objective
        link = min(t4.link_bandwidth, dec_ds.specs[0].link_bandwidth)
        move = kv_transfer_time(TINY, 512, link)
        assert move == pytest.approx(512 * 2 * KV / link)
        pre = ServingModel(TINY, pre_ds, mix, ttft=ttft_x * P, tpot=1.0)
        sv = disaggregated_goodput(pre, pp, _one_stage(pp), dec, problem, _one_stage(problem), B)
        lam = B / (move + 32 * T0) if limit == "KV slots" else 0.5 / P
        assert sv.limit == limit and sv.goodput == pytest.approx(lam, rel=1e-9)
        assert sv.tpot == pytest.approx(T0, rel=1e-12) and sv.kv_transfer == pytest.approx(move, rel=1e-12)
        assert sv.buckets[0].ttft == pytest.approx(P + lam * P * P / (2 * (1 - lam * P)), rel=1e-9)


@pytest.mark.parametrize("mix, layout", [
    ({"buckets": [{"input": 4096, "output": 64, "weight": 1}]}, "disaggregated"),  # prefill-heavy
    ({"buckets": [{"input": 128, "output": 1024, "weight": 1}]}, "colocated"),  # decode-heavy
])
def test_disaggregate_keeps_the_better_layout(tmp_path, capsys, files, mix, layout):
    cfg, _ = files
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(mix))
    out = tmp_path / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:2,l4:4", "--objective", "goodput", "--requests",
                 str(path), "--ttft-slo", "1000", "--tpot-slo", "30", "--disaggregate",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"best: {layout}" in text
    g = json.loads(out.read_text())["goodput"]
    assert g["layout"] == layout and len(g["layouts"]) == 3  # colocated and the two splits of two kinds
    assert g["goodput_rps"] == pytest.approx(max(x["goodput_rps"] for x in g["layouts"]), rel=1e-12)
    assert (g["goodput_rps"] > g["layouts"][0]["goodput_rps"]) == (layout == "disaggregated")


def test_disaggregate_needs_goodput_and_two_kinds(capsys, files):
    cfg, mix = files
    assert main(["place", str(cfg), "--devices", "a100:2,l4:2", "--disaggregate"]) == 2
    assert "--disaggregate applies with --objective goodput" in capsys.readouterr().err
    assert main(["place", str(cfg), "--devices", "a100:2", "--objective", "goodput", "--requests", str(mix),
                 "--ttft-slo", "300", "--tpot-slo", "40", "--disaggregate"]) == 2
    assert "at least two kinds" in capsys.readouterr().err


def test_a_prefill_pools_stages_pay_the_prompts_hidden_states_once_per_token():
    # two T4 stages of the tiny model's prefill problem (embed + layer 0 | layer 1 + head): each crosses
    # one tensor, the 512 prompt tokens' hidden states (256 x 2 bytes each) over the T4's link
    from graphs.llm import prefill_problem

    mix = read_mix({"buckets": [{"input": 512, "output": 33, "weight": 1}]})
    ds = parse_devices("t4:2")
    t4 = ds.specs[0]
    pp = prefill_problem(TINY, ds, mix, microbatches=2)
    g = pp.graph
    plan = [Stage(nodes, 0, 1, 1, tuple(g.options[(u, 0, 1)][0] for u in nodes))
            for nodes in ((0, 1), (2, 3))]
    move = 512 * 256 * 2 / t4.link_bandwidth
    sm = ServingModel(TINY, ds, mix)
    for st in plan:
        compute = sum(prefill_node_time(TINY, t4, 1, u, 512) for u in st.nodes)
        assert sm.stage_prefill(pp, st) == [pytest.approx(compute + move, rel=1e-12)]


# ------------------------------------------------------------------------------- SGLang arguments
def _stages(problem, spec):
    """Stages ``(first node, last node, kind, t, d)`` of a chain problem."""
    g = problem.graph
    return [Stage(tuple(range(a, b + 1)), k, d, t, tuple(g.options[(u, k, t)][0] for u in range(a, b + 1)))
            for a, b, k, t, d in spec]


def test_sglang_servers_of_known_plans():
    from graphs.llm import prefill_problem
    from placement.vllm_out import sglang_json, sglang_server

    cfg = LLMConfig("m", layers=6, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1000)
    ds = parse_devices("a100:4,l4:4")
    mix = read_mix(MIX1)
    dec = ServingModel(cfg, ds, mix).problem(8, microbatches=4)
    # colocated: embed + layers 0-1 on 2 A100 (t 2), layers 2-5 + head on 2 L4 (t 2), each stage twice
    plan = _stages(dec, [(0, 2, 0, 2, 2), (3, 7, 1, 2, 2)])
    sv = sglang_server(dec, plan, 6)
    assert sv["flags"] == ["--tp-size", "2", "--pp-size", "2", "--dp-size", "2", "--port", "30000"]
    assert sv["env"] == {"SGLANG_PP_LAYER_PARTITION": "2,4"}
    assert sv["command"] == ("SGLANG_PP_LAYER_PARTITION=2,4 python -m sglang.launch_server "
                             "--model-path <model> --tp-size 2 --pp-size 2 --dp-size 2 --port 30000")
    assert [s["layers"] for s in sv["stages"]] == [[0, 2], [2, 6]]
    assert [(s["kind"], s["gpus"]) for s in sv["stages"]] == [("a100", 4), ("l4", 4)]
    # stages of different tensor-parallel degrees: no single SGLang server
    bad = sglang_server(dec, _stages(dec, [(0, 2, 0, 4, 1), (3, 7, 1, 2, 1)]), 6)
    assert bad["command"] is None and "one --tp-size" in bad["note"]
    # disaggregated: prefill on the 4 A100 (one stage, t 4), decode on the 4 L4 (t 4), and the router
    pre_ds, dec_ds = parse_devices("a100:4"), parse_devices("l4:4")
    pp = prefill_problem(cfg, pre_ds, mix, microbatches=1)
    dp = ServingModel(cfg, dec_ds, mix).problem(8, microbatches=1)
    out = sglang_json(6, (dp, _stages(dp, [(0, 7, 0, 4, 1)])), (pp, _stages(pp, [(0, 7, 0, 4, 1)])))
    pre, de = out["servers"]
    assert out["layout"] == "disaggregated"
    assert pre["flags"] == ["--tp-size", "4", "--pp-size", "1", "--dp-size", "1", "--disaggregation-mode",
                            "prefill", "--port", "30000"] and pre["env"] == {}
    assert de["flags"][-4:] == ["--disaggregation-mode", "decode", "--port", "30001"]
    assert de["stages"][0]["kind"] == "l4" and pre["stages"][0]["kind"] == "a100"
    assert out["router"].startswith("python -m sglang_router.launch_router --pd-disaggregation "
                                    "--prefill http://<prefill-host>:30000 --decode http://<decode-host>:30001")


def test_engine_sglang_on_the_command_line(tmp_path, capsys, files):
    cfg, _ = files
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"buckets": [{"input": 4096, "output": 64, "weight": 1}]}))
    out = tmp_path / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:2,l4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "1000", "--tpot-slo", "30", "--disaggregate", "--engine", "sglang",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    sg = data["sglang"]
    assert sg["layout"] == "disaggregated" and "SGLang deployment (disaggregated)" in text
    assert [s["mode"] for s in sg["servers"]] == ["prefill", "decode"]
    # the pools' devices: each server's GPUs are its pool's
    assert {s["kind"] for s in sg["servers"][0]["stages"]} == {"l4"}
    assert {s["kind"] for s in sg["servers"][1]["stages"]} == {"a100"}
    assert main(["place", str(cfg), "--devices", "a100:2", "--engine", "sglang"]) == 2
    assert "--engine sglang applies to a model config with --objective goodput" in capsys.readouterr().err


# ------------------------------------------------------------------ cheapest devices per bucket (Mélange)
def test_cheapest_instances_by_hand():
    from graphs.errors import InfeasibleError
    from placement.goodput import Instance, cheapest_instances

    # A (3 $/h) serves 10 short or 2 long requests/s, B (1 $/h) 5 short or 0.5 long. Per dollar, short
    # requests go furthest on B (5 against 3.3), long ones on A (0.67 against 0.5): 10 short and 2 long
    # requests/s need 2 B and 1 A, 5 $/h; A alone needs 10/10 + 2/2 = 2 (6 $/h), B alone 2 + 4 = 6 (6 $/h)
    a = Instance("a", 1, 3.0, (10.0, 2.0))
    b = Instance("b", 1, 1.0, (5.0, 0.5))
    used, load, cost = cheapest_instances([a, b], [10.0, 2.0], {"a": 4, "b": 8})
    assert used == (1, 2) and cost == pytest.approx(5.0)
    assert load[0] == pytest.approx([0.0, 2.0], abs=1e-7) and load[1] == pytest.approx([10.0, 0.0], abs=1e-7)
    # with a single B: 1 A + 1 B serve the 2 long on A and only 5 short on B, so the short ones take a
    # second A: 2 A, 6 $/h
    used, load, cost = cheapest_instances([a, b], [10.0, 2.0], {"a": 4, "b": 1})
    assert cost == pytest.approx(6.0) and used == (2, 0)
    with pytest.raises(InfeasibleError, match="no mix of the instances"):
        cheapest_instances([a, b], [10.0, 2.0], {"a": 1, "b": 1})


def test_cheapest_instances_infeasible():
    from graphs.errors import InfeasibleError
    from placement.goodput import Instance, cheapest_instances

    a = Instance("a", 1, 3.0, (10.0, 0.0))  # cannot serve the long bucket at all
    with pytest.raises(InfeasibleError, match="no mix of the instances"):
        cheapest_instances([a], [1.0, 1.0], {"a": 4})


def test_provision_buckets_covers_each_bucket_at_least_cost():
    from placement.goodput import provision_buckets
    from solvers.registry import solve

    mix = read_mix({"buckets": [{"input": 64, "output": 200, "weight": 3},
                                {"input": 3000, "output": 20, "weight": 1}]})
    sm = ServingModel(TINY, parse_devices("a100:1,t4:2"), mix, ttft=2.5e-4, tpot=3.2e-4)
    prices = {"a100": 3.0, "t4": 0.5}
    rate = 6000.0  # more than the one A100 serves alone; a T4 cannot serve the 3000-token prompts in time
    out = provision_buckets(sm, rate, [prices["a100"], prices["t4"]], solve)
    a100 = next(x for x in out.instances if x.kind == "a100")
    assert all(x.capacity[1] == 0 for x in out.instances if x.kind == "t4")
    assert sum(rate * q / c for q, c in zip(mix.shares, a100.capacity)) > 1
    # so the long prompts go to the A100, the short ones fill it and the rest goes to one T4: 3.5 $/h
    t4 = next(x for x in out.instances if (x.kind, x.count) == ("t4", 1))
    left = rate * mix.shares[0] - (1 - rate * mix.shares[1] / a100.capacity[1]) * a100.capacity[0]
    assert 0 < left <= t4.capacity[0]
    assert out.cost == pytest.approx(3.5) and out.single is None
    assert [(x.kind, x.count) for x in out.instances] == [(x.kind, x.count) for x in out.instances
                                                          if x.kind in prices]
    for b, share in enumerate(mix.shares):  # every bucket's requests are served
        assert sum(row[b] for row in out.load) == pytest.approx(rate * share, rel=1e-7)
    for x, m, row in zip(out.instances, out.used, out.load):  # within each instance type's time
        assert sum(v / c for v, c in zip(row, x.capacity) if c > 0) <= m * (1 + 1e-7)
        assert all(v <= 1e-9 for v, c in zip(row, x.capacity) if c == 0)
        assert x.price == pytest.approx(prices[x.kind] * x.count)
    assert sum(x.count * m for x, m in zip(out.instances, out.used) if x.kind == "t4") <= 2
    assert out.cost == pytest.approx(sum(x.price * m for x, m in zip(out.instances, out.used)))
    assert out.single is None or out.cost <= out.single[2] * (1 + 1e-9)
    with pytest.raises(InputError, match="target rate"):
        provision_buckets(sm, 0, [3.0, 0.5], solve)
    # a deadline already past: nothing scored, so no mix, and nothing proven (not an error: the command
    # writes its file and says what the limit left out)
    import time

    none = provision_buckets(sm, rate, [3.0, 0.5], solve, deadline=time.perf_counter())
    assert not none.found and none.instances == () and none.stopped.startswith("the time limit came before")


def test_provision_buckets_stops_at_its_deadline_with_the_types_scored(monkeypatch):
    """A deadline that passes during the first instance type's search: the mix is of the types scored,
    labelled with those that were not and with the search the deadline cut short (never proven the
    cheapest)."""
    import time

    from placement import goodput
    from solvers.registry import solve

    mix = read_mix({"buckets": [{"input": 64, "output": 200, "weight": 1}]})
    sm = ServingModel(TINY, parse_devices("a100:1,t4:2"), mix, ttft=2.5e-4, tpot=3.2e-4)
    calls = []

    def timed(*a, **k):  # the goodput search's solver: the clock passes the deadline after one type
        calls.append(1)
        return solve(*a, **k)

    out = goodput.provision_buckets(sm, 100.0, [3.0, 0.5], timed, deadline=time.perf_counter() + 1e9)
    assert not out.stopped
    scored = [(x.kind, x.count) for x in out.instances]
    full = len(calls)
    calls.clear()
    t0 = time.perf_counter()
    fake = iter([t0])  # the first reading before the deadline, every later one after it
    monkeypatch.setattr(time, "perf_counter", lambda: next(fake, t0 + 10.0))
    part = goodput.provision_buckets(sm, 100.0, [3.0, 0.5], timed, deadline=t0 + 5.0)
    monkeypatch.undo()
    assert part.stopped and "t4 x1" in part.stopped and "t4 x2" in part.stopped
    assert [(x.kind, x.count) for x in part.instances] == [k for k in scored if k[0] == "a100"]
    assert 0 < len(calls) < full
    # the deadline reaches into the a100's own goodput search too: it tried batch 1 only (before, it ran
    # every batch size past the deadline), said in stopped, with batch 1's capacity: that of a search
    # given batch 1 alone
    assert ("a100 x1's goodput search on 64/200 requests: time limit reached: batch 2 and above not tried"
            in part.stopped)
    one = ServingModel(TINY, parse_devices("a100:1"), mix, ttft=2.5e-4, tpot=3.2e-4)
    alone = goodput.goodput_search(one, [1], solve).best.serving.goodput
    assert part.instances[0].capacity == (pytest.approx(alone, rel=1e-12),)
    full_a100 = next(x for x in out.instances if x.kind == "a100").capacity[0]
    assert alone < full_a100


def test_provision_command_for_a_model_config(tmp_path, capsys, files):
    cfg, _ = files
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"buckets": [{"input": 128, "output": 64, "weight": 3},
                                           {"input": 2048, "output": 64, "weight": 1}]}))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"prices": {"a100": 3.0, "t4": 0.5}}))
    out = tmp_path / "prov.json"
    args = ["provision", str(cfg), "--requests", str(mix), "--available", "a100:2,t4:2", "--prices",
            str(prices), "--ttft-slo", "1000", "--tpot-slo", "100"]
    assert main(args + ["--target-throughput", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cheapest instances for 2 requests/s" in text and "per hour" in text
    p = json.loads(out.read_text())["provision_buckets"]
    used = [x for x in p["instances"] if x["count"]]
    assert p["cost_per_hour"] == pytest.approx(sum(x["count"] * x["price_per_hour"] for x in used))
    for b in range(2):  # each bucket's 2 x share requests/s served
        assert sum(x["load_rps"][b] for x in p["instances"]) == pytest.approx(2 * (0.75, 0.25)[b], rel=1e-6)
    assert main(args + ["--target-throughput", "2", "--latency-slo", "5"]) == 2
    assert "--latency-slo does not apply to a model config" in capsys.readouterr().err
    assert main(["provision", str(cfg), "--available", "a100:2", "--target-throughput", "2"]) == 2
    assert "needs --requests" in capsys.readouterr().err


def test_the_convoy_charged_at_the_tpot_and_slot_limits():
    # plans of several stages in few micro-batches: a prompt stalls the ring for max(S, sum p / d -
    # (N - 1) / N T0); at the rate the TPOT target (or the slots) allows, the TPOT is the target (the
    # slots are all held), with TPOT = T0 / ((1 - lam E[S]) exp(-lam E[C - S]))
    devices = parse_devices("a100:1,t4:2")
    mix = read_mix({"buckets": [{"input": 64, "output": 200, "weight": 3},
                                {"input": 3000, "output": 20, "weight": 1}]})
    free = ServingModel(TINY, devices, mix)
    seen = 0
    for b in (2, 4, 8):
        p = free.problem(b, microbatches=2)
        for plan in chain_plans(p, 10 ** 6):
            sv = free.evaluate(p, plan, b)
            if not sv.valid or len(plan) < 2:
                continue
            per = [free.stage_prefill(p, st) for st in plan]
            S = [max(x[k] / st.d for x, st in zip(per, plan)) for k in range(2)]
            Q = [sum(x[k] / st.d for x, st in zip(per, plan)) for k in range(2)]
            convoy = sum(q * max(0.0, Q[k] - 0.5 * sv.tpot_full - S[k]) for k, q in enumerate(mix.shares))
            assert sv.convoy == pytest.approx(convoy, rel=1e-9, abs=1e-15)
            if convoy <= 0:
                continue
            seen += 1
            a = sum(q * s for q, s in zip(mix.shares, S))
            tpot = sv.tpot_full / ((1 - sv.rate * a) * math.exp(-sv.rate * convoy))
            assert sv.tpot == pytest.approx(tpot, rel=1e-9)
            assert sv.limit == "KV slots" and sv.slots == pytest.approx(b, rel=1e-9)
            target = 1.001 * sv.tpot_full  # a TPOT target just above the full batch's: it binds first
            tight = ServingModel(TINY, devices, mix, tpot=target).evaluate(p, plan, b)
            assert tight.limit == "TPOT target" and tight.tpot == pytest.approx(target, rel=1e-9)
    assert seen > 0


def test_slot_wait_by_hand():
    from graphs.llm import slot_wait

    # one slot (k = 1 / J < 1 counts as one server): the M/M/1 wait u hold / (1 - u), u = lam hold
    assert slot_wait(0.25, 1, 2.0, 0.0, 0.0) == pytest.approx(0.5 * 2.0 / 0.5)
    # 4 slots held 2 s at 1 arrival/s (u = 1/2), each prefill blocking decode 0.5 s at a stall of 1/2:
    # J = 1 + 1 x 0.5 / 0.5 = 2, k = 2 servers, Erlang C(2, u) = 2 u^2 / (1 + u) = 1/3, wait
    # C hold / (batch (1 - u)) = 1/3 s; at J = 1.6 (k = 2.5) the mean of C(2, u) and C(3, u)
    assert slot_wait(1.0, 4, 2.0, 0.5, 0.5) == pytest.approx(1 / 3, rel=1e-12)
    c3 = (1.5 ** 3 / 6 / 0.5) / (1 + 1.5 + 1.5 ** 2 / 2 + 1.5 ** 3 / 6 / 0.5)  # A = 3u = 1.5
    assert slot_wait(1.0, 4, 2.0, 0.5, 0.3) == pytest.approx((1 / 3 + c3) / 2 * 2.0 / 2.0, rel=1e-12)
    assert slot_wait(0.0, 4, 2.0, 0.0, 0.3) == 0.0
    assert math.isinf(slot_wait(2.0, 4, 2.0, 0.5, 0.3))  # u = 1: the KV-slot limit
    waits = [slot_wait(x, 8, 2.0 + x, x / 5, 0.1) for x in (0.5, 1.0, 1.5, 2.0, 2.5)]
    assert waits == sorted(waits) and waits[0] > 0


def test_goodputs_time_limit_is_the_whole_commands(tmp_path, capsys, files, monkeypatch):
    """--time-limit gave each solve of the goodput search the whole limit (a search runs tens of solves:
    22 s at --time-limit 2 on Llama-2-7B, a100:4,l4:8,t4:8, --disaggregate). It is now the command's:
    each solve gets what is left, and the batch sizes (and splits into pools) not tried once it has run
    out are named, in the summary and the result. Each solve made to take 1.5 s: batch 4 is solved, batch
    16 is not tried, and neither is a split into pools."""
    import time

    import placement.stages as stages

    cfg, mix = files
    real, limits = stages.solve_args, []

    def slow(problem, args, progress=None):
        limits.append(args.time_limit)
        time.sleep(1.5)
        return real(problem, args, progress)

    monkeypatch.setattr(stages, "solve_args", slow)
    out = tmp_path / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:2,t4:2", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "4,16", "--disaggregate",
                 "--time-limit", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    # batch 4's first micro-batch count solved (the most, 4), its others not tried, nor batch 16
    assert ("stopped: time limit reached: batch 4's micro-batch counts 2, 1 not tried; time limit "
            "reached: batch size 16 not tried; time limit reached: 2 of the 2 splits into pools not tried"
            ) in text, text
    assert "the search stopped early" in text
    doc = json.loads(out.read_text())
    assert [p["batch_size"] for p in doc["goodput"]["sweep"]] == [4]
    assert doc["goodput"]["stopped"].startswith("time limit reached: batch 4's micro-batch counts 2, 1 not "
                                                "tried; time limit reached: batch size 16 not tried")
    assert len(limits) == 1 and 0 < limits[0] <= 1.0  # one solve, given what was left of the 1 s


def test_a_goodput_search_cut_short_is_not_exhaustive():
    """A batch size whose micro-batch counts were cut short by ``halted`` has not had every plan scored."""
    from graphs.devices import parse_devices
    from graphs.llm import ServingModel, read_mix, read_model_config
    from placement.goodput import goodput_search
    from placement.stages import solve_args

    mix = read_mix({"buckets": [{"input": 256, "output": 128, "weight": 1}]})
    model = ServingModel(read_model_config(LLAMA2_7B), parse_devices("a100:2,t4:2"), mix, ttft=0.3, tpot=0.04)
    args = argparse.Namespace(solver=None, time_limit=None, split=None, memory_limit=None, threads=1)
    full = goodput_search(model, [4, 8], lambda p: solve_args(p, args))
    calls = []

    def halted():
        calls.append(1)
        return "time limit reached" if len(calls) > 1 else ""

    cut = goodput_search(model, [4, 8], lambda p: solve_args(p, args), halted=halted)
    assert [p.batch for p in full.points] == [4, 8] and full.stopped == ""
    assert [p.batch for p in cut.points] == [4]
    # the counts of batch 4 after the second (4, 2 tried: 1 not) and the batch size after it, both said
    assert cut.stopped == ("time limit reached: batch 4's micro-batch count 1 not tried; time limit reached: "
                           "batch size 8 not tried")
    assert not cut.points[0].exhaustive and not cut.exhaustive


# ---------------------------------------------------------------- what a search that was cut short says
CHAT = {"buckets": [{"input": 256, "output": 128, "weight": 5}, {"input": 4096, "output": 256, "weight": 1}]}


def _solve(problem):
    from solvers.registry import solve

    return solve(problem)


def test_provision_cut_short_by_its_time_limit_is_not_infeasible(tmp_path, capsys):
    """A time limit that left instance types unscored said "error: infeasible: no mix of the instances
    serves the rate ..." and wrote no file, where without it a mix costs 9 per hour."""
    cfg, mix, prices, out = (tmp_path / n for n in ("config.json", "mix.json", "prices.json", "p.json"))
    cfg.write_text(json.dumps(LLAMA2_7B))
    mix.write_text(json.dumps(CHAT))
    prices.write_text(json.dumps({"prices": {"a100": 3.0, "t4": 0.5}}))
    argv = ["provision", str(cfg), "--requests", str(mix), "--available", "a100:2,t4:4", "--prices",
            str(prices), "--target-throughput", "2", "--ttft-slo", "1000", "--tpot-slo", "100"]
    # a limit already past when the first instance type would be scored: none is
    assert main(argv + ["--time-limit", "1e-9", "--out", str(out)]) == 1
    res = capsys.readouterr()
    assert res.err.startswith("error: no mix of the instance types scored serves the rate of every bucket "
                              "(not proven: the time limit came before 5 instance type(s) were scored "
                              "(a100 x1, a100 x2, t4 x1, t4 x2, t4 x4)"), res.err
    assert res.out.strip() == f"result written to {out}"
    doc = json.loads(out.read_text())["provision_buckets"]
    assert doc["cost_per_hour"] is None and not doc["proven_cheapest"] and not doc["infeasible"]
    assert main(argv) == 0  # no limit: a mix
    assert "cost " in capsys.readouterr().out
    assert main(argv + ["--costs", "nofile.json"]) == 2  # was silently ignored
    assert "--costs does not apply to a model config" in capsys.readouterr().err


def test_micro_batch_counts_cut_short_are_said():
    """A time limit after a batch size's first micro-batch count left the others untried without a word
    (no stopped line, "stopped": null in the file)."""
    model = ServingModel(TINY, parse_devices("a100:2,t4:4"), read_mix(CHAT), ttft=1.0, tpot=0.1)
    search = goodput_search(model, [16], lambda p: _solve(p), halted=lambda: "time limit reached")
    (pt,) = search.points
    assert not pt.exhaustive and pt.problem.microbatches == 8  # the largest count, the one tried
    assert search.stopped == "time limit reached: batch 16's micro-batch counts 4, 2, 1 not tried"
    whole = goodput_search(model, [16], lambda p: _solve(p))
    assert whole.stopped == "" and {p.problem.microbatches for p in whole.points} <= {8, 4, 2, 1}


@pytest.mark.parametrize("batches, words", [
    ([8], "3 micro-batches do not divide a batch of 8 sequences"),
    (None, "3 micro-batches divide no batch size the auto sweep tries")])
def test_micro_batches_that_divide_no_batch_are_refused(batches, words):
    """An unusable --microbatches was dropped without a word: every count was tried instead."""
    model = ServingModel(TINY, parse_devices("a100:2,t4:4"), read_mix(CHAT), ttft=1.0, tpot=0.1)
    with pytest.raises(InputError, match=words):
        goodput_search(model, batches, lambda p: _solve(p), microbatches=3)


def test_goodput_words_follow_the_solver(tmp_path, capsys):
    """With --solver ip the summary said "the decode DP's plan ... proven", the table "DP's per N" and a
    kept plan's note "not the DP's plan"."""
    cfg, mix = tmp_path / "config.json", tmp_path / "mix.json"
    cfg.write_text(json.dumps(TINY_CONFIG))  # small: the integer program per count is quick
    mix.write_text(json.dumps(CHAT))
    assert main(["place", str(cfg), "--devices", "a100:2,t4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "3000", "--tpot-slo", "100", "--batch-size", "8", "--solver",
                 "ip"]) == 0
    text = capsys.readouterr().out
    assert "DP's" not in text
    best = next(x for x in text.splitlines() if x.startswith("best:"))
    assert "the decode ip solver's plan" in best or "not the decode ip solver's plan" in best


def test_evaluate_of_a_disaggregated_result_says_what_it_does_not_rescore(tmp_path, capsys):
    """evaluate printed a disaggregated goodput result's decode table alone, the goodput and the prefill
    pool dropped without a word; --requests there said "applies with --objective goodput", an option
    evaluate does not have."""
    cfg, mix, out, dec = (tmp_path / n for n in ("config.json", "mix.json", "dis.json", "dec.json"))
    cfg.write_text(json.dumps(LLAMA2_7B))
    mix.write_text(json.dumps(CHAT))
    assert main(["place", str(cfg), "--devices", "a100:2,t4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "16", "--disaggregate",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    if json.loads(out.read_text())["problem"]["objective"] != "goodput-disaggregated":
        pytest.skip("the colocated layout was kept")
    said = ("the decode pool's plan re-scored (tokens/s); the goodput and the prefill pool's plan "
            "(goodput.prefill_pool in the file) are not")
    assert main(["evaluate", str(cfg), str(out)]) == 0
    assert said in capsys.readouterr().out
    assert main(["evaluate", str(cfg), str(out), "--json"]) == 0
    assert said in json.loads(capsys.readouterr().out)["message"]
    assert main(["evaluate", str(cfg), str(out), "--requests", str(mix)]) == 2
    err = capsys.readouterr().err
    assert "--requests re-scores a goodput result" in err and "disaggregated" in err
    assert main(["place", str(cfg), "--devices", "a100:2", "--batch-size", "4", "--out", str(dec)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(cfg), str(dec), "--ttft-slo", "3"]) == 2
    assert "this is a decode plan without a goodput" in capsys.readouterr().err


# a Llama-2-70B-like decoder of 66 blocks: 1.14e11 bytes of fp16 weights, more than two 40 GiB A100s
BIG = dict(LLAMA2_7B, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
           num_key_value_heads=8, num_hidden_layers=66)


def test_an_auto_sweep_goes_on_past_a_batch_no_plan_fits():
    """The auto sweep stopped at the first batch size no plan fits, taking it for the KV cache's limit,
    and the command said "infeasible". On three A100s one sequence fits nowhere: one micro-batch allows
    one stage, and no A100 holds the weights; a larger batch has more micro-batches, so more stages share
    them. The sweep now goes on, and stops only when the weights and the KV caches outgrow every
    device's memory together (checked by hand below)."""
    from graphs.llm import read_model_config

    cfg = read_model_config(BIG)
    one = read_mix({"buckets": [{"input": 256, "output": 128, "weight": 1}]})
    model = ServingModel(cfg, parse_devices("a100:3"), one, ttft=5.0, tpot=0.5)
    search = goodput_search(model, None, _solve)
    assert search.points[0].batch == 1 and search.points[0].plan is None  # nothing fits one sequence
    assert search.best is not None and search.best.batch > 1 and search.best.serving.goodput > 0
    # two A100s: the weights alone exceed their 80 GiB, so no batch fits, and the sweep says why at once
    assert cfg.params * 2 > 2 * 40 * 2 ** 30
    two = goodput_search(ServingModel(cfg, parse_devices("a100:2"), one, ttft=5.0, tpot=0.5), None, _solve)
    assert [p.batch for p in two.points] == [1] and two.best is None
    assert "nor does any larger batch: the weights and 2 sequences' KV caches exceed" in two.points[0].note
    assert two.stopped == ""  # the end of the sweep, not a halt: no size a larger limit would try


@pytest.mark.parametrize("microbatches, tried, rest", [(None, 1, 2), (2, 2, 4)])
def test_an_auto_goodput_search_past_its_limit_tries_its_first_size_and_names_the_rest(microbatches, tried,
                                                                                       rest):
    """An auto search whose limit has passed tries its first size (1, or with 2 micro-batches the first
    power of two they divide, 2) with its one micro-batch count (one A100: one count, 1; or the 2 given),
    and names the open-ended sizes above it as not tried."""
    model = ServingModel(TINY, parse_devices("a100:1"), read_mix(MIX1), ttft=1.0, tpot=0.1)
    search = goodput_search(model, None, _solve, microbatches=microbatches,
                            halted=lambda: "time limit reached")
    assert [(p.batch, p.problem.microbatches) for p in search.points] == [(tried, microbatches or 1)]
    assert search.stopped == f"time limit reached: batch {rest} and above not tried"


def test_a_later_micro_batch_count_interrupted_keeps_the_plans_found(tmp_path, capsys, monkeypatch):
    """A Ctrl-C that the stage DP let through while a later micro-batch count was solved threw the
    earlier counts' proven plans away (exit 130, no file). Now they are the answer, not proven over the
    counts, and the file is written."""
    import placement.stages as stages

    real, calls = stages.solve_args, []

    def interrupted_second(problem, args, progress=None):
        calls.append(problem.microbatches)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(problem, args, progress)

    monkeypatch.setattr(stages, "solve_args", interrupted_second)
    cfg, out = tmp_path / "config.json", tmp_path / "r.json"
    cfg.write_text(json.dumps(LLAMA2_7B))
    assert main(["place", str(cfg), "--devices", "a100:2,t4:2", "--batch-size", "8", "--context", "1024",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    assert calls == [4, 2] and doc["status"] == "feasible" and doc["bound"] is None
    assert doc["message"].endswith("not proven over them: counts 2, 1 not tried (interrupted (Ctrl-C))")
