"""The serving simulator (graphs/llm_sim.py): a tiny engine traced by hand, the simulator against the
analytic ServingModel where they must agree (low load: TTFT = the prefill; overload: the full batch's
tokens/s), reproducible seeds, and bad options on the command line."""

from __future__ import annotations

import json
import math

import pytest

from graphs.devices import parse_devices
from graphs.errors import InputError
from graphs.llm import LLMConfig, ServingModel, read_mix
from graphs.llm_sim import poisson_trace, simulate_pipeline, simulate_plan
from graphs.parallel import Stage, evaluate_plan
from placement.cli import main
from tests.test_llm_goodput import LLAMA2_7B

TINY = LLMConfig("tiny", layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1000)


def _constant(requests, *, d=(1,), batch=2, microbatches=1, step=0.1, prefill=0.5, seconds=2.0, warmup=0.0):
    return simulate_pipeline(list(d), batch, microbatches, lambda i, n, c: step, lambda i, q: prefill,
                             requests, seconds=seconds, warmup=warmup)


def test_one_stage_constant_times_by_hand():
    # R0 at 0: prefill [0, 0.5] (first token), steps [0.5, 0.6], [0.6, 0.7]: done at 0.7.
    # R1 at 0.65: a slot is free, but the server is in R0's step until 0.7; the prefill then goes first,
    # [0.7, 1.2] (TTFT 0.55), steps to 1.3 and 1.4. Six tokens in 2 s.
    res = _constant([(0.0, 10, 3, 0), (0.65, 10, 3, 0)])
    assert res.finished == 2
    assert res.tokens_per_s == pytest.approx(6 / 2)
    assert res.decode_tokens_per_s == pytest.approx(4 / 2)
    assert res.ttft["mean"] == pytest.approx((0.5 + 0.55) / 2)
    assert res.ttft["count"] == 2
    assert res.tpot["mean"] == pytest.approx(0.1)
    # slots held: R0 over [0, 0.7], R1 over [0.65, 1.4]
    assert res.mean_batch == pytest.approx((0.7 + 0.75) / 2)


def test_kv_slots_admit_one_at_a_time_by_hand():
    # one slot: R1 (at 0.1) waits for R0's last token at 0.7 before its prefill: TTFT 1.2 - 0.1
    res = _constant([(0.0, 10, 3, 0), (0.1, 10, 3, 0)], batch=1)
    assert res.ttft["mean"] == pytest.approx((0.5 + 1.1) / 2)
    # two slots: R1 is admitted at 0.1 and its prefill waits for R0's; at 0.5 it goes before R0's first
    # step (a waiting prefill is taken before a waiting decode step): [0.5, 1.0], TTFT 0.9
    res = _constant([(0.0, 10, 3, 0), (0.1, 10, 3, 0)], batch=2)
    assert res.ttft["mean"] == pytest.approx((0.5 + 0.9) / 2)


def test_ttfts_and_tpots_are_read_from_the_requests_by_hand():
    """The TTFT and TPOT lists are read from ``per_request``, the one record of them (they were kept
    beside it, a second copy the constructor could set apart). One stage, 0.1 s steps, 0.5 s prefills,
    two slots, a 2 s window. R0 (0, 3 tokens) and R1 (0.65, 3) as in the test above: (0.5, 0.1), (0.55,
    0.1). R2 (1.5, 1 token): prefill [1.5, 2.0], (0.5, None: no TPOT). R3 (1.9, 100 tokens): the slot R1
    freed, its prefill after R2's, [2.0, 2.5]: TTFT 0.6; R4 (1.95, 100): the slot R2 frees at 2.0, its
    prefill [2.5, 3.0] (before R3's first step): TTFT 1.05; neither finishes by the 4 s drain (TPOT
    NaN). R5 (1.97, 3): no slot is freed again, no first token (NaN, NaN)."""
    from graphs.llm_sim import SimResult

    res = _constant([(0.0, 10, 3, 0), (0.65, 10, 3, 0), (1.5, 10, 1, 0), (1.9, 10, 100, 0),
                     (1.95, 10, 100, 0), (1.97, 10, 3, 0)])
    ttft, tpot = zip(*res.per_request)
    assert ttft[:5] == pytest.approx([0.5, 0.55, 0.5, 0.6, 1.05]) and math.isnan(ttft[5])
    assert tpot[:2] == pytest.approx([0.1, 0.1]) and tpot[2] is None
    assert all(math.isnan(b) for b in tpot[3:])
    assert res.ttfts == pytest.approx([0.5, 0.55, 0.5, 0.6, 1.05])  # those with a first token
    assert res.tpots == pytest.approx([0.1, 0.1])  # those that finished with more than one token
    assert res.ttft["count"] == 5 and res.ttft["mean"] == pytest.approx(3.2 / 5)
    assert res.tpot["count"] == 2 and res.tpot["mean"] == pytest.approx(0.1)
    assert res.attainment(0.56, 0.1) == pytest.approx(3 / 6)  # R0, R1, and R2 (its TTFT alone)
    with pytest.raises(TypeError):  # no second copy to set
        SimResult(1.0, 2.0, 0.0, 1, 1, 1.0, 1.0, 1.0, ttfts=[0.5])


def test_the_ttft_and_tpot_statistics_are_read_from_the_requests_by_hand():
    """``ttft`` and ``tpot`` (mean, p50, p90, p99, count) are computed from ``per_request`` (they were
    kept beside it, set once by the simulator). Six requests: TTFTs 0.1, 0.3, 0.2, 0.4, 0.6 and one
    without a first token (NaN); TPOTs 0.02, 0.04, 0.03, one of one token (None), two not finished
    (NaN). Percentiles interpolate linearly between the sorted values (position q (n - 1)): TTFTs
    sorted 0.1, 0.2, 0.3, 0.4, 0.6: p50 at 2 = 0.3, p90 at 3.6 = 0.4 + 0.6 x 0.2 = 0.52, p99 at 3.96 =
    0.4 + 0.96 x 0.2 = 0.592, mean 1.6 / 5 = 0.32; TPOTs sorted 0.02, 0.03, 0.04: p50 at 1 = 0.03,
    p90 at 1.8 = 0.038, p99 at 1.98 = 0.0398, mean 0.03. No request counted: NaN figures, count 0."""
    from graphs.llm_sim import SimResult

    nan = math.nan
    res = SimResult(1.0, 10.0, 0.0, 6, 3, 1.0, 1.0, 1.0, per_request=[
        (0.1, 0.02), (0.3, None), (nan, nan), (0.2, 0.04), (0.4, nan), (0.6, 0.03)])
    assert res.ttft == pytest.approx({"mean": 0.32, "p50": 0.3, "p90": 0.52, "p99": 0.592, "count": 5})
    assert res.tpot == pytest.approx({"mean": 0.03, "p50": 0.03, "p90": 0.038, "p99": 0.0398, "count": 3})
    assert all(type(v) in (float, int) for v in (*res.ttft.values(), *res.tpot.values()))  # JSON writes them
    res.per_request.append((0.7, 0.05))  # one record: the statistics follow it
    assert res.ttft["count"] == 6 and res.tpot["mean"] == pytest.approx(0.035)
    for none in ([], [(nan, None)]):
        empty = SimResult(1.0, 10.0, 0.0, len(none), 0, 0.0, 0.0, 0.0, per_request=none)
        for st in (empty.ttft, empty.tpot):
            assert st["count"] == 0 and all(math.isnan(st[k]) for k in ("mean", "p50", "p90", "p99"))
    with pytest.raises(TypeError):  # no second copy to pass
        SimResult(1.0, 2.0, 0.0, 1, 1, 1.0, 1.0, 1.0, ttft={"mean": 0.5})
    with pytest.raises(AttributeError):  # nor to set
        res.tpot = {"mean": 0.5}


def test_full_pipeline_round_by_hand():
    # two stages, two micro-batches of one slot, steps of 0.1 per stage, prefills of no time: two requests
    # at 0 of 11 tokens each, first tokens at 0. Micro-batch 0 (R0) takes stage 0 over [0, 0.1], stage 1
    # over [0.1, 0.2], and loops with period 0.2: tokens at 0.2, 0.4, .., 2.0 (TPOT 0.2). Micro-batch 1
    # (R1) waits for stage 0 until 0.1, then runs half a period behind: 0.3, 0.5, .., 2.1 (TPOT 0.21).
    res = simulate_pipeline([1, 1], 2, 2, lambda i, n, c: 0.1, lambda i, q: 0.0,
                            [(0.0, 5, 11, 0), (0.0, 5, 11, 0)], seconds=10.0, warmup=0.0)
    assert res.tpot["mean"] == pytest.approx((0.2 + 0.21) / 2)
    assert res.tokens_per_s * 10 == pytest.approx(22)
    assert res.mean_batch * 10 == pytest.approx(2.0 + 2.1)


def _one_a100(batch, mix):
    model = ServingModel(TINY, parse_devices("a100:1"), read_mix(mix))
    problem = model.problem(batch, microbatches=1)
    g = problem.graph
    n = g.num_nodes
    plan = [Stage(tuple(range(n)), 0, 1, 1, tuple(g.options[(u, 0, 1)][0] for u in range(n)))]
    return model, problem, plan


def test_low_load_ttft_is_the_prefill():
    mix = {"buckets": [{"input": 2048, "output": 4, "weight": 1}]}
    model, problem, plan = _one_a100(8, mix)
    sv = model.evaluate(problem, plan, 8)
    P = sv.buckets[0].prefill
    res = simulate_plan(model, problem, plan, 8, rate=0.01 / P, seconds=20000 * P, seed=1)
    assert res.ttft["count"] > 50
    # a prefill waits at most one decode step in progress, rarely at this load
    assert res.ttft["p50"] == pytest.approx(P, rel=1e-9)
    assert res.ttft["mean"] == pytest.approx(P, rel=0.02)


def test_overload_full_batch_gives_the_planned_tokens_per_s():
    # long outputs, one-token prompts, overload: the batch stays full, so a decode token costs the planner's
    # time per token (the full batch's step at the mix's mean context / batch); the one server is never
    # idle and also runs one prefill P per request (E[output - 1] = 799 decode tokens), so by work
    # conservation decode tokens/s = 1 / (time per token + P / 799): the planned tokens/s less the
    # prefills' share. The trace is 30 request lifetimes long: the window sees the mix's mean context.
    mix = {"buckets": [{"input": 1, "output": 1000, "weight": 1}, {"input": 1, "output": 600, "weight": 1}]}
    model, problem, plan = _one_a100(16, mix)
    ev = evaluate_plan(problem, plan)
    planned = 1 / ev.objective
    cap = planned / 800  # requests/s that planned tokens/s would serve
    step = 16 * ev.objective
    res = simulate_plan(model, problem, plan, 16, rate=20 * cap, seconds=30000 * step, seed=2)
    P = model.evaluate(problem, plan, 16).buckets[0].prefill
    assert res.mean_batch == pytest.approx(16, rel=0.01)
    assert res.decode_tokens_per_s == pytest.approx(1 / (ev.objective + P / 799), rel=0.01)
    assert res.decode_tokens_per_s == pytest.approx(planned, rel=0.03)


def test_seeds_reproduce():
    mix = read_mix({"buckets": [{"input": 64, "output": 8, "weight": 1}, {"input": 128, "output": 4,
                                                                           "weight": 2}]})
    a, b, c = (poisson_trace(mix, 50.0, 10.0, s) for s in (3, 3, 4))
    assert a == b and a != c
    assert 350 < len(a) < 650 and all(0 <= t < 10 for t, _ in a)
    model, problem, plan = _one_a100(4, {"buckets": [{"input": 64, "output": 8, "weight": 1}]})
    r1 = simulate_plan(model, problem, plan, 4, rate="auto", seconds=1.0, seed=5)
    r2 = simulate_plan(model, problem, plan, 4, rate="auto", seconds=1.0, seed=5)
    assert (r1.tokens_per_s, r1.ttft, r1.tpot) == (r2.tokens_per_s, r2.ttft, r2.tpot)
    assert r1.planned["load"] == pytest.approx(0.8)


def test_bad_library_inputs():
    model, problem, plan = _one_a100(4, {"buckets": [{"input": 64, "output": 8, "weight": 1}]})
    for kw in ({"rate": -1.0}, {"rate": math.nan}, {"seconds": 0.0}, {"rate": "fast"}):
        with pytest.raises(InputError):
            simulate_plan(model, problem, plan, 4, **kw)
    with pytest.raises(InputError, match="do not divide"):
        simulate_pipeline([1], 3, 2, lambda *a: 1.0, lambda *a: 1.0, [], seconds=1.0)


# targets every plan of these tests meets at low load (goodput needs both: --objective goodput refuses a
# missing one)
LOOSE = ["--ttft-slo", "10000", "--tpot-slo", "1000"]


@pytest.fixture
def files(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA2_7B))
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"buckets": [{"input": 256, "output": 64, "weight": 1}]}))
    return cfg, mix


def test_cli_simulate(tmp_path, capsys, files):
    cfg, mix = files
    out = tmp_path / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
                 *LOOSE, "--batch-size", "8", "--simulate", "auto", "--trace-seconds", "20",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "simulated:" in text and "TTFT" in text and "p99" in text
    sim = json.loads(out.read_text())["simulation"]
    assert sim["rate_rps"] == pytest.approx(0.8 * sim["planned_rate_rps"])
    assert sim["ttft_s"]["count"] > 0 and 0.5 < sim["ratio"] < 1.5
    assert main(["evaluate", str(cfg), str(out), "--simulate", "1", "--trace-seconds", "10"]) == 0
    assert "simulated: 1 requests/s" in capsys.readouterr().out


@pytest.mark.parametrize("extra, words", [
    (["--objective", "goodput", "--simulate", "fast"], "--simulate fast: give a rate"),
    (["--objective", "goodput", "--simulate", "-2"], "--simulate -2: the rate must be a positive number"),
    (["--objective", "goodput", "--simulate", "1", "--trace-seconds", "0"], "--trace-seconds 0"),
    (["--objective", "goodput", "--trace-seconds", "5"], "applies with --simulate"),
    (["--objective", "goodput", "--simulate", "1", "--plot", "x.txt"], "--plot x.txt"),
    (["--simulate", "1"], "applies with --objective goodput"),
])
def test_cli_bad_simulate_options(capsys, files, extra, words):
    cfg, mix = files
    args = ["place", str(cfg), "--devices", "a100:1,l4:1", "--batch-size", "8"]
    if "goodput" in extra:
        args += ["--requests", str(mix), *LOOSE]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and words in err and len(err.strip().splitlines()) == 1


def test_plot_written_or_a_clear_error_without_matplotlib(tmp_path, capsys, files, monkeypatch):
    cfg, mix = files
    args = ["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
            *LOOSE, "--batch-size", "8", "--simulate", "auto", "--trace-seconds", "5", "--plot"]
    pytest.importorskip("matplotlib")
    png = tmp_path / "sim.png"
    assert main(args + [str(png)]) == 0
    assert png.stat().st_size > 1000 and "plot written to" in capsys.readouterr().out
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # as if not installed
    assert main(args + [str(tmp_path / "other.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --plot needs matplotlib") and len(err.strip().splitlines()) == 1


def test_the_plot_failing_after_the_simulation_names_the_plot_flag(tmp_path, capsys, files, monkeypatch):
    """matplotlib imports but pyplot does not: the check before the solve passes, plot_simulation
    refuses, and the command line's error names --plot (not the library's plot_simulation(path=...))."""
    pytest.importorskip("matplotlib")
    cfg, mix = files
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.pyplot", None)
    png = tmp_path / "sim.png"
    assert main(["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
                 *LOOSE, "--batch-size", "8", "--simulate", "auto", "--trace-seconds", "5",
                 "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --plot {png} needs matplotlib") and len(err.strip().splitlines()) == 1
    assert "plot_simulation" not in err and not png.exists()


def test_simulate_options_are_refused_for_other_workloads(tmp_path, capsys):
    piper = tmp_path / "w.json"
    piper.write_text(json.dumps({"nodes": [{"id": 0, "time": 1.0}], "edges": []}))
    for cmd in (["place", str(piper), "--simulate", "1"], ["place", str(piper), "--plot", "a.png"],
                ["evaluate", str(piper), str(piper), "--simulate", "auto"]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        flag = "--plot" if "--plot" in cmd else "--simulate"  # the refusal names the option given
        assert err.startswith("error:") and flag in err and len(err.strip().splitlines()) == 1


def test_a_lone_prefill_stalls_a_ring_without_slack_by_hand():
    # two stages, two micro-batches of one sequence, steps of 0.01 s per stage: T0 = 0.02 s, the ring
    # has no slack. A prompt of 0.1 s per stage arrives at 0.005: stage 0 prefills over [0.01, 0.11]
    # (B waits there, A waits after its stage 1), stage 1 over [0.11, 0.21] (both wait behind it);
    # stage 1 decodes again from 0.21. Stage 1 did B, A, then B, A from 0.21: by 0.23 four steps
    # instead of 23, so 19 tokens (0.19 s of the ring) are lost: C = max(S, sum p - (N - 1) / N T0)
    # = max(0.1, 0.2 - 0.01) = 0.19 s, the serving model's convoy stall.
    def run(extra):
        reqs = [(0.0, 5, 10 ** 6, 0), (0.0, 5, 10 ** 6, 0)] + ([(0.005, 5, 1, 1)] if extra else [])
        return simulate_pipeline([1, 1], 4, 2, lambda i, n, c: 0.01, lambda i, q: 0.1 if q == 2 else 0.0,
                                 reqs, seconds=1.0, warmup=0.0)

    lost = (run(False).decode_tokens_per_s - run(True).decode_tokens_per_s) * 1.0
    assert lost == pytest.approx(19, abs=1e-9)
    S, Q, N, T0 = 0.1, 0.2, 2, 0.02
    assert max(S, Q - (N - 1) / N * T0) * 100 == pytest.approx(lost)  # 100 tokens/s without prefills


def test_one_stage_one_microbatch_model_and_simulator_agree():
    # one stage, one micro-batch, fixed times: a step of 10 ms, a prefill of 20 ms, 21 output tokens,
    # Poisson arrivals at 10/s, slots never short (batch 64). The prefills take rho = 10 x 0.02 = 20% of
    # the server, and no convoy (one stage): the serving model's TPOT = T0 / (1 - rho) = 12.5 ms, its
    # decode_stall 0.2; below capacity every request is served: 10 x 21 = 210 tokens/s.
    from graphs.llm import decode_stall

    assert decode_stall(10.0, 0.02, 0.0) == pytest.approx(0.2)
    reqs = [(t, 5, 21, b) for t, b in poisson_trace(read_mix({"buckets": [
        {"input": 5, "output": 21, "weight": 1}]}), 10.0, 2000.0, seed=3)]
    res = simulate_pipeline([1], 64, 1, lambda i, n, c: 0.01, lambda i, q: 0.02, reqs, seconds=2000.0,
                            warmup=100.0)
    assert res.tpot["mean"] == pytest.approx(0.01 / (1 - 0.2), rel=0.02)
    assert res.tokens_per_s == pytest.approx(res.offered_tokens_per_s, rel=0.01)
    assert res.tokens_per_s == pytest.approx(210, rel=0.03)


def test_few_slots_ttft_is_mostly_the_wait_for_a_slot():
    # one stage, steps of 10 ms, prefills of 20 ms, 21 output tokens, 10 arrivals/s on 4 KV slots: each
    # held P + 20 TPOT = 0.02 + 20 x 12.5 ms = 0.27 s, u = 10 x 0.27 / 4 = 0.675. The simulated TTFT is
    # mostly the wait for a slot (the split: slot, prefill server, prefill run); the serving model's
    # M/G/1 wait plus the prefill alone (22.5 ms) is 4x short, with its slot wait (Erlang C of 4 / J =
    # 3.2 servers, J = 1 + 10 x 0.02 / 0.8) it is within 30% (pessimistic: the holds here are all alike).
    from graphs.llm import slot_wait

    reqs = [(t, 5, 21, b) for t, b in poisson_trace(read_mix({"buckets": [
        {"input": 5, "output": 21, "weight": 1}]}), 10.0, 2000.0, seed=3)]
    res = simulate_pipeline([1], 4, 1, lambda i, n, c: 0.01, lambda i, q: 0.02, reqs, seconds=2000.0,
                            warmup=100.0)
    parts = res.ttft_parts
    assert sum(parts.values()) == pytest.approx(res.ttft["mean"], rel=1e-9)
    assert parts["prefill"] == pytest.approx(0.02, rel=1e-9)  # one stage: the run, no later wait
    assert parts["slot"] > 0.5 * res.ttft["mean"]
    old = 0.02 + 10 * 0.02 ** 2 / (2 * (1 - 0.2))
    new = old + slot_wait(10.0, 4, 0.02 + 20 * 0.0125, 0.2, 0.02)
    assert res.ttft["mean"] > 3 * old
    assert new == pytest.approx(res.ttft["mean"], rel=0.3)


def test_disaggregated_engine_by_hand():
    # a prefill pool of one stage (0.5 s a prompt), a decode pool of one stage (steps of 0.1 s), one KV
    # slot, moves of 0.2 s. R0 at 0: prefill [0, 0.5] (first token), slot, move to 0.7, steps [0.7, 0.8],
    # [0.8, 0.9]. R1 at 0.1: the pool is busy until 0.5: prefill [0.5, 1.0] (TTFT 0.9), R0's slot is free
    # since 0.9, move to 1.2, steps to 1.3 and 1.4. TPOT (0.9 - 0.5) / 2 = 0.2 for each (the move and
    # two steps), no prefill ever delays a decode step.
    res = simulate_pipeline([1], 1, 1, lambda i, n, c: 0.1, lambda i, q: 0.5,
                            [(0.0, 10, 3, 0), (0.1, 10, 3, 0)], seconds=2.0, warmup=0.0, prefill_d=[1],
                            transfer_time=lambda q: 0.2)
    assert res.finished == 2 and res.tokens_per_s == pytest.approx(6 / 2)
    assert res.ttft["mean"] == pytest.approx((0.5 + 0.9) / 2)
    assert res.tpot["mean"] == pytest.approx(0.2)
    assert res.mean_batch == pytest.approx((0.9 - 0.5 + 1.4 - 1.0) / 2)  # slots held from the prefill's end
    with pytest.raises(InputError, match="transfer time"):
        simulate_pipeline([1], 1, 1, lambda i, n, c: 0.1, lambda i, q: 0.5, [], seconds=1.0, prefill_d=[1])


def test_disaggregated_model_and_simulator_agree():
    # the prefill pool a single server of 20 ms a prompt at 10 arrivals/s: an M/D/1 queue, mean wait
    # lam p^2 / (2 (1 - lam p)) = 2.5 ms, TTFT 22.5 ms (the disaggregated model's, exact here); decode
    # steps of 10 ms never stalled, TPOT 10 ms plus the 5 ms move over 20 steps; 210 tokens/s
    reqs = [(t, 5, 21, b) for t, b in poisson_trace(read_mix({"buckets": [
        {"input": 5, "output": 21, "weight": 1}]}), 10.0, 2000.0, seed=4)]
    res = simulate_pipeline([1], 64, 1, lambda i, n, c: 0.01, lambda i, q: 0.02, reqs, seconds=2000.0,
                            warmup=100.0, prefill_d=[1], transfer_time=lambda q: 0.005)
    assert res.ttft["mean"] == pytest.approx(0.02 + 10 * 0.02 ** 2 / (2 * (1 - 0.2)), rel=0.02)
    assert res.tpot["mean"] == pytest.approx(0.01 + 0.005 / 20, rel=0.06)
    assert res.tokens_per_s == pytest.approx(res.offered_tokens_per_s, rel=0.01)


def test_cli_simulate_a_disaggregated_plan(tmp_path, capsys, files):
    cfg, _ = files
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"buckets": [{"input": 4096, "output": 64, "weight": 1}]}))  # prefill-heavy
    out = tmp_path / "plan.json"
    assert main(["place", str(cfg), "--devices", "a100:2,l4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "1000", "--tpot-slo", "30", "--disaggregate", "--simulate", "auto",
                 "--trace-seconds", "300", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "best: disaggregated" in text and "disaggregated: prompts on the prefill pool" in text
    data = json.loads(out.read_text())
    sim = data["simulation"]
    assert sim["layout"] == "disaggregated"
    assert sim["planned_rate_rps"] >= data["goodput"]["rate_rps"]  # without targets (here the TTFT's)
    assert 0.9 < sim["ratio"] < 1.1
    assert main(["evaluate", str(cfg), str(out), "--simulate", "auto"]) == 2
    assert "--disaggregate --simulate" in capsys.readouterr().err


def test_attainment_counts_requests_that_meet_both_targets():
    """The share of the window's requests meeting both targets, by hand: four requests, (TTFT, TPOT)
    = (0.1, 0.02) meets; (0.1, 0.05) misses TPOT; (NaN, NaN) got no first token; (0.2, None) has one
    output token, so only its TTFT counts. With targets 0.15 s and 0.03 s: 1 of 4; TTFT 0.25 alone: 3
    of 4 (the request without a first token never meets); no request: NaN."""
    from graphs.llm_sim import SimResult

    res = SimResult(1.0, 10.0, 0.0, 4, 3, 1.0, 1.0, 1.0,
                    per_request=[(0.1, 0.02), (0.1, 0.05), (math.nan, math.nan), (0.2, None)])
    assert res.attainment(0.15, 0.03) == pytest.approx(1 / 4)
    assert res.attainment(0.25, None) == pytest.approx(3 / 4)
    assert math.isnan(SimResult(1.0, 10.0, 0.0, 0, 0, 0.0, 0.0, 0.0).attainment(0.1, 0.1))


def test_cli_simulate_measures_the_share_meeting_the_targets_and_a_ctrl_c_keeps_the_plan(
        tmp_path, capsys, files, monkeypatch):
    """The planner printed "100.0% meet" its targets, a mean-value figure, where its own simulation
    showed requests missing them; and a Ctrl-C during the simulation threw the finished plan away
    (exit 130, no file)."""
    cfg, mix = files
    out = tmp_path / "plan.json"
    argv = ["place", str(cfg), "--devices", "a100:1", "--objective", "goodput", "--requests", str(mix),
            *LOOSE, "--batch-size", "8", "--simulate", "auto", "--trace-seconds", "20", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "at the mean wait: a mean-value model" in text
    sim = json.loads(out.read_text())["simulation"]
    line = next(x for x in text.splitlines() if x.strip().startswith("meet "))
    assert f"{100 * sim['attainment']:.1f}% of the" in line and 0 <= sim["attainment"] <= 1

    import graphs.llm_sim

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(graphs.llm_sim, "simulate_plan", interrupted)
    out.unlink()
    assert main(argv) == 0
    assert "simulation: interrupted (Ctrl-C)" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["simulation"] == {"interrupted": True} and data["stages"]


def test_the_simulation_plot_draws_the_targets(tmp_path, monkeypatch):
    """The TTFT and TPOT distributions had no target lines, so the share meeting them could not be read
    off the plot: each target is a vertical line at its value in ms."""
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from graphs.llm_sim import SimResult, plot_simulation

    drawn = []
    real = Axes.axvline

    def axvline(self, x=0, *a, **k):
        drawn.append((x, k.get("label")))
        return real(self, x, *a, **k)

    monkeypatch.setattr(Axes, "axvline", axvline)
    res = SimResult(1.0, 10.0, 0.0, 2, 2, 1.0, 1.0, 1.0, per_request=[(0.1, 0.02), (0.3, 0.04)])
    png = tmp_path / "sim.png"
    plot_simulation(res, str(png), ttft=0.2, tpot=0.03)
    assert png.exists()
    assert [x for x, _ in drawn] == pytest.approx([200.0, 30.0])
    assert [lab for _, lab in drawn] == ["TTFT target 200 ms", "TPOT target 30 ms"]
