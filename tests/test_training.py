"""Training derivation on small graphs: twins, reversed edges, colocation, costs and memory."""

import math

import numpy as np
import pytest

from graphs.errors import InputError
from graphs.evaluate import evaluate
from graphs.model import Cluster, DeviceKind, Node, OpGraph
from graphs.training import OPTIMIZERS, derive_training
from tests.instances import Instance, brute_force


def diamond():
    """a -> b, a -> c, b -> d, c -> d; c cannot run on the cpu."""
    nodes = [Node("a", {"gpu": 1.0, "cpu": 4.0}, memory=100, comm={"gpu": 0.5, "cpu": 0.0}),
             Node("b", {"gpu": 2.0, "cpu": 8.0}, memory=200, comm={"gpu": 0.25, "cpu": 0.0}),
             Node("c", {"gpu": 3.0, "cpu": None}, memory=0, comm={"gpu": 0.125, "cpu": 0.0}),
             Node("d", {"gpu": 1.0, "cpu": 2.0}, memory=50, comm={"gpu": 1.0, "cpu": 0.0})]
    return OpGraph.from_nodes(nodes, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


def test_twins_edges_and_colocation():
    g = diamond()
    t = derive_training(g)
    n = g.num_nodes
    assert t.num_nodes == 2 * n and t.is_training
    assert t.names[n:] == ("a_grad", "b_grad", "c_grad", "d_grad")
    assert t.backward.tolist() == [False] * n + [True] * n
    assert (t.colocation[:n] == t.colocation[n:]).all() and len(set(t.colocation[:n].tolist())) == n
    edges = set(zip(t.src.tolist(), t.dst.tolist()))
    fwd = set(zip(g.src.tolist(), g.dst.tolist()))
    assert fwd <= edges
    assert {(n + v, n + u) for u, v in fwd} <= edges  # gradients flow backwards
    assert {(v, n + v) for v in range(n)} <= edges  # each twin reads its forward node's stash
    assert len(edges) == 2 * len(fwd) + n


def test_backward_costs_default_to_twice_forward_and_keep_unsupported():
    g = diamond()
    t = derive_training(g)
    n = g.num_nodes
    np.testing.assert_array_equal(t.compute[:, n:], 2 * g.compute)
    assert math.isinf(t.compute[g.kind_index("cpu"), n + 2])
    t3 = derive_training(g, backward_factor=3.0)
    assert t3.compute[0, n] == 3 * g.compute[0, 0]
    given = np.full((2, n), np.nan)
    given[0, 1] = 7.0
    tg = derive_training(g, backward_compute=given)
    assert tg.compute[0, n + 1] == 7.0 and tg.compute[0, n] == 2 * g.compute[0, 0]


def test_gradient_communication_is_the_sum_of_the_predecessors_outputs():
    g = diamond()
    t = derive_training(g)
    n, gpu = g.num_nodes, g.kind_index("gpu")
    comm = t.comm[gpu, n:]
    # a has no predecessor; b and c send a's gradient; d sends b's and c's
    assert comm.tolist() == [0.0, 0.5, 0.5, 0.25 + 0.125]


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_memory_is_params_stash_gradients_and_optimizer_state(optimizer):
    g = diamond()
    trainable = [100, 150, 0, 50]
    stash = [10, 20, 30, 40]
    t = derive_training(g, trainable_bytes=trainable, activation_bytes=stash, optimizer=optimizer)
    n = g.num_nodes
    assert t.memory[:n].tolist() == [110, 220, 30, 90]  # parameters + stashed activation
    k = OPTIMIZERS[optimizer]
    assert t.memory[n:].tolist() == [b * (1 + k) for b in trainable]  # gradients + state
    assert OPTIMIZERS["sgd"] == 0 and OPTIMIZERS["adam"] == 2 and OPTIMIZERS["momentum"] == 1


def test_training_graph_places_with_twins_on_their_forward_device():
    from placement import place

    g = derive_training(diamond())
    cl = Cluster((DeviceKind("gpu", 2, 1000), DeviceKind("cpu", 1, None, False)))
    p = place(g, cl)
    assert p.evaluation.valid and p.evaluation.contiguous
    a = p.assignment
    n = g.num_nodes // 2
    assert (a[:n] == a[n:]).all()
    assert p.max_load == pytest.approx(brute_force(Instance(g, cl)))


def test_integer_ids_get_twin_ids_after_the_forward_ones():
    g = OpGraph.build(names=["x", "y"], ids=[10, 20], kinds=["gpu"], compute=[[1.0, 1.0]],
                      comm=[[0.0, 0.0]], memory=[0.0, 0.0], edges=[(0, 1)])
    t = derive_training(g)
    assert list(t.ids) == [10, 20, 21, 22]
    ev = evaluate(t, Cluster((DeviceKind("gpu", 1),)), np.zeros(4, np.int64))
    assert ev.max_load == 6.0  # forward 2 + backward 4


def test_errors():
    g = diamond()
    with pytest.raises(InputError, match="unknown optimizer 'lamb'"):
        derive_training(g, optimizer="lamb")
    with pytest.raises(InputError, match="already has backward"):
        derive_training(derive_training(g))
    with pytest.raises(InputError, match="per-node"):
        derive_training(g, activation_bytes=[1, 2])
