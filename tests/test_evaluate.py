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
