"""Lower bounds in auto and in the DP: same optimum as without them, early stops only when proven."""

import math

import numpy as np
import pytest

from graphs.errors import InfeasibleError
from graphs.evaluate import evaluate
from graphs.ideals import chain_ideals, enumerate_ideals
from graphs.model import Cluster, DeviceKind, OpGraph
from solvers import dp
from solvers.auto import solve
from solvers.base import SolveOptions, Status
from solvers.bounds import bounds_of_items
from tests.instances import brute_force, random_instance


@pytest.mark.parametrize("kinds", [None, 3])
def test_dp_with_state_pruning_and_floor_keeps_the_optimum(kinds):
    rng = np.random.default_rng(31 if kinds is None else 32)
    checked = 0
    for i in range(150):
        inst = random_instance(rng, max_items=7, kinds=kinds, label=f"p{i}")
        try:
            prob = dp.prepare(inst.graph, inst.cluster)
        except InfeasibleError:
            continue
        lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
        plain = dp.run_dp(prob, lattice).value
        b = bounds_of_items(prob.item_compute, prob.item_memory, prob.counts, prob.caps)
        ub = min(dp.run_dp(prob, chain_ideals(prob.items.num_classes, o)).value
                 for o in dp.topological_orders(prob.items)) * (1 + 1e-9)
        floor = b.value * (1 - 1e-9) if math.isfinite(b.value) else 0.0
        run = dp.run_dp(prob, lattice, ub=ub, prices=np.vstack([b.prices, np.ones_like(b.prices)]),
                        floor=floor)
        if math.isinf(plain):
            assert math.isinf(run.value), inst.label
            continue
        ev = evaluate(inst.graph, inst.cluster, dp.stages_to_assignment(prob, inst.cluster, run.stages))
        assert ev.valid and ev.contiguous, inst.label
        assert ev.max_load == pytest.approx(plain, rel=1e-9, abs=1e-12), inst.label
        assert run.value == pytest.approx(max(plain, floor), rel=1e-9, abs=1e-12), inst.label
        checked += 1
    assert checked >= 50


def test_auto_with_and_without_bounds_agree_and_report_sound_bounds():
    rng = np.random.default_rng(33)
    for i in range(40):
        inst = random_instance(rng, max_items=6, label=f"a{i}")
        events: list[dict] = []
        on = solve(inst.graph, inst.cluster, SolveOptions(raw={"report": events.append}))
        off = solve(inst.graph, inst.cluster, SolveOptions(raw={"bounds": False}))
        assert on.status == off.status, inst.label
        if on.status is not Status.OPTIMAL:
            continue
        assert on.objective == pytest.approx(off.objective, rel=1e-9, abs=1e-12), inst.label
        ev = evaluate(inst.graph, inst.cluster, on.assignment)
        assert ev.max_load == pytest.approx(on.objective, rel=1e-9)
        assert events and events[-1]["value"] == pytest.approx(on.objective)
        for e in events:  # every reported bound is proven, every value a real placement's
            assert e["bound"] <= on.objective * (1 + 1e-9) + 1e-12, inst.label
            assert e["value"] is None or e["value"] >= on.objective * (1 - 1e-9) - 1e-12, inst.label


def test_a_placement_that_meets_the_bound_ends_the_search_without_the_dp():
    # four equal operators, no communication, two devices: two per device is optimal and the chain finds it
    g = OpGraph.build(names=list("abcd"), kinds=["gpu"], compute=np.ones((1, 4)), comm=np.zeros((1, 4)),
                      memory=np.zeros(4), edges=[(0, 1), (1, 2), (2, 3)])
    cl = Cluster((DeviceKind("gpu", 2),))
    sol = solve(g, cl)
    assert sol.status is Status.OPTIMAL and sol.objective == 2.0 and sol.gap == 0.0
    assert "meets the lower bound" in sol.message and sol.stats["pairs"] is None
    off = solve(g, cl, SolveOptions(raw={"bounds": False}))
    assert off.status is Status.OPTIMAL and off.stats["pairs"] > 0 and off.objective == 2.0


def test_no_early_stop_when_communication_keeps_the_optimum_above_the_bound():
    g = OpGraph.build(names=list("abcd"), kinds=["gpu"], compute=np.ones((1, 4)), comm=np.full((1, 4), 0.5),
                      memory=np.zeros(4), edges=[(0, 1), (1, 2), (2, 3)])
    sol = solve(g, Cluster((DeviceKind("gpu", 2),)))
    assert sol.status is Status.OPTIMAL and sol.objective == 2.5  # 2 ops + the one crossing edge
    assert "meets the lower bound" not in sol.message and sol.stats["pairs"] > 0


_BRUTE: dict[tuple[int, int], float] = {}


def _brute_force(inst, seed: int, i: int) -> float:
    """``brute_force(inst)`` for the ``i``-th instance drawn from ``seed``, computed once per test run:
    (1, None) and (1, 0) draw the same instances (seed 41), and their brute force was most of their time."""
    if (seed, i) not in _BRUTE:
        _BRUTE[seed, i] = brute_force(inst)
    return _BRUTE[seed, i]


@pytest.mark.parametrize("slots,margin", [(1, None), (2, None), (1, 0), (2, 3)])
def test_more_strict_states_than_a_record_holds_keep_the_optimum(monkeypatch, slots, margin):
    """A sub-ideal with more strict states than its record holds (dp._records) is read from the table
    until the records grow (dp._widen, after its chunk of ideals): with one or two slots most multi-kind
    instances take both paths, and the optimum must not move. With margin None the records never grow,
    so every overflowing sub-ideal is read from the table; with margin 0 they grow again and again."""
    monkeypatch.setattr(dp, "_STRICT_SLOTS", slots)
    if margin is None:
        monkeypatch.setattr(dp, "_widen", lambda rec, *args: rec)
    else:
        monkeypatch.setattr(dp, "_STRICT_MARGIN", margin)
    rng = np.random.default_rng(40 + slots + (margin or 0))
    checked = grown = 0
    for i in range(60):
        inst = random_instance(rng, max_items=6, kinds=3, label=f"s{i}")
        try:
            prob = dp.prepare(inst.graph, inst.cluster)
        except InfeasibleError:
            continue
        lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
        run = dp.run_dp(prob, lattice)
        want = _brute_force(inst, 40 + slots + (margin or 0), i)
        assert run.value == pytest.approx(want, rel=1e-9, abs=1e-12), inst.label
        checked += math.isfinite(want)
        grown += run.slots > slots
    assert checked >= 20
    assert grown == 0 if margin is None else grown >= 5


def test_a_state_of_slow_devices_only_is_dropped_where_its_own_kind_cannot_take_the_prefix():
    """The priced-work test takes each side's work over the kinds that side has: a prefix on CPUs alone
    needs the CPUs' own time. Two accelerators and two CPUs 100x slower, a chain of ten unit items,
    bound 5: no non-empty prefix fits the CPUs alone (one item takes 100 there), while the plain work
    (every item at the accelerator's time, 1) would fit their 2 x 5; the optimum is unchanged."""
    n = 10
    g = OpGraph.build(names=[f"a{i}" for i in range(n)], kinds=("acc", "cpu"),
                      compute=np.vstack([np.ones(n), np.full(n, 100.0)]), comm=np.zeros((2, n)),
                      memory=np.zeros(n), edges=[(i, i + 1) for i in range(n - 1)])
    cluster = Cluster((DeviceKind("acc", 2), DeviceKind("cpu", 2)))
    prob = dp.prepare(g, cluster)
    lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
    b = bounds_of_items(prob.item_compute, prob.item_memory, prob.counts, prob.caps)
    prices = np.vstack([b.prices, np.ones_like(b.prices)])
    comp, _, mem, size = dp._prefix(lattice.parent, lattice.added, prob.item_compute, prob.item_memory)
    alive = dp._states_within(prob, lattice, mem, 5.0, prices)
    cpus_only = [s for s in range(prob.digits.shape[0]) if prob.digits[s, 0] == 0 and prob.digits[s, 1] > 0]
    assert cpus_only
    for s in cpus_only:
        assert not alive[size >= 1, s].any()  # one unit item is already 100 > 5 on a CPU
    # the optimum is 5 (two accelerators, five items each), with and without the pruning
    plain = dp.run_dp(prob, lattice).value
    run = dp.run_dp(prob, lattice, ub=5.0 * (1 + 1e-9), prices=prices, floor=b.value * (1 - 1e-9))
    assert plain == pytest.approx(5.0) and run.value == pytest.approx(5.0)
