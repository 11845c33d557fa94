"""Reading Piper's workload format (``shared/workloads/piper/FORMAT.md``) into a
:class:`~graphs.parallel.ParallelProblem`.

The file's ``maxDevices`` (k), ``maxMemoryPerDevice``, ``bandwidth`` and ``mbsInBatch`` (N) apply unless
overridden. All devices are one kind (``accelerator``). Every edge is a tensor of
``2 * communicationCost / bandwidth`` seconds per side (activation forward, gradient backward); a variant's
``syncTimeFw[u]`` / ``syncTimeBw[w]`` bytes become ``2 * bytes / bandwidth`` seconds on edge ``(u, v)`` /
``(v, w)``. ``parameterSize`` is the variant's weight bytes per device: it drives the resync and is the
``W`` copied per extra weight version (capped at ``memoryUsageB``, which holds one copy).
"""

from __future__ import annotations

import math
import os

from .errors import InputError
from .jsonio import read_json
from .model import DeviceKind
from .parallel import ParallelGraph, ParallelProblem, Variant

__all__ = ["is_piper", "read_piper", "parse_piper", "KIND_NAME"]

KIND_NAME = "accelerator"
_TOP = ("maxDevices", "maxMemoryPerDevice", "bandwidth", "mbsInBatch", "nodes", "edges")


def is_piper(data) -> bool:
    """Does decoded JSON look like a Piper workload (nodes with ``TMPCs``)?"""
    return (isinstance(data, dict) and isinstance(data.get("nodes"), list) and bool(data["nodes"])
            and isinstance(data["nodes"][0], dict) and "TMPCs" in data["nodes"][0])


def read_piper(path: str | os.PathLike, **overrides) -> ParallelProblem:
    """Read a Piper file; see :func:`parse_piper` for ``overrides``."""
    path = os.fspath(path)
    return parse_piper(read_json(path), source=path, **overrides)


def _num(x, what: str, source, *, positive: bool = False, integer: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise InputError(f"{what} must be a finite number, got {x!r}", source=source)
    if x < 0 or (positive and x == 0):
        raise InputError(f"{what} must be {'positive' if positive else '>= 0'}, got {x!r}", source=source)
    if integer and x != int(x):
        raise InputError(f"{what} must be an integer, got {x!r}", source=source)
    return x


def parse_piper(data, *, source: str | None = None, devices: int | None = None, memory: float | None = None,
                microbatches: int | None = None, bandwidth: float | None = None, schedule: str = "1f1b",
                max_replicas: int | None = None, server_size: int | None = None,
                intra_bandwidth: float | None = None,
                inter_bandwidth: float | None = None) -> ParallelProblem:
    """The problem in decoded Piper JSON ``data``. ``devices``, ``memory``, ``microbatches`` and
    ``bandwidth`` override the file's ``maxDevices``, ``maxMemoryPerDevice``, ``mbsInBatch`` and
    ``bandwidth``; the rest set the schedule and topology. :class:`InputError` names the bad field."""
    if not isinstance(data, dict):
        raise InputError("a Piper workload must be a JSON object", source=source)
    for key in _TOP:
        if key not in data:
            raise InputError(f"missing top-level field {key!r}", source=source)
    k = int(_num(data["maxDevices"] if devices is None else devices, "maxDevices", source, positive=True,
                 integer=True))
    mem = _num(data["maxMemoryPerDevice"] if memory is None else memory, "maxMemoryPerDevice", source)
    bw = _num(data["bandwidth"] if bandwidth is None else bandwidth, "bandwidth", source, positive=True)
    N = int(_num(data["mbsInBatch"] if microbatches is None else microbatches, "mbsInBatch", source,
                 positive=True, integer=True))
    nodes, edges = data["nodes"], data["edges"]
    if not isinstance(nodes, list) or not nodes:
        raise InputError("'nodes' must be a non-empty list", source=source)
    if not isinstance(edges, list):
        raise InputError("'edges' must be a list", source=source)

    index: dict[int, int] = {}
    ids, names = [], []
    for i, nd in enumerate(nodes):
        if not isinstance(nd, dict) or "id" not in nd:
            raise InputError(f"nodes[{i}] has no 'id'", source=source)
        nid = nd["id"]
        if isinstance(nid, bool) or not isinstance(nid, int):
            raise InputError(f"nodes[{i}]: 'id' must be an integer, got {nid!r}", source=source)
        if nid in index:
            raise InputError(f"node {nid} is defined twice", source=source)
        index[nid] = i
        ids.append(nid)
        names.append(str(nd.get("name", nid)))

    tensors = []
    edge_index: dict[tuple[int, int], int] = {}
    for j, ed in enumerate(edges):
        where = f"edges[{j}]"
        if not isinstance(ed, dict):
            raise InputError(f"{where} must be an object", source=source)
        for f in ("sourceId", "destId", "communicationCost"):
            if f not in ed:
                raise InputError(f"{where}: missing field {f!r}", source=source)
        a, b = ed["sourceId"], ed["destId"]
        for x in (a, b):
            if x not in index:
                raise InputError(f"{where}: unknown node id {x!r}", source=source)
        if (a, b) in edge_index:
            raise InputError(f"{where}: edge {a} -> {b} is listed twice", source=source)
        if a == b:
            raise InputError(f"{where}: edge {a} -> {b} is a self-loop", source=source)
        cost = _num(ed["communicationCost"], f"{where}: communicationCost", source)
        edge_index[(a, b)] = len(tensors)
        tensors.append((index[a], [index[b]], [2.0 * cost / bw]))

    variants = []
    for i, nd in enumerate(nodes):
        nid = ids[i]
        tm = nd.get("TMPCs")
        if not isinstance(tm, dict) or not tm:
            raise InputError(f"node {nid}: missing or empty 'TMPCs' (no variant to run it)", source=source)
        for tkey, lst in tm.items():
            try:
                t = int(tkey)
            except (TypeError, ValueError):
                t = 0
            if t < 1 or str(t) != str(tkey):
                raise InputError(f"node {nid}: TMPCs key {tkey!r} is not a positive tensor-parallel degree",
                                 source=source)
            if not isinstance(lst, list) or not lst:
                raise InputError(f"node {nid}: no variant for tensor-parallel degree {t}", source=source)
            for vj, v in enumerate(lst):
                variants.append(_variant(v, i, nid, t, vj, index, edge_index, bw, source))
    g = ParallelGraph.build(ids=ids, names=names, num_kinds=1, edges=[], tensors=tensors, variants=variants,
                            source=source)
    kind = DeviceKind(KIND_NAME, k, mem, bandwidth=bw, server_size=server_size,
                      intra_bandwidth=intra_bandwidth, inter_bandwidth=inter_bandwidth)
    return ParallelProblem(g, (kind,), N, schedule, max_replicas)


def _variant(v, i: int, nid: int, t: int, vj: int, index, edge_index, bw: float, source) -> Variant:
    where = f"node {nid}, TMPCs[{t}][{vj}]"
    if not isinstance(v, dict):
        raise InputError(f"{where} must be an object", source=source)
    for f in ("id", "timePerSample", "parameterSize", "memoryUsageA", "memoryUsageB"):
        if f not in v:
            raise InputError(f"{where}: missing field {f!r}", source=source)
    name = str(v["id"])
    where = f"node {nid}, variant {name!r} (t={t})"
    time = _num(v["timePerSample"], f"{where}: timePerSample", source)
    params = _num(v["parameterSize"], f"{where}: parameterSize", source)
    a = _num(v["memoryUsageA"], f"{where}: memoryUsageA", source)
    b = _num(v["memoryUsageB"], f"{where}: memoryUsageB", source)
    sync = {}
    for field, inward in (("syncTimeFw", True), ("syncTimeBw", False)):
        raw = v.get(field, {})
        if not isinstance(raw, dict):
            raise InputError(f"{where}: {field} must be an object", source=source)
        out = {}
        for other, x in raw.items():
            try:
                o = int(other)
            except (TypeError, ValueError):
                raise InputError(f"{where}: {field} key {other!r} is not a node id", source=source) from None
            x = _num(x, f"{where}: {field}[{other}]", source)
            e = edge_index.get((o, nid) if inward else (nid, o))
            if e is None:
                if x == 0:
                    continue  # Piper's files list zero syncs for nodes that are not neighbours
                rel = "incoming edge from" if inward else "outgoing edge to"
                raise InputError(f"{where}: {field} names node {other}, but there is no {rel} it",
                                 source=source)
            out[e] = 2.0 * x / bw
        sync[field] = out
    return Variant(i, 0, t, name, time, params, a, b, min(params, b), sync["syncTimeFw"], sync["syncTimeBw"])
