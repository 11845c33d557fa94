"""A Ctrl-C the stage model's integer program takes (solvers._milp catches it and returns its best,
saying "interrupted") ends ``auto`` on the stage model there, and its answer says so: callers such as
the serving commands' stage searches stop on :attr:`solvers.base.Solution.interrupted`."""

from __future__ import annotations

import math

import pytest

from graphs.parallel import evaluate_plan
from solvers import auto_stages, dp_stages, ip_stages, pipedream_stages
from solvers.base import Status, stage_solution
from tests.test_ip_stages import _chain_problem


@pytest.fixture
def interrupted_ip(monkeypatch):
    """The stage integer program as it answers after a Ctrl-C: its warm start (``None``: no plan,
    stopped), 'interrupted (Ctrl-C); best placement so far'; ``ran`` counts its runs and the steps
    that would run after it."""
    ran: list[str] = []

    def ip(problem, *, warm_start=None, **kw):
        ran.append("ip")
        msg = "interrupted (Ctrl-C); best placement so far"
        if warm_start is None:
            return stage_solution("ip", None, None, math.inf, Status.STOPPED, 0.0, msg)
        ev = evaluate_plan(problem, warm_start)
        return stage_solution("ip", warm_start, ev, ev.objective, Status.FEASIBLE, 0.0, msg)

    def spy(name, real):
        return lambda *a, **kw: ran.append(name) or real(*a, **kw)

    monkeypatch.setattr(ip_stages, "solve_problem", ip)
    monkeypatch.setattr(pipedream_stages, "solve_problem", spy("pipedream", pipedream_stages.solve_problem))
    monkeypatch.setattr(dp_stages, "solve_problem", spy("dp", dp_stages.solve_problem))
    return ran


def test_nothing_runs_after_the_integer_program_took_a_ctrl_c(interrupted_ip):
    """No ideal count fits max_ideals 1 (a chain of 30 has 31 ideals, one node 2), so no DP runs and
    the program is the first step to find a plan. Interrupted without one, auto went on to PipeDream's
    planner and the DP: seconds on a large model, the Ctrl-C lost."""
    p = _chain_problem(n=30, devices=4, N=4)
    r = auto_stages.solve_problem(p, max_ideals=1)
    assert interrupted_ip == ["ip"], interrupted_ip
    assert r.status is Status.STOPPED and r.plan is None and r.interrupted, (r.status, r.message)


def test_a_coarse_plan_the_interrupted_program_kept_says_interrupted(interrupted_ip):
    """Coarsened (max_ideals 20) then the program from the coarse plan, which it returns after the
    Ctrl-C: auto's answer said 'the integer program stopped at its limit', and its caller went on."""
    p = _chain_problem(n=30, devices=4, N=4)
    r = auto_stages.solve_problem(p, max_ideals=20)
    assert interrupted_ip == ["dp", "ip"], interrupted_ip  # the coarse DP, then the program
    assert r.status is Status.FEASIBLE and r.plan is not None and evaluate_plan(p, r.plan).valid
    assert r.interrupted and "the integer program was interrupted (Ctrl-C)" in r.message, r.message


@pytest.mark.parametrize("at", [1, 2, 3, 4, 5])
def test_a_real_ctrl_c_at_any_progress_call_keeps_the_plan_in_hand(at, tmp_path):
    """A real SIGINT from the progress callback (as a terminal's Ctrl-C lands while the bar draws): the
    stage DP lets it through before a plan of its own, and auto dropped the plan its first step had
    found (a bare KeyboardInterrupt), at the step's start and at the bar's last call too (the whole,
    optimal answer lost). Now the plan in hand is the answer, said interrupted; once a plan exists no
    Ctrl-C escapes."""
    import json
    import os
    import signal

    from placement import SolveOptions, place, read_piper

    n = 12
    nodes = [{"id": i, "TMPCs": {"1": [{"id": "vanilla", "timePerSample": 1.0 + i % 3, "parameterSize": 1.0,
                                        "memoryUsageA": 2.0, "memoryUsageB": 10.0, "syncTimeFw": {},
                                        "syncTimeBw": {}}]}} for i in range(n)]
    path = tmp_path / "chain.json"
    edges = [{"sourceId": i, "destId": i + 1, "communicationCost": 1.0} for i in range(n - 1)]
    path.write_text(json.dumps({"maxDevices": 4, "maxMemoryPerDevice": 100.0, "bandwidth": 10.0,
                                "mbsInBatch": 8, "nodes": nodes, "edges": edges}))
    problem = read_piper(str(path)).problem
    whole = place(problem)
    calls = []

    def progress(fraction):
        calls.append(fraction)
        if len(calls) == at:
            os.kill(os.getpid(), signal.SIGINT)

    p = place(problem, options=SolveOptions(progress=progress))
    assert len(calls) >= at and p.solution.interrupted
    assert p.status in (Status.FEASIBLE, Status.OPTIMAL) and p.max_load >= whole.max_load * (1 - 1e-12)
    assert evaluate_plan(problem, p.solution.plan).objective == pytest.approx(p.max_load, rel=1e-12)
    if p.status is Status.OPTIMAL:
        assert p.max_load == pytest.approx(whole.max_load, rel=1e-12)
