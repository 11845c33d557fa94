"""The integer programs report progress (``SolveOptions.progress``) while HiGHS searches: the part of
the time limit spent or of the first gap closed, whichever is further, never decreasing, 1 at the end;
the bar changes nothing in the answer. ``auto``'s integer-program step on the stage model fills its part
of auto's bar with it, and ``placement place --solver ip`` draws a bar instead of a "no bar" note."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from placement.cli import main
from solvers import _milp, auto_stages, ip_stages
from solvers.base import SolveOptions, Status
from solvers.registry import SOLVERS, solve
from tests.test_dp_stages import _banded_problem
from tests.test_ip import _market_split


def _rising(told: list[float]) -> None:
    """``told`` is a bar's run: within [0, 1], never decreasing, ending at 1, with a value before 1."""
    assert told, "the progress callable was never called"
    assert all(0.0 <= f <= 1.0 for f in told), told
    assert all(a <= b for a, b in zip(told, told[1:])), told
    assert told[-1] == 1.0, told
    assert any(f < 1.0 for f in told), f"only the end was told: {told}"


def test_gap_closed_measures_the_first_gap_closed_down_to_the_target():
    assert _milp.gap_closed(None, 0.5, 1e-4) == 0.0  # no incumbent yet: no gap
    assert _milp.gap_closed(0.5, float("inf"), 1e-4) == 0.0
    assert _milp.gap_closed(0.5, 0.5, 0.0) == 0.0
    assert _milp.gap_closed(0.5, 0.25, 0.0) == pytest.approx(0.5)
    assert _milp.gap_closed(0.3, 0.2, 0.1) == pytest.approx(0.5)  # measured down to the target gap
    assert _milp.gap_closed(0.3, 0.05, 0.1) == 1.0
    assert _milp.gap_closed(0.3, 0.4, 0.1) == 0.0  # never below 0
    assert _milp.gap_closed(1e-5, 1e-5, 1e-4) == 1.0  # the first gap already meets the target


def test_a_highs_search_tells_its_progress_while_it_runs_and_changes_nothing():
    """A market-split MIP stopped by a node limit (deterministic, about a second): the callable hears
    fractions below 1 while HiGHS searches, rising, on the caller's thread, then 1; the incumbent, bound
    and status are those of the same solve without it."""
    model = _market_split(np.random.default_rng(3))
    raw = {"highs_options": {"mip_max_nodes": 1000}}
    told: list[float] = []
    threads: set[str] = set()

    def progress(f: float) -> None:
        told.append(f)
        threads.add(threading.current_thread().name)

    with_bar = _milp.solve_mip(model, time_limit=600, threads=1, raw=raw, progress=progress)
    without = _milp.solve_mip(model, time_limit=600, threads=1, raw=raw)
    _rising(told)
    assert threads == {threading.current_thread().name}
    assert with_bar.x is not None and without.x is not None
    assert (with_bar.status, with_bar.objective, with_bar.bound) == \
        (without.status, without.objective, without.bound)
    assert np.array_equal(with_bar.x, without.x)


def test_a_keyboard_interrupt_from_the_callable_is_a_ctrl_c():
    """The callable runs where the wait takes Ctrl-C: raising KeyboardInterrupt there stops the search
    with its best solution, and the end (1) is not told."""
    model = _market_split(np.random.default_rng(3))
    told: list[float] = []

    def ctrl_c(f: float) -> None:
        told.append(f)
        if len(told) == 4:  # a few reports in: HiGHS has its first incumbents by then
            raise KeyboardInterrupt

    res = _milp.solve_mip(model, time_limit=60, threads=1, progress=ctrl_c)
    assert res.status == _milp.TIME_LIMIT and "interrupted" in res.message, res.message
    assert res.x is not None and model.check(res.x) == []
    assert 1.0 not in told, told


@pytest.fixture(scope="module")
def problem():
    """6 nodes: the stage MILP proves its optimum in about a second on one thread."""
    return _banded_problem(6)


def test_the_stage_program_tells_its_progress_and_its_answer_does_not_change(problem):
    told: list[float] = []
    with_bar = ip_stages.solve_problem(problem, time_limit=600, threads=1, progress=told.append)
    without = ip_stages.solve_problem(problem, time_limit=600, threads=1)
    _rising(told)
    assert with_bar.status is without.status is Status.OPTIMAL
    assert with_bar.objective == without.objective
    assert tuple(with_bar.plan) == tuple(without.plan)


def test_autos_integer_program_step_moves_autos_bar(problem, monkeypatch):
    """The exact DP not run (``max_ideals=1``), auto's integer program refines the one-device-per-stage
    plan: while it runs, auto's bar hears fractions above where it stood and below 1 (it held, then
    jumped, before); auto's answer is the same without a bar."""
    told: list[float] = []
    during: list[list[float]] = []
    real = ip_stages.solve_problem

    def spy(*a, **kw):
        start = len(told)
        r = real(*a, **kw)
        during.append(told[start:])
        return r

    monkeypatch.setattr(ip_stages, "solve_problem", spy)
    kw = {"max_ideals": 1, "threads": 1, "ip_time": 600.0}
    with_bar = auto_stages.solve_problem(problem, progress=told.append, **kw)
    assert with_bar.stats["path"][-1] == "ip" and len(during) == 1, with_bar.stats["path"]
    _rising(told)
    ip_told = during[0]
    assert any(f < 1.0 for f in ip_told), f"the integer program's step told nothing before 1: {told}"
    monkeypatch.setattr(ip_stages, "solve_problem", real)
    without = auto_stages.solve_problem(problem, **kw)
    assert with_bar.status is without.status is Status.OPTIMAL
    assert with_bar.objective == without.objective
    assert tuple(with_bar.plan) == tuple(without.plan)


def test_the_registry_says_the_integer_programs_report_progress():
    assert SOLVERS["ip"].progress and SOLVERS["ip"].stage_progress and SOLVERS["ip-noncontig"].progress


def test_the_pipeline_ip_tells_max_load_progress_and_not_another_objectives():
    """One device per stage, max-load: the bar ends at 1 and the answer is the one without it; the
    latency objective's program reports none (as the registry says: progress on max-load only)."""
    inst_graph, inst_cluster = _tiny_pipeline()
    told: list[float] = []
    with_bar = solve(inst_graph, inst_cluster, solver="ip", options=SolveOptions(threads=1,
                                                                                progress=told.append))
    without = solve(inst_graph, inst_cluster, solver="ip", options=SolveOptions(threads=1))
    assert told and told[-1] == 1.0 and all(a <= b for a, b in zip(told, told[1:])), told
    assert with_bar.status is without.status is Status.OPTIMAL
    assert with_bar.objective == without.objective
    assert np.array_equal(with_bar.assignment, without.assignment)
    latency: list[float] = []
    solve(inst_graph, inst_cluster, solver="ip",
          options=SolveOptions(objective="latency", threads=1, time_limit=30, progress=latency.append))
    assert latency == []


def _tiny_pipeline():
    from tests.instances import random_instance

    inst = random_instance(np.random.default_rng(4), max_items=6, training=False)
    return inst.graph, inst.cluster


def test_place_with_the_ip_solver_draws_a_bar_and_no_note(tmp_path, capsys):
    tiny = str(tmp_path / "tiny.json")
    assert main(["example", tiny]) == 0
    capsys.readouterr()
    assert main(["place", tiny, "--progress", "--solver", "ip"]) == 0
    err = capsys.readouterr().err
    assert "placing [" in err and "100.0%" in err, err
    assert "note: --progress" not in err, err
