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
:func:`evaluate` is the stage model's one evaluator (:func:`graphs.parallel.evaluate_plan`) on the
operator-level problem (:func:`graphs.parallel.operator_problem`), one ``d = t = 1`` stage per used
device, seen per device; ``tests/test_evaluate.py`` checks it against a node-by-node recount.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .model import Cluster, OpGraph
from .parallel import PlanEvaluation, Stage, evaluate_plan, operator_problem

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
    """Per-device loads of a placement, its max-load, validity problems and contiguity; ``plan``: the
    same placement in the stage view (:func:`graphs.parallel.evaluate_plan` on
    :func:`graphs.parallel.operator_problem`: one ``d = t = 1`` stage per used device, in device order,
    nodes and kinds as ``graph``'s and ``cluster``'s), what the per-device rows are read from."""

    devices: tuple[DeviceLoad, ...]
    max_load: float
    problems: tuple[str, ...]
    contiguous: bool
    stage_order: tuple[int, ...] | None  # devices in pipeline order when contiguous (used ones only)
    plan: PlanEvaluation | None = None

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
    """Evaluate ``assignment`` (device number per node; see :class:`~graphs.model.Cluster`).

    This is the one evaluator (:func:`graphs.parallel.evaluate_plan`) on the operator-level stage problem
    (:func:`graphs.parallel.operator_problem`), one stage per used device with ``d = t = 1``, seen per
    device."""
    a = check_assignment(graph, cluster, assignment)
    problem, variant = operator_problem(graph, cluster)
    dkind = cluster.device_kind()
    order = np.argsort(a, kind="stable")
    used, starts = np.unique(a[order], return_index=True)
    groups = np.split(order, starts[1:]) if used.size else []
    plan = [Stage(tuple(nodes.tolist()), int(dkind[dev]), 1, 1, tuple(variant[dkind[dev], nodes].tolist()))
            for dev, nodes in zip(used.tolist(), groups)]
    pe = evaluate_plan(problem, plan, labels=[cluster.device_name(dev) for dev in used.tolist()])
    rows = {int(dev): (st, nodes) for dev, st, nodes in zip(used.tolist(), pe.stages, groups)}
    problems = list(pe.problems)
    compute = None  # the graph's own costs, for devices holding a node their kind cannot run
    devices = []
    for dev in range(cluster.num_devices):
        kind = cluster.kinds[int(dkind[dev])]
        name = cluster.device_name(dev)
        if dev not in rows:
            devices.append(DeviceLoad(dev, kind.name, name, np.zeros(0, np.int64), 0.0, 0.0, 0.0, 0.0, 0.0,
                                      0.0, kind.memory))
            continue
        st, nodes = rows[dev]
        fwd, bwd, mem = st.compute - st.compute_backward, st.compute_backward, st.memory
        if not math.isfinite(st.compute):  # a node the kind cannot run: inf in its pass; its memory counts
            compute = graph.costs_for(cluster)[0] if compute is None else compute
            times = compute[int(dkind[dev]), nodes]
            back = graph.backward[nodes]
            fwd, bwd = float(times[~back].sum()), float(times[back].sum())
            mem = float(graph.memory[nodes].sum())
            if mem > kind.capacity:
                problems.append(f"{name} needs {mem:.6g} bytes per {kind.name} device but its capacity is "
                                f"{kind.capacity:.6g}")
        devices.append(DeviceLoad(dev, kind.name, name, np.sort(nodes), st.compute, fwd, bwd, st.comm_in,
                                  st.comm_out, mem, kind.memory))
    order_dev = None if pe.stage_order is None else tuple(int(used[i]) for i in pe.stage_order)
    max_load = max((d.load for d in devices), default=0.0)  # = pe.objective, summed as the rows are
    return Evaluation(tuple(devices), float(max_load), tuple(problems), pe.contiguous, order_dev, pe)


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
