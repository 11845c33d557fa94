"""Shared test instances: tiny named graphs, a random instance generator and brute-force optima.

Every solver's tests draw from here, and the evaluator (never a solver's own number) decides whether
an answer is right.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from graphs.contract import colocation_items
from graphs.evaluate import evaluate
from graphs.model import Cluster, DeviceKind, OpGraph

WORKLOADS = os.environ.get(
    "PLACEMENT_WORKLOADS",
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "workloads"),
)


@dataclass
class Instance:
    graph: OpGraph
    cluster: Cluster
    label: str = ""


def random_instance(rng: np.random.Generator, *, max_items: int = 6, training: bool | None = None,
                    kinds: int | None = None, label: str = "") -> Instance:
    """A small random DAG with up to ``max_items`` forward items, 1-3 device kinds, unsupported nodes,
    memory limits, communication, colocation classes and (optionally) a backward pass."""
    training = bool(rng.integers(2)) if training is None else training
    T = int(rng.integers(1, 4)) if kinds is None else kinds
    nf = int(rng.integers(2, max_items + 1))
    names, fwd_edges = [], []
    for v in range(nf):
        for u in range(v):
            if rng.random() < 0.35:
                fwd_edges.append((u, v))
    kind_names = [f"k{t}" for t in range(T)]
    speed = rng.uniform(0.3, 3.0, size=T)
    base = rng.uniform(0.0, 5.0, size=nf)
    base[rng.random(nf) < 0.15] = 0.0  # some zero-cost nodes
    nodes_compute = [[base[v] * speed[t] for t in range(T)] for v in range(nf)]
    for v in range(nf):
        for t in range(T):
            if T > 1 and rng.random() < 0.12:
                nodes_compute[v][t] = math.inf
    comm = [[float(rng.uniform(0, 2)) * (t + 1) / T for t in range(T)] for _ in range(nf)]
    memory = [float(rng.uniform(0, 4)) for _ in range(nf)]
    colo = list(range(nf))
    # occasionally force two forward nodes to share a device
    if nf >= 3 and rng.random() < 0.3:
        a, b = rng.choice(nf, size=2, replace=False)
        colo[int(b)] = colo[int(a)]
    backward = [False] * nf
    edges = list(fwd_edges)
    names = [f"f{v}" for v in range(nf)]
    if training:
        twin = {}
        for v in range(nf):
            if rng.random() < 0.85:
                twin[v] = len(names)
                names.append(f"b{v}")
                nodes_compute.append([x * 2 for x in nodes_compute[v]])
                comm.append([float(rng.uniform(0, 2)) for _ in range(T)])
                memory.append(float(rng.uniform(0, 1)))
                colo.append(colo[v])
                backward.append(True)
        for u, v in fwd_edges:
            if u in twin and v in twin:
                edges.append((twin[v], twin[u]))  # gradients flow backwards
            if v in twin and rng.random() < 0.5:
                edges.append((u, twin[v]))  # stashed activation
        if rng.random() < 0.5 and twin:
            # a backward-only node (e.g. the loss gradient) with no forward twin
            lo = len(names)
            names.append("loss_grad")
            nodes_compute.append([float(rng.uniform(0, 2))] * T)
            comm.append([float(rng.uniform(0, 1))] * T)
            memory.append(0.0)
            colo.append(10_000)
            backward.append(True)
            last = max(twin)
            edges.append((last, lo))
            edges.append((lo, twin[last]))
    n = len(names)
    counts = [int(rng.integers(0 if T > 1 else 1, 4)) for _ in range(T)]
    if sum(counts) == 0:
        counts[0] = 1
    total_mem = sum(memory)
    kinds_ = []
    for t in range(T):
        cap = None if rng.random() < 0.4 else float(rng.uniform(0.45, 1.1) * total_mem + 1e-9)
        kinds_.append(DeviceKind(kind_names[t], counts[t], cap, bool(rng.random() < 0.85)))
    g = OpGraph.build(
        names=names, kinds=kind_names,
        compute=np.array(nodes_compute).T.reshape(T, n), comm=np.array(comm).T.reshape(T, n),
        memory=memory, edges=edges, backward=backward, colocation=colo, source=label or None,
    )
    return Instance(g, Cluster(tuple(kinds_)), label)


def latency_instance(rng: np.random.Generator, compute: list, comm: list, memory: np.ndarray, edges,
                     label: str, *, accelerators, colocation=None) -> Instance:
    """A latency instance (inference): ``compute`` and ``comm`` rows for one or two accelerator kinds,
    then the host's; accelerator kind ``k`` gets ``rng.integers(*accelerators[k][0])`` devices, each
    holding ``rng.uniform(*accelerators[k][1])`` of the graph's memory; one or two host cores, unlimited
    memory."""
    n = len(memory)
    tot = float(np.sum(memory))
    kinds = [DeviceKind(name, int(rng.integers(*counts)), float(rng.uniform(*share)) * tot, True)
             for name, (counts, share) in zip(("acc", "acc2"), accelerators[:len(compute) - 1])]
    kinds.append(DeviceKind("cpu", int(rng.integers(1, 3)), None, False))
    g = OpGraph.build(names=[f"n{i}" for i in range(n)], kinds=[k.name for k in kinds],
                      compute=np.array(compute), comm=np.array(comm), memory=memory, edges=edges,
                      backward=[False] * n, colocation=colocation, source=label)
    return Instance(g, Cluster(tuple(kinds)), label)


def canonical_assignments(num_items: int, cluster: Cluster):
    """Every assignment of items to devices up to renaming identical devices (devices of one kind are
    opened in order)."""
    dkind = cluster.device_kind()
    first = np.concatenate([[0], np.cumsum([k.count for k in cluster.kinds])[:-1]])
    counts = [k.count for k in cluster.kinds]

    def rec(i, opened, acc):
        if i == num_items:
            yield list(acc)
            return
        for t, k in enumerate(counts):
            for j in range(min(opened[t] + 1, k)):
                acc.append(int(first[t] + j))
                newly = j == opened[t]
                if newly:
                    opened[t] += 1
                yield from rec(i + 1, opened, acc)
                if newly:
                    opened[t] -= 1
                acc.pop()

    del dkind
    yield from rec(0, [0] * len(counts), [])


def by_compute_floor(inst: Instance, *, hosts=None, paths: bool = False) -> tuple[np.ndarray, np.ndarray,
                                                                                   np.ndarray]:
    """Every canonical item assignment (rows of device numbers per colocation item), in increasing order
    of a floor under any objective that runs each device's nodes one after another: the busiest device's
    compute (``inf`` where an item sits on a kind that lacks one of its nodes). ``hosts``: one bool per
    kind whose devices run every node at once (a host's cores), left out of that floor. ``paths`` (for
    one sample's latency): also the longest path of node computes, as a node starts after its inputs
    are done (which covers each host node's own time). Returns ``(assignments, floors, cls)``, ``cls``
    the item of every node."""
    g, cl = inst.graph, inst.cluster
    cls, C = colocation_items(g)
    assignments = np.array(list(canonical_assignments(C, cl)), dtype=np.int64).reshape(-1, C)
    compute, _ = g.costs_for(cl)
    K, D, M = len(cl.kinds), cl.num_devices, assignments.shape[0]
    serial = np.ones(K, bool) if hosts is None else ~np.asarray(hosts, bool)
    item_compute = np.zeros((K, C))
    np.add.at(item_compute.T, cls, compute.T)  # inf stays inf: an item some node of which a kind lacks
    dkind = cl.device_kind()
    kinds = dkind[assignments]
    per_item = np.where(serial[kinds], item_compute[kinds, np.arange(C)], 0.0)
    per_device = np.zeros((M, D))
    np.add.at(per_device, (np.repeat(np.arange(M), C), assignments.ravel()), per_item.ravel())
    floor = per_device.max(axis=1) if D else np.zeros(M)
    if paths and g.num_nodes:
        node_compute = compute[kinds[:, cls], np.arange(g.num_nodes)]  # [M, n]
        finish = np.zeros_like(node_compute)
        for v in g.topological_order().tolist():
            preds = g.src[g.dst == v]
            finish[:, v] = node_compute[:, v] + (finish[:, preds].max(axis=1) if preds.size else 0.0)
        floor = np.maximum(floor, finish.max(axis=1))
    order = np.argsort(floor, kind="stable")
    return assignments[order], floor[order], cls


def brute_force(inst: Instance, *, contiguous: bool = True) -> float:
    """Minimum max-load over every valid (and, if asked, contiguous) placement; ``inf`` if none.

    Every canonical assignment is a candidate, scored by the evaluator in increasing order of its
    busiest device's compute (a lower bound on its max-load: a load is compute plus communication),
    stopping once that bound reaches the best valid max-load found: the ones left cannot beat it, so
    the minimum is that of scoring them all."""
    best = math.inf
    assignments, floors, cls = by_compute_floor(inst)
    for items_dev, floor in zip(assignments, floors):
        if not floor < best:  # also ends at an infinite floor: an unsupported item, never valid
            break
        ev = evaluate(inst.graph, inst.cluster, items_dev[cls])
        if not ev.valid or (contiguous and not ev.contiguous):
            continue
        best = min(best, ev.max_load)
    return best


def chain(n: int = 4, kinds=("gpu",), counts=(2,)) -> Instance:
    """a0 -> a1 -> ... with unit compute and comm 0.5."""
    g = OpGraph.build(names=[f"a{i}" for i in range(n)], kinds=kinds,
                      compute=np.ones((len(kinds), n)), comm=np.full((len(kinds), n), 0.5),
                      memory=np.zeros(n), edges=[(i, i + 1) for i in range(n - 1)])
    return Instance(g, Cluster(tuple(DeviceKind(k, c) for k, c in zip(kinds, counts))), "chain")


def all_small(seed: int = 0, count: int = 50, **kw) -> list[Instance]:
    rng = np.random.default_rng(seed)
    return [random_instance(rng, label=f"random-{seed}-{i}", **kw) for i in range(count)]


__all__ = ["WORKLOADS", "Instance", "random_instance", "brute_force", "by_compute_floor",
           "canonical_assignments", "chain", "all_small"]
