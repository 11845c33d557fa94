"""Throughput integer programs (solvers.ip): against the DP, brute force and the evaluator."""

import _thread
import itertools
import json
import math
import os
import threading
import time
import types

import numpy as np
import pytest

from graphs.contract import colocation_items, contract
from graphs.errors import InputError
from graphs.evaluate import evaluate
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.reference import read_workload
from solvers import _milp, dp, ip
from solvers.base import BOUND_TOLERANCE_REL, SolveOptions, Status, check_bound
from solvers.registry import get_solver
from tests.instances import brute_force, canonical_assignments, random_instance

# three ways to start: none at all (the model alone), the greedy chains only (bound fixing from a
# suboptimal placement), and the DP's optimum (the default)
MODES = [{"warm_start": False}, {"dp_warm_start": False}, {}]


def _check_value(sol, graph, cluster, *, contiguous):
    """The reported value is the evaluator's on the returned placement, which is valid."""
    ev = evaluate(graph, cluster, sol.assignment)
    assert ev.valid, ev.problems
    if contiguous:
        assert ev.contiguous
    assert sol.objective == pytest.approx(ev.max_load, rel=1e-12, abs=1e-12)
    if sol.status is Status.OPTIMAL:
        assert sol.bound is not None and sol.gap is not None and sol.gap <= 1e-4 + BOUND_TOLERANCE_REL
    return ev


@pytest.mark.parametrize("seed", range(4))
def test_contiguous_ip_equals_dp_and_noncontiguous_is_not_worse(seed):
    rng = np.random.default_rng(3000 + seed)
    seen = {"training": 0, "inference": 0, "colocation": 0, "memory": 0, "infeasible": 0}
    for i in range(30):  # 4 x 30 = 120 instances
        inst = random_instance(rng, max_items=5, label=f"ip{seed}-{i}")
        g, cl = inst.graph, inst.cluster
        ref = dp.solve(g, cl)
        sol = ip.solve(g, cl, SolveOptions(raw=MODES[i % 3]))
        free = ip.solve_noncontiguous(g, cl, SolveOptions(raw=MODES[i % 3]))
        if ref.status is Status.INFEASIBLE:
            seen["infeasible"] += 1
            assert sol.status is Status.INFEASIBLE and sol.assignment is None, inst.label
            if free.assignment is not None:  # a non-contiguous placement may still fit the memory
                _check_value(free, g, cl, contiguous=False)
            continue
        assert sol.status is Status.OPTIMAL, (inst.label, sol.message)
        _check_value(sol, g, cl, contiguous=True)
        assert sol.objective == pytest.approx(ref.objective, rel=1e-9, abs=1e-12), inst.label
        assert free.status is Status.OPTIMAL, (inst.label, free.message)
        _check_value(free, g, cl, contiguous=False)
        assert free.objective <= sol.objective + 1e-9, inst.label
        seen["training" if g.is_training else "inference"] += 1
        seen["colocation"] += bool((np.bincount(colocation_items(g)[0]) > 1).any())
        seen["memory"] += any(k.memory is not None for k in cl.kinds)
    assert all(seen.values()), seen


def test_noncontiguous_ip_equals_brute_force():
    rng = np.random.default_rng(77)
    for i in range(36):
        inst = random_instance(rng, max_items=4, label=f"free{i}")
        best = brute_force(inst, contiguous=False)
        # both formulations: with and without the explicit symmetry breaking (off by default)
        raw = {"warm_start": i % 2 == 0, "symmetry": i % 3 == 0}
        sol = ip.solve_noncontiguous(inst.graph, inst.cluster, SolveOptions(raw=raw))
        if math.isinf(best):
            assert sol.status is Status.INFEASIBLE, inst.label
            continue
        assert sol.status is Status.OPTIMAL, inst.label
        assert sol.objective == pytest.approx(best, rel=1e-9, abs=1e-12), inst.label


def _sandwich():
    # x -> y -> z on two devices: contiguously the best is {x, y} | {z} (load 3); {x, z} | {y} is 2
    nodes = [Node("x", {"gpu": 1.0}), Node("y", {"gpu": 2.0}), Node("z", {"gpu": 1.0})]
    return OpGraph.from_nodes(nodes, [("x", "y"), ("y", "z")]), Cluster((DeviceKind("gpu", 2),))


def test_noncontiguous_strictly_better_on_a_constructed_case():
    g, cl = _sandwich()
    contig = ip.solve(g, cl)
    free = ip.solve_noncontiguous(g, cl)
    assert contig.status is Status.OPTIMAL and contig.objective == pytest.approx(3.0)
    assert free.status is Status.OPTIMAL and free.objective == pytest.approx(2.0)
    ev = _check_value(free, g, cl, contiguous=False)
    assert not ev.contiguous
    assert free.assignment[0] == free.assignment[2] != free.assignment[1]


def test_warm_start_vectors_satisfy_the_models():
    """The start handed to the MIP solver (from the DP's placement) is a feasible point of the model,
    and decoding it gives back an equivalent placement."""
    rng = np.random.default_rng(5)
    checked = 0
    for i in range(30):
        inst = random_instance(rng, max_items=5, label=f"ws{i}")
        g, cl = inst.graph, inst.cluster
        ref = dp.solve(g, cl)
        if ref.assignment is None:
            continue
        for model in (ip._ContigModel(g, cl, contract(g, cl), "max-load"),
                      ip._FreeModel(g, cl, "max-load")):
            v = model.start_vector(ref.assignment)
            assert v is not None, inst.label
            assert model.m.check(v) == [], inst.label
            back = model.decode(v)
            assert evaluate(g, cl, back).max_load == pytest.approx(ref.objective, rel=1e-12), inst.label
        checked += 1
    assert checked >= 10


def _split_brute_force(g, cl, contiguous):
    cls, C = colocation_items(g)
    best = math.inf
    for items_dev in canonical_assignments(C, cl):
        a = np.asarray(items_dev, np.int64)[cls]
        ev = evaluate(g, cl, a)
        if ev.valid and (ev.contiguous or not contiguous):
            best = min(best, ip.split_max(g, cl, a))
    return best


def test_split_max_objective_equals_brute_force():
    rng = np.random.default_rng(11)
    done = 0
    for i in range(20):
        inst = random_instance(rng, max_items=4, training=True, label=f"split{i}")
        g, cl = inst.graph, inst.cluster
        for solve, contiguous in ((ip.solve, True), (ip.solve_noncontiguous, False)):
            best = _split_brute_force(g, cl, contiguous)
            sol = solve(g, cl, SolveOptions(objective="split-max"))
            if math.isinf(best):
                assert sol.status is Status.INFEASIBLE, inst.label
                continue
            assert sol.status is Status.OPTIMAL, (inst.label, sol.message)
            assert sol.objective == pytest.approx(best, rel=1e-9, abs=1e-12), inst.label
            assert sol.objective == pytest.approx(ip.split_max(g, cl, sol.assignment), rel=1e-12)
            done += 1
    assert done >= 10
    with pytest.raises(InputError):
        ip.solve(*_sandwich(), SolveOptions(objective="split-max"))


def test_split_loads_add_up_to_the_evaluators_loads():
    rng = np.random.default_rng(3)
    for _ in range(20):
        inst = random_instance(rng, max_items=5, training=True)
        g, cl = inst.graph, inst.cluster
        a = rng.integers(0, cl.num_devices, size=g.num_nodes)
        f, b = ip.split_loads(g, cl, a)
        ev = evaluate(g, cl, a)
        loads = np.array([d.load for d in ev.devices])
        ok = np.isfinite(loads)
        assert np.allclose((f + b)[ok], loads[ok])


def _hard_instance(n=40, devices=4, seed=0):
    rng = np.random.default_rng(seed)
    edges = [(u, v) for v in range(n) for u in range(max(0, v - 6), v) if rng.random() < 0.4]
    g = OpGraph.build(names=[f"n{i}" for i in range(n)], kinds=["gpu"], compute=rng.uniform(1, 10, (1, n)),
                      comm=rng.uniform(0.5, 3, (1, n)), memory=np.zeros(n), edges=edges)
    return g, Cluster((DeviceKind("gpu", devices),))


@pytest.mark.parametrize("backend", ["highs", "pulp"])
def test_time_limit_returns_a_feasible_placement_with_an_honest_gap(backend):
    if backend == "pulp":
        pytest.importorskip("pulp")
    g, cl = _hard_instance()
    sol = ip.solve_noncontiguous(g, cl, SolveOptions(time_limit=1.0, backend=backend))
    assert sol.status is Status.FEASIBLE, sol.message
    assert "time limit" in sol.message and sol.stats["mip_status"] == _milp.TIME_LIMIT
    _check_value(sol, g, cl, contiguous=False)
    assert sol.bound is not None and 0 < sol.bound < sol.objective
    assert sol.gap == pytest.approx((sol.objective - sol.bound) / sol.objective)
    assert sol.gap > 1e-4


def test_pulp_backend_agrees_with_highs():
    pytest.importorskip("pulp")
    rng = np.random.default_rng(21)
    done = 0
    for i in range(12):
        inst = random_instance(rng, max_items=4, label=f"pulp{i}")
        g, cl = inst.graph, inst.cluster
        for solve in (ip.solve, ip.solve_noncontiguous):
            a = solve(g, cl, SolveOptions(raw={"warm_start": False}))
            b = solve(g, cl, SolveOptions(backend="pulp", raw={"warm_start": False}))
            assert a.status is b.status, inst.label
            if a.status is Status.OPTIMAL:
                assert b.objective == pytest.approx(a.objective, rel=1e-6), inst.label
                _check_value(b, g, cl, contiguous=solve is ip.solve)
                done += 1
    assert done >= 5


def test_pulp_bound_is_read_from_the_solver_not_its_summary():
    # PuLP's summary says "Optimal" for a time-limited CBC incumbent; the bound comes from CBC's log
    log = ("Result - Stopped on time limit\n\nObjective value:                72.96341556\n"
           "Lower bound:                    61.566\nGap:                            0.19\n")
    assert _milp._pulp_bound(None, "PULP_CBC_CMD", log, 72.96) == pytest.approx(61.566)
    # "Optimal solution found" proves only the requested gap: no bound from the log, the caller derives it
    assert _milp._pulp_bound(None, "PULP_CBC_CMD", "Result - Optimal solution found\n", 5.0) is None
    assert _milp._pulp_bound(None, "PULP_CBC_CMD", "no summary", 5.0) is None


def test_pulp_optimal_within_a_loose_gap_claims_only_that_gap():
    pytest.importorskip("pulp")
    g, cl = _hard_instance(12, 3, seed=4)
    exact = ip.solve(g, cl, SolveOptions(raw={"warm_start": False}))
    assert exact.status is Status.OPTIMAL
    res = _milp.solve_mip(ip._ContigModel(g, cl, contract(g, cl), "max-load").m, backend="pulp", gap=0.5)
    assert res.status == _milp.OPTIMAL
    assert res.bound <= exact.objective * (1 + 1e-9)  # never the incumbent passed off as a bound
    assert res.bound >= res.objective * (1 - 0.5) - 1e-9


def test_check_bound_trusts_round_off_and_nothing_more():
    c = check_bound(10.0 * (1 + 1e-7), 10.0)
    assert c.consistent and c.bound == 10.0 and c.gap == 0.0
    c = check_bound(9.0, 10.0, fallback=8.0)
    assert c.consistent and c.bound == 9.0 and c.gap == pytest.approx(0.1)
    c = check_bound(10.5, 10.0, fallback=8.0)  # a model that disagrees with the evaluator
    assert not c.consistent and c.bound == 8.0 and c.gap == pytest.approx(0.2) and c.claimed == 10.5
    c = check_bound(10.5, 10.0)
    assert not c.consistent and c.bound is None and c.gap is None
    c = check_bound(None, 10.0, fallback=4.0)
    assert c.consistent and c.bound == 4.0 and c.gap == pytest.approx(0.6)


@pytest.mark.parametrize("solver", ["ip", "ip-noncontig"])
def test_a_model_that_disagrees_with_the_evaluator_is_never_optimal(monkeypatch, solver):
    """Pretend the evaluator finds every placement 10% cheaper than the program's model: the program's
    bound then lies above the evaluated objective, which must not read as a closed gap."""
    g, cl = _hard_instance(10, 3, seed=2)
    honest = get_solver(solver)(g, cl)
    assert honest.status is Status.OPTIMAL and "bound_mismatch" not in honest.stats
    real = ip._objective_value
    monkeypatch.setattr(ip, "_objective_value", lambda *a: 0.9 * real(*a))
    sol = get_solver(solver)(g, cl)
    assert sol.status is Status.FEASIBLE and "disagrees with the evaluator" in sol.message
    assert sol.stats["bound_mismatch"] > sol.objective
    assert sol.bound is not None and sol.bound <= sol.objective and sol.gap > 0


def test_milp_model_blocks():
    m = _milp.MilpModel()
    x = m.add_cols(2, ub=1, integer=True, cost=[-1.0, -2.0])
    m.add_rows([-np.inf], [1.0], [0, 0], x, [1.0, 1.0])
    res = _milp.solve_mip(m)
    assert res.status == _milp.OPTIMAL and res.objective == pytest.approx(-2.0)
    assert m.check(res.x) == [] and m.check(np.array([1.0, 1.0])) != []
    m.tighten(x[1:], ub=0.0)
    assert _milp.solve_mip(m).objective == pytest.approx(-1.0)
    with pytest.raises(InputError):
        _milp.solve_mip(m, backend="nope")


def test_infeasible_and_bad_options():
    nodes = [Node("a", {"gpu": 1.0}, memory=5.0), Node("b", {"gpu": 1.0}, memory=5.0, colocation=1),
             Node("c", {"gpu": 1.0}, memory=5.0, colocation=1)]
    g = OpGraph.from_nodes(nodes, [("a", "b"), ("b", "c")])
    cl = Cluster((DeviceKind("gpu", 3, 6.0),))
    for solve in (ip.solve, ip.solve_noncontiguous):
        sol = solve(g, cl)
        assert sol.status is Status.INFEASIBLE and sol.assignment is None and sol.message
    with pytest.raises(InputError):
        ip.solve(*_sandwich(), SolveOptions(backend="gurobi-direct"))
    with pytest.raises(InputError):
        ip.solve(*_sandwich(), SolveOptions(objective="throughput"))
    with pytest.raises(InputError):
        ip.solve(*_sandwich(), SolveOptions(warm_start=[0, 1]))


def test_given_warm_start_is_used_and_registry_names():
    g, cl = _sandwich()
    sol = get_solver("ip-noncontig")(g, cl, SolveOptions(warm_start=np.array([0, 1, 0])))
    assert sol.stats["warm_start"] == "given" and sol.objective == pytest.approx(2.0)
    assert get_solver("ip") is ip.solve


def test_reference_bert24_inference(workloads):
    w = read_workload(os.path.join(workloads, "throughput-inputs", "LayerGraphs", "bert24_inference.json"))
    with open(os.path.join(workloads, "reference_results.json")) as f:
        ref = json.load(f)["throughput"]["throughput-inputs/LayerGraphs/bert24_inference.json"]
    sol = ip.solve(w.graph, w.cluster, SolveOptions(time_limit=120))
    assert sol.status is Status.OPTIMAL
    assert sol.objective == pytest.approx(ref["dp_max_load"], rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert24_training", "resnet50_inference", "gnmt_inference", "gnmt_training"])
def test_reference_layer_graphs_proven_optimal(workloads, name):
    key = f"throughput-inputs/LayerGraphs/{name}.json"
    w = read_workload(os.path.join(workloads, key))
    with open(os.path.join(workloads, "reference_results.json")) as f:
        ref = json.load(f)["throughput"][key]
    sol = ip.solve(w.graph, w.cluster, SolveOptions(time_limit=600))
    assert sol.status is Status.OPTIMAL
    assert sol.objective == pytest.approx(ref["dp_max_load"], rel=1e-9)


@pytest.mark.slow
def test_noncontiguous_beats_the_reference_local_search_on_gnmt_training(workloads):
    w = read_workload(os.path.join(workloads, "throughput-inputs", "LayerGraphs", "gnmt_training.json"))
    sol = ip.solve_noncontiguous(w.graph, w.cluster, SolveOptions(time_limit=120))
    _check_value(sol, w.graph, w.cluster, contiguous=False)
    assert sol.objective < 90.95  # the reference's local search (which ignores memory)


def test_canonical_relabelling_keeps_loads():
    g, cl = _hard_instance(12, 3, seed=1)
    model = ip._FreeModel(g, cl, "max-load")
    for a in itertools.islice(itertools.product(range(3), repeat=12), 0, 400, 37):
        a = np.array(a)
        c = model.canonical(a)[model.cls]
        assert evaluate(g, cl, c).max_load == pytest.approx(evaluate(g, cl, a).max_load)


def test_thread_count_can_change_between_solves():
    # HiGHS keeps one thread pool per process; asking for another size later must still work
    g, cl = _sandwich()
    for threads in (2, 1, None, 2):
        sol = ip.solve(g, cl, SolveOptions(threads=threads, raw={"warm_start": False}))
        assert sol.status is Status.OPTIMAL and sol.objective == pytest.approx(3.0), threads


def test_noncontiguous_is_never_worse_than_the_baselines_it_is_compared_with():
    """The program's start, and so its answer, is at most the partitioner's and the local-search
    baseline's values (same seed): both are among its starts."""
    from solvers import local_search, partition

    rng = np.random.default_rng(404)
    checked = 0
    for i in range(6):
        inst = random_instance(rng, max_items=14, label=f"base{i}")
        g, cl = inst.graph, inst.cluster
        opts = SolveOptions(time_limit=4.0, seed=i, raw={"dp_warm_start": False})
        sol = ip.solve_noncontiguous(g, cl, opts)
        if sol.assignment is None:
            continue
        _check_value(sol, g, cl, contiguous=False)
        assert sol.stats["local_search_restarts"] >= local_search.DEFAULT_RESTARTS, inst.label
        for base in (partition.solve(g, cl, SolveOptions(seed=i)),
                     local_search.solve(g, cl, SolveOptions(seed=i))):
            if base.assignment is not None:
                # the start alone (before the MIP, which may close the gap anyway) is at most theirs
                assert sol.stats["warm_start_value"] <= base.objective * (1 + 1e-9) + 1e-12, \
                    (inst.label, base.solver)
                assert sol.objective <= base.objective * (1 + 1e-9) + 1e-12, (inst.label, base.solver)
        if sol.status is not Status.OPTIMAL:
            assert sol.gap is not None and sol.bound is not None and sol.bound <= sol.objective
        checked += 1
    assert checked >= 4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["LayerGraphs/gnmt_training", "LayerGraphs/inceptionv3_training",
                                  "OperatorGraphs/bert_l-12_inference"])
def test_noncontiguous_at_the_suites_limit_beats_the_baselines(workloads, name):
    """Issue 14: within the suite's 30 s the program is at most the partitioner's and the local-search
    baseline's values on the workloads where either used to beat it."""
    from solvers import local_search, partition

    w = read_workload(os.path.join(workloads, "throughput-inputs", f"{name}.json"))
    sol = ip.solve_noncontiguous(w.graph, w.cluster, SolveOptions(time_limit=30, threads=1))
    _check_value(sol, w.graph, w.cluster, contiguous=False)
    for base in (partition.solve(w.graph, w.cluster), local_search.solve(w.graph, w.cluster)):
        assert sol.objective <= base.objective * (1 + 1e-9), (base.solver, base.objective)
    assert sol.bound is not None and sol.bound <= sol.objective


class _StuckSolver:
    """A stand-in for a HiGHS that ignores cancelSolve (as 1.16 can, deep in a sub-MIP's presolve)."""

    def __init__(self):
        self.HandleUserInterrupt = False
        self.cancelled = 0
        self.release = threading.Event()

    def run(self):
        self.release.wait(30)

    def cancelSolve(self):
        self.cancelled += 1


@pytest.mark.parametrize("ctrl_c", [False, True])
def test_a_solver_that_ignores_cancel_is_abandoned_after_the_grace(monkeypatch, ctrl_c):
    import signal

    monkeypatch.setattr(_milp, "_ABANDONED", [])
    # the simulated Ctrl-C must raise KeyboardInterrupt here, whatever handler the process has
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    h = _StuckSolver()
    t0 = time.perf_counter()
    deadline = None if ctrl_c else t0 + 0.2
    if ctrl_c:
        threading.Timer(0.2, _thread.interrupt_main).start()
    try:
        interrupted, overran, abandoned = _milp._run_interruptible(h, deadline, grace=0.3)
        took = time.perf_counter() - t0
        assert (interrupted, overran) == ((True, False) if ctrl_c else (False, True)), (took, old)
        assert abandoned and h.cancelled >= 1, (took, h.cancelled)
        assert [x for x, _ in _milp._ABANDONED] == [h]
        assert _milp._abandoned_running()
        assert took < 0.5 + 1.0  # cancelled, then the grace, not forever
    finally:
        h.release.set()
        signal.signal(signal.SIGINT, old)


def test_ctrl_c_as_the_search_finishes_cannot_break_the_wait(monkeypatch):
    """A KeyboardInterrupt inside Condition.wait's lock re-acquire (the search finishing at that moment
    holds the lock) escapes as "RuntimeError: release unlocked lock" (CPython gh-118433); CI once died
    of it in std::terminate, HiGHS still running. The wait uses no Event (no Condition); whatever else
    escapes it leaves the search cancelled and kept alive as an abandoned one; and it returns as soon
    as the search ends (a 50 ms sleep per poll made every MILP solve 50 ms longer)."""

    class BrokenEvent(threading.Event):
        def wait(self, timeout=None):
            raise RuntimeError("release unlocked lock")

    class FailingLock:
        """A lock whose timed acquire fails as an interrupted Condition's did."""

        def __init__(self):
            self._lock = threading.Lock()

        def acquire(self, blocking=True, timeout=-1):
            if timeout != -1:
                raise RuntimeError("something else")
            return self._lock.acquire(blocking, timeout)

        def release(self):
            self._lock.release()

    def module(lock):
        return types.SimpleNamespace(Event=BrokenEvent, Thread=threading.Thread, Lock=lock)

    monkeypatch.setattr(_milp, "_ABANDONED", [])
    monkeypatch.setattr(_milp, "threading", module(threading.Lock))
    h = _StuckSolver()
    threading.Timer(0.2, h.release.set).start()
    assert _milp._run_interruptible(h, None, grace=0.3) == (False, False, False)
    took = []
    for _ in range(20):  # a search of no time returns at once
        quick = _StuckSolver()
        quick.release.set()
        t0 = time.perf_counter()
        _milp._run_interruptible(quick, None)
        took.append(time.perf_counter() - t0)
    assert sorted(took)[10] < 0.04, took

    monkeypatch.setattr(_milp, "threading", module(FailingLock))
    h = _StuckSolver()
    try:
        with pytest.raises(RuntimeError, match="something else"):
            _milp._run_interruptible(h, None, grace=0.3)
        assert h.cancelled == 1 and [x for x, _ in _milp._ABANDONED] == [h]
    finally:
        h.release.set()


def _market_split(rng, m=4, n=40):
    """A market-split MIP (min total slack of m equal-split rows over n binaries): incumbents come at
    once, the proof takes HiGHS far longer than this test waits."""
    model = _milp.MilpModel()
    x = model.add_cols(n, ub=1, integer=True)
    s = model.add_cols(2 * m, ub=np.inf, cost=1.0)
    a = rng.integers(0, 100, size=(m, n))
    rows = np.concatenate([np.repeat(np.arange(m), n), np.arange(m), np.arange(m)])
    cols = np.concatenate([np.tile(x, m), s[:m], s[m:]])
    vals = np.concatenate([a.ravel(), np.ones(m), -np.ones(m)])
    rhs = a.sum(axis=1) // 2
    model.add_rows(rhs, rhs, rows, cols, vals)
    return model


def test_highs_that_misses_its_limits_returns_the_best_it_reported(monkeypatch):
    """HiGHS made deaf to its time limit and to cancelSolve: the search is abandoned shortly after the
    limit, and the best solution and bound its callbacks reported come back, honestly labelled."""
    import highspy

    real_cancel = highspy.Highs.cancelSolve
    monkeypatch.setattr(highspy.Highs, "cancelSolve", lambda self: None)
    monkeypatch.setattr(_milp, "_HIGHS_ABANDON", 0.5)
    monkeypatch.setattr(_milp, "_ABANDONED", [])
    model = _market_split(np.random.default_rng(3))
    t0 = time.perf_counter()
    try:
        res = _milp.solve_mip(model, time_limit=1.0, threads=1,
                              raw={"highs_options": {"time_limit": 1e6}})
        took = time.perf_counter() - t0
        # another solve in the same process while that search still runs (highspy's own solve thread
        # would refuse: its lock is shared by every Highs object)
        assert _milp._abandoned_running()
        small = _milp.MilpModel()
        x = small.add_cols(2, ub=1, integer=True, cost=[-1.0, -2.0])
        small.add_rows([-np.inf], [1.0], [0, 0], x, [1.0, 1.0])
        again = _milp.solve_mip(small, threads=2)
        assert again.status == _milp.OPTIMAL and again.objective == pytest.approx(-2.0)
    finally:
        for h, thread in _milp._ABANDONED:  # stop the abandoned search, so that it ends with the test
            real_cancel(h)
            thread.join(30)
    assert res.stats.get("abandoned") and len(_milp._ABANDONED) == 1
    assert took < 1.0 + 0.1 + 0.5 + 2.0
    assert res.status == _milp.TIME_LIMIT and "abandoned" in res.message
    assert res.x is not None and model.check(res.x) == []
    _, _, cost, *_ = model.arrays()
    assert res.objective == pytest.approx(float(cost @ res.x), abs=1e-6)
    assert res.bound is None or res.bound <= res.objective + 1e-6
