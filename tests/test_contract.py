"""Contraction (colocation, cycles, zero-cost leaves) and the ideal lattice."""

import itertools

import numpy as np
import pytest

from graphs.contract import contract
from graphs.errors import InfeasibleError
from graphs.ideals import chain_ideals, count_ideal_pairs, enumerate_ideals
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from solvers.dp import prepare, run_dp, solve
from tests.instances import random_instance


def test_colocation_that_closes_a_cycle_is_fused():
    g = OpGraph.from_nodes(
        [Node("a", {"g": 1}, colocation=1), Node("b", {"g": 1}), Node("c", {"g": 1}, colocation=1),
         Node("d", {"g": 1})],
        [("a", "b"), ("b", "c"), ("c", "d")])
    cg = contract(g, merge_zero_cost=False)
    assert cg.num_classes == 2
    assert len(set(cg.node_class[:3].tolist())) == 1 and cg.node_class[3] != cg.node_class[0]


def test_backward_only_node_gets_a_stand_in_ordered_by_mirrored_edges():
    # f0 -> f1; gradients g1 -> g0; 'loss' is backward-only and feeds g1 (its mirror: f1 -> loss)
    g = OpGraph.from_nodes(
        [Node("f0", {"g": 1}, colocation=0), Node("f1", {"g": 1}, colocation=1),
         Node("g0", {"g": 1}, backward=True, colocation=0), Node("g1", {"g": 1}, backward=True, colocation=1),
         Node("loss", {"g": 1}, backward=True)],
        [("f0", "f1"), ("f1", "loss"), ("loss", "g1"), ("g1", "g0")])
    cg = contract(g, merge_zero_cost=False)
    assert cg.num_classes == 3
    c = cg.node_class
    assert c[0] < c[1] < c[4]  # items are numbered topologically: f0, f1, then the stand-in
    assert {(int(s), int(d)) for s, d in zip(cg.src, cg.dst)} == {(c[0], c[1]), (c[1], c[4])}


def _zero_leaf_graph(memory):
    # 'inp' costs nothing and touches only 'x': it can always go where 'x' goes
    return OpGraph.from_nodes(
        [Node("inp", {"g": 0.0}, memory=memory, comm=3.0), Node("x", {"g": 2.0}, comm=1.0),
         Node("y", {"g": 2.0})],
        [("inp", "x"), ("x", "y")])


def test_zero_cost_leaf_is_merged_when_memory_cannot_bind():
    g = _zero_leaf_graph(memory=5.0)
    assert contract(g, Cluster((DeviceKind("g", 2),))).merged_zero_cost == 1
    # memory binds (total 5 > capacity 4) and the leaf holds memory: keep it apart
    assert contract(g, Cluster((DeviceKind("g", 2, memory=4.0),))).merged_zero_cost == 0
    # a leaf that holds no memory is merged even then
    assert contract(_zero_leaf_graph(0.0), Cluster((DeviceKind("g", 2, memory=4.0),))).merged_zero_cost == 1


def test_zero_cost_merge_keeps_the_optimum():
    rng = np.random.default_rng(11)
    for _ in range(40):
        inst = random_instance(rng, max_items=7)
        a = solve(inst.graph, inst.cluster)
        items = contract(inst.graph, inst.cluster, merge_zero_cost=False)
        try:
            prob = prepare(inst.graph, inst.cluster, items=items)
        except InfeasibleError:
            assert a.status.value == "infeasible"
            continue
        run = run_dp(prob, enumerate_ideals(items.num_classes, items.src, items.dst))
        if a.status.value == "optimal":
            assert run.value == pytest.approx(a.objective, rel=1e-12)
        else:
            assert np.isinf(run.value)


def _brute_ideals(C, edges):
    out = []
    for mask in range(1 << C):
        if all(not (mask >> d & 1) or (mask >> s & 1) for s, d in edges):
            out.append(mask)
    return out


def test_ideals_and_pairs_match_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(30):
        C = int(rng.integers(1, 9))
        edges = [(u, v) for v in range(C) for u in range(v) if rng.random() < 0.3]
        s = np.array([e[0] for e in edges], dtype=np.int64)
        d = np.array([e[1] for e in edges], dtype=np.int64)
        lat = enumerate_ideals(C, s, d)
        got = sorted(int(sum(1 << int(i) for i in lat.members(k))) for k in range(lat.num_ideals))
        want = _brute_ideals(C, edges)
        assert got == sorted(want)
        pairs = sum(1 for a, b in itertools.product(want, want) if a & b == a)
        assert count_ideal_pairs(lat) == pairs
        # a sub-ideal always has a smaller number than its super-ideals
        for k in range(lat.num_ideals):
            assert all(j < k for j in lat.down_idx[lat.down_ptr[k]:lat.down_ptr[k + 1]])


def test_chain_ideals_are_prefixes():
    lat = chain_ideals(4, np.array([2, 0, 1, 3]))
    assert [lat.members(i).tolist() for i in range(5)] == [[], [2], [0, 2], [0, 1, 2], [0, 1, 2, 3]]


def test_too_many_ideals_is_a_clear_error():
    from graphs.errors import ProblemTooLargeError

    with pytest.raises(ProblemTooLargeError, match="more than 100 ideals"):
        enumerate_ideals(12, np.zeros(0, np.int64), np.zeros(0, np.int64), max_ideals=100)
