"""The evaluator: what any placement (contiguous or not) costs, and whether it is valid.

This is the definition of the throughput model (the reference's, see ``shared/workloads/FORMAT.md``):

* a device's **compute** is the sum of its nodes' compute times on that device's kind (forward and
  backward alike: the training load is forward + backward);
* its **communication**: for every node ``u`` whose output leaves the device, ``u``'s cost is paid once
  by the device holding ``u`` (sending) and once by every *other* device holding a successor of ``u``
  (receiving), once per node and device however many edges cross; kinds that pay no communication
  (host CPUs) pay nothing;
* its **load** = compute + communication; the objective is the **max-load** over devices.

A placement is *valid* when every node runs on its device's kind, every device's memory holds its
nodes and every colocation class sits on one device; it is *contiguous* when, in addition, the devices
can be ordered so that every forward edge between items stays on a device or goes to a later one
(each device then gets the difference of two nested ideals, as in the DP).

It lives in ``graphs`` because it *is* the model: solvers use it too, and ``placement`` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .contract import colocation_items, item_edges
from .errors import InputError
from .model import Cluster, OpGraph

__all__ = ["DeviceLoad", "Evaluation", "evaluate", "check_assignment", "unsupported_problems", "split_loads",
           "split_max"]


@dataclass(frozen=True, eq=False)
class DeviceLoad:
    """One device's share of a placement."""

    device: int
    kind: str
    name: str
    nodes: np.ndarray  # node indices
    compute: float
    compute_forward: float
    compute_backward: float
    comm_in: float
    comm_out: float
    memory: float
    capacity: float | None

    @property
    def comm(self) -> float:
        return self.comm_in + self.comm_out

    @property
    def load(self) -> float:
        return self.compute + self.comm_in + self.comm_out


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Per-device loads of a placement, its max-load, validity problems and contiguity."""

    devices: tuple[DeviceLoad, ...]
    max_load: float
    problems: tuple[str, ...]
    contiguous: bool
    stage_order: tuple[int, ...] | None  # devices in pipeline order when contiguous (used ones only)

    @property
    def valid(self) -> bool:
        return not self.problems


def check_assignment(graph: OpGraph, cluster: Cluster, assignment) -> np.ndarray:
    """Return the assignment as an int64 array, or raise :class:`InputError` saying what is wrong."""
    a = np.asarray(assignment)
    if a.shape != (graph.num_nodes,):
        raise InputError(f"the assignment has shape {a.shape}; expected one device per node "
                         f"({graph.num_nodes},)", source=graph.source)
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise InputError("the assignment must hold integer device numbers", source=graph.source)
    a = a.astype(np.int64)
    bad = (a < 0) | (a >= cluster.num_devices)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"node {graph.ids[i]} is assigned to device {a[i]}, but the cluster has devices "
                         f"0..{cluster.num_devices - 1}", source=graph.source)
    return a


def unsupported_problems(graph: OpGraph, cluster: Cluster, a: np.ndarray,
                         node_compute: np.ndarray) -> list[str]:
    """One line per node placed on a kind that cannot run it (``node_compute`` is ``inf`` there), at most
    ten and a count of the rest."""
    unsupported = ~np.isfinite(node_compute)
    out = [f"node {graph.ids[i]} is not supported on {cluster.device_name(int(a[i]))}"
           for i in np.flatnonzero(unsupported)[:10]]
    if unsupported.sum() > 10:
        out.append(f"... and {int(unsupported.sum()) - 10} more unsupported nodes")
    return out


def evaluate(graph: OpGraph, cluster: Cluster, assignment) -> Evaluation:
    """Evaluate ``assignment`` (device number per node; see :class:`~graphs.model.Cluster`)."""
    a = check_assignment(graph, cluster, assignment)
    compute_c, comm_c = graph.costs_for(cluster)
    D = cluster.num_devices
    dkind = cluster.device_kind()
    kd = dkind[a]
    n = graph.num_nodes
    node_compute = compute_c[kd, np.arange(n)]
    problems = unsupported_problems(graph, cluster, a, node_compute)

    def per_device(values, mask=None):
        w = values if mask is None else np.where(mask, values, 0.0)
        out = np.zeros(D)
        np.add.at(out, a, w)  # add.at keeps inf (bincount would turn inf*0 into nan)
        return out

    bwd = graph.backward
    comp = per_device(node_compute)
    comp_f = per_device(node_compute, ~bwd)
    comp_b = per_device(node_compute, bwd)
    mem = per_device(graph.memory)

    # communication: sender pays once per node, each other receiving device once per node
    s, d = graph.src, graph.dst
    cross = a[s] != a[d]
    senders = np.unique(s[cross])
    out = np.zeros(D)
    np.add.at(out, a[senders], comm_c[kd[senders], senders])
    recv = np.unique(np.stack([s[cross], a[d[cross]]], axis=1), axis=0)
    inn = np.zeros(D)
    if recv.size:
        ru, rd = recv[:, 0], recv[:, 1]
        np.add.at(inn, rd, comm_c[dkind[rd], ru])

    caps = [k.memory for k in cluster.kinds]
    devices = []
    for dev in range(D):
        t = int(dkind[dev])
        cap = caps[t]
        if cap is not None and mem[dev] > cap:
            problems.append(f"{cluster.device_name(dev)} holds {mem[dev]:.6g} bytes but its capacity is "
                            f"{cap:.6g}")
        devices.append(DeviceLoad(
            device=dev, kind=cluster.kinds[t].name, name=cluster.device_name(dev),
            nodes=np.flatnonzero(a == dev), compute=float(comp[dev]), compute_forward=float(comp_f[dev]),
            compute_backward=float(comp_b[dev]), comm_in=float(inn[dev]), comm_out=float(out[dev]),
            memory=float(mem[dev]), capacity=cap))

    cls, C = colocation_items(graph)
    item_dev = np.full(C, -1, np.int64)
    item_dev[cls] = a
    split = item_dev[cls] != a
    if split.any():
        bad_classes = np.unique(graph.colocation[split])
        for c in bad_classes[:10]:
            members = np.flatnonzero(graph.colocation == c)
            where = ", ".join(f"{graph.ids[u]}@{cluster.device_name(int(a[u]))}" for u in members[:6])
            problems.append(f"colocation class {c} is split across devices: {where}")
        order = None
    else:
        order = _device_order(graph, cls, item_dev, D)

    loads = comp + inn + out
    max_load = float(loads.max()) if D else 0.0
    return Evaluation(tuple(devices), max_load, tuple(problems), order is not None,
                      None if order is None else tuple(order))


def _device_order(graph: OpGraph, cls: np.ndarray, item_dev: np.ndarray, D: int) -> list[int] | None:
    """Devices in an order that every forward item edge respects, or ``None`` if there is none."""
    s, d = item_edges(graph, cls)
    ds, dd = item_dev[s], item_dev[d]
    keep = ds != dd
    pairs = np.unique(np.stack([ds[keep], dd[keep]], axis=1), axis=0) if keep.any() else np.zeros((0, 2), int)
    used = sorted(set(item_dev.tolist()))
    indeg = {u: 0 for u in used}
    succ: dict[int, list[int]] = {u: [] for u in used}
    for x, y in pairs.tolist():
        succ[x].append(y)
        indeg[y] += 1
    ready = [u for u in used if indeg[u] == 0]
    order = []
    while ready:
        u = ready.pop(0)
        order.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return order if len(order) == len(used) else None


def split_loads(graph: OpGraph, cluster: Cluster, assignment) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward load of every device: each node's compute, and its communication (sent and
    received, counted as in :func:`evaluate`), count in the node's own pass."""
    a = np.asarray(assignment, np.int64)
    compute_c, comm_c = graph.costs_for(cluster)
    dkind = cluster.device_kind()
    kd = dkind[a]
    n = graph.num_nodes
    D = cluster.num_devices
    bwd = graph.backward
    node_compute = compute_c[kd, np.arange(n)]
    fwd_l, bwd_l = np.zeros(D), np.zeros(D)
    np.add.at(fwd_l, a[~bwd], node_compute[~bwd])
    np.add.at(bwd_l, a[bwd], node_compute[bwd])
    s, d = graph.src, graph.dst
    cross = a[s] != a[d]
    senders = np.unique(s[cross])
    for mask, acc in ((~bwd[senders], fwd_l), (bwd[senders], bwd_l)):
        u = senders[mask]
        np.add.at(acc, a[u], comm_c[kd[u], u])
    recv = np.unique(np.stack([s[cross], a[d[cross]]], axis=1), axis=0)
    if recv.size:
        ru, rd = recv[:, 0], recv[:, 1]
        for mask, acc in ((~bwd[ru], fwd_l), (bwd[ru], bwd_l)):
            np.add.at(acc, rd[mask], comm_c[dkind[rd[mask]], ru[mask]])
    return fwd_l, bwd_l


def split_max(graph: OpGraph, cluster: Cluster, assignment) -> float:
    """The split-max objective: max forward load + max backward load."""
    f, b = split_loads(graph, cluster, assignment)
    return float(f.max(initial=0.0) + b.max(initial=0.0))
