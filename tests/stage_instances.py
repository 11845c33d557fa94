"""Wider random stage-model problems (:mod:`graphs.parallel`) for the conformance test: 1-3 device
kinds, one of them sometimes a host (``pays_communication=False``: its tensors cost nothing and its
variants have no sync terms), kinds of 1-5 devices (not only powers of two), tensor-parallel degrees
``t`` in {1, 2, 4} where the kind has that many devices, variants (a recompute-like one: more time, less
memory per micro-batch in flight), memory from ample to too tight for anything, every schedule,
``max_replicas`` ``None`` or 1, and problems that need not be pipelines (``contiguous=False``).

``pipeline=True`` draws a problem that is exactly the one-device-per-stage model
(:func:`graphs.parallel.pipeline_misfit` is ``''``), so that the solvers of that model alone take it too.

Instances are tiny (at most ``max_nodes`` nodes, 4 by default) for :func:`tests.brute_stages.optimum`.
:func:`tests.test_dp_stages.random_problem` is left as it is (other tests depend on its random stream).
"""

from __future__ import annotations

import numpy as np

from graphs.model import DeviceKind
from graphs.parallel import SCHEDULES, ParallelGraph, ParallelProblem, Variant

__all__ = ["wide_problem"]


def wide_problem(rng: np.random.Generator, *, max_nodes: int = 4, pipeline: bool | None = None,
                 contiguous: bool | None = None) -> ParallelProblem:
    """A random stage-model problem (see the module doc). ``pipeline``/``contiguous``: ``None`` draws
    them (one problem in five is the pipeline model; one in four need not be a pipeline)."""
    pipeline = bool(rng.random() < 0.2) if pipeline is None else pipeline
    contiguous = bool(rng.random() < 0.75) if contiguous is None else contiguous
    n = int(rng.integers(1, max_nodes + 1))
    K = int(rng.integers(1, 4))
    host = int(rng.integers(K)) if rng.random() < 0.4 else -1  # the kind that pays no communication
    counts = [int(rng.integers(1, 6)) for _ in range(K)]
    if host >= 0:
        counts[host] = int(rng.integers(1, 3))
    speed = rng.uniform(0.3, 2.0, K)
    if host >= 0:
        speed[host] *= float(rng.uniform(2, 6))  # a host is slower
    edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.5]

    tensors = []
    for u in range(n):
        outs = [v for (a, v) in edges if a == u]
        if not outs:
            continue
        cost = rng.random(K).round(2)
        if host >= 0:
            cost[host] = 0.0  # host memory: nothing to transfer
        if rng.random() < 0.5:  # one tensor to all consumers (reference style) or one per edge (Piper)
            tensors.append((u, outs, cost))
        else:
            tensors.extend((u, [v], cost) for v in outs)

    work = rng.uniform(0.0, 2.0, n).round(2)
    work[rng.random(n) < 0.1] = 0.0
    memory = rng.integers(0, 4, n).astype(float)  # a node's memory per micro-batch (a) or in all (b)
    variants = []
    for u in range(n):
        ins = [e for e, (_, cons, _) in enumerate(tensors) if u in cons]
        outs = [e for e, (s, _, _) in enumerate(tensors) if s == u]
        b = float(memory[u])
        home = int(rng.integers(K))  # a pipeline-model node runs on some kind
        for k in range(K):
            if K > 1 and rng.random() < 0.12 and not (pipeline and k == home):
                continue  # the node cannot run on this kind
            if pipeline:  # exactly the one-device-per-stage model: t = 1, a = w = 0, one b per node
                variants.append(Variant(u, k, 1, "vanilla", round(float(work[u] * speed[k]), 3), b=b))
                continue
            for t in (1, 2, 4):
                if t > counts[k] or (t > 1 and rng.random() < 0.4) or (t == 1 and rng.random() < 0.1):
                    continue
                eff = float(rng.uniform(0.6, 1.0)) if t > 1 else 1.0  # tensor parallelism's efficiency
                time = round(float(work[u] * speed[k] / (t * eff)), 3)
                params = float(rng.integers(0, 4)) / t
                a = round(float(rng.uniform(0, 1.5)) / t, 2)
                bb = round(b / t, 2)
                w = round(bb * float(rng.random()), 2)
                sync_in, sync_out = {}, {}
                if t > 1 and k != host:
                    sync_in = {e: round(float(rng.random()) * 0.5, 2) for e in ins if rng.random() < 0.5}
                    sync_out = {e: round(float(rng.random()) * 0.5, 2) for e in outs if rng.random() < 0.5}
                variants.append(Variant(u, k, t, "vanilla", time, params=params, a=a, b=bb, w=w,
                                        sync_in=sync_in, sync_out=sync_out))
                if rng.random() < 0.5:  # recompute: more time, a fraction of the activations kept
                    slower = round(time * float(rng.uniform(1.1, 1.5)), 3)
                    variants.append(Variant(u, k, t, "recompute", slower, params=params,
                                            a=round(a * float(rng.uniform(0, 0.4)), 2), b=bb, w=w,
                                            sync_in=sync_in, sync_out=sync_out))
    g = ParallelGraph.build(ids=list(range(n)), names=None, num_kinds=K, edges=edges, tensors=tensors,
                            variants=variants)

    total = float(memory.sum()) + 1.0
    kinds = []
    for k in range(K):
        tight = rng.random()
        if k == host and tight < 0.5:
            cap = None  # host memory: plenty
        else:  # from too little for the largest node to all of it and its activations
            cap = round(float(rng.uniform(0.15, 1.6)) * total, 2)
        server = int(rng.integers(1, 4)) if rng.random() < 0.5 else None
        kinds.append(DeviceKind(f"{'cpu' if k == host else 'gpu'}{k}", counts[k], cap,
                                pays_communication=k != host, bandwidth=float(rng.uniform(1, 4)),
                                server_size=server, intra_bandwidth=float(rng.uniform(2, 8)),
                                inter_bandwidth=float(rng.uniform(0.5, 2))))
    devices = sum(counts)
    if pipeline:
        N = devices + int(rng.integers(0, 3))  # so that sum d <= N cuts no plan of one device per stage
        max_replicas = 1
    else:
        N = int(rng.choice([1, 2, 3, 4, 6]))
        max_replicas = None if rng.random() < 0.75 else 1
    return ParallelProblem(g, tuple(kinds), N, str(rng.choice(SCHEDULES)), max_replicas=max_replicas,
                           contiguous=contiguous)
