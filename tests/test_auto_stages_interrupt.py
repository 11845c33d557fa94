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
