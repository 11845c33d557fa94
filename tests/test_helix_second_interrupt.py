"""A second Ctrl-C on ``placement place CLUSTER.json --model M`` (a Helix cluster file) after the first
one kept a layout: it changes nothing. The first Ctrl-C decides how the command ends (exit 0 with the
layout so far, said interrupted; 130 where no layout was found yet); later ones, while the command
ends with that, are dropped, as ``frontier`` and ``provision`` drop them (``placement.cli.serving.
_Interrupts``).

A second Ctrl-C during the output ended the command with 130 once the layout had been printed and
written (the output's deferred block delivers a Ctrl-C at its end), so that a script read
'interrupted' beside a layout file; one while the search made its result of the first (scoring the
chain it had found, building the result) escaped it: exit 130 and nothing written, the layout lost;
one while the MILP's best was scored lost that layout for the construction's. A Ctrl-C that comes while
a complete result is written, with none before it, still lets it be written whole and then ends with
130, as every command's output does.

The moments are pinned by a ``sitecustomize``: the first Ctrl-C is sent by the shared runner
(:func:`tests.pinned_interrupt.ctrl_c_at_marker`) once the search has its first chain, or once the
vLLM planning starts; the second is a real SIGINT the process sends itself at the first call of a
chosen function after the first was taken (the search's scorer or result, the planning, the table, the
writing of ``--out``). Then two SIGINTs sent from outside, a few milliseconds apart.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import solvers._milp
import solvers.helix_layout as hl
from graphs.helix import (
    SINK,
    SOURCE,
    HelixCluster,
    HelixLink,
    HelixModel,
    HelixNode,
    NodeProfile,
    max_flow,
    parse_helix,
    parse_layout,
)
from solvers.base import INTERRUPTED, Status
from tests.pinned_interrupt import ROOT, ctrl_c_at_marker
from tests.test_helix import HELIX, _heldout, _tiny

posix = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process (POSIX)")


# ------------------------------------------------------------------------------------------- the library
class _Cuts:
    """``solvers.helix_layout.<name>`` made to raise ``KeyboardInterrupt`` at chosen calls: ``at``
    ``{name: n}`` (the n-th call of name), ``after`` ``{name: trigger}`` (name's first call once
    ``trigger`` has returned), ``then`` ``{name: trigger}`` (name's first call after ``trigger``'s Ctrl-C:
    a second one while the first is handled). ``log``: ``(name, result)`` of every call that returned,
    ``("Ctrl-C", name)`` where one was raised."""

    def __init__(self, monkeypatch, at: dict, then: dict | None = None, after: dict | None = None,
                 module=hl) -> None:
        self.at, self.then, self.after = at, then or {}, after or {}
        self.log, self.calls, self.cut = [], {}, set()
        for name in {*at, *self.then, *self.after, "max_flow", "_chain_layout", "_milp_layout",
                     "_aggregated_milp"}:
            monkeypatch.setattr(module, name, self._wrap(name, getattr(module, name)))

    def _wrap(self, name, real):
        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            trigger, done = self.then.get(name), self.after.get(name)
            if name not in self.cut and (self.calls[name] == self.at.get(name) or trigger in self.cut
                                         or (done is not None and self.results(done))):
                self.cut.add(name)
                self.log.append(("Ctrl-C", name))
                raise KeyboardInterrupt
            out = real(*args, **kwargs)
            self.log.append((name, out))
            return out

        return call

    def results(self, name: str) -> list:
        return [out for step, out in self.log if step == name]


def _solve(c: HelixCluster):
    """``solve_layout`` on ``c``; a ``KeyboardInterrupt`` it lets through (nothing kept) is a failure
    here, not the end of the test run."""
    try:
        return hl.solve_layout(c, "m", time_limit=20)
    except KeyboardInterrupt:
        pytest.fail("the search let the Ctrl-C through: no layout kept")


def _two_regions(seed: int = 101) -> HelixCluster:
    # tests.test_helix_interrupt's cluster 101: two regions, 4 nodes, 3 layers; the MILP runs after the
    # construction and finds more than it
    return _tiny(np.random.default_rng(seed), 4, 3, regions=2)


def test_a_second_ctrl_c_while_the_chain_found_is_scored_keeps_it(monkeypatch):
    """The first Ctrl-C as the first bisection step looks for its second chain (one chain built, not
    scored yet); the second as that chain is scored. The chain is the answer. It was lost: the second
    escaped the first's handling, and the search said nothing was found (KeyboardInterrupt, exit 130)."""
    c = _two_regions()
    cuts = _Cuts(monkeypatch, {}, then={"max_flow": "_chain_ip"}, after={"_chain_ip": "_chain_layout"})
    r = _solve(c)
    chains = cuts.results("_chain_layout")
    assert len(chains) == 1 and ("Ctrl-C", "max_flow") in cuts.log  # the second came, in the scorer
    assert r.interrupted and r.status is Status.FEASIBLE and r.layout == dict(sorted(chains[0].items()))
    assert r.value == max_flow(c, "m", r.layout) > 0


def test_a_second_ctrl_c_while_the_milps_best_is_scored_keeps_it(monkeypatch):
    """HiGHS takes the first Ctrl-C in the MILP and returns its best so far (as _milp.solve_mip does);
    the second comes as that layout is scored. The MILP's layout, better than the construction's, is the
    answer; it was dropped for the construction's."""
    c = _two_regions()
    real = solvers._milp.solve_mip
    cuts = _Cuts(monkeypatch, {}, {"max_flow": "solve_mip"})

    def solve_mip(*args, **kwargs):  # the layout's MILP (built last) takes the Ctrl-C
        res = real(*args, **kwargs)
        if not cuts.results("_aggregated_milp"):
            return res
        cuts.cut.add("solve_mip")  # the scorer's next call (the MILP's layout's) takes the second
        return dataclasses.replace(res, message=f"{INTERRUPTED}; best placement so far")

    monkeypatch.setattr(solvers._milp, "solve_mip", solve_mip)
    r = _solve(c)
    milp = cuts.results("_milp_layout")
    assert milp and ("Ctrl-C", "max_flow") in cuts.log and r.interrupted
    construction = r.stats["construction"]
    expected = max_flow(c, "m", milp[-1])  # the MILP's layout, scored here
    assert expected > construction * (1 + 1e-6)  # it is worth keeping
    assert r.value == pytest.approx(expected, rel=1e-12) and r.layout == dict(sorted(milp[-1].items()))


def test_a_second_ctrl_c_while_the_result_is_built_keeps_the_layout(monkeypatch):
    """The first Ctrl-C in the first bound's step (the construction's layout kept), the second as the
    result is built: the same result. It escaped the search (exit 130, nothing written)."""
    c = _two_regions(102)
    real, built = hl.LayoutResult, []

    def result(*args, **kwargs):
        built.append(args)
        if len(built) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    cuts = _Cuts(monkeypatch, {"cover_bound": 1})
    monkeypatch.setattr(hl, "LayoutResult", result)
    r = _solve(c)
    assert len(built) == 2 and ("Ctrl-C", "cover_bound") in cuts.log
    assert r.interrupted and r.status is Status.FEASIBLE and "not proven optimal" in r.message
    assert r.value == max_flow(c, "m", r.layout) == pytest.approx(r.stats["with_swaps"], rel=1e-12)


def test_a_ctrl_c_once_the_layout_reaches_the_bound_says_it_is_optimal(monkeypatch):
    """Two nodes of 100 tokens/s that hold one layer each, a 2-layer model, fast links: the chain of the
    two serves 100 tokens/s, and the layer budget bound is 100 (2 min(100, F) >= 2 F), so the
    construction's layout is proven optimal before the bounds run. A Ctrl-C there said 'the best layout
    so far (not proven optimal)', status feasible: it is optimal, said interrupted."""
    prof = NodeProfile(1, (100.0,))
    nodes = tuple(HelixNode(i, f"n{i}", "x", None, {"m": prof}) for i in range(2))
    links = [HelixLink(SOURCE, i, False, {"m": 1e6}) for i in range(2)] + \
            [HelixLink(i, SINK, False, {"m": 1e6}) for i in range(2)] + [HelixLink(0, 1, True, {"m": 1e6})]
    c = HelixCluster("two", None, nodes, tuple(links), {"m": HelixModel("m", "m", 2, None)})
    cuts = _Cuts(monkeypatch, {"_upper_cluster": 1})
    r = _solve(c)
    assert ("Ctrl-C", "_upper_cluster") in cuts.log
    assert r.value == pytest.approx(100.0) and r.bound == pytest.approx(100.0)
    assert sorted(r.layout.values()) == [(0, 1), (1, 1)]
    assert r.status is Status.OPTIMAL and r.interrupted
    assert r.message == f"{INTERRUPTED} once the layout was proven optimal (its value reaches the bound)"


# ------------------------------------------------------------------------------------------- a real Ctrl-C
# PIN_FIRST = "module:name:before|after": the first call of module.name (after: the first that returns a
# layout, its max-flow kept in the marker) writes PIN_FILE and waits there for the runner's Ctrl-C.
# PIN_SECOND = "module:name": at its first call after that Ctrl-C was taken (or at its first call, without
# PIN_FIRST), a SIGINT to this process, given 0.2 s to land there; "unwind": while the first one leaves
# the function PIN_FIRST pinned; "wait:module:name": there, PIN_FILE.2 written and 0.3 s for the runner
# to send the second SIGINT
_SITE = r'''
import importlib, json, os, signal, time

from graphs.helix import max_flow

_first = os.environ.get("PIN_FIRST", "")
_second = os.environ.get("PIN_SECOND", "")
_marker = os.environ.get("PIN_FILE", "")
_taken = []


def _sigint():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)


def _hold(value):
    with open(_marker + ".part", "w") as f:
        json.dump({"value": value}, f)
    os.replace(_marker + ".part", _marker)
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        _taken.append("first")
        if _second == "unwind":
            _taken.append("second")
            _sigint()
        raise


def _patch(spec, wrap):
    module, name = spec.split(":")[:2]
    mod = importlib.import_module(module)
    setattr(mod, name, wrap(getattr(mod, name)))


def _first_pin(real):
    when = _first.split(":")[2]

    def pinned(*args, **kwargs):
        if when == "before" and not os.path.exists(_marker):
            _hold(None)
        out = real(*args, **kwargs)
        if when == "after" and out[0] and not os.path.exists(_marker):
            _hold(max_flow(args[0], args[1], out[0]))
        return out

    return pinned


def _second_pin(real):
    def pinned(*args, **kwargs):
        if (_taken or not _first) and "second" not in _taken:
            _taken.append("second")
            if _second.startswith("wait:"):
                open(_marker + ".2", "w").close()
                time.sleep(0.3)
            else:
                _sigint()
        return real(*args, **kwargs)

    return pinned


if _second and _second != "unwind":
    _patch(_second.removeprefix("wait:"), _second_pin)
if _first:
    _patch(_first, _first_pin)
'''


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory) -> str:
    """A held-out cluster cut small (as tests.test_helix_interrupt's: 4 nodes of 3cluster24 in two
    regions, 4 layers), as a file: solved in a second or two."""
    hh = _heldout()
    path = tmp_path_factory.mktemp("helix") / "tiny.json"
    path.write_text(json.dumps(hh.tiny(hh.load_raw(HELIX, "3cluster24"), 3)))
    return str(path)


def _layout_file(path, cluster_file: str) -> dict:
    """The layout file, its max-flow checked against the scorer's on the cluster file."""
    doc = json.loads(open(path, encoding="utf-8").read())
    c = parse_helix(json.loads(open(cluster_file, encoding="utf-8").read()), source=cluster_file)
    assert doc["maxflow_tokens_per_s"] == max_flow(c, doc["model"], parse_layout(doc["layout"]))
    return doc


def _place(cluster_file: str, out, *more: str) -> list[str]:
    return ["place", cluster_file, "--model", "llama70b", *more, "--out", str(out)]


def _pinned(argv, tmp_path, first: str, second: str):
    marker = tmp_path / "moment.json"
    rc, out, err, took = ctrl_c_at_marker(argv, tmp_path, _SITE, marker,
                                          {"PIN_FIRST": first, "PIN_SECOND": second, "PIN_FILE": str(marker)})
    return rc, out, err, took, json.loads(marker.read_text())["value"]


SEARCH = "solvers.helix_layout:_stage_chain:after"  # the first chain found: the search's Ctrl-C
PLANNING = "solvers.helix_vllm:plan_replicas:before"  # the vLLM planning's Ctrl-C (the layout searched)


@posix
@pytest.mark.parametrize("second", [
    "solvers.helix_layout:max_flow",  # the search scores the chain it had found
    "solvers.helix_layout:LayoutResult",  # the search builds its result
    "placement.cli.helix:format_result",  # the table is printed
    "placement.export:write_json",  # --out is written
])
def test_a_second_ctrl_c_after_the_search_took_one_keeps_its_layout(second, tiny_file, tmp_path):
    """The first Ctrl-C once the search has its first chain: the second at each step after it. Exit 0,
    the layout (at least that chain) printed and written, said interrupted; no 'error: interrupted'.
    The output's steps ended with 130 after the layout was written, the search's with 130 and no file."""
    out = tmp_path / "layout.json"
    rc, text, err, took, chain = _pinned(_place(tiny_file, out), tmp_path, SEARCH, second)
    assert rc == 0, (rc, err[-3000:])
    assert "error: interrupted" not in err
    doc = _layout_file(out, tiny_file)
    assert doc["status"] == "feasible" and doc["message"].startswith(INTERRUPTED)
    assert doc["maxflow_tokens_per_s"] >= chain > 0
    assert f"status     feasible ({INTERRUPTED}: the best layout so far" in text
    assert f"layout written to {out}" in text
    assert took < 10, f"exit {took:.1f} s after the first Ctrl-C"


NOTE = ('note: interrupted (Ctrl-C): no vLLM replicas planned '
        '(the result\'s vllm section is {"interrupted": true})')


@posix
@pytest.mark.parametrize("second", ["unwind",  # the planning's own steps, as the first leaves them
                                    "placement.cli.helix:format_result", "placement.export:write_json"])
def test_a_second_ctrl_c_after_the_vllm_planning_took_one_keeps_the_layout(second, tiny_file, tmp_path):
    """--engine vllm, the layout searched to its end: the first Ctrl-C as the replicas are planned, the
    second in the planning, the table or the writing. Exit 0, the layout written without a vllm section,
    its status the search's (not interrupted), the note on stderr; it ended with 130 (the note not
    printed) where the second came in the output."""
    out = tmp_path / "layout.json"
    rc, text, err, _, _ = _pinned(_place(tiny_file, out, "--engine", "vllm"), tmp_path, PLANNING, second)
    assert rc == 0, (rc, err[-3000:])
    assert NOTE in err and "error: interrupted" not in err
    doc = _layout_file(out, tiny_file)
    assert doc.get("vllm") == {"interrupted": True} and doc["status"] in ("optimal", "feasible")
    assert not doc["message"].startswith(INTERRUPTED)
    assert f"layout written to {out}" in text and "vLLM deployment" not in text


@posix
@pytest.mark.parametrize("where", ["placement.cli.helix:format_result", "placement.export:write_json"])
def test_one_ctrl_c_while_a_complete_layout_is_output_still_ends_with_130(where, tiny_file, tmp_path):
    """Unchanged: with no Ctrl-C before it, one while the (complete, uninterrupted) layout is printed or
    written lets it be written whole, then ends with 130, as every command's output does
    (tests/test_cluster_output_interrupt.py): the layout says nothing of it, the exit code does."""
    (tmp_path / "sitecustomize.py").write_text(_SITE)
    out = tmp_path / "layout.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]), PIN_SECOND=where)
    r = subprocess.run([sys.executable, "-m", "placement", *_place(tiny_file, out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 130 and r.stderr.strip().splitlines()[-1] == "error: interrupted", r.stderr
    doc = _layout_file(out, tiny_file)
    assert doc["status"] in ("optimal", "feasible") and not doc["message"].startswith(INTERRUPTED)
    assert f"layout written to {out}" in r.stdout


def _two_ctrl_cs(argv, tmp_path, first: str, second: float | str, timeout: float = 120.0):
    """``python -m placement argv`` with the moment ``first`` pinned (see _SITE); once it comes, two
    SIGINTs from outside (a terminal's Ctrl-C pressed twice): the second ``second`` seconds after the
    first, or, given ``"module:name"``, once that function is called (pinned there). Returns the return
    code, stdout, stderr and the marker's value; no traceback is allowed."""
    marker = tmp_path / "moment.json"
    (tmp_path / "sitecustomize.py").write_text(_SITE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]), PIN_FIRST=first,
               PIN_FILE=str(marker))
    if isinstance(second, str):
        env["PIN_SECOND"] = f"wait:{second}"
    proc = subprocess.Popen([sys.executable, "-m", "placement", *argv], cwd=ROOT, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + timeout
        while not marker.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.003)
        assert marker.exists(), f"the moment never came (rc {proc.poll()}): {proc.stderr.read()[-2000:]}"
        proc.send_signal(signal.SIGINT)
        if isinstance(second, str):
            again = marker.with_name(marker.name + ".2")
            while not again.exists() and proc.poll() is None and time.monotonic() < end:
                time.sleep(0.003)
        else:
            time.sleep(second)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    return proc.returncode, out, err, json.loads(marker.read_text())["value"]


@posix
@pytest.mark.parametrize("second", [0.0, 0.01, 0.05, "placement.export:write_json"])
def test_ctrl_c_pressed_twice_after_the_first_chain_keeps_it(second, tiny_file, tmp_path):
    """Two SIGINTs from outside once the search has its first chain, the second a moment after the
    first or as the output begins (the reported case: exit 130 after the layout was written): exit 0
    with the layout so far, wherever the second lands (the search's ending, the output, the exit)."""
    out = tmp_path / "layout.json"
    rc, text, err, chain = _two_ctrl_cs(_place(tiny_file, out, "--engine", "vllm"), tmp_path, SEARCH, second)
    assert rc == 0, (rc, err[-3000:])
    assert "error: interrupted" not in err and NOTE in err
    doc = _layout_file(out, tiny_file)
    assert doc["status"] == "feasible" and doc["message"].startswith(INTERRUPTED)
    assert doc.get("vllm") == {"interrupted": True}
    assert doc["maxflow_tokens_per_s"] >= chain > 0


@posix
@pytest.mark.slow
@pytest.mark.parametrize("second", [0.02, "placement.export:write_json"])
def test_ctrl_c_pressed_twice_on_3cluster24_keeps_the_layout(second, tmp_path):
    """The reported case: 3cluster24 / LLaMA-2 70B with --engine vllm, Ctrl-C pressed twice, the first as
    soon as the whole-cluster chain (1754.4 tokens/s) is found, the second 20 ms later or as the output
    begins: exit 0, that layout written, said interrupted (it exited 130 after writing it)."""
    path = os.path.join(HELIX, "3cluster24.json")
    if not os.path.exists(path):
        pytest.skip(f"Helix cluster files not found at {HELIX} (set PLACEMENT_WORKLOADS)")
    out = tmp_path / "layout.json"
    argv = ["place", path, "--model", "llama70b", "--time-limit", "30", "--engine", "vllm", "--out", str(out)]
    rc, _, err, chain = _two_ctrl_cs(argv, tmp_path, "solvers.helix_layout:_stage_chain:after", second)
    assert rc == 0, (rc, err[-3000:])
    assert "error: interrupted" not in err and NOTE in err
    doc = _layout_file(out, path)
    assert doc["status"] == "feasible" and doc["message"].startswith(INTERRUPTED)
    assert doc["maxflow_tokens_per_s"] >= chain == pytest.approx(1754.38, abs=0.01)


def test_the_value_is_the_scorers_number_for_the_layout_returned():
    """Cluster 101, no Ctrl-C: the MILP's layout is the answer. Its value was max-flow of the layout in
    the MILP's order of nodes, the result holds it sorted, and max-flow of that differed in the last bit
    (122.46080250222374 against 122.46080250222376): the value is now the scorer's for the layout the
    result holds, as every other step's is."""
    c = _two_regions()
    r = hl.solve_layout(c, "m", time_limit=20)
    assert "milp_value" in r.stats and r.value == r.stats["milp_value"]  # the MILP's layout is the answer
    assert r.value == max_flow(c, "m", r.layout)
