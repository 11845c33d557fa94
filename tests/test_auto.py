"""``auto``: exact when it fits; labelled, valid, contiguous placements when it does not; limits and
interrupts honoured."""

import math
import os
import time

import numpy as np
import pytest

from graphs.coarsen import merge_by_key, merge_chains, name_prefix_keys
from graphs.evaluate import evaluate
from graphs.reference import read_workload
from solvers.auto import solve
from solvers.base import SolveOptions, Status
from solvers.dp import solve as dp_solve
from tests.instances import random_instance


def test_auto_is_the_exact_dp_when_it_fits():
    rng = np.random.default_rng(21)
    for _ in range(40):
        inst = random_instance(rng, max_items=6)
        a = solve(inst.graph, inst.cluster)
        b = dp_solve(inst.graph, inst.cluster)
        assert a.status == b.status
        if b.status is Status.OPTIMAL:
            assert a.stats["path"] == "exact" and a.objective == pytest.approx(b.objective, rel=1e-12)


def test_forced_coarsening_gives_valid_contiguous_labelled_placements_never_below_the_optimum():
    rng = np.random.default_rng(22)
    checked = 0
    for _ in range(40):
        inst = random_instance(rng, max_items=7, training=False)
        opt = dp_solve(inst.graph, inst.cluster)
        if opt.status is not Status.OPTIMAL:
            continue
        # a memory budget too small for any lattice forces the large-graph path
        sol = solve(inst.graph, inst.cluster, SolveOptions(time_limit=20, raw={"memory_limit": 1.0}))
        if sol.status is Status.OPTIMAL:  # the contiguous IP, warm-started, or the lower bound proved it
            assert sol.stats["path"] == "exact"
            assert "proven optimal by the IP" in sol.message or "meets the lower bound" in sol.message
            assert sol.objective == pytest.approx(opt.objective, rel=1e-6)
        else:
            assert sol.status is Status.FEASIBLE
            assert sol.stats["path"] in ("heuristic", "exact-on-coarsened")
        ev = evaluate(inst.graph, inst.cluster, sol.assignment)
        assert ev.valid and ev.contiguous
        assert ev.max_load == pytest.approx(sol.objective, rel=1e-9)
        assert ev.max_load >= opt.objective * (1 - 1e-9)
        assert sol.bound <= opt.objective * (1 + 1e-9) and 0 <= sol.gap <= 1
        checked += 1
    assert checked >= 20


def test_coarse_placements_are_valid_on_the_original_graph():
    rng = np.random.default_rng(23)
    for _ in range(30):
        inst = random_instance(rng, max_items=7)
        for coarse in (merge_chains(inst.graph, inst.cluster, 3.0),
                       merge_by_key(inst.graph, [i % 2 for i in range(inst.graph.num_nodes)])):
            sol = dp_solve(coarse, inst.cluster)
            if sol.status is Status.OPTIMAL:
                ev = evaluate(inst.graph, inst.cluster, sol.assignment)
                assert ev.valid and ev.contiguous and ev.max_load == pytest.approx(sol.objective, rel=1e-9)


def test_name_prefix_keys():
    from graphs.model import Node, OpGraph

    g = OpGraph.from_nodes([Node(n, {"g": 1}) for n in ("layer0.q", "layer0.k", "layer1/mlp/up", "head")],
                           [])
    assert name_prefix_keys(g) == ["layer0", "layer0", "layer1", None]


def _inception(workloads):
    return read_workload(os.path.join(workloads, "throughput-inputs/LayerGraphs/inceptionv3_training.json"))


def test_time_limit_is_honoured_with_a_labelled_answer(workloads):
    w = _inception(workloads)
    dp_solve(w.graph, w.cluster, SolveOptions(time_limit=1.0))  # load the kernels: the limit is not the JIT's
    t = time.perf_counter()
    sol = solve(w.graph, w.cluster, SolveOptions(time_limit=3.0))
    took = time.perf_counter() - t
    assert took <= 3.0 * 1.1 + 0.5  # 10%, plus process noise on a shared machine
    assert sol.status is Status.FEASIBLE and sol.assignment is not None and not math.isinf(sol.objective)
    ev = evaluate(w.graph, w.cluster, sol.assignment)
    assert ev.valid and ev.contiguous and sol.gap is not None


def test_interrupt_returns_the_best_placement_so_far(workloads):
    w = _inception(workloads)

    def ctrl_c(frac):
        if frac > 0.2:
            raise KeyboardInterrupt

    for solver in (solve, dp_solve):
        sol = solver(w.graph, w.cluster, SolveOptions(progress=ctrl_c, time_limit=120))
        assert sol.status is Status.FEASIBLE and "interrupted" in sol.message
        ev = evaluate(w.graph, w.cluster, sol.assignment)
        assert ev.valid and ev.contiguous


def test_a_wrong_estimate_still_leaves_time_for_a_good_answer(workloads):
    """Claim the exact DP is nearly free: it starts, cannot finish, and the coarse path still answers
    inside the limit with a valid, refined placement."""
    w = _inception(workloads)
    dp_solve(w.graph, w.cluster, SolveOptions(time_limit=1.0))  # load the kernels: the limit is not the JIT's
    t = time.perf_counter()
    sol = solve(w.graph, w.cluster, SolveOptions(time_limit=12.0, raw={"seconds_per_pair": 1e-12}))
    took = time.perf_counter() - t
    assert took <= 12.0 * 1.1 + 1.0
    assert sol.status in (Status.FEASIBLE, Status.OPTIMAL)
    if sol.stats["path"] != "exact":  # with the lower bounds' pruning the DP may also finish in time
        assert any("stopped at the time limit" in x for x in sol.stats["skipped"])
    ev = evaluate(w.graph, w.cluster, sol.assignment)
    assert ev.valid and ev.contiguous
    assert ev.max_load <= 122.7616162109375 * 1.05  # within 5% of the exact optimum
