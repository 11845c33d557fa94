"""Allocation policies: ftf reaches the exhaustive optimum, joint (Synergy-like, also choosing accelerator
counts) keeps its floors and optimum, the
baselines follow their rules, and every policy respects the cluster's capacity."""

import itertools
import math

import numpy as np
import pytest

from placement.cluster.curves import CurvePoint, JobCurve, graph_curve
from placement.cluster.policies import (
    POLICIES,
    Capacity,
    JobState,
    allocate,
    default_request,
    fair_share_time,
    rho,
    rho_wait,
)
from tests.instances import random_instance


def table_curve(times: dict, *, limits=(4, 2), host=(False, True), memory=None) -> JobCurve:
    """A curve from a table ``{(accelerators, cores): time per sample}`` (missing: the best of the smaller
    allocations, inf if none); ``memory[counts]`` bytes of host memory at a point (default 0)."""
    memory = memory or {}
    values = {}
    for c in itertools.product(*(range(m + 1) for m in limits)):
        best = times.get(c, math.inf)
        for t in range(len(c)):
            if c[t]:
                best = min(best, values[c[:t] + (c[t] - 1,) + c[t + 1:]])
        values[c] = best
    points = []
    for c, v in values.items():
        smaller = [c[:t] + (c[t] - 1,) + c[t + 1:] for t in range(len(c)) if c[t]]
        if math.isfinite(v) and all(v < values[d] for d in smaller):
            points.append(CurvePoint(c, v, float(memory.get(c, 0.0))))
    kinds = ("acc", "cpu")[:len(limits)]
    return JobCurve(kinds, tuple(limits), tuple(host), values, tuple(points))


def linear(acc=4, t1=1.0) -> JobCurve:
    """Time per sample t1 / k on k accelerators (perfect scaling), no use for host cores."""
    return table_curve({(k, 0): t1 / k for k in range(1, acc + 1)}, limits=(acc, 0))


def _random_case(rng):
    """Two to four jobs with curves of random small graphs over kinds k0 (accelerator) and k1 (host), a
    random capacity, host memory sometimes limited."""
    cap = Capacity(("k0", "k1"), (int(rng.integers(1, 4)), int(rng.integers(0, 3))), (False, True),
                   float(rng.uniform(1, 8)) if rng.random() < 0.5 else math.inf)
    jobs = []
    while len(jobs) < int(rng.integers(2, 5)):
        inst = random_instance(rng, max_items=5, kinds=2)
        from graphs.model import Cluster, DeviceKind

        k0, k1 = inst.cluster.kinds
        cl = Cluster((DeviceKind("k0", 3, k0.memory, True), DeviceKind("k1", 2, k1.memory, False)))
        c = graph_curve(inst.graph, cl)
        if not c.points or min(p.time_per_sample for p in c.points) <= 0:
            continue
        if not math.isfinite(fair_share_time(c, cap, 3)):
            continue
        jobs.append(JobState(f"j{len(jobs)}", c, 100.0, float(rng.uniform(10, 100)),
                             float(rng.uniform(0, 60)), float(rng.uniform(1, 4)), len(jobs)))
    return jobs, cap


def _fits(allocs, cap):
    for t, n in enumerate(cap.counts):
        assert sum(a.devices[t] for a in allocs) <= n
    assert sum(a.host_memory for a in allocs) <= cap.host_memory * (1 + 1e-9) + 1e-9
    for a in allocs:
        if a.running:  # the job runs a point inside what it holds
            assert all(u <= d for u, d in zip(a.used, a.devices))
            assert a.point.host_memory <= a.host_memory + 1e-9


def _feasible_combos(jobs, cap):
    opts = [[p for p in j.curve.points if all(a <= b for a, b in zip(p.counts, cap.counts))] + [None]
            for j in jobs]
    for combo in itertools.product(*opts):
        used = [sum(p.counts[t] for p in combo if p) for t in range(len(cap.counts))]
        if any(u > c for u, c in zip(used, cap.counts)):
            continue
        if sum(p.host_memory for p in combo if p) > cap.host_memory:
            continue
        yield combo


def test_ftf_reaches_the_exhaustive_optimum():
    """Lexicographic: the largest rho_wait among waiting jobs, then how many wait, then the max rho of
    the running jobs — the same value as enumerating every combination of curve points."""
    rng = np.random.default_rng(0)
    lease = 5.0
    waited = 0
    for _ in range(30):
        jobs, cap = _random_case(rng)
        shares = [fair_share_time(j.curve, cap, j.contention) for j in jobs]
        ideal = [j.samples * s for j, s in zip(jobs, shares)]
        wr = [rho_wait(j, s, i, lease) for j, s, i in zip(jobs, shares, ideal)]

        def key(combo, jobs=jobs, ideal=ideal, wr=wr):
            waiting = [w for w, p in zip(wr, combo) if p is None]
            running = [rho(j, p.time_per_sample, i) for j, p, i in zip(jobs, combo, ideal) if p is not None]
            return (max(waiting, default=-1.0), len(waiting), max(running, default=0.0))

        best = min(key(c) for c in _feasible_combos(jobs, cap))
        d = allocate("ftf", jobs, cap, lease=lease, share_times=shares)
        _fits(d.allocations, cap)
        got = key([a.point for a in d.allocations])
        assert got == pytest.approx(best, rel=1e-9, abs=1e-12)
        assert d.status == "optimal"
        waited += best[1] > 0
    assert waited > 0  # some cases could not run every job at once


def test_ftf_minimises_max_rho_when_every_job_can_run():
    # two perfectly scaling jobs on 4 accelerators: 2 + 2 gives both rho 1; fresh jobs, contention 2
    jobs = [JobState("a", linear(), 100, 100, 0.0, 2.0, 0), JobState("b", linear(), 100, 100, 0.0, 2.0, 1)]
    cap = Capacity(("acc", "cpu"), (4, 0), (False, True))
    d = allocate("ftf", jobs, cap)
    assert [a.devices for a in d.allocations] == [(2, 0), (2, 0)] and d.objective == pytest.approx(1.0)
    # a job that has waited long is behind: it gets the larger share
    late = [JobState("a", linear(), 100, 100, 60.0, 2.0, 0), JobState("b", linear(), 100, 100, 0.0, 2.0, 1)]
    d = allocate("ftf", late, Capacity(("acc", "cpu"), (3, 0), (False, True)))
    assert [a.devices for a in d.allocations] == [(2, 0), (1, 0)]


def test_every_policy_respects_capacity_and_joint_keeps_its_floors():
    rng = np.random.default_rng(4)
    for _ in range(25):
        jobs, cap = _random_case(rng)
        decisions = {pol: allocate(pol, jobs, cap) for pol in POLICIES}
        for d in decisions.values():
            assert len(d.allocations) == len(jobs)
            _fits(d.allocations, cap)
        prop, sens = decisions["even"], decisions["joint"]
        for a, b in zip(prop.allocations, sens.allocations):
            assert b.time_per_sample <= a.time_per_sample * (1 + 1e-12)


def test_joint_maximises_normalised_throughput_above_the_floors():
    rng = np.random.default_rng(7)
    for _ in range(15):
        jobs, cap = _random_case(rng)
        shares = [fair_share_time(j.curve, cap, j.contention) for j in jobs]
        prop = allocate("even", jobs, cap).allocations
        best = -1.0
        for combo in _feasible_combos(jobs, cap):
            if any((p.time_per_sample if p else math.inf) > a.time_per_sample * (1 + 1e-12)
                   for p, a in zip(combo, prop)):
                continue
            best = max(best, sum(s / p.time_per_sample for p, s in zip(combo, shares) if p))
        d = allocate("joint", jobs, cap, share_times=shares)
        assert d.objective == pytest.approx(best, rel=1e-6)


def test_joint_gives_host_cores_to_the_job_that_gains_from_them():
    # "eager" speeds up with host cores, "flat" does not; even splits cores by accelerators
    eager = table_curve({(1, 0): 4.0, (1, 1): 3.0, (1, 2): 2.0, (2, 0): 2.0, (2, 1): 1.6, (2, 2): 1.2})
    flat = table_curve({(1, 0): 4.0, (2, 0): 2.0})
    jobs = [JobState("eager", eager, 10, 10, 0, 2, 0), JobState("flat", flat, 10, 10, 0, 2, 1)]
    cap = Capacity(("acc", "cpu"), (2, 2), (False, True))
    prop = allocate("even", jobs, cap).allocations
    assert [a.devices for a in prop] == [(1, 1), (1, 1)]
    assert prop[1].used == (1, 0)  # its core sits idle
    sens = allocate("joint", jobs, cap).allocations
    assert [a.devices for a in sens] == [(1, 2), (1, 0)]
    assert sens[0].time_per_sample == 2.0 and sens[1].time_per_sample == 4.0


def test_even_splits_evenly_and_host_resources_by_accelerators():
    c = table_curve({(1, 0): 2.0, (2, 0): 1.0, (3, 0): 0.7}, limits=(4, 6))
    jobs = [JobState(n, c, 10, 10, 0, 3, i) for i, n in enumerate("abc")]
    cap = Capacity(("acc", "cpu"), (4, 6), (False, True), 12e9)
    d = allocate("even", jobs, cap).allocations
    assert [a.devices for a in d] == [(2, 3), (1, 2), (1, 1)]  # first arrival gets the extra one
    assert [a.host_memory for a in d] == pytest.approx([6e9, 3e9, 3e9])
    # a job that cannot run on its share waits (the last to arrive) and the others split again
    big = table_curve({(3, 0): 1.0}, limits=(4, 0))
    jobs = [JobState("a", big, 10, 10, 0, 2, 0), JobState("b", big, 10, 10, 0, 2, 1)]
    d = allocate("even", jobs, Capacity(("acc", "cpu"), (4, 0), (False, True))).allocations
    assert d[0].devices == (4, 0) and d[0].running and not d[1].running


def test_fifo_takes_requests_in_arrival_order_and_lets_later_jobs_fit():
    c = linear(acc=4)
    jobs = [JobState(n, c, 10, 10, 0, 3, i, request=(r, 0)) for i, (n, r) in enumerate(zip("abc", (3, 2, 1)))]
    d = allocate("fifo", jobs, Capacity(("acc", "cpu"), (4, 0), (False, True))).allocations
    assert [a.devices for a in d] == [(3, 0), (0, 0), (1, 0)] and not d[1].running


def test_default_request_is_the_smallest_allocation_near_the_best():
    c = table_curve({(1, 0): 10.0, (2, 0): 5.0, (3, 0): 4.0, (4, 0): 3.9, (4, 2): 3.8}, limits=(4, 2))
    assert default_request(c) == (3, 0)  # 4.0 <= 1.1 * 3.8


def test_fair_share_time_is_the_time_slicing_envelope():
    c = linear(acc=4, t1=1.0)
    cap = Capacity(("acc", "cpu"), (4, 0), (False, True))
    assert fair_share_time(c, cap, 1) == pytest.approx(0.25)
    assert fair_share_time(c, cap, 2) == pytest.approx(0.5)
    assert fair_share_time(c, cap, 3) == pytest.approx(0.75)  # 4/3 accelerators, by time-slicing
    needs_two = table_curve({(2, 0): 1.0}, limits=(4, 0))
    assert fair_share_time(needs_two, cap, 4) == pytest.approx(2.0)  # 2 accelerators half the time
    mem = table_curve({(1, 0): 1.0}, limits=(4, 0), memory={(1, 0): 8.0})
    assert fair_share_time(mem, Capacity(("acc", "cpu"), (4, 0), (False, True), 8.0), 2) == pytest.approx(2.0)


@pytest.mark.parametrize("policy", ["ftf", "joint"])
def test_a_ctrl_c_highs_took_before_any_solution_stops_the_policy(monkeypatch, policy):
    """The Ctrl-C benchmark: a SIGINT while HiGHS started an allocation MILP left its status "Unknown";
    solve_mip called that an error and the policy raised RuntimeError ("allocation MILP: error HiGHS:
    Unknown", a traceback). solve_mip now says interrupted, and the policy stops as the Ctrl-C asks."""
    from solvers import _milp

    def interrupted(*a, **k):
        return _milp.MipResult(_milp.TIME_LIMIT, None, math.inf, None, 0.0,
                               "interrupted (Ctrl-C); no solution yet")

    jobs = [JobState("a", linear(), 100, 100, 0.0, 2.0, 0), JobState("b", linear(), 100, 100, 0.0, 2.0, 1)]
    cap = Capacity(("acc", "cpu"), (4, 0), (False, True))
    monkeypatch.setattr(_milp, "solve_mip", interrupted)
    with pytest.raises(KeyboardInterrupt):
        allocate(policy, jobs, cap)


def test_a_cancelled_highs_run_without_a_status_is_interrupted_not_an_error(monkeypatch):
    """HiGHS cancelled by a Ctrl-C before its search settled on a status reports "Unknown": that is the
    Ctrl-C's answer (no solution yet), not an error."""
    from solvers import _milp

    m = _milp.MilpModel()
    x = m.add_cols(2, lb=0.0, ub=1.0, integer=True, cost=[1.0, 2.0])
    m.add_rows([1.0], [math.inf], [0, 0], [x[0], x[1]], 1.0)
    assert _milp.solve_mip(m).status == _milp.OPTIMAL
    monkeypatch.setattr(_milp, "_run_interruptible", lambda h, deadline=None, **kw: (True, False, False))
    res = _milp.solve_mip(m)
    assert res.status == _milp.TIME_LIMIT and res.message.startswith("interrupted (Ctrl-C)") and res.x is None
