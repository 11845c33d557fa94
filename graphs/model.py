"""The operator graph and the cluster it is placed on.

An :class:`OpGraph` is a DAG of operators. Every node carries, for each *device kind* it knows about,
its compute time (``inf`` = the kind cannot run it), the cost of moving its output between a device of
that kind and host memory (paid by the sender and by every other device that receives it), and one
memory footprint (bytes held on whichever device runs it). Nodes are forward or backward (training);
nodes that share a *colocation class* must sit on the same device, which is how a backward operator
follows its forward twin.

A :class:`Cluster` is a list of :class:`DeviceKind` s, each with a count, a memory capacity
(``None`` = unlimited) and whether it pays communication (host CPUs do not: data already lives in host
memory). Devices are numbered kind by kind, in the cluster's order; an *assignment* maps every node
index to such a device number.

All arrays are numpy and read-only once built; :meth:`OpGraph.build` validates everything and raises
:class:`~graphs.errors.InputError` naming the offending node or edge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import CycleError, InputError

__all__ = ["DeviceKind", "Cluster", "Node", "OpGraph"]


@dataclass(frozen=True)
class DeviceKind:
    """A kind of device: ``count`` identical devices of ``memory`` bytes each (``None``: unlimited).

    ``pays_communication``: ``False`` for host CPUs, whose data already lives in host memory, so a stage
    on them pays no tensor transfer. The rest is the stage model's (:mod:`graphs.parallel`):
    ``bandwidth`` (bytes/s) converts a Piper file's bytes to times; ``intra_bandwidth`` /
    ``inter_bandwidth`` (bytes/s, default ``bandwidth``) carry the replicas' parameter resync inside one
    server of ``server_size`` devices / across servers (``server_size`` ``None``: one server holds them
    all)."""

    name: str
    count: int
    memory: float | None = None
    pays_communication: bool = True
    bandwidth: float = math.inf
    server_size: int | None = None
    intra_bandwidth: float | None = None
    inter_bandwidth: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("a device kind needs a name")
        if not isinstance(self.count, (int, np.integer)) or isinstance(self.count, bool) or self.count < 0:
            raise InputError(f"device kind {self.name!r}: count must be a non-negative integer, "
                             f"got {self.count!r}")
        if self.memory is not None and not (isinstance(self.memory, (int, float, np.integer, np.floating))
                                            and not isinstance(self.memory, bool)
                                            and self.memory >= 0 and not math.isnan(self.memory)):
            raise InputError(f"device kind {self.name!r}: memory must be a non-negative number or None, "
                             f"got {self.memory!r}")
        if not isinstance(self.pays_communication, (bool, np.bool_)):
            raise InputError(f"device kind {self.name!r}: pays_communication must be True or False, "
                             f"got {self.pays_communication!r}")
        for what in ("bandwidth", "intra_bandwidth", "inter_bandwidth"):
            v = getattr(self, what)
            number = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            if v is not None and not (number and v > 0):
                raise InputError(f"device kind {self.name!r}: {what} must be positive, got {v!r}")
        if self.server_size is not None and (isinstance(self.server_size, bool)
                                             or not isinstance(self.server_size, (int, np.integer))
                                             or self.server_size < 1):
            raise InputError(f"device kind {self.name!r}: server_size must be a positive integer, "
                             f"got {self.server_size!r}")

    @property
    def capacity(self) -> float:
        """The memory per device, ``inf`` when unlimited."""
        return math.inf if self.memory is None else float(self.memory)


@dataclass(frozen=True)
class Cluster:
    """The devices to place on: device kinds, each with a count. Devices are numbered kind by kind."""

    kinds: tuple[DeviceKind, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(self.kinds))
        for i, k in enumerate(self.kinds):
            if not isinstance(k, DeviceKind):
                raise TypeError(f"Cluster: kinds[{i}] is a {type(k).__name__}, not a graphs.DeviceKind (e.g. "
                                f"DeviceKind('gpu', 2))")
        names = [k.name for k in self.kinds]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InputError(f"cluster: device kind(s) listed twice: {', '.join(dup)}")
        if self.num_devices == 0:
            raise InputError("cluster: it has no devices (every device kind has count 0)")

    @property
    def num_devices(self) -> int:
        return sum(k.count for k in self.kinds)

    def devices(self) -> list[tuple[int, int]]:
        """``(kind index, ordinal within the kind)`` for every device, in device-number order."""
        return [(t, i) for t, k in enumerate(self.kinds) for i in range(k.count)]

    def device_kind(self) -> np.ndarray:
        """Kind index of every device number."""
        return np.repeat(np.arange(len(self.kinds)), [k.count for k in self.kinds]).astype(np.int64)

    def device_name(self, device: int) -> str:
        """``kind:index`` for every kind: ``a100:0``, ``gpu:1``, ``cpu:3`` (the form ``--devices`` counts
        them in). Result files of older versions wrote ``gpu1`` for kinds not ending in a digit."""
        i = int(device)
        if i < 0:
            i += self.num_devices
        for k in self.kinds:  # O(kinds), not a list of every device: callers name devices one by one
            if 0 <= i < k.count:
                return f"{k.name}:{i}"
            i -= k.count
        raise IndexError(f"device {device} out of range: the cluster has {self.num_devices} devices")

    def with_counts(self, counts: Sequence[int]) -> Cluster:
        """The same kinds with ``counts[t]`` devices of kind ``t`` (an allocation of this cluster)."""
        return Cluster(tuple(replace(k, count=int(c)) for k, c in zip(self.kinds, counts)))

    def kind(self, name: str) -> DeviceKind:
        for k in self.kinds:
            if k.name == name:
                return k
        have = ", ".join(k.name for k in self.kinds)
        raise InputError(f"cluster has no device kind {name!r} (it has {have})")


@dataclass(frozen=True)
class Node:
    """A convenient way to describe one operator when building a graph by hand.

    ``compute`` maps a device-kind name to a time; a kind that is missing (or maps to ``None``) cannot
    run the node. ``comm`` is the cost of moving the node's output to or from a device, either one
    number for every kind or a mapping per kind (missing kinds: 0).
    """

    name: str
    compute: Mapping[str, float | None]
    memory: float = 0.0
    comm: float | Mapping[str, float] = 0.0
    backward: bool = False
    colocation: int | None = None


def _freeze(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class OpGraph:
    """A validated operator DAG with per-device-kind costs. Build it with :meth:`build` or
    :meth:`from_nodes`; node ``i`` is row/column ``i`` of every array."""

    names: tuple[str, ...]
    ids: tuple
    kinds: tuple[str, ...]
    compute: np.ndarray  # [K, n] float64, inf = unsupported on that kind
    comm: np.ndarray  # [K, n] float64 >= 0
    memory: np.ndarray  # [n] float64 >= 0
    backward: np.ndarray  # [n] bool
    colocation: np.ndarray  # [n] int64, -1 = no class
    src: np.ndarray  # [m] int64
    dst: np.ndarray  # [m] int64
    source: str | None = None
    meta: Mapping = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        """The samples one run of the graph processes: its figures (compute, communication, max-load,
        latency) are per run of that batch. The ONNX front end records it (``meta["batch_size"]``), and
        so does a reference-format file's optional ``"batch_size"`` (what ``placement inspect -o`` writes
        at ``--batch-size N``); every other graph is per sample (1)."""
        return int(self.meta.get("batch_size") or 1)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        *,
        names: Sequence[str],
        kinds: Sequence[str],
        compute,
        comm,
        memory,
        edges,
        backward=None,
        colocation=None,
        ids: Sequence | None = None,
        source: str | None = None,
        meta: Mapping | None = None,
    ) -> OpGraph:
        """Validate arrays and return the graph. ``edges`` is a sequence of ``(src, dst)`` node indices
        (or an ``[m, 2]`` array); duplicate edges are dropped."""
        n = len(names)
        ids = tuple(ids) if ids is not None else tuple(names)
        if len(ids) != n:
            raise InputError(f"{len(ids)} ids for {n} nodes", source=source)
        kinds = tuple(kinds)
        if len(set(kinds)) != len(kinds):
            raise InputError(f"device kinds listed twice in {kinds}", source=source)
        K = len(kinds)

        def arr2(a, what):
            a = np.array(a, dtype=np.float64).reshape(K, n) if n else np.zeros((K, 0))
            return a

        compute = arr2(compute, "compute")
        comm = arr2(comm, "comm")
        memory = np.array(memory, dtype=np.float64).reshape(n)
        backward = np.zeros(n, bool) if backward is None else np.array(backward, dtype=bool).reshape(n)
        colocation = (np.full(n, -1, np.int64) if colocation is None
                      else np.array(colocation, dtype=np.int64).reshape(n))

        def bad_node(mask, msg):
            i = int(np.flatnonzero(mask)[0])
            more = int(mask.sum()) - 1
            extra = f" (and {more} more node(s))" if more else ""
            raise InputError(f"node {ids[i]}: {msg}{extra}", source=source)

        for t, kname in enumerate(kinds):
            c = compute[t]
            if np.isnan(c).any():
                bad_node(np.isnan(c), f"compute time on {kname!r} is NaN")
            if (c < 0).any():
                bad_node(c < 0, f"compute time on {kname!r} is negative")
            cm = comm[t]
            if not np.isfinite(cm).all():
                bad_node(~np.isfinite(cm), f"communication cost on {kname!r} is not a finite number")
            if (cm < 0).any():
                bad_node(cm < 0, f"communication cost on {kname!r} is negative")
        if not np.isfinite(memory).all():
            bad_node(~np.isfinite(memory), "memory is not a finite number")
        if (memory < 0).any():
            bad_node(memory < 0, "memory is negative")

        e = np.array(edges, dtype=np.int64).reshape(-1, 2) if len(edges) else np.zeros((0, 2), np.int64)
        if e.size:
            out = (e < 0) | (e >= n)
            if out.any():
                r = int(np.flatnonzero(out.any(axis=1))[0])
                raise InputError(f"edge {tuple(int(x) for x in e[r])} refers to a node index out of range "
                                 f"0..{n - 1}", source=source)
            loops = e[:, 0] == e[:, 1]
            if loops.any():
                i = int(e[np.flatnonzero(loops)[0], 0])
                raise CycleError([ids[i]], source=source)
            e = np.unique(e, axis=0)
            bf = backward[e[:, 0]] & ~backward[e[:, 1]]
            if bf.any():
                r = int(np.flatnonzero(bf)[0])
                raise InputError(f"edge {ids[e[r, 0]]} -> {ids[e[r, 1]]} goes from a backward node to a "
                                 f"forward node; the backward pass must follow the forward pass",
                                 source=source)
        g = cls(
            names=tuple(str(x) for x in names), ids=ids, kinds=kinds,
            compute=_freeze(compute), comm=_freeze(comm), memory=_freeze(memory),
            backward=_freeze(backward), colocation=_freeze(colocation),
            src=_freeze(np.ascontiguousarray(e[:, 0])), dst=_freeze(np.ascontiguousarray(e[:, 1])),
            source=source, meta=dict(meta or {}),
        )
        g.topological_order()  # raises CycleError naming a cycle
        return g

    @classmethod
    def from_nodes(cls, nodes: Sequence[Node], edges: Sequence[tuple[str, str]], *,
                   source: str | None = None) -> OpGraph:
        """Build a graph from :class:`Node` objects and ``(src name, dst name)`` edges."""
        for i, nd in enumerate(nodes):
            if not isinstance(nd, Node):
                raise TypeError(f"OpGraph.from_nodes: nodes[{i}] is a {type(nd).__name__}, not a graphs.Node")
            if not isinstance(nd.compute, Mapping):
                raise TypeError(f"node {nd.name!r}: compute maps device-kind names to times (a dict such as "
                                f"{{'gpu': 2.0}}), got {type(nd.compute).__name__}")
            c = nd.colocation  # an integer class; a whole float (a column of a table with gaps) is one too
            if c is not None and (isinstance(c, bool) or not (isinstance(c, (int, np.integer)) or (
                    isinstance(c, (float, np.floating)) and float(c).is_integer()))):
                raise InputError(f"node {nd.name!r}: colocation must be an integer class or None, got "
                                 f"{nd.colocation!r}", source=source)
        names = [nd.name for nd in nodes]
        index = {}
        for i, nm in enumerate(names):
            if nm in index:
                raise InputError(f"node {nm!r} is defined twice", source=source)
            index[nm] = i
        kinds: list[str] = []
        for nd in nodes:
            for k in nd.compute:
                if k not in kinds:
                    kinds.append(k)
            if isinstance(nd.comm, Mapping):
                for k in nd.comm:
                    if k not in kinds:
                        kinds.append(k)
        n, K = len(nodes), len(kinds)
        compute = np.full((K, n), np.inf)
        comm = np.zeros((K, n))
        for i, nd in enumerate(nodes):
            for t, k in enumerate(kinds):
                v = nd.compute.get(k)
                if v is not None:
                    compute[t, i] = _number(v, f"node {nd.name!r}: compute on {k!r}", source)
                if isinstance(nd.comm, Mapping):
                    comm[t, i] = _number(nd.comm.get(k, 0.0), f"node {nd.name!r}: comm on {k!r}", source)
                else:
                    comm[t, i] = _number(nd.comm, f"node {nd.name!r}: comm", source)
        e = []
        for edge in edges:
            try:  # a tuple, a list, a numpy row
                if isinstance(edge, (str, bytes)):
                    raise ValueError
                a, b = edge
            except (TypeError, ValueError):
                raise InputError(f"edge {edge!r}: expected a (source name, destination name) pair",
                                 source=source) from None
            for x in (a, b):
                if x not in index:
                    raise InputError(f"edge {a!r} -> {b!r} refers to unknown node {x!r}", source=source)
            e.append((index[a], index[b]))
        return cls.build(
            names=names, kinds=kinds, compute=compute, comm=comm,
            memory=[_number(nd.memory, f"node {nd.name!r}: memory", source) for nd in nodes],
            backward=[bool(nd.backward) for nd in nodes],
            colocation=[-1 if nd.colocation is None else int(nd.colocation) for nd in nodes],
            edges=e, source=source,
        )

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return int(self.src.size)

    @property
    def is_training(self) -> bool:
        return bool(self.backward.any())

    def kind_index(self, name: str) -> int:
        try:
            return self.kinds.index(name)
        except ValueError:
            if not self.num_nodes:  # no node, so no costs at all: the graph is what is missing
                raise InputError("the graph is empty: it has no nodes to place", source=self.source) from None
            raise InputError(f"the graph has no costs for device kind {name!r} "
                             f"(it has costs for: {', '.join(self.kinds) or 'none'})",
                             source=self.source) from None

    def costs_for(self, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
        """Compute and comm rows ``[len(cluster.kinds), n]`` in the cluster's kind order; the comm row of a
        kind that pays no communication is zero."""
        rows = [self.kind_index(k.name) for k in cluster.kinds]
        compute = self.compute[rows]
        comm = self.comm[rows].copy()
        for t, k in enumerate(cluster.kinds):
            if not k.pays_communication:
                comm[t] = 0.0
        return compute, comm

    def successors_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ptr, idx)``: the successors of node ``u`` are ``idx[ptr[u]:ptr[u+1]]``."""
        order = np.argsort(self.src, kind="stable")
        ptr = np.zeros(self.num_nodes + 1, np.int64)
        np.add.at(ptr, self.src + 1, 1)
        return np.cumsum(ptr), self.dst[order]

    def topological_order(self) -> np.ndarray:
        """Node indices in a topological order (Kahn, smallest index first among ready nodes is *not*
        promised). Raises :class:`CycleError` naming one cycle. Computed once per graph (the graph is
        immutable; the latency evaluator asks for it on every call) and returned read-only."""
        order = self.__dict__.get("_topological_order")  # not a field: frozen, and no part of equality
        if order is not None:
            return order
        from .order import find_cycle, topological_order

        order = topological_order(self.num_nodes, self.src, self.dst, partial=True)
        if order.size < self.num_nodes:
            done = set(order.tolist())
            raise CycleError([self.ids[i] for i in find_cycle(self.num_nodes, self.src, self.dst, done)],
                             source=self.source)
        self.__dict__["_topological_order"] = _freeze(order)
        return order


def _number(v, what: str, source: str | None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InputError(f"{what} must be a number, got {v!r}", source=source)
    return float(v)
