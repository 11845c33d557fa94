"""The latency local search (solvers.latency_search): never worse than its start, always in the latency
IP's domain (valid, at most q subgraphs per accelerator), within its deadline, and it finds the better
cut points on hand-made chains. The cut start (solvers.latency_cuts): valid, and the exhaustive optimum
on chains (where its cost is the latency)."""

import math

import numpy as np
import pytest

from graphs.contract import colocation_items
from graphs.latency import latency
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from solvers import latency_search
from solvers.latency_search import improve, in_domain
from tests.instances import latency_instance, random_instance


def _dag_instance(rng, label):
    """A random DAG of 4-24 nodes whose accelerators hold 20-80% of its memory (so placements must
    split it), with colocation classes, a host kind and often a second accelerator kind with nodes it
    cannot run."""
    n = int(rng.integers(4, 25))
    p = float(rng.uniform(0.1, 0.5))
    edges = [(u, v) for v in range(n) for u in range(max(0, v - 6), v) if rng.random() < p]
    compute, comm = _compute_rows(rng, rng.uniform(0.1, 2.0, n), unsupported=0.1, host_slowdown=15.0)
    memory = rng.uniform(0, 1, n)
    colo = np.arange(n)
    for _ in range(int(rng.integers(0, 3))):
        a, b = rng.choice(n, 2, replace=False)
        colo[colo == colo[b]] = colo[a]
    inst = latency_instance(rng, compute, comm, memory, edges, label, colocation=colo,
                            accelerators=[((1, 5), (0.2, 0.8)), ((1, 4), (0.2, 0.9))])
    return inst.graph, inst.cluster


def _compute_rows(rng, acc, *, unsupported: float, host_slowdown: float):
    """Compute and communication rows: the accelerator's ``acc``; half the time a second accelerator kind
    0.3-2x as fast that cannot run a fraction ``unsupported`` of the nodes; the host up to
    ``host_slowdown`` times slower, with no communication."""
    n = acc.size
    compute = [acc]
    if rng.random() < 0.5:
        other = acc * rng.uniform(0.3, 2.0, n)
        other[rng.random(n) < unsupported] = math.inf
        compute.append(other)
    compute.append(acc * rng.uniform(0.5, host_slowdown, n))
    comm = [rng.uniform(0, 3, n) for _ in compute[:-1]] + [np.zeros(n)]
    return compute, comm


def _starts(rng, g, cl, q, count=4):
    """Up to ``count`` placements in the domain: random class placements, the greedy fill, all on a
    host."""
    from solvers.latency_ip import greedy_fill

    cls, C = colocation_items(g)
    out = []
    for a in [greedy_fill(g, cl)] + [rng.integers(0, cl.num_devices, C)[cls] for _ in range(60)]:
        if a is not None and in_domain(latency(g, cl, a), q):
            out.append(np.asarray(a, np.int64))
        if len(out) >= count:
            break
    return out


def _check(g, cl, start, q, res):
    ev0 = latency(g, cl, start)
    ev = latency(g, cl, res.assignment)
    assert in_domain(ev, q), (g.source, ev.problems, ev.subgraphs_per_device())
    assert res.latency == pytest.approx(ev.total, rel=1e-12, abs=1e-12)
    assert res.start_latency == pytest.approx(ev0.total, rel=1e-12, abs=1e-12)
    assert ev.total <= ev0.total + 1e-12
    return ev.total < ev0.total - 1e-9


@pytest.mark.parametrize("q,count", [(1, 24), (2, 24), pytest.param(1, 90, marks=pytest.mark.slow),
                                     pytest.param(2, 90, marks=pytest.mark.slow)])
def test_never_worse_and_always_in_the_domain_on_random_instances(q, count):
    rng = np.random.default_rng(77 + q + (count > 24))  # the slow run: other instances, more of them
    runs = better = 0
    for i in range(count):
        if i % 3 == 2:
            inst = random_instance(rng, max_items=6, training=False, label=f"rand-{i}")
            g, cl = inst.graph, inst.cluster
        else:
            g, cl = _dag_instance(rng, f"dag-{i}")
        for a in _starts(rng, g, cl, q):
            res = improve(g, cl, a, subgraphs_per_device=q)
            assert res.stopped == "local optimum"
            better += _check(g, cl, a, q, res)
            runs += 1
    assert runs >= 100 * count // 60 and better >= runs // 4, (runs, better)


def test_one_subgraph_scoring_agrees_with_the_domain_test():
    """With q = 1 the search scores with every accelerator node in subgraph 0; that must give the same
    verdict and latency as the default convex pieces with at most one piece per accelerator."""
    rng = np.random.default_rng(5)
    agree_valid = 0
    for i in range(80):
        g, cl = _dag_instance(rng, f"dag-{i}")
        cls, C = colocation_items(g)
        zeros = np.zeros(g.num_nodes, np.int64)
        for _ in range(20):
            a = rng.integers(0, cl.num_devices, C)[cls]
            ev = latency(g, cl, a)
            fast = latency(g, cl, a, subgraphs=zeros)
            assert fast.valid == in_domain(ev, 1), g.source
            if fast.valid:
                assert fast.total == ev.total
                agree_valid += 1
    assert agree_valid >= 100


def test_respects_a_deadline_and_an_evaluation_budget():
    rng = np.random.default_rng(11)
    g, cl = _dag_instance(rng, "budget")
    while not _starts(rng, g, cl, 1, 1):
        g, cl = _dag_instance(rng, "budget")
    a = _starts(rng, g, cl, 1, 1)[0]
    res = improve(g, cl, a, time_limit=0.0)
    assert res.stopped == "time limit" and res.evaluations == 0
    assert np.array_equal(res.assignment, a)
    res = improve(g, cl, a, max_evaluations=3)
    assert res.evaluations <= 3 and res.stopped in ("evaluations", "local optimum")
    _check(g, cl, a, 1, res)


def _ctrl_c_at_call(k: int):
    """The latency evaluator, with a KeyboardInterrupt raised at its ``k``-th call."""
    calls = {"n": 0}
    real = latency_search.latency

    def evaluate(*args, **kw):
        calls["n"] += 1
        if calls["n"] == k:
            raise KeyboardInterrupt
        return real(*args, **kw)

    return evaluate


def test_ctrl_c_returns_the_best_so_far(monkeypatch):
    """A KeyboardInterrupt inside an evaluation stops the search with the best placement found."""
    g, cl, start, _ = _cascade_chain()
    monkeypatch.setattr(latency_search, "latency", _ctrl_c_at_call(5))
    res = improve(g, cl, start)
    assert res.stopped == "interrupted"
    _check(g, cl, start, 1, res)


def test_ctrl_c_in_the_search_makes_the_latency_ip_return_its_best_start(monkeypatch):
    """As with Ctrl-C in the DP start: the integer program does not run, the best start is returned."""
    from solvers.base import SolveOptions, Status
    from solvers.latency_ip import solve

    g, cl, start, _ = _cascade_chain()
    monkeypatch.setattr(latency_search, "latency", _ctrl_c_at_call(3))
    sol = solve(g, cl, SolveOptions(objective="latency", warm_start=start, time_limit=20,
                                    raw={"dp_warm_start": False, "cut_starts": False}))
    assert sol.stats["interrupted"] and sol.stats["search"][-1]["stopped"] == "interrupted"
    assert "interrupted" in sol.message and sol.status is Status.FEASIBLE
    ev = latency(g, cl, sol.assignment)
    assert in_domain(ev, 1) and sol.objective == pytest.approx(ev.total) and ev.total <= 29.0


def _chain_instance(comm, memory_cap, accelerators):
    n = len(comm)
    nodes = [Node(f"a{i}", {"acc": 1.0, "cpu": 10.0}, comm=comm[i], memory=1.0) for i in range(n)]
    g = OpGraph.from_nodes(nodes, [(f"a{i}", f"a{i + 1}") for i in range(n - 1)])
    cl = Cluster((DeviceKind("acc", accelerators, memory_cap, True), DeviceKind("cpu", 2, None, False)))
    return g, cl


def test_moves_a_cut_to_the_cheap_edge():
    """a0 -> ... -> a5, an accelerator holds 4 nodes: the greedy fill cuts after a3 (transfer 10, paid
    out and in: 6 + 20 = 26); cutting after a1 (transfer 1) gives 6 + 2 = 8, the optimum."""
    g, cl = _chain_instance([1.0, 1.0, 5.0, 10.0, 1.0, 1.0], 4.0, 2)
    start = np.array([0, 0, 0, 0, 1, 1])
    assert latency(g, cl, start).total == pytest.approx(26.0)
    res = improve(g, cl, start)
    assert res.latency == pytest.approx(8.0)
    assert res.assignment.tolist() == [0, 0, 1, 1, 1, 1]


def _cascade_chain():
    """a0 -> ... -> a8, accelerators of 3 nodes each (4 of them), transfers 0.1 after a1, a4, a7 and 5
    elsewhere. Cuts after a2, a5 (the greedy fill) cost 9 + 20 = 29; the optimum cuts after a1, a4, a7:
    9 + 0.6 = 9.6 (two cuts must be at a2 and a5; three cuts at the cheap edges cost 0.6). Every
    device is full, so no single boundary can move alone: the push passes the overflow on."""
    comm = [5.0] * 9
    for i in (1, 4, 7):
        comm[i] = 0.1
    g, cl = _chain_instance(comm, 3.0, 4)
    return g, cl, np.array([0, 0, 0, 1, 1, 1, 2, 2, 2]), 9.6


def test_push_passes_the_overflow_on_to_the_next_devices():
    g, cl, start, best = _cascade_chain()
    assert latency(g, cl, start).total == pytest.approx(29.0)
    res = improve(g, cl, start)
    assert res.latency == pytest.approx(best)
    assert res.moves == 1  # one push, cascading over three devices


def test_latency_ip_takes_the_search_as_a_start_and_says_so():
    from solvers.base import SolveOptions
    from solvers.latency_ip import solve

    g, cl, start, best = _cascade_chain()
    sol = solve(g, cl, SolveOptions(objective="latency", warm_start=start, time_limit=20,
                                    raw={"dp_warm_start": False, "cut_starts": False}))
    assert min(r["latency"] for r in sol.stats["search"]) == pytest.approx(best)
    assert sol.stats["warm_start"].startswith("search from")
    assert sol.stats["warm_start_value"] == pytest.approx(best)
    assert sol.objective <= best + 1e-9
    assert sol.bound is not None and sol.bound <= sol.objective + 1e-9
    off = solve(g, cl, SolveOptions(objective="latency", warm_start=start, time_limit=20,
                                    raw={"dp_warm_start": False, "cut_starts": False,
                                         "latency_search": False}))
    assert "search" not in off.stats and not off.stats["warm_start"].startswith("search")


# ---------------------------------------------------------------- the cut start (solvers.latency_cuts)
def _random_chain(rng, label):
    """A chain of 2-6 nodes, no colocation, one or two accelerator kinds (some nodes unsupported on the
    second) with memory that may force cuts, and an unlimited host kind."""
    n = int(rng.integers(2, 7))
    acc = rng.uniform(0.1, 2.0, n)
    acc[rng.random(n) < 0.15] = 0.0
    compute, comm = _compute_rows(rng, acc, unsupported=0.15, host_slowdown=6.0)
    memory = rng.uniform(0, 1, n)
    return latency_instance(rng, compute, comm, memory, [(i, i + 1) for i in range(n - 1)], label,
                            accelerators=[((1, 4), (0.3, 1.1)), ((1, 3), (0.3, 1.1))])


@pytest.mark.parametrize("count,least", [(30, 25), pytest.param(80, 60, marks=pytest.mark.slow)])
def test_cut_start_is_the_exhaustive_optimum_on_chains(count, least):
    """On a chain every placement with one subgraph per accelerator is a cut of its one topological
    order, and the pieces run one after another: the cut's cost is the latency, so the cheapest cut is
    the optimum over every placement. The default run checks the first 30 chains of the seed; the slow
    run all 80 (the default run's size before, about 12 s on 2 cores, nearly all of it the exhaustive
    enumeration)."""
    from solvers.latency_cuts import cut_placement
    from tests.test_latency import _brute_latency

    rng = np.random.default_rng(31)
    checked = 0
    for i in range(count):
        inst = _random_chain(rng, f"chain-{i}")
        best = _brute_latency(inst, 1)
        a = cut_placement(inst.graph, inst.cluster, later_first=bool(i % 2))
        if math.isinf(best):
            assert a is None, inst.label
            continue
        ev = latency(inst.graph, inst.cluster, a)
        assert in_domain(ev, 1), (inst.label, ev.problems)
        assert ev.total == pytest.approx(best, rel=1e-9, abs=1e-9), inst.label
        checked += 1
    assert checked >= least, checked


def test_cut_start_is_valid_on_random_dags():
    """One convex piece per accelerator, memory and colocation held, whenever a cut exists (hosts here
    have no memory limit); and on the hand-made chains it is already the optimum."""
    from solvers.latency_cuts import cut_placement

    rng = np.random.default_rng(8)
    found = 0
    for i in range(60):
        g, cl = _dag_instance(rng, f"dag-{i}")
        for later in (False, True):
            a = cut_placement(g, cl, later_first=later)
            if a is not None:
                ev = latency(g, cl, a)
                assert in_domain(ev, 1), (g.source, ev.problems)
                found += 1
    assert found >= 100
    g, cl, _, best = _cascade_chain()
    assert latency(g, cl, cut_placement(g, cl)).total == pytest.approx(best)
    assert cut_placement(g, cl, deadline=0.0) is None


@pytest.mark.parametrize("q", [1, 2])
def test_domain_and_search_against_exhaustive_enumeration_with_colocation(q):
    """Colocation is per device, not per subgraph, here too. On small graphs with colocation classes and
    tight memory: for every placement of the classes, in_domain (the evaluator's fewest convex pieces)
    implies that some choice of at most q subgraphs per accelerator, node by node, is valid, and with
    q = 1 it is the same test (with q = 2 it misses some:
    test_the_domain_misses_a_placement_that_needs_a_cut_against_another_device); and the search from
    starts in the domain stays in it, never below the exhaustive optimum nor above its start, and
    reaches that optimum from some start on most instances."""
    import itertools

    from graphs.latency import host_kinds
    from tests.instances import canonical_assignments
    from tests.test_latency import _brute_latency, _colocated_instance, _subgraph_labelings

    rng = np.random.default_rng(8400 + q)
    placements = split = missed = instances = reached = 0
    for i in range(20):
        inst = _colocated_instance(rng, f"search-colo{q}-{i}")
        g, cl = inst.graph, inst.cluster
        hosts, dk = host_kinds(cl), cl.device_kind()
        cls, C = colocation_items(g)
        order = g.topological_order().tolist()
        reach = np.eye(g.num_nodes, dtype=bool)
        for v in order:
            for u in g.src[g.dst == v].tolist():
                reach[:, v] |= reach[:, u]
        for idev in canonical_assignments(C, cl):
            a = np.asarray(idev, np.int64)[cls]
            per_device = [_subgraph_labelings([u for u in order if a[u] == d], reach, q)
                          for d in np.unique(a).tolist() if not hosts[dk[d]]]
            exists = False
            for parts in itertools.product(*per_device):
                sub = np.zeros(g.num_nodes, np.int64)
                for nodes, labels in parts:
                    sub[nodes] = labels
                if latency(g, cl, a, subgraphs=sub).valid:
                    exists = True
                    break
            ev = latency(g, cl, a)
            inside = in_domain(ev, q)
            assert exists or not inside, (inst.label, idev)
            assert inside or not exists or q > 1, (inst.label, idev)
            placements += 1
            missed += exists and not inside
            split += inside and any(len(set(ev.subgraph[g.colocation == c].tolist())) > 1
                                    for c in np.unique(g.colocation[g.colocation >= 0]).tolist())
        best = _brute_latency(inst, q)
        starts = _starts(rng, g, cl, q)
        if math.isinf(best) or not starts:
            continue
        instances += 1
        found = math.inf
        for a in starts:
            res = improve(g, cl, a, subgraphs_per_device=q)
            _check(g, cl, a, q, res)
            assert res.latency >= best * (1 - 1e-9) - 1e-9, (inst.label, res.latency, best)
            found = min(found, res.latency)
        reached += found <= best * (1 + 1e-9) + 1e-9
    assert placements >= 200 and instances >= 10 and reached >= instances * 2 // 3, \
        (placements, instances, reached)
    assert missed <= placements // 20, (missed, placements)
    if q == 2:
        assert split >= 1  # some placement in the domain runs a class in two subgraphs


@pytest.mark.xfail(strict=True, reason="known limitation: in_domain reads a placement through the "
                                       "evaluator's default pieces, which are convex per device but can "
                                       "depend on another device's in a cycle")
def test_the_domain_misses_a_placement_that_needs_a_cut_against_another_device():
    """a -> x and b -> c, with a, c on one accelerator and b, x on the other: each device's set is convex
    (one default piece each), but the first device's piece feeds the second's (a -> x) and the second's
    feeds the first's (b -> c), a cycle. Two subgraphs on the first, {a} then {c}, run it:
    {a} 1 + 1 (a out) = 2, then {b, x} 2 + 1 (a in) + 2 + 1 (b out) = 6, then {c} 6 + 1 (b in) + 1 = 8.
    The latency IP returns such placements (with their subgraphs); the search and the IP's warm starts
    never consider them with q = 2."""
    nodes = [Node(v, {"acc": 1.0, "cpu": 10.0}, comm=1.0) for v in "abcx"]
    g = OpGraph.from_nodes(nodes, [("a", "x"), ("b", "c")])
    cl = Cluster((DeviceKind("acc", 2, None, True), DeviceKind("cpu", 1, None, False)))
    a = np.array([0 if v in "ac" else 1 for v in g.ids])
    ev = latency(g, cl, a, subgraphs=np.array([0 if v != "c" else 1 for v in g.ids]))
    assert ev.valid and ev.total == pytest.approx(8.0)
    assert in_domain(latency(g, cl, a), 2)
