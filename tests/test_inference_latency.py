"""One rule for "no latency-model figure for a training graph" (graphs.latency.inference_latency), which
Placement.latency and ``placement show`` both take."""

import pytest

from graphs.latency import inference_latency
from graphs.model import Cluster, DeviceKind, Node, OpGraph

CLUSTER = Cluster((DeviceKind("acc", 2, None, True), DeviceKind("cpu", 2, None, False)))


def _pair(training: bool) -> OpGraph:
    nodes = [Node("f", {"acc": 1.0, "cpu": 10.0}, comm=0.5), Node("g", {"acc": 2.0, "cpu": 10.0}, comm=0.25)]
    if training:
        nodes.append(Node("g_grad", {"acc": 4.0, "cpu": 10.0}, comm=0.5, backward=True))
    return OpGraph.from_nodes(nodes, [("f", "g")] + ([("g", "g_grad")] if training else []))


def test_an_inference_graph_gets_the_latency_model():
    # by hand: f on acc:0 (1 compute + 0.5 sent), g on acc:1 from 1.5 (0.5 received + 2 compute): 4.0
    ev = inference_latency(_pair(False), CLUSTER, [0, 1])
    assert ev is not None and ev.total == pytest.approx(4.0)


def test_a_training_graph_has_no_latency_model_figure():
    assert inference_latency(_pair(True), CLUSTER, [0, 1, 1]) is None


def test_placement_latency_takes_the_same_rule():
    from placement import place

    assert place(_pair(True), CLUSTER, solver="single").latency is None
    p = place(_pair(False), CLUSTER, solver="single")  # both on one accelerator: 1 + 2, no transfer
    assert p.latency is not None and p.latency.total == pytest.approx(3.0)
