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
