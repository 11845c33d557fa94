"""The evaluator on hand-computed cases and on the human-expert splits of the reference."""

import json
import math
import os

import numpy as np
import pytest

from graphs.evaluate import evaluate
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.reference import read_split, read_workload


def diamond():
    # a -> b, a -> c, b -> d, c -> d
    nodes = [
        Node("a", {"gpu": 1, "cpu": 10}, comm=0.5),
        Node("b", {"gpu": 2, "cpu": 20}, comm=0.25),
        Node("c", {"gpu": 3, "cpu": 30}, comm=0.125),
        Node("d", {"gpu": 4, "cpu": 40}, comm=0.0),
    ]
    return OpGraph.from_nodes(nodes, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


def test_receiver_pays_once_per_node_and_cpu_pays_nothing():
    g = diamond()
    cl = Cluster((DeviceKind("gpu", 2), DeviceKind("cpu", 1, pays_communication=False)))
    ev = evaluate(g, cl, [0, 1, 1, 2])
    gpu0, gpu1, cpu0 = ev.devices
    assert (gpu0.compute, gpu0.comm_in, gpu0.comm_out, gpu0.load) == (1, 0, 0.5, 1.5)
    # a arrives once although two of its edges enter gpu1; b and c both leave for the CPU
    assert (gpu1.compute, gpu1.comm_in, gpu1.comm_out) == (5, 0.5, 0.375)
    assert gpu1.load == pytest.approx(5.875)
    assert (cpu0.compute, cpu0.comm_in, cpu0.comm_out, cpu0.load) == (40, 0, 0, 40)
    assert ev.max_load == 40 and ev.valid and ev.contiguous
    assert ev.stage_order == (0, 1, 2)


def test_sender_pays_once_for_several_receivers_and_cycles_are_not_contiguous():
    g = diamond()
    cl = Cluster((DeviceKind("gpu", 3),))
    ev = evaluate(g, cl, [0, 1, 2, 0])
    gpu0, gpu1, gpu2 = ev.devices
    assert gpu0.load == pytest.approx(5 + 0.5 + 0.25 + 0.125)
    assert gpu1.load == pytest.approx(2 + 0.5 + 0.25)
    assert gpu2.load == pytest.approx(3 + 0.5 + 0.125)
    assert ev.max_load == pytest.approx(5.875)
    assert ev.valid and not ev.contiguous and ev.stage_order is None


def test_training_load_is_forward_plus_backward():
    nodes = [
        Node("f0", {"gpu": 1}, comm=0.5, colocation=0),
        Node("f1", {"gpu": 2}, comm=0.3, colocation=1),
        Node("b0", {"gpu": 2}, comm=0.1, backward=True, colocation=0),
        Node("b1", {"gpu": 4}, comm=0.2, backward=True, colocation=1),
    ]
    g = OpGraph.from_nodes(nodes, [("f0", "f1"), ("f1", "b1"), ("b1", "b0"), ("f0", "b0")])
    ev = evaluate(g, Cluster((DeviceKind("gpu", 2),)), [0, 1, 0, 1])
    d0, d1 = ev.devices
    assert (d0.compute_forward, d0.compute_backward) == (1, 2)
    assert d0.load == pytest.approx(3 + 0.5 + 0.2)  # sends f0, receives b1
    assert d1.load == pytest.approx(6 + 0.5 + 0.2)  # receives f0, sends b1
    assert ev.valid and ev.contiguous


def test_problems_are_reported_not_raised():
    nodes = [Node("a", {"gpu": 1}, memory=8, colocation=3), Node("b", {"cpu": 1}, memory=8, colocation=3)]
    g = OpGraph.from_nodes(nodes, [("a", "b")])
    cl = Cluster((DeviceKind("gpu", 2, memory=10), DeviceKind("cpu", 1)))
    ev = evaluate(g, cl, [0, 0])
    text = " | ".join(ev.problems)
    assert "not supported on gpu:0" in text and "capacity" in text
    assert math.isinf(ev.max_load) and not ev.valid
    ev = evaluate(g, cl, [0, 2])
    assert any("colocation class 3 is split" in p for p in ev.problems)


def test_bad_assignments_raise():
    from graphs.errors import InputError

    g = diamond()
    cl = Cluster((DeviceKind("gpu", 2),))
    with pytest.raises(InputError, match="one device per node"):
        evaluate(g, cl, [0, 1])
    with pytest.raises(InputError, match="node c is assigned to device 5"):
        evaluate(g, cl, [0, 1, 5, 0])
    with pytest.raises(InputError, match="integer"):
        evaluate(g, cl, np.array([0.0, 1.0, 1.0, 0.0]))


_EXPERTS = {
    "bert24_inference": 20.084, "bert24_training": 49.4049, "gnmt_inference": 46.2085,
    "gnmt_training": 137.154, "inceptionv3_inference": 102.482, "resnet50_inference": 43.9183,
}


@pytest.mark.parametrize("name", sorted(_EXPERTS))
def test_human_expert_splits_match_the_reference(workloads, name):
    w = read_workload(os.path.join(workloads, "throughput-inputs/LayerGraphs", name + ".json"))
    a = read_split(os.path.join(workloads, "human-experts", name + "_expert.json"), w.graph, w.cluster)
    ev = evaluate(w.graph, w.cluster, a)
    ref = json.load(open(os.path.join(workloads, "reference_results.json")))["throughput"]
    expected = ref[f"throughput-inputs/LayerGraphs/{name}.json"]["expert_max_load"]
    assert expected == _EXPERTS[name]
    assert ev.valid
    assert ev.max_load == pytest.approx(expected, rel=5e-6)  # the reference prints 6 digits


def _recount(g: OpGraph, cl: Cluster, a):
    """Per-device loads, memory and validity counted node by node and edge by edge, straight from the
    model's definition (FORMAT.md): an independent second method for the evaluator."""
    import itertools

    kinds = [t for t, k in enumerate(cl.kinds) for _ in range(k.count)]
    D = cl.num_devices
    rows = [cl.kinds[kinds[d]] for d in range(D)]
    col = [g.kind_index(k.name) for k in cl.kinds]
    compute = [0.0] * D
    memory = [0.0] * D
    out = [0.0] * D
    inn = [0.0] * D
    valid = True
    for u in range(g.num_nodes):
        d = a[u]
        x = g.compute[col[kinds[d]], u]
        compute[d] += x
        memory[d] += g.memory[u]
        valid &= bool(np.isfinite(x))
        succ_devs = {a[v] for s_, v in zip(g.src, g.dst) if s_ == u} - {d}
        if succ_devs and rows[d].pays_communication:
            out[d] += g.comm[col[kinds[d]], u]
        for e in succ_devs:
            if rows[e].pays_communication:
                inn[e] += g.comm[col[kinds[e]], u]
    for d in range(D):
        if rows[d].memory is not None and memory[d] > rows[d].memory:
            valid = False
    for c in set(g.colocation.tolist()) - {-1}:
        valid &= len({a[u] for u in np.flatnonzero(g.colocation == c)}) == 1
    # contiguous: some order of the used devices in which no forward item edge goes back (brute force)
    from graphs.contract import colocation_items, item_edges

    cls, C = colocation_items(g)
    item_dev = {int(cls[u]): a[u] for u in range(g.num_nodes)}
    split = any(item_dev[int(cls[u])] != a[u] for u in range(g.num_nodes))
    s, t = item_edges(g, cls)
    used = sorted(set(a))
    contiguous = not split and any(
        all(pos[item_dev[int(x)]] <= pos[item_dev[int(y)]] for x, y in zip(s, t))
        for perm in itertools.permutations(used) for pos in [{dv: i for i, dv in enumerate(perm)}])
    loads = [compute[d] + inn[d] + out[d] for d in range(D)]
    return loads, memory, valid, contiguous


def test_one_evaluator_equals_a_node_by_node_recount():
    """graphs.evaluate is the stage evaluator (graphs.parallel.evaluate_plan) seen per device: on 300
    random instances (host CPUs, unsupported nodes, memory limits, colocation, training) and random
    assignments its loads, memory, validity and contiguity equal a recount from the model's text."""
    from tests.instances import all_small

    rng = np.random.default_rng(7)
    checked = 0
    for inst in all_small(seed=11, count=300):
        g, cl = inst.graph, inst.cluster
        for _ in range(3):
            a = rng.integers(0, min(cl.num_devices, 5), g.num_nodes).tolist()
            ev = evaluate(g, cl, a)
            loads, memory, valid, contiguous = _recount(g, cl, a)
            assert [d.load for d in ev.devices] == pytest.approx(loads, rel=1e-12), inst.label
            assert [d.memory for d in ev.devices] == pytest.approx(memory, rel=1e-12), inst.label
            assert ev.valid == valid, (inst.label, a, ev.problems)
            assert ev.contiguous == contiguous, (inst.label, a)
            if ev.contiguous:
                assert sorted(ev.stage_order) == sorted(set(a))
            checked += 1
    assert checked == 900


def test_reference_workloads_evaluate_as_recounted(workloads):
    """The same on a real graph: the largest reference operator graph, random assignments."""
    w = read_workload(os.path.join(workloads, "throughput-inputs/OperatorGraphs/bert_L-12_training.json"))
    rng = np.random.default_rng(0)
    for _ in range(2):
        a = rng.integers(0, w.cluster.num_devices, w.graph.num_nodes)
        ev = evaluate(w.graph, w.cluster, a)
        g = w.graph
        # vectorised recount of the loads only (the brute force above is quadratic)
        col = [g.kind_index(k.name) for k in w.cluster.kinds]
        dk = w.cluster.device_kind()
        pays = np.array([k.pays_communication for k in w.cluster.kinds])[dk]
        loads = np.zeros(w.cluster.num_devices)
        np.add.at(loads, a, g.compute[np.array(col)[dk[a]], np.arange(g.num_nodes)])
        pairs = {(int(u), int(a[v])) for u, v in zip(g.src, g.dst) if a[u] != a[v]}
        for u in {p[0] for p in pairs}:
            if pays[a[u]]:
                loads[a[u]] += g.comm[col[dk[a[u]]], u]
        for u, d in pairs:
            if pays[d]:
                loads[d] += g.comm[col[dk[d]], u]
        assert ev.max_load == pytest.approx(loads.max(), rel=1e-12)
