"""The exact DP: against brute force on random instances and against the reference results."""

import json
import math
import os

import numba
import numpy as np
import pytest

from graphs.contract import colocation_items, contract
from graphs.errors import InputError
from graphs.evaluate import evaluate
from graphs.ideals import enumerate_ideals
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.reference import read_workload
from solvers.base import SolveOptions, Status
from solvers.dp import solve
from tests.instances import brute_force, canonical_assignments, chain, random_instance


def _check_against_brute_force(inst):
    best = brute_force(inst)
    sol = solve(inst.graph, inst.cluster)
    if math.isinf(best):
        assert sol.status is Status.INFEASIBLE, inst.label
        assert sol.assignment is None
        return "infeasible"
    assert sol.status is Status.OPTIMAL, inst.label
    ev = evaluate(inst.graph, inst.cluster, sol.assignment)
    assert ev.valid and ev.contiguous, (inst.label, ev.problems)
    assert ev.max_load == pytest.approx(best, rel=1e-9, abs=1e-12), inst.label
    assert sol.objective == pytest.approx(ev.max_load, rel=1e-9, abs=1e-12), inst.label
    return "training" if inst.graph.is_training else "inference"


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_brute_force_on_random_instances(seed):
    rng = np.random.default_rng(1000 + seed)
    seen = {"training": 0, "inference": 0, "infeasible": 0}
    for i in range(60):  # 4 x 60 = 240 instances
        inst = random_instance(rng, max_items=5, label=f"seed{seed}-{i}")
        seen[_check_against_brute_force(inst)] += 1
    # the generator must exercise every class of instance
    assert seen["training"] and seen["inference"] and seen["infeasible"]


def test_dp_with_several_device_kinds_and_colocation():
    rng = np.random.default_rng(7)
    for i in range(20):
        inst = random_instance(rng, max_items=5, kinds=3, training=True, label=f"k3-{i}")
        _check_against_brute_force(inst)


def test_chain_splits_evenly():
    inst = chain(4, counts=(2,))
    sol = solve(inst.graph, inst.cluster)
    # two nodes per device: compute 2, plus one send or one receive of 0.5
    assert sol.objective == pytest.approx(2.5)
    assert sorted(np.bincount(sol.assignment).tolist()) == [2, 2]


def test_unsupported_everywhere_is_infeasible_with_reason():
    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0}), Node("weird", {"cpu": 1.0})], [("a", "weird")])
    sol = solve(g, Cluster((DeviceKind("gpu", 2), DeviceKind("cpu", 0))))
    assert sol.status is Status.INFEASIBLE
    assert "weird" in sol.message and "not supported on gpu" in sol.message


def test_node_too_big_for_any_device_is_infeasible_with_reason():
    g = OpGraph.from_nodes([Node("small", {"gpu": 1.0}, memory=1), Node("huge", {"gpu": 1.0}, memory=100)],
                           [("small", "huge")])
    sol = solve(g, Cluster((DeviceKind("gpu", 4, memory=10),)))
    assert sol.status is Status.INFEASIBLE
    assert "huge" in sol.message and "needs 100 bytes" in sol.message


def test_memory_that_fits_per_node_but_not_together():
    g = OpGraph.from_nodes([Node(f"n{i}", {"gpu": 1.0}, memory=6) for i in range(3)],
                           [("n0", "n1"), ("n1", "n2")])
    sol = solve(g, Cluster((DeviceKind("gpu", 1, memory=10),)))
    assert sol.status is Status.INFEASIBLE
    assert "memory" in sol.message


def test_dp_rejects_other_objectives():
    inst = chain(3)
    with pytest.raises(InputError, match="latency"):
        solve(inst.graph, inst.cluster, SolveOptions(objective="latency"))


def test_pruning_does_not_change_the_optimum():
    rng = np.random.default_rng(3)
    for _ in range(30):
        inst = random_instance(rng, max_items=7)
        a = solve(inst.graph, inst.cluster)
        b = solve(inst.graph, inst.cluster, SolveOptions(raw={"prune": False}))
        assert a.status == b.status
        if a.status is Status.OPTIMAL:
            assert a.objective == pytest.approx(b.objective, rel=1e-12)


def test_time_limit_returns_a_labelled_feasible_placement(workloads):
    w = read_workload(os.path.join(workloads, "throughput-inputs/LayerGraphs/gnmt_inference.json"))
    sol = solve(w.graph, w.cluster, SolveOptions(time_limit=0.0))
    assert sol.status is Status.FEASIBLE
    assert sol.gap is not None and sol.gap >= 0 and sol.bound <= sol.objective
    ev = evaluate(w.graph, w.cluster, sol.assignment)
    assert ev.valid and ev.max_load == pytest.approx(sol.objective, rel=1e-9)


# ---------------------------------------------------------------- reference workloads
def _reference():
    from tests.instances import WORKLOADS

    path = os.path.join(WORKLOADS, "reference_results.json")
    if not os.path.exists(path):
        return {}
    return json.load(open(path))["throughput"]


_REF = _reference()
_SLOW = {"LayerGraphs/inceptionv3_inference.json", "LayerGraphs/inceptionv3_training.json"}
_SOLVED = sorted(k for k, v in _REF.items() if v["dp_max_load"] is not None)


@pytest.mark.parametrize("key", [k for k in _SOLVED])
def test_dp_matches_reference_max_load(workloads, key):
    w = read_workload(os.path.join(workloads, key))
    sol = solve(w.graph, w.cluster)
    assert sol.status is Status.OPTIMAL
    ref = _REF[key]["dp_max_load"]
    ev = evaluate(w.graph, w.cluster, sol.assignment)
    assert ev.valid and ev.contiguous
    assert ev.max_load == pytest.approx(ref, rel=1e-9)
    assert sol.objective == pytest.approx(ref, rel=1e-9)
    assert sol.stats["ideals"] == _REF[key]["ideals"]


@pytest.mark.parametrize("key", sorted(k for k in _REF if k.split("/", 1)[1] in _SLOW))
def test_ideal_counts_of_graphs_the_reference_could_not_solve(workloads, key):
    w = read_workload(os.path.join(workloads, key))
    items = contract(w.graph, w.cluster)
    lattice = enumerate_ideals(items.num_classes, items.src, items.dst)
    assert lattice.num_ideals == 36596


_INCEPTION_OPTIMA = {"LayerGraphs/inceptionv3_inference.json": 51.5518636,
                     "LayerGraphs/inceptionv3_training.json": 122.7616162}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_SLOW))
def test_dp_solves_inceptionv3_exactly(workloads, name):
    """The reference ran out of memory here; we solve it exactly (about a minute each)."""
    w = read_workload(os.path.join(workloads, "throughput-inputs", name))
    sol = solve(w.graph, w.cluster)
    assert sol.status is Status.OPTIMAL
    ev = evaluate(w.graph, w.cluster, sol.assignment)
    assert ev.valid and ev.contiguous and ev.max_load == pytest.approx(sol.objective, rel=1e-9)
    # the exact optima (this DP, confirmed by the contiguous IP's bound); the chain heuristic and the
    # PipeDream-style baseline are above them
    assert ev.max_load == pytest.approx(_INCEPTION_OPTIMA[name], rel=1e-9)
    assert ev.max_load < _REF["throughput-inputs/" + name]["pipedream_max_load"]


def test_curve_equals_separate_dp_runs_at_each_device_count():
    from solvers.dp import curve

    rng = np.random.default_rng(5)
    for _ in range(25):
        inst = random_instance(rng, max_items=6)
        c = curve(inst.graph, inst.cluster)
        assert c.kinds == tuple(k.name for k in inst.cluster.kinds)
        for counts, value in c.values.items():
            if sum(counts) == 0:
                assert math.isinf(value)
                continue
            sub = Cluster(tuple(DeviceKind(k.name, n, k.memory, k.pays_communication)
                                for k, n in zip(inst.cluster.kinds, counts)))
            sol = solve(inst.graph, sub)
            expected = sol.objective if sol.status is Status.OPTIMAL else math.inf
            assert value == pytest.approx(expected, rel=1e-9), counts


def test_parallel_layers_give_the_same_table_as_the_serial_kernel(workloads):
    """Ideals of one size are solved on several threads; the DP table must not change."""
    from graphs.ideals import enumerate_ideals
    from solvers.dp import prepare, run_dp

    w = read_workload(os.path.join(workloads, "throughput-inputs/LayerGraphs/inceptionv3_inference.json"))
    prob = prepare(w.graph, w.cluster)
    lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
    assert lattice.num_ideals >= 20_000  # large enough for the parallel kernel
    # a tight bound keeps this quick: ub=3 (6 before) walks 2.8 million pairs instead of 9.2, with the
    # same ideals on the parallel kernel (32589 of 36596) and the same finite table entries: at either
    # bound only the empty ideal's 14 zeros (the optimum is about 51.6), so what tells the kernels apart
    # here is mostly the pairs they walk
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here (NUMBA_NUM_THREADS=1 or one core): no parallel kernel to test")
    one = run_dp(prob, lattice, ub=3.0, threads=1)
    two = run_dp(prob, lattice, ub=3.0, threads=2)
    assert one.threads == 1 and one.parallel_ideals == 0
    # the multi-threaded kernel really ran, on most of the lattice
    assert two.threads == 2 and two.parallel_ideals > lattice.num_ideals // 2
    assert one.pairs == two.pairs and one.pairs > 100_000
    np.testing.assert_array_equal(one.table, two.table)


def test_parallel_layers_fill_the_same_full_table_as_the_serial_kernel(workloads, monkeypatch):
    """The table test above compares nearly empty tables (at its tight bound only the empty ideal's
    entries are finite). Here the whole DP of GNMT training (17,914 ideals, optimum 107.004) on both
    kernels, its 232,883 finite entries included: the size threshold of the parallel kernel (20,000
    ideals, :func:`solvers.dp._thread_count`) is lifted so that it runs on this smaller lattice."""
    from graphs.ideals import enumerate_ideals
    from solvers import dp
    from solvers.dp import prepare, run_dp

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here (NUMBA_NUM_THREADS=1 or one core): no parallel kernel to test")
    w = read_workload(os.path.join(workloads, "throughput-inputs/LayerGraphs/gnmt_training.json"))
    prob = prepare(w.graph, w.cluster)
    lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
    monkeypatch.setattr(dp, "_thread_count", lambda threads, n: max(1, min(int(threads or 1),
                                                                          numba.config.NUMBA_NUM_THREADS)))
    one = run_dp(prob, lattice, threads=1)
    two = run_dp(prob, lattice, threads=2)
    assert one.parallel_ideals == 0 and two.threads == 2 and two.parallel_ideals > lattice.num_ideals // 2
    assert np.isfinite(one.table).sum() > 200_000  # a full table, not the empty ideal's row
    np.testing.assert_array_equal(one.table, two.table)
    assert one.value == two.value == pytest.approx(107.0044140625, rel=1e-9)  # the reference C++ optimum
    assert one.pairs == two.pairs


def test_a_watch_that_says_stop_ends_the_run_incomplete(workloads):
    """run_dp's watch (what auto's trial uses): asked after every chunk, a true answer stops the run as
    the deadline does; a false one changes nothing."""
    from graphs.ideals import enumerate_ideals
    from solvers.dp import prepare, run_dp

    w = read_workload(os.path.join(workloads, "throughput-inputs/LayerGraphs/gnmt_training.json"))
    prob = prepare(w.graph, w.cluster)
    lattice = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
    seen = []
    stopped = run_dp(prob, lattice, ub=120.0, watch=lambda pairs: seen.append(pairs) or True)
    assert not stopped.complete and math.isinf(stopped.value) and len(seen) == 1
    assert stopped.pairs == seen[0]
    full = run_dp(prob, lattice, ub=120.0, watch=lambda pairs: seen.append(pairs) and False)
    plain = run_dp(prob, lattice, ub=120.0)
    assert full.complete and full.value == plain.value and full.pairs == plain.pairs
    assert seen == sorted(seen) and len(seen) > 2


def test_a_dp_value_the_evaluator_disagrees_with_is_never_optimal(monkeypatch):
    """If the DP's model and the evaluator ever disagree (a bug), the answer is the evaluator's value,
    labelled feasible, with a bound that does not come from the DP."""
    import dataclasses

    import solvers.dp as dp_module

    inst = chain(4)
    honest = solve(inst.graph, inst.cluster)
    assert honest.status is Status.OPTIMAL
    real = dp_module.evaluate

    def off_by_one_percent(g, c, a):
        ev = real(g, c, a)
        return dataclasses.replace(ev, max_load=ev.max_load * 1.01)

    monkeypatch.setattr(dp_module, "evaluate", off_by_one_percent)
    sol = solve(inst.graph, inst.cluster)
    assert sol.status is Status.FEASIBLE and "disagrees with the evaluator" in sol.message
    assert sol.objective == pytest.approx(honest.objective * 1.01)
    assert sol.bound <= sol.objective and "model_mismatch" in sol.stats


# ---------------------------------------------------------------- tie-break among optimal placements
def _lex_brute_force(inst):
    """Among valid contiguous placements of minimum max-load (up to round-off): the fewest devices
    used, then the smallest sum of device loads. ``None`` if there is no placement."""
    g, cl = inst.graph, inst.cluster
    cls, C = colocation_items(g)
    found = []
    for items_dev in canonical_assignments(C, cl):
        a = np.asarray(items_dev, dtype=np.int64)[cls]
        ev = evaluate(g, cl, a)
        if ev.valid and ev.contiguous:
            loads = [d.load for d in ev.devices if d.nodes.size]
            found.append((ev.max_load, len(loads), sum(loads)))
    if not found:
        return None
    best = min(f[0] for f in found)
    tied = [f for f in found if f[0] <= best * (1 + 1e-9) + 1e-12]
    fewest = min(f[1] for f in tied)
    return best, fewest, min(f[2] for f in tied if f[1] == fewest)


@pytest.mark.parametrize("seed", range(3))
def test_tie_break_picks_fewest_stages_then_least_total_load(seed):
    rng = np.random.default_rng(4000 + seed)
    checked = ties = 0
    for i in range(50):
        inst = random_instance(rng, max_items=5, label=f"tie{seed}-{i}")
        ref = _lex_brute_force(inst)
        sol = solve(inst.graph, inst.cluster)
        if ref is None:
            assert sol.status is Status.INFEASIBLE, inst.label
            continue
        assert sol.status is Status.OPTIMAL and sol.stats["tie_break"] == "done", inst.label
        ev = evaluate(inst.graph, inst.cluster, sol.assignment)
        loads = [d.load for d in ev.devices if d.nodes.size]
        assert ev.valid and ev.contiguous
        assert ev.max_load == pytest.approx(ref[0], rel=1e-9, abs=1e-12), inst.label
        assert len(loads) == ref[1], inst.label
        assert sum(loads) == pytest.approx(ref[2], rel=1e-9, abs=1e-12), inst.label
        plain = solve(inst.graph, inst.cluster, SolveOptions(raw={"tie_break": False}))
        assert plain.objective == sol.objective  # the max-load itself never changes
        pev = evaluate(inst.graph, inst.cluster, plain.assignment)
        ties += (sum(1 for d in pev.devices if d.nodes.size), sum(d.load for d in pev.devices)) != \
            (len(loads), sum(loads))
        checked += 1
    assert checked >= 30
    assert ties >= 1  # the instances include optima the first pass would have left untidy


def test_on_large_lattices_the_tie_break_keeps_the_fewest_devices(monkeypatch):
    """Above TIE_BREAK_SUM_MAX_IDEALS only the free part of the tie-break runs: still the fewest devices
    among the optima (brute force), the least-sum pass skipped."""
    import solvers.dp as dp_module

    monkeypatch.setattr(dp_module, "TIE_BREAK_SUM_MAX_IDEALS", 0)
    rng = np.random.default_rng(4100)
    checked = 0
    for i in range(50):
        inst = random_instance(rng, max_items=5, label=f"tie-large-{i}")
        ref = _lex_brute_force(inst)
        if ref is None:
            continue
        sol = solve(inst.graph, inst.cluster)
        assert sol.status is Status.OPTIMAL and sol.stats["tie_break"] == "fewest devices", inst.label
        ev = evaluate(inst.graph, inst.cluster, sol.assignment)
        assert ev.valid and ev.contiguous
        assert ev.max_load == pytest.approx(ref[0], rel=1e-9, abs=1e-12), inst.label
        assert sum(1 for d in ev.devices if d.nodes.size) == ref[1], inst.label
        checked += 1
    assert checked >= 30


def test_the_readme_example_on_two_h100s_and_eight_cores_uses_the_fewest_devices(tmp_path):
    """`placement example m.onnx` placed on h100:2,cpu:8: the optimum is tied by placements that put
    single operators on CPU cores between the accelerators (six stages before the tie-break); the DP
    returns one on the fewest devices, with the same max-load."""
    import onnx

    from graphs.onnx_workload import onnx_workload
    from graphs.transformer import bert

    path = tmp_path / "m.onnx"
    onnx.save(bert(6, hidden=512, heads=8, seq_len=128), path)  # what `placement example` writes
    w = onnx_workload(path, "h100:2,cpu:8")
    sol = solve(w.graph, w.cluster)
    plain = solve(w.graph, w.cluster, SolveOptions(raw={"tie_break": False}))
    assert sol.status is Status.OPTIMAL and sol.objective == plain.objective
    used = [d for d in evaluate(w.graph, w.cluster, sol.assignment).devices if d.nodes.size]
    plain_used = [d for d in evaluate(w.graph, w.cluster, plain.assignment).devices if d.nodes.size]
    assert len(used) < len(plain_used)  # without the tie-break: the arbitrary optimum the issue reported
    assert sum(d.name.startswith("cpu") for d in used) <= 1
    # fewest devices: no allocation of one device fewer reaches the optimum
    for h100 in range(3):
        cpus = len(used) - 1 - h100
        if cpus < 0:
            continue
        sub = onnx_workload(path, ",".join(f"{k}:{n}" for k, n in (("h100", h100), ("cpu", cpus)) if n))
        assert solve(sub.graph, sub.cluster).objective > sol.objective * (1 + 1e-12)


@pytest.mark.parametrize("training", [False, True])
def test_stage_communication_by_adding_items_equals_the_border_pass(training):
    """The walk updates a stage's communication one item at a time (``_add_item``); on every pair of
    ideals of random instances (backward edges that point to earlier items included) it equals the
    direct pass over both borders (``_stage_comm``)."""
    from solvers import dp as dpm

    rng = np.random.default_rng(11 if training else 12)
    pairs = 0
    for _ in range(25):
        inst = random_instance(rng, max_items=7, training=training)
        try:
            prob = dpm.prepare(inst.graph, inst.cluster)
        except Exception:  # infeasible instances have no pairs to check
            continue
        lat = enumerate_ideals(prob.items.num_classes, prob.items.src, prob.items.dst)
        bd_ptr, bd_idx = dpm._boundaries(lat.bits, prob.cn_class, prob.cn_succ)
        down_item = dpm._edge_items(lat)
        own_ptr, own_idx, pred_ptr, pred_idx = dpm._item_nodes(prob)
        sw_ptr, sw_word, sw_mask = dpm._sparse_words(prob.cn_succ)
        T = prob.counts.size
        for i in range(1, lat.num_ideals):
            in_bi = np.zeros(prob.cn_class.size, np.bool_)
            in_bi[bd_idx[bd_ptr[i]:bd_ptr[i + 1]]] = True
            comm = {i: np.zeros(T)}
            queue = [i]
            while queue:
                j = queue.pop(0)
                sbits = lat.bits[i] & ~lat.bits[j]
                for e in range(lat.down_ptr[j], lat.down_ptr[j + 1]):
                    k = int(lat.down_idx[e])
                    if k in comm:
                        continue
                    c = comm[j].copy()
                    dpm._add_item(down_item[e], sbits, prob.cn_class, prob.cn_cost, sw_ptr, sw_word, sw_mask,
                                  own_ptr, own_idx, pred_ptr, pred_idx, c)
                    direct = np.zeros(T)
                    dpm._stage_comm(i, k, lat.bits, prob.cn_class, prob.cn_cost, prob.cn_succ, bd_ptr, bd_idx,
                                    in_bi, np.empty_like(sbits), direct)
                    np.testing.assert_allclose(c, direct, rtol=1e-12, atol=1e-12)
                    comm[k] = c
                    queue.append(k)
                    pairs += 1
    assert pairs > 200


def test_a_ctrl_c_the_dp_takes_anywhere_reaches_its_caller(monkeypatch):
    """The DP takes a Ctrl-C between kernel chunks (solvers.dp._sweep) and returns what it has, saying
    "interrupted": its callers (the serving sweep, the integer programs' starts) stop on that. Taken in
    the runs over a few topological orders (before the lattice) or in the tie-break pass, it was lost:
    the DP went on to the whole lattice, or returned its optimum without a word, and the command ran on
    (past the 2 s a Ctrl-C promises). A chain of 6 on 2 GPUs: 2 order runs, the lattice, its tie-break."""
    from solvers import dp

    inst = chain(6)
    real, calls = dp._sweep, []

    def sweep(*args, **kw):
        calls.append(None)
        if len(calls) == at:  # what _sweep returns when the Ctrl-C lands in its first chunk
            return 0, 0, False, True
        return real(*args, **kw)

    monkeypatch.setattr(dp, "_sweep", sweep)
    at = 0
    whole = solve(inst.graph, inst.cluster)
    n = len(calls)
    assert whole.status is Status.OPTIMAL and not whole.interrupted and n == 4, n
    for at in range(1, n + 1):
        calls.clear()
        sol = solve(inst.graph, inst.cluster)
        assert sol.interrupted, (at, sol.message)
        if at <= 2:  # an order's run: nothing after it (the lattice neither)
            assert len(calls) == at and sol.status is not Status.OPTIMAL, (at, sol.status)
        elif at == 3:  # the lattice's first pass: the orders' best, not proven
            assert sol.status is Status.FEASIBLE
        else:  # the tie-break pass: the first pass's optimum stands
            assert sol.status is Status.OPTIMAL and sol.objective == pytest.approx(whole.objective)
