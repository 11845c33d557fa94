"""Variants of a training graph (:func:`graphs.training.derive_training`, e.g. from an ONNX model) for the
replicated model of :mod:`graphs.parallel`.

Every colocation class (a forward operator and its backward twin) becomes one node with, per device
kind that runs it, two variants at tensor-parallel degree 1:

* ``vanilla``: forward + backward time; ``A`` = the forward operator's output bytes (stashed per
  micro-batch in flight); ``B`` = the class's memory without that stash (weights, gradients, optimiser
  state); ``W`` = the weights; ``params`` = the trainable bytes (what replicas resynchronise);
* ``activation recomp``: one extra forward pass, nothing stashed (``A = 0``). The stage's input
  activations, which recomputation still keeps, are not charged (an approximation: they are the
  producers' outputs, already counted where the producer runs vanilla).

Tensor-parallel splits of MatMul/Gemm blocks are not derived (only ``t = 1``). Resync times use each
kind's host-link bandwidth (bytes/s) converted to the graph's time unit.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .contract import contract
from .errors import InputError
from .model import Cluster, OpGraph
from .parallel import ParallelGraph, ParallelKind, ParallelProblem, Variant
from .training import OPTIMIZERS

__all__ = ["from_training"]

_UNIT_SECONDS = {"ms": 1e-3, "s": 1.0, "us": 1e-6}


def from_training(graph: OpGraph, cluster: Cluster, *, microbatches: int, bandwidth: Mapping[str, float],
                  schedule: str = "1f1b", max_replicas: int | None = None,
                  server_size: Mapping[str, int] | None = None,
                  intra_bandwidth: Mapping[str, float] | None = None) -> tuple[ParallelProblem, np.ndarray]:
    """The replicated problem of a training graph built by :func:`graphs.training.derive_training` with
    per-node ``output_bytes`` and ``param_bytes`` in its meta (the ONNX front end's). ``bandwidth``:
    bytes/s per kind name (resync over the network); ``server_size`` / ``intra_bandwidth`` per kind
    name: the topology. Returns the problem and the node of every operator."""
    meta = graph.meta
    if not graph.is_training or "output_bytes" not in meta or "param_bytes" not in meta:
        raise InputError("replicated variants need a training graph with per-operator output and parameter "
                         "sizes (an ONNX model loaded with training)", source=graph.source)
    n_fwd = int((~graph.backward).sum())
    if graph.backward[:n_fwd].any():
        raise InputError("expected the forward operators first (as derive_training lays them out)",
                         source=graph.source)
    out_b = np.asarray(meta["output_bytes"], float)
    par_b = np.asarray(meta["param_bytes"], float)
    if out_b.size != n_fwd or par_b.size != n_fwd:
        raise InputError("the graph's meta sizes do not match its forward operators", source=graph.source)
    unit = _UNIT_SECONDS.get(str(meta.get("unit", "s")), 1.0)
    states = OPTIMIZERS.get(str(meta.get("training", {}).get("optimizer", "adam")), 2)

    items = contract(graph, cluster, merge_zero_cost=False)
    cls = items.node_class
    C = items.num_classes
    compute, comm = graph.costs_for(cluster)
    fwd = ~graph.backward
    act = np.bincount(cls[:n_fwd], weights=out_b, minlength=C)  # forward nodes come first
    params = np.bincount(cls[:n_fwd], weights=par_b, minlength=C)
    twin_mem = np.bincount(cls[graph.backward], weights=graph.memory[graph.backward], minlength=C)
    trainable = twin_mem / (1 + states)
    mem = np.bincount(cls, weights=graph.memory, minlength=C)
    t_all = items.class_sums(compute)
    t_fwd = items.class_sums(np.where(fwd[None, :], compute, 0.0))

    members = items.members()
    ids = []  # a node is named after its forward operator(s)
    for m in members:
        f = [int(u) for u in m if not graph.backward[u]] or [int(m[0])]
        ids.append("+".join(graph.names[u] for u in f))
    tensors = []
    for u in range(graph.num_nodes):
        cons = set(cls[graph.dst[graph.src == u]].tolist()) - {int(cls[u])}
        if cons:
            tensors.append((int(cls[u]), sorted(cons), comm[:, u]))
    variants = []
    for c in range(C):
        b = max(0.0, mem[c] - act[c])
        w = min(params[c], b)
        for k in range(len(cluster.kinds)):
            if not np.isfinite(t_all[k, c]):
                continue
            variants.append(Variant(c, k, 1, "vanilla", float(t_all[k, c]), float(trainable[c]),
                                    float(act[c]), float(b), float(w)))
            if act[c] > 0:
                variants.append(Variant(c, k, 1, "activation recomp", float(t_all[k, c] + t_fwd[k, c]),
                                        float(trainable[c]), 0.0, float(b), float(w)))
    g = ParallelGraph.build(ids=ids, names=ids, num_kinds=len(cluster.kinds),
                            edges=np.stack([items.src, items.dst], 1), tensors=tensors, variants=variants,
                            source=graph.source, tensor_edges=False)
    kinds = []
    for k in cluster.kinds:
        if k.name not in bandwidth or not bandwidth[k.name] > 0:
            raise InputError(f"no resync bandwidth for device kind {k.name!r}")
        bw = float(bandwidth[k.name]) * unit  # bytes per graph time unit
        intra = (intra_bandwidth[k.name] * unit) if intra_bandwidth and k.name in intra_bandwidth else None
        size = None if not server_size else server_size.get(k.name)
        kinds.append(ParallelKind(k.name, k.count, k.memory, bw, size, intra, bw))
    return ParallelProblem(g, tuple(kinds), microbatches, schedule, max_replicas), cls
