"""The stage solvers keep a time limit in every step, not only between the steps: the exact DP's walk
over the ideals (solvers/dp_stages.py) and its search runs, auto's coarsening after the DP stopped at
the limit (solvers/auto_stages.py), and HiGHS's limit net of building the model (solvers/_milp.py).
Repeated 1 s solves of the Piper GNMT file took 1.1-1.5 s before: the walk ran in one uninterruptible
call (twice: a count, then a fill), and auto coarsened and re-solved after the limit had passed.

Structural checks, with a slow step injected (a sleep) and generous margins: not timing benchmarks."""

from __future__ import annotations

import time

import numpy as np
import pytest

import solvers.auto_stages as auto_stages
import solvers.dp_stages as dp_stages
from solvers.base import Status, stage_solution
from solvers.dp_stages import solve_problem as dp_solve
from tests.test_dp_stages import random_problem
from tests.test_ip_stages import _chain_problem


def _one_at_a_time(monkeypatch) -> None:
    """Kernels run in pieces do the least work a call: about one ideal's walk, one pair's stage costs;
    the candidate stages' output starts at one pair (it grows)."""
    monkeypatch.setattr(dp_stages, "_next_work", lambda work, took, lo=1, hi=1: 1)
    monkeypatch.setattr(dp_stages, "_PAIRS_START", 1)


def test_candidate_stages_listed_in_pieces_give_the_same_solutions(monkeypatch):
    """One ideal a call, into an output of one pair that grows (each overflow redoes that ideal's walk):
    the same pairs in the same order, so the same plans, values and counts as the calls at full size."""
    rng = np.random.default_rng(41)
    problems = [random_problem(rng) for _ in range(40)]
    problems.append(_chain_problem(n=30, devices=4, N=4))  # restricted chain passes first (n > 24)
    want = [dp_solve(p, kernel="stage") for p in problems]
    _one_at_a_time(monkeypatch)
    for p, w in zip(problems, want):
        r = dp_solve(p, kernel="stage")
        assert r.status is w.status and r.objective == w.objective
        assert r.plan == w.plan
        assert r.stats.get("pairs") == w.stats.get("pairs")
        assert r.stats.get("stage_options") == w.stats.get("stage_options")


def test_order_by_j_is_the_stable_descending_sort():
    rng = np.random.default_rng(5)
    for NI in (1, 2, 17, 300):
        pair_j = rng.integers(0, NI, size=int(rng.integers(0, 2000))).astype(np.int64)
        got = dp_stages._order_by_j(pair_j, NI)
        assert np.array_equal(got, np.argsort(-pair_j, kind="stable"))


def test_a_slow_walk_over_the_ideals_stops_at_the_time_limit(monkeypatch):
    """Each ideal's walk made to take 50 ms (25 ideals: 1.25 s): the walk, in pieces, stops at the
    limit (before, it was one call: 1.25 s for a 0.4 s limit), with an honest status."""
    real = dp_stages._enumerate_pairs
    walked = []

    def slow(out_i, out_j, cnt, I_lo, *rest):
        I, c, full = real(out_i, out_j, cnt, I_lo, *rest)
        time.sleep(0.05 * (I - I_lo))
        walked.append(I - I_lo)
        return I, c, full

    p = _chain_problem(n=24, devices=4, N=4)  # no restricted passes (n <= 24): the full lattice only
    assert dp_solve(p, kernel="stage").status is Status.OPTIMAL
    _one_at_a_time(monkeypatch)
    monkeypatch.setattr(dp_stages, "_enumerate_pairs", slow)
    t = time.perf_counter()
    r = dp_solve(p, time_limit=0.4, kernel="stage")
    took = time.perf_counter() - t
    assert r.status is Status.STOPPED and r.plan is None and "time limit" in r.message
    assert sum(walked) < 25 and max(walked) <= 2
    assert took < 0.4 + 0.5, f"{took:.2f} s for a 0.4 s limit"


def test_a_search_run_that_would_end_past_the_limit_is_not_started(monkeypatch):
    """Each feasibility run made to take 0.4 s: after the first, a run is started only while it can end
    by the limit (the longest so far as its estimate); the best plan so far comes back, feasible, with
    the bound the search proved."""
    real = dp_stages._feasible1
    starts = []

    def slow(*args):
        starts.append(time.perf_counter())
        time.sleep(0.4)
        return real(*args)

    p = _chain_problem(n=20, devices=4, N=4)
    want = dp_solve(p, kernel="stage")
    assert want.status is Status.OPTIMAL and want.stats["dp_runs"] >= 4
    monkeypatch.setattr(dp_stages, "_feasible1", slow)
    limit = 1.0
    t = time.perf_counter()
    r = dp_solve(p, time_limit=limit, kernel="stage")
    took = time.perf_counter() - t
    assert r.status is Status.FEASIBLE and r.plan is not None
    assert r.bound is not None and r.bound <= want.objective * (1 + 1e-9) <= r.objective * (1 + 1e-9)
    assert all(s - t + 0.4 <= limit + 0.1 for s in starts[1:])  # none but the first started too late
    assert took < limit + 0.3, f"{took:.2f} s for a {limit} s limit"


def test_auto_does_not_coarsen_after_the_dp_stopped_at_the_limit(monkeypatch):
    """The exact DP runs to the limit and stops with nothing: merging chains and a coarse DP given no
    time would only spend time past the limit (before: 0.05-0.3 s on the Piper and ONNX workloads)."""
    p = _chain_problem(n=30, devices=4, N=4)
    merged = []

    def dp_to_the_limit(problem, *, time_limit=None, threads=None, progress=None):
        time.sleep(time_limit or 0.0)
        return stage_solution("dp", None, None, float("inf"), Status.STOPPED, time_limit or 0.0,
                              "time limit reached", {})

    monkeypatch.setattr(auto_stages.dp_stages, "solve_problem", dp_to_the_limit)
    monkeypatch.setattr(auto_stages, "merge_stage_chains",
                        lambda *a, **k: merged.append(a) or pytest.fail("coarsened after the limit"))
    t = time.perf_counter()
    r = auto_stages.solve_problem(p, time_limit=0.5)
    took = time.perf_counter() - t
    assert not merged and r.plan is None and r.status in (Status.STOPPED, Status.UNKNOWN)
    assert not any("merged" in s for s in r.stats["path"])
    assert took < 0.5 + 0.5


def test_auto_counts_ideals_within_the_limit(monkeypatch):
    """auto's check whether the exact DP fits counts the ideals under the solve's deadline."""
    seen = []
    real = auto_stages.enumerate_ideals

    def spy(*args, **kw):
        seen.append(kw.get("deadline"))
        return real(*args, **kw)

    monkeypatch.setattr(auto_stages, "enumerate_ideals", spy)
    t = time.perf_counter()
    auto_stages.solve_problem(_chain_problem(n=12, devices=4, N=4), time_limit=30.0, refine=False)
    assert seen and all(d is not None and t < d <= t + 30.0 + 1.0 for d in seen)


def test_highs_is_given_the_limit_net_of_building_the_model(monkeypatch):
    """Building and passing the model is on the caller's clock: HiGHS's own limit (its clock starts with
    its run) is what is left of the limit, less the reserve for its late reaction."""
    import highspy

    from solvers import _milp
    from tests.test_ip import _market_split

    limits = []
    real_set = highspy.Highs.setOptionValue

    def spy(self, key, value):
        if key == "time_limit":
            limits.append(value)
        return real_set(self, key, value)

    model = _market_split(np.random.default_rng(3))
    real_arrays = model.arrays

    def slow_arrays():
        time.sleep(0.3)
        return real_arrays()

    monkeypatch.setattr(highspy.Highs, "setOptionValue", spy)
    monkeypatch.setattr(model, "arrays", slow_arrays)
    limit = 1.0
    res = _milp.solve_mip(model, time_limit=limit, threads=1)
    reserved = limit - min(_milp._HIGHS_LATE, 0.25 * limit)
    assert limits and limits[-1] <= reserved - 0.3 + 1e-6
    assert res.stats["build_s"] >= 0.3
