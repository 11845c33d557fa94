"""A Ctrl-C during the stage model's serving searches (``provision`` and ``frontier`` of an ONNX inference
model with ``--max-replicas D``, ``D > 1``, and the least-latency program) ends them with what they had,
said interrupted, never with the answers found so far thrown away:

* :func:`placement.serving_stages.provision`: the allocations solved so far (and the interrupted solve's
  plan, where it meets the target) are the answer, ``stopped`` "interrupted"; it raised
  ``KeyboardInterrupt``, and ``placement provision`` printed and wrote nothing of the stage search.
* :func:`~placement.serving_stages.exact_frontier`, :func:`~placement.serving_stages.frontier_points`
  and :func:`~placement.serving_stages.lowest_latency`: the points so far (or the least latency found),
  with a note saying interrupted; a Ctrl-C inside the integer program escaped them.

The Ctrl-C stands in as the solvers meet it (:attr:`solvers.base.Solution.interrupted`): a solve that
took it returns what it had with "interrupted" in its message; a step that lets it through (building the
integer program, the stage DP before any plan) raises ``KeyboardInterrupt``. One test sends a real SIGINT
to the command while its integer program runs.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from placement import serving_stages as ss
from placement.cli import main
from solvers import ip_stages
from solvers.base import Status
from tests.brute_stages import all_plans
from tests.test_dp_stages import random_problem
from tests.test_serving_stages import ARGS, _fast_slow_problem, _pareto

TOOK = "interrupted (Ctrl-C); best placement so far"  # what HiGHS says when it took one


def _call(fn, *args, **kw):
    """``fn(*args, **kw)``; a ``KeyboardInterrupt`` escaping it fails the test (it would end the test run)."""
    try:
        return fn(*args, **kw)
    except KeyboardInterrupt:
        pytest.fail(f"a KeyboardInterrupt escaped {fn.__name__}")


def _interrupted(sol):
    """``sol`` as a solve that took a Ctrl-C returns it: its plan, not proven, "interrupted"."""
    status = Status.FEASIBLE if sol.plan is not None else Status.STOPPED
    return dataclasses.replace(sol, status=status, message=TOOK)


@pytest.fixture
def stage_solves(monkeypatch):
    """``placement.stages.solve_args`` (every stage search's solve), counted; solve number ``at`` (1 the
    first) takes the Ctrl-C (``took``: returns its plan said interrupted) or lets it through (raises)."""
    from placement import stages

    real, state = stages.solve_args, {"calls": 0, "at": 0, "took": True}

    def solve(problem, args):
        state["calls"] += 1
        if state["calls"] != state["at"]:
            return real(problem, args)
        if not state["took"]:
            raise KeyboardInterrupt
        return _interrupted(real(problem, args))

    monkeypatch.setattr(stages, "solve_args", solve)
    return state


@pytest.fixture
def programs(monkeypatch):
    """``solvers.ip_stages.solve_problem`` (the stage integer program), counted; call number ``at``
    takes the Ctrl-C as :func:`stage_solves` says."""
    real, state = ip_stages.solve_problem, {"calls": 0, "at": 0, "took": True}

    def solve(problem, **kw):
        state["calls"] += 1
        if state["calls"] != state["at"]:
            return real(problem, **kw)
        if not state["took"]:
            raise KeyboardInterrupt
        return _interrupted(real(problem, **kw))

    monkeypatch.setattr(ip_stages, "solve_problem", solve)
    return state


# ------------------------------------------------------------------------------------------ provision
def test_a_ctrl_c_an_allocations_search_takes_ends_provision_with_what_it_found(stage_solves):
    """By hand (tests/test_serving_stages.py's fast/slow problem: one node, 1 s per sample on each of 2
    fast devices at price 1, 1000 s on 2 slow ones at 0.1), 3 samples/s: unreachable; cheapest first,
    fast:1,slow:2 (1 sample/s), fast:2,slow:1 and fast:2,slow:2 (2 samples/s) are solved. The second
    search takes the Ctrl-C: what the two found is kept (the curve, 1 and 2 samples/s), the third is not
    solved, nothing is proven. It raised KeyboardInterrupt, losing both."""
    p = _fast_slow_problem()
    whole, _ = ss.provision(p, [1.0, 0.1], 3.0, ARGS)
    assert whole.solves == 3 and whole.proven and whole.stopped == ""
    stage_solves.update(calls=0, at=2)
    pv, sub = _call(ss.provision, p, [1.0, 0.1], 3.0, ARGS)
    assert pv.stopped == "interrupted" and pv.solves == 2 and not pv.proven, pv.stopped
    assert pv.best is None and sub is None
    assert [(a.counts, a.samples_per_s) for a in pv.efficient] == [((1, 0), 1.0), ((2, 0), 2.0)]
    assert pv.max_reachable is not None and not pv.max_reachable.proven
    assert pv.lowest_latency is None


def test_an_interrupted_search_that_meets_the_target_is_the_answer_not_proven_cheapest(stage_solves):
    """2 samples/s on the same problem: fast:1,slow:1 and fast:1,slow:2 (1 sample/s each, proven short),
    then fast:2 (2 samples/s) meets it. Its search takes the Ctrl-C and returns its plan: that is the
    answer, said interrupted, not proven cheapest (its own plan is not proven)."""
    p = _fast_slow_problem()
    whole, _ = ss.provision(p, [1.0, 0.1], 2.0, ARGS)
    assert whole.best.counts == (2, 0) and whole.proven and whole.solves == 3
    stage_solves.update(calls=0, at=3)
    pv, sub = _call(ss.provision, p, [1.0, 0.1], 2.0, ARGS)
    assert pv.best is not None and pv.best.counts == (2, 0) and pv.best.samples_per_s == pytest.approx(2.0)
    assert pv.stopped == "interrupted" and not pv.proven and not pv.best.proven
    assert pv.solution is not None and pv.solution.evaluation.valid and sub is not None


def test_a_ctrl_c_let_through_between_a_searchs_steps_ends_provision_too(monkeypatch):
    """A ``KeyboardInterrupt`` that escapes an allocation's search (raised between its steps) ends the
    search as one a solve took: the first allocation's answer is kept."""
    p = _fast_slow_problem()
    real, calls = ss.best_refined, []

    def search(*a, **kw):
        calls.append(None)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(ss, "best_refined", search)
    pv, _ = _call(ss.provision, p, [1.0, 0.1], 3.0, ARGS)
    assert len(calls) == 2 and pv.stopped == "interrupted" and not pv.proven
    assert [(a.counts, a.samples_per_s) for a in pv.efficient] == [((1, 0), 1.0)]


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    from tests.onnx_models import save, small_cnn

    return save(small_cnn(), tmp_path_factory.mktemp("m") / "cnn.onnx")


@pytest.fixture
def prices(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[prices]\na100 = 3.0\nt4 = 0.35\n")
    return str(path)


def test_provision_with_replicas_interrupted_in_a_search_writes_its_best_and_exits_0(cnn, prices, tmp_path,
                                                                                     capsys, stage_solves):
    """``provision --max-replicas 4 --latency-slo``: the first allocation's search (t4:1, which meets a
    small target) takes the Ctrl-C and returns its plan. The command writes it, says interrupted and not
    proven cheapest, and exits 0; nothing is solved after it (no other allocation, no batch size, no
    one-device-per-stage search). It exited 130 with nothing written."""
    out = tmp_path / "v.json"
    stage_solves["at"] = 1
    code = main(["provision", cnn, "--available", "a100:1,t4:2", "--prices", prices, "--target-throughput",
                 "1", "--max-replicas", "4", "--latency-slo", "1e6", "--batch-size", "1,2",
                 "--out", str(out)])
    text = capsys.readouterr()
    assert code == 0 and "Traceback" not in text.err, text.err
    assert stage_solves["calls"] == 1
    sec = json.loads(out.read_text())["provision"]
    assert sec["allocation"] == "t4:1" and sec["proven"] is False and sec["stopped"] == "interrupted (Ctrl-C)"
    assert [b["batch_size"] for b in sec["per_batch_size"]] == [1]
    assert "stopped: interrupted (Ctrl-C)" in text.out
    assert "NOT proven cheapest (interrupted (Ctrl-C))" in text.out, text.out


def test_provision_with_replicas_interrupted_before_any_plan_exits_130_with_what_it_tried(
        cnn, prices, tmp_path, capsys, stage_solves):
    """The same, the search letting the Ctrl-C through before any plan: exit 130 and ``error:
    interrupted`` last, the result file written and said interrupted (no plan, nothing proven)."""
    out = tmp_path / "v.json"
    stage_solves.update(at=1, took=False)
    code = main(["provision", cnn, "--available", "a100:1,t4:2", "--prices", prices, "--target-throughput",
                 "1", "--max-replicas", "4", "--out", str(out)])
    text = capsys.readouterr()
    assert code == 130 and text.err.strip().splitlines()[-1] == "error: interrupted", text.err
    assert "Traceback" not in text.err and "stopped: interrupted (Ctrl-C)" in text.out
    data = json.loads(out.read_text())
    assert data["status"] == "unknown" and data["provision"]["stopped"] == "interrupted (Ctrl-C)"
    assert data["provision"]["proven"] is False


# ----------------------------------------------------------------------------------------- frontier
def _three_point_problem():
    """A small random problem whose frontier has at least three points (as tests/test_serving_stages.py
    finds one)."""
    rng = np.random.default_rng(7)
    while True:
        p = random_problem(rng)
        if len(_pareto(all_plans(p))) >= 3:
            return p


@pytest.mark.parametrize("at,took,kept", [
    (3, True, 2),  # the second point's least-latency program: its plan is the second point, not proven
    (2, False, 1),  # the program under the first point's latency, while it is built: the first point
])
def test_a_ctrl_c_in_the_exact_frontiers_program_ends_it_with_the_points_so_far(programs, at, took, kept):
    """The exact frontier alternates two programs per point (least latency at a time per sample, least
    time per sample under a latency). The one numbered ``at`` takes the Ctrl-C (or lets it through):
    the points so far come back, not complete, the note saying interrupted, nothing solved after it.
    The KeyboardInterrupt escaped, the points with it."""
    p = _three_point_problem()
    report: dict = {}
    whole = ss.frontier_points(p, ARGS, 1, report=report)
    assert report["complete"] and len([q for q in whole if q.frontier]) >= 3
    top = next(q for q in whole if q.how == "stage optimum")
    programs.update(calls=0, at=at, took=took)
    seen: list = []
    pts, complete, note = _call(ss.exact_frontier, p, top, 1, on_point=seen.append)
    assert programs["calls"] == at and not complete and seen == pts
    assert note == f"exact frontier stopped after {kept} point(s): interrupted (Ctrl-C)", note
    assert len(pts) == kept and pts[0].frontier and pts[0].proven
    if took:  # the interrupted program's plan: a point, not proven
        last = pts[-1]
        assert not last.frontier and not last.proven and last.status == "feasible"
        assert last.how == "frontier point (not proven: a solve stopped by a Ctrl-C)"


def test_frontier_points_report_a_ctrl_c_and_run_nothing_after_it(programs, stage_solves):
    """``frontier_points``: the stage optimum's solve takes the Ctrl-C: its plan and the one-stage plans
    (no solve) come back, ``report`` says interrupted, and neither the capped solves nor the exact
    frontier run. A Ctrl-C in the exact frontier is reported too."""
    p = _three_point_problem()
    stage_solves["at"] = 1
    report: dict = {}
    pts = _call(ss.frontier_points, p, ARGS, 1, report=report)
    assert stage_solves["calls"] == 1 and programs["calls"] == 0
    assert report["interrupted"] is True and report["complete"] is False
    assert report["note"] == "exact frontier not tried: interrupted (Ctrl-C)"
    assert pts and pts[0].how == "stage optimum" and not pts[0].proven
    stage_solves.update(calls=0, at=0)
    programs["at"] = 2
    report = {}
    pts = _call(ss.frontier_points, p, ARGS, 1, report=report)
    assert report["interrupted"] is True and report["note"].endswith("interrupted (Ctrl-C)")
    assert programs["calls"] == 2 and any(q.frontier for q in pts)


@pytest.mark.parametrize("took", [True, False])
def test_the_least_latency_program_returns_what_it_had_after_a_ctrl_c(programs, took):
    """``lowest_latency``: a Ctrl-C in its program gives its best plan (or none) said interrupted, not
    optimal, with the latency bound; it raised KeyboardInterrupt."""
    p = _three_point_problem()
    exact = ss.lowest_latency(p)
    assert exact.status is Status.OPTIMAL
    programs.update(calls=0, at=1, took=took)
    got = _call(ss.lowest_latency, p)
    assert got.interrupted and got.status is not Status.OPTIMAL and programs["calls"] == 1
    assert got.bound is not None and got.bound <= exact.objective * (1 + 1e-9)
    if took:
        assert got.plan is not None and got.objective >= exact.objective * (1 - 1e-9)
    else:
        assert got.plan is None and got.status is Status.STOPPED


def test_frontier_with_replicas_interrupted_in_the_exact_frontier_keeps_its_points(cnn, tmp_path, capsys,
                                                                                   programs, monkeypatch):
    """``frontier --max-replicas 2``: the exact frontier's second program takes the Ctrl-C. The points
    found are written, the frontier says interrupted, the stage model's note for batch 1 too, exit 0;
    the one-device-per-stage frontier does not run after it. It exited 130."""
    from solvers import slo_ip

    ran = []
    real = slo_ip.solve
    monkeypatch.setattr(slo_ip, "solve", lambda *a, **kw: ran.append(None) or real(*a, **kw))
    programs["at"] = 2
    out = tmp_path / "f.json"
    code = main(["frontier", cnn, "--devices", "a100:2", "--max-replicas", "2", "--microbatches", "2",
                 "--time-limit", "60", "--out", str(out)])
    text = capsys.readouterr()
    assert code == 0 and "Traceback" not in text.err, text.err
    assert programs["calls"] == 2 and not ran
    fr = json.loads(out.read_text())
    assert fr["points"] and fr["proven"] is False and fr["stopped"] == "interrupted (Ctrl-C)"
    assert fr["stage_frontier"]["1"]["complete"] is False
    assert fr["stage_frontier"]["1"]["note"].endswith("interrupted (Ctrl-C)")
    assert "(stopped: interrupted (Ctrl-C))" in text.out


# ------------------------------------------------------------------------------- a real Ctrl-C
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the moment is found through /proc (Linux)")
def test_one_sigint_while_stage_provision_solves_writes_what_it_found(tmp_path):
    """``placement provision MODEL --max-replicas 2 --latency-slo`` as a process, one SIGINT while its
    integer program runs (highspy loaded): exit 130 with ``error: interrupted`` within seconds, and the
    search's state printed and written, said interrupted. It printed and wrote nothing."""
    from tests.test_promises_interrupt import ROOT, _ctrl_c

    model, prices, out = (str(tmp_path / n) for n in ("m.onnx", "p.toml", "v.json"))
    assert main(["example", model, "--layers", "6"]) == 0
    assert main(["provision", "--example-prices", prices]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "placement", "provision", model, "--available",
                             "a100:2,t4:2", "--prices", prices, "--target-throughput", "2000",
                             "--max-replicas", "2", "--latency-slo", "1.2", "--out", out],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stdout, err, sent = _ctrl_c(proc, "highspy", 0.3, "the integer program started")
    assert time.monotonic() - sent < 5, f"exit {time.monotonic() - sent:.1f} s after Ctrl-C"
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "error: interrupted", err[-3000:]
    assert "stopped: interrupted (Ctrl-C)" in stdout, stdout
    data = json.loads(open(out, encoding="utf-8").read())
    assert data["model"] == "stages", data["model"]
    assert data["provision"]["stopped"] == "interrupted (Ctrl-C)" and data["provision"]["proven"] is False
