"""Replicated variants of an ONNX training graph (graphs/replicate.py)."""

from __future__ import annotations

import os

import pytest

from graphs.errors import InputError
from graphs.parallel import evaluate_plan
from graphs.replicate import from_training
from solvers.base import Status
from solvers.dp_replicated import solve_problem


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    pytest.importorskip("onnx")
    from graphs.onnx_workload import onnx_workload
    from tests.onnx_models import save, small_cnn

    path = save(small_cnn(), os.path.join(tmp_path_factory.mktemp("m"), "cnn.onnx"))
    return onnx_workload(path, devices="a100:4,cpu:2", training=True, batch_size=64)


def test_variants_of_each_operator_pair(cnn):
    p, item = from_training(cnn.graph, cnn.cluster, microbatches=8, bandwidth={"a100": 25e9, "cpu": 10e9})
    g = p.graph
    assert g.num_nodes == cnn.graph.num_nodes // 2  # every forward operator with its backward twin
    assert item.max() + 1 == g.num_nodes
    fwd_bytes = dict(zip(cnn.graph.names, cnn.graph.meta["output_bytes"]))
    for (u, _k, t), vids in g.options.items():
        vs = {g.variants[v].name: g.variants[v] for v in vids}
        van = vs["vanilla"]
        assert t == 1 and van.a == pytest.approx(fwd_bytes[g.names[u]])
        if "activation recomp" in vs:
            rec = vs["activation recomp"]
            assert rec.a == 0 and rec.b == van.b and rec.time > van.time
    # resync bandwidth is in bytes per millisecond, the graph's unit
    assert p.kinds[0].bandwidth == pytest.approx(25e9 * 1e-3)


def test_replication_beats_the_pipeline_only_optimum(cnn):
    p, _ = from_training(cnn.graph, cnn.cluster, microbatches=8, bandwidth={"a100": 25e9, "cpu": 10e9})
    r = solve_problem(p)
    assert r.status is Status.OPTIMAL and evaluate_plan(p, r.plan).valid
    one = solve_problem(p.with_options(max_replicas=1))
    assert one.status is Status.OPTIMAL and all(s.d == 1 for s in one.plan)
    assert r.objective < one.objective
    assert any(s.d > 1 for s in r.plan)


def test_forward_graph_is_rejected(cnn):
    from graphs.model import Cluster, DeviceKind, Node, OpGraph

    g = OpGraph.from_nodes([Node("a", {"gpu": 1.0})], [])
    with pytest.raises(InputError, match="training graph"):
        from_training(g, Cluster((DeviceKind("gpu", 1),)), microbatches=2, bandwidth={"gpu": 1.0})
    with pytest.raises(InputError, match="no resync bandwidth"):
        from_training(cnn.graph, cnn.cluster, microbatches=2, bandwidth={"a100": 1.0})
