"""A Ctrl-C at any moment of the Helix layout search (solvers/helix_layout.py) and of ``placement place``
on a Helix file: the best layout found so far, ``feasible`` and said interrupted, with only the bound
proven so far (exit 0, the layout written); before any layout, ``KeyboardInterrupt`` (exit 130, nothing
written).

A Ctrl-C during the construction (the chains, the idle nodes added, the swaps) used to escape the
search: exit 130 and no layout, though on 3cluster24 / LLaMA-2 70B the whole-cluster chain, the final
answer, had been found seconds before. The moments are delivered deterministically: a step of the
search made to raise ``KeyboardInterrupt`` at its n-th call, every call in turn; and as a real SIGINT
to ``python -m placement``, sent once a sitecustomize says the first chain is there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np
import pytest

import solvers._milp
import solvers.helix_layout as hl
import solvers.helix_vllm
from graphs.helix import layout_problems, max_flow, parse_helix, parse_layout
from solvers.base import INTERRUPTED, Status
from solvers.helix_bounds import layer_budget_bound
from tests.pinned_interrupt import ctrl_c_at_marker
from tests.test_helix import HELIX, _brute_force, _heldout, _tiny

# two-region clusters of tests.test_helix._tiny (4 nodes, 3 layers): on 101 each bisection builds two
# chains and the chains of the two regions side by side (60.7 each) beat the chain over both (60.7);
# on 102 the construction's chain (36.2) gains idle nodes (51.6, then 57.4), and the bounds and the
# MILP run after it
SEEDS = (101, 102)
# the bounds a search proved, in its stats (the MILP's is an upper bound only where it is positive)
BOUNDS = ("layer_bound", "cover_bound", "crossing_bound", "integer_cover_bound", "milp_bound")


def _cluster(seed: int):
    return _tiny(np.random.default_rng(seed), 4, 3, regions=2)


@pytest.fixture(scope="module")
def optima() -> dict[int, float]:
    return {seed: _brute_force(_cluster(seed)) for seed in SEEDS}


class _Step:
    """``module.<name>`` wrapped: each call's result goes to ``log`` as ``(name, result)``; the
    ``nth`` call (``None``: none) raises ``KeyboardInterrupt`` instead, logged as ``("Ctrl-C", name)``."""

    def __init__(self, monkeypatch, name: str, log: list, nth: int | None = None, module=hl):
        self.real, self.name, self.log, self.nth, self.calls = getattr(module, name), name, log, nth, 0
        monkeypatch.setattr(module, name, self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.nth:
            self.log.append(("Ctrl-C", self.name))
            raise KeyboardInterrupt
        out = self.real(*args, **kwargs)
        self.log.append((self.name, out))
        return out


def _calls(seed: int, name: str) -> int:
    """How many times an uninterrupted search on cluster ``seed`` calls ``name``."""
    with pytest.MonkeyPatch.context() as mp:
        step = _Step(mp, name, [])
        hl.solve_layout(_cluster(seed), "m", time_limit=20)
    return step.calls


def _proven(r) -> float:
    """The smallest bound the stats of ``r`` say was proven."""
    return min(max(r.stats[k], 0.0) for k in BOUNDS if k in r.stats)


def _check_interrupted(c, r, optimum: float, model: str = "m") -> None:
    """The answer of a search a Ctrl-C ended: a valid layout, the scorer's value, not called optimal, and
    only a bound that was proven (at least the exhaustive optimum, at most what the stats say)."""
    assert r.interrupted and r.message.startswith(INTERRUPTED) and "not proven optimal" in r.message
    assert r.status is Status.FEASIBLE
    assert r.layout and not layout_problems(c, model, r.layout)
    assert r.value == max_flow(c, model, r.layout)
    assert r.value <= optimum * (1 + 1e-9) and r.bound >= optimum * (1 - 1e-6)
    assert r.value <= r.bound <= max(r.value, _proven(r))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", ["_chain_ip", "_chain_layout", "_stage_chain", "max_flow"])
def test_ctrl_c_at_every_step_of_the_construction(seed, name, optima):
    """A Ctrl-C at each call of the chain's integer program, of the chain builder, of the chain search
    on each set of regions and of the scorer (the chains, the idle nodes, the swaps, the MILP's layout):
    before the first chain is built it is raised; after, the answer is at least every layout the scorer
    had rated and the last chain built (the one being refined)."""
    c = _cluster(seed)
    calls = _calls(seed, name)
    assert calls >= 1
    # every call, or where there are many (the chain's integer program: one per bisection step) the
    # first three, the last two and three between
    moments = range(1, calls + 1) if calls <= 8 else \
        sorted({1, 2, 3, calls // 3, calls // 2, 2 * calls // 3, calls - 1, calls})
    for nth in moments:
        log: list = []
        with pytest.MonkeyPatch.context() as mp:
            for watched in {"_chain_layout", "max_flow", name}:
                _Step(mp, watched, log, nth if watched == name else None)
            try:
                r = hl.solve_layout(c, "m", time_limit=20)
            except KeyboardInterrupt:
                r = None
        before = log[: log.index(("Ctrl-C", name))]
        chains = [lay for step, lay in before if step == "_chain_layout"]
        if not chains:  # nothing found yet: the Ctrl-C is the caller's
            assert r is None, nth
            continue
        assert r is not None, nth
        _check_interrupted(c, r, optima[seed])
        rated = [v for step, v in before if step == "max_flow"] + [max_flow(c, "m", chains[-1])]
        assert r.value >= max(rated) * (1 - 1e-9), (nth, rated, r.value)


def test_the_chains_side_by_side_found_before_the_ctrl_c_are_kept(optima, monkeypatch):
    """Cluster 101: the Ctrl-C comes as region 1's bisection builds its second chain; its first one
    beside region 0's chain is the answer (nearly twice the chain over both regions)."""
    c = _cluster(101)
    log: list = []
    chains = _Step(monkeypatch, "_chain_layout", log, 6)  # two per set of regions: {0, 1}, {0}, {1}
    r = hl.solve_layout(c, "m", time_limit=20)
    assert chains.calls == 6 and len(log) == 6
    _check_interrupted(c, r, optima[101])
    assert r.layout == {**log[3][1], **log[4][1]}  # region 0's last chain, region 1's first
    assert r.value > 1.9 * max_flow(c, "m", log[1][1])
    assert r.bound == r.stats["layer_bound"]


@pytest.mark.parametrize("name", ["cover_bound", "crossing_bound", "integer_cover_bound", "_aggregated_milp"])
def test_ctrl_c_after_the_construction_keeps_its_layout_and_the_bounds_proven(name, optima, monkeypatch):
    """Cluster 102: a Ctrl-C in each bound's step or as the MILP is built: the construction's layout,
    and the bound proven until then (the layer budget, then each step's as it ended)."""
    c = _cluster(102)
    assert _calls(102, name) >= 1
    _Step(monkeypatch, name, [], 1)
    r = hl.solve_layout(c, "m", time_limit=20)
    _check_interrupted(c, r, optima[102])
    assert r.value == r.stats["with_swaps"] and "milp_bound" not in r.stats
    assert r.bound == max(r.value, _proven(r))
    if name == "cover_bound":
        assert r.bound == r.stats["layer_bound"]


def test_a_ctrl_c_the_milp_took_keeps_its_best_and_its_bound(optima, monkeypatch):
    """HiGHS takes a Ctrl-C in the MILP and returns its best so far (as _milp.solve_mip does): the layout
    is at least the construction's, the bound the MILP's dual bound where it is smaller."""
    c = _cluster(102)
    real, built = solvers._milp.solve_mip, []

    def solve_mip(*args, **kwargs):
        res = real(*args, **kwargs)
        return dataclasses.replace(res, message=f"{INTERRUPTED}; best placement so far") if built else res

    monkeypatch.setattr(solvers._milp, "solve_mip", solve_mip)
    _Step(monkeypatch, "_aggregated_milp", built)
    r = hl.solve_layout(c, "m", time_limit=20)
    assert built
    _check_interrupted(c, r, optima[102])
    assert r.value >= r.stats["with_swaps"] and "milp_bound" in r.stats
    assert r.bound == max(r.value, _proven(r))


# ------------------------------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory) -> str:
    """A held-out cluster cut small (benchmarks/helix_heldout.py: 4 nodes of 3cluster24 in two regions,
    4 layers), as a file: solved in a second or two."""
    hh = _heldout()
    path = tmp_path_factory.mktemp("helix") / "tiny.json"
    path.write_text(json.dumps(hh.tiny(hh.load_raw(HELIX, "3cluster24"), 3)))
    return str(path)


def _layout_file(path: str, tiny_file: str):
    doc = json.loads(open(path, encoding="utf-8").read())
    c = parse_helix(json.loads(open(tiny_file, encoding="utf-8").read()), source=tiny_file)
    assert doc["maxflow_tokens_per_s"] == max_flow(c, doc["model"], parse_layout(doc["layout"]))
    return doc, c


def test_ctrl_c_before_any_chain_ends_place_with_130(tiny_file, tmp_path, capsys, monkeypatch):
    from placement.cli import main

    out = tmp_path / "layout.json"
    _Step(monkeypatch, "_chain_ip", [], 1)
    assert main(["place", tiny_file, "--model", "llama70b", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: interrupted"
    assert not out.exists()


def test_ctrl_c_after_the_first_chain_writes_it_said_interrupted(tiny_file, tmp_path, capsys, monkeypatch):
    from placement.cli import main

    out = tmp_path / "layout.json"
    _Step(monkeypatch, "_stage_chain", [], 2)
    assert main(["place", tiny_file, "--model", "llama70b", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert f"status     feasible ({INTERRUPTED}: the best layout so far (not proven optimal)" in table
    doc, c = _layout_file(str(out), tiny_file)
    assert doc["status"] == "feasible" and doc["message"].startswith(INTERRUPTED)
    # nothing past the construction ran: the bound is the layer budget's
    assert doc["bound_tokens_per_s"] == layer_budget_bound(c, "llama70b") > doc["maxflow_tokens_per_s"] > 0


def test_ctrl_c_with_engine_vllm_writes_the_layout_without_replicas(tiny_file, tmp_path, capsys, monkeypatch):
    """--engine vllm: a Ctrl-C in the layout search plans no replicas; one while they are planned keeps
    the layout (its status the search's) without them; both said on stderr."""
    from placement.cli import main

    out = tmp_path / "layout.json"
    argv = ["place", tiny_file, "--model", "llama70b", "--engine", "vllm", "--out", str(out)]
    note = ('note: interrupted (Ctrl-C): no vLLM replicas planned '
            '(the result\'s vllm section is {"interrupted": true})')
    with monkeypatch.context() as mp:
        _Step(mp, "_stage_chain", [], 2)
        planned = _Step(mp, "plan_replicas", [], None, module=solvers.helix_vllm)
        assert main(argv) == 0
    assert note in capsys.readouterr().err and planned.calls == 0
    doc, _ = _layout_file(str(out), tiny_file)
    assert doc.get("vllm") == {"interrupted": True} and doc["message"].startswith(INTERRUPTED)
    _Step(monkeypatch, "plan_replicas", [], 1, module=solvers.helix_vllm)
    assert main(argv) == 0
    assert note in capsys.readouterr().err
    doc, _ = _layout_file(str(out), tiny_file)
    assert doc.get("vllm") == {"interrupted": True} and doc["status"] in ("optimal", "feasible")
    assert not doc["message"].startswith(INTERRUPTED)
    # evaluate reads the file back: the layout re-scored, the cut planning said, not taken for replicas
    assert main(["evaluate", tiny_file, str(out)]) == 0
    err = capsys.readouterr().err
    assert "vllm section says a Ctrl-C cut its planning short" in err and "not re-scored" not in err


# ------------------------------------------------------------------------------------------- a real Ctrl-C
# HELIX_PIN = "NAME:before|after:hold|go": the first call of solvers.helix_layout.NAME (after: the first
# that returns a layout) writes HELIX_PIN_FILE (the layout's max-flow) and, with hold, waits there for
# the Ctrl-C (the moment pinned); with go it carries on
_PIN = """
import json, os, time

import solvers.helix_layout as hl
from graphs.helix import max_flow

_name, _when, _hold = os.environ["HELIX_PIN"].split(":")
_real, _marker = getattr(hl, _name), os.environ["HELIX_PIN_FILE"]


def _mark(value):
    with open(_marker + ".part", "w") as f:
        json.dump({"value": value}, f)
    os.replace(_marker + ".part", _marker)
    if _hold == "hold":
        time.sleep(60)


def _pinned(*args, **kwargs):
    if _when == "before" and not os.path.exists(_marker):
        _mark(None)
    out = _real(*args, **kwargs)
    if _when == "after" and out[0] and not os.path.exists(_marker):
        _mark(max_flow(args[0], args[1], out[0]))
    return out


setattr(hl, _name, _pinned)
"""


def _ctrl_c_at(pin: str, argv: list[str], tmp_path, timeout: float = 60.0):
    """Run ``python -m placement`` with the moment ``pin`` (see _PIN), send SIGINT once it comes; its
    return code, stderr, the marker's value and how long it took to end after the signal."""
    marker = tmp_path / "moment.json"
    rc, _, err, took = ctrl_c_at_marker(argv, tmp_path, _PIN, marker,
                                        {"HELIX_PIN": pin, "HELIX_PIN_FILE": str(marker)}, timeout)
    return rc, err, json.loads(marker.read_text())["value"], took


posix = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process (POSIX)")


@posix
def test_sigint_after_the_first_chain_gives_it(tiny_file, tmp_path):
    result = tmp_path / "layout.json"
    rc, err, chain, took = _ctrl_c_at("_stage_chain:after:hold", ["place", tiny_file, "--model", "llama70b",
                                                                  "--out", str(result)], tmp_path)
    assert rc == 0, err[-3000:]
    doc, _ = _layout_file(str(result), tiny_file)
    assert doc["status"] == "feasible" and doc["message"].startswith(INTERRUPTED)
    assert doc["maxflow_tokens_per_s"] >= chain > 0
    assert took < 5, f"exit {took:.1f} s after Ctrl-C"


@posix
def test_sigint_before_any_chain_ends_with_130(tiny_file, tmp_path):
    result = tmp_path / "layout.json"
    rc, err, _, took = _ctrl_c_at("_chain_ip:before:hold", ["place", tiny_file, "--model", "llama70b",
                                                            "--out", str(result)], tmp_path)
    assert rc == 130 and err.strip().splitlines()[-1] == "error: interrupted", err[-3000:]
    assert not result.exists()
    assert took < 5, f"exit {took:.1f} s after Ctrl-C"


@posix
@pytest.mark.slow
def test_sigint_on_3cluster24_after_the_whole_cluster_chain_gives_it(tmp_path):
    """The reported case: 3cluster24 / LLaMA-2 70B, --gap 0 (the search runs to its limit), a Ctrl-C as
    soon as the whole-cluster chain (1754.4 tokens/s, the final answer) is found, the other sets of
    regions still to search (10-15 s on 2 busy cores)."""
    path = os.path.join(HELIX, "3cluster24.json")
    if not os.path.exists(path):
        pytest.skip(f"Helix cluster files not found at {HELIX} (set PLACEMENT_WORKLOADS)")
    result = tmp_path / "layout.json"
    argv = ["place", path, "--model", "llama70b", "--gap", "0", "--time-limit", "30", "--out", str(result)]
    rc, err, chain, took = _ctrl_c_at("_stage_chain:after:go", argv, tmp_path)
    assert rc == 0, err[-3000:]
    doc, _ = _layout_file(str(result), path)
    assert doc["status"] == "feasible" and doc["message"].startswith(INTERRUPTED)
    assert doc["maxflow_tokens_per_s"] >= chain == pytest.approx(1754.38, abs=0.01)
    assert took < 5, f"exit {took:.1f} s after Ctrl-C"
