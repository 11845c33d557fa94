"""The latency evaluator (graphs.latency) on hand-made graphs whose schedules are worked out by hand."""

import math

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.latency import latency, reference_latency_fields
from graphs.model import Cluster, DeviceKind, Node, OpGraph

CPU = DeviceKind("cpu", 2, None, False)


def _cluster(acc=2, cap=None):
    return Cluster((DeviceKind("acc", acc, cap, True), CPU))


def _chain(n=4):
    nodes = [Node(f"a{i}", {"acc": 1.0, "cpu": 10.0}, comm=0.5, memory=1.0) for i in range(n)]
    return OpGraph.from_nodes(nodes, [(f"a{i}", f"a{i + 1}") for i in range(n - 1)])


def test_chain_on_one_accelerator_pays_no_communication():
    g = _chain()
    ev = latency(g, _cluster(), [0, 0, 0, 0])
    assert ev.valid and ev.total == pytest.approx(4.0)
    assert len(ev.subgraphs) == 1 and ev.subgraphs[0].comm_in == 0 and ev.subgraphs[0].comm_out == 0
    assert np.allclose(ev.finish, 4.0)


def test_chain_split_over_two_accelerators():
    g = _chain()
    ev = latency(g, _cluster(), [0, 0, 1, 1])
    # first subgraph: 2 compute + 0.5 sent; second starts at 2.5: 0.5 received + 2 compute
    assert ev.total == pytest.approx(5.0)
    assert ev.finish.tolist() == pytest.approx([2.5, 2.5, 5.0, 5.0])
    assert ev.start.tolist() == pytest.approx([0, 0, 2.5, 2.5])


def test_host_nodes_run_in_parallel_as_soon_as_ready():
    # fork-join: s -> (x, y) -> t, all on host cores (device numbers do not matter)
    nodes = [Node("s", {"acc": 1, "cpu": 1}, comm=1), Node("x", {"acc": 1, "cpu": 5}, comm=1),
             Node("y", {"acc": 1, "cpu": 3}, comm=1), Node("t", {"acc": 1, "cpu": 2})]
    g = OpGraph.from_nodes(nodes, [("s", "x"), ("s", "y"), ("x", "t"), ("y", "t")])
    ev = latency(g, _cluster(), [2, 2, 3, 2])
    assert ev.total == pytest.approx(1 + 5 + 2)
    assert ev.finish.tolist() == pytest.approx([1, 6, 4, 8])
    # x on an accelerator: receives s (1), computes 1, sends (1): finishes at 4; t starts at 4 (y done)
    ev = latency(g, _cluster(), [2, 0, 2, 2])
    assert ev.finish.tolist() == pytest.approx([1, 4, 4, 6])
    assert ev.total == pytest.approx(6)


def test_non_convex_set_is_cut_into_pieces_run_one_after_another():
    # a -> b -> c with a and c on acc0, b on the host: acc0 runs {a} then {c}
    nodes = [Node("a", {"acc": 1, "cpu": 9}, comm=0.5), Node("b", {"acc": 1, "cpu": 2}, comm=0.25),
             Node("c", {"acc": 1, "cpu": 9})]
    g = OpGraph.from_nodes(nodes, [("a", "b"), ("b", "c")])
    ev = latency(g, _cluster(), [0, 2, 0])
    assert ev.valid, ev.problems
    assert ev.subgraph.tolist() == [0, -1, 1]
    assert ev.subgraphs_per_device() == {0: 2}
    # {a}: 1 + 0.5 out = 1.5; b: 1.5 + 2 = 3.5; {c}: 0.25 in + 1 = 4.75
    assert ev.total == pytest.approx(4.75)
    # the same, told explicitly; the indices need not be consecutive
    ev2 = latency(g, _cluster(), [0, 2, 0], subgraphs=[3, 0, 7])
    assert ev2.total == pytest.approx(4.75) and ev2.subgraph.tolist() == [0, -1, 1]
    # one subgraph holding a and c cannot run: it waits for b, which waits for it
    ev3 = latency(g, _cluster(), [0, 2, 0], subgraphs=[0, 0, 0])
    assert not ev3.valid and math.isinf(ev3.total)
    assert "cycle" in ev3.problems[0]
    # an order that contradicts the data flow
    ev4 = latency(g, _cluster(), [0, 2, 0], subgraphs=[1, 0, 0])
    assert not ev4.valid and math.isinf(ev4.total)


def test_subgraphs_on_one_device_run_in_sequence():
    # two independent chains on one accelerator, as two subgraphs: the second waits for the first
    nodes = [Node(x, {"acc": 2, "cpu": 50}, comm=1) for x in "abcd"]
    g = OpGraph.from_nodes(nodes, [("a", "b"), ("c", "d")])
    ev = latency(g, _cluster(acc=1), [0, 0, 0, 0], subgraphs=[0, 0, 1, 1])
    assert ev.total == pytest.approx(8.0) and ev.subgraphs[1].start == pytest.approx(4.0)
    ev = latency(g, _cluster(acc=2), [0, 0, 1, 1])
    assert ev.total == pytest.approx(4.0)


def test_problems_are_reported():
    nodes = [Node("a", {"acc": 1, "cpu": 1}, memory=5), Node("b", {"cpu": 1}, memory=5),
             Node("c", {"acc": 1, "cpu": 1}, memory=5, colocation=1),
             Node("d", {"acc": 1, "cpu": 1}, memory=5, colocation=1)]
    g = OpGraph.from_nodes(nodes, [("a", "b"), ("b", "c"), ("c", "d")])
    ev = latency(g, _cluster(cap=6.0), [0, 0, 0, 1])
    text = " | ".join(ev.problems)
    assert "not supported" in text and "capacity" in text and "colocation" in text
    assert not ev.valid and math.isinf(ev.total)
    with pytest.raises(InputError):
        latency(g, _cluster(), [0, 0, 0])
    with pytest.raises(InputError):
        latency(g, _cluster(), [0, 0, 0, 0], subgraphs=[0, 0])


def test_reference_fields():
    g = _chain()
    ev = latency(g, _cluster(), [0, 0, 2, 1])
    out = reference_latency_fields(g, _cluster(), ev)
    assert out["totalLatency"] == pytest.approx(ev.total)
    assert out["fpgas"] == [{"nodes": ["a0", "a1"]}, {"nodes": ["a3"]}]
    assert out["cpus"] == [{"nodes": ["a2"]}]


# ---------------------------------------------------------------- the latency IP (solvers.latency_ip)
def _brute_latency(inst, q):
    """Smallest latency over every placement of the colocation classes (a class on one device) and every
    choice of at most ``q`` subgraphs per accelerator for its nodes, node by node (identical devices
    opened in order): a class's members share a device, not a subgraph (graphs.latency's model).
    Placements are tried in increasing order of a floor on their latency (an accelerator's subgraphs run
    one after another, a node starts after its inputs are done), stopping once the floor reaches the
    best found."""
    import itertools

    from graphs.latency import host_kinds
    from tests.instances import by_compute_floor

    g, cl = inst.graph, inst.cluster
    hosts, dk = host_kinds(cl), cl.device_kind()
    best = math.inf
    assignments, floors, cls = by_compute_floor(inst, hosts=hosts, paths=True)
    n = g.num_nodes
    order = g.topological_order().tolist()
    reach = np.eye(n, dtype=bool)  # reach[u, v]: a path u ->* v
    for v in order:
        for u in g.src[g.dst == v].tolist():
            reach[:, v] |= reach[:, u]
    for idev, floor in zip(assignments, floors):
        if not floor < best:
            break
        a = idev[cls]
        per_device = [_subgraph_labelings([u for u in order if a[u] == d], reach, q)
                      for d in np.unique(a).tolist() if not hosts[dk[d]]]
        for parts in itertools.product(*per_device):
            sub = np.zeros(n, np.int64)
            for nodes, labels in parts:
                sub[nodes] = labels
            ev = latency(g, cl, a, subgraphs=sub)
            if ev.valid:
                best = min(best, ev.total)
    return best


def _subgraph_labelings(nodes, reach, q):
    """Every way to run one accelerator's ``nodes`` (in topological order) as at most ``q`` subgraphs:
    ``(nodes, labels)`` with the labels 0, 1, ... each used (their order is the running order) and never
    lower on a node than on one of its ancestors there (that order has no schedule)."""
    out = []
    labels = [0] * len(nodes)

    def rec(i):
        if i == len(nodes):
            if set(labels) == set(range(max(labels) + 1)):
                out.append((nodes, list(labels)))
            return
        low = max((labels[j] for j in range(i) if reach[nodes[j], nodes[i]]), default=0)
        for lab in range(low, q):
            labels[i] = lab
            rec(i + 1)

    rec(0)
    return out


@pytest.mark.parametrize("q,count,items", [(1, 60, 4), (2, 30, 3)])
def test_latency_ip_equals_exhaustive_enumeration(q, count, items):
    from solvers.base import SolveOptions, Status
    from solvers.latency_ip import solve
    from tests.instances import random_instance

    rng = np.random.default_rng(500 + q)
    solved = 0
    for i in range(count):
        inst = random_instance(rng, max_items=items, training=False, label=f"lat{q}-{i}")
        best = _brute_latency(inst, q)
        sol = solve(inst.graph, inst.cluster, SolveOptions(objective="latency", subgraphs_per_device=q,
                                                           raw={"warm_start": i % 2 == 0}))
        if math.isinf(best):
            assert sol.status is Status.INFEASIBLE, inst.label
            continue
        assert sol.status is Status.OPTIMAL, (inst.label, sol.message)
        ev = latency(inst.graph, inst.cluster, sol.assignment, subgraphs=sol.stats["subgraphs"])
        assert ev.valid and max(ev.subgraphs_per_device().values(), default=0) <= q
        assert sol.objective == pytest.approx(ev.total, rel=1e-12, abs=1e-12)
        assert sol.objective == pytest.approx(best, rel=1e-9, abs=1e-9), inst.label
        solved += 1
    assert solved >= count // 2


def _colocated_instance(rng, label):
    """A small random DAG (3-5 nodes) with one or two colocation classes of two or three nodes, tight
    accelerator memory (one or two devices holding 30-90% of the graph's), one or two host cores that
    run every node slower (and sometimes not one or two of them: then there may be no placement), and
    sometimes a second accelerator kind."""
    from tests.instances import latency_instance

    n = int(rng.integers(3, 6))
    edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.45]
    acc = rng.uniform(0.1, 2.0, n)
    two = rng.random() < 0.3
    host = acc * rng.uniform(1.0, 6.0, n)
    if rng.random() < 0.4:
        host[rng.choice(n, int(rng.integers(1, 3)), replace=False)] = math.inf
    compute = [acc] + ([acc * rng.uniform(0.5, 2.0, n)] if two else []) + [host]
    comm = [rng.uniform(0, 1.5, n) for _ in compute[:-1]] + [np.zeros(n)]
    colo = np.arange(n)
    for _ in range(int(rng.integers(1, 3))):
        members = rng.choice(n, int(rng.integers(2, 4)) if n > 3 else 2, replace=False)
        colo[np.isin(colo, colo[members])] = colo[members[0]]
    return latency_instance(rng, compute, comm, rng.uniform(0.1, 1.0, n), edges, label, colocation=colo,
                            accelerators=[((1, 3), (0.3, 0.9)), ((1, 2), (0.3, 0.9))])


@pytest.mark.parametrize("q", [1, 2])
def test_latency_ip_equals_exhaustive_enumeration_with_colocation_and_tight_memory(q):
    """Colocation classes, memory that forces splits, host cores: the latency IP says 'infeasible' only
    when no placement exists, and otherwise returns the exhaustive optimum (colocation per device, so
    with q = 2 a class may span a device's two subgraphs), proven, with a bound at most that optimum;
    every other instance without the warm start (the program alone)."""
    from solvers.base import SolveOptions, Status
    from solvers.latency_ip import solve

    rng = np.random.default_rng(7100 + q)
    solved = spans = infeasible = 0
    for i in range(24):
        inst = _colocated_instance(rng, f"colo{q}-{i}")
        best = _brute_latency(inst, q)
        raw = {} if i % 2 == 0 else {"warm_start": False, "latency_search": False, "dp_warm_start": False}
        sol = solve(inst.graph, inst.cluster, SolveOptions(objective="latency", subgraphs_per_device=q,
                                                           raw=raw))
        if math.isinf(best):
            assert sol.status is Status.INFEASIBLE, inst.label
            infeasible += 1
            continue
        assert sol.status is Status.OPTIMAL, (inst.label, sol.status, sol.message)
        ev = latency(inst.graph, inst.cluster, sol.assignment, subgraphs=sol.stats["subgraphs"])
        assert ev.valid and max(ev.subgraphs_per_device().values(), default=0) <= q
        assert sol.objective == pytest.approx(ev.total, rel=1e-12, abs=1e-12)
        assert sol.objective == pytest.approx(best, rel=1e-9, abs=1e-9), (inst.label, sol.objective, best)
        assert sol.bound <= best * (1 + 1e-9) + 1e-9, inst.label
        assert "rejected" not in str(sol.stats.get("warm_start", "")), inst.label  # every start fits
        solved += 1
        col, sub = inst.graph.colocation, ev.subgraph
        spans += any(len(set(sub[col == c].tolist())) > 1 and (sub[col == c] >= 0).all()
                     for c in np.unique(col[col >= 0]).tolist())
    assert solved >= 14 and infeasible >= 2, (solved, infeasible)
    if q == 2:
        assert spans >= 1  # some optimum runs a class in two subgraphs


def test_latency_ip_never_says_infeasible_with_a_valid_start_in_hand(monkeypatch):
    """Should the integer program call itself infeasible while a warm start is a valid placement (its
    model stricter than the evaluator's, as it was with colocated nodes and two subgraphs), the solver
    returns that start as feasible, with the path bound, and says why."""
    from solvers import _milp, latency_ip
    from solvers.base import SolveOptions, Status

    def infeasible(model, **kw):
        return _milp.MipResult(_milp.INFEASIBLE, None, math.inf, None, 0.0, "infeasible")

    monkeypatch.setattr(latency_ip._milp, "solve_mip", infeasible)
    g = _chain(4)
    sol = latency_ip.solve(g, _cluster(cap=2.5), SolveOptions(objective="latency",
                                                              raw={"series_bound": False}))
    assert sol.status is Status.FEASIBLE and sol.assignment is not None
    assert latency(g, _cluster(cap=2.5), sol.assignment).valid
    assert sol.bound is not None and sol.bound <= sol.objective
    assert "disagrees" in sol.message and sol.stats["model_disagrees"]


def test_latency_ip_uses_a_second_subgraph_when_it_helps():
    from solvers.base import SolveOptions
    from solvers.latency_ip import solve

    # a -> b -> c, b slow on the accelerator and fast on the host: one accelerator running {a} and
    # then {c} beats keeping a and c apart
    nodes = [Node("a", {"acc": 1, "cpu": 20}, comm=0.1), Node("b", {"acc": 10, "cpu": 1}, comm=0.1),
             Node("c", {"acc": 1, "cpu": 20})]
    g = OpGraph.from_nodes(nodes, [("a", "b"), ("b", "c")])
    cl = Cluster((DeviceKind("acc", 1, None, True), DeviceKind("cpu", 1, None, False)))
    one = solve(g, cl, SolveOptions(objective="latency", subgraphs_per_device=1))
    two = solve(g, cl, SolveOptions(objective="latency", subgraphs_per_device=2))
    assert two.objective == pytest.approx(1 + 0.1 + 1 + 0.1 + 1) and two.objective < one.objective
    assert sorted(two.stats["subgraphs"]) == [-1, 0, 1]


def test_latency_ip_rejects_training_graphs_and_bad_q():
    from solvers.base import SolveOptions
    from solvers.ip import solve

    nodes = [Node("f", {"acc": 1}, colocation=0), Node("g", {"acc": 1}, backward=True, colocation=0)]
    g = OpGraph.from_nodes(nodes, [("f", "g")])
    with pytest.raises(InputError):
        solve(g, _cluster(), SolveOptions(objective="latency"))
    with pytest.raises(InputError):
        solve(_chain(), _cluster(), SolveOptions(objective="latency", subgraphs_per_device=0))


def test_latency_ip_through_the_ip_solvers_and_time_limit():
    from solvers.base import SolveOptions, Status
    from solvers.registry import get_solver

    g = _chain(6)
    for name in ("ip", "ip-noncontig"):
        sol = get_solver(name)(g, _cluster(), SolveOptions(objective="latency"))
        assert sol.status is Status.OPTIMAL and sol.objective == pytest.approx(6.0)  # all on one device
    sol = get_solver("ip")(g, _cluster(), SolveOptions(objective="latency", time_limit=0.5))
    assert sol.assignment is not None and sol.status in (Status.OPTIMAL, Status.FEASIBLE)


def test_latency_ip_never_worse_than_the_reference_greedy(workloads):
    import os

    from graphs.reference import read_workload
    from solvers.base import SolveOptions
    from solvers.latency_ip import solve

    w = read_workload(os.path.join(workloads, "latency-inputs", "LayerGraphs", "bert24_inference.json"))
    sol = solve(w.graph, w.cluster, SolveOptions(objective="latency", time_limit=10))
    ev = latency(w.graph, w.cluster, sol.assignment, subgraphs=sol.stats["subgraphs"])
    assert ev.valid and sol.objective == pytest.approx(ev.total)
    assert sol.objective <= 100.219  # FORMAT.md: the reference greedy's latency
    assert sol.bound is not None and sol.bound <= sol.objective


def _maximal_paths(g):
    """Every source-to-sink path of a small graph."""
    import networkx as nx

    dg = nx.DiGraph()
    dg.add_nodes_from(range(g.num_nodes))
    dg.add_edges_from(zip(g.src.tolist(), g.dst.tolist()))
    sources = [v for v in dg if dg.in_degree(v) == 0]
    sinks = [v for v in dg if dg.out_degree(v) == 0]
    for s in sources:
        for t in sinks:
            if s == t:
                yield [s]
            else:
                yield from nx.all_simple_paths(dg, s, t)


@pytest.mark.parametrize("items,count", [(3, 120), pytest.param(4, 70, marks=pytest.mark.slow)])
def test_latency_bounds_never_exceed_the_exhaustive_optimum(items, count):
    """path_bound on every source-to-sink path, and latency_bound, are at most the smallest latency of
    any placement with any subgraphs (as many per accelerator as there are classes); and the path bound
    is above the critical path on many of them (it is not the old bound in disguise)."""
    from graphs.contract import colocation_items
    from solvers.latency_ip import critical_path, latency_bound, path_bound
    from tests.instances import random_instance

    rng = np.random.default_rng(919 + items)
    checked = stronger = 0
    for i in range(count):
        inst = random_instance(rng, max_items=items, training=False, label=f"lb{items}-{i}")
        g, cl = inst.graph, inst.cluster
        best = _brute_latency(inst, max(1, colocation_items(g)[1]))
        if math.isinf(best):
            continue
        tol = 1e-9 * max(1.0, best)
        lb = latency_bound(g, cl)
        assert lb <= best + tol, (inst.label, lb, best)
        for path in _maximal_paths(g):
            assert path_bound(g, cl, path) <= best + tol, (inst.label, path)
        checked += 1
        stronger += lb > critical_path(g, cl) + tol
    assert checked >= count // 2 and stronger >= count // 20, (checked, stronger)


def test_path_bound_counts_the_nodes_a_convex_subgraph_must_hold():
    """a -> b -> d with a -> c -> d: a subgraph holding a and d holds c too (it is convex), and a, b, c,
    d together exceed an accelerator's memory, so the path a, b, d must be cut once, paying b's
    transfer out and in: 1 + 1 + 10 (b out) + 10 (b in) + 1 = 23, not the 3 of the critical path."""
    from solvers.latency_ip import critical_path, latency_bound, path_bound
    from tests.instances import Instance

    cost = {"acc": 1.0, "cpu": 100.0}
    nodes = [Node("a", cost, comm=10.0, memory=0.5), Node("b", cost, comm=10.0, memory=0.5),
             Node("c", cost, comm=10.0, memory=1.5), Node("d", cost, comm=10.0, memory=0.5)]
    g = OpGraph.from_nodes(nodes, [("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")])
    cl = Cluster((DeviceKind("acc", 2, 2.0, True), DeviceKind("cpu", 1, None, False)))
    ia, ib, idd = (list(g.ids).index(x) for x in "abd")
    assert critical_path(g, cl) == pytest.approx(3.0)
    assert path_bound(g, cl, [ia, ib, idd]) == pytest.approx(23.0)
    assert latency_bound(g, cl) >= 23.0 - 1e-9
    assert latency_bound(g, cl) <= _brute_latency(Instance(g, cl), 4) + 1e-9


def _split_instance(rng, label, max_items=4):
    """A small random DAG whose accelerators hold 25-80% of its memory (so placements must split it),
    with colocation classes (at most ``max_items``), a host kind and sometimes a second accelerator
    kind."""
    from tests.instances import latency_instance

    n = int(rng.integers(3, 8))
    edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.4]
    acc = rng.uniform(0.1, 2.0, n)
    two = rng.random() < 0.3
    compute = [acc] + ([acc * rng.uniform(0.5, 2.0, n)] if two else []) + [acc * rng.uniform(0.5, 15.0, n)]
    comm = [rng.uniform(0, 3, n) for _ in compute[:-1]] + [np.zeros(n)]
    memory = rng.uniform(0, 1, n)
    colo = np.arange(n)
    while len(set(colo.tolist())) > 1 and (len(set(colo.tolist())) > max_items or rng.random() < 0.3):
        a, b = rng.choice(n, 2, replace=False)
        colo[colo == colo[b]] = colo[a]
    return latency_instance(rng, compute, comm, memory, edges, label, colocation=colo,
                            accelerators=[((1, 4), (0.25, 0.8)), ((1, 3), (0.2, 0.9))])


def _all_paths(g):
    """Every path of a small graph (one node or more)."""
    import networkx as nx

    dg = nx.DiGraph()
    dg.add_nodes_from(range(g.num_nodes))
    dg.add_edges_from(zip(g.src.tolist(), g.dst.tolist()))
    for s in dg:
        yield [s]
        for t in nx.descendants(dg, s):
            yield from nx.all_simple_paths(dg, s, t)


@pytest.mark.parametrize("count", [120, pytest.param(400, marks=pytest.mark.slow)])
def test_latency_bounds_with_forced_splits_never_exceed_the_exhaustive_optimum(count):
    """On graphs whose memory must be split (and the usual random instances), path_bound on every path
    and latency_bound are at most the exhaustive optimum: with one subgraph per accelerator
    (``subgraphs_per_device=1``, colocated nodes share a subgraph) against placements with one, and
    without against any number of subgraphs; and both beat the critical path on many."""
    from graphs.contract import colocation_items
    from solvers.latency_ip import critical_path, latency_bound, path_bound
    from tests.instances import random_instance

    rng = np.random.default_rng(4242)
    checked = stronger = 0
    for i in range(count):
        inst = _split_instance(rng, f"split-{i}") if i % 2 == 0 else \
            random_instance(rng, max_items=4, training=False, label=f"rand-{i}")
        g, cl = inst.graph, inst.cluster
        one = _brute_latency(inst, 1)
        if math.isinf(one):
            continue
        C = colocation_items(g)[1]
        # any number of subgraphs: as many as classes, enumerated up to 3 classes (4 under -m slow)
        anyq = _brute_latency(inst, C) if C <= (4 if count > 200 else 3) else math.inf
        tol = 1e-9 * max(1.0, one)
        lb1 = latency_bound(g, cl, subgraphs_per_device=1)
        lbq = latency_bound(g, cl)
        assert lb1 <= one + tol, (inst.label, lb1, one)
        assert lbq <= anyq + tol, (inst.label, lbq, anyq)
        assert lbq <= one + tol, (inst.label, lbq, one)
        for path in _all_paths(g):
            assert path_bound(g, cl, path, one_subgraph=True) <= one + tol, (inst.label, path)
            assert path_bound(g, cl, path) <= anyq + tol, (inst.label, path)
        checked += 1
        stronger += lb1 > critical_path(g, cl) + tol
    assert checked >= count // 2 and stronger >= count // 4, (checked, stronger)


def test_path_bound_charges_the_transfers_a_colocated_far_node_forces():
    """a -> b -> c with x (a weight, colocated with a) -> c, and memory that keeps a and c apart: with
    one subgraph per accelerator x's subgraph holds a, so x's output leaves it (10) and enters c's (10);
    the path a, b, c alone sees 5 (a cut at b, b's transfer out and in)."""
    from solvers.latency_ip import latency_bound, path_bound
    from tests.instances import Instance

    cost = {"acc": 1.0, "cpu": 100.0}
    nodes = [Node("a", cost, comm=1.0, memory=1.0, colocation=0), Node("b", cost, comm=1.0, memory=1.0),
             Node("c", cost, comm=1.0, memory=1.0), Node("x", {"acc": 0.0, "cpu": 0.0}, comm=10.0,
                                                         memory=0.0, colocation=0)]
    g = OpGraph.from_nodes(nodes, [("a", "b"), ("b", "c"), ("x", "c")])
    cl = Cluster((DeviceKind("acc", 2, 2.0, True), DeviceKind("cpu", 1, None, False)))
    path = [list(g.ids).index(v) for v in "abc"]
    best = _brute_latency(Instance(g, cl), 1)
    assert best == pytest.approx(25.0)  # {a, b, x} then {c}: 2 + 1 + 10, then 1 + 10 + 1
    assert path_bound(g, cl, path) == pytest.approx(5.0)
    assert path_bound(g, cl, path, one_subgraph=True) == pytest.approx(25.0)
    assert latency_bound(g, cl, subgraphs_per_device=1) == pytest.approx(25.0)
    assert latency_bound(g, cl) <= _brute_latency(Instance(g, cl), 3) + 1e-9
