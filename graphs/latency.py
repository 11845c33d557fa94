"""The latency evaluator: how long one sample takes end to end under a placement (no pipelining).

This is the definition of the latency model (the reference's, see ``shared/workloads/FORMAT.md``):

* **Hosts.** A device kind that pays no communication (``DeviceKind.pays_communication=False``, the
  reference's CPUs) is a host: each of its nodes runs on its own core as soon as all of the node's
  inputs are ready (as many cores as needed), taking the node's compute time on that kind and no
  communication. Which host device number a node has does not matter.
* **Accelerators.** Every other device runs its nodes as *subgraphs*, one after another. A subgraph
  starts when every node outside it that feeds it has finished *and* the device's previous subgraph has
  finished; it then takes ``comm_in + compute + comm_out``: the compute of its nodes on the device's
  kind, plus, counted as in the throughput model, the communication cost (on the device's kind) of
  every node outside the subgraph with a successor inside (``comm_in``) and of every node inside with a
  successor outside (``comm_out``), once per node. Every node of a subgraph finishes when the subgraph
  finishes. Data passed between two subgraphs of the same device goes through host memory, so it is
  paid like any other transfer.
* The **latency** (``total``) is the time the last node finishes.

A placement is an assignment (device number per node) plus, optionally, ``subgraphs``: for every node
on an accelerator the index of its subgraph on that device (subgraphs run in increasing index order;
the numbers need not be consecutive). Without ``subgraphs``, each accelerator's nodes are cut into as
few *convex* pieces as the reference's evaluator cuts them (a node's piece is one more than the largest
number of times a path into it leaves and re-enters the device); a convex (contiguous) device set stays
one subgraph, so the throughput solvers' placements are evaluated as they are. If the subgraphs depend
on one another in a cycle (a subgraph that is not convex, or an order on a device that contradicts the
data flow), no schedule exists: the placement is invalid and its latency is ``inf``.

Validity problems are reported, not raised: unsupported nodes, memory over capacity (per device, all
its subgraphs together), split colocation classes and cyclic subgraphs. The latency is still computed
when it is finite (a memory or colocation problem does not change the times), ``inf`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .contract import colocation_items
from .errors import InputError
from .evaluate import check_assignment, unsupported_problems
from .model import Cluster, OpGraph

__all__ = ["LatencyEvaluation", "Subgraph", "latency", "inference_latency", "host_kinds",
           "reference_latency_fields"]


@dataclass(frozen=True, eq=False)
class Subgraph:
    """One subgraph run on an accelerator: its nodes, when it ran and what it cost."""

    device: int
    index: int  # its position among the device's subgraphs (0 = first)
    nodes: np.ndarray
    start: float
    finish: float
    compute: float
    comm_in: float
    comm_out: float


@dataclass(frozen=True, eq=False)
class LatencyEvaluation:
    """Finish time of every node, the latency and validity problems of a placement."""

    total: float  # the latency: when the last node finishes (inf if there is no schedule)
    finish: np.ndarray  # [n] finish time of every node
    start: np.ndarray  # [n] start time of the node (host) or of its subgraph (accelerator)
    subgraph: np.ndarray  # [n] index of the node's subgraph on its device, -1 on a host
    subgraphs: tuple[Subgraph, ...]  # accelerator subgraphs, device by device, in running order
    problems: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.problems

    def subgraphs_per_device(self) -> dict[int, int]:
        """How many subgraphs each used accelerator runs."""
        out: dict[int, int] = {}
        for s in self.subgraphs:
            out[s.device] = out.get(s.device, 0) + 1
        return out


def host_kinds(cluster: Cluster) -> np.ndarray:
    """``[T]`` bool: which device kinds are hosts (pay no communication) in the latency model."""
    return np.array([not k.pays_communication for k in cluster.kinds], dtype=bool)


def _levels(graph: OpGraph, a: np.ndarray, accel: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The reference's convex pieces: for each node on an accelerator, 0-based piece index.

    ``level[v][j]``, per accelerator ``j`` in use: the most pieces of ``j`` that a path ending at ``v``
    passes through (a path that leaves ``j`` and comes back starts a new piece), so a node on ``j`` is in
    piece ``level[v][j] - 1``. In plain Python over tuples: a node's row is its predecessor's own tuple
    when it has one and is not on an accelerator, so most nodes cost nothing per accelerator (numpy's
    per-node calls were 70% of a latency evaluation)."""
    n = graph.num_nodes
    on = accel[a]
    devs = np.unique(a[on])
    if devs.size == 0:
        return np.full(n, -1, np.int64)
    col_of = np.full(int(a.max()) + 1, -1, np.int64)
    col_of[devs] = np.arange(devs.size)
    col = np.where(on, col_of[a], -1).tolist()
    o = np.argsort(graph.dst, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(graph.dst, minlength=n))]).tolist()
    preds = graph.src[o].tolist()
    zero = (0,) * devs.size
    level: list = [zero] * n
    out = [-1] * n
    for v in order.tolist():
        ps = preds[ptr[v]:ptr[v + 1]]
        if not ps:
            row = zero
        elif len(ps) == 1:
            row = level[ps[0]]
        else:
            row = tuple(map(max, *(level[p] for p in ps)))
        j = col[v]
        if j >= 0:
            through = max((level[p][j] + (col[p] != j) for p in ps), default=0)
            k = max(1, through)
            if row[j] != k:
                row = row[:j] + (k,) + row[j + 1:]
            out[v] = k - 1
        level[v] = row
    return np.array(out, np.int64)


def latency(graph: OpGraph, cluster: Cluster, assignment, *, subgraphs=None) -> LatencyEvaluation:
    """Evaluate the single-sample latency of ``assignment`` (see the module doc for the model).

    ``subgraphs``: optional ``[n]`` integers, the subgraph index of every node on an accelerator
    (ignored on hosts); ``None`` cuts each accelerator's nodes into convex pieces.
    """
    a = check_assignment(graph, cluster, assignment)
    n = graph.num_nodes
    compute_c, comm_c = graph.costs_for(cluster)
    dkind = cluster.device_kind()
    kd = dkind[a]
    is_host_kind = host_kinds(cluster)
    accel_dev = ~is_host_kind[dkind]  # [D]
    node_compute = compute_c[kd, np.arange(n)]
    problems = unsupported_problems(graph, cluster, a, node_compute)
    D = cluster.num_devices
    mem = np.zeros(D)
    np.add.at(mem, a, graph.memory)
    for dev in range(D):
        cap = cluster.kinds[int(dkind[dev])].memory
        if cap is not None and mem[dev] > cap:
            problems.append(f"{cluster.device_name(dev)} holds {mem[dev]:.6g} bytes but its capacity is "
                            f"{cap:.6g}")
    cls, C = colocation_items(graph)
    item_dev = np.full(C, -1, np.int64)
    item_dev[cls] = a
    split = item_dev[cls] != a
    if split.any():
        for c in np.unique(graph.colocation[split])[:10]:
            problems.append(f"colocation class {c} is split across devices")

    order = graph.topological_order()
    on_accel = accel_dev[a]
    if subgraphs is None:
        sub = _levels(graph, a, accel_dev, order)
    else:
        sub = np.asarray(subgraphs)
        if sub.shape != (n,) or (sub.size and not np.issubdtype(sub.dtype, np.integer)):
            raise InputError(f"subgraphs must hold one integer per node ({n},), got shape {sub.shape}",
                             source=graph.source)
        sub = np.where(on_accel, sub.astype(np.int64), -1)
        # renumber each device's subgraph indices to 0, 1, ... keeping their order
        if on_accel.any():
            keys = np.unique(np.stack([a[on_accel], sub[on_accel]], axis=1), axis=0)
            first = np.concatenate([[True], keys[1:, 0] != keys[:-1, 0]])
            grp = np.cumsum(first) - 1
            starts = np.flatnonzero(first)
            rank = np.arange(keys.shape[0]) - starts[grp]
            pos = {(int(d), int(s)): int(r) for (d, s), r in zip(keys.tolist(), rank.tolist())}
            sub = np.array([pos[(int(a[u]), int(sub[u]))] if on_accel[u] else -1 for u in range(n)],
                           dtype=np.int64)

    # tasks: one per host node, one per (accelerator, subgraph)
    task = np.full(n, -1, np.int64)
    host_nodes = np.flatnonzero(~on_accel)
    task[host_nodes] = np.arange(host_nodes.size)
    acc_nodes = np.flatnonzero(on_accel)
    pieces = np.unique(np.stack([a[acc_nodes], sub[acc_nodes]], axis=1), axis=0) if acc_nodes.size \
        else np.zeros((0, 2), np.int64)
    P = pieces.shape[0]
    piece_id = {(int(d), int(s)): i for i, (d, s) in enumerate(pieces.tolist())}
    base = host_nodes.size
    for u in acc_nodes.tolist():
        task[u] = base + piece_id[(int(a[u]), int(sub[u]))]
    NT = base + P

    # task durations
    dur = np.zeros(NT)
    dur[:base] = node_compute[host_nodes]
    pc = np.zeros(P)
    pin = np.zeros(P)
    pout = np.zeros(P)
    if P:
        np.add.at(pc, task[acc_nodes] - base, node_compute[acc_nodes])
        s, d = graph.src, graph.dst
        cross = task[s] != task[d]
        # sender side: node in a piece with a successor in another task, once per node
        snd = np.unique(s[cross & on_accel[s]])
        np.add.at(pout, task[snd] - base, comm_c[kd[snd], snd])
        # receiver side: node outside the piece with a successor inside, once per (node, piece)
        rcv_m = cross & on_accel[d]
        if rcv_m.any():
            pairs = np.unique(np.stack([s[rcv_m], task[d[rcv_m]] - base], axis=1), axis=0)
            ru, rp = pairs[:, 0], pairs[:, 1]
            pk = dkind[pieces[rp, 0]]
            np.add.at(pin, rp, comm_c[pk, ru])
        dur[base:] = pc + pin + pout

    # task graph: data edges plus each device's subgraphs in sequence
    ts, td = task[graph.src], task[graph.dst]
    keep = ts != td
    es = [ts[keep]]
    ed = [td[keep]]
    if P > 1:
        same = pieces[1:, 0] == pieces[:-1, 0]
        idx = np.flatnonzero(same)
        es.append(base + idx)
        ed.append(base + idx + 1)
    es_a = np.concatenate(es)
    ed_a = np.concatenate(ed)
    if es_a.size:
        e = np.unique(np.stack([es_a, ed_a], axis=1), axis=0)
        es_a, ed_a = e[:, 0], e[:, 1]
    tstart = np.zeros(NT)
    indeg = np.bincount(ed_a, minlength=NT)
    o = np.argsort(es_a, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(es_a, minlength=NT))]).tolist()
    succ = ed_a[o].tolist()
    deg = indeg.tolist()
    ready = [t for t in range(NT) if deg[t] == 0]
    st = tstart.tolist()
    du = dur.tolist()
    fin = [math.inf] * NT
    done = 0
    while ready:
        t = ready.pop()
        done += 1
        f = st[t] + du[t]
        fin[t] = f
        for w in succ[ptr[t]:ptr[t + 1]]:
            if f > st[w]:
                st[w] = f
            deg[w] -= 1
            if deg[w] == 0:
                ready.append(w)
    tstart = np.array(st)
    tfinish = np.array(fin)
    if done < NT:
        stuck = [t for t in range(NT) if deg[t] > 0 and t >= base][:4]
        names = ", ".join(f"{cluster.device_name(int(pieces[t - base, 0]))}#{int(pieces[t - base, 1])}"
                          for t in stuck)
        problems.append("the subgraphs depend on each other in a cycle (a subgraph is not contiguous, or "
                        f"the order of subgraphs on a device contradicts the data flow): {names}")
        blocked = np.array(deg) > 0
        tstart[blocked] = math.inf
        tfinish[blocked] = math.inf

    finish = tfinish[task] if n else np.zeros(0)
    start = tstart[task] if n else np.zeros(0)
    total = float(finish.max()) if n else 0.0
    if math.isnan(total):
        total = math.inf
    subs = tuple(
        Subgraph(device=int(pieces[i, 0]), index=int(pieces[i, 1]),
                 nodes=np.flatnonzero(task == base + i), start=float(tstart[base + i]),
                 finish=float(tfinish[base + i]), compute=float(pc[i]), comm_in=float(pin[i]),
                 comm_out=float(pout[i]))
        for i in range(P))
    return LatencyEvaluation(total, finish, start, sub, subs, tuple(problems))


def inference_latency(graph: OpGraph, cluster: Cluster, assignment, *,
                      subgraphs=None) -> LatencyEvaluation | None:
    """:func:`latency` of a placement, or ``None`` for a training graph, which has no latency-model
    figure: the model is an inference model (the latency objective refuses training graphs), and on a
    training graph it would pay every stashed activation as a transfer through host memory, about twice
    the time a sample takes through the pipeline's forward and backward passes."""
    if graph.is_training:
        return None
    return latency(graph, cluster, assignment, subgraphs=subgraphs)


def reference_latency_fields(graph: OpGraph, cluster: Cluster, ev: LatencyEvaluation) -> dict:
    """The reference's latency result fields for a placement evaluated by :func:`latency`:
    ``{"totalLatency", "fpgas": [{"nodes": [ids]}, ...], "cpus": [{"nodes": [ids]}]}``.

    Every accelerator subgraph is one entry of ``fpgas`` (device by device, in running order), as the
    reference's latency IP writes them; all host nodes form one entry of ``cpus``. The reference's
    evaluator (``greedy -computeLatency``) reads this; it runs every ``fpgas`` entry as its own device,
    so for one subgraph per accelerator it computes the same latency, and for several it can only
    compute less (it does not run a device's subgraphs one after another).
    """

    def _id(x):
        return x.item() if hasattr(x, "item") else x

    on_accel = ev.subgraph >= 0
    return {
        "totalLatency": ev.total if math.isfinite(ev.total) else None,
        "fpgas": [{"nodes": [_id(graph.ids[u]) for u in s.nodes]} for s in ev.subgraphs],
        "cpus": [{"nodes": [_id(graph.ids[u]) for u in np.flatnonzero(~on_accel)]}],
    }
