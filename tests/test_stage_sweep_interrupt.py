"""A Ctrl-C during the stage model's batch-size sweep (``place --batch-size LIST|auto`` and
``--latency-slo``, the default model) and during the stage DP: the plan in hand is the answer, not thrown
away. The Ctrl-C stands in as the solvers meet it: a solve that took it returns what it had with
"interrupted" in its message (:attr:`solvers.base.Solution.interrupted`), and the stage DP, before it had
a plan, lets the ``KeyboardInterrupt`` through."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from placement.cli import main
from solvers.base import Status


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A 2-layer encoder: layer nodes by default (under 20), refined to operators (over 24)."""
    path = str(tmp_path_factory.mktemp("sweep_interrupt") / "bert.onnx")
    assert main(["example", path, "--layers", "2"]) == 0
    return path


def _solves(monkeypatch, ctrl_c_at: int, *, took: bool):
    """``placement.stages.solve_args`` (the stage sweep's every solve) with a Ctrl-C at solve number
    ``ctrl_c_at`` (1 the first): ``took`` true, that solve returns its real plan said "interrupted", not
    proven (as HiGHS and the DP's restricted passes do); false, it raises ``KeyboardInterrupt`` (the
    stage DP before any plan). Returns the solved problems' node counts."""
    from placement import stages

    real, seen = stages.solve_args, []

    def solve(problem, args):
        seen.append(problem.graph.num_nodes)
        if len(seen) != ctrl_c_at:
            return real(problem, args)
        if not took:
            raise KeyboardInterrupt
        s = real(problem, args)
        return dataclasses.replace(s, status=Status.FEASIBLE,
                                   message="interrupted (Ctrl-C); the best plan over one topological order "
                                           "is returned (not proven optimal)")

    monkeypatch.setattr(stages, "solve_args", solve)
    return seen


def test_a_ctrl_c_the_layer_solve_took_ends_the_sweep_with_its_plan(bert, tmp_path, capsys, monkeypatch):
    """``place --batch-size 1,2`` (stage model): the first solve (batch 1, layer nodes) takes the Ctrl-C
    and returns its plan. It was ignored: the operators were searched, then batch 2. Now batch 1's plan
    is the answer (exit 0, not proven), nothing is solved after it, and the sweep says so."""
    seen = _solves(monkeypatch, 1, took=True)
    out = tmp_path / "r.json"
    code = main(["place", bert, "--devices", "a100:1,t4:1", "--batch-size", "1,2", "-o", str(out)])
    text = capsys.readouterr()
    assert code == 0 and "Traceback" not in text.err, text.err
    assert len(seen) == 1 and seen[0] < 20, seen  # one solve, on layer nodes
    data = json.loads(out.read_text())
    sv = data["serving"]
    assert [s["batch_size"] for s in sv["batch_sizes"]] == [1]
    assert sv["stopped"] == "interrupted (Ctrl-C): batch size 2 not tried"
    assert data["status"] == "feasible" and sv["best_proven"] is False and data["valid"]
    assert "interrupted (Ctrl-C)" in data["message"]
    assert "stopped: interrupted (Ctrl-C): batch size 2 not tried" in text.out


def test_a_ctrl_c_in_the_operator_search_keeps_the_layer_plan(bert, tmp_path, capsys, monkeypatch):
    """The Ctrl-C comes in batch 1's operator search (the stage DP, no plan yet: the ``KeyboardInterrupt``
    comes through). The command ended ``error: interrupted``, exit 130, although batch 1's layer plan
    existed. Now that plan is the answer, and batch 2 is not tried."""
    seen = _solves(monkeypatch, 2, took=False)
    out = tmp_path / "r.json"
    code = main(["place", bert, "--devices", "a100:1,t4:1", "--batch-size", "auto", "-o", str(out)])
    text = capsys.readouterr()
    assert code == 0 and "Traceback" not in text.err, text.err
    assert len(seen) == 2 and seen[0] < 20 < seen[1], seen  # layers, then operators
    data = json.loads(out.read_text())
    sv = data["serving"]
    assert [s["batch_size"] for s in sv["batch_sizes"]] == [1]
    assert sv["stopped"] == "interrupted (Ctrl-C): batch 2 and above not tried"
    assert data["problem"]["granularity"] == "layer" and data["status"] == "feasible"
    assert "operator granularity: interrupted (Ctrl-C) before a plan" in data["message"]


def test_a_ctrl_c_before_any_plan_ends_the_sweep_with_130(bert, tmp_path, capsys, monkeypatch):
    """Batch 2's layer solve gets the Ctrl-C before any plan (batch 1 done): batch 1's plan stands and
    batch 4 is not tried; at batch 1's first solve there is nothing to give: exit 130, no file."""
    seen = _solves(monkeypatch, 3, took=False)
    out = tmp_path / "r.json"
    assert main(["place", bert, "--devices", "a100:1,t4:1", "--batch-size", "1,2,4", "-o", str(out)]) == 0
    capsys.readouterr()
    assert len(seen) == 3, seen
    sv = json.loads(out.read_text())["serving"]
    assert [(s["batch_size"], s["samples_per_s"] is not None) for s in sv["batch_sizes"]] == \
        [(1, True), (2, False)]
    assert sv["stopped"] == "interrupted (Ctrl-C): batch size 4 not tried" and sv["best_batch_size"] == 1

    out.unlink()
    monkeypatch.undo()
    seen = _solves(monkeypatch, 1, took=False)
    code = main(["place", bert, "--devices", "a100:1,t4:1", "--batch-size", "1,2", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and err.strip().splitlines()[-1] == "error: interrupted", err
    assert len(seen) == 1 and not out.exists()


def test_a_ctrl_c_the_program_under_the_latency_target_took_keeps_the_best_plan(tmp_path, capsys,
                                                                               monkeypatch):
    """``place --latency-slo 1.3`` on a100:2,t4:2,cpu:1: the stage optimum misses the target, so the
    integer program with the latency as a row runs; a Ctrl-C it takes before a plan ended the command
    (exit 130) although the family of plans meeting the target was in hand. Now the best of them is
    the answer, not proven, and neither the operators, nor batch 2, nor the one-device-per-stage search
    run after it."""
    from solvers import ip_stages
    from solvers.base import stage_solution

    model = str(tmp_path / "model.onnx")
    assert main(["example", model]) == 0
    capsys.readouterr()
    calls = []

    def interrupted(problem, **kw):
        calls.append(kw.get("latency_max"))
        return stage_solution("ip", None, None, math.inf, Status.STOPPED, 0.01,
                              "interrupted (Ctrl-C) before any plan was found")

    monkeypatch.setattr(ip_stages, "solve_problem", interrupted)
    from placement import serving

    monkeypatch.setattr(serving, "sweep", lambda *a, **kw: pytest.fail("one device per stage ran"))
    out = tmp_path / "r.json"
    code = main(["place", model, "--devices", "a100:2,t4:2,cpu:1", "--latency-slo", "1.3", "--batch-size",
                 "1,2", "--time-limit", "60", "-o", str(out)])
    text = capsys.readouterr()
    assert code == 0 and "Traceback" not in text.err, text.err
    assert len(calls) == 1 and calls[0] is not None, calls
    data = json.loads(out.read_text())
    sv = data["serving"]
    assert sv["stopped"] == "interrupted (Ctrl-C): batch size 2 not tried"
    assert data["status"] == "feasible" and sv["best_proven"] is False
    assert data["problem"]["granularity"] == "layer"
    assert sv["batch_sizes"][0]["latency_ms"] <= 1.3 * (1 + 1e-12)
    assert "interrupted (Ctrl-C)" in data["message"]


# ------------------------------------------------------------------------------- the stage DP itself
def _op_problem(path: str):
    from placement.serving_stages import stage_problem

    problem = stage_problem(path, {"devices": "a100:2,t4:2"}, 1, granularity="op")[0]
    assert problem.graph.num_nodes > 24  # the DP runs its restricted passes first
    return problem


def _no_escape(solve):
    """``solve()``; a ``KeyboardInterrupt`` out of it fails the test (rather than stopping pytest)."""
    try:
        return solve()
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C came through although the restricted passes had a plan")


def test_the_stage_dp_returns_its_restricted_plan_on_a_ctrl_c(bert, monkeypatch):
    """``place --granularity op`` on a 24-layer model: a Ctrl-C in the DP's full pass ended the command
    (exit 130) although its restricted passes (prefixes of one topological order) had a plan, which a
    time limit returns. Now the Ctrl-C returns it the same way, "interrupted" (not proven), and auto
    runs nothing after it (no coarsening, no integer program)."""
    from graphs.parallel import evaluate_plan
    from solvers import auto_stages, dp_stages

    problem = _op_problem(bert)
    real, found = dp_stages._run, []

    def run(*a, **kw):
        if kw.get("build", True):  # the full pass
            raise KeyboardInterrupt
        r = real(*a, **kw)
        found.append(r.objective)
        return r

    monkeypatch.setattr(dp_stages, "_run", run)
    sol = _no_escape(lambda: dp_stages.solve_problem(problem, kernel="stage"))
    assert sol.interrupted and sol.status is Status.FEASIBLE and sol.plan is not None, sol.message
    ev = evaluate_plan(problem, sol.plan)
    assert ev.valid and sol.objective == pytest.approx(ev.objective, rel=1e-12)
    # the restricted passes' best, its variants chosen again: never worse
    assert found and sol.objective <= min(x for x in found if math.isfinite(x)) * (1 + 1e-9)

    monkeypatch.setattr(auto_stages, "merge_stage_chains", lambda *a: pytest.fail("coarsened"))
    monkeypatch.setattr(auto_stages.ip_stages, "solve_problem", lambda *a, **kw: pytest.fail("ip ran"))
    a = _no_escape(lambda: auto_stages.solve_problem(problem))
    assert a.interrupted and a.status is Status.FEASIBLE and a.plan is not None, a.message
    # nothing after the DP (the one-device-per-stage step runs before it)
    assert a.objective == pytest.approx(sol.objective, rel=1e-12)
    assert a.stats["path"] in (["dp"], ["pipeline d=t=1", "dp"])

    def none_yet(*a, **kw):  # before any plan the Ctrl-C goes on as it came
        raise KeyboardInterrupt

    monkeypatch.setattr(dp_stages, "_run", none_yet)
    with pytest.raises(KeyboardInterrupt):
        dp_stages.solve_problem(problem, kernel="stage")
