"""What the goodput search says it proved (placement/goodput.py, placement/cli/llm.py) and what a request of
one output token meets (graphs/llm.py), from two reviews.

1. A Ctrl-C part-way through scoring every plan of a (batch, micro-batch count) problem with few plans:
   ``place --objective goodput`` kept the best plan scored so far but said it was "the most goodput among
   all the problem's plans", the "plans scored" column "auto solver's per N" (and an older version's
   footer "all of them were scored"). Now the point records the count cut short, how many of its plans
   were scored (:attr:`placement.goodput.GoodputPoint.cut`), and every line says so. With
   ``--disaggregate`` a split's search cut short said "interrupted (Ctrl-C)" twice in one line.
2. A mix of one-token requests (no decode step, no TPOT) and longer ones: the one-token requests were
   counted against the TPOT target (``infeasible: no plan meets the TPOT target`` where half the
   requests have no TPOT), while the simulator counts them as meeting it. Now the analytical model
   counts them as meeting any TPOT target too.

Expected values by hand (shares of the mixes, rates of the closed forms) or by a second method (the
plans counted by :func:`graphs.llm.chain_plans` in the test, a model without a TPOT target, the
simulator)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from graphs.devices import parse_devices
from graphs.llm import Bucket, LLMConfig, ServingModel, chain_plans, read_mix, read_model_config
from placement.cli import main
from placement.goodput import EXHAUSTIVE_PLANS, disaggregated_search, goodput_search, targets_missed
from solvers.base import INTERRUPTED

LLAMA_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "torch_dtype": "float16"}
CHAT = {"buckets": [{"input": 256, "output": 128, "weight": 5}, {"input": 1024, "output": 256, "weight": 3},
                    {"input": 4096, "output": 256, "weight": 1}]}
TINY = LLMConfig("tiny", layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1000)
TINY_MIX = {"buckets": [{"input": 64, "output": 200, "weight": 3},
                        {"input": 1024, "output": 20, "weight": 1}]}
TINY_DEVICES = "a100:1,t4:2"


def _solve(problem):
    from solvers.registry import solve

    return solve(problem)


def _order(problem, solver_plan) -> tuple[list, int]:
    """The plans of ``problem`` in the order the search scores them (the solver's first, then the others
    as :func:`graphs.llm.chain_plans` lists them) and how many plans it has."""
    chain = chain_plans(problem, EXHAUSTIVE_PLANS)
    assert chain is not None and solver_plan in chain
    return [solver_plan] + [q for q in chain if q != solver_plan], len(chain)


# ------------------------------------------------------------------- 1. a Ctrl-C while plans are scored
def test_goodput_search_records_how_many_plans_a_ctrl_c_left_scored():
    """At every scoring of the tiny model's search (its every (batch, N) problem has few plans): the
    point of the batch cut short records the count and how many of its plans were scored before the
    Ctrl-C (the plans before the one being scored, in the search's order, counted here from
    chain_plans), or nothing where none of that count's was; never exhaustive; stopped says it."""
    model = ServingModel(TINY, parse_devices(TINY_DEVICES), read_mix(TINY_MIX), ttft=1.0, tpot=1.0)
    batches = [1, 2, 4]
    seen: list = []  # (batch, problem, plan) of each scoring of the uninterrupted search
    full = goodput_search(model, batches, _solve, score=lambda p, plan, b, ev: seen.append((b, p, plan)) or
                          [model.evaluate(p, plan, b, evaluation=ev)])
    assert full.exhaustive and not full.stopped
    recorded = 0  # Ctrl-Cs that left some of a count's plans scored
    for k in range(2, len(seen) + 1):
        b, p, plan = seen[k - 1]
        firsts = [x for x in seen[:k] if x[0] == b and x[1].microbatches == p.microbatches]
        order, plans = _order(p, firsts[0][2])  # the first scoring of a count is the solver's plan
        done = order.index(plan)  # plans of this count scored (or found not to fit) before the Ctrl-C

        calls: list = []

        def score(q, pl, bb, ev, k=k, calls=calls):
            calls.append(1)
            if len(calls) == k:
                raise KeyboardInterrupt
            return [model.evaluate(q, pl, bb, evaluation=ev)]

        earlier = any(x[0] == b for x in seen[:k - 1])
        if not earlier and b == batches[0]:
            with pytest.raises(KeyboardInterrupt):
                goodput_search(model, batches, _solve, score=score)
            continue
        search = goodput_search(model, batches, _solve, score=score)
        assert search.interrupted and not search.exhaustive
        if not earlier:  # nothing of this batch scored: not tried
            assert search.points[-1].batch < b
            continue
        cut = search.points[-1]
        assert cut.batch == b and not cut.exhaustive and cut.plans is None
        assert p.microbatches not in [n for n, _ in cut.counts]
        if done:
            recorded += 1
            assert cut.cut == (p.microbatches, done, plans), k
            assert f"cut short at micro-batch count {p.microbatches} ({done} of its {plans} plans scored" \
                in search.stopped
        else:  # the Ctrl-C at the count's first plan: none of its plans scored
            assert cut.cut is None
            assert "plans scored" not in search.stopped
    assert recorded > 50


@pytest.fixture
def llama(tmp_path):
    cfg, mix = tmp_path / "llama2-7b.json", tmp_path / "chat.json"
    cfg.write_text(json.dumps(LLAMA_7B))
    mix.write_text(json.dumps(CHAT))
    return cfg, mix


def test_place_goodput_cut_short_while_scoring_says_some_plans_were_scored(tmp_path, llama, capsys,
                                                                          monkeypatch):
    """The review's case: llama2-7b on a100:2,t4:4, batch 32, the 40th plan scored takes the Ctrl-C
    (at N = 2, whose few plans are all to be scored, after a plan of more goodput than the solver's).
    The kept plan is said to be the most goodput of the K of the problem's M plans scored (K counted
    here from chain_plans), the column says "K of M at N=2 (Ctrl-C)", the footer "some of them scored";
    never "all of them were scored" nor "the most goodput among all the problem's plans"."""
    cfg, mix = llama
    out = tmp_path / "partial.json"
    real = ServingModel.evaluate
    calls: list = []

    def evaluate(self, problem, plan, batch, evaluation=None):
        calls.append((problem, plan))
        if len(calls) == 40:
            raise KeyboardInterrupt
        return real(self, problem, plan, batch, evaluation=evaluation)

    monkeypatch.setattr(ServingModel, "evaluate", evaluate)
    assert main(["place", str(cfg), "--devices", "a100:2,t4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "32", "--out",
                 str(out)]) == 0
    text = capsys.readouterr().out
    problem, plan = calls[-1]
    n = problem.microbatches
    at_n = [pl for q, pl in calls if q.microbatches == n]
    order, plans = _order(problem, at_n[0])
    scored = order.index(plan)
    assert n == 2 and 0 < scored < plans <= EXHAUSTIVE_PLANS
    doc = json.loads(out.read_text())
    (row,) = doc["goodput"]["sweep"]
    assert row["cut_short"] == {"microbatches": 2, "plans_scored": scored, "plans": plans}
    assert not row["exhaustive"] and 2 not in [c["microbatches"] for c in row["counts"]]
    assert doc["status"] == "feasible"
    assert f"{scored} of {plans} at N=2 (Ctrl-C)" in text
    assert f"stopped: {INTERRUPTED}: batch 32's search cut short at micro-batch count 2 ({scored} of its " \
           f"{plans} plans scored; count 1 not tried)\n" in text
    best = next(x for x in text.splitlines() if x.startswith("best: "))
    assert "not the decode" in best  # the kept plan is not the solver's: the case reported
    assert f"the most goodput of the {scored} of the problem's {plans} plans scored before the Ctrl-C" in best
    proven = next(x for x in text.splitlines() if x.startswith("proven: "))
    assert f"batch 32 (N = 2: {scored} of its {plans} plans), whose few plans were being scored when the " \
           f"Ctrl-C came: some of them scored" in proven
    for false in ("all of them were scored", "among all the problem's plans", "auto solver's per N"):
        assert false not in text, false
    assert "all of them were scored" not in doc["message"]


def test_a_split_cut_short_says_interrupted_once(monkeypatch):
    """--disaggregate's search of a split cut short said ``interrupted (Ctrl-C): split A | B:
    interrupted (Ctrl-C): ...``; the Ctrl-C is said once, at the start, at every solve of the splits'
    decode searches."""
    import graphs.llm

    model = ServingModel(TINY, parse_devices(TINY_DEVICES), read_mix(TINY_MIX), ttft=1.0, tpot=1.0)
    kinds: list = []
    prefills: set = set()
    real = graphs.llm.prefill_problem

    def tagged(*a, **k):
        p = real(*a, **k)
        prefills.add(id(p))
        return p

    monkeypatch.setattr(graphs.llm, "prefill_problem", tagged)
    disaggregated_search(model, [1, 2], lambda p: kinds.append(id(p) in prefills) or _solve(p))
    decode = [k + 1 for k, pre in enumerate(kinds) if not pre]
    checked = 0
    for k in decode[1:]:
        calls: list = []

        def solve(p, k=k, calls=calls):
            calls.append(1)
            if len(calls) == k:
                raise KeyboardInterrupt
            return _solve(p)

        try:
            split = disaggregated_search(model, [1, 2], solve)
        except KeyboardInterrupt:
            continue
        assert split.stopped.startswith(INTERRUPTED) and split.stopped.count(INTERRUPTED) == 1, split.stopped
        checked += "split " in split.stopped
    assert checked  # some Ctrl-C came inside a split's decode search, its words named


# --------------------------------------------------------- 2. one output token: no TPOT, meets the target
def test_best_rate_binds_the_tpot_target_on_requests_with_a_decode_step_only():
    """The rate of most goodput, by hand. Two buckets of half the requests each, the first of one
    output token (no TPOT): past the TPOT target's rate L the second misses it, the first does not."""
    from graphs.llm import _best_rate

    untimed_first = [False, True]
    # no TTFT target, 10 req/s of KV slots: at L = 4, 4 x 1 = 4 < 10 x 0.5 = 5 (10 req/s, half meet)
    assert _best_rate(None, [0.5, 0.5], [0.01, 0.01], 0.0, 0.0, {"KV slots": 10.0},
                      tpot=(4.0, untimed_first)) == (10.0, "KV slots")
    # at L = 6, 6 x 1 = 6 > 5: the rate where every request meets both
    assert _best_rate(None, [0.5, 0.5], [0.01, 0.01], 0.0, 0.0, {"KV slots": 10.0},
                      tpot=(6.0, untimed_first)) == (6.0, "TPOT target")
    # no rate meets the TPOT target: the one-token half is still served at 10 req/s (was: no rate)
    assert _best_rate(None, [0.5, 0.5], [0.01, 0.01], 0.0, 0.0, {"KV slots": 10.0},
                      tpot=(-1.0, untimed_first)) == (10.0, "KV slots")
    # a TTFT target of 300 ms, E[S] 10 ms, E[S^2] 2e-4, prefills 100 and 200 ms: the TTFT rates are
    # room / (E[S^2] / 2 + room E[S]), 0.2 / 0.0021 = 95.238 and 0.1 / 0.0011 = 90.909 req/s
    ttft = (0.3, [0.5, 0.5], [0.1, 0.2], 0.01, 0.0002, {"prefill capacity": 100.0})
    lam, why = _best_rate(*ttft, tpot=(50.0, untimed_first))  # 50 x 1 > 95.238 x 0.5 = 47.6
    assert (lam, why) == (50.0, "TPOT target")
    lam, why = _best_rate(*ttft, tpot=(40.0, untimed_first))  # 40 x 1 < 47.6: the first bucket alone
    assert lam == pytest.approx(0.2 / 0.0021, rel=1e-12) and why == "TTFT target"
    lam, why = _best_rate(*ttft, tpot=(40.0, [True, True]))  # every request has a TPOT: 40 for all
    assert (lam, why) == (40.0, "TPOT target")
    # the one-token bucket has the longer prefill: at 90.909 req/s it meets TTFT, the other misses TPOT
    lam, why = _best_rate(*ttft, tpot=(40.0, [True, False]))  # 40 x 1 < 90.909 x 0.5 = 45.45
    assert lam == pytest.approx(0.1 / 0.0011, rel=1e-12) and why == "TTFT target"


def _mixed_model(tpot: float | None, ttft: float = 1.0) -> ServingModel:
    """Tiny, one a100; a quarter of the requests of one output token, the rest of 200, same prompts."""
    mix = read_mix({"buckets": [{"input": 64, "output": 1, "weight": 1}, {"input": 64, "output": 200,
                                                                          "weight": 3}]})
    return ServingModel(TINY, parse_devices("a100:1"), mix, ttft=ttft, tpot=tpot)


@pytest.mark.parametrize("disaggregated", [False, True])
def test_one_token_requests_meet_an_unreachable_tpot_target(disaggregated):
    """A TPOT target below every step (half the full batch's): the requests of more output tokens miss
    it, those of one (a quarter, by weight) meet it: goodput a quarter of the rate the same plan serves
    without a TPOT target (the rate depends on the TTFT and the slots alone: the buckets' prompts are
    the same). Was: goodput 0, 'TPOT target unreachable'. Colocated and in separate pools."""
    from graphs.llm import disaggregated_goodput, prefill_problem

    free = _mixed_model(None)
    p = free.problem(8)
    r = _solve(p)
    if disaggregated:
        pre_ds = parse_devices("t4:1")
        pp = prefill_problem(TINY, pre_ds, free.mix)
        pre_plan = _solve(pp).plan

        def score(model):
            pre = ServingModel(TINY, pre_ds, model.mix, ttft=model.ttft, tpot=model.tpot)
            return disaggregated_goodput(pre, pp, pre_plan, model, p, r.plan, 8)
    else:
        def score(model):
            return model.evaluate(p, r.plan, 8)

    base = score(free)
    assert base.goodput > 0 and base.attainment == 1.0
    sv = score(_mixed_model(base.tpot_full / 2))
    assert sv.attainment == pytest.approx(1 / 4, rel=1e-12)
    assert sv.rate == pytest.approx(base.rate, rel=1e-9)
    assert sv.goodput == pytest.approx(base.rate / 4, rel=1e-9)
    assert [x.meets for x in sv.buckets] == [True, False]


def test_targets_missed_with_one_token_requests_proves_nothing_by_the_tpot_alone():
    """No plan has goodput and none meets the TPOT target: where every request has a TPOT that proves
    it (every decode plan scored), but requests of one output token meet any TPOT target: then only
    every plan's TTFT scored proves it (disaggregated pools: not)."""
    one, more = Bucket(64, 1, 1.0), Bucket(64, 200, 3.0)
    mixed = SimpleNamespace(ttft=0.01, tpot=0.002, mix=SimpleNamespace(decode_steps=9, buckets=(one, more)))
    timed = SimpleNamespace(ttft=0.01, tpot=0.002, mix=SimpleNamespace(decode_steps=9, buckets=(more,)))
    assert targets_missed(timed, 0.003, 0.005, True, prefill_exhaustive=False).proven
    why, proven, _ = targets_missed(mixed, 0.003, 0.005, True, prefill_exhaustive=False)
    assert not proven and why.startswith("no plan found meets the TPOT target of 2 ms (the requests of "
                                         "more than one output token) nor the TTFT target of 10 ms for those "
                                         "of one")
    assert "(not proven infeasible)" in why and "at every plan scored" in why
    why, proven, _ = targets_missed(mixed, 0.003, 0.005, True)  # colocated, every plan scored
    assert proven and why.startswith("no plan meets the TPOT target of 2 ms (the requests")


@pytest.fixture
def half_one_token(tmp_path):
    cfg, mix = tmp_path / "llama2-7b.json", tmp_path / "mix.json"
    cfg.write_text(json.dumps(LLAMA_7B))
    mix.write_text(json.dumps({"buckets": [{"input": 256, "output": 1, "weight": 1},
                                           {"input": 256, "output": 128, "weight": 1}]}))
    return cfg, mix


def test_place_goodput_half_one_token_requests_is_not_infeasible(tmp_path, half_one_token, capsys):
    """The review's case: llama2-7b on a100:2, TPOT target 5 ms (every decode step is slower), half the
    requests of one output token. Was: 'infeasible: no plan meets the TPOT target'; now a plan serving
    the one-token half: 50% meet (by hand: weight 1 of 2), exit 0, and the simulator, which counts a
    request without a TPOT as meeting it, measures about the same share at a light load."""
    from graphs.llm_sim import simulate_plan
    from placement.stages import plan_from_dict

    cfg, mix = half_one_token
    out = tmp_path / "g.json"
    assert main(["place", str(cfg), "--devices", "a100:2", "--objective", "goodput", "--requests", str(mix),
                 "--ttft-slo", "300", "--tpot-slo", "5", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "infeasible" not in captured.err
    assert "(a request of one output token has no TPOT: it meets any TPOT target)" in captured.out
    doc = json.loads(out.read_text())
    section = doc["goodput"]
    assert section["attainment"] == pytest.approx(0.5, rel=1e-12)
    assert section["goodput_rps"] > 0
    assert section["goodput_rps"] == pytest.approx(section["rate_rps"] / 2, rel=1e-12)
    assert [b["meets"] for b in section["buckets"]] == [True, False]
    # the simulator on the same plan, at a tenth of the model's rate (every prompt's TTFT met there)
    model = ServingModel(read_model_config(str(cfg)), parse_devices("a100:2"), read_mix(str(mix)), ttft=0.3,
                         tpot=0.005)
    problem = model.problem(section["batch_size"], microbatches=doc["problem"]["microbatches"])
    plan = plan_from_dict(problem, doc)
    rate = section["rate_rps"] / 10
    assert model.evaluate(problem, plan, section["batch_size"]).attainment == pytest.approx(0.5, rel=1e-12)
    res = simulate_plan(model, problem, plan, section["batch_size"], rate=rate, seconds=200.0, seed=1)
    ones = sum(1 for _, b in res.per_request if b is None)  # one-token arrivals in the window (no TPOT)
    assert len(res.per_request) > 200 and ones / len(res.per_request) == pytest.approx(0.5, abs=0.1)
    assert res.attainment(model.ttft, model.tpot) == pytest.approx(ones / len(res.per_request), abs=1e-12)


def test_place_goodput_one_token_requests_missing_the_ttft_is_infeasible_with_both_reasons(
        tmp_path, half_one_token, capsys):
    """The one-token requests' prompts too long for the TTFT target (4096 tokens, 100 ms) and the others'
    TPOT target unreachable: proven infeasible (every plan scored), both reasons said."""
    cfg, mix = half_one_token
    mix.write_text(json.dumps({"buckets": [{"input": 4096, "output": 1, "weight": 1},
                                           {"input": 256, "output": 128, "weight": 1}]}))
    out = tmp_path / "g.json"
    assert main(["place", str(cfg), "--devices", "a100:2", "--objective", "goodput", "--requests", str(mix),
                 "--ttft-slo", "100", "--tpot-slo", "5", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: infeasible: no plan meets the TPOT target of 5 ms (the requests of more "
                          "than one output token) nor the TTFT target of 100 ms for those of one")
    assert json.loads(out.read_text())["status"] == "infeasible"
    assert math.isfinite(json.loads(out.read_text())["goodput"]["least_tpot_s"])


def test_join_stopped_says_the_ctrl_c_once():
    """The searches' stopped words in one line: a Ctrl-C's first, ``interrupted (Ctrl-C)`` said once."""
    from placement.goodput import join_stopped

    ctrl = f"{INTERRUPTED}: batch 32's search cut short at micro-batch count 2"
    pools = f"{INTERRUPTED}: the splits into prefill and decode pools not tried"
    limit = "time limit reached: batch size 64 not tried"
    assert join_stopped([limit, ctrl, "", pools]) == (
        f"{INTERRUPTED}: batch 32's search cut short at micro-batch count 2; the splits into prefill and "
        f"decode pools not tried; {limit}")
    assert join_stopped([INTERRUPTED, limit]) == f"{INTERRUPTED}; {limit}"
    assert join_stopped([limit]) == limit and join_stopped(["", ""]) == ""


def test_place_goodput_disaggregate_cut_short_says_interrupted_once(tmp_path, llama, capsys, monkeypatch):
    """The review's case with --disaggregate: the colocated search cut short while its plans were
    scored, the pools then not tried: the stopped line says ``interrupted (Ctrl-C)`` once."""
    cfg, mix = llama
    out = tmp_path / "partial.json"
    real = ServingModel.evaluate
    calls: list = []

    def evaluate(self, problem, plan, batch, evaluation=None):
        calls.append(1)
        if len(calls) == 40:
            raise KeyboardInterrupt
        return real(self, problem, plan, batch, evaluation=evaluation)

    monkeypatch.setattr(ServingModel, "evaluate", evaluate)
    assert main(["place", str(cfg), "--devices", "a100:2,t4:4", "--objective", "goodput", "--requests",
                 str(mix), "--ttft-slo", "300", "--tpot-slo", "40", "--batch-size", "32", "--out",
                 str(out), "--disaggregate"]) == 0
    stopped = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("stopped: "))
    assert stopped.count(INTERRUPTED) == 1 and stopped.startswith(f"stopped: {INTERRUPTED}: batch 32's")
    assert stopped.endswith("; the splits into prefill and decode pools not tried")
    assert json.loads(out.read_text())["goodput"]["stopped"] == stopped.removeprefix("stopped: ")
