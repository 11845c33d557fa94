"""Derive a training graph (forward + backward) from a forward operator graph.

For every forward node ``v`` a backward twin ``v_grad`` is added:

* **edges**: ``twin(v) -> twin(u)`` for every forward edge ``u -> v`` (gradients flow backwards), and
  ``v -> twin(v)`` (the backward pass reads what the forward pass stashed);
* **colocation**: ``v`` and its twin share a class, so the twin sits where ``v`` is (the stash and
  the weights are there);
* **compute**: given backward times, else ``backward_factor`` (default 2) times the forward time on
  each kind (an unsupported forward node stays unsupported);
* **communication**: the twin sends the gradients of ``v``'s inputs, one per forward predecessor ``u``,
  each the size of ``u``'s output — so its cost is the sum of its predecessors' forward costs (exact for
  a chain, conservative where ``v`` has several inputs);
* **memory**: the forward node holds its parameters and its stashed output activation; the twin holds
  the gradients of its trainable parameters and the optimizer state (:data:`OPTIMIZERS`: state
  tensors per trainable parameter).
"""

from __future__ import annotations

import numpy as np

from .errors import InputError
from .model import OpGraph

__all__ = ["OPTIMIZERS", "derive_training", "GRAD_SUFFIX"]

#: optimizer -> state tensors kept per trainable parameter (each the parameter's size)
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adagrad": 1, "rmsprop": 1, "adam": 2, "adamw": 2}
GRAD_SUFFIX = "_grad"


def derive_training(graph: OpGraph, *, param_bytes=None, trainable_bytes=None, activation_bytes=None,
                    backward_compute=None, backward_factor: float = 2.0, optimizer: str = "adam",
                    meta: dict | None = None) -> OpGraph:
    """The training graph of the forward graph ``graph`` (see the module doc).

    ``param_bytes`` (default: ``graph.memory``), ``trainable_bytes`` (default: ``param_bytes``) and
    ``activation_bytes`` (stashed output per node, default 0) are per-node byte counts;
    ``backward_compute`` is ``[K, n]`` (rows in ``graph.kinds`` order; ``nan`` = not given, take
    ``backward_factor`` times forward).
    """
    if graph.is_training:
        raise InputError("the graph already has backward nodes", source=graph.source)
    key = optimizer.lower()
    if key not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if not (backward_factor >= 0 and np.isfinite(backward_factor)):
        raise InputError(f"backward factor must be a non-negative number, got {backward_factor!r}")
    n, K = graph.num_nodes, len(graph.kinds)

    def per_node(x, default):
        a = np.asarray(default if x is None else x, dtype=np.float64).reshape(-1)
        if a.shape != (n,):
            raise InputError(f"expected {n} per-node values, got {a.shape[0]}")
        return a

    params = per_node(param_bytes, graph.memory)
    trainable = per_node(trainable_bytes, params)
    stash = per_node(activation_bytes, np.zeros(n))

    bwd = np.asarray(graph.compute) * backward_factor
    if backward_compute is not None:
        given = np.asarray(backward_compute, dtype=np.float64).reshape(K, n)
        bwd = np.where(np.isnan(given), bwd, given)
    bwd = np.where(np.isfinite(graph.compute), bwd, np.inf)  # unsupported forward: unsupported backward

    # gradient messages: the twin of v sends one gradient per forward predecessor u of v
    grad_comm = np.zeros((K, n))
    np.add.at(grad_comm.T, graph.dst, np.asarray(graph.comm).T[graph.src])

    taken = set(graph.names)
    twin_names = []
    for name in graph.names:
        t = name + GRAD_SUFFIX
        k = 1
        while t in taken:
            t, k = f"{name}{GRAD_SUFFIX}{k}", k + 1
        taken.add(t)
        twin_names.append(t)

    colo = np.asarray(graph.colocation)
    fwd_class = np.where(colo >= 0, colo, colo.max(initial=-1) + 1 + np.arange(n))
    if all(isinstance(i, (int, np.integer)) for i in graph.ids):
        first = int(max(graph.ids, default=-1)) + 1  # integer ids: twins numbered after the forward ones
        ids = list(graph.ids) + [first + j for j in range(n)]
    else:
        ids = list(graph.ids) + twin_names
    s, d = graph.src, graph.dst
    edges = np.concatenate([
        np.stack([s, d], axis=1),  # forward
        np.stack([n + d, n + s], axis=1),  # gradients, reversed
        np.stack([np.arange(n), n + np.arange(n)], axis=1),  # stash: forward -> its twin
    ])
    return OpGraph.build(
        names=list(graph.names) + twin_names, ids=ids, kinds=graph.kinds,
        compute=np.hstack([graph.compute, bwd]), comm=np.hstack([graph.comm, grad_comm]),
        memory=np.concatenate([params + stash, trainable * (1 + OPTIMIZERS[key])]),
        edges=edges, backward=np.concatenate([np.zeros(n, bool), np.ones(n, bool)]),
        colocation=np.concatenate([fwd_class, fwd_class]), source=graph.source,
        meta={**dict(graph.meta), "training": {"optimizer": key, "backward_factor": backward_factor},
              **(meta or {})},
    )
