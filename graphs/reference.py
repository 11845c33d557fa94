"""The reference workload format (NeurIPS 2020 device-placement paper; see ``shared/workloads/FORMAT.md``).

A workload file maps onto our model with two device kinds: ``accelerator`` (``maxFPGAs`` devices of
``maxSizePerFPGA`` bytes, paying communication) and ``cpu`` (``maxCPUs`` cores, unlimited memory, no
communication). Every problem is reported with the file name and the node or edge at fault.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .model import Cluster, DeviceKind, OpGraph

__all__ = ["Workload", "ACCELERATOR", "CPU", "read_workload", "parse_workload", "read_split",
           "parse_split", "reference_cluster"]

ACCELERATOR = "accelerator"
CPU = "cpu"


@dataclass(frozen=True)
class Workload:
    """A placement problem: the operator graph and the cluster to place it on."""

    graph: OpGraph
    cluster: Cluster


def reference_cluster(accelerators: int, cpus: int, accelerator_memory: float | None) -> Cluster:
    """The two-kind cluster of the reference format."""
    return Cluster((DeviceKind(ACCELERATOR, accelerators, accelerator_memory, True),
                    DeviceKind(CPU, cpus, None, False)))


def _load_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError("no such file", source=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a JSON file", source=path) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not a UTF-8 text file ({e.reason})", source=path) from None
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}",
                         source=path) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=path) from None


def read_workload(path: str | os.PathLike) -> Workload:
    """Read and validate a reference-format workload file."""
    path = os.fspath(path)
    return parse_workload(_load_json(path), source=path)


def _num(value, what: str, source: str | None, *, integer: bool = False, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what} must be a number, got {json.dumps(value)[:40]}", source=source)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise InputError(f"{what} must be a finite number, got {value}", source=source)
    if value < 0:
        raise InputError(f"{what} must not be negative, got {value}", source=source)
    if integer and value != int(value):
        raise InputError(f"{what} must be an integer, got {value}", source=source)
    return value


def _flag(value, what: str, source: str | None) -> bool:
    if value in (True, False, 0, 1) and not isinstance(value, float):
        return bool(value)
    raise InputError(f"{what} must be true/false or 0/1, got {json.dumps(value)[:40]}", source=source)


def _node_id(value, what: str, source: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be an integer id, got {json.dumps(value)[:40]}", source=source)
    return value


def parse_workload(data, *, source: str | None = None) -> Workload:
    """Validate an already-decoded workload document (see :func:`read_workload`)."""
    if not isinstance(data, dict):
        raise InputError("the top level must be a JSON object with 'nodes' and 'edges'", source=source)
    for key in ("maxSizePerFPGA", "maxFPGAs", "maxCPUs", "nodes", "edges"):
        if key not in data:
            raise InputError(f"missing top-level field {key!r}", source=source)
    cap = _num(data["maxSizePerFPGA"], "maxSizePerFPGA", source, allow_inf=True)
    k = int(_num(data["maxFPGAs"], "maxFPGAs", source, integer=True))
    cpus = int(_num(data["maxCPUs"], "maxCPUs", source, integer=True))
    nodes, edges = data["nodes"], data["edges"]
    if not isinstance(nodes, list) or not isinstance(edges, list):
        raise InputError("'nodes' and 'edges' must be lists", source=source)
    if not nodes:
        raise InputError("the graph has no nodes", source=source)
    if k + cpus == 0:
        raise InputError("maxFPGAs and maxCPUs are both 0: there is no device to place on", source=source)

    n = len(nodes)
    ids: list[int] = []
    index: dict[int, int] = {}
    names: list[str] = []
    fpga = np.empty(n)
    cpu = np.empty(n)
    mem = np.zeros(n)
    bwd = np.zeros(n, bool)
    color = np.full(n, -1, np.int64)
    for i, nd in enumerate(nodes):
        if not isinstance(nd, dict):
            raise InputError(f"nodes[{i}] must be an object", source=source)
        if "id" not in nd:
            raise InputError(f"nodes[{i}] has no 'id'", source=source)
        nid = _node_id(nd["id"], f"nodes[{i}].id", source)
        if nid in index:
            raise InputError(f"node id {nid} is used twice (nodes[{index[nid]}] and nodes[{i}])",
                             source=source)
        index[nid] = i
        ids.append(nid)
        where = f"node {nid}"
        for key in ("cpuLatency", "fpgaLatency", "supportedOnFpga"):
            if key not in nd:
                raise InputError(f"{where}: missing field {key!r}", source=source)
        cpu[i] = _num(nd["cpuLatency"], f"{where}: cpuLatency", source)
        f = _num(nd["fpgaLatency"], f"{where}: fpgaLatency", source)
        fpga[i] = f if _flag(nd["supportedOnFpga"], f"{where}: supportedOnFpga", source) else math.inf
        mem[i] = _num(nd.get("size", 0), f"{where}: size", source)
        bwd[i] = _flag(nd.get("isBackwardNode", False), f"{where}: isBackwardNode", source)
        if nd.get("colorClass") is not None:
            color[i] = _node_id(nd["colorClass"], f"{where}: colorClass", source)
        name = nd.get("name")
        names.append(str(name) if name is not None else str(nid))

    out_cost: dict[int, float] = {}
    pairs = []
    for j, e in enumerate(edges):
        if not isinstance(e, dict):
            raise InputError(f"edges[{j}] must be an object", source=source)
        for key in ("sourceId", "destId", "cost"):
            if key not in e:
                raise InputError(f"edges[{j}]: missing field {key!r}", source=source)
        s = _node_id(e["sourceId"], f"edges[{j}].sourceId", source)
        d = _node_id(e["destId"], f"edges[{j}].destId", source)
        for x in (s, d):
            if x not in index:
                raise InputError(f"edge {s} -> {d}: node {x} does not exist (dangling edge)", source=source)
        c = _num(e["cost"], f"edge {s} -> {d}: cost", source)
        si = index[s]
        if si in out_cost and out_cost[si] != c:
            raise InputError(f"node {s}: its out-edges carry different costs ({out_cost[si]} and {c}); a "
                             f"node's output is one tensor, so all its out-edges must cost the same",
                             source=source)
        out_cost[si] = c
        pairs.append((si, index[d]))
    comm = np.zeros(n)
    for i, c in out_cost.items():
        comm[i] = c

    graph = OpGraph.build(
        names=names, ids=ids, kinds=(ACCELERATOR, CPU),
        compute=np.vstack([fpga, cpu]), comm=np.vstack([comm, comm]), memory=mem,
        edges=pairs, backward=bwd, colocation=color, source=source,
        meta={"format": "reference"},
    )
    return Workload(graph, reference_cluster(k, cpus, cap))


def read_split(path: str | os.PathLike, graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """Read a split in the reference result format (``{"fpgas": [{"nodes": [...]}, ...], "cpus": [...]}``)
    and return the assignment (device number per node index). Backward nodes that the split does not
    list go where their colocated forward node is."""
    path = os.fspath(path)
    return parse_split(_load_json(path), graph, cluster, source=path)


def parse_split(data, graph: OpGraph, cluster: Cluster, *, source: str | None = None) -> np.ndarray:
    if not isinstance(data, dict) or ("fpgas" not in data and "cpus" not in data):
        raise InputError("a split must be an object with 'fpgas' and/or 'cpus' lists", source=source)
    index = {nid: i for i, nid in enumerate(graph.ids)}
    assignment = np.full(graph.num_nodes, -1, np.int64)
    first = {}
    dev = 0
    for t, kind in enumerate(cluster.kinds):
        key = {ACCELERATOR: "fpgas", CPU: "cpus"}.get(kind.name)
        first[t] = dev
        groups = data.get(key, []) if key else []
        if not isinstance(groups, list):
            raise InputError(f"{key!r} must be a list", source=source)
        used = [g for g in groups if isinstance(g, dict) and g.get("nodes")]
        if len(used) > kind.count:
            raise InputError(f"the split uses {len(used)} {kind.name} devices but the workload has only "
                             f"{kind.count}", source=source)
        slot = 0
        for gi, g in enumerate(groups):
            if not isinstance(g, dict) or not isinstance(g.get("nodes", []), list):
                raise InputError(f"{key}[{gi}] must be an object with a 'nodes' list", source=source)
            if not g.get("nodes"):
                continue
            for nid in g["nodes"]:
                if nid not in index or isinstance(nid, bool):
                    raise InputError(f"{key}[{gi}] lists node {nid!r}, which the workload does not have",
                                     source=source)
                i = index[nid]
                if assignment[i] >= 0:
                    raise InputError(f"node {nid} is placed twice", source=source)
                assignment[i] = dev + slot
            slot += 1
        dev += kind.count
    missing = np.flatnonzero(assignment < 0)
    if missing.size:
        # A backward node follows its colocated forward node.
        cls_dev: dict[int, int] = {}
        for i in range(graph.num_nodes):
            c = int(graph.colocation[i])
            if c >= 0 and assignment[i] >= 0:
                cls_dev.setdefault(c, int(assignment[i]))
        for i in missing:
            c = int(graph.colocation[i])
            if graph.backward[i] and c in cls_dev:
                assignment[i] = cls_dev[c]
        missing = np.flatnonzero(assignment < 0)
        if missing.size:
            shown = ", ".join(str(graph.ids[i]) for i in missing[:10])
            raise InputError(f"the split does not place {missing.size} node(s): {shown}", source=source)
    return assignment
