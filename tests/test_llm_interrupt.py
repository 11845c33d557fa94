"""Ctrl-C on an LLM's goodput searches (placement/goodput.py) and their commands (placement/cli/llm.py).

A Ctrl-C threw away every plan found so far: ``place --objective goodput`` and LLM ``provision`` printed
``error: interrupted`` and exited 130 with no file, 4.5 s into a search that had scored five batch sizes
(a solve that took the Ctrl-C was turned into ``KeyboardInterrupt``, which no search caught, nor one
raised between solves). Now a Ctrl-C at any moment ends the search with what it has: the best so far,
said ``interrupted (Ctrl-C): ...`` naming what was not tried, never proven (exit 0); 130 only where
nothing was found. Deterministic: the solve made to raise ``KeyboardInterrupt``, or to return its answer
said interrupted, at its k-th call (every k; provision: a spread of them), the scorer raising between
solves; the commands in-process; and real SIGINTs to ``python -m placement`` at a moment pinned by a
sitecustomize (between two solves)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import pytest

from graphs.devices import parse_devices
from graphs.llm import LLMConfig, ServingModel, read_mix
from placement.cli import main
from placement.goodput import disaggregated_search, goodput_search, provision_buckets
from placement.serving import not_tried
from solvers.base import INTERRUPTED
from tests.pinned_interrupt import ctrl_c_at_marker

TINY = LLMConfig("tiny", layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1000)
TINY_CONFIG = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
               "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "float16"}  # TINY
MIX = {"buckets": [{"input": 64, "output": 200, "weight": 3}, {"input": 1024, "output": 20, "weight": 1}]}
DEVICES = "a100:1,t4:2"  # batch 1: one micro-batch count; 2: two; 4 and 8: three; two splits into pools
BATCHES = [1, 2, 4, 8]


def _model(ttft: float = 1.0, tpot: float = 1.0) -> ServingModel:
    return ServingModel(TINY, parse_devices(DEVICES), read_mix(MIX), ttft=ttft, tpot=tpot)


def _solve(problem):
    from solvers.registry import solve

    return solve(problem)


def _cut_at(k: int, mode: str, calls: list):
    """A solve whose k-th call takes a Ctrl-C: raises ``KeyboardInterrupt`` (``raise``: before a plan)
    or returns its answer said interrupted (``solution``: the DP returning what it had); each call's
    problem appended to ``calls``."""
    def solve(problem):
        calls.append(problem)
        if len(calls) == k:
            if mode == "raise":
                raise KeyboardInterrupt
            return dataclasses.replace(_solve(problem), message=INTERRUPTED)
        return _solve(problem)

    return solve


def _same_point(a, b) -> None:
    assert (a.batch, a.problem.microbatches, a.plan, a.exhaustive, a.note) == \
        (b.batch, b.problem.microbatches, b.plan, b.exhaustive, b.note)
    assert a.serving.goodput == b.serving.goodput


# ----------------------------------------------------------------------------------- goodput_search
def _logged(model: ServingModel, log: list) -> ServingModel:
    """``model``, each decode problem it builds logged as ``(batch, micro-batches)``: one per solve."""
    real = model.problem

    def problem(batch, **kw):
        log.append((batch, kw.get("microbatches")))
        return real(batch, **kw)

    model.problem = problem
    return model


@pytest.fixture(scope="module")
def full_search():
    """The uninterrupted search and its solves' ``(batch, micro-batches)``, in order."""
    order: list = []
    search = goodput_search(_logged(_model(), order), BATCHES, _solve)
    assert not search.stopped and not search.interrupted and search.best is not None
    assert [p.batch for p in search.points] == BATCHES
    return search, order


@pytest.mark.parametrize("mode", ["raise", "solution"])
def test_goodput_search_keeps_the_points_so_far_at_every_solve(full_search, mode):
    """At the k-th solve, every k: nothing is solved after it; the batch sizes done before it are the
    uninterrupted search's points, the one it cut short keeps its best plan so far (not exhaustive) or,
    with none, counts as not tried; stopped names both in the ladder's words; the best is the best
    kept, never proven; with no plan kept (the first solve raising) the KeyboardInterrupt goes on up."""
    full, order = full_search
    by_batch = {p.batch: p for p in full.points}
    assert len(set(order)) == len(order) > len(BATCHES)  # several counts for some batch sizes
    for k in range(1, len(order) + 1):
        calls: list = []
        b, n = order[k - 1]
        earlier = [m for c, m in order[:k - 1] if c == b]  # b's counts solved before the k-th
        later = [m for c, m in order[k:] if c == b]
        kept_b = bool(earlier) or mode == "solution"  # every solve here has a plan
        if not kept_b and b == BATCHES[0]:
            with pytest.raises(KeyboardInterrupt):
                goodput_search(_model(), BATCHES, _cut_at(k, mode, calls))
            assert len(calls) == k
            continue
        search = goodput_search(_model(), BATCHES, _cut_at(k, mode, calls))
        assert len(calls) == k, "a solve after the Ctrl-C"
        assert search.interrupted and not search.exhaustive
        done = [c for c in BATCHES if c < b]
        assert [p.batch for p in search.points] == done + ([b] if kept_b else [])
        for p in search.points[:len(done)]:
            _same_point(p, by_batch[p.batch])
        rest = [c for c in BATCHES if c > b] if kept_b else [c for c in BATCHES if c >= b]
        words = not_tried(INTERRUPTED, rest, False)
        if kept_b:
            cut = search.points[-1]
            assert not cut.exhaustive and cut.note.endswith(INTERRUPTED)
            assert 0 < cut.serving.goodput <= by_batch[b].serving.goodput * (1 + 1e-12)
            words += ((", " if rest else ": ") + f"batch {b}'s search cut short at micro-batch count {n}"
                      + (f" (count{'s' if len(later) > 1 else ''} {', '.join(map(str, later))} not tried)"
                         if later else ""))
        assert search.stopped == words, k
        top = max(p.serving.goodput for p in search.points)
        assert search.best.serving.goodput == top <= full.best.serving.goodput


def test_goodput_search_keeps_the_points_so_far_when_the_ctrl_c_comes_between_solves(full_search):
    """A Ctrl-C in Python code between solves (here: while a plan is scored; at each batch size's first
    scoring, its second and a spread of others): the same, the batch being scored keeping the plans
    scored before it (not tried where there are none)."""
    full, _ = full_search
    by_batch = {p.batch: p for p in full.points}
    model = _model()
    every: list = []  # the batch of each scoring of the uninterrupted search
    goodput_search(model, BATCHES, _solve, score=lambda p, plan, b, ev: every.append(b) or
                   [model.evaluate(p, plan, b, evaluation=ev)])
    firsts = [every.index(b) + 1 for b in BATCHES]
    for k in sorted(set(firsts + [f + 1 for f in firsts] + [len(every) // 2, len(every)])):
        scored: list = []

        def score(p, plan, b, ev, k=k, scored=scored):
            scored.append(b)
            if len(scored) == k:
                raise KeyboardInterrupt
            return [model.evaluate(p, plan, b, evaluation=ev)]

        b = every[k - 1]  # the batch the Ctrl-C comes in
        kept_b = k not in firsts
        if b == BATCHES[0] and not kept_b:
            with pytest.raises(KeyboardInterrupt):
                goodput_search(model, BATCHES, _solve, score=score)
            continue
        search = goodput_search(model, BATCHES, _solve, score=score)
        assert scored == every[:k] and search.interrupted and not search.exhaustive
        assert [p.batch for p in search.points] == [c for c in BATCHES if c < b or (c == b and kept_b)]
        for p in search.points[:len([c for c in BATCHES if c < b])]:
            _same_point(p, by_batch[p.batch])
        if kept_b:
            assert search.points[-1].serving.goodput <= by_batch[b].serving.goodput * (1 + 1e-12)
            assert f"batch {b}'s search cut short at micro-batch count" in search.stopped
        else:
            assert search.stopped == not_tried(INTERRUPTED, [c for c in BATCHES if c >= b], False)
        assert search.best.serving.goodput == max(p.serving.goodput for p in search.points)


# ----------------------------------------------------------------------------- disaggregated_search
def test_disaggregated_search_keeps_the_splits_so_far_at_every_solve(monkeypatch):
    """At the k-th solve, every k (prefill and decode alike): nothing is solved after it; the splits
    searched before it are the uninterrupted search's, the one it cut short kept where its decode
    search has a plan; stopped names the splits not tried; before any decode plan the KeyboardInterrupt
    goes on up."""
    import graphs.llm

    prefills: set = set()
    real = graphs.llm.prefill_problem

    def tagged(*a, **k):  # which solves are of a prefill pool
        p = real(*a, **k)
        prefills.add(id(p))
        return p

    monkeypatch.setattr(graphs.llm, "prefill_problem", tagged)
    kinds: list = []
    full = disaggregated_search(_model(), [1, 2], lambda p: kinds.append(id(p) in prefills) or _solve(p))
    assert not full.stopped and not full.interrupted and len(full.splits) == 2
    assert all(x[2] is not None and x[2].best is not None for x in full.splits)
    first_decode = kinds.index(False) + 1
    for mode in ("raise", "solution"):
        for k in range(1, len(kinds) + 1):
            calls: list = []
            if k < first_decode or (k == first_decode and mode == "raise"):
                with pytest.raises(KeyboardInterrupt):
                    disaggregated_search(_model(), [1, 2], _cut_at(k, mode, calls))
                assert len(calls) == k
                continue
            split = disaggregated_search(_model(), [1, 2], _cut_at(k, mode, calls))
            assert len(calls) == k and split.interrupted and split.stopped.startswith(INTERRUPTED)
            assert len(split.pools) == len(split.splits) >= 1
            for got, want in zip(split.splits[:-1], full.splits):  # the splits before the one cut short
                assert got[:2] == want[:2] and got[2].best.serving.goodput == want[2].best.serving.goodput
            assert split.splits[-1][:2] == full.splits[len(split.splits) - 1][:2]
            left = len(full.splits) - len(split.splits)
            assert (f"{left} of the 2 splits into pools not tried" in split.stopped) == (left > 0)
            goodputs = [x[2].best.serving.goodput for x in split.splits if x[2] is not None and x[2].best]
            assert split.best.serving.goodput == max(goodputs) <= full.best.serving.goodput


# -------------------------------------------------------------------------------- provision_buckets
PRICES = [3.0, 0.5]
SIZES = {"a100": [1], "t4": [2]}  # two instance types, each searched per bucket over the auto sizes


def _check_mix(out, rate: float, full) -> None:
    """A mix found from capacities no larger than the full ones: it serves every bucket within the
    capacities it has, so it is a mix of the full problem too, and costs at least the cheapest."""
    shares = read_mix(MIX).shares
    for b, share in enumerate(shares):
        assert sum(load[b] for load in out.load) == pytest.approx(rate * share, rel=1e-6)
    for x, m, load in zip(out.instances, out.used, out.load):
        assert sum(v / c for v, c in zip(load, x.capacity) if v > 1e-9) <= m + 1e-6
    assert out.cost >= full.cost * (1 - 1e-9)


@pytest.mark.parametrize("mode", ["raise", "solution"])
def test_provision_buckets_mixes_the_instances_scored_so_far(mode):
    """At the k-th solve (a spread of k over both instance types and both buckets): nothing is solved
    after it; the instances scored are the full run's, the one cut short with the capacities of its
    buckets so far (no larger than the full ones; 0 for those not scored); stopped says so and names
    the instance types not scored; no mix where they serve no bucket's share, and the first solve
    raising (nothing scored) raises."""
    rate = 500.0
    calls: list = []
    full = provision_buckets(_model(), rate, PRICES, lambda p: calls.append(1) or _solve(p), sizes=SIZES)
    n = len(calls)
    assert full.found and not full.stopped and [(x.kind, x.count) for x in full.instances] == \
        [("a100", 1), ("t4", 2)]
    calls = []  # the solves of the first type (its problems do not depend on the other kinds)
    one = ServingModel(TINY, parse_devices("a100:1"), read_mix(MIX), ttft=1.0, tpot=1.0)
    provision_buckets(one, rate, PRICES[:1], lambda p: calls.append(1) or _solve(p), sizes=SIZES)
    first = len(calls)
    assert 3 < first < n - 3
    for k in sorted({1, 2, 3, first // 2, first, first + 1, first + 2, (first + n) // 2, n - 1, n}):
        calls = []
        if k == 1 and mode == "raise":
            with pytest.raises(KeyboardInterrupt):
                provision_buckets(_model(), rate, PRICES, _cut_at(k, mode, calls), sizes=SIZES)
            assert len(calls) == 1
            continue
        out = provision_buckets(_model(), rate, PRICES, _cut_at(k, mode, calls), sizes=SIZES)
        assert len(calls) == k, "a solve after the Ctrl-C"
        assert out.interrupted and out.stopped.startswith(INTERRUPTED)
        assert [(x.kind, x.count) for x in out.instances] == \
            [(x.kind, x.count) for x in full.instances][:len(out.instances)]
        for got, want in zip(out.instances, full.instances):
            assert all(0 <= c <= w * (1 + 1e-12) for c, w in zip(got.capacity, want.capacity))
        if k <= first:
            assert "1 instance type(s) not scored (t4 x2)" in out.stopped
        else:  # the first type scored whole
            assert out.instances[0] == full.instances[0] and "(t4 x2)" not in out.stopped
        if out.found:
            _check_mix(out, rate, full)
        else:
            assert out.cost == math.inf and not any(out.used)


def _searches_cut_at(monkeypatch, k: int) -> list:
    """Provision's goodput searches (one per instance type and bucket) take a Ctrl-C as the k-th
    starts, in Python code between two searches; returns the list of the calls."""
    from placement import goodput

    real, seen = goodput.goodput_search, []

    def searched(*a, **kw):
        seen.append(1)
        if len(seen) == k:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(goodput, "goodput_search", searched)
    return seen


def test_provision_buckets_keeps_the_instances_scored_when_the_ctrl_c_comes_between_searches(monkeypatch):
    """A Ctrl-C in Python code between two goodput searches (the third: the second instance type's
    first bucket): the first type, scored whole, is the mix, its cost the single type's."""
    seen = _searches_cut_at(monkeypatch, 3)
    out = provision_buckets(_model(), 500.0, PRICES, _solve, sizes=SIZES)
    assert len(seen) == 3 and [(x.kind, x.count) for x in out.instances] == [("a100", 1)]
    assert out.stopped == f"{INTERRUPTED}: t4 x2 not scored on 64/200, 1024/20 requests (capacity 0 there)"
    assert out.found and out.used == (1,) and out.cost == 3.0



# ------------------------------------------------------------------------------------ the commands
@pytest.fixture
def files(tmp_path):
    cfg, mix, prices = tmp_path / "config.json", tmp_path / "mix.json", tmp_path / "prices.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    mix.write_text(json.dumps(MIX))
    prices.write_text(json.dumps({"prices": {"a100": 3.0, "t4": 0.5}}))
    return cfg, mix, prices


def _place(files, out, *extra) -> list[str]:
    cfg, mix, _ = files
    return ["place", str(cfg), "--devices", DEVICES, "--objective", "goodput", "--requests", str(mix),
            "--ttft-slo", "1000", "--tpot-slo", "1000", "--batch-size", "1,2,4", "--out", str(out), *extra]


def _solves_cut_at(monkeypatch, k: int, mode: str = "raise") -> list:
    """The command's solves (placement.stages.solve_args) take a Ctrl-C at the k-th call; returns the
    list of the calls' problems."""
    import placement.stages as stages

    real, calls = stages.solve_args, []

    def solve_args(problem, args, progress=None):
        calls.append(problem)
        if len(calls) == k:
            if mode == "raise":
                raise KeyboardInterrupt
            return dataclasses.replace(real(problem, args, progress), message=INTERRUPTED)
        return real(problem, args, progress)

    monkeypatch.setattr(stages, "solve_args", solve_args)
    return calls


def test_place_goodput_ctrl_c_before_any_plan_exits_130_without_a_file(tmp_path, capsys, files, monkeypatch):
    out = tmp_path / "plan.json"
    calls = _solves_cut_at(monkeypatch, 1)
    assert main(_place(files, out)) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: interrupted"
    assert len(calls) == 1 and not out.exists()


@pytest.mark.parametrize("mode, batches", [("raise", [1]), ("solution", [1, 2])])
def test_place_goodput_ctrl_c_writes_the_best_plan_so_far(tmp_path, capsys, files, monkeypatch, mode,
                                                          batches):
    """The reported case: the batch sizes scored before the Ctrl-C are the answer, printed and written
    (exit 0) with the stopped line, not proven; the solve that took it (returning its plan) counts."""
    out = tmp_path / "plan.json"
    calls = _solves_cut_at(monkeypatch, 2, mode)
    assert main(_place(files, out)) == 0
    text = capsys.readouterr().out
    words = (f"{INTERRUPTED}: batch size 4 not tried, batch 2's search cut short at micro-batch count 2 "
             "(count 1 not tried)") if mode == "solution" else f"{INTERRUPTED}: batch sizes 2, 4 not tried"
    assert f"stopped: {words}\n" in text and len(calls) == 2
    doc = json.loads(out.read_text())
    assert [p["batch_size"] for p in doc["goodput"]["sweep"]] == batches
    assert doc["goodput"]["stopped"] == words and doc["status"] == "feasible" and doc["valid"]
    assert f"the search stopped early ({words}): the best of what was tried" in doc["message"]
    assert doc["goodput"]["goodput_rps"] > 0


def test_place_goodput_ctrl_c_skips_the_simulation_and_the_pools(tmp_path, capsys, files, monkeypatch):
    """After a Ctrl-C the command does no more work: --disaggregate's pools are not searched and
    --simulate does not run (its section says interrupted), both said."""
    import graphs.llm_sim

    def never(*a, **k):
        raise AssertionError("simulated after the Ctrl-C")

    monkeypatch.setattr(graphs.llm_sim, "simulate_plan", never)
    out = tmp_path / "plan.json"
    calls = _solves_cut_at(monkeypatch, 2)
    assert main(_place(files, out, "--disaggregate", "--simulate", "auto")) == 0
    text = capsys.readouterr().out
    assert (f"stopped: {INTERRUPTED}: batch sizes 2, 4 not tried; the splits into prefill and decode pools "
            "not tried\n") in text
    assert "simulation: not run (interrupted (Ctrl-C) during the search); the plan above stands" in text
    doc = json.loads(out.read_text())
    assert doc["simulation"] == {"interrupted": True} and len(calls) == 2
    assert doc["goodput"]["layout"] == "colocated"


def test_place_goodput_ctrl_c_in_the_pools_keeps_the_colocated_plan_or_a_split(tmp_path, capsys, files,
                                                                             monkeypatch):
    """--disaggregate: a Ctrl-C at the pools' first solve (no split has a plan) keeps the colocated
    search's plan; one later keeps the splits searched, the colocated plan among the layouts."""
    out = tmp_path / "plan.json"
    counted = _solves_cut_at(monkeypatch, 10 ** 6)
    assert main(_place(files, out)) == 0
    colocated = len(counted)
    assert main(_place(files, out, "--disaggregate")) == 0
    total = len(counted) - colocated
    capsys.readouterr()
    monkeypatch.undo()
    _solves_cut_at(monkeypatch, colocated + 1)
    assert main(_place(files, out, "--disaggregate")) == 0
    text = capsys.readouterr().out
    words = f"{INTERRUPTED}: the splits into prefill and decode pools cut short before any plan"
    assert f"stopped: {words}\n" in text
    doc = json.loads(out.read_text())
    assert doc["goodput"]["layout"] == "colocated" and doc["goodput"]["stopped"] == words
    monkeypatch.undo()
    calls = _solves_cut_at(monkeypatch, total - 1)  # in the second split's decode search
    assert main(_place(files, out, "--disaggregate")) == 0
    text = capsys.readouterr().out
    stopped = next(x for x in text.splitlines() if x.startswith("stopped: "))
    assert stopped.startswith(f"stopped: {INTERRUPTED}: split ") and len(calls) == total - 1
    doc = json.loads(out.read_text())
    assert [x["layout"] for x in doc["goodput"]["layouts"]] == ["colocated", "disaggregated", "disaggregated"]


def test_a_ctrl_c_after_the_simulation_ran_keeps_the_plan(tmp_path, capsys, files, monkeypatch):
    """A Ctrl-C while the simulation's figures are read (after its run, before its lines) ended the
    command with 130 and no file; it ends the simulation step alone, as one during the run does."""
    import graphs.llm_sim

    class Cut:
        @property
        def planned(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(graphs.llm_sim, "simulate_plan", lambda *a, **k: Cut())
    out = tmp_path / "plan.json"
    assert main(_place(files, out, "--simulate", "auto")) == 0
    assert "simulation: interrupted (Ctrl-C)" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["simulation"] == {"interrupted": True} and doc["goodput"]["stopped"] is None


def _provision(files, out) -> list[str]:
    cfg, mix, prices = files
    return ["provision", str(cfg), "--requests", str(mix), "--available", DEVICES, "--prices", str(prices),
            "--target-throughput", "2", "--ttft-slo", "1000", "--tpot-slo", "1000", "--out", str(out)]


def test_provision_ctrl_c_writes_the_mix_of_the_instances_scored(tmp_path, capsys, files, monkeypatch):
    """LLM provision: a Ctrl-C after the first instance type was scored (as the third goodput search
    starts) mixes it alone, printed and written with the stopped line, not proven the cheapest
    (exit 0)."""
    seen = _searches_cut_at(monkeypatch, 3)
    out = tmp_path / "prov.json"
    assert main(_provision(files, out)) == 0 and len(seen) == 3
    text = capsys.readouterr().out
    words = (f"{INTERRUPTED}: t4 x1 not scored on 64/200, 1024/20 requests (capacity 0 there); 1 instance "
             "type(s) not scored (t4 x2)")
    assert f"stopped: {words}\nnot proven the cheapest" in text and "a100 x1: 1 (" in text
    doc = json.loads(out.read_text())["provision_buckets"]
    assert doc["stopped"] == words and not doc["proven_cheapest"] and doc["cost_per_hour"] == 3.0


def test_provision_ctrl_c_before_any_mix_exits_130_without_a_file(tmp_path, capsys, files, monkeypatch):
    import solvers.registry

    real = solvers.registry.solve
    calls = []

    def solve(*a, **k):
        calls.append(1)
        if len(calls) == 2:  # the first type's first bucket at batch 1 only: no mix serves both buckets
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(solvers.registry, "solve", solve)
    out = tmp_path / "prov.json"
    assert main(_provision(files, out)) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: interrupted"
    assert len(calls) == 2 and not out.exists()


# ----------------------------------------------------------------------------------- a real Ctrl-C
# LLM_PIN = "stages|registry:N": the N-th call of placement.stages.solve_args (place's solves) or of
# solvers.registry.solve (provision's) writes LLM_PIN_FILE and waits there for the Ctrl-C, in Python code
# between two solves (the moment pinned)
_PIN = """
import os, time

_where, _n = os.environ["LLM_PIN"].split(":")
if _where == "stages":
    import placement.stages as _module
    _name = "solve_args"
else:
    import solvers.registry as _module
    _name = "solve"
_real, _marker, _calls = getattr(_module, _name), os.environ["LLM_PIN_FILE"], []


def _pinned(*args, **kwargs):
    _calls.append(1)
    if len(_calls) == int(_n):
        with open(_marker, "w") as f:
            f.write("here")
        time.sleep(60)
    return _real(*args, **kwargs)


setattr(_module, _name, _pinned)
"""


def _ctrl_c_at(pin: str, argv: list[str], tmp_path, timeout: float = 60.0):
    """Run ``python -m placement`` with the moment ``pin`` (see _PIN), send SIGINT once it comes; its
    return code, stdout, stderr and how long it took to end after the signal."""
    marker = tmp_path / "moment"
    return ctrl_c_at_marker(argv, tmp_path, _PIN, marker, {"LLM_PIN": pin, "LLM_PIN_FILE": str(marker)},
                            timeout)


posix = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process (POSIX)")


@posix
def test_sigint_on_place_goodput_after_a_batch_size_writes_it(tmp_path, files):
    out = tmp_path / "plan.json"
    rc, text, err, took = _ctrl_c_at("stages:2", _place(files, out), tmp_path)
    assert rc == 0, err[-3000:]
    assert f"stopped: {INTERRUPTED}: batch sizes 2, 4 not tried\n" in text
    doc = json.loads(out.read_text())
    assert [p["batch_size"] for p in doc["goodput"]["sweep"]] == [1] and doc["goodput"]["goodput_rps"] > 0
    assert took < 5, f"exit {took:.1f} s after Ctrl-C"


@posix
def test_sigint_on_place_goodput_before_any_plan_ends_with_130(tmp_path, files):
    out = tmp_path / "plan.json"
    rc, _, err, took = _ctrl_c_at("stages:1", _place(files, out), tmp_path)
    assert rc == 130 and err.strip().splitlines()[-1] == "error: interrupted", err[-3000:]
    assert not out.exists() and took < 5


@posix
def test_sigint_on_llm_provision_after_an_instance_type_writes_its_mix(tmp_path, files):
    """One device kind, one bucket (a short auto sweep): the Ctrl-C as the third batch size's solve
    starts; the instance's capacity is that of batch sizes 1 and 2, enough for 2 requests/s."""
    cfg, _, prices = files
    mix = tmp_path / "one.json"
    mix.write_text(json.dumps({"buckets": [MIX["buckets"][0]]}))
    out = tmp_path / "prov.json"
    argv = ["provision", str(cfg), "--requests", str(mix), "--available", "a100:1", "--prices", str(prices),
            "--target-throughput", "2", "--ttft-slo", "1000", "--tpot-slo", "1000", "--out", str(out)]
    rc, text, err, took = _ctrl_c_at("registry:3", argv, tmp_path)
    assert rc == 0, err[-3000:]
    words = (f"{INTERRUPTED}: a100 x1's goodput search on 64/200 requests: {INTERRUPTED}: batch 4 and above "
             "not tried")
    assert f"stopped: {words}\n" in text
    doc = json.loads(out.read_text())["provision_buckets"]
    assert doc["stopped"] == words and not doc["proven_cheapest"] and doc["cost_per_hour"] == 3.0
    assert took < 5, f"exit {took:.1f} s after Ctrl-C"
